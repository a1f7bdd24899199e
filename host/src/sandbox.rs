//! What a guest instance sees during one call: the per-call store data ([`CallState`]) and the
//! host side of the WIT imports (process capability, head/tail buffer resource).
//!
//! Everything a guest could abuse is checked here, in the host: the scope comes from the call
//! context the host built, never from the guest; workdirs must lie under the plugin's granted
//! root; guest-created buffers draw on a per-call memory budget; time spent waiting in host
//! calls is tracked so the CPU limit charges only the guest's own running time.

use crate::bindings::{wit_buffer, wit_process};
use crate::buffer::HeadTailBuffer;
use crate::guest_log::GuestLog;
use crate::process::{ProcessBackend, ReadFrom, StartRequest};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use wasmtime::ResourceLimiter;
use wasmtime::component::{Resource, ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// Bytes charged for a guest buffer beyond its head and tail (struct and table entry).
const BUFFER_OVERHEAD: usize = 256;
/// Resources (guest buffers) one call may hold at once.
const MAX_RESOURCES: usize = 4096;
/// Elements a single table may grow to.
const MAX_TABLE_ELEMENTS: usize = 1_000_000;

/// One memory budget per call, shared by every linear memory, every table and every guest
/// buffer of the call: a component cannot multiply its limit by declaring several memories.
pub struct CallLimiter {
    limit: usize,
    used: usize,
}

impl CallLimiter {
    fn charge(&mut self, bytes: usize, what: &str) -> wasmtime::Result<()> {
        match self.used.checked_add(bytes) {
            Some(total) if total <= self.limit => {
                self.used = total;
                Ok(())
            }
            _ => Err(wasmtime::format_err!(
                "memory limit exceeded: {what} needs {bytes} more bytes, {} of {} in use",
                self.used,
                self.limit
            )),
        }
    }

    fn release(&mut self, bytes: usize) {
        self.used = self.used.saturating_sub(bytes);
    }
}

impl ResourceLimiter for CallLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.charge(desired.saturating_sub(current), "linear memory")?;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > MAX_TABLE_ELEMENTS {
            wasmtime::bail!(
                "memory limit exceeded: a table may hold at most {MAX_TABLE_ELEMENTS} elements"
            );
        }
        let bytes = desired.saturating_sub(current) * std::mem::size_of::<usize>();
        self.charge(bytes, "a table")?;
        Ok(true)
    }

    fn instances(&self) -> usize {
        16
    }

    fn tables(&self) -> usize {
        64
    }

    fn memories(&self) -> usize {
        16
    }
}

/// Largest head or tail a guest may ask a buffer for.
const MAX_GUEST_BUFFER_PART: u32 = 16 * 1024 * 1024;
/// Bytes of guest stdout/stderr kept for the host log per call.
const GUEST_LOG_BYTES: usize = 256 * 1024;

/// A guest-created head/tail buffer (the `head-tail-buffer` WIT resource).
pub struct GuestBuffer {
    inner: HeadTailBuffer,
    size: usize,
}

/// The process capability as granted to one plugin.
#[derive(Clone)]
pub struct ProcessGrant {
    /// Where processes run.
    pub backend: Arc<dyn ProcessBackend>,
    /// Workdirs must be inside this directory (canonicalised); also the default workdir.
    pub workdir_root: Option<PathBuf>,
    /// Longest a single `wait` may block.
    pub max_wait: Option<Duration>,
    /// Host environment variables the plugin's processes inherit (`None`: all).
    pub env_allowlist: Option<Vec<String>>,
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

/// How often a waiting call reports progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// Lines of output in one progress update.
const PROGRESS_LINES: usize = 5;

/// Per-call options from the caller (an MCP session, the library user).
#[derive(Clone, Default)]
pub struct CallOptions {
    /// Where progress updates go while the guest waits on a process.
    pub progress: Option<ProgressSink>,
    /// Cancelled when the caller gives up: a wait in progress returns at once as if it had
    /// timed out, so the policy handles the process as it handles a timeout.
    pub cancel: Option<CancellationToken>,
}

/// Limits applied to one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallLimits {
    /// Linear memories, tables and guest buffers together.
    pub memory_bytes: usize,
    /// Guest running time (time waiting in host calls is not counted).
    pub cpu_time: Duration,
    /// Whole call, waits included.
    pub wall_time: Duration,
}

impl Default for CallLimits {
    fn default() -> Self {
        CallLimits {
            memory_bytes: 64 * 1024 * 1024,
            cpu_time: Duration::from_secs(5),
            wall_time: Duration::from_secs(60 * 60),
        }
    }
}

/// Store data of one call: a fresh one per call, dropped with the instance.
pub struct CallState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: CallLimiter,
    scope: String,
    process: Option<ProcessGrant>,
    started: Instant,
    in_host: Duration,
    stdout: GuestLog,
    stderr: GuestLog,
    options: CallOptions,
}

impl CallState {
    /// Fresh state for a call in `scope`. The guest gets no preopened directories, no network,
    /// no environment, no arguments and no stdin; its stdout/stderr are captured for the log.
    pub fn new(
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
        CallState {
            wasi,
            table: {
                let mut table = ResourceTable::new();
                table.set_max_capacity(MAX_RESOURCES);
                table
            },
            limiter: CallLimiter {
                limit: limits.memory_bytes,
                used: 0,
            },
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
    pub fn guest_time(&self) -> Duration {
        self.started.elapsed().saturating_sub(self.in_host)
    }

    /// What the guest printed to stdout and stderr (bounded), for the log and error messages.
    pub fn guest_output(&self) -> (String, String) {
        (self.stdout.contents(), self.stderr.contents())
    }

    fn grant(&self) -> wasmtime::Result<&ProcessGrant> {
        // No grant while a component lists its tools at load, and none for a plugin without
        // the process grant (such a component is refused at load anyway): trap.
        self.process
            .as_ref()
            .ok_or_else(|| wasmtime::format_err!("this plugin has no process grant"))
    }

    fn check_request(
        grant: &ProcessGrant,
        request: wit_process::StartRequest,
    ) -> Result<StartRequest, wit_process::ProcessError> {
        let workdir = match (&request.workdir, &grant.workdir_root) {
            (None, root) => root.clone(),
            (Some(dir), None) => Some(PathBuf::from(dir)),
            (Some(dir), Some(root)) => {
                let path = PathBuf::from(dir);
                let path = if path.is_relative() {
                    root.join(path)
                } else {
                    path
                };
                let canonical = path.canonicalize().map_err(|e| {
                    wit_process::ProcessError::InvalidRequest(format!(
                        "workdir `{dir}` cannot be used: {e}"
                    ))
                })?;
                if !canonical.starts_with(root) {
                    return Err(wit_process::ProcessError::InvalidRequest(format!(
                        "workdir `{dir}` is outside the directory this plugin may use ({})",
                        root.display()
                    )));
                }
                Some(canonical)
            }
        };
        Ok(StartRequest {
            command: request.command,
            workdir,
            env: request.env,
            background: request.background,
            inherit_env: grant.env_allowlist.clone(),
        })
    }

    /// Run a host future, charging its time to the host rather than to the guest's CPU limit.
    async fn in_host<F: Future>(
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

impl wit_process::Host for CallState {
    async fn start(
        &mut self,
        request: wit_process::StartRequest,
    ) -> wasmtime::Result<Result<String, wit_process::ProcessError>> {
        let grant = self.grant()?;
        let request = match Self::check_request(grant, request) {
            Ok(r) => r,
            Err(e) => return Ok(Err(e)),
        };
        let grant = grant.clone();
        let result = self
            .in_host(grant, |g, scope| async move {
                g.backend.start(&scope, request).await
            })
            .await;
        Ok(result.map_err(Into::into))
    }

    async fn wait(
        &mut self,
        id: String,
        timeout_ms: u64,
        from: wit_process::ReadFrom,
    ) -> wasmtime::Result<Result<wit_process::Output, wit_process::ProcessError>> {
        let grant = self.grant()?;
        let mut timeout = Duration::from_millis(timeout_ms);
        if let Some(max) = grant.max_wait {
            timeout = timeout.min(max);
        }
        let from: ReadFrom = from.into();
        let grant = grant.clone();
        let options = self.options.clone();
        let call_started = self.started;
        let result = self
            .in_host(grant, |g, scope| async move {
                let wait = Wait {
                    id: &id,
                    timeout,
                    from,
                    call_started,
                };
                wait_with_options(&*g.backend, &scope, wait, &options).await
            })
            .await;
        Ok(result.map(Into::into).map_err(Into::into))
    }

    async fn read(
        &mut self,
        id: String,
        from: wit_process::ReadFrom,
    ) -> wasmtime::Result<Result<wit_process::Output, wit_process::ProcessError>> {
        let grant = self.grant()?;
        Ok(grant
            .backend
            .read(&self.scope, &id, from.into())
            .map(Into::into)
            .map_err(Into::into))
    }

    async fn list(&mut self) -> wasmtime::Result<Vec<wit_process::ProcessInfo>> {
        let grant = self.grant()?;
        Ok(grant
            .backend
            .list(&self.scope)
            .into_iter()
            .map(Into::into)
            .collect())
    }

    async fn send_signal(
        &mut self,
        id: String,
        signal: wit_process::Signal,
    ) -> wasmtime::Result<Result<(), wit_process::ProcessError>> {
        let grant = self.grant()?;
        Ok(grant
            .backend
            .signal(&self.scope, &id, signal.into())
            .map_err(Into::into))
    }
}

/// Wait on a process, reporting progress and honouring cancellation when the caller asked for
/// them. Without either it is a single event-driven wait.
/// One wait request of a guest.
struct Wait<'a> {
    id: &'a str,
    timeout: Duration,
    from: ReadFrom,
    /// When the call began: progress is measured from there, so it only ever increases
    /// across the waits of one call.
    call_started: Instant,
}

async fn wait_with_options(
    backend: &dyn ProcessBackend,
    scope: &str,
    wait: Wait<'_>,
    options: &CallOptions,
) -> Result<crate::process::OutputSnapshot, crate::process::ProcessError> {
    let Wait {
        id,
        timeout,
        from,
        call_started,
    } = wait;
    if options.progress.is_none() && options.cancel.is_none() {
        return backend.wait(scope, id, timeout, from).await;
    }
    let started = Instant::now();
    let cancel = options.cancel.clone().unwrap_or_default();
    // The first update carries the latest lines written so far, even those written before
    // this wait began.
    let mut reported = 0;
    loop {
        let left = timeout.saturating_sub(started.elapsed());
        let step = match options.progress {
            Some(_) => left.min(PROGRESS_EVERY),
            None => left,
        };
        let snapshot = tokio::select! {
            r = backend.wait(scope, id, step, ReadFrom::Cursor(u64::MAX)) => r?,
            _ = cancel.cancelled() => break,
        };
        if !snapshot.running || started.elapsed() >= timeout {
            break;
        }
        if let Some(progress) = &options.progress
            && snapshot.cursor > reported
        {
            let fresh = backend.read(scope, id, ReadFrom::Cursor(reported))?;
            reported = fresh.cursor;
            let lines: Vec<&str> = fresh
                .text
                .lines()
                .filter(|l| !l.trim().is_empty())
                .collect();
            let last = &lines[lines.len().saturating_sub(PROGRESS_LINES)..];
            if !last.is_empty() {
                progress(Progress {
                    elapsed_ms: call_started.elapsed().as_millis() as u64,
                    message: last.join("\n"),
                });
            }
        }
    }
    backend.read(scope, id, from)
}

impl wit_buffer::Host for CallState {}

impl wit_buffer::HostHeadTailBuffer for CallState {
    async fn new(
        &mut self,
        head_bytes: u32,
        tail_bytes: u32,
    ) -> wasmtime::Result<Resource<GuestBuffer>> {
        let head = head_bytes.clamp(1, MAX_GUEST_BUFFER_PART) as usize;
        let tail = tail_bytes.clamp(1, MAX_GUEST_BUFFER_PART) as usize;
        let size = head + tail + BUFFER_OVERHEAD;
        self.limiter.charge(size, "a guest buffer")?;
        Ok(self.table.push(GuestBuffer {
            inner: HeadTailBuffer::new(head, tail),
            size,
        })?)
    }

    async fn write(
        &mut self,
        buffer: Resource<GuestBuffer>,
        data: Vec<u8>,
    ) -> wasmtime::Result<()> {
        self.table.get_mut(&buffer)?.inner.write(&data);
        Ok(())
    }

    async fn total_bytes(&mut self, buffer: Resource<GuestBuffer>) -> wasmtime::Result<u64> {
        Ok(self.table.get(&buffer)?.inner.total_bytes())
    }

    async fn render(
        &mut self,
        buffer: Resource<GuestBuffer>,
    ) -> wasmtime::Result<wit_buffer::Rendered> {
        let rendered = self.table.get(&buffer)?.inner.render();
        Ok(wit_buffer::Rendered {
            text: rendered.text,
            truncation: rendered.truncation.map(Into::into),
        })
    }

    async fn drop(&mut self, buffer: Resource<GuestBuffer>) -> wasmtime::Result<()> {
        let removed = self.table.delete(buffer)?;
        self.limiter.release(removed.size);
        Ok(())
    }
}
