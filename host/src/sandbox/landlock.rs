//! The Landlock layer: which files a confined command may read and write, and which processes
//! and abstract Unix sockets it may reach.
//!
//! A ruleset is built once per scope and profile ([`build`]) and handed to each command's
//! keeper as a descriptor; the keeper applies it (`landlock_restrict_self`) to the command
//! between `fork` and `exec`, so the keeper itself stays outside the domain and the command
//! cannot signal it.
//!
//! Landlock grants access to whole file hierarchies and cannot take a subtree back, so a hidden
//! path is carved out by granting its siblings instead: every ancestor of a hidden path may only
//! be *listed*, and every entry beside the path gets the grant ([`Plan`]). Names inside a hidden
//! directory stay listable; their contents do not. Entries created in such an ancestor after the
//! ruleset was built get nothing.

use std::collections::BTreeSet;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreatedAttr, Scope,
};

use super::Network;

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

/// What to grant, path by path.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Plan {
    /// Read, list and execute beneath.
    pub(super) read: BTreeSet<PathBuf>,
    /// Read and write beneath.
    pub(super) write: BTreeSet<PathBuf>,
    /// List only (ancestors of hidden paths).
    pub(super) list: BTreeSet<PathBuf>,
}

impl Plan {
    /// Read everything under `/` except `hidden`; write the `writable` roots except `hidden`.
    /// Paths are taken as given (the caller canonicalizes them); missing writable roots are
    /// skipped.
    pub(super) fn new(writable: &[PathBuf], hidden: &[PathBuf]) -> Plan {
        let mut plan = Plan::default();
        let mut read = Vec::new();
        cover(Path::new("/"), hidden, &mut read, &mut plan.list);
        plan.read.extend(read);
        for root in writable {
            if !root.exists() {
                continue;
            }
            let mut write = Vec::new();
            cover(root, hidden, &mut write, &mut plan.list);
            plan.write.extend(write);
        }
        plan
    }
}

/// Grant `dir` whole when no hidden path is in it; otherwise list it and cover each entry.
/// Symbolic links are skipped: what they point to is covered where it really is.
fn cover(
    dir: &Path,
    hidden: &[PathBuf],
    granted: &mut Vec<PathBuf>,
    listed: &mut BTreeSet<PathBuf>,
) {
    if hidden.iter().any(|path| path == dir) {
        return;
    }
    let is_dir = std::fs::symlink_metadata(dir).is_ok_and(|meta| meta.is_dir());
    if !is_dir || !hidden.iter().any(|path| path.starts_with(dir)) {
        granted.push(dir.to_path_buf());
        return;
    }
    listed.insert(dir.to_path_buf());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_symlink() {
            continue;
        }
        cover(&entry.path(), hidden, granted, listed);
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
    if network == Network::None && !private_network {
        ruleset = ruleset.handle_access(AccessNet::from_all(ABI_WANTED))?;
    }
    let mut created = ruleset.create()?;
    let rule = |path: &Path, access: BitFlags<AccessFs>| {
        PathFd::new(path)
            .ok()
            .map(|fd| PathBeneath::new(fd, access))
    };
    for path in &plan.list {
        if let Some(rule) = rule(path, AccessFs::ReadDir.into()) {
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
mod tests {
    use super::*;

    #[test]
    fn hidden_paths_are_carved_out_by_granting_their_siblings() {
        let root = tempfile::tempdir().unwrap();
        let base = root.path().canonicalize().unwrap();
        for dir in ["home/me/.ssh", "home/me/src", "home/other", "etc"] {
            std::fs::create_dir_all(base.join(dir)).unwrap();
        }
        std::fs::write(base.join("home/me/.netrc"), "secret").unwrap();
        std::os::unix::fs::symlink(base.join("home/me"), base.join("link")).unwrap();
        let hidden = [base.join("home/me/.ssh"), base.join("home/me/.netrc")];
        let mut granted = Vec::new();
        let mut listed = BTreeSet::new();
        cover(&base, &hidden, &mut granted, &mut listed);
        granted.sort();
        assert_eq!(
            granted,
            vec![
                base.join("etc"),
                base.join("home/me/src"),
                base.join("home/other")
            ],
            "the link is skipped, the hidden entries get nothing"
        );
        assert_eq!(
            listed.into_iter().collect::<Vec<_>>(),
            vec![base.clone(), base.join("home"), base.join("home/me")]
        );
    }

    #[test]
    fn a_writable_root_inside_a_hidden_path_is_still_granted() {
        let root = tempfile::tempdir().unwrap();
        let base = root.path().canonicalize().unwrap();
        std::fs::create_dir_all(base.join("cache/toolhost/work")).unwrap();
        let hidden = [base.join("cache/toolhost")];
        let plan = Plan::new(
            &[base.join("cache/toolhost/work"), base.join("missing")],
            &hidden,
        );
        assert_eq!(
            plan.write.into_iter().collect::<Vec<_>>(),
            vec![base.join("cache/toolhost/work")]
        );
    }
}
