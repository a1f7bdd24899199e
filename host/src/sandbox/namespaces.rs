//! The namespaces layer, made once per scope and profile by the keeper in its helper mode
//! (`keeper/src/namespaces.rs`) and joined by every keeper of that profile before it starts
//! the command:
//!
//! - a user namespace (the host's own user and group only) and a mount namespace with a
//!   read-only view of `/`: the writable roots bound back read-write, the read-only roots
//!   (git hooks, shell start-up files in a writable root) bound read-only, `/tmp` the scope's
//!   own (the host's `/tmp` beneath the session's writes, which go to a tmpfs of bounded
//!   size), and the hidden directories covered by an empty, read-only, mode-000 tmpfs (their
//!   names are gone too, not only their contents);
//! - a PID namespace with its own `/proc`, whose init (the *holder*) ends when the scope ends
//!   or the host dies, taking every process left in it along; where `/proc` cannot be mounted
//!   (a container that masks parts of it) commands share the host's PID namespace;
//! - with network `none`, a network namespace with only its own loopback; with an allow-list,
//!   the same, where the session's network gate listens (`network/`).
//!
//! Landlock still carves every hidden path out and bounds writes underneath: a cover
//! disappears when what it covers is replaced from outside, and the carving keeps the
//! directories around a hidden path from being renamed. Landlock is the only filesystem layer
//! where user namespaces are refused (some distributions and containers do), or made without
//! any privilege in them (Ubuntu 24.04's AppArmor `unprivileged_userns` profile: the user
//! namespace is made, but mounting in it is denied); that fallback is logged and reported by
//! `toolhost sandbox`, and `TOOLHOST_SANDBOX_DISABLE=namespaces` forces it
//! (`TOOLHOST_SANDBOX_DISABLE=pid` leaves the PID namespace out alone).

use nix::libc;
use std::io::{BufRead, BufReader};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU8, Ordering};

pub(crate) use toolhost_keeper_protocol::NamespaceKind;
pub(crate) use toolhost_keeper_protocol::helper::POWERLESS;
use toolhost_keeper_protocol::helper::{self, REFUSED};
use toolhost_keeper_protocol::option;

/// Why the namespaces could not be made.
#[derive(Debug, Clone, thiserror::Error)]
#[error("cannot make the sandbox's namespaces: {0}")]
pub(crate) struct NamespaceError(pub(crate) String);

impl NamespaceError {
    /// The kernel refuses user namespaces (as some distributions and containers configure
    /// it), or makes them but denies every privileged operation in them (as Ubuntu 24.04's
    /// AppArmor restriction does), or the helper cannot run: the namespaces layer is missing
    /// here, not spoiled. Any other failure (a later step, another error) is not.
    pub(crate) fn missing_here(&self) -> bool {
        [REFUSED, POWERLESS, "running the keeper"]
            .iter()
            .any(|start| self.0.starts_with(start))
    }
}

/// Whether namespaces were made at least once in this process.
pub(crate) fn ever_made() -> bool {
    EVER_MADE.load(Ordering::Relaxed)
}

static EVER_MADE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// What to make for one profile.
#[derive(Debug, Default)]
pub(crate) struct Request<'a> {
    /// Directories to cover (see [`masks`]).
    pub(crate) masks: &'a [PathBuf],
    /// Files to cover with an empty mode-000 file (the system's password hashes).
    pub(crate) mask_files: &'a [PathBuf],
    /// What stays writable in the read-only view of `/` (canonical paths).
    pub(crate) writable: &'a [PathBuf],
    /// What is bound read-only, even inside a writable root or under `/tmp` (canonical paths).
    pub(crate) read_only: &'a [PathBuf],
    /// An empty directory of the host's, to mount the session's tmpfs on while `/tmp` is made.
    pub(crate) private_tmp: Option<&'a Path>,
    /// The most bytes the session's `/tmp` holds (`None`: the kernel's default, half the RAM).
    pub(crate) tmp_bytes: Option<u64>,
    /// The host's `/tmp` shows beneath the session's writes.
    pub(crate) tmp_overlay: bool,
    /// A network namespace with only its own loopback.
    pub(crate) private_network: bool,
    /// The network gate's sockets on that loopback (`network/`), and `/etc/resolv.conf`
    /// naming it; needs `private_network` and `private_tmp`.
    pub(crate) gate: bool,
    /// A PID namespace with its own `/proc`.
    pub(crate) pid: bool,
    /// A `/dev/shm` of the namespaces' own, a tmpfs of at most this many bytes.
    pub(crate) private_shm: Option<u64>,
}

/// A scope's namespaces for one profile, held open by descriptor and by their holder process
/// (the PID namespace's init), which ends when this is dropped.
#[derive(Debug)]
pub(crate) struct Namespaces {
    /// Kind and descriptor, in the order the keeper joins them (its descriptors from
    /// [`FIRST_NAMESPACE`](toolhost_keeper_protocol::fd::FIRST_NAMESPACE) on).
    pub(crate) fds: Vec<(NamespaceKind, OwnedFd)>,
    /// Why the PID namespace asked for could not be made (commands then share the host's).
    pub(crate) pid_missing: Option<String>,
    /// The holder's stdin, a Unix socket: requests to cover a path go there, and their
    /// answers come back; end-of-file ends the holder.
    holder_stdin: std::sync::Mutex<Option<UnixStream>>,
    /// The holder, the host's child until reaped.
    holder: libc::pid_t,
    /// The namespaces have a `/dev/shm` of their own.
    private_shm: bool,
    /// What `/tmp` is in the view.
    pub(crate) tmp: TmpView,
    /// The network gate's sockets, opened in the network namespace (see `Request::gate`);
    /// taken by the gate when it starts.
    pub(crate) gate_sockets: Vec<OwnedFd>,
}

/// What `/tmp` is in a scope's view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TmpView {
    /// The host's `/tmp` beneath the session's own writes.
    Overlay,
    /// The session's own, empty at its start; with why the overlay was refused, when one was
    /// asked for.
    Private(Option<String>),
    /// The host's, read-only.
    Host,
}

impl TmpView {
    /// From the `TMP` field of the helper's answer.
    fn parse(field: &str) -> Option<TmpView> {
        if field == helper::TMP_OVERLAID {
            return Some(TmpView::Overlay);
        }
        if field == helper::TMP_HOST {
            return Some(TmpView::Host);
        }
        let rest = field.strip_prefix(helper::TMP_PRIVATE)?;
        if rest.is_empty() {
            return Some(TmpView::Private(None));
        }
        let errno = rest.strip_prefix(':')?.parse::<i32>().ok()?;
        Some(TmpView::Private(Some(
            std::io::Error::from_raw_os_error(errno).to_string(),
        )))
    }
}

/// Whether process `pid` (ours) has begun to exit: `PF_EXITING` among the flags of
/// `/proc/PID/stat` (field 9). A process whose stat cannot be read counts as exiting.
fn exiting(pid: libc::pid_t) -> bool {
    const PF_EXITING: u64 = 0x4;
    // After the command name (in parentheses, which may hold anything): state, ppid, pgrp,
    // session, tty_nr, tpgid, flags. Read at every confined command's start.
    let flags = super::small_file::read_small(Path::new(&format!("/proc/{pid}/stat")), |stat| {
        stat.rsplit_once(") ")
            .and_then(|(_, rest)| rest.split_whitespace().nth(6)?.parse::<u64>().ok())
    });
    flags.flatten().is_none_or(|flags| flags & PF_EXITING != 0)
}

impl Namespaces {
    /// Whether a namespace of `kind` is among them.
    pub(crate) fn has(&self, kind: NamespaceKind) -> bool {
        self.fds.iter().any(|(made, _)| *made == kind)
    }

    /// Cover `path`, a hidden path that appeared in the view after it was made, through the
    /// holder (see [`helper::COVER_END`]): a directory by an empty tmpfs, a regular file by
    /// the empty cover file.
    pub(crate) fn cover(&self, path: &Path) -> std::io::Result<()> {
        use std::io::{Read, Write};
        use std::os::unix::ffi::OsStrExt;
        let mut guard = self
            .holder_stdin
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let stream = guard
            .as_mut()
            .ok_or_else(|| std::io::Error::other("the namespaces' holder is gone"))?;
        let mut request = path.as_os_str().as_bytes().to_vec();
        if request.contains(&helper::COVER_END) {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        }
        request.push(helper::COVER_END);
        stream.write_all(&request)?;
        if !readable_within(stream.as_fd(), HELPER_TIMEOUT) {
            // A late answer would be taken for the next request's: no more requests.
            guard.take();
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the namespaces' holder did not answer",
            ));
        }
        let mut answer = [0u8; 4];
        stream.read_exact(&mut answer)?;
        match i32::from_ne_bytes(answer) {
            0 => Ok(()),
            errno => Err(std::io::Error::from_raw_os_error(errno)),
        }
    }

    /// The holder's pid (in the host's PID namespace): its `/proc/PID/net` shows the network
    /// namespace's sockets.
    pub(crate) fn holder(&self) -> libc::pid_t {
        self.holder
    }

    /// Whether the holder still runs (killed, its namespaces are gone: a PID namespace whose
    /// init has exited takes no new process). Leaves it unreaped.
    pub(crate) fn holder_alive(&self) -> bool {
        let Some(pid) = rustix::process::Pid::from_raw(self.holder) else {
            return false;
        };
        let options = rustix::process::WaitIdOptions::EXITED
            | rustix::process::WaitIdOptions::NOHANG
            | rustix::process::WaitIdOptions::NOWAIT;
        let exited = !matches!(
            rustix::process::waitid(rustix::process::WaitId::Pid(pid), options),
            Ok(None)
        );
        // A killed init does not exit at once: it first waits for every process of its PID
        // namespace to go, and in that time the namespace takes no new process (a fork into
        // it fails with ENOMEM). It is exiting already (`PF_EXITING` in its flags).
        !exited && !exiting(self.holder)
    }

    /// The PID namespace's own `/proc`, as the host reaches it (through the holder's root);
    /// `None` without a PID namespace.
    pub(crate) fn proc_root(&self) -> Option<PathBuf> {
        self.has(NamespaceKind::Pid)
            .then(|| PathBuf::from(format!("/proc/{}/root/proc", self.holder)))
    }

    /// The namespaces' own `/dev/shm`, as the host reaches it (through the holder's root);
    /// `None` when they have none.
    pub(crate) fn shm_root(&self) -> Option<PathBuf> {
        self.private_shm
            .then(|| PathBuf::from(format!("/proc/{}/root/dev/shm", self.holder)))
    }

    /// The root of the namespaces' view of the file system, as the host reaches it (through
    /// the holder): `/proc/HOLDER/root`.
    pub(crate) fn root(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root", self.holder))
    }

    /// The namespaces' own `/tmp`, as the host reaches it (through the holder's root); `None`
    /// when `/tmp` is the host's.
    pub(crate) fn tmp_root(&self) -> Option<PathBuf> {
        (self.tmp != TmpView::Host)
            .then(|| PathBuf::from(format!("/proc/{}/root/tmp", self.holder)))
    }

    /// The keeper's option naming them: `--namespaces=user,mnt,...`.
    pub(crate) fn keeper_arg(&self) -> String {
        let kinds: Vec<&str> = self.fds.iter().map(|(kind, _)| kind.name()).collect();
        format!(
            "{}{}",
            option::NAMESPACES,
            kinds.join(option::NAMESPACE_SEPARATOR)
        )
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        // End of file: the holder exits, and as the PID namespace's init takes every process
        // left in it along.
        drop(
            self.holder_stdin
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take(),
        );
        let holder = nix::unistd::Pid::from_raw(self.holder);
        let reap = move || {
            let _ = nix::sys::wait::waitpid(holder, None);
        };
        // Reaped aside: the kernel empties the namespace first, which may take a moment.
        if let Err(error) = std::thread::Builder::new()
            .name("toolhost-namespaces-end".to_owned())
            .spawn(reap)
        {
            tracing::debug!(%error, "reaping a namespaces holder inline");
            let _ = nix::sys::wait::waitpid(holder, None);
        }
    }
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

/// Make the namespaces of `request` with `keeper` (the keeper's executable).
pub(crate) fn make(
    keeper: BorrowedFd<'_>,
    request: &Request<'_>,
) -> Result<Namespaces, NamespaceError> {
    let failed = |what: &str, error: std::io::Error| NamespaceError(format!("{what}: {error}"));
    let mut command = Command::new(format!("/proc/self/fd/{}", keeper.as_raw_fd()));
    // Shown as the keeper in `ps`. It needs no variable, and its holder is the init of the
    // commands' PID namespace: the host's variables (secrets among them) stay with the host.
    command
        .arg0("toolhost-keeper")
        .arg(helper::MAKE_NAMESPACES)
        .env_clear();
    if request.private_network {
        command.arg(helper::NET);
        if request.gate {
            command.arg(helper::PROXY);
        }
    }
    if request.pid {
        command.arg(helper::PID);
    }
    if let Some(bytes) = request.private_shm {
        command.arg(format!("{}{bytes}", helper::PRIVATE_SHM));
    }
    if request.private_tmp.is_some() {
        if let Some(bytes) = request.tmp_bytes {
            command.arg(format!("{}{bytes}", helper::TMP_SIZE));
        }
        if request.tmp_overlay {
            command.arg(helper::TMP_OVERLAY);
        }
    }
    let private_tmp: Vec<PathBuf> = request
        .private_tmp
        .map(Path::to_path_buf)
        .into_iter()
        .collect();
    let paths = [
        (helper::MASK, request.masks),
        (helper::MASK_FILE, request.mask_files),
        (helper::WRITABLE, request.writable),
        (helper::READ_ONLY, request.read_only),
        (helper::PRIVATE_TMP, private_tmp.as_slice()),
    ];
    for (option, list) in paths {
        for path in list {
            let mut arg = std::ffi::OsString::from(option);
            arg.push(path);
            command.arg(arg);
        }
    }
    // With the gate, the answer carries descriptors: stdout is a Unix socket.
    let with_gate = request.gate && request.private_network;
    let (answer, stdout) = if with_gate {
        let (ours, theirs) =
            UnixStream::pair().map_err(|e| failed("a socket for the helper's answer", e))?;
        (Some(ours), Stdio::from(OwnedFd::from(theirs)))
    } else {
        (None, Stdio::piped())
    };
    // The holder's stdin is a socket: the host asks it to cover paths there.
    let (holder_stdin, theirs) =
        UnixStream::pair().map_err(|e| failed("a socket for the holder's stdin", e))?;
    let mut child = command
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .stdout(stdout)
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| failed("running the keeper", e))?;
    let mut line = String::new();
    let mut sockets = Vec::new();
    let source: Option<OwnedFd> = match answer {
        Some(ours) => Some(OwnedFd::from(ours)),
        None => child.stdout.take().map(OwnedFd::from),
    };
    // The command holds the other end of the socket: dropped here, the answer ends at the
    // helper's exit.
    drop(command);
    let read = source.map(|out| {
        // A helper stuck on a mount (a hung network filesystem) must not hold the scope.
        if !readable_within(out.as_fd(), HELPER_TIMEOUT) {
            let _ = child.kill();
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {} s", HELPER_TIMEOUT.as_secs()),
            ));
        }
        if with_gate {
            read_line_with_fds(&out, &mut line, &mut sockets)
        } else {
            BufReader::new(std::fs::File::from(out)).read_line(&mut line)
        }
    });
    let stdin = Some(holder_stdin);
    let result = match read {
        Some(Ok(_)) => match line.trim_end().strip_prefix(helper::READY) {
            Some(ready) => open_all(ready, request, stdin).map(|mut namespaces| {
                namespaces.gate_sockets = std::mem::take(&mut sockets);
                namespaces
            }),
            None => Err(NamespaceError(
                line.trim_end()
                    .strip_prefix(helper::ERROR)
                    .unwrap_or("the helper ended without a word")
                    .to_owned(),
            )),
        },
        Some(Err(e)) => Err(failed("reading the helper", e)),
        None => Err(NamespaceError("no pipe to the helper".to_owned())),
    };
    // The helper exits once it has answered; the holder stays.
    let _ = child.wait();
    MADE.store(if result.is_ok() { 1 } else { 2 }, Ordering::Relaxed);
    if result.is_ok() {
        EVER_MADE.store(true, Ordering::Relaxed);
    }
    result
}

/// Read one line from the socket `socket`, with the descriptors sent along with it.
fn read_line_with_fds(
    socket: &OwnedFd,
    line: &mut String,
    fds: &mut Vec<OwnedFd>,
) -> std::io::Result<usize> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    let mut bytes = Vec::new();
    while !bytes.ends_with(b"\n") && bytes.len() < 4096 {
        let mut buffer = [0u8; 512];
        let mut space = nix::cmsg_space!([std::os::fd::RawFd; 8]);
        let mut iov = [std::io::IoSliceMut::new(&mut buffer)];
        let message = recvmsg::<()>(
            socket.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        )?;
        let read = message.bytes;
        for control in message.cmsgs()? {
            if let ControlMessageOwned::ScmRights(received) = control {
                // SAFETY: the kernel installed these descriptors for us; nothing else owns
                // them.
                fds.extend(
                    received
                        .into_iter()
                        .map(|fd| unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) }),
                );
            }
        }
        if read == 0 {
            break;
        }
        bytes.extend_from_slice(&buffer[..read]);
    }
    line.push_str(&String::from_utf8_lossy(&bytes));
    Ok(bytes.len())
}

/// Longest the helper may take to make the namespaces.
const HELPER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Whether `fd` has something to read (or reached its end) within `timeout`.
fn readable_within(fd: BorrowedFd<'_>, timeout: std::time::Duration) -> bool {
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

/// Open the holder's namespaces from the helper's answer, `HOLDER_PID pid` (or `HOLDER_PID
/// -REASON` without a PID namespace).
fn open_all(
    ready: &str,
    request: &Request<'_>,
    stdin: Option<UnixStream>,
) -> Result<Namespaces, NamespaceError> {
    let garbled = || NamespaceError(format!("a garbled answer from the helper: {ready}"));
    let mut fields = ready.splitn(3, helper::SEPARATOR);
    let holder = fields
        .next()
        .and_then(|pid| pid.parse::<libc::pid_t>().ok())
        .filter(|pid| *pid > 0)
        .ok_or_else(garbled)?;
    let tmp = fields.next().and_then(TmpView::parse).ok_or_else(garbled)?;
    let pid_namespace = fields.next().unwrap_or(helper::NO_PID_NAMESPACE);
    let mut namespaces = Namespaces {
        fds: Vec::with_capacity(4),
        pid_missing: None,
        holder_stdin: std::sync::Mutex::new(stdin),
        holder,
        private_shm: request.private_shm.is_some()
            && std::fs::symlink_metadata("/dev/shm").is_ok_and(|meta| meta.is_dir()),
        tmp,
        gate_sockets: Vec::new(),
    };
    let mut kinds = vec![NamespaceKind::User, NamespaceKind::Mount];
    if request.private_network {
        kinds.push(NamespaceKind::Network);
    }
    match pid_namespace {
        helper::PID_NAMESPACE => kinds.push(NamespaceKind::Pid),
        _ if request.pid => {
            let reason = pid_namespace
                .strip_prefix(helper::NO_PID_NAMESPACE)
                .unwrap_or_default();
            namespaces.pid_missing = Some(if reason.is_empty() {
                "not made".to_owned()
            } else {
                reason.to_owned()
            });
        }
        _ => {}
    }
    for kind in kinds {
        let path = format!("/proc/{holder}/ns/{}", kind.name());
        let fd = std::fs::File::open(&path)
            .map(OwnedFd::from)
            .map_err(|e| NamespaceError(format!("{path}: {e}")))?;
        namespaces.fds.push((kind, fd));
    }
    Ok(namespaces)
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
    fn a_running_process_is_not_exiting_and_a_gone_one_is() {
        assert!(!exiting(std::process::id() as libc::pid_t));
        let mut child = Command::new("true").spawn().expect("spawn");
        let pid = child.id() as libc::pid_t;
        child.wait().expect("wait");
        assert!(exiting(pid), "reaped: no stat to read");
    }

    #[test]
    fn only_a_refused_or_powerless_user_namespace_or_a_missing_helper_means_the_layer_is_missing() {
        let error = |text: &str| NamespaceError(text.to_owned());
        assert!(error("user namespaces refused: unshare: Operation not permitted").missing_here());
        assert!(error("running the keeper: No such file").missing_here());
        // A user namespace made without privileges in it (Ubuntu 24.04's AppArmor restriction).
        assert!(
            error(
                "no privileges in a new user namespace: making / private: Operation not \
                 permitted (os error 1)"
            )
            .missing_here()
        );
        assert!(
            error(
                "no privileges in a new user namespace: /proc/self/uid_map: Permission denied \
                 (os error 13)"
            )
            .missing_here()
        );
        // The same step failing otherwise, or a later step denied, spoils the layer.
        assert!(!error("making / private: Invalid argument (os error 22)").missing_here());
        assert!(!error("/proc/self/uid_map: No such file or directory").missing_here());
        assert!(!error("masking /home/u/.ssh: Operation not permitted").missing_here());
        assert!(!error("making / read-only: Operation not permitted").missing_here());
        assert!(!error("the private /tmp /tmp/x is missing").missing_here());
    }

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
