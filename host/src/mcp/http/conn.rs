//! The HTTP server's connections: accepted by a loop of our own, each served by hyper with a
//! header read timeout, and bounded in number.
//!
//! 1. A socket is accepted. It is *unauthenticated* until a request on it carries a valid
//!    bearer token.
//! 2. Unauthenticated connections have a small pool of their own ([`Limits::unauthenticated`]):
//!    when it is full, the oldest of them is closed to make room, so idle sockets cannot keep a
//!    client with a token out. A peer that is not on the loopback (`--allow-remote`) holds at
//!    most a quarter of that pool ([`Limits::unauthenticated_per_address`]): its own oldest is
//!    closed for its next one, so one remote address cannot push out every other client. Local
//!    peers share the pool without a per-address bound: every local client is 127.0.0.1, and a
//!    command can bind any 127.0.0.x. One still unauthenticated after
//!    [`Limits::unauthenticated_for`] is closed.
//! 3. The first request with a valid token moves its connection into the pool of authenticated
//!    ones (`--max-connections`). When that pool is full, the request is answered `503` with
//!    `Retry-After` and the connection is closed.
//! 4. hyper closes a connection whose next request head has not arrived in full within
//!    [`HEADER_TIMEOUT`]; the timer restarts at each request head, so it bounds idle keep-alive
//!    connections too.
//! 5. When the server stops, each connection finishes its requests in progress and closes.

use super::super::scope::PeerAddress;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Longest a request head may take to arrive, and longest an idle keep-alive connection stays.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// How long an unauthenticated connection may stay unauthenticated.
const UNAUTHENTICATED_FOR: Duration = Duration::from_secs(5);

/// The most connections with a token by default, whatever the descriptor limit allows.
const DEFAULT_MAX: usize = 512;

/// How long to wait after a failed `accept` (out of descriptors) before the next one.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// How many connections the server holds.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections whose requests carry a valid token (`--max-connections`).
    pub authenticated: usize,
    /// Connections that have not yet sent a request with a valid token.
    pub unauthenticated: usize,
    /// Of those, the most of one peer address that is not on the loopback.
    pub unauthenticated_per_address: usize,
    /// How long a connection may stay unauthenticated.
    pub unauthenticated_for: Duration,
}

impl Limits {
    /// The limits for `--max-connections` `max` (`None`: the default, [`default_max`]): the
    /// unauthenticated pool is an eighth of it, at least 4 and at most 64, and a quarter of
    /// that for one remote address.
    pub fn new(max: Option<usize>) -> Self {
        let authenticated = max.unwrap_or_else(default_max).max(1);
        let unauthenticated = (authenticated / 8).clamp(4, 64);
        Limits {
            authenticated,
            unauthenticated,
            unauthenticated_per_address: (unauthenticated / 4).max(1),
            unauthenticated_for: UNAUTHENTICATED_FOR,
        }
    }
}

/// The default `--max-connections`: 512, or a quarter of the process's descriptor limit
/// (`RLIMIT_NOFILE`) when that is less, so that connections leave descriptors for commands.
pub fn default_max() -> usize {
    let descriptors = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(u64::MAX, |(soft, _)| soft);
    let quarter = usize::try_from(descriptors / 4).unwrap_or(usize::MAX);
    DEFAULT_MAX.min(quarter).max(8)
}

/// The connections of one server.
pub struct Connections {
    limits: Limits,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The number the next connection gets: older connections have smaller ones.
    next: u64,
    /// The unauthenticated connections, oldest first, each with what closes it and its peer's
    /// address when that is not on the loopback.
    waiting: BTreeMap<u64, (CancellationToken, Option<IpAddr>)>,
    /// How many connections are authenticated.
    authenticated: usize,
}

impl Connections {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        crate::lock(&self.state)
    }

    /// A place for a connection just accepted from `peer`, unauthenticated:
    ///
    /// 1. A remote peer at its share of the unauthenticated pool has its own oldest
    ///    unauthenticated connection closed.
    /// 2. When the pool is full, the oldest unauthenticated connection is closed.
    fn admit(self: &Arc<Self>, peer: Option<IpAddr>) -> Slot {
        let close = CancellationToken::new();
        let remote = peer.filter(|address| !address.is_loopback());
        let mut state = self.state();
        if let Some(address) = remote {
            let mine: Vec<u64> = state
                .waiting
                .iter()
                .filter(|(_, (_, from))| *from == Some(address))
                .map(|(id, _)| *id)
                .collect();
            let over = (mine.len() + 1).saturating_sub(self.limits.unauthenticated_per_address);
            for id in mine.into_iter().take(over) {
                if let Some((oldest, _)) = state.waiting.remove(&id) {
                    oldest.cancel();
                }
            }
        }
        while state.waiting.len() >= self.limits.unauthenticated {
            match state.waiting.pop_first() {
                Some((_, (oldest, _))) => oldest.cancel(),
                None => break,
            }
        }
        let id = state.next;
        state.next += 1;
        state.waiting.insert(id, (close.clone(), remote));
        Slot(Arc::new(SlotInner {
            connections: Arc::clone(self),
            id,
            close,
            authenticated: AtomicBool::new(false),
        }))
    }
}

/// An accepted connection's place, in the extensions of each of its requests.
#[derive(Clone)]
pub struct Slot(Arc<SlotInner>);

struct SlotInner {
    connections: Arc<Connections>,
    id: u64,
    /// Cancelled when the connection must close (pushed out of the unauthenticated pool).
    close: CancellationToken,
    authenticated: AtomicBool,
}

impl Slot {
    /// Move the connection into the authenticated pool (a request on it carried a valid
    /// token); false when that pool is full.
    pub fn authenticate(&self) -> bool {
        if self.0.authenticated.load(Ordering::Acquire) {
            return true;
        }
        let connections = &self.0.connections;
        let mut state = connections.state();
        if state.authenticated >= connections.limits.authenticated {
            return false;
        }
        state.authenticated += 1;
        state.waiting.remove(&self.0.id);
        self.0.authenticated.store(true, Ordering::Release);
        true
    }

    fn is_authenticated(&self) -> bool {
        self.0.authenticated.load(Ordering::Acquire)
    }
}

impl Drop for SlotInner {
    fn drop(&mut self) {
        let mut state = self.connections.state();
        if self.authenticated.load(Ordering::Acquire) {
            state.authenticated = state.authenticated.saturating_sub(1);
        } else {
            state.waiting.remove(&self.id);
        }
    }
}

/// The refusal of a request whose connection finds the authenticated pool full: `503` with
/// `Retry-After`, closing the connection.
pub fn busy(limits_max: usize) -> Response {
    let mut response = (
        StatusCode::SERVICE_UNAVAILABLE,
        format!(
            "this server holds its maximum of {limits_max} client connections \
             (--max-connections); retry shortly\n"
        ),
    )
        .into_response();
    let headers = response.headers_mut();
    headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

impl Connections {
    /// The connections of a server with `limits`.
    pub fn new(limits: Limits) -> Arc<Self> {
        Arc::new(Connections {
            limits,
            state: Mutex::new(State::default()),
        })
    }

    /// The most authenticated connections.
    pub fn max(&self) -> usize {
        self.limits.authenticated
    }

    /// Accept connections on `listener` and serve `router` on each until `stop`; then wait up
    /// to `grace` for the connections to finish their requests.
    pub async fn serve(
        self: Arc<Self>,
        listener: TcpListener,
        router: axum::Router,
        stop: CancellationToken,
        grace: Duration,
    ) {
        let tracker = TaskTracker::new();
        loop {
            let accepted = tokio::select! {
                _ = stop.cancelled() => break,
                accepted = listener.accept() => accepted,
            };
            let (stream, peer) = match accepted {
                Ok((stream, peer)) => (stream, peer.ip()),
                Err(error) => {
                    // Out of descriptors, most likely: the pools' closing frees some.
                    tracing::warn!(%error, "cannot accept an HTTP connection");
                    tokio::select! {
                        _ = stop.cancelled() => break,
                        _ = tokio::time::sleep(ACCEPT_BACKOFF) => continue,
                    }
                }
            };
            // Answers and stream events go out in small writes: with Nagle's algorithm a write
            // waits for the client's delayed acknowledgement of the previous one (40 ms on
            // Linux), which was the 99th percentile of every call.
            if let Err(error) = stream.set_nodelay(true) {
                tracing::debug!(%error, "cannot set TCP_NODELAY on a connection");
            }
            let slot = self.admit(Some(peer));
            tracker.spawn(serve_one(
                stream,
                slot,
                router.clone(),
                stop.clone(),
                self.limits.unauthenticated_for,
            ));
        }
        drop(listener);
        tracker.close();
        if tokio::time::timeout(grace, tracker.wait()).await.is_err() {
            tracing::warn!("connections still open after the grace period; stopping");
        }
    }
}

/// Serve one connection (steps 2 to 5 of the module's flow).
async fn serve_one(
    stream: tokio::net::TcpStream,
    slot: Slot,
    router: axum::Router,
    stop: CancellationToken,
    unauthenticated_for: Duration,
) {
    let close = slot.0.close.clone();
    let for_requests = slot.clone();
    let peer = stream.peer_addr().ok().map(PeerAddress);
    let router = TowerToHyperService::new(router);
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        request.extensions_mut().insert(for_requests.clone());
        if let Some(peer) = peer {
            request.extensions_mut().insert(peer);
        }
        hyper::service::Service::call(&router, request)
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT);
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    let mut connection = std::pin::pin!(connection);
    let unauthenticated = tokio::time::sleep(unauthenticated_for);
    let mut unauthenticated = std::pin::pin!(unauthenticated);
    let mut stopping = false;
    // Whether the connection may still be closed for being unauthenticated. The branches'
    // conditions are read when `select!` starts, not when a branch fires: each branch checks
    // again.
    let mut watching = true;
    loop {
        tokio::select! {
            served = connection.as_mut() => {
                if let Err(error) = served {
                    tracing::debug!(%error, "an HTTP connection ended with an error");
                }
                return;
            }
            _ = close.cancelled(), if watching => {
                if !slot.is_authenticated() {
                    return;
                }
                watching = false;
            }
            _ = &mut unauthenticated, if watching => {
                if !slot.is_authenticated() {
                    return;
                }
                watching = false;
            }
            _ = stop.cancelled(), if !stopping => {
                stopping = true;
                connection.as_mut().graceful_shutdown();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_connection_closes_the_oldest_unauthenticated_one() {
        let connections = Connections::new(Limits {
            authenticated: 1,
            unauthenticated: 2,
            unauthenticated_per_address: 1,
            unauthenticated_for: UNAUTHENTICATED_FOR,
        });
        let local = Some(IpAddr::from([127, 0, 0, 1]));
        let first = connections.admit(local);
        let second = connections.admit(local);
        assert!(!first.0.close.is_cancelled());
        let third = connections.admit(local);
        assert!(first.0.close.is_cancelled(), "the oldest is closed");
        assert!(!second.0.close.is_cancelled() && !third.0.close.is_cancelled());
        // One authenticated place: the second connection to ask is refused until it is free.
        assert!(second.authenticate());
        assert!(second.authenticate(), "already authenticated");
        assert!(!third.authenticate());
        drop(second);
        assert!(third.authenticate());
    }

    #[tokio::test]
    async fn only_an_unauthenticated_connection_is_closed_after_its_time() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let connections = Connections::new(Limits {
            authenticated: 4,
            unauthenticated: 4,
            unauthenticated_per_address: 1,
            unauthenticated_for: Duration::from_millis(100),
        });
        let router = axum::Router::new().route(
            "/",
            axum::routing::get(|request: axum::extract::Request| async move {
                if let Some(slot) = request.extensions().get::<Slot>() {
                    slot.authenticate();
                }
                // A call that outlasts the unauthenticated time.
                tokio::time::sleep(Duration::from_millis(500)).await;
                "done"
            }),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        let stop = CancellationToken::new();
        let server =
            tokio::spawn(connections.serve(listener, router, stop.clone(), Duration::from_secs(1)));

        let mut silent = tokio::net::TcpStream::connect(address)
            .await
            .expect("connect");
        let mut client = tokio::net::TcpStream::connect(address)
            .await
            .expect("connect");
        client
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .expect("request");
        let mut answer = String::new();
        client.read_to_string(&mut answer).await.expect("answer");
        assert!(answer.ends_with("done"), "{answer:?}");
        // The silent connection is closed by the server: end of stream, nothing sent.
        let mut nothing = Vec::new();
        silent.read_to_end(&mut nothing).await.expect("closed");
        assert!(nothing.is_empty());
        stop.cancel();
        server.await.expect("server");
    }

    /// A remote address holds at most its share of the unauthenticated pool: its flood closes
    /// its own connections, not another address's or a local client's.
    #[test]
    fn a_remote_address_holds_its_share_of_the_unauthenticated_pool() {
        let connections = Connections::new(Limits::new(Some(64)));
        assert_eq!(connections.limits.unauthenticated, 8);
        assert_eq!(connections.limits.unauthenticated_per_address, 2);
        let other = connections.admit(Some(IpAddr::from([192, 0, 2, 7])));
        let local = connections.admit(Some(IpAddr::from([127, 0, 0, 1])));
        let flood: Vec<Slot> = (0..100)
            .map(|_| connections.admit(Some(IpAddr::from([198, 51, 100, 1]))))
            .collect();
        assert!(
            !other.0.close.is_cancelled(),
            "another remote address keeps its place"
        );
        assert!(
            !local.0.close.is_cancelled(),
            "a local client keeps its place"
        );
        let open = flood
            .iter()
            .filter(|slot| !slot.0.close.is_cancelled())
            .count();
        assert_eq!(open, 2, "the flooding address holds its share");
        assert_eq!(connections.state().waiting.len(), 4);
    }

    #[test]
    fn the_unauthenticated_pool_is_an_eighth_within_bounds() {
        assert_eq!(Limits::new(Some(512)).unauthenticated, 64);
        assert_eq!(Limits::new(Some(1000)).unauthenticated, 64);
        assert_eq!(Limits::new(Some(64)).unauthenticated, 8);
        assert_eq!(Limits::new(Some(1)).unauthenticated, 4);
    }
}
