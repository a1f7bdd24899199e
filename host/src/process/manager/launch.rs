//! Launching a command under a keeper ([`Launcher`]): the keeper prepared ahead for its scope
//! and profile is handed the command when one is ready (`ready.rs`); otherwise one is made for
//! it from the spawner thread (`spawner.rs`). After a confined start, the next keeper of that
//! scope and profile is prepared ahead, off the call path.

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use super::child::SpawnStep;
use super::entry::Entry;
use super::keeper;
use super::ready::{self, ReadyKeeper, ReadyKeepers};
use super::resident::Resident;
use super::scope::Scope;
use super::spawner::{Spawned, Spawner};
use super::spec::{ChildSpec, Launch, StartMessage};
use crate::process::ProcessError;
use crate::sandbox::namespaces::NamespaceKind;
use crate::sandbox::{CommandCgroups, Prepared, Profile};

/// The longest a keeper prepared ahead waits for the command just started to finish before
/// it is made (see [`Launcher::prepare_ahead`]).
const READY_AFTER: Duration = Duration::from_millis(50);

/// The longest a start waits for the keeper being spawned ahead for its scope and profile
/// before it makes its own.
const READY_WAIT: Duration = Duration::from_millis(20);

/// The least a shutdown waits for the keepers being made ahead.
const LAST_WAIT: Duration = Duration::from_secs(5);

/// A command's keeper, running, and what the host holds of it.
pub(super) struct Launched {
    pub(super) spawned: Spawned,
    /// The host's end of its control socket.
    pub(super) control: OwnedFd,
    /// The read end of its status pipe.
    pub(super) status: OwnedFd,
    /// The cgroups made for the command, if any.
    pub(super) cgroups: Option<CommandCgroups>,
}

/// Gets every command its keeper: one prepared ahead, or one made for it.
pub(super) struct Launcher {
    /// The thread every keeper is spawned from; `None` when it could not be started.
    spawner: Option<Spawner>,
    /// Keepers prepared ahead for confined commands.
    ready: Arc<ReadyKeepers>,
    /// The tasks making keepers ahead, until each is put in the pool or released.
    making: TaskTracker,
    /// The niceness of every keeper and command.
    nice: i32,
    runtime: Handle,
}

impl Launcher {
    /// A launcher whose keepers run at `nice`, with at most `ready_keepers` prepared ahead on
    /// the host, each released after `ready_idle` unused. Its tasks run on `runtime`.
    pub(super) fn new(
        spawner: Option<Spawner>,
        ready_keepers: usize,
        ready_idle: Duration,
        nice: i32,
        runtime: Handle,
    ) -> Launcher {
        Launcher {
            spawner,
            ready: Arc::new(ReadyKeepers::new(ready_keepers, ready_idle)),
            making: TaskTracker::new(),
            nice,
            runtime,
        }
    }

    /// The pool of keepers prepared ahead.
    pub(super) fn ready(&self) -> &ReadyKeepers {
        &self.ready
    }

    /// Whether keepers can be spawned at all.
    pub(super) fn check(&self) -> Result<(), ProcessError> {
        self.spawner().map(drop)
    }

    /// The spawner thread, or why there is none.
    fn spawner(&self) -> Result<&Spawner, ProcessError> {
        self.spawner.as_ref().ok_or_else(|| {
            ProcessError::Failed(
                "cannot start processes: the spawner thread could not be created".to_owned(),
            )
        })
    }

    /// Run `launch` in `scope` under a keeper, confined by `confine` with `profile`:
    ///
    /// 1. A confined start takes a keeper prepared ahead for its scope and profile (waiting
    ///    up to [`READY_WAIT`] for one being spawned) and hands it the command.
    /// 2. Otherwise the command's cgroups are made and a keeper is spawned for it.
    pub(super) async fn launch(
        &self,
        scope: &Scope,
        profile: &Profile,
        confine: Option<&Arc<Prepared>>,
        launch: Launch<'_>,
    ) -> Result<Launched, ProcessError> {
        if let Some(prepared) = confine {
            if !self.ready.has_ready(&scope.name, profile) {
                self.ready
                    .wait_spawning(&scope.name, profile, READY_WAIT)
                    .await;
            }
            let ready = match self.hand_over(&scope.name, profile, prepared, &launch) {
                Some(ready) => Some(ready),
                None => self.fork_now(scope, profile, prepared, &launch).await,
            };
            if let Some(ready) = ready {
                return Ok(Launched {
                    spawned: ready.spawned,
                    control: ready.host.control,
                    status: ready.host.status,
                    cgroups: ready.cgroups,
                });
            }
        }
        self.spawn_keeper(scope, profile, confine, launch).await
    }

    /// What making a keeper of `scope`, `profile` and the layers `prepared` takes.
    fn recipe(&self, scope: &Scope, profile: &Profile, prepared: &Arc<Prepared>) -> ready::Recipe {
        ready::Recipe {
            scope: scope.name.clone(),
            profile: profile.clone(),
            prepared: Arc::clone(prepared),
            scope_cgroups: scope.sandbox.cgroups(),
            nice: self.nice,
        }
    }

    /// Have the resident keeper of `scope`, `profile` and `prepared` fork a keeper now, if
    /// there is one, and hand it `launch`: `None` when there is none or that failed (the
    /// caller spawns a keeper, which reports any failure as it should).
    async fn fork_now(
        &self,
        scope: &Scope,
        profile: &Profile,
        prepared: &Arc<Prepared>,
        launch: &Launch<'_>,
    ) -> Option<ReadyKeeper> {
        let spawner = self.spawner.as_ref()?;
        let resident = self.ready.resident(&scope.name, profile, prepared)?;
        let recipe = self.recipe(scope, profile, prepared);
        let ready = ready::make_with(spawner, &self.ready, recipe, Some(resident))
            .await
            .map_err(|error| tracing::debug!(%error, "cannot fork a keeper"))
            .ok()?;
        give(ready, launch, prepared)
    }

    /// Hand `launch` to the keeper prepared ahead for `scope`, `profile` and its layers
    /// `prepared`, if one is ready: `None` when none is (or it is gone: then it is released
    /// and the caller makes a keeper as usual).
    fn hand_over(
        &self,
        scope: &str,
        profile: &Profile,
        prepared: &Arc<Prepared>,
        launch: &Launch<'_>,
    ) -> Option<ReadyKeeper> {
        let (ready, stale) = self.ready.take(scope, profile, prepared);
        ready::release_soon(stale);
        give(ready?, launch, prepared)
    }

    /// Make the command's cgroups and spawn a keeper for `launch`.
    async fn spawn_keeper(
        &self,
        scope: &Scope,
        profile: &Profile,
        confine: Option<&Arc<Prepared>>,
        launch: Launch<'_>,
    ) -> Result<Launched, ProcessError> {
        let spawner = self.spawner()?;
        let shell = launch.shell.to_path_buf();
        let workdir = launch.workdir.to_path_buf();
        // Limits on everything the command starts; more processes than asked for, the
        // keeper (two in a PID namespace: one waits outside, one keeps inside).
        let keepers = match confine.and_then(|prepared| prepared.namespaces.as_ref()) {
            Some(namespaces) if namespaces.has(NamespaceKind::Pid) => 2,
            _ => 1,
        };
        let cgroups = match confine {
            Some(_) => CommandCgroups::create(
                scope.sandbox.cgroups(),
                profile.limits.processes.map(|n| n.saturating_add(keepers)),
                profile.limits.memory_bytes,
            )
            .map_err(|error| {
                ProcessError::Failed(format!("cannot create the command's cgroups: {error}"))
            })?,
            None => None,
        };
        let (host_ends, keeper_ends) = keeper::channels().map_err(|error| {
            ProcessError::Failed(format!("cannot create the keeper's channels: {error}"))
        })?;
        let spec = ChildSpec::new(
            launch,
            keeper_ends,
            confine.map(|prepared| &**prepared),
            cgroups.as_ref(),
            self.nice,
        )
        .map_err(|error| {
            ProcessError::Failed(format!("cannot prepare `{}`: {error}", shell.display()))
        })?;
        let spawned = spawner.spawn(spec).await.map_err(|error| {
            if error.step == SpawnStep::Chdir {
                // E.g. a directory without search permission, or one removed just now.
                ProcessError::InvalidRequest(format!(
                    "working directory `{}` cannot be entered: {}",
                    workdir.display(),
                    error.error
                ))
            } else {
                ProcessError::Failed(format!("cannot start `{}`: {error}", shell.display()))
            }
        })?;
        Ok(Launched {
            spawned,
            control: host_ends.control,
            status: host_ends.status,
            cgroups,
        })
    }

    /// Prepare a keeper ahead for the next command of `scope` with `profile` (layers
    /// `prepared`), off the call path, unless one is ready or being made for them or a bound
    /// is reached. It is made once `started` (the command just started) has finished, or
    /// [`READY_AFTER`] after its start: on cgroup v1 the new keeper's move into its cgroups
    /// holds up every `fork` of the machine for an RCU grace period after a quiet spell, and
    /// must not hold up the command's own.
    pub(super) fn prepare_ahead(
        &self,
        scope: &Scope,
        profile: &Profile,
        prepared: &Arc<Prepared>,
        started: &Arc<Entry>,
    ) {
        let Some(spawner) = self.spawner.clone() else {
            return;
        };
        let recipe = || self.recipe(scope, profile, prepared);
        let mut making = false;
        while let Some(serial) = self.ready.turn(&scope.name, profile) {
            self.make_ready(serial, recipe(), spawner.clone(), Arc::clone(started));
            making = true;
        }
        // The host's bound on keepers prepared ahead reached: the resident keeper at least,
        // which later starts of this scope and profile fork their keepers from.
        if !making && self.ready.resident_turn(&scope.name, profile, prepared) {
            self.start_resident(recipe(), spawner, Arc::clone(started));
        }
    }

    /// Start the resident keeper of `recipe` once `started` has finished (or [`READY_AFTER`]
    /// after its start), in the turn [`ReadyKeepers::resident_turn`] gave.
    fn start_resident(&self, recipe: ready::Recipe, spawner: Spawner, started: Arc<Entry>) {
        let pool = Arc::clone(&self.ready);
        let starting = self.making.track_future(async move {
            started
                .wait_finished(Instant::now().checked_add(READY_AFTER))
                .await;
            drop(started);
            ready::start_resident(&spawner, &pool, &recipe).await;
        });
        self.runtime.spawn(starting);
    }

    /// Make the keeper of turn `serial` once `started` has finished (or [`READY_AFTER`] after
    /// its start), put it in the pool, and release it after its idle time unused.
    fn make_ready(
        &self,
        serial: u64,
        recipe: ready::Recipe,
        spawner: Spawner,
        started: Arc<Entry>,
    ) {
        let pool = Arc::clone(&self.ready);
        // Making it is tracked: shutdown waits for a keeper being spawned, so that none is left
        // half-made (a child of the spawner thread not yet the keeper) when the host exits.
        let making = self.making.track_future(async move {
            started
                .wait_finished(Instant::now().checked_add(READY_AFTER))
                .await;
            drop(started);
            if pool.is_closed() {
                pool.put(serial, None);
                return None;
            }
            pool.spawning(serial);
            let made = match ready::make(&spawner, &pool, recipe, true).await {
                Ok(made) => Some(made),
                Err(error) => {
                    tracing::debug!(%error, "cannot prepare a keeper ahead");
                    None
                }
            };
            let was_made = made.is_some();
            if let Some(unwanted) = pool.put(serial, made) {
                // Its scope ended, or the host shut down, meanwhile.
                let _ = tokio::task::spawn_blocking(move || unwanted.release()).await;
                return None;
            }
            Some((pool, was_made))
        });
        self.runtime.spawn(async move {
            let Some((pool, was_made)) = making.await else {
                return;
            };
            if was_made {
                tokio::time::sleep(pool.idle()).await;
                if let Some(idle) = pool.expire(serial) {
                    let _ = tokio::task::spawn_blocking(move || idle.release()).await;
                }
            }
        });
    }

    /// Release the keepers prepared ahead for `scope`, and wait until they are gone.
    pub(super) async fn end_scope(&self, scope: &str) {
        release(self.ready.end_scope(scope)).await;
    }

    /// Close the pool: release every keeper prepared ahead, and wait (a bounded time) for
    /// those being made, each released as it comes.
    pub(super) async fn shutdown(&self) {
        release(self.ready.close()).await;
        self.making.close();
        let _ = tokio::time::timeout(LAST_WAIT, self.making.wait()).await;
    }
}

/// Release `keepers` prepared ahead, and wait until they are gone; then let go of
/// `residents`, waiting for those nothing else holds (a command's keeper holds its resident
/// until it is reaped).
async fn release((keepers, residents): (Vec<ReadyKeeper>, Vec<Arc<Resident>>)) {
    if keepers.is_empty() && residents.is_empty() {
        return;
    }
    let released = tokio::task::spawn_blocking(move || {
        keepers.into_iter().for_each(ReadyKeeper::release);
        for resident in residents {
            if let Ok(resident) = Arc::try_unwrap(resident) {
                resident.close_and_wait();
            }
        }
    });
    let _ = released.await;
}

/// Send `launch` (with the layers `prepared`) to `ready`, a keeper waiting for its command:
/// `None` when it could not take it (it is gone: then it is released, and the caller makes a
/// keeper as usual).
fn give(ready: ReadyKeeper, launch: &Launch<'_>, prepared: &Prepared) -> Option<ReadyKeeper> {
    match StartMessage::new(launch, prepared)
        .and_then(|message| keeper::send_start(&ready.host.control, &message.bytes, &message.fds))
    {
        Ok(()) => Some(ready),
        Err(error) => {
            tracing::debug!(%error, scope = ready.scope(), "a keeper waiting for its command could not take it");
            ready::release_soon(vec![ready]);
            None
        }
    }
}
