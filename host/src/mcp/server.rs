//! [`ToolServer`]: the MCP [`ServerHandler`] that offers a [`ToolHost`]'s tools to one MCP
//! session.
//!
//! Every `ToolServer` value is one session and therefore one scope: the processes its calls
//! start are invisible to every other session, and they are terminated when the session ends
//! (the last clone of the server is dropped, or the caller ends the scope explicitly).

use crate::{CallError, CallOptions, Progress, ProgressSink, ToolHost, ToolInfo};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, CustomRequest,
    CustomResult, ErrorCode, Implementation, InitializeRequestParams, JsonObject, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ProgressToken, ProtocolVersion,
    ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler};
use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Longest a finished call waits for its last progress notifications to go out before it
/// answers.
const PROGRESS_FLUSH: Duration = Duration::from_secs(1);

/// Instructions sent to clients in the `initialize` result.
const INSTRUCTIONS: &str = "Shell tools for this machine. Run commands with `execute`; follow \
    background or long-running processes with `process_output`, `process_list` and \
    `process_signal`. Processes belong to this MCP session and are terminated when it ends.";

/// An MCP server handler for one session (scope) of a shared [`ToolHost`].
///
/// Cloning shares the session; the scope's processes are terminated when the last clone is
/// dropped (inside a tokio runtime) or when [`ToolServer::end`] is awaited.
#[derive(Clone)]
pub struct ToolServer {
    session: Arc<Session>,
}

/// The state shared by the clones of one [`ToolServer`].
struct Session {
    host: Arc<ToolHost>,
    scope: String,
    /// Set once a tool was called: only then can the scope own processes.
    used: AtomicBool,
    /// Cancelled when the session ends; stops the tool-list watcher.
    ended: CancellationToken,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.ended.cancel();
        if !self.used.load(Ordering::Acquire) {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let host = self.host.clone();
                let scope = std::mem::take(&mut self.scope);
                runtime.spawn(async move {
                    tracing::debug!(%scope, "MCP session ended; terminating its processes");
                    host.end_scope(&scope).await;
                });
            }
            Err(_) => tracing::warn!(
                scope = %self.scope,
                "MCP session dropped outside a runtime; its processes end with the host"
            ),
        }
    }
}

impl ToolServer {
    /// A handler for a new session of `host`, with a fresh, unique scope id.
    pub fn new(host: Arc<ToolHost>) -> Self {
        Self::with_scope(host, format!("mcp-{}", uuid::Uuid::new_v4()))
    }

    /// A handler for a session with the given scope id.
    pub fn with_scope(host: Arc<ToolHost>, scope: String) -> Self {
        ToolServer {
            session: Arc::new(Session {
                host,
                scope,
                used: AtomicBool::new(false),
                ended: CancellationToken::new(),
            }),
        }
    }

    /// The scope every call of this session runs in.
    pub fn scope(&self) -> &str {
        &self.session.scope
    }

    /// End the session now: stop its notifications and terminate every process it started,
    /// waiting until they are gone.
    pub async fn end(&self) {
        self.session.ended.cancel();
        self.session.host.end_scope(&self.session.scope).await;
    }

    async fn call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let arguments = match request.arguments {
            Some(object) => serde_json::Value::Object(object).to_string(),
            None => "{}".to_string(),
        };
        let (progress, forwarder) = match context.meta.get_progress_token() {
            Some(token) => {
                let (sink, forwarder) = progress_forwarder(context.peer.clone(), token);
                (Some(sink), Some(forwarder))
            }
            None => (None, None),
        };
        let options = CallOptions {
            progress,
            cancel: Some(context.ct.clone()),
        };
        self.session.used.store(true, Ordering::Release);
        let outcome = self
            .session
            .host
            .call_with(&self.session.scope, &request.name, &arguments, options)
            .await;
        if let Some(forwarder) = forwarder {
            // The sink went away with the call options; let the last updates go out first
            // so that none arrives after the result.
            let _ = tokio::time::timeout(PROGRESS_FLUSH, forwarder).await;
        }
        match outcome {
            Ok(text) => Ok(tool_result(text)),
            Err(CallError::UnknownTool { name, available }) => Err(ErrorData::invalid_params(
                format!("unknown tool `{name}`; available tools: {available}"),
                Some(serde_json::json!({ "tool": name })),
            )),
            Err(
                error @ (CallError::Tool(_) | CallError::Limit { .. } | CallError::Plugin { .. }),
            ) => Ok(CallToolResult::error(vec![ContentBlock::text(
                error.to_string(),
            )])),
        }
    }
}

/// The error for a request rmcp could not type: -32602 for a standard method (with the reason
/// the params do not fit), -32601 for any other.
fn custom_request_error(method: &str, params: Option<serde_json::Value>) -> ErrorData {
    fn reason<T: serde::de::DeserializeOwned>(params: Option<serde_json::Value>) -> String {
        match serde_json::from_value::<T>(params.unwrap_or(serde_json::Value::Null)) {
            Err(error) => error.to_string(),
            Ok(_) => "they do not match the method".to_owned(),
        }
    }
    let why = match method {
        "tools/call" => reason::<CallToolRequestParams>(params),
        "initialize" => reason::<InitializeRequestParams>(params),
        "tools/list" | "resources/list" | "resources/templates/list" | "prompts/list" => {
            reason::<PaginatedRequestParams>(params)
        }
        "ping"
        | "resources/read"
        | "resources/subscribe"
        | "resources/unsubscribe"
        | "prompts/get"
        | "completion/complete"
        | "logging/setLevel" => "they do not match the method".to_owned(),
        _ => {
            return ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!("method not found: {method}"),
                None,
            );
        }
    };
    ErrorData::invalid_params(
        format!("invalid params for {method}: {why}"),
        Some(serde_json::json!({ "method": method })),
    )
}

/// A successful call's result: the JSON text as text content and, when it is a JSON object,
/// also as structured content.
fn tool_result(text: String) -> CallToolResult {
    match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(value @ serde_json::Value::Object(_)) => {
            let mut result = CallToolResult::structured(value);
            result.content = vec![ContentBlock::text(text)];
            result
        }
        _ => CallToolResult::success(vec![ContentBlock::text(text)]),
    }
}

/// A progress sink that forwards updates, in order, as `notifications/progress` for `token`,
/// and the task doing it (it ends once the sink is dropped).
fn progress_forwarder(
    peer: Peer<RoleServer>,
    token: ProgressToken,
) -> (ProgressSink, tokio::task::JoinHandle<()>) {
    let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel::<Progress>();
    let task = tokio::spawn(async move {
        while let Some(update) = receiver.recv().await {
            // Progress must increase: seconds since the wait began do.
            let param =
                ProgressNotificationParam::new(token.clone(), update.elapsed_ms as f64 / 1000.0)
                    .with_message(update.message);
            if let Err(error) = peer.notify_progress(param).await {
                tracing::debug!(%error, "cannot send a progress notification");
                break;
            }
        }
    });
    let sink: ProgressSink = Arc::new(move |update: Progress| {
        let _ = sender.send(update);
    });
    (sink, task)
}

/// An MCP tool definition for a host tool.
fn mcp_tool(tool: ToolInfo) -> Tool {
    let schema: JsonObject = match tool.input_schema {
        serde_json::Value::Object(object) => object,
        _ => {
            let mut object = JsonObject::new();
            object.insert("type".to_string(), "object".into());
            object
        }
    };
    let mut mcp = Tool::new(tool.name, tool.description, Arc::new(schema));
    if let Some(title) = tool.title {
        mcp = mcp.with_title(title);
    }
    if !tool.annotations.is_empty() {
        let mut annotations = ToolAnnotations::new();
        annotations.read_only_hint = tool.annotations.read_only;
        annotations.destructive_hint = tool.annotations.destructive;
        annotations.idempotent_hint = tool.annotations.idempotent;
        annotations.open_world_hint = tool.annotations.open_world;
        mcp = mcp.with_annotations(annotations);
    }
    match tool.output_schema {
        Some(serde_json::Value::Object(output)) => mcp.with_raw_output_schema(Arc::new(output)),
        _ => mcp,
    }
}

impl ServerHandler for ToolServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("toolhost", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
    }

    /// Only versions with `initialize`: a session (and its scope) starts there. The
    /// session-less 2026-07-28 protocol has no place for per-session processes.
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(
            &ProtocolVersion::LATEST_WITH_INITIALIZE,
        ))
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let mut changes = self.session.host.changes();
        changes.mark_unchanged();
        let ended = self.session.ended.clone();
        let peer = context.peer;
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = ended.cancelled() => break,
                    changed = changes.changed() => {
                        if changed.is_err() {
                            break;
                        }
                        if let Err(error) = peer.notify_tool_list_changed().await {
                            tracing::debug!(%error, "cannot send tools/list_changed");
                            break;
                        }
                    }
                }
            }
        });
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(
            self.session
                .host
                .tools()
                .into_iter()
                .map(mcp_tool)
                .collect(),
        ))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.session
            .host
            .tools()
            .into_iter()
            .find(|t| t.name == name)
            .map(mcp_tool)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.call(request, context).await.map(Into::into)
    }

    /// rmcp hands a standard request whose params do not fit its type here, as an unknown
    /// method: answer it as what it is, invalid params, saying what is wrong.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        Err(custom_request_error(&request.method, request.params))
    }
}
