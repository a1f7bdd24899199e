//! [`ToolHost`]: the embeddable host.
//!
//! A `ToolHost` owns the process backend, the guest runtime and the plugin registry.
//! It routes each tool call to the plugin that provides the tool.
//! [`ToolHostBuilder`] configures a host.
//! [`Call`] is one tool call, made with [`ToolHost::call`].
//!
//! ## Flow at a glance
//!
//! Building a host ([`ToolHostBuilder::build`]):
//!
//! 1. The process backend is the one given, or else a new [`ProcessManager`].
//!    The manager keeps confined commands away from the host's own files: the component
//!    cache and the plugin directories.
//! 2. The guest runtime is set up on that backend, with the cache of compiled components.
//! 3. The plugin registry loads the bundled policy and every plugin directory.
//!    Any plugin that fails to load makes the build fail.
//!    With [`ToolHostBuilder::defer_uncompiled_plugins`], a large plugin whose compiled code
//!    is not in the cache is left out here and loaded in the background after the build.
//! 4. With [`ToolHostBuilder::watch_plugins`], a watcher reloads the registry after each burst
//!    of changes in the plugin directories.
//!
//! Making a call (`.await` on a [`Call`], or [`Call::output`]):
//!
//! 1. The registry's current snapshot names the plugin that provides the tool.
//!    An unknown tool is refused.
//! 2. The call takes a place among the calls in progress ([`ToolHost::admit`]), unless it
//!    holds a [`CallPermit`] already.
//!    A call beyond the host's or its scope's limit is refused, and nothing of it runs.
//! 3. Whom the call may ask is settled: nobody under [`AskMode::Never`], else what the
//!    caller says ([`CallOptions::asking`]). A call that can ask a form lets its scope's
//!    commands wait on a host the person may allow while it runs (`--network ask`).
//! 4. The plugin runs the call in a fresh guest instance, in the caller's scope; a tool that
//!    ends with questions has them asked or relayed, and runs again in a fresh instance with
//!    the replies ([`crate::ask`]'s rounds).
//! 5. A call that ran into its plugin's limit, or failed in its plugin, is logged with its
//!    scope.
//! 6. The place is given back when the call ends.

use crate::admission::{
    Admissions, CallPermit, DEFAULT_MAX_CALLS_PER_SESSION, default_max_calls_total,
};
use crate::ask::seal::{Binding, Seals};
use crate::ask::{AskMode, Asking, DEFAULT_ASK_TIMEOUT, rounds};
use crate::error::HostError;
use crate::guest::{
    CallError, CallOptions, CallOutput, ComponentCache, EngineError, Loader, Plugin, ToolDefinition,
};
use crate::plugins::PluginInfo;
use crate::plugins::registry::{Registry, Snapshot};
use crate::plugins::watcher;
use crate::process::{
    OutputLog, ProcessBackend, ProcessError, ProcessManager, ProcessManagerConfig,
};
use std::future::{Future, IntoFuture};
use std::path::PathBuf;
use std::pin::Pin;
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

/// Hints about a tool's behaviour, for clients deciding what needs approval.
///
/// The plugin states them; the host does not check them.
/// `None` means not stated.
/// They serialize with MCP's names.
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
    defer_uncompiled: bool,
    max_calls_total: usize,
    max_calls_per_session: usize,
    max_calls_per_principal: usize,
    ask_mode: AskMode,
    ask_timeout: Duration,
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
            defer_uncompiled: false,
            max_calls_total: default_max_calls_total(),
            max_calls_per_session: DEFAULT_MAX_CALLS_PER_SESSION,
            max_calls_per_principal: usize::MAX,
            ask_mode: AskMode::default(),
            ask_timeout: DEFAULT_ASK_TIMEOUT,
        }
    }
}

impl ToolHostBuilder {
    /// Which bundled policy to load (`default`, `guarded`), or `None` for none.
    pub fn bundled_policy(mut self, policy: Option<&str>) -> Self {
        self.policy = policy.map(str::to_string);
        self
    }

    /// Also load every `*.wasm` component in `dir`, each with its `NAME.toml` manifest.
    /// A plugin's tool replaces a bundled tool of the same name.
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
    /// Compiled code from this directory is loaded and run natively.
    /// So the directory must be as trusted as the `toolhost` binary: whoever can write it can
    /// run code inside the host.
    /// The host creates it private (0700).
    /// The host does not use it when another user owns it, or when group or others may write
    /// it: it logs why and compiles afresh.
    /// The agent's commands may run as the same user as the host.
    /// Then, if a policy must hold against them, disable the cache, or point it at a
    /// directory that user cannot write.
    pub fn cache_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.cache_dir = dir;
        self
    }

    /// Watch the plugin directories.
    /// The host reloads when a component or manifest is added, replaced or removed (see
    /// [`ToolHost::changes`]).
    pub fn watch_plugins(mut self, watch: bool) -> Self {
        self.watch = watch;
        self
    }

    /// Build without waiting for the first compile of a plugin directory's component that is
    /// larger than 4 MiB (one with an interpreter inside: its compile takes seconds) and
    /// whose compiled code is not in the component cache.
    /// Such a plugin is loaded in the background after [`ToolHostBuilder::build`] returns.
    /// Its tools then arrive with a change of the tool list ([`ToolHost::changes`]).
    /// A compile that fails is logged, and the plugin is left out.
    /// The bundled policy is always loaded before `build` returns.
    /// The CLI sets it for `toolhost serve`.
    pub fn defer_uncompiled_plugins(mut self, defer: bool) -> Self {
        self.defer_uncompiled = defer;
        self
    }

    /// The most tool calls in progress at once on the whole host, all scopes together.
    ///
    /// MCP tasks count too.
    /// The CLI sets it with `--max-calls-total`.
    /// A call beyond is refused at once with [`CallError::Busy`], before anything of it runs.
    /// The default is [`default_max_calls_total`]: 24 a CPU, at most 256. The least is 1.
    /// It bounds the guest instances alive for calls, and so their memory.
    /// That memory is at most this many times the largest memory limit of a plugin.
    /// Guests that list a plugin's tools while it loads are not counted.
    pub fn max_calls_total(mut self, max: usize) -> Self {
        self.max_calls_total = max.max(1);
        self
    }

    /// The most tool calls in progress at once in one scope (a session).
    ///
    /// The CLI sets it with `--max-calls-per-session`.
    /// A call beyond is refused at once with [`CallError::ScopeBusy`].
    /// The default is [`DEFAULT_MAX_CALLS_PER_SESSION`]; the least is 1.
    /// It keeps one session from taking every place of [`Self::max_calls_total`].
    pub fn max_calls_per_session(mut self, max: usize) -> Self {
        self.max_calls_per_session = max.max(1);
        self
    }

    /// The most tool calls in progress at once of one principal (a bearer token of an HTTP
    /// server), over all its sessions and scopes.
    ///
    /// The CLI sets it with `--max-calls-per-principal`.
    /// It counts only calls admitted with a principal ([`ToolHost::admit_for`]).
    /// A call beyond is refused at once with [`CallError::PrincipalBusy`].
    /// The default is no limit but [`Self::max_calls_total`]; the least is 1.
    /// It keeps one client from taking every place while others are served.
    pub fn max_calls_per_principal(mut self, max: usize) -> Self {
        self.max_calls_per_principal = max.max(1);
        self
    }

    /// Whether tools may ask the person (`--ask`): with [`AskMode::Never`] (the default)
    /// every call is told nobody can be asked, whatever its caller could ask.
    pub fn ask_mode(mut self, mode: AskMode) -> Self {
        self.ask_mode = mode;
        self
    }

    /// How long one round of a tool's questions may wait for its replies (`--ask-timeout`);
    /// unanswered questions then get [`crate::ask::Reply::TimedOut`]. A relayed round's
    /// signed record expires after it too. The default is [`DEFAULT_ASK_TIMEOUT`].
    pub fn ask_timeout(mut self, timeout: Duration) -> Self {
        self.ask_timeout = timeout;
        self
    }

    /// Build the host and load the plugins (see the module's flow at a glance).
    /// It must run inside a tokio runtime.
    pub async fn build(self) -> Result<ToolHost, HostError> {
        let sandbox = self.process_config.sandbox.clone();
        let (backend, manager): (Arc<dyn ProcessBackend>, _) = match self.backend {
            Some(b) => (b, None),
            None => {
                let mut config = self.process_config;
                warn_host_files_in_writable_roots(&config, &self.cache_dir, &self.plugin_dirs);
                // The host's own files are out of every confined command's reach.
                config.protected.extend(self.cache_dir.iter().cloned());
                config.protected.extend(self.plugin_dirs.iter().cloned());
                let m = ProcessManager::new(config);
                (m.clone() as Arc<dyn ProcessBackend>, Some(m))
            }
        };
        let cache = self.cache_dir.as_deref().and_then(ComponentCache::open);
        let loader = Loader::new(backend, cache, sandbox)?;
        let seals = Seals::new().map_err(|e| HostError::Engine(EngineError(e.to_string())))?;
        let registry = Arc::new(Registry::new(loader, self.policy, self.plugin_dirs));
        if registry
            .reload_deferring(true, self.defer_uncompiled)
            .await?
        {
            let registry = registry.clone();
            tokio::spawn(async move {
                if let Err(e) = registry.reload(false).await {
                    tracing::error!("loading the plugins compiled in the background failed: {e}");
                }
            });
        }
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
            admissions: Admissions::new(
                self.max_calls_total,
                self.max_calls_per_session,
                self.max_calls_per_principal,
            ),
            _watcher: watcher,
            seals,
            pages: crate::ask::page::PageServer::default(),
            ask_mode: self.ask_mode,
            ask_timeout: self.ask_timeout,
        })
    }
}

/// Say once, at start, which of the host's own files (`--token-file`, `--state-dir`,
/// `--plugins`, the component cache) and `--hide` paths lie inside the workspace or a
/// `--writable` directory, and what that costs: they are hidden, so the directory holding one
/// is confined to its entries at each command's start.
fn warn_host_files_in_writable_roots(
    config: &ProcessManagerConfig,
    cache_dir: &Option<PathBuf>,
    plugin_dirs: &[PathBuf],
) {
    if config.sandbox.mode == crate::sandbox::SandboxMode::Off {
        return;
    }
    let canonical = |path: &std::path::Path| crate::sandbox::canonical(path);
    // `/` is no workspace (the process manager says so).
    let workspace = config
        .default_workdir
        .clone()
        .or_else(|| std::env::current_dir().ok())
        .and_then(|dir| crate::sandbox::workspace_of(&dir))
        .map(|dir| canonical(&dir));
    // A home as the workspace gets one warning that says what to do, rather than one for
    // each of the host's files in it.
    let home = workspace.as_ref().filter(|dir| {
        crate::sandbox::Homes::of_this_user()
            .distinct()
            .contains(dir)
    });
    if let Some(home) = home {
        let narrowed = if config.workspaces_under.is_empty() {
            ""
        } else {
            " (a session whose client offers a project as its root, or whose call names one as \
             its workdir, narrows its own workspace to it)"
        };
        tracing::warn!(
            "the workspace is the home directory {} (the host was started there without \
             --workdir): confined commands may write anywhere in it but the credential stores \
             and the host's own files, and those are hidden; pass --workdir with a project \
             directory to keep commands to one project{narrowed}",
            home.display()
        );
    }
    let roots: Vec<(PathBuf, &str)> = workspace
        .iter()
        .filter(|_| home.is_none())
        .map(|dir| (dir.clone(), "the workspace"))
        .chain(
            config
                .sandbox
                .writable
                .iter()
                .map(|dir| (canonical(dir), "the --writable directory")),
        )
        .collect();
    let state_dir = config
        .output_logs
        .then(|| {
            config
                .state_dir
                .clone()
                .or_else(ProcessManagerConfig::default_state_dir)
        })
        .flatten();
    let files = config
        .protected
        .iter()
        .map(|path| (path, "the host file (--token-file)"))
        .chain(
            state_dir
                .iter()
                .map(|path| (path, "the state directory (--state-dir)")),
        )
        .chain(
            plugin_dirs
                .iter()
                .map(|path| (path, "the plugin directory (--plugins)")),
        )
        .chain(cache_dir.iter().map(|path| (path, "the component cache")))
        .chain(
            config
                .sandbox
                .hide
                .iter()
                .map(|path| (path, "the --hide path")),
        );
    for (path, what) in files {
        let path = canonical(path);
        let Some((root, place)) = roots
            .iter()
            .find(|(root, _)| path.starts_with(root) && path != *root)
        else {
            continue;
        };
        let dir = path.parent().unwrap_or(root);
        tracing::warn!(
            "{what} {} lies inside {place} {}: it is hidden from confined commands, so every \
             directory from there down to {} is confined to the entries it has when a command \
             starts, and commands may not create or remove entries directly in it (with \
             namespaces, they may where a mount covers every hidden entry). Put it outside \
             {place}",
            path.display(),
            root.display(),
            dir.display()
        );
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
    /// Signs the records of relayed questions.
    seals: Seals,
    /// The pages where the person types secrets (served from the first secret question).
    pages: crate::ask::page::PageServer,
    /// Whether tools may ask anybody.
    ask_mode: AskMode,
    /// How long a round of questions waits.
    ask_timeout: Duration,
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

    /// Reload the plugin directories now, as the watcher does.
    /// Changed plugins are loaded afresh.
    /// A plugin that fails to load is logged, and its previous version keeps serving.
    pub async fn reload(&self) -> Result<(), HostError> {
        self.registry.reload(false).await
    }

    /// A receiver that sees a new value every time the set of tools changes.
    /// MCP servers turn it into `notifications/tools/list_changed`.
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

    /// The loaded plugins: the bundled policy first, then each plugin directory's in name
    /// order.
    pub fn plugins(&self) -> Vec<PluginInfo> {
        let snapshot = self.snapshot();
        snapshot
            .plugins
            .iter()
            .map(|plugin| PluginInfo {
                name: plugin.name().to_string(),
                origin: snapshot.origin(plugin),
            })
            .collect()
    }

    /// A call of `tool` with `arguments` (a JSON object as text) on behalf of `scope`.
    ///
    /// Nothing runs until the [`Call`] is awaited.
    /// `.await` gives the tool's result JSON text.
    /// [`Call::options`] adds progress reporting and cancellation.
    /// [`Call::permit`] runs the call in a place taken before with [`Self::admit`].
    /// [`Call::output`] gives the result with the processes whose full output it points to.
    ///
    /// ```no_run
    /// # async fn demo(host: &toolhost::ToolHost) -> Result<(), toolhost::CallError> {
    /// let text = host.call("my-session", "process_list", "{}").await?;
    /// let cancel = toolhost::CancellationToken::new();
    /// let options = toolhost::CallOptions {
    ///     cancel: Some(cancel.clone()),
    ///     ..Default::default()
    /// };
    /// let output = host
    ///     .call("my-session", "execute", r#"{"command":"make"}"#)
    ///     .options(options)
    ///     .output()
    ///     .await?;
    /// # let _ = (text, output); Ok(()) }
    /// ```
    pub fn call<'a>(&'a self, scope: &'a str, tool: &'a str, arguments: &'a str) -> Call<'a> {
        Call {
            host: self,
            scope,
            tool,
            arguments,
            options: CallOptions::default(),
            permit: None,
        }
    }

    /// A place for one call of `scope` among the calls in progress, taken now.
    ///
    /// The limits are [`ToolHostBuilder::max_calls_total`] and
    /// [`ToolHostBuilder::max_calls_per_session`].
    /// When there is no place, the refusal is [`CallError::Busy`] or [`CallError::ScopeBusy`].
    /// A caller that must know before it answers anything takes the place first: an MCP task
    /// is created only for a call that will run.
    /// The call then runs in that place ([`Call::permit`]).
    /// Dropped unused, the permit gives the place back.
    pub fn admit(&self, scope: &str) -> Result<CallPermit, CallError> {
        self.admissions.admit(scope, None)
    }

    /// [`Self::admit`] for a call of `principal` (a bearer token of an HTTP server; `None`
    /// for a caller without one): the call also counts in the principal's limit
    /// ([`ToolHostBuilder::max_calls_per_principal`]), refused with
    /// [`CallError::PrincipalBusy`] beyond it. The scope is noted as the principal's, so that
    /// its processes count in the principal's share too
    /// ([`crate::process::ProcessBackend::set_owner`]).
    pub fn admit_for(&self, scope: &str, principal: Option<&str>) -> Result<CallPermit, CallError> {
        let permit = self.admissions.admit(scope, principal)?;
        if let Some(principal) = principal {
            self.registry.loader().backend.set_owner(scope, principal);
        }
        Ok(permit)
    }

    /// Run `call` as the module's flow at a glance says.
    async fn run(&self, call: Call<'_>) -> Result<CallOutput, CallError> {
        let Call {
            scope,
            tool,
            arguments,
            options,
            permit,
            ..
        } = call;
        // An unknown tool is that, whatever the load.
        let plugin = self.plugin_for(tool)?;
        // Held until the call ends.
        let _permit = match permit {
            // A permit counts in the scope it was taken for: one of another scope or host
            // would bypass this scope's limit.
            Some(permit) if self.admissions.issued(&permit) && permit.scope() == scope => permit,
            Some(permit) => {
                return Err(CallError::ForeignPermit {
                    scope: scope.to_owned(),
                    permit_scope: permit.scope().to_owned(),
                });
            }
            None => self.admit(scope)?,
        };
        let mut options = options;
        if self.ask_mode == AskMode::Never {
            options.asking = Asking::nobody(
                "the operator did not enable asking (start toolhost with `--ask risky`)",
            );
            options.asker = None;
            // Replies nobody asked for reach no tool either.
            options.resume = None;
        }
        let ask_timeout = options.ask_timeout.unwrap_or(self.ask_timeout);
        let principal = options.principal.clone();
        let binding = Binding {
            principal: principal.as_deref(),
            scope,
            tool,
            arguments,
        };
        // While the call runs, a connection of its scope's commands to a host the person may
        // allow waits for their answer, where the call can ask a form (step 3).
        let _held = match &options.asker {
            Some(asker) if options.asking.can.form => {
                let question = crate::ask::hosts::AskerQuestion {
                    asker: asker.clone(),
                    timeout: ask_timeout,
                };
                self.registry
                    .loader()
                    .backend
                    .hold_host_question(scope, Arc::new(question))
            }
            _ => None,
        };
        let round: rounds::Round<'_> = Box::new(|options, answers| {
            let plugin = plugin.clone();
            Box::pin(async move { plugin.call(scope, tool, arguments, options, answers).await })
        });
        let outcome = rounds::run(
            round,
            options,
            &self.seals,
            &self.pages,
            binding,
            ask_timeout,
        )
        .await;
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

    /// Whether `scope` has a process running, or what a finished one left running.
    pub fn has_processes(&self, scope: &str) -> bool {
        self.registry.loader().backend.has_processes(scope)
    }

    /// The full output log of process `id` of `scope`, when it has one that still exists.
    /// A process of another scope has none.
    pub fn output_log(&self, scope: &str, id: &str) -> Option<PathBuf> {
        self.registry.loader().backend.output_log(scope, id)
    }

    /// The processes of `scope` with a full output log, and their files.
    pub fn output_logs(&self, scope: &str) -> Vec<OutputLog> {
        self.registry.loader().backend.output_logs(scope)
    }

    /// Keep deleting output logs past their retention or over the total while the host lives.
    ///
    /// A server calls this.
    /// A single call relies on the sweep when a host starts, at most once per interval.
    /// The sweeps are [`ProcessManagerConfig::sweep_interval`] apart.
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

    /// Make `dir`'s project the workspace of `scope`, as `from` asks (see
    /// [`ProcessBackend::choose_workspace`]): the workspace the scope has then, or why `dir`
    /// cannot be one; `None` when scopes keep the host's workspace.
    pub async fn choose_workspace(
        &self,
        scope: &str,
        dir: &std::path::Path,
        from: crate::process::WorkspaceSource,
    ) -> Result<Option<PathBuf>, ProcessError> {
        self.registry
            .loader()
            .backend
            .choose_workspace(scope, dir, from)
            .await
    }

    /// Terminate every process of `scope` (its session ended), and forget what its person
    /// allowed from now on.
    pub async fn end_scope(&self, scope: &str) {
        self.registry.loader().approvals.end_scope(scope);
        self.registry.loader().backend.end_scope(scope).await;
    }

    /// Stop: terminate every process the host started (SIGTERM, then SIGKILL after a short
    /// grace).
    /// Dropping the host also kills them, without the grace.
    pub async fn shutdown(&self) {
        if let Some(manager) = &self.manager {
            manager.shutdown().await;
        }
    }
}

/// One tool call, made with [`ToolHost::call`]; nothing runs until it is awaited.
///
/// `.await` runs it and gives the tool's result JSON text.
/// [`Call::output`] runs it and gives the whole [`CallOutput`].
#[must_use = "a call does nothing until it is awaited"]
pub struct Call<'a> {
    host: &'a ToolHost,
    scope: &'a str,
    tool: &'a str,
    arguments: &'a str,
    options: CallOptions,
    permit: Option<CallPermit>,
}

impl<'a> Call<'a> {
    /// Report progress and take cancellation as `options` say.
    pub fn options(mut self, options: CallOptions) -> Self {
        self.options = options;
        self
    }

    /// Run in the place `permit` holds, taken before with [`ToolHost::admit`] for this call's
    /// scope, instead of taking one now.
    /// The permit is held until the call ends.
    pub fn permit(mut self, permit: CallPermit) -> Self {
        self.permit = Some(permit);
        self
    }

    /// Run the call: its result, with the processes whose full output it points to.
    pub async fn output(self) -> Result<CallOutput, CallError> {
        self.host.run(self).await
    }
}

impl<'a> IntoFuture for Call<'a> {
    type Output = Result<String, CallError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'a>>;

    /// Run the call: the tool's result JSON text.
    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move { self.output().await.map(|output| output.text) })
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
