//! The namespaces layer: a user and a mount namespace per scope and profile (and a network
//! namespace with only its own loopback when the network is `none`), made once by the keeper
//! in its helper mode and joined by every command of that profile before the other layers.
//!
//! In the mount namespace the hidden paths are covered: a directory by an empty, read-only,
//! mode-000 tmpfs (its names are gone too, not only its contents), a file by a read-only bind
//! of an empty mode-000 file. What is covered needs no carving in the Landlock rules, so the
//! directories holding it stay whole (new entries can be made in `~/.cache`, or in a workspace
//! that is the home directory).
//! Landlock stays the filesystem layer underneath and the only one where user namespaces are
//! refused (some distributions restrict them); that fallback is logged and reported by
//! `toolhost sandbox`, and `TOOLHOST_SANDBOX_DISABLE=namespaces` forces it.

use std::io::{BufRead, BufReader};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
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

/// Where `RLIMIT_NPROC` in the scope's user namespace is the process limit: no pids cgroup,
/// namespaces made, and a host that is not root (the kernel does not apply it to root).
pub(crate) fn nproc_limit_applies() -> bool {
    super::cgroup::hierarchies().pids.is_none()
        && made() == Some(true)
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
    // What covers a file: empty and mode 000, bound by the helper (the bind keeps it after it
    // is removed here).
    let source = tempfile::Builder::new()
        .prefix("toolhost-mask-")
        .permissions(std::fs::Permissions::from_mode(0o000))
        .tempfile()
        .map_err(|e| failed("creating the file that covers hidden files", e))?;
    let mut command = Command::new(format!("/proc/self/fd/{}", keeper.as_raw_fd()));
    // Shown as the keeper in `ps`.
    command.arg0("toolhost-keeper").arg("--make-namespaces");
    let mut arg = std::ffi::OsString::from("--mask-source=");
    arg.push(source.path());
    command.arg(arg);
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
    let read = child
        .stdout
        .take()
        .map(|out| BufReader::new(out).read_line(&mut line));
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

/// The hidden paths to cover: existing directories and regular files (not symbolic links:
/// the caller resolves them), and not one holding the workspace or a writable root (a cover
/// would hide those too; Landlock alone keeps such a path out of reach).
pub(crate) fn masks(hidden: &[PathBuf], keep_visible: &[PathBuf]) -> Vec<PathBuf> {
    let coverable = |path: &&PathBuf| {
        std::fs::symlink_metadata(path).is_ok_and(|meta| meta.is_dir() || meta.is_file())
    };
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
        assert_eq!(
            masks(&hidden, &visible),
            [p(".cache/toolhost"), p(".netrc"), p(".ssh")]
        );
    }
}
