//! The git guard: what a confined command writes that git would later run outside the sandbox
//! is undone.
//!
//! A `workspace-write` command may write the workspace, and so the `.git` of a repository in it.
//! Git runs the hooks in `.git/hooks` when the user next commits, unconfined.
//! Git also runs the programs that `.git/config` names (`core.fsmonitor`, `core.hooksPath`, ...).
//! Landlock cannot make `.git/hooks` read-only inside a writable `.git`: its rights on a
//! directory apply to everything beneath.
//! `.git/config` must stay writable: git rewrites it by lock and rename (`git config user.name`,
//! `git push -u`, `git checkout -b --track`).
//! So the host checks these files itself, in every tier, and puts back what it refuses.
//! The namespaces tier also binds read-only the `.git/hooks` that exist when a scope's
//! namespaces are made (`layers.rs`).
//! `--allow-hook-writes` turns both off.
//!
//! One [`GitGuard`] serves one scope (session):
//!
//! 1. The process manager makes it at the scope's first confined command.
//!    Its first check, right before that command starts, records what is there as accepted.
//!    So the user's own hooks and settings are left alone.
//! 2. A check finds the git directories.
//!    It looks at `.git` at the top of each guarded root (the workspace and the `--writable`
//!    directories) and of each directory directly in one.
//!    It follows a `.git` file's `gitdir:`, a `.git` link and a `commondir` only where they stay
//!    inside a guarded root.
//!    Under each git directory it also takes `modules/**` (submodules) and `worktrees/*`.
//! 3. In each git directory it compares `hooks/`, `config` and `config.worktree` with the
//!    accepted state: metadata first, contents only when the metadata changed.
//! 4. It refuses a hook created, changed, made executable or replaced, a `hooks` directory
//!    replaced by a link, and a `.git`, `commondir` or `config` that newly points outside.
//!    It refuses a setting added or changed that is not on the allow-list below, and a config
//!    git cannot parse.
//! 5. It puts back what it refused.
//!    A new hook is removed; a changed one gets its previous content and mode.
//!    A config gets its previous content, written to a temporary file beside it and renamed over.
//!    A config without an accepted content (new, or too large to keep) loses the refused
//!    settings instead.
//! 6. What it accepted becomes the accepted state.
//!    What it refused is logged at `warn` and becomes a note for the model.
//! 7. Checks run right before each confined command of the scope starts (catching what a
//!    leftover process did meanwhile), right after it ends (the note goes into its result), and
//!    when the scope ends.
//! 8. A check begins with the watches on every directory the last full check read
//!    (`watch.rs`, inotify): when none saw a relevant change, it ends there, reading nothing.
//!
//! Deleting a hook or a setting is accepted: it runs nothing.
//! A top-level `hooks/*.sample` file is ignored: git never runs it, and `git init` writes them.
//! The guard cannot tell who made a change.
//! A change made from outside the sandbox while the session runs is judged the same way.
//!
//! # The settings a confined command may add or change
//!
//! Everything else is refused (deny by default). The list is what git writes in ordinary work
//! (`init`, `clone`, `config user.*`, `remote`, `branch -u`, `push -u`, `submodule`,
//! `sparse-checkout`, `worktree`, `maintenance`, `lfs`), and a few settings of how git shows
//! and merges that run nothing.
//!
//! | section | keys |
//! |---|---|
//! | `core` | `repositoryformatversion`, `filemode`, `bare`, `logallrefupdates`, `ignorecase`, `precomposeunicode`, `symlinks`, `autocrlf`, `eol`, `safecrlf`, `sparsecheckout`, `sparsecheckoutcone`, `quotepath`, `untrackedcache`; `worktree` when it stays inside a guarded root |
//! | `user`, `author`, `committer` | `name`, `email` |
//! | `remote.NAME` | `url` and `pushurl` (not `-...`, not a `HELPER::` transport such as `ext::`), `fetch`, `push`, `tagopt`, `prune`, `prunetags`, `mirror`, `promisor`, `partialclonefilter`, `skipdefaultupdate`, `skipfetchall` |
//! | `remote` | `pushdefault` |
//! | `branch.NAME` | `remote`, `merge`, `rebase`, `pushremote`, `description` |
//! | `branch` | `autosetupmerge`, `autosetuprebase` |
//! | `submodule.NAME` | `url` (as for remotes), `update` (not `!command`), `active`, `branch`, `fetchrecursesubmodules`, `ignore`, `shallow` |
//! | `extensions` | `objectformat`, `compatobjectformat`, `worktreeconfig`, `partialclone`, `refstorage`, `preciousobjects`, `noop`, `noop-v1` |
//! | `init`, `pull`, `push`, `fetch` | `defaultbranch`; `rebase`, `ff`; `default`, `autosetupremote`; `prune`, `prunetags` |
//! | `gc`, `maintenance` | `auto`; `auto`, `strategy` |
//! | `lfs` | `repositoryformatversion`; `lfs.URL.access`, `lfs.URL.locksverify` |
//! | how git shows and merges | `advice.*`, `color.*`, `merge.ff`, `merge.conflictstyle`, `rebase.autostash`, `rebase.autosquash`, `rebase.updaterefs`, `diff.algorithm`, `diff.renames`, `status.showuntrackedfiles` |
//!
//! Refused, for example: `core.hooksPath`, `core.fsmonitor`, `core.editor`, `core.pager`,
//! `core.sshCommand`, `include.path`, `includeIf.*.path`, `alias.*`, `filter.*`,
//! `diff.external`, `diff.*.textconv`, `merge.*.driver`, `credential.*`, `remote.*.uploadpack`,
//! `remote.*.vcs`, `user.signingkey`, `gpg.*`, `http.*`.
//!
//! # Bounds
//!
//! At most [`MAX_GIT_DIRS`] git directories are guarded per scope, and [`MAX_HOOK_ENTRIES`]
//! entries per `hooks` directory.
//! A hook's content is kept (to put it back) up to [`MAX_HOOK_BYTES`].
//! A changed hook of which no copy was kept is removed.
//! A config larger than [`MAX_CONFIG_BYTES`] is refused when it changes.
//! One the user had that large is not checked.
//! All kept contents of a guard together stay under [`MAX_KEPT_BYTES`].
//!
//! Every change the guard makes goes through directories opened without following links, so
//! a command that swaps a directory for a link cannot redirect the host's writes or reads.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use nix::unistd::UnlinkatFlags;

mod config;
mod find;
mod fs;
mod hooks;
mod settings;
#[cfg(test)]
mod tests;
mod watch;

pub(crate) use config::{Setting, parse, without};
use find::*;
use fs::*;
use hooks::*;
use settings::*;
use watch::{Role, Watches};

/// Most git directories one guard watches.
const MAX_GIT_DIRS: usize = 256;
/// Most entries of a directory the guard looks at (a guarded root's children, `modules/`,
/// `worktrees/`).
const MAX_CHILDREN: usize = 1024;
/// Most entries of one `hooks` directory, its subdirectories included.
const MAX_HOOK_ENTRIES: usize = 1024;
/// How deep the guard looks into a `hooks` directory.
const MAX_HOOK_DEPTH: usize = 4;
/// How deep submodules' git directories are looked for under `modules/` (a name may hold `/`).
const MAX_MODULE_DEPTH: usize = 8;
/// A hook's content is kept up to this size.
const MAX_HOOK_BYTES: u64 = 256 * 1024;
/// A config is read and checked up to this size.
const MAX_CONFIG_BYTES: u64 = 256 * 1024;
/// All the contents one guard keeps, together.
const MAX_KEPT_BYTES: usize = 4 * 1024 * 1024;
/// A `.git` file or a `commondir` is read up to this size.
const MAX_POINTER_BYTES: u64 = 4096;
/// How deep the guard removes a directory a command made.
const MAX_REMOVE_DEPTH: usize = 32;
/// Most refusals one note names.
const MAX_NOTED: usize = 10;

/// When a check runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Moment {
    /// Right before a confined command of the scope starts.
    Start,
    /// Right after one ended.
    End,
    /// When the scope ends.
    ScopeEnd,
}

/// The guard of one scope. See the module documentation.
#[derive(Debug)]
pub(crate) struct GitGuard {
    scope: String,
    /// The workspace and the `--writable` directories, resolved.
    roots: Arc<[PathBuf]>,
    /// The accepted state, held across a check (on a blocking thread): one check at a time.
    state: Arc<tokio::sync::Mutex<State>>,
}

impl GitGuard {
    /// A guard of `scope` over the git repositories of `roots` (resolved paths). Nothing is
    /// read before the first check. Without `watch`, no check ends at the watches (`watch.rs`):
    /// every check reads the repositories.
    pub(crate) fn new(scope: &str, roots: &[PathBuf], watch: bool) -> GitGuard {
        let mut roots: Vec<PathBuf> = roots
            .iter()
            .filter(|root| root.is_absolute() && root.parent().is_some())
            .cloned()
            .collect();
        roots.sort();
        roots.dedup();
        GitGuard {
            scope: scope.to_owned(),
            roots: roots.into(),
            state: Arc::new(tokio::sync::Mutex::new(State {
                watches: (!watch).then(Watches::none),
                ..State::default()
            })),
        }
    }

    /// Check now (see the module documentation): undo what is refused, log it, and return the
    /// note for the model (`None` when nothing was refused, and at [`Moment::ScopeEnd`]). The
    /// first check records the accepted state and refuses nothing.
    pub(crate) async fn check(&self, moment: Moment) -> Option<String> {
        let mut state = self.state.clone().lock_owned().await;
        // Nothing the guard reads changed: no thread, no file read.
        if state.quiet() {
            state.skipped += 1;
            return None;
        }
        let roots = self.roots.clone();
        let refusals = tokio::task::spawn_blocking(move || state.check(&roots))
            .await
            .ok()?;
        for refusal in &refusals {
            tracing::warn!(
                scope = %self.scope,
                path = %refusal.path.display(),
                refused = %refusal.what,
                undone = %refusal.undone,
                ?moment,
                "refused a change to what git runs outside the sandbox"
            );
        }
        note(moment, &refusals)
    }
}

/// One change the guard refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// The file or directory.
    pub(crate) path: PathBuf,
    /// What was refused: `a new hook`, `the setting core.hooksPath`, ...
    pub(crate) what: String,
    /// What the guard did about it.
    pub(crate) undone: Undone,
}

/// What the guard did about a refused change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Undone {
    /// The new file, directory or link was removed.
    Removed,
    /// The file was put back as it was before.
    PutBack,
    /// The file was made non-executable again.
    ModeRestored,
    /// The refused settings were taken out of the file.
    SettingsTakenOut,
    /// The file was emptied (it was new, and nothing of it could be kept).
    Emptied,
    /// The change could not be undone.
    Failed(String),
}

impl fmt::Display for Undone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Undone::Removed => f.write_str("removed"),
            Undone::PutBack => f.write_str("put back as it was"),
            Undone::ModeRestored => f.write_str("made non-executable again"),
            Undone::SettingsTakenOut => f.write_str("those settings were taken out"),
            Undone::Emptied => f.write_str("emptied"),
            Undone::Failed(why) => write!(f, "NOT undone: {why}"),
        }
    }
}

/// The note for the model about `refusals`.
fn note(moment: Moment, refusals: &[Refusal]) -> Option<String> {
    if refusals.is_empty() || moment == Moment::ScopeEnd {
        return None;
    }
    let when = match moment {
        Moment::Start => {
            "before this command started, something changed (a process an earlier command left \
             running, or a program outside the sandbox)"
        }
        _ => "while this command ran, something changed",
    };
    let mut items: Vec<String> = refusals
        .iter()
        .take(MAX_NOTED)
        .map(|refusal| {
            format!(
                "{}: {} ({})",
                refusal.path.display(),
                refusal.what,
                refusal.undone
            )
        })
        .collect();
    if refusals.len() > MAX_NOTED {
        items.push(format!("and {} more", refusals.len() - MAX_NOTED));
    }
    Some(format!(
        "\n[toolhost: {when} what git runs outside the sandbox, and the host undid it: {}. \
         Confined commands may not add or change git hooks, nor git settings that run programs \
         or read other files: git would run them later, unconfined. Do not retry, nor work \
         around it: ask the user to make this change if it is needed]",
        items.join("; ")
    ))
}

// ---------------------------------------------------------------------------------------------
// The accepted state and a check.

/// What a guard accepted so far.
#[derive(Debug, Default)]
struct State {
    /// The first check was made (it records, and refuses nothing).
    baseline: bool,
    /// The watches on what the last full check read (made by the first check).
    watches: Option<Watches>,
    /// The watches saw a change that no full check has looked at yet.
    pending: bool,
    /// Checks that ended at the watches, nothing having changed (for tests).
    skipped: u64,
    /// Per git directory.
    repos: HashMap<PathBuf, Repo>,
    /// Per `.git` file or link and `commondir`.
    pointers: HashMap<PathBuf, Pointer>,
    /// A bound was reached and said so.
    warned: bool,
}

/// The accepted state of one git directory.
#[derive(Debug, Clone, Default)]
struct Repo {
    hooks: Hooks,
    config: Option<Config>,
    worktree_config: Option<Config>,
}

/// An accepted `.git` file or link, or `commondir`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pointer {
    link: PointerKind,
    /// Accepted while it pointed outside the guarded roots (in the first check).
    outside: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum PointerKind {
    File(Vec<u8>),
    Link(OsString),
}

impl State {
    /// Whether nothing the guard reads changed since the last full check (`watch.rs`). A
    /// change seen stays seen until a full check begins.
    fn quiet(&mut self) -> bool {
        if !self.baseline || self.pending {
            return false;
        }
        let changed = self.watches.as_mut().is_none_or(Watches::changed);
        self.pending = changed;
        !changed
    }

    /// One check (blocking): see the module documentation. It ends at once when the watches
    /// saw no change.
    fn check(&mut self, roots: &[PathBuf]) -> Vec<Refusal> {
        if self.quiet() {
            self.skipped += 1;
            return Vec::new();
        }
        let judge = self.baseline;
        self.baseline = true;
        self.pending = false;
        let mut watches = self.watches.take().unwrap_or_else(Watches::new);
        // What happened before this point is read below; what happens after it is seen by
        // the next check.
        watches.changed();
        let mut checker = Checker {
            roots,
            judge,
            refusals: Vec::new(),
            budget: MAX_KEPT_BYTES.saturating_sub(self.kept_bytes()),
            bounded: false,
            watches: &mut watches,
        };
        let mut pointers = HashMap::new();
        let gitdirs = checker.discover(&self.pointers, &mut pointers);
        let mut repos = HashMap::new();
        for gitdir in gitdirs {
            let Ok(dir) = open_dir(&gitdir) else {
                continue;
            };
            checker.watches.add(&dir, Role::Git);
            let repo = checker.repo(&dir, &gitdir, self.repos.get(&gitdir));
            repos.insert(gitdir, repo);
        }
        // A git directory not found this time keeps its accepted state (one moved away and
        // back is not new), within the bound.
        for (path, repo) in self.repos.drain() {
            if repos.len() >= MAX_GIT_DIRS {
                break;
            }
            repos.entry(path).or_insert(repo);
        }
        let (bounded, refusals) = (checker.bounded, checker.refusals);
        self.watches = Some(watches);
        self.repos = repos;
        self.pointers = pointers;
        if bounded && !self.warned {
            self.warned = true;
            tracing::warn!(
                "the git guard reached one of its bounds (at most {MAX_GIT_DIRS} git directories, \
                 {MAX_HOOK_ENTRIES} entries per hooks directory, {} KiB of config, {} MiB kept): \
                 what lies beyond is not checked",
                MAX_CONFIG_BYTES / 1024,
                MAX_KEPT_BYTES / (1024 * 1024)
            );
        }
        refusals
    }

    /// The bytes of content this state keeps.
    fn kept_bytes(&self) -> usize {
        let config = |config: &Option<Config>| {
            config.as_ref().map_or(0, |config| {
                config.content.as_ref().map_or(0, |c| c.len())
                    + config.settings.as_ref().map_or(0, |s| settings_bytes(s))
            })
        };
        self.repos
            .values()
            .map(|repo| {
                let hooks = match &repo.hooks {
                    Hooks::Dir(nodes) => nodes
                        .values()
                        .map(|node| node.content.as_ref().map_or(0, |c| c.len()))
                        .sum(),
                    _ => 0,
                };
                hooks + config(&repo.config) + config(&repo.worktree_config)
            })
            .sum()
    }
}

/// One check's work.
struct Checker<'a> {
    roots: &'a [PathBuf],
    /// `false` in the first check: everything found is accepted.
    judge: bool,
    refusals: Vec<Refusal>,
    /// Bytes of content that may still be kept.
    budget: usize,
    /// A bound was reached.
    bounded: bool,
    /// Every directory read is watched.
    watches: &'a mut Watches,
}

impl Checker<'_> {
    fn refuse(&mut self, path: PathBuf, what: impl Into<String>, undone: Undone) {
        self.refusals.push(Refusal {
            path,
            what: what.into(),
            undone,
        });
    }

    /// `bytes`, kept if the budget allows.
    fn keep(&mut self, bytes: Vec<u8>) -> Option<Arc<[u8]>> {
        if bytes.len() > self.budget {
            self.bounded = true;
            return None;
        }
        self.budget -= bytes.len();
        Some(bytes.into())
    }

    fn inside(&self, path: &Path) -> bool {
        self.roots.iter().any(|root| path.starts_with(root))
    }

    // -- One git directory ------------------------------------------------------------------

    fn repo(&mut self, dir: &OwnedFd, gitdir: &Path, old: Option<&Repo>) -> Repo {
        Repo {
            hooks: self.hooks(dir, gitdir, old.map(|repo| &repo.hooks)),
            config: self.config(
                dir,
                gitdir,
                "config",
                old.and_then(|repo| repo.config.as_ref()),
            ),
            worktree_config: self.config(
                dir,
                gitdir,
                "config.worktree",
                old.and_then(|repo| repo.worktree_config.as_ref()),
            ),
        }
    }
}

/// What undoing a change gave: how it was undone, or why it failed.
fn undo(work: impl FnOnce() -> io::Result<Undone>) -> Undone {
    work().unwrap_or_else(|error| Undone::Failed(error.to_string()))
}
