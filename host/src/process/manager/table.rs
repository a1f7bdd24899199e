//! The scope table: every listed process record, what each scope has running, starting and
//! retained, and whether the manager is closed.
//!
//! The table enforces the limits on running processes (`max_running_per_scope`,
//! `max_running_total`) and the caps on retained finished records (`max_retained_per_scope`,
//! `max_retained_total`).
//! All of it sits behind one lock.
//! The lock is held only for a few plain assignments, never across a file system call or an
//! await.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::entry::{Ended, Entry};
use crate::lock;
use crate::process::{ProcessError, ProcessInfo};

/// The records of a manager and their per-scope bookkeeping.
pub(super) struct Records {
    table: Mutex<Table>,
    /// Finished records kept listed in one scope, at most.
    max_retained_per_scope: usize,
    /// Finished records kept listed on the whole host, all scopes together, at most.
    max_retained_total: usize,
    /// `true` once the manager shuts down: nothing more is admitted, monitors stop lingering.
    closed: watch::Sender<bool>,
}

#[derive(Default)]
struct Table {
    entries: HashMap<String, Arc<Entry>>,
    /// Per scope (absent when idle: nothing running, starting or retained).
    scopes: HashMap<String, ScopeState>,
    /// Admitted records that still hold a keeper (running, or finished with leftovers).
    holding: usize,
    /// Finished records still listed, all scopes together.
    finished: usize,
    /// The order in which records finished (numbers the `finished` of every scope).
    finish_order: u64,
}

#[derive(Default)]
struct ScopeState {
    /// Records that are not finished: the limit is checked against these and `starting`.
    running: usize,
    /// Starts that passed the limit check and have no record yet.
    starting: usize,
    /// Finished records still listed, oldest finished first, each with its place in the
    /// host-wide finishing order.
    finished: VecDeque<(u64, Arc<Entry>)>,
    /// Bumped by `end_scope`: a start that reserved its slot under an older generation is
    /// not admitted.
    generation: u64,
    /// Whose scope it is, when it has an owner: its processes count in the owner's share.
    owner: Option<Arc<str>>,
}

/// The limits a start is counted against.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    /// Running processes of one scope, at most.
    pub(super) per_scope: usize,
    /// Running processes of one owner's scopes together, at most.
    pub(super) per_owner: usize,
    /// Processes holding a keeper on the host, at most.
    pub(super) total: usize,
}

impl Table {
    fn scope(&mut self, scope: &str) -> &mut ScopeState {
        self.scopes.entry(scope.to_owned()).or_default()
    }

    fn forget_if_idle(&mut self, scope: &str) {
        if self.scopes.get(scope).is_some_and(|state| {
            state.running == 0 && state.starting == 0 && state.finished.is_empty()
        }) {
            self.scopes.remove(scope);
        }
    }

    /// Whether `entry` is the listed record of its id.
    fn lists(&self, entry: &Arc<Entry>) -> bool {
        self.entries
            .get(&entry.spec.id)
            .is_some_and(|current| Arc::ptr_eq(current, entry))
    }

    /// Unlist the host's oldest finished record that has nothing left running (a record
    /// whose leftovers still run is kept: unlisting it would kill them, and they count
    /// against the host's process limit anyway).
    fn pop_oldest_finished(&mut self) -> Option<Arc<Entry>> {
        let (_, scope, index) = self
            .scopes
            .iter()
            .filter_map(|(name, state)| {
                let (index, (order, _)) = state
                    .finished
                    .iter()
                    .enumerate()
                    .find(|(_, (_, entry))| !entry.holding.load(Ordering::Relaxed))?;
                Some((*order, name, index))
            })
            .min()?;
        let scope = scope.clone();
        let (_, old) = self.scopes.get_mut(&scope)?.finished.remove(index)?;
        self.finished = self.finished.saturating_sub(1);
        self.entries.remove(&old.spec.id);
        self.forget_if_idle(&scope);
        Some(old)
    }

    fn unreserve(&mut self, scope: &str) {
        if let Some(state) = self.scopes.get_mut(scope) {
            state.starting = state.starting.saturating_sub(1);
            self.forget_if_idle(scope);
        }
    }
}

impl Records {
    /// The log files of the listed records.
    pub(super) fn log_paths(&self) -> Vec<std::path::PathBuf> {
        lock(&self.table)
            .entries
            .values()
            .filter_map(|entry| entry.log_path())
            .collect()
    }

    /// At most `max_retained_per_scope` finished records kept per scope, `max_retained_total`
    /// in all.
    pub(super) fn new(max_retained_per_scope: usize, max_retained_total: usize) -> Self {
        Self {
            table: Mutex::new(Table::default()),
            max_retained_per_scope,
            max_retained_total,
            closed: watch::channel(false).0,
        }
    }

    pub(super) fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    /// Becomes `true` when the manager closes.
    pub(super) fn subscribe_closed(&self) -> watch::Receiver<bool> {
        self.closed.subscribe()
    }

    /// Close (nothing is admitted from now on) and return every listed record.
    pub(super) fn close(&self) -> Vec<Arc<Entry>> {
        let table = lock(&self.table);
        self.closed.send_replace(true);
        table.entries.values().cloned().collect()
    }

    /// Close and unlist every record, returning them.
    pub(super) fn close_and_drain(&self) -> Vec<Arc<Entry>> {
        let mut table = lock(&self.table);
        self.closed.send_replace(true);
        table.entries.drain().map(|(_, entry)| entry).collect()
    }

    /// Count a start of `scope` (owned by `owner`, if it has one) against `limits`, in order:
    ///
    /// 1. The scope's running processes.
    /// 2. The running processes of the owner's scopes together.
    /// 3. The processes holding a keeper on the whole host.
    pub(super) fn reserve(
        &self,
        scope: &str,
        owner: Option<&Arc<str>>,
        limits: Limits,
    ) -> Result<Reservation<'_>, ProcessError> {
        let Limits {
            per_scope: max_running_per_scope,
            per_owner: max_running_per_owner,
            total: max_running_total,
        } = limits;
        let mut table = lock(&self.table);
        let busy = table
            .scopes
            .get(scope)
            .map_or(0, |state| state.running + state.starting);
        if busy >= max_running_per_scope {
            return Err(ProcessError::LimitReached(format!(
                "too many running processes: this session already has {busy} (the limit is \
                 {max_running_per_scope}); wait for one to finish or stop one before starting another"
            )));
        }
        if let Some(owner) = owner {
            let of_owner: usize = table
                .scopes
                .values()
                .filter(|state| state.owner.as_ref() == Some(owner))
                .map(|state| state.running + state.starting)
                .sum();
            if of_owner >= max_running_per_owner {
                tracing::warn!(
                    scope,
                    %owner,
                    of_owner,
                    "refused a start: the principal's process limit is reached"
                );
                return Err(ProcessError::LimitReached(format!(
                    "too many running processes: this principal's sessions already have \
                     {of_owner} (the limit is {max_running_per_owner}, \
                     --max-processes-per-principal); wait for one to finish or stop one before \
                     starting another"
                )));
            }
        }
        // Every record that still holds a keeper counts, also a finished one whose leftovers
        // (`cmd &`) still run: they hold the host's descriptors just the same.
        let starting: usize = table.scopes.values().map(|state| state.starting).sum();
        let total = starting + table.holding;
        if total >= max_running_total {
            tracing::warn!(
                scope,
                total,
                "refused a start: the host's process limit is reached"
            );
            return Err(ProcessError::LimitReached(format!(
                "the host runs its maximum of {max_running_total} processes across all \
                 sessions (--max-processes-total); wait for one to finish or stop one before \
                 starting another"
            )));
        }
        let state = table.scope(scope);
        state.starting += 1;
        if state.owner.is_none() {
            state.owner = owner.cloned();
        }
        Ok(Reservation {
            records: self,
            scope: scope.to_owned(),
            owner: owner.cloned(),
            generation: state.generation,
            armed: true,
        })
    }

    /// List `entry` in place of its reservation, unless the manager closed or the scope
    /// ended since the slot was reserved: then nothing is listed and the refusal returned.
    pub(super) fn admit(
        &self,
        reservation: Reservation<'_>,
        entry: &Arc<Entry>,
    ) -> Result<(), ProcessError> {
        let mut table = lock(&self.table);
        let refused = self.refusal(&table, &reservation);
        // Giving the slot back may forget the scope's state: its owner comes back with the
        // record.
        let owner = reservation.owner.clone();
        reservation.release(&mut table);
        match refused {
            Some(error) => Err(error),
            None => {
                table
                    .entries
                    .insert(entry.spec.id.clone(), Arc::clone(entry));
                let state = table.scope(&entry.spec.scope);
                state.running += 1;
                if state.owner.is_none() {
                    state.owner = owner;
                }
                table.holding += 1;
                entry.counted.store(true, Ordering::Relaxed);
                entry.holding.store(true, Ordering::Relaxed);
                Ok(())
            }
        }
    }

    /// Why a start holding `reservation` may not go on: the manager closed or the scope ended
    /// since the slot was reserved.
    fn refusal(&self, table: &Table, reservation: &Reservation<'_>) -> Option<ProcessError> {
        let generation = table
            .scopes
            .get(&reservation.scope)
            .map(|state| state.generation);
        if self.is_closed() {
            Some(shut_down())
        } else if generation != Some(reservation.generation) {
            Some(ProcessError::Failed(
                "the session ended while the process was starting".to_owned(),
            ))
        } else {
            None
        }
    }

    /// Record the end of a process and release its slot in the scope's count. If the scope,
    /// or the host, now retains too many finished records, the oldest is removed.
    pub(super) fn finish(&self, entry: &Arc<Entry>, ended: Ended) {
        let evicted = {
            let mut table = lock(&self.table);
            lock(&entry.state).end = Some(ended);
            let counted = entry.counted.swap(false, Ordering::Relaxed);
            let listed = table.lists(entry);
            let mut evicted = Vec::new();
            if counted || listed {
                let order = table.finish_order;
                table.finish_order += 1;
                let state = table.scope(&entry.spec.scope);
                if counted {
                    state.running = state.running.saturating_sub(1);
                }
                let mut added = 0;
                if listed {
                    state.finished.push_back((order, Arc::clone(entry)));
                    added += 1;
                    if state.finished.len() > self.max_retained_per_scope
                        && let Some((_, old)) = state.finished.pop_front()
                    {
                        added -= 1;
                        evicted.push(old);
                    }
                }
                table.finished += added;
                for old in &evicted {
                    table.entries.remove(&old.spec.id);
                }
                table.forget_if_idle(&entry.spec.scope);
                while table.finished > self.max_retained_total {
                    match table.pop_oldest_finished() {
                        Some(old) => evicted.push(old),
                        None => break,
                    }
                }
            }
            evicted
        };
        entry.finished.send_replace(true);
        for old in evicted {
            old.dispose();
            self.let_go(&old);
        }
    }

    /// `entry` let go of its keeper and cgroups: it no longer counts against the host's
    /// process limit, and may now be removed. When the host retains too many finished records
    /// (the oldest ones were still holding theirs when the last one finished), the oldest that
    /// hold nothing go now. Doing it again does nothing.
    pub(super) fn let_go(&self, entry: &Entry) {
        let evicted = {
            let mut table = lock(&self.table);
            if !entry.holding.swap(false, Ordering::Relaxed) {
                return;
            }
            table.holding = table.holding.saturating_sub(1);
            let mut evicted = Vec::new();
            while table.finished > self.max_retained_total {
                match table.pop_oldest_finished() {
                    Some(old) => evicted.push(old),
                    None => break,
                }
            }
            evicted
        };
        // Each holds nothing (`pop_oldest_finished` takes only those): no deeper call.
        for old in evicted {
            old.dispose();
        }
    }

    /// The record `id` of `scope`; a record of another scope is not found.
    pub(super) fn find(&self, scope: &str, id: &str) -> Result<Arc<Entry>, ProcessError> {
        lock(&self.table)
            .entries
            .get(id)
            .filter(|entry| entry.spec.scope == scope)
            .cloned()
            .ok_or_else(|| ProcessError::NotFound(id.to_owned()))
    }

    /// Unlist the record (if it is still this one) and release everything it holds.
    pub(super) fn remove(&self, entry: &Arc<Entry>) {
        {
            let mut table = lock(&self.table);
            if table.lists(entry) {
                table.entries.remove(&entry.spec.id);
                if let Some(state) = table.scopes.get_mut(&entry.spec.scope) {
                    let before = state.finished.len();
                    state
                        .finished
                        .retain(|(_, other)| !Arc::ptr_eq(other, entry));
                    let removed = before - state.finished.len();
                    table.finished = table.finished.saturating_sub(removed);
                }
                table.forget_if_idle(&entry.spec.scope);
            }
        }
        entry.dispose();
        self.let_go(entry);
    }

    /// `scope`'s listed records, in no order.
    pub(super) fn of_scope(&self, scope: &str) -> Vec<Arc<Entry>> {
        lock(&self.table)
            .entries
            .values()
            .filter(|entry| entry.spec.scope == scope)
            .cloned()
            .collect()
    }

    /// `scope`'s processes: running first, then newest first. What they left running is
    /// read from `/proc` outside the table's lock.
    pub(super) fn list(&self, scope: &str) -> Vec<ProcessInfo> {
        let mut rows: Vec<(u64, ProcessInfo)> = self
            .of_scope(scope)
            .iter()
            .map(|entry| (entry.spec.seq, entry.info()))
            .collect();
        rows.sort_by(|(a_seq, a), (b_seq, b)| b.running.cmp(&a.running).then(b_seq.cmp(a_seq)));
        rows.into_iter().map(|(_, info)| info).collect()
    }

    /// End `scope`: starts under way are refused (and their process killed) when they would
    /// be admitted. Returns the scope's listed records.
    pub(super) fn end_scope(&self, scope: &str) -> Vec<Arc<Entry>> {
        let mut table = lock(&self.table);
        if let Some(state) = table.scopes.get_mut(scope) {
            state.generation = state.generation.wrapping_add(1);
        }
        table
            .entries
            .values()
            .filter(|entry| entry.spec.scope == scope)
            .cloned()
            .collect()
    }

    /// How many records are listed.
    pub(super) fn len(&self) -> usize {
        lock(&self.table).entries.len()
    }
}

/// A slot counted against the scope's limit while a start is under way; given back when
/// dropped unless [`Records::admit`] took it.
pub(super) struct Reservation<'a> {
    records: &'a Records,
    scope: String,
    /// The scope's owner, if it has one.
    owner: Option<Arc<str>>,
    /// The scope's generation when the slot was taken.
    generation: u64,
    armed: bool,
}

impl Reservation<'_> {
    /// Whether the start may still go on (see [`Records::admit`], which decides for good):
    /// checked before the command is spawned, so that one whose scope ended meanwhile does not
    /// run at all.
    pub(super) fn check(&self) -> Result<(), ProcessError> {
        let table = lock(&self.records.table);
        self.records.refusal(&table, self).map_or(Ok(()), Err)
    }

    /// Give the slot back under the caller's table lock (the record takes its place).
    fn release(mut self, table: &mut Table) {
        self.armed = false;
        table.unreserve(&self.scope);
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.armed {
            lock(&self.records.table).unreserve(&self.scope);
        }
    }
}

/// The refusal of a start once the manager has shut down.
pub(super) fn shut_down() -> ProcessError {
    ProcessError::Failed("the process manager has been shut down".to_owned())
}

#[cfg(test)]
impl Records {
    /// Running plus starting processes of `scope`.
    pub(super) fn busy(&self, scope: &str) -> usize {
        lock(&self.table)
            .scopes
            .get(scope)
            .map_or(0, |state| state.running + state.starting)
    }

    /// Whether no scope has anything running, starting or retained.
    pub(super) fn all_idle(&self) -> bool {
        lock(&self.table).scopes.is_empty()
    }

    /// The unreaped keepers of the listed records.
    pub(super) fn keepers(&self) -> Vec<nix::unistd::Pid> {
        lock(&self.table)
            .entries
            .values()
            .filter_map(|entry| {
                lock(&entry.keeper)
                    .pid
                    .as_ref()
                    .map(super::spawner::KeeperPid::pid)
            })
            .collect()
    }
}
