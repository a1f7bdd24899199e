//! One loaded guest component: compiled once (through the on-disk cache), checked against its
//! grants and the WIT version, pre-linked once, and instantiated afresh in its own limited
//! [`Store`] for every call. Components of the current contract (0.6.0) and of the frozen
//! 0.5.0, 0.4.0, 0.3.0, 0.2.0 and 0.1.0 are served side by side ([`Pre`]).

use super::cache;
use super::content;
use super::engine::{EpochTicker, Loader};
use super::errors::{CallError, LimitExceeded, LoadError};
use super::limits::{CallLimits, Grants};
use super::state::{CallOptions, CallOutput, CallState, Metered, ProcessGrant};
use super::wit::latest::{
    CallContext, ShellTools, ShellToolsPre, ToolDefinition, WIT_VERSION, wit_sandbox, wit_tool,
};
use super::wit::{self, WIT_PACKAGE, v0_1_0, v0_2_0, v0_3_0, v0_4_0, v0_5_0};
use crate::ask::{self, approvals::Approvals};
use crate::sandbox;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use wasmtime::{Store, UpdateDeadline};

/// Longest a component may take to list its tools when it is loaded.
const LOAD_WALL_TIME: Duration = Duration::from_secs(10);

/// Why a guest instance runs: to list its tools at load (no process access, short wall
/// limit), or for a tool call.
enum Phase {
    Load,
    /// A round of a call, with the answers it got as the record shows them, and whether the
    /// person allowed something in them (see `CallState::person_allowed`).
    Call(Box<CallOptions>, Vec<(String, String)>, bool),
}

/// What the registry hands in to load a plugin.
pub(crate) struct PluginSource<'a> {
    /// The plugin's name (its file stem, or the bundled name).
    pub(crate) name: &'a str,
    /// Where it came from: `bundled` or a file path.
    pub(crate) origin: String,
    /// The component's bytes.
    pub(crate) bytes: &'a [u8],
    /// SHA-256 of `bytes`, when it is known already (embedded components).
    pub(crate) sha256: Option<[u8; 32]>,
    /// What it may use.
    pub(crate) grants: &'a Grants,
    /// Its per-call limits.
    pub(crate) limits: CallLimits,
    /// Its config table as JSON text, handed to the guest with every call.
    pub(crate) config: String,
}

/// How one round of a call ended, before the host asks anything.
pub(crate) enum Outcome {
    /// With a result.
    Done(CallOutput),
    /// With questions, checked against [`ask::check`]'s bounds.
    NeedsInput(ask::NeedsInput),
}

/// A component pre-linked against the contract version it was built for.
#[derive(Clone)]
enum Pre {
    /// `toolhost:plugin@0.6.0`.
    Current(ShellToolsPre<CallState>),
    /// `toolhost:plugin@0.5.0`: it never asks a secret, and its commands get none.
    V0_5_0(v0_5_0::ShellToolsPre<CallState>),
    /// `toolhost:plugin@0.4.0`: it never asks, and gets no `approvals`.
    V0_4_0(v0_4_0::ShellToolsPre<CallState>),
    /// `toolhost:plugin@0.3.0`: its results are JSON text alone, and it reports nothing
    /// during a call.
    V0_3_0(v0_3_0::ShellToolsPre<CallState>),
    /// `toolhost:plugin@0.2.0`: it sees nothing of what a command left running, and cannot
    /// page through a log.
    V0_2_0(v0_2_0::ShellToolsPre<CallState>),
    /// `toolhost:plugin@0.1.0`: its commands get the plugin's bound confinement.
    V0_1_0(v0_1_0::ShellToolsPre<CallState>),
}

/// One instance of a component, of any served version.
enum Instance {
    Current(ShellTools),
    V0_5_0(v0_5_0::ShellTools),
    V0_4_0(v0_4_0::ShellTools),
    V0_3_0(v0_3_0::ShellTools),
    V0_2_0(v0_2_0::ShellTools),
    V0_1_0(v0_1_0::ShellTools),
}

impl Pre {
    fn engine(&self) -> &wasmtime::Engine {
        match self {
            Pre::Current(pre) => pre.engine(),
            Pre::V0_5_0(pre) => pre.engine(),
            Pre::V0_4_0(pre) => pre.engine(),
            Pre::V0_3_0(pre) => pre.engine(),
            Pre::V0_2_0(pre) => pre.engine(),
            Pre::V0_1_0(pre) => pre.engine(),
        }
    }

    async fn instantiate(&self, store: &mut Store<CallState>) -> wasmtime::Result<Instance> {
        Ok(match self {
            Pre::Current(pre) => Instance::Current(pre.instantiate_async(store).await?),
            Pre::V0_5_0(pre) => Instance::V0_5_0(pre.instantiate_async(store).await?),
            Pre::V0_4_0(pre) => Instance::V0_4_0(pre.instantiate_async(store).await?),
            Pre::V0_3_0(pre) => Instance::V0_3_0(pre.instantiate_async(store).await?),
            Pre::V0_2_0(pre) => Instance::V0_2_0(pre.instantiate_async(store).await?),
            Pre::V0_1_0(pre) => Instance::V0_1_0(pre.instantiate_async(store).await?),
        })
    }
}

impl Instance {
    async fn tools(
        &self,
        store: &mut Store<CallState>,
        config: &str,
        settings: &wit_sandbox::Settings,
    ) -> wasmtime::Result<Result<Vec<ToolDefinition>, String>> {
        match self {
            Instance::Current(instance) => {
                instance
                    .toolhost_plugin_tool()
                    .call_tools(store, config, settings)
                    .await
            }
            Instance::V0_5_0(instance) => Ok(instance
                .toolhost_plugin_tool()
                .call_tools(store, config, &settings.clone().into())
                .await?
                .map(|tools| tools.into_iter().map(Into::into).collect())),
            Instance::V0_4_0(instance) => Ok(instance
                .toolhost_plugin_tool()
                .call_tools(store, config, &settings.clone().into())
                .await?
                .map(|tools| tools.into_iter().map(Into::into).collect())),
            Instance::V0_3_0(instance) => Ok(instance
                .toolhost_plugin_tool()
                .call_tools(store, config, &settings.clone().into())
                .await?
                .map(|tools| tools.into_iter().map(Into::into).collect())),
            Instance::V0_2_0(instance) => Ok(instance
                .toolhost_plugin_tool()
                .call_tools(store, config, &settings.clone().into())
                .await?
                .map(|tools| tools.into_iter().map(Into::into).collect())),
            Instance::V0_1_0(instance) => Ok(instance
                .toolhost_plugin_tool()
                .call_tools(store, config)
                .await?
                .map(|tools| tools.into_iter().map(Into::into).collect())),
        }
    }

    async fn call(
        &self,
        store: &mut Store<CallState>,
        tool: &str,
        arguments: &str,
        context: &CallContext,
    ) -> wasmtime::Result<Result<Outcome, String>> {
        let done = |text, full_output, content| {
            Outcome::Done(CallOutput {
                text,
                full_output,
                content,
                needs_input: None,
            })
        };
        let outcome = |outcome: wit_tool::CallOutcome| match outcome {
            wit_tool::CallOutcome::Done(result) => Ok(done(
                result.output,
                result.full_output,
                content::from_guest(result.content)?,
            )),
            wit_tool::CallOutcome::NeedsInput(needs) => {
                let needs = ask::NeedsInput::from(needs);
                ask::check::needs_input(&needs).map_err(|e| e.to_string())?;
                Ok(Outcome::NeedsInput(needs))
            }
        };
        match self {
            Instance::Current(instance) => Ok(instance
                .toolhost_plugin_tool()
                .call_call(store, tool, arguments, context)
                .await?
                .and_then(outcome)),
            Instance::V0_5_0(instance) => Ok(instance
                .toolhost_plugin_tool()
                .call_call(store, tool, arguments, &context.clone().into())
                .await?
                .and_then(|result: v0_5_0::CallOutcome| outcome(result.into()))),
            Instance::V0_4_0(instance) => Ok(instance
                .toolhost_plugin_tool()
                .call_call(store, tool, arguments, &context.clone().into())
                .await?
                .and_then(|result: v0_4_0::CallResult| {
                    let items = result.content.into_iter().map(Into::into).collect();
                    Ok(done(
                        result.output,
                        result.full_output,
                        content::from_guest(items)?,
                    ))
                })),
            Instance::V0_3_0(instance) => Ok(instance
                .toolhost_plugin_tool()
                .call_call(store, tool, arguments, &context.clone().into())
                .await?
                .map(|result: v0_3_0::CallResult| {
                    done(result.output, result.full_output, Vec::new())
                })),
            Instance::V0_2_0(instance) => Ok(instance
                .toolhost_plugin_tool()
                .call_call(store, tool, arguments, &context.clone().into())
                .await?
                .map(|result: v0_2_0::CallResult| {
                    done(result.output, result.full_output, Vec::new())
                })),
            Instance::V0_1_0(instance) => {
                let context = v0_1_0::OldCallContext {
                    scope: context.scope.clone(),
                    config: context.config.clone(),
                };
                Ok(instance
                    .toolhost_plugin_tool()
                    .call_call(store, tool, arguments, &context)
                    .await?
                    .map(|text| done(text, Vec::new(), Vec::new())))
            }
        }
    }
}

/// The contract version a component was built against, from its imports and exports of
/// `toolhost:plugin` (all must agree), and whether it imports the process capability.
fn contract_version(
    engine: &wasmtime::Engine,
    component: &wasmtime::component::Component,
    name: &str,
) -> Result<(String, bool), LoadError> {
    let ty = component.component_type();
    let names = ty
        .imports(engine)
        .map(|(import, _)| (import, true))
        .chain(ty.exports(engine).map(|(export, _)| (export, false)));
    let mut found: Option<String> = None;
    let mut needs_process = false;
    for (item, is_import) in names {
        let Some(rest) = item.strip_prefix(&format!("{WIT_PACKAGE}/")) else {
            continue;
        };
        let (interface, version) = rest.split_once('@').unwrap_or((rest, ""));
        let version = if version.is_empty() {
            "(unversioned)"
        } else {
            version
        };
        needs_process |= is_import && interface == "process";
        match &found {
            None => found = Some(version.to_string()),
            Some(first) if first != version => {
                return Err(LoadError::WitVersion {
                    plugin: name.to_string(),
                    found: format!("{first} and {version} at once"),
                });
            }
            Some(_) => {}
        }
    }
    let version = found.unwrap_or_else(|| WIT_VERSION.to_string());
    if !super::WIT_VERSIONS.contains(&version.as_str()) {
        return Err(LoadError::WitVersion {
            plugin: name.to_string(),
            found: version,
        });
    }
    Ok((version, needs_process))
}

/// A loaded plugin.
pub(crate) struct Plugin {
    name: String,
    origin: String,
    pre: Pre,
    tools: Vec<ToolDefinition>,
    limits: CallLimits,
    config: String,
    /// What its commands get unless a request tightens it, as handed to `tools`.
    settings: wit_sandbox::Settings,
    grant: Option<ProcessGrant>,
    /// The engine's epoch ticker, told when a call runs.
    ticker: Arc<EpochTicker>,
    /// The host's keys of "from now on" answers (`approvals`).
    approvals: Arc<Approvals>,
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
    /// Compile (or take from the cache), check and pre-link the source's component, then ask
    /// it for its tools.
    pub(crate) async fn load(
        loader: &Loader,
        source: PluginSource<'_>,
    ) -> Result<Plugin, LoadError> {
        let PluginSource {
            name,
            origin,
            bytes,
            sha256,
            grants,
            limits,
            config,
        } = source;
        let engine = &loader.engine;
        let compiled = cache::compile(engine, name, bytes, sha256, loader.cache.as_ref())
            .await
            .map_err(|reason| LoadError::Compile {
                plugin: name.to_string(),
                reason,
            })?;
        let component = compiled.component;
        let (version, needs_process) = contract_version(engine, &component, name)?;
        if needs_process && !grants.process {
            return Err(LoadError::MissingGrant {
                plugin: name.to_string(),
                import: format!("{WIT_PACKAGE}/process@{version}"),
                grant: "process",
            });
        }
        let link_error = |e: wasmtime::Error| LoadError::Link {
            plugin: name.to_string(),
            reason: format!("{e:#}"),
        };
        let pre = loader
            .linker
            .instantiate_pre(&component)
            .map_err(link_error)?;
        let pre = match version.as_str() {
            WIT_VERSION => Pre::Current(ShellToolsPre::new(pre).map_err(link_error)?),
            v0_5_0::WIT_VERSION => {
                Pre::V0_5_0(v0_5_0::ShellToolsPre::new(pre).map_err(link_error)?)
            }
            v0_4_0::WIT_VERSION => {
                Pre::V0_4_0(v0_4_0::ShellToolsPre::new(pre).map_err(link_error)?)
            }
            v0_3_0::WIT_VERSION => {
                Pre::V0_3_0(v0_3_0::ShellToolsPre::new(pre).map_err(link_error)?)
            }
            v0_2_0::WIT_VERSION => {
                Pre::V0_2_0(v0_2_0::ShellToolsPre::new(pre).map_err(link_error)?)
            }
            _ => Pre::V0_1_0(v0_1_0::ShellToolsPre::new(pre).map_err(link_error)?),
        };
        let profile = sandbox::bound(&loader.sandbox, &grants.sandbox);
        let settings = wit::settings(&profile, &loader.sandbox.writable);
        let grant = needs_process.then(|| ProcessGrant {
            backend: loader.backend.clone(),
            workdir_root: grants.workdir_root.clone(),
            max_wait: grants.max_timeout,
            env_allowlist: grants.env.clone(),
            profile,
            operator: loader.sandbox.clone(),
            sandbox_grant: grants.sandbox,
        });
        let mut plugin = Plugin {
            name: name.to_string(),
            origin,
            pre,
            tools: Vec::new(),
            limits,
            config,
            settings,
            grant,
            ticker: loader.ticker.clone(),
            approvals: loader.approvals.clone(),
        };
        // The list this component gave for this configuration before, when the cache has it.
        let tools_file = compiled.cached.as_deref().map(|cwasm| {
            cache::tools_path(cwasm, &plugin.config, &format!("{:?}", plugin.settings))
        });
        // One that fails the checks (the file was tampered with) is asked for afresh.
        let cached = tools_file
            .as_deref()
            .and_then(cache::load_tools)
            .and_then(|tools| plugin.check_tools(tools).ok());
        plugin.tools = match cached {
            Some(tools) => tools,
            None => {
                let tools = plugin.check_tools(plugin.fetch_tools().await?)?;
                if let Some(file) = &tools_file {
                    cache::store_tools(file, &tools);
                }
                tools
            }
        };
        Ok(plugin)
    }

    /// The plugin's name (its file stem, or the bundled name).
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Where it came from: `bundled` or a file path.
    pub(crate) fn origin(&self) -> &str {
        &self.origin
    }

    /// The longest one call of this plugin may take (its wall-clock limit).
    pub(crate) fn wall_time(&self) -> Duration {
        self.limits.wall_time
    }

    /// The tools it provides.
    pub(crate) fn tools(&self) -> &[ToolDefinition] {
        &self.tools
    }

    /// Ask the guest for its tools.
    async fn fetch_tools(&self) -> Result<Vec<ToolDefinition>, LoadError> {
        let config = self.config.clone();
        let settings = self.settings.clone();
        self.run("(load)", Phase::Load, |instance, store| {
            Box::pin(async move { instance.tools(store, &config, &settings).await })
        })
        .await
        .map_err(|e| LoadError::BadTools {
            plugin: self.name.clone(),
            reason: e.to_string(),
        })?
        .map_err(|reason| LoadError::Refused {
            plugin: self.name.clone(),
            reason,
        })
    }

    /// `tools` if every name is valid and unique and every schema is a JSON object.
    fn check_tools(&self, tools: Vec<ToolDefinition>) -> Result<Vec<ToolDefinition>, LoadError> {
        let bad = |reason: String| LoadError::BadTools {
            plugin: self.name.clone(),
            reason,
        };
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

    /// One round of a call of tool `tool` with `arguments` (JSON text) in `scope`: the tool
    /// gets `options.asking` and `answers` (the replies to its last round's questions).
    pub(crate) async fn call(
        &self,
        scope: &str,
        tool: &str,
        arguments: &str,
        options: CallOptions,
        answers: Option<ask::Answers>,
    ) -> Result<Outcome, CallError> {
        let answered = answers
            .as_ref()
            .map(|answers| {
                let word = |reply: &ask::Reply| {
                    if answers.checked {
                        reply.summary().to_owned()
                    } else {
                        format!("{} (unchecked)", reply.summary())
                    }
                };
                answers
                    .replies
                    .iter()
                    .map(|answer| (answer.key.clone(), word(&answer.reply)))
                    .collect()
            })
            .unwrap_or_default();
        let person_allowed = answers.as_ref().is_some_and(|answers| {
            answers.checked
                && answers.replies.iter().any(|answer| match &answer.reply {
                    ask::Reply::Accepted(values) => values
                        .iter()
                        .any(|(name, value)| name == "allow" && *value == ask::Value::YesNo(true)),
                    _ => false,
                })
        });
        let context = CallContext {
            scope: scope.to_string(),
            config: self.config.clone(),
            asking: (&options.asking).into(),
            answers: answers.map(Into::into),
        };
        let tool = tool.to_string();
        let arguments = arguments.to_string();
        self.run(
            scope,
            Phase::Call(Box::new(options), answered, person_allowed),
            move |instance, store| {
                Box::pin(async move { instance.call(store, &tool, &arguments, &context).await })
            },
        )
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
            &'a Instance,
            &'a mut Store<CallState>,
        ) -> Pin<
            Box<dyn Future<Output = wasmtime::Result<Result<R, String>>> + Send + 'a>,
        > + Send,
    ) -> Result<Result<R, String>, CallError> {
        let mut limits = self.limits;
        let (grant, options, answered, person_allowed, approvals) = match phase {
            // Listing tools needs no processes, and must not stall a (re)load.
            Phase::Load => {
                limits.wall_time = limits.wall_time.min(LOAD_WALL_TIME);
                (None, CallOptions::default(), Vec::new(), false, None)
            }
            Phase::Call(options, answered, person_allowed) => (
                self.grant.clone(),
                *options,
                answered,
                person_allowed,
                Some(self.approvals.clone()),
            ),
        };
        let mut state = CallState::new(&self.name, scope, &limits, grant, options);
        state.approvals = approvals;
        state.answered = answered;
        state.person_allowed = person_allowed;
        let mut store = Store::new(self.pre.engine(), state);
        store.limiter(|state| &mut state.limiter);
        store.set_epoch_deadline(1);
        let cpu = limits.cpu_time;
        store.epoch_deadline_callback(move |cx| {
            if cx.data().guest_time() > cpu {
                Err(LimitExceeded::CpuTime { limit: cpu }.into())
            } else {
                Ok(UpdateDeadline::Yield(1))
            }
        });
        let pre = self.pre.clone();
        let meter = store.data().cpu_meter();
        // The epoch must advance while the guest runs, for the CPU limit to interrupt it.
        let _running = self.ticker.running();
        let outcome = tokio::time::timeout(
            limits.wall_time,
            Metered::new(
                async {
                    let instance = pre.instantiate(&mut store).await?;
                    f(&instance, &mut store).await
                },
                meter,
            ),
        )
        .await;
        let (stdout, stderr) = store.data().guest_output();
        log_guest_output(&self.name, &stdout, &stderr);
        let plugin = self.name.clone();
        match outcome {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(error)) => Err(match error.downcast_ref::<LimitExceeded>() {
                Some(limit) => CallError::Limit {
                    plugin,
                    limit: limit.clone(),
                },
                None => CallError::Plugin {
                    plugin,
                    reason: describe_failure(&error, &stderr),
                },
            }),
            Err(_) => Err(CallError::Limit {
                plugin,
                limit: LimitExceeded::WallTime {
                    limit: limits.wall_time,
                },
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
    // A trap gets named; other errors (an import's) say what happened themselves.
    let reason = match error.downcast_ref::<wasmtime::Trap>() {
        Some(trap) => format!("trapped: {trap}"),
        None => cause,
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
