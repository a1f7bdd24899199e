//! Content items, progress and log lines of a plugin (WIT 0.4.0) as an MCP client and a shell
//! user get them: the conformance fixture plugin, loaded with `--plugins`.

use serde_json::{Value, json};
use std::process::Command;
use std::time::Duration;
use toolhost_e2e::mcp_client::*;
use toolhost_e2e::{conformance_tools_component, plugin_dir, shared_writable, toolhost_bin};

/// The notifications queued so far.
async fn drain(client: &mut StdioClient) -> Vec<Value> {
    let mut got = Vec::new();
    while let Some(message) = client.next_notification(Duration::ZERO).await {
        got.push(message);
    }
    got
}

fn of_method<'a>(messages: &'a [Value], method: &str) -> Vec<&'a Value> {
    messages.iter().filter(|m| m["method"] == method).collect()
}

#[tokio::test]
async fn content_items_progress_and_log_lines_reach_a_2025_client() {
    let dir = plugin_dir(&conformance_tools_component(), "fixture", None);
    let plugins = dir.path().display().to_string();
    let mut client = StdioClient::start(&["--policy", "none", "--plugins", &plugins]).await;

    let result = client
        .call_tool("test_multiple_content_types", json!({}))
        .await;
    let content = result["content"].as_array().expect("content");
    let kinds: Vec<&str> = content.iter().filter_map(|c| c["type"].as_str()).collect();
    assert_eq!(kinds, ["text", "image", "resource"], "{result}");
    assert_eq!(content[1]["mimeType"], "image/png");
    // Base64 of a PNG's signature.
    assert!(
        content[1]["data"]
            .as_str()
            .is_some_and(|d| d.starts_with("iVBORw0KGgo"))
    );
    assert_eq!(
        content[2]["resource"]["uri"],
        "test://mixed-content-resource"
    );
    assert_eq!(
        content[2]["resource"]["text"],
        r#"{"test":"data","value":123}"#
    );

    let answer = client
        .request(
            "tools/call",
            json!({"name": "test_tool_with_progress", "arguments": {}, "_meta": {"progressToken": "p1"}}),
        )
        .await;
    assert!(answer.get("result").is_some(), "{answer}");
    let messages = drain(&mut client).await;
    let progress: Vec<(f64, f64)> = of_method(&messages, "notifications/progress")
        .iter()
        .map(|m| {
            assert_eq!(m["params"]["progressToken"], "p1", "{m}");
            (
                m["params"]["progress"].as_f64().unwrap_or(-1.0),
                m["params"]["total"].as_f64().unwrap_or(-1.0),
            )
        })
        .collect();
    assert_eq!(
        progress,
        [(0.0, 100.0), (50.0, 100.0), (100.0, 100.0)],
        "sent before the answer"
    );

    // No log line before the client sets a level; after, each at its level, named by plugin.
    client.call_tool("test_tool_with_logging", json!({})).await;
    let quiet = drain(&mut client).await;
    assert!(
        of_method(&quiet, "notifications/message").is_empty(),
        "{quiet:?}"
    );
    let set = client
        .request("logging/setLevel", json!({"level": "info"}))
        .await;
    assert!(set.get("result").is_some(), "{set}");
    client.call_tool("test_tool_with_logging", json!({})).await;
    let messages = drain(&mut client).await;
    let lines: Vec<(&str, &str, &str)> = of_method(&messages, "notifications/message")
        .iter()
        .filter(|m| m["params"]["logger"] == "fixture")
        .map(|m| {
            (
                m["params"]["level"].as_str().unwrap_or(""),
                m["params"]["logger"].as_str().unwrap_or(""),
                m["params"]["data"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        lines,
        [
            ("info", "fixture", "Tool execution started"),
            ("info", "fixture", "Tool processing data"),
            ("info", "fixture", "Tool execution completed"),
        ],
        "{messages:?}"
    );
    // Above the level: none.
    client
        .request("logging/setLevel", json!({"level": "warning"}))
        .await;
    client.call_tool("test_tool_with_logging", json!({})).await;
    let messages = drain(&mut client).await;
    assert!(
        !of_method(&messages, "notifications/message")
            .iter()
            .any(|m| m["params"]["logger"] == "fixture"),
        "{messages:?}"
    );
}

/// Revision 2026-07-28 has no `logging/setLevel`: a request asks for log lines in its `_meta`.
#[tokio::test]
async fn a_2026_request_gets_log_lines_only_when_its_meta_asks() {
    let dir = plugin_dir(&conformance_tools_component(), "fixture", None);
    let plugins = dir.path().display().to_string();
    let mut client = StdioClient::spawn(&["--policy", "none", "--plugins", &plugins]);
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "toolhost-e2e", "version": "0"}
    });
    let answer = client
        .request(
            "tools/call",
            json!({"name": "test_logging_tool", "arguments": {}, "_meta": meta}),
        )
        .await;
    assert!(answer.get("result").is_some(), "{answer}");
    let quiet = drain(&mut client).await;
    assert!(
        of_method(&quiet, "notifications/message").is_empty(),
        "{quiet:?}"
    );

    let mut asking = meta.clone();
    asking["io.modelcontextprotocol/logLevel"] = json!("debug");
    let answer = client
        .request(
            "tools/call",
            json!({"name": "test_logging_tool", "arguments": {}, "_meta": asking}),
        )
        .await;
    assert!(answer.get("result").is_some(), "{answer}");
    let messages = drain(&mut client).await;
    let lines = of_method(&messages, "notifications/message");
    assert_eq!(lines.len(), 3, "{messages:?}");
    assert_eq!(lines[0]["params"]["data"], "Tool execution started");
}

#[test]
fn toolhost_call_prints_text_saves_bytes_and_reports_on_stderr() {
    let dir = plugin_dir(&conformance_tools_component(), "fixture", None);
    let plugins = dir.path().display().to_string();
    let run = |tool: &str| {
        Command::new(toolhost_bin())
            .args(shared_writable())
            .args(["--policy", "none", "--plugins", &plugins, "call", tool])
            .env("TOOLHOST_LOG", "warn")
            .output()
            .expect("run toolhost")
    };
    let out = run("test_multiple_content_types");
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "Multiple content types test:", "{stdout}");
    let saved = lines[1]
        .strip_prefix("[image/png saved to ")
        .and_then(|rest| rest.strip_suffix(']'))
        .unwrap_or_else(|| panic!("the image is saved: {stdout}"));
    let png = std::fs::read(saved).expect("the saved image");
    assert!(png.starts_with(b"\x89PNG"), "the image's bytes");
    assert_eq!(
        lines[2],
        "[resource test://mixed-content-resource (application/json)]"
    );
    assert_eq!(lines[3], r#"{"test":"data","value":123}"#);
    if let Some(parent) = std::path::Path::new(saved).parent() {
        let _ = std::fs::remove_dir_all(parent);
    }

    let out = run("test_tool_with_progress");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "Progress test completed.\n"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "toolhost: progress 0/100\ntoolhost: progress 50/100\ntoolhost: progress 100/100\n"
        ),
        "{stderr}"
    );
    let out = run("test_tool_with_logging");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("toolhost: [info] fixture: Tool processing data"),
        "{stderr}"
    );
}
