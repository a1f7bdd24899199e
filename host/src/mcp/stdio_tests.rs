//! Tests of [`LineTransport`]: what each broken line is answered with, and that good lines
//! around it still reach the service.

use super::*;
use rmcp::model::{ClientRequest, NumberOrString, ServerJsonRpcMessage};
use serde_json::json;
use tokio::io::{AsyncReadExt, DuplexStream};

/// A transport whose input is `input` and whose output can be read from the returned stream.
fn transport(input: &[u8]) -> (LineTransport<&[u8], DuplexStream>, DuplexStream) {
    let (write, read) = tokio::io::duplex(1 << 20);
    (LineTransport::new(input, write), read)
}

/// Every message the service would receive, and the lines written back without it.
async fn run(input: &[u8]) -> (Vec<RxJsonRpcMessage<RoleServer>>, Vec<Value>) {
    let (mut transport, mut output) = transport(input);
    let mut received = Vec::new();
    while let Some(message) = transport.receive().await {
        received.push(message);
    }
    transport.close().await.expect("close");
    drop(transport);
    let (_, answers) = lines_of(&mut output).await;
    (received, answers)
}

/// Everything written to `output`, and each of its lines as JSON.
async fn lines_of(output: &mut DuplexStream) -> (String, Vec<Value>) {
    let mut text = String::new();
    output.read_to_string(&mut text).await.expect("output");
    let lines = text
        .lines()
        .map(|line| serde_json::from_str(line).expect("each output line is JSON"))
        .collect();
    (text, lines)
}

fn code(answer: &Value) -> i64 {
    answer["error"]["code"].as_i64().expect("an error answer")
}

const PING: &[u8] = b"{\"jsonrpc\":\"2.0\",\"id\":99,\"method\":\"ping\"}\n";

fn with_ping(line: &[u8]) -> Vec<u8> {
    let mut input = line.to_vec();
    input.push(b'\n');
    input.extend_from_slice(PING);
    input
}

/// Runs `line` followed by a good ping: the ping must still be delivered.
async fn answers_to(line: &[u8]) -> Vec<Value> {
    let (received, answers) = run(&with_ping(line)).await;
    assert_eq!(received.len(), 1, "the following ping is still delivered");
    answers
}

#[tokio::test]
async fn unparsable_json_gets_a_parse_error_and_the_stream_goes_on() {
    let answers = answers_to(b"{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":").await;
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(code(&answers[0]), -32700);
    assert_eq!(
        answers[0]["id"], 4,
        "the id shown before the damage is used"
    );
}

#[tokio::test]
async fn an_id_shown_after_the_damage_is_used_when_it_is_the_only_one() {
    for (line, id) in [
        (
            &br#"{"jsonrpc":"2.0","method":"tools/list",,"id":24}"#[..],
            json!(24),
        ),
        (
            &br#"{"jsonrpc":"2.0","method":"ping" "id" : "later" }"#[..],
            json!("later"),
        ),
        (
            &br#"{"jsonrpc":"2.0","method":"x",,"params":{"id":5}}"#[..],
            Value::Null,
        ),
        (
            &br#"{"jsonrpc":"2.0",,"id":1,"id":2,"method":"x"}"#[..],
            Value::Null,
        ),
        (
            &br#"{"jsonrpc":"2.0","method":"x",,"id":1.5}"#[..],
            Value::Null,
        ),
        (
            &br#"{"jsonrpc":"2.0","method":"id",,"x":"id"}"#[..],
            Value::Null,
        ),
        (
            &br#"{"jsonrpc":"2.0","method":"x",,"note":"a \"quoted\" }","id":7}"#[..],
            json!(7),
        ),
    ] {
        let answers = answers_to(line).await;
        assert_eq!(answers.len(), 1, "{answers:?}");
        assert_eq!(code(&answers[0]), -32700, "{answers:?}");
        assert_eq!(answers[0]["id"], id, "{}", String::from_utf8_lossy(line));
    }
}

#[tokio::test]
async fn a_broken_line_with_the_id_of_a_pending_request_is_answered_with_null() {
    let input = b"{\"jsonrpc\":\"2.0\",\"id\":31,\"method\":\"ping\"}\n\
                  {\"jsonrpc\":\"2.0\",\"id\":31,\"method\":\n";
    let (received, answers) = run(input).await;
    assert_eq!(received.len(), 1, "the first request is delivered");
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(code(&answers[0]), -32700);
    assert_eq!(
        answers[0]["id"],
        Value::Null,
        "request 31 keeps its own answer: {answers:?}"
    );
}

#[tokio::test]
async fn invalid_utf8_inside_and_outside_strings_is_answered_with_the_id() {
    for line in [
        &b"{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{\"name\":\"execute\",\"arguments\":{\"command\":\"echo \xff\"}}}"[..],
        &b"{\"jsonrpc\":\"2.0\",\"id\":6,\xff\"method\":\"ping\"}"[..],
    ] {
        let answers = answers_to(line).await;
        assert_eq!(answers.len(), 1, "{answers:?}");
        assert_eq!(code(&answers[0]), -32700);
        assert!(answers[0]["id"].is_i64(), "{answers:?}");
        let message = answers[0]["error"]["message"].as_str().expect("message");
        assert!(message.contains("UTF-8"), "{message}");
    }
}

#[tokio::test]
async fn a_lone_surrogate_escape_is_a_parse_error() {
    let answers = answers_to(
        br#"{"jsonrpc":"2.0","id":"s","method":"tools/call","params":{"name":"execute","arguments":{"command":"echo \ud800"}}}"#,
    )
    .await;
    assert_eq!(code(&answers[0]), -32700);
    assert_eq!(answers[0]["id"], "s");
    let message = answers[0]["error"]["message"].as_str().expect("message");
    assert!(message.contains("surrogate"), "{message}");
}

#[tokio::test]
async fn nesting_too_deep_is_a_parse_error_with_the_id() {
    let mut line = b"{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"ping\",\"params\":".to_vec();
    line.extend(std::iter::repeat_n(b'[', 10_000));
    line.extend(std::iter::repeat_n(b']', 10_000));
    line.push(b'}');
    let answers = answers_to(&line).await;
    assert_eq!(code(&answers[0]), -32700);
    assert_eq!(answers[0]["id"], 8);
}

#[tokio::test]
async fn two_objects_on_one_line_are_both_answered() {
    let answers = answers_to(
        br#"{"jsonrpc":"2.0","id":9,"method":"ping"}{"jsonrpc":"2.0","id":10,"method":"ping"}"#,
    )
    .await;
    let ids: Vec<&Value> = answers.iter().map(|a| &a["id"]).collect();
    assert_eq!(ids, [9, 10]);
    assert!(answers.iter().all(|a| code(a) == -32700), "{answers:?}");
}

#[tokio::test]
async fn json_that_is_no_message_is_an_invalid_request() {
    for (line, id) in [
        (&br#"{"jsonrpc":"2.0","id":3}"#[..], json!(3)),
        (&br#"42"#[..], Value::Null),
        (
            &br#"{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}"#[..],
            Value::Null,
        ),
        (&br#"{"id":7,"method":"ping"}"#[..], json!(7)),
    ] {
        let answers = answers_to(line).await;
        assert_eq!(answers.len(), 1, "{answers:?}");
        assert_eq!(code(&answers[0]), -32600, "{answers:?}");
        assert_eq!(answers[0]["id"], id);
    }
}

#[tokio::test]
async fn an_id_too_large_for_64_bits_is_named_as_such() {
    let answers =
        answers_to(br#"{"jsonrpc":"2.0","id":100000000000000000000,"method":"ping"}"#).await;
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(code(&answers[0]), -32600, "{answers:?}");
    let message = answers[0]["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("not a 64-bit integer"), "{answers:?}");
}

#[tokio::test]
async fn params_that_are_no_object_are_invalid_params_with_the_id() {
    let answers =
        answers_to(br#"{"jsonrpc":"2.0","id":12,"method":"tools/call","params":"x"}"#).await;
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(code(&answers[0]), -32602, "{answers:?}");
    assert_eq!(answers[0]["id"], 12);
}

#[tokio::test]
async fn notifications_are_never_answered() {
    let (received, answers) = run(&with_ping(
        br#"{"jsonrpc":"2.0","method":"notifications/whatever","params":5}"#,
    ))
    .await;
    assert!(answers.is_empty(), "{answers:?}");
    assert!(!received.is_empty());
}

#[tokio::test]
async fn a_reused_pending_id_is_refused_and_the_first_request_keeps_it() {
    let input = br#"{"jsonrpc":"2.0","id":1,"method":"ping"}
{"jsonrpc":"2.0","id":1,"method":"tools/list"}
{"jsonrpc":"2.0","id":"1","method":"tools/list"}
"#;
    let (received, answers) = run(input).await;
    assert_eq!(
        received.len(),
        2,
        "the first and the one with id \"1\" (a string)"
    );
    assert!(matches!(
        &received[0],
        RxJsonRpcMessage::<RoleServer>::Request(r) if matches!(r.request, ClientRequest::PingRequest(_))
    ));
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(code(&answers[0]), -32600);
    assert_eq!(answers[0]["id"], 1);
}

#[tokio::test]
async fn an_answered_id_may_be_used_again() {
    let input = br#"{"jsonrpc":"2.0","id":1,"method":"ping"}
"#;
    let (mut transport, _output) = transport(input);
    assert!(transport.receive().await.is_some());
    transport
        .send(ServerJsonRpcMessage::response(
            ServerResult::empty(()),
            NumberOrString::Number(1),
        ))
        .await
        .expect("send");
    assert!(lock(&transport.state).pending.is_empty());
}

#[tokio::test]
async fn a_line_over_the_limit_is_refused_without_being_held() {
    let mut line = br#"{"jsonrpc":"2.0","id":12,"method":"ping","params":{"x":""#.to_vec();
    line.extend(std::iter::repeat_n(b'a', MAX_LINE + 10));
    line.extend_from_slice(br#""}}"#);
    let answers = answers_to(&line).await;
    assert_eq!(code(&answers[0]), -32600);
    assert_eq!(answers[0]["id"], 12);
}

#[tokio::test]
async fn batches_are_refused_before_a_revision_that_has_them() {
    let answers = answers_to(
        br#"[{"jsonrpc":"2.0","id":13,"method":"ping"},{"jsonrpc":"2.0","id":14,"method":"ping"}]"#,
    )
    .await;
    let ids: Vec<&Value> = answers.iter().map(|a| &a["id"]).collect();
    assert_eq!(ids, [13, 14]);
    assert!(answers.iter().all(|a| code(a) == -32600), "{answers:?}");
}

#[tokio::test]
async fn a_batch_under_2025_03_26_is_answered_as_one_array() {
    let input = br#"[{"jsonrpc":"2.0","id":13,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/initialized"},{"jsonrpc":"2.0","id":14},{"jsonrpc":"2.0","id":15,"method":"ping"}]
"#;
    let (mut transport, mut output) = transport(input);
    negotiated(&transport.state, "2025-03-26".to_owned());
    let mut ids = Vec::new();
    while let Some(message) = transport.receive().await {
        if let Some(key) = request_key(&message) {
            ids.push(key);
        }
    }
    assert_eq!(ids, ["13", "15"]);
    for id in [15, 13] {
        transport
            .send(ServerJsonRpcMessage::response(
                ServerResult::empty(()),
                NumberOrString::Number(id),
            ))
            .await
            .expect("send");
    }
    transport.close().await.expect("close");
    drop(transport);
    let (text, lines) = lines_of(&mut output).await;
    assert_eq!(lines.len(), 1, "one array: {text}");
    let answers = lines[0].as_array().expect("an array");
    let ids: Vec<&Value> = answers.iter().map(|a| &a["id"]).collect();
    assert_eq!(
        ids,
        [14, 15, 13],
        "the refusal of 14 first, then answers as they come"
    );
    assert_eq!(code(&answers[0]), -32600);
}

#[tokio::test]
async fn the_end_of_input_cancels_the_service_token() {
    let token = CancellationToken::new();
    let (transport, _output) = transport(PING);
    let mut transport = transport.cancel_at_end(token.clone());
    assert!(transport.receive().await.is_some());
    assert!(!token.is_cancelled(), "not while the input goes on");
    assert!(transport.receive().await.is_none());
    assert!(
        token.is_cancelled(),
        "calls in flight are cancelled at once"
    );
}

#[tokio::test]
async fn answering_a_broken_line_does_not_hold_up_the_next_message() {
    // rmcp drops `receive` when other work wins its `select!`: an answer written inside it
    // was lost then. The answer goes out on its own; here the output is not read at all
    // until the next message has been received.
    let (write, mut output) = tokio::io::duplex(8);
    let input = with_ping(b"{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":");
    let mut transport = LineTransport::new(&input[..], write);
    let next = tokio::time::timeout(std::time::Duration::from_secs(5), transport.receive())
        .await
        .expect("the ping arrives while the answer still waits for the reader");
    assert!(next.is_some());
    let mut text = Vec::new();
    let mut buffer = [0u8; 256];
    while !text.ends_with(b"\n") {
        let n = output.read(&mut buffer).await.expect("read");
        assert!(n > 0, "the answer is written whole");
        text.extend_from_slice(&buffer[..n]);
    }
    let answer: Value = serde_json::from_slice(&text).expect("one JSON line");
    assert_eq!(code(&answer), -32700);
    assert_eq!(answer["id"], 5);
}

#[tokio::test]
async fn a_batch_does_not_wait_for_a_cancelled_request() {
    let input =
        br#"[{"jsonrpc":"2.0","id":13,"method":"ping"},{"jsonrpc":"2.0","id":14,"method":"ping"}]
{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":13}}
"#;
    let (mut transport, mut output) = transport(input);
    negotiated(&transport.state, "2025-03-26".to_owned());
    for _ in 0..2 {
        assert!(transport.receive().await.is_some(), "the batch's requests");
    }
    // 14 is answered; 13's answer never comes (rmcp drops a cancelled request's response).
    transport
        .send(ServerJsonRpcMessage::response(
            ServerResult::empty(()),
            NumberOrString::Number(14),
        ))
        .await
        .expect("send");
    while transport.receive().await.is_some() {}
    transport.close().await.expect("close");
    drop(transport);
    let (text, lines) = lines_of(&mut output).await;
    assert_eq!(
        lines.len(),
        1,
        "the batch is answered once 13 is cancelled: {text}"
    );
    let ids: Vec<&Value> = lines[0]
        .as_array()
        .expect("an array")
        .iter()
        .map(|a| &a["id"])
        .collect();
    assert_eq!(ids, [14]);
}
