//! The frozen 0.3.0 contract (`wit/v0.3.0/toolhost.wit`), served beside the current one so
//! that components built against it keep loading and working unchanged.
//! This module holds its version, its Rust bindings, and the conversions between its types
//! and the current contract's.
//!
//! 0.4.0 added what 0.3.0 lacks: content items in a call's result and the `report` import
//! (progress and log lines). Every interface 0.3.0 has is the same in 0.4.0, so a 0.3.0
//! component gets everything else as a 0.4.0 one does.
//!
//! The host side of its imports delegates to the current one (the way Zed's extension host
//! serves old extension APIs).
//! Each interface module beside this one implements it after the current interface.

pub use super::latest::GuestBuffer;
use super::latest::{self, wit_buffer, wit_process, wit_sandbox};

wasmtime::component::bindgen!({
    path: "wit/v0.3.0",
    world: "toolhost:plugin/shell-tools",
    imports: { default: async | trappable },
    exports: { default: async },
    with: {
        "toolhost:plugin/output-buffer.head-tail-buffer": GuestBuffer,
    },
});

pub(super) use self::toolhost::plugin::{output_buffer, process, sandbox};
pub(crate) use exports::toolhost::plugin::tool::{CallContext, CallResult, ToolDefinition};

/// The WIT package version of these bindings.
pub(crate) const WIT_VERSION: &str = "0.3.0";

// What a 0.3.0 component hands the host, as the current contract has it.

impl From<ToolDefinition> for latest::ToolDefinition {
    fn from(t: ToolDefinition) -> Self {
        Self {
            name: t.name,
            description: t.description,
            input_schema: t.input_schema,
            output_schema: t.output_schema,
            title: t.title,
            annotations: latest::ToolAnnotations {
                read_only: t.annotations.read_only,
                destructive: t.annotations.destructive,
                idempotent: t.annotations.idempotent,
                open_world: t.annotations.open_world,
            },
        }
    }
}

impl From<process::StartRequest> for wit_process::StartRequest {
    fn from(r: process::StartRequest) -> Self {
        Self {
            command: r.command,
            workdir: r.workdir,
            env: r.env,
            background: r.background,
            confinement: r.confinement.map(Into::into),
            stdin: r.stdin.into(),
            // 0.3.0 has no secrets.
            secrets: Vec::new(),
        }
    }
}

impl From<sandbox::Request> for wit_sandbox::Request {
    fn from(r: sandbox::Request) -> Self {
        Self {
            mode: r.mode.map(Into::into),
            network: r.network.map(Into::into),
            allowed_hosts: None,
            hidden: r.hidden,
            limits: r.limits.into(),
        }
    }
}

impl From<sandbox::Mode> for wit_sandbox::Mode {
    fn from(mode: sandbox::Mode) -> Self {
        match mode {
            sandbox::Mode::Off => Self::Off,
            sandbox::Mode::WorkspaceWrite => Self::WorkspaceWrite,
            sandbox::Mode::ReadOnly => Self::ReadOnly,
        }
    }
}

impl From<sandbox::Network> for wit_sandbox::Network {
    fn from(network: sandbox::Network) -> Self {
        match network {
            sandbox::Network::Full => Self::Full,
            sandbox::Network::None => Self::None,
        }
    }
}

impl From<sandbox::Limits> for wit_sandbox::Limits {
    fn from(l: sandbox::Limits) -> Self {
        Self {
            memory_bytes: l.memory_bytes,
            processes: l.processes,
            cpu_seconds: l.cpu_seconds,
        }
    }
}

impl From<process::StdinMode> for wit_process::StdinMode {
    fn from(mode: process::StdinMode) -> Self {
        match mode {
            process::StdinMode::Closed => Self::Closed,
            process::StdinMode::Pipe => Self::Pipe,
            process::StdinMode::Terminal(size) => Self::Terminal(size.into()),
        }
    }
}

impl From<process::TerminalSize> for wit_process::TerminalSize {
    fn from(size: process::TerminalSize) -> Self {
        Self {
            rows: size.rows,
            cols: size.cols,
        }
    }
}

impl From<process::ReadFrom> for wit_process::ReadFrom {
    fn from(r: process::ReadFrom) -> Self {
        match r {
            process::ReadFrom::All => Self::All,
            process::ReadFrom::Cursor(c) => Self::Cursor(c),
            process::ReadFrom::Unread => Self::Unread,
        }
    }
}

impl From<process::Signal> for wit_process::Signal {
    fn from(s: process::Signal) -> Self {
        match s {
            process::Signal::Terminate => Self::Terminate,
            process::Signal::Kill => Self::Kill,
            process::Signal::Interrupt => Self::Interrupt,
        }
    }
}

impl From<process::Key> for wit_process::Key {
    fn from(key: process::Key) -> Self {
        use process::Key as K;
        match key {
            K::Enter => Self::Enter,
            K::Tab => Self::Tab,
            K::Escape => Self::Escape,
            K::Backspace => Self::Backspace,
            K::Up => Self::Up,
            K::Down => Self::Down,
            K::Left => Self::Left,
            K::Right => Self::Right,
            K::Home => Self::Home,
            K::End => Self::End,
            K::PageUp => Self::PageUp,
            K::PageDown => Self::PageDown,
            K::Function(n) => Self::Function(n),
            K::Ctrl(c) => Self::Ctrl(c),
        }
    }
}

impl From<process::Until> for wit_process::Until {
    fn from(until: process::Until) -> Self {
        match until {
            process::Until::Exit => Self::Exit,
            process::Until::Output => Self::Output,
            process::Until::Text(text) => Self::Text(text),
            process::Until::Quiet(ms) => Self::Quiet(ms),
        }
    }
}

// What the host hands a 0.3.0 component, as 0.3.0 has it.

impl From<latest::CallContext> for CallContext {
    fn from(cx: latest::CallContext) -> Self {
        Self {
            scope: cx.scope,
            config: cx.config,
        }
    }
}

impl From<wit_sandbox::Settings> for sandbox::Settings {
    fn from(s: wit_sandbox::Settings) -> Self {
        Self {
            mode: s.mode.into(),
            network: s.network.into(),
            writable: s.writable,
            limits: s.limits.into(),
            summary: s.summary,
        }
    }
}

impl From<wit_sandbox::Mode> for sandbox::Mode {
    fn from(mode: wit_sandbox::Mode) -> Self {
        match mode {
            wit_sandbox::Mode::Off => Self::Off,
            wit_sandbox::Mode::WorkspaceWrite => Self::WorkspaceWrite,
            wit_sandbox::Mode::ReadOnly => Self::ReadOnly,
        }
    }
}

impl From<wit_sandbox::Network> for sandbox::Network {
    fn from(network: wit_sandbox::Network) -> Self {
        match network {
            wit_sandbox::Network::Full => Self::Full,
            // No route out but through the gate: of the two this contract names, the one that
            // does not claim more (`settings.summary` names the allowed hosts).
            wit_sandbox::Network::Allow | wit_sandbox::Network::None => Self::None,
        }
    }
}

impl From<wit_sandbox::Limits> for sandbox::Limits {
    fn from(l: wit_sandbox::Limits) -> Self {
        Self {
            memory_bytes: l.memory_bytes,
            processes: l.processes,
            cpu_seconds: l.cpu_seconds,
        }
    }
}

impl From<wit_buffer::Truncation> for output_buffer::Truncation {
    fn from(t: wit_buffer::Truncation) -> Self {
        Self {
            original_bytes: t.original_bytes,
            retained_bytes: t.retained_bytes,
            omitted_bytes: t.omitted_bytes,
            strategy: t.strategy,
        }
    }
}

impl From<wit_buffer::Rendered> for output_buffer::Rendered {
    fn from(r: wit_buffer::Rendered) -> Self {
        Self {
            text: r.text,
            truncation: r.truncation.map(Into::into),
        }
    }
}

impl From<wit_process::ProcessError> for process::ProcessError {
    fn from(e: wit_process::ProcessError) -> Self {
        use wit_process::ProcessError as New;
        match e {
            New::NotFound(m) => Self::NotFound(m),
            New::NotRunning(m) => Self::NotRunning(m),
            New::InvalidRequest(m) => Self::InvalidRequest(m),
            New::LimitReached(m) => Self::LimitReached(m),
            New::Failed(m) => Self::Failed(m),
        }
    }
}

impl From<wit_process::Output> for process::Output {
    fn from(o: wit_process::Output) -> Self {
        Self {
            text: o.text,
            running: o.running,
            exit_code: o.exit_code,
            signal: o.signal,
            truncation: o.truncation.map(Into::into),
            cursor: o.cursor,
            log_path: o.log_path,
            log_bytes: o.log_bytes,
            log_capped: o.log_capped,
            duration_ms: o.duration_ms,
            left_running: o.left_running.into_iter().map(Into::into).collect(),
        }
    }
}

impl From<wit_process::ProcessInfo> for process::ProcessInfo {
    fn from(p: wit_process::ProcessInfo) -> Self {
        Self {
            id: p.id,
            command: p.command,
            workdir: p.workdir,
            background: p.background,
            running: p.running,
            started_ms: p.started_ms,
            exited_ms: p.exited_ms,
            exit_code: p.exit_code,
            signal: p.signal,
            profile: p.profile,
            stdin: p.stdin.into(),
            left_running: p.left_running.into_iter().map(Into::into).collect(),
        }
    }
}

impl From<wit_process::StdinMode> for process::StdinMode {
    fn from(mode: wit_process::StdinMode) -> Self {
        match mode {
            wit_process::StdinMode::Closed => Self::Closed,
            wit_process::StdinMode::Pipe => Self::Pipe,
            wit_process::StdinMode::Terminal(size) => Self::Terminal(size.into()),
        }
    }
}

impl From<wit_process::TerminalSize> for process::TerminalSize {
    fn from(size: wit_process::TerminalSize) -> Self {
        Self {
            rows: size.rows,
            cols: size.cols,
        }
    }
}

impl From<wit_process::Screen> for process::Screen {
    fn from(s: wit_process::Screen) -> Self {
        Self {
            rows: s.rows,
            cursor_row: s.cursor_row,
            cursor_col: s.cursor_col,
            cursor_hidden: s.cursor_hidden,
            alternate: s.alternate,
            size: s.size.into(),
        }
    }
}

impl From<wit_process::Leftover> for process::Leftover {
    fn from(l: wit_process::Leftover) -> Self {
        Self {
            pid: l.pid,
            command: l.command,
        }
    }
}

impl From<wit_process::LogPage> for process::LogPage {
    fn from(page: wit_process::LogPage) -> Self {
        Self {
            text: page.text,
            offset: page.offset,
            next_offset: page.next_offset,
            total_bytes: page.total_bytes,
            capped: page.capped,
            running: page.running,
        }
    }
}
