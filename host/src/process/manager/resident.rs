//! Resident keepers: per scope, profile and layers, one keeper started with `--resident`
//! (`keeper/src/resident.rs`) that has joined the scope's namespaces once and forks every
//! later keeper of that scope and profile, already inside them.
//!
//! A keeper forked by a resident costs a `fork` of a small process, where a spawned one costs
//! a clone of the host, the keeper's `exec`, a `setns` per namespace and, with a PID
//! namespace, one more fork into it.
//!
//! - A resident is the host's child, spawned from the spawner thread like every keeper, so its
//!   parent-death signal holds. Its keepers are its children, with `SIGTERM` as their
//!   parent-death signal: nothing outlives the host still.
//! - A keeper forked by it is not the host's child. The resident reaps it only once the host
//!   has released it ([`Resident::release`]), so that its pid stays its own while the host
//!   signals it or reads its descendants; [`KeeperPid`](super::spawner::KeeperPid) carries the
//!   resident along for that.
//! - The pool of keepers prepared ahead (`ready.rs`) holds the residents and lets go of them
//!   when their scope ends, their layers are made again, or the host shuts down. The last
//!   holder's drop closes its control socket: the resident waits for every keeper it forked,
//!   then exits, and the host reaps it.

use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Mutex;

use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
use nix::unistd::Pid;
use toolhost_keeper_protocol::resident::{ANSWER_LEN, FORK, RELEASE};

use super::keeper::{HostEnds, KeeperEnds};
use super::reap;

/// A resident keeper (see the module documentation).
pub(super) struct Resident {
    /// The host's end of its control socket; `None` once closed. Requests and their answers
    /// go under this lock, so that each answer is read by the request it answers.
    control: Mutex<Option<UnixStream>>,
    /// The read end of its status pipe: nothing is written there; kept open so that the
    /// resident's writes could never raise `SIGPIPE`.
    _status: OwnedFd,
    /// Its pid: our child, reaped once it has exited.
    pid: Pid,
    /// Reaped already ([`Resident::close_and_wait`]).
    reaped: bool,
}

/// The longest a fork request waits for its answer; a resident that takes longer is let go.
const ANSWER_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

impl Resident {
    /// The resident spawned as `pid` (released from its spawn guard), with the host's ends of
    /// its channels.
    pub(super) fn new(pid: Pid, host: HostEnds) -> io::Result<Self> {
        let control = UnixStream::from(host.control);
        control.set_read_timeout(Some(ANSWER_WAIT))?;
        Ok(Self {
            control: Mutex::new(Some(control)),
            _status: host.status,
            pid,
            reaped: false,
        })
    }

    /// Its pid (for tests).
    #[cfg(test)]
    pub(super) fn pid(&self) -> Pid {
        self.pid
    }

    /// Fork a keeper prepared ahead, with `keeper` as its channels and `cgroups` (the `tasks`
    /// or `cgroup.procs` files of its command's cgroups) to move into: its pid. Blocks for
    /// the round trip: call it from a blocking thread.
    /// A failed round trip lets the resident go (its later requests fail at once): an answer
    /// half read would be taken for the next one's.
    pub(super) fn fork(&self, keeper: KeeperEnds, cgroups: &[OwnedFd]) -> io::Result<Pid> {
        let mut raw = vec![keeper.status.as_raw_fd(), keeper.control.as_raw_fd()];
        raw.extend(cgroups.iter().map(AsRawFd::as_raw_fd));
        let mut guard = crate::lock(&self.control);
        let control = guard
            .as_ref()
            .ok_or_else(|| io::Error::other("the resident keeper was let go"))?;
        let answer = Self::round_trip(control, &raw);
        if answer.is_err() {
            guard.take();
        }
        match i32::from_le_bytes(answer?) {
            pid if pid > 0 => Ok(Pid::from_raw(pid)),
            errno => Err(io::Error::from_raw_os_error(errno.saturating_neg())),
        }
    }

    /// Send a fork request with the descriptors `raw`; its answer.
    fn round_trip(control: &UnixStream, raw: &[i32]) -> io::Result<[u8; ANSWER_LEN]> {
        let rights = [ControlMessage::ScmRights(raw)];
        loop {
            // MSG_NOSIGNAL: a resident that is gone gives EPIPE, not SIGPIPE.
            match sendmsg::<()>(
                control.as_raw_fd(),
                &[io::IoSlice::new(&[FORK])],
                &rights,
                MsgFlags::MSG_NOSIGNAL,
                None,
            ) {
                Ok(_) => break,
                Err(nix::errno::Errno::EINTR) => {}
                Err(errno) => return Err(io::Error::from(errno)),
            }
        }
        let mut answer = [0u8; ANSWER_LEN];
        let mut stream = control;
        stream.read_exact(&mut answer)?;
        Ok(answer)
    }

    /// The host no longer refers to its keeper `pid`: the resident reaps it once it has
    /// exited. A resident that is gone has nothing left to reap.
    pub(super) fn release(&self, pid: Pid) {
        let mut message = [0u8; 1 + ANSWER_LEN];
        message[0] = RELEASE;
        message[1..].copy_from_slice(&pid.as_raw().to_le_bytes());
        if let Some(control) = crate::lock(&self.control).as_ref() {
            // MSG_DONTWAIT: a resident that stopped reading cannot block the host (the keeper
            // stays a zombie until that resident exits); MSG_NOSIGNAL: one that is gone gives
            // EPIPE, not SIGPIPE.
            let _ = nix::sys::socket::send(
                control.as_raw_fd(),
                &message,
                MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
            );
        }
    }

    /// Close its control socket and wait until it has exited (it waits for every keeper it
    /// forked first). Blocks: call it from a blocking thread.
    pub(super) fn close_and_wait(mut self) {
        crate::lock(&self.control).take();
        let _ = reap::wait_exited(self.pid, false);
        self.reaped = true;
    }
}

impl Drop for Resident {
    /// Close its control socket (it exits once every keeper it forked is gone) and reap it
    /// as soon as it has exited, without blocking the caller.
    fn drop(&mut self) {
        crate::lock(&self.control).take();
        if !self.reaped {
            reap::reap_soon(self.pid);
        }
    }
}
