//! The HTTP sessions' bookkeeping, in front of rmcp's session manager: what a request body
//! must be, how many sessions there may be, which request ids are in use, and when a session
//! is idle.
//!
//! - A POST body must be one JSON-RPC message: unparsable JSON is `400` with `-32700`, JSON
//!   that is no request `400` with `-32600` (each with the request's id when it shows), a
//!   batch `400` (rmcp cannot answer one over HTTP), a body over 16 MiB `413`.
//! - A new session is bounded per principal (`--max-sessions-per-principal`) and in total
//!   (`--max-sessions`). For a new session of principal P:
//!   1. P at its own limit: refused with `503` naming `--max-sessions-per-principal`.
//!   2. The server at its total: the oldest idle session (no request in progress) of a
//!      principal at its limit is closed to make room; that session's next request gets `404`
//!      saying why.
//!   3. None to reclaim: refused with `503` naming `--max-sessions`.
//! - A request reusing the id of one still in progress in its session is refused with `400`;
//!   the first keeps its answer (rmcp would send it to the second).
//! - A session is idle when none of its requests is in progress; it is closed (and its
//!   processes terminated) once idle for the idle timeout, counted from its last request or
//!   the end of its last response. A call in flight keeps it open however long it runs.
//! - A session belongs to the principal whose bearer token opened it: with another token, it
//!   is unknown (`404`, as a session that does not exist).

use super::super::jsonrpc::{self, INVALID_REQUEST, Parsed, id_key};
use super::idle::{idle_wait, take_idle};
use crate::ToolHost;
use crate::lock;
use crate::mcp::scope::Principal;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use rmcp::transport::streamable_http_server::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The largest request body accepted.
const MAX_BODY: usize = 16 * 1024 * 1024;

/// The header carrying the session id.
const SESSION_HEADER: &str = "mcp-session-id";

/// JSON-RPC error code for "the server cannot take this now" (implementation-defined range).
const SERVER_BUSY: i32 = -32000;

/// Most reclaimed sessions remembered, to tell their clients why (the oldest are forgotten).
const MAX_RECLAIMED: usize = 1024;

/// The sessions of one HTTP server. Shared by the request middleware and the idle reaper.
pub struct Sessions {
    /// Asked whether a session has processes running (such a session is not reclaimed).
    host: Arc<ToolHost>,
    manager: Arc<LocalSessionManager>,
    idle_timeout: Duration,
    max_sessions: usize,
    per_principal: usize,
    table: Mutex<HashMap<String, Activity>>,
    /// Woken whenever a session may have become idle or its deadline moved.
    changed: Notify,
    /// `initialize` requests in progress, per principal (see [`Sessions::open_slot`]).
    opening: Mutex<HashMap<Option<Principal>, usize>>,
    /// Sessions closed to make room for another principal, newest last, with why.
    reclaimed: Mutex<std::collections::VecDeque<Reclaimed>>,
}

/// A session being opened; see [`Sessions::open_slot`].
struct OpeningSlot(Arc<Sessions>, Option<Principal>);

impl Drop for OpeningSlot {
    fn drop(&mut self) {
        let mut opening = lock(&self.0.opening);
        if let Some(count) = opening.get_mut(&self.1) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                opening.remove(&self.1);
            }
        }
    }
}

/// A session closed to make room for another principal.
struct Reclaimed {
    id: String,
    /// Whose it was: only they are told why.
    owner: Option<Principal>,
    why: String,
}

/// Why a new session is refused.
enum Full {
    /// Its principal holds `--max-sessions-per-principal` sessions.
    Principal,
    /// The server holds `--max-sessions`, none of them to reclaim.
    Total,
}

/// One session's traffic.
struct Activity {
    /// Whose session it is.
    principal: Option<Principal>,
    /// Ids (their JSON text) of requests in progress.
    pending: HashSet<String>,
    /// Requests whose response has not ended.
    in_flight: usize,
    /// The last request, or the end of the last response.
    last: Instant,
    /// The host scope its calls work in, once it made one.
    scope: Option<String>,
}

impl Activity {
    fn new(principal: Option<Principal>) -> Self {
        Activity {
            principal,
            pending: HashSet::new(),
            in_flight: 0,
            last: Instant::now(),
            scope: None,
        }
    }
}

impl Sessions {
    /// Bookkeeping for `manager`'s sessions.
    pub fn new(
        host: Arc<ToolHost>,
        manager: Arc<LocalSessionManager>,
        idle_timeout: Duration,
        max_sessions: usize,
        per_principal: usize,
    ) -> Arc<Self> {
        Arc::new(Sessions {
            host,
            manager,
            idle_timeout,
            max_sessions,
            per_principal: per_principal.clamp(1, max_sessions.max(1)),
            table: Mutex::new(HashMap::new()),
            changed: Notify::new(),
            opening: Mutex::new(HashMap::new()),
            reclaimed: Mutex::new(std::collections::VecDeque::new()),
        })
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<String, Activity>> {
        lock(&self.table)
    }

    /// The answer to a request of `principal` naming session `id`, if the session was reclaimed
    /// for another principal: its owner is told why (once), anyone else that it is unknown.
    fn reclaimed(&self, id: &str, principal: Option<&Principal>) -> Option<Response> {
        let mut reclaimed = lock(&self.reclaimed);
        let at = reclaimed.iter().position(|gone| gone.id == id)?;
        if reclaimed[at].owner.as_ref() != principal {
            return Some((StatusCode::NOT_FOUND, "no such MCP session\n").into_response());
        }
        let gone = reclaimed.remove(at)?;
        Some((StatusCode::NOT_FOUND, format!("{}\n", gone.why)).into_response())
    }

    /// Note that session `id` of `owner` is reclaimed (the table's lock held, so that no
    /// request finds it in neither place).
    fn note_reclaimed(&self, id: &str, owner: Option<Principal>) {
        let name = owner.as_ref().map_or("?", |p| p.0.as_str());
        let why = format!(
            "MCP session closed to make room for another principal: its principal `{name}` \
             held its maximum of {} sessions (--max-sessions-per-principal) while the server \
             held its maximum of {} (--max-sessions), and it was the oldest idle one",
            self.per_principal, self.max_sessions
        );
        tracing::warn!(session = %id, principal = %name, "{why}");
        let mut reclaimed = lock(&self.reclaimed);
        if reclaimed.len() >= MAX_RECLAIMED {
            reclaimed.pop_front();
        }
        reclaimed.push_back(Reclaimed {
            id: id.to_owned(),
            owner,
            why,
        });
    }

    /// Close sessions once they are idle for the idle timeout, until `stop`.
    pub async fn reap_idle(self: Arc<Self>, stop: CancellationToken) {
        loop {
            let (expired, next) = take_idle(
                &mut self.table(),
                self.idle_timeout,
                |activity| activity.in_flight > 0,
                |activity| activity.last,
            );
            for (id, _) in expired {
                tracing::info!(
                    session = %id,
                    idle = %humantime::format_duration(self.idle_timeout),
                    "HTTP session idle; closing it and terminating its processes"
                );
                if let Err(error) = self.manager.close_session(&id.as_str().into()).await {
                    tracing::debug!(session = %id, %error, "closing an idle session");
                }
            }
            if !idle_wait(next, &self.changed, &stop).await {
                return;
            }
        }
    }

    /// A place for a session of `principal` being opened, counted with rmcp's sessions so that
    /// `initialize` requests arriving together cannot overshoot the limits; the flow is the
    /// module's (a session of another principal may be closed to make room).
    async fn open_slot(
        self: &Arc<Self>,
        principal: Option<&Principal>,
    ) -> Result<OpeningSlot, Full> {
        let live: HashSet<String> = self
            .manager
            .sessions
            .read()
            .await
            .keys()
            .map(|id| id.to_string())
            .collect();
        let reclaim = {
            // A session made since `live` was read is in the table and not in `live`: the
            // table is not pruned by it (that session would lose its principal).
            let mut table = self.table();
            let mut opening = lock(&self.opening);
            let count = |who: Option<&Principal>| {
                table
                    .values()
                    .filter(|a| a.principal.as_ref() == who)
                    .count()
                    + opening.get(&who.cloned()).copied().unwrap_or(0)
            };
            // 1. The principal's own limit.
            if count(principal) >= self.per_principal {
                return Err(Full::Principal);
            }
            // 2. The total, and an idle session of a principal at its limit to reclaim.
            let total = live.len() + opening.values().sum::<usize>();
            let reclaim = if total >= self.max_sessions {
                let victim = table
                    .iter()
                    .filter(|(id, a)| {
                        a.in_flight == 0 && a.principal.as_ref() != principal && live.contains(*id)
                    })
                    .filter(|(_, a)| count(a.principal.as_ref()) >= self.per_principal)
                    // Asked last: it looks at the scope's processes.
                    .filter(|(_, a)| {
                        a.scope
                            .as_deref()
                            .is_none_or(|scope| !self.host.has_processes(scope))
                    })
                    .min_by_key(|(_, a)| a.last)
                    .map(|(id, _)| id.clone());
                // 3. None to reclaim.
                let Some(victim) = victim else {
                    return Err(Full::Total);
                };
                let owner = table.remove(&victim).and_then(|a| a.principal);
                self.note_reclaimed(&victim, owner);
                Some(victim)
            } else {
                None
            };
            *opening.entry(principal.cloned()).or_insert(0) += 1;
            reclaim
        };
        let slot = OpeningSlot(Arc::clone(self), principal.cloned());
        if let Some(id) = reclaim
            && let Err(error) = self.manager.close_session(&id.as_str().into()).await
        {
            tracing::debug!(session = %id, %error, "closing a reclaimed session");
        }
        Ok(slot)
    }

    /// Note that session `id` works in host scope `scope` (a session not in the table is
    /// not added).
    pub fn note_scope(&self, id: &str, scope: &str) {
        if let Some(activity) = self.table().get_mut(id)
            && activity.scope.is_none()
        {
            activity.scope = Some(scope.to_owned());
        }
    }

    /// Whether rmcp holds session `id`.
    async fn exists(&self, id: &str) -> bool {
        self.manager.sessions.read().await.contains_key(id)
    }
}

/// The middleware: checks a POST body, caps sessions, tracks ids and activity.
pub async fn track(
    State(sessions): State<Arc<Sessions>>,
    request: Request,
    next: Next,
) -> Response {
    let session = request
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(id) = &session {
        let principal = request.extensions().get::<Principal>();
        if let Some(answer) = sessions.reclaimed(id, principal) {
            return answer;
        }
        if !touch(&sessions, id, principal) {
            // Another principal's session: as unknown as one that does not exist.
            return (StatusCode::NOT_FOUND, "no such MCP session\n").into_response();
        }
    }
    match *request.method() {
        Method::POST => post(sessions, session, request, next).await,
        Method::DELETE => {
            if let Some(id) = &session
                && !sessions.exists(id).await
            {
                // Unknown or already ended (the transport says 404 for both).
                return (StatusCode::NOT_FOUND, "no such MCP session\n").into_response();
            }
            let mut response = next.run(request).await;
            if let Some(id) = session
                && response.status().is_success()
            {
                sessions.table().remove(&id);
                // Ended, not merely accepted: rmcp says 202, clients expect 200 or 204.
                *response.status_mut() = StatusCode::OK;
            }
            response
        }
        _ => next.run(request).await,
    }
}

/// Note traffic of a known session of `principal`; false if the session is another
/// principal's.
fn touch(sessions: &Sessions, id: &str, principal: Option<&Principal>) -> bool {
    match sessions.table().get_mut(id) {
        Some(activity) if activity.principal.as_ref() != principal => false,
        Some(activity) => {
            activity.last = Instant::now();
            true
        }
        None => true,
    }
}

async fn post(
    sessions: Arc<Sessions>,
    session: Option<String>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    let principal = parts.extensions.get::<Principal>().cloned();
    let bytes = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(bytes) => bytes,
        Err(error) => {
            let message = format!(
                "Invalid Request: cannot read the request body ({error}); the limit is {} MiB",
                MAX_BODY / (1024 * 1024)
            );
            return refusal(
                StatusCode::PAYLOAD_TOO_LARGE,
                jsonrpc::error_answer(None, INVALID_REQUEST, message),
            );
        }
    };
    let value = match jsonrpc::parse(jsonrpc::trim(&bytes)) {
        Parsed::One(value) => value,
        Parsed::Broken(answers) => return refusal(StatusCode::BAD_REQUEST, many(answers)),
        Parsed::Batch(items) => {
            let message = "Invalid Request: this server takes one JSON-RPC message per HTTP \
                           request, not a batch";
            return refusal(
                StatusCode::BAD_REQUEST,
                many(jsonrpc::refuse_all(&items, INVALID_REQUEST, message)),
            );
        }
    };
    let request_id = jsonrpc::request_id(&value);
    let initialize =
        session.is_none() && value.get("method").and_then(Value::as_str) == Some("initialize");
    match jsonrpc::check(value) {
        Err(answer) => return refusal(StatusCode::BAD_REQUEST, answer),
        Ok(None) => return StatusCode::ACCEPTED.into_response(),
        Ok(Some(_)) => {}
    }
    let opening = if initialize {
        match sessions.open_slot(principal.as_ref()).await {
            Ok(slot) => Some(slot),
            Err(full) => {
                let message = match full {
                    Full::Principal => format!(
                        "principal `{}` already has {} MCP sessions, its limit \
                         (--max-sessions-per-principal); end one (HTTP DELETE) or wait for an \
                         idle one to expire",
                        principal.as_ref().map_or("?", |p| p.0.as_str()),
                        sessions.per_principal
                    ),
                    Full::Total => format!(
                        "this server already has {} MCP sessions, its limit (--max-sessions); \
                         end one (HTTP DELETE) or wait for an idle one to expire",
                        sessions.max_sessions
                    ),
                };
                tracing::warn!("{message}");
                let answer = jsonrpc::error_answer(request_id, SERVER_BUSY, message);
                return refusal(StatusCode::SERVICE_UNAVAILABLE, answer);
            }
        }
    } else {
        None
    };
    let guard = match (&session, request_id) {
        (Some(session), Some(id)) => match InFlight::begin(&sessions, session, id) {
            Ok(guard) => Some(guard),
            Err(answer) => return refusal(StatusCode::BAD_REQUEST, answer),
        },
        _ => None,
    };
    let response = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    if initialize
        && let Some(id) = response
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
    {
        sessions
            .table()
            .insert(id.to_owned(), Activity::new(principal));
        sessions.changed.notify_one();
    }
    // rmcp holds the new session now (or refused it): the slot is counted there.
    drop(opening);
    match guard {
        // The request is in progress until its response (an SSE stream) has ended.
        Some(guard) => response.map(|body| {
            Body::from_stream(body.into_data_stream().map(move |chunk| {
                let _ = &guard;
                chunk
            }))
        }),
        None => response,
    }
}

/// A request in progress in a session; ends when dropped.
struct InFlight {
    sessions: Arc<Sessions>,
    session: String,
    key: String,
}

impl InFlight {
    /// Register request `id` of `session`, or the refusal when it is already in progress.
    fn begin(sessions: &Arc<Sessions>, session: &str, id: Value) -> Result<Self, Value> {
        let key = id_key(&id);
        let mut table = sessions.table();
        let Some(activity) = table.get_mut(session) else {
            // Not a session we know (rmcp answers 404 for it): nothing to track.
            return Ok(InFlight {
                sessions: sessions.clone(),
                session: String::new(),
                key,
            });
        };
        if !activity.pending.insert(key.clone()) {
            return Err(jsonrpc::id_in_use(id));
        }
        activity.in_flight += 1;
        Ok(InFlight {
            sessions: sessions.clone(),
            session: session.to_owned(),
            key,
        })
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.session.is_empty() {
            return;
        }
        if let Some(activity) = self.sessions.table().get_mut(&self.session) {
            activity.pending.remove(&self.key);
            activity.in_flight = activity.in_flight.saturating_sub(1);
            activity.last = Instant::now();
        }
        self.sessions.changed.notify_one();
    }
}

/// One answer as itself, several as an array.
fn many(mut answers: Vec<Value>) -> Value {
    if answers.len() == 1 {
        answers.remove(0)
    } else {
        Value::Array(answers)
    }
}

/// A refusal: `status` with the JSON-RPC error `answer` as a JSON body.
fn refusal(status: StatusCode, answer: Value) -> Response {
    let mut response = (status, Bytes::from(answer.to_string())).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
