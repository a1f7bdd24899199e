//! The frozen 0.5.0 contract (`wit/v0.5.0/toolhost.wit`), served beside the current one so
//! that components built against it keep loading and working unchanged.
//! This module holds its version, its Rust bindings, and the conversions between its types
//! and the current contract's.
//!
//! 0.6.0 added what 0.5.0 lacks: the `secret` question, its reply `secret-given`, the
//! `secret` flag of `can-ask`, `asking.secret-unavailable` and `start-request.secrets`. Every
//! other part of every interface is the same in 0.6.0, so a 0.5.0 component gets everything
//! else as a 0.6.0 one does.
//! A 0.5.0 component cannot ask a secret: it never sees the `secret` flag, and its start
//! requests name no secret.
//!
//! The host side of its imports delegates to the current one (the way Zed's extension host
//! serves old extension APIs).
//! Each interface module beside this one implements it after the current interface.

pub use super::latest::GuestBuffer;
use super::latest::{self, wit_buffer, wit_process, wit_report, wit_sandbox, wit_tool};

wasmtime::component::bindgen!({
    path: "wit/v0.5.0",
    world: "toolhost:plugin/shell-tools",
    imports: { default: async | trappable },
    exports: { default: async },
    with: {
        "toolhost:plugin/output-buffer.head-tail-buffer": GuestBuffer,
    },
});

pub(super) use self::toolhost::plugin::{approvals, output_buffer, process, report, sandbox};
use exports::toolhost::plugin::tool;
pub(crate) use exports::toolhost::plugin::tool::{
    CallContext, CallOutcome, CallResult, Content, ToolDefinition,
};

/// The WIT package version of these bindings.
pub(crate) const WIT_VERSION: &str = "0.5.0";

// What a 0.5.0 component hands the host, as the current contract has it.

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

impl From<Content> for latest::Content {
    fn from(item: Content) -> Self {
        match item {
            Content::Text(text) => Self::Text(text),
            Content::Image(media) => Self::Image(media.into()),
            Content::Audio(media) => Self::Audio(media.into()),
            Content::ResourceLink(link) => Self::ResourceLink(link.into()),
            Content::Embedded(resource) => Self::Embedded(resource.into()),
        }
    }
}

impl From<tool::Media> for wit_tool::Media {
    fn from(media: tool::Media) -> Self {
        Self {
            mime_type: media.mime_type,
            data: media.data,
        }
    }
}

impl From<tool::ResourceLink> for wit_tool::ResourceLink {
    fn from(link: tool::ResourceLink) -> Self {
        Self {
            uri: link.uri,
            name: link.name,
            title: link.title,
            description: link.description,
            mime_type: link.mime_type,
            size: link.size,
        }
    }
}

impl From<tool::EmbeddedResource> for wit_tool::EmbeddedResource {
    fn from(resource: tool::EmbeddedResource) -> Self {
        Self {
            uri: resource.uri,
            mime_type: resource.mime_type,
            body: resource.body.into(),
        }
    }
}

impl From<tool::ResourceBody> for wit_tool::ResourceBody {
    fn from(body: tool::ResourceBody) -> Self {
        match body {
            tool::ResourceBody::Text(text) => Self::Text(text),
            tool::ResourceBody::Blob(data) => Self::Blob(data),
        }
    }
}

impl From<report::Level> for wit_report::Level {
    fn from(level: report::Level) -> Self {
        use report::Level as L;
        match level {
            L::Debug => Self::Debug,
            L::Info => Self::Info,
            L::Notice => Self::Notice,
            L::Warning => Self::Warning,
            L::Error => Self::Error,
            L::Critical => Self::Critical,
            L::Alert => Self::Alert,
            L::Emergency => Self::Emergency,
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
            // 0.5.0 has no secrets.
            secrets: Vec::new(),
        }
    }
}

impl From<sandbox::Request> for wit_sandbox::Request {
    fn from(r: sandbox::Request) -> Self {
        Self {
            mode: r.mode.map(Into::into),
            network: r.network.map(Into::into),
            allowed_hosts: r.allowed_hosts,
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
            sandbox::Network::Allow => Self::Allow,
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

impl From<CallOutcome> for wit_tool::CallOutcome {
    fn from(outcome: CallOutcome) -> Self {
        match outcome {
            CallOutcome::Done(result) => Self::Done(result.into()),
            CallOutcome::NeedsInput(needs) => Self::NeedsInput(needs.into()),
        }
    }
}

impl From<CallResult> for wit_tool::CallResult {
    fn from(result: CallResult) -> Self {
        Self {
            output: result.output,
            full_output: result.full_output,
            content: result.content.into_iter().map(Into::into).collect(),
        }
    }
}

impl From<tool::NeedsInput> for wit_tool::NeedsInput {
    fn from(needs: tool::NeedsInput) -> Self {
        Self {
            questions: needs.questions.into_iter().map(Into::into).collect(),
            state: needs.state,
        }
    }
}

impl From<tool::Question> for wit_tool::Question {
    fn from(q: tool::Question) -> Self {
        Self {
            key: q.key,
            required: q.required,
            ask: match q.ask {
                tool::Ask::Form(form) => wit_tool::Ask::Form(wit_tool::Form {
                    message: form.message,
                    fields: form.fields.into_iter().map(Into::into).collect(),
                }),
                tool::Ask::Sample(sample) => wit_tool::Ask::Sample(wit_tool::Sample {
                    prompt: sample.prompt,
                    system: sample.system,
                    max_tokens: sample.max_tokens,
                }),
                tool::Ask::Roots => wit_tool::Ask::Roots,
            },
        }
    }
}

impl From<tool::Field> for wit_tool::Field {
    fn from(f: tool::Field) -> Self {
        Self {
            name: f.name,
            title: f.title,
            description: f.description,
            required: f.required,
            kind: match f.kind {
                tool::FieldKind::Text => wit_tool::FieldKind::Text,
                tool::FieldKind::YesNo => wit_tool::FieldKind::YesNo,
                tool::FieldKind::Number => wit_tool::FieldKind::Number,
                tool::FieldKind::Choice(values) => wit_tool::FieldKind::Choice(values),
            },
        }
    }
}

// What the host hands a 0.5.0 component, as 0.5.0 has it.

impl From<latest::CallContext> for CallContext {
    fn from(cx: latest::CallContext) -> Self {
        Self {
            scope: cx.scope,
            config: cx.config,
            asking: cx.asking.into(),
            answers: cx.answers.map(Into::into),
        }
    }
}

/// Without the `secret` flag and without why a secret cannot be asked: 0.5.0 cannot ask one.
impl From<wit_tool::Asking> for tool::Asking {
    fn from(asking: wit_tool::Asking) -> Self {
        let mut can = tool::CanAsk::empty();
        if asking.can.contains(wit_tool::CanAsk::FORM) {
            can |= tool::CanAsk::FORM;
        }
        if asking.can.contains(wit_tool::CanAsk::SAMPLE) {
            can |= tool::CanAsk::SAMPLE;
        }
        if asking.can.contains(wit_tool::CanAsk::ROOTS) {
            can |= tool::CanAsk::ROOTS;
        }
        Self {
            can,
            unavailable: asking.unavailable,
        }
    }
}

impl From<wit_tool::Answers> for tool::Answers {
    fn from(answers: wit_tool::Answers) -> Self {
        Self {
            replies: answers
                .replies
                .into_iter()
                .map(|answer| tool::Answer {
                    key: answer.key,
                    reply: answer.reply.into(),
                })
                .collect(),
            state: answers.state,
            checked: answers.checked,
        }
    }
}

impl From<wit_tool::Reply> for tool::Reply {
    fn from(reply: wit_tool::Reply) -> Self {
        use wit_tool::Reply as R;
        match reply {
            R::Accepted(values) => Self::Accepted(
                values
                    .into_iter()
                    .map(|v| tool::FieldValue {
                        name: v.name,
                        value: match v.value {
                            wit_tool::Value::Text(text) => tool::Value::Text(text),
                            wit_tool::Value::YesNo(yes) => tool::Value::YesNo(yes),
                            wit_tool::Value::Number(n) => tool::Value::Number(n),
                        },
                    })
                    .collect(),
            ),
            R::Declined => Self::Declined,
            R::Cancelled => Self::Cancelled,
            R::TimedOut => Self::TimedOut,
            R::NobodyToAsk => Self::NobodyToAsk,
            R::Sampled(text) => Self::Sampled(text),
            R::Roots(roots) => Self::Roots(
                roots
                    .into_iter()
                    .map(|root| tool::Root {
                        uri: root.uri,
                        name: root.name,
                    })
                    .collect(),
            ),
            R::Unusable(why) => Self::Unusable(why),
            // A 0.5.0 tool never asks a secret, so it gets no such reply.
            R::SecretGiven => Self::Unusable(
                "a secret was given, which the 0.5.0 contract cannot hold".to_owned(),
            ),
        }
    }
}

impl From<wit_sandbox::Settings> for sandbox::Settings {
    fn from(s: wit_sandbox::Settings) -> Self {
        Self {
            mode: s.mode.into(),
            network: s.network.into(),
            allowed_hosts: s.allowed_hosts,
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
            wit_sandbox::Network::Allow => Self::Allow,
            wit_sandbox::Network::None => Self::None,
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
            refusals: o.refusals.into_iter().map(Into::into).collect(),
        }
    }
}

impl From<wit_process::Refused> for process::Refused {
    fn from(refused: wit_process::Refused) -> Self {
        Self {
            reason: refused.reason.into(),
            note: refused.note,
        }
    }
}

impl From<wit_process::Refusal> for process::Refusal {
    fn from(refusal: wit_process::Refusal) -> Self {
        use wit_process::Refusal as New;
        match refusal {
            New::SpaceFull => Self::SpaceFull,
            New::SessionProcesses(n) => Self::SessionProcesses(n),
            New::Memory(kill) => Self::Memory(kill.into()),
            New::Processes(n) => Self::Processes(n),
            New::UnixSockets(sockets) => Self::UnixSockets(sockets),
            New::Network(network) => Self::Network(network.into()),
            New::HiddenPath(hidden) => Self::HiddenPath(process::HiddenPath {
                path: hidden.path,
                rule: hidden.rule,
            }),
            New::BesideHidden(beside) => Self::BesideHidden(process::BesideHidden {
                path: beside.path,
                dir: beside.dir,
            }),
            New::NoWorkspace(parents) => Self::NoWorkspace(parents),
            New::Confined(summary) => Self::Confined(summary),
        }
    }
}

impl From<wit_process::MemoryKill> for process::MemoryKill {
    fn from(kill: wit_process::MemoryKill) -> Self {
        match kill {
            wit_process::MemoryKill::Command(bytes) => Self::Command(bytes),
            wit_process::MemoryKill::Session(bytes) => Self::Session(bytes),
            wit_process::MemoryKill::Host(bytes) => Self::Host(bytes),
            wit_process::MemoryKill::Other => Self::Other,
        }
    }
}

impl From<wit_process::NetworkRefusal> for process::NetworkRefusal {
    fn from(network: wit_process::NetworkRefusal) -> Self {
        Self {
            refused: network
                .refused
                .into_iter()
                .map(|r| process::RefusedHost {
                    host: r.host,
                    reason: r.reason,
                    askable: r.askable,
                })
                .collect(),
            allowed: network.allowed,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_0_5_0_tool_is_told_nothing_of_secrets() {
        let asking = wit_tool::Asking {
            can: wit_tool::CanAsk::FORM | wit_tool::CanAsk::SECRET,
            unavailable: None,
            secret_unavailable: Some("no URL mode".to_owned()),
        };
        let old = tool::Asking::from(asking);
        assert_eq!(old.can, tool::CanAsk::FORM);
        assert_eq!(old.unavailable, None);
        assert!(matches!(
            tool::Reply::from(wit_tool::Reply::SecretGiven),
            tool::Reply::Unusable(_)
        ));
    }

    #[test]
    fn a_0_5_0_start_request_names_no_secret() {
        let request = wit_process::StartRequest::from(process::StartRequest {
            command: "true".to_owned(),
            workdir: None,
            env: Vec::new(),
            background: false,
            confinement: None,
            stdin: process::StdinMode::Closed,
        });
        assert!(request.secrets.is_empty());
    }
}
