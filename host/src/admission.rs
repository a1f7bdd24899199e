//! Admission control: how many tool calls may be in progress at once.
//!
//! There are three limits: one for the whole host (`max_calls_total`), one per scope, that
//! is per session (`max_calls_per_scope`), and one per principal (`max_calls_per_principal`:
//! all the calls of one bearer token's sessions and scopes together, over HTTP).
//! A call beyond either limit is refused before anything of it runs, instead of queueing.
//! Each call in progress holds a guest instance, up to its plugin's memory limit.
//! It often starts a process too.
//! So the host-wide limit bounds the host's memory.
//! The per-scope limit keeps one session from taking every place.
//!
//! A call runs while it holds a [`CallPermit`].
//! The permit is given back when it is dropped.

use crate::guest::CallError;
use crate::lock;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Calls in progress at once per CPU the host may use, by default
/// ([`default_max_calls_total`]).
///
/// A call's start and end take the host's CPU (the guest, the command's launch, its notes).
/// Past about this many calls a CPU, a host under more calls than it can run spends its time
/// on calls it cannot finish in time instead of refusing them at once. On the 2-core machine
/// of docs/performance.md, 96 or 128 calls in progress halved the confined call rate against
/// 64, and 48 gave the confined calls their highest rate and half the latency of 64.
pub const DEFAULT_CALLS_PER_CPU: usize = 24;

/// The most calls in progress [`default_max_calls_total`] gives, whatever the CPUs.
pub const DEFAULT_MAX_CALLS_CEILING: usize = 256;

/// The default of [`crate::ToolHostBuilder::max_calls_total`] and `--max-calls-total`:
/// [`DEFAULT_CALLS_PER_CPU`] for each CPU the host may use (its affinity and cgroup quota
/// count), at most [`DEFAULT_MAX_CALLS_CEILING`].
pub fn default_max_calls_total() -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    calls_for_cpus(cpus)
}

/// [`default_max_calls_total`] for `cpus` CPUs.
fn calls_for_cpus(cpus: usize) -> usize {
    cpus.saturating_mul(DEFAULT_CALLS_PER_CPU)
        .clamp(DEFAULT_CALLS_PER_CPU, DEFAULT_MAX_CALLS_CEILING)
}

/// The default of [`crate::ToolHostBuilder::max_calls_per_session`]: as many as the processes
/// a session may run at once.
pub const DEFAULT_MAX_CALLS_PER_SESSION: usize = 64;

/// Calls in progress per key (a scope or a principal); keys with none are not kept.
type Counts = Arc<Mutex<HashMap<String, usize>>>;

/// The places of a host's calls.
pub(crate) struct Admissions {
    /// One semaphore permit per call in progress, host-wide.
    host: Arc<Semaphore>,
    /// Calls in progress at once on the whole host, at most.
    max_calls_total: usize,
    /// Calls in progress per scope (scopes with none are not kept).
    scopes: Counts,
    /// Calls in progress at once in one scope, at most.
    max_calls_per_scope: usize,
    /// Calls in progress per principal (principals with none are not kept).
    principals: Counts,
    /// Calls in progress at once of one principal, at most.
    max_calls_per_principal: usize,
}

/// A place for one call of a scope among the calls in progress.
///
/// [`crate::ToolHost::admit`] gives one out.
/// A call holds it while it runs ([`crate::Call::permit`]).
/// Dropping it gives the place back.
pub struct CallPermit {
    _permit: OwnedSemaphorePermit,
    scope: String,
    scopes: Counts,
    /// The principal the call counts for, and the counts it is in.
    principal: Option<(String, Counts)>,
}

impl Admissions {
    /// At most `max_calls_total` calls at once, `max_calls_per_scope` of them in one scope
    /// and `max_calls_per_principal` of one principal (each at least 1).
    pub(crate) fn new(
        max_calls_total: usize,
        max_calls_per_scope: usize,
        max_calls_per_principal: usize,
    ) -> Self {
        let max_calls_total = max_calls_total.clamp(1, Semaphore::MAX_PERMITS);
        Admissions {
            host: Arc::new(Semaphore::new(max_calls_total)),
            max_calls_total,
            scopes: Arc::new(Mutex::new(HashMap::new())),
            max_calls_per_scope: max_calls_per_scope.max(1),
            principals: Arc::new(Mutex::new(HashMap::new())),
            max_calls_per_principal: max_calls_per_principal.max(1),
        }
    }

    /// A place for a call of `scope` (of `principal`, when it has one), or why there is none.
    /// The checks, in order:
    ///
    /// 1. The scope's own limit.
    /// 2. The principal's limit, over all its scopes.
    /// 3. The host's limit.
    pub(crate) fn admit(
        &self,
        scope: &str,
        principal: Option<&str>,
    ) -> Result<CallPermit, CallError> {
        let refusal = {
            // Locked in this order everywhere: scopes, then principals.
            let mut scopes = lock(&self.scopes);
            let mut principals = lock(&self.principals);
            let running = scopes.get(scope).copied().unwrap_or(0);
            let of_principal = principal.map_or(0, |who| principals.get(who).copied().unwrap_or(0));
            if running >= self.max_calls_per_scope {
                CallError::ScopeBusy {
                    max_calls: self.max_calls_per_scope,
                }
            } else if principal.is_some() && of_principal >= self.max_calls_per_principal {
                CallError::PrincipalBusy {
                    max_calls: self.max_calls_per_principal,
                }
            } else if let Ok(permit) = self.host.clone().try_acquire_owned() {
                *scopes.entry(scope.to_owned()).or_insert(0) += 1;
                if let Some(who) = principal {
                    *principals.entry(who.to_owned()).or_insert(0) += 1;
                }
                return Ok(CallPermit {
                    _permit: permit,
                    scope: scope.to_owned(),
                    scopes: self.scopes.clone(),
                    principal: principal.map(|who| (who.to_owned(), self.principals.clone())),
                });
            } else {
                CallError::Busy {
                    max_calls: self.max_calls_total,
                }
            }
        };
        // Logged without the lock: a slow log must not hold up every call of the host.
        refused(scope, &refusal);
        Err(refusal)
    }

    /// Whether `permit` is one of these places.
    pub(crate) fn issued(&self, permit: &CallPermit) -> bool {
        Arc::ptr_eq(&self.scopes, &permit.scopes)
    }
}

impl std::fmt::Debug for CallPermit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallPermit")
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl CallPermit {
    /// The scope the place is for.
    pub fn scope(&self) -> &str {
        &self.scope
    }
}

impl Drop for CallPermit {
    fn drop(&mut self) {
        let mut scopes = lock(&self.scopes);
        if let Some(running) = scopes.get_mut(&self.scope) {
            *running = running.saturating_sub(1);
            if *running == 0 {
                scopes.remove(&self.scope);
            }
        }
        if let Some((who, principals)) = &self.principal {
            let mut principals = lock(principals);
            if let Some(running) = principals.get_mut(who) {
                *running = running.saturating_sub(1);
                if *running == 0 {
                    principals.remove(who);
                }
            }
        }
    }
}

/// Log a refusal: a warning at most every 10 s with how many were refused since (under
/// overload there can be thousands a second), each one at debug.
fn refused(scope: &str, refusal: &CallError) {
    static LAST: Mutex<Option<(Instant, u64)>> = Mutex::new(None);
    const EVERY: Duration = Duration::from_secs(10);
    let mut last = lock(&LAST);
    match &mut *last {
        Some((at, refused)) if at.elapsed() < EVERY => {
            *refused += 1;
            tracing::debug!(scope, "refused a call: {refusal}");
        }
        _ => {
            let since = last.map_or(0, |(_, refused)| refused);
            *last = Some((Instant::now(), 0));
            tracing::warn!(
                scope,
                refused_since_last_warning = since,
                "refused a call: {refusal}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_limit_follows_the_cpus_within_its_bounds() {
        assert_eq!(calls_for_cpus(0), DEFAULT_CALLS_PER_CPU);
        assert_eq!(calls_for_cpus(1), 24);
        assert_eq!(calls_for_cpus(2), 48);
        assert_eq!(calls_for_cpus(8), 192);
        assert_eq!(calls_for_cpus(11), 256);
        assert_eq!(calls_for_cpus(64), DEFAULT_MAX_CALLS_CEILING);
        assert_eq!(calls_for_cpus(usize::MAX), DEFAULT_MAX_CALLS_CEILING);
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        assert_eq!(default_max_calls_total(), calls_for_cpus(cpus));
    }

    #[test]
    fn places_are_limited_per_scope_and_per_host_and_given_back() {
        let admissions = Admissions::new(3, 2, 3);
        let a1 = admissions.admit("a", None).expect("a 1");
        let a2 = admissions.admit("a", None).expect("a 2");
        assert_eq!(
            admissions.admit("a", None).expect_err("a is full"),
            CallError::ScopeBusy { max_calls: 2 }
        );
        let b1 = admissions.admit("b", None).expect("b 1");
        // The host is full: b, below its own limit, is refused too.
        assert_eq!(
            admissions.admit("b", None).expect_err("the host is full"),
            CallError::Busy { max_calls: 3 }
        );
        // A refusal at the host's limit took no place of b's.
        drop(a1);
        let b2 = admissions.admit("b", None).expect("b 2");
        assert_eq!(b2.scope(), "b");
        drop((a2, b1, b2));
        assert!(
            lock(&admissions.scopes).is_empty(),
            "scopes with no call go"
        );
        let _again: Vec<CallPermit> = (0..2)
            .map(|_| admissions.admit("a", None).expect("a again"))
            .collect();
    }

    #[test]
    fn a_principal_is_limited_over_all_its_scopes_and_others_go_on() {
        let admissions = Admissions::new(10, 5, 2);
        let a1 = admissions.admit("a1", Some("alice")).expect("a1");
        let a2 = admissions.admit("a2", Some("alice")).expect("a2");
        // Alice's third call is refused, in a scope of hers with no call at all.
        assert_eq!(
            admissions
                .admit("a3", Some("alice"))
                .expect_err("alice is full"),
            CallError::PrincipalBusy { max_calls: 2 }
        );
        // Bob is not held up by Alice, nor is a call without a principal (stdio).
        let b1 = admissions.admit("b1", Some("bob")).expect("bob");
        let local = admissions.admit("local", None).expect("no principal");
        // A place of Alice's given back is hers to take again.
        drop(a1);
        let a3 = admissions.admit("a3", Some("alice")).expect("alice again");
        drop((a2, a3, b1, local));
        assert!(lock(&admissions.principals).is_empty(), "counts given back");
    }
}
