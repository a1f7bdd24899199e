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
//! * `backend.rs`: the manager as the guests' `ProcessBackend`.
//! * `request.rs`: checking a start's request (command, variables, working directory).
//! * `scope.rs`: what a scope holds (its sandbox, its git guard, its log index), and the
//!   order it is let go in.
//! * `table.rs`: the process table: listed records, per-scope counts and limits, closing.
//! * `entry.rs`: one process's record.
//! * `stdio.rs`: a command's output pipe, input pipe or terminal.
//! * `launch.rs`: getting a command its keeper: one prepared ahead, or one made for it.
//! * `ready.rs`: the pool of keepers prepared ahead.
//! * `spec.rs`: what the child runs, and with what (safe code).
//! * `spawner.rs`: the spawner thread.
//! * `child.rs`: the child between `clone` and `exec`.
//! * `keeper.rs`: the host's side of the keeper: its channels, its descriptors, the start
//!   message's sending (its executable is `keeper_binary.rs`, shared with the sandbox).
//! * `monitor.rs`: the task that owns a running process: output, exit, drain, retention.
//! * `input.rs`: a process's stdin pipe or terminal; `pty.rs`: opening a terminal.
//! * `stop.rs`: stopping many processes at once.
//! * `reap.rs`: waiting for and reaping the keepers.
//! * `descendants.rs`: what an unconfined command left behind, found by its mark.
//! * `ids.rs`: process ids.
//! * `output_log.rs`: the full-output files.
//!
//! Unit tests live in `tests.rs` and `*_tests.rs` beside them.

mod backend;
mod child;
mod cloner;
mod config;
mod descendants;
mod entry;
mod ids;
mod input;
mod keeper;
mod launch;
mod monitor;
mod output_log;
mod pty;
mod ready;
mod reap;
mod record;
mod request;
mod resident;
mod scope;
mod scrub;
mod spawner;
mod spec;
mod stdio;
mod stop;
mod table;
mod workspace;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::unix::pipe;
use tokio::runtime::Handle;
use tokio::time::Instant;

use super::{ProcessError, Signal, StartRequest, Stdin};
use crate::buffer::HeadTailBuffer;
use crate::sandbox::git_guard::{GitGuard, Moment};
use crate::sandbox::{self, Prepared, Profile};
pub use config::ProcessManagerConfig;
use entry::{Entry, EntrySpec, Held, LogTarget, WorkspaceNote, unix_ms};
use ids::Ids;
use launch::Launcher;
use monitor::{FIRST_READ_CHUNK, LogSlot, Monitor, MonitorGuard, OutputReader};
use output_log::ScopeLogs;
use record::Recorder;
pub use record::{DEFAULT_RECORD_BYTES, RecordSettings};
use request::{PathRoots, validate_command, validate_env};
use scope::Scope;
use spawner::{KeeperPid, Spawned, Spawner};
use spec::Launch;
use table::{Limits, Records, shut_down};
pub use workspace::WorkspaceSource;

pub use crate::sandbox::probe::{namespaces_available, namespaces_here};

/// The least a shutdown waits, after the kill, for what is still not gone.
const LAST_WAIT: Duration = Duration::from_secs(5);

/// Runs processes for guests: each under a keeper, merged bounded output, full-output log files,
/// per-scope limits and isolation, reaping. See the module documentation.
///
/// Create it with [`ProcessManager::new`] inside a Tokio runtime; use it as
/// `Arc<dyn ProcessBackend>`.
pub struct ProcessManager {
    config: ProcessManagerConfig,
    log_dir: Option<Arc<Path>>,
    runtime: Handle,
    /// Gets every command its keeper (`launch.rs`).
    launcher: Launcher,
    ids: Ids,
    /// Shared with the monitors, which hold it weakly: once the manager is gone they no
    /// longer touch the table.
    records: Arc<Records>,
    log_warned: Arc<AtomicBool>,
    /// The record of commands, when one is kept (`record.rs`).
    recorder: Option<Arc<Recorder>>,
    /// What confined commands may write and never reach.
    sandbox_context: Arc<sandbox::Context>,
    /// Each scope's own state (`scope.rs`), from its first command to its end.
    scopes: Mutex<HashMap<String, Arc<Scope>>>,
    /// The context's hidden and visible roots, resolved once for the `workdir` check.
    path_roots: PathRoots,
    /// What a scope's own workspace is checked against; `None` when scopes keep the host's
    /// (`--workdir` given, or no parent allowed).
    choosing: Option<Choosing>,
}

/// The parents a scope's workspace may be chosen under, and what a candidate must keep out
/// of (`workspace.rs`), resolved once.
struct Choosing {
    /// Shared with each start's record, for the no-workspace note.
    parents: Arc<[PathBuf]>,
    homes: Vec<PathBuf>,
    protected: Vec<PathBuf>,
    path_dirs: Vec<PathBuf>,
    /// The host's workspace, resolved, unless it holds an allowed parent (a server started
    /// in a home): a call's `workdir` in it keeps a scope on it; in one that holds a parent,
    /// a project narrows it.
    host_workspace: Option<PathBuf>,
}

impl Choosing {
    /// What a candidate is checked against, with the host's `roots`.
    fn allowed<'a>(&'a self, roots: &'a PathRoots) -> workspace::Allowed<'a> {
        workspace::Allowed {
            parents: &self.parents,
            homes: &self.homes,
            protected: &self.protected,
            roots,
            path_dirs: &self.path_dirs,
        }
    }
}

/// A start's request, checked: what its record shows, and what only its launch needs.
struct Checked {
    what: What,
    env: Vec<(String, String)>,
    /// The person's secrets for this command: name and value.
    secrets: Vec<(String, crate::ask::Secret)>,
    inherit_env: Option<Vec<String>>,
    stdin: Stdin,
}

/// A start's variables, whose values are zeroed when it is dropped (some are the person's
/// secrets).
struct ZeroedEnv(Vec<(String, String)>);

impl Drop for ZeroedEnv {
    fn drop(&mut self) {
        use zeroize::Zeroize as _;
        for (_, value) in &mut self.0 {
            value.zeroize();
        }
    }
}

/// What a start runs, as its record shows it.
struct What {
    command: String,
    workdir: PathBuf,
    background: bool,
    profile: Profile,
    origin: super::Origin,
}

/// What confines a start: its scope's layers for its profile, and its git guard with what
/// that undid right before the command.
struct Confinement {
    prepared: Option<Arc<Prepared>>,
    git_guard: Option<Arc<GitGuard>>,
    git_note: Option<String>,
    /// When the command's output says that the host has no workspace.
    workspace_note: WorkspaceNote,
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
    pub fn new(mut config: ProcessManagerConfig) -> Arc<Self> {
        let runtime = Handle::current();
        // The record's files, made now so that they can be hidden like the host's other files:
        // a confined command must neither read nor rewrite the record of what ran.
        if let Some(settings) = &config.record {
            config.protected.extend(record::prepare(settings));
        }
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
                &[],
            );
            tracing::debug!(?swept, dir = %dir.display(), "swept output logs");
        }
        let workdir = config
            .default_workdir
            .clone()
            .or_else(|| std::env::current_dir().ok())
            .unwrap_or_else(|| PathBuf::from("/"));
        let workspace = sandbox::workspace_of(&workdir);
        if workspace.is_none()
            && config.sandbox.mode != sandbox::SandboxMode::Off
            && !config.workspaces_under.is_empty()
        {
            tracing::info!(
                parents = ?config.workspaces_under,
                "the host was started in `/` without --workdir: each session's workspace is \
                 chosen by its client's roots or a call's workdir under these parents; until \
                 then its confined commands write only in $TMPDIR, package caches and \
                 --writable directories"
            );
        } else if workspace.is_none() && config.sandbox.mode != sandbox::SandboxMode::Off {
            tracing::warn!(
                "commands run in `/` and there is no workspace (the host was started in `/` \
                 without --workdir, as desktop clients start servers): confined commands can \
                 read files but write only in $TMPDIR, package caches and --writable \
                 directories; pass --workdir with a project directory to give them one"
            );
        }
        // The content scan runs here, before the first confined command (cached after). It
        // skips the workspace, which commands may write anyway.
        let hidden = sandbox::HiddenPaths::for_host(
            &config.sandbox,
            log_dir.as_deref(),
            workspace
                .iter()
                .cloned()
                .chain(config.protected.iter().cloned())
                .chain(log_dir.clone())
                .collect(),
        );
        let sandbox_context = Arc::new(sandbox::Context {
            workdir: workspace,
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
            network_ask: config.sandbox.network_ask.clone(),
            operator_network: config.sandbox.network,
            // A host that serves one call starts one command: nothing to watch for the next.
            watch_changes: !config.serves_one_call,
        });
        let choosing = (config.default_workdir.is_none() && !config.workspaces_under.is_empty())
            .then(|| Choosing {
                parents: config
                    .workspaces_under
                    .iter()
                    .map(|dir| sandbox::canonical(dir))
                    .collect(),
                host_workspace: None,
                homes: sandbox_context
                    .hidden
                    .homes
                    .iter()
                    .map(|home| sandbox::canonical(home))
                    .collect(),
                protected: sandbox_context
                    .protected
                    .iter()
                    .map(|path| sandbox::canonical(path))
                    .collect(),
                path_dirs: workspace::path_dirs(),
            })
            .map(|mut choosing| {
                choosing.host_workspace = sandbox_context
                    .workdir
                    .as_deref()
                    .map(sandbox::canonical)
                    .filter(|dir| {
                        !choosing
                            .parents
                            .iter()
                            .any(|parent| parent.starts_with(dir))
                    });
                choosing
            });
        Arc::new(Self {
            choosing,
            log_dir: log_dir.map(Arc::from),
            launcher: Launcher::new(
                spawner,
                if config.serves_one_call {
                    0
                } else {
                    config.ready_keepers
                },
                config.ready_keeper_idle,
                config.nice,
                runtime.clone(),
            ),
            runtime,
            ids: Ids::new(),
            records,
            log_warned: Arc::new(AtomicBool::new(log_warned)),
            recorder: config
                .record
                .clone()
                .map(|settings| Arc::new(Recorder::new(settings))),
            path_roots: PathRoots::of(&sandbox_context),
            sandbox_context,
            scopes: Mutex::new(HashMap::new()),
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
        let indexes: Vec<Arc<ScopeLogs>> = crate::lock(&self.scopes)
            .values()
            .map(|scope| scope.logs.clone())
            .collect();
        let swept = output_log::sweep(
            dir,
            self.config.log_retention,
            self.config.log_max_total,
            &keep,
            &indexes,
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
        self.launcher.shutdown().await;
        stop::stop_all(&entries, self.config.kill_grace, self.config.drain_timeout).await;
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

    /// Start `request` in `scope` (steps 1 and 2 of the module documentation):
    ///
    /// 1. The request is checked ([`ProcessManager::check`]).
    /// 2. A slot is reserved in the scope and on the host, before anything is built: a start
    ///    refused by a limit costs nothing, and one under way when its scope ends is refused.
    /// 3. The scope's layers for the profile are built on first use, and its git guard undoes
    ///    what changed since its last check ([`ProcessManager::confinement`]).
    /// 4. The command's stdio is opened and its keeper launched (`stdio.rs`, `launch.rs`).
    /// 5. Its record is made and admitted in place of the reservation.
    /// 6. Its monitor takes it over ([`ProcessManager::monitor`]); after a confined start a
    ///    keeper is prepared ahead for the next command of the scope and profile.
    async fn start_process(
        &self,
        scope: &str,
        request: StartRequest,
    ) -> Result<String, ProcessError> {
        let arrived = Instant::now();
        let held = self.scope(scope);
        if let Some(dir) = request.workdir.as_deref().filter(|dir| dir.is_absolute()) {
            self.follow_workdir(&held, dir).await;
        }
        let Checked {
            what,
            env,
            secrets,
            inherit_env,
            stdin,
        } = self.check(&held, request)?;
        // The secrets win over every other variable; each value copied here is zeroed when
        // the start is done.
        let mut env = ZeroedEnv(env);
        env.0
            .retain(|(name, _)| !secrets.iter().any(|(secret, _)| secret == name));
        env.0.extend(
            secrets
                .iter()
                .map(|(name, value)| (name.clone(), value.expose().to_owned())),
        );
        let values: Vec<&crate::ask::Secret> = secrets.iter().map(|(_, value)| value).collect();
        let scrubber = scrub::Scrubber::new(&values);
        let redactor = scrubber
            .as_ref()
            .map(|scrubber| Arc::new(scrubber.redactor()));
        drop(values);
        drop(secrets);
        let owner = held.owner.get().cloned();
        let reservation = self.records.reserve(scope, owner.as_ref(), self.limits())?;
        let checked = Instant::now();
        let confinement = self.confinement(&held, &what.profile).await?;
        let confined = Instant::now();
        // Building may have taken a while: a scope that ended meanwhile gets no command.
        reservation.check()?;
        let (seq, id) = self.ids.next();
        if what.profile.mode == sandbox::SandboxMode::Off {
            // Nothing keeps an unconfined command from killing its keeper: what it started is
            // then found by this mark, which its processes inherit.
            env.0.push(descendants::owner_mark(&id));
        }
        let stdio = stdio::open(stdin)?;
        let started = (Instant::now(), unix_ms());
        let launch = Launch {
            shell: &self.config.shell,
            command: &what.command,
            env: &env.0,
            inherit: inherit_env.as_deref(),
            workdir: &what.workdir,
            stdio: stdio.child,
        };
        let prepared = confinement.prepared.clone();
        let launched = (self.launcher)
            .launch(&held, &what.profile, prepared.as_ref(), launch)
            .await?;
        let ms = |from: Instant, to: Instant| to.duration_since(from).as_secs_f64() * 1e3;
        tracing::debug!(
            target: sandbox::TIMINGS,
            scope,
            check = ms(arrived, checked),
            confinement = ms(checked, confined),
            launch = ms(confined, Instant::now()),
            "command launched"
        );
        let status = pipe::Receiver::from_owned_fd(launched.status).map_err(|error| {
            ProcessError::Failed(format!("cannot read the keeper's status: {error}"))
        })?;
        // No await below: once spawned, the process is always handed to a monitor. Until
        // then, dropping `spawned` (an early return) stops and reaps it.
        let held_parts = Held {
            cgroups: launched.cgroups,
            keeper: launched.spawned.keeper(),
            control: launched.control,
            buffer: HeadTailBuffer::new(self.config.head_bytes, self.config.tail_bytes),
            input: stdio.input,
            redactor,
        };
        let spec = self.spec(scope, (seq, &id), what, confinement, started);
        let entry = Entry::new(spec, held_parts);
        let admitted = self.records.admit(reservation, &entry);
        if admitted.is_err() {
            // Shut down, or the scope ended, while we were spawning: kill it; the monitor
            // sees it die, then cleans up without lingering.
            let _ = entry.signal_all(Signal::Kill);
            entry.removed.send_replace(true);
        }
        self.monitor(
            &held,
            &entry,
            launched.spawned,
            status,
            (stdio.output, scrubber),
        );
        if let (Ok(()), Some(prepared)) = (&admitted, &prepared) {
            (self.launcher).prepare_ahead(&held, &entry.spec.profile, prepared, &entry);
        }
        admitted.map(|()| id)
    }

    /// The record's spec of process `id` (number `seq`) of `scope`: `what` it runs, what
    /// confines it, and when it `started` (as an instant and in Unix milliseconds).
    fn spec(
        &self,
        scope: &str,
        (seq, id): (u64, &str),
        what: What,
        confinement: Confinement,
        started: (Instant, u64),
    ) -> EntrySpec {
        let prepared = confinement.prepared.as_deref();
        EntrySpec {
            seq,
            id: id.to_owned(),
            scope: scope.to_owned(),
            command: what.command,
            workdir: what.workdir,
            background: what.background,
            profile: what.profile,
            origin: what.origin,
            nproc_rlimit: prepared.is_some_and(|prepared| prepared.nproc_rlimit),
            private_space: prepared.and_then(|prepared| prepared.private_space),
            network_gate: prepared
                .and_then(|prepared| prepared.gate.as_ref())
                .map(|gate| (gate.refusals(), gate.list())),
            hidden: prepared.map(|_| self.sandbox_context.hidden.clone()),
            git_guard: confinement.git_guard,
            git_note: confinement.git_note,
            workspace_note: confinement.workspace_note,
            workspace_parents: self
                .choosing
                .as_ref()
                .map(|choosing| choosing.parents.clone()),
            started_at: started.0,
            started_ms: started.1,
        }
    }

    /// Check a start's request: the host still serves, the command, its variables, its
    /// terminal size and its working directory are valid, and a keeper can be spawned.
    fn check(&self, scope: &Scope, request: StartRequest) -> Result<Checked, ProcessError> {
        if self.records.is_closed() {
            return Err(shut_down());
        }
        validate_command(&request.command)?;
        validate_env(&request.env)?;
        let secret_names: Vec<(String, String)> = request
            .secrets
            .iter()
            .map(|(name, _)| (name.clone(), String::new()))
            .collect();
        validate_env(&secret_names)?;
        if let Stdin::Terminal(size) = request.stdin {
            size.check().map_err(ProcessError::InvalidRequest)?;
        }
        let profile = request.profile.unwrap_or_else(|| self.default_profile());
        let workdir = match scope.workspace() {
            Some(chosen) => chosen
                .roots
                .resolve(Some(&chosen.dir), request.workdir, &profile)?,
            None => self.path_roots.resolve(
                self.config.default_workdir.as_deref(),
                request.workdir,
                &profile,
            )?,
        };
        self.launcher.check()?;
        Ok(Checked {
            what: What {
                command: request.command,
                workdir,
                background: request.background,
                profile,
                origin: request.origin,
            },
            env: request.env,
            secrets: request.secrets,
            inherit_env: request.inherit_env,
            stdin: request.stdin,
        })
    }

    /// Hand the process of `entry` to its monitor task, which owns it from here (even if the
    /// task never runs): its output (read from `output`, logged in `scope`'s logs), its exit
    /// (from `status`), its end.
    fn monitor(
        &self,
        scope: &Scope,
        entry: &Arc<Entry>,
        mut spawned: Spawned,
        status: pipe::Receiver,
        (output, scrubber): (pipe::Receiver, Option<scrub::Scrubber>),
    ) {
        let log = match &self.log_dir {
            Some(dir) => LogSlot::Pending(LogTarget {
                dir: Arc::clone(dir),
                cap: self.config.log_cap_bytes,
                logs: Arc::clone(&scope.logs),
                warned: Arc::clone(&self.log_warned),
            }),
            None => LogSlot::Off,
        };
        let monitor = Monitor {
            guard: MonitorGuard {
                records: Arc::downgrade(&self.records),
                entry: Arc::clone(entry),
            },
            status,
            keeper_exit: spawned.take_pidfd(),
            output: OutputReader {
                terminal: entry.input.is_terminal(),
                pipe: output,
                buf: vec![0u8; FIRST_READ_CHUNK],
                log,
                scrubber,
            },
            drain_timeout: self.config.drain_timeout,
            retention: self.config.retention,
            closed: self.records.subscribe_closed(),
            recorder: self.recorder.clone(),
        };
        spawned.disarm();
        self.runtime.spawn(monitor.run());
    }

    /// How many keepers prepared ahead are ready, for `scope` or on the whole host.
    pub fn ready_keepers(&self, scope: Option<&str>) -> usize {
        self.launcher.ready().count(scope)
    }

    /// `scope`'s own state, made on first use.
    fn scope(&self, scope: &str) -> Arc<Scope> {
        crate::lock(&self.scopes)
            .entry(scope.to_owned())
            .or_insert_with(|| Arc::new(Scope::new(self.sandbox_context.clone(), scope)))
            .clone()
    }

    /// What confines a start of `scope` with `profile` (nothing when it is unconfined):
    ///
    /// 1. The scope's layers for the profile. Their first build in a scope (the namespaces,
    ///    the Landlock ruleset, the seccomp programs) runs on a blocking thread: it waits on a
    ///    helper process, and must hold up neither the async workers serving other sessions
    ///    nor, in a one-shot call, the handling of Ctrl-C.
    /// 2. The scope's git guard (none when the operator allows hook writes): what changed
    ///    since its last check that git would run outside the sandbox (a leftover of an
    ///    earlier command planting a hook) is undone before this command runs.
    /// 3. Whether its output says that the host has no workspace.
    async fn confinement(
        &self,
        scope: &Scope,
        profile: &Profile,
    ) -> Result<Confinement, ProcessError> {
        let prepared = self.layers(scope, profile).await?;
        let git_guard = (profile.mode != sandbox::SandboxMode::Off
            && !self.sandbox_context.allow_hook_writes)
            .then(|| {
                scope.git_guard(|| {
                    let watch = !self.config.serves_one_call;
                    match scope.workspace() {
                        Some(chosen) => GitGuard::new(&scope.name, &chosen.roots.visible, watch),
                        None => GitGuard::new(&scope.name, &self.path_roots.visible, watch),
                    }
                })
            });
        let git_note = match &git_guard {
            Some(guard) => guard.check(Moment::Start).await,
            None => None,
        };
        // 3. Without a workspace, the scope's first confined command says so, and so does
        //    every confined command that fails.
        let workspace_note = if prepared.is_none()
            || profile.mode != sandbox::SandboxMode::WorkspaceWrite
            || self.sandbox_context.workdir.is_some()
            || scope.workspace().is_some()
        {
            WorkspaceNote::Never
        } else if scope.told_no_workspace.swap(true, Ordering::AcqRel) {
            WorkspaceNote::OnFailure
        } else {
            WorkspaceNote::Always
        };
        Ok(Confinement {
            prepared,
            git_guard,
            git_note,
            workspace_note,
        })
    }

    /// The layers of `scope` for `profile`, built on first use (step 1 of
    /// [`ProcessManager::confinement`]).
    async fn layers(
        &self,
        scope: &Scope,
        profile: &Profile,
    ) -> Result<Option<Arc<Prepared>>, ProcessError> {
        let sandbox = scope.sandbox.clone();
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

    /// The limits a start is counted against.
    fn limits(&self) -> Limits {
        Limits {
            per_scope: self.config.max_running_per_scope,
            per_owner: self.config.max_running_per_owner,
            total: self.config.max_running_total,
        }
    }

    /// Make `dir`'s project the workspace of `scope` (`workspace.rs`), as `from` asks:
    /// returns the workspace the scope has then, or why `dir` cannot be one. `None` when
    /// scopes keep the host's workspace (`--workdir` given, or no parent allowed).
    pub async fn choose_workspace(
        &self,
        scope: &str,
        dir: &Path,
        from: WorkspaceSource,
    ) -> Result<Option<PathBuf>, ProcessError> {
        let Some(choosing) = &self.choosing else {
            return Ok(None);
        };
        let project = workspace::project_of(dir, &choosing.allowed(&self.path_roots))
            .map_err(ProcessError::InvalidRequest)?;
        let held = self.scope(scope);
        self.set_workspace(&held, project.clone(), from).await;
        Ok(Some(project))
    }

    /// A start's absolute `workdir` outside the scope's workspace, under an allowed parent,
    /// makes its project the workspace; one that cannot be is left to the `workdir` check.
    async fn follow_workdir(&self, scope: &Scope, dir: &Path) {
        let Some(choosing) = &self.choosing else {
            return;
        };
        // Inside the workspace nothing changes (see `Choosing::host_workspace` for the host's).
        let resolved = sandbox::canonical(dir);
        let inside = match scope.workspace() {
            Some(chosen) => resolved.starts_with(&chosen.dir),
            None => choosing
                .host_workspace
                .as_ref()
                .is_some_and(|host| resolved.starts_with(host)),
        };
        if inside {
            return;
        }
        match workspace::project_of(dir, &choosing.allowed(&self.path_roots)) {
            Ok(project) => {
                self.set_workspace(scope, project, WorkspaceSource::CallWorkdir)
                    .await;
            }
            Err(why) => {
                tracing::debug!(scope = %scope.name, %why, "a call's workdir is no workspace")
            }
        }
    }

    /// Make `project` the workspace of `scope`, unless it is already: the scope's layers are
    /// built again with it as the writable root, and its git guard made again over it.
    async fn set_workspace(&self, scope: &Scope, project: PathBuf, from: WorkspaceSource) {
        let _turn = scope.choosing.lock().await;
        if scope
            .workspace()
            .is_some_and(|chosen| chosen.dir == project)
        {
            return;
        }
        let context = Arc::new(sandbox::Context {
            workdir: Some(project.clone()),
            ..(*self.sandbox_context).clone()
        });
        let roots = PathRoots::of(&context);
        scope.sandbox.set_context(context).await;
        scope
            .set_workspace(Arc::new(workspace::ScopeWorkspace {
                dir: project.clone(),
                roots,
            }))
            .await;
        tracing::info!(
            scope = %scope.name,
            workspace = %project.display(),
            from = from.describe(),
            "a session chose its workspace"
        );
    }

    /// The profile of a request that names none: the operator's settings.
    fn default_profile(&self) -> Profile {
        self.config.sandbox.profile()
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

impl Drop for ProcessManager {
    /// Close every keeper's control socket before returning (each then kills everything under
    /// it and exits), hand the keepers to a short-lived thread that reaps them as they exit (so
    /// the dropping thread, possibly a runtime worker, never waits for them), then delete the
    /// log files.
    fn drop(&mut self) {
        let (keepers, residents) = self.launcher.ready().close();
        ready::release_soon(keepers);
        // Each closes its control socket: it exits once every keeper it forked is gone.
        drop(residents);
        let entries = self.records.close_and_drain();
        let keepers: Vec<_> = entries
            .iter()
            .filter_map(|entry| entry.release_keeper())
            .filter_map(KeeperPid::reaped_by_us)
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

#[cfg(test)]
mod input_tests;
#[cfg(test)]
mod ready_tests;
#[cfg(test)]
mod tests;
