//! Starting the command with `clone(CLONE_VM | CLONE_VFORK)`, as `posix_spawn` does, instead of
//! `fork`.
//!
//! A `fork` copies the keeper's page tables, and then each page either process writes is
//! copied again. Under load that was a good part of a confined keeper's work: `std`'s
//! `Command` forks whenever a `pre_exec` closure is set, and the command's confinement is one.
//! Here the child runs in the keeper's memory, on a stack of its own, while the keeper waits
//! (the kernel holds it until the child has called `exec` or exited).
//!
//! 1. The keeper prepares everything the child needs: the C strings of the program (each place
//!    on `PATH` it may be), the arguments and the environment.
//! 2. It blocks every signal, so that no handler of the keeper runs in the child, and clones.
//! 3. The child resets the handled signals and `SIGPIPE` to their default and runs the
//!    `prepare` closure (the session, the terminal, the confinement) with every signal still
//!    blocked, so that it is not killed half-way through. Just before the `exec` it unblocks
//!    them, and it `exec`s the program at each place in turn, as `execvp` does.
//! 4. If `prepare` or the `exec` failed, the child writes the error number into the shared
//!    [`Child`] and exits with 127; the keeper, running again, reaps it and returns the error.
//! 5. The keeper restores its signal mask.
//!
//! The child shares the keeper's memory (and its thread pointer: `abort` in the child would
//! signal the keeper), so the keeper must have one thread at the call, and `prepare` must not
//! allocate, take a lock or panic (a panic is caught, and the child exits). Its stack has a
//! guard page: an overflow kills the child, not the keeper's data.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;

/// The child's stack. A static, so that nothing is allocated for it; it is used by one child
/// at a time, while the keeper waits. Its lowest page is the guard (no access).
const STACK_SIZE: usize = 256 * 1024;

/// The guard's size: a page on the machines the keeper runs on.
const GUARD: usize = 4096;

/// Page-aligned, for the guard (and 16-byte aligned, as the x86-64 and AArch64 ABIs want the
/// stack).
#[repr(C, align(4096))]
struct Stack([u8; STACK_SIZE]);

static mut STACK: Stack = Stack([0; STACK_SIZE]);

/// What the child reads and writes, in the keeper's memory.
struct Child<'a> {
    /// The places to `exec`, in order (one, when the program names a path).
    places: &'a [CString],
    /// `ARGV0` first, then a null pointer.
    argv: &'a [*const libc::c_char],
    /// The environment, then a null pointer.
    envp: &'a [*const libc::c_char],
    /// Run in the child before the `exec`.
    prepare: &'a mut dyn FnMut() -> io::Result<()>,
    /// Set by the child on failure: the error number.
    error: libc::c_int,
}

/// Start `program` (with `argv`, `ARGV0` first, and `env`, or the keeper's own environment)
/// in a child that runs `prepare` first. Returns the child's pid, or why it did not start.
///
/// The keeper must have one thread (see the module documentation).
pub(crate) fn spawn(
    program: &OsStr,
    argv: &[OsString],
    env: Option<&[(OsString, OsString)]>,
    prepare: &mut dyn FnMut() -> io::Result<()>,
) -> io::Result<libc::pid_t> {
    // 1. Everything the child needs, prepared here.
    let argv: Vec<CString> = argv
        .iter()
        .map(|arg| c_string(arg.as_bytes()))
        .collect::<io::Result<_>>()?;
    // A name given twice takes its last value, as `std`'s `Command` did.
    let merged: std::collections::BTreeMap<OsString, OsString> = match env {
        Some(env) => env.iter().cloned().collect(),
        None => std::env::vars_os().collect(),
    };
    let env: Vec<CString> = merged
        .iter()
        .map(|(name, value)| {
            let mut pair = name.as_bytes().to_vec();
            pair.push(b'=');
            pair.extend_from_slice(value.as_bytes());
            c_string(&pair)
        })
        .collect::<io::Result<_>>()?;
    let places = places(program, &env)?;
    let argv_pointers: Vec<*const libc::c_char> = argv
        .iter()
        .map(|arg| arg.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let env_pointers: Vec<*const libc::c_char> = env
        .iter()
        .map(|pair| pair.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let mut child = Child {
        places: &places,
        argv: &argv_pointers,
        envp: &env_pointers,
        prepare,
        error: 0,
    };

    // The guard page: no access, so an overflow faults in the child.
    // SAFETY: the first page of the stack's static, which holds no data of the keeper's;
    // page-aligned by `Stack`'s alignment.
    let guarded = unsafe {
        libc::mprotect(
            (&raw mut STACK).cast::<libc::c_void>(),
            GUARD,
            libc::PROT_NONE,
        )
    };
    if guarded == -1 {
        return Err(io::Error::last_os_error());
    }
    // 2. Every signal blocked across the clone.
    // SAFETY: sigset_t is plain data, filled by sigfillset/pthread_sigmask before use.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut before: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to sigset_t values that live across the calls.
    unsafe {
        libc::sigfillset(&raw mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &raw const all, &raw mut before);
    }
    // SAFETY: the stack is used by this one child, while this (single-threaded) keeper waits:
    // `CLONE_VFORK` holds it until the child has called `exec` or exited. The stack grows down
    // from its end, which is 16-byte aligned. `child` outlives the child's use of it.
    let pid = unsafe {
        let top = (&raw mut STACK).cast::<u8>().add(STACK_SIZE);
        libc::clone(
            run_child,
            top.cast(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&raw mut child).cast(),
        )
    };
    let cloned = io::Error::last_os_error();
    // 5. The keeper's mask again.
    // SAFETY: `before` is the mask read above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &raw const before, std::ptr::null_mut()) };
    if pid == -1 {
        return Err(cloned);
    }
    // 4. The child's failure, written before it exited.
    if child.error != 0 {
        let mut status = 0;
        // SAFETY: `status` is a valid out-pointer; the child has exited (or is about to).
        while unsafe { libc::waitpid(pid, &raw mut status, 0) } == -1
            && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
        {}
        return Err(io::Error::from_raw_os_error(child.error));
    }
    Ok(pid)
}

/// `bytes` as a C string; a NUL byte in them is refused.
fn c_string(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the command"))
}

/// The places to `exec` `program` at: itself when it holds a `/`, else each directory of the
/// command's `PATH` (musl's default when it has none), as `execvp` would look.
fn places(program: &OsStr, env: &[CString]) -> io::Result<Vec<CString>> {
    let bytes = program.as_bytes();
    if bytes.is_empty() {
        return Err(io::Error::from_raw_os_error(libc::ENOENT));
    }
    if bytes.contains(&b'/') {
        return Ok(vec![c_string(bytes)?]);
    }
    let path = env
        .iter()
        .find_map(|pair| pair.as_bytes().strip_prefix(b"PATH="))
        .unwrap_or(b"/usr/local/bin:/bin:/usr/bin");
    path.split(|&byte| byte == b':')
        .map(|dir| {
            // An empty entry is the working directory.
            let dir: &[u8] = if dir.is_empty() { b"." } else { dir };
            let mut place = dir.to_vec();
            place.push(b'/');
            place.extend_from_slice(bytes);
            c_string(&place)
        })
        .collect()
}

/// 3. The child: signals back to their defaults, `prepare`, then `exec` at each place.
extern "C" fn run_child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Child` that `spawn` passed, alive while the keeper waits.
    let child = unsafe { &mut *arg.cast::<Child<'_>>() };
    for signal in 1..libc::SIGRTMIN() {
        if signal == libc::SIGKILL || signal == libc::SIGSTOP {
            continue;
        }
        // SAFETY: sigaction is plain data; all zeroes is a valid value for the kernel to fill.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: reading this process's disposition into a valid sigaction.
        if unsafe { libc::sigaction(signal, std::ptr::null(), &raw mut action) } != 0 {
            continue;
        }
        if action.sa_sigaction != libc::SIG_IGN || signal == libc::SIGPIPE {
            action.sa_sigaction = libc::SIG_DFL;
            // SAFETY: `action` is a valid sigaction; this child has handlers of its own (no
            // `CLONE_SIGHAND`), so the keeper's stay.
            unsafe { libc::sigaction(signal, &raw const action, std::ptr::null_mut()) };
        }
    }
    // A panic must not unwind out of this function (it would abort, and `abort` here signals
    // the keeper's thread): it is caught, and the child exits.
    let prepared = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (child.prepare)()));
    if let Err(failed) =
        prepared.unwrap_or_else(|_| Err(io::Error::from_raw_os_error(libc::EINVAL)))
    {
        child.error = failed
            .raw_os_error()
            .filter(|&errno| errno != 0)
            .unwrap_or(libc::EINVAL);
        // SAFETY: ends this child without running anything of the keeper's exit.
        unsafe { libc::_exit(127) };
    }
    // SAFETY: sigset_t is plain data, emptied before use.
    let mut none: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers; unblocks every signal in this child, just before the `exec`.
    unsafe {
        libc::sigemptyset(&raw mut none);
        libc::pthread_sigmask(libc::SIG_SETMASK, &raw const none, std::ptr::null_mut());
    }
    // As `execvp`: a place that is not there (or not a directory) is passed over, one that
    // cannot be run for want of permission is remembered, any other failure ends the search.
    let mut error = libc::ENOENT;
    for place in child.places {
        // SAFETY: `place`, `argv` and `envp` are NUL-terminated strings and null-terminated
        // pointer arrays, alive while the keeper waits.
        unsafe { libc::execve(place.as_ptr(), child.argv.as_ptr(), child.envp.as_ptr()) };
        let failed = io::Error::last_os_error()
            .raw_os_error()
            .filter(|&errno| errno != 0)
            .unwrap_or(libc::ENOENT);
        if child.places.len() == 1 {
            error = failed;
            break;
        }
        match failed {
            libc::ENOENT | libc::ENOTDIR => {}
            libc::EACCES => error = libc::EACCES,
            other => {
                error = other;
                break;
            }
        }
    }
    child.error = error;
    // SAFETY: as above.
    unsafe { libc::_exit(127) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// One spawn at a time: the child's stack is one static.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

    fn env(path: &str) -> Vec<(OsString, OsString)> {
        vec![("PATH".into(), path.into())]
    }

    /// Wait for `pid`: its raw wait status.
    fn wait(pid: libc::pid_t) -> libc::c_int {
        let mut status = 0;
        // SAFETY: `status` is a valid out-pointer; `pid` is this process's child.
        assert_eq!(unsafe { libc::waitpid(pid, &raw mut status, 0) }, pid);
        status
    }

    fn argv(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn a_program_is_found_on_the_command_path_and_runs() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let env = env("/nonexistent:/usr/bin:/bin");
        let pid = spawn(
            OsStr::new("sh"),
            &argv(&["sh", "-c", "exit 7"]),
            Some(&env),
            &mut || Ok(()),
        )
        .expect("sh starts");
        let status = wait(pid);
        assert!(libc::WIFEXITED(status), "{status:#x}");
        assert_eq!(libc::WEXITSTATUS(status), 7);
    }

    #[test]
    fn a_missing_program_is_an_error() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let env = env("/usr/bin:/bin");
        let error = spawn(
            OsStr::new("no-such-program-here"),
            &argv(&["no-such-program-here"]),
            Some(&env),
            &mut || Ok(()),
        )
        .expect_err("nothing to run");
        assert_eq!(error.kind(), io::ErrorKind::NotFound, "{error}");
    }

    #[test]
    fn a_failed_preparation_is_returned_and_the_program_never_runs() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let dir = std::env::temp_dir().join(format!("toolhost-spawn-{}", std::process::id()));
        let marker = dir.with_extension("ran");
        let _ = std::fs::remove_file(&marker);
        let script = format!("touch {}", marker.display());
        let error = spawn(
            OsStr::new("/bin/sh"),
            &argv(&["sh", "-c", &script]),
            None,
            &mut || Err(io::Error::from_raw_os_error(libc::EPERM)),
        )
        .expect_err("the preparation failed");
        assert_eq!(error.raw_os_error(), Some(libc::EPERM), "{error}");
        assert!(
            !marker.exists(),
            "the program ran after a failed preparation"
        );
    }

    #[test]
    fn the_preparation_runs_in_the_child_before_the_program() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        // setsid in the child: the program runs as a session leader, and the caller's session
        // is not changed.
        // SAFETY: integer argument; reads this process's session.
        let before = unsafe { libc::getsid(0) };
        let pid = spawn(
            OsStr::new("/bin/sh"),
            // Field 6 of `/proc/PID/stat` is the session.
            &argv(&["sh", "-c", "set -- $(cat /proc/$$/stat); test \"$6\" = $$"]),
            None,
            &mut || {
                // SAFETY: integer arguments; in the child only.
                if unsafe { libc::setsid() } == -1 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            },
        )
        .expect("sh starts");
        let status = wait(pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "{status:#x}"
        );
        // SAFETY: as above.
        assert_eq!(unsafe { libc::getsid(0) }, before);
    }

    #[test]
    fn the_program_starts_with_no_signal_blocked() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        // SIGTERM blocked here: a program that inherited the mask would survive its own kill.
        // SAFETY: sigset_t values filled before use; this thread's mask only.
        let before = unsafe {
            let mut term: libc::sigset_t = std::mem::zeroed();
            let mut before: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&raw mut term);
            libc::sigaddset(&raw mut term, libc::SIGTERM);
            libc::pthread_sigmask(libc::SIG_BLOCK, &raw const term, &raw mut before);
            before
        };
        let spawned = spawn(
            OsStr::new("/bin/sh"),
            &argv(&["sh", "-c", "kill -TERM $$; exit 0"]),
            None,
            &mut || Ok(()),
        );
        // SAFETY: restores this thread's mask read above.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &raw const before, std::ptr::null_mut())
        };
        let status = wait(spawned.expect("sh starts"));
        assert!(
            libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGTERM,
            "the program did not die of its SIGTERM: {status:#x}"
        );
    }

    #[test]
    fn a_name_given_twice_takes_its_last_value() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let mut env = env("/usr/bin:/bin");
        env.push(("TWICE".into(), "first".into()));
        env.push(("TWICE".into(), "last".into()));
        let pid = spawn(
            OsStr::new("sh"),
            &argv(&["sh", "-c", "test \"$TWICE\" = last"]),
            Some(&env),
            &mut || Ok(()),
        )
        .expect("sh starts");
        let status = wait(pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "{status:#x}"
        );
    }

    #[test]
    fn a_place_that_cannot_be_run_is_passed_over_and_said_when_no_other_is() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let dir = std::env::temp_dir().join(format!("toolhost-spawn-path-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory");
        // A file named `sh` that is not executable comes first on the path.
        std::fs::write(dir.join("sh"), "not a program").expect("a file");
        let path = format!("{}:/usr/bin:/bin", dir.display());
        let pid = spawn(
            OsStr::new("sh"),
            &argv(&["sh", "-c", "exit 3"]),
            Some(&env(&path)),
            &mut || Ok(()),
        )
        .expect("the sh further on runs");
        let status = wait(pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 3,
            "{status:#x}"
        );
        let error = spawn(
            OsStr::new("sh"),
            &argv(&["sh"]),
            Some(&env(&dir.display().to_string())),
            &mut || Ok(()),
        )
        .expect_err("only a file that cannot be run");
        assert_eq!(error.kind(), io::ErrorKind::PermissionDenied, "{error}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_panic_in_the_preparation_ends_the_child_only() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let error = spawn(
            OsStr::new("/bin/sh"),
            &argv(&["sh", "-c", "exit 0"]),
            None,
            &mut || panic!("a preparation that panics"),
        )
        .expect_err("the preparation panicked");
        assert_eq!(error.raw_os_error(), Some(libc::EINVAL), "{error}");
    }

    #[test]
    fn an_overflow_of_the_childs_stack_kills_the_child_only() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        /// Use 4 KiB of stack a level, `levels` deep.
        fn deep(levels: usize) -> u8 {
            let page = std::hint::black_box([levels as u8; 4096]);
            if levels == 0 {
                return page[0];
            }
            deep(levels - 1).wrapping_add(std::hint::black_box(page)[4095])
        }
        let spawned = spawn(
            OsStr::new("/bin/sh"),
            &argv(&["sh", "-c", "exit 0"]),
            None,
            &mut || {
                // Twice the stack: without its guard page, this writes over whatever lies
                // below the stack in the keeper's memory.
                std::hint::black_box(deep(2 * STACK_SIZE / 4096));
                Ok(())
            },
        );
        let status = wait(spawned.expect("the child was started"));
        assert!(
            libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSEGV,
            "the child did not fault: {status:#x}"
        );
        // It faulted on the guard: the stack's lowest page is mapped without access.
        let guard = (&raw const STACK) as usize;
        let maps = std::fs::read_to_string("/proc/self/maps").expect("the mappings");
        let holding = maps
            .lines()
            .find(|line| {
                let range = line.split(' ').next().unwrap_or_default();
                let (start, end) = range.split_once('-').unwrap_or_default();
                let parse = |hex: &str| usize::from_str_radix(hex, 16).unwrap_or_default();
                parse(start) <= guard && guard < parse(end)
            })
            .expect("the stack is mapped");
        assert!(
            holding
                .split(' ')
                .nth(1)
                .is_some_and(|perms| perms.starts_with("---")),
            "the guard page is accessible: {holding}"
        );
    }

    fn places_of(program: &str, env: &[CString]) -> Vec<String> {
        places(OsStr::new(program), env)
            .expect("places")
            .into_iter()
            .map(|place| place.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn places_follow_the_command_path() {
        let env = [CString::new("PATH=/a::/b").expect("no NUL")];
        assert_eq!(places_of("tool", &env), ["/a/tool", "./tool", "/b/tool"]);
        assert_eq!(places_of("./x/tool", &env), ["./x/tool"]);
        assert_eq!(
            places_of("tool", &[]),
            ["/usr/local/bin/tool", "/bin/tool", "/usr/bin/tool"],
            "musl's default path"
        );
        assert!(places(OsStr::new(""), &env).is_err());
    }
}
