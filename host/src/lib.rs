//! toolhost: a native host that gives AI agents a shell through sandboxed WebAssembly guests.
//!
//! The host owns the dangerous, stateful parts.
//! It offers them to guests as WIT imports (`wit/toolhost.wit`): a
//! [process manager](process::ProcessManager) and a bounded head/tail output buffer.
//! Guest components hold the tool logic, the *policy*.
//! The bundled policies provide `execute`, `process_output`, `process_input`, `process_list`
//! and `process_signal`.
//!
//! [`ToolHost`] is the embeddable entry point.
//! Build one with [`ToolHost::builder`], list its tools, call them within a scope (an agent
//! session) with [`ToolHost::call`], and shut it down.
//! [`testing`] holds a fake process capability for testing policies without real processes.
//! [`mcp`] serves a host over the Model Context Protocol, on stdio or streamable HTTP.
//!
//! The tree follows the design:
//!
//! - `host.rs`: the embeddable host and its builder;
//! - `admission.rs`: how many calls may be in progress at once;
//! - `ask/`: asking the person: the questions a tool may ask, the signed record of them, and
//!   what the person allowed from now on;
//! - `process/`: the process capability and the real process manager;
//! - `buffer/`: the bounded head/tail output buffer;
//! - `guest/`: the guest runtime: bindings, limits, the host side of the WIT imports;
//! - `plugins/`: the plugin registry: manifests, bundled policies, hot swap;
//! - `sandbox/`: what a command may touch: profiles, and the kernel layers that enforce them;
//! - `terminal/`: pseudo-terminal views: keys, the stream view, the screen emulator;
//! - `mcp/`: the MCP server;
//! - `testing.rs`: the fake process capability.
//!
//! The `toolhost` binary (`main.rs`) adds its own commands in `cli/`, outside the library:
//! `toolhost new-policy` and `toolhost test`.

mod admission;
pub mod ask;
mod buffer;
mod error;
mod guest;
mod host;
mod keeper_binary;
pub mod mcp;
mod plugins;
pub mod process;
pub mod sandbox;
pub mod terminal;
pub mod testing;

pub use admission::{
    CallPermit, DEFAULT_CALLS_PER_CPU, DEFAULT_MAX_CALLS_CEILING, DEFAULT_MAX_CALLS_PER_SESSION,
    default_max_calls_total,
};
pub use error::HostError;
pub use error::ManifestError;
pub use guest::{
    CallError, CallOptions, CallOutput, ContentItem, EngineError, LimitExceeded, LoadError,
    LogLevel, LogSink, Progress, ProgressSink, Relay, ResourceBody, Resume, ToolLog, WIT_VERSIONS,
};
pub use host::{Call, ToolHints, ToolHost, ToolHostBuilder, ToolInfo, default_cache_dir};
pub use plugins::{PluginInfo, PluginOrigin, bundled};
pub use tokio_util::sync::CancellationToken;

/// Lock, recovering from poisoning: every lock of the host guards a few plain assignments, so
/// the data stays consistent when a holder panicked.
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
