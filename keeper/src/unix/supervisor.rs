//! Steps 2 to 8 of the supervision: the supervisor's threads, and the checks each `connect`
//! goes through.
//!
//! [`Supervisor::receive`] takes each notification in the keeper's main loop.
//! [`handle`] checks one call, and makes the connection for the caller.
//! A refusal is `EPERM`, reported to the host on the status pipe.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;

use toolhost_keeper_protocol::{MAX_REFUSED_NAME, UNIX_REFUSED};

use super::abstract_names::abstract_in_tree;
use super::places::{Places, session_device};
use super::sock_diag::bound_in_place;

/// What the supervisor threads share.
struct Shared {
    listener: OwnedFd,
    places: Places,
    /// The status pipe's write end, for [`UNIX_REFUSED`] messages.
    status: RawFd,
}

/// Step 2: the notifications of a listener, received by the keeper's main loop (no thread of
/// their own: a thread per command cost its stack's mapping and the TLB shootdowns of every
/// later `munmap` in the keeper).
pub(crate) struct Supervisor {
    shared: &'static Shared,
}

/// What [`Supervisor::receive`] found.
pub(crate) enum Received {
    /// A notification was taken (and is being handled), or none was there after all.
    Served,
    /// No process is left under the filter, or the listener is unusable: stop polling it.
    Done,
}

/// Supervise the connects notified on `listener`, with `places` and refusals reported on
/// `status`.
pub(crate) fn serve(listener: OwnedFd, places: Places, status: RawFd) -> Supervisor {
    let shared: &'static Shared = Box::leak(Box::new(Shared {
        listener,
        places,
        status,
    }));
    Supervisor { shared }
}

impl Supervisor {
    /// The listener, for the keeper's `poll`: readable when a notification is pending, hung
    /// up (`POLLHUP`) when no process is left under the filter.
    pub(crate) fn fd(&self) -> RawFd {
        self.shared.listener.as_raw_fd()
    }

    /// Once the listener polled readable or hung up:
    ///
    /// 1. On `POLLHUP` alone, stop: receiving would fail at once with `ENOENT` from now on.
    /// 2. Receive the notification; `ENOENT` then means its caller went away meanwhile.
    /// 3. Handle it on a thread of its own, with every signal blocked (the keeper's main
    ///    thread takes them, and a `connect` made for the command is not interrupted by
    ///    them): a blocking connect (TCP to a slow host) must not hold the keeper back.
    pub(crate) fn receive(&self, revents: libc::c_short) -> Received {
        let shared = self.shared;
        if revents & libc::POLLIN == 0 {
            return Received::Done;
        }
        // SAFETY: seccomp_notif is plain data; the kernel wants it zeroed.
        let mut request: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: `request` is a valid, writable seccomp_notif for the ioctl.
        let received = unsafe {
            libc::ioctl(
                shared.listener.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_RECV,
                &raw mut request,
            )
        };
        if received != 0 {
            return match io::Error::last_os_error().raw_os_error() {
                // Interrupted, or the caller went away before it was received.
                Some(libc::EINTR | libc::ENOENT) => Received::Served,
                // No process is left under the filter, or the listener is gone.
                _ => Received::Done,
            };
        }
        // SAFETY: sigset_t is plain data, filled by sigfillset.
        let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `all` is a valid sigset_t.
        unsafe { libc::sigfillset(&raw mut all) };
        // SAFETY: sigset_t is plain data; `old` is filled by pthread_sigmask.
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: valid sigset pointers; blocks signals in this thread while spawning, so the
        // new thread starts with them blocked.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &raw const all, &raw mut old) };
        let handled = std::thread::Builder::new().spawn(move || {
            let result = handle(shared, &request);
            respond(shared, request.id, result);
        });
        // SAFETY: restoring this thread's mask as it was.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &raw const old, std::ptr::null_mut()) };
        if handled.is_err() {
            respond(shared, request.id, Err(libc::EAGAIN));
        }
        Received::Served
    }
}

/// Answer notification `id`: `Ok(())` is a successful connect, `Err(errno)` its failure.
fn respond(shared: &Shared, id: u64, result: Result<(), i32>) {
    let response = libc::seccomp_notif_resp {
        id,
        val: 0,
        error: match result {
            Ok(()) => 0,
            Err(errno) => -errno,
        },
        flags: 0,
    };
    // SAFETY: `response` is a valid seccomp_notif_resp for the ioctl. ENOENT (the caller was
    // killed meanwhile) needs nothing more.
    unsafe {
        libc::ioctl(
            shared.listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SEND,
            &raw const response,
        )
    };
}

/// Whether notification `id` is still pending (its caller alive, its pid not reused).
fn still_valid(shared: &Shared, id: u64) -> bool {
    // SAFETY: `id` is a valid u64 for the ioctl.
    unsafe {
        libc::ioctl(
            shared.listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_ID_VALID,
            &raw const id,
        ) == 0
    }
}

fn errno(error: &io::Error) -> i32 {
    error.raw_os_error().unwrap_or(libc::EPERM)
}

/// Steps 3 to 7 for one `connect(fd, addr, len)`.
fn handle(shared: &Shared, request: &libc::seccomp_notif) -> Result<(), i32> {
    let pid = request.pid.cast_signed();
    let [fd, address, length, ..] = request.data.args;
    let fd = i32::try_from(fd).map_err(|_| libc::EBADF)?;
    let length = usize::try_from(length).map_err(|_| libc::EINVAL)?;
    // As the kernel: an address longer than a sockaddr_storage is invalid.
    if length > size_of::<libc::sockaddr_storage>() {
        return Err(libc::EINVAL);
    }
    let mut bytes = vec![0u8; length];
    if length > 0 {
        let local = libc::iovec {
            iov_base: bytes.as_mut_ptr().cast(),
            iov_len: length,
        };
        let remote = libc::iovec {
            iov_base: address as *mut libc::c_void,
            iov_len: length,
        };
        // SAFETY: `local` covers `bytes`, writable; the remote range is only read by the
        // kernel in the caller's memory.
        let read =
            unsafe { libc::process_vm_readv(pid, &raw const local, 1, &raw const remote, 1, 0) };
        if read < 0 {
            let error = io::Error::last_os_error();
            match error.raw_os_error() {
                Some(libc::EFAULT) => return Err(libc::EFAULT),
                // The caller is gone: nobody reads the answer.
                Some(libc::ESRCH) => return Err(libc::EINTR),
                _ => {}
            }
            return Err(refuse(
                shared,
                "(the caller's memory cannot be read)",
                &error,
            ));
        }
        if usize::try_from(read).ok() != Some(length) {
            return Err(libc::EFAULT);
        }
    }
    // The pid named the caller when the memory was read.
    if !still_valid(shared, request.id) {
        return Err(libc::EINTR);
    }
    let socket = caller_socket(pid, fd).map_err(|error| match error.raw_os_error() {
        Some(libc::EBADF) => libc::EBADF,
        Some(libc::ESRCH | libc::ENOENT) if !still_valid(shared, request.id) => libc::EINTR,
        _ => refuse(shared, "(the caller's socket cannot be taken)", &error),
    })?;
    if !still_valid(shared, request.id) {
        return Err(libc::EINTR);
    }
    let family = bytes
        .get(..2)
        .map(|raw| libc::sa_family_t::from_ne_bytes([raw[0], raw[1]]));
    if family != Some(libc::AF_UNIX as libc::sa_family_t) || length <= 2 {
        return connect(&socket, &bytes);
    }
    let path = &bytes[2..];
    if path[0] == 0 {
        // Abstract: the name is every byte after the first.
        let name = &path[1..];
        if abstract_in_tree(name) {
            return connect(&socket, &bytes);
        }
        let shown: Vec<u8> = std::iter::once(b'@')
            .chain(name.iter().map(|&b| if b == 0 { b'@' } else { b }))
            .collect();
        report(shared, &shown);
        return Err(libc::EPERM);
    }
    let end = path.iter().position(|&b| b == 0).unwrap_or(path.len());
    let path = &path[..end];
    let pinned = pin(pid, path, request.id, shared)?;
    let meta = pinned.metadata().map_err(|error| errno(&error))?;
    use std::os::unix::fs::FileTypeExt;
    if !meta.file_type().is_socket() {
        return Err(libc::ECONNREFUSED);
    }
    let location = std::fs::read_link(format!("/proc/self/fd/{}", pinned.as_raw_fd()))
        .map_err(|error| errno(&error))?;
    let allowed = shared
        .places
        .allows(&location, meta.dev(), meta.nlink(), || {
            shared
                .places
                .session_tmp
                .as_deref()
                .and_then(session_device)
        });
    let in_tmp = shared
        .places
        .session_tmp
        .as_ref()
        .is_some_and(|tmp| location.starts_with(tmp));
    if !allowed
        || (shared.places.check_binding && !in_tmp && !bound_in_place(&shared.places, &meta))
    {
        report(shared, path);
        return Err(libc::EPERM);
    }
    let through = format!("/proc/self/fd/{}", pinned.as_raw_fd());
    let mut address = Vec::with_capacity(2 + through.len() + 1);
    address.extend_from_slice(&(libc::AF_UNIX as libc::sa_family_t).to_ne_bytes());
    address.extend_from_slice(through.as_bytes());
    address.push(0);
    connect(&socket, &address)
}

/// Report a refusal that is not about the address (the caller cannot be inspected) and
/// return its errno.
fn refuse(shared: &Shared, what: &str, error: &io::Error) -> i32 {
    eprintln!("toolhost-keeper: a connect is refused: {what}: {error}");
    report(shared, what.as_bytes());
    libc::EPERM
}

/// Tell the host that the socket named `name` was refused ([`UNIX_REFUSED`]). One write,
/// shorter than `PIPE_BUF`, so it does not interleave with another.
fn report(shared: &Shared, name: &[u8]) {
    let name = &name[..name.len().min(MAX_REFUSED_NAME)];
    let length = u16::try_from(name.len()).unwrap_or(u16::MAX);
    let mut message = Vec::with_capacity(3 + name.len());
    message.push(UNIX_REFUSED);
    message.extend_from_slice(&length.to_le_bytes());
    message.extend_from_slice(name);
    // SAFETY: `message` is a valid buffer of its length; the status pipe stays open for the
    // keeper's life. A failure means the host is gone.
    unsafe { libc::write(shared.status, message.as_ptr().cast(), message.len()) };
}

/// `PIDFD_THREAD` (Linux 6.9): a pidfd of a thread, not only of a thread group's leader.
const PIDFD_THREAD: libc::c_uint = libc::O_EXCL as libc::c_uint;

/// The caller's descriptor `fd`, by `pidfd_getfd`. The notification names the calling
/// *thread*: its own pidfd where the kernel makes one (`PIDFD_THREAD`), else its thread
/// group's (`Tgid` in `/proc/TID/status`).
fn caller_socket(tid: libc::pid_t, fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: integer arguments; returns a new descriptor or -1.
    let mut pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, tid, PIDFD_THREAD) };
    if pidfd < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
        let status = std::fs::read_to_string(format!("/proc/{tid}/status"))?;
        let tgid: libc::pid_t = status
            .lines()
            .find_map(|line| line.strip_prefix("Tgid:"))
            .and_then(|tgid| tgid.trim().parse().ok())
            .ok_or_else(|| io::Error::other("no Tgid"))?;
        // SAFETY: integer arguments; returns a new descriptor or -1.
        pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, tgid, 0) };
    }
    if pidfd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a pidfd just opened, ours alone.
    let pidfd = unsafe { OwnedFd::from_raw_fd(i32::try_from(pidfd).map_err(io::Error::other)?) };
    // SAFETY: integer arguments; returns a new descriptor (close-on-exec) or -1.
    let socket = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    if socket < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor just installed for us.
    Ok(unsafe { OwnedFd::from_raw_fd(i32::try_from(socket).map_err(io::Error::other)?) })
}

/// Open `path` (`O_PATH`, following links as `connect` does) from the caller's working
/// directory. The caller cannot change its root (seccomp refuses `chroot` and `pivot_root`),
/// so its root is the keeper's.
fn pin(pid: libc::pid_t, path: &[u8], id: u64, shared: &Shared) -> Result<File, i32> {
    let mut name = path.to_vec();
    name.push(0);
    let base = if path.first() == Some(&b'/') {
        None
    } else {
        let cwd = File::open(format!("/proc/{pid}/cwd")).map_err(|error| errno(&error))?;
        // The cwd is the caller's, not a process's that took its pid.
        if !still_valid(shared, id) {
            return Err(libc::EINTR);
        }
        Some(cwd)
    };
    let dir = base.as_ref().map_or(libc::AT_FDCWD, AsRawFd::as_raw_fd);
    // SAFETY: `name` is NUL-terminated; `dir` is AT_FDCWD or an open directory.
    let fd = unsafe { libc::openat(dir, name.as_ptr().cast(), libc::O_PATH | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(errno(&io::Error::last_os_error()));
    }
    // SAFETY: a descriptor just opened, ours alone.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// `connect(socket, address)`. Signals are blocked on the supervisor's threads, so it is not
/// interrupted; it is not retried (a connect retried after `EINTR` reports `EALREADY`).
fn connect(socket: &OwnedFd, address: &[u8]) -> Result<(), i32> {
    let length = libc::socklen_t::try_from(address.len()).map_err(|_| libc::EINVAL)?;
    // SAFETY: sockaddr_storage is plain data.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    if address.len() > size_of_val(&storage) {
        return Err(libc::EINVAL);
    }
    // SAFETY: `address` fits in `storage` (checked above); both are valid for the copy.
    unsafe {
        std::ptr::copy_nonoverlapping(
            address.as_ptr(),
            (&raw mut storage).cast::<u8>(),
            address.len(),
        );
    }
    let pointer = if address.is_empty() {
        std::ptr::null()
    } else {
        (&raw const storage).cast::<libc::sockaddr>()
    };
    // SAFETY: `pointer` is null with length 0, or points at `length` valid bytes.
    if unsafe { libc::connect(socket.as_raw_fd(), pointer, length) } == 0 {
        return Ok(());
    }
    Err(errno(&io::Error::last_os_error()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;
    use std::time::Duration;

    /// Once no process is left under the filter, the listener hangs up and the supervisor is
    /// done: receiving then fails at once, and a loop on it would spin at full speed until the
    /// keeper exits. The filter is installed by a thread of the test, which then exits.
    #[test]
    fn the_supervisor_ends_once_no_process_is_left_under_the_filter() {
        let (ours, theirs) = UnixStream::pair().expect("socket pair");
        let installer = std::thread::spawn(move || {
            // SAFETY: prctl with PR_SET_NO_NEW_PRIVS affects this thread only (and what it
            // would start); the thread ends right after.
            unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
            super::super::filter::install(theirs.as_raw_fd(), &super::super::filter::program())
        });
        installer
            .join()
            .expect("the installing thread")
            .expect("the filter installed");
        let listener =
            super::super::filter::receive_listener(ours.as_raw_fd()).expect("the listener");
        let supervisor = serve(listener, Places::default(), -1);
        let mut pending = libc::pollfd {
            fd: supervisor.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let limit = i32::try_from(Duration::from_secs(10).as_millis()).expect("ms");
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&raw mut pending, 1, limit) };
        assert_eq!(
            ready, 1,
            "the listener did not hang up with nobody under its filter"
        );
        assert!(
            matches!(supervisor.receive(pending.revents), Received::Done),
            "the supervisor goes on with nobody under its filter"
        );
    }
}
