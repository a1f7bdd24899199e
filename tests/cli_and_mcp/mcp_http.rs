//! `toolhost serve --http` (streamable HTTP at `/mcp`), driven with plain HTTP requests: the
//! bearer token, the loopback rule, tool calls, per-session isolation of processes,
//! processes ending with their session (DELETE or idle expiry), the session cap, and the
//! answers to malformed requests.

use reqwest::StatusCode;
use serde_json::{Value, json};
use std::process::Stdio;
use std::sync::atomic::AtomicI64;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use toolhost_e2e::http_session::*;
use toolhost_e2e::mcp_client::*;
use toolhost_e2e::{
    Stoppable, cache_env, marker, processes_with, toolhost_bin, wait_gone, wait_present,
};

#[tokio::test]
async fn requests_need_the_right_bearer_token() {
    let server = HttpServer::start(&[]).await;
    let http = reqwest::Client::new();
    let (status, _, _) = post(&http, &server.url, None, None, &initialize_body()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "no token");
    let (status, _, _) = post(&http, &server.url, Some("wrong"), None, &initialize_body()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "wrong token");
    let almost = &TOKEN[..TOKEN.len() - 1];
    let (status, _, _) = post(&http, &server.url, Some(almost), None, &initialize_body()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "a prefix of the token");
    let basic = http
        .post(&server.url)
        .header("authorization", format!("Basic {TOKEN}"))
        .body(initialize_body().to_string())
        .send()
        .await
        .expect("request");
    assert_eq!(
        basic.status(),
        StatusCode::UNAUTHORIZED,
        "not a bearer token"
    );
    let (status, session, _) =
        post(&http, &server.url, Some(TOKEN), None, &initialize_body()).await;
    assert_eq!(status, StatusCode::OK, "the right token");
    assert!(session.is_some());
    server.stop().await;
}

async fn refused(args: &[&str], token: Option<&str>) -> String {
    let mut command = Command::new(toolhost_bin());
    command
        .arg("serve")
        .args(args)
        .env_remove("TOOLHOST_TOKEN")
        .stdin(Stdio::null());
    if let Some(token) = token {
        command.env("TOOLHOST_TOKEN", token);
    }
    let output = tokio::time::timeout(ANSWER_TIMEOUT, command.output())
        .await
        .expect("exits in time")
        .expect("run toolhost");
    assert!(!output.status.success(), "it should refuse to start");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[tokio::test]
async fn refuses_to_start_without_a_token_or_on_a_public_address() {
    let message = refused(&["--http", "127.0.0.1:0"], None).await;
    assert!(message.contains("token"), "{message}");

    let empty = tempfile::NamedTempFile::new().expect("temp file");
    let path = empty.path().display().to_string();
    let message = refused(&["--http", "127.0.0.1:0", "--token-file", &path], None).await;
    assert!(message.contains("token"), "{message}");

    let message = refused(&["--http", "0.0.0.0:0"], Some(TOKEN)).await;
    assert!(message.contains("--allow-remote"), "{message}");
}

#[tokio::test]
async fn tools_over_http() {
    let server = HttpServer::start(&[]).await;
    let session = Session::open(&server).await;
    let list = session.request("tools/list", json!({})).await;
    assert_eq!(
        list["result"]["tools"].as_array().map(Vec::len),
        Some(5),
        "{list}"
    );
    let result = session
        .call_tool("execute", json!({"command": "echo hello"}))
        .await;
    let output = structured(&result);
    assert_eq!(output["output"].as_str().map(str::trim), Some("hello"));

    let bad = session.call_tool("execute", json!({"bogus": true})).await;
    assert!(tool_error(&bad).contains("bogus"));
    let unknown = session
        .request("tools/call", json!({"name": "nope", "arguments": {}}))
        .await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");

    // Progress arrives on the request's own stream, before the result.
    let stream = session
        .exchange(
            "tools/call",
            json!({
                "name": "execute",
                "arguments": {"command": "echo tick; sleep 2; echo tock"},
                "_meta": {"progressToken": 7}
            }),
        )
        .await;
    assert!(
        stream
            .iter()
            .any(|m| m["method"] == "notifications/progress" && m["params"]["progressToken"] == 7),
        "{stream:?}"
    );
    assert!(stream.last().is_some_and(|m| m.get("result").is_some()));
    server.stop().await;
}

#[tokio::test]
async fn sessions_cannot_see_each_others_processes() {
    let server = HttpServer::start(&[]).await;
    let alice = Session::open(&server).await;
    let bob = Session::open(&server).await;
    let started = structured(
        &alice
            .call_tool(
                "execute",
                json!({"command": "echo secret; sleep 30", "run_in_background": true}),
            )
            .await,
    );
    let id = started["background_process_id"]
        .as_str()
        .expect("process id")
        .to_string();

    let listed = structured(&bob.call_tool("process_list", json!({})).await);
    assert!(!listed.to_string().contains(&id), "{listed}");
    let read = bob
        .call_tool("process_output", json!({"process_id": id}))
        .await;
    assert!(!tool_error(&read).contains("secret"));
    let signal = bob
        .call_tool(
            "process_signal",
            json!({"process_id": id, "signal": "kill"}),
        )
        .await;
    tool_error(&signal);

    let still = structured(
        &alice
            .call_tool("process_output", json!({"process_id": id}))
            .await,
    );
    assert_eq!(still["running"], true, "{still}");
    assert!(
        alice
            .call_tool("process_list", json!({}))
            .await
            .to_string()
            .contains(&id)
    );
    server.stop().await;
}

#[tokio::test]
async fn ending_a_session_terminates_its_processes() {
    let server = HttpServer::start(&[]).await;
    let keeper = Session::open(&server).await;
    let leaver = Session::open(&server).await;
    let kept = Stoppable::new();
    let ended = Stoppable::new();
    for (session, stoppable) in [(&keeper, &kept), (&leaver, &ended)] {
        structured(
            &session
                .call_tool(
                    "execute",
                    json!({"command": stoppable.command(), "run_in_background": true}),
                )
                .await,
        );
        stoppable.wait_ready(Duration::from_secs(20)).await;
    }

    let gone = Session {
        http: reqwest::Client::new(),
        url: leaver.url.clone(),
        id: leaver.id.clone(),
        next_id: AtomicI64::new(1),
        token: TOKEN.to_owned(),
    };
    let status = leaver.delete().await;
    assert_eq!(status, StatusCode::OK, "DELETE ends the session");
    assert_eq!(
        gone.delete().await,
        StatusCode::NOT_FOUND,
        "an ended session is not found"
    );
    ended
        .stopped_by_the_host(Duration::from_secs(10))
        .await
        .expect("the ended session's processes are stopped");
    assert!(
        !processes_with(kept.marker()).is_empty(),
        "other sessions keep theirs"
    );

    server.stop().await;
    kept.stopped_by_the_host(Duration::from_secs(5))
        .await
        .expect("the server stops every process when it stops");
}

#[tokio::test]
async fn idle_sessions_expire_with_their_processes() {
    // The idle time is 1 s, the plugin's wall-time limit the default hour: the session ends
    // within seconds, not after the longest call could have run.
    let server = HttpServer::start(&["--idle-timeout", "1s"]).await;
    let session = Session::open(&server).await;
    let command = format!("sleep 300.{}", marker());
    structured(
        &session
            .call_tool(
                "execute",
                json!({"command": command, "run_in_background": true}),
            )
            .await,
    );
    assert!(wait_present(&command, Duration::from_secs(10)).await);
    assert!(
        wait_gone(&command, Duration::from_secs(10)).await,
        "the idle session's process survives"
    );
    let (status, _, _) = post(
        &session.http,
        &session.url,
        Some(TOKEN),
        Some(&session.id),
        &json!({"jsonrpc": "2.0", "id": 99, "method": "ping"}),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "the session is gone");
    server.stop().await;
}

#[tokio::test]
async fn a_silent_call_longer_than_the_idle_timeout_is_not_cut() {
    let server = HttpServer::start(&["--idle-timeout", "1s"]).await;
    let session = Session::open(&server).await;
    let result = session
        .call_tool(
            "execute",
            json!({"command": "sleep 3; echo survived", "timeout": "10s"}),
        )
        .await;
    assert_eq!(structured(&result)["output"], "survived\n");
    server.stop().await;
}

#[tokio::test]
async fn the_token_does_not_reach_commands() {
    let server = HttpServer::start(&[]).await;
    let session = Session::open(&server).await;
    let result = session
        .call_tool(
            "execute",
            json!({"command": "env; cat /proc/$PPID/environ 2>&1 | tr '\\0' '\\n'"}),
        )
        .await;
    let output = structured(&result)["output"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        output.contains("PATH="),
        "the command saw its environment: {output}"
    );
    assert!(!output.contains(TOKEN), "the token leaked: {output}");
    server.stop().await;
}

/// The status of an `initialize` POST carrying `origin` (none: no Origin header).
async fn initialize_with_origin(url: &str, origin: Option<&str>) -> StatusCode {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(initialize_body().to_string());
    if let Some(origin) = origin {
        request = request.header("origin", origin);
    }
    request.send().await.expect("HTTP request").status()
}

/// A page in a browser cannot drive the server: a present Origin must be the server's own or
/// one the operator allowed; no Origin (a non-browser client) is fine.
#[tokio::test]
async fn foreign_origins_are_refused_with_403() {
    let server = HttpServer::start(&["--allowed-origin", "https://app.example.com:443"]).await;
    let own = server.url.trim_end_matches("/mcp").to_owned();
    let port = own.rsplit(':').next().unwrap_or_default().to_owned();
    let cases = [
        (None, StatusCode::OK),
        (Some(own.clone()), StatusCode::OK),
        (Some(format!("http://localhost:{port}")), StatusCode::OK),
        (Some("https://app.example.com".to_owned()), StatusCode::OK),
        (
            Some("http://evil.example".to_owned()),
            StatusCode::FORBIDDEN,
        ),
        (
            Some(format!("http://evil.example:{port}")),
            StatusCode::FORBIDDEN,
        ),
        (Some("null".to_owned()), StatusCode::FORBIDDEN),
    ];
    for (origin, expected) in cases {
        let status = initialize_with_origin(&server.url, origin.as_deref()).await;
        assert_eq!(status, expected, "Origin {origin:?}");
    }
    server.stop().await;
}

/// Bound to another loopback address, the server answers requests naming that address.
#[tokio::test]
async fn the_bound_loopback_address_is_an_accepted_host() {
    let server = HttpServer::start_on("127.0.0.2:0", &[]).await;
    assert!(
        server.url.starts_with("http://127.0.0.2:"),
        "{}",
        server.url
    );
    assert_eq!(
        initialize_with_origin(&server.url, None).await,
        StatusCode::OK
    );
    server.stop().await;
}

/// A token file others may read is used, with a warning saying so.
#[tokio::test]
async fn a_token_file_readable_by_others_is_warned_about() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("token");
    std::fs::write(&file, TOKEN).expect("token file");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let (cache_key, cache_value) = cache_env();
    let mut child = Command::new(toolhost_bin())
        .args(["serve", "--http", "127.0.0.1:0", "--token-file"])
        .arg(&file)
        .env("TOOLHOST_LOG", "warn")
        .env(cache_key, cache_value)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start toolhost serve --http");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let mut warned = false;
    let mut coloured = false;
    let served = tokio::time::timeout(ANSWER_TIMEOUT, async {
        while let Ok(Some(line)) = lines.next_line().await {
            warned |= line.contains("may be read by other users") && line.contains("644");
            coloured |= line.contains('\x1b');
            if line.contains("serving MCP on") {
                return true;
            }
        }
        false
    })
    .await
    .unwrap_or(false);
    assert!(served, "the server starts with the token file");
    assert!(warned, "no warning about the token file's mode");
    // stderr is a pipe here: the log line carries no colour codes.
    assert!(!coloured, "colour codes in a log that is not a terminal");
}

/// POST `body` as it is to a session; returns the status and the body text.
async fn post_raw(session: &Session, body: Vec<u8>) -> (StatusCode, String) {
    let response = session
        .http
        .post(&session.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("mcp-session-id", &session.id)
        .header("mcp-protocol-version", PROTOCOL_VERSION)
        .body(body)
        .send()
        .await
        .expect("HTTP request");
    let status = response.status();
    let text = tokio::time::timeout(ANSWER_TIMEOUT, response.text())
        .await
        .expect("response body in time")
        .expect("response body");
    (status, text)
}

#[tokio::test]
async fn malformed_bodies_get_400_with_their_proper_errors() {
    let server = HttpServer::start(&[]).await;
    let session = Session::open(&server).await;
    let cases: Vec<(&[u8], i64, Value)> = vec![
        (br#"{"jsonrpc":"2.0","id":4,"method":"#, -32700, json!(4)),
        (
            b"{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"ping\",\"params\":{\"x\":\"\xff\"}}",
            -32700,
            json!(5),
        ),
        (
            br#"{"jsonrpc":"2.0","id":"s","method":"ping","params":{"x":"\ud800"}}"#,
            -32700,
            json!("s"),
        ),
        (
            br#"[{"jsonrpc":"2.0","id":13,"method":"ping"}]"#,
            -32600,
            json!(13),
        ),
        (br#"42"#, -32600, Value::Null),
        (br#"{"jsonrpc":"2.0","id":7}"#, -32600, json!(7)),
    ];
    for (body, code, id) in cases {
        let (status, text) = post_raw(&session, body.to_vec()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
        let answer: Value = serde_json::from_str(&text).expect("a JSON-RPC error body");
        assert_eq!(answer["error"]["code"], code, "{answer}");
        assert_eq!(answer["id"], id, "{answer}");
    }
    // Invalid params are a JSON-RPC error in a normal response.
    let response = session
        .request(
            "tools/call",
            json!({"name": "execute", "arguments": "echo hi"}),
        )
        .await;
    assert_eq!(response["error"]["code"], -32602, "{response}");
    // The session keeps serving.
    let result = session
        .call_tool("execute", json!({"command": "echo fine"}))
        .await;
    assert_eq!(structured(&result)["output"], "fine\n");
    server.stop().await;
}

#[tokio::test]
async fn a_reused_pending_id_is_refused_without_losing_the_first_answer() {
    let server = HttpServer::start(&[]).await;
    let session = Session::open(&server).await;
    let dir = toolhost_e2e::shared_tempdir();
    let command = format!(
        "{}; echo first",
        toolhost_e2e::rendezvous_command(dir.path(), 2)
    );
    let body = json!({"jsonrpc": "2.0", "id": 500, "method": "tools/call",
                      "params": {"name": "execute", "arguments": {"command": command}}});
    let first = {
        let http = session.http.clone();
        let url = session.url.clone();
        let id = session.id.clone();
        tokio::spawn(async move { post(&http, &url, Some(TOKEN), Some(&id), &body).await })
    };
    // The first call is in progress once its command has registered in `dir`.
    assert!(
        toolhost_e2e::eventually(Duration::from_secs(10), || {
            std::fs::read_dir(dir.path()).is_ok_and(|d| d.count() == 1)
        })
        .await,
        "the first call runs"
    );
    let (status, text) = post_raw(
        &session,
        br#"{"jsonrpc":"2.0","id":500,"method":"ping"}"#.to_vec(),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert!(
        text.contains("-32600") && text.contains("in progress"),
        "{text}"
    );
    std::fs::write(dir.path().join("go"), "").expect("release the first call");
    let (status, _, answer) = first.await.expect("first call");
    assert_eq!(status, StatusCode::OK);
    let result = answer
        .iter()
        .find_map(|m| m.get("result"))
        .expect("the first call's answer");
    assert!(
        structured(result)["output"]
            .as_str()
            .is_some_and(|o| o.contains("first")),
        "{result}"
    );
    server.stop().await;
}

#[tokio::test]
async fn sessions_beyond_the_cap_are_refused_with_503() {
    let server = HttpServer::start(&["--max-sessions", "2"]).await;
    let first = Session::open(&server).await;
    let _second = Session::open(&server).await;
    let http = reqwest::Client::new();
    let response = http
        .post(&server.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(initialize_body().to_string())
        .send()
        .await
        .expect("HTTP request");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let text = response.text().await.expect("body");
    assert!(text.contains("--max-sessions"), "{text}");
    // Ending a session makes room.
    assert!(first.delete().await.is_success());
    let _third = Session::open(&server).await;
    server.stop().await;
}

#[tokio::test]
async fn initialize_requests_arriving_together_do_not_overshoot_the_cap() {
    let server = HttpServer::start(&["--max-sessions", "1"]).await;
    let http = reqwest::Client::new();
    let attempts = (0..12).map(|_| {
        let http = http.clone();
        let url = server.url.clone();
        tokio::spawn(async move {
            post(&http, &url, Some(TOKEN), None, &initialize_body())
                .await
                .0
        })
    });
    let mut statuses = Vec::new();
    for attempt in attempts.collect::<Vec<_>>() {
        statuses.push(attempt.await.expect("task"));
    }
    let opened = statuses.iter().filter(|s| **s == StatusCode::OK).count();
    let refused = statuses
        .iter()
        .filter(|s| **s == StatusCode::SERVICE_UNAVAILABLE)
        .count();
    assert_eq!((opened, refused), (1, 11), "{statuses:?}");
    server.stop().await;
}

#[tokio::test]
async fn output_resources_belong_to_their_session() {
    let server = HttpServer::start(&[]).await;
    let mine = Session::open(&server).await;
    let theirs = Session::open(&server).await;
    let result = mine
        .call_tool("execute", json!({"command": "seq 1 200000"}))
        .await;
    let uri = result["content"]
        .as_array()
        .and_then(|items| items.iter().find(|c| c["type"] == "resource_link"))
        .and_then(|link| link["uri"].as_str())
        .unwrap_or_else(|| panic!("a cut result links its full output: {result}"))
        .to_owned();
    let read = mine
        .request(
            "resources/read",
            json!({"uri": format!("{uri}?line=200000")}),
        )
        .await;
    assert_eq!(read["result"]["contents"][0]["text"], "200000\n", "{read}");
    let stolen = theirs.request("resources/read", json!({"uri": uri})).await;
    assert_eq!(stolen["error"]["code"], -32002, "{stolen}");
    let listed = theirs.request("resources/list", json!({})).await;
    assert_eq!(listed["result"]["resources"], json!([]), "{listed}");
    server.stop().await;
}

/// A request of protocol 2026-07-28 (no session) in the client-named scope `scope` (`None`:
/// the default scope); returns the HTTP status and the response message.
async fn request_2026(
    server: &HttpServer,
    scope: Option<&str>,
    tasks: bool,
    method: &str,
    params: Value,
) -> (StatusCode, Value) {
    request_2026_as(server, TOKEN, scope, tasks, method, params).await
}

/// [`request_2026`] with the bearer token `token`.
pub(super) async fn request_2026_as(
    server: &HttpServer,
    token: &str,
    scope: Option<&str>,
    tasks: bool,
    method: &str,
    mut params: Value,
) -> (StatusCode, Value) {
    let capabilities = if tasks {
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
    } else {
        json!({})
    };
    let mut meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "toolhost-e2e", "version": "0"}
    });
    if let Some(scope) = scope {
        meta["toolhost/scope"] = json!(scope);
    }
    params["_meta"] = meta;
    let name = ["name", "uri", "taskId"]
        .iter()
        .find_map(|key| params[*key].as_str())
        .map(str::to_owned);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let mut request = reqwest::Client::new()
        .post(&server.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("authorization", format!("Bearer {token}"))
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .body(body.to_string());
    if let Some(name) = name {
        request = request.header("mcp-name", name);
    }
    let response = request.send().await.expect("HTTP request");
    let status = response.status();
    let (content_type, text) = body_of(response).await;
    let message = messages(&content_type, &text)
        .into_iter()
        .rfind(|m| m.get("result").is_some() || m.get("error").is_some())
        .unwrap_or_else(|| panic!("{method}: no answer ({status}): {text}"));
    (status, message)
}

/// `tools/call` of `name` with `arguments`.
pub(super) fn tool_call(name: &str, arguments: Value) -> Value {
    json!({"name": name, "arguments": arguments})
}

/// `execute` of `command` in the background.
fn in_background(command: &str) -> Value {
    tool_call(
        "execute",
        json!({"command": command, "run_in_background": true}),
    )
}

/// The id of the background process a `tools/call` answer started.
fn started_id(answer: &Value) -> String {
    structured(&answer["result"])["background_process_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"))
        .to_owned()
}

/// Poll `tasks/get` in `scope` until the task leaves `working`; its last state.
async fn finished_task(server: &HttpServer, scope: Option<&str>, task_id: &str) -> Value {
    let begun = std::time::Instant::now();
    loop {
        let (_, got) =
            request_2026(server, scope, true, "tasks/get", json!({"taskId": task_id})).await;
        if got["result"]["status"] != "working" {
            return got["result"].clone();
        }
        assert!(begun.elapsed() < Duration::from_secs(20), "{got}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A standard 2026-07-28 client names no scope: its requests share the default scope of
/// their principal, so a process started in one is read, fed and listed by id in later ones,
/// its output is a resource, a task runs and is polled; the default scope ends with its
/// processes once idle.
#[tokio::test]
async fn protocol_2026_07_28_requests_without_a_scope_share_their_default_scope() {
    let server = HttpServer::start(&["--idle-timeout", "2s"]).await;
    let marker = marker();
    let (status, started) = request_2026(
        &server,
        None,
        false,
        "tools/call",
        tool_call(
            "execute",
            json!({"command": format!("read line; echo got $line; seq 1 20000; sleep 300 # {marker}"),
                   "run_in_background": true, "stdin": "open"}),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{started}");
    assert!(started.get("error").is_none(), "{started}");
    let id = started_id(&started);

    // Later requests, with no scope either, reach it by id.
    let (_, listed) = request_2026(
        &server,
        None,
        false,
        "tools/call",
        tool_call("process_list", json!({})),
    )
    .await;
    assert!(listed.to_string().contains(&id), "{listed}");
    let (_, fed) = request_2026(
        &server,
        None,
        false,
        "tools/call",
        tool_call(
            "process_input",
            json!({"process_id": id, "input": "hello\n", "until": "20000"}),
        ),
    )
    .await;
    assert!(fed.to_string().contains("got hello"), "{fed}");
    let (_, read) = request_2026(
        &server,
        None,
        false,
        "tools/call",
        tool_call("process_output", json!({"process_id": id})),
    )
    .await;
    assert_eq!(structured(&read["result"])["running"], true, "{read}");

    // Its output is a resource of the default scope.
    let (_, resources) = request_2026(&server, None, false, "resources/list", json!({})).await;
    let uri = format!("toolhost://process/{id}/output");
    assert!(resources.to_string().contains(&uri), "{resources}");
    let (_, page) = request_2026(&server, None, false, "resources/read", json!({"uri": uri})).await;
    let text = page["result"]["contents"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{page}"));
    assert!(text.starts_with("got hello\n1\n2\n"), "{page}");

    // A scope named in `_meta` is another one.
    let (_, elsewhere) = request_2026(
        &server,
        Some("alpha"),
        false,
        "tools/call",
        tool_call("process_list", json!({})),
    )
    .await;
    assert!(!elsewhere.to_string().contains(&id), "{elsewhere}");

    // A task runs in the default scope and is polled there.
    let (_, created) = request_2026(
        &server,
        None,
        true,
        "tools/call",
        tool_call("execute", json!({"command": "sleep 0.5; echo done"})),
    )
    .await;
    let task_id = created["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned();
    let (_, stolen) = request_2026(
        &server,
        Some("alpha"),
        true,
        "tasks/get",
        json!({"taskId": task_id}),
    )
    .await;
    assert_eq!(stolen["error"]["code"], -32602, "{stolen}");
    let task = finished_task(&server, None, &task_id).await;
    assert_eq!(task["status"], "completed", "{task}");
    assert_eq!(structured(&task["result"])["output"], "done\n", "{task}");

    // Idle for the idle timeout, the default scope ends with its processes.
    assert!(
        wait_gone(&marker, Duration::from_secs(15)).await,
        "the idle default scope's process survives"
    );
    let (_, after) = request_2026(
        &server,
        None,
        false,
        "tools/call",
        tool_call("process_output", json!({"process_id": id})),
    )
    .await;
    tool_error(&after["result"]);
    server.stop().await;
}

#[tokio::test]
async fn protocol_2026_07_28_scopes_named_in_meta_are_kept_apart() {
    let server = HttpServer::start(&["--idle-timeout", "2s"]).await;
    let marker = marker();
    let list = tool_call("process_list", json!({}));
    let (status, started) = request_2026(
        &server,
        Some("alpha"),
        false,
        "tools/call",
        in_background(&format!("sleep 300 # {marker}")),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{started}");
    let id = started_id(&started);
    // The same scope in a later request sees it; another scope, or none, does not.
    let (_, mine) = request_2026(&server, Some("alpha"), false, "tools/call", list.clone()).await;
    assert!(mine.to_string().contains(&id), "{mine}");
    let (_, theirs) = request_2026(&server, Some("beta"), false, "tools/call", list.clone()).await;
    assert!(!theirs.to_string().contains(&id), "{theirs}");
    let (_, default) = request_2026(&server, None, false, "tools/call", list).await;
    assert!(!default.to_string().contains(&id), "{default}");

    // A scope id must be a string of the allowed characters.
    let (_, bad) = request_2026(
        &server,
        Some("../x"),
        false,
        "tools/call",
        tool_call("process_list", json!({})),
    )
    .await;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");

    // A task of one scope is unknown in another, and completes with the result at exit.
    let (_, created) = request_2026(
        &server,
        Some("alpha"),
        true,
        "tools/call",
        tool_call("execute", json!({"command": "sleep 0.5; echo done"})),
    )
    .await;
    let task_id = created["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned();
    let (_, stolen) = request_2026(
        &server,
        Some("beta"),
        true,
        "tasks/get",
        json!({"taskId": task_id}),
    )
    .await;
    assert_eq!(stolen["error"]["code"], -32602, "{stolen}");
    let task = finished_task(&server, Some("alpha"), &task_id).await;
    assert_eq!(task["status"], "completed", "{task}");
    assert_eq!(structured(&task["result"])["output"], "done\n", "{task}");

    // Idle for the idle timeout, the scope ends with its processes.
    assert!(
        wait_gone(&marker, Duration::from_secs(15)).await,
        "the idle scope's process survives"
    );
    server.stop().await;
}

/// Two agents on one server, each with its own token (`--token-file` of `NAME TOKEN` lines):
/// neither reaches the other's default scope, a scope of the same name, a session, or a task.
#[tokio::test]
async fn two_principals_do_not_reach_each_others_scopes_sessions_or_tasks() {
    const ALICE: &str = "alice-token-0123456789";
    const BOB: &str = "bob-token-0123456789";
    let dir = tempfile::tempdir().expect("temp dir");
    let tokens = dir.path().join("tokens");
    std::fs::write(
        &tokens,
        format!("# one line per agent\nalice {ALICE}\nbob {BOB}\n"),
    )
    .expect("token file");
    std::fs::set_permissions(&tokens, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod");
    let path = tokens.display().to_string();
    let server = HttpServer::start(&["--token-file", &path]).await;
    let list = tool_call("process_list", json!({}));

    // The single token the server would take alone is not one of these.
    let (status, _, _) = post(
        &reqwest::Client::new(),
        &server.url,
        Some(TOKEN),
        None,
        &initialize_body(),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let mut ids = Vec::new();
    for scope in [None, Some("shared")] {
        let (_, started) = request_2026_as(
            &server,
            ALICE,
            scope,
            false,
            "tools/call",
            in_background("echo alice-secret; seq 1 20000; sleep 300"),
        )
        .await;
        let id = started_id(&started);
        let (_, hers) =
            request_2026_as(&server, ALICE, scope, false, "tools/call", list.clone()).await;
        assert!(hers.to_string().contains(&id), "{hers}");
        let (_, his) =
            request_2026_as(&server, BOB, scope, false, "tools/call", list.clone()).await;
        assert!(!his.to_string().contains(&id), "{scope:?}: {his}");
        let (_, read) = request_2026_as(
            &server,
            BOB,
            scope,
            false,
            "tools/call",
            tool_call("process_output", json!({"process_id": id})),
        )
        .await;
        assert!(
            !tool_error(&read["result"]).contains("alice-secret"),
            "{read}"
        );
        let uri = json!({"uri": format!("toolhost://process/{id}/output")});
        let begun = std::time::Instant::now();
        loop {
            let (_, page) =
                request_2026_as(&server, ALICE, scope, false, "resources/read", uri.clone()).await;
            if page.to_string().contains("alice-secret") {
                break;
            }
            assert!(begun.elapsed() < Duration::from_secs(10), "{page}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (_, resource) =
            request_2026_as(&server, BOB, scope, false, "resources/read", uri).await;
        assert!(
            resource.get("error").is_some() && !resource.to_string().contains("alice-secret"),
            "{resource}"
        );
        ids.push((scope, id));
    }

    // Alice's task is unknown to Bob.
    let (_, created) = request_2026_as(
        &server,
        ALICE,
        None,
        true,
        "tools/call",
        tool_call("execute", json!({"command": "sleep 5"})),
    )
    .await;
    let task_id = created["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned();
    for method in ["tasks/get", "tasks/cancel"] {
        let (_, stolen) =
            request_2026_as(&server, BOB, None, true, method, json!({"taskId": task_id})).await;
        assert_eq!(stolen["error"]["code"], -32602, "{method}: {stolen}");
    }

    // A 2025-11-25 session opened with Alice's token is not found with Bob's.
    let http = reqwest::Client::new();
    let (status, session, _) =
        post(&http, &server.url, Some(ALICE), None, &initialize_body()).await;
    assert_eq!(status, StatusCode::OK);
    let session = session.expect("a session id");
    let ping = json!({"jsonrpc": "2.0", "id": 5, "method": "ping"});
    let (status, _, _) = post(&http, &server.url, Some(BOB), Some(&session), &ping).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "another principal's session");
    let (status, _, answer) = post(&http, &server.url, Some(ALICE), Some(&session), &ping).await;
    assert_eq!(status, StatusCode::OK, "{answer:?}");
    let deleted = http
        .delete(&server.url)
        .header("authorization", format!("Bearer {BOB}"))
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", PROTOCOL_VERSION)
        .send()
        .await
        .expect("DELETE");
    assert_eq!(deleted.status(), StatusCode::NOT_FOUND, "Bob cannot end it");

    // Alice's processes are still running, and hers to read.
    for (scope, id) in ids {
        let (_, read) = request_2026_as(
            &server,
            ALICE,
            scope,
            false,
            "tools/call",
            tool_call("process_output", json!({"process_id": id})),
        )
        .await;
        let output = structured(&read["result"]);
        assert_eq!(output["running"], true, "{scope:?}: {output}");
    }
    server.stop().await;
}

/// Methods revision 2026-07-28 removed (`initialize`, `logging/setLevel`,
/// `resources/subscribe`, `resources/unsubscribe`) get 404 and -32601 whatever their params,
/// which are not looked at; the methods of capabilities the server does not declare (prompts,
/// completions) get -32601 in every revision.
#[tokio::test]
async fn methods_a_revision_lacks_are_not_found_before_their_params_are_read() {
    let server = HttpServer::start(&[]).await;
    for (method, params) in [
        ("initialize", json!({})),
        ("logging/setLevel", json!({"level": "info"})),
        ("logging/setLevel", json!({})),
        (
            "resources/subscribe",
            json!({"uri": "toolhost://process/x/output"}),
        ),
        ("resources/subscribe", json!({})),
        ("resources/unsubscribe", json!({})),
        ("ping", json!({})),
        ("prompts/list", json!({})),
        ("prompts/get", json!({"name": "x"})),
        ("completion/complete", json!({})),
        (
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "x"}, "argument": {"name": "a", "value": "b"}}),
        ),
    ] {
        let (status, answer) = request_2026(&server, None, false, method, params.clone()).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {params}: {answer}");
        assert_eq!(
            answer["error"]["code"], -32601,
            "{method} {params}: {answer}"
        );
        assert_eq!(answer["id"], 1, "{answer}");
    }
    // `server/discover` declares neither prompts nor completions.
    let (_, discovered) = request_2026(&server, None, false, "server/discover", json!({})).await;
    let capabilities = &discovered["result"]["capabilities"];
    assert!(capabilities["tools"].is_object(), "{discovered}");
    assert!(capabilities.get("prompts").is_none(), "{discovered}");
    assert!(capabilities.get("completions").is_none(), "{discovered}");

    // A 2025-11-25 session: the same for undeclared capabilities, and `logging/setLevel`
    // works (malformed, it is invalid params).
    let session = Session::open(&server).await;
    for (method, params) in [
        ("prompts/list", json!({})),
        ("prompts/get", json!({"name": "x"})),
        (
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "x"}, "argument": {"name": "a", "value": "b"}}),
        ),
        (
            "resources/subscribe",
            json!({"uri": "toolhost://process/x/output"}),
        ),
        ("resources/unsubscribe", json!({})),
    ] {
        let answer = session.request(method, params).await;
        assert_eq!(answer["error"]["code"], -32601, "{method}: {answer}");
    }
    let set = session
        .request("logging/setLevel", json!({"level": "info"}))
        .await;
    assert!(set.get("result").is_some(), "{set}");
    let bad = session.request("logging/setLevel", json!({})).await;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    let ping = session.request("ping", json!({})).await;
    assert!(ping.get("result").is_some(), "{ping}");
    server.stop().await;
}
