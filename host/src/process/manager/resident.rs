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

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};

use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
use nix::unistd::Pid;
use tokio::io::unix::AsyncFd;
use toolhost_keeper_protocol::resident::{ANSWER_LEN, FORK, RELEASE};

use super::keeper::{HostEnds, KeeperEnds};
use super::reap;

/// A resident keeper (see the module documentation).
pub(super) struct Resident {
    /// The host's end of its control socket, non-blocking; `None` once closed.
    control: Mutex<Option<Arc<AsyncFd<UnixStream>>>>,
    /// One fork request at a time, so that each answer is read by the request it answers.
    turn: tokio::sync::Mutex<()>,
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
    /// its channels. Inside a Tokio runtime (its control socket is polled by it).
    pub(super) fn new(pid: Pid, host: HostEnds) -> io::Result<Self> {
        let control = UnixStream::from(host.control);
        control.set_nonblocking(true)?;
        // SAFETY: the `UnixStream` owns its descriptor and is owned by the `AsyncFd` from now
        // on, so the descriptor stays open and the same for the `AsyncFd`'s whole life.
        let control = unsafe { AsyncFd::register(control) }.map_err(io::Error::from)?;
        Ok(Self {
            control: Mutex::new(Some(Arc::new(control))),
            turn: tokio::sync::Mutex::new(()),
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
    /// or `cgroup.procs` files of its command's cgroups) to move into: its pid. Holds no
    /// thread while it waits for the answer.
    /// A round trip that fails, takes longer than [`ANSWER_WAIT`] or is abandoned (its future
    /// dropped) lets the resident go (its later requests fail at once): an answer half read,
    /// or not read, would be taken for the next one's.
    pub(super) async fn fork(&self, keeper: KeeperEnds, cgroups: &[OwnedFd]) -> io::Result<Pid> {
        let mut raw = vec![keeper.status.as_raw_fd(), keeper.control.as_raw_fd()];
        raw.extend(cgroups.iter().map(AsRawFd::as_raw_fd));
        let _turn = self.turn.lock().await;
        let control = crate::lock(&self.control)
            .clone()
            .ok_or_else(|| io::Error::other("the resident keeper was let go"))?;
        let mut pending = LetGoUnlessDone {
            resident: self,
            done: false,
        };
        let answer = tokio::time::timeout(ANSWER_WAIT, round_trip(&control, &raw))
            .await
            .unwrap_or_else(|_| {
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the resident keeper did not answer",
                ))
            })?;
        pending.done = true;
        match i32::from_le_bytes(answer) {
            pid if pid > 0 => Ok(Pid::from_raw(pid)),
            errno => Err(io::Error::from_raw_os_error(errno.saturating_neg())),
        }
    }

    /// The host no longer refers to its keeper `pid`: the resident reaps it once it has
    /// exited. A resident that is gone has nothing left to reap.
    pub(super) fn release(&self, pid: Pid) {
        let mut message = [0u8; 1 + ANSWER_LEN];
        message[0] = RELEASE;
        message[1..].copy_from_slice(&pid.as_raw().to_le_bytes());
        // Not under `turn`: a release is one small message, which the socket never interleaves
        // with a fork request's.
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

/// Lets its resident go when dropped before the round trip is done.
struct LetGoUnlessDone<'a> {
    resident: &'a Resident,
    done: bool,
}

impl Drop for LetGoUnlessDone<'_> {
    fn drop(&mut self) {
        if !self.done {
            crate::lock(&self.resident.control).take();
        }
    }
}

/// Send a fork request with the descriptors `raw` on `control`; its answer.
async fn round_trip(control: &AsyncFd<UnixStream>, raw: &[i32]) -> io::Result<[u8; ANSWER_LEN]> {
    let rights = [ControlMessage::ScmRights(raw)];
    loop {
        let mut ready = control.writable().await?;
        // MSG_NOSIGNAL: a resident that is gone gives EPIPE, not SIGPIPE.
        let sent = ready.try_io(|socket| {
            sendmsg::<()>(
                socket.as_raw_fd(),
                &[io::IoSlice::new(&[FORK])],
                &rights,
                MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
                None,
            )
            .map_err(io::Error::from)
        });
        match sent {
            Ok(Ok(_)) => break,
            Ok(Err(error)) if error.kind() == io::ErrorKind::Interrupted => {}
            Ok(Err(error)) => return Err(error),
            Err(_would_block) => {}
        }
    }
    let mut answer = [0u8; ANSWER_LEN];
    let mut read = 0;
    while read < ANSWER_LEN {
        let mut ready = control.readable().await?;
        match ready.try_io(|socket| io::Read::read(&mut socket.get_ref(), &mut answer[read..])) {
            Ok(Ok(0)) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the resident keeper is gone",
                ));
            }
            Ok(Ok(n)) => read += n,
            Ok(Err(error)) if error.kind() == io::ErrorKind::Interrupted => {}
            Ok(Err(error)) => return Err(error),
            Err(_would_block) => {}
        }
    }
    Ok(answer)
}
