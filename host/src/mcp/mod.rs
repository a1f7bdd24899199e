//! The Model Context Protocol server: a [`ToolHost`]'s tools over MCP, on stdio
//! ([`serve_stdio`]) or streamable HTTP ([`http::serve_http`]).
//!
//! Each MCP session is a scope of its own (see [`ToolServer`]): its processes are invisible to
//! other sessions and are terminated when the session ends. Tool results are returned as text
//! content holding the result JSON and as structured content; a tool's refusal is a result
//! with `isError: true`, an unknown tool name a protocol error. Every request with an id gets
//! an answer, also a malformed one (see `stdio` for the line framing).

mod asking;
pub mod http;
mod jsonrpc;
pub mod logging;
mod resources;
mod results;
mod scope;
mod server;
mod stdio;
mod tasks;

pub use http::{BearerToken, HttpOptions, serve_http};
pub use server::ToolServer;

use crate::ToolHost;
use rmcp::ServiceExt;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Why an MCP server could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The MCP handshake on stdio failed (the client went away or spoke something else).
    #[error("MCP initialization failed: {0}")]
    Initialize(String),
    /// The server task failed.
    #[error("the MCP server task failed: {0}")]
    Task(String),
    /// Signal handlers could not be installed.
    #[error("cannot install signal handlers: {0}")]
    Signals(std::io::Error),
    /// The HTTP listener could not be set up.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address asked for.
        addr: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The HTTP options are unusable (address, token).
    #[error("{0}")]
    Config(String),
}

/// Serve `host`'s tools over MCP on stdin/stdout until the client disconnects (stdin EOF)
/// or the process gets SIGINT/SIGTERM. The connection is one session with its own scope;
/// every process the host started is terminated before this returns.
pub async fn serve_stdio(host: Arc<ToolHost>) -> Result<(), ServeError> {
    let server = ToolServer::new(host.clone());
    let stop = CancellationToken::new();
    let signals = spawn_signal_watch(stop.clone())?;
    let outcome = async {
        let transport = stdio::LineTransport::new(tokio::io::stdin(), tokio::io::stdout())
            .cancel_at_end(stop.clone())
            .on_roots_changed(server.roots_changed_flag());
        let running = tokio::select! {
            running = server.clone().serve_with_ct(transport, stop.clone()) => match running {
                Ok(running) => running,
                // A client that connected and left before its first request: no error.
                Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => {
                    tracing::info!("the MCP client closed stdin before its first request");
                    return Ok(());
                }
                Err(error) => return Err(ServeError::Initialize(error.to_string())),
            },
            _ = stop.cancelled() => return Ok(()),
        };
        tracing::info!(scope = server.scope(), "MCP session on stdio started");
        let quit = running
            .waiting()
            .await
            .map_err(|e| ServeError::Task(e.to_string()))?;
        tracing::info!(?quit, "MCP session on stdio ended");
        Ok(())
    }
    .await;
    signals.abort();
    server.end().await;
    host.shutdown().await;
    outcome
}

/// Cancel `stop` on the first SIGINT or SIGTERM.
fn spawn_signal_watch(stop: CancellationToken) -> Result<tokio::task::JoinHandle<()>, ServeError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt()).map_err(ServeError::Signals)?;
    let mut terminate = signal(SignalKind::terminate()).map_err(ServeError::Signals)?;
    Ok(tokio::spawn(async move {
        let name = tokio::select! {
            _ = interrupt.recv() => "SIGINT",
            _ = terminate.recv() => "SIGTERM",
        };
        tracing::info!("{name}: stopping the MCP server");
        stop.cancel();
    }))
}

/// Whether `context`'s request is of a revision without sessions (2026-07-28 and later):
/// no `initialize`, no server-to-client requests during a call.
fn sessionless(context: &rmcp::service::RequestContext<rmcp::RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|version| !version.has_initialize())
}
