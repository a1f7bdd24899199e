//! What one scope (an agent session) holds in the process manager, in one place: its
//! confinement state, its git guard, the index of its output logs, its owner and the workspace
//! it chose; and [`end`], the order a scope is let go in.
//!
//! Two things stay keyed by the scope's name elsewhere, each under its own lock:
//! - the process table (`table.rs`) counts a scope's processes under the lock that admits a
//!   process against both the scope's and the host's limits;
//! - the pool of keepers prepared ahead (`ready.rs`) is bounded on the whole host, and a
//!   keeper is taken under the pool's lock.
//!
//! [`end`] lets go of all three.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use super::launch::Launcher;
use super::output_log::ScopeLogs;
use super::stop;
use super::table::Records;
use super::workspace::ScopeWorkspace;
use crate::sandbox::git_guard::{GitGuard, Moment};
use crate::sandbox::{Context, ScopeSandbox};

/// One scope's own state, made at its first command.
#[derive(Debug)]
pub(super) struct Scope {
    /// Its name, as guests give it.
    pub(super) name: String,
    /// Its private temporary directory and the confinement layers built for it so far.
    pub(super) sandbox: Arc<ScopeSandbox>,
    /// Its git guard, made at its first confined command (`sandbox/git_guard/`), and made
    /// again over the new roots when the scope chooses a workspace.
    git_guard: Mutex<Option<Arc<GitGuard>>>,
    /// The workspace it chose (`workspace.rs`); `None`: the host's.
    workspace: Mutex<Option<Arc<ScopeWorkspace>>>,
    /// Held while a workspace is being chosen: one at a time.
    pub(super) choosing: tokio::sync::Mutex<()>,
    /// Which of its processes wrote which output log.
    pub(super) logs: Arc<ScopeLogs>,
    /// Whose scope it is (a principal of an HTTP server), once noted: its processes count
    /// in the owner's share (`table.rs`).
    pub(super) owner: OnceLock<Arc<str>>,
    /// Its commands were told that the host has no workspace.
    pub(super) told_no_workspace: AtomicBool,
}

impl Scope {
    /// A new scope `name` of a host whose confinement is `context`.
    pub(super) fn new(context: Arc<Context>, name: &str) -> Scope {
        Scope {
            name: name.to_owned(),
            sandbox: Arc::new(ScopeSandbox::new(context, name)),
            git_guard: Mutex::new(None),
            workspace: Mutex::new(None),
            choosing: tokio::sync::Mutex::new(()),
            logs: Arc::new(ScopeLogs::default()),
            owner: OnceLock::new(),
            told_no_workspace: AtomicBool::new(false),
        }
    }

    /// Its git guard, made by `make` on first use.
    pub(super) fn git_guard(&self, make: impl FnOnce() -> GitGuard) -> Arc<GitGuard> {
        crate::lock(&self.git_guard)
            .get_or_insert_with(|| Arc::new(make()))
            .clone()
    }

    /// The workspace the scope chose, if it chose one.
    pub(super) fn workspace(&self) -> Option<Arc<ScopeWorkspace>> {
        crate::lock(&self.workspace).clone()
    }

    /// Take `workspace` as the scope's: its git guard is let go (after a last check) and made
    /// again over the new roots at the next confined command. Commands running keep the
    /// guard they started with, which checks again at their end.
    pub(super) async fn set_workspace(&self, workspace: Arc<ScopeWorkspace>) {
        *crate::lock(&self.workspace) = Some(workspace);
        let old = crate::lock(&self.git_guard).take();
        if let Some(guard) = old {
            guard.check(Moment::ScopeEnd).await;
        }
    }

    /// A last check of its git guard (at the scope's end, and at the host's, when its
    /// temporary directory goes with the host's).
    pub(super) async fn check_at_host_end(&self) {
        let guard = crate::lock(&self.git_guard).clone();
        if let Some(guard) = guard {
            guard.check(Moment::ScopeEnd).await;
        }
    }
}

/// What ending a scope needs of the manager.
pub(super) struct Ending<'a> {
    pub(super) records: &'a Records,
    pub(super) launcher: &'a Launcher,
    /// How long its processes get between `SIGTERM` and `SIGKILL`.
    pub(super) kill_grace: Duration,
    /// How long a stop waits for output after `SIGKILL`.
    pub(super) drain_timeout: Duration,
}

/// End scope `name`, whose own state `held` was taken out of the manager's map (`None` when
/// it never had one):
///
/// 1. Its processes leave the table: no call finds them any more, and a start under way in
///    the scope is refused.
/// 2. Its keepers prepared ahead are released: none may serve a command of it any more.
/// 3. Its processes are stopped (`SIGTERM`, the grace, `SIGKILL`) and their records removed:
///    their keepers and cgroups go now, not at the end of their retention.
/// 4. Its log index goes with it: the files stay for their retention, no longer readable
///    through the host.
/// 5. A last check of its git guard.
/// 6. Its temporary directory and layers are dropped on a blocking thread: deleting many
///    files takes seconds. A start that took the scope meanwhile may still hold them: the
///    last holder lets go.
pub(super) async fn end(name: &str, held: Option<Arc<Scope>>, ending: Ending<'_>) {
    let entries = ending.records.end_scope(name);
    ending.launcher.end_scope(name).await;
    stop::stop_all(&entries, ending.kill_grace, ending.drain_timeout).await;
    for entry in &entries {
        ending.records.remove(entry);
    }
    let Some(held) = held else { return };
    held.check_at_host_end().await;
    let sandbox = held.sandbox.clone();
    drop(held);
    let _ = tokio::task::spawn_blocking(move || drop(sandbox)).await;
}
