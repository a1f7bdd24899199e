//! The name a listening socket was bound with, from the kernel's socket table (`sock_diag`),
//! for `--unix-check-binding` (step 5 of the supervision).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path};

use super::places::Places;

/// Whether a socket listening on the file `meta` describes was bound with a name in an allowed
/// place (or is held by the command's tree).
///
/// Without namespaces, the workspace and a cache such as `~/.cache` are on one mount: a hard
/// link to a host socket there, left as its only name, would pass the check of where the file
/// lies. The name a socket was bound with cannot be changed: the kernel's socket table
/// (`sock_diag`, not `/proc/net/unix`, whose names may forge lines) gives it, with the bound
/// file's inode. The name itself (no `.` or `..`) must lie in an allowed place, and still lead
/// to the same file. A relative name is taken only from a socket the command's tree holds
/// (its binder's working directory is not known).
pub(super) fn bound_in_place(places: &Places, meta: &std::fs::Metadata) -> bool {
    let Ok(listening) = listening_sockets() else {
        return false;
    };
    let mut held = None;
    listening
        .into_iter()
        .filter(|socket| u64::from(socket.vfs_inode) == meta.ino() & u64::from(u32::MAX))
        .any(|socket| {
            if socket.name.first() != Some(&b'/') {
                let held = held.get_or_insert_with(crate::tree::held_sockets);
                return held.contains(&u64::from(socket.inode));
            }
            // The place is the name as bound, not where it leads now: a directory on the way
            // may have been replaced by a link into an allowed place since.
            let name = Path::new(std::ffi::OsStr::from_bytes(&socket.name));
            let plain = name
                .components()
                .all(|part| matches!(part, Component::RootDir | Component::Normal(_)));
            plain
                && places.allows(name, meta.dev(), 1, || None)
                && std::fs::metadata(name)
                    .is_ok_and(|bound| bound.dev() == meta.dev() && bound.ino() == meta.ino())
        })
}

/// A listening Unix socket bound to a file, as `sock_diag` reports it.
#[derive(Debug)]
struct Listening {
    /// The socket's inode (`socket:[INODE]` in `/proc/PID/fd`).
    inode: u32,
    /// The bound file's inode, truncated to 32 bits by the kernel.
    vfs_inode: u32,
    /// The name it was bound with.
    name: Vec<u8>,
}

/// The listening Unix sockets of this network namespace that are bound to a file (netlink
/// `SOCK_DIAG_BY_FAMILY`, with `UDIAG_SHOW_NAME` and `UDIAG_SHOW_VFS`).
fn listening_sockets() -> io::Result<Vec<Listening>> {
    const NETLINK_SOCK_DIAG: i32 = 4;
    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    const TCP_LISTEN: u32 = 10;
    const UDIAG_SHOW_NAME: u32 = 1;
    const UDIAG_SHOW_VFS: u32 = 2;
    // SAFETY: integer arguments; returns a new descriptor or -1.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor just made, ours alone.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // nlmsghdr (16 bytes), then unix_diag_req (24 bytes).
    let mut request = Vec::with_capacity(40);
    request.extend_from_slice(&40u32.to_ne_bytes());
    request.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    let flags = (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16;
    request.extend_from_slice(&flags.to_ne_bytes());
    request.extend_from_slice(&1u32.to_ne_bytes());
    request.extend_from_slice(&0u32.to_ne_bytes());
    request.extend_from_slice(&[libc::AF_UNIX as u8, 0, 0, 0]);
    request.extend_from_slice(&(1u32 << TCP_LISTEN).to_ne_bytes());
    request.extend_from_slice(&0u32.to_ne_bytes());
    request.extend_from_slice(&(UDIAG_SHOW_NAME | UDIAG_SHOW_VFS).to_ne_bytes());
    request.extend_from_slice(&[0xff; 8]);
    // SAFETY: `request` is a valid buffer of its length.
    if unsafe { libc::send(fd.as_raw_fd(), request.as_ptr().cast(), request.len(), 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut found = Vec::new();
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        // SAFETY: `buffer` is a valid, writable buffer of its length.
        let read =
            unsafe { libc::recv(fd.as_raw_fd(), buffer.as_mut_ptr().cast(), buffer.len(), 0) };
        if read < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(error);
        }
        let read = usize::try_from(read).map_err(io::Error::other)?;
        if parse_diag(&buffer[..read], &mut found)? {
            return Ok(found);
        }
        if read == 0 {
            return Ok(found);
        }
    }
}

fn ne_u32(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

fn ne_u16(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(bytes.get(at..at + 2)?.try_into().ok()?))
}

/// Parse one datagram of netlink messages into `found`; `Ok(true)` at `NLMSG_DONE`.
fn parse_diag(mut bytes: &[u8], found: &mut Vec<Listening>) -> io::Result<bool> {
    const UNIX_DIAG_NAME: u16 = 0;
    const UNIX_DIAG_VFS: u16 = 1;
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "malformed sock_diag answer");
    let align = |n: usize| (n + 3) & !3;
    while bytes.len() >= 16 {
        let length = usize::try_from(ne_u32(bytes, 0).ok_or_else(bad)?).map_err(|_| bad())?;
        let kind = ne_u16(bytes, 4).ok_or_else(bad)?;
        if length < 16 || length > bytes.len() {
            return Err(bad());
        }
        match i32::from(kind) {
            libc::NLMSG_DONE => return Ok(true),
            libc::NLMSG_ERROR => {
                let errno = ne_u32(bytes, 16).map_or(libc::EIO, |e| e.cast_signed().abs());
                return Err(io::Error::from_raw_os_error(errno));
            }
            _ => {}
        }
        // unix_diag_msg: family, type, state, pad, ino (u32), cookie (2 x u32).
        let message = &bytes[16..length];
        let inode = ne_u32(message, 4).ok_or_else(bad)?;
        let mut attributes = message.get(16..).unwrap_or_default();
        let (mut name, mut vfs_inode) = (None, None);
        while attributes.len() >= 4 {
            let size = usize::from(ne_u16(attributes, 0).ok_or_else(bad)?);
            let kind = ne_u16(attributes, 2).ok_or_else(bad)?;
            if size < 4 || size > attributes.len() {
                return Err(bad());
            }
            let data = &attributes[4..size];
            match kind {
                // A pathname is NUL-terminated there.
                UNIX_DIAG_NAME => {
                    let end = data.iter().position(|&b| b == 0).unwrap_or(data.len());
                    // An abstract name (starting with NUL) stays whole: it names no file.
                    name = Some(if end == 0 { data } else { &data[..end] }.to_vec());
                }
                UNIX_DIAG_VFS => vfs_inode = ne_u32(data, 0),
                _ => {}
            }
            attributes = attributes.get(align(size)..).unwrap_or_default();
        }
        if let (Some(name), Some(vfs_inode)) = (name, vfs_inode) {
            found.push(Listening {
                inode,
                vfs_inode,
                name,
            });
        }
        bytes = bytes.get(align(length)..).unwrap_or_default();
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sock_diag_answers_give_the_bound_name_and_inodes() {
        let mut message = Vec::new();
        let attribute = |kind: u16, data: &[u8]| {
            let mut bytes = Vec::new();
            bytes.extend_from_slice(&u16::try_from(4 + data.len()).unwrap().to_ne_bytes());
            bytes.extend_from_slice(&kind.to_ne_bytes());
            bytes.extend_from_slice(data);
            bytes.resize((bytes.len() + 3) & !3, 0);
            bytes
        };
        let mut body = vec![libc::AF_UNIX as u8, 1, 10, 0];
        body.extend_from_slice(&77u32.to_ne_bytes());
        body.extend_from_slice(&[0; 8]);
        body.extend(attribute(0, b"/ws/a.sock\0"));
        let mut vfs = 1234u32.to_ne_bytes().to_vec();
        vfs.extend_from_slice(&5u32.to_ne_bytes());
        body.extend(attribute(1, &vfs));
        message.extend_from_slice(&u32::try_from(16 + body.len()).unwrap().to_ne_bytes());
        message.extend_from_slice(&20u16.to_ne_bytes());
        message.extend_from_slice(&[0; 10]);
        message.extend(body);
        let mut found = Vec::new();
        assert!(!parse_diag(&message, &mut found).unwrap());
        assert_eq!(found.len(), 1);
        assert_eq!(
            (found[0].inode, found[0].vfs_inode, found[0].name.as_slice()),
            (77, 1234, b"/ws/a.sock".as_slice())
        );
        let mut done = 16u32.to_ne_bytes().to_vec();
        done.extend_from_slice(&(libc::NLMSG_DONE as u16).to_ne_bytes());
        done.extend_from_slice(&[0; 10]);
        assert!(parse_diag(&done, &mut found).unwrap());
        // A length past the end is refused, not read.
        let mut bad = message.clone();
        bad[..4].copy_from_slice(&9999u32.to_ne_bytes());
        assert!(parse_diag(&bad, &mut found).is_err());
    }
}
