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
//! namespaces are made (`prepare.rs`).
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
mod fs;
#[cfg(test)]
mod tests;
mod watch;

pub(crate) use config::{Setting, parse, without};
use fs::*;
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
    /// read before the first check.
    pub(crate) fn new(scope: &str, roots: &[PathBuf]) -> GitGuard {
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
            state: Arc::default(),
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

/// The accepted `hooks` of a git directory.
#[derive(Debug, Clone, Default)]
enum Hooks {
    /// None there.
    #[default]
    Absent,
    /// A link, and where it points.
    Link(OsString),
    /// A directory: its entries by relative path (top-level `*.sample` files left out).
    Dir(BTreeMap<PathBuf, Node>),
    /// Something git cannot use as hooks.
    Other,
}

/// An accepted entry of a `hooks` directory.
#[derive(Debug, Clone)]
struct Node {
    stat: Stat,
    /// A file's content, when it was small enough to keep.
    content: Option<Arc<[u8]>>,
    /// A link's target.
    target: Option<OsString>,
}

/// A config's settings as compared: (normalised key, value).
type Settings = [(String, Option<String>)];

/// An accepted config file.
#[derive(Debug, Clone)]
struct Config {
    stat: Stat,
    /// Where it points, when it is a link.
    link: Option<OsString>,
    /// Its content, when it could be kept.
    content: Option<Arc<[u8]>>,
    /// Its settings (normalised key, value), when it could be parsed and kept.
    settings: Option<Arc<Settings>>,
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

fn settings_bytes(settings: &Settings) -> usize {
    settings
        .iter()
        .map(|(key, value)| key.len() + value.as_ref().map_or(0, String::len))
        .sum()
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

    // -- Finding the git directories --------------------------------------------------------

    /// The git directories of the roots (at most [`MAX_GIT_DIRS`]), checking the `.git` files
    /// and links and the `commondir` files on the way.
    fn discover(
        &mut self,
        old: &HashMap<PathBuf, Pointer>,
        new: &mut HashMap<PathBuf, Pointer>,
    ) -> Vec<PathBuf> {
        let mut queue = VecDeque::new();
        let roots = self.roots;
        for root in roots {
            let Ok(root_dir) = open_dir(root) else {
                continue;
            };
            self.watches.add(&root_dir, Role::Root);
            self.dot_git(&root_dir, root, old, new, &mut queue);
            for name in names(&root_dir, MAX_CHILDREN, &mut self.bounded) {
                if name == ".git" || !is_dir_at(&root_dir, &name) {
                    continue;
                }
                let Ok(child) = open_subdir(&root_dir, &name) else {
                    continue;
                };
                self.watches.add(&child, Role::Holder);
                self.dot_git(&child, &root.join(&name), old, new, &mut queue);
            }
        }
        let mut found = Vec::new();
        let mut seen = HashSet::new();
        while let Some(gitdir) = queue.pop_front() {
            if !seen.insert(gitdir.clone()) {
                continue;
            }
            if found.len() >= MAX_GIT_DIRS {
                self.bounded = true;
                break;
            }
            let Ok(dir) = open_dir(&gitdir) else {
                continue;
            };
            self.watches.add(&dir, Role::Git);
            found.push(gitdir.clone());
            if let Some(common) = self.pointer(&dir, &gitdir, "commondir", &gitdir, old, new) {
                queue.push_back(common);
            }
            if is_dir_at(&dir, OsStr::new("modules"))
                && let Ok(modules) = open_subdir(&dir, OsStr::new("modules"))
            {
                self.watches.add(&modules, Role::Git);
                self.modules(&modules, &gitdir.join("modules"), 0, &mut queue);
            }
            if is_dir_at(&dir, OsStr::new("worktrees"))
                && let Ok(worktrees) = open_subdir(&dir, OsStr::new("worktrees"))
            {
                self.watches.add(&worktrees, Role::Git);
                for name in names(&worktrees, MAX_CHILDREN, &mut self.bounded) {
                    if is_dir_at(&worktrees, &name) {
                        queue.push_back(gitdir.join("worktrees").join(name));
                    }
                }
            }
        }
        found
    }

    /// The `.git` in `holder`: a git directory, or a file or link to one.
    fn dot_git(
        &mut self,
        holder: &OwnedFd,
        holder_path: &Path,
        old: &HashMap<PathBuf, Pointer>,
        new: &mut HashMap<PathBuf, Pointer>,
        queue: &mut VecDeque<PathBuf>,
    ) {
        match stat_at(holder, OsStr::new(".git")) {
            Ok(Some(stat)) if stat.kind == Kind::Dir => queue.push_back(holder_path.join(".git")),
            Ok(Some(stat)) if matches!(stat.kind, Kind::File | Kind::Link) => {
                if let Some(gitdir) =
                    self.pointer(holder, holder_path, ".git", holder_path, old, new)
                {
                    queue.push_back(gitdir);
                }
            }
            _ => {}
        }
    }

    /// The `name` file or link in `dir` (`.git` or `commondir`), relative to `base`: where it
    /// points, when that lies inside a guarded root. One that newly points outside is refused
    /// and undone.
    fn pointer(
        &mut self,
        dir: &OwnedFd,
        dir_path: &Path,
        name: &str,
        base: &Path,
        old: &HashMap<PathBuf, Pointer>,
        new: &mut HashMap<PathBuf, Pointer>,
    ) -> Option<PathBuf> {
        let os_name = OsStr::new(name);
        let stat = stat_at(dir, os_name).ok()??;
        let current = match stat.kind {
            Kind::File => PointerKind::File(read_at(dir, os_name, MAX_POINTER_BYTES).ok()??),
            Kind::Link => PointerKind::Link(readlink_at(dir, os_name).ok()?),
            _ => return None,
        };
        let path = dir_path.join(name);
        let target = match &current {
            PointerKind::File(bytes) if name == ".git" => gitdir_of(bytes),
            PointerKind::File(bytes) => {
                let text = String::from_utf8_lossy(bytes).trim().to_owned();
                (!text.is_empty()).then(|| PathBuf::from(text))
            }
            PointerKind::Link(target) => Some(PathBuf::from(target)),
        };
        // One git cannot read points nowhere.
        let Some(target) = target else {
            new.insert(
                path,
                Pointer {
                    link: current,
                    outside: false,
                },
            );
            return None;
        };
        let resolved = resolve(&base.join(&target));
        let previous = old.get(&path);
        if self.inside(&resolved) {
            new.insert(
                path,
                Pointer {
                    link: current,
                    outside: false,
                },
            );
            return Some(resolved);
        }
        let unchanged = previous.is_some_and(|p| p.outside && p.link == current);
        if !self.judge || unchanged {
            new.insert(
                path,
                Pointer {
                    link: current,
                    outside: true,
                },
            );
            return None;
        }
        let undone = undo(|| {
            remove_at(dir, os_name, 0)?;
            Ok(match previous.map(|p| &p.link) {
                Some(PointerKind::File(bytes)) => {
                    write_at(dir, os_name, bytes, 0o644)?;
                    Undone::PutBack
                }
                Some(PointerKind::Link(target)) => {
                    nix::unistd::symlinkat(target.as_os_str(), dir, os_name)?;
                    Undone::PutBack
                }
                None => Undone::Removed,
            })
        });
        self.refuse(
            path.clone(),
            format!(
                "now points git to {}, outside the writable directories",
                target.display()
            ),
            undone,
        );
        if let Some(previous) = previous {
            new.insert(path, previous.clone());
        }
        None
    }

    /// The submodules' git directories under `modules/` (a directory with a `HEAD`).
    fn modules(&mut self, dir: &OwnedFd, path: &Path, depth: usize, queue: &mut VecDeque<PathBuf>) {
        if depth > MAX_MODULE_DEPTH {
            self.bounded = true;
            return;
        }
        for name in names(dir, MAX_CHILDREN, &mut self.bounded) {
            if !is_dir_at(dir, &name) {
                continue;
            }
            let Ok(sub) = open_subdir(dir, &name) else {
                continue;
            };
            self.watches.add(&sub, Role::Git);
            let sub_path = path.join(&name);
            if matches!(stat_at(&sub, OsStr::new("HEAD")), Ok(Some(_))) {
                queue.push_back(sub_path);
            } else {
                self.modules(&sub, &sub_path, depth + 1, queue);
            }
        }
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

    fn hooks(&mut self, gitdir_fd: &OwnedFd, gitdir: &Path, old: Option<&Hooks>) -> Hooks {
        let name = OsStr::new("hooks");
        let path = gitdir.join("hooks");
        let kept = || old.cloned().unwrap_or_default();
        let stat = match stat_at(gitdir_fd, name) {
            Ok(Some(stat)) => stat,
            Ok(None) => return Hooks::Absent,
            Err(_) => return kept(),
        };
        match stat.kind {
            Kind::Link => {
                let Ok(target) = readlink_at(gitdir_fd, name) else {
                    return kept();
                };
                if !self.judge || matches!(old, Some(Hooks::Link(t)) if *t == target) {
                    return Hooks::Link(target);
                }
                let undone = undo(|| {
                    remove_at(gitdir_fd, name, 0)?;
                    restore_hooks(gitdir_fd, old)
                });
                self.refuse(
                    path,
                    format!("replaced by a link to {}", Path::new(&target).display()),
                    undone,
                );
                kept()
            }
            Kind::Dir => {
                let Ok(dir) = open_subdir(gitdir_fd, name) else {
                    return kept();
                };
                let mut current = BTreeMap::new();
                let mut room = MAX_HOOK_ENTRIES;
                self.watches.add(&dir, Role::Git);
                scan(
                    &dir,
                    Path::new(""),
                    0,
                    &mut current,
                    &mut room,
                    self.watches,
                );
                if room == 0 {
                    self.bounded = true;
                }
                let none = BTreeMap::new();
                let old_nodes = match old {
                    Some(Hooks::Dir(nodes)) => nodes,
                    _ => &none,
                };
                Hooks::Dir(self.hook_entries(&dir, &path, old_nodes, &current))
            }
            _ => Hooks::Other,
        }
    }

    /// The accepted entries of a `hooks` directory, after refusing and undoing what changed.
    fn hook_entries(
        &mut self,
        dir: &OwnedFd,
        hooks: &Path,
        old: &BTreeMap<PathBuf, Node>,
        current: &BTreeMap<PathBuf, Stat>,
    ) -> BTreeMap<PathBuf, Node> {
        let mut next = BTreeMap::new();
        // Removed here: what lies beneath went with them.
        let mut removed: Vec<&Path> = Vec::new();
        for (rel, stat) in current {
            if removed.iter().any(|gone| rel.starts_with(gone)) {
                continue;
            }
            let path = hooks.join(rel);
            let Some(before) = old.get(rel) else {
                if !self.judge {
                    let node = self.node(dir, rel, *stat);
                    next.insert(rel.clone(), node);
                    continue;
                }
                let undone = undo(|| remove_rel(dir, rel).map(|()| Undone::Removed));
                let what = match stat.kind {
                    Kind::Dir => "a new directory in the hooks",
                    Kind::Link => "a new hook (a link)",
                    _ => "a new hook",
                };
                self.refuse(path, what, undone);
                removed.push(rel);
                continue;
            };
            if before.stat == *stat {
                next.insert(rel.clone(), before.clone());
                continue;
            }
            match (before.stat.kind, stat.kind) {
                (Kind::Dir, Kind::Dir) => {
                    next.insert(
                        rel.clone(),
                        Node {
                            stat: *stat,
                            ..before.clone()
                        },
                    );
                }
                (Kind::File, Kind::File) => {
                    let content = read_rel(dir, rel, MAX_HOOK_BYTES);
                    let same = matches!(
                        (&content, &before.content),
                        (Ok(Some(now)), Some(kept)) if now[..] == kept[..]
                    );
                    let gained_exec = stat.mode & 0o111 & !before.stat.mode != 0;
                    if same && !gained_exec {
                        next.insert(
                            rel.clone(),
                            Node {
                                stat: *stat,
                                ..before.clone()
                            },
                        );
                    } else if same {
                        let mode = before.stat.mode;
                        let undone =
                            undo(|| chmod_rel(dir, rel, mode).map(|()| Undone::ModeRestored));
                        self.refuse(path, "made executable", undone);
                        next.insert(rel.clone(), before.clone());
                    } else if let Some(kept) = &before.content {
                        let mode = before.stat.mode;
                        let undone =
                            undo(|| write_rel(dir, rel, kept, mode).map(|()| Undone::PutBack));
                        self.refuse(path, "a changed hook", undone);
                        next.insert(rel.clone(), before.clone());
                    } else {
                        let undone = undo(|| remove_rel(dir, rel).map(|()| Undone::Removed));
                        self.refuse(
                            path,
                            "a changed hook, too large for the host to have kept a copy",
                            undone,
                        );
                        removed.push(rel);
                    }
                }
                (Kind::Link, Kind::Link) => {
                    let target = read_rel_link(dir, rel).ok();
                    if target.is_some() && target == before.target {
                        next.insert(
                            rel.clone(),
                            Node {
                                stat: *stat,
                                ..before.clone()
                            },
                        );
                    } else {
                        let undone = undo(|| {
                            remove_rel(dir, rel)?;
                            restore_node(dir, rel, before)
                        });
                        self.refuse(path, "a hook link pointed elsewhere", undone);
                        next.insert(rel.clone(), before.clone());
                    }
                }
                _ => {
                    let undone = undo(|| {
                        remove_rel(dir, rel)?;
                        restore_node(dir, rel, before)
                    });
                    let restored = undone == Undone::PutBack;
                    self.refuse(path, "a hook replaced by something else", undone);
                    if restored {
                        next.insert(rel.clone(), before.clone());
                    } else {
                        removed.push(rel);
                    }
                }
            }
        }
        next
    }

    /// An entry of a `hooks` directory, accepted as it is (its content kept when it may be).
    fn node(&mut self, dir: &OwnedFd, rel: &Path, stat: Stat) -> Node {
        let content = match stat.kind {
            Kind::File => match read_rel(dir, rel, MAX_HOOK_BYTES) {
                Ok(Some(bytes)) => self.keep(bytes),
                _ => None,
            },
            _ => None,
        };
        let target = match stat.kind {
            Kind::Link => read_rel_link(dir, rel).ok(),
            _ => None,
        };
        Node {
            stat,
            content,
            target,
        }
    }

    /// The accepted state of the config file `name` of a git directory, after refusing and
    /// undoing what changed.
    fn config(
        &mut self,
        dir: &OwnedFd,
        gitdir: &Path,
        name: &str,
        old: Option<&Config>,
    ) -> Option<Config> {
        let os_name = OsStr::new(name);
        let path = gitdir.join(name);
        let stat = match stat_at(dir, os_name) {
            Ok(Some(stat)) => stat,
            Ok(None) => return None,
            Err(_) => return old.cloned(),
        };
        if old.is_some_and(|old| old.stat == stat) {
            return old.cloned();
        }
        let bare = |stat: Stat, link: Option<OsString>| Config {
            stat,
            link,
            content: None,
            settings: None,
        };
        match stat.kind {
            Kind::Link => {
                let target = readlink_at(dir, os_name).ok();
                let same = old.is_some_and(|old| old.link.is_some() && old.link == target);
                if !self.judge || same {
                    return Some(bare(stat, target));
                }
                let undone = undo(|| {
                    remove_at(dir, os_name, 0)?;
                    match old.and_then(|old| Some((old.content.as_ref()?, old.stat.mode))) {
                        Some((content, mode)) => {
                            write_at(dir, os_name, content, mode)?;
                            Ok(Undone::PutBack)
                        }
                        None => Ok(Undone::Removed),
                    }
                });
                self.refuse(path, "replaced by a link", undone);
                return old.cloned();
            }
            Kind::File => {}
            _ => return Some(bare(stat, None)),
        }
        let bytes = match read_at(dir, os_name, MAX_CONFIG_BYTES) {
            Ok(Some(bytes)) => bytes,
            Ok(None) if !self.judge => {
                self.bounded = true;
                return Some(bare(stat, None));
            }
            Ok(None) => {
                let undone = put_back_config(dir, os_name, old, None, stat.mode);
                self.refuse(
                    path,
                    format!(
                        "grew past {} KiB, too large to check",
                        MAX_CONFIG_BYTES / 1024
                    ),
                    undone,
                );
                return old.cloned();
            }
            Err(_) => return old.cloned(),
        };
        let parsed = parse(&bytes);
        if !self.judge {
            return Some(self.accepted_config(stat, bytes, parsed.ok()));
        }
        let parsed = match parsed {
            Ok(parsed) => parsed,
            Err(error) => {
                let undone = put_back_config(dir, os_name, old, None, stat.mode);
                self.refuse(path, format!("git cannot read it safely ({error})"), undone);
                return old.cloned();
            }
        };
        let before = old.and_then(|old| old.settings.as_deref());
        let refused = judge(before, &parsed, gitdir, self.roots);
        if refused.is_empty() {
            return Some(self.accepted_config(stat, bytes, Some(parsed)));
        }
        let repair = Repair {
            bytes: &bytes,
            parsed: &parsed,
            refused: &refused,
            gitdir,
            roots: self.roots,
        };
        let undone = put_back_config(dir, os_name, old, Some(repair), stat.mode);
        let names: Vec<String> = refused
            .iter()
            .map(|(index, why)| match why {
                Some(why) => format!("{} ({why})", parsed[*index].display()),
                None => parsed[*index].display(),
            })
            .collect();
        let what = if names.len() == 1 {
            format!("the setting {}", names[0])
        } else {
            format!("the settings {}", names.join(", "))
        };
        self.refuse(path, what, undone);
        old.cloned()
    }

    fn accepted_config(
        &mut self,
        stat: Stat,
        bytes: Vec<u8>,
        parsed: Option<Vec<Setting>>,
    ) -> Config {
        let settings: Option<Vec<(String, Option<String>)>> = parsed.map(|parsed| {
            parsed
                .iter()
                .map(|setting| (setting.key(), setting.value.clone()))
                .collect()
        });
        let settings = settings.and_then(|settings| {
            let size = settings_bytes(&settings);
            if size > self.budget {
                self.bounded = true;
                return None;
            }
            self.budget -= size;
            Some(settings.into())
        });
        Config {
            stat,
            link: None,
            content: self.keep(bytes),
            settings,
        }
    }
}

/// What a refused config's repair needs: the file as it is now, and what is refused in it.
struct Repair<'a> {
    bytes: &'a [u8],
    parsed: &'a [Setting],
    refused: &'a [(usize, Option<&'static str>)],
    gitdir: &'a Path,
    roots: &'a [PathBuf],
}

/// Put a refused config back: its previous content when one was kept; otherwise the file as it
/// is without the refused settings (checked again), or empty.
fn put_back_config(
    dir: &OwnedFd,
    name: &OsStr,
    old: Option<&Config>,
    repair: Option<Repair<'_>>,
    mode: u32,
) -> Undone {
    undo(|| {
        if let Some(old) = old
            && let Some(content) = &old.content
        {
            write_at(dir, name, content, old.stat.mode)?;
            return Ok(Undone::PutBack);
        }
        let before = old.and_then(|old| old.settings.as_deref());
        if let Some(repair) = repair {
            let indexes: Vec<usize> = repair.refused.iter().map(|(index, _)| *index).collect();
            let repaired = without(repair.bytes, repair.parsed, &indexes);
            let sound = parse(&repaired)
                .is_ok_and(|parsed| judge(before, &parsed, repair.gitdir, repair.roots).is_empty());
            if sound {
                write_at(dir, name, &repaired, mode)?;
                return Ok(Undone::SettingsTakenOut);
            }
        } else if old.is_some() {
            return Ok(Undone::Failed(
                "the host kept no copy of its previous content".to_owned(),
            ));
        }
        write_at(dir, name, b"", mode)?;
        Ok(Undone::Emptied)
    })
}

/// What undoing a change gave: how it was undone, or why it failed.
fn undo(work: impl FnOnce() -> io::Result<Undone>) -> Undone {
    work().unwrap_or_else(|error| Undone::Failed(error.to_string()))
}

/// Put back the accepted `hooks` of a git directory after what replaced it was removed.
fn restore_hooks(gitdir: &OwnedFd, old: Option<&Hooks>) -> io::Result<Undone> {
    let name = OsStr::new("hooks");
    match old {
        Some(Hooks::Link(target)) => {
            nix::unistd::symlinkat(target.as_os_str(), gitdir, name)?;
            Ok(Undone::PutBack)
        }
        Some(Hooks::Dir(nodes)) => {
            nix::sys::stat::mkdirat(gitdir, name, Mode::from_bits_truncate(0o755))?;
            let dir = open_subdir(gitdir, name)?;
            for (rel, node) in nodes {
                // What cannot be put back (no copy kept) stays away.
                let _ = restore_node(&dir, rel, node);
            }
            Ok(Undone::PutBack)
        }
        _ => Ok(Undone::Removed),
    }
}

/// Put back an accepted entry of a `hooks` directory at `rel`, where nothing is now.
fn restore_node(dir: &OwnedFd, rel: &Path, node: &Node) -> io::Result<Undone> {
    let (parent, name) = open_parent(dir, rel)?;
    match node.stat.kind {
        Kind::File => match &node.content {
            Some(content) => {
                write_at(&parent, &name, content, node.stat.mode)?;
                Ok(Undone::PutBack)
            }
            None => Ok(Undone::Removed),
        },
        Kind::Link => match &node.target {
            Some(target) => {
                nix::unistd::symlinkat(target.as_os_str(), &parent, name.as_os_str())?;
                Ok(Undone::PutBack)
            }
            None => Ok(Undone::Removed),
        },
        Kind::Dir => {
            nix::sys::stat::mkdirat(
                &parent,
                name.as_os_str(),
                Mode::from_bits_truncate(node.stat.mode),
            )?;
            Ok(Undone::PutBack)
        }
        Kind::Other => Ok(Undone::Removed),
    }
}

/// The entries of a `hooks` directory (relative paths), at most `room`, not following links.
/// Top-level `*.sample` files are left out: git never runs them.
fn scan(
    dir: &OwnedFd,
    prefix: &Path,
    depth: usize,
    out: &mut BTreeMap<PathBuf, Stat>,
    room: &mut usize,
    watches: &mut Watches,
) {
    let mut bounded = false;
    for name in names(dir, *room, &mut bounded) {
        if *room == 0 {
            return;
        }
        let Ok(Some(stat)) = stat_at(dir, &name) else {
            continue;
        };
        if depth == 0 && stat.kind == Kind::File && name.as_bytes().ends_with(b".sample") {
            continue;
        }
        *room -= 1;
        let rel = prefix.join(&name);
        out.insert(rel.clone(), stat);
        if stat.kind == Kind::Dir
            && depth < MAX_HOOK_DEPTH
            && let Ok(sub) = open_subdir(dir, &name)
        {
            watches.add(&sub, Role::Git);
            scan(&sub, &rel, depth + 1, out, room, watches);
        }
    }
    if bounded {
        *room = 0;
    }
}

/// The path of a `.git` file's `gitdir:` line.
fn gitdir_of(bytes: &[u8]) -> Option<PathBuf> {
    let text = String::from_utf8_lossy(bytes);
    let line = text.lines().next()?;
    let path = line.strip_prefix("gitdir:")?.trim();
    (!path.is_empty()).then(|| PathBuf::from(path))
}

/// `path` with its links resolved; when it does not exist, its longest existing ancestor
/// resolved and the rest taken lexically.
fn resolve(path: &Path) -> PathBuf {
    let path = normalize(path);
    path.ancestors()
        .find_map(|ancestor| {
            let rest = path.strip_prefix(ancestor).ok()?;
            Some(normalize(&ancestor.canonicalize().ok()?.join(rest)))
        })
        .unwrap_or(path)
}

/// `path` with `.` and `..` taken out lexically.
fn normalize(path: &Path) -> PathBuf {
    path.components().fold(PathBuf::new(), |mut out, part| {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
        out
    })
}

// ---------------------------------------------------------------------------------------------
// Which settings a confined command may add or change.

/// The settings of `now` that are new or changed since `before` (`None`: nothing was there,
/// or it could not be read) and not allowed: their indexes in `now`, and why when the value is
/// what is refused.
fn judge(
    before: Option<&Settings>,
    now: &[Setting],
    gitdir: &Path,
    roots: &[PathBuf],
) -> Vec<(usize, Option<&'static str>)> {
    let mut present: HashMap<(&str, Option<&str>), usize> = HashMap::new();
    for (key, value) in before.unwrap_or_default() {
        *present.entry((key.as_str(), value.as_deref())).or_default() += 1;
    }
    let keys: Vec<String> = now.iter().map(Setting::key).collect();
    let mut refused = Vec::new();
    for (index, setting) in now.iter().enumerate() {
        if let Some(count) = present.get_mut(&(keys[index].as_str(), setting.value.as_deref()))
            && *count > 0
        {
            *count -= 1;
            continue;
        }
        if let Err(why) = allowed(setting, gitdir, roots) {
            refused.push((index, why));
        }
    }
    refused
}

/// Whether a confined command may add `setting` (see the list in the module documentation).
/// `Err(Some(why))` when the key is allowed but its value is not.
fn allowed(
    setting: &Setting,
    gitdir: &Path,
    roots: &[PathBuf],
) -> Result<(), Option<&'static str>> {
    let sub = setting.subsection.is_some();
    let value = setting.value.as_deref();
    match (setting.section.as_str(), sub, setting.name.as_str()) {
        (
            "core",
            false,
            "repositoryformatversion"
            | "filemode"
            | "bare"
            | "logallrefupdates"
            | "ignorecase"
            | "precomposeunicode"
            | "symlinks"
            | "autocrlf"
            | "eol"
            | "safecrlf"
            | "sparsecheckout"
            | "sparsecheckoutcone"
            | "quotepath"
            | "untrackedcache",
        ) => Ok(()),
        ("core", false, "worktree") => worktree_inside(value, gitdir, roots),
        ("user" | "author" | "committer", false, "name" | "email") => Ok(()),
        ("remote" | "submodule", true, "url") | ("remote", true, "pushurl") => plain_url(value),
        (
            "remote",
            true,
            "fetch" | "push" | "tagopt" | "prune" | "prunetags" | "mirror" | "promisor"
            | "partialclonefilter" | "skipdefaultupdate" | "skipfetchall",
        ) => Ok(()),
        ("remote", false, "pushdefault") => Ok(()),
        ("branch", true, "remote" | "merge" | "rebase" | "pushremote" | "description") => Ok(()),
        ("branch", false, "autosetupmerge" | "autosetuprebase") => Ok(()),
        ("submodule", true, "update") => match value {
            Some(value) if value.trim_start().starts_with('!') => Err(Some("runs a command")),
            _ => Ok(()),
        },
        (
            "submodule",
            true,
            "active" | "branch" | "fetchrecursesubmodules" | "ignore" | "shallow",
        ) => Ok(()),
        (
            "extensions",
            false,
            "objectformat" | "compatobjectformat" | "worktreeconfig" | "partialclone"
            | "refstorage" | "preciousobjects" | "noop" | "noop-v1",
        ) => Ok(()),
        ("init", false, "defaultbranch")
        | ("pull", false, "rebase" | "ff")
        | ("push", false, "default" | "autosetupremote")
        | ("fetch", false, "prune" | "prunetags")
        | ("gc", false, "auto")
        | ("maintenance", false, "auto" | "strategy")
        | ("lfs", false, "repositoryformatversion")
        | ("lfs", true, "access" | "locksverify") => Ok(()),
        // How git shows and merges: nothing of it runs a program.
        ("advice" | "color", _, _)
        | ("merge", false, "ff" | "conflictstyle")
        | ("rebase", false, "autostash" | "autosquash" | "updaterefs")
        | ("diff", false, "algorithm" | "renames")
        | ("status", false, "showuntrackedfiles") => Ok(()),
        _ => Err(None),
    }
}

/// A remote's URL that runs no program of its own: not an option (`-...`), not a
/// `HELPER::ADDRESS` transport (`ext::` runs any command).
fn plain_url(value: Option<&str>) -> Result<(), Option<&'static str>> {
    let Some(value) = value else {
        return Ok(());
    };
    let value = value.trim_start();
    if value.starts_with('-') {
        return Err(Some("looks like an option"));
    }
    if let Some((scheme, _)) = value.split_once("::")
        && !scheme.is_empty()
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'.' | b'-'))
    {
        return Err(Some("a transport that runs a program"));
    }
    Ok(())
}

/// A `core.worktree` inside a guarded root (relative to the git directory, as git takes it).
fn worktree_inside(
    value: Option<&str>,
    gitdir: &Path,
    roots: &[PathBuf],
) -> Result<(), Option<&'static str>> {
    let outside = Err(Some("outside the writable directories"));
    let Some(value) = value.filter(|value| !value.is_empty() && !value.starts_with('~')) else {
        return outside;
    };
    let resolved = resolve(&gitdir.join(value));
    if roots.iter().any(|root| resolved.starts_with(root)) {
        Ok(())
    } else {
        outside
    }
}
