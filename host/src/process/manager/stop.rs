//! Stopping many processes at once, as a scope's end and the host's shutdown do.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::entry::Entry;
use crate::process::Signal;

/// After `SIGKILL`, how much longer than the drain timeout a stop waits for monitors to
/// finish.
const KILL_SETTLE: Duration = Duration::from_secs(1);

/// Stop `entries`:
///
/// 1. `SIGTERM` to everything each started.
/// 2. Wait up to `kill_grace` for the processes and what they started to finish.
/// 3. `SIGKILL` to everything left (leftover grandchildren of finished processes included).
/// 4. Wait up to `drain_timeout` and a second more until nothing of them is left.
pub(super) async fn stop_all(
    entries: &[Arc<Entry>],
    kill_grace: Duration,
    drain_timeout: Duration,
) {
    if entries.is_empty() {
        return;
    }
    for entry in entries {
        entry.signal_all(Signal::Terminate);
    }
    // The grace period is for everything the commands started, not only for the commands:
    // what a finished command left behind gets it too.
    let deadline = Instant::now().checked_add(kill_grace);
    for entry in entries {
        entry.wait_finished(deadline).await;
        entry.wait_gone(deadline).await;
    }
    for entry in entries {
        entry.signal_all(Signal::Kill);
    }
    let deadline = Instant::now().checked_add(drain_timeout.saturating_add(KILL_SETTLE));
    for entry in entries {
        entry.wait_finished(deadline).await;
        entry.wait_gone(deadline).await;
    }
}
