//! toolhost: a native host that gives AI agents a shell through sandboxed WebAssembly guests.
//!
//! The host owns the dangerous, stateful parts, offered to guests as WIT imports
//! (`wit/toolhost.wit`): a [process manager](process::ProcessManager) and a bounded
//! [head/tail buffer](buffer::HeadTailBuffer). Guest components hold the tool logic, the
//! *policy*: the bundled ones provide `execute`, `process_output`, `process_list` and
//! `process_signal`. [`ToolHost`] is the embeddable entry point: build one, list its tools,
//! call them within a scope (an agent session), shut it down.

pub mod bindings;
pub mod buffer;
pub mod bundled;
mod guest_log;
mod host;
pub mod manifest;
pub mod mcp;
pub mod plugin;
pub mod process;
pub mod sandbox;
pub mod testing;
mod watch;

pub use host::{HostError, ToolHost, ToolHostBuilder, ToolInfo, default_cache_dir, plugin_files};
pub use plugin::{CallError, LoadError};
pub use sandbox::{CallOptions, Progress, ProgressSink};
pub use tokio_util::sync::CancellationToken;
