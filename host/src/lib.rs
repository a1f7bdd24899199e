//! toolhost: a native host that gives AI agents a shell through sandboxed WebAssembly guests.
//!
//! The host owns the dangerous, stateful parts, offered to guests as WIT imports
//! (`wit/toolhost.wit`): a [process manager](process::ProcessManager) and a bounded head/tail
//! output buffer. Guest components hold the tool logic, the *policy*: the bundled ones provide
//! `execute`, `process_output`, `process_list` and `process_signal`. [`ToolHost`] is the
//! embeddable entry point: build one, list its tools, call them within a scope (an agent
//! session), shut it down.
//!
//! The tree follows the design: `process/` (the process manager), `buffer/` (the head/tail
//! buffer), `guest/` (the guest runtime: bindings, limits, the WIT imports' host side),
//! `plugins/` (the plugin registry: manifests, bundled policies, hot swap), `sandbox/` (what
//! a command may touch: profiles and the kernel layers that enforce them), `terminal/`
//! (pseudo-terminal views: keys, the stream view, the screen emulator), `host.rs` (the
//! embeddable host), `admission.rs` (how many calls may run at once), `mcp/` (the MCP
//! server), `testing.rs` (a fake process capability).

mod admission;
mod buffer;
mod error;
mod guest;
mod host;
pub mod mcp;
mod plugins;
pub mod process;
pub mod sandbox;
pub mod scenarios;
pub mod terminal;
pub mod testing;

pub use admission::{Admission, DEFAULT_MAX_CALLS, DEFAULT_MAX_CALLS_PER_SESSION};
pub use error::HostError;
pub use guest::{
    CallError, CallOptions, CallOutput, EngineError, LimitExceeded, LoadError, Progress,
    ProgressSink, WIT_VERSIONS,
};
pub use host::{ToolHints, ToolHost, ToolHostBuilder, ToolInfo, default_cache_dir};
pub use plugins::bundled;
pub use plugins::manifest::ManifestError;
pub use plugins::scaffold;
pub use tokio_util::sync::CancellationToken;

/// Lock, recovering from poisoning: every lock of the host guards a few plain assignments, so
/// the data stays consistent when a holder panicked.
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
