//! The gate's proxy: HTTP `CONNECT` (for HTTPS and any TCP protocol) and plain HTTP
//! forwarding, served on a listener inside the session's network namespace.
//!
//! For each request:
//! 1. The target is read: the authority of a `CONNECT`, or the absolute URI of a forwarded
//!    `http://` request. Anything else is answered `400`.
//! 2. [`Resolver::destinations`] decides: a refusal by the allow-list is recorded and answered
//!    `403` with the reason; a failed lookup or connection is answered `502`.
//! 3. The proxy connects to a checked address (never to a name again).
//! 4. A `CONNECT` is answered `200` and bytes flow both ways until either side closes or
//!    neither sends for [`TUNNEL_IDLE`]; a forwarded request is sent upstream in origin form,
//!    with the `Host` it was checked for (never the URL's userinfo), and its answer returned.
//!
//! A connection whose request head has not arrived in full within [`HEADER_TIMEOUT`] is
//! closed, and so is a keep-alive connection idle that long: half-sent or idle requests free
//! their place among the gate's connections.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::Shared;
use super::allow::Host;
use super::resolve::Refused;

/// Longest a connection to an allowed host may take to be made.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// Longest a request head may take to arrive, and longest a keep-alive connection stays idle.
pub(super) const HEADER_TIMEOUT: Duration = Duration::from_secs(20);

/// Longest a `CONNECT` tunnel stays open with no byte in either direction.
const TUNNEL_IDLE: Duration = Duration::from_secs(15 * 60);

type Body = Either<Incoming, Full<Bytes>>;

/// The ports of a connection to the proxy.
#[derive(Debug, Clone, Copy)]
struct Client {
    /// The client's own.
    port: u16,
    /// The proxy's listener's.
    listener: u16,
}

/// Serve one accepted connection of a command.
pub(super) async fn serve(stream: tokio::net::TcpStream, shared: Arc<Shared>) {
    // Who connected: the client's port, and the listener's at the other end.
    let client = Client {
        port: stream.peer_addr().map_or(0, |address| address.port()),
        listener: stream.local_addr().map_or(0, |address| address.port()),
    };
    let service = hyper::service::service_fn(move |request| {
        let shared = shared.clone();
        async move { Ok::<_, Infallible>(handle(request, shared, client).await) }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .preserve_header_case(true)
        .title_case_headers(true)
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades()
        .await;
    if let Err(error) = served {
        tracing::debug!(%error, "a proxy connection ended with an error");
    }
}

/// A short text answer.
fn answer(status: StatusCode, text: String) -> Response<Body> {
    let mut response = Response::new(Either::Right(Full::new(Bytes::from(text + "\n"))));
    *response.status_mut() = status;
    response
}

/// The target of `request`: host and port.
fn target(request: &Request<Incoming>) -> Result<(String, u16), String> {
    let uri = request.uri();
    if request.method() == Method::CONNECT {
        let authority = uri
            .authority()
            .ok_or_else(|| "CONNECT needs HOST:PORT".to_owned())?;
        let port = authority
            .port_u16()
            .ok_or_else(|| "CONNECT needs a port".to_owned())?;
        return Ok((authority.host().to_owned(), port));
    }
    match (uri.scheme_str(), uri.authority()) {
        (Some("http"), Some(authority)) => Ok((
            authority.host().to_owned(),
            authority.port_u16().unwrap_or(80),
        )),
        (Some(scheme), Some(_)) => Err(format!(
            "this proxy forwards only http:// requests; use CONNECT for {scheme}://"
        )),
        _ => Err(
            "this is the sandbox's network proxy: send requests to it as to a proxy \
             (HTTP_PROXY, HTTPS_PROXY)"
                .to_owned(),
        ),
    }
}

async fn handle(request: Request<Incoming>, shared: Arc<Shared>, client: Client) -> Response<Body> {
    // 1. The target.
    let (host_text, port) = match target(&request) {
        Ok(target) => target,
        Err(why) => return answer(StatusCode::BAD_REQUEST, why),
    };
    let Some(host) = Host::parse(&host_text) else {
        return answer(
            StatusCode::BAD_REQUEST,
            format!("`{host_text}` is not a host name or address"),
        );
    };
    // 2. The decision; a host the person may allow is asked about now, where a call of the
    //    session can ask (the connection waits for the answer).
    let mut allowed = shared.allowed();
    let mut decided = shared.resolver.destinations(&allowed, &host, port).await;
    if let Err(Refused::Policy(reason)) = &decided
        && shared
            .approved
            .ask_now(&format!("{host}:{port}"), reason)
            .await
            == Some(true)
    {
        allowed = shared.allowed();
        decided = shared.resolver.destinations(&allowed, &host, port).await;
    }
    let destinations = match decided {
        Ok(destinations) => destinations,
        Err(Refused::Policy(reason)) => {
            let protocol = super::owner::Protocol::Tcp {
                listener: client.listener,
            };
            shared
                .refuse(
                    format!("{host}:{port}"),
                    reason.clone(),
                    protocol,
                    client.port,
                )
                .await;
            return answer(
                StatusCode::FORBIDDEN,
                format!(
                    "toolhost refused {host}:{port}: {reason}. Commands here may reach only {}",
                    allowed
                ),
            );
        }
        Err(Refused::Failed(reason)) => return answer(StatusCode::BAD_GATEWAY, reason),
    };
    // 3. A connection to a checked address.
    let upstream = match connect(&destinations).await {
        Ok(upstream) => upstream,
        Err(reason) => {
            return answer(
                StatusCode::BAD_GATEWAY,
                format!("cannot connect to {host}:{port}: {reason}"),
            );
        }
    };
    // 4. Tunnel or forward.
    if request.method() == Method::CONNECT {
        tokio::spawn(async move {
            match hyper::upgrade::on(request).await {
                Ok(upgraded) => tunnel(TokioIo::new(upgraded), upstream).await,
                Err(error) => tracing::debug!(%error, "a CONNECT was not upgraded"),
            }
        });
        return Response::new(Either::Right(Full::new(Bytes::new())));
    }
    forward(request, upstream).await
}

/// Connect to the first of `destinations` that answers.
async fn connect(destinations: &[SocketAddr]) -> Result<tokio::net::TcpStream, String> {
    let mut last = "no address".to_owned();
    for destination in destinations {
        match tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(destination))
            .await
        {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(error)) => last = format!("{destination}: {error}"),
            Err(_) => last = format!("{destination}: no answer within {CONNECT_TIMEOUT:?}"),
        }
    }
    Err(last)
}

/// Copy bytes both ways between a tunnel's client and `upstream` until both directions have
/// ended, or neither has carried a byte for [`TUNNEL_IDLE`].
async fn tunnel<C>(client: C, upstream: tokio::net::TcpStream)
where
    C: AsyncRead + AsyncWrite + Unpin + Send,
{
    let start = tokio::time::Instant::now();
    // Milliseconds from `start` to the last byte either way.
    let last = AtomicU64::new(0);
    let (client_read, client_write) = tokio::io::split(client);
    let (upstream_read, upstream_write) = upstream.into_split();
    let both = futures_util::future::join(
        pump(client_read, upstream_write, start, &last),
        pump(upstream_read, client_write, start, &last),
    );
    let watchdog = async {
        loop {
            let deadline =
                start + Duration::from_millis(last.load(Ordering::Relaxed)) + TUNNEL_IDLE;
            if tokio::time::Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    };
    tokio::select! {
        _ = both => {}
        _ = watchdog => {
            tracing::debug!("a CONNECT tunnel carried nothing for {TUNNEL_IDLE:?}; closing it");
        }
    }
}

/// Copy `from` to `to` until `from` ends, noting in `last` when a byte last went through
/// (milliseconds from `start`); then shut `to` down.
async fn pump(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    start: tokio::time::Instant,
    last: &AtomicU64,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let at = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
        last.store(at, Ordering::Relaxed);
        if to.write_all(&buffer[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// Send a plain HTTP request upstream in origin form, and return its answer.
async fn forward(
    mut request: Request<Incoming>,
    upstream: tokio::net::TcpStream,
) -> Response<Body> {
    let origin = request
        .uri()
        .path_and_query()
        .map_or("/", |path| path.as_str())
        .to_owned();
    // The `Host` the request names is the host that was checked: a different one would reach
    // another site served at the same address. The URL's userinfo (`user:pw@`) is no part of
    // it, and goes nowhere.
    if let Some(authority) = request.uri().authority() {
        let host = match authority.port() {
            Some(port) => format!("{}:{port}", authority.host()),
            None => authority.host().to_owned(),
        };
        match hyper::header::HeaderValue::from_str(&host) {
            Ok(host) => {
                request.headers_mut().insert(hyper::header::HOST, host);
            }
            Err(_) => return answer(StatusCode::BAD_REQUEST, format!("bad host `{host}`")),
        }
    }
    match origin.parse() {
        Ok(uri) => *request.uri_mut() = uri,
        Err(error) => return answer(StatusCode::BAD_REQUEST, format!("bad path: {error}")),
    }
    for name in [
        "proxy-connection",
        "proxy-authorization",
        "proxy-authenticate",
    ] {
        request.headers_mut().remove(name);
    }
    let (mut sender, connection) = match hyper::client::conn::http1::Builder::new()
        .preserve_header_case(true)
        .title_case_headers(true)
        .handshake(TokioIo::new(upstream))
        .await
    {
        Ok(pair) => pair,
        Err(error) => return answer(StatusCode::BAD_GATEWAY, error.to_string()),
    };
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "a forwarded connection ended with an error");
        }
    });
    match sender.send_request(request).await {
        Ok(response) => response.map(Either::Left),
        Err(error) => answer(StatusCode::BAD_GATEWAY, error.to_string()),
    }
}
