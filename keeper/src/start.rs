//! The start message of a keeper prepared ahead (`--ready`): its command, read from the
//! control socket with the command's descriptors (`SCM_RIGHTS`). The protocol crate's
//! [`start`](toolhost_keeper_protocol::start) module defines the message.

use std::ffi::OsString;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::net::UnixStream;

use toolhost_keeper_protocol::start::{HEADER_LEN, MAX_BODY, MAX_FDS, STDIN, TERMINAL};

/// A command handed to a keeper prepared ahead.
#[derive(Debug)]
pub(crate) struct Start {
    /// Its stdin is a terminal (the output descriptor too), to become its controlling terminal.
    pub(crate) terminal: bool,
    pub(crate) workdir: OsString,
    pub(crate) program: OsString,
    /// `ARGV0` first.
    pub(crate) argv: Vec<OsString>,
    /// `(NAME, VALUE)`.
    pub(crate) env: Vec<(OsString, OsString)>,
    /// The command's stdout and stderr.
    pub(crate) output: OwnedFd,
    /// The Landlock ruleset current at this start (with `--confine`).
    pub(crate) ruleset: Option<OwnedFd>,
    /// The command's stdin (`None`: `/dev/null`).
    pub(crate) stdin: Option<OwnedFd>,
}

fn bad(message: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("start message: {message}"),
    )
}

/// Wait for the start message on `control`. `Ok(None)`: end-of-file first (the host let the
/// keeper go unused). `confined`: a ruleset descriptor comes after the output.
pub(crate) fn receive(control: &UnixStream, confined: bool) -> io::Result<Option<Start>> {
    let mut header = [0u8; HEADER_LEN];
    let (read, mut fds) = receive_with_fds(control.as_raw_fd(), &mut header)?;
    if read == 0 {
        return Ok(None);
    }
    let mut stream = control;
    stream.read_exact(&mut header[read..])?;
    let length = usize::try_from(u32::from_le_bytes(header)).map_err(|_| bad("too long"))?;
    if length > MAX_BODY {
        return Err(bad("too long"));
    }
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body)?;
    let mut fields = body
        .strip_suffix(b"\0")
        .ok_or_else(|| bad("not NUL-terminated"))?
        .split(|byte| *byte == 0)
        .map(<[u8]>::to_vec);
    let mut next = || fields.next().ok_or_else(|| bad("a field is missing"));
    let flags = next()?;
    let workdir = OsString::from_vec(next()?);
    let program = OsString::from_vec(next()?);
    let count: usize = std::str::from_utf8(&next()?)
        .ok()
        .and_then(|count| count.parse().ok())
        .ok_or_else(|| bad("not an argument count"))?;
    let argv = (0..count)
        .map(|_| next().map(OsString::from_vec))
        .collect::<io::Result<Vec<_>>>()?;
    if argv.is_empty() {
        return Err(bad("no ARGV0"));
    }
    let env = fields
        .map(|pair| {
            let split = pair
                .iter()
                .position(|byte| *byte == b'=')
                .ok_or_else(|| bad("a variable without `=`"))?;
            let (name, value) = pair.split_at(split);
            Ok((
                OsString::from_vec(name.to_vec()),
                OsString::from_vec(value[1..].to_vec()),
            ))
        })
        .collect::<io::Result<Vec<_>>>()?;
    let with_stdin = flags.contains(&STDIN);
    let expected = 1 + usize::from(confined) + usize::from(with_stdin);
    if fds.len() != expected {
        return Err(bad("not the descriptors expected"));
    }
    let stdin = if with_stdin { fds.pop() } else { None };
    let ruleset = if confined { fds.pop() } else { None };
    let output = fds.pop().ok_or_else(|| bad("no output"))?;
    Ok(Some(Start {
        terminal: flags.contains(&TERMINAL),
        workdir,
        program,
        argv,
        env,
        output,
        ruleset,
        stdin,
    }))
}

/// `recvmsg` into `buf` with room for [`MAX_FDS`] descriptors (received close-on-exec),
/// retried on `EINTR`. Returns the bytes read (0 at end-of-file) and the descriptors.
fn receive_with_fds(socket: RawFd, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
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
        let read = unsafe { libc::recvmsg(socket, &raw mut message, libc::MSG_CMSG_CLOEXEC) };
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
        if message.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err(bad("too many descriptors"));
        }
        return Ok((read.cast_unsigned(), fds));
    }
}
