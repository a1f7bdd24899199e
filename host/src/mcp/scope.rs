//! The scope a request runs in ([`ScopeRef`]), and where the scopes of sessionless requests
//! come from ([`NamedScopes`]).
//!
//! A session's requests run in the session's own scope.
//! Requests of protocol 2026-07-28 have no session: over HTTP they run in a scope of their
//! principal, its default one or one they name.
//! The transport that serves them resolves those scopes through [`NamedScopes`].

use rmcp::service::RequestContext;
use rmcp::task_manager::TaskManager;
use rmcp::{ErrorData, RoleServer};
use std::sync::Arc;

/// Who sent a request: the name of its bearer token (put into the request's extensions by the
/// HTTP server's token check).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal(pub String);

impl Principal {
    /// The principal of `context`'s request: `None` where there are no bearer tokens (stdio).
    pub(super) fn of(context: &RequestContext<RoleServer>) -> Option<&Principal> {
        context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Principal>())
    }
}

/// When an HTTP request's bearer token was found valid, in the request's extensions: the
/// time a call's timing lines (`toolhost::timings`) count from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Arrived(pub(crate) std::time::Instant);

impl Arrived {
    /// When the bearer token of `context`'s HTTP request was found valid, if it came over HTTP.
    pub(super) fn of(context: &RequestContext<RoleServer>) -> Option<std::time::Instant> {
        context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Arrived>())
            .map(|arrived| arrived.0)
    }
}

/// The address of the peer an HTTP request came from, in the request's extensions.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PeerAddress(pub(crate) std::net::SocketAddr);

impl PeerAddress {
    /// Whether `context`'s request came from this machine: over stdio, or over HTTP from a
    /// loopback address.
    pub(super) fn is_local(context: &RequestContext<RoleServer>) -> bool {
        let Some(parts) = context.extensions.get::<axum::http::request::Parts>() else {
            return true;
        };
        parts
            .extensions
            .get::<PeerAddress>()
            .is_some_and(|peer| peer.0.ip().is_loopback())
    }
}

/// The scope a request runs in, and that scope's tasks; holds a named scope in use while it
/// lives.
pub struct ScopeRef {
    /// The scope's id in the host.
    pub name: String,
    /// Its tasks.
    pub tasks: TaskManager,
    /// What keeps a named scope in use, dropped with this reference.
    _lease: Option<Box<dyn Send + Sync>>,
}

impl ScopeRef {
    /// A reference to a session's own scope.
    pub(super) fn session(name: String, tasks: TaskManager) -> Self {
        ScopeRef {
            name,
            tasks,
            _lease: None,
        }
    }

    /// A reference to a named scope that keeps it in use while it lives: `lease` is dropped
    /// with it.
    pub(super) fn leased(
        name: String,
        tasks: TaskManager,
        lease: impl Send + Sync + 'static,
    ) -> Self {
        ScopeRef {
            name,
            tasks,
            _lease: Some(Box::new(lease)),
        }
    }
}

/// The scopes of sessionless requests (protocol 2026-07-28), as the transport that serves them
/// keeps them.
pub(super) trait NamedScopes: Send + Sync {
    /// The scope `context`'s request works in: the one it names, or its default one.
    /// With `create`, a scope that does not exist yet is made.
    /// Without it, such a scope is `None` (so reads cannot fill the table of scopes).
    fn resolve(
        self: Arc<Self>,
        context: &RequestContext<RoleServer>,
        create: bool,
    ) -> Result<Option<ScopeRef>, ErrorData>;

    /// Note that the session of `context`'s request (a 2025-era one) works in `scope`, so
    /// that the transport can tell whether the session has processes running.
    fn note_session_scope(&self, context: &RequestContext<RoleServer>, scope: &str);
}
