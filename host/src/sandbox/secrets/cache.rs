//! What the secret scan found in each file, kept in the host's state directory so that
//! one-shot calls and restarts read only the files that changed.
//!
//! An entry holds a file's path, size, modification and change times and inode, and the rule
//! that found a secret in it (or none). An entry counts only while all four still match the
//! file. The cache file is written whole to a temporary file and renamed over the old one. A
//! cache file that does not parse, is too large or was made by another rule set is ignored
//! and rebuilt.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The largest cache file read (larger ones are ignored and rebuilt).
pub const MAX_CACHE_BYTES: u64 = 32 * 1024 * 1024;

/// The name of the cache file in the state directory.
pub const CACHE_FILE: &str = "secret-scan.json";

/// The cache could not be written.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// Writing or renaming the file failed.
    #[error("cannot write the secret scan cache {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The entries do not serialise.
    #[error("cannot serialise the secret scan cache: {0}")]
    Serialise(#[from] serde_json::Error),
}

/// What identifies a version of a file: when any part changes, the file is read again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    pub size: u64,
    pub modified_s: i64,
    pub modified_ns: i64,
    pub changed_s: i64,
    pub changed_ns: i64,
    pub inode: u64,
}

impl Stamp {
    /// The stamp of a file's metadata.
    pub fn of(meta: &std::fs::Metadata) -> Stamp {
        use std::os::unix::fs::MetadataExt;
        Stamp {
            size: meta.size(),
            modified_s: meta.mtime(),
            modified_ns: meta.mtime_nsec(),
            changed_s: meta.ctime(),
            changed_ns: meta.ctime_nsec(),
            inode: meta.ino(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Entry {
    stamp: Stamp,
    rule: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
struct CacheFile {
    version: String,
    entries: HashMap<String, Entry>,
}

/// The entries of an earlier scan, and those of this one.
#[derive(Debug)]
pub struct Cache {
    file: Option<PathBuf>,
    version: String,
    earlier: HashMap<String, Entry>,
    now: HashMap<String, Entry>,
}

impl Cache {
    /// The cache at `file` for the rule set `version`. A missing, unreadable, oversized or
    /// corrupt file, or one of another version, gives an empty cache. `None`: no cache file.
    pub fn load(file: Option<PathBuf>, version: &str) -> Cache {
        let earlier = file
            .as_deref()
            .and_then(|path| read(path, version))
            .unwrap_or_default();
        Cache {
            file,
            version: version.to_owned(),
            earlier,
            now: HashMap::new(),
        }
    }

    /// What the earlier scan found in `path`, if its entry still matches `stamp`: `Some(None)`
    /// for a file without a secret.
    pub fn lookup(&self, path: &Path, stamp: &Stamp) -> Option<Option<String>> {
        let entry = self.earlier.get(path.to_str()?)?;
        (entry.stamp == *stamp).then(|| entry.rule.clone())
    }

    /// Records what this scan found in `path` (paths that are not UTF-8 are not kept).
    pub fn record(&mut self, path: &Path, stamp: Stamp, rule: Option<String>) {
        if let Some(path) = path.to_str() {
            self.now.insert(path.to_owned(), Entry { stamp, rule });
        }
    }

    /// Writes this scan's entries when they differ from the earlier ones: to a temporary file
    /// in the same directory, renamed over the cache file.
    pub fn save(&self) -> Result<(), CacheError> {
        let Some(path) = &self.file else {
            return Ok(());
        };
        if self.now == self.earlier {
            return Ok(());
        }
        let contents = serde_json::to_vec(&CacheFile {
            version: self.version.clone(),
            entries: self.now.clone(),
        })?;
        let failed = |source| CacheError::Write {
            path: path.clone(),
            source,
        };
        let dir = path.parent().unwrap_or(Path::new("/"));
        std::fs::create_dir_all(dir).map_err(failed)?;
        let mut temporary = tempfile::NamedTempFile::new_in(dir).map_err(failed)?;
        temporary.write_all(&contents).map_err(failed)?;
        temporary
            .persist(path)
            .map_err(|error| failed(error.error))?;
        Ok(())
    }
}

/// The entries of the cache file at `path`, if it is usable.
fn read(path: &Path, version: &str) -> Option<HashMap<String, Entry>> {
    let Some(contents) = super::read_capped(path, MAX_CACHE_BYTES).ok()? else {
        tracing::debug!(path = %path.display(), "the secret scan cache is too large: rebuilt");
        return None;
    };
    match serde_json::from_slice::<CacheFile>(&contents) {
        Ok(cache) if cache.version == version => Some(cache.entries),
        Ok(_) => None,
        Err(error) => {
            tracing::debug!(path = %path.display(), %error, "the secret scan cache is corrupt: rebuilt");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp_of(path: &Path) -> Stamp {
        Stamp::of(&std::fs::metadata(path).expect("meta"))
    }

    #[test]
    fn entries_survive_a_reload_and_count_only_while_the_file_is_unchanged() {
        let dir = tempfile::tempdir().expect("dir");
        let cache_file = dir.path().join(CACHE_FILE);
        let file = dir.path().join("config.ini");
        std::fs::write(&file, "name = x\n").expect("write");
        let mut cache = Cache::load(Some(cache_file.clone()), "v1");
        assert_eq!(cache.lookup(&file, &stamp_of(&file)), None);
        cache.record(&file, stamp_of(&file), Some("rule-a".to_owned()));
        cache.save().expect("save");
        let cache = Cache::load(Some(cache_file.clone()), "v1");
        assert_eq!(
            cache.lookup(&file, &stamp_of(&file)),
            Some(Some("rule-a".to_owned()))
        );
        // Another rule set: nothing counts.
        let other = Cache::load(Some(cache_file.clone()), "v2");
        assert_eq!(other.lookup(&file, &stamp_of(&file)), None);
        // Changed after caching: the entry no longer counts.
        std::fs::write(&file, "name = longer value\n").expect("write");
        assert_eq!(cache.lookup(&file, &stamp_of(&file)), None);
    }

    #[test]
    fn a_corrupt_cache_is_ignored_and_rebuilt() {
        let dir = tempfile::tempdir().expect("dir");
        let cache_file = dir.path().join(CACHE_FILE);
        let file = dir.path().join("config.ini");
        std::fs::write(&file, "x").expect("write");
        std::fs::write(&cache_file, b"{\"version\": \"v1\", \"entr\xff").expect("corrupt");
        let mut cache = Cache::load(Some(cache_file.clone()), "v1");
        assert_eq!(cache.lookup(&file, &stamp_of(&file)), None);
        cache.record(&file, stamp_of(&file), None);
        cache.save().expect("save");
        let cache = Cache::load(Some(cache_file), "v1");
        assert_eq!(cache.lookup(&file, &stamp_of(&file)), Some(None));
    }
}
