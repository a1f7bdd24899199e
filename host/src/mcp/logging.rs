//! The MCP `logging` capability: the host's log lines that concern a session go to its client
//! as `notifications/message`, at the level the client sets with `logging/setLevel`.
//!
//! A [`tracing`] layer ([`layer`]) copies every `toolhost` event at `info` or above onto a
//! bus; each session that asked for log messages forwards the lines meant for it: those that
//! carry its `scope` field (refusals and limit hits of its calls and commands) and the
//! host-wide ones (plugin loads and reloads, what the machine lacks), never a line about
//! another session. Nothing is sent before the client sets a level. The layer is installed by
//! the `toolhost` binary; a program embedding the host adds it to its own subscriber.
//!
//! The log lines a tool writes during a call (`report.log`, WIT 0.4.0) go to the session that
//! made the call, and only to it ([`SessionLog::tool_sink`]); their `logger` is the plugin's
//! name. Their level is the one the call's request asks for in its `_meta`
//! (`io.modelcontextprotocol/logLevel`, revision 2026-07-28), or else the session's; with
//! neither, none is sent.
//!
//! MCP deprecates logging after 2025-11-25 (SEP-2577) and rmcp marks its types so; clients of
//! 2025-11-25 and before still use it, so it is offered here while they do.
#![allow(deprecated)]

use crate::{LogLevel, LogSink, ToolLog};
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::{Peer, RoleServer};
use serde_json::{Map, Value};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{Filtered, Targets};
use tracing_subscriber::layer::Context;

/// Lines kept for a session that reads too slowly; past it the oldest are dropped (and the
/// client is told how many).
const BACKLOG: usize = 1024;

/// Targets whose lines concern every session (no `scope` field needed).
const HOST_WIDE: &[&str] = &["toolhost::plugins", "toolhost::host", "toolhost::sandbox"];

/// One host log line.
#[derive(Debug, Clone)]
pub struct LogLine {
    level: Level,
    target: String,
    /// The session (scope) it concerns, if it names one.
    scope: Option<String>,
    /// The message and the other fields.
    data: Map<String, Value>,
}

fn bus() -> &'static broadcast::Sender<Arc<LogLine>> {
    static BUS: OnceLock<broadcast::Sender<Arc<LogLine>>> = OnceLock::new();
    BUS.get_or_init(|| broadcast::channel(BACKLOG).0)
}

/// The layer that makes host log lines available to MCP sessions: `toolhost` events at `info`
/// and above.
pub fn layer<S>() -> Filtered<ClientLogLayer, Targets, S>
where
    S: Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    ClientLogLayer.with_filter(Targets::new().with_target("toolhost", Level::INFO))
}

/// See [`layer`].
#[derive(Debug, Clone, Copy)]
pub struct ClientLogLayer;

impl<S: Subscriber> Layer<S> for ClientLogLayer {
    fn on_event(&self, event: &Event<'_>, _context: Context<'_, S>) {
        let bus = bus();
        if bus.receiver_count() == 0 {
            return;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        let metadata = event.metadata();
        let _ = bus.send(Arc::new(LogLine {
            level: *metadata.level(),
            target: metadata.target().to_owned(),
            scope: fields.scope,
            data: fields.data,
        }));
    }
}

#[derive(Default)]
struct Fields {
    scope: Option<String>,
    data: Map<String, Value>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "scope" {
            self.scope = Some(value.to_owned());
        }
        self.data
            .insert(field.name().to_owned(), Value::String(value.to_owned()));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.data.insert(field.name().to_owned(), value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.data.insert(field.name().to_owned(), value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.data.insert(field.name().to_owned(), value.into());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let mut text = String::new();
        let _ = write!(text, "{value:?}");
        if field.name() == "scope" {
            self.scope = Some(text.clone());
        }
        self.data
            .insert(field.name().to_owned(), Value::String(text));
    }
}

/// The MCP level of a tracing level.
fn mcp_level(level: Level) -> LoggingLevel {
    match level {
        Level::ERROR => LoggingLevel::Error,
        Level::WARN => LoggingLevel::Warning,
        Level::INFO => LoggingLevel::Info,
        _ => LoggingLevel::Debug,
    }
}

/// The MCP level of a tool's log line.
fn tool_level(level: LogLevel) -> LoggingLevel {
    match level {
        LogLevel::Debug => LoggingLevel::Debug,
        LogLevel::Info => LoggingLevel::Info,
        LogLevel::Notice => LoggingLevel::Notice,
        LogLevel::Warning => LoggingLevel::Warning,
        LogLevel::Error => LoggingLevel::Error,
        LogLevel::Critical => LoggingLevel::Critical,
        LogLevel::Alert => LoggingLevel::Alert,
        LogLevel::Emergency => LoggingLevel::Emergency,
    }
}

/// The severity order of MCP levels (rmcp's type has none).
fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// Whether a line may go to the session of `scope`.
fn concerns(line: &LogLine, scope: &str) -> bool {
    match &line.scope {
        Some(own) => own == scope,
        None => HOST_WIDE
            .iter()
            .any(|target| line.target.starts_with(target)),
    }
}

/// A session's log forwarding: off until the client sets a level.
#[derive(Default)]
pub struct SessionLog {
    level: Mutex<Option<LoggingLevel>>,
}

impl SessionLog {
    fn level(&self) -> Option<LoggingLevel> {
        *self.level.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A sink for the log lines of one call's tool, and the task forwarding them in order to
    /// `peer` (it ends once the sink is dropped). Lines at `asked` (the request's own level)
    /// and above are sent, or without it at the session's level and above. `None` when there
    /// is neither: then nothing is sent.
    pub fn tool_sink(
        self: &Arc<Self>,
        peer: Peer<RoleServer>,
        asked: Option<LoggingLevel>,
    ) -> Option<(LogSink, tokio::task::JoinHandle<()>)> {
        if asked.is_none() {
            self.level()?;
        }
        let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel::<ToolLog>();
        let log = Arc::clone(self);
        let task = tokio::spawn(async move {
            while let Some(line) = receiver.recv().await {
                let level = tool_level(line.level);
                let wanted = asked.or_else(|| log.level());
                if wanted.is_none_or(|wanted| rank(level) < rank(wanted)) {
                    continue;
                }
                let param =
                    LoggingMessageNotificationParam::new(level, Value::String(line.message))
                        .with_logger(line.plugin);
                if let Err(error) = peer.notify_logging_message(param).await {
                    tracing::debug!(%error, "cannot send a tool's log line");
                    break;
                }
            }
        });
        // The channel holds at most a call's share of lines (`report` bounds them).
        let sink: LogSink = Arc::new(move |line: ToolLog| {
            let _ = sender.send(line);
        });
        Some((sink, task))
    }

    /// Set the level; the first call starts forwarding lines of `scope` to `peer` until
    /// `ended`.
    pub fn set_level(
        self: &Arc<Self>,
        level: LoggingLevel,
        scope: &str,
        peer: Peer<RoleServer>,
        ended: CancellationToken,
    ) {
        let first = self
            .level
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .replace(level)
            .is_none();
        if !first {
            return;
        }
        let mut lines = bus().subscribe();
        let log = Arc::clone(self);
        let scope = scope.to_owned();
        tokio::spawn(async move {
            loop {
                let line = tokio::select! {
                    _ = ended.cancelled() => return,
                    line = lines.recv() => line,
                };
                let param = match line {
                    Ok(line) => {
                        if !concerns(&line, &scope) {
                            continue;
                        }
                        let level = mcp_level(line.level);
                        if log.level().is_none_or(|wanted| rank(level) < rank(wanted)) {
                            continue;
                        }
                        let mut data = line.data.clone();
                        data.remove("scope");
                        LoggingMessageNotificationParam::new(level, Value::Object(data))
                            .with_logger(line.target.clone())
                    }
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        LoggingMessageNotificationParam::new(
                            LoggingLevel::Warning,
                            serde_json::json!({
                                "message": format!("{missed} host log lines were dropped: the client read too slowly")
                            }),
                        )
                        .with_logger("toolhost::mcp")
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                };
                if peer.notify_logging_message(param).await.is_err() {
                    return;
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(target: &str, scope: Option<&str>) -> LogLine {
        LogLine {
            level: Level::WARN,
            target: target.to_owned(),
            scope: scope.map(str::to_owned),
            data: Map::new(),
        }
    }

    #[test]
    fn a_session_gets_its_own_lines_and_host_wide_ones_only() {
        assert!(concerns(&line("toolhost::guest", Some("a")), "a"));
        assert!(!concerns(&line("toolhost::guest", Some("b")), "a"));
        assert!(concerns(&line("toolhost::plugins::registry", None), "a"));
        assert!(!concerns(&line("toolhost::mcp::http::sessions", None), "a"));
    }

    #[test]
    fn a_tool_logs_at_every_mcp_level_in_order() {
        let levels = [
            LogLevel::Debug,
            LogLevel::Info,
            LogLevel::Notice,
            LogLevel::Warning,
            LogLevel::Error,
            LogLevel::Critical,
            LogLevel::Alert,
            LogLevel::Emergency,
        ];
        let ranks: Vec<u8> = levels.iter().map(|l| rank(tool_level(*l))).collect();
        assert_eq!(ranks, [0, 1, 2, 3, 4, 5, 6, 7]);
    }

    #[test]
    fn levels_map_and_order_as_mcp_says() {
        assert_eq!(mcp_level(Level::WARN), LoggingLevel::Warning);
        assert!(rank(mcp_level(Level::INFO)) < rank(LoggingLevel::Warning));
        assert!(rank(mcp_level(Level::ERROR)) > rank(LoggingLevel::Warning));
    }

    #[test]
    fn the_layer_collects_fields_and_the_scope() {
        use tracing_subscriber::layer::SubscriberExt;
        let mut lines = bus().subscribe();
        let subscriber = tracing_subscriber::registry().with(layer());
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(target: "toolhost::guest", scope = "s1", plugin = "p", "refused");
            tracing::debug!(target: "toolhost::guest", scope = "s1", "not at debug");
            tracing::warn!(target: "other", "not another crate's");
        });
        let got = lines.try_recv().expect("one line");
        assert_eq!(got.scope.as_deref(), Some("s1"));
        assert_eq!(got.data["message"], "refused");
        assert_eq!(got.data["plugin"], "p");
        assert!(lines.try_recv().is_err(), "only the warning");
    }
}
