//! The namespaces layer: a user and a mount namespace per scope and profile (and a network
//! namespace with only its own loopback when the network is `none`), made once by the keeper
//! in its helper mode and joined by every command of that profile before the other layers.
//!
//! In the mount namespace the hidden directories are covered by an empty, read-only, mode-000
//! tmpfs, so their names are gone too, not only their contents. Landlock still carves every
//! hidden path out underneath: a cover disappears when what it covers is replaced from
//! outside, and the carving keeps the directories around a hidden path from being renamed.
//! Landlock stays the filesystem layer underneath and the only one where user namespaces are
//! refused (some distributions restrict them); that fallback is logged and reported by
//! `toolhost sandbox`, and `TOOLHOST_SANDBOX_DISABLE=namespaces` forces it.

use nix::libc;
use std::io::{BufRead, BufReader};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU8, Ordering};

/// Why the namespaces could not be made.
#[derive(Debug, Clone, thiserror::Error)]
#[error("cannot make the sandbox's namespaces: {0}")]
pub(crate) struct NamespaceError(pub(crate) String);

/// A scope's namespaces for one profile, held open by descriptor: user, mount, and network
/// when it has its own.
#[derive(Debug)]
pub(crate) struct Namespaces {
    /// In the order the keeper joins them (`--namespaces=N`, descriptors 8, 9, 10).
    pub(crate) fds: Vec<OwnedFd>,
}

/// Whether the namespaces were made the last time they were tried in this process (`None`:
/// not tried yet).
pub(crate) fn made() -> Option<bool> {
    match MADE.load(Ordering::Relaxed) {
        1 => Some(true),
        2 => Some(false),
        _ => None,
    }
}

/// 0: not tried; 1: made; 2: refused.
static MADE: AtomicU8 = AtomicU8::new(0);

/// Whether `RLIMIT_NPROC` in the scope's user namespace is the process limit: where there is
/// no pids cgroup, the namespaces are made (`with_namespaces`), and the host is not root (the
/// kernel does not apply it to root).
pub(crate) fn nproc_limit_applies(with_namespaces: bool) -> bool {
    with_namespaces
        && super::cgroup::hierarchies().pids.is_none()
        && !rustix::process::geteuid().is_root()
}

/// Make the namespaces with `keeper` (the keeper's executable): `masks` covered (see
/// [`masks`]), and a network namespace of their own with `private_network`.
pub(crate) fn make(
    keeper: BorrowedFd<'_>,
    masks: &[PathBuf],
    private_network: bool,
) -> Result<Namespaces, NamespaceError> {
    let failed = |what: &str, error: std::io::Error| NamespaceError(format!("{what}: {error}"));
    let mut command = Command::new(format!("/proc/self/fd/{}", keeper.as_raw_fd()));
    // Shown as the keeper in `ps`.
    command.arg0("toolhost-keeper").arg("--make-namespaces");
    if private_network {
        command.arg("--net");
    }
    for path in masks {
        let mut arg = std::ffi::OsString::from("--mask=");
        arg.push(path);
        command.arg(arg);
    }
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| failed("running the keeper", e))?;
    let mut line = String::new();
    let read = child.stdout.take().map(|out| {
        // A helper stuck on a mount (a hung network filesystem) must not hold the scope.
        if !readable_within(out.as_fd(), HELPER_TIMEOUT) {
            let _ = child.kill();
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {} s", HELPER_TIMEOUT.as_secs()),
            ));
        }
        BufReader::new(out).read_line(&mut line)
    });
    let result = match read {
        Some(Ok(_)) if line.trim_end() == "ready" => open_all(child.id(), private_network),
        Some(Ok(_)) => Err(NamespaceError(
            line.trim_end()
                .strip_prefix("error: ")
                .unwrap_or("the helper ended without a word")
                .to_owned(),
        )),
        Some(Err(e)) => Err(failed("reading the helper", e)),
        None => Err(NamespaceError("no pipe to the helper".to_owned())),
    };
    // Closing its stdin lets the helper exit; the descriptors keep the namespaces.
    drop(child.stdin.take());
    let _ = child.wait();
    MADE.store(if result.is_ok() { 1 } else { 2 }, Ordering::Relaxed);
    result
}

/// Longest the helper may take to make the namespaces.
const HELPER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Whether `fd` has something to read (or reached its end) within `timeout`.
fn readable_within(fd: std::os::fd::BorrowedFd<'_>, timeout: std::time::Duration) -> bool {
    let mut poll = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let millis = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    loop {
        // SAFETY: one valid pollfd for the duration of the call.
        let ready = unsafe { libc::poll(&raw mut poll, 1, millis) };
        if ready >= 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return ready > 0;
        }
    }
}

fn open_all(pid: u32, private_network: bool) -> Result<Namespaces, NamespaceError> {
    let mut kinds = vec!["user", "mnt"];
    if private_network {
        kinds.push("net");
    }
    let fds = kinds
        .into_iter()
        .map(|kind| {
            let path = format!("/proc/{pid}/ns/{kind}");
            std::fs::File::open(&path)
                .map(OwnedFd::from)
                .map_err(|e| NamespaceError(format!("{path}: {e}")))
        })
        .collect::<Result<_, _>>()?;
    Ok(Namespaces { fds })
}

/// The hidden paths to cover: existing directories (not symbolic links: the caller resolves
/// them), and not one holding the workspace or a writable root (a cover would hide those too).
pub(crate) fn masks(hidden: &[PathBuf], keep_visible: &[PathBuf]) -> Vec<PathBuf> {
    let coverable =
        |path: &&PathBuf| std::fs::symlink_metadata(path).is_ok_and(|meta| meta.is_dir());
    let mut masks: Vec<PathBuf> = hidden
        .iter()
        .filter(|path| path.is_absolute() && path.as_path() != Path::new("/"))
        .filter(|path| !keep_visible.iter().any(|root| root.starts_with(path)))
        .filter(coverable)
        .cloned()
        .collect();
    masks.sort();
    masks.dedup();
    // A path inside another covered one is covered already (and could not be mounted on).
    let mut kept: Vec<PathBuf> = Vec::with_capacity(masks.len());
    for path in masks {
        if !kept.iter().any(|outer| path.starts_with(outer)) {
            kept.push(path);
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn covers_skip_what_holds_a_writable_root_what_is_covered_already_and_what_is_missing() {
        let home = tempfile::tempdir().expect("home");
        let p = |relative: &str| home.path().join(relative);
        for dir in [".ssh", ".cache/toolhost", "state/workspace"] {
            std::fs::create_dir_all(p(dir)).expect("dir");
        }
        std::fs::write(p(".ssh/id_ed25519"), "key").expect("key");
        std::fs::write(p(".netrc"), "secret").expect("netrc");
        std::os::unix::fs::symlink(p(".ssh"), p(".link")).expect("link");
        let hidden = [
            p(".ssh"),
            p(".ssh/id_ed25519"),
            p(".cache/toolhost"),
            p(".netrc"),
            p(".link"),
            p(".aws"),
            p("state"),
            PathBuf::from("relative"),
        ];
        let visible = [p("state/workspace"), p("project")];
        assert_eq!(masks(&hidden, &visible), [p(".cache/toolhost"), p(".ssh")]);
    }
}
