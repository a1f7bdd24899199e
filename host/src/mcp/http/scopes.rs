//! Scopes of protocol 2026-07-28 over HTTP, which has no sessions. Each scope belongs to a
//! principal: the named bearer token the request came with (`--token-file`, one `NAME TOKEN`
//! per line). A request that names no scope works in its principal's default scope, so a
//! standard client starts a process in one request and reads, signals or feeds it by id in
//! later ones. A client that wants several scopes names one in each request's `_meta` as
//! `toolhost/scope` (an id of its choosing); the same id under another principal is another
//! scope, and no principal reaches another's. A scope lives while a request or a task of it is
//! in progress and ends, with its processes and tasks, once it was idle for the idle timeout
//! (or the server stops); a request after that starts it afresh, empty.
//!
//! Scopes are bounded per principal (`--max-scopes-per-principal`) and in total
//! (`--max-sessions`). For a new scope of principal P:
//! 1. P at its own limit: refused with `-32000` naming `--max-scopes-per-principal`.
//! 2. The server at its total: the oldest idle scope (no request or task in progress) of a
//!    principal at its limit is ended to make room; the next request naming it gets `-32000`
//!    saying why (the one after starts it afresh).
//! 3. None to reclaim: refused with `-32000` naming `--max-sessions`.

use super::sessions::Sessions;
use crate::ToolHost;
use crate::mcp::scope::{NamedScopes, ScopeRef};
use rmcp::model::ErrorCode;
use rmcp::service::RequestContext;
use rmcp::task_manager::TaskManager;
use rmcp::{ErrorData, RoleServer};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The `_meta` key naming the scope of a 2026-07-28 request over HTTP.
pub const SCOPE_KEY: &str = "toolhost/scope";

/// The longest scope id.
const MAX_ID: usize = 128;

/// The id of a principal's default scope in the table: no id a client may name.
const DEFAULT_SCOPE: &str = "";

/// Most reclaimed scopes remembered, to tell their clients why (the oldest are forgotten).
const MAX_RECLAIMED: usize = 1024;

/// A scope's key in the table: its principal and its id.
type Key = (Principal, String);

pub use super::super::scope::Principal;

/// The client-named scopes of one HTTP server.
pub struct HttpScopes {
    host: Arc<ToolHost>,
    idle_timeout: Duration,
    max_scopes: usize,
    per_principal: usize,
    table: Mutex<HashMap<(Principal, String), Entry>>,
    /// Woken whenever a scope may have become idle.
    changed: Notify,
    /// Scopes ended to make room for another principal, newest last, with why.
    reclaimed: Mutex<std::collections::VecDeque<(Key, String)>>,
    /// The server's 2025-era sessions, told which scope each works in.
    sessions: Option<Arc<Sessions>>,
}

struct Entry {
    name: String,
    tasks: TaskManager,
    /// Requests and tasks in progress.
    in_flight: usize,
    /// The end of the last of them (or the start of the first).
    last: Instant,
}

/// Keeps a scope in use while it lives (a request in progress, a running task).
pub struct Lease {
    scopes: Arc<HttpScopes>,
    key: (Principal, String),
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(entry) = self.scopes.table().get_mut(&self.key) {
            entry.in_flight = entry.in_flight.saturating_sub(1);
            entry.last = Instant::now();
        }
        self.scopes.changed.notify_one();
    }
}

impl HttpScopes {
    /// Scopes of `host`, ended after `idle_timeout` without a request or task in progress; at
    /// most `max_scopes` at once, `per_principal` of one principal.
    pub fn new(
        host: Arc<ToolHost>,
        idle_timeout: Duration,
        max_scopes: usize,
        per_principal: usize,
        sessions: Option<Arc<Sessions>>,
    ) -> Arc<Self> {
        Arc::new(HttpScopes {
            sessions,
            host,
            idle_timeout,
            max_scopes,
            per_principal: per_principal.clamp(1, max_scopes.max(1)),
            table: Mutex::new(HashMap::new()),
            changed: Notify::new(),
            reclaimed: Mutex::new(std::collections::VecDeque::new()),
        })
    }

    /// Why scope `key` was ended, if it was reclaimed for another principal; forgotten once
    /// told.
    fn take_reclaimed(&self, key: &Key) -> Option<String> {
        let mut reclaimed = crate::lock(&self.reclaimed);
        let at = reclaimed.iter().position(|(gone, _)| gone == key)?;
        reclaimed.remove(at).map(|(_, why)| why)
    }

    /// Room for a new scope of `principal` in `table`, following the module's flow; a scope
    /// reclaimed for it is taken out of the table and returned.
    fn make_room(
        &self,
        table: &mut HashMap<Key, Entry>,
        principal: &Principal,
    ) -> Result<Option<(Key, Entry)>, ErrorData> {
        let count = |who: &Principal| table.keys().filter(|(p, _)| p == who).count();
        // 1. The principal's own limit.
        if count(principal) >= self.per_principal {
            return Err(ErrorData::new(
                ErrorCode(-32000),
                format!(
                    "principal `{}` holds its maximum of {} scopes \
                     (--max-scopes-per-principal); end one or wait for an idle one to expire",
                    principal.0, self.per_principal
                ),
                None,
            ));
        }
        if table.len() < self.max_scopes {
            return Ok(None);
        }
        // 2. The oldest idle scope of a principal at its limit.
        let victim = table
            .iter()
            .filter(|((owner, _), entry)| {
                owner != principal
                    && entry.in_flight == 0
                    && entry.tasks.running_task_count() == 0
                    && count(owner) >= self.per_principal
                    // Asked last: it looks at the scope's processes.
                    && !self.host.has_processes(&entry.name)
            })
            .min_by_key(|(_, entry)| entry.last)
            .map(|(key, _)| key.clone());
        // 3. None to reclaim.
        let Some(victim) = victim else {
            return Err(ErrorData::new(
                ErrorCode(-32000),
                format!(
                    "this server holds its maximum of {} scopes (--max-sessions); end one or \
                     wait for an idle one to expire",
                    self.max_scopes
                ),
                None,
            ));
        };
        Ok(table.remove(&victim).map(|entry| (victim, entry)))
    }

    /// End scope `key` (`entry`), reclaimed for another principal, and remember why.
    fn reclaim(&self, key: Key, entry: Entry) {
        let why = format!(
            "scope `{}` was ended to make room for another principal: principal `{}` held its \
             maximum of {} scopes (--max-scopes-per-principal) while the server held its \
             maximum of {} (--max-sessions), and it was the oldest idle one; its processes are \
             gone and the next request starts it afresh",
            if key.1 == DEFAULT_SCOPE {
                "default"
            } else {
                key.1.as_str()
            },
            key.0.0,
            self.per_principal,
            self.max_scopes
        );
        tracing::warn!(scope = %entry.name, "{why}");
        {
            let mut reclaimed = crate::lock(&self.reclaimed);
            if reclaimed.len() >= MAX_RECLAIMED {
                reclaimed.pop_front();
            }
            reclaimed.push_back((key, why));
        }
        entry.tasks.shutdown();
        let host = self.host.clone();
        tokio::spawn(async move { host.end_scope(&entry.name).await });
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<(Principal, String), Entry>> {
        crate::lock(&self.table)
    }

    /// The scope `id` of `principal` (`""`: its default scope), in use until the returned
    /// reference is dropped; made on first use.
    pub fn lease(self: &Arc<Self>, principal: &Principal, id: &str) -> Result<ScopeRef, ErrorData> {
        let key = (principal.clone(), id.to_owned());
        let (name, tasks) = {
            let mut table = self.table();
            let reclaimed = if table.contains_key(&key) {
                None
            } else {
                self.make_room(&mut table, principal)?
            };
            if let Some((key, entry)) = reclaimed {
                self.reclaim(key, entry);
            }
            let entry = table.entry(key.clone()).or_insert_with(|| Entry {
                // Unique per life of the scope: an expired one may still be ending (its
                // processes stopping) when a request names the id again.
                name: format!(
                    "http-{}-{}-{}",
                    principal.0,
                    if id == DEFAULT_SCOPE { "default" } else { id },
                    uuid::Uuid::new_v4().simple()
                ),
                tasks: TaskManager::new(),
                in_flight: 0,
                last: Instant::now(),
            });
            entry.in_flight += 1;
            (entry.name.clone(), entry.tasks.clone())
        };
        Ok(ScopeRef::leased(
            name,
            tasks,
            Lease {
                scopes: Arc::clone(self),
                key,
            },
        ))
    }

    /// The scope `id` of `principal` (`""`: its default scope) if it exists, in use until the
    /// reference is dropped; `None` makes nothing: for requests that only read a scope.
    pub fn find(self: &Arc<Self>, principal: &Principal, id: &str) -> Option<ScopeRef> {
        let key = (principal.clone(), id.to_owned());
        let (name, tasks) = {
            let mut table = self.table();
            let entry = table.get_mut(&key)?;
            entry.in_flight += 1;
            (entry.name.clone(), entry.tasks.clone())
        };
        Some(ScopeRef::leased(
            name,
            tasks,
            Lease {
                scopes: Arc::clone(self),
                key,
            },
        ))
    }

    /// End scopes idle for the idle timeout (their tasks and processes), until `stop`; then
    /// end them all.
    pub async fn reap_idle(self: Arc<Self>, stop: CancellationToken) {
        loop {
            let (expired, next) = super::idle::take_idle(
                &mut self.table(),
                self.idle_timeout,
                |entry| entry.in_flight > 0 || entry.tasks.running_task_count() > 0,
                |entry| entry.last,
            );
            for (_, Entry { name, tasks, .. }) in expired {
                tracing::info!(
                    scope = %name,
                    idle = %humantime::format_duration(self.idle_timeout),
                    "HTTP scope idle; terminating its processes"
                );
                tasks.shutdown();
                self.host.end_scope(&name).await;
            }
            if !super::idle::idle_wait(next, &self.changed, &stop).await {
                break;
            }
        }
        let all: Vec<(String, TaskManager)> = self
            .table()
            .drain()
            .map(|(_, entry)| (entry.name, entry.tasks))
            .collect();
        for (name, tasks) in all {
            tasks.shutdown();
            self.host.end_scope(&name).await;
        }
    }
}

/// A 2026-07-28 request over HTTP works in the scope it names in `_meta` as [`SCOPE_KEY`], or
/// else in the default scope, of the principal whose bearer token it came with.
impl NamedScopes for HttpScopes {
    fn resolve(
        self: Arc<Self>,
        context: &RequestContext<RoleServer>,
        create: bool,
    ) -> Result<Option<ScopeRef>, ErrorData> {
        let principal = Principal::of(context).ok_or_else(|| {
            ErrorData::internal_error("the request's bearer token was not checked", None)
        })?;
        let id = match context.meta.get(SCOPE_KEY) {
            None => DEFAULT_SCOPE,
            Some(id) => {
                let id = id.as_str().ok_or_else(|| {
                    ErrorData::invalid_params(format!("`_meta.{SCOPE_KEY}` must be a string"), None)
                })?;
                check_id(id)?;
                id
            }
        };
        let key = (principal.clone(), id.to_owned());
        if let Some(why) = self.take_reclaimed(&key) {
            return Err(ErrorData::new(ErrorCode(-32000), why, None));
        }
        if create {
            self.lease(principal, id).map(Some)
        } else {
            Ok(self.find(principal, id))
        }
    }

    fn note_session_scope(&self, context: &RequestContext<RoleServer>, scope: &str) {
        let session = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.headers.get("mcp-session-id"))
            .and_then(|id| id.to_str().ok());
        if let (Some(sessions), Some(session)) = (&self.sessions, session) {
            sessions.note_scope(session, scope);
        }
    }
}

/// A scope id a client may choose: 1 to 128 characters of `A-Z a-z 0-9 . _ : -`.
fn check_id(id: &str) -> Result<(), ErrorData> {
    let fine = !id.is_empty()
        && id.len() <= MAX_ID
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
    if fine {
        Ok(())
    } else {
        Err(ErrorData::invalid_params(
            format!("`_meta.{SCOPE_KEY}` must be 1 to {MAX_ID} characters of A-Z a-z 0-9 . _ : -"),
            None,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn scopes(max: usize) -> Arc<HttpScopes> {
        let host = ToolHost::builder()
            .bundled_policy(None)
            .process_backend(crate::testing::FakeProcesses::new())
            .cache_dir(None)
            .build()
            .await
            .expect("host");
        HttpScopes::new(Arc::new(host), Duration::from_millis(50), max, max, None)
    }

    #[tokio::test]
    async fn a_scope_id_belongs_to_its_principal() {
        let scopes = scopes(8).await;
        let alice = Principal("a".into());
        let mallory = Principal("m".into());
        let first = scopes.lease(&alice, "work").expect("lease");
        let again = scopes.lease(&alice, "work").expect("lease");
        let other = scopes.lease(&mallory, "work").expect("lease");
        assert_eq!(
            first.name, again.name,
            "the same id and principal: the same scope"
        );
        assert_ne!(first.name, other.name, "another principal: another scope");
        let task = first
            .tasks
            .spawn(Default::default(), |_| Box::pin(std::future::pending()));
        assert!(again.tasks.get_task(&task.task_id).is_ok());
        assert!(other.tasks.get_task(&task.task_id).is_err());
    }

    #[tokio::test]
    async fn each_principal_has_a_default_scope_of_its_own() {
        let scopes = scopes(8).await;
        let alice = Principal("alice".into());
        let bob = Principal("bob".into());
        assert!(
            scopes.find(&alice, DEFAULT_SCOPE).is_none(),
            "a read makes no scope"
        );
        let first = scopes.lease(&alice, DEFAULT_SCOPE).expect("lease");
        let again = scopes.find(&alice, DEFAULT_SCOPE).expect("it exists now");
        let theirs = scopes.lease(&bob, DEFAULT_SCOPE).expect("lease");
        let named = scopes.lease(&alice, "default").expect("lease");
        assert_eq!(first.name, again.name, "one default scope per principal");
        assert_ne!(first.name, theirs.name, "another principal's default scope");
        assert_ne!(
            first.name, named.name,
            "a scope a client names is another one"
        );
        assert!(
            first.name.starts_with("http-alice-default-"),
            "{}",
            first.name
        );
    }

    #[tokio::test]
    async fn scopes_beyond_the_cap_are_refused_and_idle_ones_end() {
        let scopes = scopes(1).await;
        let alice = Principal("a".into());
        let held = scopes.lease(&alice, "one").expect("lease");
        let refused = scopes.lease(&alice, "two").err().expect("over the cap");
        assert!(refused.message.contains("maximum of 1"), "{refused:?}");
        let stop = CancellationToken::new();
        let reaper = tokio::spawn(scopes.clone().reap_idle(stop.clone()));
        drop(held);
        // Idle, the scope ends and makes room.
        let deadline = Instant::now() + Duration::from_secs(5);
        while scopes.lease(&alice, "two").is_err() {
            assert!(Instant::now() < deadline, "the idle scope never ended");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        stop.cancel();
        reaper.await.expect("reaper");
    }

    #[tokio::test]
    async fn an_idle_scope_of_a_principal_at_its_limit_is_reclaimed_oldest_first() {
        let host = ToolHost::builder()
            .bundled_policy(None)
            .process_backend(crate::testing::FakeProcesses::new())
            .cache_dir(None)
            .build()
            .await
            .expect("host");
        let scopes = HttpScopes::new(Arc::new(host), Duration::from_secs(600), 3, 2, None);
        let (alice, mallory) = (Principal("alice".into()), Principal("mallory".into()));
        let busy = scopes.lease(&mallory, "busy").expect("lease");
        drop(scopes.lease(&mallory, "old").expect("lease"));
        let refused = scopes
            .lease(&mallory, "third")
            .err()
            .expect("over its share");
        assert!(
            refused.message.contains("--max-scopes-per-principal"),
            "{refused:?}"
        );
        let one = scopes.lease(&alice, "one").expect("lease");
        // The server is full: mallory's idle scope goes, not the one in use.
        let two = scopes.lease(&alice, "two").expect("room made");
        assert!(scopes.find(&mallory, "busy").is_some());
        assert!(scopes.find(&mallory, "old").is_none());
        assert!(
            scopes
                .take_reclaimed(&(mallory.clone(), "old".into()))
                .is_some()
        );
        // Every scope in use: nothing to reclaim.
        let full = scopes.lease(&mallory, "new").err().expect("full");
        assert!(full.message.contains("--max-sessions"), "{full:?}");
        // Alice's idle scopes may go for mallory, as mallory's went for her.
        drop(one);
        assert!(scopes.find(&mallory, "busy").is_some());
        drop(two);
        assert!(scopes.lease(&mallory, "new").is_ok());
        assert!(scopes.find(&alice, "one").is_none(), "the oldest idle one");
        drop(busy);
    }

    #[test]
    fn scope_ids_are_checked() {
        assert!(check_id("build-42").is_ok());
        assert!(check_id("a:b.c_d").is_ok());
        assert!(check_id("").is_err());
        assert!(check_id("../x").is_err());
        assert!(check_id(&"x".repeat(129)).is_err());
    }
}
