//! What a command may touch: the operator's [`SandboxSettings`], a plugin's
//! [`SandboxGrant`], a policy's [`ConfinementRequest`], and the [`Profile`] that results and is
//! enforced.
//!
//! On every dimension the stricter setting wins: the operator bounds, the plugin's grant bounds
//! further, and the policy chooses within. A request looser than its plugin's grant is refused
//! (a policy bug), never silently widened or narrowed.

use std::fmt;

use super::network::{AllowList, AllowListId, Askable};
use std::path::PathBuf;

/// How much of the filesystem a command may write. Ordered from loosest to strictest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum SandboxMode {
    /// No confinement: the command runs with the host user's full authority (it still cannot
    /// escape the host's bookkeeping).
    Off,
    /// Read everything but the hidden paths; write the workspace, the `--writable` paths, the
    /// package managers' caches, `/tmp` and a private temporary directory.
    #[default]
    WorkspaceWrite,
    /// Read everything but the hidden paths; write only a private temporary directory.
    ReadOnly,
}

impl SandboxMode {
    /// The name used by flags, manifests and tools: `off`, `workspace-write`, `read-only`.
    pub fn name(self) -> &'static str {
        match self {
            SandboxMode::Off => "off",
            SandboxMode::WorkspaceWrite => "workspace-write",
            SandboxMode::ReadOnly => "read-only",
        }
    }

    /// Parse a name as [`SandboxMode::name`] writes it.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "off" => Some(SandboxMode::Off),
            "workspace-write" => Some(SandboxMode::WorkspaceWrite),
            "read-only" => Some(SandboxMode::ReadOnly),
            _ => None,
        }
    }
}

impl fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a command may reach over the network. Ordered from loosest to strictest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Network {
    /// Any address the host can reach.
    #[default]
    Full,
    /// Only the hosts of an allow-list, through the session's proxy (`allow=PATTERN,...`): a
    /// network namespace with no route out.
    Allow(AllowListId),
    /// No network sockets at all (Unix sockets and socket pairs work as under `Full`, see
    /// `unix.rs`).
    None,
}

impl Network {
    /// The kind's name: `full`, `allow`, `none`.
    pub fn name(self) -> &'static str {
        match self {
            Network::Full => "full",
            Network::Allow(_) => "allow",
            Network::None => "none",
        }
    }

    /// Parse a setting as [`Network`]'s `Display` writes it: `full`, `none`,
    /// `allow=PATTERN[,PATTERN...]`.
    pub fn parse(text: &str) -> Option<Self> {
        Network::parse_setting(text).ok()
    }

    /// Parse a setting as [`Network::parse`] does, with the reason when it is not one.
    pub fn parse_setting(text: &str) -> Result<Self, String> {
        match text.trim() {
            "full" => Ok(Network::Full),
            "none" => Ok(Network::None),
            other => match other.strip_prefix("allow=") {
                Some(list) => AllowList::parse(list)
                    .map(|list| Network::Allow(AllowListId::of(list)))
                    .map_err(|error| error.to_string()),
                None => Err(format!(
                    "`{other}` is not one of full, none, allow=HOST[,HOST...]"
                )),
            },
        }
    }

    /// Whether this setting allows something `other` does not: a looser kind (`full` than
    /// `allow` than `none`), or an allow-list with a pattern outside `other`'s. Two lists are
    /// compared by their patterns, never by their interned ids.
    pub fn looser_than(self, other: Network) -> bool {
        let strictness = |network: Network| match network {
            Network::Full => 0,
            Network::Allow(_) => 1,
            Network::None => 2,
        };
        match (self, other) {
            (Network::Allow(mine), Network::Allow(theirs)) => {
                let theirs = theirs.list();
                mine.list().patterns().iter().any(|pattern| {
                    !theirs
                        .patterns()
                        .iter()
                        .any(|granted| pattern.within(granted))
                })
            }
            _ => strictness(self) < strictness(other),
        }
    }

    /// The stricter of two settings; of two allow-lists, what both allow.
    pub fn stricter(self, other: Network) -> Network {
        match (self, other) {
            (Network::Allow(a), Network::Allow(b)) if a != b => {
                Network::Allow(AllowListId::of(a.list().both(&b.list())))
            }
            _ => self.max(other),
        }
    }

    /// The allow-list, for `allow`.
    pub fn allow_list(self) -> Option<std::sync::Arc<AllowList>> {
        match self {
            Network::Allow(id) => Some(id.list()),
            _ => None,
        }
    }

    /// Several settings together (the repeated `--network` flag): allow-lists add up; `full` or
    /// `none` stand alone.
    pub fn combine(settings: &[Network]) -> Result<Network, String> {
        match settings {
            [] => Ok(Network::Full),
            [one] => Ok(*one),
            many => {
                let mut list: Option<AllowList> = None;
                for setting in many {
                    let Network::Allow(id) = setting else {
                        return Err(format!(
                            "`{setting}` cannot be combined with other network settings; repeat                              only `allow=...`"
                        ));
                    };
                    let more = id.list();
                    list = Some(match list {
                        Some(list) => list.either(&more),
                        None => (*more).clone(),
                    });
                }
                Ok(list.map_or(Network::Full, |list| Network::Allow(AllowListId::of(list))))
            }
        }
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Network::Allow(id) => write!(f, "allow={}", id.list()),
            other => f.write_str(other.name()),
        }
    }
}

/// Resource limits of one command. `None`: not limited on that dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Limits {
    /// Memory of the command and everything it started, in bytes.
    pub memory_bytes: Option<u64>,
    /// Processes (and threads) the command may have at once, itself included.
    pub processes: Option<u32>,
    /// CPU seconds each of its processes may use.
    pub cpu_seconds: Option<u64>,
}

impl Limits {
    /// The stricter of two limits on every dimension.
    pub fn stricter(self, other: Limits) -> Limits {
        fn min<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
            match (a, b) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        }
        Limits {
            memory_bytes: min(self.memory_bytes, other.memory_bytes),
            processes: min(self.processes, other.processes),
            cpu_seconds: min(self.cpu_seconds, other.cpu_seconds),
        }
    }

    /// Whether `self` allows more than `bound` on some dimension.
    fn looser_than(self, bound: Limits) -> Option<&'static str> {
        fn looser<T: Ord>(value: Option<T>, bound: Option<T>) -> bool {
            match (value, bound) {
                (_, None) => false,
                (None, Some(_)) => false,
                (Some(value), Some(bound)) => value > bound,
            }
        }
        if looser(self.memory_bytes, bound.memory_bytes) {
            Some("memory limit")
        } else if looser(self.processes, bound.processes) {
            Some("process limit")
        } else if looser(self.cpu_seconds, bound.cpu_seconds) {
            Some("CPU limit")
        } else {
            None
        }
    }
}

/// The operator's settings (command-line flags): the loosest any command may get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxSettings {
    /// `--sandbox`. Default `workspace-write`.
    pub mode: SandboxMode,
    /// `--network`. Default `full`.
    pub network: Network,
    /// `--writable`: directories writable besides the workspace (absolute).
    pub writable: Vec<PathBuf>,
    /// `--hide`: paths hidden besides the credential stores hidden by default (absolute).
    pub hide: Vec<PathBuf>,
    /// `--reveal`: paths hidden by default that commands may read all the same (absolute).
    pub reveal: Vec<PathBuf>,
    /// `--shm-size-per-session`: the size of the `/dev/shm` of a session's own, in bytes.
    /// Default [`DEFAULT_SHM_BYTES`].
    pub shm_bytes: u64,
    /// `--tmp-size-per-session`: the most bytes of a session's own `/tmp`.
    /// Default [`DEFAULT_TMP_BYTES`].
    pub tmp_bytes: u64,
    /// `--allow-hook-writes`: confined commands may write git hooks and the settings that make
    /// git run programs, and shell start-up files in writable roots (no read-only binds, no
    /// git guard). Default `false`.
    pub allow_hook_writes: bool,
    /// `--memory-limit-per-command` and `--process-limit-per-command`; `cpu_seconds` has no flag.
    pub limits: Limits,
    /// `--memory-limit-per-session`: the memory of a session's confined commands together.
    /// Default: half the machine's memory.
    pub memory_per_session: Option<u64>,
    /// `--memory-limit-total`: the memory of every session's confined commands together.
    /// Default: three quarters of the machine's memory.
    pub memory_total: Option<u64>,
    /// `--secret-scan`: whether files under the homes' configuration trees that hold a secret
    /// are found and hidden. Default `true`.
    pub secret_scan: bool,
    /// `--allow-unix-socket`: Unix sockets confined commands may connect to besides those in
    /// the workspace, the writable roots and the session's own `/tmp` (absolute).
    pub allow_unix_socket: Vec<PathBuf>,
    /// `--network ask[=PATTERNS]`: the hosts a session's person may allow its commands to
    /// reach beyond the allow-list, when a policy asks. `None` (the default): none.
    pub network_ask: Option<Askable>,
}

impl Default for SandboxSettings {
    fn default() -> Self {
        SandboxSettings {
            mode: SandboxMode::WorkspaceWrite,
            network: Network::Full,
            writable: Vec::new(),
            hide: Vec::new(),
            reveal: Vec::new(),
            shm_bytes: DEFAULT_SHM_BYTES,
            tmp_bytes: DEFAULT_TMP_BYTES,
            allow_hook_writes: false,
            limits: Limits {
                memory_bytes: default_memory_limit(),
                processes: Some(1024),
                cpu_seconds: None,
            },
            memory_per_session: default_memory_limit(),
            memory_total: memory_total().map(|bytes| bytes / 4 * 3),
            secret_scan: true,
            allow_unix_socket: Vec::new(),
            network_ask: None,
        }
    }
}

impl SandboxSettings {
    /// The profile of a command nobody asked anything for: these settings as they are.
    pub fn profile(&self) -> Profile {
        Profile {
            mode: self.mode,
            network: self.network,
            hidden: Vec::new(),
            limits: self.limits,
        }
    }
}

/// The default size of a session's own `/dev/shm`: 512 MiB.
pub const DEFAULT_SHM_BYTES: u64 = 512 * 1024 * 1024;

/// The default most bytes of a session's own `/tmp` (`--tmp-size-per-session`).
pub const DEFAULT_TMP_BYTES: u64 = 1024 * 1024 * 1024;

/// Half the machine's memory, or `None` when it cannot be read.
fn default_memory_limit() -> Option<u64> {
    memory_total().map(|bytes| bytes / 2)
}

/// The machine's memory, in bytes.
fn memory_total() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|line| line.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// A plugin's bounds from its manifest's `[grants]` (`sandbox`, `network`, `memory_limit`,
/// `process_limit`, `cpu_limit`): never looser than the operator's, and what its requests may
/// not exceed. Everything `None`: the operator's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SandboxGrant {
    /// At least this strict.
    pub mode: Option<SandboxMode>,
    /// At least this strict.
    pub network: Option<Network>,
    /// At most these.
    pub limits: Limits,
}

/// What a policy asks for one command (the WIT `confinement-request`, from `toolhost:plugin@0.2.0` on). Absent fields take the
/// plugin's bound.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConfinementRequest {
    /// Filesystem confinement.
    pub mode: Option<SandboxMode>,
    /// Network access.
    pub network: Option<Network>,
    /// Paths hidden besides the default ones (absolute).
    pub hidden: Vec<PathBuf>,
    /// Resource limits.
    pub limits: Limits,
}

/// The confinement a command runs under, recorded with it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Profile {
    /// Filesystem confinement.
    pub mode: SandboxMode,
    /// Network access.
    pub network: Network,
    /// Paths hidden besides the default ones.
    pub hidden: Vec<PathBuf>,
    /// Resource limits.
    pub limits: Limits,
}

impl Profile {
    /// No confinement, no limits.
    pub fn unconfined() -> Self {
        Profile {
            mode: SandboxMode::Off,
            network: Network::Full,
            hidden: Vec::new(),
            limits: Limits::default(),
        }
    }

    /// A short description for results and listings, e.g.
    /// `workspace-write, network none, memory 512 MiB per process`; `off (unconfined)` for `off`,
    /// which applies no layer and no limit.
    ///
    /// Before a command runs, whether `RLIMIT_NPROC` will hold the process limit is what the
    /// last namespaces made in this process say (see `Profile::summary_with` for the exact
    /// fact of one command).
    pub fn summary(&self) -> String {
        self.summary_with(super::namespaces::nproc_limit_applies(
            super::namespaces::made() == Some(true),
        ))
    }

    /// [`Profile::summary`], saying whether `RLIMIT_NPROC` holds the process limit.
    pub(crate) fn summary_with(&self, nproc_rlimit: bool) -> String {
        if self.mode == SandboxMode::Off {
            return "off (unconfined)".to_owned();
        }
        let mut parts = vec![self.mode.name().to_string()];
        parts.push(match self.network.allow_list() {
            Some(list) => format!("network only to {} (through a proxy)", list.for_people()),
            None => format!("network {}", self.network),
        });
        let cgroups = super::cgroup::hierarchies();
        if let Some(bytes) = self.limits.memory_bytes {
            let per = if cgroups.memory.is_some() {
                ""
            } else {
                " per process"
            };
            parts.push(format!("memory {} MiB{per}", bytes / (1024 * 1024)));
        }
        if let Some(processes) = self.limits.processes {
            if cgroups.pids.is_some() {
                parts.push(format!("{processes} processes"));
            } else if nproc_rlimit {
                parts.push(format!(
                    "{processes} processes for the session's commands of this profile together \
                     (RLIMIT_NPROC)"
                ));
            } else {
                parts.push(format!(
                    "{processes} processes (not enforced here: no pids cgroup the host may create)"
                ));
            }
        }
        if let Some(seconds) = self.limits.cpu_seconds {
            parts.push(format!("{seconds} CPU seconds"));
        }
        parts.join(", ")
    }
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the policy asked for {what} `{asked}`, looser than its plugin's grant (`{granted}`)")]
pub struct LooserThanGrant {
    /// Which dimension.
    pub what: &'static str,
    /// What was asked.
    pub asked: String,
    /// What the grant allows.
    pub granted: String,
}

/// The profile of a command whose policy asks for nothing: the stricter of the operator's
/// settings and the plugin's grant on every dimension.
pub fn bound(operator: &SandboxSettings, grant: &SandboxGrant) -> Profile {
    Profile {
        mode: grant
            .mode
            .map_or(operator.mode, |mode| mode.max(operator.mode)),
        network: grant.network.map_or(operator.network, |network| {
            network.stricter(operator.network)
        }),
        hidden: Vec::new(),
        limits: operator.limits.stricter(grant.limits),
    }
}

/// The profile of one command: the stricter of the operator's settings, the plugin's grant and
/// the request on every dimension. A request looser than the grant is an error.
pub fn resolve(
    operator: &SandboxSettings,
    grant: &SandboxGrant,
    request: Option<&ConfinementRequest>,
) -> Result<Profile, LooserThanGrant> {
    let base = bound(operator, grant);
    let Some(request) = request else {
        return Ok(base);
    };
    let (bound_mode, bound_network, bound_limits) = (base.mode, base.network, base.limits);
    if let (Some(asked), Some(granted)) = (request.mode, grant.mode)
        && asked < granted
    {
        return Err(LooserThanGrant {
            what: "sandbox",
            asked: asked.to_string(),
            granted: granted.to_string(),
        });
    }
    if let (Some(asked), Some(granted)) = (request.network, grant.network)
        && asked.looser_than(granted)
    {
        return Err(LooserThanGrant {
            what: "network",
            asked: asked.to_string(),
            granted: granted.to_string(),
        });
    }
    if let Some(what) = request.limits.looser_than(grant.limits) {
        return Err(LooserThanGrant {
            what,
            asked: format!("{:?}", request.limits),
            granted: format!("{:?}", grant.limits),
        });
    }
    Ok(Profile {
        mode: request.mode.map_or(bound_mode, |mode| mode.max(bound_mode)),
        network: request
            .network
            .map_or(bound_network, |network| network.stricter(bound_network)),
        hidden: request.hidden.clone(),
        limits: bound_limits.stricter(request.limits),
    })
}

/// Parse a size: `"64MiB"`, `"512KiB"`, `"2GiB"`, `"2G"`, `"1000000"` (bytes). `None` for
/// anything else, zero, or an overflow.
pub fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let number: u64 = digits.parse().ok()?;
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return None,
    };
    number.checked_mul(multiplier).filter(|bytes| *bytes > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_lists_compare_by_their_patterns_not_by_when_they_were_interned() {
        // The narrower list is interned first, so its id is the smaller.
        let narrow = Network::parse("allow=narrow-first.test").expect("a list");
        let wide = Network::parse("allow=narrow-first.test,other.test").expect("a list");
        assert!(!narrow.looser_than(wide), "a subset is not looser");
        assert!(wide.looser_than(narrow), "a superset is looser");
        let within = Network::parse("allow=api.within.test").expect("a list");
        let star = Network::parse("allow=*.within.test").expect("a list");
        assert!(!within.looser_than(star));
        assert!(star.looser_than(within));
        assert!(Network::Full.looser_than(narrow));
        assert!(narrow.looser_than(Network::None));
        assert!(!Network::None.looser_than(narrow));
    }
}
