//! The hooks of a git directory: what is accepted, how a check reads it, and how what it
//! refuses is put back.

use super::*;

/// The accepted `hooks` of a git directory.
#[derive(Debug, Clone, Default)]
pub(super) enum Hooks {
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
pub(super) struct Node {
    pub(super) stat: Stat,
    /// A file's content, when it was small enough to keep.
    pub(super) content: Option<Arc<[u8]>>,
    /// A link's target.
    pub(super) target: Option<OsString>,
}

impl Checker<'_> {
    pub(super) fn hooks(
        &mut self,
        gitdir_fd: &OwnedFd,
        gitdir: &Path,
        old: Option<&Hooks>,
    ) -> Hooks {
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
    pub(super) fn hook_entries(
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
    pub(super) fn node(&mut self, dir: &OwnedFd, rel: &Path, stat: Stat) -> Node {
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
}

/// Put back the accepted `hooks` of a git directory after what replaced it was removed.
pub(super) fn restore_hooks(gitdir: &OwnedFd, old: Option<&Hooks>) -> io::Result<Undone> {
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
pub(super) fn restore_node(dir: &OwnedFd, rel: &Path, node: &Node) -> io::Result<Undone> {
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
pub(super) fn scan(
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
