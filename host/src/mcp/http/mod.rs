//! MCP over streamable HTTP at `/mcp`, behind a bearer token.
//!
//! Every MCP session (from `initialize` to `DELETE` or idle expiry) gets its own
//! [`ToolServer`] and so its own scope: one session cannot list, read or signal another's
//! processes, and a session's processes are terminated when it ends. The listener binds
//! loopback addresses only unless remote access is allowed explicitly.

mod scopes;
mod sessions;

use super::{ServeError, ToolServer};
use crate::ToolHost;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::serve::ListenerExt;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use sha2::{Digest, Sha256};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use subtle::ConstantTimeEq;
use tokio_util::sync::CancellationToken;

/// How long a stopping server waits for open connections before it stops anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Settings of the HTTP server.
#[derive(Clone)]
pub struct HttpOptions {
    /// Where to listen, e.g. `127.0.0.1:8080` (port 0 picks a free port).
    pub addr: String,
    /// The bearer token clients must send (`Authorization: Bearer TOKEN`).
    pub token: String,
    /// Allow a non-loopback listen address.
    pub allow_remote: bool,
    /// A session idle this long (no request in progress, none since, no response ending
    /// since) is closed and its processes are terminated. A call in flight keeps its session.
    pub idle_timeout: Duration,
    /// The most sessions at once; `initialize` beyond it is refused with 503.
    pub max_sessions: usize,
    /// Browser origins allowed besides the server's own (`http://HOST:PORT` for the bound
    /// address, `localhost` and the loopback addresses): a request whose `Origin` header
    /// names another is refused with 403. Entries need a scheme; `:*` matches any port.
    pub allowed_origins: Vec<String>,
}

impl std::fmt::Debug for HttpOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpOptions")
            .field("addr", &self.addr)
            .field("token", &"<redacted>")
            .field("allow_remote", &self.allow_remote)
            .field("idle_timeout", &self.idle_timeout)
            .field("max_sessions", &self.max_sessions)
            .field("allowed_origins", &self.allowed_origins)
            .finish()
    }
}

impl HttpOptions {
    /// Check the options and resolve the listen address: the token must not be empty, and a
    /// non-loopback address needs `allow_remote`.
    pub async fn resolve(&self) -> Result<SocketAddr, ServeError> {
        if self.token.trim().is_empty() {
            return Err(ServeError::Config(
                "the bearer token is empty; give one with --token-file FILE or TOOLHOST_TOKEN"
                    .to_string(),
            ));
        }
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host(self.addr.as_str())
            .await
            .map_err(|e| {
                ServeError::Config(format!(
                    "invalid listen address `{}` (expected HOST:PORT, e.g. 127.0.0.1:8080): {e}",
                    self.addr
                ))
            })?
            .collect();
        let Some(first) = addrs.first().copied() else {
            return Err(ServeError::Config(format!(
                "listen address `{}` resolves to nothing",
                self.addr
            )));
        };
        if !self.allow_remote
            && let Some(remote) = addrs.iter().find(|a| !a.ip().is_loopback())
        {
            return Err(ServeError::Config(format!(
                "refusing to listen on non-loopback address {remote} (from `{}`): anyone who can \
                 reach it could run commands here. Bind 127.0.0.1 or ::1, or pass \
                 --allow-remote if you really mean it",
                self.addr
            )));
        }
        Ok(first)
    }
}

/// The expected token, kept as a digest so that comparing does not depend on its length.
#[derive(Clone)]
struct Auth {
    digest: Arc<[u8; 32]>,
}

impl Auth {
    fn new(token: &str) -> Self {
        Auth {
            digest: Arc::new(Sha256::digest(token.trim().as_bytes()).into()),
        }
    }

    /// The principal of requests with this token.
    fn principal(&self) -> scopes::Principal {
        let hex: String = self.digest[..8]
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        scopes::Principal(hex)
    }

    /// Whether `request` carries the right bearer token, compared in constant time.
    fn allows(&self, request: &Request) -> bool {
        let Some(presented) = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, token) = v.trim().split_once(' ')?;
                scheme
                    .eq_ignore_ascii_case("bearer")
                    .then_some(token.trim())
            })
        else {
            return false;
        };
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        bool::from(digest.ct_eq(&*self.digest))
    }
}

async fn require_token(State(auth): State<Auth>, mut request: Request, next: Next) -> Response {
    if auth.allows(&request) {
        // Who it is, for the scopes of 2026-07-28 requests (see `scopes`): a short digest
        // of the token, never the token.
        request.extensions_mut().insert(auth.principal());
        return next.run(request).await;
    }
    let mut response = (
        StatusCode::UNAUTHORIZED,
        "missing or wrong bearer token (Authorization: Bearer TOKEN)\n",
    )
        .into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"toolhost\""),
    );
    response
}

/// The origins of pages the server itself would serve: `http://` with the bound port and the
/// bound address, `localhost` or a loopback address.
fn own_origins(local: SocketAddr) -> impl Iterator<Item = String> {
    let port = local.port();
    let ip = match local.ip() {
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        std::net::IpAddr::V4(ip) => ip.to_string(),
    };
    let mut hosts = vec![
        ip,
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "[::1]".to_owned(),
    ];
    hosts.dedup();
    hosts
        .into_iter()
        .map(move |host| format!("http://{host}:{port}"))
}

/// Serve `host`'s tools over streamable HTTP at `http://ADDR/mcp` until SIGINT/SIGTERM, then
/// terminate every process the host started. The bound address is announced on stderr.
pub async fn serve_http(host: Arc<ToolHost>, options: HttpOptions) -> Result<(), ServeError> {
    let addr = options.resolve().await?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Listen {
            addr: options.addr.clone(),
            source,
        })?;
    let local = listener.local_addr().map_err(|source| ServeError::Listen {
        addr: options.addr.clone(),
        source,
    })?;
    // Answers and stream events go out in small writes: with Nagle's algorithm a write waits
    // for the client's delayed acknowledgement of the previous one (40 ms on Linux), which
    // was the 99th percentile of every call.
    let listener = listener.tap_io(|stream| {
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "cannot set TCP_NODELAY on a connection");
        }
    });

    let stop = CancellationToken::new();
    let signals = super::spawn_signal_watch(stop.clone())?;

    let mut manager = LocalSessionManager::default();
    // Idleness is ours to judge (`sessions`): rmcp's timer restarts only on traffic, so it
    // would expire a session in the middle of a long silent call.
    manager.session_config.keep_alive = None;
    let manager = Arc::new(manager);
    let sessions =
        sessions::Sessions::new(manager.clone(), options.idle_timeout, options.max_sessions);
    let reaper = tokio::spawn(sessions.clone().reap_idle(stop.clone()));
    let mut config = StreamableHttpServerConfig::default()
        .with_cancellation_token(stop.child_token())
        .with_legacy_session_mode(true)
        // A page in a browser must not drive the server (DNS rebinding, cross-site requests):
        // a present Origin must be the server's own or one the operator allowed.
        .with_allowed_origins(own_origins(local).chain(options.allowed_origins.iter().cloned()))
        .enforce_origin_validation();
    if options.allow_remote {
        // Clients reach a remote server under names we cannot know; the token guards it.
        config = config.disable_allowed_hosts();
    } else {
        // The loopback names, and the address actually bound (127.0.0.2 is loopback too).
        config = config.with_allowed_hosts([
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
            "::1".to_owned(),
            local.ip().to_string(),
        ]);
    }
    // 2026-07-28 requests (no sessions) name their scope; older clients get one per session.
    let scopes = scopes::HttpScopes::new(host.clone(), options.idle_timeout, options.max_sessions);
    let scope_reaper = tokio::spawn(scopes.clone().reap_idle(stop.clone()));
    let factory_host = host.clone();
    let service = StreamableHttpService::new(
        move || {
            Ok(ToolServer::with_named_scopes(
                factory_host.clone(),
                scopes.clone(),
            ))
        },
        manager,
        config,
    );
    let router = axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(
            sessions,
            sessions::track,
        ))
        .layer(axum::middleware::from_fn_with_state(
            Auth::new(&options.token),
            require_token,
        ));

    // Announced on stderr whatever the log level: scripts and tests read the port here.
    eprintln!("toolhost: serving MCP on http://{local}/mcp");
    let server = axum::serve(listener, router)
        .with_graceful_shutdown(stop.clone().cancelled_owned())
        .into_future();
    let mut server = std::pin::pin!(server);
    let outcome = tokio::select! {
        outcome = &mut server => outcome,
        _ = stop.cancelled() => {
            match tokio::time::timeout(SHUTDOWN_GRACE, &mut server).await {
                Ok(outcome) => outcome,
                Err(_) => {
                    tracing::warn!("connections still open after the grace period; stopping");
                    Ok(())
                }
            }
        }
    };
    signals.abort();
    reaper.abort();
    // It ends the scopes' tasks once `stop` is cancelled (the server stopping cancels it).
    stop.cancel();
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, scope_reaper).await;
    host.shutdown().await;
    outcome.map_err(|e| ServeError::Task(e.to_string()))
}
