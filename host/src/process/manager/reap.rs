//! Waiting for the manager's children (the keepers) and reaping them: how a process ended, a
//! `waitid` that reads any exit (including real-time signals), reaping off the caller's thread,
//! and pidfds.

use std::io;
use std::os::fd::OwnedFd;

use nix::libc;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use rustix::process::{WaitId, WaitIdOptions, waitid};

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Exit {
    /// `exit(code)`.
    Code(i32),
    /// Killed by signal number N.
    Signal(i32),
}

impl Exit {
    /// The shell convention: the code, or 128+N for signal N.
    pub(super) fn exit_code(self) -> i32 {
        match self {
            Exit::Code(code) => code,
            Exit::Signal(signal) => 128 + signal,
        }
    }

    /// The terminating signal's name, e.g. `SIGKILL`.
    pub(super) fn signal_name(self) -> Option<String> {
        match self {
            Exit::Code(_) => None,
            Exit::Signal(signal) => Some(signal_name(signal)),
        }
    }
}

/// `SIGTERM` for 15 and so on; `SIGRTMIN+N` for real-time signals.
pub(super) fn signal_name(signal: i32) -> String {
    match Signal::try_from(signal) {
        Ok(known) => known.as_str().to_owned(),
        Err(_) => {
            let rtmin = libc::SIGRTMIN();
            if (rtmin..=libc::SIGRTMAX()).contains(&signal) {
                format!("SIGRTMIN+{}", signal - rtmin)
            } else {
                format!("SIG{signal}")
            }
        }
    }
}

/// `waitid(WEXITED)` on our child `pid`, reaping it. `Ok(None)` when `nohang` and it has not
/// exited yet. Only sound while `pid` is unreaped (the pid cannot be reused until then).
pub(super) fn wait_exited(pid: Pid, nohang: bool) -> io::Result<Option<Exit>> {
    let id = WaitId::Pid(rustix_pid(pid)?);
    let mut options = WaitIdOptions::EXITED;
    if nohang {
        options |= WaitIdOptions::NOHANG;
    }
    loop {
        let status = match waitid(id.clone(), options) {
            Ok(status) => status,
            Err(rustix::io::Errno::INTR) => continue,
            Err(errno) => return Err(errno.into()),
        };
        let Some(status) = status else {
            return Ok(None);
        };
        return Ok(Some(match status.terminating_signal() {
            Some(signal) => Exit::Signal(signal),
            None => Exit::Code(status.exit_status().unwrap_or_default()),
        }));
    }
}

/// The same pid as rustix sees it.
fn rustix_pid(pid: Pid) -> io::Result<rustix::process::Pid> {
    rustix::process::Pid::from_raw(pid.as_raw())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a process id"))
}

/// Stop keeper `pid` (our unreaped child) and everything under it: `SIGTERM` makes a keeper kill
/// every descendant and exit (and one that has not yet set up kills nothing, having started
/// nothing). Reap it at once if it is already dead, else from a short-lived thread, so that
/// the caller never blocks on it. The caller must own `pid` (nobody else may signal or reap it
/// afterwards).
pub(super) fn stop_and_reap(pid: Pid) {
    let _ = nix::sys::signal::kill(pid, Signal::SIGTERM);
    reap_soon(pid);
}

/// Reap our child `pid`, which has exited or been told to: at once if it is already
/// a zombie, else from a short-lived thread (inline if no thread can be started).
pub(super) fn reap_soon(pid: Pid) {
    if !matches!(wait_exited(pid, true), Ok(None)) {
        // Reaped now, or not ours to reap.
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("toolhost-reaper".to_owned())
        .spawn(move || {
            let _ = wait_exited(pid, false);
        });
    if spawned.is_err() {
        let _ = wait_exited(pid, false);
    }
}

/// Reap our children `pids`, which have exited or been told to: those already
/// zombies at once, the rest from one short-lived thread, so that the caller never waits.
/// If no thread can be started, the rest are left unreaped (zombies until the host exits)
/// rather than waited for. The caller must own every pid (nobody else may signal or reap it
/// afterwards).
pub(super) fn reap_all_soon(mut pids: Vec<Pid>) {
    pids.retain(|&pid| matches!(wait_exited(pid, true), Ok(None)));
    if pids.is_empty() {
        return;
    }
    let count = pids.len();
    let spawned = std::thread::Builder::new()
        .name("toolhost-reaper".to_owned())
        .spawn(move || {
            for pid in pids {
                let _ = wait_exited(pid, false);
            }
        });
    if let Err(error) = spawned {
        tracing::warn!(count, %error, "cannot start a thread to reap killed processes; left unreaped");
    }
}

/// Wait until the process of `pidfd` has exited (its pidfd is readable).
pub(super) fn wait_pidfd(pidfd: &OwnedFd) {
    use std::os::fd::AsRawFd;
    loop {
        let mut fds = [libc::pollfd {
            fd: pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        // SAFETY: `fds` is a valid array of one pollfd, on a descriptor we own.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 1, -1) };
        if ready != -1 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return;
        }
    }
}

/// `pidfd_open(pid, 0)` (Linux 5.3+). The descriptor is close-on-exec and becomes readable
/// once the process has exited (is a zombie or reaped).
pub(super) fn pidfd_open(pid: Pid) -> io::Result<OwnedFd> {
    Ok(rustix::process::pidfd_open(
        rustix_pid(pid)?,
        rustix::process::PidfdFlags::empty(),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_and_signal_names() {
        assert_eq!(Exit::Code(3).exit_code(), 3);
        assert_eq!(Exit::Code(3).signal_name(), None);
        assert_eq!(Exit::Signal(9).exit_code(), 137);
        assert_eq!(Exit::Signal(9).signal_name().as_deref(), Some("SIGKILL"));
        assert_eq!(signal_name(15), "SIGTERM");
        assert_eq!(signal_name(libc::SIGRTMIN() + 2), "SIGRTMIN+2");
    }
}
