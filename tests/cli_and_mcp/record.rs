//! The record of commands: every command that ends is a JSON line in the record's file, with
//! who asked for it (the plugin, and over HTTP the principal), its secrets redacted; `toolhost
//! log` reads it back and filters it; `--record off` keeps none.

use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use toolhost_e2e::http_session::*;
use toolhost_e2e::{shared_writable, toolhost_bin};

use super::mcp_http::{request_2026_as, tool_call};

fn toolhost(record: &Path, args: &[&str]) -> std::process::Output {
    Command::new(toolhost_bin())
        .args(shared_writable())
        .arg("--record")
        .arg(record)
        .args(args)
        .env("TOOLHOST_LOG", "warn")
        .output()
        .expect("run toolhost")
}

fn lines(output: &std::process::Output) -> Vec<Value> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("not JSON: {line}")))
        .collect()
}

#[test]
fn every_command_is_on_the_record_and_toolhost_log_reads_it() {
    let dir = tempfile::tempdir().expect("dir");
    let record = dir.path().join("state").join("commands.jsonl");
    for command in [
        "echo recorded",
        "exit 3",
        "echo https://bob:hunter2@example.test/",
    ] {
        let arguments = json!({ "command": command }).to_string();
        let out = toolhost(&record, &["call", "execute", &arguments]);
        assert!(out.status.success(), "{out:?}");
    }
    let mode = std::fs::metadata(&record)
        .expect("the record")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the record is private");
    // A confined command cannot read the record, wherever it is.
    let arguments = json!({ "command": format!("cat {}", record.display()) }).to_string();
    let out = toolhost(&record, &["call", "execute", &arguments]);
    let result: Value = serde_json::from_slice(&out.stdout).expect("a result");
    assert_eq!(result["success"], false, "{result}");
    assert!(
        !result["output"]
            .as_str()
            .unwrap_or_default()
            .contains("echo recorded"),
        "{result}"
    );

    let all = lines(&toolhost(&record, &["log", "--json"]));
    assert_eq!(all.len(), 4, "{all:?}");
    for line in &all[..3] {
        assert_eq!(line["scope"], "cli", "{line}");
        assert_eq!(line["plugin"], "default", "{line}");
        assert!(line["principal"].is_null(), "{line}");
        assert!(
            line["ended_ms"].as_u64() >= line["started_ms"].as_u64(),
            "{line}"
        );
        assert!(
            line["workdir"].as_str().is_some_and(|w| w.starts_with('/')),
            "{line}"
        );
    }
    assert_eq!(all[0]["command"], "echo recorded");
    assert_eq!(all[0]["exit_code"], 0);
    assert_eq!(all[1]["exit_code"], 3);
    assert_eq!(
        all[2]["command"], "echo https://bob:[secret: url-password]@example.test/",
        "a secret in a command line is redacted"
    );
    let text = std::fs::read_to_string(&record).expect("read");
    assert!(!text.contains("hunter2"), "{text}");

    let failed = lines(&toolhost(&record, &["log", "--json", "--failed"]));
    assert_eq!(failed.len(), 2, "{failed:?}");
    assert_eq!(failed[0]["command"], "exit 3");
    assert!(
        failed[1]["refusals"]
            .as_array()
            .is_some_and(|r| !r.is_empty()),
        "the refused read is on the record with its refusal: {}",
        failed[1]
    );
    let zero = lines(&toolhost(&record, &["log", "--json", "--exit", "0"]));
    assert_eq!(zero.len(), 2, "{zero:?}");
    let other = lines(&toolhost(&record, &["log", "--json", "--scope", "other"]));
    assert!(other.is_empty(), "{other:?}");

    let people = toolhost(&record, &["log"]);
    let people = String::from_utf8_lossy(&people.stdout);
    assert!(
        people
            .lines()
            .nth(1)
            .is_some_and(|l| l.contains("  cli  default  exit 3  ") && l.ends_with("exit 3")),
        "{people}"
    );

    let off = dir.path().join("off.jsonl");
    let out = Command::new(toolhost_bin())
        .args(shared_writable())
        .args([
            "--record",
            "off",
            "call",
            "execute",
            r#"{"command":"true"}"#,
        ])
        .output()
        .expect("run toolhost");
    assert!(out.status.success(), "{out:?}");
    assert!(!off.exists());
}

/// Over HTTP the record names the principal whose bearer token made the call.
#[tokio::test]
async fn an_http_call_is_recorded_with_its_principal() {
    const ALICE: &str = "alice-token-0123456789";
    let (_tokens, path) = token_file(&[("alice", ALICE)]);
    let dir = tempfile::tempdir().expect("dir");
    let record = dir.path().join("commands.jsonl");
    let record_arg = record.display().to_string();
    let server = HttpServer::start(&["--token-file", &path, "--record", &record_arg]).await;
    let (_, answer) = request_2026_as(
        &server,
        ALICE,
        None,
        false,
        "tools/call",
        tool_call("execute", json!({"command": "echo over http"})),
    )
    .await;
    assert!(answer.to_string().contains("over http"), "{answer}");
    // The line is written as the command's monitor finishes: wait for it.
    let deadline = Instant::now() + Duration::from_secs(10);
    let line = loop {
        let text = std::fs::read_to_string(&record).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| l.contains("echo over http")) {
            break serde_json::from_str::<Value>(line).expect("a JSON line");
        }
        assert!(
            Instant::now() < deadline,
            "no record of the command: {text}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(line["principal"], "alice", "{line}");
    assert_eq!(line["plugin"], "default", "{line}");
    assert_eq!(line["exit_code"], 0, "{line}");
}
