//! Copies of hidden files that hiding by path misses: backups beside them, and git directories
//! whose index tracks them (their object store holds the contents).
//!
//! Both are worked out once, with the hidden paths, when the host starts:
//!
//! 1. Beside each hidden path, the backups of [`backup_names`] that exist are hidden.
//!    Backups made later are not: a session does not look again.
//! 2. Under each home, the git directories up to two levels down are found
//!    ([`git_directories`]): `~/.git`, a bare `~/X`, `~/X/.git`, a bare `~/X/Y`, and the
//!    repositories of yadm and vcsh, which live deeper.
//! 3. Each one's work tree is decided ([`work_tree`]): `core.worktree` when set; the parent of a
//!    non-bare `.git`; else the home (a bare dotfiles repository is used with
//!    `--work-tree=~`, and that usage is not written anywhere).
//! 4. Only where a hidden path lies in that work tree is the index read (so a project's
//!    repository costs two stats).
//! 5. When the index tracks a hidden path, a path beneath one, or (a sparse index) a directory
//!    above one, the git directory is hidden, with a warning once per process.
//! 6. An index that cannot be read or parsed hides its git directory all the same (deny by
//!    default); a repository without an index tracks nothing and stays.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::{HIDDEN_IN_HOME, canonical};
use crate::sandbox::git_guard;

/// At most this many entries of one directory are looked at for git directories.
const MAX_ENTRIES_PER_DIRECTORY: usize = 4096;

/// An index larger than this is not read (its git directory is hidden).
const MAX_INDEX_BYTES: u64 = 256 << 20;

/// A config larger than this is not read (taken as empty).
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Git directories of dotfiles managers deeper than two levels under a home.
const DOTFILES_REPOSITORIES: &[&str] = &[".local/share/yadm/repo.git", ".config/yadm/repo.git"];

/// Folders of dotfiles managers holding one git directory per entry (vcsh).
const DOTFILES_FOLDERS: &[&str] = &[".config/vcsh/repo.d"];

/// The copies of `hidden` to hide with it: existing backups beside each hidden path, and the
/// git directories under `homes` whose index tracks a hidden path.
pub(super) fn of(homes: &[PathBuf], hidden: &[PathBuf]) -> Vec<PathBuf> {
    let mut copies: Vec<PathBuf> = Vec::new();
    let mut seen: HashSet<PathBuf> = hidden.iter().cloned().collect();
    let mut push = |path: PathBuf| {
        if seen.insert(path.clone()) {
            copies.push(path);
        }
    };
    for backup in backups(hidden) {
        push(backup);
    }
    // The hidden paths as listed under each home too (a `~/.aws` that is a link is hidden where
    // it points, and a repository at the home tracks it by its own name).
    let mut names: Vec<PathBuf> = hidden.to_vec();
    for home in homes {
        names.extend(HIDDEN_IN_HOME.iter().map(|name| home.join(name)));
    }
    for home in homes {
        for git_dir in git_directories(home) {
            if let Some(why) = why_hidden(&git_dir, home, &names) {
                let git_dir = canonical(&git_dir);
                warn_once(&git_dir, &why);
                push(git_dir);
            }
        }
    }
    copies
}

/// The names editors and people give the backups of `name`: `NAME~`, `NAME.bak`, `NAME.orig`,
/// `NAME.old`, vim's swap files (`.NAME.swp`, `.NAME.swo`; for a name starting with a dot vim
/// adds none: `NAME.swp`, `NAME.swo`) and Emacs's auto-save file (`#NAME#`).
fn backup_names(name: &[u8]) -> Vec<Vec<u8>> {
    let with = |before: &[u8], after: &[u8]| [before, name, after].concat();
    vec![
        with(b"", b"~"),
        with(b"", b".bak"),
        with(b"", b".orig"),
        with(b"", b".old"),
        with(b"", b".swp"),
        with(b"", b".swo"),
        with(b".", b".swp"),
        with(b".", b".swo"),
        with(b"#", b"#"),
    ]
}

/// The backups beside each of `paths` that exist, resolved like every hidden path.
///
/// Each directory is listed once and the backup names looked up among its entries: most of
/// the hidden paths share a few directories (a home), and most of those that do not are in
/// directories that do not exist. A directory that cannot be listed (no read permission, or
/// more than [`MAX_ENTRIES_PER_DIRECTORY`] entries) is asked name by name.
fn backups(paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut listings: HashMap<&Path, Option<HashSet<OsString>>> = HashMap::new();
    let mut found = Vec::new();
    for path in paths {
        let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
            continue;
        };
        let entries = listings.entry(dir).or_insert_with(|| entries(dir));
        for backup in backup_names(name.as_bytes()) {
            let backup = OsString::from_vec(backup);
            let exists = match entries {
                Some(entries) => entries.contains(&backup),
                None => std::fs::symlink_metadata(dir.join(&backup)).is_ok(),
            };
            if exists {
                found.push(canonical(&dir.join(backup)));
            }
        }
    }
    found
}

/// The names in `dir`: none where it does not exist; `None` where it cannot be listed whole.
fn entries(dir: &Path) -> Option<HashSet<OsString>> {
    let listing = match std::fs::read_dir(dir) {
        Ok(listing) => listing,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Some(HashSet::new());
        }
        Err(_) => return None,
    };
    let mut names = HashSet::new();
    for entry in listing {
        if names.len() >= MAX_ENTRIES_PER_DIRECTORY {
            return None;
        }
        names.insert(entry.ok()?.file_name());
    }
    Some(names)
}

/// Whether `path` is a git directory: a `HEAD` file, and an `objects` directory or a
/// `commondir` file (a linked work tree's).
fn is_git_dir(path: &Path) -> bool {
    path.join("HEAD").is_file()
        && (path.join("objects").is_dir() || path.join("commondir").is_file())
}

/// The directories in `dir` (links followed), at most [`MAX_ENTRIES_PER_DIRECTORY`] entries.
fn subdirectories(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .take(MAX_ENTRIES_PER_DIRECTORY)
        .flatten()
        .filter(|entry| match entry.file_type() {
            Ok(kind) if kind.is_dir() => true,
            Ok(kind) if kind.is_symlink() => entry.path().is_dir(),
            _ => false,
        })
        .map(|entry| entry.path())
        .collect()
}

/// The git directories under `home`:
///
/// 1. each directory directly in it that is one (`~/.git`, a bare `~/.cfg`);
/// 2. in each other directory directly in it, its `.git` and each directory in it that is one
///    (a bare `~/X/Y`);
/// 3. the repositories of dotfiles managers ([`DOTFILES_REPOSITORIES`], [`DOTFILES_FOLDERS`]).
fn git_directories(home: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = Vec::new();
    let consider = |path: PathBuf, found: &mut Vec<PathBuf>| {
        let known = found.contains(&path);
        if !known && is_git_dir(&path) {
            found.push(path);
            true
        } else {
            known
        }
    };
    for first in subdirectories(home) {
        if consider(first.clone(), &mut found) {
            continue;
        }
        for second in subdirectories(&first) {
            consider(second, &mut found);
        }
    }
    for name in DOTFILES_REPOSITORIES {
        consider(home.join(name), &mut found);
    }
    for name in DOTFILES_FOLDERS {
        for entry in subdirectories(&home.join(name)) {
            consider(entry, &mut found);
        }
    }
    found
}

/// The settings of `git_dir`'s config (none when it is missing, too large or unparsable).
fn config(git_dir: &Path) -> Vec<git_guard::Setting> {
    match super::read_capped(&git_dir.join("config"), MAX_CONFIG_BYTES) {
        Ok(Some(text)) => git_guard::parse(&text).unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// The value of `key` (`section.name`, lower case) in `settings`: the last one, as git reads it;
/// `Some(None)` for a key without `=`.
fn setting<'a>(settings: &'a [git_guard::Setting], key: &str) -> Option<Option<&'a str>> {
    settings
        .iter()
        .rev()
        .find(|setting| setting.key() == key)
        .map(|setting| setting.value.as_deref())
}

/// Whether git takes `value` as true (a key without `=` is true).
fn is_true(value: Option<&str>) -> bool {
    value.is_none_or(|value| {
        ["true", "yes", "on", "1"]
            .iter()
            .any(|word| value.eq_ignore_ascii_case(word))
    })
}

/// The work tree whose paths `git_dir`'s index names:
///
/// 1. `core.worktree` when set (relative to the git directory);
/// 2. else the parent of a git directory named `.git` that is not bare;
/// 3. else `home`: a bare repository under a home is taken as a dotfiles repository, used with
///    `--work-tree=~` (its index exists only when it was used with a work tree).
fn work_tree(git_dir: &Path, home: &Path, settings: &[git_guard::Setting]) -> PathBuf {
    if let Some(Some(tree)) = setting(settings, "core.worktree") {
        return canonical(&git_dir.join(tree));
    }
    let bare = setting(settings, "core.bare").is_some_and(is_true);
    match git_dir.parent() {
        Some(parent) if !bare && git_dir.file_name() == Some(".git".as_ref()) => canonical(parent),
        _ => home.to_path_buf(),
    }
}

/// Why `git_dir` is hidden, if it is: a hidden path of `names` its index tracks, or why its
/// index could not be read.
fn why_hidden(git_dir: &Path, home: &Path, names: &[PathBuf]) -> Option<String> {
    let settings = config(git_dir);
    let tree = work_tree(git_dir, home, &settings);
    // The hidden paths in the work tree, relative to it.
    let relative: HashSet<&[u8]> = names
        .iter()
        .filter_map(|name| name.strip_prefix(&tree).ok())
        .map(|relative| relative.as_os_str().as_bytes())
        .filter(|relative| !relative.is_empty())
        .collect();
    if relative.is_empty() {
        return None;
    }
    let hash_len = match setting(&settings, "extensions.objectformat") {
        Some(Some(format)) if format.eq_ignore_ascii_case("sha256") => 32,
        _ => 20,
    };
    // A split index keeps most entries in `sharedindex.*` files: every one is read.
    let mut indexes = vec![git_dir.join("index")];
    if let Ok(entries) = std::fs::read_dir(git_dir) {
        indexes.extend(
            entries
                .take(MAX_ENTRIES_PER_DIRECTORY)
                .flatten()
                .filter(|entry| entry.file_name().as_bytes().starts_with(b"sharedindex."))
                .map(|entry| entry.path()),
        );
    }
    for index in indexes {
        let bytes = match read_index(&index) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => continue,
            Err(error) => {
                return Some(format!(
                    "its index {} cannot be read ({error}), and its work tree {} holds hidden \
                     paths",
                    index.display(),
                    tree.display()
                ));
            }
        };
        let mut tracked: Option<Vec<u8>> = None;
        let parsed = for_each_tracked(&bytes, hash_len, |path, is_dir| {
            if names_hidden(path, is_dir, &relative) {
                tracked = Some(path.to_vec());
                return true;
            }
            false
        });
        if let Some(path) = tracked {
            return Some(format!(
                "it tracks {}",
                tree.join(OsString::from_vec(path)).display()
            ));
        }
        if let Err(error) = parsed {
            return Some(format!(
                "its index {} cannot be parsed ({error}), and its work tree {} holds hidden \
                 paths",
                index.display(),
                tree.display()
            ));
        }
    }
    None
}

/// Whether a tracked `path` (relative to the work tree) is one of the hidden `relative` paths,
/// lies beneath one, or is a directory (`is_dir`, a sparse index's) above one.
fn names_hidden(path: &[u8], is_dir: bool, relative: &HashSet<&[u8]>) -> bool {
    let path = path.strip_suffix(b"/").unwrap_or(path);
    let beneath = relative.contains(path)
        || path
            .iter()
            .enumerate()
            .any(|(at, &byte)| byte == b'/' && relative.contains(&path[..at]));
    beneath
        || (is_dir
            && relative.iter().any(|hidden| {
                hidden.len() > path.len()
                    && hidden.starts_with(path)
                    && hidden.get(path.len()) == Some(&b'/')
            }))
}

/// Why an index could not be read or parsed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum IndexError {
    #[error("reading it failed: {0}")]
    Read(#[from] std::io::Error),
    #[error("it is larger than {MAX_INDEX_BYTES} bytes")]
    TooLarge,
    #[error("it does not start with DIRC")]
    Signature,
    #[error("its version {0} is not 2, 3 or 4")]
    Version(u32),
    #[error("it ends inside entry {0}")]
    Truncated(u32),
    #[error("entry {0} has the extended flag in a version 2 index")]
    ExtendedInVersion2(u32),
    #[error("entry {0} strips more of the previous path than there is")]
    Prefix(u32),
}

/// The bytes of the index at `path`; `None` when there is none.
fn read_index(path: &Path) -> Result<Option<Vec<u8>>, IndexError> {
    match super::read_capped(path, MAX_INDEX_BYTES) {
        Ok(Some(bytes)) => Ok(Some(bytes)),
        Ok(None) => Err(IndexError::TooLarge),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error.into()),
    }
}

fn be32(bytes: &[u8], at: usize) -> Option<u32> {
    let word = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([word[0], word[1], word[2], word[3]]))
}

/// Git's variable-length offset (`decode_varint`): its value and how many bytes it took.
fn varint(bytes: &[u8]) -> Option<(usize, usize)> {
    let mut bytes = bytes.iter();
    let mut byte = *bytes.next()?;
    let mut used = 1;
    let mut value = u64::from(byte & 0x7f);
    while byte & 0x80 != 0 {
        value = value.checked_add(1)?;
        if value > u64::MAX >> 7 {
            return None;
        }
        byte = *bytes.next()?;
        used += 1;
        value = (value << 7) | u64::from(byte & 0x7f);
    }
    Some((usize::try_from(value).ok()?, used))
}

/// Calls `visit` with each path of an index (versions 2, 3 and 4; `hash_len` bytes of object
/// id per entry) and whether it is a directory (a sparse index's), until `visit` returns true.
///
/// An entry is (git's `Documentation/gitformat-index.txt`):
///
/// 1. forty bytes of stat data, the mode at byte 24;
/// 2. the object id;
/// 3. two bytes of flags, with `0x4000` saying two more bytes of flags follow (version 3 and
///    later);
/// 4. the path: in versions 2 and 3 ending with a NUL, the entry padded with NULs to a multiple
///    of eight bytes; in version 4 a varint of how many bytes to take off the end of the
///    previous path, then the rest of the path ending with a NUL, without padding.
///
/// The extensions after the entries are not read.
fn for_each_tracked(
    index: &[u8],
    hash_len: usize,
    mut visit: impl FnMut(&[u8], bool) -> bool,
) -> Result<(), IndexError> {
    if index.get(..4) != Some(b"DIRC".as_slice()) {
        return Err(IndexError::Signature);
    }
    let version = be32(index, 4).ok_or(IndexError::Signature)?;
    if !(2..=4).contains(&version) {
        return Err(IndexError::Version(version));
    }
    let count = be32(index, 8).ok_or(IndexError::Signature)?;
    let flags_at = 40 + hash_len;
    let mut at = 12usize;
    let mut previous: Vec<u8> = Vec::new();
    for entry in 0..count {
        let start = at;
        let mode = be32(index, start + 24).ok_or(IndexError::Truncated(entry))?;
        let flags = index
            .get(start + flags_at..start + flags_at + 2)
            .ok_or(IndexError::Truncated(entry))?;
        let extended = flags[0] & 0x40 != 0;
        if extended && version < 3 {
            return Err(IndexError::ExtendedInVersion2(entry));
        }
        let name_at = start + flags_at + 2 + if extended { 2 } else { 0 };
        let rest = index.get(name_at..).ok_or(IndexError::Truncated(entry))?;
        let is_dir = mode & 0o170000 == 0o040000;
        let stop = if version == 4 {
            let (strip, used) = varint(rest).ok_or(IndexError::Truncated(entry))?;
            let suffix = rest.get(used..).ok_or(IndexError::Truncated(entry))?;
            let end = suffix
                .iter()
                .position(|&byte| byte == 0)
                .ok_or(IndexError::Truncated(entry))?;
            let keep = previous
                .len()
                .checked_sub(strip)
                .ok_or(IndexError::Prefix(entry))?;
            previous.truncate(keep);
            previous.extend_from_slice(&suffix[..end]);
            at = name_at + used + end + 1;
            visit(&previous, is_dir)
        } else {
            let end = rest
                .iter()
                .position(|&byte| byte == 0)
                .ok_or(IndexError::Truncated(entry))?;
            // The header, the path and at least one NUL, rounded up to eight bytes.
            at = start + ((name_at - start + end + 8) & !7);
            if at > index.len() {
                return Err(IndexError::Truncated(entry));
            }
            visit(&rest[..end], is_dir)
        };
        if stop {
            return Ok(());
        }
    }
    Ok(())
}

/// Warns once per process that `git_dir` is hidden, and why.
fn warn_once(git_dir: &Path, why: &str) {
    static WARNED: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());
    let mut warned = WARNED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if warned.insert(git_dir.to_path_buf()) {
        tracing::warn!(
            git_dir = %git_dir.display(),
            "a git directory under a home is hidden from confined commands: {why}, and its \
             object store holds the contents (--reveal {} takes it out)",
            git_dir.display()
        );
    }
}

#[cfg(test)]
mod tests;
