//! The store data of one call ([`CallState`]): what a guest instance has while it runs, and
//! what the caller hands in for the call ([`CallOptions`]: progress, cancellation).
//!
//! The host impls of the WIT interfaces live beside it, one file per interface
//! (`process.rs`, `output_buffer.rs`). Everything a guest could abuse is decided from this
//! state, in the host: the scope is the one the host's caller gave, never the guest's; the
//! process grant is the plugin's, from its manifest; the CPU limit is charged with the CPU
//! time of the threads while they run the call ([`CpuMeter`]), so neither waiting in host
//! calls nor waiting for a thread on a busy machine counts.

use super::content::ContentItem;
use super::limits::{CallLimiter, CallLimits};
use super::log::GuestLog;
use super::wit::{Reports, increasing};
use crate::process::ProcessBackend;
use crate::sandbox::{Profile, SandboxGrant, SandboxSettings};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// Resources (guest buffers) one call may hold at once.
const MAX_RESOURCES: usize = 4096;
/// Bytes of guest stdout/stderr kept for the host log per call.
const GUEST_LOG_BYTES: usize = 256 * 1024;

/// The process capability as granted to one plugin.
#[derive(Clone)]
pub(crate) struct ProcessGrant {
    /// Where processes run.
    pub(crate) backend: Arc<dyn ProcessBackend>,
    /// Workdirs must be inside this directory (canonicalised); also the default workdir.
    pub(crate) workdir_root: Option<PathBuf>,
    /// Longest a single `wait` may block.
    pub(crate) max_wait: Option<Duration>,
    /// Host environment variables the plugin's processes inherit (`None`: all).
    pub(crate) env_allowlist: Option<Vec<String>>,
    /// The confinement of the plugin's commands when its policy asks for nothing: the
    /// operator's settings bounded by the plugin's grant.
    pub(crate) profile: Profile,
    /// The operator's settings and the plugin's grant, which a policy's request is resolved
    /// against ([`crate::sandbox::resolve`]).
    pub(crate) operator: Arc<SandboxSettings>,
    /// See `operator`.
    pub(crate) sandbox_grant: SandboxGrant,
}

/// Receives progress updates of a call: those the tool reports itself (`report.progress`),
/// or else, while the guest waits on a process, the latest output lines about once a second.
pub type ProgressSink = Arc<dyn Fn(Progress) + Send + Sync>;

/// One progress update.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// How far the call has got. It increases from one update to the next within a call: the
    /// tool's own values, or the seconds since the call began.
    pub progress: f64,
    /// The value `progress` is heading for, when the tool knows it.
    pub total: Option<f64>,
    /// A message for a person: the tool's, or the last few lines of output.
    pub message: Option<String>,
}

/// Receives the log lines a tool writes during a call (`report.log`).
pub type LogSink = Arc<dyn Fn(ToolLog) + Send + Sync>;

/// How severe a tool's log line is, from least to most (the syslog levels MCP uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// Detail for debugging.
    Debug,
    /// Something normal happened.
    Info,
    /// Normal but significant.
    Notice,
    /// Something may be wrong.
    Warning,
    /// Something failed.
    Error,
    /// A critical condition.
    Critical,
    /// Action must be taken at once.
    Alert,
    /// The tool is unusable.
    Emergency,
}

impl LogLevel {
    /// The level's name, as MCP and syslog spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Notice => "notice",
            LogLevel::Warning => "warning",
            LogLevel::Error => "error",
            LogLevel::Critical => "critical",
            LogLevel::Alert => "alert",
            LogLevel::Emergency => "emergency",
        }
    }
}

/// One log line of a tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolLog {
    /// The plugin that wrote it.
    pub plugin: String,
    /// How severe it is.
    pub level: LogLevel,
    /// The line itself (at most 4096 bytes).
    pub message: String,
}

/// What a successful call returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallOutput {
    /// The result: JSON text. Empty when the result is its `content` alone.
    pub text: String,
    /// Processes of the calling scope whose complete output the result points to (their
    /// output text was cut), as the policy named them; unchecked: look each up with
    /// [`crate::ToolHost::output_log`] before offering it.
    pub full_output: Vec<String>,
    /// Content besides `text`, in order (plugins of WIT 0.4.0 and later).
    pub content: Vec<ContentItem>,
    /// The tool's questions, when the call cannot finish without answers and the caller
    /// relays them itself (a call without [`CallOptions::asker`] whose
    /// [`CallOptions::asking`] can ask something): `text` and `content` are empty then. The
    /// caller asks them and calls again with [`CallOptions::answers`].
    pub needs_input: Option<Relay>,
}

/// Questions a caller relays: the tool's questions it can ask, and the host's signed record of
/// them to hand back with the replies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relay {
    /// The questions to ask (each of a kind [`CallOptions::asking`] allows).
    pub questions: Vec<crate::ask::Question>,
    /// The host's signed record of this round ([`crate::ask::seal`]): the caller hands it back
    /// unchanged with the replies ([`Resume::sealed`]).
    pub sealed: String,
}

/// The replies to a call's relayed questions, for its retry.
#[derive(Debug, Clone, PartialEq)]
pub struct Resume {
    /// The replies by key, as the client gave them (JSON: an elicitation, sampling or roots
    /// result); the host reads each as its question asked.
    pub replies: Vec<(String, serde_json::Value)>,
    /// The signed record the host gave with the questions ([`Relay::sealed`]); `None`: the
    /// client sent replies without one, and the tool gets them unchecked.
    pub sealed: Option<String>,
}

/// Per-call options from the caller (an MCP session, the library user).
#[derive(Clone, Default)]
pub struct CallOptions {
    /// Where progress updates go: the tool's own, or the host's while the guest waits on a
    /// process.
    pub progress: Option<ProgressSink>,
    /// Where the tool's log lines go. Absent: they are dropped.
    pub log: Option<LogSink>,
    /// The principal whose call this is (an HTTP bearer token's name), for the record of the
    /// commands it starts.
    pub principal: Option<String>,
    /// Only the tool's own progress goes to `progress`: the host sends none while the guest
    /// waits on a process (`toolhost test`, whose processes run in logical time).
    pub tool_progress_only: bool,
    /// Cancelled when the caller gives up: a wait in progress returns at once as if it had
    /// timed out, and the policy can tell why (`process.call-cancelled`).
    pub cancel: Option<CancellationToken>,
    /// The caller waits for the result however long it takes (an MCP task): the policy need
    /// not hand a command over to the background at its timeout (`process.waits-for-exit`).
    pub waits_for_exit: bool,
    /// Whom the call may ask (WIT 0.5.0 `call-context.asking`). Default: nobody. The host's
    /// [`crate::ask::AskMode::Never`] makes it nobody whatever the caller says.
    pub asking: crate::ask::Asking,
    /// Asks the tool's questions within the call. Absent while [`Self::asking`] can ask
    /// something: the questions are the call's output ([`CallOutput::needs_input`]).
    pub asker: Option<Arc<dyn crate::ask::Asker>>,
    /// The replies to the questions this call's earlier round relayed.
    pub resume: Option<Resume>,
    /// How long one round of questions may wait for its replies. Absent: the host's
    /// (`--ask-timeout`, by default [`crate::ask::DEFAULT_ASK_TIMEOUT`]).
    pub ask_timeout: Option<Duration>,
    /// The secrets the person gave for this round of the call, by question key; a command's
    /// start takes each out (WIT 0.6.0 `start-request.secrets`). Set by the host.
    pub secrets: crate::ask::CallSecrets,
}

/// Store data of one call: a fresh one per call, dropped with the instance.
pub(crate) struct CallState {
    wasi: WasiCtx,
    pub(super) table: ResourceTable,
    pub(super) limiter: CallLimiter,
    pub(super) scope: String,
    pub(super) process: Option<ProcessGrant>,
    pub(super) started: Instant,
    cpu: Arc<CpuMeter>,
    stdout: GuestLog,
    stderr: GuestLog,
    pub(super) options: CallOptions,
    /// What the tool reported so far (`report`).
    pub(super) reports: Reports,
    /// Where the plugin's "from now on" keys are kept (`approvals`); absent when loaded
    /// without them (a tool listing).
    pub(super) approvals: Option<Arc<crate::ask::approvals::Approvals>>,
    /// The answers this round of the call got, as the record of its commands shows them: the
    /// key and the reply in a word, never a value.
    pub(super) answered: Vec<(String, String)>,
    /// Whether this round's replies, checked by the host, hold a form the person accepted with
    /// `allow` set to yes: what `process.allow-host` needs.
    pub(super) person_allowed: bool,
}

impl CallState {
    /// Fresh state for a call in `scope`. The guest gets no preopened directories, no network,
    /// no environment, no arguments and no stdin; its stdout/stderr are captured for the log.
    pub(super) fn new(
        plugin: &str,
        scope: &str,
        limits: &CallLimits,
        process: Option<ProcessGrant>,
        mut options: CallOptions,
    ) -> Self {
        options.progress = options.progress.take().map(increasing);
        let stdout = GuestLog::new(GUEST_LOG_BYTES);
        let stderr = GuestLog::new(GUEST_LOG_BYTES);
        let wasi = WasiCtx::builder()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .build();
        let mut table = ResourceTable::new();
        table.set_max_capacity(MAX_RESOURCES);
        CallState {
            wasi,
            table,
            limiter: CallLimiter::new(limits.memory_bytes),
            scope: scope.to_string(),
            process,
            started: Instant::now(),
            cpu: Arc::default(),
            stdout,
            stderr,
            options,
            reports: Reports::new(plugin),
            approvals: None,
            answered: Vec::new(),
            person_allowed: false,
        }
    }

    /// CPU time the call has used so far (see [`CpuMeter`]).
    pub(super) fn guest_time(&self) -> Duration {
        self.cpu.used()
    }

    /// The meter the call's future must be polled through ([`Metered`]).
    pub(super) fn cpu_meter(&self) -> Arc<CpuMeter> {
        self.cpu.clone()
    }

    /// What the guest printed to stdout and stderr (bounded), for the log and error messages.
    pub(super) fn guest_output(&self) -> (String, String) {
        (self.stdout.contents(), self.stderr.contents())
    }

    /// Run a host future with the grant, in the caller's scope. Its waits are not CPU time;
    /// what it computes on the call's thread counts like the guest's own work.
    pub(super) async fn in_host<F: Future>(
        &mut self,
        grant: ProcessGrant,
        f: impl FnOnce(ProcessGrant, String) -> F,
    ) -> F::Output {
        f(grant, self.scope.clone()).await
    }
}

/// The CPU time one call has used: the thread CPU time (`CLOCK_THREAD_CPUTIME_ID`) of each
/// poll of the call's future, summed over polls and threads, the poll under way included.
/// Wall time would charge a guest for the time it waited for a thread on a starved machine,
/// and stop it for CPU time it never used.
#[derive(Debug, Default)]
pub(crate) struct CpuMeter {
    /// Nanoseconds of finished polls.
    used: AtomicU64,
    /// The thread CPU clock when the poll under way began; 0 between polls.
    poll_began: AtomicU64,
}

impl CpuMeter {
    /// The calling thread's CPU clock in nanoseconds (at least 1).
    fn thread_clock() -> u64 {
        let now = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
        let nanos = u64::try_from(now.tv_sec)
            .unwrap_or(0)
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::try_from(now.tv_nsec).unwrap_or(0));
        nanos.max(1)
    }

    /// CPU time used so far. Called from inside a poll (the epoch callback runs on the
    /// polling thread), it includes the poll under way.
    pub(crate) fn used(&self) -> Duration {
        let mut nanos = self.used.load(Ordering::Relaxed);
        let began = self.poll_began.load(Ordering::Relaxed);
        if began != 0 {
            nanos = nanos.saturating_add(Self::thread_clock().saturating_sub(began));
        }
        Duration::from_nanos(nanos)
    }
}

/// A future whose every poll is charged to a [`CpuMeter`].
pub(crate) struct Metered<F> {
    inner: Pin<Box<F>>,
    meter: Arc<CpuMeter>,
}

impl<F: Future> Metered<F> {
    pub(crate) fn new(inner: F, meter: Arc<CpuMeter>) -> Self {
        Metered {
            inner: Box::pin(inner),
            meter,
        }
    }
}

impl<F: Future> Future for Metered<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        let began = CpuMeter::thread_clock();
        this.meter.poll_began.store(began, Ordering::Relaxed);
        let poll = this.inner.as_mut().poll(cx);
        let spent = CpuMeter::thread_clock().saturating_sub(began);
        this.meter.poll_began.store(0, Ordering::Relaxed);
        this.meter.used.fetch_add(spent, Ordering::Relaxed);
        poll
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}
