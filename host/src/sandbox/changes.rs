//! Whether a set of directories changed since a moment: one inotify instance for the host,
//! read without blocking when asked, so that a command's start learns it from one `read`
//! instead of a `statx` per directory.
//!
//! 1. [`Changes::watch`] adds a watch on each directory (one per directory for the whole host,
//!    counted by its users) and notes each watch's count of changes.
//! 2. [`Watched::changed`] reads the events waiting, adds them to the counts, and answers
//!    whether a count of the set moved, a watch of it went away, or the kernel dropped events.
//! 3. A [`Watched`] set removes its watches when it is dropped as their last user.
//!
//! A change counts when an entry is created, removed or renamed in a directory, when the
//! directory's own attributes change, and when it is removed or moved. Writes to files do not.
//! A mount over a directory sends no event; a command then keeps the rules made before, which
//! grant nothing below that mount point it did not grant before.

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock, PoisonError};

/// The host's watches.
pub(crate) struct Changes {
    inner: Mutex<Inner>,
}

struct Inner {
    inotify: Inotify,
    /// Each live watch.
    watches: HashMap<WatchDescriptor, Watch>,
    /// How many times the kernel dropped events (its queue overflowed): every set changed.
    overflows: u64,
}

/// One directory's watch.
struct Watch {
    /// Changes seen so far.
    changes: u64,
    /// Sets that hold it.
    users: usize,
}

/// A set of watched directories and the counts when it was taken; its watches go with it
/// when it is the last user.
pub(crate) struct Watched<'a> {
    changes: &'a Changes,
    watches: Vec<(WatchDescriptor, u64)>,
    overflows: u64,
}

impl std::fmt::Debug for Watched<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watched")
            .field("watches", &self.watches.len())
            .finish_non_exhaustive()
    }
}

impl Watched<'_> {
    /// Whether one of its directories changed since it was taken.
    pub(crate) fn changed(&self) -> bool {
        let mut inner = self.changes.lock();
        inner.drain();
        inner.overflows != self.overflows
            || self.watches.iter().any(|(wd, changes)| {
                inner
                    .watches
                    .get(wd)
                    .is_none_or(|watch| watch.changes != *changes)
            })
    }
}

impl Drop for Watched<'_> {
    fn drop(&mut self) {
        self.changes.lock().release(&self.watches);
    }
}

/// What counts as a change of a watched directory.
fn mask() -> AddWatchFlags {
    AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_ATTRIB
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF
        | AddWatchFlags::IN_DONT_FOLLOW
        | AddWatchFlags::IN_ONLYDIR
}

impl Changes {
    /// The host's instance; `None` where inotify cannot be used (said once at debug level).
    pub(crate) fn host() -> Option<&'static Changes> {
        static HOST: OnceLock<Option<Changes>> = OnceLock::new();
        HOST.get_or_init(
            || match Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC) {
                Ok(inotify) => Some(Changes {
                    inner: Mutex::new(Inner {
                        inotify,
                        watches: HashMap::new(),
                        overflows: 0,
                    }),
                }),
                Err(error) => {
                    tracing::debug!(%error, "no inotify: directories are checked with statx");
                    None
                }
            },
        )
        .as_ref()
    }

    /// Watch `dirs` from now on; `None` when one cannot be watched (gone, or the user's
    /// limit on watches reached).
    pub(crate) fn watch(&self, dirs: &[PathBuf]) -> Option<Watched<'_>> {
        let mut inner = self.lock();
        inner.drain();
        let overflows = inner.overflows;
        let mut watches = Vec::with_capacity(dirs.len());
        for dir in dirs {
            match inner.inotify.add_watch(dir.as_path(), mask()) {
                Ok(wd) => {
                    let watch = inner.watches.entry(wd).or_insert(Watch {
                        changes: 0,
                        users: 0,
                    });
                    watch.users += 1;
                    watches.push((wd, watch.changes));
                }
                Err(error) => {
                    tracing::debug!(dir = %dir.display(), %error, "cannot watch a directory: it is checked with statx");
                    inner.release(&watches);
                    return None;
                }
            }
        }
        Some(Watched {
            changes: self,
            watches,
            overflows,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Inner {
    /// Count the events waiting.
    fn drain(&mut self) {
        loop {
            let events = match self.inotify.read_events() {
                Ok(events) => events,
                Err(nix::errno::Errno::EINTR) => continue,
                // EAGAIN: nothing more waiting.
                Err(_) => return,
            };
            for event in events {
                if event.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                    self.overflows += 1;
                    continue;
                }
                // A file's own attributes changing inside the directory is not a change of it.
                if event.mask == AddWatchFlags::IN_ATTRIB && event.name.is_some() {
                    continue;
                }
                if event.mask.contains(AddWatchFlags::IN_IGNORED) {
                    // The watch is gone (its directory was removed): sets holding it changed.
                    self.watches.remove(&event.wd);
                    continue;
                }
                if let Some(watch) = self.watches.get_mut(&event.wd) {
                    watch.changes += 1;
                }
            }
        }
    }

    /// One user fewer of each of `watches`; a watch no set holds is removed.
    fn release(&mut self, watches: &[(WatchDescriptor, u64)]) {
        for (wd, _) in watches {
            let Some(watch) = self.watches.get_mut(wd) else {
                continue;
            };
            watch.users = watch.users.saturating_sub(1);
            if watch.users == 0 {
                self.watches.remove(wd);
                let _ = self.inotify.rm_watch(*wd);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn changes() -> Changes {
        Changes {
            inner: Mutex::new(Inner {
                inotify: Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
                    .expect("inotify"),
                watches: HashMap::new(),
                overflows: 0,
            }),
        }
    }

    fn live(changes: &Changes) -> usize {
        changes.inner.lock().expect("lock").watches.len()
    }

    #[test]
    fn entries_made_removed_or_renamed_are_changes_and_writes_are_not() {
        let root = tempfile::tempdir().expect("root");
        let dir = root.path().join("d");
        std::fs::create_dir(&dir).expect("dir");
        std::fs::write(dir.join("a"), "a").expect("write");
        let changes = changes();
        let watched = changes.watch(std::slice::from_ref(&dir)).expect("watched");
        assert!(!watched.changed());
        std::fs::write(dir.join("a"), "more").expect("write");
        assert!(!watched.changed(), "a write in place");
        std::fs::rename(dir.join("a"), dir.join("b")).expect("rename");
        assert!(watched.changed(), "a rename");
        let again = changes.watch(std::slice::from_ref(&dir)).expect("watched");
        assert!(!again.changed());
        std::fs::remove_file(dir.join("b")).expect("remove");
        assert!(again.changed(), "a removal");
        let last = changes.watch(std::slice::from_ref(&dir)).expect("watched");
        std::fs::remove_dir(&dir).expect("remove dir");
        assert!(last.changed(), "the directory itself removed");
    }

    #[test]
    fn a_watch_goes_with_its_last_user_and_a_missing_directory_is_not_watched() {
        let root = tempfile::tempdir().expect("root");
        let changes = changes();
        let dirs = [root.path().to_path_buf()];
        let one = changes.watch(&dirs).expect("watched");
        let two = changes.watch(&dirs).expect("watched");
        assert_eq!(live(&changes), 1, "one watch per directory");
        drop(one);
        assert_eq!(live(&changes), 1);
        std::fs::write(root.path().join("new"), "").expect("write");
        assert!(two.changed(), "still watched for the other set");
        drop(two);
        assert_eq!(live(&changes), 0);
        let missing = [root.path().join("missing")];
        assert!(changes.watch(&missing).is_none());
        let mixed = [root.path().to_path_buf(), root.path().join("missing")];
        assert!(changes.watch(&mixed).is_none());
        assert_eq!(live(&changes), 0, "nothing left of a set that failed");
    }
}
