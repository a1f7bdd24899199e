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
        start_epoch_ticker(&engine).map_err(|e| {
            HostError::Engine(format!("cannot start the epoch ticker thread: {e}"))
        })?;

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
        let host = ToolHost {
            loader,
            manager,
            policy: self.policy,
            plugin_dirs: self.plugin_dirs,
            registry: RwLock::new(Arc::new(Registry::default())),
            changes: tokio::sync::watch::channel(0).0,
        };
        host.reload().await?;
        Ok(host)
    }
}

/// The loaded plugins, immutable once built.
#[derive(Default)]
struct Registry {
    plugins: Vec<Arc<Plugin>>,
    by_tool: BTreeMap<String, Arc<Plugin>>,
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
    loader: Loader,
    manager: Option<Arc<ProcessManager>>,
    policy: Option<String>,
    plugin_dirs: Vec<PathBuf>,
    registry: RwLock<Arc<Registry>>,
    changes: tokio::sync::watch::Sender<u64>,
}

impl ToolHost {
    /// Start configuring a host.
    pub fn builder() -> ToolHostBuilder {
        ToolHostBuilder::default()
    }

    /// The process backend plugins with the process grant use.
    pub fn process_backend(&self) -> &Arc<dyn ProcessBackend> {
        &self.loader.backend
    }

    /// Load the bundled policy and every plugin directory afresh and swap the result in.
    /// On error the previous plugin set keeps serving.
    pub async fn reload(&self) -> Result<(), HostError> {
        let mut plugins = Vec::new();
        if let Some(policy) = &self.policy {
            let bundled = bundled::find(policy).ok_or_else(|| {
                HostError::UnknownPolicy(policy.clone(), bundled::names().join(", "))
            })?;
            plugins.push(Arc::new(self.load_bundled(bundled).await?));
        }
        for dir in &self.plugin_dirs {
            for path in plugin_files(dir)? {
                plugins.push(Arc::new(self.load_file(&path).await?));
            }
        }
        let mut by_tool: BTreeMap<String, Arc<Plugin>> = BTreeMap::new();
        for plugin in &plugins {
            for tool in plugin.tools() {
                if let Some(previous) = by_tool.insert(tool.name.clone(), plugin.clone()) {
                    tracing::info!(
                        tool = %tool.name,
                        replaced = previous.name(),
                        by = plugin.name(),
                        "tool replaced by a later plugin"
                    );
                }
            }
        }
        let registry = Arc::new(Registry { plugins, by_tool });
        *self.registry.write().unwrap_or_else(|e| e.into_inner()) = registry;
        self.changes.send_modify(|generation| *generation += 1);
        Ok(())
    }

    /// A receiver that sees a new value every time the set of tools is (re)loaded: MCP
    /// servers turn it into `notifications/tools/list_changed`.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Load a bundled component.
    pub async fn load_bundled(&self, bundled: &BundledPlugin) -> Result<Plugin, HostError> {
        Ok(Plugin::load(
            &self.loader,
            bundled.name,
            "bundled".to_string(),
            bundled.bytes,
            &Manifest::bundled(),
        )
        .await?)
    }

    /// Load a component file with the manifest beside it (`NAME.toml`).
    pub async fn load_file(&self, path: &Path) -> Result<Plugin, HostError> {
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("plugin")
            .to_string();
        let bytes = std::fs::read(path).map_err(|e| HostError::PluginDir {
            path: path.to_path_buf(),
            message: format!("cannot read: {e}"),
        })?;
        let manifest = Manifest::load(&path.with_extension("toml"))?;
        Ok(Plugin::load(
            &self.loader,
            &name,
            path.display().to_string(),
            &bytes,
            &manifest,
        )
        .await?)
    }

    fn snapshot(&self) -> Arc<Registry> {
        self.registry
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
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
    pub async fn call(&self, scope: &str, tool: &str, arguments: &str) -> Result<String, CallError> {
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
        self.loader.backend.end_scope(scope).await;
    }

    /// Stop: terminate every process the host started (SIGTERM, then SIGKILL after a short
    /// grace). Dropping the host also kills them, without the grace.
    pub async fn shutdown(&self) {
        if let Some(manager) = &self.manager {
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
