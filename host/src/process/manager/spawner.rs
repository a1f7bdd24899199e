//! The manager's spawner thread: every child is created from it.
//!
//! Children are started with `PR_SET_PDEATHSIG(SIGKILL)` so that they die with the host even
//! if it is killed outright. Linux sends that signal when the *thread* that created the child
//! exits, not the process. Creating children from whatever thread polls `start` would be
//! fragile: a Tokio blocking-pool thread (`spawn_blocking`) exits after idling for a few
//! seconds, and a runtime worker that runs `block_in_place` (as `wasmtime-wasi` may) can be
//! turned into one. So the manager owns one plain thread that does nothing but spawn, lives
//! exactly as long as the manager, and takes its children with it when it exits. A spawn
//! costs one channel hop each way.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::mpsc;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::sync::oneshot;

use super::sys::{self, ChildSpec, Forker, SpawnError, SpawnStep};

/// A started child: its pid (also its process group id) and, where the kernel supports it, a
/// pidfd for it.
pub(super) struct Spawned {
    pub(super) pid: Pid,
    pub(super) pidfd: Option<OwnedFd>,
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
    /// before the answer arrives, the thread kills and reaps the child itself, so nothing is
    /// left behind.
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
        let result = forker.spawn(&spec).map(|(pid, pidfd)| Spawned {
            pid,
            pidfd: pidfd.or_else(|| sys::pidfd_open(pid).ok()),
        });
        // Close our copy of the pipe's write end now, or the reader would never see EOF.
        drop(spec);
        if let Err(Ok(orphan)) = reply.send(result) {
            // The caller went away (its future was dropped): don't leave the child running.
            let _ = killpg(orphan.pid, Signal::SIGKILL);
            let _ = sys::wait_exited(sys::WaitTarget::Pid(orphan.pid), false, false);
        }
    }
}
