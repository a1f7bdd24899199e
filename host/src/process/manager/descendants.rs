//! What the host sees in `/proc` of the processes below a command's keeper: those the command
//! left running after its own exit (its *leftovers*), whether one of them is blocked reading
//! the command's input, and whose processes a refused `kill` aimed at (with the note that says
//! so).
//!
//! 1. The keeper's descendants are collected from every process's parent (`/proc/PID/stat`),
//!    or, for the input check made every 50 ms, from the kernel's cheaper `children` lists.
//!    The keeper is a subreaper: what its command started stays below it even when orphaned.
//!    The keeper's own fork into the command's PID namespace is left out.
//! 3. For a leftover: its pid as its command sees it (the last `NSpid` of
//!    `/proc/PID/status`, which differs inside a PID namespace) and its command line.
//! 4. For an input wait: the system call a sleeping process is in (`/proc/PID/syscall`) and
//!    the file its descriptor argument names (`/proc/PID/fd/N`).

use std::collections::HashMap;

use nix::libc;
use nix::unistd::Pid;

use super::entry::Entry;
use super::spawner::KeeperPid;
use crate::process::Leftover;

/// Processes named in a note, at most.
const NAMED: usize = 5;
/// Characters of a leftover's command line kept, at most (as [`Leftover`] says).
const COMMAND_CHARS: usize = 80;
/// The keeper's `argv[0]`.
const KEEPER_NAME: &str = "toolhost-keeper";

/// The processes below `keeper`, the keeper's own fork excluded, oldest pid first, from every
/// process's parent (reliable; it reads every process's `stat`).
pub(super) fn of_keeper(keeper: Pid) -> Vec<i32> {
    by_parents(keeper)
}

/// [`of_keeper`], cheaply: from each process's `children` lists where the kernel keeps them
/// (`CONFIG_PROC_CHILDREN`), which costs what the tree holds. The kernel does not promise
/// these lists whole while processes come and go: a process may be missed. Else as
/// [`of_keeper`].
fn of_keeper_quickly(keeper: Pid) -> Vec<i32> {
    let root = keeper.as_raw();
    if let Some(children) = children_of(root) {
        let mut found = Vec::new();
        let mut queue = Vec::new();
        for child in children {
            // The keeper's own fork into the command's PID namespace is not the command's:
            // what is below it is.
            if is_keeper(child) {
                queue.extend(children_of(child).unwrap_or_default());
            } else {
                queue.push(child);
            }
        }
        while let Some(pid) = queue.pop() {
            if found.len() >= MAX_TREE {
                break;
            }
            found.push(pid);
            queue.extend(children_of(pid).unwrap_or_default());
        }
        found.sort_unstable();
        found.dedup();
        return found;
    }
    by_parents(keeper)
}

/// Most processes of a tree looked at.
const MAX_TREE: usize = 65_536;

/// The children of `pid`, from `/proc/PID/task/*/children`; `None` where the kernel keeps no
/// such lists (or `pid` is gone).
fn children_of(pid: i32) -> Option<Vec<i32>> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut children = Vec::new();
    let mut any = false;
    for task in tasks.flatten() {
        let Ok(text) = std::fs::read_to_string(task.path().join("children")) else {
            continue;
        };
        any = true;
        children.extend(
            text.split_whitespace()
                .filter_map(|pid| pid.parse::<i32>().ok()),
        );
    }
    any.then_some(children)
}

/// [`of_keeper`] from every process's parent in `/proc/PID/stat`.
fn by_parents(keeper: Pid) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut parents: HashMap<i32, i32> = HashMap::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<i32>().ok())
        else {
            continue;
        };
        if let Some(parent) = parent_of(pid) {
            parents.insert(pid, parent);
        }
    }
    let root = keeper.as_raw();
    let mut found: Vec<i32> = parents
        .keys()
        .copied()
        .filter(|pid| *pid != root && descends_from(*pid, root, &parents))
        // The keeper's own fork into the command's PID namespace is not the command's.
        .filter(|pid| parents.get(pid) != Some(&root) || !is_keeper(*pid))
        .collect();
    found.sort_unstable();
    found
}

/// What is below `keeper`, as leftovers (oldest first).
pub(super) fn left_running(keeper: Pid) -> Vec<Leftover> {
    of_keeper(keeper)
        .into_iter()
        .filter_map(|pid| {
            Some(Leftover {
                pid: inner_pid(pid)?,
                command: command_line(pid)?,
            })
        })
        .collect()
}

/// Whether one of `pids` sleeps in a read of `input` (what `/proc/PID/fd/N` shows for the
/// command's stdin: `pipe:[INODE]` or `/dev/pts/N`), or, when `input` is a terminal, waits
/// for it to be readable (`select`, `poll` and the like, with the terminal as its stdin).
pub(super) fn reading(pids: &[i32], input: &str, terminal: bool) -> bool {
    pids.iter().any(|&pid| {
        let Some((call, fd)) = sleeping_in(pid) else {
            return false;
        };
        if READS.contains(&call) {
            return fd_target(pid, fd).is_some_and(|target| target == input);
        }
        terminal && WAITS.contains(&call) && fd_target(pid, 0).is_some_and(|t| t == input)
    })
}

/// System calls that read from a descriptor (their first argument).
const READS: &[libc::c_long] = &[
    libc::SYS_read,
    libc::SYS_readv,
    libc::SYS_pread64,
    libc::SYS_preadv,
];

/// System calls that wait for descriptors to become readable.
#[cfg(target_arch = "x86_64")]
const WAITS: &[libc::c_long] = &[
    libc::SYS_select,
    libc::SYS_pselect6,
    libc::SYS_poll,
    libc::SYS_ppoll,
];
#[cfg(not(target_arch = "x86_64"))]
const WAITS: &[libc::c_long] = &[libc::SYS_pselect6, libc::SYS_ppoll];

/// The system call a sleeping process `pid` is in, and its first argument; `None` when it
/// runs, or is not in a system call, or cannot be inspected.
fn sleeping_in(pid: i32) -> Option<(libc::c_long, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    if !rest.starts_with('S') {
        return None;
    }
    let syscall = std::fs::read_to_string(format!("/proc/{pid}/syscall")).ok()?;
    let mut fields = syscall.split_whitespace();
    let call = fields.next()?.parse::<libc::c_long>().ok()?;
    let first = fields.next()?.strip_prefix("0x")?;
    let fd = i32::try_from(u64::from_str_radix(first, 16).ok()?).ok()?;
    Some((call, fd))
}

/// What descriptor `fd` of `pid` refers to.
fn fd_target(pid: i32, fd: i32) -> Option<String> {
    std::fs::read_link(format!("/proc/{pid}/fd/{fd}"))
        .ok()
        .map(|target| target.to_string_lossy().into_owned())
}

impl Entry {
    /// What the command left running after its exit: empty while it runs, and once nothing
    /// of it is left (no `/proc` scan then).
    pub(super) fn left_running(&self) -> Vec<Leftover> {
        if self.keeper_lost.load(std::sync::atomic::Ordering::Acquire) {
            let marked = self
                .marked_processes()
                .into_iter()
                .filter_map(|pid| {
                    Some(Leftover {
                        pid: inner_pid(pid)?,
                        command: command_line(pid)?,
                    })
                })
                .collect();
            return self.redacted(marked);
        }
        if self.is_running() || !self.has_leftovers() {
            return Vec::new();
        }
        let keeper = crate::lock(&self.keeper).pid.as_ref().map(KeeperPid::pid);
        self.redacted(keeper.map_or_else(Vec::new, left_running))
    }

    /// The processes that carry this command's mark (an unconfined command's, found this way
    /// once its keeper is lost).
    pub(super) fn marked_processes(&self) -> Vec<i32> {
        marked(&owner_mark(&self.spec.id))
    }

    /// Send `signal` (`SIGKILL` for a terminate: nothing escalates it later) to the processes
    /// that carry this command's mark, walking again until none new shows. `false` when none
    /// did.
    pub(super) fn signal_marked(&self, signal: crate::process::Signal) -> bool {
        use crate::process::Signal as Wanted;
        use nix::sys::signal::Signal as Sent;
        let sent = match signal {
            Wanted::Interrupt => Sent::SIGINT,
            Wanted::Terminate | Wanted::Kill => Sent::SIGKILL,
        };
        let mut signalled = std::collections::HashSet::new();
        for _ in 0..8 {
            let fresh: Vec<i32> = self
                .marked_processes()
                .into_iter()
                .filter(|pid| !signalled.contains(pid))
                .collect();
            if fresh.is_empty() {
                break;
            }
            for pid in fresh {
                let _ = nix::sys::signal::kill(Pid::from_raw(pid), sent);
                signalled.insert(pid);
            }
        }
        !signalled.is_empty()
    }

    /// Every process below the command's keeper (the command itself while it runs), as its
    /// command's processes see them.
    pub(super) fn processes(&self) -> Vec<Leftover> {
        let keeper = crate::lock(&self.keeper).pid.as_ref().map(KeeperPid::pid);
        self.redacted(keeper.map_or_else(Vec::new, left_running))
    }

    /// The output the command has so far, as a read of all of it shows it.
    pub(super) fn output_text(&self) -> String {
        crate::lock(&self.state).buffer.render().text
    }

    /// Whether a process of the command is seen blocked reading its input (an open stdin
    /// or a terminal); `false` where the kernel does not show it.
    pub(super) fn reading_input(&self) -> bool {
        let Some(input) = self.input.identity() else {
            return false;
        };
        let keeper = crate::lock(&self.keeper).pid.as_ref().map(KeeperPid::pid);
        // Checked every 50 ms of a quiet wait: the cheap walk (a process it misses is seen at
        // the next look, or the quiet time ends the wait).
        keeper.is_some_and(|keeper| {
            reading(&of_keeper_quickly(keeper), input, self.input.is_terminal())
        })
    }
}

/// The variable that marks an unconfined command's processes: `TOOLHOST_OWNER=HOSTPID-ID`.
const OWNER: &str = "TOOLHOST_OWNER";

/// The mark of process `id` of this host, as a variable to set.
pub(super) fn owner_mark(id: &str) -> (String, String) {
    (OWNER.to_owned(), format!("{}-{id}", std::process::id()))
}

/// The processes whose environment holds `NAME=VALUE` (`mark`), oldest pid first. A process
/// may change its environment: the mark finds what inherited it unchanged.
fn marked(mark: &(String, String)) -> Vec<i32> {
    let wanted = format!("{}={}", mark.0, mark.1);
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found: Vec<i32> = entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
                environ
                    .split(|byte| *byte == 0)
                    .any(|var| var == wanted.as_bytes())
            })
        })
        .collect();
    found.sort_unstable();
    found
}

/// Kill the processes of unconfined commands of hosts that are gone (killed outright, their
/// keepers with them): each holds the mark of a host pid that no longer runs. Once, at start.
pub(super) fn sweep_orphans_of_gone_hosts() {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    let prefix = format!("{OWNER}=");
    for pid in entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
    {
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let host = environ.split(|byte| *byte == 0).find_map(|var| {
            let value = std::str::from_utf8(var.strip_prefix(prefix.as_bytes())?).ok()?;
            value.split_once('-')?.0.parse::<u32>().ok()
        });
        if let Some(host) = host
            && host != std::process::id()
            && !std::path::Path::new(&format!("/proc/{host}")).exists()
        {
            tracing::warn!(
                pid,
                "killing a process that an unconfined command of a host that is gone left"
            );
            let _ = nix::sys::signal::kill(Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
    }
}

/// After output went quiet, how soon and how often a wait for quiet output looks whether the
/// command is blocked reading its input.
const INPUT_POLL: std::time::Duration = std::time::Duration::from_millis(50);

impl Entry {
    /// Sleep `quiet`, or less: until a process of the command is seen blocked reading its
    /// input (looked at every [`INPUT_POLL`]), where the kernel shows it.
    pub(super) async fn quiet_or_reading_input(&self, quiet: std::time::Duration) {
        let end = tokio::time::Instant::now() + quiet;
        if self.input.identity().is_none() {
            tokio::time::sleep_until(end).await;
            return;
        }
        let mut next = tokio::time::Instant::now() + INPUT_POLL;
        while next < end {
            tokio::time::sleep_until(next).await;
            if self.reading_input() {
                return;
            }
            next += INPUT_POLL;
        }
        tokio::time::sleep_until(end).await;
    }
}

/// The pids a `kill` or `pkill` in `text` was refused for (`kill: (PID) - Operation not
/// permitted`, `killing pid PID failed`); `None` when no refused kill shows. A shell that
/// names no pid (dash) gives an empty list.
pub(super) fn refused_kills(text: &str) -> Option<Vec<i32>> {
    let mut seen = false;
    let mut pids = Vec::new();
    for line in text.lines() {
        if !line.contains("kill") || !line.contains("Operation not permitted") {
            continue;
        }
        seen = true;
        let pid = line
            .split_once("kill: (")
            .and_then(|(_, rest)| rest.split_once(')'))
            .map(|(pid, _)| pid)
            .or_else(|| {
                line.split_once("killing pid ")
                    .and_then(|(_, rest)| rest.split_whitespace().next())
            })
            .and_then(|pid| pid.trim().parse::<i32>().ok());
        pids.extend(pid);
    }
    seen.then_some(pids)
}

/// The note for a command whose `kill` of `refused` pids was refused, given the processes of
/// the session's other commands (`owners`: each command's id and what runs below it).
pub(super) fn refused_kill_note(refused: &[i32], owners: &[(String, Vec<Leftover>)]) -> String {
    let named: Vec<String> = owners
        .iter()
        .flat_map(|(id, processes)| {
            processes
                .iter()
                .filter(|process| refused.is_empty() || refused.contains(&process.pid))
                .map(move |process| {
                    format!(
                        "pid {} `{}` is process {id}'s",
                        process.pid, process.command
                    )
                })
        })
        .take(NAMED)
        .collect();
    let whose = if named.is_empty() {
        String::new()
    } else {
        format!(" ({})", named.join("; "))
    };
    format!(
        "\n[toolhost: `kill` was refused: each command runs in a sandbox of its own and cannot \
         signal another command's processes. Stop them with process_signal and the id of the \
         command that started them{whose}]\n"
    )
}

/// Whether `pid` runs as the keeper (the host starts it with that name as `argv[0]`).
fn is_keeper(pid: i32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|raw| raw.split(|byte| *byte == 0).next() == Some(KEEPER_NAME.as_bytes()))
}

/// Whether `pid` descends from `root` in `parents`.
fn descends_from(mut pid: i32, root: i32, parents: &HashMap<i32, i32>) -> bool {
    // A chain longer than the table would be a loop (pids reused while reading).
    for _ in 0..parents.len() {
        match parents.get(&pid) {
            Some(&parent) if parent == root => return true,
            Some(&parent) if parent > 0 => pid = parent,
            _ => return false,
        }
    }
    false
}

/// The parent of `pid`, from `/proc/PID/stat` (after the command name in parentheses, which
/// may hold anything: state, then the parent).
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// `pid` as its own PID namespace numbers it: the last field of `NSpid`.
fn inner_pid(pid: i32) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("NSpid:"))?;
    line.split_whitespace().last()?.parse().ok()
}

/// The command line of `pid`, its arguments joined by spaces and cut; a kernel thread or a
/// zombie has none.
fn command_line(pid: i32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    if raw.is_empty() {
        return None;
    }
    let text = String::from_utf8_lossy(&raw);
    let joined = text.trim_end_matches('\0').replace('\0', " ");
    let mut cut: String = joined.chars().take(COMMAND_CHARS).collect();
    if joined.chars().count() > COMMAND_CHARS {
        cut.push('…');
    }
    Some(cut)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::process::{Command, Stdio};

    fn me() -> Pid {
        Pid::from_raw(std::process::id() as i32)
    }

    #[test]
    fn descendants_of_this_process_are_found_with_their_command_lines() {
        let mut child = Command::new("sleep").arg("30").spawn().expect("sleep");
        let found = left_running(me());
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            found.iter().any(|leftover| leftover.command == "sleep 30"),
            "{found:?}"
        );
    }

    #[test]
    fn the_children_lists_and_the_parents_agree() {
        let mut child = Command::new("sh")
            .args(["-c", "sleep 30.8181 & sleep 30.8181"])
            .spawn()
            .expect("sh");
        let ours = |pids: Vec<i32>| {
            pids.into_iter()
                .filter(|pid| command_line(*pid).is_some_and(|cmd| cmd == "sleep 30.8181"))
                .count()
        };
        // Test-side polling until both sleeps run (up to 10 s).
        let both = (0..1000).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            ours(by_parents(me())) == 2
        });
        // The children lists may miss a process while others come and go (other tests fork
        // here too): looked at a few times.
        let listed = (0..100)
            .map(|_| ours(of_keeper_quickly(me())))
            .find(|count| *count == 2)
            .unwrap_or(0);
        let scanned = ours(of_keeper(me()));
        let _ = child.kill();
        let _ = child.wait();
        let _ = Command::new("pkill").args(["-f", "sleep 30.8181"]).status();
        assert!(both);
        assert_eq!((listed, scanned), (2, 2));
    }

    #[test]
    fn a_process_blocked_reading_its_stdin_pipe_is_seen() {
        let mut child = Command::new("sh")
            .args(["-c", "read line; echo got $line"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("sh");
        let pid = child.id() as i32;
        let input = fd_target(pid, 0).expect("its stdin");
        assert!(input.starts_with("pipe:["), "{input}");
        // Test-side polling for the moment it blocks (up to 10 s).
        let seen = (0..1000).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            reading(&[pid], &input, false)
        });
        // Another pipe is not this input.
        let other = !reading(&[pid], "pipe:[1]", false);
        if let Some(stdin) = child.stdin.as_mut() {
            let _ = stdin.write_all(b"x\n");
        }
        let _ = child.wait();
        assert!(seen, "never seen reading its stdin");
        assert!(other);
    }

    #[test]
    fn a_sleeping_process_is_not_reading_input() {
        let mut child = Command::new("sleep")
            .arg("30")
            .stdin(Stdio::piped())
            .spawn()
            .expect("sleep");
        let pid = child.id() as i32;
        let input = fd_target(pid, 0).expect("its stdin");
        // Asleep (in nanosleep) from its first moments.
        let asleep = (0..1000).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            sleeping_in(pid).is_some()
        });
        let reads = reading(&[pid], &input, true);
        let _ = child.kill();
        let _ = child.wait();
        assert!(asleep);
        assert!(!reads);
    }

    #[test]
    fn refused_kills_are_read_from_each_tools_words() {
        let text = "bash: line 1: kill: (41) - Operation not permitted\n\
                    /bin/kill: (42): Operation not permitted\n\
                    pkill: killing pid 43 failed: Operation not permitted\n\
                    cat: x: Operation not permitted\n";
        assert_eq!(refused_kills(text), Some(vec![41, 42, 43]));
        assert_eq!(
            refused_kills("/bin/sh: 1: kill: Operation not permitted\n"),
            Some(vec![])
        );
        assert_eq!(refused_kills("kill: (4) - No such process\n"), None);
        let owners = vec![(
            "ab12".to_owned(),
            vec![
                Leftover {
                    pid: 4,
                    command: "npm run dev".to_owned(),
                },
                Leftover {
                    pid: 5,
                    command: "node server.js".to_owned(),
                },
            ],
        )];
        let note = refused_kill_note(&[5], &owners);
        assert!(note.contains("process_signal"), "{note}");
        assert!(
            note.contains("pid 5 `node server.js` is process ab12's"),
            "{note}"
        );
        assert!(!note.contains("npm run dev"), "{note}");
        // Without a pid, every candidate is named.
        assert!(refused_kill_note(&[], &owners).contains("npm run dev"));
    }
}
