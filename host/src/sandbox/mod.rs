//! Confinement of commands: what a command may touch, and the kernel layers that enforce it.
//!
//! [`profile`] holds the settings (the operator's [`SandboxSettings`], a plugin's
//! [`SandboxGrant`], a policy's [`ConfinementRequest`]) and [`resolve`], which turns them into
//! the [`Profile`] a command runs under. The layers, each prepared once per scope and profile
//! and applied by the command's keeper between `fork` and `exec`:
//!
//! - `namespaces`: a user and a mount namespace (hidden paths covered) and, with network
//!   `none`, a network namespace with only its own loopback; skipped (Landlock alone) where
//!   user namespaces are refused, or made without privileges in them (Ubuntu 24.04);
//! - `landlock`: the filesystem view (read everything but the hidden paths, write only the
//!   writable roots) and the scoping of signals and abstract Unix sockets to the command's own
//!   processes;
//! - `seccomp`: system calls that could undo the confinement or reach other processes
//!   (mount, namespaces, ptrace, bpf, io_uring, ...), Unix datagram sockets, and, with network
//!   `none`, every socket that is not a Unix socket;
//! - `unix`: the keeper supervises `connect`, so that the host's Unix sockets stay out of
//!   reach (or, where it cannot, no Unix socket is made at all);
//! - limits: per command, `cgroup` (process count and memory of everything the command
//!   started) where the host may create cgroups, else `RLIMIT_DATA` (memory per process);
//!   `RLIMIT_CPU` (CPU seconds per process).
//!
//! [`secrets`] says what is hidden by default (the user's credential stores) and which host
//! variables are withheld. [`probe`] reports what this machine supports; a profile whose layer
//! is missing is refused.

pub(crate) mod cgroup;
mod changes;
pub(crate) mod diagnose;
pub(crate) mod git_guard;
mod landlock;
mod layers;
pub(crate) mod namespaces;
pub mod network;
mod prepare;
pub mod probe;
mod profile;
mod seccomp;
pub mod secrets;
mod small_file;
pub mod unix;

pub use cgroup::MemoryKill;
pub(crate) use cgroup::{CommandCgroups, ParentCgroups};
pub use diagnose::{Refusal, Refused, RefusedHost};
pub(crate) use layers::TIMINGS;
pub(crate) use prepare::{Context, Prepared, PrivateSpace, ScopeSandbox};
pub use secrets::{Finding, HiddenPaths, Homes, NotHidden, ScanSettings, Scanned};

pub use profile::{
    ConfinementRequest, DEFAULT_SHM_BYTES, DEFAULT_TMP_BYTES, Limits, LooserThanGrant, Network,
    Profile, SandboxGrant, SandboxMode, SandboxSettings, bound, parse_size, resolve,
};

/// `path` with `.` and `..` taken out lexically (no link is followed).
pub(crate) fn normalize(path: &std::path::Path) -> std::path::PathBuf {
    path.components()
        .fold(std::path::PathBuf::new(), |mut out, part| {
            match part {
                std::path::Component::ParentDir => {
                    out.pop();
                }
                std::path::Component::CurDir => {}
                other => out.push(other),
            }
            out
        })
}

/// The workspace of a host whose commands run in `dir` by default: `dir`, unless it is `/` (a
/// server started in `/`, as desktop clients start them, without `--workdir`): all of `/`
/// writable would confine nothing, so there is then no workspace.
pub fn workspace_of(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    (canonical(dir) != std::path::Path::new("/")).then(|| dir.to_path_buf())
}

/// `path` with its links resolved, or as it is when it does not exist.
pub(crate) fn canonical(path: &std::path::Path) -> std::path::PathBuf {
    // One `stat` first: most of the paths asked about (the credential stores) do not exist,
    // and resolving one that does not fails only after a look-up per component.
    if std::fs::metadata(path).is_err() {
        return path.to_path_buf();
    }
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf())
}

/// Whether `name` is one of the `toolhost-PID-...` names a host gives what it makes per process
/// (temporary directories, cgroups) and that host (PID) no longer runs, so that what it left
/// may be removed.
fn left_by_a_gone_host(name: &std::ffi::OsStr) -> bool {
    name.to_str()
        .and_then(|name| name.strip_prefix("toolhost-"))
        .and_then(|rest| match rest.strip_prefix("host-") {
            // The v2 leaf a host moved itself into (`cgroup.rs`).
            Some(pid) => pid.parse::<u32>().ok(),
            None => rest.split_once('-')?.0.parse::<u32>().ok(),
        })
        .is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
}
