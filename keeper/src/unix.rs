//! The keeper as the supervisor of the command's `connect` calls (`--unix-supervise`).
//!
//! Landlock below ABI 9 does not look at `connect` on a pathname Unix socket, so a confined
//! command could reach any socket of the host's user (a credential daemon, Docker).
//! The host's seccomp filter refuses Unix datagram sockets (`socket` and `socketpair`), the only
//! kind that reaches a pathname socket without `connect`.
//! Every `connect` then goes through the keeper:
//!
//! 1. The command's process, between `fork` and `exec`, installs [`program`] with
//!    `SECCOMP_FILTER_FLAG_NEW_LISTENER` ([`install`]), sends the listener to the keeper over a
//!    socket pair and closes it: the command never holds it.
//! 2. The keeper's supervisor thread receives each notification ([`serve`]), and a thread of
//!    its own handles it ([`handle`]).
//! 3. It copies the address from the caller's memory (`process_vm_readv`), then checks that
//!    the notification is still valid (the pid was not reused).
//! 4. It takes the caller's socket with `pidfd_getfd`: the same open file description, so
//!    non-blocking mode, options and bind are the caller's.
//! 5. A pathname address is opened `O_PATH` from the caller's working directory and checked
//!    where it leads ([`Places::allows`]); the keeper connects the caller's socket to the
//!    pinned descriptor through `/proc/self/fd/N`, so the inode checked is the inode reached.
//! 6. An abstract address is allowed only when every socket bound to that name in the network
//!    namespace is held by a process of the command's tree (Landlock's scoping, which the
//!    keeper's own connect would not get).
//! 7. Any other address (TCP, UDP) is connected as given.
//! 8. The keeper answers with the result; a refusal is `EPERM`, and it is reported to the host
//!    on the status pipe ([`UNIX_REFUSED`]).
//!
//! The keeper never answers `SECCOMP_USER_NOTIF_FLAG_CONTINUE`: the kernel would read the
//! address and the descriptor table again, after the check.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

use crate::fds::{Received, receive_with_fds, send_with_fds};
use toolhost_keeper_protocol::{MAX_REFUSED_NAME, UNIX_REFUSED, option};

/// `AUDIT_ARCH_*` of this build (linux/audit.h).
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xc000_00b7;
#[cfg(target_arch = "riscv64")]
const AUDIT_ARCH: u32 = 0xc000_00f3;
/// x32 system calls share x86_64's audit architecture, with this bit in their number.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// Offsets in `struct seccomp_data`.
const NR_OFFSET: u32 = 0;
const ARCH_OFFSET: u32 = 4;

const fn statement(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

const fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The filter: `connect` goes to the supervisor, everything else is allowed (the host's
/// filters decide on it). Another architecture kills the process, as the host's filters do;
/// an x32 system call is refused (`EPERM`), so that x32's `connect` cannot pass unseen.
pub(crate) fn program() -> Vec<libc::sock_filter> {
    const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const JEQ: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const RET: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    let connect = u32::try_from(libc::SYS_connect).unwrap_or(u32::MAX);
    let mut program = vec![
        statement(LD_W_ABS, ARCH_OFFSET),
        // Not this architecture: to the kill at the end.
        jump(JEQ, AUDIT_ARCH, 0, 0),
        statement(LD_W_ABS, NR_OFFSET),
    ];
    #[cfg(target_arch = "x86_64")]
    {
        const JSET: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
        // x32: to the refusal.
        program.push(jump(JSET, X32_SYSCALL_BIT, 0, 0));
    }
    program.extend([
        jump(JEQ, connect, 1, 0),
        statement(RET, libc::SECCOMP_RET_ALLOW),
        statement(RET, libc::SECCOMP_RET_USER_NOTIF),
        statement(RET, libc::SECCOMP_RET_ERRNO | libc::EPERM.cast_unsigned()),
        statement(RET, libc::SECCOMP_RET_KILL_PROCESS),
    ]);
    // Fill in the forward jumps to the last two statements.
    let last = program.len() - 1;
    let arch_check = 1;
    program[arch_check].jf = u8::try_from(last - arch_check - 1).unwrap_or(u8::MAX);
    #[cfg(target_arch = "x86_64")]
    {
        let x32_check = 3;
        program[x32_check].jt = u8::try_from(last - 1 - x32_check - 1).unwrap_or(u8::MAX);
    }
    program
}

/// Step 1, in the command's process before `exec`: install [`program`] and send its listener
/// over `channel` (the child's end of a socket pair), then close it. `NO_NEW_PRIVS` is set.
pub(crate) fn install(channel: RawFd) -> io::Result<()> {
    let filter = program();
    let fprog = libc::sock_fprog {
        len: u16::try_from(filter.len()).unwrap_or(u16::MAX),
        filter: filter.as_ptr().cast_mut(),
    };
    let mut listener = -1;
    // A signal while the supervisor handles a call no longer interrupts it (Linux 5.19); older
    // kernels refuse the flag, and get the filter without it.
    for flags in [
        libc::SECCOMP_FILTER_FLAG_NEW_LISTENER | libc::SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV,
        libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
    ] {
        // SAFETY: `fprog` points at `filter`'s instructions, alive for the call; the kernel
        // copies the program.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                flags,
                &raw const fprog,
            )
        };
        if fd >= 0 {
            listener = i32::try_from(fd).map_err(io::Error::other)?;
            break;
        }
        if io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
            return Err(io::Error::last_os_error());
        }
    }
    if listener < 0 {
        return Err(io::Error::last_os_error());
    }
    let sent = send_with_fds(channel, &[0], &[listener]);
    // SAFETY: closing the listener, ours alone: the command must never hold it.
    unsafe { libc::close(listener) };
    sent
}

/// In the keeper after the command started: the listener the command's process sent on
/// `channel` (the keeper's end).
pub(crate) fn receive_listener(channel: RawFd) -> io::Result<OwnedFd> {
    let no_listener = || io::Error::other("the command's process sent no listener");
    let mut byte = [0u8; 1];
    let received = receive_with_fds(channel, &mut byte, libc::MSG_DONTWAIT);
    match received {
        Ok(Received { read: 1, fds, .. }) => fds.into_iter().next().ok_or_else(no_listener),
        _ => Err(no_listener()),
    }
}

/// Where the command may connect to a pathname socket.
#[derive(Debug, Default, Clone)]
pub(crate) struct Places {
    /// Whether `connect` is supervised at all.
    pub(crate) supervise: bool,
    /// A socket at one of these or below is allowed, unless a deeper one of [`Self::denied`]
    /// holds it.
    pub(crate) allowed: Vec<PathBuf>,
    /// A socket at one of these or below is allowed whatever else holds (the operator's).
    pub(crate) exempt: Vec<PathBuf>,
    /// A socket at one of these or below is refused, unless it is in one of [`Self::exempt`] or
    /// a deeper one of [`Self::allowed`] (hidden paths and caches inside the workspace).
    pub(crate) denied: Vec<PathBuf>,
    /// A socket below this on the keeper-made file's file system is allowed.
    pub(crate) session_tmp: Option<PathBuf>,
    /// A socket in an allowed place must also be bound there (`--unix-check-binding`, see
    /// [`bound_in_place`]).
    pub(crate) check_binding: bool,
}

impl Places {
    /// Take the option `arg` if it is one of this module's.
    pub(crate) fn take(&mut self, arg: &str) -> bool {
        if arg == option::UNIX_SUPERVISE {
            self.supervise = true;
        } else if let Some(path) = arg.strip_prefix(option::UNIX_ALLOW) {
            self.allowed.push(PathBuf::from(path));
        } else if let Some(path) = arg.strip_prefix(option::UNIX_ALLOW_SOCKET) {
            self.exempt.push(PathBuf::from(path));
        } else if let Some(path) = arg.strip_prefix(option::UNIX_DENY) {
            self.denied.push(PathBuf::from(path));
        } else if let Some(path) = arg.strip_prefix(option::UNIX_SESSION_TMP) {
            self.session_tmp = Some(PathBuf::from(path));
        } else if arg == option::UNIX_CHECK_BINDING {
            self.check_binding = true;
        } else {
            return false;
        }
        true
    }

    /// Whether a socket file found at `location` (resolved: no link, no `..`), on device
    /// `device` with `links` hard links, may be connected to. `session_device` gives the
    /// device of the session's own `/tmp` (asked only when needed).
    pub(crate) fn allows(
        &self,
        location: &Path,
        device: u64,
        links: u64,
        session_device: impl FnOnce() -> Option<u64>,
    ) -> bool {
        // A second name is how a socket from elsewhere would be brought into an allowed place.
        if links != 1 || !location.is_absolute() {
            return false;
        }
        // The deepest place that holds the location decides between allowed and denied: a
        // cache inside a workspace that is a home is refused, a `$TMPDIR` inside the (hidden)
        // state directory allowed.
        let depth = |places: &[PathBuf]| {
            places
                .iter()
                .filter(|place| location.starts_with(place))
                .map(|place| place.components().count())
                .max()
        };
        if depth(&self.exempt).is_some() {
            return true;
        }
        if depth(&self.allowed) > depth(&self.denied) {
            return true;
        }
        self.session_tmp.as_ref().is_some_and(|tmp| {
            location.starts_with(tmp)
                && location != tmp
                && session_device().is_some_and(|session| session == device)
        })
    }
}

/// The device of the session's own `/tmp`: that of a file the keeper makes there (in an
/// overlay, a file of the upper layer; the host's files below show another device).
fn session_device(tmp: &Path) -> Option<u64> {
    static DEVICE: OnceLock<Option<u64>> = OnceLock::new();
    *DEVICE.get_or_init(|| {
        let mut template = tmp
            .join(".toolhost-keeper-XXXXXX")
            .into_os_string()
            .into_vec_nul()?;
        // SAFETY: `template` is a writable NUL-terminated buffer ending in XXXXXX.
        let fd = unsafe { libc::mkostemp(template.as_mut_ptr().cast(), libc::O_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        // SAFETY: mkostemp returned a descriptor of ours.
        let file = unsafe { File::from_raw_fd(fd) };
        // SAFETY: `template` now holds the NUL-terminated name of the file made.
        unsafe { libc::unlink(template.as_ptr().cast()) };
        file.metadata().ok().map(|meta| meta.dev())
    })
}

trait IntoVecNul {
    fn into_vec_nul(self) -> Option<Vec<u8>>;
}

impl IntoVecNul for std::ffi::OsString {
    fn into_vec_nul(self) -> Option<Vec<u8>> {
        use std::os::unix::ffi::OsStringExt;
        let mut bytes = self.into_vec();
        if bytes.contains(&0) {
            return None;
        }
        bytes.push(0);
        Some(bytes)
    }
}

/// What the supervisor threads share.
struct Shared {
    listener: OwnedFd,
    places: Places,
    /// The status pipe's write end, for [`UNIX_REFUSED`] messages.
    status: RawFd,
}

/// Step 2: serve the notifications of `listener` on a thread of its own, for the life of the
/// keeper. Signals are blocked on it (and on the threads it starts): the keeper's main thread
/// takes them, and a `connect` made for the command is not interrupted by them.
pub(crate) fn serve(listener: OwnedFd, places: Places, status: RawFd) -> io::Result<()> {
    let shared: &'static Shared = Box::leak(Box::new(Shared {
        listener,
        places,
        status,
    }));
    // SAFETY: sigset_t is plain data, filled by sigfillset.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `all` is a valid sigset_t.
    unsafe { libc::sigfillset(&raw mut all) };
    // SAFETY: sigset_t is plain data; `old` is filled by pthread_sigmask.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid sigset pointers; blocks signals in this thread while spawning, so the new
    // thread starts with them blocked.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &raw const all, &raw mut old) };
    let spawned = std::thread::Builder::new()
        .name("unix-supervisor".into())
        .spawn(move || supervise(shared));
    // SAFETY: restoring this thread's mask as it was.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &raw const old, std::ptr::null_mut()) };
    spawned.map(drop)
}

fn supervise(shared: &'static Shared) {
    loop {
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
            match io::Error::last_os_error().raw_os_error() {
                // Interrupted, or the caller went away before it was received.
                Some(libc::EINTR | libc::ENOENT) => continue,
                // No process is left under the filter, or the listener is gone.
                _ => return,
            }
        }
        // A blocking connect (TCP to a slow host) must not hold the others back.
        let handled = std::thread::Builder::new().spawn(move || {
            let result = handle(shared, &request);
            respond(shared, request.id, result);
        });
        if handled.is_err() {
            respond(shared, request.id, Err(libc::EAGAIN));
        }
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
    if !allowed || (shared.places.check_binding && !in_tmp && !bound_in_place(shared, &meta)) {
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

/// Whether a socket listening on the file `meta` describes was bound with a name in an allowed
/// place (or is held by the command's tree).
///
/// Without namespaces, the workspace and a cache such as `~/.cache` are on one mount: a hard
/// link to a host socket there, left as its only name, would pass the check of where the file
/// lies. The name a socket was bound with cannot be changed: the kernel's socket table
/// (`sock_diag`, not `/proc/net/unix`, whose names may forge lines) gives it, with the bound
/// file's inode. The name itself (no `.` or `..`) must lie in an allowed place, and still lead
/// to the same file. A relative name is taken only from a socket the command's tree holds
/// (its binder's working directory is not known).
fn bound_in_place(shared: &Shared, meta: &std::fs::Metadata) -> bool {
    let Ok(listening) = listening_sockets() else {
        return false;
    };
    let mut held = None;
    listening
        .into_iter()
        .filter(|socket| u64::from(socket.vfs_inode) == meta.ino() & u64::from(u32::MAX))
        .any(|socket| {
            if socket.name.first() != Some(&b'/') {
                let held = held.get_or_insert_with(crate::tree::held_sockets);
                return held.contains(&u64::from(socket.inode));
            }
            // The place is the name as bound, not where it leads now: a directory on the way
            // may have been replaced by a link into an allowed place since.
            let name = Path::new(std::ffi::OsStr::from_bytes(&socket.name));
            let plain = name
                .components()
                .all(|part| matches!(part, Component::RootDir | Component::Normal(_)));
            plain
                && shared.places.allows(name, meta.dev(), 1, || None)
                && std::fs::metadata(name)
                    .is_ok_and(|bound| bound.dev() == meta.dev() && bound.ino() == meta.ino())
        })
}

/// A listening Unix socket bound to a file, as `sock_diag` reports it.
#[derive(Debug)]
struct Listening {
    /// The socket's inode (`socket:[INODE]` in `/proc/PID/fd`).
    inode: u32,
    /// The bound file's inode, truncated to 32 bits by the kernel.
    vfs_inode: u32,
    /// The name it was bound with.
    name: Vec<u8>,
}

/// The listening Unix sockets of this network namespace that are bound to a file (netlink
/// `SOCK_DIAG_BY_FAMILY`, with `UDIAG_SHOW_NAME` and `UDIAG_SHOW_VFS`).
fn listening_sockets() -> io::Result<Vec<Listening>> {
    const NETLINK_SOCK_DIAG: i32 = 4;
    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    const TCP_LISTEN: u32 = 10;
    const UDIAG_SHOW_NAME: u32 = 1;
    const UDIAG_SHOW_VFS: u32 = 2;
    // SAFETY: integer arguments; returns a new descriptor or -1.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor just made, ours alone.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // nlmsghdr (16 bytes), then unix_diag_req (24 bytes).
    let mut request = Vec::with_capacity(40);
    request.extend_from_slice(&40u32.to_ne_bytes());
    request.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    let flags = (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16;
    request.extend_from_slice(&flags.to_ne_bytes());
    request.extend_from_slice(&1u32.to_ne_bytes());
    request.extend_from_slice(&0u32.to_ne_bytes());
    request.extend_from_slice(&[libc::AF_UNIX as u8, 0, 0, 0]);
    request.extend_from_slice(&(1u32 << TCP_LISTEN).to_ne_bytes());
    request.extend_from_slice(&0u32.to_ne_bytes());
    request.extend_from_slice(&(UDIAG_SHOW_NAME | UDIAG_SHOW_VFS).to_ne_bytes());
    request.extend_from_slice(&[0xff; 8]);
    // SAFETY: `request` is a valid buffer of its length.
    if unsafe { libc::send(fd.as_raw_fd(), request.as_ptr().cast(), request.len(), 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut found = Vec::new();
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        // SAFETY: `buffer` is a valid, writable buffer of its length.
        let read =
            unsafe { libc::recv(fd.as_raw_fd(), buffer.as_mut_ptr().cast(), buffer.len(), 0) };
        if read < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(error);
        }
        let read = usize::try_from(read).map_err(io::Error::other)?;
        if parse_diag(&buffer[..read], &mut found)? {
            return Ok(found);
        }
        if read == 0 {
            return Ok(found);
        }
    }
}

fn ne_u32(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

fn ne_u16(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(bytes.get(at..at + 2)?.try_into().ok()?))
}

/// Parse one datagram of netlink messages into `found`; `Ok(true)` at `NLMSG_DONE`.
fn parse_diag(mut bytes: &[u8], found: &mut Vec<Listening>) -> io::Result<bool> {
    const UNIX_DIAG_NAME: u16 = 0;
    const UNIX_DIAG_VFS: u16 = 1;
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "malformed sock_diag answer");
    let align = |n: usize| (n + 3) & !3;
    while bytes.len() >= 16 {
        let length = usize::try_from(ne_u32(bytes, 0).ok_or_else(bad)?).map_err(|_| bad())?;
        let kind = ne_u16(bytes, 4).ok_or_else(bad)?;
        if length < 16 || length > bytes.len() {
            return Err(bad());
        }
        match i32::from(kind) {
            libc::NLMSG_DONE => return Ok(true),
            libc::NLMSG_ERROR => {
                let errno = ne_u32(bytes, 16).map_or(libc::EIO, |e| e.cast_signed().abs());
                return Err(io::Error::from_raw_os_error(errno));
            }
            _ => {}
        }
        // unix_diag_msg: family, type, state, pad, ino (u32), cookie (2 x u32).
        let message = &bytes[16..length];
        let inode = ne_u32(message, 4).ok_or_else(bad)?;
        let mut attributes = message.get(16..).unwrap_or_default();
        let (mut name, mut vfs_inode) = (None, None);
        while attributes.len() >= 4 {
            let size = usize::from(ne_u16(attributes, 0).ok_or_else(bad)?);
            let kind = ne_u16(attributes, 2).ok_or_else(bad)?;
            if size < 4 || size > attributes.len() {
                return Err(bad());
            }
            let data = &attributes[4..size];
            match kind {
                // A pathname is NUL-terminated there.
                UNIX_DIAG_NAME => {
                    let end = data.iter().position(|&b| b == 0).unwrap_or(data.len());
                    // An abstract name (starting with NUL) stays whole: it names no file.
                    name = Some(if end == 0 { data } else { &data[..end] }.to_vec());
                }
                UNIX_DIAG_VFS => vfs_inode = ne_u32(data, 0),
                _ => {}
            }
            attributes = attributes.get(align(size)..).unwrap_or_default();
        }
        if let (Some(name), Some(vfs_inode)) = (name, vfs_inode) {
            found.push(Listening {
                inode,
                vfs_inode,
                name,
            });
        }
        bytes = bytes.get(align(length)..).unwrap_or_default();
    }
    Ok(false)
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

/// `connect(socket, address)`, retried on `EINTR`.
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

/// Whether an abstract name is bound only by sockets held by the command's tree (and by at
/// least one). `/proc/net/unix` prints names raw, so a name holding a newline could add a line
/// of its choosing: every line naming `name` must be the tree's, so an added line cannot hide
/// the real one.
fn abstract_in_tree(name: &[u8]) -> bool {
    let Ok(table) = std::fs::read("/proc/self/net/unix") else {
        return false;
    };
    let shown: Vec<u8> = std::iter::once(b'@')
        .chain(name.iter().map(|&b| if b == 0 { b'@' } else { b }))
        .collect();
    let inodes = abstract_inodes(&table, &shown);
    if inodes.is_empty() {
        return false;
    }
    let held = crate::tree::held_sockets();
    inodes.iter().all(|inode| held.contains(inode))
}

/// The socket inodes `/proc/net/unix` (`table`) lists under the name `shown`.
pub(crate) fn abstract_inodes(table: &[u8], shown: &[u8]) -> Vec<u64> {
    table
        .split(|&b| b == b'\n')
        .skip(1)
        .filter_map(|line| {
            // Num RefCount Protocol Flags Type St Inode Path
            let mut fields = line.splitn(8, |&b| b == b' ');
            let inode = fields.nth(6)?;
            let path = fields.next()?;
            (path == shown)
                .then(|| std::str::from_utf8(inode).ok()?.parse().ok())
                .flatten()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run `program` on a `seccomp_data` of `nr` and `arch`, as the kernel would.
    fn run(program: &[libc::sock_filter], nr: u32, arch: u32) -> u32 {
        let mut accumulator = 0u32;
        let mut pc = 0usize;
        loop {
            let s = program[pc];
            let class = u32::from(s.code) & 0x07;
            match class {
                c if c == libc::BPF_LD => {
                    accumulator = match s.k {
                        NR_OFFSET => nr,
                        ARCH_OFFSET => arch,
                        other => panic!("load of offset {other}"),
                    };
                    pc += 1;
                }
                c if c == libc::BPF_JMP => {
                    let op = u32::from(s.code) & 0xf0;
                    let taken = if op == libc::BPF_JEQ {
                        accumulator == s.k
                    } else if op == libc::BPF_JSET {
                        accumulator & s.k != 0
                    } else {
                        panic!("jump op {op:#x}")
                    };
                    pc += 1 + usize::from(if taken { s.jt } else { s.jf });
                }
                c if c == libc::BPF_RET => return s.k,
                other => panic!("class {other:#x}"),
            }
        }
    }

    #[test]
    fn connect_goes_to_the_supervisor_and_nothing_else() {
        let program = program();
        let connect = libc::SYS_connect as u32;
        assert_eq!(
            run(&program, connect, AUDIT_ARCH),
            libc::SECCOMP_RET_USER_NOTIF
        );
        for other in [
            libc::SYS_socket,
            libc::SYS_sendto,
            libc::SYS_sendmsg,
            libc::SYS_bind,
        ] {
            assert_eq!(
                run(&program, other as u32, AUDIT_ARCH),
                libc::SECCOMP_RET_ALLOW,
                "{other}"
            );
        }
        assert_eq!(
            run(&program, connect, 0x4000_0003),
            libc::SECCOMP_RET_KILL_PROCESS,
            "another architecture"
        );
        #[cfg(target_arch = "x86_64")]
        assert_eq!(
            run(&program, connect | X32_SYSCALL_BIT, AUDIT_ARCH),
            libc::SECCOMP_RET_ERRNO | libc::EPERM.cast_unsigned(),
            "x32's connect"
        );
    }

    #[test]
    fn only_allowed_places_and_the_session_tmp_layer_are_allowed() {
        let places = Places {
            supervise: true,
            allowed: vec![PathBuf::from("/work/ws"), PathBuf::from("/home/u")],
            exempt: vec![
                PathBuf::from("/run/nscd/socket"),
                PathBuf::from("/home/u/.cache/db.sock"),
            ],
            denied: vec![
                PathBuf::from("/home/u/.cache"),
                PathBuf::from("/home/u/.ssh"),
                PathBuf::from("/work/ws/.state"),
            ],
            session_tmp: Some(PathBuf::from("/tmp")),
            check_binding: false,
        };
        let never = || -> Option<u64> { panic!("not asked") };
        assert!(places.allows(Path::new("/work/ws/a.sock"), 1, 1, never));
        assert!(places.allows(Path::new("/run/nscd/socket"), 1, 1, never));
        assert!(!places.allows(Path::new("/work/wsx/a.sock"), 1, 1, || None));
        // A second name: brought in from elsewhere.
        assert!(!places.allows(Path::new("/work/ws/a.sock"), 1, 2, never));
        assert!(!places.allows(
            Path::new("/home/u/.cache/git/credential/socket"),
            1,
            1,
            || None
        ));
        // The session's layer of /tmp, and not the host's showing through below.
        assert!(places.allows(Path::new("/tmp/mine.sock"), 41, 1, || Some(41)));
        assert!(!places.allows(Path::new("/tmp/tmux-0/default"), 42, 1, || Some(41)));
        assert!(!places.allows(Path::new("/tmp/x"), 41, 1, || None));
        assert!(!places.allows(Path::new("relative.sock"), 1, 1, || Some(1)));
    }

    #[test]
    fn sock_diag_answers_give_the_bound_name_and_inodes() {
        let mut message = Vec::new();
        let attribute = |kind: u16, data: &[u8]| {
            let mut bytes = Vec::new();
            bytes.extend_from_slice(&u16::try_from(4 + data.len()).unwrap().to_ne_bytes());
            bytes.extend_from_slice(&kind.to_ne_bytes());
            bytes.extend_from_slice(data);
            bytes.resize((bytes.len() + 3) & !3, 0);
            bytes
        };
        let mut body = vec![libc::AF_UNIX as u8, 1, 10, 0];
        body.extend_from_slice(&77u32.to_ne_bytes());
        body.extend_from_slice(&[0; 8]);
        body.extend(attribute(0, b"/ws/a.sock\0"));
        let mut vfs = 1234u32.to_ne_bytes().to_vec();
        vfs.extend_from_slice(&5u32.to_ne_bytes());
        body.extend(attribute(1, &vfs));
        message.extend_from_slice(&u32::try_from(16 + body.len()).unwrap().to_ne_bytes());
        message.extend_from_slice(&20u16.to_ne_bytes());
        message.extend_from_slice(&[0; 10]);
        message.extend(body);
        let mut found = Vec::new();
        assert!(!parse_diag(&message, &mut found).unwrap());
        assert_eq!(found.len(), 1);
        assert_eq!(
            (found[0].inode, found[0].vfs_inode, found[0].name.as_slice()),
            (77, 1234, b"/ws/a.sock".as_slice())
        );
        let mut done = 16u32.to_ne_bytes().to_vec();
        done.extend_from_slice(&(libc::NLMSG_DONE as u16).to_ne_bytes());
        done.extend_from_slice(&[0; 10]);
        assert!(parse_diag(&done, &mut found).unwrap());
        // A length past the end is refused, not read.
        let mut bad = message.clone();
        bad[..4].copy_from_slice(&9999u32.to_ne_bytes());
        assert!(parse_diag(&bad, &mut found).is_err());
    }

    #[test]
    fn every_line_naming_an_abstract_socket_is_found() {
        let table = b"Num       RefCount Protocol Flags    Type St Inode Path\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 1234 @victim\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 99 @victim\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 7 @other name\n\
            0000000000000000: 00000002 00000000 00000000 0001 03 8\n";
        assert_eq!(abstract_inodes(table, b"@victim"), vec![1234, 99]);
        assert_eq!(abstract_inodes(table, b"@other name"), vec![7]);
        assert!(abstract_inodes(table, b"@nobody").is_empty());
    }
}
