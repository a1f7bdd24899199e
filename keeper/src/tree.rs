//! The keeper's descendants, found through `/proc`: every live process whose chain of parents
//! leads to the keeper. Because the keeper is a child subreaper, a descendant whose parent
//! dies is re-parented to the keeper, so the chain never breaks while the keeper lives.

use std::collections::{HashMap, HashSet};

/// How long one [`signal_all`] keeps looking for descendants that did not get the signal yet,
/// and how often.
const SIGNAL_WINDOW: std::time::Duration = std::time::Duration::from_millis(100);
const SIGNAL_EVERY: std::time::Duration = std::time::Duration::from_millis(10);

/// Send `signal` to every live descendant once. For a short while after, the tree is walked
/// again and what was forked meanwhile gets the signal too: a pipeline still starting, or what
/// a handler of the signal starts. It ends early once no descendant is left.
pub(crate) fn signal_all(signal: libc::c_int) {
    let mut signalled = HashSet::new();
    let until = std::time::Instant::now() + SIGNAL_WINDOW;
    loop {
        let live = live_descendants();
        if live.is_empty() {
            return;
        }
        for pid in live {
            if signalled.insert(pid) {
                // SAFETY: integer arguments. The pid was a live descendant an instant ago; a
                // descendant's pid cannot be reused before it is reaped (by the keeper or by
                // its parent, itself a descendant).
                unsafe { libc::kill(pid, signal) };
            }
        }
        if std::time::Instant::now() >= until {
            return;
        }
        std::thread::sleep(SIGNAL_EVERY);
    }
}

/// `SIGKILL` every descendant, walking again until a walk finds none it has not killed yet:
/// one that forked just before the kill cannot hide its child, and a process with `SIGKILL`
/// pending cannot fork any more. The dying are reaped by the keeper's main loop (or by their
/// own parents).
pub(crate) fn kill_all() {
    let mut killed = HashSet::new();
    loop {
        let fresh: Vec<_> = live_descendants()
            .into_iter()
            .filter(|pid| !killed.contains(pid))
            .collect();
        if fresh.is_empty() {
            return;
        }
        for pid in fresh {
            // SAFETY: as in `signal_all`.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            killed.insert(pid);
        }
    }
}

/// The keeper's live (not zombie) descendants.
fn live_descendants() -> Vec<libc::pid_t> {
    descendants(std::process::id() as libc::pid_t, &processes())
}

/// The inodes of the sockets the keeper's live descendants hold (`socket:[INODE]` in
/// `/proc/PID/fd`).
pub(crate) fn held_sockets() -> HashSet<u64> {
    let mut held = HashSet::new();
    for pid in live_descendants() {
        let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for entry in dir.flatten() {
            if let Ok(target) = std::fs::read_link(entry.path())
                && let Some(inode) = target
                    .to_str()
                    .and_then(|target| target.strip_prefix("socket:["))
                    .and_then(|rest| rest.strip_suffix(']'))
                    .and_then(|inode| inode.parse().ok())
            {
                held.insert(inode);
            }
        }
    }
    held
}

/// One process as `/proc/PID/stat` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Proc {
    pub(crate) parent: libc::pid_t,
    /// Dead (`Z` or `X`), waiting to be reaped.
    pub(crate) dead: bool,
}

/// Every process in `/proc` by pid. Processes that vanish while being read are skipped.
fn processes() -> HashMap<libc::pid_t, Proc> {
    let mut all = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return all;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        if let Ok(stat) = std::fs::read_to_string(entry.path().join("stat"))
            && let Some(proc) = parse_stat(&stat)
        {
            all.insert(pid, proc);
        }
    }
    all
}

/// The state and parent from a `/proc/PID/stat` line: `pid (comm) state ppid ...`. The comm
/// may contain anything, spaces and parentheses included, so fields are read after its last
/// `) `.
pub(crate) fn parse_stat(stat: &str) -> Option<Proc> {
    let (_, rest) = stat.rsplit_once(") ")?;
    let mut fields = rest.split(' ');
    let state = fields.next()?;
    let parent = fields.next()?.parse().ok()?;
    Some(Proc {
        parent,
        dead: state == "Z" || state == "X",
    })
}

/// The live processes of `all` that descend from `root`.
pub(crate) fn descendants(root: libc::pid_t, all: &HashMap<libc::pid_t, Proc>) -> Vec<libc::pid_t> {
    let mut children: HashMap<libc::pid_t, Vec<libc::pid_t>> = HashMap::new();
    for (&pid, proc) in all {
        children.entry(proc.parent).or_default().push(pid);
    }
    let mut seen = HashSet::new();
    let mut stack = vec![root];
    let mut found = Vec::new();
    while let Some(pid) = stack.pop() {
        for &child in children.get(&pid).map(Vec::as_slice).unwrap_or_default() {
            if child != root && seen.insert(child) {
                if all.get(&child).is_some_and(|p| !p.dead) {
                    found.push(child);
                }
                stack.push(child);
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_hostile_names_parse() {
        let line = "42 (a) b) (c) S 7 42 42 0 -1 4194560 ...";
        assert_eq!(
            parse_stat(line),
            Some(Proc {
                parent: 7,
                dead: false
            })
        );
        assert_eq!(
            parse_stat("9 (x) Z 1 9 9"),
            Some(Proc {
                parent: 1,
                dead: true
            })
        );
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn descendants_follow_every_branch_and_skip_the_dead() {
        let p = |parent, dead| Proc { parent, dead };
        let all = HashMap::from([
            (10, p(1, false)),  // the keeper
            (11, p(10, false)), // the command
            (12, p(11, false)), // its child
            (13, p(12, true)),  // a zombie grandchild
            (14, p(13, false)), // (not possible, but followed anyway)
            (15, p(10, false)), // an orphan re-parented to the keeper
            (20, p(1, false)),  // unrelated
            (21, p(20, false)),
        ]);
        let mut found = descendants(10, &all);
        found.sort_unstable();
        assert_eq!(found, vec![11, 12, 14, 15]);
        assert!(descendants(99, &all).is_empty());
    }
}
