//! The Linux process calls the manager needs beyond what `nix` wraps: a `posix_spawn`-like
//! spawn of a command's keeper that also sets up a session, the parent-death signal and the
//! keeper's channels, and a `waitid` that reads any exit (including real-time signals).

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};

use nix::libc;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use rustix::process::{WaitId, WaitIdOptions, waitid};

use super::keeper::KeeperEnds;
use crate::sandbox::secrets::is_secret_variable;
use crate::sandbox::{CommandCgroups, Prepared};

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

/// `pidfd_open(pid, 0)` (Linux 5.3+). The descriptor is close-on-exec and becomes readable
/// once the process has exited (is a zombie or reaped).
pub(super) fn pidfd_open(pid: Pid) -> io::Result<OwnedFd> {
    Ok(rustix::process::pidfd_open(
        rustix_pid(pid)?,
        rustix::process::PidfdFlags::empty(),
    )?)
}

/// Everything a child needs, prepared by the parent: between `clone` and `exec` the child
/// shares the parent's memory and must not allocate or take locks.
///
/// The child executed is the command's keeper (see `keeper.rs`), which runs the shell.
pub(super) struct ChildSpec {
    argv: Vec<CString>,
    envp: Vec<CString>,
    workdir: CString,
    /// Becomes the child's stdout and stderr.
    output: OwnedFd,
    /// Becomes the child's stdin; `None`: `/dev/null`.
    stdin: Option<OwnedFd>,
    /// Become the keeper's descriptors 3 and 4.
    keeper: KeeperEnds,
    /// The confinement layers (Landlock ruleset, seccomp programs), for the keeper's
    /// descriptors 6 and 7.
    layers: Option<(OwnedFd, OwnedFd)>,
    /// The scope's namespaces (user, mount, and maybe network and PID), for descriptors 8 and up.
    namespaces: Vec<OwnedFd>,
    /// `cgroup.procs` of the command's cgroups (at most two), for the descriptors after the
    /// others; the keeper moves itself in (`--join-cgroup=FD`).
    cgroups: Vec<OwnedFd>,
    nice: i32,
}

impl ChildSpec {
    /// `shell -c command` under a keeper, in `workdir`, with the host environment (only the
    /// `inherit` names, if given) plus `env` (which wins), stdout and stderr both `output`,
    /// stdin `/dev/null`. A `shell` without a `/` is looked up in `PATH`.
    ///
    /// With `confine`, the keeper confines the shell: its options and descriptors are added,
    /// its variables (`TMPDIR`) set, and host variables that hold secrets (see
    /// [`is_secret_variable`]) left out unless `inherit` names them.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        shell: &Path,
        command: &str,
        env: &[(String, String)],
        inherit: Option<&[String]>,
        workdir: &Path,
        output: OwnedFd,
        keeper: KeeperEnds,
        confine: Option<&Prepared>,
        cgroups: Option<&CommandCgroups>,
        nice: i32,
    ) -> io::Result<Self> {
        let namespaces: Vec<OwnedFd> = confine
            .and_then(|prepared| prepared.namespaces.as_ref())
            .map(|namespaces| {
                namespaces
                    .fds
                    .iter()
                    .take(4)
                    .map(|(_, fd)| above_reserved(fd.try_clone()?))
                    .collect::<io::Result<Vec<_>>>()
            })
            .transpose()?
            .unwrap_or_default();
        let cgroups: Vec<OwnedFd> = cgroups
            .map(|cgroups| {
                cgroups
                    .procs()
                    .iter()
                    .take(2)
                    .map(|file| above_reserved(OwnedFd::from(file.try_clone()?)))
                    .collect::<io::Result<Vec<_>>>()
            })
            .transpose()?
            .unwrap_or_default();
        let mut argv = vec![cstring(b"toolhost-keeper")?];
        // The cgroups' `cgroup.procs` follow the other descriptors the keeper gets; it moves
        // itself in before anything else (see `child_main` for why not here).
        let first_cgroup = if confine.is_some() {
            8 + namespaces.len()
        } else {
            6
        };
        for slot in first_cgroup..first_cgroup + cgroups.len() {
            argv.push(cstring(format!("--join-cgroup={slot}").as_bytes())?);
        }
        if let Some(prepared) = confine {
            argv.push(cstring(b"--confine")?);
            for option in &prepared.keeper_args {
                argv.push(cstring(option.as_bytes())?);
            }
        }
        argv.extend([
            cstring(find_program(shell)?.as_os_str().as_bytes())?,
            cstring(shell.as_os_str().as_bytes())?,
            cstring(b"-c")?,
            cstring(command.as_bytes())?,
        ]);

        let set_by_sandbox = |key: &OsStr| {
            confine.is_some_and(|prepared| {
                prepared.env.iter().any(|(name, _)| OsStr::new(name) == key)
            })
        };
        let mut vars: Vec<(OsString, OsString)> = std::env::vars_os()
            .filter(|(key, value)| match inherit {
                Some(names) => names.iter().any(|name| OsStr::new(name) == key),
                None => confine.is_none() || !is_secret_variable(key, value),
            })
            .filter(|(key, _)| !set_by_sandbox(key))
            .filter(|(key, _)| !env.iter().any(|(name, _)| OsStr::new(name) == key))
            .collect();
        if let Some(prepared) = confine {
            vars.extend(
                prepared
                    .env
                    .iter()
                    .filter(|(name, _)| !env.iter().any(|(set, _)| set == name))
                    .map(|(k, v)| (OsString::from(k), OsString::from(v))),
            );
        }
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
            argv,
            envp,
            workdir: cstring(workdir.as_os_str().as_bytes())?,
            output: above_reserved(output)?,
            stdin: None,
            keeper,
            layers: match confine {
                Some(prepared) => Some((
                    above_reserved(prepared.ruleset.try_clone()?)?,
                    above_reserved(prepared.seccomp.try_clone()?)?,
                )),
                None => None,
            },
            namespaces,
            cgroups,
            nice,
        })
    }
}

impl ChildSpec {
    /// Give the command `stdin` as its input; with `terminal`, the keeper makes it the
    /// command's controlling terminal (it is then the output descriptor too).
    pub(super) fn input(&mut self, stdin: OwnedFd, terminal: bool) -> io::Result<()> {
        self.stdin = Some(above_reserved(stdin)?);
        if terminal {
            self.argv.insert(1, cstring(b"--tty")?);
        }
        Ok(())
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
        if !is_executable(program) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "no such executable file",
            ));
        }
        program.to_owned()
    } else {
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .map(|dir| dir.join(program))
            .find(|candidate| is_executable(candidate))
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "not found in PATH"))?
    };
    if found.is_absolute() {
        Ok(found)
    } else {
        Ok(std::env::current_dir()?.join(found))
    }
}

/// The descriptors a child gets: stdio, then the keeper's status pipe (3), control socket (4),
/// its own executable (5), and when confined the Landlock ruleset (6), seccomp programs (7),
/// the scope's namespaces (8 to 11 at most: user, mount, network, PID) and the command's
/// `cgroup.procs` (at most two, after the others: 12 and 13 at most).
const RESERVED_FDS: RawFd = 14;

/// Whether `path` is a file with an execute bit set.
fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// Move a descriptor to number 14 or above (close-on-exec), so that installing the child's
/// descriptors 0-13 with `dup2` cannot clobber it.
pub(super) fn above_reserved(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() >= RESERVED_FDS {
        return Ok(fd);
    }
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor we own returns a new one that nothing else owns.
    let moved = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, RESERVED_FDS) };
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
            keeper: super::keeper::executable()?,
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
    pub(super) fn spawn(&self, spec: &ChildSpec) -> Result<Pid, SpawnError> {
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
            stdin: spec
                .stdin
                .as_ref()
                .map_or(self.dev_null.as_raw_fd(), AsRawFd::as_raw_fd),
            output: spec.output.as_raw_fd(),
            status: spec.keeper.status.as_raw_fd(),
            control: spec.keeper.control.as_raw_fd(),
            cgroups: [0, 1].map(|index| {
                spec.cgroups
                    .get(index)
                    .map_or(-1, |procs| procs.as_raw_fd())
            }),
            layers: spec.layers.as_ref().map_or((-1, -1), |(ruleset, seccomp)| {
                (ruleset.as_raw_fd(), seccomp.as_raw_fd())
            }),
            namespaces: [0, 1, 2, 3]
                .map(|index| spec.namespaces.get(index).map_or(-1, |fd| fd.as_raw_fd())),
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
    /// The confinement layers for descriptors 6 and 7; `(-1, -1)` when unconfined.
    layers: (RawFd, RawFd),
    /// The namespaces for descriptors 8 to 11; -1 for none.
    namespaces: [RawFd; 4],
    /// `cgroup.procs` files to join; -1 for none.
    cgroups: [RawFd; 2],
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
    // Every source descriptor is 14 or above (`above_reserved`), so none is overwritten
    // before it is copied.
    let stdio = unsafe {
        libc::dup2(context.stdin, 0) != -1
            && libc::dup2(context.output, 1) != -1
            && libc::dup2(context.output, 2) != -1
            && libc::dup2(context.status, 3) != -1
            && libc::dup2(context.control, 4) != -1
            && libc::dup2(context.keeper, 5) != -1
            && (context.layers.0 < 0
                || (libc::dup2(context.layers.0, 6) != -1 && libc::dup2(context.layers.1, 7) != -1))
            && (8..)
                .zip(context.namespaces)
                .all(|(target, fd)| fd < 0 || libc::dup2(fd, target) != -1)
    };
    let namespaces = context.namespaces.iter().filter(|fd| **fd >= 0).count();
    let first_cgroup: libc::c_uint = match (context.layers.0 < 0, namespaces) {
        (true, _) => 6,
        (false, n) => 8 + n as libc::c_uint,
    };
    // SAFETY: as above; the targets follow every other descriptor the keeper gets, and the
    // sources are 14 or above, so none is overwritten before it is copied.
    let stdio = stdio
        && (first_cgroup..)
            .zip(context.cgroups)
            .all(|(target, fd)| fd < 0 || unsafe { libc::dup2(fd, target as RawFd) } != -1);
    let cgroups = context.cgroups.iter().filter(|fd| **fd >= 0).count();
    let first_closed = first_cgroup + cgroups as libc::c_uint;
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
            first_closed,
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
    // parent's ChildSpec, alive while the parent is suspended; descriptor 5 is the keeper's
    // executable. On success this never returns.
    unsafe {
        libc::syscall(
            libc::SYS_execveat,
            5 as libc::c_int,
            c"".as_ptr(),
            context.argv,
            context.envp,
            libc::AT_EMPTY_PATH,
        )
    };
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
    use super::super::keeper::{HostEnds, channels, read_exit, request, wait_gone};
    use super::*;
    use tokio::net::unix::pipe::Receiver;

    #[test]
    fn exit_codes_and_signal_names() {
        assert_eq!(Exit::Code(3).exit_code(), 3);
        assert_eq!(Exit::Code(3).signal_name(), None);
        assert_eq!(Exit::Signal(9).exit_code(), 137);
        assert_eq!(Exit::Signal(9).signal_name().as_deref(), Some("SIGKILL"));
        assert_eq!(signal_name(15), "SIGTERM");
        assert_eq!(signal_name(libc::SIGRTMIN() + 2), "SIGRTMIN+2");
    }

    fn spec(command: &str, workdir: &Path) -> (std::io::PipeReader, HostEnds, ChildSpec) {
        let (reader, writer) = io::pipe().expect("pipe");
        let (host, keeper) = channels().expect("channels");
        let spec = ChildSpec::new(
            Path::new("/bin/sh"),
            command,
            &[],
            None,
            workdir,
            writer.into(),
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
            let pid = forker.spawn(&sleeps).expect("spawn");
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
        let error = forker.spawn(&bad_dir).expect_err("chdir");
        assert_eq!(error.step, SpawnStep::Chdir);
        assert!(error.to_string().starts_with("chdir: "), "{error}");
        let (_reader, writer) = io::pipe().expect("pipe");
        let (_host, keeper) = channels().expect("channels");
        let no_shell = ChildSpec::new(
            Path::new("/nonexistent/sh"),
            "true",
            &[],
            None,
            Path::new("/"),
            writer.into(),
            keeper,
            None,
            None,
            0,
        );
        let error = no_shell.err().expect("no shell");
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
    }

    #[tokio::test]
    async fn a_keeper_reports_the_exit_then_ends_when_nothing_is_left() {
        let forker = Forker::new().expect("forker");
        let (_reader, host, exits) = spec("exit 5", Path::new("/"));
        let pid = forker.spawn(&exits).expect("spawn");
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
        let pid = forker.spawn(&sleeps).expect("spawn");
        drop(sleeps);
        let mut status = Receiver::from_owned_fd(host.status).expect("status");
        request(&host.control, crate::process::Signal::Kill).expect("request");
        let exit = read_exit(&mut status).await.exit;
        assert_eq!(exit, Some(Exit::Signal(libc::SIGKILL)));
        stop_and_reap(pid);
        wait_gone(status, None).await;
    }
}
