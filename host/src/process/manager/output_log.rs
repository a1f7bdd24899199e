//! Full-output log files: each process's complete merged output, up to a cap, in
//! `<state_dir>/<id>.log`, kept under a retention that outlasts the process and the host
//! ([`sweep`]), and the index of which process of a scope wrote which log ([`ScopeLogs`]).

use std::collections::{HashMap, HashSet};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use std::io::Write;

/// Where logs go when the configuration names no directory:
/// `$XDG_STATE_HOME/toolhost/output`, else `$HOME/.local/state/toolhost/output`.
/// `None` when neither variable holds an absolute path.
pub fn default_state_dir() -> Option<PathBuf> {
    let absolute = |name: &str| {
        std::env::var_os(name)
            .map(PathBuf::from)
            .filter(|path| path.is_absolute())
    };
    if let Some(state) = absolute("XDG_STATE_HOME") {
        return Some(state.join("toolhost").join("output"));
    }
    absolute("HOME").map(|home| home.join(".local/state/toolhost/output"))
}

/// Create `dir` (and its parents) readable only by us.
/// A page of the log at `path`: at most `max_bytes` bytes from byte `offset` (counted from
/// the end when negative), without a character cut at either end. Returns the text, where
/// the page starts, where the next one starts, and the bytes the file holds.
pub(super) fn read_page(
    path: &Path,
    offset: i64,
    max_bytes: u64,
) -> io::Result<(String, u64, u64, u64)> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(path)?;
    let total = file.metadata()?.len();
    let mut start = if offset < 0 {
        total.saturating_sub(offset.unsigned_abs())
    } else {
        offset.unsigned_abs().min(total)
    };
    let want = max_bytes.min(total - start);
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::with_capacity(usize::try_from(want).unwrap_or(0));
    Read::by_ref(&mut file).take(want).read_to_end(&mut bytes)?;
    // A page that starts inside a character begins after it (it belongs to the page before).
    if start > 0 {
        let skip = crate::buffer::leading_continuations(&bytes);
        bytes.drain(..skip);
        start += skip as u64;
    }
    // One that ends inside a character ends before it, unless that leaves nothing.
    if start + (bytes.len() as u64) < total {
        let cut = crate::buffer::char_floor(&bytes, bytes.len());
        if cut > 0 {
            bytes.truncate(cut);
        }
    }
    let next = start + bytes.len() as u64;
    Ok((
        String::from_utf8_lossy(&bytes).into_owned(),
        start,
        next,
        total,
    ))
}

pub(super) fn create_dir(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// An open log file being appended to.
pub(super) struct OutputLog {
    path: PathBuf,
    /// Written synchronously: appends of at most a read chunk to a page-cached file are
    /// cheaper than a hop to tokio's blocking pool per chunk.
    file: std::fs::File,
    written: u64,
    cap: u64,
    failed: bool,
}

impl OutputLog {
    /// Create `<dir>/<id>.log` (a new file, mode 0600). If the directory is missing it is
    /// created first. Blocking file-system calls: callers must not hold a lock.
    pub(super) fn create(dir: &Path, id: &str, cap: u64) -> io::Result<Self> {
        let path = dir.join(format!("{id}.log"));
        let open = || {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
        };
        let file = match open() {
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                create_dir(dir)?;
                open()?
            }
            other => other?,
        };
        Ok(Self {
            path,
            file,
            written: 0,
            cap,
            failed: false,
        })
    }

    /// The file's path.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes written to the file (it stops at the cap, or at a write error).
    pub(super) fn written(&self) -> u64 {
        self.written
    }

    /// Append `data`, stopping at the cap. A write error is logged once and ends logging.
    pub(super) async fn append(&mut self, data: &[u8]) {
        if self.failed || self.written >= self.cap {
            return;
        }
        let room = usize::try_from(self.cap - self.written).unwrap_or(usize::MAX);
        let chunk = &data[..data.len().min(room)];
        match self.file.write_all(chunk) {
            Ok(()) => self.written += chunk.len() as u64,
            Err(error) => {
                tracing::warn!(path = %self.path.display(), %error, "cannot write output log");
                self.failed = true;
            }
        }
    }

    /// Flush everything written so far to the file.
    pub(super) async fn finish(&mut self) {
        if self.failed {
            return;
        }
        if let Err(error) = self.file.flush() {
            tracing::warn!(path = %self.path.display(), %error, "cannot write output log");
            self.failed = true;
        }
    }
}

/// Which log file belongs to which process of one scope (held by its `Scope`): only a
/// process's own scope may read its log through the host. Entries stay after the process is
/// gone, until the scope ends or the file is swept.
#[derive(Debug, Default)]
pub(super) struct ScopeLogs {
    logs: Mutex<HashMap<String, PathBuf>>,
}

impl ScopeLogs {
    fn logs(&self) -> std::sync::MutexGuard<'_, HashMap<String, PathBuf>> {
        self.logs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Note that process `id` writes `path`.
    pub(super) fn add(&self, id: &str, path: &Path) {
        self.logs().insert(id.to_owned(), path.to_owned());
    }

    /// The log of process `id`, if it has one that still exists.
    pub(super) fn get(&self, id: &str) -> Option<PathBuf> {
        let path = self.logs().get(id)?.clone();
        path.exists().then_some(path)
    }

    /// The processes with a log, and their files.
    pub(super) fn list(&self) -> Vec<(String, PathBuf)> {
        self.logs()
            .iter()
            .filter(|(_, path)| path.exists())
            .map(|(id, path)| (id.clone(), path.clone()))
            .collect()
    }

    /// Forget deleted files.
    fn forget_paths(&self, removed: &HashSet<PathBuf>) {
        if !removed.is_empty() {
            self.logs().retain(|_, path| !removed.contains(path));
        }
    }
}

/// The file in the log directory whose modification time is when it was last swept.
const SWEPT_STAMP: &str = ".swept";

/// Whether `dir` was last swept longer than `every` ago (or never): hosts that start often
/// (one-shot calls) sweep once per `every` instead of paying a walk over every log each start.
pub(super) fn sweep_due(dir: &Path, every: Duration) -> bool {
    let last = std::fs::symlink_metadata(dir.join(SWEPT_STAMP)).and_then(|m| m.modified());
    match last {
        Ok(last) => SystemTime::now()
            .duration_since(last)
            .map_or(true, |age| age >= every),
        Err(_) => true,
    }
}

/// Record that `dir` was swept now.
fn mark_swept(dir: &Path) {
    let stamp = dir.join(SWEPT_STAMP);
    // Truncating (re)creation sets the modification time to now.
    if let Err(error) = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .mode(0o600)
        .open(&stamp)
    {
        tracing::debug!(path = %stamp.display(), %error, "cannot record the log sweep");
    }
}

/// What a [`sweep`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Swept {
    /// Files deleted because they were older than the retention.
    pub(super) expired: usize,
    /// Files deleted, oldest first, to bring the total under the limit.
    pub(super) over_total: usize,
    /// Disk space the remaining logs take (see [`disk_space`]).
    pub(super) kept_bytes: u64,
}

/// The disk space a file takes: its allocated blocks, or its length where that is more. A log
/// of a few bytes takes a whole block (4 KiB on most file systems): counted by length, a
/// million one-line logs would count as a few megabytes while filling gigabytes.
fn disk_space(meta: &std::fs::Metadata) -> u64 {
    meta.len().max(meta.blocks().saturating_mul(512))
}

/// Delete the log files in `dir` (files named `<id>.log`) last written longer than
/// `retention` ago, then the oldest until they take at most `max_total` bytes of disk together.
/// Files in `keep` (logs of processes still listed) are never deleted. Logs of hosts that died
/// are swept the same way: nothing but age and size decides.
pub(super) fn sweep(
    dir: &Path,
    retention: Duration,
    max_total: u64,
    keep: &HashSet<PathBuf>,
    indexes: &[Arc<ScopeLogs>],
) -> Swept {
    let mut swept = Swept::default();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return swept;
    };
    mark_swept(dir);
    let now = SystemTime::now();
    let mut logs: Vec<(SystemTime, u64, PathBuf)> = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "log") {
            continue;
        }
        // Not followed: a link or a directory someone put here is not ours to delete.
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        let written = meta.modified().unwrap_or(now);
        logs.push((written, disk_space(&meta), path));
    }
    logs.sort();
    let mut removed = HashSet::new();
    let mut remove = |path: &Path| match std::fs::remove_file(path) {
        Ok(()) => {
            removed.insert(path.to_owned());
            true
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => true,
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "cannot delete an old output log");
            false
        }
    };
    let mut kept = Vec::new();
    for (written, size, path) in logs {
        let age = now.duration_since(written).unwrap_or_default();
        if age > retention && !keep.contains(&path) && remove(&path) {
            swept.expired += 1;
        } else {
            kept.push((size, path));
        }
    }
    let mut total: u64 = kept.iter().map(|(size, _)| size).sum();
    // Oldest first (the list is sorted by the last write).
    for (size, path) in &kept {
        if total <= max_total {
            break;
        }
        if !keep.contains(path) && remove(path) {
            swept.over_total += 1;
            total -= size;
        }
    }
    swept.kept_bytes = total;
    for index in indexes {
        index.forget_paths(&removed);
    }
    swept
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log file named `name` with `size` bytes, last written `age` ago.
    fn old_log(dir: &Path, name: &str, size: usize, age: Duration) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, vec![b'x'; size]).expect("write");
        let file = std::fs::File::options()
            .write(true)
            .open(&path)
            .expect("open");
        file.set_modified(SystemTime::now() - age).expect("mtime");
        path
    }

    #[test]
    fn sweep_deletes_expired_logs_then_the_oldest_over_the_total() {
        let dir = tempfile::tempdir().expect("tempdir");
        let hour = Duration::from_secs(3600);
        let expired = old_log(dir.path(), "a.log", 10, 30 * hour);
        let kept_expired = old_log(dir.path(), "b.log", 10, 30 * hour);
        let oldest = old_log(dir.path(), "c.log", 100, 3 * hour);
        let middle = old_log(dir.path(), "d.log", 100, 2 * hour);
        let newest = old_log(dir.path(), "e.log", 100, hour);
        let other = old_log(dir.path(), "notes.txt", 10, 30 * hour);
        std::fs::create_dir(dir.path().join("dir.log")).expect("dir");
        let index = Arc::new(ScopeLogs::default());
        index.add("a", &expired);
        index.add("d", &middle);
        let keep = HashSet::from([kept_expired.clone()]);
        let kept_bytes = disk(&kept_expired) + disk(&middle) + disk(&newest);
        // Room for all but the oldest.
        let swept = sweep(
            dir.path(),
            24 * hour,
            kept_bytes + 1,
            &keep,
            std::slice::from_ref(&index),
        );
        assert_eq!(
            swept,
            Swept {
                expired: 1,
                over_total: 1,
                kept_bytes
            }
        );
        assert!(!expired.exists() && !oldest.exists());
        assert!(kept_expired.exists() && middle.exists() && newest.exists());
        assert!(other.exists(), "only *.log files are swept");
        assert!(dir.path().join("dir.log").is_dir());
        assert_eq!(index.list(), vec![("d".to_owned(), middle)]);
    }

    /// What [`sweep`] counts for the file at `path`.
    fn disk(path: &Path) -> u64 {
        disk_space(&std::fs::metadata(path).expect("metadata"))
    }

    #[test]
    fn the_total_counts_the_disk_space_of_small_logs_not_their_length() {
        let dir = tempfile::tempdir().expect("tempdir");
        let hour = Duration::from_secs(3600);
        let logs: Vec<PathBuf> = (1..=4)
            .map(|n| old_log(dir.path(), &format!("{n}.log"), 1, (5 - n) * hour))
            .collect();
        // Four one-byte logs in the space of two: where a file takes a block (most file
        // systems), their four bytes of length would fit many times over.
        let swept = sweep(
            dir.path(),
            24 * hour,
            disk(&logs[2]) + disk(&logs[3]),
            &HashSet::new(),
            &[],
        );
        assert_eq!(swept.over_total, 2, "{swept:?}");
        assert!(!logs[0].exists() && !logs[1].exists());
        assert!(logs[2].exists() && logs[3].exists());
    }

    #[test]
    fn a_sweep_is_due_once_per_interval() {
        let dir = tempfile::tempdir().expect("tempdir");
        let minute = Duration::from_secs(60);
        assert!(sweep_due(dir.path(), minute), "never swept");
        sweep(dir.path(), minute, u64::MAX, &HashSet::new(), &[]);
        assert!(!sweep_due(dir.path(), minute), "just swept");
        assert!(sweep_due(dir.path(), Duration::ZERO));
        let stamp = std::fs::File::options()
            .write(true)
            .open(dir.path().join(SWEPT_STAMP))
            .expect("stamp");
        stamp
            .set_modified(SystemTime::now() - 2 * minute)
            .expect("mtime");
        assert!(sweep_due(dir.path(), minute), "swept two minutes ago");
    }

    #[test]
    fn a_scope_lists_only_the_logs_that_still_exist() {
        let dir = tempfile::tempdir().expect("tempdir");
        let kept = old_log(dir.path(), "p.log", 1, Duration::ZERO);
        let deleted = old_log(dir.path(), "q.log", 1, Duration::ZERO);
        let index = ScopeLogs::default();
        index.add("p", &kept);
        index.add("q", &deleted);
        std::fs::remove_file(&deleted).expect("remove");
        assert_eq!(index.get("p"), Some(kept.clone()));
        assert_eq!(
            index.get("q"),
            None,
            "a file deleted behind the host's back"
        );
        assert_eq!(index.list(), vec![("p".to_owned(), kept)]);
    }

    #[tokio::test]
    async fn appends_up_to_the_cap() {
        let dir = tempfile::tempdir().expect("tempdir");
        let nested = dir.path().join("a/b");
        let mut log = OutputLog::create(&nested, "abc", 10).expect("create");
        assert_eq!(log.path(), nested.join("abc.log"));
        log.append(b"12345").await;
        log.append(b"67890abc").await;
        log.append(b"more").await;
        log.finish().await;
        assert_eq!(std::fs::read(log.path()).expect("read"), b"1234567890");
        // Never clobbers an existing file.
        assert!(OutputLog::create(&nested, "abc", 10).is_err());
    }
}
