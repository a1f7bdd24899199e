//! The keeper's executable, embedded in this library: `build.rs` builds it for the target this
//! library is built for, and it runs from a sealed in-memory file, so the binary, its tests and
//! any embedder all have it. The process manager starts a keeper for every command
//! (`process/manager/keeper.rs`); the sandbox runs it in its helper mode to make a scope's
//! namespaces (`sandbox/namespaces.rs`). Both take it from here.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::OnceLock;

use nix::libc;
use toolhost_keeper_protocol::fd;

/// The keeper executable, built by `build.rs` for the target this library is built for.
const KEEPER: &[u8] = include_bytes!(env!("TOOLHOST_KEEPER"));

/// The sealed in-memory copy of the keeper, made once per process.
pub(crate) fn executable() -> io::Result<BorrowedFd<'static>> {
    static FILE: OnceLock<Result<OwnedFd, String>> = OnceLock::new();
    match FILE.get_or_init(|| load().map_err(|error| error.to_string())) {
        Ok(fd) => Ok(fd.as_fd()),
        Err(message) => Err(io::Error::other(format!(
            "cannot prepare the process keeper: {message}"
        ))),
    }
}

/// Write the keeper into a memfd and seal it against any change.
fn load() -> io::Result<OwnedFd> {
    // SAFETY: a NUL-terminated name and integer flags; returns a new descriptor or -1.
    let raw = unsafe {
        libc::memfd_create(
            c"toolhost-keeper".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: memfd_create returned a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut file = std::fs::File::from(fd);
    io::Write::write_all(&mut file, KEEPER)?;
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    // SAFETY: integer arguments on our own descriptor.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } == -1 {
        return Err(io::Error::last_os_error());
    }
    above_reserved(OwnedFd::from(file))
}

/// Move a descriptor to [`fd::FIRST_FREE`] or above (close-on-exec), so that installing the
/// keeper's descriptors (all below it) with `dup2` cannot clobber it.
pub(crate) fn above_reserved(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() >= fd::FIRST_FREE {
        return Ok(fd);
    }
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor we own returns a new one that nothing else owns.
    let moved = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, fd::FIRST_FREE) };
    if moved < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above, the new descriptor is ours alone.
    Ok(unsafe { OwnedFd::from_raw_fd(moved) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_keeper_is_embedded_and_sealed() {
        let fd = executable().expect("keeper");
        // SAFETY: integer arguments on a descriptor that stays open (a static).
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        assert!(seals & libc::F_SEAL_WRITE != 0, "seals: {seals:#x}");
        assert!(KEEPER.starts_with(b"\x7fELF"));
    }
}
