//! Limits on a command and everything it started, with cgroups: the number of processes
//! (`pids`) and memory (`memory`), one cgroup per command and controller.
//!
//! Used where the host may create cgroups: the cgroup v1 hierarchies of the controllers, below
//! the cgroup the host runs in (as root, or where they are delegated). The host creates the
//! command's cgroups, sets the limits and hands the keeper an open `cgroup.procs` of each; the
//! keeper moves itself in before it starts the command, so everything the command starts is
//! counted. A cgroup is removed once its command's record is dropped.
//!
//! Cgroup v2 is not used yet: a process may only join a leaf, so the host would first have to
//! move itself into a cgroup of its own below a delegated one.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where the host may create cgroups for each controller.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hierarchies {
    /// The `pids` controller (process count), cgroup v1.
    pub pids: Option<PathBuf>,
    /// The `memory` controller, cgroup v1.
    pub memory: Option<PathBuf>,
}

/// The host's own cgroups of the v1 `pids` and `memory` hierarchies, when it may create
/// cgroups below them (checked once).
pub fn hierarchies() -> &'static Hierarchies {
    static FOUND: OnceLock<Hierarchies> = OnceLock::new();
    FOUND.get_or_init(|| {
        if std::env::var("TOOLHOST_SANDBOX_DISABLE")
            .unwrap_or_default()
            .split(',')
            .any(|layer| layer.trim() == "cgroups")
        {
            return Hierarchies::default();
        }
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        Hierarchies {
            pids: usable(&own, &mounts, "pids"),
            memory: usable(&own, &mounts, "memory"),
        }
    })
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
    let probe = base.join(format!("toolhost-probe-{}", std::process::id()));
    std::fs::create_dir(&probe).ok()?;
    let _ = std::fs::remove_dir(&probe);
    Some(base)
}

/// One command's cgroups; removed on drop (they are empty by then: the record is dropped only
/// after the command and everything it started are gone).
#[derive(Debug)]
pub(crate) struct CommandCgroups {
    dirs: Vec<PathBuf>,
    /// `cgroup.procs` of each, for the keeper.
    procs: Vec<File>,
    memory: Option<PathBuf>,
    pids: Option<PathBuf>,
}

impl CommandCgroups {
    /// Cgroups limiting a command to `processes` and `memory_bytes`, for the limits a
    /// hierarchy exists for; `None` when neither applies.
    pub(crate) fn create(
        processes: Option<u32>,
        memory_bytes: Option<u64>,
    ) -> io::Result<Option<CommandCgroups>> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let hierarchies = hierarchies();
        let name = format!(
            "toolhost-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut cgroups = CommandCgroups {
            dirs: Vec::new(),
            procs: Vec::new(),
            memory: None,
            pids: None,
        };
        if let (Some(limit), Some(base)) = (processes, &hierarchies.pids) {
            let dir = cgroups.make(base, &name)?;
            std::fs::write(dir.join("pids.max"), limit.to_string())?;
            cgroups.pids = Some(dir);
        }
        if let (Some(limit), Some(base)) = (memory_bytes, &hierarchies.memory) {
            let dir = cgroups.make(base, &name)?;
            std::fs::write(dir.join("memory.limit_in_bytes"), limit.to_string())?;
            // Without swap as a way around the limit, where swap accounting exists.
            let _ = std::fs::write(dir.join("memory.memsw.limit_in_bytes"), limit.to_string());
            cgroups.memory = Some(dir);
        }
        Ok((!cgroups.dirs.is_empty()).then_some(cgroups))
    }

    fn make(&mut self, base: &Path, name: &str) -> io::Result<PathBuf> {
        sweep_stale(base);
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
        self.dirs.push(dir.clone());
        self.procs.push(
            OpenOptions::new()
                .write(true)
                .open(dir.join("cgroup.procs"))?,
        );
        Ok(dir)
    }

    /// The open `cgroup.procs` files, for the keeper to write itself into.
    pub(crate) fn procs(&self) -> &[File] {
        &self.procs
    }

    /// Whether a fork of the command was refused by the process limit (`pids.events`).
    pub(crate) fn process_limit_hit(&self) -> bool {
        let Some(dir) = &self.pids else {
            return false;
        };
        counter(&dir.join("pids.events"), "max ")
    }

    /// Whether the memory limit killed a process of the command (the kernel's OOM killer
    /// counted a kill in its cgroup).
    pub(crate) fn memory_limit_hit(&self) -> bool {
        let Some(dir) = &self.memory else {
            return false;
        };
        counter(&dir.join("memory.oom_control"), "oom_kill ")
    }
}

/// Remove, once per process and hierarchy, the empty cgroups that hosts which are gone left
/// behind (`toolhost-PID-N` whose PID no longer runs; killed hosts cannot clean up). A cgroup
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
        if super::left_by_a_gone_host(&entry.file_name()) {
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

/// Whether the line of `file` starting with `key` holds a count above zero.
fn counter(file: &Path, key: &str) -> bool {
    std::fs::read_to_string(file)
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|line| line.strip_prefix(key))
                .and_then(|count| count.trim().parse::<u64>().ok())
        })
        .is_some_and(|count| count > 0)
}

impl Drop for CommandCgroups {
    fn drop(&mut self) {
        self.procs.clear();
        for dir in &self.dirs {
            if let Err(error) = std::fs::remove_dir(dir) {
                tracing::debug!(dir = %dir.display(), %error, "cannot remove a command's cgroup");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        sweep_stale(base.path());
        assert!(!gone.exists());
        assert!(ours.exists() && other.exists());
    }
}
