//! Watches (inotify) on every directory a check read, so that a check finds nothing changed
//! without reading the repositories again.
//!
//! 1. A full check adds a watch on each directory it opens, with its role: a guarded root
//!    (new directories and `.git` matter), a directory directly in one (only `.git` matters),
//!    or a git directory and what lies under it that the guard reads (every change matters).
//! 2. The next check first drains the events ([`Watches::changed`]). A relevant one, a lost
//!    event (the queue overflowed), a watch gone (its directory removed or moved), or a watch
//!    that could not be added means a full check; else nothing the guard reads changed, and
//!    the check ends there.
//!
//! inotify reports a change made through any mount of the same file (a bind mount in a
//! session's namespaces included). Where it is missing, every check is a full one.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::{AsRawFd, OwnedFd};

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

/// Most watches of one guard; past it every check is a full one.
const MAX_WATCHES: usize = 4096;

/// Why a directory is watched, from the least to the most that matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Role {
    /// A directory directly in a guarded root: only its `.git` matters.
    Holder,
    /// A guarded root: its `.git`, and directories made, removed or moved in it.
    Root,
    /// A git directory, or a directory under one that the guard reads: every change.
    Git,
}

/// A guard's watches.
#[derive(Debug)]
pub(super) struct Watches {
    /// `None`: inotify is missing here.
    inotify: Option<Inotify>,
    roles: HashMap<WatchDescriptor, Role>,
    /// A watch could not be added, or too many: every check is a full one.
    incomplete: bool,
}

impl Watches {
    pub(super) fn new() -> Watches {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .map_err(|error| tracing::debug!(%error, "no inotify for the git guard"))
            .ok();
        Watches {
            inotify,
            roles: HashMap::new(),
            incomplete: false,
        }
    }

    /// No watches: every check is a full one. For a host that is no server (`toolhost call`),
    /// where a watch saves a check or two at most and closing an inotify descriptor that holds watches waits for the
    /// kernel to free them (an SRCU grace period, about 13 ms on the 2-core machine of
    /// docs/performance.md).
    pub(super) fn none() -> Watches {
        Watches {
            inotify: None,
            roles: HashMap::new(),
            incomplete: false,
        }
    }

    /// Whether these watches hold an inotify descriptor.
    #[cfg(test)]
    pub(super) fn active(&self) -> bool {
        self.inotify.is_some()
    }

    /// Watch the directory `dir` (step 1 of the module's flow).
    pub(super) fn add(&mut self, dir: &OwnedFd, role: Role) {
        let Some(inotify) = &self.inotify else {
            return;
        };
        if self.roles.len() >= MAX_WATCHES {
            self.incomplete = true;
            return;
        }
        let mask = AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_DELETE
            | AddWatchFlags::IN_MODIFY
            | AddWatchFlags::IN_ATTRIB
            | AddWatchFlags::IN_CLOSE_WRITE
            | AddWatchFlags::IN_MOVED_FROM
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_DELETE_SELF
            | AddWatchFlags::IN_MOVE_SELF
            | AddWatchFlags::IN_ONLYDIR;
        let path = format!("/proc/self/fd/{}", dir.as_raw_fd());
        match inotify.add_watch(path.as_str(), mask) {
            Ok(watch) => {
                let known = self.roles.entry(watch).or_insert(role);
                *known = (*known).max(role);
            }
            Err(error) => {
                tracing::debug!(%error, "the git guard cannot watch a directory");
                self.incomplete = true;
            }
        }
    }

    /// Whether something the guard reads may have changed since the events were last drained
    /// (step 2 of the module's flow). Drains the events.
    pub(super) fn changed(&mut self) -> bool {
        let Some(inotify) = &self.inotify else {
            return true;
        };
        let mut changed = self.incomplete;
        loop {
            let events = match inotify.read_events() {
                Ok(events) => events,
                Err(nix::errno::Errno::EAGAIN) => break,
                Err(_) => return true,
            };
            if events.is_empty() {
                break;
            }
            for event in events {
                let gone = AddWatchFlags::IN_Q_OVERFLOW
                    | AddWatchFlags::IN_IGNORED
                    | AddWatchFlags::IN_DELETE_SELF
                    | AddWatchFlags::IN_MOVE_SELF;
                if event.mask.intersects(gone) {
                    if event.mask.contains(AddWatchFlags::IN_IGNORED) {
                        self.roles.remove(&event.wd);
                    }
                    changed = true;
                    continue;
                }
                let dot_git = event.name.as_deref() == Some(OsStr::new(".git"));
                let dir_entry = event.mask.contains(AddWatchFlags::IN_ISDIR)
                    && event.mask.intersects(
                        AddWatchFlags::IN_CREATE
                            | AddWatchFlags::IN_DELETE
                            | AddWatchFlags::IN_MOVED_FROM
                            | AddWatchFlags::IN_MOVED_TO,
                    );
                changed |= match self.roles.get(&event.wd) {
                    Some(Role::Git) | None => true,
                    Some(Role::Root) => dot_git || dir_entry,
                    Some(Role::Holder) => dot_git,
                };
            }
        }
        changed
    }
}
