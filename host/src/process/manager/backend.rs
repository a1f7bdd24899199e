//! The process manager as the guests' [`ProcessBackend`]: each call finds the scope's record
//! (or its log) and asks it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::output_log;
use super::scope::{self, Ending};
use super::{ProcessManager, WorkspaceSource};
use crate::process::{
    self, BoxFuture, LogPage, OutputSnapshot, ProcessBackend, ProcessError, ProcessInfo, ReadFrom,
    Signal, StartRequest, Until,
};
use crate::terminal::{Key, Screen, TerminalSize};

impl ProcessBackend for ProcessManager {
    fn output_log(&self, scope: &str, id: &str) -> Option<PathBuf> {
        let held = crate::lock(&self.scopes).get(scope).cloned();
        held?.logs.get(id)
    }

    fn output_logs(&self, scope: &str) -> Vec<process::OutputLog> {
        let held = crate::lock(&self.scopes).get(scope).cloned();
        let logs = held.map(|held| held.logs.list()).unwrap_or_default();
        logs.into_iter()
            .map(|(process_id, path)| process::OutputLog { process_id, path })
            .collect()
    }

    fn start<'a>(
        &'a self,
        scope: &'a str,
        request: StartRequest,
    ) -> BoxFuture<'a, Result<String, ProcessError>> {
        Box::pin(self.start_process(scope, request))
    }

    fn wait<'a>(
        &'a self,
        scope: &'a str,
        id: &'a str,
        timeout: Duration,
        from: ReadFrom,
    ) -> BoxFuture<'a, Result<OutputSnapshot, ProcessError>> {
        Box::pin(async move {
            let entry = self.records.find(scope, id)?;
            entry
                .wait_finished(Instant::now().checked_add(timeout))
                .await;
            Ok(entry.snapshot(from))
        })
    }

    fn read(&self, scope: &str, id: &str, from: ReadFrom) -> Result<OutputSnapshot, ProcessError> {
        Ok(self.records.find(scope, id)?.snapshot(from))
    }

    fn list(&self, scope: &str) -> Vec<ProcessInfo> {
        self.records.list(scope)
    }

    fn has_processes(&self, scope: &str) -> bool {
        (self.records.of_scope(scope).iter())
            .any(|entry| entry.is_running() || entry.has_leftovers())
    }

    fn read_log(
        &self,
        scope: &str,
        id: &str,
        offset: i64,
        max_bytes: u64,
    ) -> Result<LogPage, ProcessError> {
        let entry = self.records.find(scope, id)?;
        let path = entry.log_path().ok_or_else(|| process::no_log(id))?;
        let max = max_bytes.min(process::MAX_LOG_PAGE_BYTES);
        let (text, offset, next_offset, total_bytes) = output_log::read_page(&path, offset, max)
            .map_err(|error| {
                ProcessError::Failed(format!("cannot read the output log of `{id}`: {error}"))
            })?;
        Ok(LogPage {
            text,
            offset,
            next_offset,
            total_bytes,
            capped: entry.log_capped(),
            running: entry.is_running(),
        })
    }

    fn signal(&self, scope: &str, id: &str, signal: Signal) -> Result<(), ProcessError> {
        self.send_signal(scope, id, signal)
    }

    fn write_input<'a>(
        &'a self,
        scope: &'a str,
        id: &'a str,
        data: &'a [u8],
        keys: &'a [Key],
    ) -> BoxFuture<'a, Result<(), ProcessError>> {
        Box::pin(async move {
            let entry = self.records.find(scope, id)?;
            if !entry.is_running() {
                return Err(ProcessError::NotRunning(id.to_owned()));
            }
            entry.input.write(id, data, keys).await
        })
    }

    fn close_input<'a>(
        &'a self,
        scope: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, Result<(), ProcessError>> {
        Box::pin(async move {
            let entry = self.records.find(scope, id)?;
            entry.input.close(id).await
        })
    }

    fn resize(&self, scope: &str, id: &str, size: TerminalSize) -> Result<(), ProcessError> {
        let entry = self.records.find(scope, id)?;
        entry.input.resize(id, size)
    }

    fn screen(&self, scope: &str, id: &str) -> Result<Screen, ProcessError> {
        self.records.find(scope, id)?.input.screen(id)
    }

    fn wait_until<'a>(
        &'a self,
        scope: &'a str,
        id: &'a str,
        until: Until,
        timeout: Duration,
        from: ReadFrom,
    ) -> BoxFuture<'a, Result<OutputSnapshot, ProcessError>> {
        Box::pin(async move {
            let entry = self.records.find(scope, id)?;
            entry
                .wait_until(&until, from, Instant::now().checked_add(timeout))
                .await;
            Ok(entry.snapshot(from))
        })
    }

    fn choose_workspace<'a>(
        &'a self,
        scope: &'a str,
        dir: &'a Path,
        from: WorkspaceSource,
    ) -> BoxFuture<'a, Result<Option<PathBuf>, ProcessError>> {
        Box::pin(ProcessManager::choose_workspace(self, scope, dir, from))
    }

    /// 1. The operator must let people allow hosts (`--network ask`), and the operator's
    ///    network must be an allow-list (under `full` nothing needs allowing, under `none`
    ///    nothing may be).
    /// 2. `host` must be a name with a port within the operator's askable hosts, and one a
    ///    gate of the scope refused (so marked `askable`): nothing a command did not try.
    /// 3. The scope keeps it for its gates of the operator's list, at most
    ///    [`process::MAX_ALLOWED_HOSTS`].
    fn allow_host(&self, scope: &str, host: &str) -> Result<Vec<String>, ProcessError> {
        use crate::sandbox::network::Pattern;
        let refuse = |why: String| Err(ProcessError::InvalidRequest(why));
        let sandbox = &self.config.sandbox;
        let Some(askable) = &sandbox.network_ask else {
            return refuse(
                "the operator lets nobody allow more hosts (no `--network ask=...`)".to_owned(),
            );
        };
        if sandbox.network.allow_list().is_none() {
            return refuse(format!(
                "the operator's network is `{}`, not an allow-list: there is nothing to allow",
                sandbox.network
            ));
        }
        let pattern = match Pattern::parse(host) {
            Ok(pattern) => pattern,
            Err(error) => return refuse(error.to_string()),
        };
        if !pattern.is_named_port() || !askable.allows(&pattern) {
            return refuse(format!(
                "`{host}` is not among the hosts people may allow here ({askable}; a name with \
                 its port, as the network gate named it)"
            ));
        }
        match self
            .scope(scope)
            .sandbox
            .allow_host(host, process::MAX_ALLOWED_HOSTS)
        {
            Ok(patterns) => {
                tracing::info!(scope, host, "a session's person allowed a host");
                Ok(patterns.iter().map(ToString::to_string).collect())
            }
            Err(why) => refuse(why),
        }
    }

    /// Held only where the person may allow hosts (`--network ask`) on an allow-list.
    fn hold_host_question(
        &self,
        scope: &str,
        question: Arc<dyn crate::sandbox::network::HostQuestion>,
    ) -> Option<crate::sandbox::network::HeldQuestion> {
        let sandbox = &self.config.sandbox;
        if sandbox.network_ask.is_none() || sandbox.network.allow_list().is_none() {
            return None;
        }
        Some(self.scope(scope).sandbox.hold_host_question(question))
    }

    fn set_owner(&self, scope: &str, owner: &str) {
        let held = self.scope(scope);
        // The first owner noted stays.
        if held.owner.get().is_none() {
            let _ = held.owner.set(Arc::from(owner));
        }
    }

    fn end_scope<'a>(&'a self, scope: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            // Taken out under the lock, let go after it: every start of every scope needs
            // that lock.
            let held = crate::lock(&self.scopes).remove(scope);
            let ending = Ending {
                records: &self.records,
                launcher: &self.launcher,
                kill_grace: self.config.kill_grace,
                drain_timeout: self.config.drain_timeout,
            };
            scope::end(scope, held, ending).await;
        })
    }
}
