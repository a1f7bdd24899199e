//! [`ToolHost`]: the embeddable host. It owns the process backend, the guest runtime and the
//! plugin registry, and routes each tool call to the plugin that provides the tool.

use crate::admission::{Admission, Admissions, DEFAULT_MAX_CALLS, DEFAULT_MAX_CALLS_PER_SESSION};
use crate::error::HostError;
use crate::guest::{
    CallError, CallOptions, CallOutput, ComponentCache, Loader, Plugin, ToolDefinition,
};
use crate::plugins::registry::{Registry, Snapshot};
use crate::plugins::watcher;
use crate::process::{ProcessBackend, ProcessManager, ProcessManagerConfig};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

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
    /// A short name for people, when the tool gives one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// How the tool behaves, as its plugin states it (MCP tool annotations).
    #[serde(skip_serializing_if = "ToolHints::is_empty")]
    pub annotations: ToolHints,
    /// The providing plugin.
    #[serde(skip)]
    pub plugin: String,
}

/// Hints about a tool's behaviour for clients deciding what needs approval, as the plugin
/// states them (not checked by the host); `None`: not stated. Serialized with MCP's names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ToolHints {
    /// Changes nothing in its environment.
    #[serde(rename = "readOnlyHint", skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// May destroy or overwrite data (when not read-only).
    #[serde(rename = "destructiveHint", skip_serializing_if = "Option::is_none")]
    pub destructive: Option<bool>,
    /// A repeated call with the same arguments has no further effect.
    #[serde(rename = "idempotentHint", skip_serializing_if = "Option::is_none")]
    pub idempotent: Option<bool>,
    /// May reach an open world (network, other systems).
    #[serde(rename = "openWorldHint", skip_serializing_if = "Option::is_none")]
    pub open_world: Option<bool>,
}

impl ToolHints {
    /// No hint is stated.
    pub fn is_empty(&self) -> bool {
        *self == ToolHints::default()
    }
}

/// Configures a [`ToolHost`].
pub struct ToolHostBuilder {
    policy: Option<String>,
    plugin_dirs: Vec<PathBuf>,
    backend: Option<Arc<dyn ProcessBackend>>,
    process_config: ProcessManagerConfig,
    cache_dir: Option<PathBuf>,
    watch: bool,
    max_calls: usize,
    max_calls_per_session: usize,
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
            max_calls: DEFAULT_MAX_CALLS,
            max_calls_per_session: DEFAULT_MAX_CALLS_PER_SESSION,
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
    /// The host creates it private (0700) and does not use it (logging why, and compiling
    /// afresh) when another user owns it or group or others may write it. When the agent's
    /// commands run as the same user as the host, disable the cache (or point it at a
    /// directory that user cannot write) if a policy must hold against them.
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

    /// The most tool calls in progress at once across all scopes (MCP tasks included); a call
    /// beyond is refused at once with [`CallError::Busy`], before anything of it runs.
    /// Default [`DEFAULT_MAX_CALLS`]; at least 1. It bounds the guest instances alive for
    /// calls, and so their memory: at most this many times the largest memory limit of a
    /// plugin (guests that list a plugin's tools while it loads are not counted).
    pub fn max_calls(mut self, max: usize) -> Self {
        self.max_calls = max.max(1);
        self
    }

    /// The most tool calls in progress at once in one scope (session); a call beyond is
    /// refused at once with [`CallError::SessionBusy`]. Default
    /// [`DEFAULT_MAX_CALLS_PER_SESSION`]; at least 1. Keeps one session from taking every
    /// place of [`Self::max_calls`].
    pub fn max_calls_per_session(mut self, max: usize) -> Self {
        self.max_calls_per_session = max.max(1);
        self
    }

    /// Build the host and load the plugins. Must run inside a tokio runtime.
    pub async fn build(self) -> Result<ToolHost, HostError> {
        let sandbox = self.process_config.sandbox.clone();
        let (backend, manager): (Arc<dyn ProcessBackend>, _) = match self.backend {
            Some(b) => (b, None),
            None => {
                let mut config = self.process_config;
                // The host's own files are out of every confined command's reach.
                config.protected.extend(self.cache_dir.iter().cloned());
                config.protected.extend(self.plugin_dirs.iter().cloned());
                let m = ProcessManager::new(config);
                (m.clone() as Arc<dyn ProcessBackend>, Some(m))
            }
        };
        let cache = self.cache_dir.as_deref().and_then(ComponentCache::open);
        let loader = Loader::new(backend, cache, sandbox)?;
        let registry = Arc::new(Registry::new(loader, self.policy, self.plugin_dirs));
        registry.reload(true).await?;
        let watcher = if self.watch {
            let weak = Arc::downgrade(&registry);
            let reload = move || {
                let weak = weak.clone();
                async move {
                    if let Some(registry) = weak.upgrade()
                        && let Err(e) = registry.reload(false).await
                    {
                        tracing::error!("plugin reload failed: {e}");
                    }
                }
            };
            Some(watcher::watch_plugin_dirs(registry.plugin_dirs(), reload)?)
        } else {
            None
        };
        Ok(ToolHost {
            registry,
            manager,
            admissions: Admissions::new(self.max_calls, self.max_calls_per_session),
            _watcher: watcher,
        })
    }
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
    registry: Arc<Registry>,
    /// The real process manager, when the host made one (not with a custom backend).
    manager: Option<Arc<ProcessManager>>,
    /// The places of calls in progress (admission control).
    admissions: Admissions,
    /// Keeps the plugin directory watch alive (hot swap).
    _watcher: Option<notify::RecommendedWatcher>,
}

impl ToolHost {
    /// Start configuring a host.
    pub fn builder() -> ToolHostBuilder {
        ToolHostBuilder::default()
    }

    /// The process backend plugins with the process grant use.
    pub fn process_backend(&self) -> &Arc<dyn ProcessBackend> {
        &self.registry.loader().backend
    }

    /// Reload the plugin directories now (as the watcher does): changed plugins are loaded
    /// afresh; one that fails to load is logged and its previous version keeps serving.
    pub async fn reload(&self) -> Result<(), HostError> {
        self.registry.reload(false).await
    }

    /// A receiver that sees a new value every time the set of tools changes: MCP servers turn
    /// it into `notifications/tools/list_changed`.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.registry.changes()
    }

    /// [`CallError::UnknownTool`] unless a loaded plugin provides `tool`.
    pub fn check_tool(&self, tool: &str) -> Result<(), CallError> {
        self.plugin_for(tool).map(drop)
    }

    /// The plugin that provides `tool`.
    fn plugin_for(&self, tool: &str) -> Result<Arc<Plugin>, CallError> {
        let registry = self.snapshot();
        if let Some(plugin) = registry.by_tool.get(tool) {
            return Ok(plugin.clone());
        }
        Err(CallError::UnknownTool {
            name: tool.to_string(),
            available: registry
                .by_tool
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", "),
        })
    }

    fn snapshot(&self) -> Arc<Snapshot> {
        self.registry.snapshot()
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
            .map(|output| output.text)
    }

    /// [`Self::call`] with progress reporting and/or cancellation.
    pub async fn call_with(
        &self,
        scope: &str,
        tool: &str,
        arguments: &str,
        options: CallOptions,
    ) -> Result<CallOutput, CallError> {
        // An unknown tool is that, whatever the load.
        let plugin = self.plugin_for(tool)?;
        let admission = self.admit(scope)?;
        self.run(&plugin, &admission, tool, arguments, options)
            .await
    }

    /// A place for one call of `scope` among the calls in progress
    /// ([`ToolHostBuilder::max_calls`], [`ToolHostBuilder::max_calls_per_session`]), or
    /// [`CallError::Busy`] / [`CallError::SessionBusy`] when there is none: for a caller that
    /// must know before it answers anything (an MCP task is created only for a call that will
    /// run). Dropped unused, the place is given back.
    pub fn admit(&self, scope: &str) -> Result<Admission, CallError> {
        self.admissions.admit(scope)
    }

    /// [`Self::call_with`] in a place taken before with [`Self::admit`] (in its scope), held
    /// until the call ends.
    pub async fn call_admitted(
        &self,
        admission: Admission,
        tool: &str,
        arguments: &str,
        options: CallOptions,
    ) -> Result<CallOutput, CallError> {
        debug_assert!(
            self.admissions.issued(&admission),
            "an admission of another host"
        );
        let plugin = self.plugin_for(tool)?;
        self.run(&plugin, &admission, tool, arguments, options)
            .await
    }

    /// Call `tool` of `plugin` in the place `admission` holds, and log how it failed.
    async fn run(
        &self,
        plugin: &Plugin,
        admission: &Admission,
        tool: &str,
        arguments: &str,
        options: CallOptions,
    ) -> Result<CallOutput, CallError> {
        let scope = admission.scope();
        let outcome = plugin.call(scope, tool, arguments, options).await;
        // The session's log (an MCP client that set a level sees these).
        match &outcome {
            Err(error @ CallError::Limit { .. }) => {
                tracing::warn!(scope, tool, "a call hit its plugin's limit: {error}");
            }
            Err(error @ CallError::Plugin { .. }) => {
                tracing::error!(scope, tool, "a call failed in its plugin: {error}");
            }
            _ => {}
        }
        outcome
    }

    /// The full output log of process `id` of `scope`, when it has one that still exists
    /// (never another scope's process).
    pub fn output_log(&self, scope: &str, id: &str) -> Option<PathBuf> {
        self.registry.loader().backend.output_log(scope, id)
    }

    /// The processes of `scope` with a full output log, and their files.
    pub fn output_logs(&self, scope: &str) -> Vec<(String, PathBuf)> {
        self.registry.loader().backend.output_logs(scope)
    }

    /// Keep deleting output logs past their retention or over the total while the host lives
    /// (a server; a single call relies on the sweep when a host starts, at most once per
    /// interval). Sweeps every [`ProcessManagerConfig::sweep_interval`].
    ///
    /// [`ProcessManagerConfig::sweep_interval`]: crate::process::ProcessManagerConfig::sweep_interval
    pub fn sweep_logs_periodically(&self) {
        let Some(manager) = &self.manager else { return };
        let every = manager.config().sweep_interval();
        let manager = Arc::downgrade(manager);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticks.tick().await;
            loop {
                ticks.tick().await;
                let Some(manager) = manager.upgrade() else {
                    return;
                };
                let _ = tokio::task::spawn_blocking(move || manager.sweep_logs()).await;
            }
        });
    }

    /// Terminate every process of `scope` (its session ended).
    pub async fn end_scope(&self, scope: &str) {
        self.registry.loader().backend.end_scope(scope).await;
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
        output_schema: tool
            .output_schema
            .as_deref()
            .and_then(|s| serde_json::from_str(s).ok()),
        title: tool.title.clone(),
        annotations: ToolHints {
            read_only: tool.annotations.read_only,
            destructive: tool.annotations.destructive,
            idempotent: tool.annotations.idempotent,
            open_world: tool.annotations.open_world,
        },
        plugin: plugin.to_string(),
    }
}

/// `$XDG_CACHE_HOME/toolhost/components` or `~/.cache/toolhost/components`.
pub fn default_cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("toolhost").join("components"))
}
