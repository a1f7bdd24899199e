//! JSON-RPC messages as MCP clients send them, and the answers to broken ones: shared by the
//! stdio transport and the HTTP request check.
//!
//! A message that cannot be parsed is answered with `-32700 Parse error`, one that is JSON
//! but no JSON-RPC request with `-32600 Invalid Request`; either carries the request's id when
//! the text shows one (before the damage, or after it as the one `"id"` member of the outer
//! object), else `id: null`. A broken notification is logged, never answered.

use rmcp::RoleServer;
use rmcp::model::ErrorCode;
use rmcp::service::RxJsonRpcMessage;
use serde::de::{Deserializer as _, IgnoredAny, MapAccess, Visitor};
use serde_json::{Value, json};

/// JSON-RPC's `Parse error`.
pub const PARSE_ERROR: i32 = ErrorCode::PARSE_ERROR.0;
/// JSON-RPC's `Invalid Request`.
pub const INVALID_REQUEST: i32 = ErrorCode::INVALID_REQUEST.0;
/// JSON-RPC's `Invalid params`.
pub const INVALID_PARAMS: i32 = ErrorCode::INVALID_PARAMS.0;

/// What a line or body holds.
pub enum Parsed {
    /// One JSON value.
    One(Value),
    /// A JSON array: a batch.
    Batch(Vec<Value>),
    /// Not JSON: the answers to give (one per request the text shows).
    Broken(Vec<Value>),
}

/// Parse `text` (a line without its newline, or an HTTP body).
pub fn parse(text: &[u8]) -> Parsed {
    match serde_json::from_slice::<Value>(text) {
        Ok(Value::Array(items)) => Parsed::Batch(items),
        Ok(value) => Parsed::One(value),
        Err(error) => Parsed::Broken(unparsable(text, &error)),
    }
}

/// A JSON value as a message: `Ok(Some)` to hand to the service, `Ok(None)` when nothing may
/// answer it (it is logged), `Err` with the answer.
pub fn check(value: Value) -> Result<Option<RxJsonRpcMessage<RoleServer>>, Value> {
    let id = value.get("id").filter(is_id).cloned();
    let Value::Object(object) = &value else {
        return Err(error_answer(
            None,
            INVALID_REQUEST,
            "Invalid Request: a JSON-RPC message is an object".to_owned(),
        ));
    };
    let method = object
        .get("method")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let is_request = method.is_some() && object.contains_key("id");
    let reply = is_reply(object);
    if let Some(bad) = object
        .get("id")
        .filter(|_| id.is_none() && method.is_some())
    {
        let why = if bad.is_number() {
            "`id` is a number but not a 64-bit integer (a fraction, or too large)"
        } else {
            "`id` must be a string or an integer"
        };
        return Err(error_answer(
            None,
            INVALID_REQUEST,
            format!("Invalid Request: {why}"),
        ));
    }
    // A request of a method whose `params` are not an object: its params are malformed.
    if is_request
        && object
            .get("params")
            .is_some_and(|params| !params.is_object() && !params.is_null())
    {
        return Err(error_answer(
            id,
            INVALID_PARAMS,
            "Invalid params: `params` must be an object".to_owned(),
        ));
    }
    match serde_json::from_value::<RxJsonRpcMessage<RoleServer>>(value) {
        Ok(message) => Ok(Some(message)),
        Err(error) if is_request || (method.is_none() && !reply) => Err(error_answer(
            id,
            INVALID_REQUEST,
            format!("Invalid Request: {error}"),
        )),
        Err(error) => {
            match method {
                Some(method) if method.starts_with("notifications/") => {
                    tracing::debug!(%method, %error, "ignoring a notification that does not parse")
                }
                Some(method) => {
                    tracing::warn!(%method, %error, "ignoring a malformed notification")
                }
                None => tracing::warn!(%error, "ignoring a malformed message from the client"),
            }
            Ok(None)
        }
    }
}

/// The id of `value` when it is a request with a valid id.
pub fn request_id(value: &Value) -> Option<Value> {
    value.get("method")?;
    value.get("id").filter(is_id).cloned()
}

/// The key of the request a `notifications/cancelled` names.
pub fn cancelled_request(value: &Value) -> Option<String> {
    if value.get("method")?.as_str()? != "notifications/cancelled" {
        return None;
    }
    let id = value.get("params")?.get("requestId")?;
    is_id(&id).then(|| id_key(id))
}

/// The answer to a request whose id belongs to one still in progress.
pub fn id_in_use(id: Value) -> Value {
    let key = id_key(&id);
    error_answer(
        Some(id),
        INVALID_REQUEST,
        format!(
            "Invalid Request: id {key} belongs to a request still in progress; use a new id for \
             each request"
        ),
    )
}

/// The same refusal for every request in `items` (or one with `id: null` if none has an id).
pub fn refuse_all(items: &[Value], code: i32, message: &str) -> Vec<Value> {
    let ids: Vec<Value> = items.iter().filter_map(request_id).collect();
    if ids.is_empty() {
        return vec![error_answer(None, code, message.to_owned())];
    }
    ids.into_iter()
        .map(|id| error_answer(Some(id), code, message.to_owned()))
        .collect()
}

/// `text` without a UTF-8 byte order mark, trailing newline and carriage return.
pub fn trim(line: &[u8]) -> &[u8] {
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// A JSON-RPC error answer.
pub fn error_answer(id: Option<Value>, code: i32, message: String) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id.unwrap_or(Value::Null),
        "error": { "code": code, "message": message },
    })
}

/// The text that identifies a request id (`5` and `"5"` differ).
pub fn id_key(id: &Value) -> String {
    id.to_string()
}

/// Answers for a text that is not one JSON value: every request id the text shows.
pub fn unparsable(line: &[u8], error: &serde_json::Error) -> Vec<Value> {
    let mut values = serde_json::Deserializer::from_slice(line).into_iter::<Value>();
    let mut whole = Vec::new();
    while let Some(Ok(value)) = values.next() {
        whole.push(value);
    }
    if whole.len() > 1 || (whole.len() == 1 && values.byte_offset() < line.len()) {
        // Several values in one message: each request in it learns why it was not run.
        let message = format!(
            "Parse error: several JSON values in one message ({error}); send one message per \
             line (stdio) or per request body (HTTP)"
        );
        return refuse_all(&whole, PARSE_ERROR, &message);
    }
    let detail = match error.classify() {
        serde_json::error::Category::Eof => format!("the message ends early ({error})"),
        _ if error.to_string().contains("escape") => format!(
            "{error} (a \\u escape must name a whole character: a surrogate \\uD800-\\uDFFF needs \
             its pair)"
        ),
        _ if std::str::from_utf8(line).is_err() => {
            format!("{error} (the line is not valid UTF-8)")
        }
        _ => error.to_string(),
    };
    vec![error_answer(
        find_id(line),
        PARSE_ERROR,
        format!("Parse error: {detail}"),
    )]
}

/// A response or error from the client (to a request of ours).
fn is_reply(object: &serde_json::Map<String, Value>) -> bool {
    object.contains_key("result") || object.contains_key("error")
}

/// A valid JSON-RPC id: a string or an integer.
fn is_id(id: &&Value) -> bool {
    id.is_string() || id.is_i64() || id.is_u64()
}

/// The id of a request in a line that does not parse: its `id` member when it shows before
/// the damage, else the one member named `id` the text shows at the top level of the outer
/// object, after the damage too (see [`scan_id`]).
pub fn find_id(line: &[u8]) -> Option<Value> {
    let mut found = None;
    let mut reader = serde_json::Deserializer::from_slice(line);
    let _ = reader.deserialize_map(IdFinder { found: &mut found });
    found.or_else(|| scan_id(line))
}

/// The value of the member `"id"` at the top level of the object `line` starts with, read
/// token by token past any damage: `None` unless there is exactly one such member and its
/// value is a string or an integer followed by `,` or `}` (or the end). Nesting counts
/// brackets outside strings; a line broken so that this count goes wrong may hide the id,
/// never show another.
fn scan_id(line: &[u8]) -> Option<Value> {
    let start = line.iter().position(|b| !b.is_ascii_whitespace())?;
    if line[start] != b'{' {
        return None;
    }
    let mut depth = 0usize;
    let mut at = start;
    let mut found: Option<Value> = None;
    let mut seen = 0;
    while at < line.len() {
        match line[at] {
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.checked_sub(1)?,
            b'"' => {
                let end = string_end(line, at)?;
                let after = skip_space(line, end);
                if depth == 1 && &line[at..end] == b"\"id\"" && line.get(after) == Some(&b':') {
                    seen += 1;
                    found = id_value(line, skip_space(line, after + 1));
                }
                at = end;
                continue;
            }
            _ => {}
        }
        at += 1;
    }
    if seen == 1 { found } else { None }
}

/// The index just past the string that starts with the quote at `start`.
fn string_end(line: &[u8], start: usize) -> Option<usize> {
    let mut at = start + 1;
    while at < line.len() {
        match line[at] {
            b'\\' => at += 2,
            b'"' => return Some(at + 1),
            _ => at += 1,
        }
    }
    None
}

/// The index of the first byte from `at` on that is no whitespace (or the end).
fn skip_space(line: &[u8], mut at: usize) -> usize {
    while line.get(at).is_some_and(u8::is_ascii_whitespace) {
        at += 1;
    }
    at
}

/// A string or integer id starting at `at`, followed by `,`, `}` or the end.
fn id_value(line: &[u8], at: usize) -> Option<Value> {
    let end = match line.get(at)? {
        b'"' => string_end(line, at)?,
        b'-' | b'0'..=b'9' => {
            at + 1
                + line[at + 1..]
                    .iter()
                    .take_while(|b| b.is_ascii_digit())
                    .count()
        }
        _ => return None,
    };
    if !matches!(line.get(skip_space(line, end)), None | Some(b',' | b'}')) {
        return None;
    }
    let value: Value = serde_json::from_slice(&line[at..end]).ok()?;
    is_id(&&value).then_some(value)
}

/// Reads an object's members up to the first error, keeping a valid `id`.
struct IdFinder<'a> {
    found: &'a mut Option<Value>,
}

impl<'de> Visitor<'de> for IdFinder<'_> {
    type Value = ();

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a JSON-RPC message")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            if key == "id" {
                let id: Value = map.next_value()?;
                if is_id(&&id) {
                    *self.found = Some(id);
                }
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}
