//! Results that carry more than JSON text, and what a tool reports while a call runs (WIT
//! 0.4.0): the conformance fixture's content items, progress and log lines reach the caller in
//! order, and a hostile guest's flood of either is bounded.

use std::sync::{Arc, Mutex};
use toolhost::testing::FakeProcesses;
use toolhost::{CallError, CallOptions, ContentItem, LogLevel, Progress, ResourceBody, ToolLog};
use toolhost_e2e::{conformance_tools_component, fake_host, hostile_component, json, plugin_dir};

/// Options whose sinks record every progress update and log line.
/// What a recording sink got.
type Recorded<T> = Arc<Mutex<Vec<T>>>;

fn recording() -> (CallOptions, Recorded<Progress>, Recorded<ToolLog>) {
    let progress = Arc::new(Mutex::new(Vec::new()));
    let logs = Arc::new(Mutex::new(Vec::new()));
    let (p, l) = (progress.clone(), logs.clone());
    let options = CallOptions {
        progress: Some(Arc::new(move |update| p.lock().unwrap().push(update))),
        log: Some(Arc::new(move |line| l.lock().unwrap().push(line))),
        ..CallOptions::default()
    };
    (options, progress, logs)
}

#[tokio::test]
async fn a_plugins_content_items_reach_the_caller_in_order() {
    let dir = plugin_dir(&conformance_tools_component(), "fixture", None);
    let host = fake_host(dir.path(), FakeProcesses::new()).await;
    let output = host
        .call("s", "test_multiple_content_types", "{}")
        .output()
        .await
        .expect("a result");
    assert_eq!(output.text, "", "the result is its content alone");
    let [text, image, resource] = output.content.as_slice() else {
        panic!("three items: {:?}", output.content);
    };
    assert_eq!(
        text,
        &ContentItem::Text("Multiple content types test:".into())
    );
    let ContentItem::Image { mime_type, data } = image else {
        panic!("an image: {image:?}");
    };
    assert_eq!(mime_type, "image/png");
    assert!(data.starts_with(b"\x89PNG\r\n\x1a\n"), "PNG bytes");
    assert_eq!(
        resource,
        &ContentItem::Resource {
            uri: "test://mixed-content-resource".into(),
            mime_type: Some("application/json".into()),
            body: ResourceBody::Text(r#"{"test":"data","value":123}"#.into()),
        }
    );
    let error = host
        .call("s", "test_error_handling", "{}")
        .await
        .expect_err("a tool error");
    assert!(
        matches!(&error, CallError::Tool(m) if m.contains("intentionally")),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_tools_progress_and_log_lines_reach_the_callers_sinks() {
    let dir = plugin_dir(&conformance_tools_component(), "fixture", None);
    let host = fake_host(dir.path(), FakeProcesses::new()).await;
    let (options, progress, logs) = recording();
    host.call("s", "test_tool_with_progress", "{}")
        .options(options.clone())
        .output()
        .await
        .expect("a result");
    let updates: Vec<(f64, Option<f64>)> = progress
        .lock()
        .unwrap()
        .iter()
        .map(|u| (u.progress, u.total))
        .collect();
    assert_eq!(
        updates,
        [
            (0.0, Some(100.0)),
            (50.0, Some(100.0)),
            (100.0, Some(100.0))
        ]
    );

    host.call("s", "test_tool_with_logging", "{}")
        .options(options)
        .output()
        .await
        .expect("a result");
    let lines: Vec<(String, LogLevel, String)> = logs
        .lock()
        .unwrap()
        .iter()
        .map(|l| (l.plugin.clone(), l.level, l.message.clone()))
        .collect();
    let expected: Vec<(String, LogLevel, String)> = [
        "Tool execution started",
        "Tool processing data",
        "Tool execution completed",
    ]
    .iter()
    .map(|m| ("fixture".to_string(), LogLevel::Info, m.to_string()))
    .collect();
    assert_eq!(lines, expected);
}

const HOSTILE: &str = "[grants]\nprocess = true\n";

#[tokio::test]
async fn floods_of_content_items_and_reports_are_bounded() {
    let dir = plugin_dir(&hostile_component(), "hostile", Some(HOSTILE));
    let host = fake_host(dir.path(), FakeProcesses::new()).await;
    let error = host
        .call("s", "crowd", "{}")
        .await
        .expect_err("65 items are over the bound");
    assert!(
        matches!(&error, CallError::Tool(m) if m.contains("65 content items") && m.contains("64")),
        "{error:?}"
    );

    let (options, progress, logs) = recording();
    let output = host
        .call("s", "reporter", "{}")
        .options(options)
        .output()
        .await
        .expect("the call itself succeeds");
    assert_eq!(json(&output.text)["reported"], true);
    let progress = progress.lock().unwrap().clone();
    // 1000 reports per call, the one that fell back among them (it counts, and is dropped).
    assert_eq!(progress.len(), 999, "at most 1000 reports per call");
    assert!(
        progress.windows(2).all(|w| w[0].progress < w[1].progress),
        "the update that fell back was dropped"
    );
    assert!(
        progress
            .iter()
            .all(|u| u.message.as_ref().is_some_and(|m| m.len() == 4096)),
        "messages are cut at 4096 bytes"
    );
    let logs = logs.lock().unwrap().clone();
    assert_eq!(logs.len(), 1000, "at most 1000 log lines per call");
    assert!(logs.iter().all(|l| l.message.len() == 4096));
    // The host serves on.
    let ok = host.call("s", "scope", "{}").await.expect("healthy call");
    assert_eq!(json(&ok)["scope"], "s");
}

/// A 0.4.0 policy gets what the confinement refused a command, typed, with the note the
/// output ends with: here the network gate's refusal, scripted on the fake.
#[tokio::test]
async fn a_policy_gets_the_typed_refusals_of_a_command() {
    let dir = plugin_dir(&hostile_component(), "hostile", Some(HOSTILE));
    let fake = FakeProcesses::new();
    fake.push(
        toolhost::testing::Script::exits(7)
            .output("curl: (56) CONNECT tunnel failed\n")
            .refused(toolhost::sandbox::Refusal::Network {
                refused: vec![toolhost::sandbox::RefusedHost {
                    host: "example.com:443".into(),
                    reason: "not in the allow-list".into(),
                    askable: false,
                }],
                allowed: "github.com".into(),
            }),
    );
    fake.push(toolhost::testing::Script::exits(0));
    let host = fake_host(dir.path(), fake).await;
    let result = json(
        &host
            .call("s", "refusals", r#"{"command":"curl https://example.com"}"#)
            .await
            .expect("a result"),
    );
    assert_eq!(result["exit_code"], 7, "{result}");
    let refusal = &result["refusals"][0];
    assert_eq!(refusal["reason"]["kind"], "network", "{result}");
    assert_eq!(refusal["reason"]["hosts"][0], "example.com:443", "{result}");
    assert_eq!(refusal["reason"]["allowed"], "github.com", "{result}");
    let note = refusal["note"].as_str().expect("a note");
    assert!(
        note.contains("example.com:443 (not in the allow-list)"),
        "{note}"
    );
    assert!(
        result["text"]
            .as_str()
            .is_some_and(|t| t.ends_with(&format!("{note}\n"))),
        "{result}"
    );

    // A command nothing refused has none.
    let clean = json(
        &host
            .call("s", "refusals", r#"{"command":"true"}"#)
            .await
            .expect("a result"),
    );
    assert_eq!(clean["refusals"], serde_json::json!([]), "{clean}");
}
