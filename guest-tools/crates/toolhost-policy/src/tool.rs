//! Tools a policy adds beside the standard ones: [`Tool`] (its definition and handler),
//! [`ToolCall`] (what a handler gets) and [`Reply`] (what it returns).

use crate::args::{Args, format_duration};
use crate::exports::toolhost::plugin::tool::{
    CallContext, CallOutcome, CallResult, Content, NeedsInput, ToolAnnotations, ToolDefinition,
};
use crate::{Policy, SandboxSettings, Settings};
use serde_json::{Map, Value};

/// A tool of the policy's own, listed beside the standard ones (`execute`, `process_output`,
/// `process_input`, `process_list`, `process_signal`). A tool named like a standard one
/// replaces it.
///
/// Everything but the handler is text, so a tool is a `const`:
///
/// ```
/// use toolhost_policy::{Hints, Reply, Tool, ToolCall};
///
/// const WHOAMI: Tool = Tool {
///     name: "whoami",
///     title: "Say who you are",
///     description: "Tell which policy serves this session (the {policy} policy).",
///     input_schema: r#"{"type":"object","properties":{},"additionalProperties":false}"#,
///     output_schema: None,
///     hints: Hints { read_only: true, destructive: false, idempotent: true, open_world: false },
///     run: whoami,
/// };
///
/// fn whoami(call: &ToolCall) -> Result<Reply, String> {
///     call.args(&[])?; // no arguments accepted
///     Ok(toolhost_policy::serde_json::json!({ "policy": call.policy.name }).into())
/// }
/// ```
#[derive(Clone, Copy)]
pub struct Tool {
    /// The name the model calls the tool by: letters, digits, `_` and `-`, unique among the
    /// policy's tools.
    pub name: &'static str,
    /// A short name for people, which clients may show instead of `name`.
    pub title: &'static str,
    /// What the tool does and when to use it, written for a model. A template: `{policy}`
    /// (the policy's name), `{sandbox}` (what the policy's commands may do, in a few words),
    /// `{default_timeout}` and `{max_timeout}` (the policy's settings, after its manifest's
    /// config, e.g. `10s`) are replaced; other text in braces is kept as written.
    pub description: &'static str,
    /// The JSON Schema of the tool's arguments object, as JSON text. Text that is not JSON
    /// refuses the policy's load, naming the tool.
    pub input_schema: &'static str,
    /// The JSON Schema every successful result conforms to, as JSON text, when the results
    /// have a fixed shape (then they must be JSON objects).
    pub output_schema: Option<&'static str>,
    /// How the tool behaves, for clients deciding what needs a person's approval.
    pub hints: Hints,
    /// Runs one call: a [`Reply`], or an error message for the model saying what was wrong
    /// with the call (bad arguments, unknown process id). A command that ran and failed is a
    /// reply, not an error.
    pub run: fn(&ToolCall<'_>) -> Result<Reply, String>,
}

/// How a tool behaves (MCP tool annotations), for clients deciding what needs a person's
/// approval. The host passes them on without checking them: state them truthfully.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hints {
    /// The tool changes nothing (reading, listing).
    pub read_only: bool,
    /// The tool may destroy or overwrite data or stop work; `false`: it only adds.
    pub destructive: bool,
    /// A second call with the same arguments has no further effect.
    pub idempotent: bool,
    /// The tool may reach an open world (the network, anything a shell command can touch);
    /// `false`: only a closed set of things, such as the host's own process records.
    pub open_world: bool,
}

/// One call of a [`Tool`]: its arguments and what the policy knows.
pub struct ToolCall<'a> {
    /// The tool's name (one handler may serve several tools).
    pub name: &'a str,
    /// The arguments, a JSON object as text (may be empty: no arguments). [`ToolCall::args`]
    /// parses it strictly.
    pub arguments: &'a str,
    /// The policy the tool belongs to.
    pub policy: &'a Policy,
    /// The policy's settings for this call: its defaults with the plugin manifest's
    /// `[config]` applied.
    pub settings: &'a Settings,
    /// The host's facts about the call: the caller's scope and the manifest's config table
    /// as JSON text (its keys are those of [`Settings`]: another key refuses the load).
    pub context: &'a CallContext,
}

impl ToolCall<'_> {
    /// The arguments as an object whose keys must all be in `accepted`; a mistake becomes a
    /// message naming the argument, for the model to correct itself.
    pub fn args(&self, accepted: &[&str]) -> Result<Args, String> {
        Args::parse(self.arguments, accepted)
    }
}

/// A tool's result: a JSON value (an object, for a tool with an output schema), the
/// processes whose complete output it points the model to, and content items besides the
/// JSON (images, sounds, resources: WIT 0.4.0 `tool.content`); or questions to ask first
/// ([`Reply::ask`], WIT 0.5.0 `needs-input`).
#[derive(Clone, Debug)]
pub struct Reply {
    output: Value,
    full_output: Vec<String>,
    content: Vec<Content>,
    needs_input: Option<NeedsInput>,
}

impl Reply {
    /// A reply holding `output`.
    pub fn new(output: impl Into<Value>) -> Reply {
        Reply {
            output: output.into(),
            full_output: Vec::new(),
            content: Vec::new(),
            needs_input: None,
        }
    }

    /// No result yet: the host asks `questions` (within the call, or through the client's
    /// retry) and calls the tool again with the replies in `context.answers`.
    pub fn ask(questions: NeedsInput) -> Reply {
        Reply {
            needs_input: Some(questions),
            ..Reply::new(Value::Null)
        }
    }

    /// The questions of a reply made with [`Reply::ask`].
    pub fn needs_input(&self) -> Option<&NeedsInput> {
        self.needs_input.as_ref()
    }

    /// Add a content item after the JSON: over MCP it follows the JSON's text item. The host
    /// takes at most 64 items and 16 MiB of their bytes per result.
    pub fn with_content(mut self, item: Content) -> Reply {
        self.content.push(item);
        self
    }

    /// The content items besides the JSON.
    pub fn content(&self) -> &[Content] {
        &self.content
    }

    /// Offer the client the complete output of process `id` (of the calling scope), typically
    /// one whose output text the reply cut: over MCP the host adds a link to its full output
    /// log. Unknown ids are left out by the host.
    pub fn with_full_output(mut self, id: impl Into<String>) -> Reply {
        self.full_output.push(id.into());
        self
    }

    /// The result JSON.
    pub fn output(&self) -> &Value {
        &self.output
    }

    /// The processes whose complete output the reply points to.
    pub fn full_output(&self) -> &[String] {
        &self.full_output
    }

    /// `fields`, pointing to the full output of process `id` when they name an output file.
    pub(crate) fn linking(fields: Map<String, Value>, id: &str) -> Reply {
        let reply = Reply::new(Value::Object(fields));
        if reply.output.get("output_file").is_some() {
            reply.with_full_output(id)
        } else {
            reply
        }
    }

    /// The reply as the host wants it: a result, or questions.
    pub(crate) fn into_outcome(self) -> CallOutcome {
        match self.needs_input {
            Some(questions) => CallOutcome::NeedsInput(questions),
            None => CallOutcome::Done(CallResult {
                output: self.output.to_string(),
                full_output: self.full_output,
                content: self.content,
            }),
        }
    }
}

impl From<Value> for Reply {
    fn from(output: Value) -> Reply {
        Reply::new(output)
    }
}

impl From<Map<String, Value>> for Reply {
    fn from(fields: Map<String, Value>) -> Reply {
        Reply::new(Value::Object(fields))
    }
}

impl Tool {
    /// The tool's definition under `policy` with `settings`, or why it is unusable.
    pub(crate) fn definition(
        &self,
        policy: &Policy,
        settings: &Settings,
        sandbox: &SandboxSettings,
    ) -> Result<ToolDefinition, String> {
        let schema = |what: &str, text: &str| {
            serde_json::from_str::<Value>(text)
                .map(|_| text.to_string())
                .map_err(|e| format!("tool `{}`: {what} is not valid JSON: {e}", self.name))
        };
        let valid_name = !self.name.is_empty()
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid_name {
            return Err(format!(
                "tool name `{}` must be letters, digits, `_` and `-`",
                self.name
            ));
        }
        let default_timeout = format_duration(settings.default_timeout);
        let max_timeout = format_duration(settings.max_timeout);
        Ok(ToolDefinition {
            name: self.name.to_string(),
            description: crate::texts::fill(
                self.description,
                &[
                    ("policy", policy.name),
                    ("sandbox", &sandbox.summary),
                    ("default_timeout", &default_timeout),
                    ("max_timeout", &max_timeout),
                ],
            ),
            input_schema: schema("input_schema", self.input_schema)?,
            output_schema: self
                .output_schema
                .map(|s| schema("output_schema", s))
                .transpose()?,
            title: Some(self.title.to_string()),
            annotations: self.hints.annotations(),
        })
    }
}

impl Hints {
    /// The hints as the WIT's annotations (every one stated).
    pub(crate) fn annotations(self) -> ToolAnnotations {
        ToolAnnotations {
            read_only: Some(self.read_only),
            destructive: Some(self.destructive),
            idempotent: Some(self.idempotent),
            open_world: Some(self.open_world),
        }
    }
}
