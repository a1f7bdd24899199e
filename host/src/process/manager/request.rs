//! Checking a start's request: its command and variables are well-formed, and its working
//! directory, resolved against the host's, exists and lies outside the paths hidden from
//! confined commands.

use std::io;
use std::path::{Path, PathBuf};

use crate::process::ProcessError;
use crate::sandbox::{self, Profile, canonical};

/// The roots the `workdir` check compares a request's directory with, resolved once.
#[derive(Debug)]
pub(super) struct PathRoots {
    /// The user's credential stores, `--hide` paths and the host's own files.
    pub(super) hidden: Vec<PathBuf>,
    /// The workspace and the `--writable` directories: visible even inside a hidden path (the
    /// sandbox does not cover a hidden directory that holds one).
    pub(super) visible: Vec<PathBuf>,
}

impl PathRoots {
    pub(super) fn of(context: &sandbox::Context) -> PathRoots {
        PathRoots {
            hidden: context
                .hidden
                .paths
                .iter()
                .chain(&context.protected)
                .map(|path| sandbox::normalize(&canonical(path)))
                .collect(),
            visible: context
                .workdir
                .iter()
                .chain(&context.writable)
                .map(|path| sandbox::normalize(&canonical(path)))
                .collect(),
        }
    }

    /// The working directory of a request, checked to exist (as the host sees it). For a
    /// confined command, a directory in a hidden path gets one answer, whether it exists or
    /// not: the check must not tell which names a hidden directory holds.
    pub(super) fn resolve(
        &self,
        default: Option<&Path>,
        requested: Option<PathBuf>,
        profile: &Profile,
    ) -> Result<PathBuf, ProcessError> {
        let base = || match default {
            Some(dir) => Ok(dir.to_path_buf()),
            None => std::env::current_dir().map_err(|error| {
                ProcessError::Failed(format!(
                    "cannot determine the host's working directory: {error}"
                ))
            }),
        };
        let dir = match requested {
            Some(path) if path.is_absolute() => path,
            Some(path) => base()?.join(path),
            None => base()?,
        };
        if profile.mode != sandbox::SandboxMode::Off && self.is_hidden(&dir, profile) {
            return Err(ProcessError::InvalidRequest(format!(
                "working directory `{}` lies in a path hidden from confined commands",
                dir.display()
            )));
        }
        match std::fs::metadata(&dir) {
            Ok(meta) if meta.is_dir() => Ok(dir),
            Ok(_) => Err(ProcessError::InvalidRequest(format!(
                "working directory `{}` is not a directory",
                dir.display()
            ))),
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                Err(ProcessError::InvalidRequest(format!(
                    "working directory `{}` does not exist",
                    dir.display()
                )))
            }
            Err(error) => Err(ProcessError::InvalidRequest(format!(
                "working directory `{}` is not accessible: {error}",
                dir.display()
            ))),
        }
    }

    /// Whether `path` lies in a path hidden from commands of `profile`: the user's credential
    /// stores, the host's own files, the profile's own hidden paths. `path` is compared with
    /// its longest existing ancestor resolved, so that a link or `..` does not get around it.
    fn is_hidden(&self, path: &Path, profile: &Profile) -> bool {
        // Lexically, and with the longest existing ancestor resolved: a link inside a hidden
        // directory that points out of it gets the same answer as any other name there.
        let resolved = path
            .ancestors()
            .find_map(|ancestor| {
                let rest = path.strip_prefix(ancestor).ok()?;
                Some(ancestor.canonicalize().ok()?.join(rest))
            })
            .unwrap_or_else(|| path.to_path_buf());
        let forms = [sandbox::normalize(path), sandbox::normalize(&resolved)];
        let roots = self;
        let requested: Vec<PathBuf> = profile
            .hidden
            .iter()
            .map(|path| sandbox::normalize(&canonical(path)))
            .collect();
        roots.hidden.iter().chain(&requested).any(|hidden| {
            forms.iter().any(|form| {
                within(form, hidden)
                    && !roots
                        .visible
                        .iter()
                        .any(|root| within(root, hidden) && within(form, root))
            })
        })
    }
}

/// Whether `path` is `root` or lies below it, for paths as [`sandbox::normalize`] leaves them
/// (no `.`, `..`, doubled or trailing separator): the answer of `Path::starts_with`, from one
/// comparison of bytes instead of a walk over both paths' components. Each start compares its
/// directory with every hidden path this way.
fn within(path: &Path, root: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let (path, root) = (path.as_os_str().as_bytes(), root.as_os_str().as_bytes());
    path.strip_prefix(root)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(b"/") || root.ends_with(b"/"))
}

/// The command is not empty and holds no NUL byte.
pub(super) fn validate_command(command: &str) -> Result<(), ProcessError> {
    if command.trim().is_empty() {
        return Err(ProcessError::InvalidRequest(
            "the command is empty".to_owned(),
        ));
    }
    if command.contains('\0') {
        return Err(ProcessError::InvalidRequest(
            "the command contains a NUL byte".to_owned(),
        ));
    }
    Ok(())
}

/// Each variable has a valid name and a value without a NUL byte.
pub(super) fn validate_env(env: &[(String, String)]) -> Result<(), ProcessError> {
    for (key, value) in env {
        if key.is_empty() || key.contains(['=', '\0']) {
            return Err(ProcessError::InvalidRequest(format!(
                "invalid environment variable name `{}`",
                key.escape_default()
            )));
        }
        if value.contains('\0') {
            return Err(ProcessError::InvalidRequest(format!(
                "the value of environment variable `{key}` contains a NUL byte"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_answers_as_starts_with_for_normalized_paths() {
        let paths = [
            "/",
            "/a",
            "/a/b",
            "/a/bc",
            "/ab",
            "/a/b/c",
            "/a/b/c/d",
            "/home/u/.ssh",
            "/home/u/.ssh2",
            "/home/u/.ss",
            "/home/u",
            "/home/u/.ssh/id_ed25519",
        ];
        for path in paths {
            for root in paths {
                let (path, root) = (
                    sandbox::normalize(Path::new(path)),
                    sandbox::normalize(Path::new(root)),
                );
                assert_eq!(
                    within(&path, &root),
                    path.starts_with(&root),
                    "{} within {}",
                    path.display(),
                    root.display()
                );
            }
        }
        // What normalizing a root takes away: a trailing or doubled separator, `.` and `..`.
        for (written, path) in [
            ("/a/b/", "/a/b"),
            ("/a//b", "/a/b/c"),
            ("/a/./b/../b", "/a/b"),
        ] {
            assert!(within(
                Path::new(path),
                &sandbox::normalize(Path::new(written))
            ));
        }
    }
}
