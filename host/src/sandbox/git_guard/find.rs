//! Finding the git directories of the guarded roots: `.git` at the top of each root and of
//! each directory directly in one, the `.git` files and links and `commondir` files on the way
//! (followed only where they stay inside a guarded root), and the submodules beneath.

use super::*;
use crate::sandbox::normalize;

impl Checker<'_> {
    /// The git directories of the roots (at most [`MAX_GIT_DIRS`]), checking the `.git` files
    /// and links and the `commondir` files on the way.
    pub(super) fn discover(
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
    pub(super) fn dot_git(
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
    pub(super) fn pointer(
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
    pub(super) fn modules(
        &mut self,
        dir: &OwnedFd,
        path: &Path,
        depth: usize,
        queue: &mut VecDeque<PathBuf>,
    ) {
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
}

/// The path of a `.git` file's `gitdir:` line.
pub(super) fn gitdir_of(bytes: &[u8]) -> Option<PathBuf> {
    let text = String::from_utf8_lossy(bytes);
    let line = text.lines().next()?;
    let path = line.strip_prefix("gitdir:")?.trim();
    (!path.is_empty()).then(|| PathBuf::from(path))
}

/// `path` with its links resolved; when it does not exist, its longest existing ancestor
/// resolved and the rest taken lexically.
pub(super) fn resolve(path: &Path) -> PathBuf {
    let path = normalize(path);
    path.ancestors()
        .find_map(|ancestor| {
            let rest = path.strip_prefix(ancestor).ok()?;
            Some(normalize(&ancestor.canonicalize().ok()?.join(rest)))
        })
        .unwrap_or(path)
}
