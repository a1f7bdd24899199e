//! [`ProcessManagerConfig`]: the settings of a process manager.

use std::path::PathBuf;
use std::time::Duration;

use super::output_log;
use crate::buffer::{DEFAULT_HEAD_BYTES, DEFAULT_TAIL_BYTES};
use crate::sandbox::SandboxSettings;

/// Settings of a [`ProcessManager`](super::ProcessManager). `Default` gives the production values.
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
    /// Processes running at once in one scope, at most. A start beyond is refused with a
    /// message saying so. Default 64.
    pub max_running_per_scope: usize,
    /// Processes running at once in the scopes of one owner (a principal of an HTTP server,
    /// see [`crate::process::ProcessBackend::set_owner`]), at most (`--max-processes-per-principal`).
    /// A start beyond is refused with a message saying so. Scopes without an owner do not
    /// count. Default: no limit but `max_running_total`.
    pub max_running_per_owner: usize,
    /// Processes running at once on the whole host, all scopes together, at most (the host's
    /// `--max-processes-total`). A finished process whose leftovers still run counts while
    /// they run. A start beyond is refused with a message saying so. Each running process
    /// holds about [`DESCRIPTORS_PER_PROCESS`] of the host's file descriptors. So the default
    /// is what the host's descriptor limit (`RLIMIT_NOFILE`) leaves room for, at most 2048.
    /// Past it, starts would fail on `EMFILE` in every session at once.
    pub max_running_total: usize,
    /// Finished processes kept listed in one scope, at most. Past this, the scope's oldest
    /// finished record is removed before its retention ends. Default 256.
    pub max_retained_per_scope: usize,
    /// Finished processes kept listed on the whole host, all scopes together, at most. Past
    /// this, the host's oldest finished record with nothing left running is removed before its
    /// retention ends. Records whose leftovers still run are kept; `max_running_total` bounds
    /// them. Each record holds up to `head_bytes + tail_bytes` of output in memory. Default
    /// 4096 (128 MiB of output at most with the default buffers).
    pub max_retained_total: usize,
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
    /// How long log files are kept after their last write, also after their process, session
    /// and host are gone (a path or link given to a model stays valid this long). Older logs
    /// are deleted by a manager that starts when the last sweep is older than
    /// [`ProcessManagerConfig::sweep_interval`], and by
    /// [`crate::ToolHost::sweep_logs_periodically`]. Default 24 h.
    pub log_retention: Duration,
    /// The most bytes all log files in the state directory may take together: past it, the
    /// oldest are deleted first (logs of this manager's listed processes are kept), at each
    /// sweep (see [`ProcessManagerConfig::sweep_interval`]): between two sweeps the logs can
    /// grow past it. Default 1 GiB.
    pub log_max_total: u64,
    /// Niceness added to every process (0 leaves the priority alone). Default 5.
    pub nice: i32,
    /// The operator's confinement settings: the profile of a request that names none, and the
    /// bound of every other. Default `workspace-write`, network `full`.
    pub sandbox: SandboxSettings,
    /// Paths no confined command may reach, besides the default hidden ones: the host's own
    /// files (component cache, plugin directories, token file). The state directory is added
    /// by the manager.
    pub protected: Vec<PathBuf>,
    /// Keepers prepared ahead for confined commands, on the whole host, at most: per scope
    /// and profile used, a keeper already in its next command's cgroups and the scope's
    /// namespaces waits for it, so that a start only hands it the command. At most
    /// two profiles per scope. 0 makes every keeper at its command's start. Default 16.
    pub ready_keepers: usize,
    /// How long a keeper prepared ahead waits unused before it is released. Default 60 s.
    pub ready_keeper_idle: Duration,
    /// The host is no server: it runs a call or a few (`toolhost call`, `toolhost test`) and
    /// exits, so nothing is prepared for a later command. No keeper is prepared ahead (whatever
    /// [`ready_keepers`](Self::ready_keepers) says), and the git guard sets no watches, so
    /// every check reads the repositories. Default false.
    pub serves_one_call: bool,
    /// The parents under which a scope may choose a workspace of its own, when
    /// [`default_workdir`](Self::default_workdir) is not set: a root its MCP client offers, or
    /// a call's `workdir`, under one of them makes that project the scope's workspace (see
    /// [`ProcessManager::choose_workspace`](super::ProcessManager::choose_workspace)). Empty:
    /// every scope keeps the host's workspace. Default empty; the CLI's default is the
    /// user's home directories (`--workspaces-under`).
    pub workspaces_under: Vec<PathBuf>,
    /// The record of commands: one JSON line per command that ended (`record.rs`). Default
    /// `None`: no record; the CLI's default is `commands.jsonl` in the state directory.
    pub record: Option<super::RecordSettings>,
}

impl ProcessManagerConfig {
    /// How often output logs are swept: a quarter of the retention, at least every second and
    /// at most every 10 minutes. A manager that starts within this time of the last sweep of
    /// its directory (by any host) does not sweep again.
    pub fn sweep_interval(&self) -> Duration {
        (self.log_retention / 4).clamp(Duration::from_secs(1), Duration::from_secs(600))
    }
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
            max_running_per_owner: usize::MAX,
            max_running_total: default_max_running_total(),
            max_retained_per_scope: 256,
            max_retained_total: 4096,
            drain_timeout: Duration::from_secs(2),
            output_logs: true,
            state_dir: None,
            log_cap_bytes: 64 * 1024 * 1024,
            log_retention: Duration::from_secs(24 * 60 * 60),
            log_max_total: 1024 * 1024 * 1024,
            nice: 5,
            sandbox: SandboxSettings::default(),
            protected: Vec::new(),
            ready_keepers: 16,
            ready_keeper_idle: Duration::from_secs(60),
            serves_one_call: false,
            workspaces_under: Vec::new(),
            record: None,
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

/// File descriptors the host holds per running process (its keeper's channels, status and
/// output pipes, its cgroups' `tasks` files and directories, pidfd) and per request waiting on
/// it, with room to spare.
pub const DESCRIPTORS_PER_PROCESS: u64 = 14;

/// The default of [`ProcessManagerConfig::max_running_total`]: as many as the descriptor limit
/// leaves room for (half kept for everything else: connections, sessions, logs), between 16
/// and 2048. Measured under overload (`benches/http_load.rs`): about 10 per process, and a
/// connection per call waiting; two more since each command's cgroup directories are held open.
pub fn default_max_running_total() -> usize {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    let usable = (limit / 2) / DESCRIPTORS_PER_PROCESS;
    usize::try_from(usable.clamp(16, 2048)).unwrap_or(2048)
}
