//! The cloner thread: it makes the keepers, from a descriptor table of its own.
//!
//! A child made with `clone` gets a copy of the creating thread's descriptor table, and the
//! child then closes every descriptor it is not given (`child.rs`). The host's table grows
//! with its sessions and commands: thousands of pipes, sockets and namespace descriptors
//! under load. Copying such a table and closing it again costs time for every entry, and
//! every start waits in line behind it.
//!
//! So the spawner thread (`spawner.rs`) hands each start to a thread of its own, the cloner,
//! which leaves the shared table (`unshare(CLONE_FILES)`) once it is ready:
//!
//! 1. Its own table keeps the standard streams and the keeper's executable; everything else
//!    that came along is closed there (closing a copy leaves the shared one open).
//! 2. The slots below [`fd::FIRST_FREE`] are kept taken, so every later descriptor lands
//!    above the numbers the child installs its descriptors at, as
//!    [`above_reserved`](super::keeper::above_reserved) does in the shared table.
//! 3. For each start it copies in just that child's descriptors, with `pidfd_getfd` on its
//!    own process (which reads the shared table), clones the child, and closes the copies.
//!
//! Numbers in the cloner's table do not name the shared table's files. So the cloner
//! touches no descriptor of the shared table: it never drops a [`ChildSpec`] (it hands each
//! back), and it talks to the spawner thread through channels that use no descriptor (a
//! Tokio wake-up would write to the runtime's event descriptor, which is not in its table).
//! The keepers' parent-death signal follows the cloner thread, which lives as long as the
//! spawner thread.
//!
//! A kernel without `pidfd_getfd` (before Linux 5.6), or a seccomp profile that refuses it,
//! and the spawner thread makes the children itself, from the shared table, as before.

use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::mpsc;

use nix::unistd::Pid;

use toolhost_keeper_protocol::fd;

use nix::libc;
use rustix::io::fcntl_dupfd_cloexec;
use rustix::process::{PidfdFlags, PidfdGetfdFlags, pidfd_getfd, pidfd_open};

use super::child::{Forker, SpawnError, SpawnStep};
use super::keeper;
use super::spec::ChildSpec;

/// A spec lent to the cloner thread, which must not drop it: if the thread ended while
/// holding one, its descriptors stay open rather than closing numbers of the wrong table.
struct Lent(ManuallyDrop<ChildSpec>);

/// The cloner's answer: the spec it was lent, and the start's result.
struct Answer {
    spec: Lent,
    result: Result<Pid, SpawnError>,
}

/// Handle to the cloner thread; dropping it ends the thread.
pub(super) struct Cloner {
    requests: mpsc::Sender<Lent>,
    answers: mpsc::Receiver<Answer>,
}

impl Cloner {
    /// Start the cloner thread and wait until it is ready. `Err`: it could not leave the
    /// shared table or get ready, and has ended.
    pub(super) fn new() -> io::Result<Self> {
        let (requests, lent) = mpsc::channel::<Lent>();
        let (answer, answers) = mpsc::channel::<Answer>();
        let (ready, readiness) = mpsc::channel::<io::Result<()>>();
        std::thread::Builder::new()
            .name("toolhost-cloner".to_owned())
            .spawn(move || {
                let prepared = keeper::executable()
                    .and_then(|keep| OwnTable::enter(keep.as_raw_fd()))
                    .and_then(|own| Forker::new().map(|forker| (own, forker)));
                let (own, forker) = match prepared {
                    Ok(prepared) => {
                        let _ = ready.send(Ok(()));
                        prepared
                    }
                    Err(error) => {
                        let _ = ready.send(Err(error));
                        return;
                    }
                };
                while let Ok(spec) = lent.recv() {
                    let result = start(&forker, &own, &spec.0);
                    if answer.send(Answer { spec, result }).is_err() {
                        break;
                    }
                }
            })?;
        readiness
            .recv()
            .map_err(|_| io::Error::other("the cloner thread ended while starting"))??;
        Ok(Self { requests, answers })
    }

    /// Start the child of `spec` on the cloner thread; `spec` comes back with the result
    /// (`None` only if the thread ended holding it: its descriptors then stay open).
    /// Called from one thread at a time (the spawner's), so answers come in order.
    pub(super) fn spawn(&self, spec: ChildSpec) -> (Option<ChildSpec>, Result<Pid, SpawnError>) {
        let stopped = || SpawnError {
            step: SpawnStep::Spawner,
            error: io::Error::other("the cloner thread has stopped"),
        };
        if let Err(mpsc::SendError(Lent(spec))) = self.requests.send(Lent(ManuallyDrop::new(spec)))
        {
            return (Some(ManuallyDrop::into_inner(spec)), Err(stopped()));
        }
        match self.answers.recv() {
            Ok(Answer {
                spec: Lent(spec),
                result,
            }) => (Some(ManuallyDrop::into_inner(spec)), result),
            Err(_) => (None, Err(stopped())),
        }
    }
}

/// Start the child of `spec` with copies of its descriptors in this thread's table (closed
/// again once the child has exec'd).
fn start(forker: &Forker, own: &OwnTable, spec: &ChildSpec) -> Result<Pid, SpawnError> {
    let mut copies = Vec::new();
    let fds = spec
        .fds()
        .map(|shared| {
            let copy = own.copy(shared)?;
            let raw = copy.as_raw_fd();
            copies.push(copy);
            Ok(raw)
        })
        .map_err(|error| SpawnError {
            step: SpawnStep::Descriptors,
            error,
        })?;
    forker.spawn(spec, &fds)
}

/// A thread's private descriptor table, and the way back into the shared one.
struct OwnTable {
    /// A pidfd of this process: `pidfd_getfd` through it reads the shared table (the one the
    /// thread group leader holds).
    process: OwnedFd,
    /// Copies of `process` that hold every free slot below [`fd::FIRST_FREE`].
    _fillers: Vec<OwnedFd>,
}

impl OwnTable {
    /// Move the calling thread into a table of its own, after checking that descriptors can
    /// be copied out of the shared one. `Err`: the thread stays in the shared table.
    ///
    /// The new table keeps the standard streams and `keep` (the keeper's executable, which
    /// the whole process shares), at the same numbers; every other descriptor the shared
    /// table held is closed in it (closing a copy leaves the shared one open). A
    /// descriptor opened later by another thread is not in this table.
    fn enter(keep: RawFd) -> io::Result<Self> {
        let process = open_process()?;
        // A copy of the pidfd itself proves that `pidfd_getfd` works here.
        let probe = pidfd_getfd(&process, process.as_raw_fd(), PidfdGetfdFlags::empty())?;
        drop(probe);
        drop(process);
        // SAFETY: an integer argument; gives this thread a private copy of the descriptor
        // table. Every descriptor this thread owns is in the copy; closing them there
        // leaves the shared table's alone.
        if unsafe { libc::unshare(libc::CLONE_FILES) } == -1 {
            return Err(io::Error::last_os_error());
        }
        // Other threads' descriptors came along: a pipe's write end kept open here would
        // keep its reader from ever seeing end-of-file.
        close_all_but(keep);
        // Opened after the unshare, so the shared table holds no stray copy of it.
        let process = open_process()?;
        let mut fillers = Vec::new();
        loop {
            let filler = fcntl_dupfd_cloexec(&process, 0)?;
            if filler.as_raw_fd() >= fd::FIRST_FREE {
                break;
            }
            fillers.push(filler);
        }
        Ok(Self {
            process,
            _fillers: fillers,
        })
    }

    /// A copy, in this thread's table, of descriptor `fd` of the shared table (close-on-exec).
    fn copy(&self, shared: RawFd) -> io::Result<OwnedFd> {
        let copy = pidfd_getfd(self.process.as_fd(), shared, PidfdGetfdFlags::empty())?;
        if copy.as_raw_fd() >= fd::FIRST_FREE {
            return Ok(copy);
        }
        // Only if a low slot was freed since `enter`.
        Ok(fcntl_dupfd_cloexec(&copy, fd::FIRST_FREE)?)
    }
}

fn open_process() -> io::Result<OwnedFd> {
    let pid = rustix::process::getpid();
    Ok(pidfd_open(pid, PidfdFlags::empty())?)
}

/// Close every descriptor of this thread's (private) table but the standard streams and
/// `keep`.
fn close_all_but(keep: RawFd) {
    let ranges = [(3, keep - 1), (keep + 1, RawFd::MAX)];
    let closed = ranges.iter().all(|&(first, last)| {
        first > last || {
            // SAFETY: integer arguments; closes descriptors of this thread's own table.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_close_range,
                    first as libc::c_uint,
                    last as libc::c_uint,
                    0 as libc::c_uint,
                )
            };
            rc == 0
        }
    });
    if closed {
        return;
    }
    // Before Linux 5.9: one by one, as listed (the listing's own descriptor is closed once
    // the list is collected).
    let Ok(entries) = std::fs::read_dir("/proc/thread-self/fd") else {
        return;
    };
    let open: Vec<RawFd> = entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .collect();
    for fd in open {
        if fd > 2 && fd != keep {
            // SAFETY: an integer argument; closes a descriptor of this thread's own table.
            unsafe { libc::close(fd) };
        }
    }
}
