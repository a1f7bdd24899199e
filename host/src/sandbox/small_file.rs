//! Reading the small files of `/proc` and of cgroups that the host reads at every confined
//! command's start or end, without an allocation.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::BorrowedFd;
use std::path::Path;

/// The most a file read by [`read_small`] may hold: a page, as the kernel's files of one
/// record give it to one read (`/proc/PID/stat` takes under 1 KiB, `memory.events` under 200
/// bytes).
const SMALL_FILE: usize = 4096;

/// `parse` applied to the text of `file`, read into a stack buffer: no allocation, and no
/// `statx` for the file's size as `std::fs::read_to_string` makes. `None` when the file cannot
/// be read, is not UTF-8 or does not fit (it would be cut).
pub(crate) fn read_small<T>(file: &Path, parse: impl FnOnce(&str) -> T) -> Option<T> {
    read_whole(File::open(file).ok()?, parse)
}

/// [`read_small`] of the file `name` in the directory `dir` (open, `O_PATH` will do): the
/// kernel looks up one name instead of walking the whole path, which for a command's cgroup
/// is eight or more directories deep.
pub(crate) fn read_small_at<T>(
    dir: BorrowedFd<'_>,
    name: &str,
    parse: impl FnOnce(&str) -> T,
) -> Option<T> {
    use rustix::fs::{Mode, OFlags, openat};
    let opened = openat(dir, name, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).ok()?;
    read_whole(File::from(opened), parse)
}

/// `parse` applied to all that `opened` gives, if it fits in [`SMALL_FILE`] bytes of UTF-8.
fn read_whole<T>(mut opened: File, parse: impl FnOnce(&str) -> T) -> Option<T> {
    let mut buffer = [0u8; SMALL_FILE];
    let mut filled = 0;
    // Until the end: the text comes whole from the first read, and the second returns 0.
    loop {
        let room = buffer.get_mut(filled..).filter(|room| !room.is_empty())?;
        match opened.read(room) {
            Ok(0) => break,
            Ok(read) => filled += read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    std::str::from_utf8(buffer.get(..filled)?).ok().map(parse)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_read_whole_or_not_at_all() {
        let dir = tempfile::tempdir().expect("temp dir");
        let short = dir.path().join("short");
        std::fs::write(&short, "low 0\noom_kill 2\n").expect("write");
        assert_eq!(
            read_small(&short, str::to_owned).as_deref(),
            Some("low 0\noom_kill 2\n")
        );
        assert_eq!(read_small(&dir.path().join("missing"), str::len), None);
        // One that does not fit is not read in part: its last lines could hold a count.
        let long = dir.path().join("long");
        std::fs::write(&long, "x".repeat(SMALL_FILE + 1)).expect("write");
        assert_eq!(read_small(&long, str::len), None);
        // Exactly full is still too long to tell that it ended.
        let full = dir.path().join("full");
        std::fs::write(&full, "x".repeat(SMALL_FILE)).expect("write");
        assert_eq!(read_small(&full, str::len), None);
        let fits = dir.path().join("fits");
        std::fs::write(&fits, "x".repeat(SMALL_FILE - 1)).expect("write");
        assert_eq!(read_small(&fits, str::len), Some(SMALL_FILE - 1));
        // Not UTF-8.
        let bytes = dir.path().join("bytes");
        std::fs::write(&bytes, [0xff, 0xfe]).expect("write");
        assert_eq!(read_small(&bytes, str::len), None);
        // By its name in an open directory.
        let at = File::open(dir.path()).expect("open the directory");
        assert_eq!(
            read_small_at(std::os::fd::AsFd::as_fd(&at), "short", str::to_owned).as_deref(),
            Some("low 0\noom_kill 2\n")
        );
        assert_eq!(
            read_small_at(std::os::fd::AsFd::as_fd(&at), "long", str::len),
            None
        );
        assert_eq!(
            read_small_at(std::os::fd::AsFd::as_fd(&at), "missing", str::len),
            None
        );
        // What `/proc` gives: a process's own stat.
        let stat = read_small(Path::new("/proc/self/stat"), str::to_owned).expect("stat");
        assert!(stat.starts_with(&format!("{} (", std::process::id())));
    }
}
