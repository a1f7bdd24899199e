//! The resident keeper (`--resident`): one per scope, profile and layers, already in the
//! scope's namespaces, forking keepers prepared ahead on the host's request.
//!
//! A keeper forked here skips what a spawned one pays for: the `exec` of the keeper, the
//! `setns` calls, and with a PID namespace the extra fork into it (the resident's children are
//! in the namespace already). The protocol crate's
//! [`resident`](toolhost_keeper_protocol::resident) module defines the requests.
//!
//! 1. The resident waits for a request on its control socket, or for `SIGCHLD`.
//! 2. A fork request: it forks. The child takes the request's descriptors as its status
//!    pipe ([`fd::STATUS`]), control socket ([`fd::CONTROL`]) and cgroup files, and returns
//!    from [`serve`] to carry on as a keeper prepared ahead. The resident answers with the
//!    child's pid.
//! 3. A release: the pid is reaped once that keeper has exited. Until then an exited keeper
//!    stays a zombie, so that its pid cannot name another process while the host uses it.
//! 4. End-of-file: the resident waits for every keeper it forked and returns.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;

use crate::fds::{Received, receive_with_fds};
use toolhost_keeper_protocol::{fd, resident};

/// What a forked keeper takes from its fork request.
pub(crate) struct Forked {
    /// The `tasks` or `cgroup.procs` of each of its command's cgroups.
    pub(crate) cgroups: Vec<RawFd>,
}

/// Serve the requests on `control` (see the module documentation). `Ok(None)`: end-of-file,
/// and every keeper forked is reaped. `Ok(Some)`: this is a forked keeper, with its status
/// pipe and control socket at [`fd::STATUS`] and [`fd::CONTROL`] in the place of the
/// resident's.
pub(crate) fn serve(control: &UnixStream) -> io::Result<Option<Forked>> {
    let (wake_read, wake_write) = crate::pipe()?;
    crate::WAKE_FD.store(wake_write, Ordering::SeqCst);
    crate::install(libc::SIGCHLD)?;
    // A pidfd of the resident itself, for a forked keeper to check that the resident is still
    // there once its parent-death signal is set (its parent's pid, outside a PID namespace
    // it is in, reads as 0). -1: no pidfds here; the check is skipped.
    // SAFETY: integer arguments; a new descriptor or -1.
    let me = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) } as RawFd;
    if me >= 0 {
        crate::set_cloexec(me)?;
    }
    let mut released: Vec<libc::pid_t> = Vec::new();
    loop {
        match crate::wait_for_event(control, wake_read, None)? {
            crate::Event::Wake => {
                crate::drain(wake_read);
                reap_released(&mut released);
            }
            crate::Event::Control => {
                let mut byte = [0u8; 1];
                let Received {
                    read,
                    fds,
                    truncated,
                } = receive_with_fds(control.as_raw_fd(), &mut byte, 0)?;
                if read == 0 {
                    reap_all();
                    return Ok(None);
                }
                match byte[0] {
                    resident::FORK if !truncated && fds.len() >= 2 => {
                        // SAFETY: the resident is single-threaded, so the child may do
                        // anything after the fork.
                        match unsafe { libc::fork() } {
                            -1 => answer(control, -last_errno())?,
                            0 => return become_keeper(me, fds, [wake_read, wake_write]).map(Some),
                            child => answer(control, child)?,
                        }
                    }
                    resident::FORK => answer(control, -libc::EINVAL)?,
                    resident::RELEASE => {
                        let mut pid = [0u8; resident::ANSWER_LEN];
                        let mut stream = control;
                        stream.read_exact(&mut pid)?;
                        released.push(i32::from_le_bytes(pid));
                        reap_released(&mut released);
                    }
                    // Not a request: ignored, as a keeper ignores a control byte it does not know.
                    _ => {}
                }
            }
            // Never polled here.
            crate::Event::Connect(_) => {}
        }
    }
}

/// In the forked child: stop with the resident, forget its signal set-up and descriptors,
/// and take the request's descriptors (`[status, control, cgroup...]`).
/// `resident`: a pidfd of the resident (-1: none).
fn become_keeper(resident: RawFd, fds: Vec<OwnedFd>, wake: [RawFd; 2]) -> io::Result<Forked> {
    // SAFETY: integer arguments; sets this process's parent-death signal.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0) } == -1 {
        return Err(io::Error::last_os_error());
    }
    if resident >= 0 {
        // The resident may have gone before the signal was set: its pidfd is readable then.
        let mut poll = libc::pollfd {
            fd: resident,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: a valid pollfd; timeout 0 never blocks.
        let gone = unsafe { libc::poll(&raw mut poll, 1, 0) } == 1;
        // SAFETY: closing the resident's pidfd, which nothing else here uses.
        unsafe { libc::close(resident) };
        if gone {
            return Err(io::Error::other("the resident keeper is gone"));
        }
    }
    // SAFETY: sigaction is plain data; all zeroes with SIG_DFL is the default disposition.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = libc::SIG_DFL;
    // SAFETY: `action` is a valid sigaction.
    if unsafe { libc::sigaction(libc::SIGCHLD, &action, std::ptr::null_mut()) } == -1 {
        return Err(io::Error::last_os_error());
    }
    crate::WAKE_FD.store(-1, Ordering::SeqCst);
    for fd in wake {
        // SAFETY: closing the resident's self-pipe, which nothing in this process uses now.
        unsafe { libc::close(fd) };
    }
    let mut fds = fds.into_iter();
    for target in [fd::STATUS, fd::CONTROL] {
        let Some(given) = fds.next() else {
            return Err(io::Error::other("a fork request without its channels"));
        };
        // SAFETY: dup2 from a descriptor this process owns onto the keeper's fixed number,
        // whose old descriptor (the resident's channel) nothing here uses any more.
        if unsafe { libc::dup2(given.as_raw_fd(), target) } == -1 {
            return Err(io::Error::last_os_error());
        }
        crate::set_cloexec(target)?;
    }
    Ok(Forked {
        cgroups: fds.map(IntoRawFd::into_raw_fd).collect(),
    })
}

/// Answer a fork request: the pid, or a negated `errno`.
fn answer(control: &UnixStream, value: i32) -> io::Result<()> {
    let mut stream = control;
    stream.write_all(&value.to_le_bytes())
}

fn last_errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Reap the released keepers that have exited; keep the others.
fn reap_released(released: &mut Vec<libc::pid_t>) {
    released.retain(|&pid| {
        let mut status = 0;
        // SAFETY: `status` is a valid out-pointer; WNOHANG never blocks.
        let got = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        // 0: still running. -1: not our child (or reaped already): nothing to keep.
        got == 0
    });
}

/// Wait for every child and reap it.
fn reap_all() {
    loop {
        let mut status = 0;
        // SAFETY: `status` is a valid out-pointer.
        if unsafe { libc::waitpid(-1, &mut status, 0) } == -1
            && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted
        {
            return;
        }
    }
}
