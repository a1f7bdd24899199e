//! The host's side of the process keeper (`keeper/` in the repository): every command runs
//! under its own keeper, a small program embedded in this library and executed from a
//! sealed in-memory file, so the binary, its tests and any embedder all have it.
//!
//! The keeper is the host's direct child and the command's parent. It is a child subreaper, so
//! whatever the command starts stays its descendant, even after `setsid`, `setpgid` or a
//! double fork. The host talks to it over two channels, set up here:
//!
//! - the *status* pipe (keeper to host): the command's exit as one status message
//!   ([`Status`]), then end-of-file once the keeper exits, which it does only when no
//!   descendant is left;
//! - the *control* socket (host to keeper): one [`Control`] byte per request (terminate,
//!   interrupt or kill, each for every descendant); closing it (also the kernel's doing when
//!   the host dies, however it dies) makes the keeper kill every descendant and exit.
//!
//! The protocol crate (`keeper/protocol/`) names every number, byte and option of it, and
//! lists a command's steps in order. The keeper gets its descriptors at fixed numbers below
//! [`fd::FIRST_FREE`]; the host keeps every descriptor it is about to give at or above it
//! ([`above_reserved`]).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::OnceLock;

use nix::libc;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncReadExt, Interest};
use tokio::net::unix::pipe;

use toolhost_keeper_protocol::{
    Control, MAX_REFUSED_NAME, STATUS_MESSAGE_LEN, Status, UNIX_REFUSED, fd,
};

use super::reap::Exit;
use super::spec::StartMessage;
use crate::process::Signal;

/// The keeper executable, built by `build.rs` for the target this library is built for.
const KEEPER: &[u8] = include_bytes!(env!("TOOLHOST_KEEPER"));

/// The sealed in-memory copy of the keeper, made once per process.
pub(super) fn executable() -> io::Result<BorrowedFd<'static>> {
    static FILE: OnceLock<Result<OwnedFd, String>> = OnceLock::new();
    match FILE.get_or_init(|| load().map_err(|error| error.to_string())) {
        Ok(fd) => Ok(fd.as_fd()),
        Err(message) => Err(io::Error::other(format!(
            "cannot prepare the process keeper: {message}"
        ))),
    }
}

/// Write the keeper into a memfd and seal it against any change.
fn load() -> io::Result<OwnedFd> {
    // SAFETY: a NUL-terminated name and integer flags; returns a new descriptor or -1.
    let raw = unsafe {
        libc::memfd_create(
            c"toolhost-keeper".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: memfd_create returned a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut file = std::fs::File::from(fd);
    io::Write::write_all(&mut file, KEEPER)?;
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    // SAFETY: integer arguments on our own descriptor.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } == -1 {
        return Err(io::Error::last_os_error());
    }
    above_reserved(OwnedFd::from(file))
}

/// Move a descriptor to [`fd::FIRST_FREE`] or above (close-on-exec), so that installing the
/// keeper's descriptors (all below it) with `dup2` cannot clobber it.
pub(super) fn above_reserved(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() >= fd::FIRST_FREE {
        return Ok(fd);
    }
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor we own returns a new one that nothing else owns.
    let moved = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, fd::FIRST_FREE) };
    if moved < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above, the new descriptor is ours alone.
    Ok(unsafe { OwnedFd::from_raw_fd(moved) })
}

/// The keeper's ends of its two channels, passed to it as [`fd::STATUS`] and [`fd::CONTROL`].
pub(super) struct KeeperEnds {
    pub(super) status: OwnedFd,
    pub(super) control: OwnedFd,
}

/// The host's ends of one keeper's channels.
pub(super) struct HostEnds {
    /// The status pipe's read end (for [`pipe::Receiver::from_owned_fd`], inside a runtime).
    pub(super) status: OwnedFd,
    pub(super) control: OwnedFd,
}

/// A fresh pair of channels (all descriptors close-on-exec).
pub(super) fn channels() -> io::Result<(HostEnds, KeeperEnds)> {
    let (status_read, status_write) = io::pipe()?;
    let (host_control, keeper_control) = UnixStream::pair()?;
    let host = HostEnds {
        status: OwnedFd::from(status_read),
        control: OwnedFd::from(host_control),
    };
    let keeper = KeeperEnds {
        status: above_reserved(OwnedFd::from(status_write))?,
        control: above_reserved(OwnedFd::from(keeper_control))?,
    };
    Ok((host, keeper))
}

/// Ask the keeper to send `signal` to every descendant. `Err` when the keeper is gone (or
/// cannot take requests).
pub(super) fn request(control: &OwnedFd, signal: Signal) -> io::Result<()> {
    let byte = match signal {
        Signal::Terminate => Control::Terminate,
        Signal::Interrupt => Control::Interrupt,
        Signal::Kill => Control::Kill,
    }
    .as_u8();
    // SAFETY: a valid one-byte buffer on our own socket. MSG_NOSIGNAL: a keeper that has
    // exited gives EPIPE, never SIGPIPE; MSG_DONTWAIT: a keeper that stopped reading cannot
    // block the host.
    let sent = unsafe {
        libc::send(
            control.as_raw_fd(),
            (&raw const byte).cast(),
            1,
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        )
    };
    if sent == 1 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Hand a keeper prepared ahead its command: `message` on its control socket, its descriptors
/// by `SCM_RIGHTS` with the first bytes. `Err` when the keeper is gone (it never got the
/// command). Blocks while the socket is full: the keeper reads the message at once.
pub(super) fn send_start(control: &OwnedFd, message: &StartMessage) -> io::Result<()> {
    let fds: Vec<libc::c_int> = message.fds.iter().map(AsRawFd::as_raw_fd).collect();
    let data_len = std::mem::size_of_val(fds.as_slice());
    // SAFETY: pure size computations.
    let space = unsafe { libc::CMSG_SPACE(data_len as u32) } as usize;
    // u64 units: aligned as a `cmsghdr`.
    let mut buffer = vec![0u64; space.div_ceil(8)];
    let mut sent = 0;
    while sent < message.bytes.len() {
        let rest = &message.bytes[sent..];
        let mut iov = libc::iovec {
            iov_base: rest.as_ptr().cast_mut().cast(),
            iov_len: rest.len(),
        };
        // SAFETY: msghdr is plain data; all zeroes is a valid starting value.
        let mut header: libc::msghdr = unsafe { std::mem::zeroed() };
        header.msg_iov = &raw mut iov;
        header.msg_iovlen = 1;
        if sent == 0 {
            header.msg_control = buffer.as_mut_ptr().cast();
            header.msg_controllen = space as _;
            // SAFETY: the control buffer is `space` bytes, room for one header with
            // `data_len` bytes of data (CMSG_SPACE); CMSG_FIRSTHDR points into it.
            unsafe {
                let cmsg = libc::CMSG_FIRSTHDR(&raw const header);
                (*cmsg).cmsg_level = libc::SOL_SOCKET;
                (*cmsg).cmsg_type = libc::SCM_RIGHTS;
                (*cmsg).cmsg_len = libc::CMSG_LEN(data_len as u32) as _;
                std::ptr::copy_nonoverlapping(
                    fds.as_ptr().cast::<u8>(),
                    libc::CMSG_DATA(cmsg),
                    data_len,
                );
            }
        }
        // SAFETY: `header` points at `iov` (over the message's bytes) and the control buffer,
        // alive for the call. MSG_NOSIGNAL: a keeper that is gone gives EPIPE, not SIGPIPE.
        let n =
            unsafe { libc::sendmsg(control.as_raw_fd(), &raw const header, libc::MSG_NOSIGNAL) };
        if n < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(error);
        }
        sent += n.cast_unsigned();
    }
    Ok(())
}

/// The most distinct refused Unix sockets a [`Report`] keeps.
const MAX_UNIX_REFUSED: usize = 16;

/// The command's end as the keeper reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Report {
    /// `None` when the status pipe ended without one (the keeper was killed, or could not
    /// report).
    pub(super) exit: Option<Exit>,
    /// Nothing else the command started was left when it exited (the keeper exits next).
    pub(super) nothing_left: bool,
    /// The Unix sockets the keeper refused before the exit, as it named them (the first
    /// [`MAX_UNIX_REFUSED`] distinct ones).
    pub(super) unix_refused: Vec<String>,
}

/// Read the command's exit from the status pipe, and the Unix sockets refused before it.
pub(super) async fn read_exit(status: &mut pipe::Receiver) -> Report {
    let mut unix_refused = Vec::new();
    loop {
        let mut message = [0u8; STATUS_MESSAGE_LEN];
        if status.read_exact(&mut message[..1]).await.is_err() {
            break;
        }
        if message[0] == UNIX_REFUSED {
            let mut length = [0u8; 2];
            if status.read_exact(&mut length).await.is_err() {
                break;
            }
            let length = usize::from(u16::from_le_bytes(length)).min(MAX_REFUSED_NAME);
            let mut name = vec![0u8; length];
            if status.read_exact(&mut name).await.is_err() {
                break;
            }
            // The first few distinct names are enough for the note; a command refused
            // without end costs the host nothing more.
            let name = String::from_utf8_lossy(&name).into_owned();
            if unix_refused.len() < MAX_UNIX_REFUSED && !unix_refused.contains(&name) {
                unix_refused.push(name);
            }
            continue;
        }
        if status.read_exact(&mut message[1..]).await.is_err() {
            break;
        }
        let mut report = parse(message);
        report.unix_refused = unix_refused;
        return report;
    }
    Report {
        exit: None,
        nothing_left: true,
        unix_refused,
    }
}

/// Wait until the keeper has exited (and so nothing of the command is left): its pidfd is
/// readable once it is a zombie. Without a pidfd, the end of the status pipe is the nearest
/// sign (the keeper closes it on its way out).
pub(super) async fn wait_gone(mut status: pipe::Receiver, pidfd: Option<OwnedFd>) {
    let mut rest = [0u8; 64];
    while matches!(status.read(&mut rest).await, Ok(n) if n > 0) {}
    if let Some(pidfd) = pidfd {
        // SAFETY: the `OwnedFd` is an open pidfd, owned by the `AsyncFd` from now on, so it
        // stays open and refers to the same process for the `AsyncFd`'s whole life.
        match unsafe { AsyncFd::register_with_interest(pidfd, Interest::READABLE) } {
            Ok(fd) => {
                let _ = fd.readable().await;
            }
            Err(error) => tracing::debug!(%error, "cannot poll a keeper's pidfd"),
        }
    }
}

/// A status message: the exit code or the signal's number, and whether nothing else is left.
fn parse(message: [u8; STATUS_MESSAGE_LEN]) -> Report {
    let (status, value) = Status::parse(message);
    let exit = status.map(|status| {
        if status.signalled() {
            Exit::Signal(value)
        } else {
            Exit::Code(value)
        }
    });
    Report {
        exit,
        nothing_left: status.is_some_and(Status::nothing_left),
        unix_refused: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn refused_unix_sockets_come_before_the_exit_and_are_bounded() {
        let (read, write) = nix::unistd::pipe().expect("pipe");
        let mut bytes = Vec::new();
        for index in 0..40 {
            // Each name twice: kept once.
            for _ in 0..2 {
                let name = format!("/x/{index}.sock");
                bytes.push(UNIX_REFUSED);
                bytes.extend_from_slice(&u16::try_from(name.len()).expect("short").to_le_bytes());
                bytes.extend_from_slice(name.as_bytes());
            }
        }
        bytes.extend_from_slice(&Status::ExitedNothingLeft.message(7));
        let writer = std::thread::spawn(move || {
            std::io::Write::write_all(&mut std::fs::File::from(write), &bytes).expect("write");
        });
        let mut status = pipe::Receiver::from_owned_fd(read).expect("receiver");
        let report = read_exit(&mut status).await;
        writer.join().expect("writer");
        assert_eq!(report.exit, Some(Exit::Code(7)));
        assert!(report.nothing_left);
        assert_eq!(report.unix_refused.len(), MAX_UNIX_REFUSED);
        assert_eq!(report.unix_refused[0], "/x/0.sock");
        assert_eq!(report.unix_refused[1], "/x/1.sock");
    }

    #[test]
    fn status_messages_parse() {
        let report = |exit, nothing_left| Report {
            exit,
            nothing_left,
            unix_refused: Vec::new(),
        };
        assert_eq!(
            parse(Status::Exited.message(3)),
            report(Some(Exit::Code(3)), false)
        );
        assert_eq!(
            parse(Status::SignalledNothingLeft.message(9)),
            report(Some(Exit::Signal(9)), true)
        );
        assert_eq!(parse([b'?', 0, 0, 0, 0]), report(None, false));
    }

    #[test]
    fn the_keeper_is_embedded_and_sealed() {
        let fd = executable().expect("keeper");
        // SAFETY: integer arguments on a descriptor that stays open (a static).
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        assert!(seals & libc::F_SEAL_WRITE != 0, "seals: {seals:#x}");
        assert!(KEEPER.starts_with(b"\x7fELF"));
    }
}
