//! Where the command may connect to a pathname socket ([`Places`]), from the keeper's
//! `--unix-*` options (step 5 of the supervision).

use std::fs::File;
use std::os::fd::FromRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use toolhost_keeper_protocol::option;

/// Where the command may connect to a pathname socket.
#[derive(Debug, Default, Clone)]
pub(crate) struct Places {
    /// Whether `connect` is supervised at all.
    pub(crate) supervise: bool,
    /// A socket at one of these or below is allowed, unless a deeper one of [`Self::denied`]
    /// holds it.
    pub(crate) allowed: Vec<PathBuf>,
    /// A socket at one of these or below is allowed whatever else holds (the operator's).
    pub(crate) exempt: Vec<PathBuf>,
    /// A socket at one of these or below is refused, unless it is in one of [`Self::exempt`] or
    /// a deeper one of [`Self::allowed`] (hidden paths and caches inside the workspace).
    pub(crate) denied: Vec<PathBuf>,
    /// A socket below this on the keeper-made file's file system is allowed.
    pub(crate) session_tmp: Option<PathBuf>,
    /// A socket in an allowed place must also be bound there (`--unix-check-binding`, see
    /// [`bound_in_place`](super::sock_diag::bound_in_place)).
    pub(crate) check_binding: bool,
}

impl Places {
    /// Take the option `arg` if it is one of this module's.
    pub(crate) fn take(&mut self, arg: &str) -> bool {
        if arg == option::UNIX_SUPERVISE {
            self.supervise = true;
        } else if let Some(path) = arg.strip_prefix(option::UNIX_ALLOW) {
            self.allowed.push(PathBuf::from(path));
        } else if let Some(path) = arg.strip_prefix(option::UNIX_ALLOW_SOCKET) {
            self.exempt.push(PathBuf::from(path));
        } else if let Some(path) = arg.strip_prefix(option::UNIX_DENY) {
            self.denied.push(PathBuf::from(path));
        } else if let Some(path) = arg.strip_prefix(option::UNIX_SESSION_TMP) {
            self.session_tmp = Some(PathBuf::from(path));
        } else if arg == option::UNIX_CHECK_BINDING {
            self.check_binding = true;
        } else {
            return false;
        }
        true
    }

    /// Whether a socket file found at `location` (resolved: no link, no `..`), on device
    /// `device` with `links` hard links, may be connected to. `session_device` gives the
    /// device of the session's own `/tmp` (asked only when needed).
    pub(crate) fn allows(
        &self,
        location: &Path,
        device: u64,
        links: u64,
        session_device: impl FnOnce() -> Option<u64>,
    ) -> bool {
        // A second name is how a socket from elsewhere would be brought into an allowed place.
        if links != 1 || !location.is_absolute() {
            return false;
        }
        // The deepest place that holds the location decides between allowed and denied: a
        // cache inside a workspace that is a home is refused, a `$TMPDIR` inside the (hidden)
        // state directory allowed.
        let depth = |places: &[PathBuf]| {
            places
                .iter()
                .filter(|place| location.starts_with(place))
                .map(|place| place.components().count())
                .max()
        };
        if depth(&self.exempt).is_some() {
            return true;
        }
        if depth(&self.allowed) > depth(&self.denied) {
            return true;
        }
        self.session_tmp.as_ref().is_some_and(|tmp| {
            location.starts_with(tmp)
                && location != tmp
                && session_device().is_some_and(|session| session == device)
        })
    }
}

/// The device of the session's own `/tmp`: that of a file the keeper makes there (in an
/// overlay, a file of the upper layer; the host's files below show another device).
pub(super) fn session_device(tmp: &Path) -> Option<u64> {
    static DEVICE: OnceLock<Option<u64>> = OnceLock::new();
    *DEVICE.get_or_init(|| {
        let mut template = tmp
            .join(".toolhost-keeper-XXXXXX")
            .into_os_string()
            .into_vec_nul()?;
        // SAFETY: `template` is a writable NUL-terminated buffer ending in XXXXXX.
        let fd = unsafe { libc::mkostemp(template.as_mut_ptr().cast(), libc::O_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        // SAFETY: mkostemp returned a descriptor of ours.
        let file = unsafe { File::from_raw_fd(fd) };
        // SAFETY: `template` now holds the NUL-terminated name of the file made.
        unsafe { libc::unlink(template.as_ptr().cast()) };
        file.metadata().ok().map(|meta| meta.dev())
    })
}

trait IntoVecNul {
    fn into_vec_nul(self) -> Option<Vec<u8>>;
}

impl IntoVecNul for std::ffi::OsString {
    fn into_vec_nul(self) -> Option<Vec<u8>> {
        use std::os::unix::ffi::OsStringExt;
        let mut bytes = self.into_vec();
        if bytes.contains(&0) {
            return None;
        }
        bytes.push(0);
        Some(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_allowed_places_and_the_session_tmp_layer_are_allowed() {
        let places = Places {
            supervise: true,
            allowed: vec![PathBuf::from("/work/ws"), PathBuf::from("/home/u")],
            exempt: vec![
                PathBuf::from("/run/nscd/socket"),
                PathBuf::from("/home/u/.cache/db.sock"),
            ],
            denied: vec![
                PathBuf::from("/home/u/.cache"),
                PathBuf::from("/home/u/.ssh"),
                PathBuf::from("/work/ws/.state"),
            ],
            session_tmp: Some(PathBuf::from("/tmp")),
            check_binding: false,
        };
        let never = || -> Option<u64> { panic!("not asked") };
        assert!(places.allows(Path::new("/work/ws/a.sock"), 1, 1, never));
        assert!(places.allows(Path::new("/run/nscd/socket"), 1, 1, never));
        assert!(!places.allows(Path::new("/work/wsx/a.sock"), 1, 1, || None));
        // A second name: brought in from elsewhere.
        assert!(!places.allows(Path::new("/work/ws/a.sock"), 1, 2, never));
        assert!(!places.allows(
            Path::new("/home/u/.cache/git/credential/socket"),
            1,
            1,
            || None
        ));
        // The session's layer of /tmp, and not the host's showing through below.
        assert!(places.allows(Path::new("/tmp/mine.sock"), 41, 1, || Some(41)));
        assert!(!places.allows(Path::new("/tmp/tmux-0/default"), 42, 1, || Some(41)));
        assert!(!places.allows(Path::new("/tmp/x"), 41, 1, || None));
        assert!(!places.allows(Path::new("relative.sock"), 1, 1, || Some(1)));
    }
}
