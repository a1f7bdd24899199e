//! What a scope's confined commands share: the layers built once per scope and profile
//! ([`Prepared`]), and the scope's private temporary directory ([`ScopeSandbox`]).

use crate::lock;
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::landlock::{self, LandlockError, Plan};
use super::namespaces::{self, NamespaceError, NamespaceKind, Namespaces, TmpView};
use super::network::{AllowList, Gate};
use super::probe;
use super::seccomp::{self, SeccompError};
use super::secrets::HiddenPaths;
use super::{Network, ParentCgroups, Profile, SandboxMode, canonical};
use toolhost_keeper_protocol::option;

/// Most profiles one scope may use (each holds its namespaces and layers until the scope ends).
const MAX_PROFILES: usize = 16;

/// Package managers' caches under the home directory, writable in `workspace-write` when they
/// exist.
const CACHES_IN_HOME: &[&str] = &[
    ".cache",
    ".cargo/registry",
    ".cargo/git",
    ".npm",
    ".yarn",
    ".pnpm-store",
    ".local/share/pnpm",
    ".bun/install/cache",
    ".m2/repository",
    ".gradle/caches",
    "go/pkg/mod",
];

/// Why a profile cannot be enforced.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PrepareError {
    /// A layer the profile needs is missing from this kernel.
    #[error(
        "the `{profile}` sandbox cannot be enforced here: {missing}. Run with `--sandbox off` to \
         run commands unconfined (see `toolhost sandbox`)"
    )]
    Missing {
        /// The profile's mode.
        profile: SandboxMode,
        /// What is missing.
        missing: String,
    },
    /// A writable root is `/`: nothing would be confined.
    #[error(
        "the `workspace-write` sandbox would make all of `/` writable (the workspace or a \
         --writable directory is `/`); pass --workdir with a project directory, or use \
         `--sandbox read-only`"
    )]
    RootWritable,
    /// Landlock refused.
    #[error(transparent)]
    Landlock(#[from] LandlockError),
    /// The seccomp filter could not be built.
    #[error(transparent)]
    Seccomp(#[from] SeccompError),
    /// The scope uses too many profiles already (each holds namespaces and descriptors).
    #[error(
        "this session already runs commands under {MAX_PROFILES} different sandbox profiles; a \
         policy asking for yet another confinement is refused (reuse one of the earlier ones)"
    )]
    TooManyProfiles,
    /// The namespaces layer worked on this machine but not for this profile (e.g. a command of
    /// the session spoiled a place the view needs): refused rather than confined less.
    #[error(
        "cannot confine this command: {0}. It is refused rather than run with fewer layers \
         (`toolhost sandbox` shows what this machine supports; TOOLHOST_SANDBOX_DISABLE=namespaces \
         does without the namespaces layer)"
    )]
    Namespaces(NamespaceError),
    /// The private temporary directory could not be made.
    #[error("cannot create the scope's temporary directory: {0}")]
    TempDir(std::io::Error),
    /// Building this profile failed moments ago in this scope: not tried again yet.
    #[error(
        "{reason} (the same failure {} s ago in this session; it is retried {} s after a \
         failure)",
        ago.as_secs(),
        RETRY_AFTER.as_secs()
    )]
    Recent {
        /// Why it failed.
        reason: String,
        /// How long ago.
        ago: Duration,
    },
}

/// How long a profile that failed to build is not tried again in a scope: starts that come
/// meanwhile get the failure at once instead of each waiting for it anew (a namespace helper
/// stuck on a mount takes its whole timeout).
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// Where confined commands of a host may write and what they may never reach, besides the
/// profile's own hidden paths.
#[derive(Debug, Clone, Default)]
pub(crate) struct Context {
    /// The operator's workspace.
    pub(crate) workdir: PathBuf,
    /// The operator's `--writable` paths.
    pub(crate) writable: Vec<PathBuf>,
    /// The host's own files.
    pub(crate) protected: Vec<PathBuf>,
    /// The user's credential stores and the operator's `--hide` paths (see `secrets.rs`).
    pub(crate) hidden: Arc<HiddenPaths>,
    /// The size of a session's own `/dev/shm`, in bytes (`--shm-size-per-session`).
    pub(crate) shm_bytes: u64,
    /// The most bytes of a session's own `/tmp` (`--tmp-size-per-session`).
    pub(crate) tmp_bytes: u64,
    /// The memory of a session's confined commands together (`--memory-limit-per-session`).
    pub(crate) memory_per_session: Option<u64>,
    /// The memory of every session's confined commands together (`--memory-limit-total`).
    pub(crate) memory_total: Option<u64>,
    /// Where the scopes' private temporary directories are made: a directory hidden from
    /// confined commands (in the host's state directory), so that without namespaces a
    /// session's `$TMPDIR` is out of every other session's reach. `None`: the system's
    /// temporary directory.
    pub(crate) temp_parent: Option<PathBuf>,
    /// Confined commands may write git hooks and shell start-up files in writable roots
    /// (`--allow-hook-writes`).
    pub(crate) allow_hook_writes: bool,
    /// The namespaces layer may be made (by the keeper's helper mode, when first needed: a
    /// host that confines nothing does not wait for it); `false`: Landlock and seccomp alone.
    pub(crate) namespaces_layer: bool,
    /// The operator's `--allow-unix-socket` paths.
    pub(crate) allow_unix_sockets: Vec<PathBuf>,
}

/// The layers of one profile, ready for keepers.
#[derive(Debug)]
pub(crate) struct Prepared {
    /// The Landlock ruleset (the keeper's descriptor 6), made again when a directory it carved
    /// changes: see [`Prepared::ruleset`].
    ruleset: landlock::Rules,
    /// The seccomp programs (the keeper's descriptor 7).
    pub(crate) seccomp: OwnedFd,
    /// The keeper's options for the limits, e.g. `--rlimit-cpu=60`.
    pub(crate) keeper_args: Vec<String>,
    /// Variables set for the command (`TMPDIR`).
    pub(crate) env: Vec<(String, String)>,
    /// The scope's namespaces for this profile (the keeper's descriptors 8 and up); `None`
    /// where user namespaces are refused (Landlock alone then).
    pub(crate) namespaces: Option<Namespaces>,
    /// `RLIMIT_NPROC` in the namespaces holds the process limit (no pids cgroup).
    pub(crate) nproc_rlimit: bool,
    /// The session's network gate, for an allow-list (`network/`).
    pub(crate) gate: Option<Gate>,
    /// The sizes of the session's own `/tmp` and `/dev/shm` when they are tmpfs of bounded
    /// size (`None` without namespaces), for the note when a command fills one.
    pub(crate) private_space: Option<PrivateSpace>,
    /// Hidden paths under `/tmp` that were missing when the namespaces were made: each is
    /// covered in them when it appears (see [`Prepared::ruleset`]).
    late: Mutex<Vec<PathBuf>>,
}

impl Prepared {
    /// The Landlock ruleset for a command starting now (a new descriptor): made again first
    /// when a directory around a hidden path changed since it was made, so that entries
    /// created or replaced there since are granted (never a hidden one). A running command
    /// keeps the rules it started with.
    ///
    /// First, each hidden path under `/tmp` that appeared since the namespaces were made is
    /// covered in them (the namespaces' `/tmp` is granted whole, so no rule would keep it out
    /// of reach). One that cannot be covered (a link, a socket) stops the command from
    /// starting.
    pub(crate) fn ruleset(&self) -> std::io::Result<OwnedFd> {
        self.cover_late()?;
        self.ruleset.current()
    }

    /// Cover the late hidden paths under `/tmp` that exist now (a stat each).
    fn cover_late(&self) -> std::io::Result<()> {
        let Some(namespaces) = &self.namespaces else {
            return Ok(());
        };
        let mut late = lock(&self.late);
        let mut failure = None;
        late.retain(|path| {
            if failure.is_some() || std::fs::symlink_metadata(path).is_err() {
                return true;
            }
            match namespaces.cover(path) {
                Ok(()) => {
                    tracing::info!(path = %path.display(), "a hidden path appeared under /tmp: covered");
                    false
                }
                // Not in the namespaces' view (their `/tmp` starts empty without an overlay).
                Err(error) if error.raw_os_error() == Some(nix::libc::ENOENT) => true,
                Err(error) => {
                    failure = Some(std::io::Error::new(
                        error.kind(),
                        format!(
                            "the hidden path {} appeared under /tmp and cannot be covered: {error}",
                            path.display()
                        ),
                    ));
                    true
                }
            }
        });
        failure.map_or(Ok(()), Err)
    }
}

/// The sizes of a session's own `/tmp` and `/dev/shm`, in bytes (`None`: not the session's own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PrivateSpace {
    /// `/tmp` (`--tmp-size-per-session`).
    pub(crate) tmp: Option<u64>,
    /// `/dev/shm` (`--shm-size-per-session`).
    pub(crate) shm: Option<u64>,
}

impl PrivateSpace {
    /// The note for a command that ran out of space in one of them.
    pub(crate) fn note(&self) -> String {
        let mib = |bytes: u64| bytes / (1024 * 1024);
        let mut parts = Vec::new();
        if let Some(bytes) = self.tmp {
            parts.push(format!(
                "/tmp at most {} MiB (--tmp-size-per-session)",
                mib(bytes)
            ));
        }
        if let Some(bytes) = self.shm {
            parts.push(format!(
                "/dev/shm at most {} MiB (--shm-size-per-session)",
                mib(bytes)
            ));
        }
        format!(
            "\n[toolhost: \"No space left on device\": this session's own {} hold; they live in \
             memory and go with the session. Write large files in the workspace instead, or ask \
             the operator for more]",
            parts.join(" and ")
        )
    }
}

/// One scope's confinement state: its private temporary directory and a [`Prepared`] per
/// profile used so far. Dropped (directory removed) when the scope ends.
#[derive(Debug)]
pub(crate) struct ScopeSandbox {
    context: Arc<Context>,
    /// The scope's name, for what is logged about it.
    scope: String,
    temp: Mutex<Option<tempfile::TempDir>>,
    /// The profiles built so far (locked only to look one up or add one).
    prepared: Mutex<HashMap<Profile, Arc<Prepared>>>,
    /// The last failure of each profile that failed to build.
    failed: Mutex<HashMap<Profile, (Instant, String)>>,
    /// The turn to build, held by the start that builds for as long as it builds: the others
    /// wait for it here, without a thread each.
    building: Arc<tokio::sync::Mutex<()>>,
    /// The session's cgroup, which holds its commands' cgroups (made at the first confined
    /// command; `None` inside where no cgroup can be made).
    cgroups: std::sync::OnceLock<Option<Arc<ParentCgroups>>>,
}

impl ScopeSandbox {
    /// An empty state; nothing is built before the first confined command.
    pub(crate) fn new(context: Arc<Context>, scope: &str) -> Self {
        ScopeSandbox {
            context,
            scope: scope.to_owned(),
            temp: Mutex::new(None),
            prepared: Mutex::new(HashMap::new()),
            failed: Mutex::new(HashMap::new()),
            building: Arc::new(tokio::sync::Mutex::new(())),
            cgroups: std::sync::OnceLock::new(),
        }
    }

    /// The session's cgroup, below the host's, with the session's memory limit; made on first
    /// use. `None` where the host has no cgroup of its own (said once by the host's).
    pub(crate) fn cgroups(&self) -> Option<Arc<ParentCgroups>> {
        self.cgroups
            .get_or_init(|| {
                let host = ParentCgroups::host(self.context.memory_total)?;
                host.session(self.context.memory_per_session)
                    .map(Arc::new)
                    .map_err(|error| {
                        tracing::warn!(
                            %error,
                            "cannot make a session's cgroup: its commands' cgroups are made in \
                             the host's, and its memory is not bounded as a whole"
                        );
                    })
                    .ok()
            })
            .clone()
    }

    /// The layers for `profile` when nothing needs building: `Some(None)` for `off`,
    /// `Some(Some(..))` when built before and its namespaces still live; `None` when
    /// [`Self::prepare`] has work to do. Never waits for a build.
    pub(crate) fn ready(&self, profile: &Profile) -> Option<Option<Arc<Prepared>>> {
        if profile.mode == SandboxMode::Off {
            return Some(None);
        }
        self.built(profile).map(Some)
    }

    /// `profile`'s layers if they were built and their namespaces still live (checked outside
    /// the lock: it reads the holder's state).
    fn built(&self, profile: &Profile) -> Option<Arc<Prepared>> {
        let ready = lock(&self.prepared).get(profile).cloned()?;
        ready
            .namespaces
            .as_ref()
            .is_none_or(Namespaces::holder_alive)
            .then_some(ready)
    }

    /// The turn to build this scope's layers, waited for while another start builds: hold it
    /// across [`Self::prepare`] (asking [`Self::ready`] again first).
    pub(crate) async fn build_turn(&self) -> BuildTurn {
        self.building.clone().lock_owned().await
    }

    /// The layers for `profile` (`None` for `off`), built on first use, in the build `turn`
    /// (one build at a time per scope). Blocks while it builds.
    pub(crate) fn prepare(
        &self,
        profile: &Profile,
        _turn: &BuildTurn,
    ) -> Result<Option<Arc<Prepared>>, PrepareError> {
        if profile.mode == SandboxMode::Off {
            return Ok(None);
        }
        if let Some(ready) = self.built(profile) {
            return Ok(Some(ready));
        }
        {
            let mut prepared = lock(&self.prepared);
            if prepared.remove(profile).is_some() {
                // Its namespaces are gone (the holder was killed): made again.
                tracing::warn!(
                    "the namespaces of a session's profile ended early; making them again"
                );
            }
            if prepared.len() >= MAX_PROFILES {
                return Err(PrepareError::TooManyProfiles);
            }
        }
        let support = probe::support();
        if let Some(missing) = support.missing_for(profile) {
            return Err(PrepareError::Missing {
                profile: profile.mode,
                missing,
            });
        }
        if let Some((at, reason)) = lock(&self.failed).get(profile) {
            let ago = at.elapsed();
            if ago < RETRY_AFTER {
                return Err(PrepareError::Recent {
                    reason: reason.clone(),
                    ago,
                });
            }
        }
        match self
            .temp_dir()
            .and_then(|temp| build(&self.context, profile, &temp, &self.scope))
        {
            Ok(built) => {
                lock(&self.failed).remove(profile);
                let ready = Arc::new(built);
                lock(&self.prepared).insert(profile.clone(), ready.clone());
                Ok(Some(ready))
            }
            Err(error) => {
                lock(&self.failed).insert(profile.clone(), (Instant::now(), error.to_string()));
                Err(error)
            }
        }
    }

    /// The scope's private temporary directory, made on first use.
    fn temp_dir(&self) -> Result<PathBuf, PrepareError> {
        let mut temp = lock(&self.temp);
        if let Some(dir) = temp.as_ref() {
            return Ok(dir.path().to_path_buf());
        }
        let made = self.context.temp_parent.as_ref().map(|parent| {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map(|()| parent.clone())
        });
        let parent = match made {
            Some(Ok(parent)) => parent,
            unusable => {
                static SAID: std::sync::Once = std::sync::Once::new();
                SAID.call_once(|| {
                    let why = match unusable {
                        Some(Err(error)) => format!("the state directory is not usable ({error})"),
                        _ => "no state directory".to_owned(),
                    };
                    tracing::warn!(
                        "{why}: sessions' private temporary directories are made in {}; \
                         without namespaces, sessions can reach each other's $TMPDIR",
                        std::env::temp_dir().display()
                    );
                });
                std::env::temp_dir()
            }
        };
        sweep_stale_temp_dirs(&parent);
        let dir = tempfile::Builder::new()
            .prefix(&format!("{TEMP_PREFIX}{}-", std::process::id()))
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir_in(&parent)
            .map_err(PrepareError::TempDir)?;
        let path = dir.path().to_path_buf();
        *temp = Some(dir);
        Ok(path)
    }
}

/// The turn to build a scope's layers ([`ScopeSandbox::build_turn`]).
pub(crate) type BuildTurn = tokio::sync::OwnedMutexGuard<()>;

/// Private temporary directories are `toolhost-PID-XXXXXX` in the system's temporary directory,
/// PID being the host's.
const TEMP_PREFIX: &str = "toolhost-";

/// Remove what hosts that are gone (killed, or ended without cleaning up) left of their
/// scopes' temporary directories in `parent` and in the system's temporary directory (where
/// earlier versions made them): this user's `toolhost-PID-*` whose PID no longer runs. Once
/// per process.
fn sweep_stale_temp_dirs(parent: &Path) {
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(|| {
        sweep(parent);
        if parent != std::env::temp_dir() {
            sweep(&std::env::temp_dir());
        }
    });
}

fn sweep(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let uid = rustix::process::getuid().as_raw();
    for entry in entries.flatten() {
        if !super::left_by_a_gone_host(&entry.file_name()) {
            continue;
        }
        let ours = entry
            .metadata()
            .is_ok_and(|meta| meta.is_dir() && meta.uid() == uid);
        if ours {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Build the layers of `profile`, with `temp` the scope's private temporary directory, as a
/// sequence of steps.
fn build(
    context: &Context,
    profile: &Profile,
    temp: &Path,
    scope: &str,
) -> Result<Prepared, PrepareError> {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|home| home.is_absolute());
    // 1. The paths the profile hides and the roots it may write.
    let Roots {
        mut hidden,
        mut writable,
    } = roots(context, profile, temp, home.as_deref())?;
    // 2. What the namespaces' view covers of the hidden paths.
    let covers = covers(context, &hidden, &writable, temp);
    // 3. The namespaces, with their view.
    let temp = canonical(temp);
    let allow_list = profile.network.allow_list();
    let mut namespaces = view_namespaces(
        context,
        profile,
        &writable,
        &covers,
        &temp,
        allow_list.is_some(),
    )?;
    // 4. The session's network gate, for an allow-list.
    let gate = start_gate(allow_list, namespaces.as_mut(), scope)?;
    // 5. What the namespaces layer could not do, said once.
    warn_of_what_is_missing(context, namespaces.as_ref());
    // 6. Landlock's roots, around the private `/tmp`.
    tmp_roots(
        profile,
        namespaces.as_ref(),
        &covers,
        &temp,
        &mut hidden,
        &mut writable,
    );
    // 7. The Unix sockets refused also inside the workspace.
    let unix_denied = unix_denied(&hidden, home.as_deref());
    // 8. The Landlock ruleset.
    // With a network namespace of its own, `none` is enforced by it: the command may use its
    // private loopback (a test server on 127.0.0.1), and nothing else exists there. Seccomp
    // still allows only the socket families that stay inside it.
    let private_network = namespaces
        .as_ref()
        .is_some_and(|ns| ns.has(NamespaceKind::Network));
    let ruleset = landlock_rules(
        profile,
        namespaces.as_ref(),
        hidden,
        writable,
        private_network,
    )?;
    // 9. The seccomp programs.
    let unix_mode = super::unix::mode();
    let seccomp = seccomp::programs(profile.network, private_network, unix_mode)?;
    // 10. The keeper's options: the Unix sockets it lets the command reach, the namespaces it
    //     joins, the limits it sets.
    let (keeper_args, nproc_rlimit) = keeper_args(
        context,
        profile,
        namespaces.as_ref(),
        unix_mode,
        &unix_denied,
        &temp,
    );
    // 11. The variables set for the command, and the sizes of the session's own places.
    let env = command_env(namespaces.is_some(), &temp, gate.as_ref());
    let private_space = namespaces.as_ref().map(|ns| private_space(context, ns));
    Ok(Prepared {
        ruleset,
        seccomp,
        keeper_args,
        env,
        gate,
        private_space,
        late: Mutex::new(if namespaces.is_some() {
            covers.late
        } else {
            Vec::new()
        }),
        namespaces,
        nproc_rlimit,
    })
}

/// The paths a profile hides and the roots it may write (canonical paths).
struct Roots {
    /// The host's own files, the profile's hidden paths, the user's credential stores under
    /// every home, the runtime directories and `--hide`.
    hidden: Vec<PathBuf>,
    /// The scope's private temporary directory, and in `workspace-write` the workspace, the
    /// `--writable` paths and the package managers' caches under the home.
    writable: Vec<PathBuf>,
}

/// Step 1 of [`build`]: the paths `profile` hides and the roots it may write. A writable `/` is
/// refused.
fn roots(
    context: &Context,
    profile: &Profile,
    temp: &Path,
    home: Option<&Path>,
) -> Result<Roots, PrepareError> {
    let mut hidden: Vec<PathBuf> = context.protected.iter().map(|p| canonical(p)).collect();
    hidden.extend(profile.hidden.iter().map(|p| canonical(p)));
    // The user's credential stores under every home, the runtime directories, `--hide`.
    hidden.extend(context.hidden.paths.iter().cloned());
    let mut writable = vec![canonical(temp)];
    if profile.mode == SandboxMode::WorkspaceWrite {
        writable.push(canonical(&context.workdir));
        writable.extend(context.writable.iter().map(|p| canonical(p)));
        if let Some(home) = home {
            let home = canonical(home);
            // Resolved: a cache that is a link is writable where it points.
            writable.extend(
                CACHES_IN_HOME
                    .iter()
                    .map(|name| canonical(&home.join(name))),
            );
        }
    }
    if writable.iter().any(|root| root == Path::new("/")) {
        return Err(PrepareError::RootWritable);
    }
    Ok(Roots { hidden, writable })
}

/// What the namespaces' view covers of the hidden paths.
struct Covers {
    /// The directories covered whole.
    masks: Vec<PathBuf>,
    /// The files covered, sorted.
    mask_files: Vec<PathBuf>,
    /// The hidden paths under `/tmp` that are missing now, covered when they appear.
    late: Vec<PathBuf>,
}

/// Step 2 of [`build`]: what the namespaces' view covers of `hidden`, around the `writable`
/// roots and the workspace.
fn covers(context: &Context, hidden: &[PathBuf], writable: &[PathBuf], temp: &Path) -> Covers {
    // The scope's private directory is no root of the namespaces' view (only a place to mount
    // the session's tmpfs on, before anything is covered): the hidden directory that holds it
    // (the state directory) is covered all the same.
    let scratch = canonical(temp);
    let mut visible: Vec<PathBuf> = writable
        .iter()
        .filter(|root| **root != scratch)
        .cloned()
        .collect();
    visible.push(canonical(&context.workdir));
    let masks = namespaces::masks(hidden, &visible);
    // Hidden paths under `/tmp` that are missing now: covered in the namespaces when they
    // appear (a missing path needs no cover yet, and a carve would take `/tmp` from the
    // commands).
    let late: Vec<PathBuf> = hidden
        .iter()
        .filter(|path| path.starts_with("/tmp") && std::fs::symlink_metadata(path).is_err())
        // Never the workspace, a writable root, or what holds one.
        .filter(|path| !visible.iter().any(|root| root.starts_with(path)))
        .cloned()
        .collect();
    // Hidden files are covered too (the system's password hashes, and every hidden path that
    // is a regular file): a cover cannot be removed or renamed from inside, and it leaves the
    // directory around it live.
    let mut mask_files = context.hidden.system_files.clone();
    mask_files.extend(
        hidden
            .iter()
            .filter(|path| std::fs::symlink_metadata(path).is_ok_and(|meta| meta.is_file()))
            .cloned(),
    );
    mask_files.sort();
    mask_files.dedup();
    Covers {
        masks,
        mask_files,
        late,
    }
}

/// Step 3 of [`build`]: the namespaces of the profile, with their read-only view of the host
/// (`None` without the namespaces layer). `temp` is the scope's private temporary directory
/// (canonical); `gate`: an allow-list's sockets are opened in the network namespace.
fn view_namespaces(
    context: &Context,
    profile: &Profile,
    writable: &[PathBuf],
    covers: &Covers,
    temp: &Path,
    gate: bool,
) -> Result<Option<Namespaces>, PrepareError> {
    // In the namespaces' read-only view, `/tmp` is the private temporary directory; the other
    // writable roots are bound back read-write.
    let view: Vec<PathBuf> = writable
        .iter()
        .filter(|root| **root != temp)
        .cloned()
        .collect();
    let read_only = read_only_roots(context, profile, &view);
    let request = namespaces::Request {
        masks: &covers.masks,
        mask_files: &covers.mask_files,
        writable: &view,
        read_only: &read_only,
        private_tmp: Some(temp),
        tmp_bytes: (context.tmp_bytes > 0).then_some(context.tmp_bytes),
        tmp_overlay: !probe::disabled("overlay"),
        private_network: profile.network != Network::Full,
        gate,
        pid: !probe::disabled("pid"),
        // Shared memory of the session's own: another session's files, and the host's, are
        // out of view, and the size is bounded.
        private_shm: (context.shm_bytes > 0).then_some(context.shm_bytes),
    };
    make_namespaces(context, &request)
}

/// Step 4 of [`build`]: for an allow-list, the session's gate, which serves the sockets the
/// helper opened in the network namespace. Without namespaces there is no gate: commands get
/// no network at all, like `none` (the operator's `allow=` is refused at start there; a
/// plugin's grant falls back).
fn start_gate(
    allow_list: Option<Arc<AllowList>>,
    namespaces: Option<&mut Namespaces>,
    scope: &str,
) -> Result<Option<Gate>, PrepareError> {
    Ok(match (allow_list, namespaces) {
        (Some(list), Some(made)) => Some(
            Gate::start(
                list,
                std::mem::take(&mut made.gate_sockets),
                scope,
                made.holder(),
            )
            .map_err(|error| {
                PrepareError::Namespaces(NamespaceError(format!(
                    "starting the network gate: {error}"
                )))
            })?,
        ),
        (Some(_), None) => {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                tracing::warn!(
                    "a network allow-list needs the namespaces layer, missing here: commands \
                     under one get no network at all (as with `none`)"
                );
            });
            None
        }
        _ => None,
    })
}

/// Step 5 of [`build`]: say once what confined commands get for want of a part of the
/// namespaces layer (an overlay on `/tmp`, the namespaces themselves).
fn warn_of_what_is_missing(context: &Context, namespaces: Option<&Namespaces>) {
    if let Some(TmpView::Private(Some(reason))) = namespaces.map(|ns| &ns.tmp) {
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            tracing::warn!(
                %reason,
                "the kernel refused an overlay on /tmp: confined commands get an empty /tmp of \
                 their own and do not see the host's"
            );
        });
    }
    if namespaces.is_none() && !context.hidden.system_files.is_empty() {
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            tracing::warn!(
                "without namespaces, confined commands can read {} (only a mount hides them)",
                context
                    .hidden
                    .system_files
                    .iter()
                    .map(|path| path.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        });
    }
}

/// Step 6 of [`build`]: `/tmp` in Landlock's `hidden` paths and `writable` roots: the host's
/// `/tmp` without namespaces, the namespaces' own `/tmp` with them. `temp` is the scope's
/// private temporary directory (canonical).
fn tmp_roots(
    profile: &Profile,
    namespaces: Option<&Namespaces>,
    covers: &Covers,
    temp: &Path,
    hidden: &mut Vec<PathBuf>,
    writable: &mut Vec<PathBuf>,
) {
    // Landlock keeps carving every hidden path out even where the mount namespace covers it:
    // a cover goes away when what it covers is replaced from outside, and the carving keeps
    // the directories around a hidden path from being renamed.
    // Without namespaces there is no private /tmp: the host's is writable in workspace-write.
    if namespaces.is_none() && profile.mode == SandboxMode::WorkspaceWrite {
        writable.push(PathBuf::from("/tmp"));
    }
    // The namespaces' own /tmp is a new mount (an overlay, or a tmpfs), which no rule on the
    // host's tree reaches: it is granted as the host sees it through the holder, with the
    // hidden paths under /tmp carved out of it there.
    // Every hidden path under /tmp that exists is covered by a mount on that /tmp (the
    // keeper covers them again on the overlay), and a cover holds there even when the host
    // replaces what it covers (the overlay does not follow its lower layer's renames): the
    // whole of it is granted, and it stays live. Only where one is not covered (a hidden
    // directory that holds the workspace) is it carved like the host's tree.
    if let Some(tmp) = namespaces.and_then(Namespaces::tmp_root) {
        writable.retain(|root| *root != temp);
        let covered = |path: &Path| {
            covers.masks.iter().any(|mask| path.starts_with(mask))
                || covers.mask_files.iter().any(|f| f == path)
        };
        let uncovered: Vec<PathBuf> = hidden
            .iter()
            .filter_map(|path| {
                path.strip_prefix("/tmp")
                    .ok()
                    .map(|relative| (path, relative))
            })
            .filter(|(path, relative)| {
                !relative.as_os_str().is_empty()
                    && std::fs::symlink_metadata(path).is_ok()
                    && !covered(path)
            })
            .map(|(_, relative)| tmp.join(relative))
            .collect();
        hidden.extend(uncovered);
        writable.push(tmp);
    }
}

/// Step 7 of [`build`]: the places whose Unix sockets are refused also inside the workspace (a
/// workspace that is a home): the `hidden` paths and the package managers' caches under the
/// home.
fn unix_denied(hidden: &[PathBuf], home: Option<&Path>) -> Vec<PathBuf> {
    hidden
        .iter()
        .cloned()
        .chain(home.iter().flat_map(|home| {
            CACHES_IN_HOME
                .iter()
                .map(move |name| canonical(&home.join(name)))
        }))
        .collect()
}

/// Step 8 of [`build`]: the Landlock ruleset of `writable` roots and `hidden` paths, with the
/// namespaces' own `/proc` and `/dev/shm`.
fn landlock_rules(
    profile: &Profile,
    namespaces: Option<&Namespaces>,
    hidden: Vec<PathBuf>,
    writable: Vec<PathBuf>,
    private_network: bool,
) -> Result<landlock::Rules, PrepareError> {
    // The PID namespace's own `/proc` is a new mount, which no rule on the host's `/proc`
    // reaches (Landlock does not look at a mount point hidden by another mount).
    let proc = namespaces.and_then(Namespaces::proc_root);
    // The namespaces' own `/dev/shm` is a new mount too. Without namespaces, `/dev/shm` is
    // the host's, shared with every session: not writable.
    let shm = namespaces
        .and_then(Namespaces::shm_root)
        .filter(|_| profile.mode == SandboxMode::WorkspaceWrite);
    // The plan is made again when a directory it carved changes (`landlock::Rules`): all it is
    // made of is moved in here.
    let make_plan = move |carving: &mut landlock::Carving| {
        let mut plan = Plan::new(&writable, &hidden, carving);
        plan.read.extend(proc.clone());
        plan.write.extend(shm.clone());
        plan
    };
    // Where the host sees the namespaces' view, `/proc/HOLDER/root`: which hidden paths are
    // covered there decides where commands may create entries beside them.
    let view = namespaces.map(Namespaces::root);
    Ok(landlock::Rules::new(
        Box::new(make_plan),
        landlock::Carving::new(view),
        profile.network,
        private_network,
    )?)
}

/// Step 10 of [`build`]: the keeper's options, and whether `RLIMIT_NPROC` holds the process
/// limit. `temp` is the scope's private temporary directory (canonical).
fn keeper_args(
    context: &Context,
    profile: &Profile,
    namespaces: Option<&Namespaces>,
    unix_mode: &super::unix::UnixMode,
    unix_denied: &[PathBuf],
    temp: &Path,
) -> (Vec<String>, bool) {
    let mut keeper_args = super::unix::keeper_args(
        unix_mode,
        &super::unix::Places {
            workdir: &canonical(&context.workdir),
            writable: &context
                .writable
                .iter()
                .map(|p| canonical(p))
                .collect::<Vec<_>>(),
            temp: namespaces.is_none().then_some(temp),
            private_tmp: namespaces.is_some_and(|ns| ns.tmp != TmpView::Host),
            allowed: &context.allow_unix_sockets,
            name_service: profile.network == Network::Full,
            denied: unix_denied,
        },
    );
    if let Some(namespaces) = namespaces {
        keeper_args.push(namespaces.keeper_arg());
    }
    if let Some(seconds) = profile.limits.cpu_seconds {
        keeper_args.push(format!("{}{seconds}", option::RLIMIT_CPU));
    }
    // Memory per process where no memory cgroup holds the whole command.
    if let Some(bytes) = profile.limits.memory_bytes
        && super::cgroup::hierarchies().memory.is_none()
    {
        keeper_args.push(format!("{}{bytes}", option::RLIMIT_DATA));
    }
    // Processes where no pids cgroup holds the command: RLIMIT_NPROC, which the kernel counts
    // per user and user namespace, so in the scope's namespace it bounds the processes of the
    // scope's commands of this profile together.
    let nproc_rlimit =
        profile.limits.processes.is_some() && namespaces::nproc_limit_applies(namespaces.is_some());
    if let Some(processes) = profile.limits.processes
        && nproc_rlimit
    {
        keeper_args.push(format!("{}{processes}", option::RLIMIT_NPROC));
    }
    (keeper_args, nproc_rlimit)
}

/// Step 11 of [`build`]: the variables set for the command: `TMPDIR`, the scope's private
/// temporary directory `temp` (in the namespaces, `/tmp` itself), and the `gate`'s.
fn command_env(with_namespaces: bool, temp: &Path, gate: Option<&Gate>) -> Vec<(String, String)> {
    std::iter::once((
        "TMPDIR".to_owned(),
        if with_namespaces {
            "/tmp".to_owned()
        } else {
            temp.display().to_string()
        },
    ))
    .chain(gate.into_iter().flat_map(Gate::env))
    .collect()
}

/// Step 11 of [`build`]: the sizes of the session's own `/tmp` and `/dev/shm` in `namespaces`.
fn private_space(context: &Context, namespaces: &Namespaces) -> PrivateSpace {
    PrivateSpace {
        tmp: (namespaces.tmp != TmpView::Host && context.tmp_bytes > 0)
            .then_some(context.tmp_bytes),
        shm: namespaces.shm_root().and(Some(context.shm_bytes)),
    }
}

/// Shell start-up files and git's global configuration under a home: run or read by the user's
/// shells and git outside the sandbox.
const RUN_LATER_IN_HOME: &[&str] = &[
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".zlogout",
    ".config/fish",
    ".gitconfig",
    ".config/git",
];

/// What the namespaces' view binds read-only though it lies in a writable root or under `/tmp`
/// (canonical paths, existing ones):
/// 1. Under `/tmp` or `/dev/shm`, what this profile may not write: every home, and the
///    workspace in `read-only`. The session's own `/tmp` would otherwise take their writes and
///    drop them when the session ends, and its own `/dev/shm` would hide them; bound, they are
///    the host's, live and read-only.
/// 2. In each writable root, unless the operator allows it (`--allow-hook-writes`), what runs
///    later outside the sandbox: the hooks of git repositories (`.git/hooks`, and those of
///    submodules under `.git/modules`), and the shell start-up files and git configuration of
///    a home inside the root.
fn read_only_roots(context: &Context, profile: &Profile, writable: &[PathBuf]) -> Vec<PathBuf> {
    let private = [Path::new("/tmp"), Path::new("/dev/shm")];
    let is_writable = |path: &Path| writable.iter().any(|root| path.starts_with(root));
    let mut roots = Vec::new();
    let homes: Vec<PathBuf> = context.hidden.homes.iter().map(|h| canonical(h)).collect();
    let workdir = canonical(&context.workdir);
    for path in homes.iter().chain(std::iter::once(&workdir)) {
        let under_private = private
            .iter()
            .any(|place| path.starts_with(place) && path != place);
        if under_private && !is_writable(path) && path.exists() {
            roots.push(path.clone());
        }
    }
    if profile.mode == SandboxMode::WorkspaceWrite && !context.allow_hook_writes {
        for root in writable {
            roots.extend(git_hooks(root));
        }
        for home in homes.iter().filter(|home| is_writable(home)) {
            roots.extend(
                RUN_LATER_IN_HOME
                    .iter()
                    .map(|name| home.join(name))
                    .filter(|path| std::fs::symlink_metadata(path).is_ok()),
            );
        }
    }
    roots.sort();
    roots.dedup();
    roots
}

/// The hooks directories of the git repository at `root` (its `.git` directory's `hooks`, and
/// those of the submodules' git directories under `.git/modules`, a few levels deep). A
/// repository without one gets an empty one, as `git init` makes it, so that there is a place
/// to bind read-only.
fn git_hooks(root: &Path) -> Vec<PathBuf> {
    let git = root.join(".git");
    if !std::fs::symlink_metadata(&git).is_ok_and(|meta| meta.is_dir()) {
        return Vec::new();
    }
    let mut hooks = Vec::new();
    let mut repos = vec![(git, 0)];
    while let Some((dir, depth)) = repos.pop() {
        let dir_hooks = dir.join("hooks");
        if std::fs::symlink_metadata(&dir_hooks).is_err() {
            let _ = std::fs::create_dir(&dir_hooks);
        }
        if std::fs::symlink_metadata(&dir_hooks).is_ok_and(|meta| meta.is_dir()) {
            hooks.push(dir_hooks);
        }
        // A submodule's git directory is `.git/modules/NAME` (NAME may hold slashes, and a
        // submodule's own submodules are under its `modules`).
        if depth < 4
            && let Ok(entries) = std::fs::read_dir(dir.join("modules"))
        {
            let mut stack: Vec<(PathBuf, usize)> = entries
                .flatten()
                .map(|entry| (entry.path(), depth + 1))
                .collect();
            while let Some((path, depth)) = stack.pop() {
                let is_dir = std::fs::symlink_metadata(&path).is_ok_and(|meta| meta.is_dir());
                if !is_dir || depth > 4 {
                    continue;
                }
                if path.join("HEAD").is_file() {
                    repos.push((path, depth));
                } else if let Ok(entries) = std::fs::read_dir(&path) {
                    stack.extend(entries.flatten().map(|entry| (entry.path(), depth + 1)));
                }
            }
        }
    }
    hooks
}

/// The namespaces layer, or `None` (logged once, and reported by `toolhost sandbox`) where it
/// is disabled or the kernel refuses it: Landlock and seccomp enforce the profile alone then.
/// Where the layer is there but fails for this profile (namespaces were made before in this
/// process, or the kernel did not refuse the user namespace itself), the profile is refused.
fn make_namespaces(
    context: &Context,
    request: &namespaces::Request<'_>,
) -> Result<Option<Namespaces>, PrepareError> {
    if probe::disabled("namespaces") {
        return Ok(None);
    }
    if !context.namespaces_layer {
        return Ok(None);
    }
    let Ok(keeper) = crate::keeper_binary::executable() else {
        return Ok(None);
    };
    match namespaces::make(keeper, request) {
        Ok(made) => {
            if let Some(reason) = &made.pid_missing {
                static WARNED: std::sync::Once = std::sync::Once::new();
                WARNED.call_once(|| {
                    tracing::warn!(
                        %reason,
                        "commands share the host's PID namespace (no PID namespace of their own)"
                    );
                });
            }
            Ok(Some(made))
        }
        Err(error) if namespaces::ever_made() || !error.missing_here() => {
            Err(PrepareError::Namespaces(error))
        }
        Err(error) => {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                tracing::warn!(
                    %error,
                    "commands are confined without namespaces (Landlock and seccomp only)"
                );
            });
            Ok(None)
        }
    }
}

#[cfg(test)]
#[path = "prepare_tests.rs"]
mod tests;
