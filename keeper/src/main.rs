//! `toolhost-keeper`: the host's direct child for one command, and the command's only parent.
//!
//! The host cannot follow a command's descendants by process group: `setsid`, `setpgid` and
//! GNU `timeout` leave the group, a double fork leaves the tree. The keeper can: it is a child
//! subreaper (`PR_SET_CHILD_SUBREAPER`), so every descendant of the command that is orphaned
//! is re-parented to it, and "a descendant of the keeper" means "started by this command",
//! whatever it did to its session or group.
//!
//! Usage (the host runs it; not meant for people): `toolhost-keeper [--tty]
//! [--join-cgroup=FD]... [OPTIONS] PROGRAM ARGV0 [ARG...]`. The protocol crate
//! (`keeper/protocol/`, [`toolhost_keeper_protocol`]) defines the arguments, the descriptors
//! the keeper gets and the bytes it exchanges with the host, and lists the steps in order.
//! Each `--join-cgroup` descriptor is an open `tasks` (cgroup v1) or `cgroup.procs` (v2) of
//! one of the command's cgroups, which the keeper moves itself into before anything else (a descriptor that is not a cgroup
//! file, or a failed move, and the command does not run). The other options and the
//! descriptors from [`fd::RULESET`] on confine the command (see `confine.rs`). When they
//! include a PID namespace, the keeper forks once after joining it and carries on in the
//! child, inside the namespace; the first process only waits for it.
//! `toolhost-keeper --ready [--join-cgroup=FD]... [OPTIONS]` is a keeper prepared ahead: it
//! does all of the above but start a command, then waits for its command in a start message
//! on the control socket (`start.rs`), whose descriptors become the command's stdio.
//! `toolhost-keeper --resident [OPTIONS]` joins the namespaces once and forks such keepers on
//! request (`resident.rs`).
//! `toolhost-keeper --make-namespaces ...` is the other mode: it makes a scope's namespaces for the host (see
//! `namespaces.rs`).
//!
//! - It starts `PROGRAM` (argv\[0\] `ARGV0`) in a new session, with the keeper's stdio,
//!   environment and working directory, then lets go of its stdio. With `--tty` first among
//!   the options, stdin is a terminal and becomes the session's controlling terminal.
//! - When that process exits it writes one status message to the status pipe: a [`Status`]
//!   byte (in lower case when nothing else of the command is left at that moment) and the
//!   exit code or signal number.
//! - It reaps every descendant, and exits once the command has exited and no descendant is
//!   left; the status pipe reaching end-of-file tells the host exactly that.
//! - A [`Control`] byte on the control socket signals every descendant: `SIGTERM`, `SIGINT`,
//!   or `SIGKILL` (repeated until none is left).
//! - With `--unix-supervise`, it makes every `connect` of the command's processes itself,
//!   after checking a Unix socket's address (`unix.rs`).
//! - End-of-file on the control socket (the host closed it, or died: the kernel closes it
//!   then), `SIGTERM` or `SIGHUP` (the host sets `SIGTERM` as the keeper's parent-death
//!   signal): it kills every descendant, waits for them, and exits.

mod confine;
mod fds;
mod namespaces;
mod network;
mod resident;
mod spawn;
mod start;
mod tree;
mod unix;

use confine::Confinement;
use toolhost_keeper_protocol::{CANNOT_RUN, Control, Status, fd, helper, option};

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// The allocator: dlmalloc keeps freed memory for the next allocation. musl's own allocator
/// maps and unmaps pages for small allocations: about 15 `mmap` and 12 `munmap` calls a
/// command in a keeper forked from a resident, each `munmap` splitting the address space's
/// mappings and flushing the TLB.
#[global_allocator]
static ALLOCATOR: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

/// The keeper carrying on inside a PID namespace, in the process that only waits for it.
static INNER: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_forwarded(signal: libc::c_int) {
    let inner = INNER.load(Ordering::SeqCst);
    if inner > 0 {
        // SAFETY: kill(2) is async-signal-safe; integer arguments.
        unsafe { libc::kill(inner, signal) };
    }
}

/// Route `signal` to [`on_forwarded`] (passed on to the keeper inside).
fn forward(signal: libc::c_int) -> io::Result<()> {
    // SAFETY: sigaction is plain data; all zeroes is a valid starting value.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = on_forwarded as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: `action` is a valid sigaction whose handler only makes an async-signal-safe call.
    if unsafe { libc::sigaction(signal, &action, std::ptr::null_mut()) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Set by `SIGTERM`/`SIGHUP`: stop everything and exit.
static STOP: AtomicBool = AtomicBool::new(false);
/// Write end of the self-pipe that wakes the main loop on a signal.
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(signal: libc::c_int) {
    if signal == libc::SIGTERM || signal == libc::SIGHUP {
        STOP.store(true, Ordering::SeqCst);
    }
    let fd = WAKE_FD.load(Ordering::SeqCst);
    if fd >= 0 {
        let byte = 0u8;
        // SAFETY: write(2) is async-signal-safe; `byte` is a valid one-byte buffer. A full
        // pipe (EAGAIN) is fine: a wake-up is already pending.
        unsafe { libc::write(fd, (&raw const byte).cast(), 1) };
    }
}

fn main() -> ExitCode {
    // SAFETY: called once, first, while this process has one thread: the allocator's lock is
    // taken around every `fork` from now on, so a child never finds it held by a thread that
    // the fork left behind.
    unsafe { dlmalloc::enable_alloc_after_fork() };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // stderr may already be /dev/null; the host learns of the failure from the status
            // pipe (end-of-file without a status).
            eprintln!("toolhost-keeper: {error}");
            ExitCode::from(125)
        }
    }
}

fn run() -> io::Result<()> {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    if args
        .first()
        .is_some_and(|arg| arg == helper::MAKE_NAMESPACES)
    {
        return namespaces::make(&args[1..]);
    }
    // `--ready`: prepared ahead, the command comes in a start message; `--tty`: stdin is a
    // terminal, to become the command's controlling terminal.
    let ready = args.first().is_some_and(|arg| arg == option::READY);
    // `--resident`: forks keepers prepared ahead on request (`resident.rs`).
    let resident = args.first().is_some_and(|arg| arg == option::RESIDENT);
    let terminal = !ready && !resident && args.first().is_some_and(|arg| arg == option::TTY);
    let args = &args[usize::from(ready || resident || terminal)..];
    // `--join-cgroup=FD`: the `tasks` or `cgroup.procs` of one of the command's cgroups.
    let cgroups: Vec<RawFd> = args
        .iter()
        .map_while(|arg| {
            arg.to_str()?
                .strip_prefix(option::JOIN_CGROUP)
                .map(|fd| fd.parse::<RawFd>().map_err(|_| arg.clone()))
        })
        .collect::<Result<_, _>>()
        .map_err(|arg| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("not a descriptor: {}", arg.to_string_lossy()),
            )
        })?;
    let args = &args[cgroups.len()..];
    let (mut confinement, options) = Confinement::from_args(args)?;
    if resident && !cgroups.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a resident keeper joins no cgroup (run by the toolhost host)",
        ));
    }
    let given = match (&args[options..], ready || resident) {
        ([], true) => None,
        ([program, argv0, rest @ ..], false) => Some(Given {
            terminal,
            program: program.clone(),
            argv: std::iter::once(argv0).chain(rest).cloned().collect(),
            env: None,
        }),
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "usage: toolhost-keeper [OPTIONS] PROGRAM ARGV0 [ARG...] (run by the toolhost host)",
            ));
        }
    };
    for fd in [fd::STATUS, fd::CONTROL] {
        set_cloexec(fd)?;
    }
    // SAFETY: the status and control descriptors are ours, given by the host for exactly
    // this; nothing else in this process owns them.
    let mut status = unsafe { File::from_raw_fd(fd::STATUS) };
    // SAFETY: as above.
    let mut control = unsafe { UnixStream::from_raw_fd(fd::CONTROL) };
    // SAFETY: closing our own executable's descriptor, owned by nothing else here; EBADF
    // (not passed) is harmless.
    unsafe { libc::close(fd::EXECUTABLE) };

    // A resident joins the namespaces once, then each keeper it forks carries on from here
    // with the cgroups of its request, in the namespaces already. A resident that cannot
    // join them exits: the host then spawns each keeper, which says why on its command's
    // output.
    let mut cgroups = cgroups;
    if resident {
        confinement.join()?;
        confinement.install_shared()?;
        match resident::serve(&control)? {
            None => return Ok(()),
            Some(forked) => cgroups = forked.cgroups,
        }
    }

    // Into the command's cgroups first, so that the keeper and everything it starts are
    // counted; a command that cannot be limited does not run. A failure is said on the
    // command's output, so a keeper prepared ahead says it once it has the command.
    let mut failure = join_cgroups(&cgroups)
        .err()
        .map(|error| format!("toolhost: cannot move the command into its cgroups: {error}"));
    if failure.is_none() && !resident {
        match confinement.join() {
            Ok(false) => {}
            Ok(true) => {
                // In a PID namespace only the keeper's children are: the keeper goes on in a
                // child (the namespace's orphans go to the nearest subreaper *in* it), and this
                // process only waits for it, so the host's child exits when everything is gone.
                match split() {
                    Ok(Some(child)) => {
                        drop((status, control));
                        release_stdio()?;
                        // A stop request for this process goes to the keeper inside, and this
                        // one exits only after it: the host's "the keeper has exited" keeps
                        // meaning "nothing of the command is left".
                        INNER.store(child, Ordering::SeqCst);
                        for signal in [libc::SIGTERM, libc::SIGHUP] {
                            forward(signal)?;
                        }
                        return wait_for(child);
                    }
                    Ok(None) => {}
                    Err(error) => {
                        failure = Some(format!(
                            "toolhost: cannot start the command in its PID namespace: {error}"
                        ));
                    }
                }
            }
            Err(error) => failure = Some(error.to_string()),
        }
    }

    // The command: on the command line, or (prepared ahead) in the start message, whose
    // descriptors become the command's stdio.
    let command_line = match given {
        Some(given) => given,
        None => match start::receive(&control, confinement.confined()) {
            // Let go unused.
            Ok(None) => return Ok(()),
            Ok(Some(start)) => take_start(start, &mut failure)?,
            Err(error) => {
                eprintln!("toolhost-keeper: {error}");
                write_status(&mut status, Status::Exited, CANNOT_RUN);
                return Ok(());
            }
        },
    };
    if let Some(message) = failure {
        eprintln!("{message}");
        write_status(&mut status, Status::Exited, CANNOT_RUN);
        return Ok(());
    }
    let Given {
        terminal,
        program,
        argv,
        env,
    } = command_line;

    let (wake_read, wake_write) = pipe()?;
    WAKE_FD.store(wake_write, Ordering::SeqCst);
    for signal in [libc::SIGTERM, libc::SIGHUP, libc::SIGCHLD] {
        install(signal)?;
    }
    // SAFETY: integer arguments; makes this process the reaper of its orphaned descendants.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } == -1 {
        return Err(io::Error::last_os_error());
    }

    // The pair the command's process sends the listener of the `connect` supervision over.
    let supervision = if confinement.unix.supervise && confinement.confined() {
        Some(UnixStream::pair()?)
    } else {
        None
    };
    // The supervision's filter, built here: the command's process allocates nothing.
    let filter = supervision.as_ref().map(|_| unix::program());
    let supervise = supervision
        .as_ref()
        .zip(filter.as_deref())
        .map(|((_, child), filter)| confine::Supervision {
            channel: child.as_raw_fd(),
            filter,
        });
    let places = confinement.unix.clone();
    // The command's process, between its clone and its `exec` (`spawn.rs`): a session of its
    // own, with the terminal as its controlling one, then the confinement.
    let mut prepare = || {
        // SAFETY: integer arguments; makes the command's process a session leader.
        if unsafe { libc::setsid() } == -1 {
            return Err(io::Error::last_os_error());
        }
        // The new session's controlling terminal: `/dev/tty`, job control and the
        // terminal's signals (Ctrl-C) reach the command.
        // SAFETY: integer arguments on stdin, which is the terminal when `terminal` is set.
        if terminal && unsafe { libc::ioctl(0, libc::TIOCSCTTY, 0) } == -1 {
            return Err(io::Error::last_os_error());
        }
        confinement.apply(supervise)
    };
    let leader = match spawn::spawn(&program, &argv, env.as_deref(), &mut prepare) {
        Ok(leader) => leader,
        Err(error) => {
            let program = std::path::Path::new(&program);
            eprintln!("toolhost-keeper: cannot run {}: {error}", program.display());
            write_status(&mut status, Status::Exited, CANNOT_RUN);
            return Ok(());
        }
    };
    let mut supervisor = None;
    if let Some((keeper_end, child_end)) = supervision {
        drop(child_end);
        // The command runs with the filter: without its supervisor, its connects would hang.
        match unix::receive_listener(keeper_end.as_raw_fd()) {
            Ok(listener) => supervisor = Some(unix::serve(listener, places, status.as_raw_fd())),
            Err(error) => {
                eprintln!("toolhost-keeper: cannot supervise the command's connects: {error}");
                tree::kill_all();
            }
        }
    }
    release_stdio()?;

    // The command's end, once reaped; reported when it is known whether anything is left.
    let mut ended: Option<(Status, i32)> = None;
    let mut reported = false;
    let mut stopping = false;
    loop {
        // Reap whatever has exited.
        let nothing_left = loop {
            let mut raw = 0;
            // SAFETY: `raw` is a valid out-pointer; WNOHANG never blocks.
            let pid = unsafe { libc::waitpid(-1, &mut raw, libc::WNOHANG) };
            if pid > 0 {
                if pid == leader {
                    ended = Some(if libc::WIFSIGNALED(raw) {
                        (Status::Signalled, libc::WTERMSIG(raw))
                    } else {
                        (Status::Exited, libc::WEXITSTATUS(raw))
                    });
                }
                continue;
            }
            if pid == 0 {
                break false;
            }
            let error = io::Error::last_os_error();
            match error.raw_os_error() {
                Some(libc::EINTR) => continue,
                // No child left: the command and everything it started are gone.
                Some(libc::ECHILD) => break true,
                _ => return Err(error),
            }
        };
        if let Some((end, value)) = ended
            && !reported
        {
            reported = true;
            // And nothing of it is left (the keeper exits next).
            let end = if nothing_left {
                end.with_nothing_left()
            } else {
                end
            };
            write_status(&mut status, end, value);
        }
        if nothing_left {
            return Ok(());
        }
        if STOP.load(Ordering::SeqCst) && !stopping {
            stopping = true;
        }
        if stopping {
            tree::kill_all();
        }
        let listener = supervisor.as_ref().map(unix::Supervisor::fd);
        match wait_for_event(&control, wake_read, listener)? {
            Event::Wake => drain(wake_read),
            Event::Connect(revents) => {
                if let Some(serving) = &supervisor
                    && let unix::Received::Done = serving.receive(revents)
                {
                    supervisor = None;
                }
            }
            Event::Control => {
                let mut byte = [0u8; 1];
                match control.read(&mut byte) {
                    Ok(0) => stopping = true,
                    Ok(_) => match Control::from_u8(byte[0]) {
                        Some(Control::Terminate) => tree::signal_all(libc::SIGTERM),
                        Some(Control::Interrupt) => tree::signal_all(libc::SIGINT),
                        Some(Control::Kill) => tree::kill_all(),
                        None => {}
                    },
                    Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => stopping = true,
                }
            }
        }
    }
}

/// What to run: from the command line, or from a start message.
struct Given {
    terminal: bool,
    program: OsString,
    /// `ARGV0` first.
    argv: Vec<OsString>,
    /// The command's whole environment (`None`: the keeper's own).
    env: Option<Vec<(OsString, OsString)>>,
}

/// Take the command of a start message: its descriptors become the command's stdio (and the
/// ruleset [`fd::RULESET`]), and the keeper enters its working directory (unless an earlier
/// step failed; a failure to enter is noted in `failure`).
fn take_start(start: start::Start, failure: &mut Option<String>) -> io::Result<Given> {
    let stdin = start.stdin.as_ref().map(AsRawFd::as_raw_fd);
    let output = start.output.as_raw_fd();
    // SAFETY: dup2 onto our own stdio descriptors (and the ruleset's number) from descriptors
    // this process owns, open across the calls.
    let installed = unsafe {
        stdin.is_none_or(|fd| libc::dup2(fd, 0) != -1)
            && libc::dup2(output, 1) != -1
            && libc::dup2(output, 2) != -1
            && start
                .ruleset
                .as_ref()
                .is_none_or(|ruleset| libc::dup2(ruleset.as_raw_fd(), fd::RULESET) != -1)
    };
    if !installed {
        return Err(io::Error::last_os_error());
    }
    if start.ruleset.is_some() {
        set_cloexec(fd::RULESET)?;
    }
    if failure.is_none()
        && let Err(error) = std::env::set_current_dir(&start.workdir)
    {
        *failure = Some(format!(
            "toolhost: cannot enter {} in the sandbox: {error}",
            std::path::Path::new(&start.workdir).display()
        ));
    }
    Ok(Given {
        terminal: start.terminal,
        program: start.program,
        argv: start.argv,
        env: Some(start.env),
    })
}

/// Fork. In the parent, `Some(child's pid)`; in the child, which carries on as the keeper,
/// `None` (it takes `SIGTERM` when the parent goes, as the parent does when the host goes).
fn split() -> io::Result<Option<libc::pid_t>> {
    // SAFETY: the keeper is single-threaded, so the child may do anything after the fork.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => {
            // SAFETY: integer arguments; sets this process's parent-death signal.
            if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0) } == -1 {
                return Err(io::Error::last_os_error());
            }
            Ok(None)
        }
        child => Ok(Some(child)),
    }
}

/// Wait for the keeper's child carrying on (see [`split`]) and end as it ends.
fn wait_for(child: libc::pid_t) -> io::Result<()> {
    loop {
        let mut raw = 0;
        // SAFETY: `raw` is a valid out-pointer.
        if unsafe { libc::waitpid(child, &mut raw, 0) } == child {
            return if libc::WIFEXITED(raw) && libc::WEXITSTATUS(raw) == 0 {
                Ok(())
            } else {
                Err(io::Error::other("the keeper in the PID namespace failed"))
            };
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

/// What woke the main loop.
enum Event {
    /// A signal (a child changed state, or a request to stop).
    Wake,
    /// The control socket is readable (a request or end-of-file).
    Control,
    /// The `connect` supervision's listener polled with these events.
    Connect(libc::c_short),
}

/// Block until a signal arrives, the control socket is readable, or `listener` (the
/// `connect` supervision's, if any) has a notification or hung up.
fn wait_for_event(control: &UnixStream, wake: RawFd, listener: Option<RawFd>) -> io::Result<Event> {
    loop {
        let mut fds = [
            libc::pollfd {
                fd: wake,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: control.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                // A negative descriptor is ignored by poll.
                fd: listener.unwrap_or(-1),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: `fds` is a valid array of three pollfd structures.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 3, -1) };
        if ready == -1 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(error);
        }
        if fds[0].revents != 0 {
            return Ok(Event::Wake);
        }
        if fds[1].revents != 0 {
            return Ok(Event::Control);
        }
        if fds[2].revents != 0 {
            return Ok(Event::Connect(fds[2].revents));
        }
    }
}

/// Write the command's end to the host. Failure means the host is gone; the control socket
/// says so too, so it is not an error here.
fn write_status(status: &mut File, end: Status, value: i32) {
    let _ = status.write_all(&end.message(value));
}

/// Let go of the command's stdio: the output pipe reaches end-of-file when the command and its
/// descendants close it, not when the keeper does.
fn release_stdio() -> io::Result<()> {
    let null = File::options().read(true).write(true).open("/dev/null")?;
    for fd in 0..=2 {
        // SAFETY: dup2 onto our own stdio descriptors; `null` stays open across the calls.
        if unsafe { libc::dup2(null.as_raw_fd(), fd) } == -1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

pub(crate) fn set_cloexec(fd: RawFd) -> io::Result<()> {
    // SAFETY: integer arguments on a descriptor number; fails with EBADF if it is not open.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } == -1 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "descriptor {fd} is not open: {} (run by the toolhost host)",
                io::Error::last_os_error()
            ),
        ));
    }
    Ok(())
}

/// Move this process into each cgroup whose `tasks` or `cgroup.procs` is open at one of
/// `fds`, and close them. A descriptor that is not a file of a cgroup file system is refused: a write of "0"
/// elsewhere (a pipe, a socket) would succeed and leave the command outside its cgroup.
fn join_cgroups(fds: &[RawFd]) -> io::Result<()> {
    // `statfs.f_type` of cgroup v1 and v2 file systems (linux/magic.h).
    const CGROUP_SUPER_MAGIC: i64 = 0x0027_e0eb;
    const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
    // Owned at once, so that every one is closed whatever happens below.
    // SAFETY: the host passed these descriptors for exactly this; nothing else here owns them.
    let files: Vec<File> = fds
        .iter()
        .map(|&fd| unsafe { File::from_raw_fd(fd) })
        .collect();
    for mut procs in files {
        // SAFETY: statfs is plain data; all zeroes is a valid value for the kernel to fill.
        let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: `procs` is an open descriptor and `stat` a valid, writable statfs.
        if unsafe { libc::fstatfs(procs.as_raw_fd(), &mut stat) } != 0 {
            return Err(io::Error::last_os_error());
        }
        #[allow(clippy::unnecessary_cast)]
        let kind = stat.f_type as i64;
        if kind != CGROUP_SUPER_MAGIC && kind != CGROUP2_SUPER_MAGIC {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("descriptor {} is not a cgroup file", procs.as_raw_fd()),
            ));
        }
        // "0": the writing thread itself. The keeper has one thread here, so to `tasks` (v1)
        // this moves the process as `cgroup.procs` would, without the kernel's wait for an
        // RCU grace period (see the host's `sandbox/cgroup.rs`).
        procs.write_all(b"0")?;
    }
    Ok(())
}

/// A non-blocking, close-on-exec pipe: (read end, write end).
fn pipe() -> io::Result<(RawFd, RawFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok((fds[0], fds[1]))
}

/// Read everything pending from the (non-blocking) self-pipe.
fn drain(fd: RawFd) {
    let mut buf = [0u8; 64];
    // SAFETY: `buf` is a valid, writable buffer of its length.
    while unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
}

/// Route `signal` to [`on_signal`]. `SA_RESTART` is left out so that `poll` wakes, and the
/// handler is reset to the default in the command by `exec`.
fn install(signal: libc::c_int) -> io::Result<()> {
    // SAFETY: sigaction is plain data; all zeroes is a valid starting value.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    action.sa_flags = libc::SA_NOCLDSTOP;
    // SAFETY: `action` is a valid sigaction whose handler only does async-signal-safe work.
    if unsafe { libc::sigaction(signal, &action, std::ptr::null_mut()) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_cgroup_files_are_joined() {
        // A pipe in the place of a cgroup file (what a descriptor mix-up would hand over):
        // writing "0" to it would succeed, so it must be refused before the write.
        let (read, write) = pipe().expect("pipe");
        let error = join_cgroups(&[write]).expect_err("a pipe is not a cgroup");
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput, "{error}");
        assert!(error.to_string().contains("not a cgroup file"), "{error}");
        let mut byte = [0u8; 1];
        // SAFETY: `read` is the pipe's read end, ours alone; the buffer is valid for one byte.
        let got = unsafe { libc::read(read, byte.as_mut_ptr().cast(), 1) };
        assert_eq!(got, 0, "nothing was written, and the write end was closed");
        // SAFETY: closing our own descriptor.
        unsafe { libc::close(read) };
    }
}
