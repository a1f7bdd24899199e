//! Tool calls as tasks: the MCP Tasks extension (`io.modelcontextprotocol/tasks`) of protocol
//! 2026-07-28, offered for `execute`.
//!
//! A client that declares the extension in a 2026-07-28 request gets a task for an `execute`
//! call instead of waiting on the request: the call runs on in the request's scope,
//! and the policy is told that its caller waits for the result however long it takes
//! (`process.waits-for-exit`), so the bundled policies hand nothing over to the background at
//! the timeout: the task stays `working` until the command exits. `tasks/get` shows the
//! command's latest progress (time so far, output so far, its last line) as the status
//! message; `tasks/cancel` cancels the call, and both bundled policies then kill the command
//! and everything it started; the task's result is the `execute` result at exit. Each scope
//! has its own tasks: another scope's task id is unknown.
//!
//! A task's tool may ask the person (WIT 0.5.0 `needs-input`): the questions become the task's
//! `input_required` status, with `inputRequests` on `tasks/get`, and the client answers with
//! `tasks/update` (one key at a time if it likes); the task then goes on ([`TaskAsker`]). What
//! the client can be asked is what its `tools/call` request declared.
//!
//! The extension is not defined under 2025-11-25 and earlier: their clients get plain results.

use super::asking;
use super::results::call_result;
use super::scope::ScopeRef;
use crate::ask::rounds::read;
use crate::ask::{Answer, Asker, Asking, BoxFuture, Question, Reply};
use crate::{CallOptions, CallPermit, Progress, ProgressSink, ToolHost};
use rmcp::model::{CallToolResult, CreateTaskResult};
use rmcp::service::RequestContext;
use rmcp::task_manager::{TaskContext, TaskExit, TaskOptions};
use rmcp::{ErrorData, RoleServer};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// The tools that run as a task when the client asks for tasks.
const TASK_TOOLS: &[&str] = &["execute"];

/// How long a task is kept: a task still running then fails (a call cannot outlast its
/// plugin's wall-time limit, 1 h by default, anyway), a finished one is forgotten that long
/// after it ended.
const TASK_TTL_MS: u64 = 6 * 60 * 60 * 1000;

/// How often a client should poll `tasks/get`.
const POLL_INTERVAL_MS: u64 = 1000;

/// Whether this call of `tool` should run as a task: a 2026-07-28 request from a client that
/// declares the Tasks extension.
pub(super) fn wanted(tool: &str, context: &RequestContext<RoleServer>) -> bool {
    TASK_TOOLS.contains(&tool)
        && super::sessionless(context)
        && context
            .client_capabilities()
            .is_some_and(|capabilities| capabilities.supports_tasks())
}

/// Start the call, admitted already (a call refused by the host's limit gets no task), as a
/// task of `scope` and return what the client is told.
pub(super) fn spawn(
    host: Arc<ToolHost>,
    admission: CallPermit,
    scope: ScopeRef,
    tool: String,
    arguments: String,
    principal: Option<String>,
    asking: Asking,
) -> CreateTaskResult {
    let tasks = scope.tasks.clone();
    let options = TaskOptions::new()
        .with_ttl_ms(TASK_TTL_MS)
        .with_poll_interval_ms(POLL_INTERVAL_MS)
        .with_status_message(format!("{tool} started"));
    let task = tasks.spawn(options, move |task| {
        Box::pin(async move {
            // `scope` (and the lease it may hold on an HTTP scope) lives as long as the task.
            let cancel = CancellationToken::new();
            let watcher = {
                let task = task.clone();
                let cancel = cancel.clone();
                tokio::spawn(async move {
                    task.cancelled().await;
                    cancel.cancel();
                })
            };
            let status = task.clone();
            let progress: ProgressSink = Arc::new(move |update: Progress| {
                if let Some(message) = update.message {
                    status.set_status_message(message);
                }
            });
            let options = CallOptions {
                progress: Some(progress),
                log: None,
                cancel: Some(cancel.clone()),
                waits_for_exit: true,
                tool_progress_only: false,
                principal,
                asker: (!asking.can.is_empty()).then(|| {
                    Arc::new(TaskAsker {
                        task: task.clone(),
                        used: Mutex::default(),
                    }) as Arc<dyn Asker>
                }),
                asking,
                ..CallOptions::default()
            };
            let outcome = host
                .call(&scope.name, &tool, &arguments)
                .permit(admission)
                .options(options)
                .output()
                .await;
            watcher.abort();
            let result: Result<CallToolResult, ErrorData> =
                call_result(&host, &scope.name, outcome);
            match result {
                // Cancelled before the command ended (a result that came first stands).
                Ok(result) if cancel.is_cancelled() && result.is_error == Some(true) => {
                    Err(TaskExit::Cancelled)
                }
                other => other.map_err(TaskExit::Error),
            }
        })
    });
    CreateTaskResult::new(task)
}

/// Asks a task's questions as its `input_required` status: each question is an entry of
/// `inputRequests` on `tasks/get`, all at once, and its reply is what the client sends for it
/// with `tasks/update`.
struct TaskAsker {
    task: TaskContext,
    /// How often each question key was asked in this task: a task's input keys must be
    /// unique over its life, so a key asked again in a later round gets `.2`, `.3`, ... (a
    /// tool's keys hold no `.`, so none of its own is taken).
    used: Mutex<HashMap<String, u32>>,
}

impl TaskAsker {
    /// The task's key for `key`, unique over the task's life.
    fn task_key(&self, key: &str) -> String {
        let mut used = crate::lock(&self.used);
        let count = used.entry(key.to_owned()).or_insert(0);
        *count += 1;
        if *count == 1 {
            key.to_owned()
        } else {
            format!("{key}.{count}")
        }
    }

    /// One question's reply.
    async fn ask_one(&self, question: &Question) -> Answer {
        let reply = match asking::input_request(&question.ask) {
            Ok(request) => {
                let key = self.task_key(&question.key);
                match self.task.request_input(key, request).await {
                    Ok(value) => read(question.ask.kind(), &value),
                    // `tasks/cancel` dropped the wait.
                    Err(TaskExit::Cancelled) => Reply::Cancelled,
                    Err(TaskExit::Error(error)) => {
                        Reply::Unusable(format!("the task could not ask: {}", error.message))
                    }
                }
            }
            Err(error) => Reply::Unusable(format!("the question is no MCP request: {error}")),
        };
        Answer {
            key: question.key.clone(),
            reply,
        }
    }
}

impl Asker for TaskAsker {
    /// Every question at once; those not answered by `deadline` are left out (timed out).
    fn ask<'a>(
        &'a self,
        questions: &'a [Question],
        deadline: tokio::time::Instant,
    ) -> BoxFuture<'a, Vec<Answer>> {
        Box::pin(async move {
            let answers = futures_util::future::join_all(
                questions
                    .iter()
                    .map(|question| tokio::time::timeout_at(deadline, self.ask_one(question))),
            )
            .await;
            answers.into_iter().filter_map(Result::ok).collect()
        })
    }
}
