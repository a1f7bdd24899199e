//! Limits on a command and everything it started, with cgroups: the number of processes
//! (`pids`) and memory (`memory`), one cgroup per command and controller.
//!
//! Used where the host may create cgroups below the cgroup it runs in, so that commands stay
//! inside whatever bounds the host itself (a service's limits): for each controller, its
//! cgroup v1 hierarchy (as root, or where delegated), else the unified (v2) hierarchy where
//! the controller is delegated to the host's cgroup. The host creates the command's cgroups,
//! sets the limits and hands the keeper an open `tasks` (v1) or `cgroup.procs` (v2) of each;
//! the keeper moves itself in before it starts the command, so everything the command starts
//! is counted. Once its command's record is dropped, a session keeps a command's cgroup for a
//! later command when it is clean (no limit of it reached, little memory still charged to
//! it), and removes it otherwise. A session keeps up to 16. So a session running up to 16
//! commands at once makes none in a steady state. The host keeps up to 256 over all sessions.
//! Each session's bound is an equal share of those 256, at least 4 and at most 16.
//! A start takes the oldest kept cgroup with its controllers that is empty, looking at two at
//! most.
//!
//! The cgroups nest, so that memory is bounded per command, per session and for the host:
//!
//! 1. The host's cgroup `toolhost-PID`, made below the hierarchy's directory at the first
//!    confined command, holds every session's (memory limit: `--memory-limit-total`).
//! 2. A session's cgroup `session-N`, made at its first confined command and removed with its
//!    sandbox state, holds the session's commands' (memory limit:
//!    `--memory-limit-per-session`).
//! 3. A command's cgroup `toolhost-PID-N` holds the command (memory limit:
//!    `--memory-limit-per-command`, and its process limit).
//!
//! Only the commands' cgroups hold processes: the two above them only hold cgroups, as v2
//! requires of a cgroup that enables controllers for its children. The kernel charges a
//! command's memory to every cgroup above it too, so the lowest limit reached decides.
//!
//! In v2 a cgroup that enables controllers for its children may hold no process itself. When
//! the host's cgroup offers the controllers (`cgroup.controllers`) but does not enable them
//! yet, the host moves itself into a leaf of its own (`toolhost-host-PID`) and enables them
//! (`cgroup.subtree_control`); the commands' cgroups are that leaf's siblings. That needs the
//! host to be alone in its cgroup and allowed to write it: a cgroup delegated to the user
//! (`systemd-run --user -p Delegate=yes`), or, as root, the root of a container's cgroup
//! namespace. Anywhere else v2 is left alone and `toolhost sandbox` says the limits fall back.

use super::small_file::{read_small, read_small_at};
use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Where the host may create cgroups for each controller.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hierarchies {
    /// The `pids` controller (process count).
    pub pids: Option<Hierarchy>,
    /// The `memory` controller.
    pub memory: Option<Hierarchy>,
}

/// A directory below which the host creates a controller's cgroups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hierarchy {
    /// The directory.
    pub dir: PathBuf,
    /// In the unified (v2) hierarchy, where one cgroup serves every controller.
    pub v2: bool,
}

impl Hierarchy {
    /// `cgroup v1 pids, below DIR` and the like, for reports.
    pub fn describe(&self, controller: &str) -> String {
        let version = if self.v2 { "v2" } else { "v1" };
        format!(
            "cgroup {version} {controller}, below {}",
            self.dir.display()
        )
    }
}

/// The host's own cgroups of the v1 `pids` and `memory` hierarchies, when it may create
/// cgroups below them (checked once).
pub fn hierarchies() -> &'static Hierarchies {
    static FOUND: OnceLock<Hierarchies> = OnceLock::new();
    FOUND.get_or_init(|| {
        if super::probe::disabled("cgroups") {
            return Hierarchies::default();
        }
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let v1 =
            |controller| usable(&own, &mounts, controller).map(|dir| Hierarchy { dir, v2: false });
        let mut found = Hierarchies {
            pids: v1("pids"),
            memory: v1("memory"),
        };
        let wanted: Vec<&str> = [("pids", &found.pids), ("memory", &found.memory)]
            .into_iter()
            .filter(|(_, v1)| v1.is_none())
            .map(|(name, _)| name)
            .collect();
        let root = rustix::process::geteuid().is_root();
        if let Some(dir) = unified(&own, &mounts, &wanted, root, std::process::id()) {
            for name in wanted {
                let slot = if name == "pids" {
                    &mut found.pids
                } else {
                    &mut found.memory
                };
                *slot = Some(Hierarchy {
                    dir: dir.clone(),
                    v2: true,
                });
            }
        }
        found
    })
}

/// The host's cgroup in the unified (v2) hierarchy and that hierarchy's mount point.
fn unified_cgroup(own: &str, mounts: &str) -> Option<(PathBuf, PathBuf)> {
    let path = own.lines().find_map(|line| line.strip_prefix("0::"))?;
    let (mount, root) = mounts.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let fstype = right.split_whitespace().next()?;
        let mut fields = left.split_whitespace();
        let root = fields.nth(3)?;
        let mount_point = fields.next()?;
        (fstype == "cgroup2").then(|| (PathBuf::from(mount_point), root.to_owned()))
    })?;
    let relative = Path::new(path).strip_prefix(&root).ok()?;
    Some((mount.join(relative), mount))
}

/// Where the host may create v2 cgroups with all of `wanted` (controller names) enabled: its
/// own cgroup if it enables them for children already, else the same after moving the host
/// (process `pid`) into a leaf of its own, where that is allowed (see the module docs).
fn unified(own: &str, mounts: &str, wanted: &[&str], root: bool, pid: u32) -> Option<PathBuf> {
    if wanted.is_empty() {
        return None;
    }
    let (cgroup, mount) = unified_cgroup(own, mounts)?;
    let lists_all = |file: &str| {
        let text = std::fs::read_to_string(cgroup.join(file)).unwrap_or_default();
        wanted
            .iter()
            .all(|name| text.split_whitespace().any(|have| have == *name))
    };
    if lists_all("cgroup.subtree_control") {
        return can_create_in(&cgroup).then_some(cgroup);
    }
    if !lists_all("cgroup.controllers") {
        return None;
    }
    // As root anything is writable: only the root of a cgroup namespace (a container's own
    // tree) is taken as the host's to rearrange.
    if root && cgroup != mount {
        return None;
    }
    let leaf = cgroup.join(format!("toolhost-host-{pid}"));
    let moved = std::fs::create_dir(&leaf).is_ok()
        && std::fs::write(leaf.join("cgroup.procs"), pid.to_string()).is_ok();
    let enable: Vec<String> = wanted.iter().map(|name| format!("+{name}")).collect();
    if moved
        && std::fs::write(cgroup.join("cgroup.subtree_control"), enable.join(" ")).is_ok()
        && can_create_in(&cgroup)
    {
        tracing::debug!(cgroup = %cgroup.display(), "cgroup v2: the host moved into a leaf of its own");
        return Some(cgroup);
    }
    // Not alone, or not allowed: put things back.
    if moved {
        let _ = std::fs::write(cgroup.join("cgroup.procs"), pid.to_string());
    }
    let _ = std::fs::remove_dir(&leaf);
    tracing::debug!(cgroup = %cgroup.display(), "cgroup v2 controllers cannot be enabled below the host's cgroup");
    None
}

/// Whether a cgroup can be made (and removed) in `dir`.
fn can_create_in(dir: &Path) -> bool {
    let probe = dir.join(format!("toolhost-probe-{}", std::process::id()));
    let made = std::fs::create_dir(&probe).is_ok();
    let _ = std::fs::remove_dir(&probe);
    made
}

/// `controller`'s v1 mount point joined with the host's cgroup in it, if a cgroup can be made
/// there.
fn usable(own: &str, mounts: &str, controller: &str) -> Option<PathBuf> {
    let path = own.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let _id = fields.next()?;
        let controllers = fields.next()?;
        let path = fields.next()?;
        controllers
            .split(',')
            .any(|name| name == controller)
            .then(|| path.trim_start_matches('/').to_owned())
    })?;
    let mount = mounts.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mut right = right.split_whitespace();
        let fstype = right.next()?;
        let _source = right.next()?;
        let options = right.next()?;
        let mount_point = left.split_whitespace().nth(4)?;
        (fstype == "cgroup" && options.split(',').any(|option| option == controller))
            .then(|| PathBuf::from(mount_point))
    })?;
    let base = mount.join(path);
    can_create_in(&base).then_some(base)
}

/// A cgroup that holds only cgroups: the host's, or a session's (steps 1 and 2 of the module's
/// flow). Removed on drop, when what it holds is gone.
#[derive(Debug, Default)]
pub(crate) struct ParentCgroups {
    /// Its directory in the memory hierarchy, and whether that is v2.
    memory: Option<(PathBuf, bool)>,
    /// Its directory in the pids hierarchy, and whether that is v2.
    pids: Option<(PathBuf, bool)>,
    /// Its directories, each once.
    dirs: Vec<PathBuf>,
    /// The memory limit set on it, in bytes.
    memory_limit: Option<u64>,
    /// Its commands' cgroups that were left clean, for its next commands, oldest first (at
    /// most [`KEPT`]).
    kept: std::sync::Mutex<VecDeque<Kept>>,
    /// A session's, counted in [`SESSIONS`] until it is dropped.
    session: bool,
}

/// How many clean command cgroups a session keeps for its next commands, at most. A session
/// running many commands at once reuses them only if it keeps about as many as it runs at
/// once. Otherwise most of its commands make a cgroup and remove it.
const KEPT: usize = 16;

/// How many clean command cgroups the whole host keeps, over every session: each is a kernel
/// object of a few kilobytes per controller.
const KEPT_TOTAL: usize = 256;

/// How many clean command cgroups a session may keep however many sessions share the host's
/// [`KEPT_TOTAL`].
const KEPT_LEAST: usize = 4;

/// How many sessions have cgroups of their own now.
static SESSIONS: AtomicUsize = AtomicUsize::new(0);

/// How many clean command cgroups a session may keep now: an equal share of [`KEPT_TOTAL`]
/// among the sessions, from [`KEPT_LEAST`] to [`KEPT`]. So the first sessions cannot take
/// the host's whole bound.
fn kept_share() -> usize {
    share_among(SESSIONS.load(Ordering::Acquire))
}

/// A session's share of [`KEPT_TOTAL`] among `sessions`, from [`KEPT_LEAST`] to [`KEPT`].
fn share_among(sessions: usize) -> usize {
    (KEPT_TOTAL / sessions.max(1)).clamp(KEPT_LEAST, KEPT)
}

/// How many clean command cgroups the host keeps now, over every session.
static KEPT_NOW: AtomicUsize = AtomicUsize::new(0);

/// How many kept cgroups a start looks at for an empty one, oldest first. Each look reads a
/// file. The oldest is the likeliest to be empty, with the keeper of its last command reaped.
const LOOKS: usize = 2;

/// Above this much memory still charged to a command's cgroup once its command is gone (files
/// it cached, kernel objects), the cgroup is removed rather than kept: the next command starts
/// with at most this much counted against its limit.
const KEPT_CHARGE_BYTES: u64 = 1 << 20;

/// A command's cgroups, clean and empty, kept by its session for a later command.
#[derive(Debug)]
struct Kept {
    dirs: Vec<PathBuf>,
    /// Each of `dirs`, open (`O_PATH`), for its counters.
    dir_fds: Vec<OwnedFd>,
    procs: Vec<File>,
    memory: Option<(PathBuf, bool)>,
    pids: Option<(PathBuf, bool)>,
    /// The limits written to them.
    processes: Option<u32>,
    memory_limit: Option<u64>,
}

impl Kept {
    /// Remove the cgroups (each must be empty of processes).
    fn remove(self) {
        drop(self.procs);
        drop(self.dir_fds);
        remove_command_dirs(&self.dirs);
    }

    /// Whether no process is counted in them any more (`pids.current`, or the memory
    /// cgroup's list of processes where there is no pids cgroup).
    fn empty(&self) -> bool {
        match (&self.pids, &self.memory) {
            (Some((dir, _)), _) => {
                number_in(&self.dirs, &self.dir_fds, dir, "pids.current") == Some(0)
            }
            (None, Some((dir, v2))) => {
                std::fs::read_to_string(dir.join(if *v2 { "cgroup.procs" } else { "tasks" }))
                    .is_ok_and(|tasks| tasks.trim().is_empty())
            }
            (None, None) => true,
        }
    }
}

impl ParentCgroups {
    /// The host's cgroup, with `memory_total` as its memory limit, made at the first call (the
    /// limit of later calls is not looked at); `None` where no hierarchy is usable or it cannot
    /// be made (said once).
    pub(crate) fn host(memory_total: Option<u64>) -> Option<&'static ParentCgroups> {
        static HOST: OnceLock<Option<ParentCgroups>> = OnceLock::new();
        HOST.get_or_init(|| {
            let hierarchies = hierarchies();
            let bases = Bases {
                memory: hierarchies.memory.as_ref().map(|h| (h.dir.clone(), h.v2)),
                pids: hierarchies.pids.as_ref().map(|h| (h.dir.clone(), h.v2)),
            };
            if bases.memory.is_none() && bases.pids.is_none() {
                return None;
            }
            for base in bases.memory.iter().chain(&bases.pids) {
                sweep_stale(&base.0);
            }
            let name = format!("toolhost-{}", std::process::id());
            ParentCgroups::create(&bases, &name, memory_total)
                .map_err(|error| {
                    tracing::warn!(
                        %error,
                        "cannot make the host's cgroup: commands' cgroups are made without it, \
                         and memory is not bounded per session or for the host"
                    );
                })
                .ok()
        })
        .as_ref()
    }

    /// A scope's cgroup below `self` (the host's), with `memory` as its memory limit.
    pub(crate) fn scope(&self, memory: Option<u64>) -> io::Result<ParentCgroups> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!("session-{}", NEXT.fetch_add(1, Ordering::Relaxed));
        let mut made = ParentCgroups::create(&self.bases(), &name, memory)?;
        made.session = true;
        SESSIONS.fetch_add(1, Ordering::AcqRel);
        Ok(made)
    }

    /// The memory limit set on it.
    pub(crate) fn memory_limit(&self) -> Option<u64> {
        self.memory_limit.filter(|_| self.memory.is_some())
    }

    /// Whether its memory limit was reached (an allocation below it failed or a process was
    /// killed for it), counting only its own limit.
    pub(crate) fn memory_limit_hit(&self) -> bool {
        self.memory
            .as_ref()
            .is_some_and(|(dir, v2)| own_limit_reached(dir, *v2))
    }

    /// A kept command cgroup with exactly the controllers asked for and empty, if the session
    /// has one among the [`LOOKS`] oldest of those. One looked at and not empty yet goes to the
    /// back, so that a cgroup whose last processes linger does not stand in front of the others.
    fn take_kept(&self, pids: bool, memory: bool) -> Option<Kept> {
        let mut kept = self
            .kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (mut at, mut looked) = (0, 0);
        while looked < LOOKS
            && let Some(candidate) = kept.get(at)
        {
            if candidate.pids.is_some() != pids || candidate.memory.is_some() != memory {
                at += 1;
                continue;
            }
            looked += 1;
            // Taken out either way: to be used, or to go to the back.
            let taken = kept.remove(at)?;
            if taken.empty() {
                KEPT_NOW.fetch_sub(1, Ordering::AcqRel);
                return Some(taken);
            }
            kept.push_back(taken);
        }
        None
    }

    /// Whether the session keeps fewer command cgroups than its share ([`kept_share`]), and the
    /// host fewer than [`KEPT_TOTAL`].
    fn has_room(&self) -> bool {
        self.kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
            < kept_share()
            && KEPT_NOW.load(Ordering::Acquire) < KEPT_TOTAL
    }

    /// Keep `kept` for a later command. It is removed instead when the session already keeps
    /// its share or the host [`KEPT_TOTAL`] (others were kept meanwhile).
    fn keep(&self, kept: Kept) {
        let mut all = self
            .kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let place = all.len() < kept_share()
            && KEPT_NOW
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| {
                    (now < KEPT_TOTAL).then_some(now + 1)
                })
                .is_ok();
        if place {
            all.push_back(kept);
            return;
        }
        drop(all);
        kept.remove();
    }

    fn bases(&self) -> Bases {
        Bases {
            memory: self.memory.clone(),
            pids: self.pids.clone(),
        }
    }

    /// Make `name` below each of `bases`, enable the controllers for its children, and set
    /// `memory` as its memory limit.
    fn create(bases: &Bases, name: &str, memory: Option<u64>) -> io::Result<ParentCgroups> {
        let mut made = ParentCgroups::default();
        made.memory_limit = memory;
        for (slot, base) in [(0, &bases.memory), (1, &bases.pids)] {
            let Some((base, v2)) = base else { continue };
            let dir = base.join(name);
            if !made.dirs.contains(&dir) {
                match std::fs::create_dir(&dir) {
                    Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
                        // Left by an earlier host with this pid: emptied and made anew.
                        remove_tree(&dir);
                        std::fs::create_dir(&dir)?;
                    }
                    other => other?,
                }
                made.dirs.push(dir.clone());
                if *v2 {
                    // Only controllers its parent passes on can be passed on.
                    let offered =
                        std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
                    let enable: Vec<String> = ["memory", "pids"]
                        .iter()
                        .filter(|name| offered.split_whitespace().any(|have| have == **name))
                        .map(|name| format!("+{name}"))
                        .collect();
                    std::fs::write(dir.join("cgroup.subtree_control"), enable.join(" "))?;
                } else if slot == 0 {
                    // Older v1 kernels count a child's memory in its parent only with this.
                    let _ = std::fs::write(dir.join("memory.use_hierarchy"), "1");
                }
            }
            let entry = Some((dir, *v2));
            if slot == 0 {
                made.memory = entry;
            } else {
                made.pids = entry;
            }
        }
        if let (Some(limit), Some((dir, v2))) = (memory, &made.memory) {
            if *v2 {
                std::fs::write(dir.join("memory.max"), limit.to_string())?;
                let _ = std::fs::write(dir.join("memory.swap.max"), "0");
            } else {
                std::fs::write(dir.join("memory.limit_in_bytes"), limit.to_string())?;
                let _ = std::fs::write(dir.join("memory.memsw.limit_in_bytes"), limit.to_string());
            }
        }
        Ok(made)
    }
}

impl Drop for ParentCgroups {
    fn drop(&mut self) {
        let kept = std::mem::take(
            self.kept
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        KEPT_NOW.fetch_sub(kept.len(), Ordering::AcqRel);
        if self.session {
            SESSIONS.fetch_sub(1, Ordering::AcqRel);
        }
        for kept in kept {
            kept.remove();
        }
        for dir in &self.dirs {
            if let Err(error) = std::fs::remove_dir(dir) {
                tracing::debug!(dir = %dir.display(), %error, "cannot remove a cgroup");
            }
        }
    }
}

/// Where a cgroup's directories are made, per controller, with whether each is v2.
#[derive(Debug, Default)]
struct Bases {
    memory: Option<(PathBuf, bool)>,
    pids: Option<(PathBuf, bool)>,
}

/// Remove `dir` and the cgroups below it, deepest first (each must be empty of processes).
fn remove_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                remove_tree(&entry.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// One command's cgroups; removed on drop (they are empty by then: the record is dropped only
/// after the command and everything it started are gone).
#[derive(Debug)]
pub(crate) struct CommandCgroups {
    dirs: Vec<PathBuf>,
    /// Each of `dirs`, open (`O_PATH`): its counters are read by their names in it, at every
    /// command's end, without a walk of the whole path.
    dir_fds: Vec<OwnedFd>,
    /// `tasks` (v1) or `cgroup.procs` (v2) of each, for the keeper.
    procs: Vec<File>,
    /// The memory and pids cgroups, and whether each is v2.
    memory: Option<(PathBuf, bool)>,
    pids: Option<(PathBuf, bool)>,
    /// The memory limit set on it, in bytes.
    memory_limit: Option<u64>,
    /// The process limit set on it.
    processes: Option<u32>,
    /// The session's cgroup it is made in, kept until it is removed (a parent goes last).
    parent: Option<std::sync::Arc<ParentCgroups>>,
}

/// Whose memory limit killed a process of a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryKill {
    /// The command's own limit, in bytes.
    Command(u64),
    /// Its session's, in bytes: the session's commands together.
    Session(u64),
    /// The host's, in bytes: every session's commands together.
    Host(u64),
    /// Some limit, or the machine running out of memory.
    Other,
}

impl CommandCgroups {
    /// Cgroups limiting a command to `processes` and `memory_bytes`, for the limits a
    /// hierarchy exists for, below `parent` (its session's) where there is one; `None` when
    /// neither limit applies.
    pub(crate) fn create(
        parent: Option<std::sync::Arc<ParentCgroups>>,
        processes: Option<u32>,
        memory_bytes: Option<u64>,
    ) -> io::Result<Option<CommandCgroups>> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let all = hierarchies();
        let below = parent.as_ref().map(|parent| Hierarchies {
            pids: parent.pids.as_ref().map(|(dir, v2)| Hierarchy {
                dir: dir.clone(),
                v2: *v2,
            }),
            memory: parent.memory.as_ref().map(|(dir, v2)| Hierarchy {
                dir: dir.clone(),
                v2: *v2,
            }),
        });
        let hierarchies = below.as_ref().unwrap_or(all);
        let wants_pids = processes.is_some() && hierarchies.pids.is_some();
        let wants_memory = memory_bytes.is_some() && hierarchies.memory.is_some();
        if let Some(parent) = &parent
            && let Some(kept) = parent.take_kept(wants_pids, wants_memory)
        {
            return CommandCgroups::reuse(kept, parent.clone(), processes, memory_bytes).map(Some);
        }
        let name = format!(
            "toolhost-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut cgroups = CommandCgroups {
            dirs: Vec::new(),
            dir_fds: Vec::new(),
            procs: Vec::new(),
            memory: None,
            pids: None,
            memory_limit: memory_bytes,
            processes,
            parent,
        };
        // One v2 cgroup serves both controllers.
        let mut v2_dir: Option<PathBuf> = None;
        let mut dir_for = |cgroups: &mut CommandCgroups, hierarchy: &Hierarchy| {
            if hierarchy.v2
                && let Some(dir) = &v2_dir
            {
                return Ok::<_, io::Error>(dir.clone());
            }
            let dir = cgroups.make(&hierarchy.dir, &name, hierarchy.v2)?;
            if hierarchy.v2 {
                v2_dir = Some(dir.clone());
            }
            Ok(dir)
        };
        if let (Some(limit), Some(hierarchy)) = (processes, &hierarchies.pids) {
            let dir = dir_for(&mut cgroups, hierarchy)?;
            std::fs::write(dir.join("pids.max"), limit.to_string())?;
            cgroups.pids = Some((dir, hierarchy.v2));
        }
        if let (Some(limit), Some(hierarchy)) = (memory_bytes, &hierarchies.memory) {
            let dir = dir_for(&mut cgroups, hierarchy)?;
            if hierarchy.v2 {
                std::fs::write(dir.join("memory.max"), limit.to_string())?;
                // Without swap as a way around the limit, where swap accounting exists.
                let _ = std::fs::write(dir.join("memory.swap.max"), "0");
            } else {
                std::fs::write(dir.join("memory.limit_in_bytes"), limit.to_string())?;
                let _ = std::fs::write(dir.join("memory.memsw.limit_in_bytes"), limit.to_string());
            }
            cgroups.memory = Some((dir, hierarchy.v2));
        }
        Ok((!cgroups.dirs.is_empty()).then_some(cgroups))
    }

    /// A session's kept cgroups for a command limited to `processes` and `memory_bytes`: the
    /// limits are written only where they differ from the ones they hold.
    fn reuse(
        kept: Kept,
        parent: std::sync::Arc<ParentCgroups>,
        processes: Option<u32>,
        memory_bytes: Option<u64>,
    ) -> io::Result<CommandCgroups> {
        let cgroups = CommandCgroups {
            dirs: kept.dirs,
            dir_fds: kept.dir_fds,
            procs: kept.procs,
            memory: kept.memory,
            pids: kept.pids,
            memory_limit: memory_bytes,
            processes,
            parent: Some(parent),
        };
        if let (Some(limit), Some((dir, _))) = (processes, &cgroups.pids)
            && kept.processes != Some(limit)
        {
            std::fs::write(dir.join("pids.max"), limit.to_string())?;
        }
        if let (Some(limit), Some((dir, v2))) = (memory_bytes, &cgroups.memory)
            && kept.memory_limit != Some(limit)
        {
            if *v2 {
                std::fs::write(dir.join("memory.max"), limit.to_string())?;
            } else {
                // v1 keeps memory's limit at or below memory and swap's: the one that grows
                // is written first. The highest usage starts again from the current one.
                let memory = dir.join("memory.limit_in_bytes");
                let both = dir.join("memory.memsw.limit_in_bytes");
                let growing = kept.memory_limit.is_none_or(|old| limit > old);
                let order = if growing {
                    [&both, &memory]
                } else {
                    [&memory, &both]
                };
                for file in order {
                    let written = std::fs::write(file, limit.to_string());
                    if file == &memory {
                        written?;
                    }
                }
                for counter in [
                    "memory.max_usage_in_bytes",
                    "memory.memsw.max_usage_in_bytes",
                ] {
                    let _ = std::fs::write(dir.join(counter), "0");
                }
            }
        }
        Ok(cgroups)
    }

    /// Whether these cgroups can serve another command of the session once empty: no limit of
    /// theirs was reached (so the counters the next command's notes read are still zero), and
    /// little memory is still charged to them. `Err` says why not. Whether they are empty is
    /// checked when they are taken again ([`Kept::empty`]): a keeper forked by a resident
    /// keeper is counted until the resident reaps it, after its command's record is gone.
    fn clean(&self) -> Result<(), &'static str> {
        let read = |dir: &Path, name: &str| number_in(&self.dirs, &self.dir_fds, dir, name);
        let hit = |dir: &Path, name: &str, key: &str| {
            counter_in(&self.dirs, &self.dir_fds, dir, name, key)
        };
        if self.pids.is_some() && self.process_limit_hit() {
            return Err("their process limit was reached");
        }
        let Some((dir, v2)) = &self.memory else {
            return Ok(());
        };
        let (usage, limit_reached) = if *v2 {
            (
                read(dir, "memory.current"),
                hit(dir, "memory.events.local", "oom ") || hit(dir, "memory.events", "oom_kill "),
            )
        } else {
            (
                read(dir, "memory.usage_in_bytes"),
                read(dir, "memory.failcnt") != Some(0) || self.memory_limit_hit(),
            )
        };
        if limit_reached {
            return Err("their memory limit was reached");
        }
        match usage {
            Some(bytes) if bytes <= KEPT_CHARGE_BYTES => Ok(()),
            _ => Err("memory is still charged to them"),
        }
    }

    /// Make the cgroup `name` under `base`, open it (for its counters) and open the file the
    /// keeper writes itself into.
    ///
    /// On cgroup v1 that file is `tasks`, not `cgroup.procs`: a write of "0" to `tasks` moves
    /// only the writing thread, and the kernel moves one thread writing for itself without
    /// the lock that holds every fork and exit still (`cgroup_threadgroup_rwsem`). Taking that
    /// lock waits for an RCU grace period after a quiet spell, 5 to 14 ms on the 2-core
    /// machine of docs/performance.md. The keeper is one thread when it joins, so moving the
    /// thread moves the process. Cgroup v2 has no `tasks` file (`cgroup.threads` moves a
    /// thread only within a threaded subtree), so v2 keeps `cgroup.procs`.
    fn make(&mut self, base: &Path, name: &str, v2: bool) -> io::Result<PathBuf> {
        let dir = base.join(name);
        if let Err(error) = std::fs::create_dir(&dir) {
            // Left by an earlier host that had this pid and died before removing it: an empty
            // cgroup (no process left in it) can go; one in use cannot.
            if error.kind() != io::ErrorKind::AlreadyExists {
                return Err(error);
            }
            std::fs::remove_dir(&dir)?;
            std::fs::create_dir(&dir)?;
        }
        // Counted first, so that a failure below still removes it with the others.
        self.dirs.push(dir.clone());
        self.dir_fds.push(rustix::fs::open(
            &dir,
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?);
        self.procs
            .push(OpenOptions::new().write(true).open(dir.join(if v2 {
                "cgroup.procs"
            } else {
                "tasks"
            }))?);
        Ok(dir)
    }

    /// The open `tasks` (v1) or `cgroup.procs` (v2) files, for the keeper to write itself into.
    pub(crate) fn procs(&self) -> &[File] {
        &self.procs
    }

    /// Whether a fork of the command was refused by the process limit (`pids.events`).
    pub(crate) fn process_limit_hit(&self) -> bool {
        let Some((dir, _)) = &self.pids else {
            return false;
        };
        counter_in(&self.dirs, &self.dir_fds, dir, "pids.events", "max ")
    }

    /// Whose limit killed a process of the command, if the kernel's OOM killer killed one:
    /// the lowest cgroup whose own limit was reached.
    pub(crate) fn memory_kill(&self) -> Option<MemoryKill> {
        if !self.memory_limit_hit() {
            return None;
        }
        let own = self
            .memory
            .as_ref()
            .is_some_and(|(dir, v2)| own_limit_reached(dir, *v2));
        let session = self.parent.as_deref();
        let host = ParentCgroups::host(None);
        Some(match (self.memory_limit, session, host) {
            (Some(limit), _, _) if own => MemoryKill::Command(limit),
            (_, Some(session), _) if session.memory_limit_hit() => session
                .memory_limit()
                .map_or(MemoryKill::Other, MemoryKill::Session),
            (_, _, Some(host)) if host.memory_limit_hit() => host
                .memory_limit()
                .map_or(MemoryKill::Other, MemoryKill::Host),
            _ => MemoryKill::Other,
        })
    }

    /// Whether the kernel's OOM killer killed a process of the command (it counted a kill in
    /// its cgroup), whichever limit it was for.
    fn memory_limit_hit(&self) -> bool {
        let (dirs, fds) = (&self.dirs, &self.dir_fds);
        match &self.memory {
            Some((dir, true)) => counter_in(dirs, fds, dir, "memory.events", "oom_kill "),
            Some((dir, false)) => counter_in(dirs, fds, dir, "memory.oom_control", "oom_kill "),
            None => false,
        }
    }
}

/// Remove, once per process and hierarchy, the empty cgroups that hosts which are gone left
/// behind (`toolhost-PID` and `toolhost-PID-N` whose PID no longer runs; killed hosts cannot
/// clean up). A cgroup
/// that still holds a process is not removed (the kernel refuses).
fn sweep_stale(base: &Path) {
    static SWEPT: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    {
        let mut swept = SWEPT
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if swept.iter().any(|done| done == base) {
            return;
        }
        swept.push(base.to_path_buf());
    }
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        // A gone host's own cgroup (`toolhost-PID`) goes with every cgroup below it.
        let host_node = name
            .to_str()
            .and_then(|name| name.strip_prefix("toolhost-"))
            .and_then(|pid| pid.parse::<u32>().ok())
            .is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists());
        if host_node {
            remove_tree(&entry.path());
        } else if super::left_by_a_gone_host(&name) {
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

/// Whether the memory limit of the cgroup `dir` itself (not one above it) was reached: in v2,
/// an out-of-memory event counted there alone; in v1, its highest usage at its limit.
fn own_limit_reached(dir: &Path, v2: bool) -> bool {
    if v2 {
        return counter(&dir.join("memory.events.local"), "oom ");
    }
    let read = |name: &str| number(&dir.join(name));
    // Memory alone, or memory and swap together (the limit set on both).
    ["memory", "memory.memsw"].iter().any(|counter| {
        match (
            read(&format!("{counter}.max_usage_in_bytes")),
            read(&format!("{counter}.limit_in_bytes")),
        ) {
            (Some(peak), Some(limit)) => peak >= limit,
            _ => false,
        }
    })
}

/// Whether the line of `file` starting with `key` holds a count above zero.
fn counter(file: &Path, key: &str) -> bool {
    read_small(file, |text| count_above_zero(text, key)).unwrap_or(false)
}

/// The number `file` holds (`memory.current`, `pids.current`, ...).
fn number(file: &Path) -> Option<u64> {
    read_small(file, the_number).flatten()
}

/// Whether the line of a counter file's `text` starting with `key` holds a count above zero.
fn count_above_zero(text: &str, key: &str) -> bool {
    text.lines()
        .find_map(|line| line.strip_prefix(key))
        .and_then(|count| count.trim().parse::<u64>().ok())
        .is_some_and(|count| count > 0)
}

/// The number a file's `text` holds.
fn the_number(text: &str) -> Option<u64> {
    text.trim().parse::<u64>().ok()
}

/// [`counter`] of the file `name` in `dir`, one of a command's cgroups `dirs`: read by its name
/// in the directory's open descriptor (the one at the same place in `fds`).
fn counter_in(dirs: &[PathBuf], fds: &[OwnedFd], dir: &Path, name: &str, key: &str) -> bool {
    read_in(dirs, fds, dir, name, |text| count_above_zero(text, key)).unwrap_or(false)
}

/// [`number`] of the file `name` in `dir`, one of a command's cgroups `dirs`, as
/// [`counter_in`] reads it.
fn number_in(dirs: &[PathBuf], fds: &[OwnedFd], dir: &Path, name: &str) -> Option<u64> {
    read_in(dirs, fds, dir, name, the_number).flatten()
}

/// `parse` of the file `name` in `dir`: by its name in the directory's open descriptor when
/// `dir` is one of `dirs`, else by its path.
fn read_in<T>(
    dirs: &[PathBuf],
    fds: &[OwnedFd],
    dir: &Path,
    name: &str,
    parse: impl FnOnce(&str) -> T,
) -> Option<T> {
    match opened(dirs, fds, dir) {
        Some(at) => read_small_at(at, name, parse),
        None => read_small(&dir.join(name), parse),
    }
}

/// The open descriptor of `dir` among a command's cgroups `dirs` and their `fds`.
fn opened<'a>(dirs: &[PathBuf], fds: &'a [OwnedFd], dir: &Path) -> Option<BorrowedFd<'a>> {
    let place = dirs.iter().position(|made| made == dir)?;
    fds.get(place).map(AsFd::as_fd)
}

impl Drop for CommandCgroups {
    /// Keep the cgroups for the session's next command when they are clean, the session keeps
    /// fewer than its share and the host fewer than [`KEPT_TOTAL`]. Remove them otherwise.
    fn drop(&mut self) {
        let clean = match &self.parent {
            Some(parent) if parent.has_room() => self.clean(),
            Some(_) => Err("their session or the host keeps enough"),
            None => Err("they are in no session's cgroup"),
        };
        if let Err(why) = clean {
            tracing::debug!(dirs = ?self.dirs, "a command's cgroups are removed, not kept: {why}");
        }
        if let (Some(parent), Ok(())) = (&self.parent, clean) {
            parent.keep(Kept {
                dirs: std::mem::take(&mut self.dirs),
                dir_fds: std::mem::take(&mut self.dir_fds),
                procs: std::mem::take(&mut self.procs),
                memory: self.memory.take(),
                pids: self.pids.take(),
                processes: self.processes,
                memory_limit: self.memory_limit,
            });
            return;
        }
        self.procs.clear();
        self.dir_fds.clear();
        remove_command_dirs(&self.dirs);
    }
}

/// Remove a command's cgroup `dirs`, once their open files are closed (each must be empty of
/// processes).
fn remove_command_dirs(dirs: &[PathBuf]) {
    for dir in dirs {
        if let Err(error) = std::fs::remove_dir(dir) {
            tracing::debug!(dir = %dir.display(), %error, "cannot remove a command's cgroup");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_read_from_small_files() {
        let dir = tempfile::tempdir().expect("temp dir");
        let events = dir.path().join("memory.events");
        std::fs::write(&events, "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n").expect("write");
        assert!(counter(&events, "oom_kill "));
        assert!(counter(&events, "max "));
        assert!(!counter(&events, "low "));
        assert!(!counter(&events, "absent "));
        let current = dir.path().join("pids.current");
        std::fs::write(&current, "7\n").expect("write");
        assert_eq!(number(&current), Some(7));
        assert_eq!(number(&dir.path().join("missing")), None);
    }

    #[test]
    fn a_commands_counters_are_read_in_its_open_directories() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (pids, memory) = (dir.path().join("pids"), dir.path().join("memory"));
        for (made, file, text) in [
            (&pids, "pids.events", "max 2\n"),
            (&memory, "memory.usage_in_bytes", "4096\n"),
        ] {
            std::fs::create_dir(made).expect("mkdir");
            std::fs::write(made.join(file), text).expect("write");
        }
        let open = |made: &Path| {
            rustix::fs::open(
                made,
                rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY,
                rustix::fs::Mode::empty(),
            )
            .expect("open the directory")
        };
        let dirs = vec![pids.clone(), memory.clone()];
        let fds = vec![open(&pids), open(&memory)];
        // Moved away: only the open directories still lead to the files.
        let moved = dir.path().join("moved");
        std::fs::create_dir(&moved).expect("mkdir");
        std::fs::rename(&pids, moved.join("pids")).expect("rename");
        std::fs::rename(&memory, moved.join("memory")).expect("rename");
        assert!(counter_in(&dirs, &fds, &pids, "pids.events", "max "));
        assert_eq!(
            number_in(&dirs, &fds, &memory, "memory.usage_in_bytes"),
            Some(4096)
        );
        assert_eq!(number_in(&dirs, &fds, &memory, "pids.events"), None);
        // A directory that is not one of them is read by its path.
        assert_eq!(
            number_in(&dirs, &fds, &moved.join("memory"), "memory.usage_in_bytes"),
            Some(4096)
        );
        assert!(!counter_in(
            &dirs,
            &fds,
            &dir.path().join("other"),
            "pids.events",
            "max "
        ));
    }

    fn mounts(dir: &Path) -> String {
        format!(
            "30 25 0:26 / {} rw,nosuid shared:4 - cgroup2 cgroup2 rw\n",
            dir.display()
        )
    }

    #[test]
    fn a_session_keeps_an_equal_share_of_the_hosts_kept_cgroups() {
        assert_eq!(share_among(0), KEPT);
        assert_eq!(share_among(1), KEPT);
        assert_eq!(share_among(16), 16);
        assert_eq!(share_among(32), 8);
        assert_eq!(
            share_among(100),
            KEPT_LEAST,
            "256 / 100 is below the least share"
        );
    }

    /// A simulated v2 tree (plain directories: this checks the decisions and the files
    /// written, not the kernel's enforcement).
    #[test]
    fn a_delegated_v2_cgroup_gets_the_host_moved_into_a_leaf() {
        let tree = tempfile::tempdir().expect("tree");
        let own = tree.path().join("user.slice/app.scope");
        std::fs::create_dir_all(&own).expect("own");
        std::fs::write(own.join("cgroup.controllers"), "cpu memory pids\n").expect("write");
        std::fs::write(own.join("cgroup.subtree_control"), "").expect("write");
        let line = "0::/user.slice/app.scope\n";
        let mounts = mounts(tree.path());
        assert_eq!(
            unified(line, &mounts, &["pids", "memory"], false, 4242),
            Some(own.clone())
        );
        let leaf = own.join("toolhost-host-4242");
        assert_eq!(
            std::fs::read_to_string(leaf.join("cgroup.procs"))
                .ok()
                .as_deref(),
            Some("4242")
        );
        assert_eq!(
            std::fs::read_to_string(own.join("cgroup.subtree_control"))
                .ok()
                .as_deref(),
            Some("+pids +memory")
        );
        // Nothing to do where nothing is wanted, or a controller is not delegated.
        assert_eq!(unified(line, &mounts, &[], false, 1), None);
        assert_eq!(unified(line, &mounts, &["hugetlb"], false, 1), None);
        // Root leaves a cgroup that is not its namespace's root alone.
        std::fs::write(own.join("cgroup.subtree_control"), "").expect("write");
        assert_eq!(unified(line, &mounts, &["pids"], true, 7), None);
        assert!(!own.join("toolhost-host-7").exists());
        // Children of a cgroup that enables the controllers are used as they are.
        std::fs::write(own.join("cgroup.subtree_control"), "memory pids").expect("write");
        assert_eq!(
            unified(line, &mounts, &["pids"], true, 8),
            Some(own.clone())
        );
        assert!(!own.join("toolhost-host-8").exists());
    }

    #[test]
    fn cgroups_left_by_hosts_that_are_gone_are_swept() {
        let base = tempfile::tempdir().expect("base");
        let gone = base.path().join("toolhost-999999999-3");
        let ours = base
            .path()
            .join(format!("toolhost-{}-0", std::process::id()));
        let other = base.path().join("user.slice");
        for dir in [&gone, &ours, &other] {
            std::fs::create_dir(dir).expect("dir");
        }
        let gone_host = base.path().join("toolhost-999999998");
        std::fs::create_dir_all(gone_host.join("session-0/toolhost-999999998-1")).expect("dirs");
        let our_host = base.path().join(format!("toolhost-{}", std::process::id()));
        std::fs::create_dir(&our_host).expect("dir");
        sweep_stale(base.path());
        assert!(!gone.exists() && !gone_host.exists());
        assert!(ours.exists() && other.exists() && our_host.exists());
    }
}
