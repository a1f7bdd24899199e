//! The settings of a git directory's `config` and `config.worktree`: what is accepted, how a
//! check judges what changed, and how a refused config is put back. The allow-list is the
//! table in the module doc of `git_guard`.

use super::*;

/// A config's settings as compared: (normalised key, value).
pub(super) type Settings = [(String, Option<String>)];

/// An accepted config file.
#[derive(Debug, Clone)]
pub(super) struct Config {
    pub(super) stat: Stat,
    /// Where it points, when it is a link.
    pub(super) link: Option<OsString>,
    /// Its content, when it could be kept.
    pub(super) content: Option<Arc<[u8]>>,
    /// Its settings (normalised key, value), when it could be parsed and kept.
    pub(super) settings: Option<Arc<Settings>>,
}

pub(super) fn settings_bytes(settings: &Settings) -> usize {
    settings
        .iter()
        .map(|(key, value)| key.len() + value.as_ref().map_or(0, String::len))
        .sum()
}

impl Checker<'_> {
    /// The accepted state of the config file `name` of a git directory, after refusing and
    /// undoing what changed.
    pub(super) fn config(
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

    pub(super) fn accepted_config(
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
pub(super) struct Repair<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) parsed: &'a [Setting],
    pub(super) refused: &'a [(usize, Option<&'static str>)],
    pub(super) gitdir: &'a Path,
    pub(super) roots: &'a [PathBuf],
}

/// Put a refused config back: its previous content when one was kept; otherwise the file as it
/// is without the refused settings (checked again), or empty.
pub(super) fn put_back_config(
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

/// The settings of `now` that are new or changed since `before` (`None`: nothing was there,
/// or it could not be read) and not allowed: their indexes in `now`, and why when the value is
/// what is refused.
pub(super) fn judge(
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
pub(super) fn allowed(
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
pub(super) fn plain_url(value: Option<&str>) -> Result<(), Option<&'static str>> {
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
pub(super) fn worktree_inside(
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
