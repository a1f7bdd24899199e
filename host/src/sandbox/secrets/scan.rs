//! The content scan: files under a home's configuration trees that hold a secret, found by
//! the rules of `rules.rs`.
//!
//! A scan goes:
//!
//! 1. The cache of the last scan is loaded. The rules are compiled (once per process) at the
//!    first file the cache does not answer.
//! 2. Under each home, the dot-files and dot-directories are walked (`~/.local` only through
//!    `~/.local/share`), without following links to directories, at most [`Limits::max_depth`]
//!    levels deep. Caches, package stores, the paths hidden already and the workspace are
//!    skipped ([`SKIPPED_IN_HOME`], [`SKIPPED_NAMES`], the `skip` paths).
//! 3. Each regular file (or link to one) is stat'ed. A file whose cache entry matches is not
//!    read. Any other file of at most [`Limits::max_file_bytes`] bytes is read and checked,
//!    unless it holds a NUL byte (a binary file).
//! 4. The walk stops after [`Limits::max_files`] files, with a warning.
//! 5. The cache is written when anything changed.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::cache::{CACHE_FILE, Cache, Stamp};
use super::rules::{Rules, version};

/// A file hidden because a rule found a secret in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The file (a link resolved).
    pub path: PathBuf,
    /// The id of the rule that found the secret.
    pub rule: String,
}

/// How far a scan goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Directory levels below a home.
    pub max_depth: usize,
    /// Larger files are not read.
    pub max_file_bytes: u64,
    /// Files looked at across all homes; the walk stops there.
    pub max_files: usize,
}

/// The limits of the host's scan.
pub const LIMITS: Limits = Limits {
    max_depth: 8,
    max_file_bytes: 256 * 1024,
    max_files: 50_000,
};

/// Paths under a home that are not scanned: caches, package and toolchain stores, and shell and
/// editor plugins.
pub const SKIPPED_IN_HOME: &[&str] = &[
    ".cache",
    ".npm",
    ".cargo/registry",
    ".cargo/git",
    ".rustup",
    ".m2/repository",
    ".gradle/caches",
    ".gradle/wrapper",
    ".ivy2",
    ".sbt",
    ".nvm",
    ".pyenv",
    ".rbenv",
    ".gem/ruby",
    ".bun/install",
    ".deno",
    ".yarn/berry/cache",
    ".pnpm-store",
    ".vscode/extensions",
    ".vscode-server",
    ".cursor/extensions",
    ".terraform.d/plugins",
    ".nuget/packages",
    ".dotnet",
    ".julia/packages",
    ".julia/artifacts",
    ".conda/pkgs",
    ".cpan",
    ".opam",
    ".ghcup",
    ".stack",
    ".elan",
    ".sdkman/candidates",
    // Shell, editor and terminal plugins (code and their docs, not the user's settings).
    ".oh-my-zsh",
    ".zinit",
    ".zplug",
    ".antigen",
    ".tmux/plugins",
    ".vim/plugged",
    ".vim/bundle",
    ".vim/pack",
    ".emacs.d/elpa",
    ".emacs.d/straight",
    ".emacs.d/eln-cache",
    ".local/share/nvim/site",
    ".local/share/Trash",
    ".local/share/containers",
    ".local/share/flatpak",
    ".local/share/Steam",
    ".local/share/pnpm",
    ".local/share/uv",
    ".local/share/pipx",
    ".local/share/virtualenvs",
    ".local/share/nvim/lazy",
    ".local/share/JetBrains",
    ".local/share/mise",
];

/// Directories not scanned wherever they are: installed packages, git's object store, and the
/// caches of Electron and Chromium applications under `~/.config`.
pub const SKIPPED_NAMES: &[&str] = &[
    "node_modules",
    "__pycache__",
    "site-packages",
    "dist-packages",
    "objects",
    "lfs",
    "Cache",
    "Code Cache",
    "GPUCache",
    "CachedData",
    "CacheStorage",
    "Crashpad",
];

/// What a scan found and how much it looked at.
#[derive(Debug, Default, Clone)]
pub struct Report {
    /// The files holding a secret.
    pub found: Vec<Finding>,
    /// Files looked at (stat'ed).
    pub files: usize,
    /// Files read (not answered by the cache).
    pub read: usize,
    /// Whether the walk stopped at [`Limits::max_files`].
    pub truncated: bool,
}

/// The compiled rules, built at the first scan of the process.
fn rules() -> Option<&'static Rules> {
    static RULES: OnceLock<Option<Rules>> = OnceLock::new();
    RULES
        .get_or_init(|| match Rules::new() {
            Ok(rules) => Some(rules),
            Err(error) => {
                tracing::error!(%error, "the secret scan has no rules: no file is scanned");
                None
            }
        })
        .as_ref()
}

/// Scans the configuration trees of `homes` (canonical), except the `skip` paths
/// (canonical), with the cache in `cache_dir`.
pub fn scan(
    homes: &[PathBuf],
    skip: &[PathBuf],
    cache_dir: Option<&Path>,
    limits: &Limits,
) -> Report {
    let began = std::time::Instant::now();
    let mut report = Report::default();
    // 1. The cache; the rules are compiled at the first file the cache does not answer.
    let mut cache = Cache::load(cache_dir.map(|dir| dir.join(CACHE_FILE)), version());
    let mut walk = Walk {
        rules: None,
        cache: &mut cache,
        skip,
        limits,
        report: &mut report,
    };
    for home in homes {
        walk.home(home);
    }
    if report.truncated {
        tracing::warn!(
            files = limits.max_files,
            "the secret scan stopped after its most files: files past them are not scanned"
        );
    }
    // 5. The cache, when anything changed.
    if let Err(error) = cache.save() {
        tracing::warn!(%error, "the secret scan runs again in full next time");
    }
    tracing::debug!(
        files = report.files,
        read = report.read,
        found = report.found.len(),
        elapsed = ?began.elapsed(),
        "secret scan"
    );
    report
}

struct Walk<'a> {
    /// The rules, once a file needed them (`Some(None)`: they do not compile).
    rules: Option<Option<&'static Rules>>,
    cache: &'a mut Cache,
    skip: &'a [PathBuf],
    limits: &'a Limits,
    report: &'a mut Report,
}

impl Walk<'_> {
    /// 2. The dot-entries of `home`.
    fn home(&mut self, home: &Path) {
        // A skip path that holds the home (a workspace of `~` or `/`) does not skip it. The
        // walk starts at the home and follows no link to a directory, so it meets each skipped
        // path under the home by that exact name before anything below it.
        let skipped: HashSet<PathBuf> = SKIPPED_IN_HOME
            .iter()
            .map(|name| home.join(name))
            .chain(
                self.skip
                    .iter()
                    .filter(|skip| !home.starts_with(skip))
                    .cloned(),
            )
            .collect();
        let local = home.join(".local");
        let mut stack: Vec<(PathBuf, usize)> = Vec::new();
        for entry in sorted_entries(home) {
            let is_dot = entry
                .file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with('.'));
            if !is_dot {
                continue;
            }
            if entry == local {
                stack.push((local.join("share"), 2));
            } else {
                self.entry(&entry, 1, &skipped, &mut stack);
            }
        }
        while let Some((dir, depth)) = stack.pop() {
            if self.report.truncated {
                return;
            }
            if self.skipped(&dir, &skipped) {
                continue;
            }
            for entry in sorted_entries(&dir).into_iter().rev() {
                self.entry(&entry, depth + 1, &skipped, &mut stack);
            }
        }
    }

    fn skipped(&self, path: &Path, skipped: &HashSet<PathBuf>) -> bool {
        skipped.contains(path)
    }

    /// A directory entry at `depth` below the home: a directory to walk, or a file to check.
    fn entry(
        &mut self,
        path: &Path,
        depth: usize,
        skipped: &HashSet<PathBuf>,
        stack: &mut Vec<(PathBuf, usize)>,
    ) {
        if self.report.truncated || self.skipped(path, skipped) {
            return;
        }
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            return;
        };
        if meta.is_dir() {
            let name = path
                .file_name()
                .and_then(|name| name.to_str())
                .unwrap_or("");
            if depth < self.limits.max_depth && !SKIPPED_NAMES.contains(&name) {
                stack.push((path.to_path_buf(), depth));
            }
            return;
        }
        // A link counts for the regular file it points to (dotfile managers link them).
        let meta = if meta.file_type().is_symlink() {
            match std::fs::metadata(path) {
                Ok(target) => target,
                Err(_) => return,
            }
        } else {
            meta
        };
        if meta.is_file() {
            self.file(path, &meta);
        }
    }

    /// 3. A regular file: from the cache, else read and checked.
    fn file(&mut self, path: &Path, meta: &std::fs::Metadata) {
        // 4. The bound on files.
        if self.report.files >= self.limits.max_files {
            self.report.truncated = true;
            return;
        }
        self.report.files += 1;
        if meta.len() == 0 || meta.len() > self.limits.max_file_bytes {
            return;
        }
        let stamp = Stamp::of(meta);
        let rule = match self.cache.lookup(path, &stamp) {
            Some(rule) => rule,
            None => {
                let Some(rules) = *self.rules.get_or_insert_with(rules) else {
                    return;
                };
                self.report.read += 1;
                read(path, self.limits.max_file_bytes)
                    .and_then(|content| rules.find(&content).map(str::to_owned))
            }
        };
        self.cache.record(path, stamp, rule.clone());
        if let Some(rule) = rule {
            let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
            tracing::debug!(path = %path.display(), rule, "a file holds a secret");
            self.report.found.push(Finding { path, rule });
        }
    }
}

/// The entries of `dir`, sorted (none when it cannot be read).
fn sorted_entries(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries.flatten().map(|entry| entry.path()).collect();
    paths.sort();
    paths
}

/// The content of the file at `path` when it has at most `max` bytes and no NUL byte (see
/// [`super::read_capped`]: a FIFO put there since the stat does not hang the scan).
fn read(path: &Path, max: u64) -> Option<Vec<u8>> {
    super::read_capped(path, max)
        .ok()
        .flatten()
        .filter(|content| memchr::memchr(0, content).is_none())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, content: &str) {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("dir");
        std::fs::write(path, content).expect("write");
    }

    #[test]
    fn files_with_secrets_under_the_configuration_trees_are_found() {
        let dir = tempfile::tempdir().expect("dir");
        let home = dir.path().canonicalize().expect("home").join("home");
        let state = dir.path().canonicalize().expect("state").join("state");
        let token = "ghp_8uMRqXGZ0dJYkWbTq2vLc4NfE7hA1sPx9KoY";
        write(
            &home.join(".config/mytool/creds.json"),
            &format!("{{\"token\": \"{token}\"}}"),
        );
        write(
            &home.join(".config/other/app.ini"),
            "[db]\npassword = hunter2xyz\n",
        );
        write(&home.join(".local/share/app/auth"), &format!("{token}\n"));
        write(&home.join(".config/ok.toml"), "token_limit = 5\n");
        // Skipped: not a dot-entry, a cache, installed packages, a skipped path, too deep.
        write(&home.join("project/creds.json"), &format!("{token}\n"));
        write(&home.join(".cache/tool/creds"), &format!("{token}\n"));
        write(
            &home.join(".config/x/node_modules/p/creds"),
            &format!("{token}\n"),
        );
        write(&home.join(".config/skipped/creds"), &format!("{token}\n"));
        write(
            &home.join(".config/a/b/c/d/e/f/g/h/creds"),
            &format!("{token}\n"),
        );
        write(&home.join(".local/state/creds"), &format!("{token}\n"));
        // A binary file is not read.
        std::fs::write(home.join(".config/bin"), [token.as_bytes(), b"\0"].concat()).expect("bin");
        // The workspace's parent holds the home: it skips nothing.
        let skip = [
            home.join(".config/skipped"),
            dir.path().canonicalize().expect("dir"),
        ];
        let report = scan(std::slice::from_ref(&home), &skip, Some(&state), &LIMITS);
        let mut found: Vec<(PathBuf, String)> = report
            .found
            .iter()
            .map(|finding| (finding.path.clone(), finding.rule.clone()))
            .collect();
        found.sort();
        assert_eq!(
            found,
            [
                (
                    home.join(".config/mytool/creds.json"),
                    "github-pat".to_owned()
                ),
                (
                    home.join(".config/other/app.ini"),
                    "secret-key-value".to_owned()
                ),
                (home.join(".local/share/app/auth"), "github-pat".to_owned()),
            ]
        );
        assert!(!report.truncated);
        // Warm: nothing read again; a file changed after caching is read again.
        let warm = scan(std::slice::from_ref(&home), &skip, Some(&state), &LIMITS);
        assert_eq!(warm.found.len(), 3);
        assert_eq!(warm.read, 0);
        write(
            &home.join(".config/ok.toml"),
            "api_key = \"abcd1234efgh\"\n",
        );
        let changed = scan(std::slice::from_ref(&home), &skip, Some(&state), &LIMITS);
        assert_eq!(changed.read, 1);
        assert!(
            changed
                .found
                .iter()
                .any(|finding| finding.path == home.join(".config/ok.toml"))
        );
        // The bound on files stops the walk.
        let few = Limits {
            max_files: 2,
            ..LIMITS
        };
        let truncated = scan(std::slice::from_ref(&home), &skip, None, &few);
        assert!(truncated.truncated);
        assert_eq!(truncated.files, 2);
    }
}
