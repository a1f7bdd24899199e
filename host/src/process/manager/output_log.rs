//! Full-output log files: each process's complete merged output, up to a cap, in
//! `<state_dir>/<id>.log`.

use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

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

#[cfg(test)]
mod tests {
    use super::*;

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
