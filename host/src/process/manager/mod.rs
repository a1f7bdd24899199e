//! [`ProcessManager`], the real [`ProcessBackend`]: runs `SHELL -c COMMAND` for guests.
//!
//! How a process is run:
//!
//! * It is created from the manager's own spawner thread (`spawner.rs` says why not from the
//!   calling thread), the way `posix_spawn` does it (`clone(CLONE_VM | CLONE_VFORK)`, so the
//!   host's memory is never copied or made copy-on-write; `sys.rs`). Before `exec` the child
//!   leads its own session and process group, asks the kernel for `SIGKILL` when the spawner
//!   thread dies, and closes every descriptor but its stdio. Signals go to the whole group,
//!   so they reach grandchildren too. A start abandoned half-way (its future dropped) kills
//!   and reaps what it spawned.
//! * Its stdout and stderr are the write end of one pipe, so output is merged in the order it
//!   was written; stdin is `/dev/null`. One task (the process's *monitor*) reads the pipe into a
//!   [`HeadTailBuffer`] and appends it to `<state_dir>/<id>.log` (capped; the file is created
//!   at the first output, so silent commands cost no file). The log file is created, written
//!   and deleted without holding any lock, so a slow file system never holds up the calls
//!   that look at the records (`list`, `read`, ...). At end-of-file the monitor closes the
//!   pipe and the log file and frees its read buffer, so a retained record holds no
//!   descriptor.
//! * The monitor learns of the exit from a pidfd (or, on kernels without pidfds, `SIGCHLD`),
//!   never by polling. It then keeps draining the pipe until end-of-file or `drain_timeout`, so
//!   a daemonised grandchild holding the pipe open cannot hang anyone, and then marks the
//!   process finished, which wakes every waiter through a `watch` channel. Output that still
//!   arrives afterwards keeps being recorded until end-of-file or until the record goes.
//! * The exited leader is observed with `WNOWAIT` and stays a zombie until the record is
//!   removed. While it does, its pid, which is also its process group id, cannot be reused,
//!   so signalling the group can never hit an unrelated process, and group members that
//!   outlive the leader can still be signalled (and are, by `SIGTERM`'s escalation to
//!   `SIGKILL`). `retention` after the exit the record is removed, or earlier when its scope
//!   has more than `max_retained_per_scope` finished records (oldest first): leftover group
//!   members (daemonised grandchildren) are killed, the leader is reaped and the log file is
//!   deleted. If a monitor stops early (a panic, the runtime shutting down), it kills the
//!   group, gives back the scope's slot and removes the record all the same.
//! * What is guaranteed to end with the host: [`ProcessManager::shutdown`] stops every
//!   group gracefully (`SIGTERM`, then `SIGKILL` after `kill_grace`), and dropping the
//!   manager `SIGKILL`s every group before it returns (the leaders are then reaped from a
//!   short-lived thread, so the drop never waits for them), so neither leaves any group
//!   member behind. If the host itself is killed outright (`SIGKILL`, a crash), only the
//!   leaders die, through the parent-death signal, which the kernel does not pass on to their
//!   children: the leaders' children and grandchildren survive, re-parented. A child that
//!   moves itself into a new session with `setsid` leaves the group and is never tracked.
//!
//! The host must not set `SIGCHLD` to `SIG_IGN` (children would be reaped behind our back).

mod output_log;
mod spawner;
mod sys;

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::sys::signal::{Signal as NixSignal, killpg};
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;
use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio::time::Instant;

use super::{
    BoxFuture, OutputSnapshot, ProcessBackend, ProcessError, ProcessInfo, ReadFrom, Signal,
    StartRequest,
};
use crate::buffer::{DEFAULT_HEAD_BYTES, DEFAULT_TAIL_BYTES, HeadTailBuffer};
use output_log::OutputLog;
use spawner::Spawner;
use sys::{ChildSpec, Exit, SpawnStep, WaitTarget};

/// Bytes read from a pipe at a time, at most.
const READ_CHUNK: usize = 256 * 1024;
/// Bytes read from a pipe at a time at first (grown when reads fill it).
const FIRST_READ_CHUNK: usize = 4 * 1024;
/// After `SIGKILL`, how much longer than `drain_timeout` a stop waits for monitors to finish.
const KILL_SETTLE: Duration = Duration::from_secs(1);

/// Settings of a [`ProcessManager`]. `Default` gives the production values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessManagerConfig {
    /// The shell that runs commands as `SHELL -c COMMAND`. Default `/bin/sh`.
    pub shell: PathBuf,
    /// Working directory when a request names none, and the base of relative ones.
    /// `None` (the default) means the host's current directory.
    pub default_workdir: Option<PathBuf>,
    /// Bytes kept from the start of each process's output. Default 16 KiB.
    pub head_bytes: usize,
    /// Bytes kept from the end of each process's output. Default 16 KiB.
    pub tail_bytes: usize,
    /// Time between `SIGTERM` and the `SIGKILL` that follows it. Default 5 s.
    pub kill_grace: Duration,
    /// How long an exited process stays listed and readable. Default 5 min.
    pub retention: Duration,
    /// Running processes allowed per scope. Default 64.
    pub max_running_per_scope: usize,
    /// Finished processes kept listed per scope: past this, the oldest finished record is
    /// removed before its retention ends. Default 256.
    pub max_retained_per_scope: usize,
    /// How long to keep reading output after the process exits, for grandchildren that still
    /// hold the pipe. Default 2 s.
    pub drain_timeout: Duration,
    /// Keep each process's complete output in a log file. Default `true`.
    pub output_logs: bool,
    /// Directory of the log files; `None` (the default) means
    /// [`ProcessManagerConfig::default_state_dir`].
    pub state_dir: Option<PathBuf>,
    /// Bytes written to a log file at most; output past the cap is not logged. Default 64 MiB.
    pub log_cap_bytes: u64,
    /// Niceness added to every process (0 leaves the priority alone). Default 5.
    pub nice: i32,
}

impl Default for ProcessManagerConfig {
    fn default() -> Self {
        Self {
            shell: PathBuf::from("/bin/sh"),
            default_workdir: None,
            head_bytes: DEFAULT_HEAD_BYTES,
            tail_bytes: DEFAULT_TAIL_BYTES,
            kill_grace: Duration::from_secs(5),
            retention: Duration::from_secs(5 * 60),
            max_running_per_scope: 64,
            max_retained_per_scope: 256,
            drain_timeout: Duration::from_secs(2),
            output_logs: true,
            state_dir: None,
            log_cap_bytes: 64 * 1024 * 1024,
            nice: 5,
        }
    }
}

impl ProcessManagerConfig {
    /// The default log directory: `$XDG_STATE_HOME/toolhost/output`, else
    /// `$HOME/.local/state/toolhost/output`; `None` when neither variable is an absolute path.
    pub fn default_state_dir() -> Option<PathBuf> {
        output_log::default_state_dir()
    }
}

/// Runs processes for guests: process groups, merged bounded output, full-output log files,
/// per-scope limits and isolation, reaping. See the module documentation.
///
/// Create it with [`ProcessManager::new`] inside a Tokio runtime; use it as
/// `Arc<dyn ProcessBackend>`.
pub struct ProcessManager {
    config: ProcessManagerConfig,
    log_dir: Option<Arc<Path>>,
    runtime: Handle,
    this: Weak<ProcessManager>,
    spawner: Option<Spawner>,
    seed: u64,
    counter: AtomicU64,
    table: Mutex<Table>,
    closed: watch::Sender<bool>,
    log_warned: Arc<AtomicBool>,
}

#[derive(Default)]
struct Table {
    entries: HashMap<String, Arc<Entry>>,
    /// Per scope (absent when idle: nothing running, starting or retained).
    scopes: HashMap<String, ScopeState>,
}

#[derive(Default)]
struct ScopeState {
    /// Records that are not finished: the limit is checked against these and `starting`.
    running: usize,
    /// Starts that passed the limit check and have no record yet.
    starting: usize,
    /// Finished records still listed, oldest finished first.
    finished: VecDeque<Arc<Entry>>,
    /// Bumped by `end_scope`: a start that reserved its slot under an older generation is
    /// not admitted.
    generation: u64,
}

impl Table {
    fn scope(&mut self, scope: &str) -> &mut ScopeState {
        self.scopes.entry(scope.to_owned()).or_default()
    }

    fn forget_if_idle(&mut self, scope: &str) {
        if self.scopes.get(scope).is_some_and(|state| {
            state.running == 0 && state.starting == 0 && state.finished.is_empty()
        }) {
            self.scopes.remove(scope);
        }
    }

    /// Whether `entry` is the listed record of its id.
    fn lists(&self, entry: &Arc<Entry>) -> bool {
        self.entries
            .get(&entry.id)
            .is_some_and(|current| Arc::ptr_eq(current, entry))
    }
}

impl ProcessManager {
    /// Create a manager. Its tasks run on the current Tokio runtime, and it starts one thread
    /// from which all processes are created (it lives as long as the manager; see the module
    /// documentation).
    ///
    /// The log directory is created here; if that fails, a warning is logged and processes
    /// run without log files.
    ///
    /// # Panics
    ///
    /// When called outside a Tokio runtime.
    pub fn new(config: ProcessManagerConfig) -> Arc<Self> {
        let runtime = Handle::current();
        let mut log_warned = false;
        let log_dir = if config.output_logs {
            let dir = config
                .state_dir
                .clone()
                .or_else(ProcessManagerConfig::default_state_dir);
            match &dir {
                None => {
                    tracing::warn!(
                        "no directory for output logs (neither XDG_STATE_HOME nor HOME is set); \
                         processes run without log files"
                    );
                }
                Some(dir) => {
                    if let Err(error) = output_log::create_dir(dir) {
                        tracing::warn!(
                            dir = %dir.display(), %error,
                            "cannot create the output log directory; processes run without log files"
                        );
                        log_warned = true;
                    }
                }
            }
            dir
        } else {
            None
        };
        let spawner = match Spawner::new() {
            Ok(spawner) => Some(spawner),
            Err(error) => {
                tracing::error!(%error, "cannot start the process spawner thread");
                None
            }
        };
        let (closed, _) = watch::channel(false);
        Arc::new_cyclic(|this| Self {
            config,
            log_dir: log_dir.map(Arc::from),
            runtime,
            this: this.clone(),
            spawner,
            seed: random_seed(),
            counter: AtomicU64::new(0),
            table: Mutex::new(Table::default()),
            closed,
            log_warned: Arc::new(AtomicBool::new(log_warned)),
        })
    }

    /// The configuration in use.
    pub fn config(&self) -> &ProcessManagerConfig {
        &self.config
    }

    /// The directory log files are written to, if logging is on.
    pub fn log_dir(&self) -> Option<&Path> {
        self.log_dir.as_deref()
    }

    /// Stop everything: refuse new starts, send `SIGTERM` to every process group, wait up to
    /// `kill_grace` for them to finish, `SIGKILL` what is left, then remove every record and
    /// log file. Dropping the manager afterwards has nothing left to do.
    pub async fn shutdown(&self) {
        let entries: Vec<Arc<Entry>> = {
            let table = lock(&self.table);
            self.closed.send_replace(true);
            table.entries.values().cloned().collect()
        };
        self.stop_all(&entries).await;
        for entry in &entries {
            self.remove(entry);
        }
    }

    fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    async fn start_process(
        &self,
        scope: &str,
        request: StartRequest,
    ) -> Result<String, ProcessError> {
        let StartRequest {
            command,
            workdir,
            env,
            background,
            inherit_env,
        } = request;
        if self.is_closed() {
            return Err(shut_down());
        }
        validate_command(&command)?;
        validate_env(&env)?;
        let workdir = self.resolve_workdir(workdir)?;
        let Some(spawner) = &self.spawner else {
            return Err(ProcessError::Failed(
                "cannot start processes: the spawner thread could not be created".to_owned(),
            ));
        };
        let reservation = self.reserve(scope)?;
        let (seq, id) = self.next_id();

        let pipe_error = |error: io::Error| {
            ProcessError::Failed(format!("cannot create the output pipe: {error}"))
        };
        // One pipe (both ends close-on-exec in the parent); the child gets the write end as
        // both stdout and stderr.
        // The default capacity: asking for more (`F_SETPIPE_SZ`) would count against the
        // user's pipe allowance (`pipe-user-pages-soft`), past which every new pipe of the
        // user gets a single page.
        let (reader, writer) = io::pipe().map_err(pipe_error)?;
        let output = pipe::Receiver::from_owned_fd(OwnedFd::from(reader)).map_err(pipe_error)?;
        let spec = ChildSpec::new(
            &self.config.shell,
            &command,
            &env,
            inherit_env.as_deref(),
            &workdir,
            OwnedFd::from(writer),
            self.config.nice,
        )
        .map_err(|error| {
            ProcessError::Failed(format!(
                "cannot prepare `{}`: {error}",
                self.config.shell.display()
            ))
        })?;
        let started_at = Instant::now();
        let started_ms = unix_ms();
        let mut spawned = spawner.spawn(spec).await.map_err(|error| {
            if error.step == SpawnStep::Chdir {
                // E.g. a directory without search permission, or one removed just now.
                ProcessError::InvalidRequest(format!(
                    "working directory `{}` cannot be entered: {}",
                    workdir.display(),
                    error.error
                ))
            } else {
                ProcessError::Failed(format!(
                    "cannot start `{}`: {error}",
                    self.config.shell.display()
                ))
            }
        })?;
        // No await below: once spawned, the process is always handed to a monitor. Until
        // then, dropping `spawned` (an early return) kills and reaps it.

        let exit_watch = ExitWatch::new(spawned.take_pidfd()).map_err(|error| {
            ProcessError::Failed(format!(
                "cannot watch the new process for its exit: {error}"
            ))
        })?;
        let log = match &self.log_dir {
            Some(dir) => LogSlot::Pending(LogTarget {
                dir: Arc::clone(dir),
                cap: self.config.log_cap_bytes,
                warned: Arc::clone(&self.log_warned),
            }),
            None => LogSlot::Off,
        };
        let (finished, _) = watch::channel(false);
        let entry = Arc::new(Entry {
            seq,
            id: id.clone(),
            scope: scope.to_owned(),
            command,
            workdir,
            background,
            started_ms,
            started_at,
            counted: AtomicBool::new(false),
            leader: Mutex::new(Some(spawned.pid())),
            state: Mutex::new(EntryState {
                buffer: HeadTailBuffer::new(self.config.head_bytes, self.config.tail_bytes),
                last_read_end: 0,
                end: None,
                log_path: None,
                disposed: false,
            }),
            finished,
            removed: watch::channel(false).0,
        });
        let refused = {
            let mut table = lock(&self.table);
            let generation = table.scopes.get(scope).map(|state| state.generation);
            let refused = if self.is_closed() {
                Some(shut_down())
            } else if generation != Some(reservation.generation) {
                Some(ProcessError::Failed(
                    "the session ended while the process was starting".to_owned(),
                ))
            } else {
                None
            };
            reservation.release(&mut table);
            if refused.is_none() {
                table.entries.insert(id.clone(), Arc::clone(&entry));
                table.scope(scope).running += 1;
                entry.counted.store(true, Ordering::Relaxed);
            }
            refused
        };
        if refused.is_some() {
            // Shut down, or the scope ended, while we were spawning: kill it; the monitor
            // sees it die, then cleans up without lingering.
            let _ = entry.signal_group(NixSignal::SIGKILL);
            entry.removed.send_replace(true);
        }
        let monitor = Monitor {
            guard: MonitorGuard {
                manager: self.this.clone(),
                entry,
            },
            exit_watch,
            output: OutputReader {
                pipe: output,
                buf: vec![0u8; FIRST_READ_CHUNK],
                log,
            },
            drain_timeout: self.config.drain_timeout,
            retention: self.config.retention,
            closed: self.closed.subscribe(),
        };
        // The monitor's guard owns the process from here (even if the task never runs).
        spawned.disarm();
        self.runtime.spawn(monitor.run());
        match refused {
            None => Ok(id),
            Some(error) => Err(error),
        }
    }

    fn resolve_workdir(&self, requested: Option<PathBuf>) -> Result<PathBuf, ProcessError> {
        let base = || match &self.config.default_workdir {
            Some(dir) => Ok(dir.clone()),
            None => std::env::current_dir().map_err(|error| {
                ProcessError::Failed(format!(
                    "cannot determine the host's working directory: {error}"
                ))
            }),
        };
        let dir = match requested {
            Some(path) if path.is_absolute() => path,
            Some(path) => base()?.join(path),
            None => base()?,
        };
        match std::fs::metadata(&dir) {
            Ok(meta) if meta.is_dir() => Ok(dir),
            Ok(_) => Err(ProcessError::InvalidRequest(format!(
                "working directory `{}` is not a directory",
                dir.display()
            ))),
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                Err(ProcessError::InvalidRequest(format!(
                    "working directory `{}` does not exist",
                    dir.display()
                )))
            }
            Err(error) => Err(ProcessError::InvalidRequest(format!(
                "working directory `{}` is not accessible: {error}",
                dir.display()
            ))),
        }
    }

    fn reserve(&self, scope: &str) -> Result<Reservation<'_>, ProcessError> {
        let mut table = lock(&self.table);
        let busy = table
            .scopes
            .get(scope)
            .map_or(0, |state| state.running + state.starting);
        let max = self.config.max_running_per_scope;
        if busy >= max {
            return Err(ProcessError::LimitReached(format!(
                "too many running processes: this session already has {busy} (the limit is \
                 {max}); wait for one to finish or stop one before starting another"
            )));
        }
        let state = table.scope(scope);
        state.starting += 1;
        Ok(Reservation {
            manager: self,
            scope: scope.to_owned(),
            generation: state.generation,
            armed: true,
        })
    }

    fn next_id(&self) -> (u64, String) {
        let seq = self.counter.fetch_add(1, Ordering::Relaxed);
        (seq, format!("{:012x}", permute48(seq, self.seed)))
    }

    /// Record the end of a process and release its slot in the scope's count. If the scope
    /// now retains too many finished records, the oldest is removed.
    fn finish(&self, entry: &Arc<Entry>, ended: Ended) {
        let evicted = {
            let mut table = lock(&self.table);
            lock(&entry.state).end = Some(ended);
            let counted = entry.counted.swap(false, Ordering::Relaxed);
            let listed = table.lists(entry);
            let max = self.config.max_retained_per_scope;
            let mut evicted = None;
            if counted || listed {
                let state = table.scope(&entry.scope);
                if counted {
                    state.running = state.running.saturating_sub(1);
                }
                if listed {
                    state.finished.push_back(Arc::clone(entry));
                    if state.finished.len() > max {
                        evicted = state.finished.pop_front();
                    }
                }
                if let Some(old) = &evicted {
                    table.entries.remove(&old.id);
                }
                table.forget_if_idle(&entry.scope);
            }
            evicted
        };
        entry.finished.send_replace(true);
        if let Some(old) = evicted {
            old.dispose();
        }
    }

    fn find(&self, scope: &str, id: &str) -> Result<Arc<Entry>, ProcessError> {
        lock(&self.table)
            .entries
            .get(id)
            .filter(|entry| entry.scope == scope)
            .cloned()
            .ok_or_else(|| ProcessError::NotFound(id.to_owned()))
    }

    /// Drop the record (if it is still this one) and release everything it holds.
    fn remove(&self, entry: &Arc<Entry>) {
        {
            let mut table = lock(&self.table);
            if table.lists(entry) {
                table.entries.remove(&entry.id);
                if let Some(state) = table.scopes.get_mut(&entry.scope) {
                    state.finished.retain(|other| !Arc::ptr_eq(other, entry));
                }
                table.forget_if_idle(&entry.scope);
            }
        }
        entry.dispose();
    }

    /// `SIGTERM` every group, wait up to `kill_grace` for the processes to finish, then
    /// `SIGKILL` every group (leftover grandchildren of finished processes included) and wait
    /// for the monitors to notice.
    async fn stop_all(&self, entries: &[Arc<Entry>]) {
        if entries.is_empty() {
            return;
        }
        for entry in entries {
            let _ = entry.signal_group(NixSignal::SIGTERM);
        }
        let deadline = Instant::now().checked_add(self.config.kill_grace);
        for entry in entries {
            entry.wait_finished(deadline).await;
        }
        for entry in entries {
            let _ = entry.signal_group(NixSignal::SIGKILL);
        }
        let settle = self.config.drain_timeout.saturating_add(KILL_SETTLE);
        let deadline = Instant::now().checked_add(settle);
        for entry in entries {
            entry.wait_finished(deadline).await;
        }
    }

    fn send_signal(&self, scope: &str, id: &str, signal: Signal) -> Result<(), ProcessError> {
        let entry = self.find(scope, id)?;
        // A finished process can still be signalled while members of its group outlive it.
        if !entry.is_running() && !entry.has_leftovers() {
            return Err(ProcessError::NotRunning(id.to_owned()));
        }
        let os_signal = match signal {
            Signal::Terminate => NixSignal::SIGTERM,
            Signal::Kill => NixSignal::SIGKILL,
            Signal::Interrupt => NixSignal::SIGINT,
        };
        entry.signal_group(os_signal).map_err(|errno| match errno {
            Errno::ESRCH => ProcessError::NotRunning(id.to_owned()),
            other => ProcessError::Failed(format!(
                "cannot send {} to process `{id}`: {other}",
                os_signal.as_str()
            )),
        })?;
        if signal == Signal::Terminate {
            // Whatever is left of the group after the grace is killed, even when the leader
            // finished in time: members may ignore `SIGTERM` and outlive it. While the leader
            // is unreaped this is safe (a group left with only the zombie takes no harm);
            // once it is reaped, `signal_group` sends nothing.
            let grace = self.config.kill_grace;
            self.runtime.spawn(async move {
                tokio::time::sleep(grace).await;
                let _ = entry.signal_group(NixSignal::SIGKILL);
            });
        }
        Ok(())
    }
}

impl ProcessBackend for ProcessManager {
    fn start<'a>(
        &'a self,
        scope: &'a str,
        request: StartRequest,
    ) -> BoxFuture<'a, Result<String, ProcessError>> {
        Box::pin(self.start_process(scope, request))
    }

    fn wait<'a>(
        &'a self,
        scope: &'a str,
        id: &'a str,
        timeout: Duration,
        from: ReadFrom,
    ) -> BoxFuture<'a, Result<OutputSnapshot, ProcessError>> {
        Box::pin(async move {
            let entry = self.find(scope, id)?;
            entry
                .wait_finished(Instant::now().checked_add(timeout))
                .await;
            Ok(entry.snapshot(from))
        })
    }

    fn read(&self, scope: &str, id: &str, from: ReadFrom) -> Result<OutputSnapshot, ProcessError> {
        Ok(self.find(scope, id)?.snapshot(from))
    }

    fn list(&self, scope: &str) -> Vec<ProcessInfo> {
        let mut rows: Vec<(u64, ProcessInfo)> = lock(&self.table)
            .entries
            .values()
            .filter(|entry| entry.scope == scope)
            .map(|entry| (entry.seq, entry.info()))
            .collect();
        rows.sort_by(|(a_seq, a), (b_seq, b)| b.running.cmp(&a.running).then(b_seq.cmp(a_seq)));
        rows.into_iter().map(|(_, info)| info).collect()
    }

    fn signal(&self, scope: &str, id: &str, signal: Signal) -> Result<(), ProcessError> {
        self.send_signal(scope, id, signal)
    }

    fn end_scope<'a>(&'a self, scope: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let entries: Vec<Arc<Entry>> = {
                let mut table = lock(&self.table);
                // Starts under way now are refused (and their process killed) when they
                // would be admitted.
                if let Some(state) = table.scopes.get_mut(scope) {
                    state.generation = state.generation.wrapping_add(1);
                }
                table
                    .entries
                    .values()
                    .filter(|entry| entry.scope == scope)
                    .cloned()
                    .collect()
            };
            self.stop_all(&entries).await;
        })
    }
}

impl Drop for ProcessManager {
    /// `SIGKILL` every process group before returning, hand the leaders to a short-lived
    /// thread that reaps them as they die (so the dropping thread, possibly a runtime worker,
    /// never waits for them), then delete the log files.
    fn drop(&mut self) {
        self.closed.send_replace(true);
        let entries: Vec<Arc<Entry>> = lock(&self.table)
            .entries
            .drain()
            .map(|(_, entry)| entry)
            .collect();
        let leaders: Vec<Pid> = entries
            .iter()
            .filter_map(|entry| {
                // Taken out under the lock, so nobody signals the group or reaps the leader
                // after this: the pid is ours alone until `reap_all_soon` reaps it.
                let pid = lock(&entry.leader).take()?;
                let _ = killpg(pid, NixSignal::SIGKILL);
                Some(pid)
            })
            .collect();
        sys::reap_all_soon(leaders);
        for entry in &entries {
            entry.remove_log();
        }
    }
}

impl fmt::Debug for ProcessManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessManager")
            .field("config", &self.config)
            .field("log_dir", &self.log_dir)
            .field("processes", &lock(&self.table).entries.len())
            .finish_non_exhaustive()
    }
}

/// A slot counted against the scope's limit while a start is under way.
struct Reservation<'a> {
    manager: &'a ProcessManager,
    scope: String,
    /// The scope's generation when the slot was taken.
    generation: u64,
    armed: bool,
}

impl Reservation<'_> {
    /// Give the slot back under the caller's table lock (the record takes its place).
    fn release(mut self, table: &mut Table) {
        self.armed = false;
        unreserve(table, &self.scope);
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.armed {
            unreserve(&mut lock(&self.manager.table), &self.scope);
        }
    }
}

fn unreserve(table: &mut Table, scope: &str) {
    if let Some(state) = table.scopes.get_mut(scope) {
        state.starting = state.starting.saturating_sub(1);
        table.forget_if_idle(scope);
    }
}

/// One process's record.
struct Entry {
    seq: u64,
    id: String,
    scope: String,
    command: String,
    workdir: PathBuf,
    background: bool,
    started_ms: u64,
    started_at: Instant,
    /// Counted in its scope's running count (until finished).
    counted: AtomicBool,
    /// The leader's pid (= process group id) until it is reaped. While it is `Some`, the
    /// leader is our child, alive or a zombie, so the group id cannot be reused: every
    /// `killpg` and the reaping happen under this lock.
    leader: Mutex<Option<Pid>>,
    state: Mutex<EntryState>,
    /// `true` once the process has exited and its output is drained.
    finished: watch::Sender<bool>,
    /// `true` once the record is released (or was never admitted): its monitor stops
    /// lingering.
    removed: watch::Sender<bool>,
}

struct EntryState {
    buffer: HeadTailBuffer,
    /// Where the previous read of this process ended.
    last_read_end: u64,
    /// Set when finished.
    end: Option<Ended>,
    /// The log file, once created (at the first output).
    log_path: Option<PathBuf>,
    /// Released: no log file may be created any more.
    disposed: bool,
}

#[derive(Debug, Clone, Copy)]
struct Ended {
    exited_ms: u64,
    duration_ms: u64,
    /// `None` only if the exit status could not be read.
    exit: Option<Exit>,
}

impl Entry {
    fn is_running(&self) -> bool {
        lock(&self.state).end.is_none()
    }

    /// Whether the leader is unreaped and its group has a member other than the zombie
    /// leader (checked through `/proc`, so only worth asking once the process finished).
    fn has_leftovers(&self) -> bool {
        // Not under the lock (a scan of `/proc` takes a while). If the leader is reaped
        // meanwhile the answer may be stale, but a signal then goes nowhere anyway.
        let leader = *lock(&self.leader);
        leader.is_some_and(sys::group_has_live_member)
    }

    fn append(&self, data: &[u8]) {
        lock(&self.state).buffer.write(data);
    }

    fn ended_now(&self, exit: Option<Exit>) -> Ended {
        Ended {
            exited_ms: unix_ms(),
            duration_ms: millis(self.started_at.elapsed()),
            exit,
        }
    }

    /// Record the end (only when the manager is gone; see [`ProcessManager::finish`]).
    fn finish_orphaned(&self, ended: Ended) {
        lock(&self.state).end = Some(ended);
        self.finished.send_replace(true);
    }

    /// Create the log file, unless the record has been released meanwhile.
    ///
    /// The file system is touched without holding any lock (`list` waits on `state` under
    /// the table lock, so a slow directory would otherwise hold up every call). A record
    /// released while the file was being created gets it deleted here.
    fn create_log(&self, target: &LogTarget) -> Option<OutputLog> {
        if lock(&self.state).disposed {
            return None;
        }
        let log = match OutputLog::create(&target.dir, &self.id, target.cap) {
            Ok(log) => log,
            Err(error) => {
                let dir = target.dir.display();
                if target.warned.swap(true, Ordering::Relaxed) {
                    tracing::debug!(%dir, %error, "cannot create an output log");
                } else {
                    tracing::warn!(
                        %dir, %error,
                        "cannot create an output log; the process runs without one"
                    );
                }
                return None;
            }
        };
        {
            let mut state = lock(&self.state);
            if !state.disposed {
                // From here `remove_log` deletes it.
                state.log_path = Some(log.path().to_owned());
                return Some(log);
            }
        }
        // Released meanwhile: `remove_log` has run and did not know of this file.
        let path = log.path().to_owned();
        drop(log);
        if let Err(error) = std::fs::remove_file(&path)
            && error.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(path = %path.display(), %error, "cannot remove an output log");
        }
        None
    }

    /// Wait until finished or `deadline` (`None`: no deadline). Returns whether finished.
    async fn wait_finished(&self, deadline: Option<Instant>) -> bool {
        let mut finished = self.finished.subscribe();
        let done = finished.wait_for(|finished| *finished);
        match deadline {
            Some(deadline) => matches!(tokio::time::timeout_at(deadline, done).await, Ok(Ok(_))),
            None => done.await.is_ok(),
        }
    }

    fn snapshot(&self, from: ReadFrom) -> OutputSnapshot {
        let mut state = lock(&self.state);
        let cursor = state.buffer.total_bytes();
        let rendered = match from {
            ReadFrom::All => state.buffer.render(),
            ReadFrom::Cursor(position) => state.buffer.render_from(position),
            ReadFrom::Unread => state.buffer.render_from(state.last_read_end),
        };
        // Positional reads belong to a caller tracking its own cursor: they leave the
        // scope's unread mark alone.
        if !matches!(from, ReadFrom::Cursor(_)) {
            state.last_read_end = cursor;
        }
        let exit = state.end.and_then(|end| end.exit);
        OutputSnapshot {
            text: rendered.text,
            running: state.end.is_none(),
            exit_code: exit.map(Exit::exit_code),
            signal: exit.and_then(Exit::signal_name),
            truncation: rendered.truncation,
            cursor,
            log_path: state.log_path.clone(),
            duration_ms: state
                .end
                .map_or_else(|| millis(self.started_at.elapsed()), |end| end.duration_ms),
        }
    }

    fn info(&self) -> ProcessInfo {
        let end = lock(&self.state).end;
        let exit = end.and_then(|end| end.exit);
        ProcessInfo {
            id: self.id.clone(),
            command: self.command.clone(),
            workdir: self.workdir.clone(),
            background: self.background,
            running: end.is_none(),
            started_ms: self.started_ms,
            exited_ms: end.map(|end| end.exited_ms),
            exit_code: exit.map(Exit::exit_code),
            signal: exit.and_then(Exit::signal_name),
        }
    }

    /// `killpg`, unless the leader has been reaped (then `ESRCH`).
    fn signal_group(&self, signal: NixSignal) -> Result<(), Errno> {
        match *lock(&self.leader) {
            Some(pgid) => killpg(pgid, signal),
            None => Err(Errno::ESRCH),
        }
    }

    /// Kill whatever is left of the group, reap the leader (at once if it is dead, else as
    /// soon as it dies, without blocking the caller), delete the log file, and tell the
    /// monitor to stop lingering. Doing it again does nothing.
    fn dispose(&self) {
        if let Some(pid) = lock(&self.leader).take() {
            // Forgotten under the lock, so nobody signals the group after this kill; the pid
            // cannot be reused before `kill_and_reap` reaps it.
            sys::kill_and_reap(pid);
        }
        self.removed.send_replace(true);
        self.remove_log();
    }

    /// Forbid creating the log file from now on and delete it if it exists (not under the
    /// lock).
    fn remove_log(&self) {
        let path = {
            let mut state = lock(&self.state);
            state.disposed = true;
            state.log_path.take()
        };
        if let Some(path) = &path
            && let Err(error) = std::fs::remove_file(path)
            && error.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(path = %path.display(), %error, "cannot remove an output log");
        }
    }
}

/// How the monitor learns that the leader exited.
enum ExitWatch {
    /// A pidfd, readable once the process has exited.
    PidFd(AsyncFd<OwnedFd>),
    /// Kernels without pidfds: check on every `SIGCHLD`.
    SigChld(tokio::signal::unix::Signal),
}

impl ExitWatch {
    fn new(pidfd: Option<OwnedFd>) -> io::Result<Self> {
        if let Some(pidfd) = pidfd {
            // SAFETY: the `OwnedFd` is an open pidfd, owned by the `AsyncFd` from now on, so it
            // stays open and refers to the same process for the `AsyncFd`'s whole life.
            match unsafe { AsyncFd::register_with_interest(pidfd, Interest::READABLE) } {
                Ok(fd) => return Ok(Self::PidFd(fd)),
                Err(error) => tracing::debug!(%error, "cannot poll a pidfd; using SIGCHLD"),
            }
        }
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child()).map(Self::SigChld)
    }

    /// Wait for the leader's exit without reaping it. `None` if the status cannot be read
    /// (the leader was reaped elsewhere, which only happens once the manager is dropped).
    async fn wait(self, entry: &Entry) -> Option<Exit> {
        let result = match self {
            Self::PidFd(fd) => loop {
                let mut ready = match fd.readable().await {
                    Ok(ready) => ready,
                    Err(error) => break Err(error),
                };
                match sys::wait_exited(WaitTarget::PidFd(fd.get_ref().as_fd()), true, true) {
                    Ok(None) => ready.clear_ready(),
                    other => break other,
                }
            },
            Self::SigChld(mut sigchld) => loop {
                // Checked after the SIGCHLD listener exists, so no exit can be missed.
                let checked = match *lock(&entry.leader) {
                    Some(pid) => sys::wait_exited(WaitTarget::Pid(pid), true, true),
                    None => break Ok(None),
                };
                match checked {
                    Ok(None) => {
                        if sigchld.recv().await.is_none() {
                            break Ok(None);
                        }
                    }
                    other => break other,
                }
            },
        };
        match result {
            Ok(exit) => exit,
            Err(error) => {
                tracing::debug!(id = %entry.id, %error, "cannot read a process's exit status");
                None
            }
        }
    }
}

/// The task that owns one process: reads its output, notices its exit, finishes it, and
/// removes it after the retention period.
struct Monitor {
    /// Owns the process from the moment the monitor exists, whether or not it ever runs.
    guard: MonitorGuard,
    exit_watch: ExitWatch,
    output: OutputReader,
    drain_timeout: Duration,
    retention: Duration,
    closed: watch::Receiver<bool>,
}

impl Monitor {
    async fn run(self) {
        let Monitor {
            guard,
            exit_watch,
            output,
            drain_timeout,
            retention,
            mut closed,
        } = self;
        let entry = Arc::clone(&guard.entry);
        // `None` once the pipe reached end-of-file (and everything reading it is released).
        let mut output = Some(output);
        let exit = exit_watch.wait(&entry);
        tokio::pin!(exit);
        let mut ended: Option<Ended> = None;
        let mut drain_deadline: Option<Instant> = None;

        // Until the exit: read and watch for the exit. After it: read until end-of-file or
        // the drain deadline.
        while let Some(reader) = output.as_mut() {
            let read = if ended.is_none() {
                tokio::select! {
                    biased;
                    status = &mut exit => {
                        ended = Some(entry.ended_now(status));
                        drain_deadline = Instant::now().checked_add(drain_timeout);
                        continue;
                    }
                    read = reader.read() => read,
                }
            } else if let Some(deadline) = drain_deadline {
                match tokio::time::timeout_at(deadline, reader.read()).await {
                    Ok(read) => read,
                    Err(_) => {
                        tracing::debug!(
                            id = %entry.id,
                            "output still held open after the exit; not waiting for it"
                        );
                        break;
                    }
                }
            } else {
                reader.read().await
            };
            take_read(&mut output, &entry, read).await;
        }
        let ended = match ended {
            Some(ended) => ended,
            // End-of-file before the exit (the process closed its output): wait for the exit.
            None => entry.ended_now((&mut exit).await),
        };
        if let Some(reader) = &mut output {
            reader.flush().await;
        }
        match guard.manager.upgrade() {
            Some(manager) => manager.finish(&entry, ended),
            None => entry.finish_orphaned(ended),
        }

        // Retention. Whatever still holds the pipe keeps being read, so it neither blocks
        // on a full pipe nor dies of SIGPIPE before the record goes away.
        let mut removed = entry.removed.subscribe();
        let linger = tokio::time::sleep(retention);
        tokio::pin!(linger);
        loop {
            tokio::select! {
                () = &mut linger => break,
                () = async {
                    // An error means the manager is gone: stop lingering as well.
                    let _ = closed.wait_for(|closed| *closed).await;
                } => break,
                () = async {
                    let _ = removed.wait_for(|removed| *removed).await;
                } => break,
                read = read_more(&mut output), if output.is_some() => {
                    take_read(&mut output, &entry, read).await;
                }
            }
        }
        drop(output);
        // Removes the record.
        drop(guard);
    }
}

/// Owns a monitor's process: when dropped, at the end of the monitor's run or early (a
/// panic, the runtime dropping the task), it finishes the process if that has not happened
/// (killing its group first and giving back its slot in the scope's count) and removes the
/// record: leftovers killed, leader reaped, log file deleted.
struct MonitorGuard {
    manager: Weak<ProcessManager>,
    entry: Arc<Entry>,
}

impl Drop for MonitorGuard {
    fn drop(&mut self) {
        let manager = self.manager.upgrade();
        if !*self.entry.finished.borrow() {
            if std::thread::panicking() {
                tracing::warn!(id = %self.entry.id, "a process monitor panicked; killing the process");
            } else {
                // The runtime is shutting down.
                tracing::debug!(id = %self.entry.id, "a process monitor was dropped; killing the process");
            }
            let _ = self.entry.signal_group(NixSignal::SIGKILL);
            let ended = self.entry.ended_now(None);
            match &manager {
                Some(manager) => manager.finish(&self.entry, ended),
                None => self.entry.finish_orphaned(ended),
            }
        }
        match manager {
            Some(manager) => manager.remove(&self.entry),
            None => self.entry.dispose(),
        }
    }
}

/// What reads a process's output: the pipe, the read buffer and the log. Dropped as soon
/// as the pipe reaches end-of-file.
struct OutputReader {
    pipe: pipe::Receiver,
    /// Small at first, grown when reads fill it.
    buf: Vec<u8>,
    log: LogSlot,
}

impl OutputReader {
    async fn read(&mut self) -> io::Result<usize> {
        self.pipe.read(&mut self.buf).await
    }

    /// Take the `n` bytes just read: into the record's buffer and the log. Grows the read
    /// buffer when a read filled it (small first, so that quiet processes cost little
    /// memory).
    async fn record(&mut self, entry: &Entry, n: usize) {
        let data = &self.buf[..n];
        entry.append(data);
        if let LogSlot::Pending(target) = &self.log {
            self.log = match entry.create_log(target) {
                Some(file) => LogSlot::Open(file),
                None => LogSlot::Off,
            };
        }
        if let LogSlot::Open(file) = &mut self.log {
            file.append(data).await;
        }
        if n == self.buf.len() && self.buf.len() < READ_CHUNK {
            self.buf.resize((self.buf.len() * 4).min(READ_CHUNK), 0);
        }
    }

    /// Flush the log file.
    async fn flush(&mut self) {
        if let LogSlot::Open(log) = &mut self.log {
            log.finish().await;
        }
    }
}

/// A read from `output`; never completes when there is nothing to read from any more.
async fn read_more(output: &mut Option<OutputReader>) -> io::Result<usize> {
    match output {
        Some(reader) => reader.read().await,
        None => std::future::pending().await,
    }
}

/// Handle the result of a read from `output` (which must be `Some`): record the data, or at
/// end-of-file (or a read error) flush the log and release the pipe, the log file and the
/// read buffer.
async fn take_read(output: &mut Option<OutputReader>, entry: &Entry, read: io::Result<usize>) {
    let Some(reader) = output.as_mut() else {
        return;
    };
    match read {
        Ok(0) => {}
        Ok(n) => {
            reader.record(entry, n).await;
            return;
        }
        Err(error) if error.kind() == io::ErrorKind::Interrupted => return,
        Err(error) => {
            tracing::warn!(id = %entry.id, %error, "cannot read process output");
        }
    }
    reader.flush().await;
    *output = None;
}

/// Where a process's log goes.
enum LogSlot {
    /// No log (disabled, or creating it failed).
    Off,
    /// Created at the first output, so that silent commands cost no file.
    Pending(LogTarget),
    /// Being written.
    Open(OutputLog),
}

struct LogTarget {
    dir: Arc<Path>,
    cap: u64,
    /// Shared by the manager's processes: warn about an unusable directory only once.
    warned: Arc<AtomicBool>,
}

fn validate_command(command: &str) -> Result<(), ProcessError> {
    if command.trim().is_empty() {
        return Err(ProcessError::InvalidRequest(
            "the command is empty".to_owned(),
        ));
    }
    if command.contains('\0') {
        return Err(ProcessError::InvalidRequest(
            "the command contains a NUL byte".to_owned(),
        ));
    }
    Ok(())
}

fn validate_env(env: &[(String, String)]) -> Result<(), ProcessError> {
    for (key, value) in env {
        if key.is_empty() || key.contains(['=', '\0']) {
            return Err(ProcessError::InvalidRequest(format!(
                "invalid environment variable name `{}`",
                key.escape_default()
            )));
        }
        if value.contains('\0') {
            return Err(ProcessError::InvalidRequest(format!(
                "the value of environment variable `{key}` contains a NUL byte"
            )));
        }
    }
    Ok(())
}

fn shut_down() -> ProcessError {
    ProcessError::Failed("the process manager has been shut down".to_owned())
}

/// Lock, recovering from poisoning (the protected data stays consistent: every critical
/// section is a few plain assignments).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, millis)
}

fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(unix_ms());
    hasher.write_u32(std::process::id());
    hasher.finish()
}

/// A bijection of the 48-bit numbers, keyed by `seed`: unique, unguessable-looking ids from
/// a counter.
fn permute48(n: u64, seed: u64) -> u64 {
    const MASK: u64 = (1 << 48) - 1;
    let mut x = n.wrapping_add(seed) & MASK;
    x ^= x >> 23;
    x = x.wrapping_mul(0x2545_f491_4f6c_dd1d) & MASK;
    x ^= x >> 21;
    x = x.wrapping_mul(0x9e37_79b9_7f4a_7c15) & MASK;
    x ^= x >> 25;
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Long enough never to be reached by a passing test.
    const LONG: Duration = Duration::from_secs(10);
    const SCOPE: &str = "session-1";

    fn test_config(dir: &Path) -> ProcessManagerConfig {
        ProcessManagerConfig {
            kill_grace: Duration::from_millis(300),
            retention: Duration::from_secs(60),
            drain_timeout: Duration::from_millis(300),
            state_dir: Some(dir.join("logs")),
            max_running_per_scope: 16,
            nice: 0,
            ..ProcessManagerConfig::default()
        }
    }

    fn manager_with(
        edit: impl FnOnce(&mut ProcessManagerConfig),
    ) -> (tempfile::TempDir, Arc<ProcessManager>) {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = test_config(dir.path());
        edit(&mut config);
        (dir, ProcessManager::new(config))
    }

    fn manager() -> (tempfile::TempDir, Arc<ProcessManager>) {
        manager_with(|_| {})
    }

    fn request(command: &str) -> StartRequest {
        StartRequest {
            command: command.to_owned(),
            ..StartRequest::default()
        }
    }

    async fn start(manager: &ProcessManager, command: &str) -> String {
        manager.start(SCOPE, request(command)).await.expect("start")
    }

    async fn run(manager: &ProcessManager, command: &str) -> OutputSnapshot {
        let id = start(manager, command).await;
        let snapshot = manager
            .wait(SCOPE, &id, LONG, ReadFrom::All)
            .await
            .expect("wait");
        assert!(!snapshot.running, "`{command}` still running: {snapshot:?}");
        snapshot
    }

    /// Live (non-zombie) processes whose command line contains `marker`.
    fn live_processes_with(marker: &str) -> Vec<i32> {
        let Ok(proc_dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        proc_dir
            .flatten()
            .filter_map(|entry| {
                let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
                let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
                if !String::from_utf8_lossy(&cmdline).contains(marker) {
                    return None;
                }
                let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
                let state = stat.rsplit_once(") ")?.1.chars().next()?;
                (state != 'Z' && state != 'X').then_some(pid)
            })
            .collect()
    }

    /// Poll `check` for up to 5 s (test-side only).
    async fn eventually(mut check: impl FnMut() -> bool) -> bool {
        for _ in 0..500 {
            if check() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }

    async fn wait_for_output(manager: &ProcessManager, id: &str, needle: &str) {
        let seen = eventually(|| {
            manager
                .read(SCOPE, id, ReadFrom::Cursor(0))
                .is_ok_and(|snapshot| snapshot.text.contains(needle))
        })
        .await;
        assert!(seen, "`{needle}` never appeared in the output of {id}");
    }

    #[tokio::test]
    async fn runs_a_command_and_reports_output_and_exit() {
        let (_dir, manager) = manager();
        let snapshot = run(&manager, "echo hello").await;
        assert_eq!(snapshot.text, "hello\n");
        assert_eq!(snapshot.exit_code, Some(0));
        assert_eq!(snapshot.signal, None);
        assert_eq!(snapshot.cursor, 6);
        assert_eq!(snapshot.truncation, None);

        let snapshot = run(&manager, "echo out; exit 3").await;
        assert_eq!(snapshot.text, "out\n");
        assert_eq!(snapshot.exit_code, Some(3));
        assert_eq!(snapshot.signal, None);
    }

    #[tokio::test]
    async fn stdout_and_stderr_are_merged_in_write_order() {
        let (_dir, manager) = manager();
        let snapshot = run(&manager, "echo a; echo b >&2; echo c").await;
        assert_eq!(snapshot.text, "a\nb\nc\n");
        let snapshot = run(
            &manager,
            "for i in 1 2 3 4; do echo o$i; echo e$i >&2; done",
        )
        .await;
        assert_eq!(snapshot.text, "o1\ne1\no2\ne2\no3\ne3\no4\ne4\n");
    }

    #[tokio::test]
    async fn killed_by_signal_reports_128_plus_n_and_the_name() {
        let (_dir, manager) = manager();
        let snapshot = run(&manager, "kill -KILL $$").await;
        assert_eq!(snapshot.exit_code, Some(137));
        assert_eq!(snapshot.signal.as_deref(), Some("SIGKILL"));
        let snapshot = run(&manager, "kill -TERM $$").await;
        assert_eq!(snapshot.exit_code, Some(143));
        assert_eq!(snapshot.signal.as_deref(), Some("SIGTERM"));
    }

    #[tokio::test]
    async fn environment_is_inherited_and_request_env_wins() {
        let (_dir, manager) = manager();
        let host_path = std::env::var("PATH").unwrap_or_default();
        let snapshot = run(&manager, r#"printf %s "$PATH""#).await;
        assert_eq!(snapshot.text, host_path);

        let id = manager
            .start(
                SCOPE,
                StartRequest {
                    command: r#"printf '%s|%s' "$HOME" "$TOOLHOST_TEST_VAR""#.to_owned(),
                    env: vec![
                        ("HOME".to_owned(), "/override".to_owned()),
                        ("TOOLHOST_TEST_VAR".to_owned(), "v 1".to_owned()),
                    ],
                    ..StartRequest::default()
                },
            )
            .await
            .expect("start");
        let snapshot = manager.wait(SCOPE, &id, LONG, ReadFrom::All).await;
        assert_eq!(snapshot.expect("wait").text, "/override|v 1");

        for key in ["", "A=B", "A\0B"] {
            let bad = StartRequest {
                command: "true".to_owned(),
                env: vec![(key.to_owned(), "x".to_owned())],
                ..StartRequest::default()
            };
            let error = manager.start(SCOPE, bad).await.expect_err("bad env name");
            assert!(
                matches!(error, ProcessError::InvalidRequest(_)),
                "{error:?}"
            );
        }
    }

    #[tokio::test]
    async fn an_inherit_list_limits_the_host_environment() {
        let (_dir, manager) = manager();
        let id = manager
            .start(
                SCOPE,
                StartRequest {
                    command: r#"printf '%s|%s|%s' "$PATH" "${HOME-unset}" "$MINE""#.to_owned(),
                    env: vec![("MINE".to_owned(), "set".to_owned())],
                    inherit_env: Some(vec!["PATH".to_owned()]),
                    ..StartRequest::default()
                },
            )
            .await
            .expect("start");
        let snapshot = manager.wait(SCOPE, &id, LONG, ReadFrom::All).await;
        let host_path = std::env::var("PATH").unwrap_or_default();
        assert_eq!(
            snapshot.expect("wait").text,
            format!("{host_path}|unset|set")
        );
    }

    #[tokio::test]
    async fn runs_in_the_requested_workdir_and_rejects_bad_ones() {
        let (dir, manager) = manager_with(|_| {});
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).expect("mkdir");
        let id = manager
            .start(
                SCOPE,
                StartRequest {
                    command: "pwd".to_owned(),
                    workdir: Some(sub.clone()),
                    ..StartRequest::default()
                },
            )
            .await
            .expect("start");
        let snapshot = manager.wait(SCOPE, &id, LONG, ReadFrom::All).await;
        let printed = PathBuf::from(snapshot.expect("wait").text.trim_end());
        assert_eq!(
            printed.canonicalize().expect("canonical"),
            sub.canonicalize().expect("canonical")
        );
        assert_eq!(manager.list(SCOPE)[0].workdir, sub);

        let missing = dir.path().join("missing");
        let file = dir.path().join("file");
        std::fs::write(&file, "x").expect("write");
        for (workdir, problem) in [(&missing, "does not exist"), (&file, "is not a directory")] {
            let error = manager
                .start(
                    SCOPE,
                    StartRequest {
                        command: "true".to_owned(),
                        workdir: Some(workdir.clone()),
                        ..StartRequest::default()
                    },
                )
                .await
                .expect_err("bad workdir");
            let ProcessError::InvalidRequest(message) = error else {
                panic!("not InvalidRequest: {error:?}");
            };
            assert!(
                message.contains(&workdir.display().to_string()),
                "{message}"
            );
            assert!(message.contains(problem), "{message}");
        }
    }

    #[tokio::test]
    async fn relative_workdirs_and_the_default_come_from_the_config() {
        let base = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(base.path().join("rel")).expect("mkdir");
        let base_path = base.path().to_owned();
        let (_dir, manager) = manager_with(|config| config.default_workdir = Some(base_path));
        let snapshot = run(&manager, "pwd").await;
        assert_eq!(PathBuf::from(snapshot.text.trim_end()), base.path());
        let id = manager
            .start(
                SCOPE,
                StartRequest {
                    command: "pwd".to_owned(),
                    workdir: Some(PathBuf::from("rel")),
                    ..StartRequest::default()
                },
            )
            .await
            .expect("start");
        let snapshot = manager.wait(SCOPE, &id, LONG, ReadFrom::All).await;
        let printed = snapshot.expect("wait").text;
        assert_eq!(PathBuf::from(printed.trim_end()), base.path().join("rel"));
    }

    #[tokio::test]
    async fn empty_commands_are_rejected() {
        let (_dir, manager) = manager();
        for command in ["", "   \n\t"] {
            let error = manager
                .start(SCOPE, request(command))
                .await
                .expect_err("empty");
            assert!(
                matches!(error, ProcessError::InvalidRequest(_)),
                "{error:?}"
            );
        }
        assert!(manager.list(SCOPE).is_empty());
    }

    #[tokio::test]
    async fn children_lead_their_own_session_with_a_clean_slate() {
        let (_dir, manager) = manager_with(|config| config.nice = 3);
        // The signal state is read by a process the shell execs into: the shell's own mask
        // changes for a moment whenever it starts a command.
        let snapshot = run(
            &manager,
            "cat /proc/$$/stat; echo; ls /proc/$$/fd; \
             exec grep -E '^Sig(Blk|Ign)' /proc/self/status",
        )
        .await;
        let mut lines = snapshot.text.lines();
        let stat = lines.next().expect("stat line");
        let fields: Vec<&str> = stat.rsplit_once(") ").expect("comm").1.split(' ').collect();
        let pid = stat.split(' ').next().expect("pid");
        // state ppid pgrp session ...: its own process group and session.
        assert_eq!(fields[2], pid, "{stat}");
        assert_eq!(fields[3], pid, "{stat}");
        // Field 19 of stat (16 after the comm) is the nice value.
        assert_eq!(fields[16], "3", "{stat}");
        let rest: Vec<&str> = lines.filter(|line| !line.is_empty()).collect();
        // Only stdin, stdout and stderr: nothing of the host leaks into children.
        assert_eq!(rest[..3], ["0", "1", "2"], "{rest:?}");
        assert_eq!(rest[3], "SigBlk:\t0000000000000000", "{rest:?}");
        // SIGPIPE (bit 12) is not inherited as ignored from the Rust runtime. (Bits 31 and
        // 32, glibc's internal signals 32 and 33, are ignored in processes started by
        // `posix_spawn`, such as this test binary started by cargo; they are left alone.)
        let ignored = rest[4].strip_prefix("SigIgn:\t").expect("SigIgn");
        let ignored = u64::from_str_radix(ignored, 16).expect("hex");
        assert_eq!(ignored & !0x1_8000_0000, 0, "{rest:?}");
    }

    #[tokio::test]
    async fn a_missing_shell_is_reported() {
        let (_dir, manager) =
            manager_with(|config| config.shell = PathBuf::from("/nonexistent/shell"));
        let error = manager
            .start(SCOPE, request("true"))
            .await
            .expect_err("no shell");
        let ProcessError::Failed(message) = error else {
            panic!("not Failed: {error:?}");
        };
        assert!(message.contains("/nonexistent/shell"), "{message}");
        assert!(manager.list(SCOPE).is_empty());
        // The slot taken for the failed start was given back.
        let (_dir, manager) = manager_with(|config| {
            config.shell = PathBuf::from("sh");
            config.max_running_per_scope = 1;
        });
        assert_eq!(
            run(&manager, "echo found in PATH").await.text,
            "found in PATH\n"
        );
    }

    #[tokio::test]
    async fn stdin_is_at_end_of_file() {
        let (_dir, manager) = manager();
        let begun = Instant::now();
        let snapshot = run(&manager, r#"cat; read x; echo "read=$?""#).await;
        assert_eq!(snapshot.text, "read=1\n");
        assert!(begun.elapsed() < Duration::from_secs(3));
    }

    #[tokio::test]
    async fn wait_returns_at_exit_or_at_the_timeout() {
        let (_dir, manager) = manager();
        let id = start(&manager, "sleep 0.2; echo done").await;
        let begun = Instant::now();
        let snapshot = manager.wait(SCOPE, &id, LONG, ReadFrom::All).await;
        let snapshot = snapshot.expect("wait");
        assert!(
            begun.elapsed() < Duration::from_secs(5),
            "{:?}",
            begun.elapsed()
        );
        assert!(!snapshot.running);
        assert_eq!(snapshot.text, "done\n");
        assert!(snapshot.duration_ms >= 150, "{}", snapshot.duration_ms);

        let id = start(&manager, "sleep 5").await;
        let begun = Instant::now();
        let timeout = Duration::from_millis(200);
        let snapshot = manager.wait(SCOPE, &id, timeout, ReadFrom::All).await;
        let snapshot = snapshot.expect("wait");
        let waited = begun.elapsed();
        assert!(
            waited >= timeout && waited < Duration::from_secs(2),
            "{waited:?}"
        );
        assert!(snapshot.running);
        assert_eq!(snapshot.exit_code, None);
        manager.signal(SCOPE, &id, Signal::Kill).expect("kill");
    }

    #[tokio::test]
    async fn many_waiters_all_wake_at_exit() {
        let (_dir, manager) = manager();
        let id = start(&manager, "sleep 0.3; echo bye").await;
        let waiters: Vec<_> = (0..50)
            .map(|_| {
                let manager = Arc::clone(&manager);
                let id = id.clone();
                tokio::spawn(
                    async move { manager.wait(SCOPE, &id, LONG, ReadFrom::Cursor(0)).await },
                )
            })
            .collect();
        for waiter in waiters {
            let snapshot = waiter.await.expect("join").expect("wait");
            assert!(!snapshot.running);
            assert_eq!(snapshot.text, "bye\n");
        }
    }

    #[tokio::test]
    async fn a_grandchild_holding_the_pipe_does_not_hang_wait() {
        let marker = "30.4242";
        let (_dir, manager) = manager();
        let id = start(&manager, &format!("sleep {marker} & echo started")).await;
        let begun = Instant::now();
        let snapshot = manager.wait(SCOPE, &id, LONG, ReadFrom::All).await;
        let snapshot = snapshot.expect("wait");
        assert!(
            begun.elapsed() < Duration::from_secs(2),
            "{:?}",
            begun.elapsed()
        );
        assert!(!snapshot.running);
        assert_eq!(snapshot.exit_code, Some(0));
        assert_eq!(snapshot.text, "started\n");
        // The grandchild lives on in the group until the record goes; dropping the manager
        // kills it.
        assert!(!live_processes_with(marker).is_empty());
        drop(manager);
        assert!(eventually(|| live_processes_with(marker).is_empty()).await);
    }

    async fn group_signal_reaches_grandchildren(signal: Signal, marker: &str, name: &str) {
        let (_dir, manager) = manager();
        let id = start(&manager, &format!("sleep {marker} & sleep {marker} & wait")).await;
        // The shell and both sleeps.
        assert!(eventually(|| live_processes_with(marker).len() >= 3).await);
        manager.signal(SCOPE, &id, signal).expect("signal");
        let snapshot = manager.wait(SCOPE, &id, LONG, ReadFrom::All).await;
        let snapshot = snapshot.expect("wait");
        assert!(!snapshot.running);
        assert_eq!(snapshot.signal.as_deref(), Some(name));
        assert!(
            eventually(|| live_processes_with(marker).is_empty()).await,
            "left behind: {:?}",
            live_processes_with(marker)
        );
    }

    #[tokio::test]
    async fn terminate_reaches_grandchildren() {
        group_signal_reaches_grandchildren(Signal::Terminate, "300.111", "SIGTERM").await;
    }

    #[tokio::test]
    async fn kill_reaches_grandchildren() {
        group_signal_reaches_grandchildren(Signal::Kill, "300.222", "SIGKILL").await;
    }

    #[tokio::test]
    async fn terminate_escalates_to_kill_after_the_grace() {
        let marker = "30.333";
        let (_dir, manager) = manager();
        let id = start(
            &manager,
            &format!("trap '' TERM; echo ready; sleep {marker}"),
        )
        .await;
        wait_for_output(&manager, &id, "ready").await;
        let begun = Instant::now();
        manager
            .signal(SCOPE, &id, Signal::Terminate)
            .expect("terminate");
        let snapshot = manager.wait(SCOPE, &id, LONG, ReadFrom::All).await;
        let snapshot = snapshot.expect("wait");
        let waited = begun.elapsed();
        assert!(!snapshot.running);
        assert_eq!(snapshot.signal.as_deref(), Some("SIGKILL"));
        assert_eq!(snapshot.exit_code, Some(137));
        assert!(waited >= Duration::from_millis(250), "{waited:?}");
        assert!(waited < Duration::from_secs(3), "{waited:?}");
        assert!(eventually(|| live_processes_with(marker).is_empty()).await);
    }

    #[tokio::test]
    async fn interrupt_sends_sigint() {
        let (_dir, manager) = manager();
        let id = start(
            &manager,
            "trap 'echo got-int; exit 7' INT; echo ready; sleep 30.444 >/dev/null 2>&1 & wait",
        )
        .await;
        wait_for_output(&manager, &id, "ready").await;
        manager
            .signal(SCOPE, &id, Signal::Interrupt)
            .expect("interrupt");
        let snapshot = manager.wait(SCOPE, &id, LONG, ReadFrom::All).await;
        let snapshot = snapshot.expect("wait");
        assert!(!snapshot.running);
        assert_eq!(snapshot.exit_code, Some(7));
        assert_eq!(snapshot.text, "ready\ngot-int\n");
    }

    #[tokio::test]
    async fn unknown_ids_are_not_found_and_exited_ones_not_running() {
        let (_dir, manager) = manager();
        let missing = ProcessError::NotFound("nope".to_owned());
        assert_eq!(
            manager.read(SCOPE, "nope", ReadFrom::All),
            Err(missing.clone())
        );
        assert_eq!(
            manager.signal(SCOPE, "nope", Signal::Kill),
            Err(missing.clone())
        );
        let waited = manager.wait(SCOPE, "nope", LONG, ReadFrom::All).await;
        assert_eq!(waited, Err(missing));

        let snapshot = run(&manager, "true").await;
        assert_eq!(snapshot.exit_code, Some(0));
        // No output, so no log file either.
        assert_eq!(snapshot.log_path, None);
        let id = manager.list(SCOPE)[0].id.clone();
        for signal in [Signal::Terminate, Signal::Kill, Signal::Interrupt] {
            assert_eq!(
                manager.signal(SCOPE, &id, signal),
                Err(ProcessError::NotRunning(id.clone()))
            );
        }
    }

    #[tokio::test]
    async fn scopes_are_isolated() {
        let marker = "30.555";
        let (_dir, manager) = manager();
        let id = manager
            .start("a", request(&format!("echo secret; sleep {marker}")))
            .await
            .expect("start");
        let seen = eventually(|| {
            manager
                .read("a", &id, ReadFrom::All)
                .is_ok_and(|snapshot| snapshot.text == "secret\n")
        });
        assert!(seen.await);
        let not_found = ProcessError::NotFound(id.clone());
        assert!(manager.list("b").is_empty());
        assert_eq!(manager.list("a").len(), 1);
        assert_eq!(
            manager.read("b", &id, ReadFrom::All),
            Err(not_found.clone())
        );
        assert_eq!(
            manager.signal("b", &id, Signal::Kill),
            Err(not_found.clone())
        );
        assert_eq!(
            manager.wait("b", &id, Duration::ZERO, ReadFrom::All).await,
            Err(not_found)
        );
        manager.end_scope("b").await;
        assert!(manager.read("a", &id, ReadFrom::All).expect("read").running);

        manager.end_scope("a").await;
        let snapshot = manager.read("a", &id, ReadFrom::All).expect("read");
        assert!(!snapshot.running);
        assert_eq!(snapshot.text, "secret\n");
        assert!(eventually(|| live_processes_with(marker).is_empty()).await);
    }

    #[tokio::test]
    async fn end_scope_waits_for_stubborn_processes_then_kills_them() {
        let marker = "30.999";
        let (_dir, manager) = manager();
        let polite = start(&manager, "sleep 30").await;
        let stubborn = start(
            &manager,
            &format!("trap '' TERM; echo ready; sleep {marker}"),
        )
        .await;
        wait_for_output(&manager, &stubborn, "ready").await;
        let begun = Instant::now();
        manager.end_scope(SCOPE).await;
        let waited = begun.elapsed();
        assert!(waited >= Duration::from_millis(250), "{waited:?}");
        assert!(waited < Duration::from_secs(3), "{waited:?}");
        let polite = manager.read(SCOPE, &polite, ReadFrom::All).expect("read");
        assert_eq!(polite.signal.as_deref(), Some("SIGTERM"));
        let stubborn = manager.read(SCOPE, &stubborn, ReadFrom::All).expect("read");
        assert_eq!(stubborn.signal.as_deref(), Some("SIGKILL"));
        assert!(live_processes_with(marker).is_empty());
    }

    #[tokio::test]
    async fn end_scope_kills_leftovers_of_finished_processes() {
        let marker = "300.888";
        let (_dir, manager) = manager();
        let snapshot = run(&manager, &format!("sleep {marker} >/dev/null 2>&1 &")).await;
        assert_eq!(snapshot.exit_code, Some(0));
        assert!(eventually(|| !live_processes_with(marker).is_empty()).await);
        manager.end_scope(SCOPE).await;
        assert!(eventually(|| live_processes_with(marker).is_empty()).await);
    }

    #[tokio::test]
    async fn running_processes_are_capped_per_scope() {
        let (_dir, manager) = manager_with(|config| config.max_running_per_scope = 2);
        let first = manager
            .start("a", request("sleep 30"))
            .await
            .expect("first");
        manager
            .start("a", request("sleep 30"))
            .await
            .expect("second");
        let error = manager
            .start("a", request("sleep 30"))
            .await
            .expect_err("third");
        let ProcessError::LimitReached(message) = error else {
            panic!("not LimitReached: {error:?}");
        };
        assert!(message.contains('2'), "{message}");
        manager
            .start("b", request("true"))
            .await
            .expect("other scope");

        manager.signal("a", &first, Signal::Kill).expect("kill");
        let snapshot = manager.wait("a", &first, LONG, ReadFrom::All).await;
        assert!(!snapshot.expect("wait").running);
        manager
            .start("a", request("true"))
            .await
            .expect("room again");
    }

    #[tokio::test]
    async fn exited_processes_are_removed_after_retention() {
        let (_dir, manager) = manager_with(|config| config.retention = Duration::from_millis(200));
        let id = start(&manager, "echo hi").await;
        let snapshot = manager.wait(SCOPE, &id, LONG, ReadFrom::All).await;
        let log_path = snapshot.expect("wait").log_path.expect("log path");
        assert_eq!(std::fs::read_to_string(&log_path).expect("log"), "hi\n");
        let gone = eventually(|| {
            manager.read(SCOPE, &id, ReadFrom::All) == Err(ProcessError::NotFound(id.clone()))
        })
        .await;
        assert!(gone);
        assert!(manager.list(SCOPE).is_empty());
        assert!(!log_path.exists());
    }

    #[tokio::test]
    async fn cursor_and_unread_give_only_new_output() {
        let (dir, manager) = manager();
        let flag = dir.path().join("flag");
        let command = format!(
            "echo one; while [ ! -e '{}' ]; do sleep 0.01; done; echo two",
            flag.display()
        );
        let id = start(&manager, &command).await;
        wait_for_output(&manager, &id, "one").await;
        // The cursor reads above did not move the unread mark; an unread read does.
        let snapshot = manager.read(SCOPE, &id, ReadFrom::Unread).expect("read");
        assert_eq!(snapshot.text, "one\n");
        assert_eq!(snapshot.cursor, 4);
        assert!(snapshot.running);
        let snapshot = manager.read(SCOPE, &id, ReadFrom::Unread).expect("read");
        assert_eq!(snapshot.text, "");

        std::fs::write(&flag, "").expect("flag");
        let snapshot = manager.wait(SCOPE, &id, LONG, ReadFrom::Unread).await;
        let snapshot = snapshot.expect("wait");
        assert_eq!(snapshot.text, "two\n");
        assert_eq!(snapshot.cursor, 8);
        assert_eq!(
            manager
                .read(SCOPE, &id, ReadFrom::Unread)
                .expect("read")
                .text,
            ""
        );
        let read = |cursor| {
            manager
                .read(SCOPE, &id, ReadFrom::Cursor(cursor))
                .expect("read")
        };
        assert_eq!(read(4).text, "two\n");
        assert_eq!(read(6).text, "o\n");
        assert_eq!(read(8).text, "");
        assert_eq!(read(100).text, "");
        let all = manager.read(SCOPE, &id, ReadFrom::All).expect("read");
        assert_eq!(all.text, "one\ntwo\n");
    }

    fn seq_output(n: u32) -> String {
        (1..=n).map(|i| format!("{i}\n")).collect()
    }

    #[tokio::test]
    async fn the_log_file_has_everything_the_buffer_dropped() {
        let (_dir, manager) = manager_with(|config| {
            config.head_bytes = 64;
            config.tail_bytes = 64;
        });
        let expected = seq_output(20000);
        let snapshot = run(&manager, "seq 1 20000").await;
        let truncation = snapshot.truncation.expect("truncated");
        assert_eq!(truncation.original_bytes, expected.len() as u64);
        assert_eq!(snapshot.cursor, expected.len() as u64);
        assert!(snapshot.text.starts_with("1\n2\n"));
        assert!(snapshot.text.ends_with("19999\n20000\n"));
        let log = std::fs::read_to_string(snapshot.log_path.expect("log path")).expect("log");
        assert!(log == expected, "log has {} bytes", log.len());
    }

    #[tokio::test]
    async fn the_log_file_is_capped() {
        let (_dir, manager) = manager_with(|config| config.log_cap_bytes = 1000);
        let expected = seq_output(20000);
        let snapshot = run(&manager, "seq 1 20000").await;
        let log = std::fs::read(snapshot.log_path.expect("log path")).expect("log");
        assert_eq!(log, expected.as_bytes()[..1000]);
    }

    #[tokio::test]
    async fn processes_run_without_a_usable_log_dir() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("file");
        std::fs::write(&file, "").expect("write");
        let (_dir, manager) = manager_with(|config| config.state_dir = Some(file.join("logs")));
        let snapshot = run(&manager, "echo ok").await;
        assert_eq!(snapshot.text, "ok\n");
        assert_eq!(snapshot.log_path, None);

        let (_dir, manager) = manager_with(|config| config.output_logs = false);
        assert_eq!(manager.log_dir(), None);
        let snapshot = run(&manager, "echo ok").await;
        assert_eq!(snapshot.log_path, None);
    }

    #[tokio::test]
    async fn shutdown_leaves_nothing_behind() {
        let marker = "300.666";
        let (dir, manager) = manager();
        start(&manager, &format!("sleep {marker} & sleep {marker} & wait")).await;
        let stubborn = start(
            &manager,
            &format!("trap '' TERM; echo ready; sleep {marker}"),
        )
        .await;
        wait_for_output(&manager, &stubborn, "ready").await;
        run(&manager, "echo done").await;
        assert!(eventually(|| live_processes_with(marker).len() >= 4).await);
        let begun = Instant::now();
        manager.shutdown().await;
        assert!(
            begun.elapsed() < Duration::from_secs(3),
            "{:?}",
            begun.elapsed()
        );
        assert!(eventually(|| live_processes_with(marker).is_empty()).await);
        assert!(manager.list(SCOPE).is_empty());
        let logs = std::fs::read_dir(dir.path().join("logs")).expect("log dir");
        assert_eq!(logs.count(), 0);
        let error = manager
            .start(SCOPE, request("true"))
            .await
            .expect_err("closed");
        assert!(matches!(error, ProcessError::Failed(_)), "{error:?}");
    }

    #[tokio::test]
    async fn dropping_the_manager_kills_everything() {
        let marker = "300.777";
        let (dir, manager) = manager();
        start(&manager, &format!("sleep {marker} & sleep {marker} & wait")).await;
        start(&manager, &format!("trap '' TERM INT; sleep {marker}")).await;
        assert!(eventually(|| live_processes_with(marker).len() >= 4).await);
        let leaders: Vec<Pid> = lock(&manager.table)
            .entries
            .values()
            .filter_map(|entry| *lock(&entry.leader))
            .collect();
        assert_eq!(leaders.len(), 2);
        drop(manager);
        // Every group got `SIGKILL` before the drop returned; the leaders are reaped from
        // another thread, soon after.
        assert!(eventually(|| live_processes_with(marker).is_empty()).await);
        let reaped = |pid: Pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| Some(stat.rsplit_once(") ")?.1.starts_with('Z')))
                != Some(true)
        };
        assert!(eventually(|| leaders.iter().all(|&pid| reaped(pid))).await);
        let logs = std::fs::read_dir(dir.path().join("logs")).expect("log dir");
        assert_eq!(logs.count(), 0);
    }

    #[tokio::test]
    async fn list_shows_running_first_then_newest_first() {
        let (_dir, manager) = manager();
        let old_done = run(&manager, "echo 1").await;
        assert!(!old_done.running);
        let old_running = start(&manager, "sleep 30").await;
        run(&manager, "echo 2").await;
        let new_running = manager
            .start(
                SCOPE,
                StartRequest {
                    command: "sleep 30".to_owned(),
                    background: true,
                    ..StartRequest::default()
                },
            )
            .await
            .expect("start");
        let list = manager.list(SCOPE);
        let commands: Vec<&str> = list.iter().map(|info| info.command.as_str()).collect();
        assert_eq!(commands, ["sleep 30", "sleep 30", "echo 2", "echo 1"]);
        assert_eq!(list[0].id, new_running);
        assert_eq!(list[1].id, old_running);
        assert!(list[0].background && !list[1].background);
        assert!(list[0].running && list[1].running);
        assert!(!list[2].running && !list[3].running);
        assert_eq!(list[2].exit_code, Some(0));
        assert!(
            list[2]
                .exited_ms
                .is_some_and(|exited| exited >= list[2].started_ms)
        );
        assert_eq!(list[0].exited_ms, None);
    }

    /// What this process's descriptors refer to (`pipe:[N]`, file paths, ...).
    fn open_descriptors() -> Vec<String> {
        let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
            return Vec::new();
        };
        fds.flatten()
            .filter_map(|fd| std::fs::read_link(fd.path()).ok())
            .map(|target| target.display().to_string())
            .collect()
    }

    /// A start of `command` polled once and left waiting for the spawner (retried in the
    /// unlikely case that the spawner answered at once).
    async fn start_under_way<'a>(
        manager: &'a ProcessManager,
        command: &str,
    ) -> BoxFuture<'a, Result<String, ProcessError>> {
        loop {
            let mut start = manager.start(SCOPE, request(command));
            let polled = start
                .as_mut()
                .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()));
            match polled {
                std::task::Poll::Pending => return start,
                std::task::Poll::Ready(started) => {
                    let id = started.expect("start");
                    manager.signal(SCOPE, &id, Signal::Kill).expect("kill");
                }
            }
        }
    }

    #[tokio::test]
    async fn finished_records_hold_no_descriptors() {
        let marker = "300.1717";
        let (_dir, manager) = manager();
        let snapshot = run(&manager, "readlink /proc/$$/fd/1").await;
        let pipe = snapshot.text.trim_end().to_owned();
        assert!(pipe.starts_with("pipe:["), "{pipe}");
        let log = snapshot.log_path.expect("log path");
        let log = log
            .canonicalize()
            .expect("log exists")
            .display()
            .to_string();
        let open = open_descriptors();
        assert!(!open.contains(&pipe), "the pipe is still open");
        assert!(!open.contains(&log), "the log file is still open");

        // A grandchild holds the pipe past the drain deadline: it keeps being read (so that
        // it does not block) until it ends.
        let id = start(
            &manager,
            &format!("readlink /proc/$$/fd/1; sleep {marker} &"),
        )
        .await;
        let snapshot = manager.wait(SCOPE, &id, LONG, ReadFrom::All).await;
        let snapshot = snapshot.expect("wait");
        assert!(!snapshot.running);
        let pipe = snapshot.text.trim_end().to_owned();
        assert!(open_descriptors().contains(&pipe));
        manager
            .signal(SCOPE, &id, Signal::Kill)
            .expect("kill the leftover");
        assert!(eventually(|| !open_descriptors().contains(&pipe)).await);
        assert!(live_processes_with(marker).is_empty());
    }

    #[tokio::test]
    async fn finished_records_beyond_the_cap_are_removed_oldest_first() {
        let marker = "300.1818";
        let (_dir, manager) = manager_with(|config| config.max_retained_per_scope = 2);
        let first = run(
            &manager,
            &format!("echo 1; sleep {marker} >/dev/null 2>&1 &"),
        )
        .await;
        let first_log = first.log_path.expect("log path");
        assert!(eventually(|| !live_processes_with(marker).is_empty()).await);
        // Running processes and other scopes do not count.
        let running = start(&manager, "sleep 30").await;
        run(&manager, "echo 2").await;
        let other = manager.start("b", request("echo b")).await.expect("start");
        let waited = manager.wait("b", &other, LONG, ReadFrom::All).await;
        assert!(!waited.expect("wait").running);
        let commands = |scope| {
            manager
                .list(scope)
                .into_iter()
                .map(|info| info.command)
                .collect::<Vec<_>>()
        };
        assert_eq!(commands(SCOPE).len(), 3);

        run(&manager, "echo 3").await;
        assert_eq!(commands(SCOPE), ["sleep 30", "echo 3", "echo 2"]);
        assert_eq!(commands("b"), ["echo b"]);
        assert!(!first_log.exists());
        // The removed record's leftover was killed.
        assert!(eventually(|| live_processes_with(marker).is_empty()).await);
        manager.signal(SCOPE, &running, Signal::Kill).expect("kill");
    }

    #[tokio::test]
    async fn a_start_dropped_mid_flight_leaves_nothing_behind() {
        let marker = "300.1919";
        let (_dir, manager) = manager();
        let command = format!("sleep {marker}");
        for round in 0..20 {
            let start = start_under_way(&manager, &command).await;
            if round % 2 == 1 {
                // Let the spawner answer: the answer is then dropped, unread, with the future.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            drop(start);
        }
        assert!(
            eventually(|| live_processes_with(marker).is_empty()).await,
            "left behind: {:?}",
            live_processes_with(marker)
        );
        // Every slot was given back.
        let busy = lock(&manager.table)
            .scopes
            .get(SCOPE)
            .map_or(0, |state| state.running + state.starting);
        assert_eq!(busy, 0);
    }

    #[tokio::test]
    async fn terminate_kills_members_that_outlive_the_leader() {
        let (marker, later) = ("300.2323", "300.2424");
        // Escalation used to be skipped when the process finished within the grace.
        let (_dir, manager) = manager_with(|config| {
            config.kill_grace = Duration::from_millis(600);
            config.drain_timeout = Duration::from_millis(100);
        });
        // The shell dies of SIGTERM at once; the subshell ignores it and holds the pipe.
        let id = start(
            &manager,
            &format!("(trap '' TERM; sleep {marker}) & echo ready; wait"),
        )
        .await;
        wait_for_output(&manager, &id, "ready").await;
        let begun = Instant::now();
        manager
            .signal(SCOPE, &id, Signal::Terminate)
            .expect("terminate");
        let snapshot = manager.wait(SCOPE, &id, LONG, ReadFrom::All).await;
        assert_eq!(snapshot.expect("wait").signal.as_deref(), Some("SIGTERM"));
        assert!(eventually(|| live_processes_with(marker).is_empty()).await);
        let waited = begun.elapsed();
        assert!(waited >= Duration::from_millis(500), "{waited:?}");

        // Finished before the signal: its leftover can still be terminated.
        let snapshot = run(&manager, &format!("(trap '' TERM; sleep {later}) &")).await;
        assert_eq!(snapshot.exit_code, Some(0));
        let id = manager.list(SCOPE)[0].id.clone();
        assert!(!live_processes_with(later).is_empty());
        manager
            .signal(SCOPE, &id, Signal::Terminate)
            .expect("terminate the leftover");
        assert!(eventually(|| live_processes_with(later).is_empty()).await);
        // Only the zombie leader is left of the group now.
        let not_running = eventually(|| {
            manager.signal(SCOPE, &id, Signal::Kill) == Err(ProcessError::NotRunning(id.clone()))
        });
        assert!(not_running.await);
    }

    #[tokio::test]
    async fn end_scope_refuses_starts_still_under_way() {
        let marker = "300.2020";
        let (_dir, manager) = manager();
        let command = format!("sleep {marker}");
        let start = start_under_way(&manager, &command).await;
        manager.end_scope(SCOPE).await;
        let error = start.await.expect_err("refused");
        let ProcessError::Failed(message) = error else {
            panic!("not Failed: {error:?}");
        };
        assert!(message.contains("ended"), "{message}");
        assert!(
            eventually(|| live_processes_with(marker).is_empty()).await,
            "left behind: {:?}",
            live_processes_with(marker)
        );
        assert!(manager.list(SCOPE).iter().all(|info| !info.running));
        // The scope can be used again.
        assert_eq!(run(&manager, "echo again").await.text, "again\n");
    }

    #[test]
    fn a_dropped_monitor_kills_its_process_and_gives_back_its_slot() {
        let marker = "300.2121";
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let (_dir, manager) = runtime.block_on(async {
            let (dir, manager) = manager();
            start(&manager, &format!("sleep {marker}")).await;
            // The monitor is under way.
            tokio::time::sleep(Duration::from_millis(50)).await;
            (dir, manager)
        });
        assert!(!live_processes_with(marker).is_empty());
        // Drops the monitor's task.
        drop(runtime);
        assert!(manager.list(SCOPE).is_empty());
        assert!(lock(&manager.table).scopes.is_empty());
        let mut gone = false;
        for _ in 0..500 {
            gone = live_processes_with(marker).is_empty();
            if gone {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(gone, "left behind: {:?}", live_processes_with(marker));
    }

    #[test]
    fn ids_are_unique_short_hex() {
        let mut seen = std::collections::HashSet::new();
        for n in 0..100_000 {
            assert!(seen.insert(permute48(n, 0x1234_5678_9abc_def0)));
        }
        let id = format!("{:012x}", permute48(7, random_seed()));
        assert_eq!(id.len(), 12);
        assert!(
            id.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
    }

    /// `cargo test --release -- --ignored --nocapture bench`: start+wait of `true` against
    /// `tokio::process::Command::status`, alternating rounds, medians.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "benchmark"]
    async fn bench_true_against_plain_tokio_process() {
        const ROUNDS: usize = 400;
        let (_dir, manager) = manager_with(|config| config.nice = 5);
        let (mut plain, mut ours) = (Vec::new(), Vec::new());
        for round in 0..ROUNDS + 20 {
            let begun = Instant::now();
            let status = tokio::process::Command::new("sh")
                .arg("-c")
                .arg("true")
                .status()
                .await
                .expect("status");
            assert!(status.success());
            let plain_time = begun.elapsed();
            let begun = Instant::now();
            let snapshot = run(&manager, "true").await;
            assert_eq!(snapshot.exit_code, Some(0));
            if round >= 20 {
                plain.push(plain_time);
                ours.push(begun.elapsed());
            }
        }
        plain.sort();
        ours.sort();
        let (plain, ours) = (plain[ROUNDS / 2], ours[ROUNDS / 2]);
        println!(
            "median: plain {plain:?}, manager {ours:?}, ratio {:.2}",
            ours.as_secs_f64() / plain.as_secs_f64()
        );
    }
}
