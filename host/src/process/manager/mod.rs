//! [`ProcessManager`], the real [`ProcessBackend`]: runs `SHELL -c COMMAND` for guests.
//!
//! # A process's life at a glance
//!
//! 1. **Start.** The request is checked: the command, its variables, its working directory.
//!    A slot is reserved in the scope and on the host before anything is built. The scope's
//!    sandbox for the command's profile is built on first use, on a blocking thread.
//! 2. **Spawn.** The manager's spawner thread creates the command's *keeper*
//!    (`spawner.rs` says why that thread). It does so the way `posix_spawn` does, with
//!    `clone(CLONE_VM | CLONE_VFORK)`, so the host's memory is never copied (`child.rs`).
//!    Before `exec`, the child leads its own session and asks for `SIGTERM` when the spawner
//!    thread dies. It closes every descriptor but its stdio and the keeper's channels. A start
//!    abandoned half-way (its future dropped) stops and reaps what it spawned. A confined
//!    start first looks for a keeper prepared ahead for its scope and profile (`ready.rs`):
//!    that one is in its command's cgroups and the scope's namespaces already, and is only
//!    handed the command on its control socket; the next one is prepared after the start.
//! 3. **Keep.** The keeper (`keeper.rs` here; the program is `keeper/`) is the host's direct
//!    child and the command's parent. It is a child subreaper. So everything the command
//!    starts stays its descendant, even after `setsid`, `setpgid`, GNU `timeout` or a double
//!    fork. Signals go through the keeper to every descendant.
//! 4. **Capture.** The command's stdout and stderr are the write end of one pipe, so output
//!    keeps the order it was written in. Its stdin is `/dev/null` unless a pipe or a terminal
//!    was asked for (`input.rs`, `pty.rs`). One task per process, its *monitor*
//!    (`monitor.rs`), reads the pipe into a [`HeadTailBuffer`]. It also appends the output to
//!    `<state_dir>/<id>.log` (`output_log.rs`), a capped file made at the first output. The
//!    log file is made, written and deleted without holding any lock. So a slow file system
//!    never holds up `list`, `read` and the other calls that look at the records.
//! 5. **Exit.** The monitor learns of the command's exit from the keeper's status pipe, never
//!    by polling. It then drains the output until end-of-file or `drain_timeout`. So a
//!    daemonised grandchild holding the pipe open cannot hang anyone. Then it marks the
//!    process finished, which wakes every waiter through a `watch` channel. At end-of-file it
//!    closes the pipe and the log file, so a retained record holds no descriptor.
//! 6. **Leftovers.** The status pipe ends when the keeper exits. The keeper exits once
//!    nothing of the command is left. Until then the process can still be signalled, and
//!    `SIGTERM` escalates to `SIGKILL`.
//! 7. **Removal.** The record is removed `retention` after the exit. It goes earlier when its
//!    scope holds more than `max_retained_per_scope` finished records (oldest first). It also
//!    goes earlier when the host holds more than `max_retained_total`: then the host's oldest
//!    record with nothing left running goes, so another session's leftovers are not killed.
//!    Removal closes the keeper's control socket, which makes the keeper kill whatever is
//!    left. Then the keeper is reaped (`reap.rs`). The keeper stays the host's child (a
//!    zombie once it exits) until then, so its pid cannot be reused while the record may
//!    signal it. The output log stays for `log_retention`.
//!
//! A monitor that stops early (a panic, the runtime shutting down) kills the process, gives
//! back the scope's slot and removes the record all the same.
//!
//! # What ends with the host
//!
//! * [`ProcessManager::shutdown`] sends `SIGTERM` to every descendant, then `SIGKILL` after
//!   `kill_grace`. It waits until every keeper reports nothing left.
//! * Dropping the manager closes every control socket before it returns. The keepers then kill
//!   everything under them. They are reaped from a short-lived thread, so the drop never
//!   waits for them.
//! * When the host is killed outright (`SIGKILL`, a crash), the kernel closes the control
//!   sockets and sends the keepers their parent-death signal. They kill everything under
//!   them all the same.
//! * A keeper cannot stop a command that kills its own keeper (it runs as the same user).
//!   That command's descendants go to the next subreaper or `init`.
//!
//! The host must not set `SIGCHLD` to `SIG_IGN`: children would be reaped behind its back.
//!
//! # The parts
//!
//! * `config.rs`: the settings.
//! * `table.rs`: the scope table: listed records, per-scope counts and limits, closing.
//! * `entry.rs`: one process's record.
//! * `monitor.rs`: the task that owns a running process: output, exit, drain, retention.
//! * `ids.rs`: process ids.
//! * `input.rs`: a process's stdin pipe or terminal; `pty.rs`: opening a terminal.
//! * `keeper.rs`: the host's side of the keeper: its channels, its descriptors, the start
//!   message's sending (its executable is `keeper_binary.rs`, shared with the sandbox).
//! * `spawner.rs`: the spawner thread.
//! * `ready.rs`: keepers prepared ahead.
//! * `scope.rs`: what a scope holds besides its processes (its sandbox, its git guard), and
//!   the order it is let go in.
//! * `spec.rs`: what the child runs, and with what (safe code).
//! * `child.rs`: the child between `clone` and `exec`.
//! * `reap.rs`: waiting for and reaping the keepers.
//! * `output_log.rs`: the full-output files.
//!
//! Unit tests live in `tests.rs` and `*_tests.rs` beside them.

mod child;
mod config;
mod descendants;
mod entry;
mod ids;
mod input;
mod keeper;
mod monitor;
mod output_log;
mod pty;
mod ready;
mod reap;
mod scope;
mod spawner;
mod spec;
mod table;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::unix::pipe;
use tokio::runtime::Handle;
use tokio::time::Instant;

use super::{
    BoxFuture, LogPage, OutputSnapshot, ProcessBackend, ProcessError, ProcessInfo, ReadFrom,
    Signal, StartRequest, Stdin, Until,
};
use crate::buffer::HeadTailBuffer;
use crate::sandbox::git_guard::{GitGuard, Moment};
use crate::sandbox::namespaces::NamespaceKind;
use crate::sandbox::{self, CommandCgroups, Prepared, Profile, ScopeSandbox, canonical};
use crate::terminal::{Key, Screen, TerminalSize};
use child::SpawnStep;
pub use config::ProcessManagerConfig;
use entry::{Entry, EntrySpec, LogTarget, unix_ms};
use ids::Ids;
use input::InputSide;
use monitor::{FIRST_READ_CHUNK, LogSlot, Monitor, MonitorGuard, OutputReader};
use output_log::LogIndex;
use ready::{ReadyKeeper, ReadyKeepers};
use scope::Scope;
use spawner::Spawner;
use spec::{ChildSpec, Launch, StartMessage};
use table::{Records, shut_down};

pub use crate::sandbox::probe::{namespaces_available, namespaces_here};

/// The paths hidden from this host's confined commands (see `sandbox/secrets/`), with what the
/// content scan finds (its cache in `state_dir`, skipping the `skip` paths), said once where no
/// home directory resolves or a `--reveal` path is not hidden by default.
fn hidden_paths(
    settings: &sandbox::SandboxSettings,
    state_dir: Option<&Path>,
    skip: Vec<PathBuf>,
) -> sandbox::HiddenPaths {
    let scan = sandbox::ScanSettings {
        enabled: settings.secret_scan && settings.mode != sandbox::SandboxMode::Off,
        cache_dir: state_dir.map(Path::to_path_buf),
        skip,
    };
    let hidden =
        sandbox::HiddenPaths::of_this_user_scanned(&settings.hide, &settings.reveal, &scan)
            .unwrap_or_else(|error| {
                tracing::warn!("{error}: ignored, nothing is revealed");
                sandbox::HiddenPaths::of_this_user_scanned(&settings.hide, &[], &scan)
                    .unwrap_or_default()
            });
    if hidden.homes.is_empty() && settings.mode != sandbox::SandboxMode::Off {
        tracing::warn!(
            "no home directory resolves ($HOME is unset, relative or /, and the user has no \
             passwd entry with one): the credential stores under a home (~/.ssh, ~/.aws, ...) \
             are not hidden from confined commands; set HOME or pass --hide"
        );
    }
    if settings.mode != sandbox::SandboxMode::Off {
        for home in hidden.homes.iter().filter(|home| home.starts_with("/tmp")) {
            tracing::warn!(
                home = %home.display(),
                "a home directory under /tmp: a credential store made in it after the \
                 session started is hidden from the commands that start after it appears, not \
                 from those already running"
            );
        }
    }
    hidden
}

/// A command's stdio as the host sets it up.
struct Io {
    /// What the host reads the output from.
    output: pipe::Receiver,
    /// The command's stdout and stderr.
    output_fd: OwnedFd,
    /// The command's stdin when it is not `/dev/null`, and whether it is a terminal.
    child_stdin: Option<(OwnedFd, bool)>,
    /// The host's side of its input.
    input: InputSide,
}

/// Open the command's stdio for `stdin`: one pipe for stdout and stderr (and one for stdin if
/// asked for), or a terminal for all three.
fn open_io(stdin: Stdin) -> Result<Io, ProcessError> {
    let pipe_error =
        |error: io::Error| ProcessError::Failed(format!("cannot create the output pipe: {error}"));
    // The default capacity: asking for more (`F_SETPIPE_SZ`) would count against the user's
    // pipe allowance (`pipe-user-pages-soft`), past which every new pipe of the user gets a
    // single page. Both ends close-on-exec in the parent.
    let output_pipe = || -> Result<(pipe::Receiver, OwnedFd), ProcessError> {
        let (reader, writer) = io::pipe().map_err(pipe_error)?;
        let output = pipe::Receiver::from_owned_fd(OwnedFd::from(reader)).map_err(pipe_error)?;
        Ok((output, OwnedFd::from(writer)))
    };
    match stdin {
        Stdin::Closed => {
            let (output, output_fd) = output_pipe()?;
            Ok(Io {
                output,
                output_fd,
                child_stdin: None,
                input: InputSide::closed(),
            })
        }
        Stdin::Pipe => {
            let (output, output_fd) = output_pipe()?;
            let input_error = |error: io::Error| {
                ProcessError::Failed(format!("cannot create the input pipe: {error}"))
            };
            let (reader, writer) = io::pipe().map_err(input_error)?;
            let writer = pipe::Sender::from_owned_fd(OwnedFd::from(writer)).map_err(input_error)?;
            Ok(Io {
                output,
                output_fd,
                child_stdin: Some((OwnedFd::from(reader), false)),
                input: InputSide::pipe(writer),
            })
        }
        Stdin::Terminal(size) => {
            let pty_error =
                |error: io::Error| ProcessError::Failed(format!("cannot open a terminal: {error}"));
            let terminal = pty::open(size).map_err(pty_error)?;
            let dup = |fd: &OwnedFd| fd.try_clone().map_err(pty_error);
            let output = pipe::Receiver::from_owned_fd_unchecked(dup(&terminal.master)?)
                .map_err(pty_error)?;
            let writer =
                pipe::Sender::from_owned_fd_unchecked(dup(&terminal.master)?).map_err(pty_error)?;
            Ok(Io {
                output,
                output_fd: dup(&terminal.slave)?,
                child_stdin: Some((terminal.slave, true)),
                input: InputSide::terminal(writer, terminal.master, size),
            })
        }
    }
}

/// The longest a keeper prepared ahead waits for the command just started to finish before
/// it is made (see [`ProcessManager::prepare_ahead`]).
const READY_AFTER: Duration = Duration::from_millis(50);

/// The longest a start waits for the keeper being spawned ahead for its scope and profile
/// before it makes its own.
const READY_WAIT: Duration = Duration::from_millis(20);

/// The least a shutdown waits, after the kill, for what is still not gone.
const LAST_WAIT: Duration = Duration::from_secs(5);

/// After `SIGKILL`, how much longer than `drain_timeout` a stop waits for monitors to finish.
const KILL_SETTLE: Duration = Duration::from_secs(1);

/// Runs processes for guests: each under a keeper, merged bounded output, full-output log files,
/// per-scope limits and isolation, reaping. See the module documentation.
///
/// Create it with [`ProcessManager::new`] inside a Tokio runtime; use it as
/// `Arc<dyn ProcessBackend>`.
pub struct ProcessManager {
    config: ProcessManagerConfig,
    log_dir: Option<Arc<Path>>,
    /// Which scope's process wrote which log.
    logs: Arc<LogIndex>,
    runtime: Handle,
    spawner: Option<Spawner>,
    ids: Ids,
    /// Shared with the monitors, which hold it weakly: once the manager is gone they no
    /// longer touch the table.
    records: Arc<Records>,
    log_warned: Arc<AtomicBool>,
    /// What confined commands may write and never reach.
    sandbox_context: Arc<sandbox::Context>,
    /// Per scope: its confinement state and git guard (`scope.rs`).
    scopes: Mutex<HashMap<String, Arc<Scope>>>,
    /// The context's hidden and visible roots, resolved once for the `workdir` check.
    path_roots: PathRoots,
    /// Keepers prepared ahead for confined commands (`ready.rs`).
    ready: Arc<ReadyKeepers>,
    /// The tasks making keepers ahead, until each is put in the pool or released.
    ready_making: tokio_util::task::TaskTracker,
}

/// The roots the `workdir` check compares a request's directory with, resolved once.
#[derive(Debug)]
struct PathRoots {
    /// The user's credential stores, `--hide` paths and the host's own files.
    hidden: Vec<PathBuf>,
    /// The workspace and the `--writable` directories: visible even inside a hidden path (the
    /// sandbox does not cover a hidden directory that holds one).
    visible: Vec<PathBuf>,
}

impl PathRoots {
    fn of(context: &sandbox::Context) -> PathRoots {
        PathRoots {
            hidden: context
                .hidden
                .paths
                .iter()
                .chain(&context.protected)
                .map(|path| canonical(path))
                .collect(),
            visible: std::iter::once(&context.workdir)
                .chain(&context.writable)
                .map(|path| canonical(path))
                .collect(),
        }
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
        // What unconfined commands of hosts killed outright left behind, once per process.
        static SWEPT: std::sync::Once = std::sync::Once::new();
        SWEPT.call_once(|| {
            if let Err(error) = std::thread::Builder::new()
                .name("toolhost-orphan-sweep".to_owned())
                .spawn(descendants::sweep_orphans_of_gone_hosts)
            {
                tracing::debug!(%error, "cannot sweep orphans of gone hosts");
            }
        });
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
        // Found (and, for cgroup v2, the host's own cgroup arranged) before the first process
        // is started: moving the host into a leaf needs it alone in its cgroup.
        let _ = sandbox::cgroup::hierarchies();
        let records = Arc::new(Records::new(
            config.max_retained_per_scope,
            config.max_retained_total,
        ));
        let logs = Arc::new(LogIndex::default());
        if let Some(dir) = log_dir
            .as_deref()
            .filter(|dir| output_log::sweep_due(dir, config.sweep_interval()))
        {
            // Logs of earlier hosts past the retention, also of hosts that died.
            let swept = output_log::sweep(
                dir,
                config.log_retention,
                config.log_max_total,
                &HashSet::new(),
                &logs,
            );
            tracing::debug!(?swept, dir = %dir.display(), "swept output logs");
        }
        let workdir = config
            .default_workdir
            .clone()
            .or_else(|| std::env::current_dir().ok())
            .unwrap_or_else(|| PathBuf::from("/"));
        // The content scan runs here, before the first confined command (cached after).
        let hidden = hidden_paths(
            &config.sandbox,
            log_dir.as_deref(),
            std::iter::once(workdir.clone())
                .chain(config.protected.iter().cloned())
                .chain(log_dir.clone())
                .collect(),
        );
        let sandbox_context = Arc::new(sandbox::Context {
            workdir,
            writable: config.sandbox.writable.clone(),
            hidden: Arc::new(hidden),
            shm_bytes: config.sandbox.shm_bytes,
            tmp_bytes: config.sandbox.tmp_bytes,
            memory_per_session: config.sandbox.memory_per_session,
            memory_total: config.sandbox.memory_total,
            temp_parent: log_dir.as_ref().map(|dir| dir.join("tmp")),
            allow_hook_writes: config.sandbox.allow_hook_writes,
            protected: config
                .protected
                .iter()
                .cloned()
                .chain(log_dir.clone())
                .collect(),
            namespaces_layer: true,
            allow_unix_sockets: config.sandbox.allow_unix_socket.clone(),
        });
        Arc::new(Self {
            log_dir: log_dir.map(Arc::from),
            logs,
            runtime,
            spawner,
            ids: Ids::new(),
            records,
            log_warned: Arc::new(AtomicBool::new(log_warned)),
            path_roots: PathRoots::of(&sandbox_context),
            sandbox_context,
            scopes: Mutex::new(HashMap::new()),
            ready_making: tokio_util::task::TaskTracker::new(),
            ready: Arc::new(ReadyKeepers::new(
                config.ready_keepers,
                config.ready_keeper_idle,
            )),
            config,
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

    /// Delete log files past the retention or over the total (see
    /// [`ProcessManagerConfig::log_retention`]); the logs of listed processes stay. Blocking
    /// file-system work: call it from a blocking context.
    pub fn sweep_logs(&self) {
        let Some(dir) = &self.log_dir else { return };
        let keep: HashSet<PathBuf> = self.records.log_paths().into_iter().collect();
        let swept = output_log::sweep(
            dir,
            self.config.log_retention,
            self.config.log_max_total,
            &keep,
            &self.logs,
        );
        if swept.expired + swept.over_total > 0 {
            tracing::info!(
                expired = swept.expired,
                over_total = swept.over_total,
                kept_bytes = swept.kept_bytes,
                "deleted old output logs"
            );
        }
    }

    /// Stop everything: refuse new starts, send `SIGTERM` to every process and all it started, wait up to
    /// `kill_grace` for them to finish, `SIGKILL` what is left, then remove every record (the
    /// output logs stay for their retention). Dropping the manager afterwards has nothing left to do.
    pub async fn shutdown(&self) {
        let entries = self.records.close();
        self.release(self.ready.close()).await;
        // Keepers being made: each is released as it comes (the pool is closed).
        self.ready_making.close();
        let _ = tokio::time::timeout(LAST_WAIT, self.ready_making.wait()).await;
        self.stop_all(&entries).await;
        // On a loaded machine killing can outlast the settle time: what is not gone yet gets
        // its control socket closed (its keeper kills everything and exits) and a last
        // bounded wait, so that nothing is left when this returns.
        let deadline = Instant::now().checked_add(self.config.kill_grace.max(LAST_WAIT));
        for entry in &entries {
            if !*entry.gone.borrow() {
                let _ = entry.signal_all(Signal::Kill);
                entry.wait_gone(deadline).await;
            }
        }
        for entry in &entries {
            self.records.remove(entry);
        }
        // A last check of every scope's git guard, now that nothing runs.
        let scopes: Vec<Arc<Scope>> = crate::lock(&self.scopes)
            .drain()
            .map(|(_, scope)| scope)
            .collect();
        for scope in scopes {
            scope.check_at_host_end().await;
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
            mut env,
            background,
            inherit_env,
            profile,
            stdin,
        } = request;
        let profile = profile.unwrap_or_else(|| self.default_profile());
        if self.records.is_closed() {
            return Err(shut_down());
        }
        validate_command(&command)?;
        validate_env(&env)?;
        if let Stdin::Terminal(size) = stdin {
            size.check().map_err(ProcessError::InvalidRequest)?;
        }
        let workdir = self.resolve_workdir(workdir, &profile)?;
        let Some(spawner) = &self.spawner else {
            return Err(ProcessError::Failed(
                "cannot start processes: the spawner thread could not be created".to_owned(),
            ));
        };
        // Reserved before the sandbox is built (which may wait): a start refused by a limit
        // costs nothing, and one under way when its scope ends is refused.
        let reservation = self.records.reserve(
            scope,
            self.config.max_running_per_scope,
            self.config.max_running_total,
        )?;
        let confine = self.confinement(scope, &profile).await?;
        // What changed since the scope's last check that git would run outside the sandbox (a
        // leftover of an earlier command planting a hook) is undone before this command runs.
        let git_guard = self.git_guard(scope, &profile);
        let git_note = match &git_guard {
            Some(guard) => guard.check(Moment::Start).await,
            None => None,
        };
        // Building may have taken a while: a scope that ended meanwhile gets no command.
        reservation.check()?;
        let (seq, id) = self.ids.next();
        if profile.mode == sandbox::SandboxMode::Off {
            // Nothing keeps an unconfined command from killing its keeper: what it started is
            // then found by this mark, which its processes inherit.
            env.push(descendants::owner_mark(&id));
        }

        // One pipe or terminal; the child gets its end as both stdout and stderr.
        let Io {
            output,
            output_fd: writer,
            child_stdin,
            input,
        } = open_io(stdin)?;
        let channel_error = |error: io::Error| {
            ProcessError::Failed(format!("cannot create the keeper's channels: {error}"))
        };
        let started_at = Instant::now();
        let started_ms = unix_ms();
        let launch = Launch {
            shell: &self.config.shell,
            command: &command,
            env: &env,
            inherit: inherit_env.as_deref(),
            workdir: &workdir,
        };
        // A keeper prepared ahead for this scope and profile, handed the command; else one
        // made now.
        let handed = match &confine {
            Some(prepared) => {
                // None ready, but one being spawned for this scope and profile is nearly
                // there.
                if !self.ready.has_ready(scope, &profile) {
                    self.ready.wait_spawning(scope, &profile, READY_WAIT).await;
                }
                self.hand_over(
                    scope,
                    &profile,
                    prepared,
                    &launch,
                    &writer,
                    child_stdin.as_ref(),
                )
            }
            None => None,
        };
        let (mut spawned, control, status, cgroups) = match handed {
            Some(ready) => {
                // The command has its own copies now.
                drop((writer, child_stdin));
                (
                    ready.spawned,
                    ready.host.control,
                    ready.host.status,
                    ready.cgroups,
                )
            }
            None => {
                // Limits on everything the command starts; more processes than asked for, the
                // keeper (two in a PID namespace: one waits outside, one keeps inside).
                let keepers = match confine.as_ref().and_then(|ready| ready.namespaces.as_ref()) {
                    Some(namespaces) if namespaces.has(NamespaceKind::Pid) => 2,
                    _ => 1,
                };
                let cgroups = match confine {
                    Some(_) => CommandCgroups::create(
                        self.scope_sandbox(scope).cgroups(),
                        profile.limits.processes.map(|n| n.saturating_add(keepers)),
                        profile.limits.memory_bytes,
                    )
                    .map_err(|error| {
                        ProcessError::Failed(format!(
                            "cannot create the command's cgroups: {error}"
                        ))
                    })?,
                    None => None,
                };
                let (host_ends, keeper_ends) = keeper::channels().map_err(channel_error)?;
                let spec = ChildSpec::new(
                    &launch,
                    writer,
                    keeper_ends,
                    confine.as_deref(),
                    cgroups.as_ref(),
                    self.config.nice,
                )
                .and_then(|mut spec| {
                    if let Some((fd, terminal)) = child_stdin {
                        spec.input(fd, terminal)?;
                    }
                    Ok(spec)
                })
                .map_err(|error| {
                    ProcessError::Failed(format!(
                        "cannot prepare `{}`: {error}",
                        self.config.shell.display()
                    ))
                })?;
                let spawned = spawner.spawn(spec).await.map_err(|error| {
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
                (spawned, host_ends.control, host_ends.status, cgroups)
            }
        };
        let status = pipe::Receiver::from_owned_fd(status).map_err(channel_error)?;
        // No await below: once spawned, the process is always handed to a monitor. Until
        // then, dropping `spawned` (an early return) stops and reaps it.

        let log = match &self.log_dir {
            Some(dir) => LogSlot::Pending(LogTarget {
                dir: Arc::clone(dir),
                cap: self.config.log_cap_bytes,
                index: Arc::clone(&self.logs),
                scope: scope.to_owned(),
                warned: Arc::clone(&self.log_warned),
            }),
            None => LogSlot::Off,
        };
        let ahead_profile = confine.is_some().then(|| profile.clone());
        let entry = Entry::new(EntrySpec {
            seq,
            id: id.clone(),
            scope: scope.to_owned(),
            command,
            workdir,
            background,
            nproc_rlimit: confine
                .as_ref()
                .is_some_and(|prepared| prepared.nproc_rlimit),
            private_space: confine.as_ref().and_then(|prepared| prepared.private_space),
            network_gate: confine.as_ref().and_then(|prepared| {
                prepared
                    .gate
                    .as_ref()
                    .map(|gate| (gate.refusals(), gate.list()))
            }),
            hidden: confine
                .is_some()
                .then(|| self.sandbox_context.hidden.clone()),
            git_guard,
            git_note,
            profile,
            cgroups,
            started_ms,
            started_at,
            keeper: spawned.pid(),
            control,
            buffer: HeadTailBuffer::new(self.config.head_bytes, self.config.tail_bytes),
            input,
        });
        let admitted = self.records.admit(reservation, &entry);
        let ahead = confine
            .as_ref()
            .filter(|_| admitted.is_ok())
            .zip(ahead_profile)
            .map(|(prepared, profile)| (profile, Arc::clone(prepared), Arc::clone(&entry)));
        if admitted.is_err() {
            // Shut down, or the scope ended, while we were spawning: kill it; the monitor
            // sees it die, then cleans up without lingering.
            let _ = entry.signal_all(Signal::Kill);
            entry.removed.send_replace(true);
        }
        let terminal = entry.input.is_terminal();
        let monitor = Monitor {
            guard: MonitorGuard {
                records: Arc::downgrade(&self.records),
                entry,
            },
            status,
            keeper_exit: spawned.take_pidfd(),
            output: OutputReader {
                terminal,
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
        // The next command of this scope and profile finds a keeper ready.
        if let Some((profile, prepared, started)) = ahead {
            self.prepare_ahead(scope, &profile, prepared, started);
        }
        admitted.map(|()| id)
    }

    /// Hand the command to the keeper prepared ahead for `scope`, `profile` and its layers
    /// `prepared`, if one is ready: `None` when none is (or it is gone: then it is released
    /// and the caller makes a keeper as usual).
    fn hand_over(
        &self,
        scope: &str,
        profile: &Profile,
        prepared: &Arc<Prepared>,
        launch: &Launch<'_>,
        output: &OwnedFd,
        stdin: Option<&(OwnedFd, bool)>,
    ) -> Option<ReadyKeeper> {
        let (ready, stale) = self.ready.take(scope, profile, prepared);
        ready::release_soon(stale);
        let ready = ready?;
        let message = output.try_clone().and_then(|output| {
            let stdin = stdin
                .map(|(fd, terminal)| fd.try_clone().map(|fd| (fd, *terminal)))
                .transpose()?;
            StartMessage::new(launch, output, stdin, prepared)
        });
        match message.and_then(|message| {
            keeper::send_start(&ready.host.control, &message.bytes, &message.fds)
        }) {
            Ok(()) => Some(ready),
            Err(error) => {
                tracing::debug!(%error, scope, "a keeper prepared ahead could not take its command");
                ready::release_soon(vec![ready]);
                None
            }
        }
    }

    /// Prepare a keeper ahead for the next command of `scope` with `profile` (layers
    /// `prepared`), off the call path, unless one is ready or being made for them or a bound
    /// is reached. It is made once `started` (the command just started) has finished, or
    /// [`READY_AFTER`] after its start: on cgroup v1 the new keeper's move into its cgroups
    /// holds up every `fork` of the machine for an RCU grace period after a quiet spell, and
    /// must not hold up the command's own.
    fn prepare_ahead(
        &self,
        scope: &str,
        profile: &Profile,
        prepared: Arc<Prepared>,
        started: Arc<Entry>,
    ) {
        let Some(spawner) = self.spawner.clone() else {
            return;
        };
        // The scope's own state; none when the scope ended meanwhile.
        let Some(sandbox) = crate::lock(&self.scopes)
            .get(scope)
            .map(|held| held.sandbox.clone())
        else {
            return;
        };
        while let Some(serial) = self.ready.turn(scope, profile) {
            let recipe = ready::Recipe {
                scope: scope.to_owned(),
                profile: profile.clone(),
                prepared: Arc::clone(&prepared),
                session_cgroups: sandbox.cgroups(),
                nice: self.config.nice,
            };
            self.make_ready(serial, recipe, spawner.clone(), Arc::clone(&started));
        }
    }

    /// Make the keeper of turn `serial` once `started` has finished (or [`READY_AFTER`] after
    /// its start), put it in the pool, and release it after its idle time unused.
    fn make_ready(
        &self,
        serial: u64,
        recipe: ready::Recipe,
        spawner: Spawner,
        started: Arc<Entry>,
    ) {
        let pool = Arc::clone(&self.ready);
        // Making it is tracked: shutdown waits for a keeper being spawned, so that none is left
        // half-made (a child of the spawner thread not yet the keeper) when the host exits.
        let making = self.ready_making.track_future(async move {
            started
                .wait_finished(Instant::now().checked_add(READY_AFTER))
                .await;
            drop(started);
            if pool.is_closed() {
                pool.put(serial, None);
                return None;
            }
            pool.spawning(serial);
            let made = match ready::make(&spawner, recipe).await {
                Ok(made) => Some(made),
                Err(error) => {
                    tracing::debug!(%error, "cannot prepare a keeper ahead");
                    None
                }
            };
            let was_made = made.is_some();
            if let Some(unwanted) = pool.put(serial, made) {
                // Its scope ended, or the host shut down, meanwhile.
                let _ = tokio::task::spawn_blocking(move || unwanted.release()).await;
                return None;
            }
            Some((pool, was_made))
        });
        self.runtime.spawn(async move {
            let Some((pool, was_made)) = making.await else {
                return;
            };
            if was_made {
                tokio::time::sleep(pool.idle()).await;
                if let Some(idle) = pool.expire(serial) {
                    let _ = tokio::task::spawn_blocking(move || idle.release()).await;
                }
            }
        });
    }

    /// Release `keepers` prepared ahead, and wait until they are gone.
    async fn release(&self, keepers: Vec<ReadyKeeper>) {
        if keepers.is_empty() {
            return;
        }
        let released =
            tokio::task::spawn_blocking(move || keepers.into_iter().for_each(ReadyKeeper::release));
        let _ = released.await;
    }

    /// How many keepers prepared ahead are ready, for `scope` or on the whole host.
    pub fn ready_keepers(&self, scope: Option<&str>) -> usize {
        self.ready.count(scope)
    }

    /// `scope`'s own state, made on first use.
    fn scope(&self, scope: &str) -> Arc<Scope> {
        crate::lock(&self.scopes)
            .entry(scope.to_owned())
            .or_insert_with(|| Arc::new(Scope::new(self.sandbox_context.clone(), scope)))
            .clone()
    }

    /// `scope`'s confinement state, made on first use.
    fn scope_sandbox(&self, scope: &str) -> Arc<ScopeSandbox> {
        self.scope(scope).sandbox.clone()
    }

    /// `scope`'s git guard, made on first use; `None` for an unconfined command, and when the
    /// operator allows hook writes.
    fn git_guard(&self, scope: &str, profile: &Profile) -> Option<Arc<GitGuard>> {
        if profile.mode == sandbox::SandboxMode::Off || self.sandbox_context.allow_hook_writes {
            return None;
        }
        // The workspace and the `--writable` directories, resolved once already.
        Some(
            self.scope(scope)
                .git_guard(|| GitGuard::new(scope, &self.path_roots.visible)),
        )
    }

    /// The confinement layers of `scope` for `profile`. Their first build in a scope (the
    /// namespaces, the Landlock ruleset, the seccomp programs) runs on a blocking thread: it
    /// waits on a helper process, and must hold up neither the async workers serving other
    /// sessions nor, in a one-shot call, the handling of Ctrl-C.
    async fn confinement(
        &self,
        scope: &str,
        profile: &Profile,
    ) -> Result<Option<Arc<Prepared>>, ProcessError> {
        let sandbox = self.scope_sandbox(scope);
        if let Some(ready) = sandbox.ready(profile) {
            return Ok(ready);
        }
        // One build at a time per scope: concurrent first starts wait for it here, not each
        // on a blocking thread of its own, and then find it ready (or its failure).
        let turn = sandbox.build_turn().await;
        if let Some(ready) = sandbox.ready(profile) {
            return Ok(ready);
        }
        let profile = profile.clone();
        tokio::task::spawn_blocking(move || {
            // Given up only once the build ends, even if this start is dropped meanwhile.
            sandbox.prepare(&profile, &turn)
        })
        .await
        .map_err(|error| {
            ProcessError::Failed(format!("preparing the command's sandbox failed: {error}"))
        })?
        .map_err(|error| ProcessError::Failed(error.to_string()))
    }

    /// The profile of a request that names none: the operator's settings.
    fn default_profile(&self) -> Profile {
        self.config.sandbox.profile()
    }

    /// The working directory of a request, checked to exist (as the host sees it). For a
    /// confined command, a directory in a hidden path gets one answer, whether it exists or
    /// not: the check must not tell which names a hidden directory holds.
    fn resolve_workdir(
        &self,
        requested: Option<PathBuf>,
        profile: &Profile,
    ) -> Result<PathBuf, ProcessError> {
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
        if profile.mode != sandbox::SandboxMode::Off && self.is_hidden(&dir, profile) {
            return Err(ProcessError::InvalidRequest(format!(
                "working directory `{}` lies in a path hidden from confined commands",
                dir.display()
            )));
        }
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

    /// Whether `path` lies in a path hidden from commands of `profile`: the user's credential
    /// stores, the host's own files, the profile's own hidden paths. `path` is compared with
    /// its longest existing ancestor resolved, so that a link or `..` does not get around it.
    fn is_hidden(&self, path: &Path, profile: &Profile) -> bool {
        // Lexically, and with the longest existing ancestor resolved: a link inside a hidden
        // directory that points out of it gets the same answer as any other name there.
        let resolved = path
            .ancestors()
            .find_map(|ancestor| {
                let rest = path.strip_prefix(ancestor).ok()?;
                Some(ancestor.canonicalize().ok()?.join(rest))
            })
            .unwrap_or_else(|| path.to_path_buf());
        let forms = [sandbox::normalize(path), sandbox::normalize(&resolved)];
        let roots = &self.path_roots;
        let requested: Vec<PathBuf> = profile.hidden.iter().map(|path| canonical(path)).collect();
        roots.hidden.iter().chain(&requested).any(|hidden| {
            forms.iter().any(|form| {
                form.starts_with(hidden)
                    && !roots
                        .visible
                        .iter()
                        .any(|root| root.starts_with(hidden) && form.starts_with(root))
            })
        })
    }

    /// `SIGTERM` everything, wait up to `kill_grace` for the processes to finish, then
    /// `SIGKILL` everything (leftover grandchildren of finished processes included) and wait
    /// until nothing of them is left.
    async fn stop_all(&self, entries: &[Arc<Entry>]) {
        if entries.is_empty() {
            return;
        }
        for entry in entries {
            entry.signal_all(Signal::Terminate);
        }
        // The grace period is for everything the commands started, not only for the commands:
        // what a finished command left behind gets it too.
        let deadline = Instant::now().checked_add(self.config.kill_grace);
        for entry in entries {
            entry.wait_finished(deadline).await;
            entry.wait_gone(deadline).await;
        }
        for entry in entries {
            entry.signal_all(Signal::Kill);
        }
        let settle = self.config.drain_timeout.saturating_add(KILL_SETTLE);
        let deadline = Instant::now().checked_add(settle);
        for entry in entries {
            entry.wait_finished(deadline).await;
            entry.wait_gone(deadline).await;
        }
    }

    fn send_signal(&self, scope: &str, id: &str, signal: Signal) -> Result<(), ProcessError> {
        let entry = self.records.find(scope, id)?;
        // A finished process can still be signalled while what it started outlives it.
        if !entry.is_running() && !entry.has_leftovers() {
            return Err(ProcessError::NotRunning(id.to_owned()));
        }
        if !entry.signal_all(signal) {
            return Err(ProcessError::NotRunning(id.to_owned()));
        }
        if signal == Signal::Terminate {
            // Whatever is left after the grace is killed, even when the command finished in
            // time: what it started may ignore `SIGTERM` and outlive it.
            let grace = self.config.kill_grace;
            self.runtime.spawn(async move {
                tokio::time::sleep(grace).await;
                entry.signal_all(Signal::Kill);
            });
        }
        Ok(())
    }
}

impl ProcessBackend for ProcessManager {
    fn output_log(&self, scope: &str, id: &str) -> Option<PathBuf> {
        self.logs.get(scope, id)
    }

    fn output_logs(&self, scope: &str) -> Vec<super::OutputLog> {
        let logs = self.logs.list(scope).into_iter();
        logs.map(|(process_id, path)| super::OutputLog { process_id, path })
            .collect()
    }

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

    fn read_log(
        &self,
        scope: &str,
        id: &str,
        offset: i64,
        max_bytes: u64,
    ) -> Result<LogPage, ProcessError> {
        let entry = self.records.find(scope, id)?;
        let path = entry.log_path().ok_or_else(|| super::no_log(id))?;
        let max = max_bytes.min(super::MAX_LOG_PAGE_BYTES);
        let (text, offset, next_offset, total_bytes) = output_log::read_page(&path, offset, max)
            .map_err(|error| {
                ProcessError::Failed(format!("cannot read the output log of `{id}`: {error}"))
            })?;
        Ok(LogPage {
            text,
            offset,
            next_offset,
            total_bytes,
            capped: entry.log_capped(),
            running: entry.is_running(),
        })
    }

    fn signal(&self, scope: &str, id: &str, signal: Signal) -> Result<(), ProcessError> {
        self.send_signal(scope, id, signal)
    }

    fn write_input<'a>(
        &'a self,
        scope: &'a str,
        id: &'a str,
        data: &'a [u8],
        keys: &'a [Key],
    ) -> BoxFuture<'a, Result<(), ProcessError>> {
        Box::pin(async move {
            let entry = self.records.find(scope, id)?;
            if !entry.is_running() {
                return Err(ProcessError::NotRunning(id.to_owned()));
            }
            entry.input.write(id, data, keys).await
        })
    }

    fn close_input<'a>(
        &'a self,
        scope: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, Result<(), ProcessError>> {
        Box::pin(async move {
            let entry = self.records.find(scope, id)?;
            entry.input.close(id).await
        })
    }

    fn resize(&self, scope: &str, id: &str, size: TerminalSize) -> Result<(), ProcessError> {
        let entry = self.records.find(scope, id)?;
        entry.input.resize(id, size)
    }

    fn screen(&self, scope: &str, id: &str) -> Result<Screen, ProcessError> {
        self.records.find(scope, id)?.input.screen(id)
    }

    fn wait_until<'a>(
        &'a self,
        scope: &'a str,
        id: &'a str,
        until: Until,
        timeout: Duration,
        from: ReadFrom,
    ) -> BoxFuture<'a, Result<OutputSnapshot, ProcessError>> {
        Box::pin(async move {
            let entry = self.records.find(scope, id)?;
            entry
                .wait_until(&until, from, Instant::now().checked_add(timeout))
                .await;
            Ok(entry.snapshot(from))
        })
    }

    fn end_scope<'a>(&'a self, scope: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let entries = self.records.end_scope(scope);
            // Its keepers prepared ahead go first: none may serve a command of it any more.
            self.release(self.ready.end_scope(scope)).await;
            self.stop_all(&entries).await;
            // Nobody can ask for them any more: their records, keepers and cgroups go now,
            // not at the end of their retention.
            for entry in &entries {
                self.records.remove(entry);
            }
            // Its logs stay (for the retention), but no longer readable through the host.
            self.logs.forget_scope(scope);
            // What it holds besides: taken out under the lock, let go after it (`scope.rs`):
            // every start of every scope needs that lock.
            let held = crate::lock(&self.scopes).remove(scope);
            if let Some(held) = held {
                held.end().await;
            }
        })
    }
}

impl Drop for ProcessManager {
    /// Close every keeper's control socket before returning (each then kills everything under
    /// it and exits), hand the keepers to a short-lived thread that reaps them as they exit (so
    /// the dropping thread, possibly a runtime worker, never waits for them), then delete the
    /// log files.
    fn drop(&mut self) {
        ready::release_soon(self.ready.close());
        let entries = self.records.close_and_drain();
        let keepers: Vec<_> = entries
            .iter()
            .filter_map(|entry| entry.release_keeper())
            .collect();
        reap::reap_all_soon(keepers);
        for entry in &entries {
            entry.close_log();
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
mod input_tests;
#[cfg(test)]
mod ready_tests;
#[cfg(test)]
mod tests;
