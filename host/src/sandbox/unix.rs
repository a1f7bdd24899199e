//! Unix sockets: which ones a confined command may connect to (see docs/confinement.md,
//! "Unix sockets").
//!
//! Landlock below ABI 9 does not look at `connect` on a pathname Unix socket.
//! Where the kernel has seccomp user notification and `pidfd_getfd` (Linux 5.6), the keeper
//! supervises every `connect` of the command (`keeper/src/unix.rs`) with the places
//! [`keeper_args`] names.
//! Elsewhere, or with `TOOLHOST_SANDBOX_DISABLE=unix-supervisor`, the strict mode refuses
//! every `socket(AF_UNIX, ..)` by argument; `socketpair` stays.
//! In both modes the seccomp filter refuses Unix datagram sockets, `socketpair` included: one
//! reaches any pathname datagram socket with `sendto`, without `connect`.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use nix::libc;
use toolhost_keeper_protocol::option;

/// How Unix sockets are confined on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UnixMode {
    /// The keeper supervises `connect`.
    Supervised,
    /// `socket(AF_UNIX, ..)` is refused; why not supervised.
    Strict(String),
}

/// Sockets allowed without the operator's word, with network `full` only: `nscd` and
/// systemd-resolved answer name-service lookups (the C library falls back without them).
/// Without network they would resolve names outside the command's network namespace.
pub const ALLOWED_BY_DEFAULT: &[&str] = &[
    "/run/nscd/socket",
    "/var/run/nscd/socket",
    "/run/systemd/resolve",
];

/// The mode on this machine, probed once; the strict mode is said once in the host's log.
pub(crate) fn mode() -> &'static UnixMode {
    static MODE: OnceLock<UnixMode> = OnceLock::new();
    MODE.get_or_init(|| {
        let mode = probe();
        if let UnixMode::Strict(reason) = &mode {
            tracing::warn!(
                %reason,
                "confined commands cannot make Unix sockets at all (socketpair still works): \
                 the keeper cannot supervise their connects here"
            );
        }
        mode
    })
}

fn probe() -> UnixMode {
    if super::probe::disabled("unix-supervisor") {
        return UnixMode::Strict("disabled by TOOLHOST_SANDBOX_DISABLE=unix-supervisor".into());
    }
    let actions =
        std::fs::read_to_string("/proc/sys/kernel/seccomp/actions_avail").unwrap_or_default();
    if !actions
        .split_whitespace()
        .any(|action| action == "user_notif")
    {
        return UnixMode::Strict("the kernel has no seccomp user notification".into());
    }
    // SAFETY: integer arguments; returns a new descriptor or -1.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, std::process::id(), 0) };
    if pidfd < 0 {
        return UnixMode::Strict(format!("pidfd_open: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: integer arguments; duplicates our own pidfd into this process, or fails.
    let copy = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd, pidfd, 0) };
    let error = std::io::Error::last_os_error();
    // SAFETY: closing descriptors just made, ours alone.
    unsafe {
        libc::close(pidfd as i32);
        if copy >= 0 {
            libc::close(copy as i32);
        }
    }
    if copy < 0 {
        return UnixMode::Strict(format!("pidfd_getfd: {error}"));
    }
    // A listener is refused (EBUSY) to a process under one already: a container runtime that
    // intercepts system calls (LXD's, Incus's) has one.
    match std::thread::spawn(listener_allowed).join() {
        Ok(Ok(())) => UnixMode::Supervised,
        Ok(Err(error)) => UnixMode::Strict(format!("a seccomp listener is refused: {error}")),
        Err(_) => UnixMode::Strict("the seccomp listener probe failed".into()),
    }
}

/// Whether this thread may install a filter with a listener: tried on a thread of its own,
/// which ends right after (`NO_NEW_PRIVS` and the filter are the thread's alone; the filter
/// allows everything).
fn listener_allowed() -> std::io::Result<()> {
    // SAFETY: integer arguments; sets a flag of this thread only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let allow = [libc::sock_filter {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k: libc::SECCOMP_RET_ALLOW,
    }];
    let program = libc::sock_fprog {
        len: 1,
        filter: allow.as_ptr().cast_mut(),
    };
    // SAFETY: `program` points at `allow`, alive for the call; the kernel copies it.
    let listener = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
            &raw const program,
        )
    };
    if listener < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: closing the listener just made, ours alone.
    unsafe { libc::close(listener as i32) };
    Ok(())
}

/// Where the keeper lets a command connect to a pathname socket.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Places<'a> {
    /// The workspace.
    pub(crate) workdir: Option<&'a Path>,
    /// The operator's `--writable` roots.
    pub(crate) writable: &'a [PathBuf],
    /// The session's private directory (`$TMPDIR`) where it is a host directory (without
    /// namespaces).
    pub(crate) temp: Option<&'a Path>,
    /// The namespaces' `/tmp` is the session's own.
    pub(crate) private_tmp: bool,
    /// The operator's `--allow-unix-socket` paths.
    pub(crate) allowed: &'a [PathBuf],
    /// The network is `full`: the name-service sockets of [`ALLOWED_BY_DEFAULT`] are allowed.
    pub(crate) name_service: bool,
    /// Refused also inside the workspace or a writable root (a workspace that is a home): the
    /// hidden paths and the package caches (`~/.cache` holds git credential-cache's socket).
    pub(crate) denied: &'a [PathBuf],
}

/// The keeper's options for `mode` and `places` (`--unix-supervise`, `--unix-allow=`,
/// `--unix-session-tmp=`). A path that is not UTF-8 is left out: its sockets are refused.
pub(crate) fn keeper_args(mode: &UnixMode, places: &Places) -> Vec<String> {
    if *mode != UnixMode::Supervised {
        return Vec::new();
    }
    let mut args = vec![option::UNIX_SUPERVISE.to_owned()];
    let mut allow: Vec<PathBuf> = places.workdir.iter().map(|dir| dir.to_path_buf()).collect();
    allow.extend(
        places
            .writable
            .iter()
            // Without namespaces, `/tmp` is the host's, with every other program's sockets.
            .filter(|root| root.as_path() != Path::new("/tmp"))
            .cloned(),
    );
    allow.extend(places.temp.map(Path::to_path_buf));
    let mut exempt: Vec<PathBuf> = Vec::new();
    if places.name_service {
        exempt.extend(ALLOWED_BY_DEFAULT.iter().map(PathBuf::from));
    }
    for path in places.allowed {
        exempt.push(path.clone());
        // The keeper compares where a path leads: the resolved form too.
        if let Ok(resolved) = std::fs::canonicalize(path) {
            exempt.push(resolved);
        }
    }
    let mut deny: Vec<PathBuf> = places.denied.to_vec();
    for list in [&mut allow, &mut exempt, &mut deny] {
        list.sort();
        list.dedup();
    }
    for (option, list) in [
        (option::UNIX_ALLOW, &allow),
        (option::UNIX_ALLOW_SOCKET, &exempt),
        (option::UNIX_DENY, &deny),
    ] {
        args.extend(
            list.iter()
                .filter_map(|path| path.to_str())
                .map(|path| format!("{option}{path}")),
        );
    }
    if places.private_tmp {
        args.push(format!("{}/tmp", option::UNIX_SESSION_TMP));
    }
    // Without namespaces the workspace and the caches share a mount, so a hard link can bring
    // a host socket in. With them every writable root is a mount of its own, but a refused
    // place inside one (a workspace that is a home) shares its mount.
    let roots = places
        .workdir
        .into_iter()
        .chain(places.writable.iter().map(PathBuf::as_path));
    let nested = roots
        .flat_map(|root| places.denied.iter().map(move |denied| (root, denied)))
        .any(|(root, denied)| denied.starts_with(root));
    if places.temp.is_some() || nested {
        args.push(option::UNIX_CHECK_BINDING.to_owned());
    }
    args
}

/// The note for the model when the keeper refused sockets (`refused`, as it named them).
pub(crate) fn note(refused: &[String]) -> Option<String> {
    // The keeper could not inspect a call (Yama's ptrace_scope, a non-dumpable caller).
    if let Some(reason) = refused.iter().find(|name| name.starts_with('(')) {
        return Some(format!(
            "\n[toolhost: a connect was refused: the keeper could not inspect it {reason}; \
             see docs/confinement.md, Unix sockets]"
        ));
    }
    let first = refused.first()?;
    let more = match refused.len() {
        1 => String::new(),
        n => format!(" (and {} more)", n - 1),
    };
    Some(format!(
        "\n[toolhost: connecting to the Unix socket {first}{more} was refused: confined commands \
         reach only sockets in the workspace, the writable directories and the session's own \
         /tmp. Do not retry another way: the operator may allow a socket with \
         --allow-unix-socket PATH]"
    ))
}

/// What `toolhost sandbox` says of Unix sockets.
pub fn report(allowed: &[PathBuf]) -> String {
    let how = match mode() {
        UnixMode::Supervised => "the keeper supervises every connect: sockets in the workspace, \
            the writable directories and the session's own /tmp are reached, the host's others \
            are refused"
            .to_owned(),
        UnixMode::Strict(reason) => format!(
            "strict: confined commands cannot make Unix sockets (socketpair still works), \
             because {reason}"
        ),
    };
    let mut text = format!("Unix sockets: {how}; datagram sockets are refused");
    let mut listed: Vec<String> = allowed.iter().map(|p| p.display().to_string()).collect();
    listed.extend(
        ALLOWED_BY_DEFAULT
            .iter()
            .map(|p| format!("{p} (network full)")),
    );
    text.push_str(&format!("\n  allowed besides: {}", listed.join(", ")));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_keeper_gets_the_allowed_places_and_never_the_hosts_tmp() {
        let writable = [PathBuf::from("/tmp"), PathBuf::from("/data")];
        let allowed = [PathBuf::from("/var/run/docker.sock")];
        let denied = [PathBuf::from("/work/ws/.cache")];
        let places = Places {
            workdir: Some(Path::new("/work/ws")),
            writable: &writable,
            temp: Some(Path::new("/state/tmp/toolhost-1-x")),
            private_tmp: false,
            allowed: &allowed,
            name_service: true,
            denied: &denied,
        };
        let args = keeper_args(&UnixMode::Supervised, &places);
        assert_eq!(args[0], option::UNIX_SUPERVISE);
        for path in ["/work/ws", "/data", "/state/tmp/toolhost-1-x"] {
            assert!(
                args.contains(&format!("{}{path}", option::UNIX_ALLOW)),
                "{path}: {args:?}"
            );
        }
        // The operator's sockets win over the refused places; those are passed too.
        assert!(args.contains(&format!(
            "{}/var/run/docker.sock",
            option::UNIX_ALLOW_SOCKET
        )));
        assert!(args.contains(&format!("{}/work/ws/.cache", option::UNIX_DENY)));
        assert!(!args.iter().any(|arg| arg.ends_with("=/tmp")), "{args:?}");
        // nscd's socket by default; neither the system D-Bus nor Docker's unless named.
        assert!(args.contains(&format!("{}/run/nscd/socket", option::UNIX_ALLOW_SOCKET)));
        let defaults = keeper_args(
            &UnixMode::Supervised,
            &Places {
                allowed: &[],
                ..places
            },
        );
        assert!(
            !defaults
                .iter()
                .any(|arg| arg.contains("dbus") || arg.contains("docker")),
            "{defaults:?}"
        );
        // Without namespaces the binding is checked too (hard links across one mount).
        assert!(defaults.contains(&option::UNIX_CHECK_BINDING.to_owned()));
        // With them only where a refused place lies inside an allowed root.
        let apart = Places {
            temp: None,
            private_tmp: true,
            denied: &[],
            ..places
        };
        let nested_denied = [PathBuf::from("/work/ws/.cache")];
        let nested = Places {
            denied: &nested_denied,
            ..apart
        };
        assert!(
            !keeper_args(&UnixMode::Supervised, &apart)
                .contains(&option::UNIX_CHECK_BINDING.to_owned())
        );
        assert!(
            keeper_args(&UnixMode::Supervised, &nested)
                .contains(&option::UNIX_CHECK_BINDING.to_owned())
        );
        // Without network, no name service outside the command's network namespace.
        let none = keeper_args(
            &UnixMode::Supervised,
            &Places {
                name_service: false,
                ..places
            },
        );
        assert!(!none.iter().any(|arg| arg.contains("nscd")), "{none:?}");
        let ns = Places {
            private_tmp: true,
            temp: None,
            ..places
        };
        let args = keeper_args(&UnixMode::Supervised, &ns);
        assert!(args.contains(&format!("{}/tmp", option::UNIX_SESSION_TMP)));
        assert!(keeper_args(&UnixMode::Strict("test".into()), &ns).is_empty());
    }

    #[test]
    fn the_note_names_the_socket_and_the_flag() {
        assert_eq!(note(&[]), None);
        let note = note(&["/x/sock".into(), "@abs".into()]).expect("a note");
        assert!(note.contains("/x/sock (and 1 more)"), "{note}");
        assert!(note.contains("--allow-unix-socket"), "{note}");
    }
}
