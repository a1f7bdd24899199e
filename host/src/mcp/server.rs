//! [`ToolServer`]: the MCP [`ServerHandler`] that offers a [`ToolHost`]'s tools to one MCP
//! session.
//!
//! Every `ToolServer` value is one session and therefore one scope: the processes its calls
//! start are invisible to every other session, and they are terminated when the session ends
//! (the last clone of the server is dropped, or the caller ends the scope explicitly).

use super::logging::SessionLog;
use super::results::call_result;
use super::scope::{NamedScopes, PeerAddress, Principal, ScopeRef};
use super::{asking, resources, tasks};
use crate::{CallOptions, Progress, ProgressSink, ToolHost, ToolInfo};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CompleteRequestParams, CompleteResult, CustomRequest,
    CustomResult, ErrorCode, GetPromptRequestParams, GetPromptResponse, Implementation,
    InitializeRequestParams, JsonObject, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam,
    ProgressToken, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, ServerCapabilities, ServerConfig, SubscriptionFilter, Tool,
    ToolAnnotations,
};
use rmcp::model::{CancelTaskParams, GetTaskParams, GetTaskResult, UpdateTaskParams};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::task_manager::TaskManager;
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler};
use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Longest a finished call waits for its last progress notifications and log lines to go out
/// before it answers.
const PROGRESS_FLUSH: Duration = Duration::from_secs(1);

/// Longest a call waits for the client's answer to `roots/list` before it runs without it.
const ROOTS_WAIT: Duration = Duration::from_secs(2);

/// Instructions sent to clients in the `initialize` result.
const INSTRUCTIONS: &str = "Shell tools for this machine. Run commands with `execute`; follow \
    background or long-running processes with `process_output`, `process_list` and \
    `process_signal`. The processes you start are yours alone: they are terminated when your \
    connection or session ends (over HTTP, also once idle for the server's idle timeout).";

/// An MCP server handler for one session (scope) of a shared [`ToolHost`].
///
/// Cloning shares the session; the scope's processes are terminated when the last clone is
/// dropped (inside a tokio runtime) or when [`ToolServer::end`] is awaited.
#[derive(Clone)]
pub struct ToolServer {
    session: Arc<Session>,
    /// Over HTTP: the scopes 2026-07-28 requests name (that revision has no sessions).
    named_scopes: Option<Arc<dyn NamedScopes>>,
}

/// The state shared by the clones of one [`ToolServer`].
struct Session {
    host: Arc<ToolHost>,
    scope: String,
    /// Set once a tool was called: only then can the scope own processes.
    used: AtomicBool,
    /// Cancelled when the session ends; stops the tool-list watcher and log forwarding.
    ended: CancellationToken,
    /// Calls of this session running as tasks (2026-07-28 clients on stdio).
    tasks: TaskManager,
    /// Host log lines for the client, once it set a level.
    log: Arc<SessionLog>,
    /// The client's roots were asked for (at the first call).
    roots_asked: AtomicBool,
    /// The client said its roots changed since they were last asked for (set by the handler
    /// of the notification, and on stdio by the transport as it reads it).
    roots_changed: Arc<AtomicBool>,
    /// The transport sets `roots_changed` itself, so the handler of the notification does
    /// not (it may run after the next call has read the flag, and set it again).
    transport_marks_roots: AtomicBool,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.ended.cancel();
        self.tasks.shutdown();
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
                tasks: TaskManager::new(),
                log: Arc::default(),
                roots_asked: AtomicBool::new(false),
                roots_changed: Arc::default(),
                transport_marks_roots: AtomicBool::new(false),
            }),
            named_scopes: None,
        }
    }

    /// A handler for one request or session over HTTP: a 2026-07-28 request runs in a scope
    /// of its principal found in `scopes` (the one it names, or its default one); an older
    /// session runs in its own.
    pub(super) fn with_named_scopes(host: Arc<ToolHost>, scopes: Arc<dyn NamedScopes>) -> Self {
        let mut server = Self::new(host);
        server.named_scopes = Some(scopes);
        server
    }

    /// The scope `context`'s request runs in: the session's, or, for a 2026-07-28 request
    /// over HTTP, its principal's scope it names or the default one.
    fn scope_of(&self, context: &RequestContext<RoleServer>) -> Result<ScopeRef, ErrorData> {
        self.resolve_scope(context, true)?
            .ok_or_else(|| ErrorData::internal_error("a scope that was just made is missing", None))
    }

    /// [`Self::scope_of`] for a request that only reads a scope: an HTTP scope that does not
    /// exist is `None`, not made (so reads cannot fill the table of scopes).
    fn existing_scope_of(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<Option<ScopeRef>, ErrorData> {
        self.resolve_scope(context, false)
    }

    /// The scope whose task `task_id` a request asks about; a scope that does not exist has
    /// no tasks.
    fn task_scope(
        &self,
        context: &RequestContext<RoleServer>,
        task_id: &str,
    ) -> Result<ScopeRef, ErrorData> {
        self.existing_scope_of(context)?
            .ok_or_else(|| ErrorData::invalid_params(format!("unknown task: {task_id}"), None))
    }

    fn resolve_scope(
        &self,
        context: &RequestContext<RoleServer>,
        create: bool,
    ) -> Result<Option<ScopeRef>, ErrorData> {
        let sessionless = super::sessionless(context);
        if let (Some(scopes), true) = (&self.named_scopes, sessionless) {
            return Arc::clone(scopes).resolve(context, create);
        }
        self.session.used.store(true, Ordering::Release);
        if let Some(scopes) = &self.named_scopes {
            scopes.note_session_scope(context, &self.session.scope);
        }
        Ok(Some(ScopeRef::session(
            self.session.scope.clone(),
            self.session.tasks.clone(),
        )))
    }

    /// The flag a transport sets when the client says its roots changed, as it reads the
    /// notification (see [`super::stdio::LineTransport::on_roots_changed`]).
    pub fn roots_changed_flag(&self) -> Arc<AtomicBool> {
        self.session
            .transport_marks_roots
            .store(true, Ordering::Release);
        self.session.roots_changed.clone()
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
    ) -> Result<CallToolResponse, ErrorData> {
        // Over HTTP, how long the request took from its token's check to the call: the
        // transport's parsing and routing, and the wait for a runtime thread.
        let arrived = super::scope::Arrived::of(&context);
        if let Some(arrived) = arrived {
            tracing::debug!(
                target: crate::sandbox::TIMINGS,
                queued = arrived.elapsed().as_secs_f64() * 1e3,
                "call entered"
            );
        }
        let resume = asking::resume(&request);
        let arguments = match request.arguments {
            Some(object) => serde_json::Value::Object(object).to_string(),
            None => "{}".to_string(),
        };
        let scope = self.scope_of(&context)?;
        self.follow_roots(&scope.name, &context).await;
        let principal = Principal::of(&context).map(|who| who.0.as_str());
        // An unknown tool, or a call over a limit, is answered at once (and not as a task
        // that fails); the place taken is the call's.
        let admission = match self
            .session
            .host
            .check_tool(&request.name)
            .and_then(|()| self.session.host.admit_for(&scope.name, principal))
        {
            Ok(admission) => admission,
            Err(refused) => {
                return call_result(&self.session.host, &scope.name, Err(refused)).map(Into::into);
            }
        };
        if tasks::wanted(&request.name, &context) {
            return Ok(CallToolResponse::Task(tasks::spawn(
                self.session.host.clone(),
                admission,
                scope,
                request.name.to_string(),
                arguments,
                principal.map(str::to_owned),
                asking::asking(&context),
            )));
        }
        let mut forwarders = Vec::new();
        let progress = context.meta.get_progress_token().map(|token| {
            let (sink, forwarder) = progress_forwarder(context.peer.clone(), token);
            forwarders.push(forwarder);
            sink
        });
        let log = self
            .session
            .log
            .tool_sink(context.peer.clone(), context.meta.log_level())
            .map(|(sink, forwarder)| {
                forwarders.push(forwarder);
                sink
            });
        // 2025-era sessions are asked within the call; 2026-07-28 clients relay the questions
        // and retry (see `asking`).
        let asking = asking::asking(&context);
        let sessionless = super::sessionless(&context);
        let asker = (!sessionless && !asking.can.is_empty()).then(|| {
            Arc::new(asking::PeerAsker {
                peer: context.peer.clone(),
            }) as Arc<dyn crate::ask::Asker>
        });
        let options = CallOptions {
            progress,
            log,
            cancel: Some(context.ct.clone()),
            waits_for_exit: false,
            tool_progress_only: false,
            principal: principal.map(str::to_owned),
            asking,
            asker,
            resume,
            ask_timeout: None,
            secrets: Default::default(),
        };
        let outcome = self
            .session
            .host
            .call(&scope.name, &request.name, &arguments)
            .options(options)
            .permit(admission)
            .output()
            .await;
        // Only a call that ran here is timed to its end: a refused call, and one run as a
        // task, returned above.
        if let Some(arrived) = arrived {
            tracing::debug!(
                target: crate::sandbox::TIMINGS,
                total = arrived.elapsed().as_secs_f64() * 1e3,
                "call answered"
            );
        }
        // The sinks went away with the call options; let the last updates and log lines go
        // out first so that none arrives after the result.
        let flushed = async {
            for forwarder in forwarders {
                let _ = forwarder.await;
            }
        };
        let _ = tokio::time::timeout(PROGRESS_FLUSH, flushed).await;
        if let Ok(output) = &outcome
            && let Some(relay) = &output.needs_input
        {
            return asking::input_required(relay.clone()).map(CallToolResponse::InputRequired);
        }
        call_result(&self.session.host, &scope.name, outcome).map(Into::into)
    }

    /// Let the client's roots choose the session's workspace (2025-era sessions, whose
    /// clients declare `roots`):
    ///
    /// 1. Asked at the session's first call, and again at the first call after the client
    ///    said they changed (`notifications/roots/list_changed`); else nothing is asked.
    /// 2. A client that is not on this machine (HTTP from an address that is not loopback)
    ///    is not asked: its paths are not this machine's.
    /// 3. The answer is waited for at most [`ROOTS_WAIT`]; a late or failed one leaves the
    ///    workspace as it is.
    /// 4. The first `file:` root that the host accepts as a workspace becomes the session's
    ///    (see [`ToolHost::choose_workspace`]); the others are logged and skipped.
    // Roots are deprecated from revision 2026-07-28 on (SEP-2577); 2025-era clients still
    // offer them, and they are only asked of those.
    #[allow(deprecated)]
    async fn follow_roots(&self, scope: &str, context: &RequestContext<RoleServer>) {
        let session = &self.session;
        let sessionless = super::sessionless(context);
        let offers = context
            .peer
            .peer_info()
            .is_some_and(|info| info.capabilities.roots.is_some());
        if sessionless || !offers {
            return;
        }
        // 1. First call, or changed since.
        let first = !session.roots_asked.swap(true, Ordering::AcqRel);
        let changed = session.roots_changed.swap(false, Ordering::AcqRel);
        if !first && !changed {
            return;
        }
        // 2. Only a client on this machine.
        if !PeerAddress::is_local(context) {
            tracing::debug!(%scope, "the client's roots are not asked for: it is not on this machine");
            return;
        }
        // 3. A bounded wait.
        let roots = match tokio::time::timeout(ROOTS_WAIT, context.peer.list_roots()).await {
            Ok(Ok(listed)) => listed.roots,
            Ok(Err(error)) => {
                tracing::debug!(%scope, %error, "the client did not list its roots");
                return;
            }
            Err(_) => {
                tracing::warn!(
                    %scope,
                    "the client did not answer roots/list within {ROOTS_WAIT:?}: the session keeps its workspace"
                );
                return;
            }
        };
        // 4. The first that is accepted.
        for root in roots {
            let Some(dir) = file_path(&root.uri) else {
                tracing::debug!(%scope, uri = %root.uri, "a root that is not a file: URI is ignored");
                continue;
            };
            let chosen = session
                .host
                .choose_workspace(scope, &dir, crate::process::WorkspaceSource::Roots)
                .await;
            match chosen {
                Ok(_) => return,
                Err(why) => {
                    tracing::info!(%scope, root = %dir.display(), %why, "a root is not taken as the workspace");
                }
            }
        }
    }
}

/// The local path of a `file:` URI (`file:///dir`, `file://localhost/dir`), percent-decoded;
/// `None` for any other URI or host.
fn file_path(uri: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::ffi::OsStringExt;
    let rest = uri.strip_prefix("file://")?;
    let path = rest.strip_prefix("localhost").unwrap_or(rest);
    if !path.starts_with('/') {
        return None;
    }
    let bytes = path.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%' {
            let hex = std::str::from_utf8(bytes.get(index + 1..index + 3)?).ok()?;
            decoded.push(u8::from_str_radix(hex, 16).ok()?);
            index += 3;
        } else {
            decoded.push(bytes[index]);
            index += 1;
        }
    }
    Some(std::path::PathBuf::from(std::ffi::OsString::from_vec(
        decoded,
    )))
}

/// Why there are no `prompts/*` here.
const NO_PROMPTS: &str = "this server offers no prompts";

/// Why there is no `completion/complete` here.
const NO_COMPLETIONS: &str = "this server offers no completions";

/// A -32601 answer: `method` does not exist here, for the reason `why`.
fn method_not_found(method: &str, why: &str) -> ErrorData {
    ErrorData::new(
        ErrorCode::METHOD_NOT_FOUND,
        format!("method not found: {method}: {why}"),
        Some(serde_json::json!({ "method": method })),
    )
}

/// The -32601 answer for `method` when a request of `revision` (`None`: a session not yet
/// initialized) has no such method here: the methods of capabilities this server does not
/// declare, in every revision (prompts, completions, resource subscriptions), and the methods
/// revision 2026-07-28 removed (`initialize`, `ping`, `logging/setLevel`). Decided before the
/// params are looked at.
fn absent_method(method: &str, revision: Option<&ProtocolVersion>) -> Option<ErrorData> {
    let sessionless = revision.is_some_and(|revision| !revision.has_initialize());
    let why = match method {
        "prompts/list" | "prompts/get" => NO_PROMPTS,
        "completion/complete" => NO_COMPLETIONS,
        "resources/subscribe" | "resources/unsubscribe" if sessionless => {
            "protocol revision 2026-07-28 has no such method (it subscribes with \
             `subscriptions/listen`)"
        }
        "resources/subscribe" | "resources/unsubscribe" => {
            "this server offers no resource subscriptions"
        }
        "initialize" | "ping" | "logging/setLevel" if sessionless => {
            "protocol revision 2026-07-28 has no such method"
        }
        _ => return None,
    };
    Some(method_not_found(method, why))
}

/// The error for a request rmcp could not type: -32601 for a method the request's revision
/// does not have here ([`absent_method`]) or an unknown one, else -32602 (with the reason the
/// params do not fit).
fn custom_request_error(
    method: &str,
    params: Option<serde_json::Value>,
    revision: Option<&ProtocolVersion>,
) -> ErrorData {
    fn reason<T: serde::de::DeserializeOwned>(params: Option<serde_json::Value>) -> String {
        match serde_json::from_value::<T>(params.unwrap_or(serde_json::Value::Null)) {
            Err(error) => error.to_string(),
            Ok(_) => "they do not match the method".to_owned(),
        }
    }
    if let Some(absent) = absent_method(method, revision) {
        return absent;
    }
    let why = match method {
        "tools/call" => reason::<CallToolRequestParams>(params),
        "initialize" => reason::<InitializeRequestParams>(params),
        "tools/list" | "resources/list" | "resources/templates/list" => {
            reason::<PaginatedRequestParams>(params)
        }
        "ping" | "resources/read" | "logging/setLevel" => "they do not match the method".to_owned(),
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

/// A progress sink that forwards updates, in order, as `notifications/progress` for `token`,
/// and the task doing it (it ends once the sink is dropped).
fn progress_forwarder(
    peer: Peer<RoleServer>,
    token: ProgressToken,
) -> (ProgressSink, tokio::task::JoinHandle<()>) {
    let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel::<Progress>();
    let task = tokio::spawn(async move {
        while let Some(update) = receiver.recv().await {
            // The call's updates increase already (the guest runtime drops any that do not).
            let mut param = ProgressNotificationParam::new(token.clone(), update.progress);
            if let Some(total) = update.total {
                param = param.with_total(total);
            }
            if let Some(message) = update.message {
                param = param.with_message(message);
            }
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
    // `logging` is deprecated after 2025-11-25, whose clients still use it.
    #[allow(deprecated)]
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_resources()
                .enable_logging()
                .enable_tasks()
                .build(),
        )
        .with_server_info(Implementation::new("toolhost", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
    }

    /// Every revision up to 2026-07-28. That one has no sessions: on stdio the connection is
    /// the scope, over HTTP each request works in its principal's default scope or the one it
    /// names in `_meta` (`toolhost/scope`).
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2026_07_28))
    }

    async fn on_roots_list_changed(&self, _context: NotificationContext<RoleServer>) {
        if !self.session.transport_marks_roots.load(Ordering::Acquire) {
            self.session.roots_changed.store(true, Ordering::Release);
        }
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

    /// 2026-07-28 clients hear of tool-list changes on a `subscriptions/listen` stream.
    fn accepted_subscription_filter(
        &self,
        _requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(SubscriptionFilter::builder().tools_list_changed().build())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let mut changes = self.session.host.changes();
        changes.mark_unchanged();
        loop {
            tokio::select! {
                _ = context.cancelled() => return Ok(()),
                changed = changes.changed() => {
                    if changed.is_err() {
                        return Ok(());
                    }
                    if let Err(error) = context.sink().notify_tool_list_changed().await {
                        tracing::debug!(?error, "cannot send tools/list_changed");
                        return Ok(());
                    }
                }
            }
        }
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

    /// Host log lines about this session (and host-wide ones) from now on, at `level` and
    /// above.
    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        if let Some(absent) = absent_method("logging/setLevel", context.protocol_version().as_ref())
        {
            return Err(absent);
        }
        self.session.log.set_level(
            request.level,
            &self.session.scope,
            context.peer,
            self.session.ended.clone(),
        );
        Ok(())
    }

    /// No prompts: the capability is not declared (rmcp would answer an empty list).
    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Err(method_not_found("prompts/list", NO_PROMPTS))
    }

    async fn get_prompt(
        &self,
        _request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        Err(method_not_found("prompts/get", NO_PROMPTS))
    }

    /// No completions: the capability is not declared (rmcp would answer an empty one).
    async fn complete(
        &self,
        _request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        Err(method_not_found("completion/complete", NO_COMPLETIONS))
    }

    /// The complete output of each process of this session that has an output log.
    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let Some(scope) = self.existing_scope_of(&context)? else {
            return Ok(ListResourcesResult::with_all_items(Vec::new()));
        };
        let mut logs = self.session.host.output_logs(&scope.name);
        logs.sort();
        Ok(ListResourcesResult::with_all_items(
            logs.iter()
                .map(|log| resources::describe(&log.process_id, &log.path))
                .collect(),
        ))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            resources::template(),
        ]))
    }

    /// A page of a process's complete output; another session's process is not found.
    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let asked = resources::parse(&request.uri)?;
        let scope = self.existing_scope_of(&context)?;
        let found = scope.and_then(|scope| self.session.host.output_log(&scope.name, &asked.id));
        let Some(path) = found else {
            return Err(ErrorData::resource_not_found(
                format!(
                    "no output of process `{}` in this session (unknown, another session's, \
                     without output, or deleted after the log retention)",
                    asked.id
                ),
                Some(serde_json::json!({ "uri": request.uri })),
            ));
        };
        let uri = request.uri.clone();
        let contents = tokio::task::spawn_blocking(move || {
            resources::read(&uri, &asked.id, &path, &asked.range)
        })
        .await
        .map_err(|e| ErrorData::internal_error(format!("reading the output failed: {e}"), None))?
        .map_err(|e| ErrorData::resource_not_found(format!("cannot read the output: {e}"), None))?;
        Ok(ReadResourceResult::new(vec![contents]).into())
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
        self.call(request, context).await
    }

    /// A task of this scope: its status, and its result once it ended.
    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let scope = self.task_scope(&context, &request.task_id)?;
        Ok(GetTaskResult::new(scope.tasks.get_task(&request.task_id)?))
    }

    /// The client's answers to a task's questions (its `input_required` status); keys the
    /// task is not waiting for are ignored.
    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let scope = self.task_scope(&context, &request.task_id)?;
        scope
            .tasks
            .update_task(&request.task_id, request.input_responses)
    }

    /// Cancel a task: its call is cancelled, and the bundled policies kill its command and
    /// everything it started.
    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let scope = self.task_scope(&context, &request.task_id)?;
        scope.tasks.cancel_task(&request.task_id)
    }

    /// rmcp hands a standard request whose params do not fit its type here, as an unknown
    /// method: answer it as what it is, invalid params, saying what is wrong.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        Err(custom_request_error(
            &request.method,
            request.params,
            context.protocol_version().as_ref(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::file_path;
    use std::path::PathBuf;

    #[test]
    fn file_uris_give_local_paths_and_nothing_else_does() {
        assert_eq!(
            file_path("file:///home/me/my%20project"),
            Some(PathBuf::from("/home/me/my project"))
        );
        assert_eq!(
            file_path("file://localhost/srv/app"),
            Some(PathBuf::from("/srv/app"))
        );
        for other in [
            "https://example.com/x",
            "file://server/share",
            "file:relative",
            "file:///bad%2",
        ] {
            assert_eq!(file_path(other), None, "{other}");
        }
    }
}
