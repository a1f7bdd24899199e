//! The file system as the guard touches it: through directories opened without following
//! links, so that a command that swaps a directory for a link cannot redirect the host's
//! reads and writes.

use super::*;
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    File,
    Dir,
    Link,
    Other,
}

/// What the guard compares of a file: a change of content or mode changes `ctime`, which no
/// command can set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stat {
    pub(super) kind: Kind,
    /// The permission bits.
    pub(super) mode: u32,
    pub(super) dev: u64,
    pub(super) ino: u64,
    pub(super) size: u64,
    pub(super) mtime: (i64, i64),
    pub(super) ctime: (i64, i64),
}

impl Stat {
    pub(super) fn of(meta: &std::fs::Metadata) -> Stat {
        let kind = meta.file_type();
        Stat {
            kind: if kind.is_symlink() {
                Kind::Link
            } else if kind.is_dir() {
                Kind::Dir
            } else if kind.is_file() {
                Kind::File
            } else {
                Kind::Other
            },
            mode: meta.mode() & 0o7777,
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// The directory at the absolute `path`, opened without following any link on the way.
pub(super) fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    let mut dir = nix::fcntl::open(
        "/",
        OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    for part in path.components() {
        match part {
            Component::RootDir => {}
            Component::Normal(name) => dir = open_subdir(&dir, name)?,
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "not a plain absolute path",
                ));
            }
        }
    }
    Ok(dir)
}

/// The directory `name` in `dir`, not a link.
pub(super) fn open_subdir(dir: &OwnedFd, name: &OsStr) -> io::Result<OwnedFd> {
    Ok(nix::fcntl::openat(
        dir,
        name,
        OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?)
}

/// What `name` in `dir` is (a link as a link); `None` when it does not exist.
pub(super) fn stat_at(dir: &OwnedFd, name: &OsStr) -> io::Result<Option<Stat>> {
    match nix::fcntl::openat(
        dir,
        name,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => Ok(Some(Stat::of(&File::from(fd).metadata()?))),
        Err(nix::errno::Errno::ENOENT) => Ok(None),
        Err(error) => Err(error.into()),
    }
}

pub(super) fn is_dir_at(dir: &OwnedFd, name: &OsStr) -> bool {
    matches!(stat_at(dir, name), Ok(Some(stat)) if stat.kind == Kind::Dir)
}

/// The names in `dir`, sorted, at most `most` (`bounded` set when there were more).
pub(super) fn names(dir: &OwnedFd, most: usize, bounded: &mut bool) -> Vec<OsString> {
    // Through the descriptor: the directory opened, whatever its path leads to now.
    let Ok(entries) = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd())) else {
        return Vec::new();
    };
    let mut names = Vec::new();
    for entry in entries.flatten() {
        if names.len() >= most {
            *bounded = true;
            break;
        }
        names.push(entry.file_name());
    }
    names.sort();
    names
}

/// The content of the regular file `name` in `dir`, not through a link; `None` when it is
/// larger than `most`.
pub(super) fn read_at(dir: &OwnedFd, name: &OsStr, most: u64) -> io::Result<Option<Vec<u8>>> {
    let file = File::from(nix::fcntl::openat(
        dir,
        name,
        OFlag::O_RDONLY
            | OFlag::O_NOFOLLOW
            | OFlag::O_NONBLOCK
            | OFlag::O_NOCTTY
            | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?);
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not a regular file",
        ));
    }
    let mut bytes = Vec::new();
    file.take(most + 1).read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= most).then_some(bytes))
}

pub(super) fn readlink_at(dir: &OwnedFd, name: &OsStr) -> io::Result<OsString> {
    Ok(nix::fcntl::readlinkat(dir, name)?)
}

/// Write `content` to `name` in `dir` with `mode`: a new file beside it, renamed over it.
pub(super) fn write_at(dir: &OwnedFd, name: &OsStr, content: &[u8], mode: u32) -> io::Result<()> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut temp = OsString::from(format!(
        ".toolhost-{}-{}-",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    temp.push(name);
    let fd = nix::fcntl::openat(
        dir,
        temp.as_os_str(),
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o600),
    )?;
    let mut file = File::from(fd);
    let written = file
        .write_all(content)
        .and_then(|()| file.set_permissions(std::fs::Permissions::from_mode(mode & 0o7777)))
        .and_then(|()| Ok(nix::fcntl::renameat(dir, temp.as_os_str(), dir, name)?));
    if written.is_err() {
        let _ = nix::unistd::unlinkat(dir, temp.as_os_str(), UnlinkatFlags::NoRemoveDir);
    }
    written
}

/// Remove `name` from `dir`, a directory with everything in it.
pub(super) fn remove_at(dir: &OwnedFd, name: &OsStr, depth: usize) -> io::Result<()> {
    let Some(stat) = stat_at(dir, name)? else {
        return Ok(());
    };
    if stat.kind != Kind::Dir {
        return Ok(nix::unistd::unlinkat(
            dir,
            name,
            UnlinkatFlags::NoRemoveDir,
        )?);
    }
    if depth >= MAX_REMOVE_DEPTH {
        return Err(io::Error::other("a directory too deep to remove"));
    }
    let sub = open_subdir(dir, name)?;
    let mut bounded = false;
    for child in names(&sub, usize::MAX, &mut bounded) {
        remove_at(&sub, &child, depth + 1)?;
    }
    Ok(nix::unistd::unlinkat(dir, name, UnlinkatFlags::RemoveDir)?)
}

/// The directory holding `rel` (inside `dir`), and `rel`'s name.
pub(super) fn open_parent(dir: &OwnedFd, rel: &Path) -> io::Result<(OwnedFd, OsString)> {
    let name = rel
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no name"))?;
    let mut parent = dir.try_clone()?;
    if let Some(path) = rel.parent() {
        for part in path.components() {
            if let Component::Normal(part) = part {
                parent = open_subdir(&parent, part)?;
            }
        }
    }
    Ok((parent, name.to_owned()))
}

pub(super) fn remove_rel(dir: &OwnedFd, rel: &Path) -> io::Result<()> {
    let (parent, name) = open_parent(dir, rel)?;
    remove_at(&parent, &name, 0)
}

pub(super) fn read_rel(dir: &OwnedFd, rel: &Path, most: u64) -> io::Result<Option<Vec<u8>>> {
    let (parent, name) = open_parent(dir, rel)?;
    read_at(&parent, &name, most)
}

pub(super) fn read_rel_link(dir: &OwnedFd, rel: &Path) -> io::Result<OsString> {
    let (parent, name) = open_parent(dir, rel)?;
    readlink_at(&parent, &name)
}

pub(super) fn write_rel(dir: &OwnedFd, rel: &Path, content: &[u8], mode: u32) -> io::Result<()> {
    let (parent, name) = open_parent(dir, rel)?;
    write_at(&parent, &name, content, mode)
}

/// Set the mode of the regular file `rel` (not through a link).
pub(super) fn chmod_rel(dir: &OwnedFd, rel: &Path, mode: u32) -> io::Result<()> {
    let (parent, name) = open_parent(dir, rel)?;
    let file = File::from(nix::fcntl::openat(
        &parent,
        name.as_os_str(),
        OFlag::O_RDONLY
            | OFlag::O_NOFOLLOW
            | OFlag::O_NONBLOCK
            | OFlag::O_NOCTTY
            | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?);
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not a regular file",
        ));
    }
    file.set_permissions(std::fs::Permissions::from_mode(mode & 0o7777))
}
