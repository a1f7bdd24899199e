//! A hand-written MCP (JSON-RPC) client over a `toolhost serve` child's stdio, for the MCP
//! end-to-end tests and the MCP latency benchmark.

use crate::paths::{cache_env, shared_writable, toolhost_bin};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::{mpsc, oneshot};

/// The protocol version the hand-written clients speak.
pub const PROTOCOL_VERSION: &str = "2025-06-18";

/// How long a test waits for any single answer before failing.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

type Pending = Arc<Mutex<HashMap<i64, oneshot::Sender<Value>>>>;

/// A JSON-RPC client speaking MCP to a `toolhost serve` child over its stdin/stdout.
pub struct StdioClient {
    /// The server process.
    pub child: Child,
    stdin: Option<ChildStdin>,
    next_id: AtomicI64,
    pending: Pending,
    notifications: mpsc::UnboundedReceiver<Value>,
}

/// `toolhost`'s arguments for `serve` with `global_args`, the tests' shared writable
/// directories first.
fn serve_args(global_args: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = shared_writable()
        .iter()
        .map(|arg| arg.to_string_lossy().into_owned())
        .collect();
    args.extend(global_args.iter().map(|arg| (*arg).to_owned()));
    args.push("serve".to_owned());
    args
}

impl StdioClient {
    /// Start `toolhost GLOBAL_ARGS... serve` without initializing.
    pub fn spawn(global_args: &[&str]) -> StdioClient {
        StdioClient::spawn_command(&toolhost_bin(), &serve_args(global_args))
    }

    /// Start `PROGRAM ARGS...` (a `toolhost serve` as a client would start it) without
    /// initializing.
    pub fn spawn_command(program: &std::path::Path, args: &[String]) -> StdioClient {
        StdioClient::spawn_command_in(program, args, None)
    }

    /// [`StdioClient::spawn`] with `dir` as the server's working directory, as a desktop
    /// client starts it.
    pub fn spawn_in(dir: &std::path::Path, global_args: &[&str]) -> StdioClient {
        StdioClient::spawn_command_in(&toolhost_bin(), &serve_args(global_args), Some(dir))
    }

    fn spawn_command_in(
        program: &std::path::Path,
        args: &[String],
        dir: Option<&std::path::Path>,
    ) -> StdioClient {
        let (cache_key, cache_value) = cache_env();
        let mut command = Command::new(program);
        if let Some(dir) = dir {
            command.current_dir(dir);
        }
        let mut child = command
            .args(args)
            .env(cache_key, cache_value)
            .env("TOOLHOST_LOG", "error")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start toolhost serve");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout");
        let pending: Pending = Arc::default();
        let (notify_tx, notifications) = mpsc::unbounded_channel();
        let reader_pending = pending.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let message: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("server wrote a non-JSON line ({e}): {line}"));
                let is_response = message.get("result").is_some() || message.get("error").is_some();
                match message.get("id").and_then(Value::as_i64) {
                    Some(id) if is_response => {
                        let waiter = reader_pending.lock().expect("lock").remove(&id);
                        if let Some(waiter) = waiter {
                            let _ = waiter.send(message);
                        }
                    }
                    _ => {
                        let _ = notify_tx.send(message);
                    }
                }
            }
        });
        StdioClient {
            child,
            stdin,
            next_id: AtomicI64::new(1),
            pending,
            notifications,
        }
    }

    /// Start `toolhost GLOBAL_ARGS... serve` and complete the MCP handshake.
    pub async fn start(global_args: &[&str]) -> StdioClient {
        let mut client = StdioClient::spawn(global_args);
        let init = client.initialize().await;
        assert!(init.get("result").is_some(), "initialize failed: {init}");
        client
    }

    /// `initialize` then `notifications/initialized`; returns the initialize response.
    pub async fn initialize(&mut self) -> Value {
        let response = self
            .request(
                "initialize",
                json!({
                    "protocolVersion": PROTOCOL_VERSION,
                    "capabilities": {},
                    "clientInfo": {"name": "toolhost-e2e", "version": "0"}
                }),
            )
            .await;
        self.notify("notifications/initialized", json!({})).await;
        response
    }

    /// Write one JSON-RPC message.
    pub async fn send(&mut self, message: Value) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        let mut line = message.to_string();
        line.push('\n');
        stdin.write_all(line.as_bytes()).await.expect("write");
        stdin.flush().await.expect("flush");
    }

    /// Send a request; returns its id and a receiver for the response message.
    pub async fn start_request(
        &mut self,
        method: &str,
        params: Value,
    ) -> (i64, oneshot::Receiver<Value>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().expect("lock").insert(id, tx);
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        (id, rx)
    }

    /// Send a request and wait for the whole response message.
    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        let (_, rx) = self.start_request(method, params).await;
        await_response(rx).await
    }

    /// Write `line` as it is (with a newline after it), expecting an answer with id `id`;
    /// returns a receiver for it.
    pub async fn raw_request(&mut self, id: i64, line: &[u8]) -> oneshot::Receiver<Value> {
        let (tx, rx) = oneshot::channel();
        self.pending.lock().expect("lock").insert(id, tx);
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(line).await.expect("write");
        stdin.write_all(b"\n").await.expect("write");
        stdin.flush().await.expect("flush");
        rx
    }

    /// Wait for another answer with id `id` (after an earlier one with the same id arrived).
    pub fn expect_answer(&mut self, id: i64) -> oneshot::Receiver<Value> {
        let (tx, rx) = oneshot::channel();
        self.pending.lock().expect("lock").insert(id, tx);
        rx
    }

    /// Send a notification.
    pub async fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}))
            .await;
    }

    /// `tools/call`; returns the `result` object (panics on a protocol error).
    pub async fn call_tool(&mut self, name: &str, arguments: Value) -> Value {
        let response = self
            .request("tools/call", json!({"name": name, "arguments": arguments}))
            .await;
        match response.get("result") {
            Some(result) => result.clone(),
            None => panic!("tools/call {name} failed: {response}"),
        }
    }

    /// The next notification (or server request) within `limit`.
    pub async fn next_notification(&mut self, limit: Duration) -> Option<Value> {
        tokio::time::timeout(limit, self.notifications.recv())
            .await
            .ok()
            .flatten()
    }

    /// Wait up to `limit` between messages for a notification (or server request) named
    /// `method`, passing over others; whether it came.
    pub async fn wait_for(&mut self, method: &str, limit: Duration) -> bool {
        while let Some(message) = self.next_notification(limit).await {
            if message["method"] == method {
                return true;
            }
        }
        false
    }

    /// Close the server's stdin (the client disconnects).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Wait up to `limit` for the server to exit; returns its exit code.
    pub async fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        match tokio::time::timeout(limit, self.child.wait()).await {
            Ok(Ok(status)) => Some(status.code().unwrap_or(-1)),
            _ => None,
        }
    }
}

/// Wait for a response with the standard timeout.
pub async fn await_response(rx: oneshot::Receiver<Value>) -> Value {
    tokio::time::timeout(ANSWER_TIMEOUT, rx)
        .await
        .expect("no response in time")
        .expect("the server closed the connection before answering")
}

/// The structured content of a successful tool result, checked against its text content.
pub fn structured(result: &Value) -> Value {
    assert_ne!(
        result.get("isError"),
        Some(&Value::Bool(true)),
        "tool error: {result}"
    );
    let structured = result
        .get("structuredContent")
        .cloned()
        .unwrap_or_else(|| panic!("no structuredContent: {result}"));
    let text = result["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text content: {result}"));
    let parsed: Value = serde_json::from_str(text).expect("text content is the result JSON");
    assert_eq!(parsed, structured, "text and structured content differ");
    structured
}

/// The text of an `isError` tool result.
pub fn tool_error(result: &Value) -> String {
    assert_eq!(
        result.get("isError"),
        Some(&Value::Bool(true)),
        "expected a tool error: {result}"
    );
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}
