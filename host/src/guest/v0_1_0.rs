//! The frozen 0.1.0 contract (`wit/v0.1.0/toolhost.wit`), served beside the current one so
//! that components built against it keep loading and working unchanged.
//!
//! Its imports are implemented by delegating to the current ones (the way Zed's extension
//! host serves old extension APIs): a 0.1.0 start request is a 0.2.0 request without a
//! confinement, so its commands get the plugin's bound (the operator's settings narrowed by
//! the manifest); a 0.1.0 listing is a 0.2.0 listing without the profile.

pub use super::bindings::GuestBuffer;
use super::bindings::{wit_buffer, wit_process};
use super::state::CallState;
use wasmtime::component::Resource;

wasmtime::component::bindgen!({
    path: "../wit/v0.1.0",
    world: "toolhost:plugin/shell-tools",
    imports: { default: async | trappable },
    exports: { default: async },
    with: {
        "toolhost:plugin/output-buffer.head-tail-buffer": GuestBuffer,
    },
});

use self::toolhost::plugin::output_buffer as old_buffer;
use self::toolhost::plugin::process as old_process;
pub(crate) use exports::toolhost::plugin::tool::{
    CallContext as OldCallContext, ToolDefinition as OldToolDefinition,
};

/// The WIT package version of these bindings.
pub(crate) const WIT_VERSION: &str = "0.1.0";

impl From<OldToolDefinition> for super::bindings::ToolDefinition {
    fn from(t: OldToolDefinition) -> Self {
        Self {
            name: t.name,
            description: t.description,
            input_schema: t.input_schema,
            output_schema: t.output_schema,
            // 0.1.0 has neither: clients assume the cautious values.
            title: None,
            annotations: super::bindings::ToolAnnotations {
                read_only: None,
                destructive: None,
                idempotent: None,
                open_world: None,
            },
        }
    }
}

fn truncation(t: wit_buffer::Truncation) -> old_buffer::Truncation {
    old_buffer::Truncation {
        original_bytes: t.original_bytes,
        retained_bytes: t.retained_bytes,
        omitted_bytes: t.omitted_bytes,
        strategy: t.strategy,
    }
}

fn process_error(e: wit_process::ProcessError) -> old_process::ProcessError {
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

fn output(o: wit_process::Output) -> old_process::Output {
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

fn read_from(r: old_process::ReadFrom) -> wit_process::ReadFrom {
    match r {
        old_process::ReadFrom::All => wit_process::ReadFrom::All,
        old_process::ReadFrom::Cursor(c) => wit_process::ReadFrom::Cursor(c),
        old_process::ReadFrom::Unread => wit_process::ReadFrom::Unread,
    }
}

impl old_process::Host for CallState {
    async fn start(
        &mut self,
        request: old_process::StartRequest,
    ) -> wasmtime::Result<Result<String, old_process::ProcessError>> {
        let request = wit_process::StartRequest {
            command: request.command,
            workdir: request.workdir,
            env: request.env,
            background: request.background,
            confinement: None,
            stdin: wit_process::StdinMode::Closed,
        };
        let result = wit_process::Host::start(self, request).await?;
        Ok(result.map_err(process_error))
    }

    async fn wait(
        &mut self,
        id: String,
        timeout_ms: u64,
        from: old_process::ReadFrom,
    ) -> wasmtime::Result<Result<old_process::Output, old_process::ProcessError>> {
        let result = wit_process::Host::wait(self, id, timeout_ms, read_from(from)).await?;
        Ok(result.map(output).map_err(process_error))
    }

    async fn read(
        &mut self,
        id: String,
        from: old_process::ReadFrom,
    ) -> wasmtime::Result<Result<old_process::Output, old_process::ProcessError>> {
        let result = wit_process::Host::read(self, id, read_from(from)).await?;
        Ok(result.map(output).map_err(process_error))
    }

    async fn list(&mut self) -> wasmtime::Result<Vec<old_process::ProcessInfo>> {
        let list = wit_process::Host::list(self).await?;
        Ok(list
            .into_iter()
            .map(|p| old_process::ProcessInfo {
                id: p.id,
                command: p.command,
                workdir: p.workdir,
                background: p.background,
                running: p.running,
                started_ms: p.started_ms,
                exited_ms: p.exited_ms,
                exit_code: p.exit_code,
                signal: p.signal,
            })
            .collect())
    }

    async fn send_signal(
        &mut self,
        id: String,
        signal: old_process::Signal,
    ) -> wasmtime::Result<Result<(), old_process::ProcessError>> {
        let signal = match signal {
            old_process::Signal::Terminate => wit_process::Signal::Terminate,
            old_process::Signal::Kill => wit_process::Signal::Kill,
            old_process::Signal::Interrupt => wit_process::Signal::Interrupt,
        };
        let result = wit_process::Host::send_signal(self, id, signal).await?;
        Ok(result.map_err(process_error))
    }
}

impl old_buffer::Host for CallState {}

impl old_buffer::HostHeadTailBuffer for CallState {
    async fn new(
        &mut self,
        head_bytes: u32,
        tail_bytes: u32,
    ) -> wasmtime::Result<Resource<GuestBuffer>> {
        wit_buffer::HostHeadTailBuffer::new(self, head_bytes, tail_bytes).await
    }

    async fn write(
        &mut self,
        buffer: Resource<GuestBuffer>,
        data: Vec<u8>,
    ) -> wasmtime::Result<()> {
        wit_buffer::HostHeadTailBuffer::write(self, buffer, data).await
    }

    async fn total_bytes(&mut self, buffer: Resource<GuestBuffer>) -> wasmtime::Result<u64> {
        wit_buffer::HostHeadTailBuffer::total_bytes(self, buffer).await
    }

    async fn render(
        &mut self,
        buffer: Resource<GuestBuffer>,
    ) -> wasmtime::Result<old_buffer::Rendered> {
        let rendered = wit_buffer::HostHeadTailBuffer::render(self, buffer).await?;
        Ok(old_buffer::Rendered {
            text: rendered.text,
            truncation: rendered.truncation.map(truncation),
        })
    }

    async fn drop(&mut self, buffer: Resource<GuestBuffer>) -> wasmtime::Result<()> {
        wit_buffer::HostHeadTailBuffer::drop(self, buffer).await
    }
}
