//! A session's own workspace, chosen under the parents the operator allows
//! (`--workspaces-under`), when the operator did not fix one with `--workdir`.
//!
//! A scope starts with the host's workspace (the directory the host was started in, or none
//! when that is `/`). Two things may choose another, the later one winning:
//! - the roots an MCP client of the 2025 revisions offers (asked by the MCP server, which
//!   calls [`ProcessManager::choose_workspace`](super::ProcessManager::choose_workspace));
//! - a call's `workdir` outside the scope's workspace but under an allowed parent (checked at
//!   each start).
//!
//! A candidate becomes the workspace only when [`project_of`] accepts it:
//! 1. It is an existing directory, resolved (links and `..`), strictly under an allowed parent.
//! 2. No directory between the parent and it is a dot-directory (`~/.config`, `~/.local`):
//!    those hold what the user's own programs run, unconfined.
//! 3. It is not `/`, a home directory, the host's state directory or a directory holding it,
//!    and it lies in no hidden path and holds none of the host's own files.
//! 4. It holds no directory of the host's `PATH` (`~/bin`): a program written there would run
//!    outside the sandbox.
//! 5. Its project is the nearest directory at or above it, below the parent, that holds
//!    `.git`; else the candidate itself.
//!
//! Choosing a workspace lets go of the scope's layers built so far: the next command builds
//! them again with the new writable root, while a running command keeps the ones it started
//! with. The scope's git guard starts again over the new roots.

use std::path::{Path, PathBuf};

use super::request::PathRoots;
use crate::sandbox::canonical;

/// Where a scope's workspace came from, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkspaceSource {
    /// A root the MCP client offered (`roots/list`).
    Roots,
    /// A call's `workdir`.
    CallWorkdir,
}

impl WorkspaceSource {
    /// The source in words, for the log.
    pub fn describe(self) -> &'static str {
        match self {
            WorkspaceSource::Roots => "the client's roots",
            WorkspaceSource::CallWorkdir => "a call's workdir",
        }
    }
}

/// A workspace chosen for one scope.
#[derive(Debug)]
pub(super) struct ScopeWorkspace {
    /// The project directory, resolved.
    pub(super) dir: PathBuf,
    /// The `workdir` check's roots with this workspace in place of the host's.
    pub(super) roots: PathRoots,
}

/// What a candidate is checked against.
pub(super) struct Allowed<'a> {
    /// The allowed parents, resolved.
    pub(super) parents: &'a [PathBuf],
    /// The user's home directories, resolved.
    pub(super) homes: &'a [PathBuf],
    /// The host's own files and directories (state directory, caches, plugins), resolved.
    pub(super) protected: &'a [PathBuf],
    /// The host's hidden and visible roots.
    pub(super) roots: &'a PathRoots,
    /// The directories of the host's `PATH`, resolved.
    pub(super) path_dirs: &'a [PathBuf],
}

/// The project `candidate` makes the workspace, or why it cannot (steps 1 to 5 of the
/// module documentation).
pub(super) fn project_of(candidate: &Path, allowed: &Allowed<'_>) -> Result<PathBuf, String> {
    // 1. An existing directory under an allowed parent.
    let dir = candidate
        .canonicalize()
        .map_err(|error| format!("{}: {error}", candidate.display()))?;
    if !dir.is_dir() {
        return Err(format!("{} is not a directory", dir.display()));
    }
    if dir == Path::new("/") || allowed.homes.contains(&dir) {
        return Err(format!("{} is a home directory or `/`", dir.display()));
    }
    let Some(parent) = allowed
        .parents
        .iter()
        .filter(|parent| dir.starts_with(parent) && dir != **parent)
        .max_by_key(|parent| parent.components().count())
    else {
        return Err(format!(
            "{} lies under none of the parents a workspace may be chosen in (--workspaces-under)",
            dir.display()
        ));
    };
    // 2. No dot-directory between the parent and it.
    let below = dir.strip_prefix(parent).unwrap_or(&dir);
    if below
        .components()
        .any(|part| part.as_os_str().as_encoded_bytes().starts_with(b"."))
    {
        return Err(format!(
            "{} lies in a dot-directory, which holds what programs run outside the sandbox",
            dir.display()
        ));
    }
    // 3. Not the host's own (a home or `/` was refused above); in no hidden path.
    if let Some(own) = allowed
        .protected
        .iter()
        .find(|own| dir.starts_with(own) || own.starts_with(&dir))
    {
        return Err(format!(
            "{} holds or lies in the host's own {}",
            dir.display(),
            own.display()
        ));
    }
    if allowed
        .roots
        .hidden
        .iter()
        .any(|hidden| dir.starts_with(hidden))
    {
        return Err(format!("{} lies in a hidden path", dir.display()));
    }
    // 4. No directory of `PATH` in it.
    if let Some(on_path) = allowed.path_dirs.iter().find(|on| on.starts_with(&dir)) {
        return Err(format!(
            "{} holds {}, a directory of the host's PATH",
            dir.display(),
            on_path.display()
        ));
    }
    // 5. The enclosing repository below the parent, else the candidate.
    let project = dir
        .ancestors()
        .take_while(|ancestor| ancestor.starts_with(parent) && *ancestor != parent.as_path())
        .find(|ancestor| std::fs::symlink_metadata(ancestor.join(".git")).is_ok())
        .unwrap_or(&dir)
        .to_path_buf();
    // The repository's top must pass the same checks (it may hold a PATH directory).
    if project != dir {
        return project_of(&project, allowed);
    }
    Ok(project)
}

/// The directories of the host's `PATH`, resolved; relative entries are left out.
pub(super) fn path_dirs() -> Vec<PathBuf> {
    std::env::var_os("PATH")
        .map(|path| {
            std::env::split_paths(&path)
                .filter(|dir| dir.is_absolute())
                .map(|dir| canonical(&dir))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixture {
        _dir: tempfile::TempDir,
        parent: PathBuf,
        roots: PathRoots,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let parent = dir.path().canonicalize().expect("canonical").join("home");
        for sub in [
            "proj/src",
            "repo/.git",
            "repo/deep/er",
            ".config/app",
            "tools/bin",
        ] {
            std::fs::create_dir_all(parent.join(sub)).expect("mkdir");
        }
        Fixture {
            _dir: dir,
            roots: PathRoots {
                hidden: vec![parent.join("secret")],
                visible: Vec::new(),
            },
            parent,
        }
    }

    fn check(fixture: &Fixture, candidate: &str) -> Result<PathBuf, String> {
        let parents = [fixture.parent.clone()];
        let homes = [fixture.parent.clone()];
        let protected = [fixture.parent.join("proj/state")];
        let path_dirs = [fixture.parent.join("tools/bin")];
        project_of(
            &fixture.parent.join(candidate),
            &Allowed {
                parents: &parents,
                homes: &homes,
                protected: &protected,
                roots: &fixture.roots,
                path_dirs: &path_dirs,
            },
        )
    }

    #[test]
    fn a_directory_under_a_parent_is_its_own_project_or_its_repositorys() {
        let f = fixture();
        assert_eq!(check(&f, "proj/src"), Ok(f.parent.join("proj/src")));
        assert_eq!(check(&f, "repo/deep/er"), Ok(f.parent.join("repo")));
        assert_eq!(check(&f, "repo"), Ok(f.parent.join("repo")));
    }

    #[test]
    fn homes_dot_directories_path_directories_and_the_hosts_files_are_refused() {
        let f = fixture();
        for (candidate, why) in [
            ("", "home directory"),
            (".config/app", "dot-directory"),
            ("tools", "PATH"),
            ("proj", "host's own"),
            ("missing", "No such file"),
        ] {
            let refused = check(&f, candidate).expect_err(candidate);
            assert!(refused.contains(why), "{candidate}: {refused}");
        }
        std::fs::create_dir_all(f.parent.join("secret/x")).expect("mkdir");
        let refused = check(&f, "secret/x").expect_err("hidden");
        assert!(refused.contains("hidden"), "{refused}");
        let outside = project_of(
            f.parent.parent().expect("the temporary directory"),
            &Allowed {
                parents: std::slice::from_ref(&f.parent),
                homes: &[],
                protected: &[],
                roots: &f.roots,
                path_dirs: &[],
            },
        )
        .expect_err("outside");
        assert!(outside.contains("--workspaces-under"), "{outside}");
    }
}
