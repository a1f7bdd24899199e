//! Why a plugin could not be loaded ([`LoadError`]) or a call failed ([`CallError`]), with the
//! limits a guest can run into typed ([`LimitExceeded`]) rather than described in text.

use super::WIT_VERSIONS;
use super::wit::WIT_PACKAGE;
use super::wit::latest::WIT_VERSION;
use std::time::Duration;

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
        "plugin `{plugin}` was built against {WIT_PACKAGE}@{found}, but this host implements {}; rebuild it against wit/toolhost.wit ({WIT_VERSION})",
        served_versions()
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

/// The versions this host serves, for a message: `toolhost:plugin@0.6.0, @0.5.0, @0.4.0,
/// @0.3.0, @0.2.0 and @0.1.0`.
fn served_versions() -> String {
    let mut text = String::new();
    for (i, version) in WIT_VERSIONS.iter().enumerate() {
        match i {
            0 => text.push_str(&format!("{WIT_PACKAGE}@{version}")),
            i if i + 1 == WIT_VERSIONS.len() => text.push_str(&format!(" and @{version}")),
            _ => text.push_str(&format!(", @{version}")),
        }
    }
    text
}

/// Why a call failed. More reasons may come in later versions: match with a `_` arm.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// No loaded plugin provides the tool.
    #[error("unknown tool `{name}`; available tools: {available}")]
    UnknownTool { name: String, available: String },
    /// The tool refused the call (bad arguments, unknown process id...): a message for the
    /// model.
    #[error("{0}")]
    Tool(String),
    /// A retried call's replies to the tool's questions are unusable: not replies at all, or
    /// with a request state this host did not give for this call. Nothing of the call ran.
    #[error("not run: {0}")]
    Answers(String),
    /// The tool cannot go on without asking the MCP client something it did not declare it
    /// can be asked (the protocol's `-32021`): `elicitation`, `sampling` or `roots`.
    #[error("the tool needs the client capabilities {}, which the client did not declare", .0.join(", "))]
    MissingCapability(Vec<String>),
    /// The guest ran into one of its plugin's limits and was stopped; the host is unaffected.
    #[error("plugin `{plugin}` failed: {limit}")]
    Limit {
        plugin: String,
        limit: LimitExceeded,
    },
    /// The guest misbehaved otherwise (trap, panic, bad import use); the host is unaffected.
    #[error("plugin `{plugin}` failed: {reason}")]
    Plugin { plugin: String, reason: String },
    /// The host already runs as many calls as it may at once (its `--max-calls-total`): this
    /// one was refused before it started, nothing of it ran.
    #[error(
        "not run: the host is already running its maximum of {max_calls} tool calls at once \
         across all sessions (--max-calls-total); try again when one has finished"
    )]
    Busy {
        /// The host's limit of calls in progress.
        max_calls: usize,
    },
    /// The call's session already runs as many calls as a session may at once (the host's
    /// `--max-calls-per-session`): this one was refused before it started, nothing of it ran.
    #[error(
        "not run: this session is already running its maximum of {max_calls} tool calls at \
         once (--max-calls-per-session); try again when one of them has finished"
    )]
    ScopeBusy {
        /// The limit of calls in progress per session.
        max_calls: usize,
    },
    /// The call's principal (a bearer token of an HTTP server) is already running its
    /// maximum of calls at once, over all its sessions and scopes. Nothing of it ran.
    #[error(
        "not run: this principal (bearer token) is already running its maximum of {max_calls} \
         tool calls at once over all its sessions (--max-calls-per-principal); try again when \
         one of them has finished"
    )]
    PrincipalBusy {
        /// The limit of calls in progress per principal.
        max_calls: usize,
    },
    /// The call was handed a permit that another host issued, or one taken for another scope:
    /// a bug in the caller. Nothing of the call ran.
    #[error(
        "not run: the call permit was taken for scope `{permit_scope}` or by another host, not \
         for this call's scope `{scope}`"
    )]
    ForeignPermit {
        /// The call's scope.
        scope: String,
        /// The scope the permit was taken for.
        permit_scope: String,
    },
}

/// A per-call limit a guest ran into (see the `[limits]` of its manifest).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitExceeded {
    /// Linear memory, a table or a guest buffer would take the call past its memory budget.
    #[error("memory limit exceeded: {what} needs {needed} more bytes, {used} of {limit} in use")]
    Memory {
        /// What was growing: `linear memory`, `a table`, `a guest buffer`.
        what: &'static str,
        /// Bytes it asked for.
        needed: usize,
        /// Bytes of the budget already in use.
        used: usize,
        /// The budget.
        limit: usize,
    },
    /// A table would grow past the most elements any table may hold.
    #[error("memory limit exceeded: a table may hold at most {max} elements")]
    TableElements {
        /// The most elements a table may hold.
        max: usize,
    },
    /// The guest itself ran longer than its CPU time (time waiting in the host not counted).
    #[error("CPU time limit exceeded (the guest ran for more than {})", humantime::format_duration(*.limit))]
    CpuTime {
        /// The limit.
        limit: Duration,
    },
    /// The whole call, waits included, took longer than its wall-clock limit.
    #[error("wall-clock limit exceeded (the call took more than {})", humantime::format_duration(*.limit))]
    WallTime {
        /// The limit.
        limit: Duration,
    },
}

/// The WebAssembly engine could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("cannot set up the WebAssembly engine: {0}")]
pub struct EngineError(pub(crate) String);
