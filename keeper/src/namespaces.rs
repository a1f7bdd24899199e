//! The namespaces of a scope's confined commands, made once per scope and profile by a keeper
//! run in a helper mode, and joined by every command of that profile (`--namespaces=...`, see
//! `confine.rs`).
//!
//! `toolhost-keeper --make-namespaces [--net [--proxy]] [--pid] [--mask=DIR]... [--mask-file=FILE]...
//! [--writable=PATH]... [--read-only=PATH]... [--private-tmp=DIR [--tmp-size=BYTES]
//! [--tmp-overlay]] [--private-shm=BYTES]`
//!
//! What it makes, in order:
//!
//! 1. A user namespace. It maps only the caller's own user and group to themselves, so files
//!    keep their owners and nothing gains privileges outside.
//! 2. A mount namespace, and with `--net` a network namespace with only its own loopback
//!    (brought up).
//! 3. With `--private-tmp`, the session's tmpfs (`--tmp-size` bytes at most) is mounted on
//!    that directory. It holds the upper and work directories of the `/tmp`
//!    overlay, and an empty mode-000 file to cover files with.
//! 4. Every `--mask` directory is covered by an empty, read-only, mode-000 tmpfs, so that not
//!    even the names inside show.
//! 5. Every `--mask-file` file is covered by the empty mode-000 file, bound over it, so no
//!    directory around the covered file is touched. With `--proxy`, `/etc/resolv.conf` is
//!    covered by one that names the namespace's loopback (`network.rs`).
//! 6. Copies of the `--writable` and `--read-only` paths are taken, with what is mounted
//!    inside them (covers included). They are taken from the host's tree, before anything is
//!    mounted on `/tmp`, so that a path under `/tmp` is the host's and not the session's.
//! 7. `/tmp` becomes the session's own. With `--tmp-overlay` it is an overlay: the host's
//!    `/tmp` beneath, the session's writes on the tmpfs above it. The overlay's lower layer
//!    is the host's `/tmp` alone, so the covers under `/tmp` are mounted again on it. Where
//!    the kernel refuses the overlay, or without `--tmp-overlay`, `/tmp` is the tmpfs alone.
//!    The tmpfs stays mounted on the `--private-tmp` directory, out of view beneath the
//!    cover of the hidden directory that holds it (or beneath the new `/tmp`), so that the
//!    holder can still bind its cover file onto a hidden file that appears later (a bind's
//!    source must be a mount of the namespace).
//! 8. The whole tree is made read-only. The private `/tmp` is put back read-write on top.
//! 9. With `--private-shm`, a new tmpfs of that size is mounted on `/dev/shm`.
//! 10. The copies are put in place, shortest path first: `--writable` ones read-write,
//!     `--read-only` ones read-only. One under the private `/tmp` or `/dev/shm` gets a place
//!     made there to mount it on.
//! 11. With `--proxy`, the sockets of the session's network gate are opened on the network
//!     namespace's loopback (`network.rs`).
//! 12. With `--pid`, a PID namespace whose init is the *holder* below, with its own `/proc`.
//!
//! The namespaces are held by a *holder* process forked at the end as the host's own child
//! (with `--pid` it is the new PID namespace's init): it reaps what is re-parented to it and exits at end-of-file on
//! its stdin, which the host keeps open for the scope's life. The host dies, or ends the scope:
//! the holder exits, and with it (as the init) every process left in the PID namespace.
//!
//! On success the helper prints `ready HOLDER_PID TMP pid` (or `ready HOLDER_PID TMP -REASON`
//! when the PID namespace could not be made) and exits; `TMP` says what `/tmp` is; the host opens `/proc/HOLDER_PID/ns/*`.
//! With `--proxy` the answer carries the gate's sockets (`SCM_RIGHTS`; stdout is then a Unix
//! socket). On
//! failure it prints `error: ...` and exits non-zero; the message starts with [`REFUSED`] when
//! the kernel refuses the user namespace, or with [`POWERLESS`] when it makes one but denies the
//! first privileged operation in it. The host decides what either means. The options and the
//! answer are the protocol's [`helper`](toolhost_keeper_protocol::helper) module.

use std::ffi::{CString, OsString};
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use toolhost_keeper_protocol::helper::{
    self, ERROR, MASK, MASK_FILE, NET, NO_PID_NAMESPACE, PID, PID_NAMESPACE, POWERLESS,
    PRIVATE_SHM, PRIVATE_TMP, PROXY, READ_ONLY, READY, REFUSED, SEPARATOR, TMP_HOST, TMP_OVERLAID,
    TMP_OVERLAY, TMP_PRIVATE, TMP_SIZE, WRITABLE,
};

/// What to make, from the command line.
#[derive(Debug, Default)]
struct Plan {
    net: bool,
    /// Open the network gate's sockets (needs `net` and a private `/tmp`).
    proxy: bool,
    pid: bool,
    masks: Vec<PathBuf>,
    mask_files: Vec<PathBuf>,
    writable: Vec<PathBuf>,
    read_only: Vec<PathBuf>,
    /// The size of the namespaces' own `/dev/shm`, in bytes.
    private_shm: Option<u64>,
    private_tmp: Option<PathBuf>,
    /// The size of the session's tmpfs, in bytes.
    tmp_size: Option<u64>,
    tmp_overlay: bool,
}

impl Plan {
    fn parse(args: &[OsString]) -> io::Result<Plan> {
        let mut plan = Plan::default();
        for arg in args {
            let bytes = arg.as_bytes();
            let path = |prefix: &[u8]| {
                bytes
                    .strip_prefix(prefix)
                    .map(|path| PathBuf::from(std::ffi::OsStr::from_bytes(path)))
            };
            if bytes == NET.as_bytes() {
                plan.net = true;
            } else if bytes == PROXY.as_bytes() {
                plan.proxy = true;
            } else if bytes == PID.as_bytes() {
                plan.pid = true;
            } else if let Some(path) = path(MASK.as_bytes()) {
                plan.masks.push(path);
            } else if let Some(path) = path(MASK_FILE.as_bytes()) {
                plan.mask_files.push(path);
            } else if let Some(path) = path(WRITABLE.as_bytes()) {
                plan.writable.push(path);
            } else if let Some(path) = path(READ_ONLY.as_bytes()) {
                plan.read_only.push(path);
            } else if let Some(path) = path(PRIVATE_TMP.as_bytes()) {
                plan.private_tmp = Some(path);
            } else if bytes == TMP_OVERLAY.as_bytes() {
                plan.tmp_overlay = true;
            } else if let Some(size) = bytes.strip_prefix(TMP_SIZE.as_bytes()) {
                plan.tmp_size = Some(size_in_bytes(size, arg)?);
            } else if let Some(size) = bytes.strip_prefix(PRIVATE_SHM.as_bytes()) {
                plan.private_shm = Some(size_in_bytes(size, arg)?);
            } else {
                return Err(invalid(format!(
                    "unknown option `{}`",
                    arg.to_string_lossy()
                )));
            }
        }
        if plan.proxy && (!plan.net || plan.private_tmp.is_none()) {
            return Err(invalid(format!("{PROXY} needs {NET} and {PRIVATE_TMP}DIR")));
        }
        for path in plan
            .masks
            .iter()
            .chain(&plan.mask_files)
            .chain(&plan.writable)
            .chain(&plan.read_only)
            .chain(&plan.private_tmp)
        {
            if !path.is_absolute() {
                return Err(invalid(format!("not an absolute path: {}", path.display())));
            }
        }
        Ok(plan)
    }
}

/// A size in bytes, more than zero, from the option `arg`.
fn size_in_bytes(size: &[u8], arg: &OsString) -> io::Result<u64> {
    std::str::from_utf8(size)
        .ok()
        .and_then(|size| size.parse::<u64>().ok())
        .filter(|size| *size > 0)
        .ok_or_else(|| invalid(format!("not a size in bytes: {}", arg.to_string_lossy())))
}

/// `error` with `prefix` before its message when it is a denial (`EPERM` or `EACCES`).
fn label_denial(prefix: &str, error: io::Error) -> io::Error {
    if error.kind() == io::ErrorKind::PermissionDenied {
        io::Error::new(error.kind(), format!("{prefix}{error}"))
    } else {
        error
    }
}

/// Run the helper mode with the arguments after `--make-namespaces`.
pub(crate) fn make(args: &[OsString]) -> io::Result<()> {
    let result = Plan::parse(args).and_then(|plan| setup(&plan).map(|holder| (plan, holder)));
    let mut stdout = io::stdout().lock();
    match result {
        Ok((
            _,
            Holder {
                pid,
                tmp,
                pid_namespace,
                sockets,
            },
        )) => {
            let pid_namespace = match pid_namespace {
                Ok(true) => PID_NAMESPACE.to_owned(),
                Ok(false) => NO_PID_NAMESPACE.to_owned(),
                Err(reason) => format!("{NO_PID_NAMESPACE}{reason}"),
            };
            let tmp = match tmp {
                Tmp::Overlay => TMP_OVERLAID.to_owned(),
                Tmp::Host => TMP_HOST.to_owned(),
                Tmp::Private(None) => TMP_PRIVATE.to_owned(),
                Tmp::Private(Some(errno)) => format!("{TMP_PRIVATE}:{errno}"),
            };
            let answer = format!("{READY}{pid}{SEPARATOR}{tmp}{SEPARATOR}{pid_namespace}\n");
            if sockets.is_empty() {
                stdout.write_all(answer.as_bytes())?;
                stdout.flush()
            } else {
                stdout.flush()?;
                super::fds::send_with_fds(libc::STDOUT_FILENO, answer.as_bytes(), &sockets)
            }
        }
        Err(error) => {
            writeln!(stdout, "{ERROR}{error}")?;
            stdout.flush()?;
            Err(error)
        }
    }
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

/// A failed step, named.
fn step(name: &str, ok: bool) -> io::Result<()> {
    if ok {
        Ok(())
    } else {
        let error = io::Error::last_os_error();
        Err(io::Error::new(error.kind(), format!("{name}: {error}")))
    }
}

/// The process holding the namespaces.
struct Holder {
    /// Its pid (in the host's PID namespace).
    pid: libc::pid_t,
    /// What `/tmp` is in the view.
    tmp: Tmp,
    /// Whether it is the init of a PID namespace of its own (`Ok(false)`: none was asked
    /// for; `Err`: asked for, but why it could not be made).
    pid_namespace: Result<bool, String>,
    /// The network gate's sockets, for the host (`--proxy`).
    sockets: Vec<OwnedFd>,
}

fn setup(plan: &Plan) -> io::Result<Holder> {
    // SAFETY: getuid and getgid take no arguments and cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut flags = libc::CLONE_NEWUSER | libc::CLONE_NEWNS;
    if plan.net {
        flags |= libc::CLONE_NEWNET;
    }
    // SAFETY: an integer argument; this helper is single-threaded, as unshare(CLONE_NEWUSER)
    // requires.
    let unshared = unsafe { libc::unshare(flags) } == 0;
    // The host tells these (the kernel refuses user namespaces, or every privilege in them)
    // from any other failure.
    step("unshare", unshared)
        .map_err(|error| io::Error::new(error.kind(), format!("{REFUSED}{error}")))?;
    write_file("/proc/self/setgroups", "deny")
        .and_then(|()| write_file("/proc/self/uid_map", &format!("{uid} {uid} 1")))
        .and_then(|()| write_file("/proc/self/gid_map", &format!("{gid} {gid} 1")))
        .map_err(|error| label_denial(POWERLESS, error))?;
    // Nothing mounted here propagates anywhere (it could not reach the host's namespace
    // anyway: a less privileged mount namespace only receives).
    // SAFETY: NUL-terminated strings and null pointers where mount(2) allows them.
    let private = unsafe {
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    } == 0;
    step("making / private", private).map_err(|error| label_denial(POWERLESS, error))?;
    let scratch = plan
        .private_tmp
        .as_deref()
        .map(|dir| Scratch::mount(dir, plan.tmp_size))
        .transpose()?;
    for path in &plan.masks {
        mask(path)?;
    }
    cover_files(&plan.mask_files, scratch.as_ref())?;
    if plan.proxy
        && let Some(scratch) = &scratch
    {
        super::network::point_resolver_at_stub(&scratch.path(RESOLV_CONF)?)?;
    }
    // The holder keeps the cover file: a hidden path that appears later is covered with it.
    let cover = match &scratch {
        Some(scratch) => open_at(scratch.root.as_raw_fd(), Path::new(COVER), 0, 0)?,
        None => None,
    };
    let tmp = read_only_view(plan, scratch)?;
    if plan.net {
        loopback_up()?;
    }
    let sockets = if plan.proxy {
        super::network::open_sockets()?
    } else {
        Vec::new()
    };
    if plan.pid {
        // SAFETY: an integer argument; the next child forked is the new namespace's init.
        let unshared = unsafe { libc::unshare(libc::CLONE_NEWPID) } == 0;
        step("unshare(pid)", unshared)?;
    }
    let mut holder = hold(plan.pid, cover)?;
    holder.tmp = tmp;
    holder.sockets = sockets;
    Ok(holder)
}

fn write_file(path: &str, text: &str) -> io::Result<()> {
    std::fs::write(path, text)
        .map_err(|error| io::Error::new(error.kind(), format!("{path}: {error}")))
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| invalid(format!("NUL byte in {}", path.display())))
}

/// `struct open_how` of `openat2(2)`.
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// Open `path` (`O_PATH`, with `flags` added) without following any symbolic link on the way
/// (`openat2` with `RESOLVE_NO_SYMLINKS`), so that what is mounted on it or cloned from it is
/// the very file checked, whatever changes meanwhile. `None`: missing, or reached through a
/// link (or not a directory, with `O_DIRECTORY`).
fn open_no_symlinks(path: &Path, flags: libc::c_int) -> io::Result<Option<OwnedFd>> {
    open_at(libc::AT_FDCWD, path, flags, 0)
}

/// [`open_no_symlinks`] relative to `dir`, with more `resolve` flags.
fn open_at(
    dir: RawFd,
    path: &Path,
    flags: libc::c_int,
    resolve: u64,
) -> io::Result<Option<OwnedFd>> {
    let target = c_path(path)?;
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_CLOEXEC | flags) as u64,
        mode: 0,
        resolve: libc::RESOLVE_NO_SYMLINKS | resolve,
    };
    // SAFETY: a NUL-terminated path and a valid open_how of the size passed.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir,
            target.as_ptr(),
            &raw const how,
            size_of::<OpenHow>(),
        )
    };
    if fd >= 0 {
        let fd = RawFd::try_from(fd).map_err(io::Error::other)?;
        // SAFETY: openat2 returned a new descriptor that nothing else owns.
        return Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }));
    }
    match io::Error::last_os_error().raw_os_error() {
        Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP | libc::EXDEV) => Ok(None),
        _ => step(&format!("opening {}", path.display()), false).map(|()| None),
    }
}

/// The `/proc/self/fd/N` path of a descriptor, for calls that take a path.
fn fd_path(fd: &OwnedFd) -> io::Result<CString> {
    c_path(Path::new(&format!("/proc/self/fd/{}", fd.as_raw_fd())))
}

/// Cover `path`, if it is a directory reached without following any symbolic link, with an
/// empty read-only tmpfs (mode 000). Anything else is left alone: Landlock keeps it out of
/// reach.
fn mask(path: &Path) -> io::Result<()> {
    let Some(fd) = open_no_symlinks(path, libc::O_DIRECTORY)? else {
        return Ok(());
    };
    mask_dir(&fd).map_err(|error| {
        io::Error::new(error.kind(), format!("masking {}: {error}", path.display()))
    })
}

/// Cover the directory `place` with an empty, read-only tmpfs of mode 000.
fn mask_dir(place: &OwnedFd) -> io::Result<()> {
    mount_tmpfs(
        place,
        libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        "mode=000,size=4k",
    )
}

/// Bind `source` over `target` (both NUL-terminated paths); whether it was done.
fn bind(source: &std::ffi::CStr, target: &std::ffi::CStr) -> bool {
    // SAFETY: NUL-terminated strings for source and target; no type or data for a bind.
    let bound = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    };
    bound == 0
}

/// Mount a new tmpfs with `flags` and `options` on the directory `place`.
fn mount_tmpfs(place: &OwnedFd, flags: libc::c_ulong, options: &str) -> io::Result<()> {
    let target = fd_path(place)?;
    let data =
        CString::new(options).map_err(|_| invalid("a NUL byte in the tmpfs options".to_owned()))?;
    // SAFETY: NUL-terminated strings for source, target, type and data.
    let mounted = unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            target.as_ptr(),
            c"tmpfs".as_ptr(),
            flags,
            data.as_ptr().cast(),
        )
    } == 0;
    if mounted {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// What `/tmp` is in the view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tmp {
    /// The host's `/tmp` beneath the session's own writes.
    Overlay,
    /// The session's own, empty at the start; with the error number of the overlay's refusal
    /// when one was asked for.
    Private(Option<i32>),
    /// The host's, read-only like the rest of the view.
    Host,
}

/// The session's tmpfs, mounted on a directory of the host's while the view is made.
struct Scratch {
    /// The tmpfs's root, opened once mounted.
    root: OwnedFd,
}

/// Names in the session's tmpfs.
const UPPER: &str = "upper";
const WORK: &str = "work";
const COVER: &str = "hidden";
const RESOLV_CONF: &str = "resolv.conf";

impl Scratch {
    /// Mount a tmpfs of at most `size` bytes (the kernel's default without) on `dir`, and make
    /// in it the overlay's upper (mode 1777, like `/tmp`) and work directories, and the empty
    /// mode-000 file that covers files.
    fn mount(dir: &Path, size: Option<u64>) -> io::Result<Scratch> {
        let place = open_no_symlinks(dir, libc::O_DIRECTORY)?.ok_or_else(|| {
            invalid(format!(
                "the private /tmp {} is missing or a link",
                dir.display()
            ))
        })?;
        let options = match size {
            Some(size) => format!("mode=700,size={size}"),
            None => "mode=700".to_owned(),
        };
        step(
            "mounting the session's tmpfs",
            mount_tmpfs(&place, libc::MS_NOSUID | libc::MS_NODEV, &options).is_ok(),
        )?;
        let root = open_no_symlinks(dir, libc::O_DIRECTORY)?
            .ok_or_else(|| invalid("the session's tmpfs went away".to_owned()))?;
        let scratch = Scratch { root };
        let base = scratch.path("")?;
        let made = std::fs::DirBuilder::new()
            .mode(0o700)
            .create(base.join(WORK))
            .and_then(|()| std::fs::DirBuilder::new().create(base.join(UPPER)))
            .and_then(|()| {
                use std::os::unix::fs::PermissionsExt;
                // The mode of `/tmp` itself: everyone may create, only owners remove.
                std::fs::set_permissions(base.join(UPPER), std::fs::Permissions::from_mode(0o1777))
            })
            .and_then(|()| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o000)
                    .open(base.join(COVER))
                    .map(drop)
            });
        made.map_err(|error| {
            io::Error::new(
                error.kind(),
                format!("preparing the session's tmpfs: {error}"),
            )
        })?;
        Ok(scratch)
    }

    /// The path of `name` in the tmpfs, through `/proc/self/fd`: it holds no byte of the
    /// host's directory name, so it needs no escaping in mount options.
    fn path(&self, name: &str) -> io::Result<PathBuf> {
        let base = PathBuf::from(format!("/proc/self/fd/{}", self.root.as_raw_fd()));
        Ok(if name.is_empty() {
            base
        } else {
            base.join(name)
        })
    }
}

/// Cover each of `files` that is a regular file reached without following any symbolic link
/// with the empty mode-000 file of `scratch`. A mount on a file leaves its directory live (a
/// Landlock rule would fix the directory's entries at the session's start).
fn cover_files(files: &[PathBuf], scratch: Option<&Scratch>) -> io::Result<()> {
    if files.is_empty() {
        return Ok(());
    }
    let scratch =
        scratch.ok_or_else(|| invalid(format!("{MASK_FILE}FILE needs {PRIVATE_TMP}DIR")))?;
    let source = c_path(&scratch.path(COVER)?)?;
    for path in files {
        // A file that is gone needs no cover. One reached through a link, or that is no
        // regular file, cannot be covered safely: refused rather than left in view.
        let Some(fd) = open_no_symlinks(path, 0)? else {
            if std::fs::symlink_metadata(path).is_err() {
                continue;
            }
            return Err(invalid(format!(
                "cannot cover {}: it is reached through a symbolic link",
                path.display()
            )));
        };
        let target = fd_path(&fd)?;
        let through_fd = Path::new(std::ffi::OsStr::from_bytes(target.to_bytes()));
        if !std::fs::metadata(through_fd).is_ok_and(|meta| meta.is_file()) {
            return Err(invalid(format!(
                "cannot cover {}: it is not a regular file",
                path.display()
            )));
        }
        let ok = bind(&source, &target);
        step(&format!("covering {}", path.display()), ok)?;
    }
    Ok(())
}

/// Mount a new tmpfs of at most `size` bytes on `/dev/shm`: the namespaces' own shared
/// memory, writable by their commands, gone with the namespaces. The host's `/dev/shm`, with
/// other sessions' files, is out of view.
fn private_shm(size: u64) -> io::Result<()> {
    let Some(place) = open_no_symlinks(Path::new("/dev/shm"), libc::O_DIRECTORY)? else {
        // No /dev/shm on this machine (or a link): nothing to stand in for.
        return Ok(());
    };
    let options = format!("mode=1777,size={size}");
    step(
        "mounting the private /dev/shm",
        mount_tmpfs(&place, libc::MS_NOSUID | libc::MS_NODEV, &options).is_ok(),
    )
}

/// `AT_RECURSIVE` of open_tree(2) and mount_setattr(2).
const AT_RECURSIVE: libc::c_uint = 0x8000;

/// Make the whole tree read-only, with `/tmp` the session's own and the writable and
/// read-only roots bound in place (steps 6 to 10 of the module's flow). Returns what `/tmp`
/// became.
fn read_only_view(plan: &Plan, scratch: Option<Scratch>) -> io::Result<Tmp> {
    // 6. Copies of the roots, from the host's tree. Shortest path first, so that a root inside
    // another one goes on top of it.
    let mut roots: Vec<(&PathBuf, bool)> = plan
        .writable
        .iter()
        .map(|root| (root, true))
        .chain(plan.read_only.iter().map(|root| (root, false)))
        .collect();
    roots.sort_by(|a, b| {
        a.0.components()
            .count()
            .cmp(&b.0.components().count())
            .then(a.cmp(b))
    });
    roots.dedup_by(|a, b| a.0 == b.0);
    let mut copies = Vec::with_capacity(roots.len());
    for (root, writable) in roots {
        if let Some(copy) = clone_tree(root)? {
            if !writable {
                set_read_only(&copy, root)?;
            }
            copies.push((root, copy));
        }
    }
    // 7. The private /tmp.
    let (tmp, tmp_copy) = match scratch {
        Some(scratch) => {
            let tmp = private_tmp(plan, &scratch)?;
            let copy = clone_tree(Path::new("/tmp"))?
                .ok_or_else(|| invalid("/tmp is missing or a link".to_owned()))?;
            drop(scratch);
            (tmp, Some(copy))
        }
        None => (Tmp::Host, None),
    };
    // 8. Everything read-only, then the private /tmp on top.
    step(
        "making / read-only",
        mount_read_only(libc::AT_FDCWD, c"/", AT_RECURSIVE),
    )?;
    if let Some(copy) = tmp_copy {
        let place = open_no_symlinks(Path::new("/tmp"), libc::O_DIRECTORY)?
            .ok_or_else(|| invalid("/tmp is missing or a link".to_owned()))?;
        move_onto(&copy, &place, Path::new("/tmp"))?;
    }
    // 9. The private /dev/shm, before the roots: a root under /dev/shm goes on top of it.
    if let Some(size) = plan.private_shm {
        private_shm(size)?;
    }
    // 10. The roots.
    for (root, copy) in copies {
        let mut place = open_no_symlinks(root, 0)?;
        if place.is_none() {
            // Not in the private /tmp or /dev/shm: make the place to mount it on.
            place = make_mountpoint(&copy, root)?;
        }
        // A place reached through a link, or one a command of the scope spoiled in the private
        // /tmp: this root is not in this view.
        if let Some(place) = place {
            move_onto(&copy, &place, root)?;
        }
    }
    Ok(tmp)
}

/// Make `/tmp` the session's own (step 7 of the module's flow): with `--tmp-overlay`, an
/// overlay of the session's tmpfs over the host's `/tmp`, with the covers under `/tmp` made
/// again on it; otherwise, or where the kernel refuses the overlay, the tmpfs alone.
fn private_tmp(plan: &Plan, scratch: &Scratch) -> io::Result<Tmp> {
    let place = open_no_symlinks(Path::new("/tmp"), libc::O_DIRECTORY)?
        .ok_or_else(|| invalid("/tmp is missing or a link".to_owned()))?;
    let target = fd_path(&place)?;
    let mut refused = None;
    if plan.tmp_overlay {
        let lower = Path::new(std::ffi::OsStr::from_bytes(target.to_bytes()));
        let options = format!(
            "lowerdir={},upperdir={},workdir={},userxattr",
            lower.display(),
            scratch.path(UPPER)?.display(),
            scratch.path(WORK)?.display()
        );
        let options =
            CString::new(options).map_err(|_| invalid("a NUL byte in the overlay".to_owned()))?;
        // SAFETY: NUL-terminated strings for source, target, type and data.
        let mounted = unsafe {
            libc::mount(
                c"overlay".as_ptr(),
                target.as_ptr(),
                c"overlay".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                options.as_ptr().cast(),
            )
        } == 0;
        if mounted {
            // The lower layer is the host's `/tmp` mount alone, without what is mounted
            // beneath it: the covers under `/tmp` are made again on the overlay.
            for path in plan.masks.iter().filter(|path| path.starts_with("/tmp")) {
                mask(path)?;
            }
            let files: Vec<PathBuf> = plan
                .mask_files
                .iter()
                .filter(|path| path.starts_with("/tmp"))
                .cloned()
                .collect();
            cover_files(&files, Some(scratch))?;
            return Ok(Tmp::Overlay);
        }
        refused = Some(io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    let source = c_path(&scratch.path(UPPER)?)?;
    // SAFETY: NUL-terminated strings for source and target; no type or data for a bind.
    let bound = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    } == 0;
    step("mounting the private /tmp", bound)?;
    Ok(Tmp::Private(refused))
}

/// Make the detached `copy` of `path` read-only, with everything mounted inside it.
fn set_read_only(copy: &OwnedFd, path: &Path) -> io::Result<()> {
    let flags = AT_RECURSIVE | libc::AT_EMPTY_PATH as libc::c_uint;
    step(
        &format!("making {} read-only", path.display()),
        mount_read_only(copy.as_raw_fd(), c"", flags),
    )
}

/// `mount_setattr(dir, path, flags)` making the mounts read-only; whether it worked.
fn mount_read_only(dir: RawFd, path: &std::ffi::CStr, flags: libc::c_uint) -> bool {
    let attr = libc::mount_attr {
        attr_set: libc::MOUNT_ATTR_RDONLY,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: an open descriptor (or AT_FDCWD), a NUL-terminated path and a valid
    // mount_attr of the size passed.
    let result = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dir,
            path.as_ptr(),
            flags,
            &raw const attr,
            size_of::<libc::mount_attr>(),
        )
    };
    result == 0
}

/// A detached copy of the mounts at and under `path` (`None`: missing, or reached through a
/// link).
fn clone_tree(path: &Path) -> io::Result<Option<OwnedFd>> {
    let Some(fd) = open_no_symlinks(path, 0)? else {
        return Ok(None);
    };
    let flags = libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC | AT_RECURSIVE;
    // SAFETY: an open descriptor, an empty NUL-terminated path and integer flags.
    let copy = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            fd.as_raw_fd(),
            c"".as_ptr(),
            flags | libc::AT_EMPTY_PATH as libc::c_uint,
        )
    };
    step(
        &format!("copying the mount of {}", path.display()),
        copy >= 0,
    )?;
    let copy = RawFd::try_from(copy).map_err(io::Error::other)?;
    // SAFETY: open_tree returned a new descriptor that nothing else owns.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(copy) }))
}

/// Put the detached `copy` on `place` (which is `target`).
fn move_onto(copy: &OwnedFd, place: &OwnedFd, target: &Path) -> io::Result<()> {
    let flags = libc::MOVE_MOUNT_F_EMPTY_PATH | libc::MOVE_MOUNT_T_EMPTY_PATH;
    // SAFETY: two open descriptors, empty NUL-terminated paths and integer flags.
    let moved = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            copy.as_raw_fd(),
            c"".as_ptr(),
            place.as_raw_fd(),
            c"".as_ptr(),
            flags,
        )
    } == 0;
    step(&format!("mounting {}", target.display()), moved)
}

/// Create `target` in the private `/tmp` or `/dev/shm` as what `copy` is (a directory, or an empty file),
/// and open it. The scope's commands write those: every step is taken beneath the one
/// before, without following a link, and nothing is truncated. `None`: a component is in the
/// way (a file, a link, a pipe).
fn make_mountpoint(copy: &OwnedFd, target: &Path) -> io::Result<Option<OwnedFd>> {
    // SAFETY: `stat` is plain data, filled by fstat on an open descriptor.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: an open descriptor and a valid out-pointer.
    let statted = unsafe { libc::fstat(copy.as_raw_fd(), &raw mut stat) } == 0;
    step("fstat", statted)?;
    // The session's own places, which its commands may write.
    let Some((base, relative)) = ["/tmp", "/dev/shm"].iter().find_map(|base| {
        target
            .strip_prefix(base)
            .ok()
            .map(|relative| (Path::new(base), relative))
    }) else {
        return Ok(None);
    };
    let Some(dir) = open_no_symlinks(base, libc::O_DIRECTORY)? else {
        return Ok(None);
    };
    make_beneath(dir, relative, stat.st_mode & libc::S_IFMT == libc::S_IFDIR)
}

/// Create `relative` beneath `dir` (directories on the way; the last one a directory or an
/// empty file), following no link and truncating nothing, and open it.
fn make_beneath(mut dir: OwnedFd, relative: &Path, is_dir: bool) -> io::Result<Option<OwnedFd>> {
    let parts: Vec<_> = relative.components().collect();
    for (index, part) in parts.iter().enumerate() {
        let std::path::Component::Normal(name) = part else {
            return Ok(None);
        };
        let last = index + 1 == parts.len();
        let name = c_path(Path::new(name))?;
        if last && !is_dir {
            let flags = libc::O_CREAT
                | libc::O_WRONLY
                | libc::O_NOFOLLOW
                | libc::O_NONBLOCK
                | libc::O_CLOEXEC;
            // SAFETY: an open directory descriptor and a NUL-terminated name.
            let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags, 0o644) };
            if fd < 0 {
                return Ok(None);
            }
            // SAFETY: closing the descriptor just opened, owned by nothing else.
            unsafe { libc::close(fd) };
        } else {
            // SAFETY: an open directory descriptor and a NUL-terminated name. It fails when
            // something is there already; what that is, the open below checks.
            unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), 0o755) };
        }
        let flags = if last && !is_dir {
            0
        } else {
            libc::O_DIRECTORY
        };
        let resolve = libc::RESOLVE_BENEATH;
        match open_at(dir.as_raw_fd(), Path::new(part), flags, resolve)? {
            Some(next) => dir = next,
            None => return Ok(None),
        }
    }
    Ok(Some(dir))
}

/// Fork the holder and wait until it is ready (with a PID namespace, it mounts the
/// namespace's own `/proc` first). It keeps `cover`, the file that covers files.
fn hold(pid_namespace: bool, cover: Option<OwnedFd>) -> io::Result<Holder> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    let piped = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == 0;
    step("pipe", piped)?;
    // SAFETY: pipe2 returned two new descriptors that nothing else owns.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // A fork whose child is the host's (CLONE_PARENT): the host reaps the holder when the
    // scope ends, and this helper may exit now.
    // SAFETY: like fork(2) (no new stack: the child continues on a copy of this one); this
    // helper is single-threaded, so the child may do anything after it.
    let child = unsafe {
        libc::syscall(
            libc::SYS_clone,
            libc::CLONE_PARENT | libc::SIGCHLD,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    step("clone", child >= 0)?;
    let child = libc::pid_t::try_from(child).map_err(io::Error::other)?;
    if child == 0 {
        drop(read);
        let error = if pid_namespace { mount_proc() } else { 0 };
        let mut write = std::fs::File::from(write);
        let _ = write.write_all(&error.to_le_bytes());
        drop(write);
        serve_as_holder(cover);
    }
    drop(cover);
    drop(write);
    let mut answer = [0u8; 4];
    io::Read::read_exact(&mut std::fs::File::from(read), &mut answer).map_err(|error| {
        io::Error::new(error.kind(), format!("the holder did not start: {error}"))
    })?;
    let error = i32::from_le_bytes(answer);
    Ok(Holder {
        pid: child,
        tmp: Tmp::Host,
        sockets: Vec::new(),
        pid_namespace: match (pid_namespace, error) {
            (false, _) => Ok(false),
            (true, 0) => Ok(true),
            (true, errno) => Err(format!(
                "mounting its /proc: {}",
                io::Error::from_raw_os_error(errno)
            )),
        },
    })
}

/// Mount the PID namespace's own `/proc` (in the holder, its init); the errno, or 0.
fn mount_proc() -> i32 {
    // SAFETY: NUL-terminated strings for source, target and type; no data.
    let mounted = unsafe {
        libc::mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        )
    } == 0;
    if mounted {
        0
    } else {
        io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    }
}

/// The holder's descriptor of the file that covers files (see [`serve_as_holder`]).
const HOLDER_COVER: RawFd = 3;

/// The longest request the holder takes (a path and its end byte).
const MOST_REQUEST: usize = libc::PATH_MAX as usize + 1;

/// The holder's life:
///
/// 1. It lets go of everything of the host's but its stdin, and keeps `cover` as
///    [`HOLDER_COVER`].
/// 2. It reaps whatever is re-parented to it (as a PID namespace's init).
/// 3. It covers each path the host asks for on its stdin ([`helper::COVER_END`]), and
///    answers with the error number (0: covered).
/// 4. It exits at end-of-file on stdin (the host ended the scope, or died).
fn serve_as_holder(cover: Option<OwnedFd>) -> ! {
    // Let go of the host's pipes but stdin, and of the working directory.
    if let Ok(null) = std::fs::File::options().write(true).open("/dev/null") {
        for fd in [1, 2] {
            // SAFETY: dup2 onto our own stdio descriptors; `null` stays open across the calls.
            unsafe { libc::dup2(null.as_raw_fd(), fd) };
        }
    }
    let _ = std::env::set_current_dir("/");
    let has_cover = cover.as_ref().is_some_and(|cover| {
        // SAFETY: dup2 onto a descriptor number this process keeps; `cover` stays open across
        // the call (dup2 of a descriptor onto itself leaves it as it is).
        unsafe { libc::dup2(cover.as_raw_fd(), HOLDER_COVER) == HOLDER_COVER }
    });
    std::mem::forget(cover);
    // Nothing else of the host's (the helper was started without closing what the host left
    // open without close-on-exec).
    // SAFETY: integer arguments; closes this process's descriptors past the cover.
    unsafe { libc::syscall(libc::SYS_close_range, 4u32, libc::c_uint::MAX, 0u32) };
    if !has_cover {
        // SAFETY: closes a descriptor number this process does not use.
        unsafe { libc::close(HOLDER_COVER) };
    }
    let mut requests: Vec<u8> = Vec::new();
    // SAFETY: sigset_t is plain data, initialised by sigemptyset before use.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t; blocking SIGCHLD lets the signalfd below take it.
    let signals = unsafe {
        libc::sigemptyset(&raw mut set);
        libc::sigaddset(&raw mut set, libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_BLOCK, &raw const set, std::ptr::null_mut());
        libc::signalfd(-1, &raw const set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK)
    };
    loop {
        let mut fds = [
            libc::pollfd {
                fd: 0,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: signals,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: `fds` is a valid array of two pollfd structures (a negative fd is ignored).
        unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if fds[1].revents != 0 {
            let mut info = [0u8; 128];
            // SAFETY: `info` is a valid, writable buffer of its length.
            while unsafe { libc::read(signals, info.as_mut_ptr().cast(), info.len()) } > 0 {}
            let mut status = 0;
            // SAFETY: `status` is a valid out-pointer; WNOHANG never blocks.
            while unsafe { libc::waitpid(-1, &raw mut status, libc::WNOHANG) } > 0 {}
        }
        if fds[0].revents != 0 {
            let mut bytes = [0u8; 1024];
            // SAFETY: `bytes` is a valid, writable buffer of its length.
            let read = unsafe { libc::read(0, bytes.as_mut_ptr().cast(), bytes.len()) };
            let interrupted =
                read < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted;
            if read <= 0 && !interrupted {
                // SAFETY: ends this process; as the init of a PID namespace, every process
                // left in it goes too.
                unsafe { libc::_exit(0) };
            }
            let read = usize::try_from(read).unwrap_or(0);
            requests.extend_from_slice(&bytes[..read]);
            while let Some(end) = requests.iter().position(|&b| b == helper::COVER_END) {
                let errno = cover_late(&requests[..end], has_cover);
                requests.drain(..=end);
                answer(errno);
            }
            if requests.len() > MOST_REQUEST {
                requests.clear();
                answer(libc::ENAMETOOLONG);
            }
        }
    }
}

/// Write the answer to a request on the holder's stdin (a socket); a host that no longer
/// reads ends the holder through end-of-file.
fn answer(errno: i32) {
    let bytes = errno.to_ne_bytes();
    // SAFETY: `bytes` is a valid buffer of its length; fd 0 is the holder's stdin.
    unsafe { libc::write(0, bytes.as_ptr().cast(), bytes.len()) };
}

/// Cover `path`, a hidden path that appeared after the view was made (in the holder): a
/// directory with an empty read-only tmpfs of mode 000, a regular file with the cover file
/// (when `has_cover`). The error number, or 0.
fn cover_late(path: &[u8], has_cover: bool) -> i32 {
    let path = Path::new(std::ffi::OsStr::from_bytes(path));
    if !path.is_absolute() {
        return libc::EINVAL;
    }
    let errno = |error: io::Error| error.raw_os_error().unwrap_or(libc::EIO);
    let fd = match open_no_symlinks(path, 0) {
        Ok(Some(fd)) => fd,
        // Missing, or reached through a link: nothing safe to cover.
        Ok(None) if std::fs::symlink_metadata(path).is_ok() => return libc::ELOOP,
        Ok(None) => return libc::ENOENT,
        Err(error) => return errno(error),
    };
    let Ok(target) = fd_path(&fd) else {
        return libc::EINVAL;
    };
    let through_fd = Path::new(std::ffi::OsStr::from_bytes(target.to_bytes()));
    let kind = match std::fs::metadata(through_fd) {
        Ok(meta) => meta.file_type(),
        Err(error) => return errno(error),
    };
    if kind.is_dir() {
        return match mask_dir(&fd) {
            Ok(()) => 0,
            Err(error) => errno(error),
        };
    }
    if !kind.is_file() || !has_cover {
        return libc::EINVAL;
    }
    let Ok(source) = CString::new(format!("/proc/self/fd/{HOLDER_COVER}")) else {
        return libc::EINVAL;
    };
    if bind(&source, &target) {
        0
    } else {
        errno(io::Error::last_os_error())
    }
}

/// Bring up the network namespace's loopback interface.
fn loopback_up() -> io::Result<()> {
    // SAFETY: integer arguments; returns a new descriptor or -1.
    let socket = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    step("socket for the loopback", socket >= 0)?;
    // SAFETY: ifreq is plain data; zeroed is a valid value.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo\0") {
        *slot = *byte as libc::c_char;
    }
    // SAFETY: `request` is a valid ifreq naming `lo`; the kernel fills in its flags.
    let got =
        unsafe { libc::ioctl(socket, libc::SIOCGIFFLAGS as libc::Ioctl, &raw mut request) } == 0;
    let result = step("reading the loopback's flags", got).and_then(|()| {
        // SAFETY: reading and writing the flags member of the union the kernel just filled.
        unsafe {
            request.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        }
        // SAFETY: `request` is a valid ifreq naming `lo` with the new flags.
        let set = unsafe {
            libc::ioctl(
                socket,
                libc::SIOCSIFFLAGS as libc::Ioctl,
                &raw const request,
            )
        } == 0;
        step("bringing the loopback up", set)
    });
    // SAFETY: closing the descriptor opened above, owned by nothing else.
    unsafe { libc::close(socket) };
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn mountpoints_are_made_beneath_without_following_links_or_truncating() {
        let tmp = tempfile_dir();
        let outside = tmp.join("outside");
        std::fs::create_dir(&outside).expect("outside");
        std::fs::write(outside.join("file"), "keep").expect("file");
        let root = tmp.join("private");
        std::fs::create_dir(&root).expect("private");
        std::os::unix::fs::symlink(&outside, root.join("link")).expect("link");
        std::os::unix::fs::symlink(outside.join("file"), root.join("filelink")).expect("link");
        let open = || {
            open_no_symlinks(&root, libc::O_DIRECTORY)
                .expect("open")
                .expect("dir")
        };
        let made = |relative: &str, is_dir: bool| {
            make_beneath(open(), Path::new(relative), is_dir).expect("make")
        };
        assert!(made("a/b/ws", true).is_some());
        assert!(root.join("a/b/ws").is_dir());
        assert!(made("a/file", false).is_some());
        assert!(root.join("a/file").is_file());
        // A link on the way or at the end is not followed, and nothing is truncated.
        assert!(made("link/ws", true).is_none());
        assert!(made("filelink", false).is_none());
        assert!(!outside.join("ws").exists());
        assert_eq!(
            std::fs::read_to_string(outside.join("file")).expect("read"),
            "keep"
        );
        // A file where a directory is needed.
        assert!(made("a/file/ws", true).is_none());
        std::fs::remove_dir_all(&tmp).expect("clean up");
    }

    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "toolhost-keeper-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir
    }

    #[test]
    fn only_denials_are_labelled() {
        let denied = label_denial(POWERLESS, io::Error::from_raw_os_error(libc::EPERM));
        assert!(denied.to_string().starts_with(POWERLESS), "{denied}");
        let denied = label_denial(POWERLESS, io::Error::from_raw_os_error(libc::EACCES));
        assert!(denied.to_string().starts_with(POWERLESS), "{denied}");
        let other = label_denial(POWERLESS, io::Error::from_raw_os_error(libc::ENOENT));
        assert!(!other.to_string().starts_with(POWERLESS), "{other}");
    }

    #[test]
    fn the_plan_takes_absolute_paths_and_known_options_only() {
        let plan = Plan::parse(&args(&[
            "--net",
            "--pid",
            "--mask=/home/u/.ssh",
            "--writable=/work",
            "--private-tmp=/tmp/toolhost-1-x",
            "--tmp-size=1048576",
            "--tmp-overlay",
            "--read-only=/work/.git/hooks",
        ]))
        .expect("plan");
        assert!(plan.net && plan.pid && plan.tmp_overlay);
        assert_eq!(plan.tmp_size, Some(1_048_576));
        assert_eq!(plan.read_only, [PathBuf::from("/work/.git/hooks")]);
        assert_eq!(plan.masks, [PathBuf::from("/home/u/.ssh")]);
        assert_eq!(plan.writable, [PathBuf::from("/work")]);
        assert_eq!(plan.private_tmp, Some(PathBuf::from("/tmp/toolhost-1-x")));
        for bad in [
            &["--writable=work"][..],
            &["--mask=.ssh"],
            &["--read-only=hooks"],
            &["--tmp-size=0"],
            &["--tmp-size=1k"],
            &["--bogus"],
        ] {
            assert!(Plan::parse(&args(bad)).is_err(), "{bad:?}");
        }
    }
}
