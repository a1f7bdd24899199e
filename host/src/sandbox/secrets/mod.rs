//! What confinement keeps from commands: the user's credential stores (hidden paths) and the
//! host variables that hold secrets.
//!
//! The hidden paths of a host are worked out once, when its process manager starts:
//!
//! 1. The home directories are `$HOME` and the home of the host user's passwd entry. Either one
//!    counts when it is absolute and not `/`. When neither does, the host says so once.
//! 2. Under each home, the credential stores of [`HIDDEN_IN_HOME`] are hidden.
//! 3. The user's runtime directories are hidden (`$XDG_RUNTIME_DIR`, `/run/user/UID`).
//! 4. Unless the operator turned it off, the content scan (`scan.rs`) looks for files that
//!    hold a secret under each home's configuration trees; the files it finds are hidden too.
//! 5. Copies of these and of the `--hide` paths are added (`copies.rs`): backups beside them,
//!    and git directories under a home whose index tracks one.
//! 6. The operator's `--reveal` paths are taken out; its `--hide` paths are added.
//!
//! The system's password hashes ([`HIDDEN_SYSTEM_FILES`]) are hidden apart: only by a mount in
//! the namespaces layer. A Landlock rule would have to freeze `/etc` at the session's start.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use super::canonical;
use super::{SandboxMode, SandboxSettings};

mod cache;
mod copies;
pub mod rules;
pub mod scan;
mod variables;

pub use scan::Finding;
pub(crate) use variables::is_secret_variable_remembered;
pub use variables::{is_secret_variable, redact};

/// The bytes of the regular file at `path` when it holds at most `max` of them (`Ok(None)`:
/// more). It is opened without blocking: a FIFO or device put where a file was expected never
/// hangs the host (`InvalidInput`: not a regular file).
pub(crate) fn read_capped(path: &Path, max: u64) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let mut content = Vec::new();
    file.take(max.saturating_add(1)).read_to_end(&mut content)?;
    Ok((content.len() as u64 <= max).then_some(content))
}

/// Credential stores under a home directory, hidden from every confined command.
pub const HIDDEN_IN_HOME: &[&str] = &[
    // Keys and agents.
    ".ssh",
    ".gnupg",
    ".password-store",
    ".local/share/keyrings",
    ".local/share/kwalletd",
    // Cloud tools.
    ".aws",
    ".azure",
    ".config/gcloud",
    ".oci",
    ".boto",
    ".s3cfg",
    ".config/doctl",
    ".config/hcloud",
    ".config/openstack",
    ".config/rclone",
    ".config/scw",
    ".config/linode-cli",
    ".config/exoscale",
    ".aliyun",
    ".bluemix",
    ".pulumi/credentials.json",
    ".databrickscfg",
    ".snowflake",
    ".fly/config.yml",
    ".config/netlify",
    ".config/vercel",
    ".local/share/com.vercel.cli",
    ".wrangler",
    ".config/.wrangler",
    ".terraform.d/credentials.tfrc.json",
    ".terraformrc",
    // Cluster tools.
    ".kube",
    ".config/helm/repositories.yaml",
    ".config/helm/registry",
    ".minikube",
    ".talos",
    ".tsh",
    // Containers.
    ".docker",
    ".config/containers/auth.json",
    // Secret management.
    ".vault-token",
    ".config/sops/age/keys.txt",
    ".config/op",
    ".config/Bitwarden CLI",
    ".config/doppler",
    ".config/infisical",
    ".infisical",
    // Source hosting.
    ".netrc",
    ".git-credentials",
    ".config/git/credentials",
    ".config/gh",
    ".config/hub",
    ".config/glab-cli",
    ".config/tea",
    // Package managers and registries.
    ".npmrc",
    ".yarnrc",
    ".yarnrc.yml",
    ".bunfig.toml",
    ".pypirc",
    ".config/pypoetry/auth.toml",
    ".local/share/python_keyring",
    ".local/share/uv/credentials",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".gem/credentials",
    ".local/share/gem/credentials",
    ".m2/settings.xml",
    ".m2/settings-security.xml",
    ".gradle/gradle.properties",
    ".ivy2/.credentials",
    ".sbt/credentials",
    ".composer/auth.json",
    ".config/composer/auth.json",
    ".pub-cache/credentials.json",
    ".config/dart/pub-credentials.json",
    ".hex/hex.config",
    ".mix/hex.config",
    ".config/jfrog",
    ".jfrog",
    ".conan2/credentials.json",
    // AI agents' and model hubs' logins.
    ".codex/auth.json",
    ".claude/.credentials.json",
    ".claude.json",
    ".gemini/oauth_creds.json",
    ".gemini/google_accounts.json",
    ".config/github-copilot/hosts.json",
    ".config/github-copilot/apps.json",
    ".config/github-copilot/oauth.json",
    ".continue/config.json",
    ".continue/config.yaml",
    ".cursor/mcp.json",
    ".codeium/config.json",
    ".config/goose/secrets.yaml",
    ".local/share/opencode/auth.json",
    ".cache/huggingface/token",
    ".cache/huggingface/stored_tokens",
    ".huggingface/token",
    ".ollama/id_ed25519",
    ".kaggle/kaggle.json",
    // Databases.
    ".pgpass",
    ".my.cnf",
    ".mylogin.cnf",
    ".mongoshrc.js",
    ".dbshell",
    ".sqlplus_history",
    ".redisclirc",
    ".clickhouse-client",
    // Mail and chat tools.
    ".thunderbird",
    ".mutt",
    ".muttrc",
    ".config/mutt",
    ".msmtprc",
    ".config/msmtp",
    ".mbsyncrc",
    ".config/isync",
    ".offlineimaprc",
    ".fetchmailrc",
    ".config/aerc/accounts.conf",
    ".config/himalaya",
    ".config/neomutt",
    ".config/Slack",
    ".config/discord",
    ".config/Signal",
    ".config/Element",
    ".local/share/TelegramDesktop",
    ".weechat",
    ".config/weechat",
    ".irssi",
    ".config/hexchat",
    ".purple",
    // Browsers (cookies, saved passwords).
    ".mozilla",
    ".config/google-chrome",
    ".config/chromium",
    ".config/BraveSoftware",
    ".config/microsoft-edge",
    ".config/vivaldi",
    // Shell and REPL histories (commands typed with secrets in them).
    ".bash_history",
    ".zsh_history",
    ".local/share/fish/fish_history",
    ".python_history",
    ".node_repl_history",
    ".psql_history",
    ".mysql_history",
    ".rediscli_history",
    ".sqlite_history",
    ".local/share/atuin",
];

/// The system's password hashes, hidden by a mount in the namespaces layer.
pub const HIDDEN_SYSTEM_FILES: &[&str] = &[
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/shadow-",
    "/etc/gshadow-",
];

/// The home directories whose credential stores are hidden.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Homes {
    /// `$HOME`, when it is absolute and not `/`.
    pub from_environment: Option<PathBuf>,
    /// The home of the host user's passwd entry, when it is absolute and not `/`.
    pub from_passwd: Option<PathBuf>,
}

impl Homes {
    /// The homes of the host's user, from its environment and its passwd entry.
    pub fn of_this_user() -> Homes {
        let usable = |path: &PathBuf| path.is_absolute() && path != Path::new("/");
        let from_environment = std::env::var_os("HOME").map(PathBuf::from).filter(usable);
        let from_passwd = nix::unistd::User::from_uid(nix::unistd::getuid())
            .ok()
            .flatten()
            .map(|user| user.dir)
            .filter(usable);
        Homes {
            from_environment,
            from_passwd,
        }
    }

    /// Each home once (a link resolved: the same home by two names counts once).
    pub fn distinct(&self) -> Vec<PathBuf> {
        let mut homes: Vec<PathBuf> = Vec::new();
        for home in self.from_environment.iter().chain(&self.from_passwd) {
            let home = canonical(home);
            if !homes.contains(&home) {
                homes.push(home);
            }
        }
        homes
    }
}

/// The paths no confined command of a host may reach, as the operator's flags make them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HiddenPaths {
    /// Hidden by every layer (mount covers where they are directories, Landlock always).
    pub paths: Vec<PathBuf>,
    /// The system's password hashes that this user can read, hidden by a mount in the
    /// namespaces layer only.
    pub system_files: Vec<PathBuf>,
    /// The home directories whose credential stores are hidden (none: nothing home-relative
    /// is hidden).
    pub homes: Vec<PathBuf>,
    /// The files the content scan found, each with the rule that found it (each is in
    /// `paths` too).
    pub found: Vec<Finding>,
    /// How much the content scan looked at (none: it did not run).
    pub scanned: Option<Scanned>,
}

/// How much the content scan looked at.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Scanned {
    /// Files looked at.
    pub files: usize,
    /// Whether it stopped at its most files.
    pub truncated: bool,
}

/// Whether and where the content scan runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanSettings {
    /// `--secret-scan on` (the default).
    pub enabled: bool,
    /// Where the scan's cache is kept (the host's state directory; none: no cache).
    pub cache_dir: Option<PathBuf>,
    /// Paths the scan skips besides caches: the workspace and the host's own files.
    pub skip: Vec<PathBuf>,
}

/// A `--reveal` path that cannot be revealed.
#[derive(Debug, thiserror::Error)]
pub enum NotHidden {
    /// The path is not hidden by default.
    #[error(
        "--reveal {0} is not one of the paths hidden by default nor a file the content scan found \
         (`toolhost sandbox` lists them)"
    )]
    NotByDefault(PathBuf),
    /// The path is a runtime directory: its session bus starts anything unconfined.
    #[error(
        "--reveal {0} is refused: the user's runtime directory holds the session bus, through \
         which a command could start anything unconfined (`systemd-run --user`)"
    )]
    Runtime(PathBuf),
}

impl HiddenPaths {
    /// The paths hidden from a host's confined commands (see `sandbox/secrets/`), with what the
    /// content scan finds (its cache in `state_dir`, skipping the `skip` paths), said once where no
    /// home directory resolves or a `--reveal` path is not hidden by default.
    pub(crate) fn for_host(
        settings: &SandboxSettings,
        state_dir: Option<&Path>,
        skip: Vec<PathBuf>,
    ) -> HiddenPaths {
        let scan = ScanSettings {
            enabled: settings.secret_scan && settings.mode != SandboxMode::Off,
            cache_dir: state_dir.map(Path::to_path_buf),
            skip,
        };
        let hidden = Self::of_this_user_scanned(&settings.hide, &settings.reveal, &scan)
            .unwrap_or_else(|error| {
                tracing::warn!("{error}: ignored, nothing is revealed");
                Self::of_this_user_scanned(&settings.hide, &[], &scan).unwrap_or_default()
            });
        if hidden.homes.is_empty() && settings.mode != SandboxMode::Off {
            tracing::warn!(
                "no home directory resolves ($HOME is unset, relative or /, and the user has no \
                 passwd entry with one): the credential stores under a home (~/.ssh, ~/.aws, ...) \
                 are not hidden from confined commands; set HOME or pass --hide"
            );
        }
        if settings.mode != SandboxMode::Off {
            for home in hidden.homes.iter().filter(|home| home.starts_with("/tmp")) {
                tracing::warn!(
                    home = %home.display(),
                    "a home directory under /tmp: a credential store made in it after the \
                     session started is hidden from the commands that start after it appears, not \
                     from those already running"
                );
            }
        }
        hidden
    }

    /// The hidden paths of this host's user, with the operator's `hide` and `reveal`.
    pub fn of_this_user(hide: &[PathBuf], reveal: &[PathBuf]) -> Result<HiddenPaths, NotHidden> {
        HiddenPaths::new(&Homes::of_this_user(), &runtime_dirs(), hide, reveal)
    }

    /// The hidden paths of this host's user with what the content scan finds, as `scan` says.
    pub fn of_this_user_scanned(
        hide: &[PathBuf],
        reveal: &[PathBuf],
        scan: &ScanSettings,
    ) -> Result<HiddenPaths, NotHidden> {
        let homes = Homes::of_this_user();
        let runtime = runtime_dirs();
        let mut scanned = None;
        let found = if scan.enabled {
            // The listed stores are hidden whole: the scan need not look inside them.
            let distinct = homes.distinct();
            let skip: Vec<PathBuf> = listed(&distinct, &runtime)
                .into_iter()
                .chain(scan.skip.iter().map(|path| canonical(path)))
                .collect();
            let report = scan::scan(&distinct, &skip, scan.cache_dir.as_deref(), &scan::LIMITS);
            scanned = Some(Scanned {
                files: report.files,
                truncated: report.truncated,
            });
            report.found
        } else {
            Vec::new()
        };
        let mut hidden = HiddenPaths::with_found(&homes, &runtime, found, hide, reveal)?;
        hidden.scanned = scanned;
        Ok(hidden)
    }

    /// The defaults for `homes` and `runtime_dirs`, with `hide` added and `reveal` taken out.
    ///
    /// A `reveal` path must be one of the defaults (the host's own files are never among them).
    pub fn new(
        homes: &Homes,
        runtime_dirs: &[PathBuf],
        hide: &[PathBuf],
        reveal: &[PathBuf],
    ) -> Result<HiddenPaths, NotHidden> {
        HiddenPaths::with_found(homes, runtime_dirs, Vec::new(), hide, reveal)
    }

    /// As [`HiddenPaths::new`], with the files the content scan `found` hidden too (a `reveal`
    /// path may be one of them).
    pub fn with_found(
        homes: &Homes,
        runtime_dirs: &[PathBuf],
        mut found: Vec<Finding>,
        hide: &[PathBuf],
        reveal: &[PathBuf],
    ) -> Result<HiddenPaths, NotHidden> {
        let homes = homes.distinct();
        let mut paths = listed(&homes, runtime_dirs);
        let mut seen: HashSet<PathBuf> = paths.iter().cloned().collect();
        let mut push = |path: PathBuf, paths: &mut Vec<PathBuf>| {
            if seen.insert(path.clone()) {
                paths.push(path);
            }
        };
        for finding in &found {
            push(finding.path.clone(), &mut paths);
        }
        // Copies of the hidden and the `hide` paths (`copies.rs`); `reveal` may take one out.
        let originals: Vec<PathBuf> = paths
            .iter()
            .cloned()
            .chain(hide.iter().map(|p| canonical(p)))
            .collect();
        for path in copies::of(&homes, &originals) {
            push(path, &mut paths);
        }
        let mut system_files: Vec<PathBuf> = HIDDEN_SYSTEM_FILES
            .iter()
            .map(PathBuf::from)
            // Only what this user can read needs hiding (a root host, or the `shadow` group).
            .filter(|path| std::fs::File::open(path).is_ok())
            // Resolved: the mount covers the file itself, never a link to it.
            .map(|path| canonical(&path))
            .collect();
        for path in reveal {
            let path = canonical(path);
            // The session bus there starts anything unconfined (`systemd-run --user`).
            if runtime_dirs.iter().any(|dir| canonical(dir) == path) {
                return Err(NotHidden::Runtime(path));
            }
            let before = paths.len() + system_files.len();
            paths.retain(|hidden| *hidden != path);
            system_files.retain(|hidden| *hidden != path);
            found.retain(|finding| finding.path != path);
            if paths.len() + system_files.len() == before {
                return Err(NotHidden::NotByDefault(path));
            }
        }
        for path in hide {
            push(canonical(path), &mut paths);
        }
        Ok(HiddenPaths {
            paths,
            system_files,
            homes,
            found,
            scanned: None,
        })
    }

    /// The rule of the content scan that hid `path`, if the scan hid it.
    pub fn rule_of(&self, path: &Path) -> Option<&str> {
        self.found
            .iter()
            .find(|finding| finding.path == path)
            .map(|finding| finding.rule.as_str())
    }

    /// What `toolhost sandbox` prints: every hidden path, and what hides the system files
    /// (`namespaces`: whether the namespaces layer works here).
    pub fn report(&self, namespaces: bool) -> String {
        use std::fmt::Write;
        let mut out = String::from(
            "Hidden from confined commands (besides the host's own files; --hide adds, --reveal \
             takes out):\n",
        );
        if self.homes.is_empty() {
            out.push_str(
                "  WARNING: no home directory resolves ($HOME unset, relative or /, and no passwd \
                 entry with one): nothing under a home is hidden\n",
            );
        }
        for path in &self.paths {
            match self.rule_of(path) {
                Some(rule) => {
                    let _ = writeln!(
                        out,
                        "  {} (found by the content scan: rule {rule})",
                        path.display()
                    );
                }
                None => {
                    let _ = writeln!(out, "  {}", path.display());
                }
            }
        }
        for path in &self.system_files {
            if namespaces {
                let _ = writeln!(out, "  {} (covered in the mount namespace)", path.display());
            } else {
                let _ = writeln!(
                    out,
                    "  {} NOT hidden: without namespaces only a Landlock rule could, and it \
                     would freeze /etc",
                    path.display()
                );
            }
        }
        match self.scanned {
            Some(scanned) => {
                let _ = writeln!(
                    out,
                    "Content scan (--secret-scan on): {} files of the homes' configuration trees \
                     looked at{}, {} found holding a secret (listed above with their rule)",
                    scanned.files,
                    if scanned.truncated {
                        " (stopped at its most: the rest NOT scanned)"
                    } else {
                        ""
                    },
                    self.found.len()
                );
            }
            None => out.push_str("Content scan: off\n"),
        }
        out
    }

    /// The hidden path that `text` names, if any: a failed command's output that names one
    /// failed on it. Paths are looked for as written by the host (absolute) and, under a home,
    /// as `~/NAME` and `$HOME/NAME`. Of several, the longest: `~/.config/ghost/creds` rather
    /// than `~/.config/gh`, whose name it starts with.
    pub fn named_in(&self, text: &str) -> Option<PathBuf> {
        self.paths
            .iter()
            .chain(&self.system_files)
            .filter(|path| {
                let absolute = path.to_string_lossy();
                text.contains(absolute.as_ref())
                    || self.homes.iter().any(|home| {
                        path.strip_prefix(home).is_ok_and(|relative| {
                            let relative = relative.to_string_lossy();
                            text.contains(&format!("~/{relative}"))
                                || text.contains(&format!("$HOME/{relative}"))
                        })
                    })
            })
            .max_by_key(|path| path.as_os_str().len())
            .cloned()
    }
}

/// The listed stores under each of `homes` (distinct) and the `runtime_dirs`, resolved (a
/// `~/.ssh` that is a link hides where it points), each once.
fn listed(homes: &[PathBuf], runtime_dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = Vec::new();
    let mut seen = HashSet::new();
    let stores = homes
        .iter()
        .flat_map(|home| HIDDEN_IN_HOME.iter().map(move |name| home.join(name)));
    for path in stores.chain(runtime_dirs.iter().cloned()) {
        let path = canonical(&path);
        if seen.insert(path.clone()) {
            paths.push(path);
        }
    }
    paths
}

/// The user's runtime directories: `$XDG_RUNTIME_DIR` and `/run/user/UID`. They hold the
/// sockets of the session bus (`systemd-run --user` starts anything unconfined through it),
/// agents (gpg, ssh) and the desktop.
pub fn runtime_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|dir| dir.is_absolute() && dir.as_path() != Path::new("/"))
        .into_iter()
        .collect();
    dirs.push(PathBuf::from(format!(
        "/run/user/{}",
        rustix::process::getuid().as_raw()
    )));
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn homes_from_the_environment_and_passwd_count_once_each() {
        let dir = tempfile::tempdir().expect("dir");
        let home = dir.path().to_path_buf();
        let both = Homes {
            from_environment: Some(home.clone()),
            from_passwd: Some(home.clone()),
        };
        assert_eq!(both.distinct().len(), 1);
        let none = Homes::default();
        let hidden = HiddenPaths::new(&none, &[], &[], &[]).expect("hidden");
        assert!(hidden.homes.is_empty());
        assert!(hidden.paths.is_empty());
    }

    #[test]
    fn the_operator_adds_and_reveals_hidden_paths() {
        let dir = tempfile::tempdir().expect("dir");
        let home = dir.path().canonicalize().expect("home");
        let homes = Homes {
            from_environment: Some(home.clone()),
            from_passwd: None,
        };
        let extra = home.join("private");
        let hidden = HiddenPaths::new(
            &homes,
            &[],
            std::slice::from_ref(&extra),
            &[home.join(".npmrc")],
        )
        .expect("hidden");
        assert!(hidden.paths.contains(&home.join(".ssh")));
        assert!(hidden.paths.contains(&home.join(".config/gh")));
        assert!(hidden.paths.contains(&extra));
        assert!(!hidden.paths.contains(&home.join(".npmrc")));
        assert_eq!(hidden.homes, std::slice::from_ref(&home));
        let not_hidden = HiddenPaths::new(&homes, &[], &[], &[home.join("project")]);
        assert!(matches!(not_hidden, Err(NotHidden::NotByDefault(_))));
        let runtime = home.join("run");
        let bus = HiddenPaths::new(
            &homes,
            std::slice::from_ref(&runtime),
            &[],
            std::slice::from_ref(&runtime),
        );
        assert!(matches!(bus, Err(NotHidden::Runtime(_))));
        assert_eq!(
            hidden.named_in("cat: ~/.ssh/id_rsa: Permission denied"),
            Some(home.join(".ssh"))
        );
        let absolute = format!("cat: {}/.pgpass: Permission denied", home.display());
        assert_eq!(hidden.named_in(&absolute), Some(home.join(".pgpass")));
        assert_eq!(hidden.named_in("cat: notes.txt: Permission denied"), None);
    }

    #[test]
    fn files_the_scan_found_are_hidden_named_with_their_rule_and_revealed() {
        let dir = tempfile::tempdir().expect("dir");
        let home = dir.path().canonicalize().expect("home");
        let homes = Homes {
            from_environment: Some(home.clone()),
            from_passwd: None,
        };
        let creds = home.join(".config/mytool/creds.json");
        let found = vec![Finding {
            path: creds.clone(),
            rule: "github-pat".to_owned(),
        }];
        let hidden = HiddenPaths::with_found(&homes, &[], found.clone(), &[], &[]).expect("hidden");
        assert!(hidden.paths.contains(&creds));
        assert_eq!(hidden.rule_of(&creds), Some("github-pat"));
        assert_eq!(hidden.rule_of(&home.join(".ssh")), None);
        assert_eq!(
            hidden.named_in("cat: ~/.config/mytool/creds.json: Permission denied"),
            Some(creds.clone())
        );
        assert!(
            hidden.report(true).contains(&format!(
                "  {} (found by the content scan: rule github-pat)\n",
                creds.display()
            )),
            "{}",
            hidden.report(true)
        );
        // A finding whose name starts with a listed path's is named, not the listed path.
        let ghost = home.join(".config/ghost/token.json");
        let both = HiddenPaths::with_found(
            &homes,
            &[],
            vec![Finding {
                path: ghost.clone(),
                rule: "github-pat".to_owned(),
            }],
            &[],
            &[],
        )
        .expect("hidden");
        assert_eq!(
            both.named_in(&format!("cat: {}: Permission denied", ghost.display())),
            Some(ghost)
        );
        // --reveal of a finding is accepted and takes it out.
        let revealed =
            HiddenPaths::with_found(&homes, &[], found, &[], std::slice::from_ref(&creds))
                .expect("a finding can be revealed");
        assert!(!revealed.paths.contains(&creds));
        assert!(revealed.found.is_empty());
        // Without the finding, the same --reveal is refused.
        let refused = HiddenPaths::with_found(&homes, &[], Vec::new(), &[], &[creds]);
        assert!(matches!(refused, Err(NotHidden::NotByDefault(_))));
    }
}
