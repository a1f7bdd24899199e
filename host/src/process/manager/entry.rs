//! One process's record: its identity, its keeper (pid and control socket), its bounded
//! output and end state, its log file, and the channels that tell waiters and its monitor
//! that it finished, that nothing of it is left, or that it was released.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use std::os::fd::OwnedFd;

use tokio::sync::watch;
use tokio::time::Instant;

use super::input::InputSide;
use super::keeper;
use super::output_log::{OutputLog, ScopeLogs};
use super::reap::Exit;
use super::spawner::KeeperPid;
use crate::buffer::HeadTailBuffer;
use crate::lock;
use crate::process::{OutputSnapshot, ProcessInfo, ReadFrom, Signal, Until};
use crate::sandbox::diagnose::{self, Refusal, Refused};
use crate::sandbox::git_guard::{GitGuard, Moment};
use crate::sandbox::network::{AllowList, Refusals};
use crate::sandbox::{CommandCgroups, HiddenPaths, PrivateSpace, Profile, SandboxMode};
use crate::terminal::stream_view;

/// One process's record.
pub(super) struct Entry {
    /// What the process is, as set at its start.
    pub(super) spec: EntrySpec,
    /// Its cgroups (limits on everything it started), if any.
    pub(super) cgroups: Mutex<Option<CommandCgroups>>,
    /// Counted in its scope's running count (until finished).
    pub(super) counted: AtomicBool,
    /// The keeper: its pid until it is reaped (while it is `Some` the keeper is alive or a
    /// zombie nobody reaps, so the pid cannot be reused), and the host's end of its control
    /// socket until the record lets go of it (closing it stops everything under the keeper).
    pub(super) keeper: Mutex<Keeper>,
    /// Counted in the host's total of processes (`Table::holding`): from its admission until
    /// it lets go of its keeper and cgroups, leftovers and all (see `Records::let_go`).
    pub(super) holding: AtomicBool,
    pub(super) state: Mutex<EntryState>,
    /// `true` once the process has exited and its output is drained.
    pub(super) finished: watch::Sender<bool>,
    /// Set once the keeper reports that nothing the command started is left (or exited).
    pub(super) nothing_left: AtomicBool,
    /// The keeper died without reporting the command's end (an unconfined command killed
    /// it): what the command started is found by its mark instead (see `descendants.rs`).
    pub(super) keeper_lost: AtomicBool,
    /// `true` once the keeper has exited: nothing of the process is left, keeper included.
    pub(super) gone: watch::Sender<bool>,
    /// `true` once the record is released (or was never admitted): its monitor stops
    /// lingering.
    pub(super) removed: watch::Sender<bool>,
    /// Bytes of output recorded so far (changes wake `wait_until`).
    pub(super) progress: watch::Sender<u64>,
    /// Its stdin pipe or terminal.
    pub(super) input: InputSide,
    /// Bytes written to its log file so far.
    pub(super) log_bytes: AtomicU64,
    /// Bytes the process wrote so far (the host's notes not counted).
    pub(super) output_bytes: AtomicU64,
    /// The Unix sockets its keeper refused before it exited, as the keeper named them.
    pub(super) unix_refused: Mutex<Vec<String>>,
    /// What the confinement refused the command, once it ended ([`Entry::notes`]).
    pub(super) refused: Mutex<Vec<Refused>>,
    /// Replaces the person's secrets it was given in the command lines of its processes.
    redactor: Option<Arc<super::scrub::Redactor>>,
}

/// The host's hold on a process's keeper.
pub(super) struct Keeper {
    pub(super) pid: Option<KeeperPid>,
    pub(super) control: Option<OwnedFd>,
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

/// What a process is: set at its start, and held by its record as is.
pub(super) struct EntrySpec {
    pub(super) seq: u64,
    pub(super) id: String,
    pub(super) scope: String,
    pub(super) command: String,
    pub(super) workdir: PathBuf,
    pub(super) background: bool,
    /// The confinement it runs under.
    pub(super) profile: Profile,
    /// Who asked for it, for the record.
    pub(super) origin: crate::process::Origin,
    /// `RLIMIT_NPROC` holds its process limit (see `sandbox::Prepared`).
    pub(super) nproc_rlimit: bool,
    /// The sizes of its session's own `/tmp` and `/dev/shm`, when bounded.
    pub(super) private_space: Option<PrivateSpace>,
    /// What its session's network gate refuses, and the allow-list, under `allow=`.
    pub(super) network_gate: Option<(Arc<Refusals>, Arc<AllowList>)>,
    /// The paths hidden from it by the operator's settings, when it runs confined.
    pub(super) hidden: Option<Arc<HiddenPaths>>,
    /// Its scope's git guard, when it runs confined (see `sandbox/git_guard/`).
    pub(super) git_guard: Option<Arc<GitGuard>>,
    /// What the git guard undid right before it started.
    pub(super) git_note: Option<String>,
    /// When its output says that the host has no workspace (see `sandbox::Context::workdir`).
    pub(super) workspace_note: WorkspaceNote,
    /// The parents a call's `workdir` may choose the scope's workspace under, for that note.
    pub(super) workspace_parents: Option<Arc<[PathBuf]>>,
    pub(super) started_ms: u64,
    pub(super) started_at: Instant,
}

/// When a command's output says that the host has no workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WorkspaceNote {
    /// Never: it has one, or the command runs unconfined.
    Never,
    /// When the command fails.
    OnFailure,
    /// Always: the first confined command of its scope.
    Always,
}

/// What a new record takes over from its start: the keeper and what the process holds.
pub(super) struct Held {
    /// Its cgroups (limits on everything it started), if any.
    pub(super) cgroups: Option<CommandCgroups>,
    /// The keeper, unreaped.
    pub(super) keeper: KeeperPid,
    /// The host's end of the keeper's control socket.
    pub(super) control: OwnedFd,
    /// Empty, sized for this process.
    pub(super) buffer: HeadTailBuffer,
    /// Its stdin pipe or terminal.
    pub(super) input: InputSide,
    /// Replaces the person's secrets it was given in the command lines of its processes.
    pub(super) redactor: Option<Arc<super::scrub::Redactor>>,
}

impl Entry {
    /// `leftovers` with the person's secrets the command was given replaced in their command
    /// lines.
    pub(super) fn redacted(
        &self,
        mut leftovers: Vec<crate::process::Leftover>,
    ) -> Vec<crate::process::Leftover> {
        if let Some(redactor) = &self.redactor {
            for leftover in &mut leftovers {
                leftover.command = redactor.text(&leftover.command);
            }
        }
        leftovers
    }

    /// A running process's record, not yet counted in its scope.
    pub(super) fn new(spec: EntrySpec, held: Held) -> Arc<Self> {
        Arc::new(Self {
            spec,
            cgroups: Mutex::new(held.cgroups),
            counted: AtomicBool::new(false),
            holding: AtomicBool::new(false),
            keeper: Mutex::new(Keeper {
                pid: Some(held.keeper),
                control: Some(held.control),
            }),
            state: Mutex::new(EntryState {
                buffer: held.buffer,
                last_read_end: 0,
                end: None,
                log_path: None,
                disposed: false,
            }),
            finished: watch::channel(false).0,
            nothing_left: AtomicBool::new(false),
            keeper_lost: AtomicBool::new(false),
            gone: watch::channel(false).0,
            removed: watch::channel(false).0,
            progress: watch::channel(0).0,
            input: held.input,
            log_bytes: AtomicU64::new(0),
            output_bytes: AtomicU64::new(0),
            unix_refused: Mutex::new(Vec::new()),
            refused: Mutex::new(Vec::new()),
            redactor: held.redactor,
        })
    }

    /// Keep the Unix sockets the keeper refused, for [`Entry::notes`].
    pub(super) fn unix_refused(&self, refused: Vec<String>) {
        *lock(&self.unix_refused) = refused;
    }

    pub(super) fn is_running(&self) -> bool {
        lock(&self.state).end.is_none()
    }

    /// Whether something the command started is still running (its keeper has not exited).
    pub(super) fn has_leftovers(&self) -> bool {
        if self.keeper_lost.load(Ordering::Acquire) {
            return !self.marked_processes().is_empty();
        }
        !self.nothing_left.load(Ordering::Acquire) && lock(&self.keeper).control.is_some()
    }

    /// Notes for the model, appended to the output when the command has ended: what the
    /// confinement refused it (`sandbox/diagnose.rs`), each refusal's note in turn. The
    /// refusals are kept, typed, for the command's snapshots ([`Refused`]).
    pub(super) fn notes(&self, exit: Option<Exit>) -> Option<String> {
        let refused: Vec<Refused> = self
            .refusals(exit)
            .into_iter()
            .map(|reason| Refused {
                note: reason.note(),
                reason,
            })
            .collect();
        let note: String = refused
            .iter()
            .map(|refused| refused.note.as_str())
            .collect();
        *lock(&self.refused) = refused;
        (!note.is_empty()).then(|| note + "\n")
    }

    /// What the confinement refused this command, in the order of `diagnose.rs`'s flow: the
    /// limits it reached, the sockets and hosts refused, and, when nothing of these explains a
    /// failure, what its output shows.
    fn refusals(&self, exit: Option<Exit>) -> Vec<Refusal> {
        let mut refusals = self.limit_refusals();
        let unix_refused = lock(&self.unix_refused).clone();
        if !unix_refused.is_empty() {
            refusals.push(Refusal::UnixSockets(unix_refused));
        }
        if let Some((gate_refusals, list)) = &self.spec.network_gate
            && let Some(refused) = crate::sandbox::network::refusal(
                gate_refusals,
                list,
                self.spec.started_ms,
                lock(&self.keeper)
                    .pid
                    .as_ref()
                    .map(|keeper| keeper.pid().as_raw()),
            )
        {
            refusals.push(refused);
        }
        let failed = exit.is_some_and(|exit| exit.exit_code() != 0);
        // Nothing confines an unconfined command: its output is not rendered for a diagnosis.
        if failed && refusals.is_empty() && self.spec.profile.mode != SandboxMode::Off {
            let text = lock(&self.state).buffer.render().text;
            refusals.extend(diagnose::in_output(
                &text,
                &self.spec.profile,
                self.spec.nproc_rlimit,
                self.spec.hidden.as_deref(),
                &self.spec.workdir,
                self.spec.started_ms,
            ));
        }
        if self.spec.workspace_note == WorkspaceNote::Always
            || (failed && self.spec.workspace_note == WorkspaceNote::OnFailure)
        {
            let parents = self.spec.workspace_parents.as_deref().unwrap_or_default();
            refusals.push(Refusal::NoWorkspace(parents.to_vec()));
        }
        refusals
    }

    /// The git guard's note, for the end of the output: what it undid right before the command
    /// started, and what it undoes now that the command ended (a check on a blocking thread).
    pub(super) async fn git_notes(&self) -> Option<String> {
        let now = match &self.spec.git_guard {
            Some(guard) => guard.check(Moment::End).await,
            None => None,
        };
        match (&self.spec.git_note, now) {
            (None, None) => None,
            (before, now) => Some(format!(
                "{}{}\n",
                before.as_deref().unwrap_or_default(),
                now.unwrap_or_default()
            )),
        }
    }

    /// The limits this command reached (step 1 of `diagnose.rs`'s flow), each logged.
    fn limit_refusals(&self) -> Vec<Refusal> {
        let mut refusals = Vec::new();
        if let Some(space) = self.spec.private_space
            && lock(&self.state)
                .buffer
                .render()
                .text
                .contains("No space left on device")
        {
            refusals.push(Refusal::SpaceFull {
                tmp_bytes: space.tmp,
                shm_bytes: space.shm,
            });
        }
        // Without a pids cgroup, RLIMIT_NPROC may hold the process count: a refused fork reads
        // "Resource temporarily unavailable" (EAGAIN).
        if let Some(processes) = self.spec.profile.limits.processes
            && self.spec.profile.mode != SandboxMode::Off
            && self.spec.nproc_rlimit
        {
            let text = lock(&self.state).buffer.render().text;
            if text.contains("Cannot fork") || text.contains("Resource temporarily unavailable") {
                tracing::warn!(
                    scope = %self.spec.scope,
                    id = %self.spec.id,
                    "forks of a command failed: its session's commands may have reached their limit of {processes} processes"
                );
                refusals.push(Refusal::ScopeProcesses(processes));
            }
        }
        let cgroups = lock(&self.cgroups);
        let Some(cgroups) = cgroups.as_ref() else {
            return refusals;
        };
        if let Some(kill) = cgroups.memory_kill() {
            tracing::warn!(
                scope = %self.spec.scope,
                id = %self.spec.id,
                "a process of a command was killed {}",
                diagnose::memory_why(kill)
            );
            refusals.push(Refusal::Memory(kill));
        }
        if let Some(processes) = self.spec.profile.limits.processes
            && cgroups.process_limit_hit()
        {
            tracing::warn!(
                scope = %self.spec.scope,
                id = %self.spec.id,
                "a command reached its limit of {processes} processes"
            );
            refusals.push(Refusal::Processes(processes));
        }
        refusals
    }

    /// Record output the process wrote (and show it on its terminal's screen).
    pub(super) fn record_output(&self, data: &[u8]) {
        self.input.feed(data);
        self.output_bytes
            .fetch_add(data.len() as u64, Ordering::AcqRel);
        self.append(data);
    }

    /// Add to the recorded output (the process's, or a note of the host's).
    pub(super) fn append(&self, data: &[u8]) {
        let total = {
            let mut state = lock(&self.state);
            state.buffer.write(data);
            state.buffer.total_bytes()
        };
        self.progress.send_replace(total);
    }

    /// Wait until `until` holds for the output after `from`, the process finishes, or
    /// `deadline` (`None`: no deadline).
    pub(super) async fn wait_until(
        &self,
        until: &Until,
        from: ReadFrom,
        deadline: Option<Instant>,
    ) {
        let start = match from {
            ReadFrom::All => 0,
            ReadFrom::Cursor(position) => position,
            ReadFrom::Unread => lock(&self.state).last_read_end,
        };
        let mut progress = self.progress.subscribe();
        let mut finished = self.finished.subscribe();
        let deadline = async {
            match deadline {
                Some(deadline) => tokio::time::sleep_until(deadline).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(deadline);
        loop {
            if *finished.borrow_and_update() {
                return;
            }
            let total = *progress.borrow_and_update();
            let done = match until {
                Until::Exit | Until::Quiet(_) => false,
                Until::Output => total > start,
                Until::Text(text) => self.peek_from(start).contains(text.as_str()),
            };
            if done {
                return;
            }
            let quiet = async {
                match until {
                    Until::Quiet(quiet) => self.quiet_or_reading_input(*quiet).await,
                    _ => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = progress.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                changed = finished.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                () = &mut deadline => return,
                () = quiet => return,
            }
        }
    }

    /// The output after `position` as a read would show it, without moving the unread mark.
    fn peek_from(&self, position: u64) -> String {
        let text = lock(&self.state).buffer.render_from(position).text;
        if self.input.is_terminal() {
            stream_view(&text)
        } else {
            text
        }
    }

    pub(super) fn ended_now(&self, exit: Option<Exit>) -> Ended {
        Ended {
            exited_ms: unix_ms(),
            duration_ms: millis(self.spec.started_at.elapsed()),
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
        let log = match OutputLog::create(&target.dir, &self.spec.id, target.cap) {
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
                state.log_path = Some(log.path().to_owned());
                target.logs.add(&self.spec.id, log.path());
                return Some(log);
            }
        }
        // Released meanwhile: nobody will be told of this (empty) file.
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
        wait_until(&self.finished, deadline).await
    }

    /// Wait until nothing of the process is left, or `deadline`. Returns whether it is gone.
    pub(super) async fn wait_gone(&self, deadline: Option<Instant>) -> bool {
        wait_until(&self.gone, deadline).await
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
        let snapshot = OutputSnapshot {
            text: if self.input.is_terminal() {
                stream_view(&rendered.text)
            } else {
                rendered.text
            },
            running: state.end.is_none(),
            exit_code: exit.map(Exit::exit_code),
            signal: exit.and_then(Exit::signal_name),
            truncation: rendered.truncation,
            cursor,
            log_path: state.log_path.clone(),
            log_bytes: state
                .log_path
                .as_ref()
                .map(|_| self.log_bytes.load(Ordering::Acquire)),
            log_capped: state.log_path.is_some() && self.log_capped(),
            duration_ms: state.end.map_or_else(
                || millis(self.spec.started_at.elapsed()),
                |end| end.duration_ms,
            ),
            left_running: Vec::new(),
            refusals: Vec::new(),
        };
        drop(state);
        OutputSnapshot {
            left_running: self.left_running(),
            refusals: lock(&self.refused).clone(),
            ..snapshot
        }
    }

    pub(super) fn info(&self) -> ProcessInfo {
        let end = lock(&self.state).end;
        let exit = end.and_then(|end| end.exit);
        ProcessInfo {
            id: self.spec.id.clone(),
            command: self.spec.command.clone(),
            workdir: self.spec.workdir.clone(),
            background: self.spec.background,
            profile: self.spec.profile.summary_with(self.spec.nproc_rlimit),
            running: end.is_none(),
            started_ms: self.spec.started_ms,
            exited_ms: end.map(|end| end.exited_ms),
            exit_code: exit.map(Exit::exit_code),
            signal: exit.and_then(Exit::signal_name),
            stdin: self.input.kind,
            left_running: self.left_running(),
        }
    }

    /// Have the keeper send `signal` to everything the command started. `false` when there
    /// is nothing to signal any more (the keeper has exited or was let go).
    pub(super) fn signal_all(&self, signal: Signal) -> bool {
        if self.keeper_lost.load(Ordering::Acquire) {
            return self.signal_marked(signal);
        }
        match &lock(&self.keeper).control {
            Some(control) => keeper::request(control, signal).is_ok(),
            None => false,
        }
    }

    /// Let go of the keeper: close its control socket, which makes it kill everything under
    /// it and exit, and take its pid out of the record, so nobody signals or reaps it after
    /// this: the caller must reap it. `None` when it was taken (reaped) already.
    pub(super) fn release_keeper(&self) -> Option<KeeperPid> {
        let mut keeper = lock(&self.keeper);
        keeper.control = None;
        keeper.pid.take()
    }

    /// Stop whatever is left of the process, reap its keeper (at once if it is dead, else as
    /// soon as it dies, without blocking the caller), delete the log file, and tell the
    /// monitor to stop lingering. Doing it again does nothing.
    pub(super) fn dispose(&self) {
        if self.keeper_lost.load(Ordering::Acquire) {
            self.signal_marked(Signal::Kill);
        }
        if let Some(keeper) = self.release_keeper() {
            // Forgotten under the lock, so nobody signals the keeper after this; the pid
            // cannot be reused before `stop_and_reap` reaps it.
            keeper.stop_and_reap();
        }
        self.removed.send_replace(true);
        self.close_log();
    }

    /// Nothing of the process is left and its end was recorded: reap its keeper and remove
    /// its cgroups now instead of when the record goes (a finished record keeps only its
    /// output), so finished records hold no process, descriptor or cgroup. Signalling it then
    /// finds nothing to signal, as it should.
    pub(super) fn release_when_gone(&self) {
        if let Some(keeper) = self.release_keeper() {
            keeper.stop_and_reap();
        }
        let cgroups = lock(&self.cgroups).take();
        drop(cgroups);
    }

    /// Forbid creating the log file from now on. An existing file stays: paths given to a
    /// model stay valid for the log retention (see [`super::output_log::sweep`]).
    pub(super) fn close_log(&self) {
        lock(&self.state).disposed = true;
    }

    /// The log file, once created.
    pub(super) fn log_path(&self) -> Option<PathBuf> {
        lock(&self.state).log_path.clone()
    }

    /// The log lacks output the process wrote: the log is written before the buffer
    /// (`monitor.rs`), so a shortfall is a cap.
    pub(super) fn log_capped(&self) -> bool {
        self.log_bytes.load(Ordering::Acquire) < self.output_bytes.load(Ordering::Acquire)
    }
}

/// Where a process's log file goes once it has output.
pub(super) struct LogTarget {
    pub(super) dir: Arc<Path>,
    pub(super) cap: u64,
    /// Where the file is registered for its scope.
    pub(super) logs: Arc<ScopeLogs>,
    /// Shared by the manager's processes: warn about an unusable directory only once.
    pub(super) warned: Arc<AtomicBool>,
}

/// Wait until `flag` is `true` or `deadline` (`None`: no deadline). Returns whether it is.
async fn wait_until(flag: &watch::Sender<bool>, deadline: Option<Instant>) -> bool {
    let mut flag = flag.subscribe();
    let done = flag.wait_for(|set| *set);
    match deadline {
        Some(deadline) => matches!(tokio::time::timeout_at(deadline, done).await, Ok(Ok(_))),
        None => done.await.is_ok(),
    }
}

pub(super) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

pub(super) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, millis)
}
