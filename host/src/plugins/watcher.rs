//! Hot swap: watch plugin directories and trigger a reload when a component or manifest is
//! added, replaced or removed. Bursts of events (an editor's save, a copy in several writes)
//! are coalesced into one reload.

use crate::error::HostError;
use notify::{EventKind, RecursiveMode, Watcher};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long to wait for an event burst to settle before reloading.
const SETTLE: Duration = Duration::from_millis(150);

/// Watch `dirs`; after each burst of relevant changes, run `reload`. The watch lasts as long
/// as the returned watcher lives. Must be called inside a tokio runtime.
pub(crate) fn watch_plugin_dirs<F, Fut>(
    dirs: &[PathBuf],
    reload: F,
) -> Result<notify::RecommendedWatcher, HostError>
where
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let mut watcher =
        notify::recommended_watcher(move |event: notify::Result<notify::Event>| match event {
            Ok(event) if is_relevant(&event) => {
                let _ = tx.send(());
            }
            Ok(_) => {}
            Err(e) => tracing::warn!("plugin directory watch error: {e}"),
        })
        .map_err(|e| HostError::Watch(e.to_string()))?;
    for dir in dirs {
        watcher
            .watch(dir, RecursiveMode::NonRecursive)
            .map_err(|e| HostError::Watch(format!("{}: {e}", dir.display())))?;
    }
    tokio::spawn(async move {
        // Ends when the watcher (and with it the sender) is dropped.
        while rx.recv().await.is_some() {
            tokio::time::sleep(SETTLE).await;
            while rx.try_recv().is_ok() {}
            reload().await;
        }
    });
    Ok(watcher)
}

/// Changes to `*.wasm` and `*.toml` files matter; access events and other files do not.
fn is_relevant(event: &notify::Event) -> bool {
    let kind_matters = matches!(
        event.kind,
        EventKind::Create(_) | EventKind::Modify(_) | EventKind::Remove(_) | EventKind::Any
    );
    kind_matters && event.paths.iter().any(|p| is_plugin_file(p))
}

fn is_plugin_file(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "wasm" || e == "toml")
}
