//! The store data of one call ([`CallState`]): what a guest instance has while it runs, and
//! what the caller hands in for the call ([`CallOptions`]: progress, cancellation).
//!
//! The host impls of the WIT interfaces live beside it, one file per interface
//! (`process.rs`, `output_buffer.rs`). Everything a guest could abuse is decided from this
//! state, in the host: the scope is the one the host's caller gave, never the guest's; the
//! process grant is the plugin's, from its manifest; time spent waiting in host calls is
//! tracked so that the CPU limit charges only the guest's own running time.

use super::limits::{CallLimiter, CallLimits};
use super::log::GuestLog;
use crate::process::ProcessBackend;
use crate::sandbox::{Profile, SandboxGrant, SandboxSettings};
use std::path::PathBuf;
use std::sync::Arc;
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

/// Receives progress updates of a long call: the latest output lines of the process the
/// guest is waiting on, about once a second.
pub type ProgressSink = Arc<dyn Fn(Progress) + Send + Sync>;

/// One progress update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// Milliseconds since the call began (increases across the call's waits).
    pub elapsed_ms: u64,
    /// The last few lines of output.
    pub message: String,
}

/// What a successful call returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallOutput {
    /// The result: JSON text.
    pub text: String,
    /// Processes of the calling scope whose complete output the result points to (their
    /// output text was cut), as the policy named them; unchecked: look each up with
    /// [`crate::ToolHost::output_log`] before offering it.
    pub full_output: Vec<String>,
}

/// Per-call options from the caller (an MCP session, the library user).
#[derive(Clone, Default)]
pub struct CallOptions {
    /// Where progress updates go while the guest waits on a process.
    pub progress: Option<ProgressSink>,
    /// Cancelled when the caller gives up: a wait in progress returns at once as if it had
    /// timed out, and the policy can tell why (`process.call-cancelled`).
    pub cancel: Option<CancellationToken>,
    /// The caller waits for the result however long it takes (an MCP task): the policy need
    /// not hand a command over to the background at its timeout (`process.waits-for-exit`).
    pub waits_for_exit: bool,
}

/// Store data of one call: a fresh one per call, dropped with the instance.
pub(crate) struct CallState {
    wasi: WasiCtx,
    pub(super) table: ResourceTable,
    pub(super) limiter: CallLimiter,
    pub(super) scope: String,
    pub(super) process: Option<ProcessGrant>,
    pub(super) started: Instant,
    in_host: Duration,
    stdout: GuestLog,
    stderr: GuestLog,
    pub(super) options: CallOptions,
}

impl CallState {
    /// Fresh state for a call in `scope`. The guest gets no preopened directories, no network,
    /// no environment, no arguments and no stdin; its stdout/stderr are captured for the log.
    pub(super) fn new(
        scope: &str,
        limits: &CallLimits,
        process: Option<ProcessGrant>,
        options: CallOptions,
    ) -> Self {
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
            in_host: Duration::ZERO,
            stdout,
            stderr,
            options,
        }
    }

    /// Time the guest itself has run: wall time since the call began minus time spent
    /// waiting inside host calls.
    pub(super) fn guest_time(&self) -> Duration {
        self.started.elapsed().saturating_sub(self.in_host)
    }

    /// What the guest printed to stdout and stderr (bounded), for the log and error messages.
    pub(super) fn guest_output(&self) -> (String, String) {
        (self.stdout.contents(), self.stderr.contents())
    }

    /// Run a host future, charging its time to the host rather than to the guest's CPU limit.
    pub(super) async fn in_host<F: Future>(
        &mut self,
        grant: ProcessGrant,
        f: impl FnOnce(ProcessGrant, String) -> F,
    ) -> F::Output {
        let start = Instant::now();
        let out = f(grant, self.scope.clone()).await;
        self.in_host += start.elapsed();
        out
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
