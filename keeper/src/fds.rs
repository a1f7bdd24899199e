//! Descriptors passed with a message on a Unix socket (`SCM_RIGHTS`).
//!
//! [`send_with_fds`] sends them.
//! The namespaces helper sends the network gate's sockets to the host with its answer.
//! The command's process sends its `connect` listener to the keeper (`unix.rs`).
//! [`receive_with_fds`] receives them, close-on-exec.
//! A start message brings the command's descriptors (`start.rs`).
//! The keeper receives the command's `connect` listener (`unix.rs`).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use toolhost_keeper_protocol::{resident, start};

/// The most descriptors one message brings: a start message's or a fork request's.
const MAX_FDS: usize = if start::MAX_FDS > resident::MAX_FDS {
    start::MAX_FDS
} else {
    resident::MAX_FDS
};

/// The most descriptors [`send_with_fds`] attaches to one message.
const SEND_MAX_FDS: usize = 16;

/// Send `bytes` on the socket `socket` with `fds` attached to them (`SCM_RIGHTS`), at most
/// [`SEND_MAX_FDS`]. It allocates nothing: the command's process calls it between its clone
/// and its `exec`, in the keeper's memory (see `spawn.rs`).
pub(crate) fn send_with_fds(socket: RawFd, bytes: &[u8], fds: &[impl AsRawFd]) -> io::Result<()> {
    if fds.len() > SEND_MAX_FDS {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut raw = [0 as libc::c_int; SEND_MAX_FDS];
    for (slot, fd) in raw.iter_mut().zip(fds) {
        *slot = fd.as_raw_fd();
    }
    let raw = &raw[..fds.len()];
    let data_len = size_of_val(raw);
    // SAFETY: a pure size computation.
    let space = unsafe { libc::CMSG_SPACE(data_len as u32) } as usize;
    // u64 units: aligned as a `cmsghdr`. Room for a header (two units on 64-bit Linux) and
    // SEND_MAX_FDS descriptors (two a unit); checked below.
    let mut buffer = [0u64; 2 + SEND_MAX_FDS.div_ceil(2)];
    if space > size_of_val(&buffer) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr().cast_mut().cast(),
        iov_len: bytes.len(),
    };
    // SAFETY: msghdr is plain data; all zeroes is a valid starting value.
    let mut header: libc::msghdr = unsafe { std::mem::zeroed() };
    header.msg_iov = &raw mut iov;
    header.msg_iovlen = 1;
    header.msg_control = buffer.as_mut_ptr().cast();
    header.msg_controllen = space as _;
    // SAFETY: the control buffer is `space` bytes, room for one header with `data_len` bytes
    // of data (CMSG_SPACE); CMSG_FIRSTHDR points into it.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&raw const header);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(data_len as u32) as _;
        std::ptr::copy_nonoverlapping(raw.as_ptr().cast::<u8>(), libc::CMSG_DATA(cmsg), data_len);
    }
    loop {
        // SAFETY: `header` points at `iov` (over `bytes`) and the control buffer, alive for
        // the call. The message is short (the helper's answer is one line, the listener's one
        // byte): one call sends it whole.
        let sent = unsafe { libc::sendmsg(socket, &raw const header, libc::MSG_NOSIGNAL) };
        if sent >= 0 {
            return if sent.cast_unsigned() == bytes.len() {
                Ok(())
            } else {
                Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "the answer was cut",
                ))
            };
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

/// What one [`receive_with_fds`] brought.
pub(crate) struct Received {
    /// The bytes read (0 at end-of-file).
    pub(crate) read: usize,
    /// The descriptors attached, in order.
    pub(crate) fds: Vec<OwnedFd>,
    /// The kernel dropped descriptors for want of room (`MSG_CTRUNC`).
    pub(crate) truncated: bool,
}

/// `recvmsg` into `buf` with room for [`MAX_FDS`] descriptors (received close-on-exec), with
/// `flags` besides `MSG_CMSG_CLOEXEC`, retried on `EINTR`.
pub(crate) fn receive_with_fds(socket: RawFd, buf: &mut [u8], flags: i32) -> io::Result<Received> {
    // Room for the control message, aligned as the kernel writes it.
    let mut space = [0u64; 8];
    // SAFETY: a pure computation of a size from a constant.
    let needed = unsafe { libc::CMSG_SPACE((MAX_FDS * size_of::<RawFd>()) as u32) };
    debug_assert!(needed as usize <= size_of_val(&space));
    loop {
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: msghdr is plain data; all zeroes is a valid starting value.
        let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
        message.msg_iov = &raw mut iov;
        message.msg_iovlen = 1;
        message.msg_control = space.as_mut_ptr().cast();
        message.msg_controllen = needed as _;
        // SAFETY: `message` points at `iov` (over `buf`) and `space`, valid and writable for
        // the lengths given, alive for the call.
        let read =
            unsafe { libc::recvmsg(socket, &raw mut message, libc::MSG_CMSG_CLOEXEC | flags) };
        if read < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(error);
        }
        let mut fds = Vec::new();
        // SAFETY: `message` was filled by recvmsg; the CMSG macros walk its control buffer
        // within `msg_controllen`.
        let mut header = unsafe { libc::CMSG_FIRSTHDR(&raw const message) };
        while !header.is_null() {
            // SAFETY: `header` points at a complete control message header within the buffer.
            let (level, kind, len) = unsafe {
                (
                    (*header).cmsg_level,
                    (*header).cmsg_type,
                    (*header).cmsg_len,
                )
            };
            if level == libc::SOL_SOCKET && kind == libc::SCM_RIGHTS {
                // SAFETY: as above; a pure computation of a length.
                let empty = unsafe { libc::CMSG_LEN(0) } as usize;
                // `cmsg_len`'s type differs between C libraries.
                #[allow(clippy::unnecessary_cast)]
                let count = (len as usize).saturating_sub(empty) / size_of::<RawFd>();
                // SAFETY: the data of an SCM_RIGHTS message is `count` descriptors.
                let data = unsafe { libc::CMSG_DATA(header) }.cast::<RawFd>();
                for index in 0..count {
                    // SAFETY: within the `count` descriptors; read unaligned, as CMSG_DATA
                    // gives no alignment guarantee for the element type.
                    let fd = unsafe { data.add(index).read_unaligned() };
                    // SAFETY: the kernel installed this descriptor for us; nothing else owns
                    // it.
                    fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
                }
            }
            // SAFETY: walking to the next header within the same filled buffer.
            header = unsafe { libc::CMSG_NXTHDR(&raw const message, header) };
        }
        return Ok(Received {
            read: read.cast_unsigned(),
            fds,
            truncated: message.msg_flags & libc::MSG_CTRUNC != 0,
        });
    }
}
