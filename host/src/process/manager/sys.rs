//! The Linux process calls the manager needs beyond what `nix` wraps: a `posix_spawn`-like
//! spawn that also sets up a session and the parent-death signal, `pidfd_open`, and a
//! `waitid` that reads any exit (including real-time signals) and can leave the zombie in
//! place.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

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

/// Which child `wait_exited` asks about.
pub(super) enum WaitTarget<'a> {
    /// By pid: only sound while the child is unreaped (the pid cannot be reused until then).
    Pid(Pid),
    /// By pidfd: always refers to the same process.
    PidFd(BorrowedFd<'a>),
}

/// `waitid(WEXITED)` on one child. `Ok(None)` when `nohang` and it has not exited yet.
/// With `keep_zombie` (`WNOWAIT`) the child stays a zombie, so its pid (and so its process
/// group id) cannot be reused and the group can still be signalled safely.
pub(super) fn wait_exited(
    target: WaitTarget<'_>,
    nohang: bool,
    keep_zombie: bool,
) -> io::Result<Option<Exit>> {
    let id = match target {
        WaitTarget::Pid(pid) => WaitId::Pid(rustix_pid(pid)?),
        WaitTarget::PidFd(fd) => WaitId::PidFd(fd),
    };
    let mut options = WaitIdOptions::EXITED;
    if nohang {
        options |= WaitIdOptions::NOHANG;
    }
    if keep_zombie {
        options |= WaitIdOptions::NOWAIT;
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

/// `SIGKILL` process group `pid` (whose leader is our unreaped child `pid`) and reap the
/// leader: at once if it is already dead, else from a short-lived thread, so that the caller
/// never blocks on a dying process. The caller must own `pid` (nobody else may signal or reap
/// it afterwards).
pub(super) fn kill_and_reap(pid: Pid) {
    let _ = nix::sys::signal::killpg(pid, Signal::SIGKILL);
    reap_soon(pid);
}

/// Reap our child `pid`, which has exited or been sent `SIGKILL`: at once if it is already
/// a zombie, else from a short-lived thread (inline if no thread can be started).
pub(super) fn reap_soon(pid: Pid) {
    if !matches!(wait_exited(WaitTarget::Pid(pid), true, false), Ok(None)) {
        // Reaped now, or not ours to reap.
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("toolhost-reaper".to_owned())
        .spawn(move || {
            let _ = wait_exited(WaitTarget::Pid(pid), false, false);
        });
    if spawned.is_err() {
        let _ = wait_exited(WaitTarget::Pid(pid), false, false);
    }
}

/// Reap our children `pids`, which have exited or been sent `SIGKILL`: those already
/// zombies at once, the rest from one short-lived thread, so that the caller never waits.
/// If no thread can be started, the rest are left unreaped (zombies until the host exits)
/// rather than waited for. The caller must own every pid (nobody else may signal or reap it
/// afterwards).
pub(super) fn reap_all_soon(mut pids: Vec<Pid>) {
    pids.retain(|&pid| matches!(wait_exited(WaitTarget::Pid(pid), true, false), Ok(None)));
    if pids.is_empty() {
        return;
    }
    let count = pids.len();
    let spawned = std::thread::Builder::new()
        .name("toolhost-reaper".to_owned())
        .spawn(move || {
            for pid in pids {
                let _ = wait_exited(WaitTarget::Pid(pid), false, false);
            }
        });
    if let Err(error) = spawned {
        tracing::warn!(count, %error, "cannot start a thread to reap killed processes; left unreaped");
    }
}

/// Whether process group `pgid` has a member that is not a zombie, by scanning `/proc`.
/// `true` when `/proc` cannot be read (the caller then just tries the signal).
pub(super) fn group_has_live_member(pgid: Pid) -> bool {
    let Ok(proc_dir) = std::fs::read_dir("/proc") else {
        return true;
    };
    let pgid = pgid.as_raw().to_string();
    proc_dir.flatten().any(|entry| {
        let is_pid = entry
            .file_name()
            .to_str()
            .is_some_and(|name| name.bytes().all(|b| b.is_ascii_digit()));
        if !is_pid {
            return false;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            return false;
        };
        // `pid (comm) state ppid pgrp ...`; the comm may contain anything, so split after its
        // last `) `.
        let Some((_, rest)) = stat.rsplit_once(") ") else {
            return false;
        };
        let mut fields = rest.split(' ');
        let state = fields.next().unwrap_or("Z");
        let group = fields.nth(1);
        group == Some(pgid.as_str()) && state != "Z" && state != "X"
    })
}

/// `pidfd_open(pid, 0)` (Linux 5.3+). The descriptor is close-on-exec and becomes readable
/// when the process exits.
pub(super) fn pidfd_open(pid: Pid) -> io::Result<OwnedFd> {
    Ok(rustix::process::pidfd_open(
        rustix_pid(pid)?,
        rustix::process::PidfdFlags::empty(),
    )?)
}

/// Everything a child needs, prepared by the parent: between `clone` and `exec` the child
/// shares the parent's memory and must not allocate or take locks.
pub(super) struct ChildSpec {
    program: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    workdir: CString,
    /// Becomes the child's stdout and stderr.
    output: OwnedFd,
    nice: i32,
}

impl ChildSpec {
    /// `shell -c command` in `workdir`, with the host environment (only the `inherit` names,
    /// if given) plus `env` (which wins), stdout and stderr both `output`, stdin `/dev/null`. A
    /// `shell` without a `/` is looked up in `PATH`.
    pub(super) fn new(
        shell: &Path,
        command: &str,
        env: &[(String, String)],
        inherit: Option<&[String]>,
        workdir: &Path,
        output: OwnedFd,
        nice: i32,
    ) -> io::Result<Self> {
        let program = cstring(find_program(shell)?.as_os_str().as_bytes())?;
        let argv = vec![
            cstring(shell.as_os_str().as_bytes())?,
            cstring(b"-c")?,
            cstring(command.as_bytes())?,
        ];
        let mut vars: Vec<(OsString, OsString)> = std::env::vars_os()
            .filter(|(key, _)| {
                inherit.is_none_or(|names| names.iter().any(|name| OsStr::new(name) == key))
            })
            .filter(|(key, _)| !env.iter().any(|(name, _)| OsStr::new(name) == key))
            .collect();
        vars.extend(
            env.iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v))),
        );
        let envp = vars
            .iter()
            .map(|(key, value)| {
                let mut pair = Vec::with_capacity(key.len() + value.len() + 1);
                pair.extend_from_slice(key.as_bytes());
                pair.push(b'=');
                pair.extend_from_slice(value.as_bytes());
                cstring(&pair)
            })
            .collect::<io::Result<_>>()?;
        Ok(Self {
            program,
            argv,
            envp,
            workdir: cstring(workdir.as_os_str().as_bytes())?,
            output: above_stdio(output)?,
            nice,
        })
    }
}

fn cstring(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL byte"))
}

/// `program` itself if it contains a `/`, else the first executable file of that name in
/// `PATH`; made absolute (against the host's working directory), since the child changes
/// directory before `exec`.
fn find_program(program: &Path) -> io::Result<PathBuf> {
    let found = if program.as_os_str().as_bytes().contains(&b'/') {
        program.to_owned()
    } else {
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .map(|dir| dir.join(program))
            .find(|candidate| {
                std::fs::metadata(candidate)
                    .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
            })
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "not found in PATH"))?
    };
    if found.is_absolute() {
        Ok(found)
    } else {
        Ok(std::env::current_dir()?.join(found))
    }
}

/// Move a descriptor to number 3 or above, so that installing the child's stdio with `dup2`
/// cannot clobber it.
fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor we own returns a new one that nothing else owns.
    let moved = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if moved < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above, the new descriptor is ours alone.
    Ok(unsafe { OwnedFd::from_raw_fd(moved) })
}

/// The machinery the spawner thread keeps between spawns: a stack for the child and
/// `/dev/null`. Only used from that thread.
pub(super) struct Forker {
    stack: ChildStack,
    dev_null: OwnedFd,
    pidfd_flag: AtomicBool,
}

impl Forker {
    /// Allocate the child stack and open `/dev/null`; block every signal in the calling
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
            dev_null: above_stdio(OwnedFd::from(dev_null))?,
            pidfd_flag: AtomicBool::new(true),
        })
    }

    /// Start the child described by `spec`, the way `posix_spawn` does: `clone` with
    /// `CLONE_VM | CLONE_VFORK`, so no page tables are copied and the parent's memory never
    /// goes copy-on-write; this thread is suspended until the child has called `exec` (or
    /// failed and exited). Also asks for a pidfd (`CLONE_PIDFD`) where the kernel has them.
    ///
    /// In the child (see [`child_main`]): `setsid()`, so it leads a new session and process
    /// group and the whole tree can be signalled with `killpg`; `PR_SET_PDEATHSIG(SIGKILL)`,
    /// so it dies when the *thread* that created it exits (hence the dedicated spawner
    /// thread); a check that the parent did not die before that; `nice`; stdio; working
    /// directory; every descriptor but stdio closed; signal handlers reset to the default (they
    /// would run on shared memory) and the signal mask cleared; `execve`.
    pub(super) fn spawn(&self, spec: &ChildSpec) -> Result<(Pid, Option<OwnedFd>), SpawnError> {
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
            program: spec.program.as_ptr(),
            argv: argv.as_ptr(),
            envp: envp.as_ptr(),
            workdir: spec.workdir.as_ptr(),
            stdin: self.dev_null.as_raw_fd(),
            output: spec.output.as_raw_fd(),
            nice: spec.nice,
            parent: nix::unistd::getpid().as_raw(),
            rtmax: libc::SIGRTMAX(),
            error: AtomicI32::new(0),
            stage: AtomicI32::new(0),
        };
        let mut flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD;
        if self.pidfd_flag.load(Ordering::Relaxed) {
            flags |= libc::CLONE_PIDFD;
        }
        let (pid, pidfd) = loop {
            let mut pidfd: libc::c_int = -1;
            // SAFETY: the stack is ours, unused and big enough for `child_main`, which only
            // makes async-signal-safe calls and does not allocate. `context` and everything
            // it points to stay alive and unchanged until `clone` returns, because
            // CLONE_VFORK suspends this thread until the child has exec'd or exited.
            let pid = unsafe {
                libc::clone(
                    child_main,
                    self.stack.top(),
                    flags,
                    std::ptr::from_ref(&context).cast_mut().cast(),
                    &mut pidfd as *mut libc::c_int,
                )
            };
            if pid >= 0 {
                break (pid, pidfd);
            }
            let error = io::Error::last_os_error();
            if error.raw_os_error() == Some(libc::EINVAL) && flags & libc::CLONE_PIDFD != 0 {
                // A kernel without CLONE_PIDFD (before 5.2): the manager falls back to SIGCHLD.
                self.pidfd_flag.store(false, Ordering::Relaxed);
                flags &= !libc::CLONE_PIDFD;
                continue;
            }
            return Err(SpawnError {
                step: SpawnStep::Clone,
                error,
            });
        };
        let pid = Pid::from_raw(pid);
        // SAFETY: with CLONE_PIDFD the kernel stored a new descriptor that we own.
        let pidfd = (flags & libc::CLONE_PIDFD != 0 && pidfd >= 0)
            .then(|| unsafe { OwnedFd::from_raw_fd(pidfd) });
        let error = context.error.load(Ordering::Acquire);
        if error != 0 {
            // The child failed before exec and has exited: reap it and report why.
            let _ = wait_exited(WaitTarget::Pid(pid), false, false);
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
        Ok((pid, pidfd))
    }
}

/// Which step of starting a child failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SpawnStep {
    /// Handing the job to the spawner thread.
    Spawner,
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
    /// `execve` of the shell.
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
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    workdir: *const libc::c_char,
    stdin: RawFd,
    output: RawFd,
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
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) == -1 {
            return fail(STAGE_PDEATHSIG, errno());
        }
        libc::getppid() == context.parent
    };
    // The parent died before the prctl: nobody would ever kill us.
    if !parent_ok {
        return fail(STAGE_PARENT, libc::ESRCH);
    }
    if context.nice != 0 {
        // SAFETY: an integer argument; failure (not permitted) is harmless.
        unsafe { libc::nice(context.nice) };
    }
    // SAFETY: the descriptors were opened by the parent and stay open until `clone` returns
    // there (CLONE_VFORK); dup2 only changes this child's descriptor table.
    let stdio = unsafe {
        libc::dup2(context.stdin, 0) != -1
            && libc::dup2(context.output, 1) != -1
            && libc::dup2(context.output, 2) != -1
    };
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
            3 as libc::c_uint,
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
    // SAFETY: program, argv and envp are NUL-terminated strings and NULL-terminated arrays
    // built by the parent's ChildSpec, alive while the parent is suspended. On success this
    // never returns.
    unsafe { libc::execve(context.program, context.argv, context.envp) };
    fail(STAGE_EXEC, errno())
}

/// In the child before exec: signal handlers must not run here (they would run on the
/// parent's memory), and the signal mask survives exec. Reset every handled signal to the
/// default, and SIGPIPE too (the Rust runtime ignores it; children expect the default), then
/// unblock every signal. Async-signal-safe calls only.
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
            libc::SIG_IGN => signal == libc::SIGPIPE,
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

    fn spec(command: &str, workdir: &Path) -> (std::io::PipeReader, ChildSpec) {
        let (reader, writer) = io::pipe().expect("pipe");
        let spec = ChildSpec::new(
            Path::new("/bin/sh"),
            command,
            &[],
            None,
            workdir,
            writer.into(),
            0,
        );
        (reader, spec.expect("spec"))
    }

    #[test]
    fn children_die_with_the_thread_that_spawned_them() {
        let pid = std::thread::spawn(|| {
            let forker = Forker::new().expect("forker");
            let (_reader, spec) = spec("exec sleep 300", Path::new("/"));
            forker.spawn(&spec).expect("spawn").0
        })
        .join()
        .expect("join");
        let mut exit = None;
        for _ in 0..500 {
            exit = wait_exited(WaitTarget::Pid(pid), true, false).expect("waitid");
            if exit.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(exit, Some(Exit::Signal(libc::SIGKILL)));
    }

    #[test]
    fn spawn_failures_name_the_step() {
        let forker = Forker::new().expect("forker");
        let (_reader, bad_dir) = spec("true", Path::new("/nonexistent/dir"));
        let error = forker.spawn(&bad_dir).expect_err("chdir");
        assert_eq!(error.step, SpawnStep::Chdir);
        assert!(error.to_string().starts_with("chdir: "), "{error}");
        let (reader, writer) = io::pipe().expect("pipe");
        drop(reader);
        let no_shell = ChildSpec::new(
            Path::new("/nonexistent/sh"),
            "true",
            &[],
            None,
            Path::new("/"),
            writer.into(),
            0,
        )
        .expect("spec");
        let error = forker.spawn(&no_shell).expect_err("exec");
        assert_eq!(error.step, SpawnStep::Exec);
        assert_eq!(error.error.kind(), io::ErrorKind::NotFound);
        assert!(error.to_string().starts_with("exec: "), "{error}");
    }

    #[test]
    fn zombie_leaders_are_not_live_members_and_get_reaped() {
        use std::os::fd::AsFd;
        let forker = Forker::new().expect("forker");
        let (_reader, exits) = spec("exit 0", Path::new("/"));
        let (pid, pidfd) = forker.spawn(&exits).expect("spawn");
        let pidfd = pidfd.unwrap_or_else(|| pidfd_open(pid).expect("pidfd_open"));
        let seen = wait_exited(WaitTarget::PidFd(pidfd.as_fd()), false, true).expect("waitid");
        assert_eq!(seen, Some(Exit::Code(0)));
        // Only the zombie is left of the group.
        assert!(!group_has_live_member(pid));
        reap_soon(pid);
        let gone = wait_exited(WaitTarget::Pid(pid), true, false);
        assert_eq!(gone.map_err(|e| e.raw_os_error()), Err(Some(libc::ECHILD)));

        let (_reader, sleeps) = spec("exec sleep 30", Path::new("/"));
        let (pid, _pidfd) = forker.spawn(&sleeps).expect("spawn");
        assert!(group_has_live_member(pid));
        kill_and_reap(pid);
        let mut reaped = false;
        for _ in 0..500 {
            // WNOWAIT: only look, leave the reaping to `kill_and_reap`.
            let waited = wait_exited(WaitTarget::Pid(pid), true, true);
            if waited.map_err(|e| e.raw_os_error()) == Err(Some(libc::ECHILD)) {
                reaped = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(reaped, "the killed child was not reaped");
    }

    #[test]
    fn waitid_keeps_zombie_then_reaps() {
        use std::os::fd::AsFd;
        let forker = Forker::new().expect("forker");
        let (_reader, spec) = spec("exit 5", Path::new("/"));
        let (pid, clone_pidfd) = forker.spawn(&spec).expect("spawn");
        assert!(clone_pidfd.is_some(), "CLONE_PIDFD unsupported?");
        let pidfd = pidfd_open(pid).expect("pidfd_open");
        let seen = wait_exited(WaitTarget::PidFd(pidfd.as_fd()), false, true).expect("waitid");
        assert_eq!(seen, Some(Exit::Code(5)));
        // Still a zombie: can be observed again, then reaped exactly once.
        let again = wait_exited(WaitTarget::Pid(pid), true, false).expect("reap");
        assert_eq!(again, Some(Exit::Code(5)));
        let gone = wait_exited(WaitTarget::Pid(pid), true, false);
        assert_eq!(gone.map_err(|e| e.raw_os_error()), Err(Some(libc::ECHILD)));
    }
}
