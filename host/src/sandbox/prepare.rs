//! What a scope's confined commands share: the layers built once per scope and profile
//! ([`Prepared`]), and the scope's private temporary directory ([`ScopeSandbox`]).
//! `layers.rs` builds the layers of one profile.

use crate::lock;
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::landlock::{self, LandlockError};
use super::namespaces::{NamespaceError, Namespaces};
use super::network::{Approved, Askable, Gate, Pattern};
use super::probe;
use super::seccomp::SeccompError;
use super::secrets::HiddenPaths;
use super::{ParentCgroups, Profile, SandboxMode};

/// Most profiles one scope may use (each holds its namespaces and layers until the scope ends).
const MAX_PROFILES: usize = 16;

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
    /// The operator's workspace, writable in `workspace-write`; `None` when the host has none
    /// (it was started in `/` without `--workdir`, see [`workspace_of`](super::workspace_of)): commands
    /// then write only in their own `/tmp` and the `--writable` directories.
    pub(crate) workdir: Option<PathBuf>,
    /// The operator's `--writable` paths.
    pub(crate) writable: Vec<PathBuf>,
    /// The host's own files.
    pub(crate) protected: Vec<PathBuf>,
    /// The user's credential stores and the operator's `--hide` paths (see `secrets/`).
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
    /// The hosts a session's person may allow beyond the allow-list (`--network ask`).
    pub(crate) network_ask: Option<Askable>,
    /// The operator's network (`--network`): only a gate of this very list is widened by
    /// what a session's person allowed.
    pub(crate) operator_network: super::Network,
    /// Whether the directories around hidden paths are watched with inotify for the next
    /// command's Landlock rules; `false` (a host serving one call) compares their stamps
    /// instead, sparing the host's exit the wait for inotify's marks to go (an SRCU grace
    /// period, milliseconds).
    pub(crate) watch_changes: bool,
}

/// The layers of one profile, ready for keepers.
#[derive(Debug)]
pub(crate) struct Prepared {
    /// The Landlock ruleset (the keeper's descriptor 6), made again when a directory it carved
    /// changes: see [`Prepared::ruleset`].
    pub(super) ruleset: landlock::Rules,
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
    pub(super) late: Mutex<Vec<PathBuf>>,
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
    /// The host's context, or the scope's own once it chose a workspace
    /// ([`Self::set_context`]).
    context: Mutex<Arc<Context>>,
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
    /// The hosts the session's person allowed beyond the allow-list, for every gate of it.
    approved: Arc<Approved>,
}

impl ScopeSandbox {
    /// An empty state; nothing is built before the first confined command.
    pub(crate) fn new(context: Arc<Context>, scope: &str) -> Self {
        let approved = Arc::new(Approved::new(context.network_ask.clone()));
        ScopeSandbox {
            context: Mutex::new(context),
            scope: scope.to_owned(),
            temp: Mutex::new(None),
            prepared: Mutex::new(HashMap::new()),
            failed: Mutex::new(HashMap::new()),
            building: Arc::new(tokio::sync::Mutex::new(())),
            approved,
            cgroups: std::sync::OnceLock::new(),
        }
    }

    /// What the session's person allowed, and the hosts its gates refused that they may.
    #[cfg(test)]
    pub(crate) fn approved(&self) -> &Arc<Approved> {
        &self.approved
    }

    /// Let the session's commands reach `host` from now on, in every gate of the session that
    /// applies the operator's list (those running and those built later): the patterns
    /// allowed so far; `Err` with why not: `host` is not a host a gate of the session refused
    /// as one the person may allow, or `max` are allowed already.
    pub(crate) fn allow_host(&self, host: &str, max: usize) -> Result<Vec<Pattern>, String> {
        if !self.approved.was_refused(host) {
            return Err(format!(
                "`{host}` is no host this session's commands were refused and its person may \
                 allow (the network gate names each such host in `refused-host` with `askable`)"
            ));
        }
        let pattern = Pattern::parse(host).map_err(|error| error.to_string())?;
        self.approved
            .add(pattern, max)
            .ok_or_else(|| format!("this session allowed {max} hosts already, the most it may"))
    }

    /// Let the session's commands ask `question` while it is held (see
    /// [`Approved::hold`]).
    pub(crate) fn hold_host_question(
        &self,
        question: Arc<dyn super::network::HostQuestion>,
    ) -> super::network::HeldQuestion {
        self.approved.hold(question)
    }

    /// The context the scope's layers are built with.
    pub(crate) fn context(&self) -> Arc<Context> {
        lock(&self.context).clone()
    }

    /// Build the scope's layers with `context` from now on (a workspace of its own): the
    /// layers built so far are let go, in the build turn, so that no build under way puts
    /// back layers of the old context. A running command keeps the layers it started with.
    pub(crate) async fn set_context(&self, context: Arc<Context>) {
        let _turn = self.build_turn().await;
        *lock(&self.context) = context;
        lock(&self.prepared).clear();
        lock(&self.failed).clear();
    }

    /// The session's cgroup, below the host's, with the session's memory limit; made on first
    /// use. `None` where the host has no cgroup of its own (said once by the host's).
    pub(crate) fn cgroups(&self) -> Option<Arc<ParentCgroups>> {
        self.cgroups
            .get_or_init(|| {
                let context = self.context();
                let host = ParentCgroups::host(context.memory_total)?;
                host.scope(context.memory_per_session)
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
        match self.temp_dir().and_then(|temp| {
            super::layers::build(&self.context(), profile, &temp, &self.scope, &self.approved)
        }) {
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
        let made = self.context().temp_parent.clone().map(|parent| {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&parent)
                .map(|()| parent)
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

#[cfg(test)]
#[path = "prepare_tests.rs"]
mod tests;
