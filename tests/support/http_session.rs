//! A `toolhost serve --http` child and plain-HTTP MCP sessions with it, for the HTTP tests
//! (`cli_and_mcp/mcp_http.rs`) and the load benchmark (`benches/http_load.rs`).

use crate::mcp_client::{ANSWER_TIMEOUT, PROTOCOL_VERSION};
use crate::paths::{cache_env, shared_writable, toolhost_bin};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::process::Stdio;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

pub const TOKEN: &str = "test-token-0123456789";

/// A running `toolhost serve --http 127.0.0.1:0`.
pub struct HttpServer {
    pub child: Child,
    pub url: String,
}

impl HttpServer {
    pub async fn start(extra: &[&str]) -> HttpServer {
        HttpServer::start_on("127.0.0.1:0", extra).await
    }

    pub async fn start_on(addr: &str, extra: &[&str]) -> HttpServer {
        HttpServer::start_limited(addr, extra, None).await
    }

    /// [`HttpServer::start_on`], with the server's descriptor limit (`RLIMIT_NOFILE`) lowered
    /// to `descriptors` when given.
    pub async fn start_limited(addr: &str, extra: &[&str], descriptors: Option<u64>) -> HttpServer {
        let (cache_key, cache_value) = cache_env();
        let mut command = Command::new(toolhost_bin());
        if let Some(limit) = descriptors {
            // SAFETY: between fork and exec the closure calls only setrlimit, which is
            // async-signal-safe, and touches no memory but its own stack.
            unsafe {
                command.pre_exec(move || {
                    let limit = libc::rlimit {
                        rlim_cur: limit,
                        rlim_max: limit,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        let mut child = command
            .args(shared_writable())
            .args(["serve", "--http", addr])
            .args(extra)
            .env("TOOLHOST_TOKEN", TOKEN)
            // `TOOLHOST_SERVER_LOG` sets the server's log filter, for looking into a bench.
            .env(
                "TOOLHOST_LOG",
                std::env::var("TOOLHOST_SERVER_LOG").unwrap_or_else(|_| "error".to_owned()),
            )
            .env(cache_key, cache_value)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start toolhost serve --http");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let url = tokio::time::timeout(ANSWER_TIMEOUT, async {
            while let Ok(Some(line)) = lines.next_line().await {
                eprintln!("server: {line}");
                if let Some(url) = line.split_whitespace().find(|w| w.starts_with("http://")) {
                    return url.to_string();
                }
            }
            panic!("the server exited without announcing its address");
        })
        .await
        .expect("the server announces its address");
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                eprintln!("server: {line}");
            }
        });
        HttpServer { child, url }
    }

    /// SIGTERM, then wait for the exit.
    pub async fn stop(self) {
        let took = self.stop_within(Duration::from_secs(15)).await;
        assert!(took.is_some(), "the server stops on SIGTERM");
    }

    /// SIGTERM, then wait up to `limit` for the exit; how long it took (`None`: it did not
    /// exit in time, and was killed).
    pub async fn stop_within(mut self, limit: Duration) -> Option<Duration> {
        let began = std::time::Instant::now();
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        match tokio::time::timeout(limit, self.child.wait()).await {
            Ok(_) => Some(began.elapsed()),
            Err(_) => {
                let _ = self.child.kill().await;
                None
            }
        }
    }
}

/// One MCP session over HTTP.
pub struct Session {
    pub http: reqwest::Client,
    pub url: String,
    pub id: String,
    pub next_id: AtomicI64,
    /// The bearer token it was opened with.
    pub token: String,
}

/// A token file naming `principals` (`NAME`, `TOKEN`), readable by its owner alone; the
/// directory holding it and its path.
pub fn token_file(principals: &[(&str, &str)]) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("tokens");
    let text: String = principals
        .iter()
        .map(|(name, token)| format!("{name} {token}\n"))
        .collect();
    std::fs::write(&path, text).expect("token file");
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod");
    let path = path.display().to_string();
    (dir, path)
}

/// Parse a response body: one JSON message, or the `data:` events of an SSE stream.
pub fn messages(content_type: &str, body: &str) -> Vec<Value> {
    if content_type.starts_with("application/json") {
        return vec![serde_json::from_str(body).expect("JSON body")];
    }
    let mut out = Vec::new();
    let mut data = String::new();
    for line in body.lines().chain(std::iter::once("")) {
        if let Some(rest) = line.strip_prefix("data:") {
            data.push_str(rest.trim_start());
        } else if line.is_empty() && !data.is_empty() {
            if let Ok(value) = serde_json::from_str(&data) {
                out.push(value);
            }
            data.clear();
        }
    }
    out
}

/// A response's content type and body.
pub async fn body_of(response: reqwest::Response) -> (String, String) {
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let text = tokio::time::timeout(ANSWER_TIMEOUT, response.text())
        .await
        .expect("response body in time")
        .expect("response body");
    (content_type, text)
}

pub async fn post(
    http: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    session: Option<&str>,
    body: &Value,
) -> (StatusCode, Option<String>, Vec<Value>) {
    try_post(http, url, token, session, body, ANSWER_TIMEOUT)
        .await
        .unwrap_or_else(|error| panic!("{error}"))
}

/// [`post`], with what went wrong (no connection, no whole answer within `limit`) as an error.
pub async fn try_post(
    http: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    session: Option<&str>,
    body: &Value,
    limit: Duration,
) -> Result<(StatusCode, Option<String>, Vec<Value>), String> {
    let mut request = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string());
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    if let Some(session) = session {
        request = request
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", PROTOCOL_VERSION);
    }
    let exchange = async {
        let response = request
            .send()
            .await
            .map_err(|e| format!("HTTP request: {e}"))?;
        let status = response.status();
        let session_id = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let text = response
            .text()
            .await
            .map_err(|e| format!("response body: {e}"))?;
        Ok::<_, String>((status, session_id, content_type, text))
    };
    let (status, session_id, content_type, text) =
        tokio::time::timeout(limit, exchange)
            .await
            .map_err(|_| format!("no whole answer within {limit:?}"))??;
    let parsed = if status.is_success() && !text.is_empty() {
        messages(&content_type, &text)
    } else {
        Vec::new()
    };
    Ok((status, session_id, parsed))
}

pub fn initialize_body() -> Value {
    json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "toolhost-e2e", "version": "0"}
        }
    })
}

impl Session {
    pub async fn open(server: &HttpServer) -> Session {
        Session::open_at(server.url.clone()).await
    }

    /// A new session with the server at `url`.
    pub async fn open_at(url: String) -> Session {
        Session::open_as(url, TOKEN).await
    }

    /// A new session with the server at `url`, of the principal of `token`.
    pub async fn open_as(url: String, token: &str) -> Session {
        let http = reqwest::Client::new();
        let (status, id, answer) = post(&http, &url, Some(token), None, &initialize_body()).await;
        assert_eq!(status, StatusCode::OK, "initialize: {answer:?}");
        assert!(
            answer
                .iter()
                .any(|m| m["result"]["serverInfo"]["name"] == "toolhost"),
            "{answer:?}"
        );
        let session = Session {
            http,
            url,
            id: id.expect("an Mcp-Session-Id header"),
            next_id: AtomicI64::new(1),
            token: token.to_owned(),
        };
        let (status, _, _) = post(
            &session.http,
            &session.url,
            Some(token),
            Some(&session.id),
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        )
        .await;
        assert_eq!(status, StatusCode::ACCEPTED);
        session
    }

    /// Send a request; returns every message of its response stream (the response last).
    pub async fn exchange(&self, method: &str, params: Value) -> Vec<Value> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let (status, _, answer) = post(
            &self.http,
            &self.url,
            Some(&self.token),
            Some(&self.id),
            &body,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{method}: {answer:?}");
        answer
    }

    /// The response message of a request.
    pub async fn request(&self, method: &str, params: Value) -> Value {
        self.exchange(method, params)
            .await
            .into_iter()
            .rfind(|m| m.get("result").is_some() || m.get("error").is_some())
            .unwrap_or_else(|| panic!("no response to {method}"))
    }

    pub async fn call_tool(&self, name: &str, arguments: Value) -> Value {
        let response = self
            .request("tools/call", json!({"name": name, "arguments": arguments}))
            .await;
        response
            .get("result")
            .cloned()
            .unwrap_or_else(|| panic!("tools/call {name}: {response}"))
    }

    pub async fn delete(self) -> StatusCode {
        self.http
            .delete(&self.url)
            .header("authorization", format!("Bearer {}", self.token))
            .header("mcp-session-id", &self.id)
            .header("mcp-protocol-version", PROTOCOL_VERSION)
            .send()
            .await
            .expect("DELETE")
            .status()
    }
}
