//! The Landlock layer: which files a confined command may read and write, and which processes
//! and abstract Unix sockets it may reach.
//!
//! A ruleset is built for each scope and profile ([`Rules`]) and handed to each command's
//! keeper as a descriptor; the keeper applies it (`landlock_restrict_self`) to the command
//! between `fork` and `exec`, so the keeper itself stays outside the domain and the command
//! cannot signal it.
//!
//! Landlock grants access to whole file hierarchies and cannot take a subtree back, so a hidden
//! path is carved out by granting its siblings instead: every ancestor of a hidden path may only
//! be *listed*, and every entry beside the path gets the grant ([`Plan`]). Names inside a hidden
//! directory stay listable; their contents do not.
//!
//! Rules name the entries that exist when they are made. So the plan is made again when a
//! command starts and a carved directory changed since it was made (its device, inode,
//! modification or change time differ, or it was stamped too soon after a change to trust
//! its times): entries created or replaced beside a hidden path are granted to the commands
//! that start afterwards. A command keeps the rules it started with.
//!
//! A carved directory inside a writable root is list-only too, unless every hidden path in it
//! is an entry of its own that the session's mount namespace covers with a mount: a mount
//! point cannot be removed, renamed or linked from inside, and the cover shows nothing. Such a
//! directory also takes new entries and gives up entries (the commands of that profile may
//! create and remove entries directly in it, not read or write the new ones; the next command
//! may).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreatedAttr, Scope,
};

use super::Network;
use super::changes::{Changes, Watched};
use crate::lock;

/// The newest ABI this code knows; older kernels get what they support (see `probe`).
const ABI_WANTED: ABI = ABI::V10;

/// Device files every command may read, write and use `ioctl` on.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
];

/// Pathname Unix sockets a command with network access may connect to (name resolution).
const RESOLVER_SOCKETS: &[&str] = &["/run/systemd/resolve", "/run/nscd", "/var/run/nscd"];

/// How long after a directory changed its times are not trusted to show the next change: a
/// file system with coarse timestamps gives two changes within one tick the same time (git
/// guards its index the same way, "racy git").
const RACY: Duration = Duration::from_secs(1);

/// What to grant, path by path.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Plan {
    /// Read, list and execute beneath.
    pub(super) read: BTreeSet<PathBuf>,
    /// Read and write beneath.
    pub(super) write: BTreeSet<PathBuf>,
    /// List only (ancestors of hidden paths).
    pub(super) list: BTreeSet<PathBuf>,
    /// Of `list`, the directories inside a writable root whose hidden entries the session's
    /// mount namespace covers: entries may also be created and removed directly in them.
    pub(super) create: BTreeSet<PathBuf>,
    /// The directories whose change calls for a new plan: every listed one, and the nearest
    /// existing ancestor of a writable root that is missing.
    pub(super) watch: BTreeSet<PathBuf>,
}

/// What making a plan needs besides its roots, kept from one plan of a profile to the next.
#[derive(Debug, Default)]
pub(crate) struct Carving {
    /// Where the host sees the session's mount namespace.
    view: View,
    /// Device and inode of everything seen at a hidden path so far, and of entries that may
    /// be one under another name: an entry that is one of them is never granted.
    hidden: HashSet<(u64, u64)>,
    /// The directories the last plan let commands create and remove entries in, with what
    /// made that safe then.
    guarded: BTreeMap<PathBuf, Guard>,
}

impl Carving {
    /// For a profile whose commands see the mount namespace at `view` (`/proc/HOLDER/root`,
    /// as the host reaches it), or none.
    pub(crate) fn new(view: Option<PathBuf>) -> Carving {
        Carving {
            view: view.map_or(View::None, View::Mounts),
            ..Carving::default()
        }
    }
}

/// Where the host sees the session's mount namespace, to tell which hidden paths are covered.
#[derive(Debug, Default)]
enum View {
    /// No mount namespace (Landlock alone): carved directories stay list-only.
    #[default]
    None,
    /// `/proc/HOLDER/root`.
    Mounts(PathBuf),
    /// In tests: these paths count as covered.
    #[cfg(test)]
    Pretend(Vec<PathBuf>),
}

impl View {
    /// Whether `path` is covered in the namespace: the root of a mount there (another device
    /// than its directory's) of mode 000, as the namespaces' covers are.
    fn covers(&self, path: &Path) -> bool {
        let view = match self {
            View::None => return false,
            View::Mounts(view) => view,
            #[cfg(test)]
            View::Pretend(covered) => return covered.iter().any(|covered| covered == path),
        };
        let seen = if path.starts_with(view) {
            path.to_path_buf()
        } else {
            view.join(path.strip_prefix("/").unwrap_or(path))
        };
        let (Ok(cover), Some(Ok(parent))) = (
            std::fs::symlink_metadata(&seen),
            seen.parent().map(std::fs::symlink_metadata),
        ) else {
            return false;
        };
        cover.dev() != parent.dev() && cover.mode() & 0o7777 == 0
    }
}

/// Why a directory could take new entries: its hidden entries, covered, and what it held.
#[derive(Debug)]
struct Guard {
    /// Each hidden entry and its device and inode then.
    hidden: Vec<(PathBuf, (u64, u64))>,
    /// The inodes of its entries then.
    entries: HashSet<u64>,
}

impl Guard {
    /// A hidden entry is gone or was replaced (from outside: inside, its cover holds it): its
    /// cover went with it, and meanwhile a command could have renamed or linked the new one
    /// to an ordinary name.
    fn broken(&self) -> bool {
        self.hidden
            .iter()
            .any(|(path, was)| identity(path) != Some(*was))
    }
}

/// Device and inode of `path` itself.
fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|meta| (meta.dev(), meta.ino()))
}

impl Plan {
    /// Read everything under `/` except `hidden`; write the `writable` roots except `hidden`.
    /// Paths are taken as given (the caller canonicalizes them); missing writable roots are
    /// skipped (their nearest existing ancestor is watched). `carving` carries what earlier
    /// plans of the profile saw.
    pub(super) fn new(writable: &[PathBuf], hidden: &[PathBuf], carving: &mut Carving) -> Plan {
        Plan::beneath(Path::new("/"), writable, hidden, carving)
    }

    /// [`Plan::new`] with `top` read instead of `/`.
    fn beneath(
        top: &Path,
        writable: &[PathBuf],
        hidden: &[PathBuf],
        carving: &mut Carving,
    ) -> Plan {
        for path in hidden {
            if let Some(seen) = identity(path) {
                carving.hidden.insert(seen);
            }
        }
        // Looked up once per entry the walk meets: a set, not a scan of the list.
        let exact: HashSet<&Path> = hidden.iter().map(PathBuf::as_path).collect();
        // Every directory that holds a hidden path, the hidden paths themselves included.
        let holding: HashSet<&Path> = hidden.iter().flat_map(|path| path.ancestors()).collect();
        // A hidden path inside another one is covered with it.
        let outermost: Vec<PathBuf> = hidden
            .iter()
            .filter(|path| !path.ancestors().skip(1).any(|outer| exact.contains(outer)))
            .cloned()
            .collect();
        let mut walk = Walk {
            hidden: exact,
            holding,
            outermost: &outermost,
            before: std::mem::take(&mut carving.guarded),
            carving,
            plan: Plan::default(),
        };
        let mut read = Vec::new();
        walk.cover(top, false, &mut read);
        for root in writable {
            if !root.exists() {
                if let Some(existing) = root.ancestors().skip(1).find(|dir| dir.exists()) {
                    walk.plan.watch.insert(existing.to_path_buf());
                }
                continue;
            }
            let mut write = Vec::new();
            walk.cover(root, true, &mut write);
            walk.plan.write.extend(write);
        }
        let mut plan = walk.plan;
        plan.read.extend(read);
        plan
    }
}

/// One making of a plan.
struct Walk<'a> {
    /// The hidden paths.
    hidden: HashSet<&'a Path>,
    /// The directories that hold a hidden path, and the hidden paths.
    holding: HashSet<&'a Path>,
    /// The hidden paths that are not inside another one.
    outermost: &'a [PathBuf],
    /// The guards of the plan before.
    before: BTreeMap<PathBuf, Guard>,
    carving: &'a mut Carving,
    plan: Plan,
}

impl Walk<'_> {
    /// Grant `dir` whole when no hidden path is in it; otherwise list it and cover each entry.
    /// Symbolic links are skipped: what they point to is covered where it really is. In a
    /// writable root (`write`), a carved directory may take new entries (see [`Walk::guard`]).
    fn cover(&mut self, dir: &Path, write: bool, granted: &mut Vec<PathBuf>) {
        if self.hidden.contains(dir) {
            return;
        }
        let meta = std::fs::symlink_metadata(dir);
        let is_dir = meta.as_ref().is_ok_and(|meta| meta.is_dir());
        if !is_dir || !self.holding.contains(dir) {
            granted.push(dir.to_path_buf());
            return;
        }
        let device = meta.map(|meta| meta.dev()).unwrap_or_default();
        self.plan.list.insert(dir.to_path_buf());
        self.plan.watch.insert(dir.to_path_buf());
        let Ok(read) = std::fs::read_dir(dir) else {
            return;
        };
        let entries: Vec<(PathBuf, u64, bool)> = read
            .flatten()
            .filter_map(|entry| {
                let kind = entry.file_type().ok()?;
                Some((entry.path(), entry.ino(), kind.is_symlink()))
            })
            .collect();
        // It took new entries, and a hidden entry went or was replaced since: an entry new
        // since then may be that hidden one renamed or linked, so no new one is granted.
        if let Some(guard) = self.before.get(dir)
            && guard.broken()
        {
            for (_, inode, _) in &entries {
                if !guard.entries.contains(inode) {
                    self.carving.hidden.insert((device, *inode));
                }
            }
        }
        if write && let Some(guard) = self.guard(dir, &entries) {
            self.plan.create.insert(dir.to_path_buf());
            self.carving.guarded.insert(dir.to_path_buf(), guard);
        }
        for (path, inode, is_symlink) in entries {
            if is_symlink || self.carving.hidden.contains(&(device, inode)) {
                continue;
            }
            self.cover(&path, write, granted);
        }
    }

    /// Whether commands may create and remove entries directly in the carved `dir`: only in
    /// a mount namespace, where every hidden path in `dir` is an entry of `dir` (so that no
    /// entry it could rename holds one) that exists and is covered by a mount (which cannot
    /// be removed, renamed or linked, and shows nothing). A hidden path that is missing could
    /// be made by a command, e.g. as a link into the workspace.
    fn guard(&self, dir: &Path, entries: &[(PathBuf, u64, bool)]) -> Option<Guard> {
        let mut hidden = Vec::new();
        for path in self.outermost.iter().filter(|path| path.starts_with(dir)) {
            if path.parent() != Some(dir) || !self.carving.view.covers(path) {
                return None;
            }
            hidden.push((path.clone(), identity(path)?));
        }
        Some(Guard {
            hidden,
            entries: entries.iter().map(|(_, inode, _)| *inode).collect(),
        })
    }
}

/// What a directory's change shows in: its device and inode (replaced), and its modification
/// and change times in nanoseconds (an entry added, removed or renamed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    device: u64,
    inode: u64,
    modified: i128,
    changed: i128,
}

impl Stamp {
    /// `path`'s stamp; `None`: missing.
    fn of(path: &Path) -> Option<Stamp> {
        let meta = std::fs::symlink_metadata(path).ok()?;
        let nanos =
            |seconds: i64, nanos: i64| i128::from(seconds) * 1_000_000_000 + i128::from(nanos);
        Some(Stamp {
            device: meta.dev(),
            inode: meta.ino(),
            modified: nanos(meta.mtime(), meta.mtime_nsec()),
            changed: nanos(meta.ctime(), meta.ctime_nsec()),
        })
    }

    /// Whether a change of the directory could have been given the same times as this stamp
    /// shows: they are within `margin` ([`RACY`]) of `from`..`to` (wall clock, in
    /// nanoseconds), when the plan was being made.
    fn racy(&self, from: i128, to: i128, margin: Duration) -> bool {
        let margin = margin.as_nanos() as i128;
        [self.modified, self.changed]
            .iter()
            .any(|time| *time > from - margin && *time < to + margin)
    }
}

/// The wall clock in nanoseconds since the epoch.
fn wall_nanos() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos() as i128)
}

/// Makes a profile's plan: its roots, with what is added to the plan (see `layers.rs`).
pub(crate) type MakePlan = Box<dyn Fn(&mut Carving) -> Plan + Send + Sync>;

/// A profile's ruleset, made again at a command's start when a directory it carved changed
/// since (see the module's documentation).
pub(crate) struct Rules {
    how: How,
    /// The ruleset now (locked only to read or replace it).
    current: Mutex<Arc<Made>>,
    /// The turn to make it again, with what the plans are made from: starts that find the
    /// ruleset stale meanwhile wait here, and use what it made.
    making: Mutex<Carving>,
}

/// How a profile's ruleset is made.
struct How {
    make: MakePlan,
    network: Network,
    private_network: bool,
    /// How long after a change a directory's times are not trusted ([`RACY`]).
    racy: Duration,
    /// Whether the directories' changes are watched with inotify where it can be used;
    /// otherwise each start compares their stamps.
    watch: bool,
}

impl std::fmt::Debug for Rules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rules")
            .field("network", &self.how.network)
            .field("private_network", &self.how.private_network)
            .field("current", &self.current)
            .finish_non_exhaustive()
    }
}

/// One making of a ruleset.
#[derive(Debug)]
struct Made {
    ruleset: OwnedFd,
    /// Each watched directory and its stamp then.
    stamps: Vec<(PathBuf, Option<Stamp>)>,
    /// A stamp was taken too soon after its directory changed to trust it.
    racy: bool,
    /// When the making began.
    began: Instant,
    /// The watched directories' inotify watches, taken before their stamps (`None`: checked
    /// by their stamps).
    watched: Option<Watched<'static>>,
}

impl Made {
    /// Made from `carving` as `how` says, stamped.
    fn new(how: &How, carving: &mut Carving) -> Result<Made, LandlockError> {
        let began = Instant::now();
        let from = wall_nanos();
        let plan = (how.make)(carving);
        let ruleset = build(&plan, how.network, how.private_network)?;
        let dirs: Vec<PathBuf> = plan.watch.into_iter().collect();
        // Watched before they are stamped: a change after this is an event, one before it
        // shows in the stamps' times.
        let watched = Changes::host()
            .filter(|_| how.watch)
            .and_then(|changes| changes.watch(&dirs));
        let stamps: Vec<(PathBuf, Option<Stamp>)> = dirs
            .into_iter()
            .map(|dir| {
                let stamp = Stamp::of(&dir);
                (dir, stamp)
            })
            .collect();
        let to = wall_nanos();
        let racy = stamps
            .iter()
            .any(|(_, stamp)| stamp.is_some_and(|stamp| stamp.racy(from, to, how.racy)));
        Ok(Made {
            ruleset,
            stamps,
            racy,
            began,
            watched,
        })
    }

    /// No watched directory changed since, and every stamp is trusted.
    fn fresh(&self) -> bool {
        let changed = self.racy
            || match &self.watched {
                Some(watched) => watched.changed(),
                None => self
                    .stamps
                    .iter()
                    .any(|(dir, stamp)| Stamp::of(dir) != *stamp),
            };
        if changed {
            tracing::debug!(
                "a directory around a hidden path changed: the Landlock rules are made again"
            );
        }
        !changed
    }
}

impl Rules {
    /// The rules `make` plans (from `carving`, as [`Carving::new`] makes it), for `network`
    /// (see [`build`]); the directories' changes are watched with inotify when `watch` is set.
    pub(crate) fn new(
        make: MakePlan,
        carving: Carving,
        network: Network,
        private_network: bool,
        watch: bool,
    ) -> Result<Rules, LandlockError> {
        Rules::with_margin(make, carving, network, private_network, RACY, watch)
    }

    /// [`Rules::new`], with directories' times trusted `racy` after a change, and their
    /// changes watched with inotify when `watch` is set.
    fn with_margin(
        make: MakePlan,
        mut carving: Carving,
        network: Network,
        private_network: bool,
        racy: Duration,
        watch: bool,
    ) -> Result<Rules, LandlockError> {
        let how = How {
            make,
            network,
            private_network,
            racy,
            watch,
        };
        let made = Made::new(&how, &mut carving)?;
        Ok(Rules {
            how,
            current: Mutex::new(Arc::new(made)),
            making: Mutex::new(carving),
        })
    }

    /// The ruleset for a command starting now (a new descriptor of it): made again first when
    /// a directory it carved changed. Blocks while it is made (a few milliseconds); starts
    /// that find it stale meanwhile use that one. If making it fails, the ruleset before is
    /// used: it grants nothing it did not grant before.
    pub(crate) fn current(&self) -> io::Result<OwnedFd> {
        let arrived = Instant::now();
        let made = lock(&self.current).clone();
        if made.fresh() {
            return made.ruleset.try_clone();
        }
        let mut carving = lock(&self.making);
        let made = lock(&self.current).clone();
        // Made since this start arrived: it shows the directories as they were then, or later.
        if made.began >= arrived || made.fresh() {
            return made.ruleset.try_clone();
        }
        match Made::new(&self.how, &mut carving) {
            Ok(new) => {
                let new = Arc::new(new);
                *lock(&self.current) = new.clone();
                new.ruleset.try_clone()
            }
            Err(error) => {
                tracing::warn!(
                    %error,
                    "cannot make a session's Landlock rules again; its commands keep the rules before"
                );
                made.ruleset.try_clone()
            }
        }
    }
}

/// Why a ruleset could not be built.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LandlockError {
    /// The kernel refused a step.
    #[error("Landlock: {0}")]
    Ruleset(#[from] landlock::RulesetError),
    /// The kernel has no Landlock (not built in, or not in the `lsm=` boot list).
    #[error(
        "Landlock is not available in this kernel (it needs Linux 5.13+ with `landlock` in the \
         `lsm=` boot parameter)"
    )]
    Unsupported,
}

/// A ruleset for `plan`, with signals and abstract Unix sockets scoped to the command's own
/// processes; when `network` is `none`, no TCP port (unless the command has a network
/// namespace of its own, `private_network`, where only its loopback exists) and no resolver
/// socket. Returns the ruleset's descriptor, for the keeper.
pub(super) fn build(
    plan: &Plan,
    network: Network,
    private_network: bool,
) -> Result<OwnedFd, LandlockError> {
    let all = AccessFs::from_all(ABI_WANTED);
    let read = AccessFs::from_read(ABI_WANTED);
    let write = all & !(AccessFs::MakeChar | AccessFs::MakeBlock);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)?
        .scope(Scope::from_all(ABI_WANTED))?;
    if network != Network::Full && !private_network {
        ruleset = ruleset.handle_access(AccessNet::from_all(ABI_WANTED))?;
    }
    let mut created = ruleset.create()?;
    let rule = |path: &Path, access: BitFlags<AccessFs>| {
        PathFd::new(path)
            .ok()
            .map(|fd| PathBeneath::new(fd, access))
    };
    // Creating and removing entries directly in such a directory (its hidden entries are
    // mount points, which cannot be removed, renamed or linked), not reading or writing them,
    // nor moving one to another directory (`Refer`): were a cover gone (its file replaced
    // from outside), the hidden entry could only be renamed beside it, where the next plan
    // knows it (see `Guard`), not into a new directory that the next plan grants whole.
    let create = AccessFs::MakeReg
        | AccessFs::MakeDir
        | AccessFs::MakeSym
        | AccessFs::MakeFifo
        | AccessFs::MakeSock
        | AccessFs::RemoveFile
        | AccessFs::RemoveDir;
    for path in &plan.list {
        let access = if plan.create.contains(path) {
            create | AccessFs::ReadDir
        } else {
            AccessFs::ReadDir.into()
        };
        if let Some(rule) = rule(path, access) {
            created = created.add_rule(rule)?;
        }
    }
    for path in &plan.read {
        if let Some(rule) = rule(path, read) {
            created = created.add_rule(rule)?;
        }
    }
    for path in &plan.write {
        if let Some(rule) = rule(path, read | write) {
            created = created.add_rule(rule)?;
        }
    }
    let device = read | AccessFs::WriteFile | AccessFs::IoctlDev;
    for path in DEVICES {
        if let Some(rule) = rule(Path::new(path), device) {
            created = created.add_rule(rule)?;
        }
    }
    if network == Network::Full {
        for path in RESOLVER_SOCKETS {
            if let Some(rule) = rule(Path::new(path), read | AccessFs::ResolveUnix) {
                created = created.add_rule(rule)?;
            }
        }
    }
    Option::<OwnedFd>::from(created).ok_or(LandlockError::Unsupported)
}

#[cfg(test)]
#[path = "landlock_tests.rs"]
mod tests;
