//! One loaded guest component: compiled once (through the on-disk cache), checked against its
//! grants and the WIT version, pre-linked once, and instantiated afresh in its own limited
//! [`Store`] for every call.

use crate::bindings::{CallContext, ShellToolsPre, ToolDefinition, WIT_PACKAGE, WIT_VERSION};
use crate::manifest::Manifest;
use crate::process::ProcessBackend;
use crate::sandbox::{CallLimits, CallOptions, CallState, ProcessGrant};
use sha2::{Digest, Sha256};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use wasmtime::component::{Component, Linker};
use wasmtime::{Engine, Store, UpdateDeadline};

/// Why a component could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The bytes are not a valid component for this engine.
    #[error("plugin `{plugin}`: not a loadable WebAssembly component: {reason}")]
    Compile { plugin: String, reason: String },
    /// The component imports something it was not granted.
    #[error(
        "plugin `{plugin}` imports `{import}` but is not granted `{grant}`: add `{grant} = true` under [grants] in {plugin}.toml"
    )]
    MissingGrant {
        plugin: String,
        import: String,
        grant: &'static str,
    },
    /// Built against a WIT package version this host does not implement.
    #[error(
        "plugin `{plugin}` was built against {WIT_PACKAGE}@{found}, but this host implements {WIT_PACKAGE}@{WIT_VERSION}; rebuild it against wit/toolhost.wit"
    )]
    WitVersion { plugin: String, found: String },
    /// Imports this host cannot satisfy, or exports missing.
    #[error("plugin `{plugin}` cannot be linked: {reason}")]
    Link { plugin: String, reason: String },
    /// `tools()` refused to load (typically: its configuration is unusable).
    #[error("plugin `{plugin}` refused to load: {reason}")]
    Refused { plugin: String, reason: String },
    /// `tools()` failed or returned something unusable.
    #[error("plugin `{plugin}` returned unusable tool definitions: {reason}")]
    BadTools { plugin: String, reason: String },
}

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// No loaded plugin provides the tool.
    #[error("unknown tool `{name}`; available tools: {available}")]
    UnknownTool { name: String, available: String },
    /// The tool refused the call (bad arguments, unknown process id...): a message for the
    /// model.
    #[error("{0}")]
    Tool(String),
    /// The guest misbehaved (trap, panic, CPU/memory/wall limit); the host is unaffected.
    #[error("plugin `{plugin}` failed: {reason}")]
    Plugin { plugin: String, reason: String },
}

/// Longest a component may take to list its tools when it is loaded.
const LOAD_WALL_TIME: std::time::Duration = std::time::Duration::from_secs(10);

/// Why a guest instance runs: to list its tools at load (no process access, short wall
/// limit), or for a tool call.
enum Phase {
    Load,
    Call(CallOptions),
}

/// What loading a plugin needs: the engine, the linker with every host import, the process
/// backend to grant, and where compiled components are cached.
#[derive(Clone)]
pub struct Loader {
    /// The engine every component is compiled for.
    pub engine: Engine,
    /// WASI plus the toolhost imports.
    pub linker: Linker<CallState>,
    /// Granted to plugins with the process grant.
    pub backend: Arc<dyn ProcessBackend>,
    /// Compiled-component cache; `None` disables it.
    pub cache_dir: Option<PathBuf>,
}

/// A loaded plugin.
pub struct Plugin {
    name: String,
    origin: String,
    pre: ShellToolsPre<CallState>,
    tools: Vec<ToolDefinition>,
    limits: CallLimits,
    config: String,
    grant: Option<ProcessGrant>,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.name)
            .field("origin", &self.origin)
            .field(
                "tools",
                &self.tools.iter().map(|t| &t.name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Plugin {
    /// Compile (or load from `cache_dir`), check and pre-link `bytes` as plugin `name`, then
    /// ask it for its tools.
    pub async fn load(
        loader: &Loader,
        name: &str,
        origin: String,
        bytes: &[u8],
        manifest: &Manifest,
    ) -> Result<Plugin, LoadError> {
        let engine = &loader.engine;
        let component = compile(engine, name, bytes, loader.cache_dir.as_deref()).await?;
        let mut needs_process = false;
        for (import, _) in component.component_type().imports(engine) {
            let Some(rest) = import.strip_prefix(&format!("{WIT_PACKAGE}/")) else {
                continue;
            };
            let (interface, version) = rest.split_once('@').unwrap_or((rest, ""));
            if version != WIT_VERSION {
                return Err(LoadError::WitVersion {
                    plugin: name.to_string(),
                    found: if version.is_empty() {
                        "(unversioned)".to_string()
                    } else {
                        version.to_string()
                    },
                });
            }
            if interface == "process" {
                needs_process = true;
                if !manifest.grants.process {
                    return Err(LoadError::MissingGrant {
                        plugin: name.to_string(),
                        import: import.to_string(),
                        grant: "process",
                    });
                }
            }
        }
        for (export, _) in component.component_type().exports(engine) {
            if let Some(rest) = export.strip_prefix(&format!("{WIT_PACKAGE}/tool@"))
                && rest != WIT_VERSION
            {
                return Err(LoadError::WitVersion {
                    plugin: name.to_string(),
                    found: rest.to_string(),
                });
            }
        }
        let link_error = |e: wasmtime::Error| LoadError::Link {
            plugin: name.to_string(),
            reason: format!("{e:#}"),
        };
        let pre = loader
            .linker
            .instantiate_pre(&component)
            .map_err(link_error)?;
        let pre = ShellToolsPre::new(pre).map_err(link_error)?;
        let grant = needs_process.then(|| ProcessGrant {
            backend: loader.backend.clone(),
            workdir_root: manifest.grants.workdir_root.clone(),
            max_wait: manifest.grants.max_timeout,
            env_allowlist: manifest.grants.env.clone(),
        });
        let mut plugin = Plugin {
            name: name.to_string(),
            origin,
            pre,
            tools: Vec::new(),
            limits: manifest.limits,
            config: manifest.config_json(),
            grant,
        };
        plugin.tools = plugin.fetch_tools().await?;
        Ok(plugin)
    }

    /// The plugin's name (its file stem, or the bundled name).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where it came from: `bundled` or a file path.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The longest one call of this plugin may take (its wall-clock limit).
    pub fn wall_time(&self) -> std::time::Duration {
        self.limits.wall_time
    }

    /// The tools it provides.
    pub fn tools(&self) -> &[ToolDefinition] {
        &self.tools
    }

    async fn fetch_tools(&self) -> Result<Vec<ToolDefinition>, LoadError> {
        let bad = |reason: String| LoadError::BadTools {
            plugin: self.name.clone(),
            reason,
        };
        let config = self.config.clone();
        let tools = self
            .run("(load)", Phase::Load, |instance, store| {
                Box::pin(async move {
                    instance
                        .toolhost_plugin_tool()
                        .call_tools(store, &config)
                        .await
                })
            })
            .await
            .map_err(|e| bad(e.to_string()))?
            .map_err(|reason| LoadError::Refused {
                plugin: self.name.clone(),
                reason,
            })?;
        let mut seen = std::collections::HashSet::new();
        for tool in &tools {
            let valid_name = !tool.name.is_empty()
                && tool.name.len() <= 64
                && tool
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if !valid_name {
                return Err(bad(format!(
                    "invalid tool name {:?} (use 1-64 letters, digits, `_` or `-`)",
                    tool.name
                )));
            }
            if !seen.insert(tool.name.clone()) {
                return Err(bad(format!("tool `{}` is listed twice", tool.name)));
            }
            let schemas = [
                ("input", Some(&tool.input_schema)),
                ("output", tool.output_schema.as_ref()),
            ];
            for (kind, schema) in schemas {
                let Some(schema) = schema else { continue };
                match serde_json::from_str::<serde_json::Value>(schema) {
                    Ok(serde_json::Value::Object(_)) => {}
                    Ok(_) => {
                        return Err(bad(format!(
                            "the {kind} schema of `{}` is not a JSON object",
                            tool.name
                        )));
                    }
                    Err(e) => {
                        return Err(bad(format!(
                            "the {kind} schema of `{}` is not JSON: {e}",
                            tool.name
                        )));
                    }
                }
            }
        }
        Ok(tools)
    }

    /// Call tool `tool` with `arguments` (JSON text) in `scope`.
    pub async fn call(
        &self,
        scope: &str,
        tool: &str,
        arguments: &str,
        options: CallOptions,
    ) -> Result<String, CallError> {
        let context = CallContext {
            scope: scope.to_string(),
            config: self.config.clone(),
        };
        let tool = tool.to_string();
        let arguments = arguments.to_string();
        self.run(scope, Phase::Call(options), move |instance, store| {
            Box::pin(async move {
                instance
                    .toolhost_plugin_tool()
                    .call_call(store, &tool, &arguments, &context)
                    .await
            })
        })
        .await?
        .map_err(CallError::Tool)
    }

    /// Instantiate in a fresh, limited store and run `f`, turning every way a guest can fail
    /// into a [`CallError::Plugin`] naming this plugin.
    async fn run<R: Send>(
        &self,
        scope: &str,
        phase: Phase,
        f: impl for<'a> FnOnce(
            &'a crate::bindings::ShellTools,
            &'a mut Store<CallState>,
        ) -> std::pin::Pin<
            Box<dyn Future<Output = wasmtime::Result<Result<R, String>>> + Send + 'a>,
        > + Send,
    ) -> Result<Result<R, String>, CallError> {
        let mut limits = self.limits;
        let (grant, options) = match phase {
            // Listing tools needs no processes, and must not stall a (re)load.
            Phase::Load => {
                limits.wall_time = limits.wall_time.min(LOAD_WALL_TIME);
                (None, CallOptions::default())
            }
            Phase::Call(options) => (self.grant.clone(), options),
        };
        let mut store = Store::new(
            self.pre.engine(),
            CallState::new(scope, &limits, grant, options),
        );
        store.limiter(|state| &mut state.limiter);
        store.set_epoch_deadline(1);
        let cpu = limits.cpu_time;
        store.epoch_deadline_callback(move |cx| {
            if cx.data().guest_time() > cpu {
                Err(wasmtime::format_err!(
                    "CPU time limit exceeded (the guest ran for more than {})",
                    humantime::format_duration(cpu)
                ))
            } else {
                Ok(UpdateDeadline::Yield(1))
            }
        });
        let pre = self.pre.clone();
        let outcome = tokio::time::timeout(limits.wall_time, async {
            let instance = pre.instantiate_async(&mut store).await?;
            f(&instance, &mut store).await
        })
        .await;
        let (stdout, stderr) = store.data().guest_output();
        log_guest_output(&self.name, &stdout, &stderr);
        match outcome {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(error)) => Err(CallError::Plugin {
                plugin: self.name.clone(),
                reason: describe_failure(&error, &stderr),
            }),
            Err(_) => Err(CallError::Plugin {
                plugin: self.name.clone(),
                reason: format!(
                    "wall-clock limit exceeded (the call took more than {})",
                    humantime::format_duration(limits.wall_time)
                ),
            }),
        }
    }
}

/// A short, specific description of a guest failure: the panic message if the guest printed
/// one, the trap otherwise.
fn describe_failure(error: &wasmtime::Error, stderr: &str) -> String {
    // The outermost context is a wasm backtrace; the cause below it says what happened.
    let cause = error
        .chain()
        .map(|e| e.to_string())
        .find(|m| !m.starts_with("error while executing at wasm backtrace"))
        .unwrap_or_else(|| error.root_cause().to_string());
    // Our limiter's and epoch callback's errors say what happened; a bare trap gets named.
    let reason = match error.downcast_ref::<wasmtime::Trap>() {
        Some(trap) if !cause.contains("limit exceeded") => format!("trapped: {trap}"),
        _ => cause,
    };
    let panic: Vec<&str> = stderr
        .lines()
        .skip_while(|l| !l.contains("panicked at"))
        .take(2)
        .collect();
    if panic.is_empty() {
        reason
    } else {
        format!("{reason} ({})", panic.join(" ").trim())
    }
}

fn log_guest_output(plugin: &str, stdout: &str, stderr: &str) {
    for line in stdout.lines().filter(|l| !l.trim().is_empty()) {
        tracing::info!(target: "toolhost::guest", plugin, "{line}");
    }
    for line in stderr.lines().filter(|l| !l.trim().is_empty()) {
        tracing::warn!(target: "toolhost::guest", plugin, "{line}");
    }
}

/// Compile `bytes`, reusing a compiled copy from `cache_dir` keyed by the content hash and the
/// engine's compatibility hash. Compilation runs on a blocking thread.
async fn compile(
    engine: &Engine,
    name: &str,
    bytes: &[u8],
    cache_dir: Option<&Path>,
) -> Result<Component, LoadError> {
    let compile_error = |e: String| LoadError::Compile {
        plugin: name.to_string(),
        reason: e,
    };
    let cached = cache_dir.map(|dir| dir.join(format!("{}.cwasm", cache_key(engine, bytes))));
    if let Some(path) = &cached
        && path.is_file()
    {
        // SAFETY: the cache directory is trusted like the binary itself (see
        // `ToolHostBuilder::cache_dir`): its files were written by `Component::serialize` of
        // this engine configuration (the key includes its compatibility hash), and wasmtime
        // checks the header and compatibility before use.
        match unsafe { Component::deserialize_file(engine, path) } {
            Ok(component) => return Ok(component),
            Err(e) => {
                tracing::warn!(plugin = name, path = %path.display(), "ignoring unusable cached component: {e}")
            }
        }
    }
    let engine2 = engine.clone();
    let owned = bytes.to_vec();
    let component = tokio::task::spawn_blocking(move || Component::new(&engine2, &owned))
        .await
        .map_err(|e| compile_error(e.to_string()))?
        .map_err(|e| compile_error(format!("{e:#}")))?;
    if let Some(path) = cached
        && let Err(e) = store_cached(&component, &path)
    {
        tracing::warn!(plugin = name, path = %path.display(), "could not cache compiled component: {e}");
    }
    Ok(component)
}

fn store_cached(component: &Component, path: &Path) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let bytes = component
        .serialize()
        .map_err(|e| std::io::Error::other(format!("{e:#}")))?;
    // A unique temporary name, then an atomic rename: concurrent hosts never see half a file.
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(&mut tmp, &bytes)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Content hash of the component plus the engine's compatibility hash, as hex.
pub fn cache_key(engine: &Engine, bytes: &[u8]) -> String {
    let mut engine_hash = std::collections::hash_map::DefaultHasher::new();
    engine
        .precompile_compatibility_hash()
        .hash(&mut engine_hash);
    let mut sha = Sha256::new();
    sha.update(bytes);
    sha.update(engine_hash.finish().to_le_bytes());
    sha.update(env!("CARGO_PKG_VERSION").as_bytes());
    hex(&sha.finalize()[..20])
}

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
