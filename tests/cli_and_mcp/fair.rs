//! `toolhost serve --http` under abuse: one client cannot starve another. Idle and half-sent
//! connections do not exhaust the server's descriptors, the connection cap answers promptly,
//! and two principals in one token file each keep their share of sessions, scopes, running
//! processes and calls in flight; a session or scope with a process running is not reclaimed.

use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use toolhost_e2e::http_session::*;
use toolhost_e2e::mcp_client::*;

const ALICE: &str = "alice-token-0123456789";
const MALLORY: &str = "mallory-token-0123456789";

/// The `host:port` of a server's URL.
fn authority(server: &HttpServer) -> String {
    server
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned()
}

/// A server whose token file names two principals, alice and mallory, started with `flags`;
/// the token file's directory lives as long as the server must.
async fn two_principals(flags: &[&str]) -> (tempfile::TempDir, HttpServer) {
    let (dir, tokens) = token_file(&[("alice", ALICE), ("mallory", MALLORY)]);
    let mut args = vec!["--token-file", &tokens];
    args.extend_from_slice(flags);
    let server = HttpServer::start(&args).await;
    (dir, server)
}

/// `execute "echo ok"` in a new session of `token`'s principal, answered within
/// [`ANSWER_TIMEOUT`] per request; what went wrong otherwise.
async fn echo_ok(server: &HttpServer, token: &str) -> Result<(), String> {
    let http = reqwest::Client::new();
    let (status, id, _) = try_post(
        &http,
        &server.url,
        Some(token),
        None,
        &initialize_body(),
        ANSWER_TIMEOUT,
    )
    .await?;
    if status != StatusCode::OK {
        return Err(format!("initialize: {status}"));
    }
    let id = id.ok_or("no session id")?;
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "execute", "arguments": {"command": "echo ok"}}});
    let (status, _, answer) = try_post(
        &http,
        &server.url,
        Some(token),
        Some(&id),
        &call,
        ANSWER_TIMEOUT,
    )
    .await?;
    let said = answer
        .iter()
        .rfind(|m| m.get("result").is_some())
        .map(|m| structured(&m["result"])["output"].clone());
    if status == StatusCode::OK && said == Some(Value::from("ok\n")) {
        Ok(())
    } else {
        Err(format!("execute: {status} {answer:?}"))
    }
}

/// Idle connections, and connections that sent half a request head, hold none of the server's
/// descriptors for long: with its descriptor limit lowered to 256, a confined command of one
/// principal holding 200 connections to the server's port (the default `--network full` reaches
/// the host's loopback), then a thousand more from outside (no token, never finished), leave
/// room for another principal's `execute "echo ok"`.
#[tokio::test]
async fn an_idle_connection_flood_does_not_starve_a_client_with_a_token() {
    let (_dir, tokens) = token_file(&[("alice", ALICE), ("mallory", MALLORY)]);
    let server =
        HttpServer::start_limited("127.0.0.1:0", &["--token-file", &tokens], Some(256)).await;
    let address = authority(&server);
    let port = address.rsplit(':').next().expect("a port").to_owned();

    // 1. A confined command holds connections to the server's port.
    let mallory = Session::open_as(server.url.clone(), MALLORY).await;
    let command = format!(
        "python3 -c 'import socket, time\nheld = []\nfor _ in range(200):\n    \
         try:\n        held.append(socket.create_connection((\"127.0.0.1\", {port}), 5))\n    \
         except OSError:\n        break\nprint(\"held\", len(held), flush=True)\ntime.sleep(300)'"
    );
    let started = mallory
        .call_tool(
            "execute",
            json!({"command": command, "run_in_background": true}),
        )
        .await;
    let id = structured(&started)["background_process_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{started}"))
        .to_owned();
    let begun = std::time::Instant::now();
    let held = loop {
        let read = mallory
            .call_tool("process_output", json!({"process_id": id}))
            .await;
        let text = structured(&read)["output"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if let Some(count) = text
            .split_whitespace()
            .skip_while(|word| *word != "held")
            .nth(1)
        {
            break count.parse::<usize>().expect("a count");
        }
        assert!(
            begun.elapsed() < ANSWER_TIMEOUT,
            "the command holds nothing: {read}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert!(held >= 150, "the command held only {held} connections");

    // 2. More from outside, half of them with a request head that never ends.
    let mut flood = Vec::new();
    for index in 0..1000 {
        let connect = tokio::net::TcpStream::connect(&address);
        let Ok(Ok(mut stream)) =
            tokio::time::timeout(std::time::Duration::from_secs(1), connect).await
        else {
            // The listener's queue is full: the flood is as big as it gets.
            break;
        };
        if index % 2 == 0 {
            let _ = stream
                .write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                .await;
        }
        flood.push(stream);
    }
    assert!(
        held + flood.len() > 256,
        "only {held} + {} connections opened",
        flood.len()
    );

    // 3. Another principal's call.
    echo_ok(&server, ALICE)
        .await
        .expect("alice's call is answered during the flood");
    drop(flood);
    server.stop().await;
}

/// Beyond `--max-connections`, a client with a token is refused at once with 503 and
/// `Retry-After`, never left waiting; a connection that closes makes room.
#[tokio::test]
async fn a_connection_over_the_cap_is_refused_with_retry_after() {
    let server = HttpServer::start(&["--max-connections", "1"]).await;
    // One client holds the only slot with a keep-alive connection.
    let holder = Session::open(&server).await;
    let refused = reqwest::Client::new()
        .post(&server.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(initialize_body().to_string())
        .send()
        .await
        .expect("an answer, not a hang");
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        refused
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );
    let text = refused.text().await.expect("body");
    assert!(text.contains("--max-connections"), "{text}");
    // The holder's connection still works; once it closes, the slot is free again.
    let listed = holder.request("tools/list", json!({})).await;
    assert!(listed["result"]["tools"].is_array(), "{listed}");
    drop(holder);
    let begun = std::time::Instant::now();
    while echo_ok(&server, TOKEN).await.is_err() {
        assert!(begun.elapsed() < ANSWER_TIMEOUT, "the slot was never freed");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    server.stop().await;
}

/// A session request's HTTP status and body text, raw.
async fn session_status(session: &Session) -> (StatusCode, String) {
    let response = session
        .http
        .post(&session.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("authorization", format!("Bearer {}", session.token))
        .header("mcp-session-id", &session.id)
        .header("mcp-protocol-version", PROTOCOL_VERSION)
        .body(json!({"jsonrpc": "2.0", "id": 99, "method": "tools/list"}).to_string())
        .send()
        .await
        .expect("HTTP request");
    let status = response.status();
    (status, body_of(response).await.1)
}

/// `initialize` with `token`: the status and the body.
async fn try_initialize(server: &HttpServer, token: &str) -> (StatusCode, String) {
    let response = reqwest::Client::new()
        .post(&server.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("authorization", format!("Bearer {token}"))
        .body(initialize_body().to_string())
        .send()
        .await
        .expect("HTTP request");
    let status = response.status();
    (status, body_of(response).await.1)
}

/// Two principals, `--max-sessions 3`, two each at most: one principal's sessions cannot take
/// the other's share. At the total, the other's oldest idle session is reclaimed, never one
/// with a call in flight, and its client is told why with 404.
#[tokio::test]
async fn one_principal_cannot_take_the_sessions_of_another() {
    let (_dir, server) =
        two_principals(&["--max-sessions", "3", "--max-sessions-per-principal", "2"]).await;
    let busy = Session::open_as(server.url.clone(), MALLORY).await;
    let idle = Session::open_as(server.url.clone(), MALLORY).await;
    let (status, text) = try_initialize(&server, MALLORY).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{text}");
    assert!(text.contains("--max-sessions-per-principal"), "{text}");
    let _first = Session::open_as(server.url.clone(), ALICE).await;

    // The older of mallory's sessions has a call in flight: it is not reclaimed.
    let marker = toolhost_e2e::marker();
    let call = {
        let (http, url, id) = (busy.http.clone(), busy.url.clone(), busy.id.clone());
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "execute", "arguments": {"command": format!("sleep 300 # {marker}")}}});
        tokio::spawn(async move {
            let _ = try_post(&http, &url, Some(MALLORY), Some(&id), &body, ANSWER_TIMEOUT).await;
        })
    };
    assert!(
        toolhost_e2e::wait_present(&marker, ANSWER_TIMEOUT).await,
        "the call runs"
    );
    let second = Session::open_as(server.url.clone(), ALICE).await;
    let (status, text) = session_status(&idle).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{text}");
    assert!(
        text.contains("make room") && text.contains("--max-sessions-per-principal"),
        "{text}"
    );
    // Alice is at her own limit now.
    let (status, text) = try_initialize(&server, ALICE).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{text}");
    assert!(text.contains("principal `alice`"), "{text}");
    let listed = second.request("tools/list", json!({})).await;
    assert!(listed["result"]["tools"].is_array(), "{listed}");
    call.abort();
    server.stop().await;
}

/// The same for named scopes of protocol 2026-07-28: `--max-sessions 3`, two scopes each at
/// most; the other's oldest idle scope is reclaimed and its next request told why (-32000).
#[tokio::test]
async fn one_principal_cannot_take_the_scopes_of_another() {
    use super::mcp_http::{request_2026_as, tool_call};
    let (_dir, server) =
        two_principals(&["--max-sessions", "3", "--max-scopes-per-principal", "2"]).await;
    let echo = || tool_call("execute", json!({"command": "echo hi"}));
    let call = |token: &'static str, scope: &'static str| {
        let server = &server;
        let echo = echo();
        async move { request_2026_as(server, token, Some(scope), false, "tools/call", echo).await }
    };
    for scope in ["m1", "m2"] {
        let (_, answer) = call(MALLORY, scope).await;
        assert!(answer.get("result").is_some(), "{answer}");
    }
    let (_, refused) = call(MALLORY, "m3").await;
    assert_eq!(refused["error"]["code"], -32000, "{refused}");
    assert!(
        refused.to_string().contains("--max-scopes-per-principal"),
        "{refused}"
    );
    for scope in ["a1", "a2"] {
        let (_, answer) = call(ALICE, scope).await;
        assert!(answer.get("result").is_some(), "{scope}: {answer}");
    }
    // m1 was reclaimed for a2: its next request is told why.
    let (_, told) = call(MALLORY, "m1").await;
    assert_eq!(told["error"]["code"], -32000, "{told}");
    assert!(told.to_string().contains("make room"), "{told}");
    let (_, kept) = call(MALLORY, "m2").await;
    assert!(kept.get("result").is_some(), "{kept}");
    server.stop().await;
}

/// Running processes and calls in flight are bounded per principal: with one of each per
/// principal, mallory's background command takes her only process slot and her running call
/// her only call slot, in scopes of her own, each refusal naming its flag; alice, in the same
/// server, is served all the while.
#[tokio::test]
async fn one_principal_cannot_take_the_processes_or_calls_of_another() {
    use super::mcp_http::{request_2026_as, tool_call};
    let (_dir, server) = two_principals(&[
        "--max-processes-per-principal",
        "1",
        "--max-calls-per-principal",
        "1",
    ])
    .await;
    let execute = |command: String, background: bool| {
        tool_call(
            "execute",
            json!({"command": command, "run_in_background": background}),
        )
    };
    let text_of = |answer: &Value| answer["result"]["content"][0]["text"].to_string();
    // 1. Mallory's background command holds her one process slot; her next start, in
    //    another of her scopes, is refused naming the flag.
    let marker = toolhost_e2e::marker();
    let (_, started) = request_2026_as(
        &server,
        MALLORY,
        Some("m1"),
        false,
        "tools/call",
        execute(format!("sleep 300 # {marker}"), true),
    )
    .await;
    assert!(started.get("result").is_some(), "{started}");
    assert!(
        toolhost_e2e::wait_present(&marker, ANSWER_TIMEOUT).await,
        "the background command runs"
    );
    let (_, refused) = request_2026_as(
        &server,
        MALLORY,
        Some("m2"),
        false,
        "tools/call",
        execute("echo hi".into(), false),
    )
    .await;
    assert!(
        text_of(&refused).contains("--max-processes-per-principal"),
        "{refused}"
    );
    let (_, served) = request_2026_as(
        &server,
        ALICE,
        None,
        false,
        "tools/call",
        execute("echo hi".into(), false),
    )
    .await;
    assert_eq!(structured(&served["result"])["output"], "hi\n", "{served}");

    // 2. Alice's running call holds her one call slot: her next call is refused at once,
    //    naming the flag.
    let call_marker = toolhost_e2e::marker();
    let body = execute(format!("sleep 300 # {call_marker}"), false);
    let long = request_2026_as(&server, ALICE, Some("a2"), false, "tools/call", body);
    let mut long = Box::pin(long);
    tokio::select! {
        answer = &mut long => panic!("the long call ended: {answer:?}"),
        present = toolhost_e2e::wait_present(&call_marker, ANSWER_TIMEOUT) => {
            assert!(present, "alice's long call runs");
        }
    }
    let (_, busy) = tokio::select! {
        answer = request_2026_as(&server, ALICE, None, false, "tools/call", execute("echo hi".into(), false)) => answer,
        answer = &mut long => panic!("the long call ended: {answer:?}"),
    };
    assert!(
        text_of(&busy).contains("--max-calls-per-principal"),
        "{busy}"
    );
    drop(long);
    server.stop().await;
}

/// A session or a scope with a process running (in the background, no call in flight) is
/// never reclaimed for another principal: the other's newer idle one is, though older ones go
/// first otherwise.
#[tokio::test]
async fn a_session_or_scope_with_a_running_process_is_not_reclaimed() {
    use super::mcp_http::{request_2026_as, tool_call};
    let (_dir, server) = two_principals(&[
        "--max-sessions",
        "3",
        "--max-sessions-per-principal",
        "2",
        "--max-scopes-per-principal",
        "2",
    ])
    .await;
    let background = |marker: &str| {
        json!({"name": "execute", "arguments": {
            "command": format!("sleep 300 # {marker}"), "run_in_background": true}})
    };

    // 1. Sessions: mallory's older session runs a background command, her newer one is idle.
    let marker = toolhost_e2e::marker();
    let running = Session::open_as(server.url.clone(), MALLORY).await;
    let started = running.request("tools/call", background(&marker)).await;
    assert!(started.get("result").is_some(), "{started}");
    assert!(
        toolhost_e2e::wait_present(&marker, ANSWER_TIMEOUT).await,
        "the background command runs"
    );
    let idle = Session::open_as(server.url.clone(), MALLORY).await;
    let _first = Session::open_as(server.url.clone(), ALICE).await;
    let _second = Session::open_as(server.url.clone(), ALICE).await;
    let (status, text) = session_status(&idle).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "the idle one went: {text}");
    let (status, text) = session_status(&running).await;
    assert_eq!(status, StatusCode::OK, "the running one stays: {text}");
    assert!(toolhost_e2e::wait_present(&marker, ANSWER_TIMEOUT).await);

    // 2. Scopes (2026-07-28): the same.
    let scope_marker = toolhost_e2e::marker();
    let echo = tool_call("execute", json!({"command": "echo hi"}));
    let (_, started) = request_2026_as(
        &server,
        MALLORY,
        Some("m1"),
        false,
        "tools/call",
        background(&scope_marker),
    )
    .await;
    assert!(started.get("result").is_some(), "{started}");
    assert!(toolhost_e2e::wait_present(&scope_marker, ANSWER_TIMEOUT).await);
    let (_, answer) = request_2026_as(
        &server,
        MALLORY,
        Some("m2"),
        false,
        "tools/call",
        echo.clone(),
    )
    .await;
    assert!(answer.get("result").is_some(), "{answer}");
    for scope in ["a1", "a2"] {
        let (_, answer) = request_2026_as(
            &server,
            ALICE,
            Some(scope),
            false,
            "tools/call",
            echo.clone(),
        )
        .await;
        assert!(answer.get("result").is_some(), "{scope}: {answer}");
    }
    let (_, told) = request_2026_as(
        &server,
        MALLORY,
        Some("m2"),
        false,
        "tools/call",
        echo.clone(),
    )
    .await;
    assert!(told.to_string().contains("make room"), "m2 went: {told}");
    assert!(
        toolhost_e2e::wait_present(&scope_marker, ANSWER_TIMEOUT).await,
        "m1's command still runs"
    );
    server.stop().await;
}
