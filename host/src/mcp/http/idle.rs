//! Idle expiry, shared by the HTTP sessions (`sessions.rs`) and the named scopes
//! (`scopes.rs`): what has been idle too long is taken out of its table, and the expiry task
//! waits for the next deadline.

use std::collections::HashMap;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Take out of `table` what has been idle for `idle` (not `busy`, last active at `last`);
/// returns it and the earliest deadline of what is left idle.
pub(super) fn take_idle<K: Eq + std::hash::Hash, V>(
    table: &mut HashMap<K, V>,
    idle: Duration,
    busy: impl Fn(&V) -> bool,
    last: impl Fn(&V) -> Instant,
) -> (Vec<(K, V)>, Option<Instant>) {
    let now = Instant::now();
    let expired = table
        .extract_if(|_, value| !busy(value) && last(value) + idle <= now)
        .collect();
    let next = table
        .values()
        .filter(|value| !busy(value))
        .map(|value| last(value) + idle)
        .min();
    (expired, next)
}

/// Wait for the next idle deadline (`None`: none yet), a change, or `stop`; false once
/// stopped.
pub(super) async fn idle_wait(
    next: Option<Instant>,
    changed: &Notify,
    stop: &CancellationToken,
) -> bool {
    let deadline = async {
        match next {
            Some(deadline) => tokio::time::sleep_until(deadline).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = stop.cancelled() => false,
        _ = changed.notified() => true,
        _ = deadline => true,
    }
}
