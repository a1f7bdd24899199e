//! The process capability: what guests may ask of the host about processes.
//!
//! [`ProcessBackend`] is the seam between the WIT imports and whatever runs processes: the
//! real [`ProcessManager`] (keepers, bounded capture, reaping) or the scripted fake in
//! [`crate::testing`]. Every method takes the caller's scope, which the host fills in from the
//! call context; a process of another scope is reported as not found.

mod manager;

use std::path::PathBuf;
use std::time::Duration;

pub use crate::buffer::Truncation;
use crate::sandbox::Profile;
use crate::terminal::{Key, Screen, TerminalSize};
pub use manager::{
    DEFAULT_RECORD_BYTES, ProcessManager, ProcessManagerConfig, RecordSettings, WorkspaceSource,
    namespaces_available, namespaces_here,
};

/// A command to run.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StartRequest {
    /// Passed to the shell as `sh -c COMMAND`.
    pub command: String,
    /// Working directory; `None` means the backend's default.
    pub workdir: Option<PathBuf>,
    /// Variables added to the host environment (these win).
    pub env: Vec<(String, String)>,
    /// Started in the background (informational).
    pub background: bool,
    /// Which host environment variables the process inherits: `None` means all of them,
    /// `Some(names)` only those (a plugin's `env` grant). `env` is added either way.
    pub inherit_env: Option<Vec<String>>,
    /// The confinement to run under; `None` means the backend's default (the operator's
    /// settings). Resolved by the host from the operator's settings, the plugin's grant and
    /// the policy's request ([`crate::sandbox::resolve`]).
    pub profile: Option<Profile>,
    /// What the command reads as input, and whether it runs on a terminal.
    pub stdin: Stdin,
    /// Who asked for the command, for the record; set by the host, never by a guest.
    pub origin: Origin,
    /// Secrets the person gave in the call, as variables of this command only: name and
    /// value. They win over `env` and the host's variables; the command's output has each
    /// value replaced with `[secret]`.
    pub secrets: Vec<(String, crate::ask::Secret)>,
}

/// Who asked for a command: the plugin whose policy started it and the principal whose call
/// that was (an HTTP bearer token's name), when known.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Origin {
    /// The plugin.
    pub plugin: Option<String>,
    /// The principal.
    pub principal: Option<String>,
    /// The answers the person gave in the call that started it, before it: each question's
    /// key and the reply in a word or two (`accepted`, `declined`, ...), never a value given.
    pub answers: Vec<(String, String)>,
}

/// What a command reads as its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Stdin {
    /// `/dev/null`; output through a pipe.
    #[default]
    Closed,
    /// A pipe the caller writes ([`ProcessBackend::write_input`]); output through a pipe.
    Pipe,
    /// A pseudo-terminal of this size for stdin, stdout, stderr and as the controlling
    /// terminal. Output reads in the stream view ([`crate::terminal::stream_view`]).
    Terminal(TerminalSize),
}

/// Most bytes one [`ProcessBackend::write_input`] may send (text and keys together).
pub const MAX_INPUT_BYTES: usize = 64 * 1024;

/// The most hosts a scope's person may allow beyond the network allow-list
/// ([`ProcessBackend::allow_host`]).
pub const MAX_ALLOWED_HOSTS: usize = crate::sandbox::network::MAX_ALLOWED_HOSTS;

/// What [`ProcessBackend::wait_until`] waits for, besides the exit and the timeout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Until {
    /// Only the exit.
    Exit,
    /// Any output after the read position.
    Output,
    /// Output after the read position containing this text (in the stream view for a
    /// terminal).
    Text(String),
    /// No new output for this long (the first interval counts from the call).
    Quiet(Duration),
}

/// Where a read of a process's output starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadFrom {
    /// All retained output.
    All,
    /// Output after this byte position.
    Cursor(u64),
    /// Output after the end of the previous `All` or `Unread` read of this process
    /// (`Cursor` reads do not move that mark).
    Unread,
}

/// A signal for a process and everything it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM, escalating to SIGKILL after the grace period.
    Terminate,
    /// SIGKILL.
    Kill,
    /// SIGINT.
    Interrupt,
}

impl Signal {
    /// The lowercase name used by tools (`terminate`, `kill`, `interrupt`).
    pub fn name(self) -> &'static str {
        match self {
            Signal::Terminate => "terminate",
            Signal::Kill => "kill",
            Signal::Interrupt => "interrupt",
        }
    }
}

/// A process's output and state at the moment of a read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OutputSnapshot {
    /// Rendered output from the requested position; always valid UTF-8.
    pub text: String,
    /// Still running.
    pub running: bool,
    /// Exit code once exited (128+N when killed by signal N).
    pub exit_code: Option<i32>,
    /// Terminating signal name, e.g. `SIGKILL`.
    pub signal: Option<String>,
    /// Present when output in the requested range is missing from `text`.
    pub truncation: Option<Truncation>,
    /// Total bytes written by the process so far.
    pub cursor: u64,
    /// File holding the complete output (up to the cap).
    pub log_path: Option<PathBuf>,
    /// Bytes of the process's output the file holds.
    pub log_bytes: Option<u64>,
    /// The file lacks output written after its first `log_bytes` bytes (it was capped).
    pub log_capped: bool,
    /// Milliseconds from start to exit, or to now.
    pub duration_ms: u64,
    /// Processes it started that still run after it exited (empty while it runs).
    pub left_running: Vec<Leftover>,
    /// What the confinement refused it, each with the note `text` ends with for it, once it
    /// ended (empty while it runs).
    pub refusals: Vec<crate::sandbox::Refused>,
}

/// A process a command started that still runs after the command itself exited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    /// Its pid as the command's processes see it (inside their PID namespace, if any).
    pub pid: i32,
    /// Its command line, cut to 80 characters.
    pub command: String,
}

/// A page of a process's full output, read from its log file
/// ([`ProcessBackend::read_log`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LogPage {
    /// The page's bytes as text: invalid UTF-8 is replaced, and a character cut at either
    /// end of the page is left to the neighbouring page.
    pub text: String,
    /// Where the page starts, in bytes from the beginning of the output.
    pub offset: u64,
    /// Where the next page starts.
    pub next_offset: u64,
    /// Bytes of output the log holds.
    pub total_bytes: u64,
    /// The log lacks output written after its first `total_bytes` bytes (the host's cap).
    pub capped: bool,
    /// The process still runs: the log may grow.
    pub running: bool,
}

/// Most bytes one [`ProcessBackend::read_log`] returns.
pub const MAX_LOG_PAGE_BYTES: u64 = 256 * 1024;

/// One process in a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessInfo {
    /// Short opaque id.
    pub id: String,
    /// Command as given.
    pub command: String,
    /// Working directory it ran in.
    pub workdir: PathBuf,
    /// Started in the background.
    pub background: bool,
    /// Still running.
    pub running: bool,
    /// Start time, Unix ms.
    pub started_ms: u64,
    /// Exit time, Unix ms.
    pub exited_ms: Option<u64>,
    /// Exit code (128+N for signal N).
    pub exit_code: Option<i32>,
    /// Terminating signal name.
    pub signal: Option<String>,
    /// The confinement it runs under ([`Profile::summary`]).
    pub profile: String,
    /// What it was started with as input.
    pub stdin: Stdin,
    /// Processes it started that still run after it exited (empty while it runs).
    pub left_running: Vec<Leftover>,
}

/// A process's full output log file, as [`ProcessBackend::output_logs`] lists it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct OutputLog {
    /// The id of the process that wrote it.
    pub process_id: String,
    /// The file.
    pub path: PathBuf,
}

/// Why a process operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProcessError {
    /// No such process in the caller's scope.
    #[error("no process with id `{0}`")]
    NotFound(String),
    /// The process has exited already.
    #[error("process `{0}` is not running (it and every process it started have exited)")]
    NotRunning(String),
    /// The request is wrong (empty command, bad workdir, ...).
    #[error("{0}")]
    InvalidRequest(String),
    /// A limit was reached (running processes per scope, ...).
    #[error("{0}")]
    LimitReached(String),
    /// The OS refused (spawn or signal failed).
    #[error("{0}")]
    Failed(String),
}

/// A boxed, sendable future, so that [`ProcessBackend`] can be used as a trait object.
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Something that runs processes for guests. All methods are scoped; see the module docs.
///
/// Used as `Arc<dyn ProcessBackend>`; async methods return [`BoxFuture`]s.
pub trait ProcessBackend: Send + Sync + 'static {
    /// Start a process; returns its id.
    fn start<'a>(
        &'a self,
        scope: &'a str,
        request: StartRequest,
    ) -> BoxFuture<'a, Result<String, ProcessError>>;

    /// Wait until exit or `timeout`, then read from `from`. Returns as soon as it exits.
    fn wait<'a>(
        &'a self,
        scope: &'a str,
        id: &'a str,
        timeout: Duration,
        from: ReadFrom,
    ) -> BoxFuture<'a, Result<OutputSnapshot, ProcessError>>;

    /// Read output from `from` without waiting.
    fn read(&self, scope: &str, id: &str, from: ReadFrom) -> Result<OutputSnapshot, ProcessError>;

    /// The scope's processes: running first, then newest first.
    fn list(&self, scope: &str) -> Vec<ProcessInfo>;

    /// Whether the scope has a process running, or what a finished one left running. The
    /// default reads [`ProcessBackend::list`]; a backend that can tell without building every
    /// process's description (and reading `/proc` for its leftovers) answers itself.
    fn has_processes(&self, scope: &str) -> bool {
        self.list(scope)
            .iter()
            .any(|process| process.running || !process.left_running.is_empty())
    }

    /// Signal the process and everything it started. `Terminate` escalates to SIGKILL after
    /// the grace period without the caller waiting for it.
    fn signal(&self, scope: &str, id: &str, signal: Signal) -> Result<(), ProcessError>;

    /// Terminate every process of `scope` (the session ended) and wait until they are gone
    /// (bounded by the kill grace period).
    fn end_scope<'a>(&'a self, scope: &'a str) -> BoxFuture<'a, ()>;

    /// Make `dir`'s project the workspace of `scope` (a root its MCP client offered): the
    /// writable root and default working directory of its next commands. Returns the
    /// workspace the scope has then, or why `dir` cannot be one; `None` when this backend's
    /// scopes keep one workspace (the default).
    fn choose_workspace<'a>(
        &'a self,
        scope: &'a str,
        dir: &'a std::path::Path,
        from: WorkspaceSource,
    ) -> BoxFuture<'a, Result<Option<PathBuf>, ProcessError>> {
        let _ = (scope, dir, from);
        Box::pin(std::future::ready(Ok(None)))
    }

    /// Let the commands of `scope` reach `host` (a host pattern) from now on, beyond the
    /// network allow-list, after its person allowed it: within the operator's
    /// `--network ask=PATTERNS`, at most [`MAX_ALLOWED_HOSTS`] per scope. Returns the hosts
    /// allowed this way in `scope` so far. The default: no backend widens a network.
    fn allow_host(&self, scope: &str, host: &str) -> Result<Vec<String>, ProcessError> {
        let _ = (scope, host);
        Err(ProcessError::InvalidRequest(
            "this process backend cannot let a session reach more hosts".to_owned(),
        ))
    }

    /// Let the commands of `scope` ask `question` while it is held: a connection to a host the
    /// person may allow (`--network ask`) then waits for their answer instead of being
    /// refused. `None`: nothing to hold (no `--network ask`, or a backend without a network
    /// gate, the default).
    fn hold_host_question(
        &self,
        scope: &str,
        question: std::sync::Arc<dyn crate::sandbox::network::HostQuestion>,
    ) -> Option<crate::sandbox::network::HeldQuestion> {
        let _ = (scope, question);
        None
    }

    /// Note that `scope` belongs to `owner` (a principal of an HTTP server): its processes
    /// then count in the owner's share of running processes as well as in the scope's and
    /// the host's. Called before each call of the scope; the first owner noted stays. The
    /// default: no shares, nothing noted.
    fn set_owner(&self, scope: &str, owner: &str) {
        let _ = (scope, owner);
    }

    /// Write `data` (on a terminal with each `\n` sent as Enter, `\r`), then `keys`, to the
    /// process's input; at most [`MAX_INPUT_BYTES`] in all. The default: no process takes
    /// input.
    fn write_input<'a>(
        &'a self,
        scope: &'a str,
        id: &'a str,
        data: &'a [u8],
        keys: &'a [Key],
    ) -> BoxFuture<'a, Result<(), ProcessError>> {
        let _ = (scope, data, keys);
        Box::pin(async move { Err(no_input(id)) })
    }

    /// End the process's input pipe (end-of-file). The default: no process takes input.
    fn close_input<'a>(
        &'a self,
        scope: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, Result<(), ProcessError>> {
        let _ = scope;
        Box::pin(async move { Err(no_input(id)) })
    }

    /// Resize the process's terminal. The default: no process has a terminal.
    fn resize(&self, scope: &str, id: &str, size: TerminalSize) -> Result<(), ProcessError> {
        let _ = (scope, size);
        Err(no_terminal(id))
    }

    /// The visible screen of the process's terminal. The default: no process has a terminal.
    fn screen(&self, scope: &str, id: &str) -> Result<Screen, ProcessError> {
        let _ = scope;
        Err(no_terminal(id))
    }

    /// The full output log of process `id` of `scope`, when it has one that still exists;
    /// never another scope's. The default: no logs.
    fn output_log(&self, scope: &str, id: &str) -> Option<PathBuf> {
        let _ = (scope, id);
        None
    }

    /// A page of the full output of process `id`: at most `max_bytes` bytes (and at most
    /// [`MAX_LOG_PAGE_BYTES`]) from byte `offset` of its log; a negative `offset` counts from
    /// the log's end. The default: no logs.
    fn read_log(
        &self,
        scope: &str,
        id: &str,
        offset: i64,
        max_bytes: u64,
    ) -> Result<LogPage, ProcessError> {
        let _ = (scope, offset, max_bytes);
        Err(no_log(id))
    }

    /// The processes of `scope` that have a full output log, with their files. The default:
    /// none.
    fn output_logs(&self, scope: &str) -> Vec<OutputLog> {
        let _ = scope;
        Vec::new()
    }

    /// Wait until `until` holds, the process exits or `timeout` passes, then read from
    /// `from`. The default handles only [`Until::Exit`] (as [`ProcessBackend::wait`]) and
    /// otherwise reads at once.
    fn wait_until<'a>(
        &'a self,
        scope: &'a str,
        id: &'a str,
        until: Until,
        timeout: Duration,
        from: ReadFrom,
    ) -> BoxFuture<'a, Result<OutputSnapshot, ProcessError>> {
        match until {
            Until::Exit => self.wait(scope, id, timeout, from),
            _ => Box::pin(async move { self.read(scope, id, from) }),
        }
    }
}

/// The error for input to a process that takes none.
pub(crate) fn no_input(id: &str) -> ProcessError {
    ProcessError::InvalidRequest(format!(
        "process `{id}` takes no input: it was started with its stdin closed (start it with a \
         terminal or an open stdin to type into it)"
    ))
}

/// The error for a log read of a process without a log.
pub(crate) fn no_log(id: &str) -> ProcessError {
    ProcessError::InvalidRequest(format!(
        "process `{id}` has no output log (the host keeps none, or it was removed): only the \
         output its reads return is available"
    ))
}

/// The error for a terminal operation on a process without one.
pub(crate) fn no_terminal(id: &str) -> ProcessError {
    ProcessError::InvalidRequest(format!(
        "process `{id}` has no terminal (it was not started on one)"
    ))
}
