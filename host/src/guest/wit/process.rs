//! The host side of the `toolhost:plugin/process` import: the process capability as one
//! plugin sees it. Checked here, never trusted to the guest: a plugin without the process
//! grant traps; workdirs must lie under the plugin's granted root; waits are capped by its
//! `max_timeout`; processes inherit only the host variables it was granted. While the guest
//! waits, progress reaches the caller and a cancelled call ends the wait.
//!
//! A start request's secrets (0.6.0) are taken out of the call only once every other check
//! here passed, so a request refused here leaves them for another one
//! ([`CallState::take_secrets`]); one the process backend refuses has used them up.
//! Their values are never logged nor put in a message.
//!
//! The older interfaces (0.5.0, 0.4.0, 0.3.0, 0.2.0, then 0.1.0), at the end, delegate to the
//! current one.

use super::latest::{wit_process, wit_sandbox};
use super::v0_1_0::{old_process, output, process_error, read_from};
use super::{v0_2_0, v0_3_0, v0_4_0, v0_5_0};
use crate::ask::Secret;
use crate::guest::state::{CallOptions, CallState, ProcessGrant, Progress};
use crate::process::{
    MAX_LOG_PAGE_BYTES, Origin, OutputSnapshot, ProcessBackend, ProcessError, ReadFrom,
    StartRequest, Until,
};
use crate::sandbox::{self, ConfinementRequest, Profile};
use crate::terminal::Key;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How often a waiting call reports progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// Lines of output in one progress update.
const PROGRESS_LINES: usize = 5;
/// A waiting call with nothing new to report still reports this often (checked every
/// [`PROGRESS_EVERY`], so updates are never more than 5 s apart): a client whose request
/// timeout restarts on progress keeps waiting for a healthy silent command.
const HEARTBEAT: Duration = Duration::from_secs(4);
/// Most hidden paths one request may add.
const MAX_HIDDEN: usize = 64;
/// Most hosts one request's allow-list may name.
const MAX_ALLOWED_HOSTS: usize = 64;
/// Longest name of a secret's variable, in bytes.
const MAX_VARIABLE_NAME: usize = 128;
/// Most bytes of a guest's key or name quoted in a message.
const MAX_QUOTED: usize = 64;

impl CallState {
    /// The plugin's process grant, or a trap for a guest that has none.
    fn grant(&self) -> wasmtime::Result<&ProcessGrant> {
        // No grant while a component lists its tools at load, and none for a plugin without
        // the process grant (such a component is refused at load anyway): trap.
        self.process
            .as_ref()
            .ok_or_else(|| wasmtime::format_err!("this plugin has no process grant"))
    }

    /// The start request as the host will run it: the workdir resolved and checked against
    /// the granted root, the inherited environment narrowed to the grant.
    fn check_request(
        grant: &ProcessGrant,
        request: wit_process::StartRequest,
        owner: &str,
    ) -> Result<StartRequest, wit_process::ProcessError> {
        let workdir = match (&request.workdir, &grant.workdir_root) {
            (None, root) => root.clone(),
            (Some(dir), None) => Some(PathBuf::from(dir)),
            (Some(dir), Some(root)) => {
                let path = PathBuf::from(dir);
                let path = if path.is_relative() {
                    root.join(path)
                } else {
                    path
                };
                let canonical = path.canonicalize().map_err(|e| {
                    wit_process::ProcessError::InvalidRequest(format!(
                        "workdir `{dir}` cannot be used: {e}"
                    ))
                })?;
                if !canonical.starts_with(root) {
                    return Err(wit_process::ProcessError::InvalidRequest(format!(
                        "workdir `{dir}` is outside the directory this plugin may use ({})",
                        root.display()
                    )));
                }
                Some(canonical)
            }
        };
        Ok(StartRequest {
            command: request.command,
            workdir,
            env: request.env,
            background: request.background,
            inherit_env: grant.env_allowlist.clone(),
            profile: Some(Self::profile(grant, request.confinement, owner)?),
            stdin: request.stdin.into(),
            origin: Origin::default(),
            secrets: Vec::new(),
        })
    }

    /// The secrets `wanted` names, taken out of the call's: each variable's name and its
    /// secret. Every name must be a valid variable name and every key must appear once. An
    /// unknown key, or one a command took already, refuses the request, and the secrets taken
    /// before it go back to the call.
    fn take_secrets(
        &self,
        wanted: Vec<wit_process::SecretVariable>,
    ) -> Result<Vec<(String, Secret)>, wit_process::ProcessError> {
        let invalid = wit_process::ProcessError::InvalidRequest;
        let mut names = std::collections::HashSet::new();
        let mut keys = std::collections::HashSet::new();
        for variable in &wanted {
            variable_name(&variable.name).map_err(|why| invalid(format!("secrets: {why}")))?;
            if !names.insert(variable.name.as_str()) {
                return Err(invalid(format!(
                    "secrets: the variable `{}` is named twice",
                    quoted(&variable.name)
                )));
            }
            if !keys.insert(variable.key.as_str()) {
                return Err(invalid(format!(
                    "secrets: the key `{}` is named twice (a secret goes to one variable)",
                    quoted(&variable.key)
                )));
            }
        }
        let secrets = &self.options.secrets;
        let mut taken: Vec<(String, String, Secret)> = Vec::with_capacity(wanted.len());
        for variable in wanted {
            let Some(secret) = secrets.take(&variable.key) else {
                for (_, key, secret) in taken {
                    secrets.put(&key, secret);
                }
                return Err(invalid(format!(
                    "no secret under the key `{}` in this call: a secret is given to one command \
                     of the round that got the reply `secret-given`",
                    quoted(&variable.key)
                )));
            };
            taken.push((variable.name, variable.key, secret));
        }
        Ok(taken
            .into_iter()
            .map(|(name, _, secret)| (name, secret))
            .collect())
    }

    /// The profile a command runs under: the plugin's bound, tightened by the policy's
    /// request. A request looser than the plugin's grant, or naming a relative hidden path, is
    /// refused.
    fn profile(
        grant: &ProcessGrant,
        request: Option<wit_sandbox::Request>,
        owner: &str,
    ) -> Result<Profile, wit_process::ProcessError> {
        let Some(request) = request else {
            return Ok(grant.profile.clone());
        };
        let invalid = wit_process::ProcessError::InvalidRequest;
        if request.hidden.len() > MAX_HIDDEN {
            return Err(invalid(format!(
                "confinement: {} hidden paths; at most {MAX_HIDDEN}",
                request.hidden.len()
            )));
        }
        let mut hidden = Vec::with_capacity(request.hidden.len());
        for path in request.hidden {
            let path = PathBuf::from(path);
            if !path.is_absolute() {
                return Err(invalid(format!(
                    "confinement: hidden path `{}` is not absolute",
                    path.display()
                )));
            }
            hidden.push(path);
        }
        hidden.sort();
        hidden.dedup();
        let network = requested_network(
            grant.profile.network,
            request.network,
            request.allowed_hosts,
            owner,
        )
        .map_err(|why| invalid(format!("confinement: {why}")))?;
        let request = ConfinementRequest {
            mode: request.mode.map(Into::into),
            network,
            hidden,
            limits: request.limits.into(),
        };
        sandbox::resolve(&grant.operator, &grant.sandbox_grant, Some(&request))
            .map_err(|e| invalid(format!("confinement: {e}")))
    }
}

impl wit_process::Host for CallState {
    async fn start(
        &mut self,
        request: wit_process::StartRequest,
    ) -> wasmtime::Result<Result<String, wit_process::ProcessError>> {
        let grant = self.grant()?;
        let mut request = request;
        let wanted = std::mem::take(&mut request.secrets);
        // The secrets last: a request refused for anything else leaves them in the call.
        let checked = Self::check_request(grant, request, self.reports.plugin())
            .and_then(|r| self.take_secrets(wanted).map(|secrets| (r, secrets)));
        let request = match checked {
            Ok((r, secrets)) => StartRequest {
                origin: Origin {
                    plugin: Some(self.reports.plugin().to_owned()),
                    principal: self.options.principal.clone(),
                    answers: self.answered.clone(),
                },
                secrets,
                ..r
            },
            Err(e) => {
                if let wit_process::ProcessError::InvalidRequest(why) = &e {
                    tracing::warn!(scope = %self.scope, "refused a start request: {why}");
                }
                return Ok(Err(e));
            }
        };
        let grant = grant.clone();
        let result = self
            .in_host(grant, |g, scope| async move {
                g.backend.start(&scope, request).await
            })
            .await;
        Ok(result.map_err(Into::into))
    }

    async fn wait(
        &mut self,
        id: String,
        timeout_ms: u64,
        from: wit_process::ReadFrom,
    ) -> wasmtime::Result<Result<wit_process::Output, wit_process::ProcessError>> {
        let grant = self.grant()?;
        let mut timeout = Duration::from_millis(timeout_ms);
        if let Some(max) = grant.max_wait {
            timeout = timeout.min(max);
        }
        let from: ReadFrom = from.into();
        let grant = grant.clone();
        let mut options = self.options.clone();
        if self.reports.tool_progress() || options.tool_progress_only {
            // The tool reports its own progress (the host's would interleave with it), or the
            // caller wants the tool's alone.
            options.progress = None;
        }
        let call_started = self.started;
        let result = self
            .in_host(grant, |g, scope| async move {
                let wait = Wait {
                    id: &id,
                    timeout,
                    from,
                    call_started,
                };
                wait_with_options(&*g.backend, &scope, wait, &options).await
            })
            .await;
        Ok(result.map(Into::into).map_err(Into::into))
    }

    async fn read(
        &mut self,
        id: String,
        from: wit_process::ReadFrom,
    ) -> wasmtime::Result<Result<wit_process::Output, wit_process::ProcessError>> {
        let grant = self.grant()?;
        Ok(grant
            .backend
            .read(&self.scope, &id, from.into())
            .map(Into::into)
            .map_err(Into::into))
    }

    async fn read_log(
        &mut self,
        id: String,
        offset: i64,
        max_bytes: u64,
    ) -> wasmtime::Result<Result<wit_process::LogPage, wit_process::ProcessError>> {
        let max_bytes = max_bytes.min(MAX_LOG_PAGE_BYTES);
        self.on_backend(|g, scope| async move {
            // A file read: on a blocking thread, not on an async worker.
            tokio::task::spawn_blocking(move || g.backend.read_log(&scope, &id, offset, max_bytes))
                .await
                .unwrap_or_else(|e| {
                    Err(ProcessError::Failed(format!(
                        "reading the output log failed: {e}"
                    )))
                })
        })
        .await
        .map(|result| result.map(Into::into))
    }

    async fn list(&mut self) -> wasmtime::Result<Vec<wit_process::ProcessInfo>> {
        let grant = self.grant()?;
        Ok(grant
            .backend
            .list(&self.scope)
            .into_iter()
            .map(Into::into)
            .collect())
    }

    async fn write_input(
        &mut self,
        id: String,
        data: Vec<u8>,
        keys: Vec<wit_process::Key>,
    ) -> wasmtime::Result<Result<(), wit_process::ProcessError>> {
        if keys.len() > MAX_KEYS {
            return Ok(Err(wit_process::ProcessError::InvalidRequest(format!(
                "{} keys in one call; at most {MAX_KEYS}",
                keys.len()
            ))));
        }
        let keys: Vec<Key> = keys.into_iter().map(Into::into).collect();
        self.on_backend(
            |g, scope| async move { g.backend.write_input(&scope, &id, &data, &keys).await },
        )
        .await
    }

    async fn close_input(
        &mut self,
        id: String,
    ) -> wasmtime::Result<Result<(), wit_process::ProcessError>> {
        self.on_backend(|g, scope| async move { g.backend.close_input(&scope, &id).await })
            .await
    }

    async fn resize(
        &mut self,
        id: String,
        size: wit_process::TerminalSize,
    ) -> wasmtime::Result<Result<(), wit_process::ProcessError>> {
        let grant = self.grant()?;
        Ok(grant
            .backend
            .resize(&self.scope, &id, size.into())
            .map_err(Into::into))
    }

    async fn read_screen(
        &mut self,
        id: String,
    ) -> wasmtime::Result<Result<wit_process::Screen, wit_process::ProcessError>> {
        let grant = self.grant()?;
        Ok(grant
            .backend
            .screen(&self.scope, &id)
            .map(Into::into)
            .map_err(Into::into))
    }

    async fn wait_until(
        &mut self,
        id: String,
        condition: wit_process::Until,
        timeout_ms: u64,
        from: wit_process::ReadFrom,
    ) -> wasmtime::Result<Result<wit_process::Output, wit_process::ProcessError>> {
        let grant = self.grant()?;
        let mut timeout = Duration::from_millis(timeout_ms);
        if let Some(max) = grant.max_wait {
            timeout = timeout.min(max);
        }
        let from: ReadFrom = from.into();
        let until: Until = condition.into();
        let cancel = self.options.cancel.clone().unwrap_or_default();
        self.on_backend(|g, scope| async move {
            tokio::select! {
                result = g.backend.wait_until(&scope, &id, until, timeout, from) => result,
                () = cancel.cancelled() => g.backend.read(&scope, &id, from),
            }
        })
        .await
        .map(|result| result.map(Into::into))
    }

    async fn call_cancelled(&mut self) -> wasmtime::Result<bool> {
        self.grant()?;
        Ok(self
            .options
            .cancel
            .as_ref()
            .is_some_and(|cancel| cancel.is_cancelled()))
    }

    async fn waits_for_exit(&mut self) -> wasmtime::Result<bool> {
        self.grant()?;
        Ok(self.options.waits_for_exit)
    }

    async fn send_signal(
        &mut self,
        id: String,
        signal: wit_process::Signal,
    ) -> wasmtime::Result<Result<(), wit_process::ProcessError>> {
        let grant = self.grant()?;
        Ok(grant
            .backend
            .signal(&self.scope, &id, signal.into())
            .map_err(Into::into))
    }

    /// Only in a round whose replies the host checked and the person accepted with `allow`
    /// set to yes: a guest cannot widen its scope's network on its own say.
    async fn allow_host(
        &mut self,
        host: String,
    ) -> wasmtime::Result<Result<Vec<String>, wit_process::ProcessError>> {
        let grant = self.grant()?;
        if !self.person_allowed {
            return Ok(Err(wit_process::ProcessError::InvalidRequest(
                "a host may be allowed only in a call whose person accepted a form with `allow` \
                 set to yes, asked by the host (no reply of this call was)"
                    .to_owned(),
            )));
        }
        Ok(grant
            .backend
            .allow_host(&self.scope, &host)
            .map_err(Into::into))
    }
}

/// Most keys in one `write-input` call (each is a few bytes; the byte limit applies too).
const MAX_KEYS: usize = 4096;

/// Whether `name` is a valid environment variable name (ASCII letters, digits and `_`, not
/// starting with a digit, at most [`MAX_VARIABLE_NAME`] bytes), and if not, why.
fn variable_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("a variable name is empty".to_owned());
    }
    if name.len() > MAX_VARIABLE_NAME {
        return Err(format!(
            "a variable name is {} bytes long; at most {MAX_VARIABLE_NAME}",
            name.len()
        ));
    }
    let valid = name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !valid || name.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(format!(
            "`{}` is not a variable name (ASCII letters, digits and `_`, not starting with a \
             digit)",
            quoted(name)
        ));
    }
    Ok(())
}

/// A guest's `text` as a message quotes it: at most [`MAX_QUOTED`] bytes, cut on a character
/// boundary, with `...` where it was cut.
fn quoted(text: &str) -> String {
    if text.len() <= MAX_QUOTED {
        return text.to_owned();
    }
    format!("{}...", &text[..text.floor_char_boundary(MAX_QUOTED)])
}

impl CallState {
    /// Run `f` on the backend within the caller's scope, charged to the host's time.
    async fn on_backend<T, F>(
        &mut self,
        f: impl FnOnce(ProcessGrant, String) -> F,
    ) -> wasmtime::Result<Result<T, wit_process::ProcessError>>
    where
        F: Future<Output = Result<T, ProcessError>>,
    {
        let grant = self.grant()?.clone();
        Ok(self.in_host(grant, f).await.map_err(Into::into))
    }
}

/// The network a request asks for under the plugin's `bound`: its kind, and with `allow` its
/// hosts (`None`: the bound's). Hosts must be within the bound's allow-list when it is one.
/// A new list counts against `owner`'s share of the host's lists.
fn requested_network(
    bound: sandbox::Network,
    asked: Option<wit_sandbox::Network>,
    hosts: Option<Vec<String>>,
    owner: &str,
) -> Result<Option<sandbox::Network>, String> {
    use sandbox::Network as N;
    use wit_sandbox::Network as W;
    let kind = asked.unwrap_or_else(|| bound.into());
    let Some(hosts) = hosts else {
        return match (asked, kind) {
            (None, _) => Ok(None),
            (Some(_), W::Full) => Ok(Some(N::Full)),
            (Some(_), W::None) => Ok(Some(N::None)),
            (Some(_), W::Allow) => match bound {
                N::Allow(_) | N::None => Ok(Some(bound)),
                N::Full => Err(
                    "network `allow` needs `allowed-hosts` where the plugin's network is `full`"
                        .to_owned(),
                ),
            },
        };
    };
    if kind != W::Allow {
        return Err(format!(
            "`allowed-hosts` is given, but the network is `{}`, not `allow`",
            match kind {
                W::Full => "full",
                _ => "none",
            }
        ));
    }
    if hosts.len() > MAX_ALLOWED_HOSTS {
        return Err(format!(
            "{} allowed hosts; at most {MAX_ALLOWED_HOSTS}",
            hosts.len()
        ));
    }
    let bound_list = bound.allow_list();
    let mut patterns = Vec::with_capacity(hosts.len());
    for host in &hosts {
        let pattern = sandbox::network::Pattern::parse(host)
            .map_err(|e| format!("allowed host `{host}`: {e}"))?;
        if let Some(list) = &bound_list
            && !list
                .patterns()
                .iter()
                .any(|granted| pattern.within(granted))
        {
            return Err(format!(
                "allowed host `{host}` is not within the plugin's allow-list ({})",
                list.for_people()
            ));
        }
        patterns.push(pattern);
    }
    if patterns.is_empty() {
        // An allow-list of no host allows nothing.
        return Ok(Some(N::None));
    }
    let list = sandbox::network::AllowList::new(patterns);
    let id = sandbox::network::AllowListId::try_of(list, owner).ok_or_else(|| {
        format!(
            "this plugin asked for {} different allow-lists already (or the host holds {}): \
             ask for one it used before",
            sandbox::network::MAX_LISTS_PER_OWNER,
            sandbox::network::MAX_LISTS
        )
    })?;
    Ok(Some(N::Allow(id)))
}

/// One wait request of a guest.
struct Wait<'a> {
    id: &'a str,
    timeout: Duration,
    from: ReadFrom,
    /// When the call began: progress is measured from there, so it only ever increases
    /// across the waits of one call.
    call_started: Instant,
}

/// The update of a waiting call with nothing new: how long, how much output, the last line.
fn heartbeat(elapsed_ms: u64, bytes: u64, last_line: &str) -> String {
    let elapsed = humantime::format_duration(Duration::from_secs(elapsed_ms / 1000));
    match (bytes, last_line.is_empty()) {
        (0, _) => format!("still running after {elapsed}; no output yet"),
        (_, true) => format!("still running after {elapsed}; {bytes} bytes of output"),
        (_, false) => format!(
            "still running after {elapsed}; {bytes} bytes of output, the last line: {last_line}"
        ),
    }
}

/// Wait on a process, reporting progress and honouring cancellation when the caller asked for
/// them. Without either it is a single event-driven wait.
async fn wait_with_options(
    backend: &dyn ProcessBackend,
    scope: &str,
    wait: Wait<'_>,
    options: &CallOptions,
) -> Result<OutputSnapshot, ProcessError> {
    let Wait {
        id,
        timeout,
        from,
        call_started,
    } = wait;
    if options.progress.is_none() && options.cancel.is_none() {
        return backend.wait(scope, id, timeout, from).await;
    }
    let started = Instant::now();
    let cancel = options.cancel.clone().unwrap_or_default();
    // The first update carries the latest lines written so far, even those written before
    // this wait began.
    let mut reported = 0;
    let mut last_sent = Instant::now();
    let mut last_line = String::new();
    loop {
        let left = timeout.saturating_sub(started.elapsed());
        let step = match options.progress {
            Some(_) => left.min(PROGRESS_EVERY),
            None => left,
        };
        let snapshot = tokio::select! {
            r = backend.wait(scope, id, step, ReadFrom::Cursor(u64::MAX)) => r?,
            _ = cancel.cancelled() => break,
        };
        if !snapshot.running || started.elapsed() >= timeout {
            break;
        }
        let Some(progress) = &options.progress else {
            continue;
        };
        let elapsed_ms = call_started.elapsed().as_millis() as u64;
        if snapshot.cursor > reported {
            let fresh = backend.read(scope, id, ReadFrom::Cursor(reported))?;
            reported = fresh.cursor;
            let lines: Vec<&str> = fresh
                .text
                .lines()
                .filter(|l| !l.trim().is_empty())
                .collect();
            let last = &lines[lines.len().saturating_sub(PROGRESS_LINES)..];
            if let Some(line) = last.last() {
                last_line = (*line).to_owned();
                progress(Progress {
                    progress: elapsed_ms as f64 / 1000.0,
                    total: None,
                    message: Some(last.join("\n")),
                });
                last_sent = Instant::now();
                continue;
            }
        }
        if last_sent.elapsed() >= HEARTBEAT {
            progress(Progress {
                progress: elapsed_ms as f64 / 1000.0,
                total: None,
                message: Some(heartbeat(elapsed_ms, snapshot.cursor, &last_line)),
            });
            last_sent = Instant::now();
        }
    }
    backend.read(scope, id, from)
}

// The 0.5.0, 0.4.0 and 0.3.0 interfaces: the same as the current one, under their own
// types. A 0.5.0 start request names no secret (its conversion); 0.5.0 has `allow-host`.

/// Serve the `process` interface of frozen version `$version`, which is the current one under
/// its own types: each function converts its arguments, calls the current one, and converts
/// what it returns. The functions it has besides follow its name.
macro_rules! same_as_current {
    ($version:ident $(, $($more:tt)+)?) => {
        impl $version::process::Host for CallState {
            $($($more)+)?

            async fn start(
                &mut self,
                request: $version::process::StartRequest,
            ) -> wasmtime::Result<Result<String, $version::process::ProcessError>> {
                let result = wit_process::Host::start(self, request.into()).await?;
                Ok(result.map_err(Into::into))
            }

            async fn wait(
                &mut self,
                id: String,
                timeout_ms: u64,
                from: $version::process::ReadFrom,
            ) -> wasmtime::Result<Result<$version::process::Output, $version::process::ProcessError>> {
                let result = wit_process::Host::wait(self, id, timeout_ms, from.into()).await?;
                Ok(result.map(Into::into).map_err(Into::into))
            }

            async fn read(
                &mut self,
                id: String,
                from: $version::process::ReadFrom,
            ) -> wasmtime::Result<Result<$version::process::Output, $version::process::ProcessError>> {
                let result = wit_process::Host::read(self, id, from.into()).await?;
                Ok(result.map(Into::into).map_err(Into::into))
            }

            async fn list(&mut self) -> wasmtime::Result<Vec<$version::process::ProcessInfo>> {
                let list = wit_process::Host::list(self).await?;
                Ok(list.into_iter().map(Into::into).collect())
            }

            async fn send_signal(
                &mut self,
                id: String,
                signal: $version::process::Signal,
            ) -> wasmtime::Result<Result<(), $version::process::ProcessError>> {
                let result = wit_process::Host::send_signal(self, id, signal.into()).await?;
                Ok(result.map_err(Into::into))
            }

            async fn write_input(
                &mut self,
                id: String,
                data: Vec<u8>,
                keys: Vec<$version::process::Key>,
            ) -> wasmtime::Result<Result<(), $version::process::ProcessError>> {
                let keys = keys.into_iter().map(Into::into).collect();
                let result = wit_process::Host::write_input(self, id, data, keys).await?;
                Ok(result.map_err(Into::into))
            }

            async fn close_input(
                &mut self,
                id: String,
            ) -> wasmtime::Result<Result<(), $version::process::ProcessError>> {
                let result = wit_process::Host::close_input(self, id).await?;
                Ok(result.map_err(Into::into))
            }

            async fn resize(
                &mut self,
                id: String,
                size: $version::process::TerminalSize,
            ) -> wasmtime::Result<Result<(), $version::process::ProcessError>> {
                let result = wit_process::Host::resize(self, id, size.into()).await?;
                Ok(result.map_err(Into::into))
            }

            async fn read_screen(
                &mut self,
                id: String,
            ) -> wasmtime::Result<Result<$version::process::Screen, $version::process::ProcessError>> {
                let result = wit_process::Host::read_screen(self, id).await?;
                Ok(result.map(Into::into).map_err(Into::into))
            }

            async fn call_cancelled(&mut self) -> wasmtime::Result<bool> {
                wit_process::Host::call_cancelled(self).await
            }

            async fn waits_for_exit(&mut self) -> wasmtime::Result<bool> {
                wit_process::Host::waits_for_exit(self).await
            }

            async fn read_log(
                &mut self,
                id: String,
                offset: i64,
                max_bytes: u64,
            ) -> wasmtime::Result<Result<$version::process::LogPage, $version::process::ProcessError>> {
                let result = wit_process::Host::read_log(self, id, offset, max_bytes).await?;
                Ok(result.map(Into::into).map_err(Into::into))
            }

            async fn wait_until(
                &mut self,
                id: String,
                condition: $version::process::Until,
                timeout_ms: u64,
                from: $version::process::ReadFrom,
            ) -> wasmtime::Result<Result<$version::process::Output, $version::process::ProcessError>> {
                let result =
                    wit_process::Host::wait_until(self, id, condition.into(), timeout_ms, from.into())
                        .await?;
                Ok(result.map(Into::into).map_err(Into::into))
            }
        }
    };
}

same_as_current!(
    v0_5_0,
    async fn allow_host(
        &mut self,
        host: String,
    ) -> wasmtime::Result<Result<Vec<String>, v0_5_0::process::ProcessError>> {
        let result = wit_process::Host::allow_host(self, host).await?;
        Ok(result.map_err(Into::into))
    }
);
same_as_current!(v0_4_0);
same_as_current!(v0_3_0);

// The 0.2.0 interface: the current one without `read-log`, and without what a command left
// running in its outputs and listings.

impl v0_2_0::process::Host for CallState {
    async fn start(
        &mut self,
        request: v0_2_0::process::StartRequest,
    ) -> wasmtime::Result<Result<String, v0_2_0::process::ProcessError>> {
        let result = wit_process::Host::start(self, request.into()).await?;
        Ok(result.map_err(Into::into))
    }

    async fn wait(
        &mut self,
        id: String,
        timeout_ms: u64,
        from: v0_2_0::process::ReadFrom,
    ) -> wasmtime::Result<Result<v0_2_0::process::Output, v0_2_0::process::ProcessError>> {
        let result = wit_process::Host::wait(self, id, timeout_ms, from.into()).await?;
        Ok(result.map(Into::into).map_err(Into::into))
    }

    async fn read(
        &mut self,
        id: String,
        from: v0_2_0::process::ReadFrom,
    ) -> wasmtime::Result<Result<v0_2_0::process::Output, v0_2_0::process::ProcessError>> {
        let result = wit_process::Host::read(self, id, from.into()).await?;
        Ok(result.map(Into::into).map_err(Into::into))
    }

    async fn list(&mut self) -> wasmtime::Result<Vec<v0_2_0::process::ProcessInfo>> {
        let list = wit_process::Host::list(self).await?;
        Ok(list.into_iter().map(Into::into).collect())
    }

    async fn send_signal(
        &mut self,
        id: String,
        signal: v0_2_0::process::Signal,
    ) -> wasmtime::Result<Result<(), v0_2_0::process::ProcessError>> {
        let result = wit_process::Host::send_signal(self, id, signal.into()).await?;
        Ok(result.map_err(Into::into))
    }

    async fn write_input(
        &mut self,
        id: String,
        data: Vec<u8>,
        keys: Vec<v0_2_0::process::Key>,
    ) -> wasmtime::Result<Result<(), v0_2_0::process::ProcessError>> {
        let keys = keys.into_iter().map(Into::into).collect();
        let result = wit_process::Host::write_input(self, id, data, keys).await?;
        Ok(result.map_err(Into::into))
    }

    async fn close_input(
        &mut self,
        id: String,
    ) -> wasmtime::Result<Result<(), v0_2_0::process::ProcessError>> {
        let result = wit_process::Host::close_input(self, id).await?;
        Ok(result.map_err(Into::into))
    }

    async fn resize(
        &mut self,
        id: String,
        size: v0_2_0::process::TerminalSize,
    ) -> wasmtime::Result<Result<(), v0_2_0::process::ProcessError>> {
        let result = wit_process::Host::resize(self, id, size.into()).await?;
        Ok(result.map_err(Into::into))
    }

    async fn read_screen(
        &mut self,
        id: String,
    ) -> wasmtime::Result<Result<v0_2_0::process::Screen, v0_2_0::process::ProcessError>> {
        let result = wit_process::Host::read_screen(self, id).await?;
        Ok(result.map(Into::into).map_err(Into::into))
    }

    async fn call_cancelled(&mut self) -> wasmtime::Result<bool> {
        wit_process::Host::call_cancelled(self).await
    }

    async fn waits_for_exit(&mut self) -> wasmtime::Result<bool> {
        wit_process::Host::waits_for_exit(self).await
    }

    async fn wait_until(
        &mut self,
        id: String,
        condition: v0_2_0::process::Until,
        timeout_ms: u64,
        from: v0_2_0::process::ReadFrom,
    ) -> wasmtime::Result<Result<v0_2_0::process::Output, v0_2_0::process::ProcessError>> {
        let result =
            wit_process::Host::wait_until(self, id, condition.into(), timeout_ms, from.into())
                .await?;
        Ok(result.map(Into::into).map_err(Into::into))
    }
}

// The 0.1.0 interface. A 0.1.0 start request is a current request without a confinement, so
// its commands get the plugin's bound (the operator's settings narrowed by the manifest). A
// 0.1.0 listing is a current listing without the profile.

impl old_process::Host for CallState {
    async fn start(
        &mut self,
        request: old_process::StartRequest,
    ) -> wasmtime::Result<Result<String, old_process::ProcessError>> {
        let request = wit_process::StartRequest {
            command: request.command,
            workdir: request.workdir,
            env: request.env,
            background: request.background,
            confinement: None,
            stdin: wit_process::StdinMode::Closed,
            secrets: Vec::new(),
        };
        let result = wit_process::Host::start(self, request).await?;
        Ok(result.map_err(process_error))
    }

    async fn wait(
        &mut self,
        id: String,
        timeout_ms: u64,
        from: old_process::ReadFrom,
    ) -> wasmtime::Result<Result<old_process::Output, old_process::ProcessError>> {
        let result = wit_process::Host::wait(self, id, timeout_ms, read_from(from)).await?;
        Ok(result.map(output).map_err(process_error))
    }

    async fn read(
        &mut self,
        id: String,
        from: old_process::ReadFrom,
    ) -> wasmtime::Result<Result<old_process::Output, old_process::ProcessError>> {
        let result = wit_process::Host::read(self, id, read_from(from)).await?;
        Ok(result.map(output).map_err(process_error))
    }

    async fn list(&mut self) -> wasmtime::Result<Vec<old_process::ProcessInfo>> {
        let list = wit_process::Host::list(self).await?;
        Ok(list
            .into_iter()
            .map(|p| old_process::ProcessInfo {
                id: p.id,
                command: p.command,
                workdir: p.workdir,
                background: p.background,
                running: p.running,
                started_ms: p.started_ms,
                exited_ms: p.exited_ms,
                exit_code: p.exit_code,
                signal: p.signal,
            })
            .collect())
    }

    async fn send_signal(
        &mut self,
        id: String,
        signal: old_process::Signal,
    ) -> wasmtime::Result<Result<(), old_process::ProcessError>> {
        let signal = match signal {
            old_process::Signal::Terminate => wit_process::Signal::Terminate,
            old_process::Signal::Kill => wit_process::Signal::Kill,
            old_process::Signal::Interrupt => wit_process::Signal::Interrupt,
        };
        let result = wit_process::Host::send_signal(self, id, signal).await?;
        Ok(result.map_err(process_error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ask::CallSecrets;
    use crate::guest::limits::CallLimits;

    fn state(secrets: &CallSecrets) -> CallState {
        let options = CallOptions {
            secrets: secrets.clone(),
            ..CallOptions::default()
        };
        CallState::new("p", "s", &CallLimits::default(), None, options)
    }

    fn variable(name: &str, key: &str) -> wit_process::SecretVariable {
        wit_process::SecretVariable {
            name: name.to_owned(),
            key: key.to_owned(),
        }
    }

    /// The message of a refusal, which must not hold `value`.
    fn refusal(result: Result<Vec<(String, Secret)>, wit_process::ProcessError>) -> String {
        match result {
            Err(wit_process::ProcessError::InvalidRequest(why)) => {
                assert!(!why.contains("hunter2"), "{why}");
                why
            }
            Err(other) => panic!("not an invalid request: {other:?}"),
            Ok(taken) => panic!("taken: {taken:?}"),
        }
    }

    #[test]
    fn a_secrets_variable_name_is_a_variable_name() {
        let longest = "A".repeat(MAX_VARIABLE_NAME);
        for name in ["A", "_x", "GH_TOKEN2", longest.as_str()] {
            assert_eq!(variable_name(name), Ok(()), "{name}");
        }
        let too_long = "A".repeat(MAX_VARIABLE_NAME + 1);
        for name in ["", "1A", "A-B", "A B", "A=B", "Ä", too_long.as_str()] {
            assert!(variable_name(name).is_err(), "{name}");
        }
        assert_eq!(quoted(&"é".repeat(40)), format!("{}...", "é".repeat(32)));
    }

    #[test]
    fn a_secret_goes_to_one_command_and_a_refused_request_takes_none() {
        let secrets = CallSecrets::default();
        secrets.put("token", Secret::new("hunter2".to_owned()));
        let state = state(&secrets);
        // An unknown key refuses the request, and puts back the secret taken before it.
        let why = refusal(
            state.take_secrets(vec![variable("TOKEN", "token"), variable("OTHER", "nope")]),
        );
        assert!(why.contains("no secret under the key `nope`"), "{why}");
        for wanted in [
            vec![variable("A", "token"), variable("B", "token")],
            vec![variable("A", "token"), variable("A", "other")],
            vec![variable("1A", "token")],
        ] {
            refusal(state.take_secrets(wanted));
        }
        let taken = state
            .take_secrets(vec![variable("GH_TOKEN", "token")])
            .expect("taken");
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].0, "GH_TOKEN");
        assert_eq!(taken[0].1.expose(), "hunter2");
        // Taken: no other command gets it.
        let why = refusal(state.take_secrets(vec![variable("GH_TOKEN", "token")]));
        assert!(why.contains("`secret-given`"), "{why}");
        assert_eq!(
            state.take_secrets(Vec::new()).ok().map(|t| t.len()),
            Some(0)
        );
    }
}
