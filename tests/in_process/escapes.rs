//! Nothing a command starts escapes the host's bookkeeping. Descendants that leave the
//! command's process group or session every way people do it (`setsid`, `setsid -f`, GNU
//! `timeout`, a double fork, `setpgrp` from Perl, `nohup`) are stopped by `process_signal`,
//! with their scope, and with the host, also when the host is killed with `SIGKILL`.

use std::process::{Command, Stdio};
use std::time::Duration;
use toolhost_e2e::{json, marker, real_host, sleeps_with, toolhost_bin, wait_gone};

/// Six `sleep`s that leave the group or the tree, then `ready`; `wait` keeps the shell.
fn escaping(seconds: &str) -> String {
    format!(
        "setsid sleep {seconds} & setsid -f sleep {seconds}; timeout 999 sleep {seconds} & \
         ( (sleep {seconds} &) & ); perl -e 'setpgrp(0, 0); exec \"sleep\", \"{seconds}\"' & \
         nohup sleep {seconds} >/dev/null 2>&1 & echo ready; wait"
    )
}

/// Wait until the six `sleep`s of [`escaping`] run.
async fn six_sleeping(marker: &str) {
    for _ in 0..400 {
        if sleeps_with(marker) >= 6 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("only {} of the six sleeps started", sleeps_with(marker));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_signal_reaches_everything_a_background_command_started() {
    let (host, _state) = real_host("default").await;
    let marker = marker();
    let seconds = format!("1{marker}");
    let args = serde_json::json!({"command": escaping(&seconds), "run_in_background": true});
    let started = json(
        &host
            .call("s", "execute", &args.to_string())
            .await
            .expect("execute"),
    );
    let id = started["background_process_id"]
        .as_str()
        .expect("id")
        .to_string();
    six_sleeping(&marker).await;

    let args = serde_json::json!({"process_id": id, "signal": "kill"});
    let stopped = json(
        &host
            .call("s", "process_signal", &args.to_string())
            .await
            .expect("kill"),
    );
    assert_eq!(stopped["running"], false, "{stopped}");
    assert!(
        wait_gone(&marker, Duration::from_secs(5)).await,
        "escaped the kill: {} sleeps",
        sleeps_with(&marker)
    );
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ending_the_scope_reaches_everything_its_commands_started() {
    let (host, _state) = real_host("default").await;
    let marker = marker();
    let seconds = format!("1{marker}");
    let args = serde_json::json!({"command": escaping(&seconds), "run_in_background": true});
    host.call("s", "execute", &args.to_string())
        .await
        .expect("execute");
    six_sleeping(&marker).await;
    host.end_scope("s").await;
    assert_eq!(
        sleeps_with(&marker),
        0,
        "end_scope returns once nothing is left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_host_with_sigkill_stops_everything_it_started() {
    let marker = marker();
    let seconds = format!("1{marker}");
    let state = tempfile::tempdir().expect("state dir");
    // A foreground call that is still waiting on its command when the host is killed.
    let args = serde_json::json!({"command": escaping(&seconds), "timeout": "5m"});
    let mut host = Command::new(toolhost_bin())
        .arg("--state-dir")
        .arg(state.path())
        .args(["--no-cache", "call", "execute", &args.to_string()])
        .env("TOOLHOST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("run toolhost");
    six_sleeping(&marker).await;
    host.kill().expect("SIGKILL the host");
    host.wait().expect("reap the host");
    assert!(
        wait_gone(&marker, Duration::from_secs(10)).await,
        "outlived the host: {} sleeps",
        sleeps_with(&marker)
    );
}

/// The host's keepers prepared ahead (`toolhost-keeper --ready`): its children whose command
/// line starts so.
fn ready_keepers_of(host: u32) -> Vec<u32> {
    toolhost_e2e::processes_with("toolhost-keeper --ready")
        .into_iter()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                    .is_some_and(|parent| parent == host.to_string())
            })
        })
        .collect()
}

/// A keeper prepared ahead for the next command (made after the first confined start of a
/// server: a one-shot `toolhost call` prepares none) is gone with the host killed by
/// `SIGKILL`, like every keeper that ran a command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_host_with_sigkill_ends_its_keepers_prepared_ahead() {
    use std::io::Write;
    let marker = marker();
    let seconds = format!("1{marker}");
    let state = tempfile::tempdir().expect("state dir");
    let args = serde_json::json!({"command": format!("sleep {seconds}"), "timeout": "5m"});
    let mut host = Command::new(toolhost_bin())
        .arg("--state-dir")
        .arg(state.path())
        .args(["--no-cache", "serve"])
        .env("TOOLHOST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("run toolhost serve");
    let requests = [
        serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "escapes", "version": "0"}}}),
        serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "execute", "arguments": args}}),
    ];
    let mut stdin = host.stdin.take().expect("stdin");
    for request in requests {
        writeln!(stdin, "{request}").expect("a request");
    }
    let pid = host.id();
    let prepared = toolhost_e2e::eventually(Duration::from_secs(10), || {
        sleeps_with(&marker) == 1 && !ready_keepers_of(pid).is_empty()
    })
    .await;
    assert!(prepared, "no keeper was prepared ahead");
    let keepers = ready_keepers_of(pid);
    host.kill().expect("SIGKILL the host");
    drop(stdin);
    host.wait().expect("reap the host");
    let gone = toolhost_e2e::eventually(Duration::from_secs(10), || {
        // Gone, or a zombie for its new parent to reap.
        keepers.iter().all(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
                stat.rsplit_once(')')
                    .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
            })
        })
    })
    .await;
    assert!(
        gone,
        "keepers prepared ahead outlived the host: {keepers:?}"
    );
    assert!(wait_gone(&marker, Duration::from_secs(10)).await);
}
