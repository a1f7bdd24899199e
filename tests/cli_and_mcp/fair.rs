//! `toolhost serve --http` under abuse: one client cannot starve another. Idle and half-sent
//! connections do not exhaust the server's descriptors, the connection cap answers promptly,
//! and two principals in one token file each keep their share of sessions and scopes.

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
/// descriptors for long: with its descriptor limit lowered to 256, a thousand of them (no
/// token, never finished) leave room for another principal's `execute "echo ok"`.
#[tokio::test]
async fn an_idle_connection_flood_does_not_starve_a_client_with_a_token() {
    let (_dir, tokens) = token_file(&[("alice", ALICE), ("mallory", MALLORY)]);
    let server =
        HttpServer::start_limited("127.0.0.1:0", &["--token-file", &tokens], Some(256)).await;
    let address = authority(&server);
    let mut flood = Vec::new();
    for index in 0..1000 {
        let Ok(mut stream) = tokio::net::TcpStream::connect(&address).await else {
            // The listener's queue is full: the flood is as big as it gets.
            break;
        };
        if index % 2 == 0 {
            // Slowloris: a request head that never ends.
            let _ = stream
                .write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                .await;
        }
        flood.push(stream);
    }
    assert!(flood.len() > 256, "only {} connections opened", flood.len());
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
