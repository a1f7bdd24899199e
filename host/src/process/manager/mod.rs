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
//!
//! The parts: `config.rs` (the settings), `table.rs` (the scope table: listed records,
//! per-scope counts and limits, closing), `entry.rs` (one process's record), `monitor.rs`
//! (the task that owns a running process: output, exit, drain, retention), `ids.rs`,
//! `spawner.rs` and `sys.rs` (creating processes; the Linux calls), `output_log.rs` (the
//! full-output files). Unit tests live in `tests.rs` and `*_tests.rs` beside them.

mod config;
mod entry;
mod ids;
mod monitor;
mod output_log;
mod spawner;
mod sys;
mod table;

use std::fmt;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::Signal as NixSignal;
use tokio::net::unix::pipe;
use tokio::runtime::Handle;
use tokio::time::Instant;

use super::{
    BoxFuture, OutputSnapshot, ProcessBackend, ProcessError, ProcessInfo, ReadFrom, Signal,
    StartRequest,
};
use crate::buffer::HeadTailBuffer;
pub use config::ProcessManagerConfig;
use entry::{Entry, EntrySpec, LogTarget, unix_ms};
use ids::Ids;
use monitor::{ExitWatch, FIRST_READ_CHUNK, LogSlot, Monitor, MonitorGuard, OutputReader};
use spawner::Spawner;
use sys::{ChildSpec, SpawnStep};
use table::{Records, shut_down};

/// After `SIGKILL`, how much longer than `drain_timeout` a stop waits for monitors to finish.
const KILL_SETTLE: Duration = Duration::from_secs(1);

/// Runs processes for guests: process groups, merged bounded output, full-output log files,
/// per-scope limits and isolation, reaping. See the module documentation.
///
/// Create it with [`ProcessManager::new`] inside a Tokio runtime; use it as
/// `Arc<dyn ProcessBackend>`.
pub struct ProcessManager {
    config: ProcessManagerConfig,
    log_dir: Option<Arc<Path>>,
    runtime: Handle,
    spawner: Option<Spawner>,
    ids: Ids,
    /// Shared with the monitors, which hold it weakly: once the manager is gone they no
    /// longer touch the table.
    records: Arc<Records>,
    log_warned: Arc<AtomicBool>,
    /// Learn of exits from pidfds where the kernel has them (`false` forces the `SIGCHLD`
    /// fallback, for its tests).
    pidfds: bool,
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
        Self::create(config, true)
    }

    fn create(config: ProcessManagerConfig, pidfds: bool) -> Arc<Self> {
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
        let records = Arc::new(Records::new(config.max_retained_per_scope));
        Arc::new(Self {
            config,
            log_dir: log_dir.map(Arc::from),
            runtime,
            spawner,
            ids: Ids::new(),
            records,
            log_warned: Arc::new(AtomicBool::new(log_warned)),
            pidfds,
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
        let entries = self.records.close();
        self.stop_all(&entries).await;
        for entry in &entries {
            self.records.remove(entry);
        }
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
        if self.records.is_closed() {
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
        let reservation = self
            .records
            .reserve(scope, self.config.max_running_per_scope)?;
        let (seq, id) = self.ids.next();

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

        let pidfd = spawned.take_pidfd().filter(|_| self.pidfds);
        let exit_watch = ExitWatch::new(pidfd).map_err(|error| {
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
        let entry = Entry::new(EntrySpec {
            seq,
            id: id.clone(),
            scope: scope.to_owned(),
            command,
            workdir,
            background,
            started_ms,
            started_at,
            leader: spawned.pid(),
            buffer: HeadTailBuffer::new(self.config.head_bytes, self.config.tail_bytes),
        });
        let admitted = self.records.admit(reservation, &entry);
        if admitted.is_err() {
            // Shut down, or the scope ended, while we were spawning: kill it; the monitor
            // sees it die, then cleans up without lingering.
            let _ = entry.signal_group(NixSignal::SIGKILL);
            entry.removed.send_replace(true);
        }
        let monitor = Monitor {
            guard: MonitorGuard {
                records: Arc::downgrade(&self.records),
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
            closed: self.records.subscribe_closed(),
        };
        // The monitor's guard owns the process from here (even if the task never runs).
        spawned.disarm();
        self.runtime.spawn(monitor.run());
        admitted.map(|()| id)
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
        let entry = self.records.find(scope, id)?;
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
            let entry = self.records.find(scope, id)?;
            entry
                .wait_finished(Instant::now().checked_add(timeout))
                .await;
            Ok(entry.snapshot(from))
        })
    }

    fn read(&self, scope: &str, id: &str, from: ReadFrom) -> Result<OutputSnapshot, ProcessError> {
        Ok(self.records.find(scope, id)?.snapshot(from))
    }

    fn list(&self, scope: &str) -> Vec<ProcessInfo> {
        self.records.list(scope)
    }

    fn signal(&self, scope: &str, id: &str, signal: Signal) -> Result<(), ProcessError> {
        self.send_signal(scope, id, signal)
    }

    fn end_scope<'a>(&'a self, scope: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let entries = self.records.end_scope(scope);
            self.stop_all(&entries).await;
        })
    }
}

impl Drop for ProcessManager {
    /// `SIGKILL` every process group before returning, hand the leaders to a short-lived
    /// thread that reaps them as they die (so the dropping thread, possibly a runtime worker,
    /// never waits for them), then delete the log files.
    fn drop(&mut self) {
        let entries = self.records.close_and_drain();
        let leaders: Vec<_> = entries
            .iter()
            .filter_map(|entry| entry.kill_group_and_take_leader())
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
            .field("processes", &self.records.len())
            .finish_non_exhaustive()
    }
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

#[cfg(test)]
mod tests;
