//! One process's record: its identity, its leader's pid (the process group id), its bounded
//! output and end state, its log file, and the channels that tell waiters and its monitor
//! that it finished or was released.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::sys::signal::{Signal as NixSignal, killpg};
use nix::unistd::Pid;
use tokio::sync::watch;
use tokio::time::Instant;

use super::output_log::OutputLog;
use super::sys::{self, Exit};
use crate::buffer::HeadTailBuffer;
use crate::process::{OutputSnapshot, ProcessInfo, ReadFrom};

/// One process's record.
pub(super) struct Entry {
    pub(super) seq: u64,
    pub(super) id: String,
    pub(super) scope: String,
    pub(super) command: String,
    pub(super) workdir: PathBuf,
    pub(super) background: bool,
    pub(super) started_ms: u64,
    pub(super) started_at: Instant,
    /// Counted in its scope's running count (until finished).
    pub(super) counted: AtomicBool,
    /// The leader's pid (= process group id) until it is reaped. While it is `Some`, the
    /// leader is our child, alive or a zombie, so the group id cannot be reused: every
    /// `killpg` and the reaping happen under this lock.
    pub(super) leader: Mutex<Option<Pid>>,
    pub(super) state: Mutex<EntryState>,
    /// `true` once the process has exited and its output is drained.
    pub(super) finished: watch::Sender<bool>,
    /// `true` once the record is released (or was never admitted): its monitor stops
    /// lingering.
    pub(super) removed: watch::Sender<bool>,
}

pub(super) struct EntryState {
    pub(super) buffer: HeadTailBuffer,
    /// Where the previous read of this process ended.
    pub(super) last_read_end: u64,
    /// Set when finished.
    pub(super) end: Option<Ended>,
    /// The log file, once created (at the first output).
    pub(super) log_path: Option<PathBuf>,
    /// Released: no log file may be created any more.
    pub(super) disposed: bool,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Ended {
    pub(super) exited_ms: u64,
    pub(super) duration_ms: u64,
    /// `None` only if the exit status could not be read.
    pub(super) exit: Option<Exit>,
}

/// What a new record is made of.
pub(super) struct EntrySpec {
    pub(super) seq: u64,
    pub(super) id: String,
    pub(super) scope: String,
    pub(super) command: String,
    pub(super) workdir: PathBuf,
    pub(super) background: bool,
    pub(super) started_ms: u64,
    pub(super) started_at: Instant,
    /// The leader, our unreaped child.
    pub(super) leader: Pid,
    /// Empty, sized for this process.
    pub(super) buffer: HeadTailBuffer,
}

impl Entry {
    /// A running process's record, not yet counted in its scope.
    pub(super) fn new(spec: EntrySpec) -> Arc<Self> {
        Arc::new(Self {
            seq: spec.seq,
            id: spec.id,
            scope: spec.scope,
            command: spec.command,
            workdir: spec.workdir,
            background: spec.background,
            started_ms: spec.started_ms,
            started_at: spec.started_at,
            counted: AtomicBool::new(false),
            leader: Mutex::new(Some(spec.leader)),
            state: Mutex::new(EntryState {
                buffer: spec.buffer,
                last_read_end: 0,
                end: None,
                log_path: None,
                disposed: false,
            }),
            finished: watch::channel(false).0,
            removed: watch::channel(false).0,
        })
    }

    pub(super) fn is_running(&self) -> bool {
        lock(&self.state).end.is_none()
    }

    /// Whether the leader is unreaped and its group has a member other than the zombie
    /// leader (checked through `/proc`, so only worth asking once the process finished).
    pub(super) fn has_leftovers(&self) -> bool {
        // Not under the lock (a scan of `/proc` takes a while). If the leader is reaped
        // meanwhile the answer may be stale, but a signal then goes nowhere anyway.
        let leader = *lock(&self.leader);
        leader.is_some_and(sys::group_has_live_member)
    }

    pub(super) fn append(&self, data: &[u8]) {
        lock(&self.state).buffer.write(data);
    }

    pub(super) fn ended_now(&self, exit: Option<Exit>) -> Ended {
        Ended {
            exited_ms: unix_ms(),
            duration_ms: millis(self.started_at.elapsed()),
            exit,
        }
    }

    /// Record the end (only when the manager is gone; see [`ProcessManager::finish`]).
    pub(super) fn finish_orphaned(&self, ended: Ended) {
        lock(&self.state).end = Some(ended);
        self.finished.send_replace(true);
    }

    /// Create the log file, unless the record has been released meanwhile.
    ///
    /// The file system is touched without holding any lock (`list` waits on `state` under
    /// the table lock, so a slow directory would otherwise hold up every call). A record
    /// released while the file was being created gets it deleted here.
    pub(super) fn create_log(&self, target: &LogTarget) -> Option<OutputLog> {
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
    pub(super) async fn wait_finished(&self, deadline: Option<Instant>) -> bool {
        let mut finished = self.finished.subscribe();
        let done = finished.wait_for(|finished| *finished);
        match deadline {
            Some(deadline) => matches!(tokio::time::timeout_at(deadline, done).await, Ok(Ok(_))),
            None => done.await.is_ok(),
        }
    }

    pub(super) fn snapshot(&self, from: ReadFrom) -> OutputSnapshot {
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

    pub(super) fn info(&self) -> ProcessInfo {
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
    pub(super) fn signal_group(&self, signal: NixSignal) -> Result<(), Errno> {
        match *lock(&self.leader) {
            Some(pgid) => killpg(pgid, signal),
            None => Err(Errno::ESRCH),
        }
    }

    /// `SIGKILL` the group and take the leader's pid out of the record, so nobody signals
    /// the group or reaps the leader after this: the caller must reap it. `None` when it was
    /// taken (reaped) already.
    pub(super) fn kill_group_and_take_leader(&self) -> Option<Pid> {
        let pid = lock(&self.leader).take()?;
        let _ = killpg(pid, NixSignal::SIGKILL);
        Some(pid)
    }

    /// Kill whatever is left of the group, reap the leader (at once if it is dead, else as
    /// soon as it dies, without blocking the caller), delete the log file, and tell the
    /// monitor to stop lingering. Doing it again does nothing.
    pub(super) fn dispose(&self) {
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
    pub(super) fn remove_log(&self) {
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

/// Where a process's log file goes once it has output.
pub(super) struct LogTarget {
    pub(super) dir: Arc<Path>,
    pub(super) cap: u64,
    /// Shared by the manager's processes: warn about an unusable directory only once.
    pub(super) warned: Arc<AtomicBool>,
}

/// Lock, recovering from poisoning (the protected data stays consistent: every critical
/// section is a few plain assignments).
pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(super) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

pub(super) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, millis)
}
