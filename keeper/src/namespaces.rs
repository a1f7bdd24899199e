//! The namespaces of a scope's confined commands, made once per scope and profile by a keeper
//! run in a helper mode, and joined by every command of that profile (`--namespaces=N`, see
//! `confine.rs`).
//!
//! `toolhost-keeper --make-namespaces [--net] [--mask=PATH]...`: unshare a user namespace
//! (mapping only the caller's own user and group to themselves, so files keep their owners and
//! nothing gains privileges outside), a mount namespace, and with `--net` a network namespace
//! with only its own loopback (brought up). In the mount namespace every `--mask` path that is a
//! directory is covered by an empty, read-only, mode-000 tmpfs, so that not even the names
//! inside show (anything else is left alone: Landlock keeps it out of reach). Then it prints
//! `ready` on stdout and waits for end-of-file on stdin, while the host opens
//! `/proc/PID/ns/{user,mnt,net}`; the descriptors keep the namespaces alive after the helper
//! exits. On failure it prints `error: ...` and exits non-zero.

use std::ffi::{CString, OsString};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// Run the helper mode with the arguments after `--make-namespaces`.
pub(crate) fn make(args: &[OsString]) -> io::Result<()> {
    let mut net = false;
    let mut masks = Vec::new();
    for arg in args {
        let bytes = arg.as_bytes();
        if bytes == b"--net" {
            net = true;
        } else if let Some(path) = bytes.strip_prefix(b"--mask=") {
            masks.push(PathBuf::from(std::ffi::OsStr::from_bytes(path)));
        } else {
            return Err(invalid(format!(
                "unknown option `{}`",
                arg.to_string_lossy()
            )));
        }
    }
    let mut stdout = io::stdout().lock();
    match setup(net, &masks) {
        Ok(()) => writeln!(stdout, "ready")?,
        Err(error) => {
            writeln!(stdout, "error: {error}")?;
            return Err(error);
        }
    }
    stdout.flush()?;
    // Wait until the host has what it needs (it closes our stdin).
    let mut rest = Vec::new();
    let _ = io::stdin().read_to_end(&mut rest);
    Ok(())
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

fn setup(net: bool, masks: &[PathBuf]) -> io::Result<()> {
    // SAFETY: getuid and getgid take no arguments and cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut flags = libc::CLONE_NEWUSER | libc::CLONE_NEWNS;
    if net {
        flags |= libc::CLONE_NEWNET;
    }
    // SAFETY: an integer argument; this helper is single-threaded, as unshare(CLONE_NEWUSER)
    // requires.
    step("unshare", unsafe { libc::unshare(flags) } == 0)?;
    write_file("/proc/self/setgroups", "deny")?;
    write_file("/proc/self/uid_map", &format!("{uid} {uid} 1"))?;
    write_file("/proc/self/gid_map", &format!("{gid} {gid} 1"))?;
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
    step("making / private", private)?;
    for path in masks {
        mask(path)?;
    }
    if net {
        loopback_up()?;
    }
    Ok(())
}

fn write_file(path: &str, text: &str) -> io::Result<()> {
    std::fs::write(path, text)
        .map_err(|error| io::Error::new(error.kind(), format!("{path}: {error}")))
}

fn c_path(path: &std::path::Path) -> io::Result<CString> {
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

/// Cover `path`, if it is a directory reached without following any symbolic link, with an
/// empty read-only tmpfs (mode 000). The directory is opened first (`openat2` with
/// `RESOLVE_NO_SYMLINKS`) and the cover mounted on that very directory through its descriptor,
/// so a path changed meanwhile cannot move the cover elsewhere.
fn mask(path: &std::path::Path) -> io::Result<()> {
    let target = c_path(path)?;
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: libc::RESOLVE_NO_SYMLINKS,
    };
    // SAFETY: a NUL-terminated path and a valid open_how of the size passed.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            target.as_ptr(),
            &raw const how,
            std::mem::size_of::<OpenHow>(),
        )
    };
    let name = format!("masking {}", path.display());
    let target = if fd >= 0 {
        c_path(std::path::Path::new(&format!("/proc/self/fd/{fd}")))?
    } else {
        match io::Error::last_os_error().raw_os_error() {
            // Missing, not a directory, or reached through a link: nothing to cover here
            // (Landlock keeps it out of reach).
            Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP | libc::EXDEV) => return Ok(()),
            // A kernel before 5.6: the path as it is now.
            Some(libc::ENOSYS) if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) => {
                target
            }
            Some(libc::ENOSYS) => return Ok(()),
            _ => return step(&name, false),
        }
    };
    // SAFETY: NUL-terminated strings for source, target, type and data.
    let ok = unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            target.as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            c"mode=000,size=4k".as_ptr().cast(),
        )
    } == 0;
    let result = step(&name, ok);
    if fd >= 0 {
        // SAFETY: closing the descriptor opened above, owned by nothing else.
        unsafe { libc::close(fd as libc::c_int) };
    }
    result
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
    let got = unsafe { libc::ioctl(socket, libc::SIOCGIFFLAGS, &raw mut request) } == 0;
    let result = step("reading the loopback's flags", got).and_then(|()| {
        // SAFETY: reading and writing the flags member of the union the kernel just filled.
        unsafe {
            request.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        }
        // SAFETY: `request` is a valid ifreq naming `lo` with the new flags.
        let set = unsafe { libc::ioctl(socket, libc::SIOCSIFFLAGS, &raw const request) } == 0;
        step("bringing the loopback up", set)
    });
    // SAFETY: closing the descriptor opened above, owned by nothing else.
    unsafe { libc::close(socket) };
    result
}
