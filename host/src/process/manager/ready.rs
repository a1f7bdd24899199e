//! Keepers prepared ahead: per scope and profile, a keeper already in its future command's
//! cgroups and the scope's namespaces waits on its control socket, so that a confined start
//! only hands it the command (`keeper::send_start`) and it only forks and execs.
//!
//! - They are made after a confined start of a scope and profile, off the call path, once that
//!   command ended (or 50 ms after its start), until [`PER_PROFILE`] are ready or being made
//!   for them: only for profiles a scope has used. Two, so that a start right after another
//!   takes one while the one it used is replaced. A start that finds none ready but one being
//!   spawned for its scope and profile waits for it (20 ms at most) rather than make its own.
//! - They are bounded: [`PER_PROFILE`] per scope and profile, [`PER_SCOPE`] profiles per
//!   scope, and the host's
//!   [`ProcessManagerConfig::ready_keepers`](super::ProcessManagerConfig::ready_keepers) in
//!   all (0: none, every start takes the path of a keeper made for it).
//! - They are released after
//!   [`ProcessManagerConfig::ready_keeper_idle`](super::ProcessManagerConfig::ready_keeper_idle)
//!   unused, when their scope ends, and when the manager shuts down or is dropped. Releasing
//!   one closes its control socket (the keeper exits: nothing ever ran under it), reaps it,
//!   then removes the cgroups made for its command.
//! - One is used only by a start of its own scope, with a profile equal to its own, whose
//!   layers are the very ones it was made with (a scope's layers made again, e.g. after its
//!   namespaces ended, make every keeper prepared with the old ones stale: released, never
//!   used). The Landlock ruleset is sent with the command, as current at that start.
//! - They are not processes of the scope: `process_list` does not show them and they hold no
//!   slot of `max_running_per_scope`. Each counts in the cgroups made for its command (one
//!   or two processes, as a keeper made at the start does) and holds four of the host's
//!   descriptors (control socket, status pipe, pidfd, and a cgroup file per controller).
//! - They are spawned from the manager's spawner thread, like every keeper, so their
//!   parent-death signal holds; when the host dies the kernel closes their control sockets.

use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[cfg(test)]
use nix::unistd::Pid;

use super::keeper::{self, HostEnds};
use super::resident::Resident;
use super::spawner::{Spawned, Spawner};
use super::spec::ChildSpec;
use crate::sandbox::namespaces::NamespaceKind;
use crate::sandbox::{CommandCgroups, ParentCgroups, Prepared, Profile};

/// The most profiles of one scope with a keeper prepared ahead.
pub(super) const PER_SCOPE: usize = 2;

/// The most keepers ready or being made for one scope and profile.
pub(super) const PER_PROFILE: usize = 2;

/// A keeper prepared ahead for a command of `scope` with `profile`.
pub(super) struct ReadyKeeper {
    scope: String,
    profile: Profile,
    /// The layers it was made with (compared by identity).
    prepared: Arc<Prepared>,
    /// Its number in the pool, for the idle release.
    serial: u64,
    pub(super) spawned: Spawned,
    /// The host's ends of its channels.
    pub(super) host: HostEnds,
    /// The cgroups made for its command; the command's from the start on.
    pub(super) cgroups: Option<CommandCgroups>,
}

impl ReadyKeeper {
    /// Release it: close its control socket (it exits, having run nothing), stop it, reap it,
    /// then remove its command's cgroups (empty once it is reaped). Blocks until then: call it
    /// from a blocking thread.
    pub(super) fn release(self) {
        let ReadyKeeper {
            spawned,
            host,
            cgroups,
            ..
        } = self;
        drop(host);
        spawned.stop_and_wait();
        drop(cgroups);
    }

    /// The scope it was made for.
    pub(super) fn scope(&self) -> &str {
        &self.scope
    }

    /// Its pid, for tests.
    #[cfg(test)]
    pub(super) fn pid(&self) -> Pid {
        self.spawned.pid()
    }
}

/// Release `keepers` on a short-lived thread, so that the caller never waits. Without a
/// thread they are dropped: each keeper is then stopped and reaped as any spawned one, and
/// its cgroups may stay (empty) until the host's are removed.
pub(super) fn release_soon(keepers: Vec<ReadyKeeper>) {
    if keepers.is_empty() {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("toolhost-reaper".to_owned())
        .spawn(move || keepers.into_iter().for_each(ReadyKeeper::release));
    if let Err(error) = spawned {
        tracing::warn!(%error, "cannot start a thread to release keepers prepared ahead");
    }
}

/// The pool of keepers prepared ahead (see the module documentation).
pub(super) struct ReadyKeepers {
    state: Mutex<State>,
    /// Woken whenever one being made is put in (or failed).
    made: tokio::sync::Notify,
    /// The most keepers ready or being made, on the host.
    per_host: usize,
    idle: Duration,
}

/// A resident keeper of the pool, for `scope`, `profile` and the layers `prepared`.
struct ResidentOf {
    scope: String,
    profile: Profile,
    prepared: Arc<Prepared>,
    /// `None` while it is being started.
    resident: Option<Arc<Resident>>,
}

#[derive(Default)]
struct State {
    ready: Vec<ReadyKeeper>,
    /// The resident keepers (`resident.rs`) the keepers prepared ahead are forked from.
    residents: Vec<ResidentOf>,
    /// Being made: (serial, scope, profile).
    making: Vec<(u64, String, Profile)>,
    /// The serials of those being spawned right now (not waiting for their turn to start).
    spawning: Vec<u64>,
    next: u64,
    closed: bool,
}

impl State {
    /// Take out the residents of `scope` and `profile` made with other layers than
    /// `prepared`, to be dropped outside the lock.
    fn drop_stale_residents(
        &mut self,
        scope: &str,
        profile: &Profile,
        prepared: &Arc<Prepared>,
    ) -> Vec<ResidentOf> {
        self.residents
            .extract_if(.., |held| {
                held.scope == scope
                    && held.profile == *profile
                    && !Arc::ptr_eq(&held.prepared, prepared)
            })
            .collect()
    }

    /// How many are ready or being made for `scope` and `profile`.
    fn count_for(&self, scope: &str, profile: &Profile) -> usize {
        self.ready
            .iter()
            .filter(|k| k.scope == scope && k.profile == *profile)
            .count()
            + self
                .making
                .iter()
                .filter(|(_, s, p)| s == scope && p == profile)
                .count()
    }

    /// The profiles of `scope` with one ready or being made.
    fn profiles_of(&self, scope: &str) -> Vec<&Profile> {
        let mut profiles: Vec<&Profile> = Vec::new();
        let all = self
            .ready
            .iter()
            .filter(|k| k.scope == scope)
            .map(|k| &k.profile)
            .chain(
                self.making
                    .iter()
                    .filter(|(_, s, _)| s == scope)
                    .map(|(_, _, p)| p),
            );
        for profile in all {
            if !profiles.contains(&profile) {
                profiles.push(profile);
            }
        }
        profiles
    }
}

impl ReadyKeepers {
    pub(super) fn new(per_host: usize, idle: Duration) -> Self {
        Self {
            state: Mutex::new(State::default()),
            made: tokio::sync::Notify::new(),
            per_host,
            idle,
        }
    }

    /// How long an unused one is kept.
    pub(super) fn idle(&self) -> Duration {
        self.idle
    }

    /// One ready for a start of `scope` with `profile` and the layers `prepared`, taken out
    /// (the others stay ready); and the stale ones of that scope and profile (made with other
    /// layers), taken out to be released.
    pub(super) fn take(
        &self,
        scope: &str,
        profile: &Profile,
        prepared: &Arc<Prepared>,
    ) -> (Option<ReadyKeeper>, Vec<ReadyKeeper>) {
        let mut state = crate::lock(&self.state);
        let mut found = None;
        let mut stale = Vec::new();
        let mut index = 0;
        while index < state.ready.len() {
            let keeper = &state.ready[index];
            if keeper.scope == scope && keeper.profile == *profile {
                let fresh = Arc::ptr_eq(&keeper.prepared, prepared);
                if !fresh {
                    stale.push(state.ready.swap_remove(index));
                    continue;
                }
                if found.is_none() {
                    found = Some(state.ready.swap_remove(index));
                    continue;
                }
            }
            index += 1;
        }
        (found, stale)
    }

    /// The resident keeper for `scope`, `profile` and the layers `prepared`, if there is one;
    /// one of that scope and profile made with other layers is let go.
    pub(super) fn resident(
        &self,
        scope: &str,
        profile: &Profile,
        prepared: &Arc<Prepared>,
    ) -> Option<Arc<Resident>> {
        let mut state = crate::lock(&self.state);
        let stale = state.drop_stale_residents(scope, profile, prepared);
        let found = state
            .residents
            .iter()
            .find(|held| held.scope == scope && held.profile == *profile)
            .and_then(|held| held.resident.clone());
        drop(state);
        drop(stale);
        found
    }

    /// A turn to start the resident keeper for `scope`, `profile` and the layers `prepared`
    /// ([`ReadyKeepers::keep_resident`] ends it): `false` when one is there or being started,
    /// the pool is closed, nothing is prepared ahead on this host, or [`PER_SCOPE`] profiles
    /// of the scope have one.
    pub(super) fn resident_turn(
        &self,
        scope: &str,
        profile: &Profile,
        prepared: &Arc<Prepared>,
    ) -> bool {
        let mut state = crate::lock(&self.state);
        let stale = state.drop_stale_residents(scope, profile, prepared);
        let of_scope: Vec<&Profile> = state
            .residents
            .iter()
            .filter(|held| held.scope == scope)
            .map(|held| &held.profile)
            .collect();
        let turn = !state.closed
            && self.per_host > 0
            && !of_scope.contains(&profile)
            && of_scope.len() < PER_SCOPE;
        if turn {
            state.residents.push(ResidentOf {
                scope: scope.to_owned(),
                profile: profile.clone(),
                prepared: Arc::clone(prepared),
                resident: None,
            });
        }
        drop(state);
        drop(stale);
        turn
    }

    /// End the turn [`ReadyKeepers::resident_turn`] gave: keep `resident` (`None`: it could
    /// not be started), unless the pool closed or the scope ended meanwhile (it is dropped
    /// then).
    pub(super) fn keep_resident(
        &self,
        scope: &str,
        profile: &Profile,
        prepared: &Arc<Prepared>,
        resident: Option<Arc<Resident>>,
    ) {
        let mut state = crate::lock(&self.state);
        let slot = state.residents.iter().position(|held| {
            held.scope == scope
                && held.profile == *profile
                && Arc::ptr_eq(&held.prepared, prepared)
                && held.resident.is_none()
        });
        let unkept = match (slot, resident) {
            (Some(at), Some(resident)) => {
                state.residents[at].resident = Some(resident);
                None
            }
            (Some(at), None) => {
                state.residents.swap_remove(at);
                None
            }
            (None, resident) => resident,
        };
        drop(state);
        drop(unkept);
    }

    /// Let go of `resident` (it failed a fork).
    pub(super) fn forget_resident(&self, resident: &Arc<Resident>) {
        let mut state = crate::lock(&self.state);
        let at = state.residents.iter().position(|held| {
            held.resident
                .as_ref()
                .is_some_and(|held| Arc::ptr_eq(held, resident))
        });
        let forgotten = at.map(|at| state.residents.swap_remove(at));
        drop(state);
        drop(forgotten);
    }

    /// Whether one is ready for `scope` and `profile`.
    pub(super) fn has_ready(&self, scope: &str, profile: &Profile) -> bool {
        crate::lock(&self.state)
            .ready
            .iter()
            .any(|k| k.scope == scope && k.profile == *profile)
    }

    /// A turn to make one for `scope` and `profile`: `None` when [`PER_PROFILE`] are ready or
    /// being made for them already, or another bound is reached.
    pub(super) fn turn(&self, scope: &str, profile: &Profile) -> Option<u64> {
        let mut state = crate::lock(&self.state);
        let profiles = state.profiles_of(scope);
        let new_profile = !profiles.contains(&profile);
        let too_many_profiles = new_profile && profiles.len() >= PER_SCOPE;
        if state.closed
            || state.count_for(scope, profile) >= PER_PROFILE
            || state.ready.len() + state.making.len() >= self.per_host
            || too_many_profiles
        {
            return None;
        }
        state.next += 1;
        let serial = state.next;
        state
            .making
            .push((serial, scope.to_owned(), profile.clone()));
        Some(serial)
    }

    /// The one of turn `serial` is being spawned now.
    pub(super) fn spawning(&self, serial: u64) {
        crate::lock(&self.state).spawning.push(serial);
    }

    /// Wait until the keeper being spawned for `scope` and `profile`, if any, is put in, for
    /// `limit` at most: waiting for it costs less than making another.
    pub(super) async fn wait_spawning(&self, scope: &str, profile: &Profile, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let notified = self.made.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let state = crate::lock(&self.state);
                let spawning = state.making.iter().any(|(serial, s, p)| {
                    s == scope && p == profile && state.spawning.contains(serial)
                });
                if !spawning {
                    return;
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return;
            }
        }
    }

    /// Put in the one made in turn `serial`; it comes back (to be released) when its scope
    /// ended or the pool closed meanwhile. `None`: failed to make it.
    pub(super) fn put(&self, serial: u64, made: Option<ReadyKeeper>) -> Option<ReadyKeeper> {
        let back = {
            let mut state = crate::lock(&self.state);
            state.spawning.retain(|s| *s != serial);
            match state.making.iter().position(|(s, _, _)| *s == serial) {
                None => made,
                Some(at) => {
                    state.making.swap_remove(at);
                    made.and_then(|mut made| {
                        made.serial = serial;
                        state.ready.push(made);
                        None
                    })
                }
            }
        };
        self.made.notify_waiters();
        back
    }

    /// Take out the one of turn `serial` if it is still unused (its idle time is over).
    pub(super) fn expire(&self, serial: u64) -> Option<ReadyKeeper> {
        let mut state = crate::lock(&self.state);
        let at = state.ready.iter().position(|k| k.serial == serial)?;
        Some(state.ready.swap_remove(at))
    }

    /// Take out every one of `scope`, and forget those being made for it; and its resident
    /// keepers.
    pub(super) fn end_scope(&self, scope: &str) -> (Vec<ReadyKeeper>, Vec<Arc<Resident>>) {
        let mut state = crate::lock(&self.state);
        let residents = state
            .residents
            .extract_if(.., |held| held.scope == scope)
            .filter_map(|held| held.resident)
            .collect();
        let State {
            making, spawning, ..
        } = &mut *state;
        making.retain(|(serial, s, _)| {
            let keep = s != scope;
            if !keep {
                spawning.retain(|other| other != serial);
            }
            keep
        });
        let (gone, kept) = std::mem::take(&mut state.ready)
            .into_iter()
            .partition(|k| k.scope == scope);
        state.ready = kept;
        (gone, residents)
    }

    /// Whether it was closed ([`ReadyKeepers::close`]).
    pub(super) fn is_closed(&self) -> bool {
        crate::lock(&self.state).closed
    }

    /// Make no more; take out every one, and every resident keeper.
    pub(super) fn close(&self) -> (Vec<ReadyKeeper>, Vec<Arc<Resident>>) {
        let mut state = crate::lock(&self.state);
        state.closed = true;
        state.making.clear();
        state.spawning.clear();
        let residents = std::mem::take(&mut state.residents)
            .into_iter()
            .filter_map(|held| held.resident)
            .collect();
        (std::mem::take(&mut state.ready), residents)
    }

    /// How many are ready, per scope (for tests and reports).
    pub(super) fn count(&self, scope: Option<&str>) -> usize {
        let state = crate::lock(&self.state);
        state
            .ready
            .iter()
            .filter(|k| scope.is_none_or(|scope| k.scope == scope))
            .count()
    }

    /// The pids of those ready for `scope` and `profile` (for tests).
    #[cfg(test)]
    pub(super) fn pids_for(&self, scope: &str, profile: &Profile) -> Vec<Pid> {
        let state = crate::lock(&self.state);
        state
            .ready
            .iter()
            .filter(|k| k.scope == scope && k.profile == *profile)
            .map(ReadyKeeper::pid)
            .collect()
    }

    /// The resident keepers of `scope` (for tests).
    #[cfg(test)]
    pub(super) fn residents(&self, scope: &str) -> Vec<Arc<Resident>> {
        crate::lock(&self.state)
            .residents
            .iter()
            .filter(|held| held.scope == scope)
            .filter_map(|held| held.resident.clone())
            .collect()
    }

    /// The pids of those ready for `scope` (for tests).
    #[cfg(test)]
    pub(super) fn pids(&self, scope: &str) -> Vec<Pid> {
        let state = crate::lock(&self.state);
        state
            .ready
            .iter()
            .filter(|k| k.scope == scope)
            .map(ReadyKeeper::pid)
            .collect()
    }
}

/// What making one takes, gathered on the call path (cheap), used off it.
pub(super) struct Recipe {
    pub(super) scope: String,
    pub(super) profile: Profile,
    pub(super) prepared: Arc<Prepared>,
    /// The scope's cgroup, where the command's are made.
    pub(super) scope_cgroups: Option<Arc<ParentCgroups>>,
    pub(super) nice: i32,
}

/// Make a keeper prepared ahead: its command's cgroups, its channels, the keeper itself
/// (forked by the resident keeper of its scope, profile and layers, or spawned on the spawner
/// thread). A resident is started for it first when there is none and `new_resident` allows.
/// `Err` says why not.
pub(super) async fn make(
    spawner: &Spawner,
    pool: &ReadyKeepers,
    recipe: Recipe,
    new_resident: bool,
) -> Result<ReadyKeeper, String> {
    let resident = match pool.resident(&recipe.scope, &recipe.profile, &recipe.prepared) {
        Some(resident) => Some(resident),
        None if new_resident
            && pool.resident_turn(&recipe.scope, &recipe.profile, &recipe.prepared) =>
        {
            start_resident(spawner, pool, &recipe).await
        }
        None => None,
    };
    make_with(spawner, pool, recipe, resident).await
}

/// Make a keeper prepared ahead, forked by `resident` (a failed fork lets it go from `pool`),
/// or spawned on the spawner thread without one.
pub(super) async fn make_with(
    spawner: &Spawner,
    pool: &ReadyKeepers,
    recipe: Recipe,
    resident: Option<Arc<Resident>>,
) -> Result<ReadyKeeper, String> {
    let Recipe {
        scope,
        profile,
        prepared,
        scope_cgroups,
        nice,
    } = recipe;
    // Limits on everything the command starts count its keeper too (two when a spawned one
    // forks into a PID namespace; one forked by a resident is in it already).
    let keepers = match prepared.namespaces.as_ref() {
        Some(namespaces) if resident.is_none() && namespaces.has(NamespaceKind::Pid) => 2,
        _ => 1,
    };
    let cgroups = CommandCgroups::create(
        scope_cgroups,
        profile.limits.processes.map(|n| n.saturating_add(keepers)),
        profile.limits.memory_bytes,
    )
    .map_err(|error| format!("cannot create the command's cgroups: {error}"))?;
    let (host, ends) = keeper::channels().map_err(|error| error.to_string())?;
    let spawned = match resident {
        Some(resident) => {
            let files = cgroups
                .as_ref()
                .map_or(&[][..], CommandCgroups::procs)
                .iter()
                .map(|file| file.try_clone().map(OwnedFd::from))
                .collect::<std::io::Result<Vec<_>>>()
                .map_err(|error| error.to_string())?;
            match resident.fork(ends, &files).await {
                Ok(pid) => Spawned::forked(pid, resident),
                Err(error) => {
                    pool.forget_resident(&resident);
                    return Err(format!("the resident keeper cannot fork: {error}"));
                }
            }
        }
        None => {
            let spec = ChildSpec::ready(ends, &prepared, cgroups.as_ref(), nice)
                .map_err(|error| error.to_string())?;
            spawner
                .spawn(spec)
                .await
                .map_err(|error| error.to_string())?
        }
    };
    Ok(ReadyKeeper {
        scope,
        profile,
        prepared,
        serial: 0,
        spawned,
        host,
        cgroups,
    })
}

/// Start the resident keeper for `recipe`'s scope, profile and layers, in the turn
/// [`ReadyKeepers::resident_turn`] gave, and put it in `pool`.
pub(super) async fn start_resident(
    spawner: &Spawner,
    pool: &ReadyKeepers,
    recipe: &Recipe,
) -> Option<Arc<Resident>> {
    let started = spawn_resident(spawner, recipe)
        .await
        .map_err(|error| tracing::debug!(%error, "cannot start a resident keeper"))
        .ok();
    pool.keep_resident(
        &recipe.scope,
        &recipe.profile,
        &recipe.prepared,
        started.clone(),
    );
    started
}

/// Spawn a resident keeper for `recipe`'s scope, profile and layers.
async fn spawn_resident(spawner: &Spawner, recipe: &Recipe) -> Result<Arc<Resident>, String> {
    let (host, ends) = keeper::channels().map_err(|error| error.to_string())?;
    let spec = ChildSpec::resident(ends, &recipe.prepared, recipe.nice)
        .map_err(|error| error.to_string())?;
    let spawned = spawner
        .spawn(spec)
        .await
        .map_err(|error| error.to_string())?;
    let resident = Resident::new(spawned.pid(), host).map_err(|error| error.to_string())?;
    // The resident owns it from now on.
    spawned.release();
    Ok(Arc::new(resident))
}
