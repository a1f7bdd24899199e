//! `toolhost serve` over stdio, driven by a hand-written JSON-RPC client: the handshake, tool
//! listing, calls and their result shapes, errors, parallelism, progress, cancellation,
//! tool-list changes, and no process outliving its session.

use serde_json::{Value, json};
use std::time::{Duration, Instant};
use toolhost_e2e::mcp_client::*;
use toolhost_e2e::{Gate, Stoppable, marker, rendezvous_command, wait_gone, wait_present};

#[tokio::test]
async fn initialize_and_list_tools() {
    let mut client = StdioClient::spawn(&[]);
    let init = client.initialize().await;
    let result = &init["result"];
    assert_eq!(result["protocolVersion"], PROTOCOL_VERSION, "{init}");
    assert_eq!(result["serverInfo"]["name"], "toolhost", "{init}");
    assert_eq!(
        result["capabilities"]["tools"]["listChanged"], true,
        "{init}"
    );

    let list = client.request("tools/list", json!({})).await;
    let tools = list["result"]["tools"].as_array().expect("tools array");
    let mut names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "execute",
            "process_input",
            "process_list",
            "process_output",
            "process_signal"
        ]
    );
    for tool in tools {
        assert_eq!(tool["inputSchema"]["type"], "object", "{tool}");
        assert!(
            tool["description"].as_str().is_some_and(|d| !d.is_empty()),
            "{tool}"
        );
    }
    let execute = tools
        .iter()
        .find(|t| t["name"] == "execute")
        .expect("execute");
    assert_eq!(execute["inputSchema"]["required"], json!(["command"]));
    // Titles and behaviour hints, as the default policy states them.
    let hints = |name: &str| {
        let tool = tools
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("no {name}"));
        assert!(
            tool["title"].as_str().is_some_and(|t| !t.is_empty()),
            "{tool}"
        );
        let a = &tool["annotations"];
        [
            &a["readOnlyHint"],
            &a["destructiveHint"],
            &a["idempotentHint"],
            &a["openWorldHint"],
        ]
        .map(|hint| hint.as_bool())
    };
    let (yes, no) = (Some(true), Some(false));
    assert_eq!(hints("execute"), [no, yes, no, yes]);
    assert_eq!(hints("process_input"), [no, yes, no, yes]);
    assert_eq!(hints("process_signal"), [no, yes, no, no]);
    assert_eq!(hints("process_output"), [yes, no, no, no]);
    assert_eq!(hints("process_list"), [yes, no, yes, no]);
}

#[tokio::test]
async fn execute_returns_text_and_structured_content() {
    let mut client = StdioClient::start(&[]).await;
    let result = client
        .call_tool("execute", json!({"command": "echo hello"}))
        .await;
    let output = structured(&result);
    assert_eq!(output["exit_code"], 0, "{output}");
    assert_eq!(output["success"], true, "{output}");
    assert_eq!(output["output"].as_str().map(str::trim), Some("hello"));

    // A command that ran and failed is a result, not a tool error.
    let failed = client
        .call_tool("execute", json!({"command": "echo oops >&2; exit 3"}))
        .await;
    let failed = structured(&failed);
    assert_eq!(failed["exit_code"], 3, "{failed}");
    assert_eq!(failed["success"], false, "{failed}");
    assert!(
        failed["output"]
            .as_str()
            .is_some_and(|o| o.contains("oops"))
    );
}

#[tokio::test]
async fn bad_arguments_are_tool_errors() {
    let mut client = StdioClient::start(&[]).await;
    let unknown = client.call_tool("execute", json!({"bogus": 1})).await;
    assert!(tool_error(&unknown).contains("bogus"), "{unknown}");
    let missing = client.call_tool("execute", json!({})).await;
    assert!(tool_error(&missing).contains("command"), "{missing}");
    let no_such_process = client
        .call_tool("process_output", json!({"process_id": "nope"}))
        .await;
    assert!(!tool_error(&no_such_process).is_empty());
}

#[tokio::test]
async fn unknown_tool_is_a_protocol_error() {
    let mut client = StdioClient::start(&[]).await;
    let response = client
        .request(
            "tools/call",
            json!({"name": "no_such_tool", "arguments": {}}),
        )
        .await;
    let error = response
        .get("error")
        .unwrap_or_else(|| panic!("expected a JSON-RPC error: {response}"));
    assert_eq!(error["code"], -32602, "{response}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.contains("no_such_tool"), "{message}");
    assert!(
        message.contains("execute"),
        "names the available tools: {message}"
    );
}

/// The error code of an answer, with the answer in the panic message when it is none.
fn error_code(answer: &Value) -> i64 {
    answer["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("expected an error answer: {answer}"))
}

#[tokio::test]
async fn malformed_requests_get_their_proper_errors_and_the_session_goes_on() {
    let mut client = StdioClient::start(&[]).await;
    let mut deep = br#"{"jsonrpc":"2.0","id":108,"method":"ping","params":"#.to_vec();
    deep.extend(std::iter::repeat_n(b'[', 10_000));
    deep.extend(std::iter::repeat_n(b']', 10_000));
    deep.push(b'}');
    let cases: Vec<(i64, Vec<u8>, i64)> = vec![
        (101, br#"{"jsonrpc":"2.0","id":101,"method":"tools/call","params":{"name":"execute","arguments":"echo hi"}}"#.to_vec(), -32602),
        (102, br#"{"jsonrpc":"2.0","id":102,"method":"tools/call","params":{"arguments":{}}}"#.to_vec(), -32602),
        (103, br#"{"jsonrpc":"2.0","id":103,"method":"tools/call","params":{"name":5}}"#.to_vec(), -32602),
        (104, br#"{"jsonrpc":"2.0","id":104,"method":"#.to_vec(), -32700),
        (105, b"{\"jsonrpc\":\"2.0\",\"id\":105,\"method\":\"tools/call\",\"params\":{\"name\":\"execute\",\"arguments\":{\"command\":\"echo \xff\"}}}".to_vec(), -32700),
        (106, b"{\"jsonrpc\":\"2.0\",\"id\":106,\xff\"method\":\"ping\"}".to_vec(), -32700),
        (107, br#"{"jsonrpc":"2.0","id":107,"method":"tools/call","params":{"name":"execute","arguments":{"command":"echo \ud800"}}}"#.to_vec(), -32700),
        (108, deep, -32700),
        (109, br#"{"jsonrpc":"2.0","id":109,"method":"ping"}{"jsonrpc":"2.0","id":110,"method":"ping"}"#.to_vec(), -32700),
        (111, br#"[{"jsonrpc":"2.0","id":111,"method":"ping"}]"#.to_vec(), -32600),
        (112, br#"{"jsonrpc":"2.0","id":112,"method":"no/such/method"}"#.to_vec(), -32601),
        (113, br#"{"jsonrpc":"2.0","id":113,"method":"tools/call","params":"execute"}"#.to_vec(), -32602),
        // The id shows only after the damage.
        (114, br#"{"jsonrpc":"2.0","method":"tools/list",,"id":114}"#.to_vec(), -32700),
    ];
    // Line 109 holds two requests: both are answered, so wait for both before sending it.
    let second = client.expect_answer(110);
    for (id, line, expected) in cases {
        let answer = await_response(client.raw_request(id, &line).await).await;
        assert_eq!(error_code(&answer), expected, "line {id}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.len() > 12, "line {id} says what is wrong: {answer}");
    }
    // The second request on the line of 109 is answered too.
    let second = await_response(second).await;
    assert_eq!(error_code(&second), -32700, "{second}");
    // And the session goes on.
    let result = client
        .call_tool("execute", json!({"command": "echo still serving"}))
        .await;
    assert!(
        structured(&result)["output"]
            .as_str()
            .unwrap_or_default()
            .contains("still serving"),
        "{result}"
    );
}

#[tokio::test]
async fn a_reused_pending_id_is_refused_without_losing_the_first_answer() {
    let mut client = StdioClient::start(&[]).await;
    let dir = toolhost_e2e::shared_tempdir();
    let script = format!("{}; echo first", rendezvous_command(dir.path(), 2));
    let first = client
        .raw_request(
            500,
            json!({"jsonrpc": "2.0", "id": 500, "method": "tools/call",
                   "params": {"name": "execute", "arguments": {"command": script}}})
            .to_string()
            .as_bytes(),
        )
        .await;
    // The reuse arrives while the first call is still running: it waits for a second file.
    let refusal = await_response(
        client
            .raw_request(
                500,
                br#"{"jsonrpc":"2.0","id":500,"method":"tools/call","params":{"name":"execute","arguments":{"command":"echo second"}}}"#,
            )
            .await,
    )
    .await;
    drop(first);
    assert_eq!(error_code(&refusal), -32600, "{refusal}");
    let later = client.expect_answer(500);
    std::fs::write(dir.path().join("go"), "").expect("release the first call");
    let answer = await_response(later).await;
    let text = structured(&answer["result"])["output"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        text.contains("first"),
        "the first call keeps its answer: {answer}"
    );
}

#[tokio::test]
async fn background_process_output_and_signal() {
    let mut client = StdioClient::start(&[]).await;
    let started = client
        .call_tool(
            "execute",
            json!({"command": "echo started; sleep 30", "run_in_background": true}),
        )
        .await;
    let started = structured(&started);
    let id = started["background_process_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no background_process_id: {started}"))
        .to_string();

    let listed = structured(&client.call_tool("process_list", json!({})).await);
    assert!(listed.to_string().contains(&id), "{listed}");

    // Poll until the command has printed (a generous bound, not a guessed time).
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut output = Value::Null;
    while Instant::now() < deadline {
        output = structured(
            &client
                .call_tool("process_output", json!({"process_id": id}))
                .await,
        );
        if output.to_string().contains("started") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(output.to_string().contains("started"), "{output}");
    assert_eq!(output["running"], true, "{output}");

    let signalled = client
        .call_tool(
            "process_signal",
            json!({"process_id": id, "signal": "kill"}),
        )
        .await;
    structured(&signalled);
    let after = structured(
        &client
            .call_tool("process_output", json!({"process_id": id, "wait": "5s"}))
            .await,
    );
    assert_eq!(after["running"], false, "{after}");
}

#[tokio::test]
async fn concurrent_calls_run_in_parallel() {
    let mut client = StdioClient::start(&[]).await;
    // Each command ends only once all six run together; calls served one after another would
    // each time out instead.
    let meeting = toolhost_e2e::shared_tempdir();
    let command = rendezvous_command(meeting.path(), 6);
    let mut waiting = Vec::new();
    for _ in 0..6 {
        let (_, rx) = client
            .start_request(
                "tools/call",
                json!({"name": "execute", "arguments": {"command": command, "timeout": "20s"}}),
            )
            .await;
        waiting.push(rx);
    }
    for rx in waiting {
        let response = await_response(rx).await;
        let result = structured(&response["result"]);
        assert_eq!(result["success"], true, "calls are serialized: {result}");
        assert_eq!(result["output"], "met\n", "{result}");
    }
}

#[tokio::test]
async fn progress_notifications_carry_the_latest_output() {
    let mut client = StdioClient::start(&[]).await;
    let (_, rx) = client
        .start_request(
            "tools/call",
            json!({
                "name": "execute",
                "arguments": {"command": "for i in 1 2 3; do echo line$i; sleep 1; done"},
                "_meta": {"progressToken": "progress-1"}
            }),
        )
        .await;
    let mut updates = Vec::new();
    while let Some(message) = client.next_notification(Duration::from_secs(5)).await {
        if message["method"] == "notifications/progress" {
            updates.push(message);
            if updates.len() >= 2 {
                break;
            }
        }
    }
    let response = await_response(rx).await;
    structured(&response["result"]);
    assert!(!updates.is_empty(), "no progress notification");
    for update in &updates {
        assert_eq!(update["params"]["progressToken"], "progress-1", "{update}");
    }
    assert!(
        updates.iter().any(|u| u["params"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("line"))),
        "progress messages hold output lines: {updates:?}"
    );
}

#[tokio::test]
async fn a_silent_command_sends_a_heartbeat_at_least_every_5_seconds() {
    let mut client = StdioClient::start(&[]).await;
    let (_, rx) = client
        .start_request(
            "tools/call",
            json!({
                "name": "execute",
                "arguments": {"command": "echo started; sleep 11; echo done", "timeout": "60s"},
                "_meta": {"progressToken": 7}
            }),
        )
        .await;
    let mut heartbeats = Vec::new();
    let mut last = Instant::now();
    // Each update must come within 5 s of the one before (1 s of slack for a loaded machine).
    while let Some(message) = client.next_notification(Duration::from_secs(6)).await {
        if message["method"] == "notifications/progress" {
            last = Instant::now();
            let text = message["params"]["message"].as_str().unwrap_or_default();
            if text.contains("still running") {
                heartbeats.push(text.to_owned());
                if heartbeats.len() == 2 {
                    break;
                }
            }
        }
    }
    assert!(
        heartbeats.len() == 2,
        "two heartbeats during 11 silent seconds, none more than 6 s after the update before \
         ({:?} since the last): {heartbeats:?}",
        last.elapsed()
    );
    assert!(
        heartbeats[0].contains("8 bytes of output") && heartbeats[0].contains("started"),
        "a heartbeat says how much output there is and the last line: {heartbeats:?}"
    );
    let response = await_response(rx).await;
    assert_eq!(structured(&response["result"])["output"], "started\ndone\n");
}

#[tokio::test]
async fn no_progress_without_a_token() {
    let mut client = StdioClient::start(&[]).await;
    let result = client
        .call_tool("execute", json!({"command": "echo a; sleep 2; echo b"}))
        .await;
    structured(&result);
    while let Some(message) = client.next_notification(Duration::from_millis(200)).await {
        assert_ne!(message["method"], "notifications/progress", "{message}");
    }
}

#[tokio::test]
async fn cancellation_stops_a_waiting_call_promptly() {
    // The guarded policy kills a foreground command when its wait ends: if cancelling ends
    // the wait, the process disappears long before the 60s timeout.
    let mut client = StdioClient::start(&["--policy", "guarded"]).await;
    let mark = marker();
    let command = format!("sleep 300.{mark}");
    let (id, _rx) = client
        .start_request(
            "tools/call",
            json!({"name": "execute", "arguments": {"command": command, "timeout": "60s"}}),
        )
        .await;
    assert!(
        wait_present(&command, Duration::from_secs(10)).await,
        "the command started"
    );
    let cancelled_at = Instant::now();
    client
        .notify(
            "notifications/cancelled",
            json!({"requestId": id, "reason": "test"}),
        )
        .await;
    assert!(
        wait_gone(&command, Duration::from_secs(5)).await,
        "the cancelled call still waits on its process"
    );
    let took = cancelled_at.elapsed();
    assert!(took < Duration::from_secs(5), "{took:?}");
    // The session goes on.
    let result = client
        .call_tool("execute", json!({"command": "echo still here"}))
        .await;
    assert!(structured(&result).to_string().contains("still here"));
}

/// A cancelled foreground call leaves no process behind, under both bundled policies: the
/// policy learns that the call was cancelled (not timed out) and kills what it started.
#[tokio::test]
async fn a_cancelled_foreground_call_leaves_no_process() {
    for policy in ["default", "guarded"] {
        let mut client = StdioClient::start(&["--policy", policy]).await;
        let stoppable = Stoppable::new();
        let (id, _rx) = client
            .start_request(
                "tools/call",
                json!({"name": "execute", "arguments": {"command": stoppable.command(), "timeout": "60s"}}),
            )
            .await;
        stoppable.wait_ready(Duration::from_secs(20)).await;
        client
            .notify("notifications/cancelled", json!({"requestId": id}))
            .await;
        assert!(
            wait_gone(stoppable.marker(), Duration::from_secs(10)).await,
            "{policy}: the cancelled call's command still runs"
        );
        // Listed as ended (once its end is recorded), and the session goes on.
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut listed = structured(&client.call_tool("process_list", json!({})).await);
        while listed["processes"][0]["running"] != false && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
            listed = structured(&client.call_tool("process_list", json!({})).await);
        }
        assert_eq!(
            listed["processes"][0]["running"], false,
            "{policy}: {listed}"
        );
        let result = client
            .call_tool("execute", json!({"command": "echo still here"}))
            .await;
        assert!(structured(&result).to_string().contains("still here"));
        client.close_stdin();
        assert_eq!(client.wait_exit(Duration::from_secs(15)).await, Some(0));
    }
}

#[tokio::test]
async fn disconnect_terminates_the_sessions_processes() {
    let mut client = StdioClient::start(&[]).await;
    let stoppable = start_stoppable(&mut client).await;

    client.close_stdin();
    let code = client.wait_exit(Duration::from_secs(15)).await;
    assert_eq!(code, Some(0), "the server exits cleanly at stdin EOF");
    stoppable
        .stopped_by_the_host(Duration::from_secs(5))
        .await
        .expect("the server stops the session's processes");
}

#[tokio::test]
async fn sigterm_terminates_the_sessions_processes() {
    let mut client = StdioClient::start(&[]).await;
    let stoppable = start_stoppable(&mut client).await;

    let pid = client.child.id().expect("server pid");
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success());
    let code = client.wait_exit(Duration::from_secs(15)).await;
    assert!(code.is_some(), "the server exits on SIGTERM");
    stoppable
        .stopped_by_the_host(Duration::from_secs(5))
        .await
        .expect("the server stops the session's processes");
}

#[tokio::test]
async fn tool_list_changes_are_announced() {
    let dir = tempfile::tempdir().expect("dir");
    let plugins = dir.path().display().to_string();
    let mut client = StdioClient::start(&["--policy", "none", "--plugins", &plugins]).await;
    let before = client.request("tools/list", json!({})).await;
    assert_eq!(before["result"]["tools"], json!([]), "{before}");

    std::fs::write(dir.path().join("policy.toml"), "[grants]\nprocess = true\n").expect("manifest");
    let partial = dir.path().join(".policy.partial");
    std::fs::write(&partial, toolhost::bundled::DEFAULT.bytes).expect("component");
    std::fs::rename(&partial, dir.path().join("policy.wasm")).expect("install");

    let announced = client
        .wait_for("notifications/tools/list_changed", Duration::from_secs(15))
        .await;
    assert!(announced, "no notifications/tools/list_changed");
    let after = client.request("tools/list", json!({})).await;
    assert_eq!(
        after["result"]["tools"].as_array().map(Vec::len),
        Some(5),
        "{after}"
    );
}

/// Wait for the next `notifications/tools/list_changed`.
async fn list_changed(client: &mut StdioClient) {
    assert!(
        client
            .wait_for("notifications/tools/list_changed", Duration::from_secs(15))
            .await,
        "no notifications/tools/list_changed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swapping_policies_in_a_running_server_changes_behaviour() {
    let dir = tempfile::tempdir().expect("dir");
    let plugins = dir.path().display().to_string();
    let install = |bytes: &[u8]| {
        let partial = dir.path().join(".policy.partial");
        std::fs::write(&partial, bytes).expect("component");
        std::fs::rename(&partial, dir.path().join("policy.wasm")).expect("install");
    };
    std::fs::write(dir.path().join("policy.toml"), "[grants]\nprocess = true\n").expect("manifest");
    install(toolhost::bundled::DEFAULT.bytes);
    let mut client = StdioClient::start(&["--policy", "none", "--plugins", &plugins]).await;
    // Harmless either way: the device does not exist.
    let risky = json!({"command": "mkfs.ext4 /dev/toolhost-no-such-device"});

    let ran = client.call_tool("execute", risky.clone()).await;
    assert_ne!(ran["isError"], true, "default policy runs it: {ran}");

    install(toolhost::bundled::GUARDED.bytes);
    list_changed(&mut client).await;
    let refused = tool_error(&client.call_tool("execute", risky.clone()).await);
    assert!(refused.contains("make-filesystem"), "{refused}");

    install(toolhost::bundled::DEFAULT.bytes);
    list_changed(&mut client).await;
    let ran = client.call_tool("execute", risky).await;
    assert_ne!(ran["isError"], true, "default policy again: {ran}");
}

/// Start a [`Stoppable`] command in the background through `execute` and wait until it runs.
async fn start_stoppable(client: &mut StdioClient) -> Stoppable {
    let stoppable = Stoppable::new();
    let started = client
        .call_tool(
            "execute",
            json!({"command": stoppable.command(), "run_in_background": true}),
        )
        .await;
    structured(&started);
    stoppable.wait_ready(Duration::from_secs(20)).await;
    stoppable
}

/// A terminal session over MCP: `execute` with `tty` returns waiting for input, and
/// `process_input` answers a prompt and reads the next one; a bad key is a tool error.
#[tokio::test]
async fn process_input_drives_a_terminal_over_mcp() {
    let mut client = StdioClient::start(&[]).await;
    let started = structured(
        &client
            .call_tool(
                "execute",
                json!({"command": "while printf 'name? '; read n; do echo \"hi $n\"; done", "tty": true}),
            )
            .await,
    );
    assert_eq!(started["waiting_for_input"], true, "{started}");
    assert_eq!(started["output"], "name? ", "{started}");
    let id = started["background_process_id"]
        .as_str()
        .expect("id")
        .to_owned();
    let answered = structured(
        &client
            .call_tool(
                "process_input",
                json!({"process_id": id, "input": "ada\n", "until": "name? "}),
            )
            .await,
    );
    assert_eq!(answered["output"], "ada\nhi ada\nname? ", "{answered}");
    assert_eq!(answered["until_found"], true);
    let bad = client
        .call_tool(
            "process_input",
            json!({"process_id": id, "keys": ["Hyper-X"]}),
        )
        .await;
    assert_eq!(bad["isError"], true, "{bad}");
    assert!(bad.to_string().contains("unknown key name"), "{bad}");
    let stopped = structured(
        &client
            .call_tool(
                "process_input",
                json!({"process_id": id, "keys": ["Ctrl-C"], "wait": "10s"}),
            )
            .await,
    );
    assert_eq!(stopped["running"], false, "{stopped}");
}

#[tokio::test]
async fn cut_output_is_a_linked_resource_that_pages() {
    let mut client = StdioClient::start(&[]).await;
    let init = client.request("ping", json!({})).await;
    assert!(init.get("result").is_some());
    let result = client
        .call_tool("execute", json!({"command": "seq 1 300000"}))
        .await;
    let link = result["content"]
        .as_array()
        .and_then(|items| items.iter().find(|c| c["type"] == "resource_link"))
        .unwrap_or_else(|| panic!("a cut result links its full output: {result}"))
        .clone();
    let uri = link["uri"].as_str().expect("uri").to_owned();
    assert!(
        uri.starts_with("toolhost://process/") && uri.ends_with("/output"),
        "{uri}"
    );
    assert_eq!(link["mimeType"], "text/plain");
    assert!(
        link["size"].as_u64().is_some_and(|s| s > 1_000_000),
        "{link}"
    );

    let listed = client.request("resources/list", json!({})).await;
    let uris: Vec<&str> = listed["result"]["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .filter_map(|r| r["uri"].as_str())
        .collect();
    assert!(uris.contains(&uri.as_str()), "{listed}");
    let templates = client.request("resources/templates/list", json!({})).await;
    assert!(
        templates["result"]["resourceTemplates"][0]["uriTemplate"]
            .as_str()
            .is_some_and(|t| t.contains("{?offset,length,line,lines}")),
        "{templates}"
    );

    // The last two lines, by line range.
    let read = client
        .request(
            "resources/read",
            json!({"uri": format!("{uri}?line=299999&lines=2")}),
        )
        .await;
    assert_eq!(
        read["result"]["contents"][0]["text"], "299999\n300000\n",
        "{read}"
    );
    // A plain read is the first page, and says where the next one starts.
    let first = client.request("resources/read", json!({"uri": uri})).await;
    let contents = &first["result"]["contents"][0];
    assert!(
        contents["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("1\n2\n3\n")),
        "{first}"
    );
    assert!(
        contents["_meta"]["toolhost/next"]
            .as_str()
            .is_some_and(|n| n.contains("?offset=262144")),
        "{contents}"
    );

    // Unknown processes are not found; malformed URIs are invalid params.
    let missing = client
        .request(
            "resources/read",
            json!({"uri": "toolhost://process/nope/output"}),
        )
        .await;
    assert_eq!(missing["error"]["code"], -32002, "{missing}");
    // A URI of another scheme is not found either, and the error names it too.
    let elsewhere = client
        .request("resources/read", json!({"uri": "file:///etc/hostname"}))
        .await;
    assert_eq!(elsewhere["error"]["code"], -32002, "{elsewhere}");
    assert_eq!(
        elsewhere["error"]["data"]["uri"], "file:///etc/hostname",
        "{elsewhere}"
    );
    let malformed = client
        .request("resources/read", json!({"uri": format!("{uri}?offset=x")}))
        .await;
    assert_eq!(malformed["error"]["code"], -32602, "{malformed}");
}

#[tokio::test]
async fn host_log_lines_of_the_session_reach_a_client_that_set_a_level() {
    let dir = toolhost_e2e::plugin_dir(
        &toolhost_e2e::hostile_component(),
        "hostile",
        Some("[grants]\nprocess = true\n[limits]\ncpu_time = \"500ms\"\nwall_time = \"5s\"\n"),
    );
    let plugins = dir.path().display().to_string();
    let mut client = StdioClient::spawn(&["--policy", "none", "--plugins", &plugins]);
    let init = client.initialize().await;
    assert!(
        init["result"]["capabilities"]["logging"].is_object(),
        "the logging capability is declared: {init}"
    );
    // Before the client sets a level, nothing is sent.
    let quiet = client.call_tool("spin", json!({})).await;
    assert_eq!(quiet["isError"], true, "{quiet}");
    assert!(
        client
            .request("ping", json!({}))
            .await
            .get("result")
            .is_some()
    );
    while let Some(message) = client.next_notification(Duration::ZERO).await {
        assert_ne!(message["method"], "notifications/message", "{message}");
    }

    let set = client
        .request("logging/setLevel", json!({"level": "warning"}))
        .await;
    assert!(set.get("result").is_some(), "{set}");
    let failed = client.call_tool("spin", json!({})).await;
    assert_eq!(failed["isError"], true, "{failed}");
    let mut line = None;
    while let Some(message) = client.next_notification(Duration::from_secs(10)).await {
        if message["method"] == "notifications/message" {
            line = Some(message);
            break;
        }
    }
    let line = line.expect("the limit hit is logged to the client");
    assert_eq!(line["params"]["level"], "warning", "{line}");
    let text = line["params"]["data"]["message"].as_str().unwrap_or("");
    assert!(text.contains("limit") && text.contains("hostile"), "{line}");
    assert!(
        line["params"]["data"].get("scope").is_none(),
        "the session's own id is not repeated: {line}"
    );
}

/// The `_meta` every request of protocol 2026-07-28 carries (it has no `initialize`).
fn meta_2026(tasks: bool) -> Value {
    let capabilities = if tasks {
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
    } else {
        json!({})
    };
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "toolhost-e2e", "version": "0"}
    })
}

/// Poll `tasks/get` until the task leaves `working`; returns its last state, and whether it
/// was seen working after `working_after`.
async fn poll_task(
    client: &mut StdioClient,
    task_id: &str,
    working_after: Duration,
) -> (Value, bool) {
    let begun = Instant::now();
    let mut seen_working_late = false;
    loop {
        let got = client
            .request(
                "tasks/get",
                json!({"taskId": task_id, "_meta": meta_2026(true)}),
            )
            .await;
        let task = got
            .get("result")
            .cloned()
            .unwrap_or_else(|| panic!("tasks/get: {got}"));
        if task["status"] != "working" {
            return (task, seen_working_late);
        }
        if begun.elapsed() > working_after {
            seen_working_late = true;
        }
        assert!(begun.elapsed() < Duration::from_secs(30), "still {task}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn protocol_2026_07_28_without_initialize_one_scope_per_connection() {
    let mut client = StdioClient::spawn(&[]);
    let discovered = client
        .request("server/discover", json!({"_meta": meta_2026(false)}))
        .await;
    let result = &discovered["result"];
    assert!(
        result["supportedVersions"]
            .as_array()
            .is_some_and(|v| v.contains(&json!("2026-07-28")) && v.contains(&json!("2025-11-25"))),
        "{discovered}"
    );
    assert!(
        result["capabilities"]["extensions"]["io.modelcontextprotocol/tasks"].is_object(),
        "the Tasks extension is offered: {discovered}"
    );
    let marker = marker();
    let started = client
        .request(
            "tools/call",
            json!({"name": "execute", "arguments": {"command": format!("sleep 300 # {marker}"), "run_in_background": true}, "_meta": meta_2026(false)}),
        )
        .await;
    let id = structured(&started["result"])["background_process_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{started}"))
        .to_owned();
    // A later request of the connection sees the process: the connection is the scope.
    let listed = client
        .request(
            "tools/call",
            json!({"name": "process_list", "arguments": {}, "_meta": meta_2026(false)}),
        )
        .await;
    assert!(listed.to_string().contains(&id), "{listed}");
    // A request without the revision's `_meta` is refused, and the connection goes on.
    let bare = client.request("tools/list", json!({})).await;
    assert_eq!(bare["error"]["code"], -32602, "{bare}");
    client.close_stdin();
    assert!(client.wait_exit(Duration::from_secs(10)).await.is_some());
    assert!(wait_gone(&marker, Duration::from_secs(10)).await);
}

/// Methods revision 2026-07-28 removed (`initialize`, `ping`, `logging/setLevel`,
/// `resources/subscribe`, `resources/unsubscribe`) get -32601 whatever their params, which are
/// not looked at; those of capabilities the server does not declare (prompts, completions,
/// resource subscriptions) get -32601 in every revision. A connection that only probed with
/// `server/discover` may still `initialize` with an earlier revision (dual-era clients).
#[tokio::test]
async fn methods_a_revision_lacks_are_not_found_before_their_params_are_read() {
    let mut client = StdioClient::spawn(&[]);
    let discovered = client
        .request("server/discover", json!({"_meta": meta_2026(false)}))
        .await;
    let capabilities = &discovered["result"]["capabilities"];
    assert!(capabilities["tools"].is_object(), "{discovered}");
    assert!(capabilities.get("prompts").is_none(), "{discovered}");
    assert!(capabilities.get("completions").is_none(), "{discovered}");
    for (method, mut params) in [
        ("initialize", json!({"capabilities": {}})),
        ("ping", json!({"x": 1})),
        ("logging/setLevel", json!({"level": "info"})),
        ("logging/setLevel", json!({})),
        (
            "resources/subscribe",
            json!({"uri": "toolhost://process/x/output"}),
        ),
        ("resources/unsubscribe", json!({})),
        ("prompts/list", json!({})),
        ("prompts/get", json!({})),
        ("completion/complete", json!({})),
    ] {
        params["_meta"] = meta_2026(false);
        let answer = client.request(method, params).await;
        assert_eq!(error_code(&answer), -32601, "2026-07-28 {method}: {answer}");
    }

    // A connection that only probed initializes with an earlier revision and is served in it.
    let mut client = StdioClient::spawn(&[]);
    let discovered = client
        .request("server/discover", json!({"_meta": meta_2026(false)}))
        .await;
    assert!(discovered.get("result").is_some(), "{discovered}");
    let initialized = client.initialize().await;
    assert_eq!(
        initialized["result"]["protocolVersion"], PROTOCOL_VERSION,
        "{initialized}"
    );
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
        ("resources/subscribe", json!({})),
    ] {
        let answer = client.request(method, params).await;
        assert_eq!(
            error_code(&answer),
            -32601,
            "{PROTOCOL_VERSION} {method}: {answer}"
        );
    }
    let bad = client.request("logging/setLevel", json!({})).await;
    assert_eq!(error_code(&bad), -32602, "{bad}");
    let set = client
        .request("logging/setLevel", json!({"level": "error"}))
        .await;
    assert!(set.get("result").is_some(), "{set}");
    let ping = client.request("ping", json!({})).await;
    assert!(ping.get("result").is_some(), "{ping}");
    let tools = client.request("tools/list", json!({})).await;
    assert_eq!(
        tools["result"]["tools"].as_array().map(Vec::len),
        Some(5),
        "{tools}"
    );
}

#[tokio::test]
async fn a_task_execute_waits_past_its_timeout_and_returns_the_result_at_exit() {
    let mut client = StdioClient::spawn(&[]);
    let created = client
        .request(
            "tools/call",
            json!({"name": "execute", "arguments": {"command": "sleep 2.5; echo done", "timeout": "1s"}, "_meta": meta_2026(true)}),
        )
        .await;
    let result = &created["result"];
    assert_eq!(result["resultType"], "task", "{created}");
    assert_eq!(result["status"], "working", "{created}");
    let task_id = result["taskId"].as_str().expect("taskId").to_owned();
    let (task, late) = poll_task(&mut client, &task_id, Duration::from_millis(1500)).await;
    assert!(late, "still working after the 1 s timeout: no handover");
    assert_eq!(task["status"], "completed", "{task}");
    let out = structured(&task["result"]);
    assert_eq!(out["output"], "done\n", "{task}");
    assert_eq!(out["exit_code"], 0, "{task}");
    assert!(out.get("background_process_id").is_none(), "{task}");

    // Without the extension declared, the same call is answered directly.
    let plain = client
        .request(
            "tools/call",
            json!({"name": "execute", "arguments": {"command": "echo plain"}, "_meta": meta_2026(false)}),
        )
        .await;
    assert_eq!(structured(&plain["result"])["output"], "plain\n", "{plain}");
}

#[tokio::test]
async fn a_cancelled_task_kills_its_command() {
    let mut client = StdioClient::spawn(&[]);
    let marker = marker();
    let created = client
        .request(
            "tools/call",
            json!({"name": "execute", "arguments": {"command": format!("sleep 300 # {marker}")}, "_meta": meta_2026(true)}),
        )
        .await;
    let task_id = created["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned();
    assert!(wait_present(&marker, Duration::from_secs(10)).await);
    let cancelled = client
        .request(
            "tasks/cancel",
            json!({"taskId": task_id, "_meta": meta_2026(true)}),
        )
        .await;
    assert!(cancelled.get("result").is_some(), "{cancelled}");
    let (task, _) = poll_task(&mut client, &task_id, Duration::from_secs(60)).await;
    assert_eq!(task["status"], "cancelled", "{task}");
    assert!(
        wait_gone(&marker, Duration::from_secs(10)).await,
        "the command is killed with its task"
    );
    // An unknown task id is an error.
    let unknown = client
        .request(
            "tasks/get",
            json!({"taskId": "no-such-task", "_meta": meta_2026(true)}),
        )
        .await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
}

#[tokio::test]
async fn a_2026_07_28_client_hears_of_tool_changes_on_its_listen_stream() {
    let dir = tempfile::tempdir().expect("dir");
    let plugins = dir.path().display().to_string();
    let mut client = StdioClient::spawn(&["--policy", "none", "--plugins", &plugins]);
    let _stream = client
        .start_request(
            "subscriptions/listen",
            json!({"notifications": {"toolsListChanged": true}, "_meta": meta_2026(false)}),
        )
        .await;
    let mut acknowledged = None;
    while let Some(message) = client.next_notification(Duration::from_secs(10)).await {
        if message["method"] == "notifications/subscriptions/acknowledged" {
            acknowledged = Some(message);
            break;
        }
    }
    let acknowledged = acknowledged.expect("the subscription is acknowledged");
    assert_eq!(
        acknowledged["params"]["notifications"]["toolsListChanged"], true,
        "{acknowledged}"
    );
    std::fs::write(dir.path().join("policy.toml"), "[grants]\nprocess = true\n").expect("manifest");
    let partial = dir.path().join(".policy.partial");
    std::fs::write(&partial, toolhost::bundled::DEFAULT.bytes).expect("component");
    std::fs::rename(&partial, dir.path().join("policy.wasm")).expect("install");
    list_changed(&mut client).await;
}

#[tokio::test]
async fn starts_beyond_max_processes_are_refused_saying_so() {
    let mut client = StdioClient::start(&["--max-processes-total", "1"]).await;
    let marker = marker();
    let started = client
        .call_tool(
            "execute",
            json!({"command": format!("sleep 300 # {marker}"), "run_in_background": true}),
        )
        .await;
    assert!(
        structured(&started)["background_process_id"].is_string(),
        "{started}"
    );
    let refused = tool_error(
        &client
            .call_tool("execute", json!({"command": "true"}))
            .await,
    );
    assert!(
        refused.contains("maximum of 1") && refused.contains("--max-processes-total"),
        "{refused}"
    );
    client.close_stdin();
    assert!(client.wait_exit(Duration::from_secs(10)).await.is_some());
    assert!(wait_gone(&marker, Duration::from_secs(10)).await);
}

#[tokio::test]
async fn calls_beyond_max_calls_are_refused_at_once_and_the_host_goes_on() {
    one_call_held_refuses_another(
        "--max-calls-total",
        "maximum of 1 tool calls at once across",
    )
    .await;
}

#[tokio::test]
async fn calls_beyond_max_calls_per_session_are_refused_at_once() {
    one_call_held_refuses_another("--max-calls-per-session", "this session is already running")
        .await;
}

/// With `flag` at 1, a call in progress makes the next one a refusal naming the flag and
/// saying `why`; once it ends, calls run again.
async fn one_call_held_refuses_another(flag: &str, why: &str) {
    let mut client = StdioClient::start(&[flag, "1"]).await;
    let gate = Gate::new();
    let (_, held) = client
        .start_request(
            "tools/call",
            json!({"name": "execute", "arguments": {"command": gate.command(), "timeout": "60s"}}),
        )
        .await;
    // The one call allowed is in progress once its command runs.
    assert!(
        gate.started().await,
        "the first call's command did not start"
    );
    let refused = tool_error(
        &client
            .call_tool("execute", json!({"command": gate.opening_command()}))
            .await,
    );
    assert!(
        refused.contains(why)
            && refused.contains(&format!("({flag})"))
            && refused.contains("not run"),
        "{refused}"
    );
    assert!(!gate.is_open(), "the refused call ran its command");
    gate.open();
    let held = await_response(held).await;
    let held = structured(&held["result"]);
    assert_eq!(held["output"], "released\n", "{held}");
    // The slot is free again.
    let after = client
        .call_tool("execute", json!({"command": "echo again"}))
        .await;
    assert_eq!(structured(&after)["output"], "again\n", "{after}");
}

#[tokio::test]
async fn a_task_beyond_max_calls_is_refused_at_once_instead_of_created() {
    let mut client = StdioClient::spawn(&["--max-calls-total", "1"]);
    let gate = Gate::new();
    let created = client
        .request(
            "tools/call",
            json!({"name": "execute", "arguments": {"command": gate.command()}, "_meta": meta_2026(true)}),
        )
        .await;
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let task_id = created["result"]["taskId"]
        .as_str()
        .expect("taskId")
        .to_owned();
    assert!(gate.started().await, "the task's command did not start");
    let refused = client
        .request(
            "tools/call",
            json!({"name": "execute", "arguments": {"command": "echo no"}, "_meta": meta_2026(true)}),
        )
        .await;
    assert_ne!(refused["result"]["resultType"], "task", "{refused}");
    let text = tool_error(&refused["result"]);
    assert!(
        text.contains("--max-calls-total") && text.contains("not run"),
        "{text}"
    );
    gate.open();
    let (task, _) = poll_task(&mut client, &task_id, Duration::from_secs(30)).await;
    assert_eq!(task["status"], "completed", "{task}");
    assert_eq!(
        structured(&task["result"])["output"],
        "released\n",
        "{task}"
    );
}

/// An error answer is the protocol at work: with the default log filter, the server's stderr
/// (a client's server log) gets no warning line for it.
#[tokio::test]
async fn error_answers_are_not_logged_as_warnings() {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new(toolhost_e2e::toolhost_bin())
        .args(toolhost_e2e::shared_writable())
        .arg("serve")
        .env_remove("TOOLHOST_LOG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start toolhost serve");
    let mut stdin = child.stdin.take().expect("stdin");
    let lines = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "toolhost-e2e", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "nope", "arguments": {}}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "resources/read",
            "params": {"uri": "toolhost://process/unknown/output"}}),
    ];
    for line in lines {
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .expect("write");
    }
    // End of input: the server answers what it has read, then exits.
    drop(stdin);
    let output = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("the server exits at end of input")
        .expect("wait");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("WARN"), "{stderr}");
}

/// One `execute` call's structured result.
async fn run(client: &mut StdioClient, arguments: Value) -> Value {
    structured(&client.call_tool("execute", arguments).await)
}

/// Without `--workdir`, a call's `workdir` under a `--workspaces-under` parent makes that
/// project (the repository's top) the session's workspace from that call on: its writes reach
/// the host there and nowhere else, it is the default working directory after, a dot-directory
/// is never chosen, and another session keeps no workspace. The parent is under `/tmp`, whose
/// other writes stay in the session's own `/tmp`: what counts is what reaches the host.
#[tokio::test]
async fn a_calls_workdir_under_a_parent_chooses_the_sessions_workspace() {
    let parent = tempfile::tempdir().expect("parent");
    let parent = parent.path().canonicalize().expect("canonical");
    for dir in ["proj/.git", "proj/src", "other", ".dot"] {
        std::fs::create_dir_all(parent.join(dir)).expect("mkdir");
    }
    let under = parent.display().to_string();
    let mut client =
        StdioClient::spawn_in(std::path::Path::new("/"), &["--workspaces-under", &under]);
    client.initialize().await;
    let first = run(
        &mut client,
        json!({"command": "touch made && pwd", "workdir": parent.join("proj/src")}),
    )
    .await;
    assert_eq!(first["exit_code"], 0, "{first}");
    assert!(
        parent.join("proj/src/made").exists(),
        "the write reached the project: {first}"
    );
    let default = run(&mut client, json!({"command": "pwd && touch top"})).await;
    assert_eq!(
        default["output"]
            .as_str()
            .unwrap_or_default()
            .lines()
            .next(),
        Some(parent.join("proj").to_str().expect("utf-8")),
        "the repository's top is the default working directory: {default}"
    );
    assert!(parent.join("proj/top").exists(), "{default}");
    let outside = run(
        &mut client,
        json!({"command": format!("touch {}", parent.join("other/no").display())}),
    )
    .await;
    assert!(
        !parent.join("other/no").exists(),
        "outside the workspace: {outside}"
    );
    let dot = run(
        &mut client,
        json!({"command": "touch t", "workdir": parent.join(".dot")}),
    )
    .await;
    assert!(
        !parent.join(".dot/t").exists(),
        "a dot-directory is no workspace: {dot}"
    );

    let mut other =
        StdioClient::spawn_in(std::path::Path::new("/"), &["--workspaces-under", &under]);
    other.initialize().await;
    let elsewhere = run(
        &mut other,
        json!({"command": format!("touch {}", parent.join("proj/b").display())}),
    )
    .await;
    assert!(
        !parent.join("proj/b").exists(),
        "another session has no workspace: {elsewhere}"
    );
    let text = elsewhere["output"].as_str().unwrap_or_default();
    assert!(
        text.contains(&under),
        "the note names the parent: {elsewhere}"
    );
}

/// A server started in `/` without `--workdir` (as desktop clients start servers) serves:
/// `ls` answers with its output and a note saying there is no workspace and what the person
/// can do; a write outside `$TMPDIR` is refused (read-only), with the note again; `$TMPDIR`
/// stays writable.
#[tokio::test]
async fn a_server_started_in_root_serves_read_only_with_a_note() {
    let mut client = StdioClient::spawn_in(std::path::Path::new("/"), &[]);
    client.initialize().await;
    let listed = structured(
        &client
            .call_tool("execute", json!({"command": "ls -d /etc"}))
            .await,
    );
    assert_eq!(listed["exit_code"], 0, "{listed}");
    let text = listed["output"].as_str().unwrap_or_default();
    assert!(text.starts_with("/etc\n"), "{listed}");
    assert!(
        text.contains("no workspace") && text.contains("--workdir"),
        "{listed}"
    );
    let marker = marker();
    let refused = structured(
        &client
            .call_tool(
                "execute",
                json!({"command": format!("touch /etc/toolhost-{marker}")}),
            )
            .await,
    );
    assert_ne!(refused["exit_code"], 0, "{refused}");
    assert!(
        !std::path::Path::new(&format!("/etc/toolhost-{marker}")).exists(),
        "nothing was written in /etc"
    );
    let text = refused["output"].as_str().unwrap_or_default();
    assert!(text.contains("no workspace"), "{refused}");
    let temp = structured(
        &client
            .call_tool(
                "execute",
                json!({"command": "echo ok > \"$TMPDIR/f\" && cat \"$TMPDIR/f\""}),
            )
            .await,
    );
    assert_eq!(temp["exit_code"], 0, "{temp}");
    assert!(
        !temp["output"]
            .as_str()
            .unwrap_or_default()
            .contains("no workspace"),
        "told once, then only on failure: {temp}"
    );
}
