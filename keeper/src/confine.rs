//! Confinement the keeper applies to the command between its `clone` and `exec`, so that the keeper
//! itself stays outside it (a confined command cannot signal or trace its keeper).
//!
//! The host prepares the layers once per scope and profile and passes them as descriptors:
//! [`fd::RULESET`], a Landlock ruleset; [`fd::SECCOMP`], a sealed file of seccomp programs.
//! Options on the command line ([`option`]): `--confine` (both descriptors are given),
//! `--rlimit-cpu=SECONDS`, `--rlimit-data=BYTES`, `--rlimit-nproc=N` (counted per user
//! namespace: set only with namespaces, where it bounds the processes of the scope's
//! namespace).
//!
//! `--unix-supervise` and the places after it (`--unix-allow=PATH`, ...): the command's process
//! installs the `connect` filter last and hands its listener to the keeper (see `unix.rs`).
//!
//! `--namespaces=KIND,...` (the names of [`NamespaceKind`]): the descriptors from
//! [`fd::FIRST_NAMESPACE`] on are the scope's namespaces of those kinds, in that order (see
//! `namespaces.rs`). The keeper joins them itself, before it starts the command
//! ([`Confinement::join`]): a command's descendants must stay the keeper's descendants, and
//! orphans are re-parented to the nearest subreaper *in their own PID namespace* only.

use std::io;

use toolhost_keeper_protocol::{NamespaceKind, fd, option};

/// The `setns(2)` type of a namespace kind.
fn clone_flag(kind: NamespaceKind) -> libc::c_int {
    match kind {
        NamespaceKind::User => libc::CLONE_NEWUSER,
        NamespaceKind::Mount => libc::CLONE_NEWNS,
        NamespaceKind::Network => libc::CLONE_NEWNET,
        NamespaceKind::Pid => libc::CLONE_NEWPID,
    }
}

/// One seccomp program of [`fd::SECCOMP`].
#[derive(Debug)]
struct Program {
    /// Marked [`fd::SECCOMP_SHARED`].
    shared: bool,
    instructions: Vec<libc::sock_filter>,
}

/// What to apply to the command.
#[derive(Debug, Default)]
pub(crate) struct Confinement {
    /// Landlock and seccomp ([`fd::RULESET`] and [`fd::SECCOMP`]).
    layers: Option<Vec<Program>>,
    /// The shared programs are installed in this process already, and its capability
    /// bounding set is empty (a resident keeper's, see [`Confinement::install_shared`]): the
    /// command inherits both.
    shared_installed: bool,
    cpu_seconds: Option<u64>,
    data_bytes: Option<u64>,
    processes: Option<u64>,
    /// The namespaces to join, in descriptor order from [`fd::FIRST_NAMESPACE`].
    namespaces: Vec<NamespaceKind>,
    /// Whether and where `connect` is supervised (`--unix-*`, see `unix.rs`).
    pub(crate) unix: crate::unix::Places,
}

impl Confinement {
    /// Take the options from the front of `args`; returns the rest.
    pub(crate) fn from_args(args: &[std::ffi::OsString]) -> io::Result<(Self, usize)> {
        let mut confinement = Confinement::default();
        let mut used = 0;
        for arg in args {
            let Some(arg) = arg.to_str().filter(|arg| arg.starts_with(option::PREFIX)) else {
                break;
            };
            used += 1;
            let number = |value: &str| {
                value.parse::<u64>().map_err(|_| {
                    io::Error::new(io::ErrorKind::InvalidInput, format!("bad option `{arg}`"))
                })
            };
            if confinement.unix.take(arg) {
                continue;
            }
            if arg == option::CONFINE {
                confinement.layers = Some(Vec::new());
            } else if let Some(value) = arg.strip_prefix(option::RLIMIT_CPU) {
                confinement.cpu_seconds = Some(number(value)?);
            } else if let Some(value) = arg.strip_prefix(option::RLIMIT_DATA) {
                confinement.data_bytes = Some(number(value)?);
            } else if let Some(value) = arg.strip_prefix(option::RLIMIT_NPROC) {
                confinement.processes = Some(number(value)?);
            } else if let Some(value) = arg.strip_prefix(option::NAMESPACES) {
                for name in value.split(option::NAMESPACE_SEPARATOR) {
                    match NamespaceKind::from_name(name) {
                        Some(kind) if !confinement.namespaces.contains(&kind) => {
                            confinement.namespaces.push(kind);
                        }
                        _ => {
                            return Err(io::Error::new(
                                io::ErrorKind::InvalidInput,
                                format!("bad option `{arg}`"),
                            ));
                        }
                    }
                }
            } else {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("unknown option `{arg}`"),
                ));
            }
        }
        if confinement.layers.is_some() {
            for fd in [fd::RULESET, fd::SECCOMP] {
                crate::set_cloexec(fd)?;
            }
            confinement.layers = Some(read_programs()?);
        }
        for fd in (fd::FIRST_NAMESPACE..).take(confinement.namespaces.len()) {
            crate::set_cloexec(fd)?;
        }
        Ok((confinement, used))
    }

    /// Whether Landlock and seccomp are given (`--confine`).
    pub(crate) fn confined(&self) -> bool {
        self.layers.is_some()
    }

    /// Join the scope's namespaces (in the keeper itself), and come back to the working
    /// directory (joining a mount namespace moves it to the root). Returns whether a PID
    /// namespace was joined: then the keeper's *children* are in it, not the keeper. On failure
    /// the error says which step failed, for the command's output.
    pub(crate) fn join(&self) -> io::Result<bool> {
        if self.namespaces.is_empty() {
            return Ok(false);
        }
        let workdir = std::env::current_dir()?;
        for (fd, kind) in (fd::FIRST_NAMESPACE..).zip(&self.namespaces) {
            // SAFETY: integer arguments; `fd` is a namespace descriptor the host passed.
            if unsafe { libc::setns(fd, clone_flag(*kind)) } != 0 {
                let error = io::Error::last_os_error();
                let name = kind.name();
                return Err(io::Error::new(
                    error.kind(),
                    format!("toolhost: cannot confine the command: setns({name}): {error}"),
                ));
            }
            // SAFETY: closing a descriptor the host passed for this only.
            unsafe { libc::close(fd) };
        }
        if let Err(error) = std::env::set_current_dir(&workdir) {
            return Err(io::Error::new(
                error.kind(),
                format!(
                    "toolhost: cannot enter {} in the sandbox: {error}",
                    workdir.display()
                ),
            ));
        }
        Ok(self.namespaces.contains(&NamespaceKind::Pid))
    }

    /// Apply everything else, in the command's process just before `exec`. That process runs
    /// in the keeper's memory (`spawn.rs`), so nothing here allocates; on failure it says
    /// which step failed on its stderr (the command's output) before the error goes back to
    /// the keeper. `supervisor`: the `connect` supervision to install (with
    /// `--unix-supervise`).
    pub(crate) fn apply(&self, supervisor: Option<Supervision<'_>>) -> io::Result<()> {
        // Said on the command's output without allocating: this runs in the keeper's memory
        // (`spawn.rs`).
        let step = |name: &str, ok: bool| -> io::Result<()> {
            if ok {
                return Ok(());
            }
            let error = io::Error::last_os_error();
            say_failed(name, error.raw_os_error().unwrap_or(0));
            Err(error)
        };
        if let Some(seconds) = self.cpu_seconds {
            step(
                "setrlimit(RLIMIT_CPU)",
                set_limit(libc::RLIMIT_CPU, seconds),
            )?;
        }
        if let Some(bytes) = self.data_bytes {
            step(
                "setrlimit(RLIMIT_DATA)",
                set_limit(libc::RLIMIT_DATA, bytes),
            )?;
        }
        if let Some(processes) = self.processes {
            step(
                "setrlimit(RLIMIT_NPROC)",
                set_limit(libc::RLIMIT_NPROC, processes),
            )?;
        }
        let Some(programs) = &self.layers else {
            return Ok(());
        };
        drop_capabilities(self.shared_installed);
        // SAFETY: integer arguments; sets a flag of this process only.
        let nnp = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } == 0;
        step("prctl(PR_SET_NO_NEW_PRIVS)", nnp)?;
        // SAFETY: `fd::RULESET` is the ruleset the host passed; flags 0.
        let landlock =
            unsafe { libc::syscall(libc::SYS_landlock_restrict_self, fd::RULESET, 0u32) } == 0;
        step("landlock_restrict_self", landlock)?;
        for program in programs {
            if program.shared && self.shared_installed {
                continue;
            }
            step("seccomp(SECCOMP_SET_MODE_FILTER)", install(program))?;
        }
        if let Some(Supervision { channel, filter }) = supervisor {
            let supervised = crate::unix::install(channel, filter).is_ok();
            step("seccomp(SECCOMP_FILTER_FLAG_NEW_LISTENER)", supervised)?;
            // SAFETY: closing the child's end of the pair, which the command must not hold.
            unsafe { libc::close(channel) };
        }
        Ok(())
    }

    /// In a resident keeper, once it has joined the namespaces: empty the capability
    /// bounding set, set `no_new_privs` and install the programs marked
    /// [`fd::SECCOMP_SHARED`] on this process, so that every keeper it forks, and their
    /// commands, inherit them (the programs compiled). The keeper makes none of the calls they
    /// refuse from here on, and gains no capability by an `exec`.
    pub(crate) fn install_shared(&mut self) -> io::Result<()> {
        let Some(programs) = &self.layers else {
            return Ok(());
        };
        drop_bounding_set();
        // SAFETY: integer arguments; sets a flag of this process only.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        for program in programs.iter().filter(|program| program.shared) {
            if !install(program) {
                return Err(io::Error::last_os_error());
            }
        }
        self.shared_installed = true;
        Ok(())
    }
}

/// The `connect` supervision a command's process installs (with `--unix-supervise`).
#[derive(Clone, Copy)]
pub(crate) struct Supervision<'a> {
    /// The child's end of the socket pair the listener goes over.
    pub(crate) channel: std::os::fd::RawFd,
    /// The filter ([`crate::unix::program`]), built by the keeper before the clone.
    pub(crate) filter: &'a [libc::sock_filter],
}

/// Write `toolhost: cannot confine the command: NAME: REASON (os error ERRNO)` to stderr
/// from a buffer on the stack, with one `write(2)`: no allocation, no lock, no panic on a
/// closed stderr. A message longer than the buffer is cut.
fn say_failed(name: &str, errno: i32) {
    use std::io::Write as _;
    const ROOM: usize = 512;
    let mut buffer = [0u8; ROOM];
    let mut rest = &mut buffer[..];
    // SAFETY: strerror returns a NUL-terminated string the C library holds.
    let reason = unsafe { std::ffi::CStr::from_ptr(libc::strerror(errno)) };
    // Writing into a slice fails only when it is full: the message is cut there.
    let _ = rest
        .write_all(b"toolhost: cannot confine the command: ")
        .and_then(|()| rest.write_all(name.as_bytes()))
        .and_then(|()| rest.write_all(b": "))
        .and_then(|()| rest.write_all(reason.to_bytes()))
        .and_then(|()| writeln!(rest, " (os error {errno})"));
    let written = ROOM - rest.len();
    // SAFETY: the first `written` bytes of `buffer` are initialised; a failed write is ignored.
    unsafe { libc::write(libc::STDERR_FILENO, buffer.as_ptr().cast(), written) };
}

/// Install `program` on this process; `false` on failure (`errno` says why).
fn install(program: &Program) -> bool {
    let filter = libc::sock_fprog {
        len: u16::try_from(program.instructions.len()).unwrap_or(u16::MAX),
        filter: program.instructions.as_ptr().cast_mut(),
    };
    // SAFETY: `filter` points at the program's instructions, alive for the call; the kernel
    // copies the program.
    unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0u32,
            &raw const filter,
        ) == 0
    }
}

/// The type of a resource number for `getrlimit`/`setrlimit`, which differs between C libraries.
#[cfg(target_env = "gnu")]
type Resource = libc::__rlimit_resource_t;
#[cfg(not(target_env = "gnu"))]
type Resource = libc::c_int;

/// Set `resource` to `value`, or to the hard limit already in place if that is lower (raising
/// it would need a privilege the command does not have).
fn set_limit(resource: Resource, value: u64) -> bool {
    let mut current = libc::rlimit {
        rlim_cur: 0,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: `current` is a valid out-pointer for the call.
    if unsafe { libc::getrlimit(resource, &mut current) } != 0 {
        return false;
    }
    let value = value.min(current.rlim_max);
    let limit = libc::rlimit {
        rlim_cur: value,
        rlim_max: value,
    };
    // SAFETY: `limit` is a valid rlimit for the call.
    unsafe { libc::setrlimit(resource, &limit) == 0 }
}

/// Give up every capability for good: drop them from the bounding set (possible only with
/// `CAP_SETPCAP`, i.e. when the host runs as root), clear the ambient set, and empty the
/// effective, permitted and inheritable sets. Without capabilities this changes nothing.
fn drop_capabilities(bounding_dropped: bool) {
    if !bounding_dropped {
        drop_bounding_set();
    }
    // SAFETY: integer arguments; clears this process's ambient capabilities.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    };
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let header = Header {
        // _LINUX_CAPABILITY_VERSION_3: two Data entries, 64 capabilities.
        version: 0x2008_0522,
        pid: 0,
    };
    let data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: `header` and `data` have the layout capset(2) expects for version 3.
    unsafe { libc::syscall(libc::SYS_capset, &raw const header, data.as_ptr()) };
}

/// Drop every capability from this process's bounding set, so that no `exec` gains one.
/// A failure is harmless: `EPERM` without `CAP_SETPCAP` (there is nothing to gain then, with
/// `no_new_privs`), and `EINVAL` past the kernel's last capability, where it stops.
fn drop_bounding_set() {
    for capability in 0..64 {
        // SAFETY: integer arguments.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, capability, 0, 0, 0) } != 0
            && io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL)
        {
            return;
        }
    }
}

/// Read the seccomp programs from [`fd::SECCOMP`] (with `pread`: the file is shared by every
/// keeper of the profile, so its offset is not ours to move).
fn read_programs() -> io::Result<Vec<Program>> {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let offset = libc::off_t::try_from(bytes.len()).map_err(io::Error::other)?;
        // SAFETY: `chunk` is a valid, writable buffer of its length.
        let read =
            unsafe { libc::pread(fd::SECCOMP, chunk.as_mut_ptr().cast(), chunk.len(), offset) };
        match read {
            0 => break,
            n if n > 0 => bytes.extend_from_slice(&chunk[..n.cast_unsigned()]),
            _ => {
                let error = io::Error::last_os_error();
                if error.kind() != io::ErrorKind::Interrupted {
                    return Err(error);
                }
            }
        }
    }
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "malformed seccomp programs");
    let mut programs = Vec::new();
    let mut rest = bytes.as_slice();
    while !rest.is_empty() {
        let (count, tail) = rest.split_first_chunk::<4>().ok_or_else(bad)?;
        let count = u32::from_ne_bytes(*count);
        let shared = count & fd::SECCOMP_SHARED != 0;
        let count = usize::try_from(count & !fd::SECCOMP_SHARED).map_err(|_| bad())?;
        let size = count.checked_mul(8).ok_or_else(bad)?;
        if tail.len() < size {
            return Err(bad());
        }
        let (body, tail) = tail.split_at(size);
        let program = body
            .chunks_exact(8)
            .map(|raw| libc::sock_filter {
                code: u16::from_ne_bytes([raw[0], raw[1]]),
                jt: raw[2],
                jf: raw[3],
                k: u32::from_ne_bytes([raw[4], raw[5], raw[6], raw[7]]),
            })
            .collect();
        programs.push(Program {
            shared,
            instructions: program,
        });
        rest = tail;
    }
    Ok(programs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_namespace_lists_are_refused() {
        let parse = |arg: &str| {
            Confinement::from_args(&[std::ffi::OsString::from(arg)]).map(|(c, _)| c.namespaces)
        };
        // The namespace descriptors are not open in the test process: the names are checked
        // first.
        for bad in [
            "--namespaces=user,user",
            "--namespaces=uts",
            "--namespaces=",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
