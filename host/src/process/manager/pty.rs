//! Pseudo-terminals for commands (the Linux calls): open a pair, size it, make the host's
//! end non-blocking. The command gets the terminal's end (`slave`) as its stdio; the keeper
//! makes it the command's controlling terminal (`TIOCSCTTY`).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use nix::fcntl::OFlag;
use nix::libc;
use nix::pty::{PtyMaster, posix_openpt, unlockpt};

use crate::terminal::TerminalSize;

/// Both ends of a new pseudo-terminal, close-on-exec.
pub(super) struct Pty {
    /// The host's end: reads what the program writes, writes what it reads. Non-blocking.
    pub(super) master: OwnedFd,
    /// The program's end.
    pub(super) slave: OwnedFd,
}

/// A new pseudo-terminal of `size`.
pub(super) fn open(size: TerminalSize) -> io::Result<Pty> {
    let master: PtyMaster = posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)?;
    unlockpt(&master)?;
    let flags = libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC;
    // SAFETY: integer arguments on the master we own; TIOCGPTPEER (Linux 4.13+) opens its
    // peer without a path lookup and returns a new descriptor or -1.
    let raw = unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCGPTPEER, flags) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the ioctl returned a new descriptor that nothing else owns.
    let slave = unsafe { OwnedFd::from_raw_fd(raw) };
    let master = OwnedFd::from(master);
    set_size(&master, size)?;
    set_nonblocking(&master)?;
    Ok(Pty { master, slave })
}

/// Set the terminal's size; the kernel sends `SIGWINCH` to its foreground process group.
pub(super) fn set_size(master: &OwnedFd, size: TerminalSize) -> io::Result<()> {
    let winsize = libc::winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: `winsize` is a valid struct for TIOCSWINSZ to read, on our own descriptor.
    if unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &raw const winsize) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Make `fd` (and every descriptor sharing its open file) non-blocking.
pub(super) fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    let flags = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFL)?;
    let flags = OFlag::from_bits_retain(flags) | OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFL(flags))?;
    Ok(())
}
