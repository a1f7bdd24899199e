//! `toolhost serve`: the tools over MCP, on stdio or as streamable HTTP, and the HTTP bearer
//! tokens (`--token-file`, or `$TOOLHOST_TOKEN`, which is taken out of the environment first).

use anyhow::{Context, Result};
use std::path::PathBuf;
use std::process::ExitCode;

use super::args::Cli;
use super::options::build_host_with;

/// The flags of `toolhost serve`.
#[derive(clap::Args)]
pub(crate) struct ServeArgs {
    /// Serve streamable HTTP on ADDR (e.g. 127.0.0.1:8080; port 0 picks one, announced on
    /// stderr) instead of stdio. Needs a bearer token (--token-file or TOOLHOST_TOKEN).
    #[arg(long, value_name = "ADDR")]
    pub(crate) http: Option<String>,
    /// File of the bearer tokens HTTP clients must send: one `NAME TOKEN` per line, each
    /// a principal whose sessions and scopes no other reaches, or one bare token
    /// (principal `default`). Default: $TOOLHOST_TOKEN, one token.
    #[arg(long, value_name = "FILE", requires = "http")]
    pub(crate) token_file: Option<PathBuf>,
    /// Allow listening on a non-loopback address.
    #[arg(long, requires = "http")]
    pub(crate) allow_remote: bool,
    /// Close an HTTP session idle this long, terminating its processes: no request in
    /// progress and none, nor the end of a response, for this long (a running call keeps
    /// its session open).
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "30m",
        requires = "http"
    )]
    pub(crate) idle_timeout: humantime::Duration,
    /// The most HTTP sessions at once, and the most named scopes (protocol 2026-07-28) at
    /// once; one beyond it is refused (503, or -32000 for a scope) until one ends or expires.
    #[arg(long, value_name = "N", default_value_t = 256, requires = "http", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_sessions: u32,
    /// The most HTTP sessions of one principal (a `NAME` of --token-file) at once; a new
    /// one beyond it is refused (503). Default: --max-sessions with one principal, half of
    /// it with several. Before another principal is refused for want of a session, the
    /// oldest idle session of a principal at this limit is closed to make room.
    #[arg(long, value_name = "N", requires = "http", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_sessions_per_principal: Option<u32>,
    /// The most named scopes (protocol 2026-07-28) of one principal at once; a new one
    /// beyond it is refused (-32000). Default: --max-sessions with one principal, half of
    /// it with several. Before another principal is refused for want of a scope, the
    /// oldest idle scope of a principal at this limit is ended to make room.
    #[arg(long, value_name = "N", requires = "http", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_scopes_per_principal: Option<u32>,
    /// The most tool calls in progress at once of one principal, over all its sessions and
    /// scopes; a call beyond is refused at once (nothing of it run) while other principals
    /// go on. Default: --max-calls-total with one principal, half of it with several.
    #[arg(long, value_name = "N", requires = "http", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_calls_per_principal: Option<u32>,
    /// The most processes running at once in the sessions and scopes of one principal
    /// together (until their command finishes); a start beyond is refused with a message
    /// saying so. Default: --max-processes-total with one principal,
    /// half of it with several.
    #[arg(long, value_name = "N", requires = "http", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_processes_per_principal: Option<u32>,
    /// The most connections of clients that sent a valid token; a request beyond it is
    /// refused (503, Retry-After). Default: 512, or a quarter of the descriptor limit
    /// (ulimit -n) when less. Connections without a valid token yet have a pool of their
    /// own (an eighth of this, 4 to 64; the oldest is closed for a new one) and 5 s to
    /// send one.
    #[arg(long, value_name = "N", requires = "http", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_connections: Option<u32>,
    /// Also accept requests from this browser origin (e.g. https://app.example.com:443;
    /// `:*` for any port). Repeatable. A request with any other Origin header is refused
    /// with 403; the server's own origins are always accepted.
    #[arg(long, value_name = "ORIGIN", requires = "http")]
    pub(crate) allowed_origin: Vec<String>,
}

/// `TOOLHOST_TOKEN`, taken out of the environment at start so that no command inherits it.
pub(crate) static ENV_TOKEN: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

/// Serve the tools until the client goes (stdio) or the server is stopped (HTTP); every
/// process is gone then, and the process exits.
pub(crate) async fn serve(cli: &Cli, args: &ServeArgs) -> Result<ExitCode> {
    let ServeArgs {
        http,
        token_file,
        allow_remote,
        idle_timeout,
        max_sessions,
        max_sessions_per_principal,
        max_scopes_per_principal,
        max_calls_per_principal,
        max_processes_per_principal,
        max_connections,
        allowed_origin,
    } = args;
    let http = match http {
        Some(addr) => {
            let options = toolhost::mcp::HttpOptions {
                addr: addr.clone(),
                tokens: serve_tokens(token_file.as_deref())?,
                allow_remote: *allow_remote,
                idle_timeout: (*idle_timeout).into(),
                max_sessions: *max_sessions as usize,
                max_sessions_per_principal: max_sessions_per_principal.map(|n| n as usize),
                max_scopes_per_principal: max_scopes_per_principal.map(|n| n as usize),
                max_connections: max_connections.map(|n| n as usize),
                allowed_origins: allowed_origin.clone(),
            };
            // Refuse a bad address or token before loading anything.
            options.resolve().await?;
            Some(options)
        }
        None => None,
    };
    // Each principal's share of the host's calls and processes (none over stdio).
    let shares = http.as_ref().map(|options| super::options::Shares {
        calls: max_calls_per_principal
            .map(|n| n as usize)
            .unwrap_or_else(|| options.session_share(cli.calls_total())),
        processes: max_processes_per_principal.map(|n| n as usize),
        several: options.tokens.len() > 1,
    });
    let host = std::sync::Arc::new(build_host_with(cli, shares).await?);
    host.sweep_logs_periodically();
    match http {
        Some(options) => toolhost::mcp::serve_http(host, options).await?,
        None => toolhost::mcp::serve_stdio(host).await?,
    }
    // Every process is gone. Exit now rather than wait for the runtime to drain a
    // blocking stdin read that may never end.
    std::process::exit(0)
}

/// The HTTP bearer tokens: those of `file` (one `NAME TOKEN` per line, or one bare token), or
/// `$TOOLHOST_TOKEN` for principal `default`.
pub(crate) fn serve_tokens(
    file: Option<&std::path::Path>,
) -> Result<Vec<toolhost::mcp::BearerToken>> {
    use toolhost::mcp::BearerToken;
    if let Some(path) = file
        && let Ok(meta) = std::fs::metadata(path)
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode();
        if mode & 0o077 != 0 {
            tracing::warn!(
                file = %path.display(),
                "the token file may be read by other users (mode {:o}): anyone who reads it can \
                 run commands here; make it private with chmod 600",
                mode & 0o777
            );
        }
    }
    let missing = || {
        anyhow::anyhow!(
            "`toolhost serve --http` needs a bearer token: put one in a file and pass \
             --token-file FILE, or set TOOLHOST_TOKEN"
        )
    };
    match file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading the token file {}", path.display()))?;
            if text.trim().is_empty() {
                return Err(missing());
            }
            BearerToken::parse_file(&text)
                .map_err(|why| anyhow::anyhow!("the token file {}: {why}", path.display()))
        }
        None => {
            let token = ENV_TOKEN.get().cloned().flatten().unwrap_or_default();
            if token.trim().is_empty() {
                return Err(missing());
            }
            Ok(vec![BearerToken::new(
                BearerToken::DEFAULT_PRINCIPAL,
                token.trim(),
            )])
        }
    }
}

/// Remove `TOOLHOST_TOKEN` from the environment, and overwrite its value in the process's
/// original environment block too: `/proc/<host>/environ` shows that block, not the current
/// environment, and a privileged process can still read it.
pub(crate) fn scrub_env_token() {
    use nix::libc;
    // SAFETY: called first thing in `main`, before any other thread exists. `getenv` returns a
    // pointer to the NUL-terminated value inside the environment block (writable memory set
    // up by the kernel at exec); overwriting its bytes in place keeps its length and
    // terminator, and nothing else holds a reference to it.
    unsafe {
        let value = libc::getenv(c"TOOLHOST_TOKEN".as_ptr());
        if !value.is_null() {
            let len = libc::strlen(value);
            std::ptr::write_bytes(value, b'x', len);
        }
        std::env::remove_var("TOOLHOST_TOKEN");
    }
}
