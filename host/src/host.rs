//! [`ToolHost`]: the embeddable host. It owns the wasmtime engine, the process backend and the
//! set of loaded plugins, and routes each tool call to the plugin that provides the tool.
//!
//! The plugin set is an immutable snapshot behind a lock: a call takes the current snapshot and
//! finishes on the plugin version it started with, while a reload swaps in a new snapshot.

use crate::bindings::{ShellTools, ToolDefinition};
use crate::bundled::{self, BundledPlugin};
use crate::manifest::{Manifest, ManifestError};
use crate::plugin::{CallError, LoadError, Loader, Plugin};
use crate::process::{ProcessBackend, ProcessManager, ProcessManagerConfig};
use crate::sandbox::{CallOptions, CallState};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Config, Engine};

/// How often the engine's epoch advances: the granularity of CPU-limit checks and of yielding
/// a busy guest back to the async executor.
const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Errors building a [`ToolHost`] or loading plugins.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The engine or linker could not be set up.
    #[error("cannot set up the WebAssembly engine: {0}")]
    Engine(String),
    /// A plugin directory is unusable.
    #[error("plugin directory {path}: {message}")]
    PluginDir { path: PathBuf, message: String },
    /// A component failed to load.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// A manifest is invalid.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The plugin directories cannot be watched.
    #[error("cannot watch plugin directories: {0}")]
    Watch(String),
    /// An unknown bundled policy was asked for.
    #[error("unknown bundled policy `{0}`; bundled: {1}")]
    UnknownPolicy(String, String),
}

/// A tool as offered to agents: its definition and the plugin providing it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ToolInfo {
    /// Tool name.
    pub name: String,
    /// Description for the model.
    pub description: String,
    /// JSON Schema of the arguments.
    pub input_schema: serde_json::Value,
    /// JSON Schema of successful results, when the tool declares one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<serde_json::Value>,
    /// The providing plugin.
    #[serde(skip)]
    pub plugin: String,
}

/// Configures a [`ToolHost`].
pub struct ToolHostBuilder {
    policy: Option<String>,
    plugin_dirs: Vec<PathBuf>,
    backend: Option<Arc<dyn ProcessBackend>>,
    process_config: ProcessManagerConfig,
    cache_dir: Option<PathBuf>,
    watch: bool,
}

impl Default for ToolHostBuilder {
    fn default() -> Self {
        ToolHostBuilder {
            policy: Some("default".to_string()),
            plugin_dirs: Vec::new(),
            backend: None,
            process_config: ProcessManagerConfig::default(),
            cache_dir: default_cache_dir(),
            watch: false,
        }
    }
}

impl ToolHostBuilder {
    /// Which bundled policy to load (`default`, `guarded`), or `None` for none.
    pub fn bundled_policy(mut self, policy: Option<&str>) -> Self {
        self.policy = policy.map(str::to_string);
        self
    }

    /// Also load every `*.wasm` component in `dir` (with its `NAME.toml` manifest). A plugin's
    /// tool replaces a bundled tool of the same name.
    pub fn plugin_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.plugin_dirs.push(dir.into());
        self
    }

    /// Use this process backend instead of a real [`ProcessManager`] (tests use
    /// [`crate::testing::FakeProcesses`]).
    pub fn process_backend(mut self, backend: Arc<dyn ProcessBackend>) -> Self {
        self.backend = Some(backend);
        self
    }

    /// Configure the real process manager (ignored with [`Self::process_backend`]).
    pub fn process_config(mut self, config: ProcessManagerConfig) -> Self {
        self.process_config = config;
        self
    }

    /// Where compiled components are cached; `None` disables the cache.
    ///
    /// Compiled code from this directory is loaded and run natively, so it must be as
    /// trusted as the `toolhost` binary: whoever can write it can run code inside the host.
    /// When the agent's commands run as the same user as the host, disable the cache (or
    /// point it at a directory that user cannot write) if a policy must hold against them.
    pub fn cache_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.cache_dir = dir;
        self
    }

    /// Watch the plugin directories and reload when a component or manifest is added,
    /// replaced or removed (see [`ToolHost::changes`]).
    pub fn watch_plugins(mut self, watch: bool) -> Self {
        self.watch = watch;
        self
    }

    /// Build the host and load the plugins. Must run inside a tokio runtime.
    pub async fn build(self) -> Result<ToolHost, HostError> {
        let engine_error = |e: wasmtime::Error| HostError::Engine(format!("{e:#}"));
        let mut config = Config::new();
        config.epoch_interruption(true);
        config.wasm_component_model(true);
        let engine = Engine::new(&config).map_err(engine_error)?;
        let mut linker: Linker<CallState> = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(engine_error)?;
        ShellTools::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s).map_err(engine_error)?;
        start_epoch_ticker(&engine)
            .map_err(|e| HostError::Engine(format!("cannot start the epoch ticker thread: {e}")))?;

        let (backend, manager): (Arc<dyn ProcessBackend>, _) = match self.backend {
            Some(b) => (b, None),
            None => {
                let m = ProcessManager::new(self.process_config);
                (m.clone() as Arc<dyn ProcessBackend>, Some(m))
            }
        };
        let loader = Loader {
            engine,
            linker,
            backend,
            cache_dir: self.cache_dir,
        };
        let inner = Arc::new(HostInner {
            loader,
            manager,
            policy: self.policy,
            plugin_dirs: self.plugin_dirs,
            registry: RwLock::new(Arc::new(Registry::default())),
            reloading: tokio::sync::Mutex::new(()),
            changes: tokio::sync::watch::channel(0).0,
        });
        inner.reload(true).await?;
        let watcher = if self.watch {
            Some(crate::watch::watch_plugin_dirs(&inner.plugin_dirs, {
                let weak = Arc::downgrade(&inner);
                move || {
                    let weak = weak.clone();
                    async move {
                        if let Some(inner) = weak.upgrade()
                            && let Err(e) = inner.reload(false).await
                        {
                            tracing::error!("plugin reload failed: {e}");
                        }
                    }
                }
            })?)
        } else {
            None
        };
        Ok(ToolHost {
            inner,
            _watcher: watcher,
        })
    }
}

/// The loaded plugins, immutable once built.
#[derive(Default)]
struct Registry {
    plugins: Vec<Arc<Plugin>>,
    by_tool: BTreeMap<String, Arc<Plugin>>,
    /// Plugins loaded from files, with the fingerprint of the component and manifest they
    /// were loaded from, so a reload recompiles only what changed.
    files: BTreeMap<PathBuf, (String, Arc<Plugin>)>,
}

impl HostInner {
    /// Load the bundled policy and every plugin directory and swap the result in. Unchanged
    /// files keep their loaded plugin. `strict` (at start-up): any failure is an error. Not
    /// strict (hot reload): a plugin that fails to load is logged and its previous version,
    /// if any, keeps serving.
    async fn reload(&self, strict: bool) -> Result<(), HostError> {
        let _guard = self.reloading.lock().await;
        let previous = self.snapshot();
        let mut plugins = Vec::new();
        if let Some(policy) = &self.policy {
            let bundled_plugin = match previous.plugins.iter().find(|p| p.origin() == "bundled") {
                Some(p) => p.clone(),
                None => {
                    let bundled = bundled::find(policy).ok_or_else(|| {
                        HostError::UnknownPolicy(policy.clone(), bundled::names().join(", "))
                    })?;
                    Arc::new(load_bundled(&self.loader, bundled).await?)
                }
            };
            plugins.push(bundled_plugin);
        }
        let mut files = BTreeMap::new();
        for dir in &self.plugin_dirs {
            let paths = match plugin_files(dir) {
                Ok(paths) => paths,
                Err(e) if !strict => {
                    // Fail closed: an unreadable directory keeps its plugins, so a stricter
                    // policy is not silently replaced by the bundled one.
                    tracing::error!("{e}; keeping the plugins loaded from it");
                    previous
                        .files
                        .keys()
                        .filter(|p| p.starts_with(dir))
                        .cloned()
                        .collect()
                }
                Err(e) => return Err(e),
            };
            for path in paths {
                let loaded = match read_plugin_file(&path) {
                    Ok((bytes, manifest_text, fingerprint)) => match previous.files.get(&path) {
                        Some((old, plugin)) if *old == fingerprint => {
                            Ok((fingerprint, plugin.clone()))
                        }
                        _ => load_file(&self.loader, &path, &bytes, manifest_text.as_deref())
                            .await
                            .map(|p| (fingerprint, Arc::new(p))),
                    },
                    Err(e) => Err(e),
                };
                match loaded {
                    Ok((fingerprint, plugin)) => {
                        plugins.push(plugin.clone());
                        files.insert(path, (fingerprint, plugin));
                    }
                    Err(e) if strict => return Err(e),
                    Err(e) => {
                        tracing::error!("{e}");
                        if let Some((fingerprint, plugin)) = previous.files.get(&path) {
                            tracing::warn!(plugin = plugin.name(), "keeping the previous version");
                            plugins.push(plugin.clone());
                            files.insert(path, (fingerprint.clone(), plugin.clone()));
                        }
                    }
                }
            }
        }
        let mut by_tool: BTreeMap<String, Arc<Plugin>> = BTreeMap::new();
        for plugin in &plugins {
            for tool in plugin.tools() {
                if let Some(replaced) = by_tool.insert(tool.name.clone(), plugin.clone()) {
                    tracing::info!(
                        tool = %tool.name,
                        replaced = replaced.name(),
                        by = plugin.name(),
                        "tool replaced by a later plugin"
                    );
                }
            }
        }
        let unchanged = plugins.len() == previous.plugins.len()
            && plugins
                .iter()
                .zip(&previous.plugins)
                .all(|(a, b)| Arc::ptr_eq(a, b));
        if unchanged {
            return Ok(());
        }
        for plugin in &plugins {
            tracing::info!(
                plugin = plugin.name(),
                origin = plugin.origin(),
                tools = plugin.tools().len(),
                "plugin loaded"
            );
        }
        let registry = Arc::new(Registry {
            plugins,
            by_tool,
            files,
        });
        *self.registry.write().unwrap_or_else(|e| e.into_inner()) = registry;
        self.changes.send_modify(|generation| *generation += 1);
        Ok(())
    }

    fn snapshot(&self) -> Arc<Registry> {
        self.registry
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Load a bundled component.
async fn load_bundled(loader: &Loader, bundled: &BundledPlugin) -> Result<Plugin, HostError> {
    Ok(Plugin::load(
        loader,
        bundled.name,
        "bundled".to_string(),
        bundled.bytes,
        &Manifest::bundled(),
    )
    .await?)
}

/// A plugin file's bytes, its manifest text (if any) and a fingerprint of both.
fn read_plugin_file(path: &Path) -> Result<(Vec<u8>, Option<String>, String), HostError> {
    let bytes = std::fs::read(path).map_err(|e| HostError::PluginDir {
        path: path.to_path_buf(),
        message: format!("cannot read: {e}"),
    })?;
    let manifest_path = path.with_extension("toml");
    let manifest = match std::fs::read_to_string(&manifest_path) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(source) => {
            return Err(ManifestError::Read {
                path: manifest_path,
                source,
            }
            .into());
        }
    };
    let mut sha = Sha256::new();
    sha.update(&bytes);
    sha.update([u8::from(manifest.is_some())]);
    sha.update(manifest.as_deref().unwrap_or("").as_bytes());
    let fingerprint = crate::plugin::hex(&sha.finalize());
    Ok((bytes, manifest, fingerprint))
}

/// Load plugin `path` (named after its file stem) from its bytes and manifest text.
async fn load_file(
    loader: &Loader,
    path: &Path,
    bytes: &[u8],
    manifest_text: Option<&str>,
) -> Result<Plugin, HostError> {
    let name = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("plugin")
        .to_string();
    let manifest = match manifest_text {
        Some(text) => Manifest::parse(text, &path.with_extension("toml"))?,
        None => Manifest::default(),
    };
    Ok(Plugin::load(loader, &name, path.display().to_string(), bytes, &manifest).await?)
}

/// The embeddable host: load plugins, list tools, call them within a scope, shut down.
///
/// ```no_run
/// # async fn demo() -> anyhow::Result<()> {
/// let host = toolhost::ToolHost::builder().build().await?;
/// let result = host.call("my-session", "execute", r#"{"command":"echo hi"}"#).await?;
/// println!("{result}");
/// host.shutdown().await;
/// # Ok(()) }
/// ```
pub struct ToolHost {
    inner: Arc<HostInner>,
    /// Keeps the plugin directory watch alive (hot swap).
    _watcher: Option<notify::RecommendedWatcher>,
}

/// The state a reload needs, shared with the watcher task.
struct HostInner {
    loader: Loader,
    manager: Option<Arc<ProcessManager>>,
    policy: Option<String>,
    plugin_dirs: Vec<PathBuf>,
    registry: RwLock<Arc<Registry>>,
    /// Serialises reloads.
    reloading: tokio::sync::Mutex<()>,
    changes: tokio::sync::watch::Sender<u64>,
}

impl ToolHost {
    /// Start configuring a host.
    pub fn builder() -> ToolHostBuilder {
        ToolHostBuilder::default()
    }

    /// The process backend plugins with the process grant use.
    pub fn process_backend(&self) -> &Arc<dyn ProcessBackend> {
        &self.inner.loader.backend
    }

    /// Reload the plugin directories now (as the watcher does): changed plugins are loaded
    /// afresh; one that fails to load is logged and its previous version keeps serving.
    pub async fn reload(&self) -> Result<(), HostError> {
        self.inner.reload(false).await
    }

    /// A receiver that sees a new value every time the set of tools changes: MCP servers turn
    /// it into `notifications/tools/list_changed`.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }

    fn snapshot(&self) -> Arc<Registry> {
        self.inner.snapshot()
    }

    /// The tools currently offered, sorted by name.
    pub fn tools(&self) -> Vec<ToolInfo> {
        let registry = self.snapshot();
        registry
            .by_tool
            .iter()
            .filter_map(|(name, plugin)| {
                plugin
                    .tools()
                    .iter()
                    .find(|t| &t.name == name)
                    .map(|t| tool_info(t, plugin.name()))
            })
            .collect()
    }

    /// The longest a single call of any loaded plugin may take (the largest wall-clock limit).
    pub fn max_call_time(&self) -> Duration {
        self.snapshot()
            .plugins
            .iter()
            .map(|p| p.wall_time())
            .max()
            .unwrap_or_default()
    }

    /// The loaded plugins' names and origins.
    pub fn plugins(&self) -> Vec<(String, String)> {
        self.snapshot()
            .plugins
            .iter()
            .map(|p| (p.name().to_string(), p.origin().to_string()))
            .collect()
    }

    /// Call `tool` with `arguments` (a JSON object as text) on behalf of `scope`. Returns the
    /// tool's result JSON text.
    pub async fn call(
        &self,
        scope: &str,
        tool: &str,
        arguments: &str,
    ) -> Result<String, CallError> {
        self.call_with(scope, tool, arguments, CallOptions::default())
            .await
    }

    /// [`Self::call`] with progress reporting and/or cancellation.
    pub async fn call_with(
        &self,
        scope: &str,
        tool: &str,
        arguments: &str,
        options: CallOptions,
    ) -> Result<String, CallError> {
        let plugin = {
            let registry = self.snapshot();
            match registry.by_tool.get(tool) {
                Some(p) => p.clone(),
                None => {
                    return Err(CallError::UnknownTool {
                        name: tool.to_string(),
                        available: registry
                            .by_tool
                            .keys()
                            .cloned()
                            .collect::<Vec<_>>()
                            .join(", "),
                    });
                }
            }
        };
        plugin.call(scope, tool, arguments, options).await
    }

    /// Terminate every process of `scope` (its session ended).
    pub async fn end_scope(&self, scope: &str) {
        self.inner.loader.backend.end_scope(scope).await;
    }

    /// Stop: terminate every process the host started (SIGTERM, then SIGKILL after a short
    /// grace). Dropping the host also kills them, without the grace.
    pub async fn shutdown(&self) {
        if let Some(manager) = &self.inner.manager {
            manager.shutdown().await;
        }
    }
}

fn tool_info(tool: &ToolDefinition, plugin: &str) -> ToolInfo {
    ToolInfo {
        name: tool.name.clone(),
        description: tool.description.clone(),
        input_schema: serde_json::from_str(&tool.input_schema)
            .unwrap_or_else(|_| serde_json::json!({"type": "object"})),
        output_schema: tool
            .output_schema
            .as_deref()
            .and_then(|s| serde_json::from_str(s).ok()),
        plugin: plugin.to_string(),
    }
}

/// The `*.wasm` files of a plugin directory, sorted by name.
pub fn plugin_files(dir: &Path) -> Result<Vec<PathBuf>, HostError> {
    let entries = std::fs::read_dir(dir).map_err(|e| HostError::PluginDir {
        path: dir.to_path_buf(),
        message: e.to_string(),
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "wasm") && p.is_file())
        .collect();
    files.sort();
    Ok(files)
}

/// `$XDG_CACHE_HOME/toolhost/components` or `~/.cache/toolhost/components`.
pub fn default_cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("toolhost").join("components"))
}

/// Advance the engine's epoch every [`EPOCH_TICK`] until the engine is dropped. Without it a
/// runaway guest would never be interrupted, so failing to start it is an error.
fn start_epoch_ticker(engine: &Engine) -> std::io::Result<()> {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("toolhost-epoch".to_string())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        })
        .map(drop)
}
