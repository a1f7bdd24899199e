//! The frozen 0.1.0 contract (`wit/v0.1.0/toolhost.wit`), served beside the current one so
//! that components built against it keep loading and working unchanged.
//! This module holds its version, its Rust bindings, and the conversions between its types
//! and the current contract's (not 0.2.0's: every old version converts to the latest).
//!
//! The host side of its imports delegates to the current one (the way Zed's extension host
//! serves old extension APIs).
//! Each interface module beside this one ends with its 0.1.0 part.

pub use super::latest::GuestBuffer;
use super::latest::{wit_buffer, wit_process};

wasmtime::component::bindgen!({
    path: "wit/v0.1.0",
    world: "toolhost:plugin/shell-tools",
    imports: { default: async | trappable },
    exports: { default: async },
    with: {
        "toolhost:plugin/output-buffer.head-tail-buffer": GuestBuffer,
    },
});

pub(super) use self::toolhost::plugin::output_buffer as old_buffer;
pub(super) use self::toolhost::plugin::process as old_process;
pub(crate) use exports::toolhost::plugin::tool::{
    CallContext as OldCallContext, ToolDefinition as OldToolDefinition,
};

/// The WIT package version of these bindings.
pub(crate) const WIT_VERSION: &str = "0.1.0";

impl From<OldToolDefinition> for super::latest::ToolDefinition {
    fn from(t: OldToolDefinition) -> Self {
        Self {
            name: t.name,
            description: t.description,
            input_schema: t.input_schema,
            output_schema: t.output_schema,
            // 0.1.0 has neither: clients assume the cautious values.
            title: None,
            annotations: super::latest::ToolAnnotations {
                read_only: None,
                destructive: None,
                idempotent: None,
                open_world: None,
            },
        }
    }
}

/// A latest truncation report as 0.1.0 has it.
pub(super) fn truncation(t: wit_buffer::Truncation) -> old_buffer::Truncation {
    old_buffer::Truncation {
        original_bytes: t.original_bytes,
        retained_bytes: t.retained_bytes,
        omitted_bytes: t.omitted_bytes,
        strategy: t.strategy,
    }
}

/// A latest process error as 0.1.0 has it.
pub(super) fn process_error(e: wit_process::ProcessError) -> old_process::ProcessError {
    use old_process::ProcessError as Old;
    use wit_process::ProcessError as New;
    match e {
        New::NotFound(m) => Old::NotFound(m),
        New::NotRunning(m) => Old::NotRunning(m),
        New::InvalidRequest(m) => Old::InvalidRequest(m),
        New::LimitReached(m) => Old::LimitReached(m),
        New::Failed(m) => Old::Failed(m),
    }
}

/// A latest output as 0.1.0 has it: without the log's size and cap, and without what the
/// command left running.
pub(super) fn output(o: wit_process::Output) -> old_process::Output {
    old_process::Output {
        text: o.text,
        running: o.running,
        exit_code: o.exit_code,
        signal: o.signal,
        truncation: o.truncation.map(truncation),
        cursor: o.cursor,
        log_path: o.log_path,
        duration_ms: o.duration_ms,
    }
}

/// A 0.1.0 read position as the latest contract has it.
pub(super) fn read_from(r: old_process::ReadFrom) -> wit_process::ReadFrom {
    match r {
        old_process::ReadFrom::All => wit_process::ReadFrom::All,
        old_process::ReadFrom::Cursor(c) => wit_process::ReadFrom::Cursor(c),
        old_process::ReadFrom::Unread => wit_process::ReadFrom::Unread,
    }
}
