//! What one scope (an agent session) holds in the process manager besides its processes: its
//! confinement state and its git guard, in one place, with the order they are let go in.
//!
//! The process records (`table.rs`), the keepers prepared ahead (`ready.rs`) and the log index
//! (`output_log.rs`) keep their own per-scope parts; [`Scope::end`] is called after those are
//! let go (`ProcessManager::end_scope`).

use std::sync::{Arc, OnceLock};

use crate::sandbox::git_guard::{GitGuard, Moment};
use crate::sandbox::{Context, ScopeSandbox};

/// One scope's own state, made at its first command.
#[derive(Debug)]
pub(super) struct Scope {
    /// Its private temporary directory and the confinement layers built for it so far.
    pub(super) sandbox: Arc<ScopeSandbox>,
    /// Its git guard, made at its first confined command (`sandbox/git_guard/`).
    git_guard: OnceLock<Arc<GitGuard>>,
}

impl Scope {
    /// A new scope `name` of a host whose confinement is `context`.
    pub(super) fn new(context: Arc<Context>, name: &str) -> Scope {
        Scope {
            sandbox: Arc::new(ScopeSandbox::new(context, name)),
            git_guard: OnceLock::new(),
        }
    }

    /// Its git guard, made by `make` on first use.
    pub(super) fn git_guard(&self, make: impl FnOnce() -> GitGuard) -> Arc<GitGuard> {
        self.git_guard.get_or_init(|| Arc::new(make())).clone()
    }

    /// Let go of what the scope holds, once nothing of it runs (a start that took it meanwhile
    /// may still hold it: the last holder lets go):
    ///
    /// 1. A last check of its git guard.
    /// 2. Its temporary directory and layers, dropped on a blocking thread: deleting many
    ///    files takes seconds.
    pub(super) async fn end(self: Arc<Self>) {
        self.check_at_host_end().await;
        let sandbox = self.sandbox.clone();
        drop(self);
        let _ = tokio::task::spawn_blocking(move || drop(sandbox)).await;
    }

    /// A last check of its git guard (at the scope's end, and at the host's, when its
    /// temporary directory goes with the host's).
    pub(super) async fn check_at_host_end(&self) {
        if let Some(guard) = self.git_guard.get() {
            guard.check(Moment::ScopeEnd).await;
        }
    }
}
