//! The sockets of a session's network gate, opened by the namespaces helper inside the new
//! network namespace (`--proxy`) and handed to the host, which cannot enter the namespace
//! itself (an unprivileged, multi-threaded process cannot join a network namespace owned by
//! another user namespace).
//!
//! 1. [`point_resolver_at_stub`]: the view's `/etc/resolv.conf` names the namespace's own
//!    loopback, where the host answers every lookup (a program that ignores the proxy
//!    variables then fails with a reason the host knows).
//! 2. [`open_sockets`]: after the loopback is up, a TCP listener on `127.0.0.1` (a port the
//!    kernel picks), one on `[::1]` with the same port, and UDP sockets on port 53 of both.
//!    The IPv6 ones are skipped where the namespace has no `::1`.
//! 3. [`send_with_fds`](crate::fds::send_with_fds): the helper's answer goes to the host with
//!    the sockets attached (`SCM_RIGHTS`); the host tells them apart by type and address.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// What the view's `/etc/resolv.conf` holds: the host's stub on the namespace's loopback.
const RESOLV_CONF: &str = "nameserver 127.0.0.1\nnameserver ::1\noptions timeout:1 attempts:1\n";

/// The port of the resolver stub.
const DNS_PORT: u16 = 53;

/// Write the stub's `resolv.conf` at `file` (in the session's tmpfs) and bind it over
/// `/etc/resolv.conf`, following a symbolic link there as the resolver does. Nothing is bound
/// where the system has no `/etc/resolv.conf`: the resolver then asks `127.0.0.1`, the stub.
pub(crate) fn point_resolver_at_stub(file: &std::path::Path) -> io::Result<()> {
    std::fs::write(file, RESOLV_CONF).map_err(|error| {
        io::Error::new(
            error.kind(),
            format!("writing the stub's resolv.conf: {error}"),
        )
    })?;
    if std::fs::metadata("/etc/resolv.conf").is_err() {
        return Ok(());
    }
    let source = CString::new(std::os::unix::ffi::OsStrExt::as_bytes(file.as_os_str()))
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in a path"))?;
    // SAFETY: NUL-terminated strings for source and target; no type or data for a bind.
    let bound = unsafe {
        libc::mount(
            source.as_ptr(),
            c"/etc/resolv.conf".as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    } == 0;
    if bound {
        Ok(())
    } else {
        let error = io::Error::last_os_error();
        Err(io::Error::new(
            error.kind(),
            format!("binding the stub's resolv.conf over /etc/resolv.conf: {error}"),
        ))
    }
}

/// Open the gate's sockets in the current network namespace (step 2 of the module's flow).
pub(crate) fn open_sockets() -> io::Result<Vec<OwnedFd>> {
    let mut sockets = Vec::with_capacity(4);
    let (listener, port) = tcp_listener(libc::AF_INET, 0)?;
    sockets.push(listener);
    if let Ok((listener, _)) = tcp_listener(libc::AF_INET6, port) {
        sockets.push(listener);
    }
    sockets.push(udp_socket(libc::AF_INET, DNS_PORT)?);
    if let Ok(socket) = udp_socket(libc::AF_INET6, DNS_PORT) {
        sockets.push(socket);
    }
    Ok(sockets)
}

/// A new close-on-exec socket of `family` and `kind`, bound to the loopback address at `port`.
fn bound_socket(family: libc::c_int, kind: libc::c_int, port: u16) -> io::Result<OwnedFd> {
    // SAFETY: integer arguments; returns a new descriptor or -1.
    let fd = unsafe { libc::socket(family, kind | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor that nothing else owns.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    let bound = if family == libc::AF_INET6 {
        let only: libc::c_int = 1;
        // SAFETY: a valid int option value of its size for IPV6_V6ONLY.
        unsafe {
            libc::setsockopt(
                fd,
                libc::IPPROTO_IPV6,
                libc::IPV6_V6ONLY,
                (&raw const only).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        // SAFETY: sockaddr_in6 is plain data; all zeroes is a valid starting value.
        let mut address: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
        address.sin6_family = libc::AF_INET6 as libc::sa_family_t;
        address.sin6_port = port.to_be();
        address.sin6_addr.s6_addr[15] = 1;
        // SAFETY: a valid sockaddr_in6 of the length given.
        unsafe {
            libc::bind(
                fd,
                (&raw const address).cast(),
                size_of::<libc::sockaddr_in6>() as libc::socklen_t,
            )
        }
    } else {
        // SAFETY: sockaddr_in is plain data; all zeroes is a valid starting value.
        let mut address: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        address.sin_family = libc::AF_INET as libc::sa_family_t;
        address.sin_port = port.to_be();
        address.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
        // SAFETY: a valid sockaddr_in of the length given.
        unsafe {
            libc::bind(
                fd,
                (&raw const address).cast(),
                size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        }
    };
    if bound != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(socket)
}

/// A TCP listener on the loopback address of `family` at `port` (0: one the kernel picks), and
/// its port.
fn tcp_listener(family: libc::c_int, port: u16) -> io::Result<(OwnedFd, u16)> {
    let socket = bound_socket(family, libc::SOCK_STREAM, port)
        .map_err(|error| io::Error::new(error.kind(), format!("the proxy's listener: {error}")))?;
    // SAFETY: a bound socket of ours; an integer backlog.
    if unsafe { libc::listen(socket.as_raw_fd(), 1024) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: sockaddr_storage is plain data; room for any address.
    let mut address: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut length = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: `address` and `length` are valid out-pointers of the sizes given.
    if unsafe {
        libc::getsockname(
            socket.as_raw_fd(),
            (&raw mut address).cast(),
            &raw mut length,
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    // The port sits at the same offset in sockaddr_in and sockaddr_in6, after the family.
    // SAFETY: the kernel wrote a sockaddr of `family` into the storage.
    let port =
        u16::from_be(unsafe { (*(&raw const address).cast::<libc::sockaddr_in>()).sin_port });
    Ok((socket, port))
}

/// A UDP socket on the loopback address of `family` at `port`.
fn udp_socket(family: libc::c_int, port: u16) -> io::Result<OwnedFd> {
    bound_socket(family, libc::SOCK_DGRAM, port).map_err(|error| {
        io::Error::new(error.kind(), format!("the resolver stub's socket: {error}"))
    })
}
