//! The host's side of the process keeper (`keeper/` in the repository): every command runs
//! under its own keeper, a small program embedded in this library (`keeper_binary.rs`) and
//! executed from a sealed in-memory file.
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
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

use nix::libc;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncReadExt, Interest};
use tokio::net::unix::pipe;

use toolhost_keeper_protocol::{
    Control, MAX_REFUSED_NAME, STATUS_MESSAGE_LEN, Status, UNIX_REFUSED,
};

use super::reap::Exit;
use crate::process::Signal;

pub(super) use crate::keeper_binary::{above_reserved, executable};

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

/// Hand a keeper prepared ahead its command: `bytes` (a start message, see the protocol's
/// `start` module) on its control socket, `fds` by `SCM_RIGHTS` with the first bytes. `Err`
/// when the keeper is gone (it never got the command). Blocks while the socket is full: the
/// keeper reads the message at once.
pub(super) fn send_start(control: &OwnedFd, bytes: &[u8], fds: &[OwnedFd]) -> io::Result<()> {
    use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
    let raw: Vec<libc::c_int> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    let mut sent = 0;
    while sent < bytes.len() {
        let iov = [io::IoSlice::new(&bytes[sent..])];
        let rights = [ControlMessage::ScmRights(&raw)];
        // The descriptors go with the first bytes only.
        let control_messages: &[ControlMessage<'_>] = if sent == 0 { &rights } else { &[] };
        // MSG_NOSIGNAL: a keeper that is gone gives EPIPE, not SIGPIPE.
        match sendmsg::<()>(
            control.as_raw_fd(),
            &iov,
            control_messages,
            MsgFlags::MSG_NOSIGNAL,
            None,
        ) {
            Ok(n) => sent += n,
            Err(nix::errno::Errno::EINTR) => {}
            Err(errno) => return Err(io::Error::from(errno)),
        }
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
            io::Write::write_all(&mut std::fs::File::from(write), &bytes).expect("write");
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
}
