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
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, mpsc};

use nix::unistd::Pid;
use tokio::sync::oneshot;

use super::child::{Forker, SpawnError, SpawnStep};
use super::cloner::Cloner;
use super::reap;
use super::resident::Resident;
use super::spec::ChildSpec;

/// A keeper's pid, and how it is reaped: by the host (its child) or by the resident keeper
/// that forked it (`resident.rs`), once released to it.
///
/// Until it is stopped and reaped ([`KeeperPid::stop_and_reap`]) the pid cannot name another
/// process: the keeper is alive, or a zombie nobody reaps.
#[derive(Clone)]
pub(super) struct KeeperPid {
    pid: Pid,
    /// The resident that forked it, and the keeper's pidfd, which signals reach it through
    /// (`None`: our own child).
    resident: Option<(Arc<Resident>, Option<Arc<OwnedFd>>)>,
}

impl KeeperPid {
    /// The pid.
    pub(super) fn pid(&self) -> Pid {
        self.pid
    }

    /// Stop it (`SIGTERM` makes a keeper kill every descendant and exit; one that has not
    /// set up yet kills nothing, having started nothing) and have it reaped once it has
    /// exited, without blocking the caller. Nobody may signal it afterwards.
    pub(super) fn stop_and_reap(self) {
        match self.resident {
            None => reap::stop_and_reap(self.pid),
            Some((resident, pidfd)) => {
                terminate(self.pid, pidfd.as_deref());
                resident.release(self.pid);
            }
        }
    }

    /// Its pid when it is our child, for the caller to reap; `None` when its resident reaps
    /// it (released to it now).
    pub(super) fn reaped_by_us(self) -> Option<Pid> {
        match self.resident {
            None => Some(self.pid),
            Some((resident, _)) => {
                resident.release(self.pid);
                None
            }
        }
    }

    /// Stop it and wait until it has exited (and is reaped, by us or its resident; `pidfd`
    /// is its pidfd, if any). Blocks: call it from a blocking thread.
    pub(super) fn stop_and_wait(self) {
        match self.resident {
            None => {
                let _ = nix::sys::signal::kill(self.pid, nix::sys::signal::Signal::SIGTERM);
                let _ = reap::wait_exited(self.pid, false);
            }
            Some((resident, pidfd)) => {
                terminate(self.pid, pidfd.as_deref());
                if let Some(pidfd) = pidfd {
                    reap::wait_pidfd(&pidfd);
                }
                resident.release(self.pid);
            }
        }
    }
}

/// `SIGTERM` to a keeper forked by a resident: through its pidfd where there is one, which
/// names it even if its resident died and another reaped it.
fn terminate(pid: Pid, pidfd: Option<&OwnedFd>) {
    match pidfd {
        Some(pidfd) => {
            // SAFETY: integer arguments on a pidfd we own; no siginfo.
            unsafe {
                nix::libc::syscall(
                    nix::libc::SYS_pidfd_send_signal,
                    pidfd.as_raw_fd(),
                    nix::libc::SIGTERM,
                    std::ptr::null::<nix::libc::siginfo_t>(),
                    0u32,
                )
            };
        }
        None => {
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        }
    }
}

/// A started keeper.
///
/// Until [`Spawned::disarm`] is called, dropping it stops the keeper (and so whatever it
/// started) and reaps it: a start abandoned anywhere between the spawn and the hand-over to a
/// monitor (its future dropped, an error on the way) leaves nothing running or unreaped.
pub(super) struct Spawned {
    keeper: KeeperPid,
    /// Readable once the keeper has exited (`None` on kernels without pidfds).
    pidfd: Option<OwnedFd>,
    armed: bool,
}

impl Spawned {
    fn new(pid: Pid) -> Self {
        Self::with(KeeperPid {
            pid,
            resident: None,
        })
    }

    /// The keeper `pid` forked by `resident`.
    pub(super) fn forked(pid: Pid, resident: Arc<Resident>) -> Self {
        // Opened while the keeper is alive or an unreaped zombie, so it is the keeper's.
        let pidfd = reap::pidfd_open(pid).ok().map(Arc::new);
        Self::with(KeeperPid {
            pid,
            resident: Some((resident, pidfd)),
        })
    }

    fn with(keeper: KeeperPid) -> Self {
        // Opened while the keeper is alive or an unreaped zombie, so it is the keeper's.
        let pidfd = reap::pidfd_open(keeper.pid).ok();
        Self {
            keeper,
            pidfd,
            armed: true,
        }
    }

    /// The keeper's pid.
    pub(super) fn pid(&self) -> Pid {
        self.keeper.pid
    }

    /// The keeper's pid and reaper, for its record.
    pub(super) fn keeper(&self) -> KeeperPid {
        self.keeper.clone()
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

    /// Stop the keeper and wait until it has exited. Blocks: call it from a blocking thread.
    pub(super) fn stop_and_wait(mut self) {
        self.armed = false;
        self.keeper.clone().stop_and_wait();
    }

    /// The caller owns the child from now on (it must stop and reap it): its pid.
    pub(super) fn release(mut self) -> Pid {
        self.armed = false;
        self.keeper.pid
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if self.armed {
            self.keeper.clone().stop_and_reap();
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
