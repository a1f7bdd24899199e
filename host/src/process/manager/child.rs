//! Starting a child: the `posix_spawn`-like start of a command's keeper, which also makes the
//! keeper a session leader, sets its parent-death signal and installs its descriptors.
//!
//! This file holds all the code that runs between `clone` and `exec`, and the `unsafe` it
//! takes. There the child shares the parent's memory: it makes async-signal-safe calls only,
//! and allocates nothing. What the child runs, and with what, is prepared beforehand in safe
//! code (`spec.rs`).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering};

use nix::libc;
use nix::unistd::Pid;
use toolhost_keeper_protocol::fd;

use super::keeper::{self, above_reserved};
use super::reap::wait_exited;
use super::spec::{ChildFds, ChildSpec};

/// The machinery the spawner thread keeps between spawns: a stack for the child and
/// `/dev/null`. Only used from that thread.
pub(super) struct Forker {
    stack: ChildStack,
    dev_null: OwnedFd,
    /// The keeper's executable.
    keeper: BorrowedFd<'static>,
}

impl Forker {
    /// Allocate the child stack, open `/dev/null` and load the keeper; block every signal in the calling
    /// thread for good (signals for the process are handled by other threads), so that a
    /// new child starts with all signals blocked until it has reset their handlers.
    pub(super) fn new() -> io::Result<Self> {
        // SAFETY: sigset_t is plain data, filled by sigfillset before use.
        let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `all` is a valid sigset_t; blocking signals in this thread is sound.
        let rc = unsafe {
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        let dev_null = std::fs::File::open("/dev/null")?;
        Ok(Self {
            stack: ChildStack::new()?,
            dev_null: above_reserved(OwnedFd::from(dev_null))?,
            keeper: keeper::executable()?,
        })
    }

    /// Start the child described by `spec`, the way `posix_spawn` does: `clone` with
    /// `CLONE_VM | CLONE_VFORK`, so no page tables are copied and the parent's memory never
    /// goes copy-on-write; this thread is suspended until the child has called `exec` (or
    /// failed and exited).
    ///
    /// In the child (see [`child_main`]): `setsid()`, so the keeper leads a session and group
    /// of its own (the command gets another); `PR_SET_PDEATHSIG(SIGTERM)`, so the keeper
    /// stops everything under it when the *thread* that created it exits (hence the
    /// dedicated spawner thread); a check that the parent did not die before that; `nice`;
    /// stdio and the keeper's descriptors; working directory; every other descriptor closed;
    /// signal handlers reset to the default (they would run on shared memory) and the signal
    /// mask cleared; `execveat` of the keeper.
    ///
    /// `fds` are the numbers of the spec's descriptors in this thread's descriptor table
    /// ([`ChildSpec::fds`] where the thread shares the host's).
    pub(super) fn spawn(&self, spec: &ChildSpec, fds: &ChildFds) -> Result<Pid, SpawnError> {
        let argv: Vec<*const libc::c_char> = spec
            .argv
            .iter()
            .map(|arg| arg.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect();
        let envp: Vec<*const libc::c_char> = spec
            .envp
            .iter()
            .map(|pair| pair.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect();
        let context = ChildContext {
            keeper: self.keeper.as_raw_fd(),
            argv: argv.as_ptr(),
            envp: envp.as_ptr(),
            workdir: spec.workdir.as_ptr(),
            stdin: fds.stdin.unwrap_or(self.dev_null.as_raw_fd()),
            output: fds.output,
            status: fds.status,
            control: fds.control,
            cgroups: std::array::from_fn(|index| fds.cgroups.get(index).copied().unwrap_or(-1)),
            layers: fds.layers.unwrap_or((-1, -1)),
            namespaces: std::array::from_fn(|index| {
                fds.namespaces.get(index).copied().unwrap_or(-1)
            }),
            nice: spec.nice,
            parent: nix::unistd::getpid().as_raw(),
            rtmax: libc::SIGRTMAX(),
            error: AtomicI32::new(0),
            stage: AtomicI32::new(0),
        };
        let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD;
        // SAFETY: the stack is ours, unused and big enough for `child_main`, which only makes
        // async-signal-safe calls and does not allocate. `context` and everything it points
        // to stay alive and unchanged until `clone` returns, because CLONE_VFORK suspends
        // this thread until the child has exec'd or exited.
        let pid = unsafe {
            libc::clone(
                child_main,
                self.stack.top(),
                flags,
                std::ptr::from_ref(&context).cast_mut().cast(),
            )
        };
        if pid < 0 {
            return Err(SpawnError {
                step: SpawnStep::Clone,
                error: io::Error::last_os_error(),
            });
        }
        let pid = Pid::from_raw(pid);
        let error = context.error.load(Ordering::Acquire);
        if error != 0 {
            // The child failed before exec and has exited: reap it and report why.
            let _ = wait_exited(pid, false);
            let step = match context.stage.load(Ordering::Acquire) {
                STAGE_SETSID => SpawnStep::Setsid,
                STAGE_PDEATHSIG => SpawnStep::DeathSignal,
                STAGE_PARENT => SpawnStep::ParentCheck,
                STAGE_STDIO => SpawnStep::Stdio,
                STAGE_CHDIR => SpawnStep::Chdir,
                _ => SpawnStep::Exec,
            };
            return Err(SpawnError {
                step,
                error: io::Error::from_raw_os_error(error),
            });
        }
        Ok(pid)
    }
}

/// Which step of starting a child failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SpawnStep {
    /// Handing the job to the spawner thread.
    Spawner,
    /// Copying the child's descriptors into the spawner thread's table.
    Descriptors,
    /// `clone` itself (e.g. too many processes).
    Clone,
    /// `setsid` in the child.
    Setsid,
    /// `prctl(PR_SET_PDEATHSIG)` in the child.
    DeathSignal,
    /// The parent died while the child started.
    ParentCheck,
    /// Installing stdio in the child.
    Stdio,
    /// Entering the working directory.
    Chdir,
    /// `execveat` of the keeper.
    Exec,
}

/// Why a child could not be started.
#[derive(Debug)]
pub(super) struct SpawnError {
    pub(super) step: SpawnStep,
    pub(super) error: io::Error,
}

impl std::fmt::Display for SpawnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let step = match self.step {
            SpawnStep::Spawner => "spawner thread",
            SpawnStep::Descriptors => "pidfd_getfd",
            SpawnStep::Clone => "clone",
            SpawnStep::Setsid => "setsid",
            SpawnStep::DeathSignal => "prctl(PR_SET_PDEATHSIG)",
            SpawnStep::ParentCheck => "parent check",
            SpawnStep::Stdio => "dup2",
            SpawnStep::Chdir => "chdir",
            SpawnStep::Exec => "exec",
        };
        write!(f, "{step}: {}", self.error)
    }
}

const STAGE_SETSID: i32 = 1;
const STAGE_PDEATHSIG: i32 = 2;
const STAGE_PARENT: i32 = 3;
const STAGE_STDIO: i32 = 4;
const STAGE_CHDIR: i32 = 5;
const STAGE_EXEC: i32 = 6;

/// What `child_main` reads (and, on failure, writes), on the parent's stack.
struct ChildContext {
    /// The keeper's executable.
    keeper: RawFd,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    workdir: *const libc::c_char,
    stdin: RawFd,
    output: RawFd,
    /// The keeper's status pipe and control socket.
    status: RawFd,
    control: RawFd,
    /// The confinement layers for [`fd::RULESET`] and [`fd::SECCOMP`]; `(-1, -1)` when
    /// unconfined.
    layers: (RawFd, RawFd),
    /// The namespaces for the descriptors from [`fd::FIRST_NAMESPACE`] on; -1 for none.
    namespaces: [RawFd; fd::MAX_NAMESPACES],
    /// Cgroup files (`tasks` or `cgroup.procs`) to join; -1 for none.
    cgroups: [RawFd; fd::MAX_CGROUPS],
    nice: i32,
    parent: libc::pid_t,
    rtmax: libc::c_int,
    /// errno of the failed step; 0 if the child got to exec.
    error: AtomicI32,
    stage: AtomicI32,
}

/// The child, between `clone` and `execve`. Shares the parent's memory (the parent is
/// suspended): only async-signal-safe calls, no allocation, no unwinding.
extern "C" fn child_main(context: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `context` is the parent's ChildContext, alive while the parent is suspended.
    let context = unsafe { &*context.cast::<ChildContext>() };
    let fail = |stage: i32, errno: i32| -> libc::c_int {
        context.stage.store(stage, Ordering::Release);
        context.error.store(errno.max(1), Ordering::Release);
        // SAFETY: ends the child without running any of the parent's exit handlers.
        unsafe { libc::_exit(127) }
    };
    let errno = || nix::errno::Errno::last_raw();
    // SAFETY: setsid, prctl and getppid take no pointers; they change only this child.
    let parent_ok = unsafe {
        if libc::setsid() == -1 {
            return fail(STAGE_SETSID, errno());
        }
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong) == -1 {
            return fail(STAGE_PDEATHSIG, errno());
        }
        libc::getppid() == context.parent
    };
    // The parent died before the prctl: nobody would ever kill us.
    if !parent_ok {
        return fail(STAGE_PARENT, libc::ESRCH);
    }
    // The command's cgroups are joined by the keeper, not here: moving a process between
    // cgroups can wait for an RCU grace period (cgroup v1's threadgroup lock, 10-25 ms after
    // a quiet spell), and this thread's parent, the spawner, is suspended until the exec, so
    // every start of the host would queue behind it.
    if context.nice != 0 {
        // SAFETY: an integer argument; failure (not permitted) is harmless.
        unsafe { libc::nice(context.nice) };
    }
    // SAFETY: the descriptors were opened by the parent and stay open until `clone` returns
    // there (CLONE_VFORK); dup2 only changes this child's descriptor table.
    // Every source descriptor is at or above `fd::FIRST_FREE` (`above_reserved`), so none is
    // overwritten before it is copied.
    let stdio = unsafe {
        libc::dup2(context.stdin, 0) != -1
            && libc::dup2(context.output, 1) != -1
            && libc::dup2(context.output, 2) != -1
            && libc::dup2(context.status, fd::STATUS) != -1
            && libc::dup2(context.control, fd::CONTROL) != -1
            && libc::dup2(context.keeper, fd::EXECUTABLE) != -1
            && (context.layers.0 < 0
                || (libc::dup2(context.layers.0, fd::RULESET) != -1
                    && libc::dup2(context.layers.1, fd::SECCOMP) != -1))
            && (fd::FIRST_NAMESPACE..)
                .zip(context.namespaces)
                .all(|(target, source)| source < 0 || libc::dup2(source, target) != -1)
    };
    let namespaces = context
        .namespaces
        .iter()
        .filter(|source| **source >= 0)
        .count();
    let first_cgroup = fd::first_cgroup(context.layers.0 >= 0, namespaces);
    // SAFETY: as above; the targets follow every other descriptor the keeper gets, and the
    // sources are at or above `fd::FIRST_FREE`, so none is overwritten before it is copied.
    let stdio = stdio
        && (first_cgroup..)
            .zip(context.cgroups)
            .all(|(target, source)| source < 0 || unsafe { libc::dup2(source, target) } != -1);
    let cgroups = context
        .cgroups
        .iter()
        .filter(|source| **source >= 0)
        .count();
    let first_closed = first_cgroup + cgroups as RawFd;
    if !stdio {
        return fail(STAGE_STDIO, errno());
    }
    // Nothing else of the host's: close every other descriptor, including any the host
    // opened without close-on-exec. (Linux 5.9+; on older kernels this fails and the
    // close-on-exec flags are all there is.)
    // SAFETY: integer arguments; closes descriptors of this child only (CLONE_VFORK without
    // CLONE_FILES gives it its own descriptor table).
    unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first_closed as libc::c_uint,
            libc::c_uint::MAX,
            0 as libc::c_uint,
        )
    };
    // SAFETY: `workdir` is a NUL-terminated string owned by the parent's ChildSpec, alive
    // while the parent is suspended.
    if unsafe { libc::chdir(context.workdir) } == -1 {
        return fail(STAGE_CHDIR, errno());
    }
    reset_signals(context.rtmax);
    // SAFETY: argv and envp are NULL-terminated arrays of NUL-terminated strings built by the
    // parent's ChildSpec, alive while the parent is suspended; `fd::EXECUTABLE` is the
    // keeper's executable. On success this never returns.
    unsafe {
        libc::syscall(
            libc::SYS_execveat,
            fd::EXECUTABLE,
            c"".as_ptr(),
            context.argv,
            context.envp,
            libc::AT_EMPTY_PATH,
        )
    };
    fail(STAGE_EXEC, errno())
}

/// In the child before exec: signal handlers must not run here (they would run on the
/// parent's memory), and the signal mask survives exec. Reset every handled or ignored signal
/// to the default, then unblock every signal. Async-signal-safe calls only.
///
/// Ignored signals survive exec. The Rust runtime ignores SIGPIPE, and a shell ignores SIGINT
/// and SIGQUIT in a host it starts in the background (`toolhost serve &`): commands would
/// inherit them, and an interrupt sent to a command would do nothing.
fn reset_signals(rtmax: libc::c_int) {
    for signal in 1..=rtmax {
        if signal == libc::SIGKILL || signal == libc::SIGSTOP {
            continue;
        }
        // SAFETY: sigaction is plain data; all zeroes is a valid (default) value.
        let mut current: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: a null new action only reads the current one into `current`, a valid,
        // writable sigaction.
        if unsafe { libc::sigaction(signal, std::ptr::null(), &mut current) } != 0 {
            continue;
        }
        let reset = match current.sa_sigaction {
            libc::SIG_DFL => false,
            libc::SIG_IGN => true,
            _ => true,
        };
        if reset {
            // SAFETY: as above, all zeroes is a valid sigaction.
            let mut default: libc::sigaction = unsafe { std::mem::zeroed() };
            default.sa_sigaction = libc::SIG_DFL;
            // SAFETY: `default` is a valid sigaction; the old action is not asked for.
            unsafe { libc::sigaction(signal, &default, std::ptr::null_mut()) };
        }
    }
    // SAFETY: sigset_t is plain data, initialised by sigemptyset before use.
    let mut none: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `none` is a valid, writable sigset_t; setting this thread's mask is what the
    // child needs before exec.
    unsafe {
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
    }
}

/// An mmap'ed stack for children, with a guard page below it.
struct ChildStack {
    base: *mut libc::c_void,
    len: usize,
}

impl ChildStack {
    const SIZE: usize = 128 * 1024;

    fn new() -> io::Result<Self> {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let len = Self::SIZE + page;
        // SAFETY: a fresh private anonymous mapping; checked below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = Self { base, len };
        // SAFETY: the lowest page of our own mapping becomes the guard page.
        if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// The initial stack pointer (stacks grow down; the mapping is page aligned).
    fn top(&self) -> *mut libc::c_void {
        // SAFETY: one past the end of our mapping.
        unsafe { self.base.cast::<u8>().add(self.len).cast() }
    }
}

impl Drop for ChildStack {
    fn drop(&mut self) {
        // SAFETY: our own mapping, no longer used (no child is running on it).
        unsafe {
            libc::munmap(self.base, self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::spec::{ChildStdio, Launch};

    use super::super::keeper::{HostEnds, channels, read_exit, request, wait_gone};
    use super::super::reap::{Exit, stop_and_reap};
    use super::*;
    use tokio::net::unix::pipe::Receiver;

    fn spec(command: &str, workdir: &Path) -> (io::PipeReader, HostEnds, ChildSpec) {
        let (reader, writer) = io::pipe().expect("pipe");
        let (host, keeper) = channels().expect("channels");
        let spec = ChildSpec::new(
            Launch {
                shell: Path::new("/bin/sh"),
                command,
                env: &[],
                inherit: None,
                workdir,
                stdio: ChildStdio {
                    output: writer.into(),
                    stdin: None,
                },
            },
            keeper,
            None,
            None,
            0,
        );
        (reader, host, spec.expect("spec"))
    }

    /// Live processes whose command line contains `marker`.
    fn running(marker: &str) -> bool {
        std::fs::read_dir("/proc")
            .expect("/proc")
            .flatten()
            .any(|entry| {
                let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
                let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
                String::from_utf8_lossy(&cmdline).contains(marker)
                    && stat
                        .rsplit_once(") ")
                        .is_some_and(|(_, rest)| !rest.starts_with('Z'))
            })
    }

    /// Live `sleep` processes whose argument is `marker` (not the shell or the keeper, whose
    /// command lines hold the marker too).
    fn sleeping(marker: &str) -> usize {
        std::fs::read_dir("/proc")
            .expect("/proc")
            .flatten()
            .filter(|entry| {
                let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
                let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
                let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
                args.first().is_some_and(|arg0| arg0.ends_with(b"sleep"))
                    && args.get(1) == Some(&marker.as_bytes())
                    && stat
                        .rsplit_once(") ")
                        .is_some_and(|(_, rest)| !rest.starts_with('Z'))
            })
            .count()
    }

    #[test]
    fn keepers_stop_everything_when_the_thread_that_spawned_them_exits() {
        let marker = "300.5151";
        let command = format!("setsid sleep {marker} & exec sleep {marker}");
        let (pid, _host) = std::thread::spawn(move || {
            let forker = Forker::new().expect("forker");
            let (_reader, host, sleeps) = spec(&command, Path::new("/"));
            let pid = forker.spawn(&sleeps, &sleeps.fds()).expect("spawn");
            // Both sleeps run (so the keeper is past its start) before the thread, and with
            // it the parent-death signal, goes.
            while sleeping(marker) < 2 {
                std::thread::yield_now();
            }
            (pid, host)
        })
        .join()
        .expect("join");
        // The control socket is still open: the parent-death signal alone stopped it all.
        assert_eq!(
            wait_exited(pid, false).expect("waitid"),
            Some(Exit::Code(0))
        );
        assert!(!running(marker), "a sleep outlived its keeper");
    }

    #[test]
    fn spawn_failures_name_the_step() {
        let forker = Forker::new().expect("forker");
        let (_reader, _host, bad_dir) = spec("true", Path::new("/nonexistent/dir"));
        let error = forker.spawn(&bad_dir, &bad_dir.fds()).expect_err("chdir");
        assert_eq!(error.step, SpawnStep::Chdir);
        assert!(error.to_string().starts_with("chdir: "), "{error}");
    }

    #[tokio::test]
    async fn a_keeper_reports_the_exit_then_ends_when_nothing_is_left() {
        let forker = Forker::new().expect("forker");
        let (_reader, host, exits) = spec("exit 5", Path::new("/"));
        let pid = forker.spawn(&exits, &exits.fds()).expect("spawn");
        drop(exits);
        let mut status = Receiver::from_owned_fd(host.status).expect("status");
        let report = read_exit(&mut status).await;
        assert_eq!(
            (report.exit, report.nothing_left),
            (Some(Exit::Code(5)), true)
        );
        wait_gone(status, None).await;
        assert_eq!(wait_exited(pid, false).expect("reap"), Some(Exit::Code(0)));
        let gone = wait_exited(pid, true);
        assert_eq!(gone.map_err(|e| e.raw_os_error()), Err(Some(libc::ECHILD)));

        // A signal reaches the command through the keeper, and is reported as its end.
        let (_reader, host, sleeps) = spec("exec sleep 30", Path::new("/"));
        let pid = forker.spawn(&sleeps, &sleeps.fds()).expect("spawn");
        drop(sleeps);
        let mut status = Receiver::from_owned_fd(host.status).expect("status");
        request(&host.control, crate::process::Signal::Kill).expect("request");
        let exit = read_exit(&mut status).await.exit;
        assert_eq!(exit, Some(Exit::Signal(libc::SIGKILL)));
        stop_and_reap(pid);
        wait_gone(status, None).await;
    }

    /// The number of descriptors in the table of thread `tid` of this process.
    fn table_size(tid: &str) -> usize {
        std::fs::read_dir(format!("/proc/self/task/{tid}/fd")).map_or(0, Iterator::count)
    }

    #[tokio::test]
    async fn children_are_cloned_from_a_small_table_of_their_own() {
        let open = |count| -> Vec<std::fs::File> {
            (0..count)
                .map(|_| std::fs::File::open("/dev/null").expect("open"))
                .collect()
        };
        // The host holds many descriptors before the thread starts, and opens more after.
        let before = open(150);
        let spawner = super::super::spawner::Spawner::new().expect("spawner");
        let after = open(150);
        let (reader, host, echoes) = spec("echo started; exit 3", Path::new("/"));
        let spawned = spawner.spawn(echoes).await.expect("spawn");
        let mut status = Receiver::from_owned_fd(host.status).expect("status");
        assert_eq!(read_exit(&mut status).await.exit, Some(Exit::Code(3)));
        let output = io::read_to_string(reader).expect("output");
        assert_eq!(output, "started\n");
        stop_and_reap(spawned.release());
        // Every cloner thread of this process (other tests make theirs) has left the
        // shared table, which holds the 300, and kept none of the first 150.
        let spawners: Vec<String> = std::fs::read_dir("/proc/self/task")
            .expect("tasks")
            .flatten()
            .filter(|task| {
                std::fs::read_to_string(task.path().join("comm"))
                    .is_ok_and(|comm| comm.trim() == "toolhost-cloner")
            })
            .map(|task| task.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(!spawners.is_empty(), "no cloner thread found");
        let shared = table_size(&rustix::process::getpid().as_raw_nonzero().to_string());
        assert!(
            shared >= before.len() + after.len(),
            "the shared table holds {shared}"
        );
        for tid in spawners {
            let own = table_size(&tid);
            assert!(own < 64, "cloner thread {tid} holds {own} descriptors");
        }
    }
}
