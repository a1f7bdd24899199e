//! The scenario file format (TOML), as `toolhost test` reads it. See the module docs of
//! [`super`] for an example.

use serde::Deserialize;
use std::path::Path;
use std::time::Duration;

/// One scenario file: scenarios run in order, each against a fresh host.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    /// `[config]` settings for the plugin, merged over its manifest's `[config]`, for every
    /// scenario of the file (a scenario's own `config` is merged over these).
    #[serde(default)]
    pub config: toml::Table,
    /// The scenarios.
    #[serde(rename = "scenario", default)]
    pub scenarios: Vec<Scenario>,
}

/// A scripted conversation with a plugin.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// What it checks, as the report shows it.
    pub name: String,
    /// `[config]` settings for this scenario (over the file's and the manifest's).
    #[serde(default)]
    pub config: toml::Table,
    /// The processes the plugin's starts get, in the order it starts them; a start beyond the
    /// list gets a process that exits at once with code 0 and no output.
    #[serde(rename = "process", default)]
    pub processes: Vec<Process>,
    /// The tool calls, in order, in one scope.
    #[serde(rename = "call", default)]
    pub calls: Vec<Call>,
}

/// A scripted process.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Process {
    /// Output visible from its start.
    #[serde(default)]
    pub output: String,
    /// Output that appears only when it ends.
    #[serde(default)]
    pub final_output: String,
    /// Its exit code (default 0).
    pub exit: Option<i32>,
    /// Dies of this signal number instead of exiting.
    pub signal: Option<i32>,
    /// Runs until it is signalled.
    #[serde(default)]
    pub never_exits: bool,
    /// How long it runs before it ends (logical time: no real waiting), e.g. `"30s"`.
    pub runs_for: Option<String>,
    /// Answers to its input (a terminal or an open stdin), in order.
    #[serde(rename = "reply", default)]
    pub replies: Vec<Reply>,
    /// Exits with this code when its stdin is closed.
    pub exits_at_eof: Option<i32>,
}

/// A scripted answer to input.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reply {
    /// Fires once the input since the previous reply contains this text.
    pub when: String,
    /// Output it adds.
    #[serde(default)]
    pub output: String,
    /// Then exits with this code.
    pub exit: Option<i32>,
}

/// One tool call and what it must produce.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Call {
    /// The tool's name.
    pub tool: String,
    /// Its arguments (a table; default none).
    #[serde(default)]
    pub arguments: toml::Table,
    /// The person's answers to the questions the tool asks during this call, by key. Absent:
    /// nobody can be asked, and the tool is told so.
    pub answers: Option<Vec<Answer>>,
    /// What must hold afterwards.
    #[serde(default)]
    pub expect: Expect,
}

/// A scripted reply to the question under `key`: `action` is `accept` (with `content`, the
/// form's fields), `decline`, `cancel`, `timeout` (nobody answers), `sample` (with `text`, the
/// model's completion), `roots` (with `roots`, their URIs) or `give` (with `secret`, what the
/// person types on the page of a secret question). A question without one times out.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Answer {
    /// The question's key.
    pub key: String,
    /// How it is answered.
    pub action: String,
    /// An accepted form's fields.
    #[serde(default)]
    pub content: toml::Table,
    /// A completion's text.
    pub text: Option<String>,
    /// The roots' URIs.
    #[serde(default)]
    pub roots: Vec<String>,
    /// What the person types on a secret question's page.
    pub secret: Option<String>,
}

impl std::fmt::Debug for Answer {
    /// The `secret` typed is not shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Answer")
            .field("key", &self.key)
            .field("action", &self.action)
            .field("content", &self.content)
            .field("text", &self.text)
            .field("roots", &self.roots)
            .field("secret", &self.secret.as_ref().map(|_| "[secret]"))
            .finish()
    }
}

/// The expectations of a call.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// The call returns a result that matches this (see [`super::matching`]).
    pub result: Option<toml::Value>,
    /// The call fails with a tool error whose message matches this string.
    pub error: Option<String>,
    /// The processes this call started, in order: each request matches its entry (`command`,
    /// `workdir`, `env`, `background`, `stdin`, `secrets`: the names of its secrets).
    pub starts: Option<Vec<toml::Value>>,
    /// The signals this call sent, in order (`{ process = "p1", signal = "SIGKILL" }`).
    pub signals: Option<Vec<toml::Value>>,
    /// The input this call wrote to processes, in order (`{ process = "p1", text = "..." }`).
    pub inputs: Option<Vec<toml::Value>>,
    /// The result's content items besides its JSON, in order (WIT 0.4.0): `{ type = "text",
    /// text = "..." }`, `{ type = "image", mime_type = "image/png", bytes = 69 }` (also
    /// `audio`), `{ type = "resource_link", uri = "...", name = "..." }`, `{ type =
    /// "resource", uri = "...", mime_type = "...", text = "..." }` (or `bytes = N` for a blob).
    pub content: Option<Vec<toml::Value>>,
    /// The progress the tool reported itself, in order (`{ progress = 50, total = 100,
    /// message = "..." }`).
    pub progress: Option<Vec<toml::Value>>,
    /// The log lines the tool wrote, in order (`{ level = "info", message = "..." }`).
    pub logs: Option<Vec<toml::Value>>,
    /// The questions the tool asked the scripted person, in order (`{ key = "approve", kind =
    /// "form", message = "re:git push" }`; `kind` is `form`, `sample` or `roots`).
    pub asked: Option<Vec<toml::Value>>,
}

/// A file that could not be read or is not a valid scenario file.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// Not readable.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Not valid: the message says where.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong and where (line and column).
        message: String,
    },
}

impl ScenarioFile {
    /// Read and check `path`.
    pub fn load(path: &Path) -> Result<ScenarioFile, FileError> {
        let text = std::fs::read_to_string(path).map_err(|source| FileError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text).map_err(|message| FileError::Invalid {
            path: path.display().to_string(),
            message,
        })
    }

    /// Parse and check a scenario file's text.
    pub fn parse(text: &str) -> Result<ScenarioFile, String> {
        let file: ScenarioFile = toml::from_str(text).map_err(|e| e.to_string())?;
        if file.scenarios.is_empty() {
            return Err("no [[scenario]] in the file".to_owned());
        }
        for scenario in &file.scenarios {
            let name = &scenario.name;
            if scenario.calls.is_empty() {
                return Err(format!("scenario `{name}` has no [[scenario.call]]"));
            }
            for (n, process) in scenario.processes.iter().enumerate() {
                let which = format!("scenario `{name}`, process {}", n + 1);
                let endings = usize::from(process.exit.is_some())
                    + usize::from(process.signal.is_some())
                    + usize::from(process.never_exits);
                if endings > 1 {
                    return Err(format!(
                        "{which}: give one of `exit`, `signal` and `never_exits`"
                    ));
                }
                if let Some(text) = &process.runs_for {
                    duration(text).map_err(|e| format!("{which}: runs_for: {e}"))?;
                }
            }
            for (n, call) in scenario.calls.iter().enumerate() {
                if call.expect.result.is_some() && call.expect.error.is_some() {
                    return Err(format!(
                        "scenario `{name}`, call {}: expect either `result` or `error`, not both",
                        n + 1
                    ));
                }
            }
        }
        Ok(file)
    }
}

/// A duration such as `"1.5s"` or `"2m"`.
pub fn duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|e| format!("`{text}` is not a duration ({e})"))
}
