//! The manager's spawner thread: every child is created from it, or from its cloner thread.
//!
//! Children (keepers) are started with `PR_SET_PDEATHSIG(SIGTERM)`, which makes a keeper
//! stop everything under it when the host goes, however it goes (closing its control socket
//! does the same; the signal is the second line). Linux sends the signal
//! when the *thread* that created the child exits, not the process. Creating children from
//! whatever thread polls `start` would be fragile: a Tokio blocking-pool thread
//! (`spawn_blocking`) exits after idling for a few seconds, and a runtime worker that runs
//! `block_in_place` (as `wasmtime-wasi` may) can be turned into one. So the manager owns one
//! plain thread that does nothing but spawn, lives exactly as long as the manager, and takes
//! its children with it when it exits. A spawn costs one channel hop each way.
//!
//! Where the kernel allows it, the clone itself happens on a second plain thread, the
//! cloner (`cloner.rs`), which has a small descriptor table of its own: a start then does
//! not copy and close the host's whole table. The cloner lives exactly as long as this
//! thread, so the parent-death signal keeps its meaning.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::mpsc;

use nix::unistd::Pid;
use tokio::sync::oneshot;

use super::child::{Forker, SpawnError, SpawnStep};
use super::cloner::Cloner;
use super::reap;
use super::spec::ChildSpec;

/// A started keeper.
///
/// Until [`Spawned::disarm`] is called, dropping it stops the keeper (and so whatever it
/// started) and reaps it: a start abandoned anywhere between the spawn and the hand-over to a
/// monitor (its future dropped, an error on the way) leaves nothing running or unreaped.
pub(super) struct Spawned {
    pid: Pid,
    /// Readable once the keeper has exited (`None` on kernels without pidfds).
    pidfd: Option<OwnedFd>,
    armed: bool,
}

impl Spawned {
    fn new(pid: Pid) -> Self {
        // Opened while the keeper is our unreaped child, so it is the keeper's.
        let pidfd = reap::pidfd_open(pid).ok();
        Self {
            pid,
            pidfd,
            armed: true,
        }
    }

    /// The keeper's pid.
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

    /// The caller owns the child from now on (it must stop and reap it): its pid.
    pub(super) fn release(mut self) -> Pid {
        self.armed = false;
        self.pid
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if self.armed {
            reap::stop_and_reap(self.pid);
        }
    }
}

struct Job {
    spec: ChildSpec,
    reply: oneshot::Sender<Result<Spawned, SpawnError>>,
}

/// Handle to the spawner thread; dropping every clone stops the thread.
#[derive(Clone)]
pub(super) struct Spawner {
    jobs: mpsc::Sender<Job>,
}

impl Spawner {
    /// Start the thread. It gets ready (the keeper loaded, the child stack allocated) while
    /// the caller goes on; if that fails, every spawn is answered with the reason.
    pub(super) fn new() -> io::Result<Self> {
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("toolhost-spawner".to_owned())
            .spawn(move || match Maker::new() {
                Ok(maker) => run(&maker, &queue),
                Err(error) => {
                    tracing::error!(%error, "the process spawner cannot start processes");
                    let message = error.to_string();
                    while let Ok(Job { reply, .. }) = queue.recv() {
                        let _ = reply.send(Err(SpawnError {
                            step: SpawnStep::Spawner,
                            error: io::Error::new(error.kind(), message.clone()),
                        }));
                    }
                }
            })?;
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

/// What makes the children: the cloner thread, or this thread itself where the cloner
/// cannot leave the shared table.
enum Maker {
    Cloner(Cloner),
    Here(Forker),
}

impl Maker {
    fn new() -> io::Result<Self> {
        match Cloner::new() {
            Ok(cloner) => Ok(Self::Cloner(cloner)),
            Err(error) => {
                tracing::debug!(
                    %error,
                    "children are cloned from the host's shared descriptor table: every start \
                     copies it"
                );
                Forker::new().map(Self::Here)
            }
        }
    }

    /// Start the child of `spec`. The spec is dropped here, in the shared table, as soon as
    /// the child has started: our copy of its output pipe's write end must close, or the
    /// reader would never see end-of-file.
    fn spawn(&self, spec: ChildSpec) -> Result<Pid, SpawnError> {
        match self {
            Self::Cloner(cloner) => cloner.spawn(spec).1,
            Self::Here(forker) => forker.spawn(&spec, &spec.fds()),
        }
    }
}

fn run(maker: &Maker, queue: &mpsc::Receiver<Job>) {
    while let Ok(Job { spec, reply }) = queue.recv() {
        let result = maker.spawn(spec).map(Spawned::new);
        // If the caller went away (its future was dropped), the answer comes back and is
        // dropped here: its guard kills and reaps the child.
        let _ = reply.send(result);
    }
}
