//! Processes a test looks for: a marker to put on their command lines, a scan of `/proc` for
//! the live ones that carry it, and waits on what a test can observe instead of sleeps.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// A unique marker for commands whose processes a test looks for in `/proc`.
pub fn marker() -> String {
    static COUNTER: AtomicI64 = AtomicI64::new(0);
    format!(
        "{}{:04}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// The pids of live (not zombie) processes whose command line contains `needle`.
pub fn processes_with(needle: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return pids;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if !cmdline.contains(needle) {
            continue;
        }
        let zombie = std::fs::read_to_string(entry.path().join("stat"))
            .map(|s| {
                s.rsplit_once(')')
                    .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
            })
            .unwrap_or(true);
        if !zombie {
            pids.push(pid);
        }
    }
    pids
}

/// Check `condition` every 20 ms until it holds (true) or `limit` passes (false). For waiting
/// on what a test can observe instead of sleeping for a guessed time.
pub async fn eventually(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if condition() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Wait up to `limit` until no live process's command line contains `needle`.
pub async fn wait_gone(needle: &str, limit: Duration) -> bool {
    eventually(limit, || processes_with(needle).is_empty()).await
}

/// Wait up to `limit` until some live process's command line contains `needle`.
pub async fn wait_present(needle: &str, limit: Duration) -> bool {
    eventually(limit, || !processes_with(needle).is_empty()).await
}

/// How many live `sleep` processes have `marker` on their command line.
pub fn sleeps_with(marker: &str) -> usize {
    processes_with(marker)
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.starts_with(b"sleep\0"))
        })
        .count()
}
