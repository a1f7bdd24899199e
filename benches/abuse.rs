//! Abuse: a fair principal's calls while an abusive one floods the same `toolhost serve
//! --http`. Two principals share one token file (`alice`, fair; `mallory`, abusive), with
//! `--max-sessions 64`: each principal's share is 32 sessions and 32 scopes.
//!
//! 1. Quiet phase (after a second of the same calls, unmeasured): alice issues one `execute {"command":"true"}` every 100 ms, each on a new
//!    TCP connection (the worst case for a flood of connections), for the phase's length.
//! 2. Flood phase: the same schedule, while mallory, each at a fixed rate:
//!    - opens 200 idle TCP connections a second (no byte sent), and holds them;
//!    - opens 50 slowloris connections a second, each sending one byte of a request head a
//!      second;
//!    - opens 10 sessions a second (`initialize`, never ended);
//!    - names 10 new scopes a second (protocol 2026-07-28 `process_list`, each a new scope id);
//!    - runs a confined command that opens 20 connections a second to the server's port and
//!      holds them (the default `--network full` reaches the host's loopback).
//! 3. Prints alice's median and 90th percentile in each phase, their ratio, her errors, and
//!    what the flood did (connections opened, sessions and scopes granted or refused).
//!
//! Target: alice's median during the flood within 2x of her quiet median. Asserts nothing.
//!
//! Run with `cargo bench -p toolhost-e2e --bench abuse` (`TOOLHOST_ABUSE_SECS` for the length
//! of each phase, default 5).

use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use toolhost_e2e::http_session::{self, HttpServer, Session, initialize_body, token_file};
use toolhost_e2e::stats::percentile;

const ALICE: &str = "alice-token-0123456789";
const MALLORY: &str = "mallory-token-0123456789";

/// How often alice calls.
const PERIOD: Duration = Duration::from_millis(100);

/// A flag the flood's tasks poll to stop.
#[derive(Clone, Default)]
struct Stop(Arc<AtomicBool>);

impl Stop {
    fn stop(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    fn stopped(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// What the flood did.
#[derive(Default)]
struct Flood {
    idle: AtomicUsize,
    slowloris: AtomicUsize,
    sessions_granted: AtomicUsize,
    sessions_refused: AtomicUsize,
    scopes_granted: AtomicUsize,
    scopes_refused: AtomicUsize,
    failed: AtomicUsize,
}

/// alice's calls for `length`, one every [`PERIOD`] on schedule: their latencies, and the
/// errors.
async fn fair_calls(server: &HttpServer, length: Duration) -> (Vec<Duration>, Vec<String>) {
    let session = Arc::new(Session::open_as(server.url.clone(), ALICE).await);
    let began = Instant::now();
    let mut tick = tokio::time::interval(PERIOD);
    let mut calls = Vec::new();
    while began.elapsed() < length {
        tick.tick().await;
        let session = session.clone();
        calls.push(tokio::spawn(async move { one_call(&session).await }));
    }
    let (mut latencies, mut errors) = (Vec::new(), Vec::new());
    for call in calls {
        match call.await {
            Ok(Ok(latency)) => latencies.push(latency),
            Ok(Err(error)) => errors.push(error),
            Err(error) => errors.push(error.to_string()),
        }
    }
    latencies.sort();
    (latencies, errors)
}

/// One `execute true` of alice's session, on a new connection.
async fn one_call(session: &Session) -> Result<Duration, String> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .map_err(|e| e.to_string())?;
    let id = session.next_id.fetch_add(1, Ordering::Relaxed);
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "execute", "arguments": {"command": "true"}}});
    let began = Instant::now();
    let (status, _, answer) = http_session::try_post(
        &http,
        &session.url,
        Some(ALICE),
        Some(&session.id),
        &body,
        Duration::from_secs(60),
    )
    .await?;
    let took = began.elapsed();
    let ok = answer
        .iter()
        .rfind(|m| m.get("id") == Some(&json!(id)))
        .is_some_and(|m| m["result"]["structuredContent"]["exit_code"] == 0);
    if status.is_success() && ok {
        Ok(took)
    } else {
        Err(format!("HTTP {status}: {answer:?}"))
    }
}

/// Run `step` every `period` until `stop`.
fn every<F, Fut>(period: Duration, stop: Stop, step: F) -> tokio::task::JoinHandle<()>
where
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        while !stop.stopped() {
            tick.tick().await;
            tokio::spawn(step());
        }
    })
}

/// Start mallory's flood (step 2 of the module's flow).
async fn flood(
    server: &HttpServer,
    stop: Stop,
    flood: Arc<Flood>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let address = server
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    let held = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    // Idle connections: 200 a second.
    {
        let (address, held, flood) = (address.clone(), held.clone(), flood.clone());
        tasks.push(every(Duration::from_millis(5), stop.clone(), move || {
            let (address, held, flood) = (address.clone(), held.clone(), flood.clone());
            async move {
                match tokio::net::TcpStream::connect(&address).await {
                    Ok(stream) => {
                        flood.idle.fetch_add(1, Ordering::Relaxed);
                        held.lock().unwrap_or_else(|p| p.into_inner()).push(stream);
                    }
                    Err(_) => {
                        flood.failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    // Slowloris: 50 a second, one byte a second each.
    {
        let (address, flood, stop_at) = (address.clone(), flood.clone(), stop.clone());
        tasks.push(every(Duration::from_millis(20), stop.clone(), move || {
            let (address, flood, stop) = (address.clone(), flood.clone(), stop_at.clone());
            async move {
                let Ok(mut stream) = tokio::net::TcpStream::connect(&address).await else {
                    flood.failed.fetch_add(1, Ordering::Relaxed);
                    return;
                };
                flood.slowloris.fetch_add(1, Ordering::Relaxed);
                let head = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer x";
                for byte in head {
                    if stop.stopped() || stream.write_all(&[*byte]).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }));
    }
    // Session churn: 10 a second.
    {
        let (url, flood) = (server.url.clone(), flood.clone());
        tasks.push(every(Duration::from_millis(100), stop.clone(), move || {
            let (url, flood) = (url.clone(), flood.clone());
            async move {
                let http = reqwest::Client::new();
                match http_session::try_post(
                    &http,
                    &url,
                    Some(MALLORY),
                    None,
                    &initialize_body(),
                    Duration::from_secs(30),
                )
                .await
                {
                    Ok((status, _, _)) if status.is_success() => {
                        flood.sessions_granted.fetch_add(1, Ordering::Relaxed)
                    }
                    _ => flood.sessions_refused.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    // Scope churn: 10 new scopes a second.
    {
        let (url, flood) = (server.url.clone(), flood.clone());
        let counter = Arc::new(AtomicUsize::new(0));
        tasks.push(every(Duration::from_millis(100), stop.clone(), move || {
            let (url, flood, counter) = (url.clone(), flood.clone(), counter.clone());
            async move {
                let scope = format!("churn-{}", counter.fetch_add(1, Ordering::Relaxed));
                let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                    "params": {"name": "process_list", "arguments": {}, "_meta": {
                        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                        "io.modelcontextprotocol/clientCapabilities": {},
                        "io.modelcontextprotocol/clientInfo": {"name": "abuse", "version": "0"},
                        "toolhost/scope": scope}}});
                let sent = reqwest::Client::new()
                    .post(&url)
                    .header("content-type", "application/json")
                    .header("accept", "application/json, text/event-stream")
                    .header("authorization", format!("Bearer {MALLORY}"))
                    .header("mcp-protocol-version", "2026-07-28")
                    .header("mcp-method", "tools/call")
                    .header("mcp-name", "process_list")
                    .body(body.to_string())
                    .send()
                    .await;
                let granted = match sent {
                    Ok(response) => response
                        .text()
                        .await
                        .is_ok_and(|t| t.contains("\"result\"")),
                    Err(_) => false,
                };
                if granted {
                    flood.scopes_granted.fetch_add(1, Ordering::Relaxed);
                } else {
                    flood.scopes_refused.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    // A confined command of mallory's opening 20 connections a second to the server's port.
    {
        let session = Session::open_as(server.url.clone(), MALLORY).await;
        let port = address.rsplit(':').next().unwrap_or("0").to_owned();
        let command = format!(
            "python3 -c 'import socket, time\nheld = []\nfor _ in range(2000):\n    \
             try:\n        held.append(socket.create_connection((\"127.0.0.1\", {port}), 5))\n    \
             except OSError:\n        pass\n    time.sleep(0.05)\ntime.sleep(600)'"
        );
        let _ = session
            .call_tool(
                "execute",
                json!({"command": command, "run_in_background": true}),
            )
            .await;
        let stop_at = stop.clone();
        tasks.push(tokio::spawn(async move {
            // The session (and its command) lives until the flood stops.
            while !stop_at.stopped() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            drop(session);
        }));
    }
    tasks.push(tokio::spawn(async move {
        while !stop.stopped() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        held.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }));
    tasks
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() {
    let length = Duration::from_secs(
        std::env::var("TOOLHOST_ABUSE_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(5),
    );
    let (_dir, tokens) = token_file(&[("alice", ALICE), ("mallory", MALLORY)]);
    // Small caps, so that mallory's churn reaches its share (32 sessions, 32 scopes) in seconds.
    let server = HttpServer::start(&["--token-file", &tokens, "--max-sessions", "64"]).await;

    // A second of calls first, so that neither phase pays the first calls' costs.
    let _ = fair_calls(&server, Duration::from_secs(1)).await;
    // 1. Quiet.
    let (quiet, quiet_errors) = fair_calls(&server, length).await;
    // 2. Flood.
    let stop = Stop::default();
    let counts = Arc::new(Flood::default());
    let tasks = flood(&server, stop.clone(), counts.clone()).await;
    // The flood builds up for a second before alice's calls are measured.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (flooded, flooded_errors) = fair_calls(&server, length).await;
    stop.stop();
    for task in tasks {
        let _ = task.await;
    }

    // 3. Report.
    let median = |v: &[Duration]| percentile(v, 0.5);
    let p90 = |v: &[Duration]| percentile(v, 0.9);
    println!(
        "abuse: alice one `execute true` per {} ms on a new connection, {} s per phase",
        PERIOD.as_millis(),
        length.as_secs()
    );
    println!(
        "  quiet:   {} calls, median {:.1} ms, p90 {:.1} ms, {} errors",
        quiet.len(),
        ms(median(&quiet)),
        ms(p90(&quiet)),
        quiet_errors.len()
    );
    println!(
        "  flooded: {} calls, median {:.1} ms, p90 {:.1} ms, {} errors",
        flooded.len(),
        ms(median(&flooded)),
        ms(p90(&flooded)),
        flooded_errors.len()
    );
    let ratio = median(&flooded).as_secs_f64() / median(&quiet).as_secs_f64().max(1e-9);
    println!(
        "  median flooded/quiet: {ratio:.2}x (target: within 2x): {}",
        if ratio <= 2.0 { "met" } else { "NOT met" }
    );
    println!(
        "  flood: {} idle and {} slowloris connections opened ({} failed), sessions {} granted \
         {} refused, scopes {} granted {} refused",
        counts.idle.load(Ordering::Relaxed),
        counts.slowloris.load(Ordering::Relaxed),
        counts.failed.load(Ordering::Relaxed),
        counts.sessions_granted.load(Ordering::Relaxed),
        counts.sessions_refused.load(Ordering::Relaxed),
        counts.scopes_granted.load(Ordering::Relaxed),
        counts.scopes_refused.load(Ordering::Relaxed),
    );
    for error in flooded_errors.iter().chain(&quiet_errors).take(5) {
        println!("  alice's error: {error}");
    }
    server.stop().await;
}
