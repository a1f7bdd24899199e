//! What this machine can enforce: the kernel's Landlock ABI and seccomp, and what each profile
//! gets here (`toolhost sandbox` prints [`report`]).
//!
//! The environment variable `TOOLHOST_SANDBOX_DISABLE` (a comma-separated list of `landlock`,
//! `seccomp`, `namespaces`, `cgroups`) makes the host behave as if the kernel lacked those
//! layers, so that the refusal and fallback paths can be tested and seen on any machine. A
//! release build honours it too, on purpose: it only ever takes layers away, an operator whose
//! kernel misbehaves with one may need it, and the host says so once (a warning) and in
//! `toolhost sandbox`.

use std::fmt::Write;

use nix::libc;

use super::namespaces::{self, NamespaceError};
use super::{Profile, SandboxMode};

/// What the kernel offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Support {
    /// The Landlock ABI version; 0 when Landlock is missing.
    pub landlock_abi: i32,
    /// Seccomp filters are available.
    pub seccomp: bool,
}

/// Whether `TOOLHOST_SANDBOX_DISABLE` names `layer`.
pub(crate) fn disabled(layer: &str) -> bool {
    let names = std::env::var("TOOLHOST_SANDBOX_DISABLE").unwrap_or_default();
    if !names.trim().is_empty() {
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            tracing::warn!(
                layers = %names,
                "TOOLHOST_SANDBOX_DISABLE is set: confined commands run as if the kernel lacked \
                 these layers"
            );
        });
    }
    names.split(',').any(|name| name.trim() == layer)
}

/// Probe the kernel (cheap: two system calls).
pub fn support() -> Support {
    Support {
        landlock_abi: if disabled("landlock") {
            0
        } else {
            landlock_abi()
        },
        seccomp: !disabled("seccomp") && seccomp_available(),
    }
}

/// `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`.
fn landlock_abi() -> i32 {
    // SAFETY: with a null attribute pointer, size 0 and the VERSION flag the call only returns
    // the ABI version (or -1); it reads and writes no memory.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32,
        )
    };
    i32::try_from(version).unwrap_or(0).max(0)
}

/// `prctl(PR_GET_SECCOMP)` fails with `EINVAL` on a kernel without seccomp.
fn seccomp_available() -> bool {
    // SAFETY: integer arguments; only queries this thread's seccomp mode.
    unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) >= 0 }
}

impl Support {
    /// What `profile` needs that this kernel lacks, in words; `None` when it can be enforced.
    pub fn missing_for(&self, profile: &Profile) -> Option<String> {
        if profile.mode == SandboxMode::Off {
            return None;
        }
        let mut missing = Vec::new();
        if self.landlock_abi < 1 {
            missing.push(
                "Landlock (Linux 5.13 or later, with `landlock` in the kernel's `lsm=` boot \
                 parameter or CONFIG_LSM)",
            );
        }
        if !self.seccomp {
            missing.push("seccomp filters (CONFIG_SECCOMP_FILTER)");
        }
        (!missing.is_empty()).then(|| format!("missing {}", missing.join(" and ")))
    }

    /// Protections that are in place only from some Landlock ABI on, and whether this kernel
    /// has them.
    fn landlock_features(&self) -> [(&'static str, i32); 5] {
        [
            ("files: read, write, execute, create, remove", 1),
            ("renames and links across directories", 2),
            ("truncation", 3),
            ("TCP connect and bind (network none)", 4),
            ("signals and abstract Unix sockets of other processes", 6),
        ]
    }
}

/// Whether making the namespaces failed with `error` in a way that makes the host refuse
/// confined commands rather than fall back to Landlock and seccomp: they were tried
/// (`made`, [`namespaces::made`]: not disabled, the keeper ran) and failed otherwise than for
/// want of user namespaces or of privileges in them ([`NamespaceError::missing_here`]).
fn namespaces_spoiled(made: Option<bool>, error: &str) -> bool {
    made == Some(false) && !NamespaceError(error.to_owned()).missing_here()
}

/// Whether this machine lets the host make the namespaces layer of confined commands (user,
/// mount, network and PID namespaces): `Err` says why not (commands are then confined by
/// Landlock and seccomp alone); `Ok(Some(reason))`: all but the PID namespace, and why. Tries
/// it once, for real.
pub fn namespaces_available() -> Result<Option<String>, String> {
    namespaces_here().map(|here| here.pid_missing)
}

/// What the namespaces layer gives on this machine ([`namespaces_available`], with what
/// `/tmp` becomes), for `toolhost sandbox`.
pub fn namespaces_here() -> Result<NamespacesHere, String> {
    if disabled("namespaces") {
        return Err("disabled by TOOLHOST_SANDBOX_DISABLE".to_owned());
    }
    let keeper = crate::keeper_binary::executable().map_err(|e| e.to_string())?;
    let scratch = tempfile::Builder::new()
        .prefix("toolhost-probe-")
        .tempdir()
        .map_err(|e| format!("a directory for the private /tmp: {e}"))?;
    let request = namespaces::Request {
        private_network: true,
        pid: !disabled("pid"),
        private_tmp: Some(scratch.path()),
        tmp_bytes: Some(1024 * 1024),
        tmp_overlay: !disabled("overlay"),
        ..Default::default()
    };
    namespaces::make(keeper, &request)
        .map(|made| NamespacesHere {
            pid_missing: made.pid_missing.clone(),
            tmp_overlay: match &made.tmp {
                namespaces::TmpView::Overlay => Ok(()),
                namespaces::TmpView::Private(Some(reason)) => Err(reason.clone()),
                _ => Err("disabled by TOOLHOST_SANDBOX_DISABLE".to_owned()),
            },
        })
        .map_err(|e| e.0)
}

/// What making the namespaces gave on this machine (see
/// [`namespaces_here`]).
#[derive(Debug, Clone)]
pub struct NamespacesHere {
    /// Why commands share the host's PID namespace; `None`: they have their own.
    pub pid_missing: Option<String>,
    /// Whether the host's `/tmp` shows beneath a session's own writes; `Err`: why not (the
    /// session's `/tmp` then starts empty).
    pub tmp_overlay: Result<(), String>,
}

/// The text `toolhost sandbox` prints; `namespaces` is the outcome of making them here
/// ([`namespaces_available`], which runs the keeper's helper once: a user
/// namespace and the privileged operations the host needs in it, as for a command).
pub fn report(
    support: &Support,
    namespaces: &Result<NamespacesHere, String>,
    profiles: &[(&str, Profile)],
) -> String {
    let mut out = String::new();
    let yes = |ok: bool| if ok { "yes" } else { "NO" };
    let spoiled = namespaces
        .as_ref()
        .err()
        .filter(|error| namespaces_spoiled(namespaces::made(), error));
    let _ = writeln!(out, "Layers on this machine:");
    match namespaces {
        Ok(here) => {
            let _ = writeln!(
                out,
                "  namespaces: user; mount (a read-only view of /, the writable roots bound \
                 read-write, git hooks bound read-only, a private /tmp and /dev/shm of bounded \
                 size, hidden directories covered); network with only its own loopback for \
                 network none, and for an allow-list with the session's proxy on it"
            );
            match &here.tmp_overlay {
                Ok(()) => {
                    let _ = writeln!(
                        out,
                        "    /tmp: the host's, beneath the session's own writes (an overlay): \
                         yes"
                    );
                }
                Err(reason) => {
                    let _ = writeln!(
                        out,
                        "    /tmp: the host's, beneath the session's own writes (an overlay): NO \
                         ({reason}); a session's /tmp starts empty"
                    );
                }
            }
            match &here.pid_missing {
                None => {
                    let _ = writeln!(
                        out,
                        "    PID namespace with its own /proc: yes (its init ends with the session \
                         or the host, and everything in it with it)"
                    );
                }
                Some(reason) => {
                    let _ = writeln!(
                        out,
                        "    PID namespace with its own /proc: NO ({reason}); commands see the \
                         host's processes (each command's keeper still holds all it starts)"
                    );
                }
            }
        }
        Err(error) if spoiled.is_some() => {
            let _ = writeln!(
                out,
                "  namespaces: FAILING ({error}); confined commands are refused rather than run \
                 with fewer layers (TOOLHOST_SANDBOX_DISABLE=namespaces does without them)"
            );
        }
        Err(error) => {
            let _ = writeln!(
                out,
                "  namespaces: NO ({error}); Landlock and seccomp confine commands alone"
            );
            if error.starts_with(namespaces::POWERLESS) {
                let _ = writeln!(
                    out,
                    "    a security module denies privileges in unprivileged user namespaces \
                     (on Ubuntu 24.04: AppArmor, sysctl kernel.apparmor_restrict_unprivileged_userns)"
                );
            }
        }
    }
    if support.landlock_abi > 0 {
        let _ = writeln!(out, "  Landlock: ABI {}", support.landlock_abi);
        for (feature, abi) in support.landlock_features() {
            let _ = writeln!(
                out,
                "    {feature}: {} (ABI {abi})",
                yes(support.landlock_abi >= abi)
            );
        }
    } else {
        let _ = writeln!(out, "  Landlock: NO");
    }
    let _ = writeln!(
        out,
        "  seccomp: {} (mount, namespaces, ptrace, bpf, io_uring, ...; sockets other than Unix \
         with network none or an allow-list; in a network namespace of the session's own, IPv4, IPv6 and \
         netlink sockets too, which reach only its loopback)",
        yes(support.seccomp)
    );
    let cgroups = super::cgroup::hierarchies();
    let _ = writeln!(out, "  limits:");
    let _ = writeln!(out, "    CPU seconds: per process (RLIMIT_CPU)");
    match &cgroups.memory {
        Some(hierarchy) => {
            let _ = writeln!(
                out,
                "    memory: the whole command, a session's commands together, and every \
                 session's together ({})",
                hierarchy.describe("memory")
            );
        }
        None => {
            let _ = writeln!(
                out,
                "    memory: per process only (RLIMIT_DATA; no memory cgroup the host may \
                 create); NOT bounded per session or for the host"
            );
        }
    }
    match &cgroups.pids {
        Some(hierarchy) => {
            let _ = writeln!(
                out,
                "    processes: the whole command ({})",
                hierarchy.describe("pids")
            );
        }
        None if namespaces::nproc_limit_applies(namespaces.is_ok()) => {
            let _ = writeln!(
                out,
                "    processes: the session's commands of one profile together (RLIMIT_NPROC in \
                 its user namespace; no pids cgroup the host may create)"
            );
        }
        None => {
            let _ = writeln!(
                out,
                "    processes: NOT ENFORCED (no pids cgroup the host may create, and no user \
                 namespace for RLIMIT_NPROC or a root host; a v2 cgroup needs the pids controller \
                 delegated to the host's cgroup, with the host alone in it)"
            );
        }
    }
    let _ = writeln!(
        out,
        "  keepers prepared ahead: per session and confined profile it has used, the next \
         command's keeper waits in that command's cgroups and the session's namespaces, so a \
         start only forks and execs (at most 2 profiles per session and 16 per host, released \
         after 60 s idle or with the session)"
    );
    let _ = writeln!(out, "\nProfiles:");
    for (name, profile) in profiles {
        let state = match (support.missing_for(profile), spoiled) {
            (Some(missing), _) => format!("REFUSED: {missing}"),
            (None, _) if profile.mode == SandboxMode::Off => "no confinement".to_owned(),
            (None, Some(error)) => format!("REFUSED: the namespaces cannot be made ({error})"),
            (None, None) => "enforced".to_owned(),
        };
        let _ = writeln!(out, "  {name}: {} -- {state}", profile.summary());
    }
    let _ = writeln!(
        out,
        "\nNot covered by these layers: a hidden file reached through a hard link elsewhere. \
         Without namespaces, also changing the mode or owner of readable files (chmod, chown), \
         and the names inside hidden directories (their contents stay out of reach)."
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_spoiled_namespaces_layer_refuses_the_profiles() {
        let powerless = "no privileges in a new user namespace: making / private: Operation not \
                         permitted (os error 1)";
        assert!(!namespaces_spoiled(Some(false), powerless));
        assert!(!namespaces_spoiled(
            Some(false),
            "user namespaces refused: unshare: EPERM"
        ));
        // Disabled, or no keeper to try with: not tried, the host does without.
        assert!(!namespaces_spoiled(
            None,
            "disabled by TOOLHOST_SANDBOX_DISABLE"
        ));
        assert!(namespaces_spoiled(
            Some(false),
            "masking /home/u/.ssh: Operation not permitted"
        ));
    }

    #[test]
    fn a_user_namespace_without_privileges_is_reported_as_no_namespaces() {
        let support = Support {
            landlock_abi: 6,
            seccomp: true,
        };
        let profile = crate::sandbox::SandboxSettings::default().profile();
        let error = "no privileges in a new user namespace: making / private: Operation not \
                     permitted (os error 1)";
        let report = report(&support, &Err(error.to_owned()), &[("default", profile)]);
        assert!(
            report.contains(&format!(
                "namespaces: NO ({error}); Landlock and seccomp confine commands alone"
            )),
            "{report}"
        );
        assert!(
            report.contains("apparmor_restrict_unprivileged_userns"),
            "{report}"
        );
        assert!(report.contains("-- enforced"), "{report}");
    }
}
