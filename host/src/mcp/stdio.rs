//! MCP's stdio framing, strict: one JSON-RPC message per line in, one per line out, and an
//! answer to every request that has an id, also when the line holding it is broken.
//!
//! rmcp's own stdio transport drops lines it cannot parse (no reply, so the client waits
//! forever), has no batches and hands a request that reuses a pending id to the service, whose
//! answer then goes to the wrong caller. This transport sits in front of the service instead:
//! - a line that is not JSON (bad syntax, invalid UTF-8, a lone surrogate escape, nesting
//!   deeper than the parser's limit, two values on one line) gets `-32700 Parse error`, with
//!   the request's id when the line shows one (before the damage, or after it as the one `id`
//!   member of the outer object) and no request in progress has it, else `id: null`;
//! - JSON that is not a JSON-RPC message gets `-32600 Invalid Request` (with its id, if any); a
//!   broken notification is logged, since nothing may answer it;
//! - a request whose id is still pending gets `-32600` and the first request keeps its answer;
//! - a batch (a JSON array) is taken apart and answered as one array where the negotiated
//!   revision has batches (2025-03-26 and older), and refused per request where it does not;
//! - a line longer than [`MAX_LINE`] is skipped and refused, without ever holding it whole.

use super::jsonrpc::{self, INVALID_REQUEST, Parsed, error_answer, find_id, id_key, trim};
use crate::lock;
use rmcp::RoleServer;
use rmcp::model::ServerResult;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::Value;
use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as SyncMutex};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The longest line (one message) accepted: as rmcp's own transports.
pub const MAX_LINE: usize = 16 * 1024 * 1024;

/// How much of an oversized line is kept to find its id.
const ID_PREFIX: usize = 64 * 1024;

/// A [`Transport`] for an MCP server on a byte stream pair (stdin/stdout), answering what rmcp
/// would drop. See the module documentation.
pub struct LineTransport<R, W> {
    read: BufReader<R>,
    /// The line being read; kept across cancelled reads (`receive` runs inside a `select!`).
    line: Vec<u8>,
    /// The current line is over [`MAX_LINE`]: skip to its end.
    discarding: bool,
    /// Messages of a batch not yet handed to the service.
    queue: VecDeque<RxJsonRpcMessage<RoleServer>>,
    out: Arc<Mutex<Option<W>>>,
    state: Arc<SyncMutex<State>>,
    /// Cancelled when the input ends.
    input_ended: Option<CancellationToken>,
    /// Answers to broken lines being written; `close` waits for them.
    writes: TaskTracker,
    /// Set when `notifications/roots/list_changed` is read, before it is handed on (see
    /// [`LineTransport::on_roots_changed`]).
    roots_changed: Option<Arc<AtomicBool>>,
}

/// What reading and writing share.
#[derive(Default)]
struct State {
    /// Ids of requests handed to the service and not answered yet (their JSON text).
    pending: HashSet<String>,
    /// Batches whose answers are being collected.
    batches: Vec<Batch>,
    /// Batches completed by a cancellation, to be written.
    completed: Vec<Value>,
    /// The negotiated revision allows batches.
    batches_allowed: bool,
    /// The negotiated revision, for messages.
    revision: Option<String>,
}

/// A batch in progress: the ids still to answer and the answers so far.
struct Batch {
    waiting: HashSet<String>,
    answers: Vec<Value>,
}

/// What one incoming line turns into.
#[derive(Debug, Default)]
struct Inbound {
    /// Messages for the service, in order.
    deliver: Vec<RxJsonRpcMessage<RoleServer>>,
    /// Answers to write now, each as one line.
    answers: Vec<Value>,
    /// A batch: the answers written now are not lines but collected with the service's.
    batch: Option<Vec<Value>>,
}

impl<R, W> LineTransport<R, W>
where
    R: AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    /// A transport reading messages from `read` and writing them to `write`.
    pub fn new(read: R, write: W) -> Self {
        LineTransport {
            read: BufReader::new(read),
            line: Vec::new(),
            discarding: false,
            queue: VecDeque::new(),
            out: Arc::new(Mutex::new(Some(write))),
            state: Arc::default(),
            input_ended: None,
            writes: TaskTracker::new(),
            roots_changed: None,
        }
    }

    /// Set `flag` when the client says its roots changed, as the message is read: rmcp hands
    /// each message to a task of its own, so the request after the notification could run
    /// before the notification's handler does.
    pub fn on_roots_changed(mut self, flag: Arc<AtomicBool>) -> Self {
        self.roots_changed = Some(flag);
        self
    }

    /// Cancel `token` when the input ends. Given the service's token, a client that goes
    /// away cancels its calls in flight at once (rmcp would wait up to 5 s for them).
    pub fn cancel_at_end(mut self, token: CancellationToken) -> Self {
        self.input_ended = Some(token);
        self
    }

    /// Read one line into `self.line`, never holding more than [`MAX_LINE`] of it (plus the
    /// part kept for the id of a line that is too long). Cancellation safe.
    async fn read_line(&mut self) -> std::io::Result<Line> {
        loop {
            let (consumed, done) = {
                let available = self.read.fill_buf().await?;
                if available.is_empty() {
                    return Ok(Line::Eof);
                }
                let newline = available.iter().position(|b| *b == b'\n');
                let take = newline.map_or(available.len(), |at| at + 1);
                if self.discarding {
                    let room = ID_PREFIX.saturating_sub(self.line.len());
                    self.line.extend_from_slice(&available[..take.min(room)]);
                } else if self.line.len() + take > MAX_LINE {
                    self.discarding = true;
                    self.line.truncate(ID_PREFIX);
                } else {
                    self.line.extend_from_slice(&available[..take]);
                }
                (take, newline.is_some())
            };
            self.read.consume(consumed);
            if done {
                if std::mem::take(&mut self.discarding) {
                    return Ok(Line::Oversized);
                }
                return Ok(Line::Whole);
            }
        }
    }
}

/// What [`LineTransport::read_line`] found.
enum Line {
    Whole,
    Oversized,
    Eof,
}

impl<R, W> Transport<RoleServer> for LineTransport<R, W>
where
    R: AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let out = self.out.clone();
        let state = self.state.clone();
        async move {
            let value = serde_json::to_value(&item).map_err(std::io::Error::other)?;
            let answered = match &item {
                TxJsonRpcMessage::<RoleServer>::Response(response) => {
                    if let ServerResult::InitializeResult(init) = &response.result {
                        negotiated(&state, init.protocol_version.to_string());
                    }
                    Some(id_key(
                        &serde_json::to_value(&response.id).unwrap_or(Value::Null),
                    ))
                }
                TxJsonRpcMessage::<RoleServer>::Error(error) => error
                    .id
                    .as_ref()
                    .map(|id| id_key(&serde_json::to_value(id).unwrap_or(Value::Null))),
                _ => None,
            };
            let lines = match answered {
                Some(key) => answer(&state, &key, value),
                None => vec![value],
            };
            write_lines(&out, &lines).await
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            if let Some(message) = self.queue.pop_front() {
                if let (Some(flag), true) = (&self.roots_changed, roots_changed(&message)) {
                    flag.store(true, Ordering::Release);
                }
                return Some(message);
            }
            let line = match self.read_line().await {
                Ok(Line::Eof) => {
                    if let Some(token) = &self.input_ended {
                        token.cancel();
                    }
                    return None;
                }
                Ok(Line::Whole) => classify(trim(&self.line), &self.state),
                Ok(Line::Oversized) => oversized(&self.line),
                Err(error) => {
                    tracing::error!(%error, "cannot read the MCP client's input");
                    return None;
                }
            };
            self.line.clear();
            let now = match line.batch {
                Some(answers) => {
                    let waiting: HashSet<String> =
                        line.deliver.iter().filter_map(request_key).collect();
                    if waiting.is_empty() {
                        // Nothing for the service to answer: the batch is complete now.
                        (!answers.is_empty())
                            .then_some(Value::Array(answers))
                            .into_iter()
                            .collect()
                    } else {
                        lock(&self.state).batches.push(Batch { waiting, answers });
                        Vec::new()
                    }
                }
                None => line.answers,
            };
            let mut now = now;
            now.append(&mut lock(&self.state).completed);
            if !now.is_empty() {
                // Not awaited here: rmcp polls `receive` inside a `select!` and drops it when
                // other work wins, which would lose these answers (or cut a line in half) at
                // any await. A task of their own finishes them; `close` waits for it.
                let out = self.out.clone();
                self.writes.spawn(async move {
                    if let Err(error) = write_lines(&out, &now).await {
                        tracing::debug!(%error, "cannot answer a broken message");
                    }
                });
            }
            self.queue.extend(line.deliver);
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.writes.close();
        // Bounded: a client that stopped reading must not hold up the end of the session.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), self.writes.wait()).await;
        let mut out = self.out.lock().await;
        if let Some(mut write) = out.take() {
            write.flush().await?;
        }
        Ok(())
    }
}

/// Whether `message` is `notifications/roots/list_changed`.
fn roots_changed(message: &RxJsonRpcMessage<RoleServer>) -> bool {
    matches!(
        message,
        rmcp::model::JsonRpcMessage::Notification(notification)
            if matches!(
                notification.notification,
                rmcp::model::ClientNotification::RootsListChangedNotification(_)
            )
    )
}

/// Write each value as one line and flush.
async fn write_lines<W: AsyncWrite + Unpin>(
    out: &Mutex<Option<W>>,
    values: &[Value],
) -> std::io::Result<()> {
    if values.is_empty() {
        return Ok(());
    }
    let mut text = Vec::new();
    for value in values {
        serde_json::to_writer(&mut text, value).map_err(std::io::Error::other)?;
        text.push(b'\n');
    }
    let mut out = out.lock().await;
    let Some(write) = out.as_mut() else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotConnected,
            "the MCP transport is closed",
        ));
    };
    write.write_all(&text).await?;
    write.flush().await
}

/// Remember the negotiated revision: batches exist up to 2025-03-26.
fn negotiated(state: &SyncMutex<State>, revision: String) {
    let mut state = lock(state);
    state.batches_allowed = revision.as_str() <= "2025-03-26";
    state.revision = Some(revision);
}

/// The service answers the request `key` with `value`: what to write now (nothing while the
/// rest of its batch is outstanding).
fn answer(state: &SyncMutex<State>, key: &str, value: Value) -> Vec<Value> {
    let mut state = lock(state);
    state.pending.remove(key);
    let Some(at) = state
        .batches
        .iter()
        .position(|batch| batch.waiting.contains(key))
    else {
        return vec![value];
    };
    let batch = &mut state.batches[at];
    batch.waiting.remove(key);
    batch.answers.push(value);
    if !batch.waiting.is_empty() {
        return Vec::new();
    }
    let batch = state.batches.remove(at);
    vec![Value::Array(batch.answers)]
}

/// The key of a request message.
fn request_key(message: &RxJsonRpcMessage<RoleServer>) -> Option<String> {
    match message {
        RxJsonRpcMessage::<RoleServer>::Request(request) => Some(id_key(
            &serde_json::to_value(&request.id).unwrap_or(Value::Null),
        )),
        _ => None,
    }
}

/// What to do with one line.
fn classify(line: &[u8], state: &SyncMutex<State>) -> Inbound {
    let mut inbound = Inbound::default();
    if line.iter().all(u8::is_ascii_whitespace) {
        return inbound;
    }
    match jsonrpc::parse(line) {
        Parsed::Batch(items) => batch(items, state, &mut inbound),
        Parsed::One(value) => match single(value, state) {
            Ok(Some(message)) => inbound.deliver.push(message),
            Ok(None) => {}
            Err(answer) => inbound.answers.push(answer),
        },
        Parsed::Broken(answers) => {
            inbound.answers = answers
                .into_iter()
                .map(|answer| unless_pending(answer, state))
                .collect();
        }
    }
    inbound
}

/// The answer to a broken line, with `id: null` when its id belongs to a request still in
/// progress: that request keeps its own answer.
fn unless_pending(mut answer: Value, state: &SyncMutex<State>) -> Value {
    if !answer["id"].is_null() && lock(state).pending.contains(&id_key(&answer["id"])) {
        answer["id"] = Value::Null;
    }
    answer
}

/// Answer for a line over [`MAX_LINE`] whose first [`ID_PREFIX`] bytes are `prefix`.
fn oversized(prefix: &[u8]) -> Inbound {
    let message = format!(
        "Invalid Request: the message is longer than {} MiB",
        MAX_LINE / (1024 * 1024)
    );
    tracing::warn!("an MCP message over {MAX_LINE} bytes was skipped");
    Inbound {
        answers: vec![error_answer(find_id(prefix), INVALID_REQUEST, message)],
        ..Inbound::default()
    }
}

/// A batch: its messages, or refusals where the revision has no batches.
fn batch(items: Vec<Value>, state: &SyncMutex<State>, inbound: &mut Inbound) {
    if items.is_empty() {
        inbound.answers.push(error_answer(
            None,
            INVALID_REQUEST,
            "Invalid Request: an empty batch".to_owned(),
        ));
        return;
    }
    let (allowed, revision) = {
        let state = lock(state);
        (state.batches_allowed, state.revision.clone())
    };
    if !allowed {
        let message = match revision {
            Some(revision) => format!(
                "Invalid Request: protocol revision {revision} has no batches; send one \
                 message per line"
            ),
            None => "Invalid Request: a batch before initialization; send `initialize` (or, \
                     under protocol 2026-07-28, which has no batches, each request) on its own \
                     line"
                .to_owned(),
        };
        inbound.answers = jsonrpc::refuse_all(&items, INVALID_REQUEST, &message);
        return;
    }
    let mut answers = Vec::new();
    for item in items {
        match single(item, state) {
            Ok(Some(message)) => inbound.deliver.push(message),
            Ok(None) => {}
            Err(answer) => answers.push(answer),
        }
    }
    inbound.batch = Some(answers);
}

/// One JSON value as a message, with this transport's bookkeeping: a cancelled request's id
/// is free again, a pending id may not be reused, a delivered request's id is pending.
fn single(
    value: Value,
    state: &SyncMutex<State>,
) -> Result<Option<RxJsonRpcMessage<RoleServer>>, Value> {
    if let Some(cancelled) = jsonrpc::cancelled_request(&value) {
        // A cancelled request is not answered; its id is free again, and its batch no longer
        // waits for it (rmcp drops the response of a cancelled request).
        let mut state = lock(state);
        state.pending.remove(&cancelled);
        if let Some(at) = state
            .batches
            .iter()
            .position(|batch| batch.waiting.contains(&cancelled))
        {
            state.batches[at].waiting.remove(&cancelled);
            if state.batches[at].waiting.is_empty() {
                let batch = state.batches.remove(at);
                if !batch.answers.is_empty() {
                    state.completed.push(Value::Array(batch.answers));
                }
            }
        }
    }
    if let Some(id) = jsonrpc::request_id(&value) {
        let key = id_key(&id);
        if lock(state).pending.contains(&key) {
            return Err(jsonrpc::id_in_use(id));
        }
    }
    let message = jsonrpc::check(value)?;
    if let Some(key) = message.as_ref().and_then(request_key) {
        lock(state).pending.insert(key);
    }
    Ok(message)
}

#[cfg(test)]
#[path = "stdio_tests.rs"]
mod tests;
