//! Admission control: how many tool calls may be in progress at once, across the host and
//! within one scope (session). A call beyond either limit is refused before anything of it
//! runs, instead of queueing: each call in progress holds a guest instance (up to its plugin's
//! memory limit) and often a process start, so the limits bound the host's memory and keep one
//! session from taking every place.

use crate::guest::CallError;
use crate::lock;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The default of [`crate::ToolHostBuilder::max_calls`].
pub const DEFAULT_MAX_CALLS: usize = 256;

/// The default of [`crate::ToolHostBuilder::max_calls_per_session`]: as many as the processes
/// a session may run at once.
pub const DEFAULT_MAX_CALLS_PER_SESSION: usize = 64;

/// The places of a host's calls.
pub(crate) struct Admissions {
    /// One permit per call in progress, host-wide.
    host: Arc<Semaphore>,
    max_calls: usize,
    /// Calls in progress per scope (scopes with none are not kept).
    scopes: Arc<Mutex<HashMap<String, usize>>>,
    max_per_scope: usize,
}

/// A place for one call of a scope, from [`crate::ToolHost::admit`]: held while the call runs,
/// given back when dropped.
pub struct Admission {
    _permit: OwnedSemaphorePermit,
    scope: String,
    scopes: Arc<Mutex<HashMap<String, usize>>>,
}

impl Admissions {
    /// At most `max_calls` calls at once, `max_per_scope` of them in one scope (each at least 1).
    pub(crate) fn new(max_calls: usize, max_per_scope: usize) -> Self {
        let max_calls = max_calls.clamp(1, Semaphore::MAX_PERMITS);
        Admissions {
            host: Arc::new(Semaphore::new(max_calls)),
            max_calls,
            scopes: Arc::new(Mutex::new(HashMap::new())),
            max_per_scope: max_per_scope.max(1),
        }
    }

    /// A place for a call of `scope`, or why there is none.
    pub(crate) fn admit(&self, scope: &str) -> Result<Admission, CallError> {
        let refusal = {
            let mut scopes = lock(&self.scopes);
            let running = scopes.get(scope).copied().unwrap_or(0);
            if running >= self.max_per_scope {
                CallError::SessionBusy {
                    max_calls: self.max_per_scope,
                }
            } else if let Ok(permit) = self.host.clone().try_acquire_owned() {
                match scopes.get_mut(scope) {
                    Some(running) => *running += 1,
                    None => {
                        scopes.insert(scope.to_owned(), 1);
                    }
                }
                return Ok(Admission {
                    _permit: permit,
                    scope: scope.to_owned(),
                    scopes: self.scopes.clone(),
                });
            } else {
                CallError::Busy {
                    max_calls: self.max_calls,
                }
            }
        };
        // Logged without the lock: a slow log must not hold up every call of the host.
        refused(scope, &refusal);
        Err(refusal)
    }

    /// Whether `admission` is one of these places.
    pub(crate) fn issued(&self, admission: &Admission) -> bool {
        Arc::ptr_eq(&self.scopes, &admission.scopes)
    }
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl Admission {
    /// The scope the place is for.
    pub fn scope(&self) -> &str {
        &self.scope
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        let mut scopes = lock(&self.scopes);
        if let Some(running) = scopes.get_mut(&self.scope) {
            *running = running.saturating_sub(1);
            if *running == 0 {
                scopes.remove(&self.scope);
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
    fn places_are_limited_per_scope_and_per_host_and_given_back() {
        let admissions = Admissions::new(3, 2);
        let a1 = admissions.admit("a").expect("a 1");
        let a2 = admissions.admit("a").expect("a 2");
        assert_eq!(
            admissions.admit("a").expect_err("a is full"),
            CallError::SessionBusy { max_calls: 2 }
        );
        let b1 = admissions.admit("b").expect("b 1");
        // The host is full: b, below its own limit, is refused too.
        assert_eq!(
            admissions.admit("b").expect_err("the host is full"),
            CallError::Busy { max_calls: 3 }
        );
        // A refusal at the host's limit took no place of b's.
        drop(a1);
        let b2 = admissions.admit("b").expect("b 2");
        assert_eq!(b2.scope(), "b");
        drop((a2, b1, b2));
        assert!(
            lock(&admissions.scopes).is_empty(),
            "scopes with no call go"
        );
        let _again: Vec<Admission> = (0..2)
            .map(|_| admissions.admit("a").expect("a again"))
            .collect();
    }
}
