//! MCP over streamable HTTP at `/mcp`, behind bearer tokens.
//!
//! Each bearer token stands for a principal, named by the operator ([`BearerToken`]). Every
//! MCP session (from `initialize` to `DELETE` or idle expiry) gets its own [`ToolServer`] and
//! so its own scope, reachable only with the token that opened it: one session cannot list,
//! read or signal another's processes, and a session's processes are terminated when it ends.
//! Requests of protocol 2026-07-28, which has no sessions, work in scopes of their principal
//! (see `scopes`). The listener binds loopback addresses only unless remote access is allowed
//! explicitly. Connections are bounded in number and time (see `conn`); sessions and scopes
//! per principal as well as in total.

mod conn;
mod idle;
mod scopes;
mod sessions;

use super::{ServeError, ToolServer};
use crate::ToolHost;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
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
    /// The bearer tokens clients may send (`Authorization: Bearer TOKEN`), each for its
    /// principal: at least one.
    pub tokens: Vec<BearerToken>,
    /// Allow a non-loopback listen address.
    pub allow_remote: bool,
    /// A session idle this long (no request in progress, none since, no response ending
    /// since) is closed and its processes are terminated. A call in flight keeps its session.
    pub idle_timeout: Duration,
    /// The most sessions at once; `initialize` beyond it is refused with 503.
    pub max_sessions: usize,
    /// The most sessions of one principal at once (`None`: the default, see
    /// [`HttpOptions::session_share`]).
    pub max_sessions_per_principal: Option<usize>,
    /// The most named scopes of one principal at once (`None`: as for sessions).
    pub max_scopes_per_principal: Option<usize>,
    /// The most connections of clients that sent a valid token (`None`: the default, see
    /// [`default_max_connections`]).
    pub max_connections: Option<usize>,
    /// Browser origins allowed besides the server's own (`http://HOST:PORT` for the bound
    /// address, `localhost` and the loopback addresses): a request whose `Origin` header
    /// names another is refused with 403. Entries need a scheme; `:*` matches any port.
    pub allowed_origins: Vec<String>,
}

impl std::fmt::Debug for HttpOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpOptions")
            .field("addr", &self.addr)
            .field("tokens", &self.tokens)
            .field("allow_remote", &self.allow_remote)
            .field("idle_timeout", &self.idle_timeout)
            .field("max_sessions", &self.max_sessions)
            .field(
                "max_sessions_per_principal",
                &self.max_sessions_per_principal,
            )
            .field("max_scopes_per_principal", &self.max_scopes_per_principal)
            .field("max_connections", &self.max_connections)
            .field("allowed_origins", &self.allowed_origins)
            .finish()
    }
}

impl HttpOptions {
    /// The default share of one principal in `total` slots: all of them when the server has
    /// one principal, half of them (at least one) when it has several.
    pub fn session_share(&self, total: usize) -> usize {
        if self.tokens.len() > 1 {
            (total / 2).max(1)
        } else {
            total
        }
    }

    /// Check the options and resolve the listen address: there must be a token, none empty,
    /// the principals' names valid and each name and token given once; a non-loopback address
    /// needs `allow_remote`.
    pub async fn resolve(&self) -> Result<SocketAddr, ServeError> {
        BearerToken::check_all(&self.tokens).map_err(ServeError::Config)?;
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

/// A bearer token, and the principal it stands for: who sends it. Requests with it reach the
/// scopes of that principal alone.
#[derive(Clone, PartialEq, Eq)]
pub struct BearerToken {
    /// The principal's name: 1 to 64 characters of `A-Z a-z 0-9 . _ -`. It shows in the
    /// host's scope names and logs.
    pub principal: String,
    /// The token.
    pub token: String,
}

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BearerToken")
            .field("principal", &self.principal)
            .field("token", &"<redacted>")
            .finish()
    }
}

impl BearerToken {
    /// The principal of a token given alone (`TOOLHOST_TOKEN`, a file of one bare token).
    pub const DEFAULT_PRINCIPAL: &str = "default";

    /// The longest principal name.
    const MAX_NAME: usize = 64;

    /// The token `token` of principal `principal`.
    pub fn new(principal: impl Into<String>, token: impl Into<String>) -> Self {
        BearerToken {
            principal: principal.into(),
            token: token.into(),
        }
    }

    /// The tokens of a token file's `text`: one `NAME TOKEN` per line (separated by spaces or
    /// tabs); blank lines and lines starting with `#` are skipped. A line of one word is a
    /// token of principal [`Self::DEFAULT_PRINCIPAL`], so a file holding one bare token (the
    /// single-token file) works as it did. The error says which line is wrong and why, never
    /// showing a token.
    pub fn parse_file(text: &str) -> Result<Vec<BearerToken>, String> {
        let mut tokens = Vec::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            let token = match words[..] {
                [token] => BearerToken::new(Self::DEFAULT_PRINCIPAL, token),
                [name, token] => BearerToken::new(name, token),
                _ => {
                    return Err(format!(
                        "line {} of the token file has {} words; write one `NAME TOKEN` per \
                         line (or one bare token)",
                        number + 1,
                        words.len()
                    ));
                }
            };
            check_name(&token.principal).map_err(|why| format!("line {}: {why}", number + 1))?;
            tokens.push(token);
        }
        Self::check_all(&tokens)?;
        Ok(tokens)
    }

    /// At least one token, none empty, valid names, each name and each token given once.
    fn check_all(tokens: &[BearerToken]) -> Result<(), String> {
        if tokens.is_empty() {
            return Err(
                "no bearer token; give one with --token-file FILE or TOOLHOST_TOKEN".to_owned(),
            );
        }
        let mut names = std::collections::HashSet::new();
        let mut digests = std::collections::HashSet::new();
        for token in tokens {
            check_name(&token.principal)?;
            if token.token.trim().is_empty() {
                return Err(format!(
                    "the bearer token of principal `{}` is empty",
                    token.principal
                ));
            }
            if !names.insert(token.principal.as_str()) {
                return Err(format!(
                    "principal `{}` is given more than one token; name each client's token \
                     differently",
                    token.principal
                ));
            }
            if !digests.insert(digest(&token.token)) {
                return Err(format!(
                    "principal `{}` has the token of another principal; give each its own",
                    token.principal
                ));
            }
        }
        Ok(())
    }
}

/// A principal's name: 1 to 64 characters of `A-Z a-z 0-9 . _ -`.
fn check_name(name: &str) -> Result<(), String> {
    let fine = !name.is_empty()
        && name.len() <= BearerToken::MAX_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if fine {
        Ok(())
    } else {
        Err(format!(
            "the principal name `{}` is not 1 to {} characters of A-Z a-z 0-9 . _ -",
            name.escape_debug(),
            BearerToken::MAX_NAME
        ))
    }
}

/// The SHA-256 digest of a token (trimmed).
fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.trim().as_bytes()).into()
}

/// The expected tokens, kept as digests so that comparing does not depend on their length,
/// each with its principal.
#[derive(Clone)]
struct Auth {
    tokens: Arc<[([u8; 32], scopes::Principal)]>,
}

impl Auth {
    fn new(tokens: &[BearerToken]) -> Self {
        Auth {
            tokens: tokens
                .iter()
                .map(|token| {
                    (
                        digest(&token.token),
                        scopes::Principal(token.principal.clone()),
                    )
                })
                .collect(),
        }
    }

    /// The principal whose bearer token `request` carries, compared in constant time with
    /// every token.
    fn principal(&self, request: &Request) -> Option<scopes::Principal> {
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, token) = v.trim().split_once(' ')?;
                scheme
                    .eq_ignore_ascii_case("bearer")
                    .then_some(token.trim())
            })?;
        let presented: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let mut found = None;
        for (digest, principal) in self.tokens.iter() {
            if bool::from(presented.ct_eq(digest)) {
                found = Some(principal.clone());
            }
        }
        found
    }
}

/// The bearer token check: a request with a valid token moves its connection into the pool of
/// authenticated ones (see `conn`), or is refused with 503 when that is full.
async fn require_token(
    State((auth, max_connections)): State<(Auth, usize)>,
    mut request: Request,
    next: Next,
) -> Response {
    if let Some(principal) = auth.principal(&request) {
        if let Some(slot) = request.extensions().get::<conn::Slot>()
            && !slot.authenticate()
        {
            tracing::warn!(
                "an HTTP client with a valid token was refused: {max_connections} connections \
                 (--max-connections) are open"
            );
            return conn::busy(max_connections);
        }
        // Who it is, for the sessions and scopes it may reach (see `sessions`, `scopes`).
        request.extensions_mut().insert(principal);
        // When it arrived, for the timing lines of its call (no clock read without them).
        if tracing::enabled!(target: crate::sandbox::TIMINGS, tracing::Level::DEBUG) {
            request
                .extensions_mut()
                .insert(crate::mcp::scope::Arrived(std::time::Instant::now()));
        }
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

pub use conn::default_max as default_max_connections;

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
    // Connections are bounded in number and time (see `conn`).
    let connections = conn::Connections::new(conn::Limits::new(options.max_connections));

    let stop = CancellationToken::new();
    let signals = super::spawn_signal_watch(stop.clone())?;

    let mut manager = LocalSessionManager::default();
    // Idleness is ours to judge (`sessions`): rmcp's timer restarts only on traffic, so it
    // would expire a session in the middle of a long silent call.
    manager.session_config.keep_alive = None;
    let manager = Arc::new(manager);
    let sessions = sessions::Sessions::new(
        host.clone(),
        manager.clone(),
        options.idle_timeout,
        options.max_sessions,
        options
            .max_sessions_per_principal
            .unwrap_or_else(|| options.session_share(options.max_sessions)),
    );
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
    // 2026-07-28 requests (no sessions) work in scopes of their principal; older clients get
    // one per session.
    let scopes = scopes::HttpScopes::new(
        host.clone(),
        options.idle_timeout,
        options.max_sessions,
        options
            .max_scopes_per_principal
            .unwrap_or_else(|| options.session_share(options.max_sessions)),
        Some(sessions.clone()),
    );
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
            (Auth::new(&options.tokens), connections.max()),
            require_token,
        ));

    // Announced on stderr whatever the log level: scripts and tests read the port here.
    eprintln!("toolhost: serving MCP on http://{local}/mcp");
    connections
        .serve(listener, router, stop.clone(), SHUTDOWN_GRACE)
        .await;
    signals.abort();
    reaper.abort();
    // It ends the scopes' tasks once `stop` is cancelled (the server stopping cancels it).
    stop.cancel();
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, scope_reaper).await;
    host.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_file_names_a_principal_per_token() {
        let tokens =
            BearerToken::parse_file("# agents\n\nalice  secret-a\n\tbob\tsecret-b  \n# end\n")
                .expect("parses");
        assert_eq!(
            tokens,
            [
                BearerToken::new("alice", "secret-a"),
                BearerToken::new("bob", "secret-b")
            ]
        );
    }

    #[test]
    fn a_single_token_file_still_works() {
        let tokens = BearerToken::parse_file("  s3cret \n").expect("parses");
        assert_eq!(
            tokens,
            [BearerToken::new(BearerToken::DEFAULT_PRINCIPAL, "s3cret")]
        );
    }

    #[test]
    fn bad_token_files_say_what_is_wrong_without_a_token() {
        for (text, says) in [
            ("", "no bearer token"),
            ("# only a comment\n", "no bearer token"),
            ("alice tok1 tok2\n", "line 1"),
            ("al/ice tok1\n", "principal name"),
            ("alice tok1\nalice tok2\n", "more than one token"),
            ("alice tok1\nbob tok1\n", "token of another principal"),
            ("tok1\ntok2\n", "more than one token"),
        ] {
            let error = BearerToken::parse_file(text).expect_err(text);
            assert!(error.contains(says), "{text:?}: {error}");
            for secret in ["tok1", "tok2"] {
                assert!(!error.contains(secret), "{text:?} shows a token: {error}");
            }
        }
    }

    #[test]
    fn a_token_reaches_its_own_principal_only() {
        let auth = Auth::new(&[
            BearerToken::new("alice", "token-a"),
            BearerToken::new("bob", "token-b"),
        ]);
        let with = |value: &str| {
            Request::builder()
                .header(header::AUTHORIZATION, value)
                .body(axum::body::Body::empty())
                .expect("request")
        };
        let name = |value: &str| auth.principal(&with(value)).map(|p| p.0);
        assert_eq!(name("Bearer token-a").as_deref(), Some("alice"));
        assert_eq!(name("bearer  token-b ").as_deref(), Some("bob"));
        assert_eq!(name("Bearer token-c"), None);
        assert_eq!(name("Bearer token-"), None);
        assert_eq!(name("Basic token-a"), None);
    }
}
