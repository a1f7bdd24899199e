//! The manager's spawner thread: every child is created from it.
//!
//! Children are started with `PR_SET_PDEATHSIG(SIGKILL)` so that the shell (the group
//! leader) dies with the host even if the host is killed outright; the kernel clears that
//! setting in the shell's own children, so they survive such a kill. Linux sends the signal
//! when the *thread* that created the child exits, not the process. Creating children from
//! whatever thread polls `start` would be fragile: a Tokio blocking-pool thread
//! (`spawn_blocking`) exits after idling for a few seconds, and a runtime worker that runs
//! `block_in_place` (as `wasmtime-wasi` may) can be turned into one. So the manager owns one
//! plain thread that does nothing but spawn, lives exactly as long as the manager, and takes
//! its children with it when it exits. A spawn costs one channel hop each way.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::mpsc;

use nix::unistd::Pid;
use tokio::sync::oneshot;

use super::sys::{self, ChildSpec, Forker, SpawnError, SpawnStep};

/// A started child: its pid (also its process group id) and, where the kernel supports it, a
/// pidfd for it.
///
/// Until [`Spawned::disarm`] is called, dropping it `SIGKILL`s the process group and reaps
/// the leader: a start abandoned anywhere between the spawn and the hand-over to a monitor
/// (its future dropped, an error on the way) leaves nothing running or unreaped.
pub(super) struct Spawned {
    pid: Pid,
    pidfd: Option<OwnedFd>,
    armed: bool,
}

impl Spawned {
    fn new(pid: Pid, pidfd: Option<OwnedFd>) -> Self {
        Self {
            pid,
            pidfd,
            armed: true,
        }
    }

    /// The child's pid, which is also its process group id.
    pub(super) fn pid(&self) -> Pid {
        self.pid
    }

    /// Take the pidfd out (the guard does not need it).
    pub(super) fn take_pidfd(&mut self) -> Option<OwnedFd> {
        self.pidfd.take()
    }

    /// Someone else (the process's monitor) owns the child from now on: dropping this no
    /// longer kills it.
    pub(super) fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if self.armed {
            sys::kill_and_reap(self.pid);
        }
    }
}

struct Job {
    spec: ChildSpec,
    reply: oneshot::Sender<Result<Spawned, SpawnError>>,
}

/// Handle to the spawner thread; dropping it stops the thread.
pub(super) struct Spawner {
    jobs: mpsc::Sender<Job>,
}

impl Spawner {
    /// Start the thread.
    pub(super) fn new() -> io::Result<Self> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let (ready, started) = mpsc::channel::<io::Result<()>>();
        std::thread::Builder::new()
            .name("toolhost-spawner".to_owned())
            .spawn(move || match Forker::new() {
                Ok(forker) => {
                    let _ = ready.send(Ok(()));
                    run(&forker, &queue);
                }
                Err(error) => {
                    let _ = ready.send(Err(error));
                }
            })?;
        started
            .recv()
            .map_err(|_| io::Error::other("the spawner thread died"))??;
        Ok(Self { jobs })
    }

    /// Spawn the child described by `spec` on the spawner thread. If this future is dropped
    /// before the answer is taken, the answer is dropped with it and its guard kills and
    /// reaps the child, so nothing is left behind.
    pub(super) async fn spawn(&self, spec: ChildSpec) -> Result<Spawned, SpawnError> {
        let stopped = || SpawnError {
            step: SpawnStep::Spawner,
            error: io::Error::other("the spawner thread has stopped"),
        };
        let (reply, answer) = oneshot::channel();
        self.jobs.send(Job { spec, reply }).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

fn run(forker: &Forker, queue: &mpsc::Receiver<Job>) {
    while let Ok(Job { spec, reply }) = queue.recv() {
        let result = forker
            .spawn(&spec)
            .map(|(pid, pidfd)| Spawned::new(pid, pidfd.or_else(|| sys::pidfd_open(pid).ok())));
        // Close our copy of the pipe's write end now, or the reader would never see EOF.
        drop(spec);
        // If the caller went away (its future was dropped), the answer comes back and is
        // dropped here: its guard kills and reaps the child.
        let _ = reply.send(result);
    }
}
