//! Runs scenarios against a plugin component on the fake process capability.

use super::file::{Answer, Call, Process, Scenario, ScenarioFile, duration};
use super::matching::{differences, text_matches};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use toolhost::ask::{self, Answer as Given, Ask, Asker, Asking, CanAsk, Question, Reply, Root};
use toolhost::process::Stdin;
use toolhost::testing::{FakeProcesses, Script};
use toolhost::{CallOptions, ContentItem, Progress, ResourceBody, ToolHost, ToolLog};

/// The scope every call of a scenario runs in.
const SCOPE: &str = "scenario";

/// What became of one scenario.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The scenario's name.
    pub name: String,
    /// What did not hold, one line each; empty when it passed.
    pub failures: Vec<String>,
}

impl Outcome {
    /// Whether everything held.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// The plugin could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {source}")]
pub struct PluginError {
    /// The component or manifest.
    pub path: String,
    /// Why.
    pub source: std::io::Error,
}

/// A plugin component and its manifest, ready to run scenarios against.
pub struct Runner {
    name: String,
    component: Vec<u8>,
    manifest: toml::Table,
    cache: Option<PathBuf>,
}

impl Runner {
    /// The component at `component`, with the manifest at `manifest` or, if `None`, the
    /// `NAME.toml` beside it when there is one (else none, as in a plugin directory).
    /// Compiled components are cached in `cache` (`None`: compiled each time).
    pub fn new(
        component: &Path,
        manifest: Option<&Path>,
        cache: Option<PathBuf>,
    ) -> Result<Runner, PluginError> {
        let read_error = |path: &Path| {
            let path = path.display().to_string();
            move |source| PluginError { path, source }
        };
        let bytes = std::fs::read(component).map_err(read_error(component))?;
        let name = component
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("plugin")
            .to_owned();
        let beside = component.with_extension("toml");
        let manifest_path = match manifest {
            Some(path) => Some(path.to_path_buf()),
            None => beside.is_file().then_some(beside),
        };
        let manifest = match manifest_path {
            Some(path) => {
                let text = std::fs::read_to_string(&path).map_err(read_error(&path))?;
                text.parse::<toml::Table>().map_err(|e| PluginError {
                    path: path.display().to_string(),
                    source: std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()),
                })?
            }
            None => toml::Table::new(),
        };
        Ok(Runner {
            name,
            component: bytes,
            manifest,
            cache,
        })
    }

    /// Run every scenario of `file`, in order, each against a fresh host.
    pub async fn run_file(&self, file: &ScenarioFile) -> Vec<Outcome> {
        let mut outcomes = Vec::new();
        for scenario in &file.scenarios {
            let failures = match self.run(&file.config, scenario).await {
                Ok(failures) => failures,
                Err(failure) => vec![failure],
            };
            outcomes.push(Outcome {
                name: scenario.name.clone(),
                failures,
            });
        }
        outcomes
    }

    async fn run(&self, config: &toml::Table, scenario: &Scenario) -> Result<Vec<String>, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("no temporary directory: {e}"))?;
        let mut manifest = self.manifest.clone();
        let merged = manifest
            .entry("config")
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if let toml::Value::Table(table) = merged {
            table.extend(config.clone());
            table.extend(scenario.config.clone());
        }
        let wasm = dir.path().join(format!("{}.wasm", self.name));
        std::fs::write(&wasm, &self.component).map_err(|e| format!("cannot stage it: {e}"))?;
        std::fs::write(
            dir.path().join(format!("{}.toml", self.name)),
            toml::to_string(&manifest).map_err(|e| format!("cannot write the manifest: {e}"))?,
        )
        .map_err(|e| format!("cannot stage its manifest: {e}"))?;

        let fake = FakeProcesses::new();
        fake.set_default(Script::exits(0));
        for process in &scenario.processes {
            fake.push(script(process)?);
        }
        let host = ToolHost::builder()
            .ask_mode(ask::AskMode::Risky)
            .bundled_policy(None)
            .plugin_dir(dir.path())
            .process_backend(fake.clone())
            .cache_dir(self.cache.clone())
            .build()
            .await
            .map_err(|e| format!("the plugin did not load: {e}"))?;
        let mut failures = Vec::new();
        for (n, call) in scenario.calls.iter().enumerate() {
            let label = format!("call {} ({})", n + 1, call.tool);
            for failure in self.check_call(&host, &fake, call).await {
                failures.push(format!("{label}: {failure}"));
            }
        }
        host.shutdown().await;
        Ok(failures)
    }

    async fn check_call(
        &self,
        host: &ToolHost,
        fake: &Arc<FakeProcesses>,
        call: &Call,
    ) -> Vec<String> {
        let (starts, signals, inputs) = (
            fake.starts().len(),
            fake.signals().len(),
            fake.inputs().len(),
        );
        let arguments = json_of(&toml::Value::Table(call.arguments.clone())).to_string();
        let progress: Arc<Mutex<Vec<Value>>> = Arc::default();
        let logs: Arc<Mutex<Vec<Value>>> = Arc::default();
        let options = {
            let (progress, logs) = (progress.clone(), logs.clone());
            CallOptions {
                progress: Some(Arc::new(move |update: Progress| {
                    lock(&progress).push(json!({
                        "progress": update.progress,
                        "total": update.total,
                        "message": update.message,
                    }));
                })),
                log: Some(Arc::new(move |line: ToolLog| {
                    lock(&logs)
                        .push(json!({"level": line.level.as_str(), "message": line.message}));
                })),
                // The processes run in logical time: the host's own updates would wait in
                // real time.
                tool_progress_only: true,
                ..CallOptions::default()
            }
        };
        let person = call.answers.as_ref().map(|answers| {
            Arc::new(ScriptedPerson {
                answers: answers.clone(),
                asked: Mutex::default(),
            })
        });
        let options = match &person {
            Some(person) => CallOptions {
                asking: Asking::of(
                    CanAsk {
                        form: true,
                        sample: true,
                        roots: true,
                        secret: true,
                    },
                    "",
                    "",
                ),
                asker: Some(person.clone() as Arc<dyn Asker>),
                ..options
            },
            None => CallOptions {
                asking: Asking::nobody("the scenario scripts no answers for this call"),
                ..options
            },
        };
        let outcome = host
            .call(SCOPE, &call.tool, &arguments)
            .options(options)
            .output()
            .await;
        let expect = &call.expect;
        let mut failures = Vec::new();
        let content = match &outcome {
            Ok(output) => output.content.iter().map(content_json).collect(),
            Err(_) => Vec::new(),
        };
        let outcome = outcome.map(|output| output.text);
        match (&outcome, &expect.error) {
            (Ok(text), Some(want)) => failures.push(format!(
                "expected a tool error matching {want:?}, got a result: {text}"
            )),
            (Ok(text), None) => {
                if let Some(want) = &expect.result {
                    let actual =
                        serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.clone()));
                    let found = differences("result", &json_of(want), &actual);
                    if !found.is_empty() {
                        failures.extend(found);
                        failures.push(format!("the result was: {text}"));
                    }
                }
            }
            (Err(error), Some(want)) => {
                failures.extend(text_matches("error", want, &error.to_string()));
            }
            (Err(error), None) => failures.push(format!("failed: {error}")),
        }
        if let Some(want) = &expect.starts {
            let actual: Vec<Value> = fake.starts()[starts..]
                .iter()
                .map(|start| {
                    let request = &start.request;
                    let env: serde_json::Map<String, Value> = request
                        .env
                        .iter()
                        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                        .collect();
                    json!({
                        "command": request.command,
                        "workdir": request.workdir.as_ref().map(|d| d.display().to_string()),
                        "env": env,
                        "background": request.background,
                        "secrets": request.secrets.iter().map(|(name, _)| name.as_str()).collect::<Vec<_>>(),
                        "stdin": match request.stdin {
                            Stdin::Closed => "closed",
                            Stdin::Pipe => "pipe",
                            Stdin::Terminal(_) => "terminal",
                        },
                        "id": start.id,
                    })
                })
                .collect();
            failures.extend(differences(
                "starts",
                &Value::Array(want.iter().map(json_of).collect()),
                &Value::Array(actual),
            ));
        }
        if let Some(want) = &expect.signals {
            let actual: Vec<Value> = fake.signals()[signals..]
                .iter()
                .map(|(id, signal)| json!({"process": id, "signal": signal.name()}))
                .collect();
            failures.extend(differences(
                "signals",
                &Value::Array(want.iter().map(json_of).collect()),
                &Value::Array(actual),
            ));
        }
        let asked = person
            .as_ref()
            .map(|person| lock(&person.asked).clone())
            .unwrap_or_default();
        for (name, want, actual) in [
            ("asked", &expect.asked, asked),
            ("content", &expect.content, content),
            ("progress", &expect.progress, lock(&progress).clone()),
            ("logs", &expect.logs, lock(&logs).clone()),
        ] {
            if let Some(want) = want {
                failures.extend(differences(
                    name,
                    &Value::Array(want.iter().map(json_of).collect()),
                    &Value::Array(actual),
                ));
            }
        }
        if let Some(want) = &expect.inputs {
            let actual: Vec<Value> = fake.inputs()[inputs..]
                .iter()
                .map(|(id, bytes)| json!({"process": id, "text": String::from_utf8_lossy(bytes)}))
                .collect();
            failures.extend(differences(
                "inputs",
                &Value::Array(want.iter().map(json_of).collect()),
                &Value::Array(actual),
            ));
        }
        failures
    }
}

/// Lock a recording of a call's reports (a sink that panicked left plain data behind).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A content item as a scenario's `expect.content` names it: bytes by their count.
fn content_json(item: &ContentItem) -> Value {
    match item {
        ContentItem::Text(text) => json!({"type": "text", "text": text}),
        ContentItem::Image { mime_type, data } => {
            json!({"type": "image", "mime_type": mime_type, "bytes": data.len()})
        }
        ContentItem::Audio { mime_type, data } => {
            json!({"type": "audio", "mime_type": mime_type, "bytes": data.len()})
        }
        ContentItem::ResourceLink {
            uri,
            name,
            title,
            description,
            mime_type,
            size,
        } => json!({
            "type": "resource_link", "uri": uri, "name": name, "title": title,
            "description": description, "mime_type": mime_type, "size": size,
        }),
        ContentItem::Resource {
            uri,
            mime_type,
            body,
        } => match body {
            ResourceBody::Text(text) => {
                json!({"type": "resource", "uri": uri, "mime_type": mime_type, "text": text})
            }
            ResourceBody::Blob(data) => {
                json!({"type": "resource", "uri": uri, "mime_type": mime_type, "bytes": data.len()})
            }
        },
    }
}

/// The fake process a scripted [`Process`] describes.
fn script(process: &Process) -> Result<Script, String> {
    let mut script = if process.never_exits {
        Script::never_exits()
    } else if let Some(signal) = process.signal {
        Script::killed_by(signal)
    } else {
        Script::exits(process.exit.unwrap_or(0))
    };
    script = script
        .output(&process.output)
        .final_output(&process.final_output);
    if let Some(text) = &process.runs_for {
        script = script.runs_for(duration(text)?);
    }
    for reply in &process.replies {
        script = match reply.exit {
            Some(code) => script.reply_and_exit(&reply.when, &reply.output, code),
            None => script.reply(&reply.when, &reply.output),
        };
    }
    if let Some(code) = process.exits_at_eof {
        script = script.exits_at_eof(code);
    }
    Ok(script)
}

/// A TOML value as JSON.
fn json_of(value: &toml::Value) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// The scenario's person: answers each question from the call's `answers`, and notes what
/// was asked.
struct ScriptedPerson {
    answers: Vec<Answer>,
    asked: Mutex<Vec<Value>>,
}

impl Asker for ScriptedPerson {
    fn ask<'a>(
        &'a self,
        questions: &'a [Question],
        _deadline: tokio::time::Instant,
    ) -> ask::BoxFuture<'a, Vec<Given>> {
        Box::pin(async move {
            let mut given = Vec::new();
            for question in questions {
                let message = match &question.ask {
                    Ask::Form(form) => form.message.clone(),
                    Ask::Sample(sample) => sample.prompt.clone(),
                    Ask::Roots => String::new(),
                    Ask::Secret(secret) => secret.message.clone(),
                };
                lock(&self.asked).push(json!({
                    "key": question.key,
                    "kind": question.ask.kind(),
                    "message": message,
                }));
                if let Some(answer) = self.answers.iter().find(|a| a.key == question.key) {
                    let reply = match (&question.ask, answer.action.as_str()) {
                        (Ask::Secret(secret), "give") => give_on_page(secret, answer).await,
                        (Ask::Secret(_), "accept") => Reply::Unusable(
                            "a secret question is answered with `give` and `secret`".to_owned(),
                        ),
                        (_, "give") => {
                            Reply::Unusable("`give` answers only a secret question".to_owned())
                        }
                        _ => scripted(answer),
                    };
                    given.push(Given {
                        key: question.key.clone(),
                        reply,
                    });
                }
            }
            given
        })
    }
}

/// The longest the scripted person's use of a secret's page may take.
const PAGE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Do what the scripted person does for a secret question: open its page, type the answer's
/// `secret` and send the form, as a browser does. The reply says the person went to the page
/// (the round then takes the secret from it), or why the page could not be used.
async fn give_on_page(question: &ask::SecretAsk, answer: &Answer) -> Reply {
    let Some(secret) = &answer.secret else {
        return Reply::Unusable("the scenario's `give` answer has no `secret`".to_owned());
    };
    let Some(page) = &question.page else {
        return Reply::Unusable("the host opened no page for the secret".to_owned());
    };
    match tokio::time::timeout(PAGE_WAIT, post_on_page(&page.url, secret)).await {
        Ok(Ok(())) => Reply::SecretGiven(String::new()),
        Ok(Err(why)) => Reply::Unusable(format!("the page for the secret: {why}")),
        Err(_) => Reply::Unusable(format!(
            "the page for the secret did not answer within {PAGE_WAIT:?}"
        )),
    }
}

/// `GET url`, then `POST` its form with `secret`; an error unless the page took it.
async fn post_on_page(url: &str, secret: &str) -> Result<(), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("not an http link: {url}"))?;
    let (host, path) = rest
        .split_once('/')
        .ok_or_else(|| format!("no path in {url}"))?;
    let exchange = |request: String| async move {
        let mut stream = tokio::net::TcpStream::connect(host)
            .await
            .map_err(|e| e.to_string())?;
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut answer = String::new();
        stream
            .read_to_string(&mut answer)
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(answer)
    };
    let page = exchange(format!(
        "GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    ))
    .await?;
    const FIELD: &str = "name=\"form\" value=\"";
    let token = page
        .find(FIELD)
        .and_then(|start| page[start + FIELD.len()..].split('"').next())
        .ok_or("the page has no form")?;
    let body = form_urlencoded::Serializer::new(String::new())
        .append_pair("form", token)
        .append_pair("secret", secret)
        .append_pair("action", "give")
        .finish();
    let answer = exchange(format!(
        "POST /{path} HTTP/1.1\r\nHost: {host}\r\nOrigin: http://{host}\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    ))
    .await?;
    if answer.starts_with("HTTP/1.1 200") {
        Ok(())
    } else {
        Err(answer.lines().next().unwrap_or("no answer").to_owned())
    }
}

/// A scripted answer as the reply it stands for.
fn scripted(answer: &Answer) -> Reply {
    match answer.action.as_str() {
        "accept" => Reply::Accepted(
            answer
                .content
                .iter()
                .map(|(name, value)| {
                    let value = match value {
                        toml::Value::Boolean(yes) => ask::Value::YesNo(*yes),
                        toml::Value::Integer(n) => ask::Value::Number(*n as f64),
                        toml::Value::Float(n) => ask::Value::Number(*n),
                        toml::Value::String(text) => ask::Value::Text(text.clone()),
                        other => ask::Value::Text(other.to_string()),
                    };
                    (name.clone(), value)
                })
                .collect(),
        ),
        "decline" => Reply::Declined,
        "cancel" => Reply::Cancelled,
        "timeout" => Reply::TimedOut,
        "sample" => Reply::Sampled(answer.text.clone().unwrap_or_default()),
        "roots" => Reply::Roots(
            answer
                .roots
                .iter()
                .map(|uri| Root {
                    uri: uri.clone(),
                    name: None,
                })
                .collect(),
        ),
        other => Reply::Unusable(format!(
            "the scenario's answer action `{other}` is none of accept, decline, cancel, \
             timeout, sample, roots, give (for a secret question)"
        )),
    }
}
