//! The logic shared by the bundled shell tool policies (`default-policy`, `guarded-policy`):
//! the `execute`, `process_output`, `process_input`, `process_list` and `process_signal`
//! tools, parameterised
//! by a [`Policy`].
//!
//! A policy component is a few lines: describe its [`Policy`], implement the exported `tool`
//! interface by calling [`tools`] and [`call`], and export it with [`export_policy!`]:
//!
//! ```ignore
//! struct Mine;
//! impl policy_core::exports::toolhost::plugin::tool::Guest for Mine {
//!     fn tools(config: String, sandbox: Settings) -> Result<Vec<ToolDefinition>, String> {
//!         policy_core::tools(&POLICY, &config, &sandbox)
//!     }
//!     fn call(name: String, args: String, cx: CallContext) -> Result<CallResult, String> {
//!         policy_core::call(&POLICY, &name, &args, &cx)
//!     }
//! }
//! policy_core::export_policy!(Mine with_types_in policy_core);
//! ```

mod args;
mod deny;
mod execute;
mod interactive;
mod process_tools;
mod settings;

wit_bindgen::generate!({
    world: "toolhost:plugin/shell-tools",
    path: "../../../wit",
    default_bindings_module: "policy_core",
    pub_export_macro: true,
    export_macro_name: "export_policy",
});

use exports::toolhost::plugin::tool::{CallContext, CallResult, ToolDefinition};
use serde_json::{Map, Value, json};
use std::time::Duration;
pub use toolhost::plugin::sandbox::Settings as SandboxSettings;
pub use toolhost::plugin::sandbox::{Mode, Network};

pub use deny::{DenyRule, GUARDED_RULES};
pub use settings::{OnTimeout, Settings};

/// What distinguishes one policy from another. Values here are defaults: a plugin's manifest
/// config table may override the knobs in [`Settings`].
pub struct Policy {
    /// Short policy name, shown in notes (e.g. `default`, `guarded`).
    pub name: &'static str,
    /// Default knobs.
    pub settings: Settings,
    /// Commands refused before they run.
    pub deny: &'static [DenyRule],
    /// The confinement the policy asks the host for on every command it starts. The host
    /// applies it only where it is stricter than the plugin's bound (the operator's flags
    /// narrowed by the manifest's `[grants]`), and refuses a request looser than the grant.
    pub confinement: Confinement,
}

/// What a policy asks for its commands; `None`: whatever the plugin's bound is.
#[derive(Clone, Copy, Default)]
pub struct Confinement {
    /// Filesystem confinement.
    pub mode: Option<Mode>,
    /// Network access.
    pub network: Option<Network>,
}

impl Confinement {
    /// The request sent with a start, `None` when the policy asks for nothing.
    fn request(&self) -> Option<toolhost::plugin::sandbox::Request> {
        (self.mode.is_some() || self.network.is_some()).then(|| {
            toolhost::plugin::sandbox::Request {
                mode: self.mode,
                network: self.network,
                hidden: Vec::new(),
                limits: toolhost::plugin::sandbox::Limits {
                    memory_bytes: None,
                    processes: None,
                    cpu_seconds: None,
                },
            }
        })
    }

    /// What the policy's commands get: the host's `bound` tightened by this request (the
    /// host computes the same; this is for descriptions).
    fn applied(&self, bound: &SandboxSettings) -> (Mode, Network) {
        let mode = match (bound.mode, self.mode) {
            (Mode::ReadOnly, _) | (_, Some(Mode::ReadOnly)) => Mode::ReadOnly,
            (Mode::WorkspaceWrite, _) | (_, Some(Mode::WorkspaceWrite)) => Mode::WorkspaceWrite,
            _ => Mode::Off,
        };
        let network = match (bound.network, self.network) {
            (Network::None, _) | (_, Some(Network::None)) => Network::None,
            _ => Network::Full,
        };
        (mode, network)
    }
}

/// The tools every shell policy provides, described with the settings `config` gives and the
/// confinement `sandbox` says its commands get.
pub fn tools(
    policy: &Policy,
    config: &str,
    sandbox: &SandboxSettings,
) -> Result<Vec<ToolDefinition>, String> {
    let settings = Settings::from_config(&policy.settings, config)?;
    Ok(vec![
        execute::definition(policy, &settings, sandbox),
        process_tools::output_definition(),
        interactive::input_definition(),
        process_tools::list_definition(),
        process_tools::signal_definition(),
    ])
}

/// A tool's result: its fields, and the processes whose complete output it points to (their
/// output text was cut; the host links their full output logs).
pub(crate) struct Reply {
    fields: Map<String, Value>,
    full_output: Vec<String>,
}

impl Reply {
    /// `fields`, pointing to the full output of process `id` when they name an output file.
    fn linking(fields: Map<String, Value>, id: &str) -> Self {
        let full_output = if fields.contains_key("output_file") {
            vec![id.to_owned()]
        } else {
            Vec::new()
        };
        Reply {
            fields,
            full_output,
        }
    }
}

impl From<Map<String, Value>> for Reply {
    fn from(fields: Map<String, Value>) -> Self {
        Reply {
            fields,
            full_output: Vec::new(),
        }
    }
}

/// Run tool `name` under `policy`.
pub fn call(
    policy: &Policy,
    name: &str,
    args: &str,
    cx: &CallContext,
) -> Result<CallResult, String> {
    let settings = Settings::from_config(&policy.settings, &cx.config)?;
    let reply = match name {
        "execute" => execute::run(policy, &settings, args)?,
        "process_output" => process_tools::output(&settings, args)?,
        "process_input" => interactive::input(&settings, args)?,
        "process_list" => process_tools::list(&settings, args)?.into(),
        "process_signal" => process_tools::signal(args)?.into(),
        other => {
            return Err(format!(
                "unknown tool `{other}`; this plugin provides execute, process_output, process_input, process_list, process_signal"
            ));
        }
    };
    Ok(CallResult {
        output: Value::Object(reply.fields).to_string(),
        full_output: reply.full_output,
    })
}

/// How a tool behaves, for clients deciding what needs approval (see the WIT's
/// `tool-annotations`).
struct Hints {
    title: &'static str,
    read_only: bool,
    destructive: bool,
    idempotent: bool,
    open_world: bool,
}

/// Build a tool definition from its parts.
fn tool_definition(
    name: &str,
    hints: Hints,
    description: String,
    input: Value,
    output: Value,
) -> ToolDefinition {
    ToolDefinition {
        name: name.to_string(),
        description,
        input_schema: input.to_string(),
        output_schema: Some(output.to_string()),
        title: Some(hints.title.to_string()),
        annotations: exports::toolhost::plugin::tool::ToolAnnotations {
            read_only: Some(hints.read_only),
            destructive: Some(hints.destructive),
            idempotent: Some(hints.idempotent),
            open_world: Some(hints.open_world),
        },
    }
}

/// The JSON Schema of a truncation record.
fn truncation_schema() -> Value {
    json!({
        "type": "object",
        "description": "Present when output was cut: byte counts of the original stream.",
        "properties": {
            "original_bytes": {"type": "integer"},
            "retained_bytes": {"type": "integer"},
            "omitted_bytes": {"type": "integer"},
            "strategy": {"type": "string"}
        },
        "required": ["original_bytes", "retained_bytes", "omitted_bytes", "strategy"]
    })
}

/// A JSON object builder that leaves absent values out of the result.
#[derive(Default)]
struct Obj(Map<String, Value>);

impl Obj {
    fn set(&mut self, key: &str, value: impl Into<Value>) -> &mut Self {
        self.0.insert(key.to_string(), value.into());
        self
    }

    fn opt(&mut self, key: &str, value: Option<impl Into<Value>>) -> &mut Self {
        if let Some(v) = value {
            self.0.insert(key.to_string(), v.into());
        }
        self
    }

    fn build(&mut self) -> Map<String, Value> {
        std::mem::take(&mut self.0)
    }
}

/// The host's truncation record as JSON.
fn truncation_json(t: &toolhost::plugin::output_buffer::Truncation) -> Value {
    json!({
        "original_bytes": t.original_bytes,
        "retained_bytes": t.retained_bytes,
        "omitted_bytes": t.omitted_bytes,
        "strategy": t.strategy,
    })
}

/// Bound `text` to `cap` bytes, keeping head and tail, and merge the host's truncation (of the
/// process output) with ours (of the text), so the numbers describe the original stream.
fn bound_output(
    text: String,
    host: Option<toolhost::plugin::output_buffer::Truncation>,
    cap: usize,
) -> (String, Option<toolhost::plugin::output_buffer::Truncation>) {
    use toolhost::plugin::output_buffer::{HeadTailBuffer, Truncation};
    if text.len() <= cap {
        return (text, host);
    }
    // Leave room for the omission marker so the whole text stays within the cap.
    let budget = cap.saturating_sub(64).max(2);
    let head = (budget / 2) as u32;
    let tail = (budget - budget / 2) as u32;
    let buffer = HeadTailBuffer::new(head, tail);
    buffer.write(text.as_bytes());
    let rendered = buffer.render();
    let ours = rendered.truncation.map(|t| t.omitted_bytes).unwrap_or(0);
    let original = host
        .as_ref()
        .map(|t| t.original_bytes)
        .unwrap_or(text.len() as u64);
    let omitted = (host.as_ref().map(|t| t.omitted_bytes).unwrap_or(0) + ours).min(original);
    let merged = Truncation {
        original_bytes: original,
        retained_bytes: original - omitted,
        omitted_bytes: omitted,
        strategy: "head_tail".to_string(),
    };
    (restate_omission(&rendered.text, omitted), Some(merged))
}

/// Make the (last) omission marker of `text` state `omitted`, the bytes missing from the whole
/// stream, rather than only those this second cut removed.
fn restate_omission(text: &str, omitted: u64) -> String {
    const OPEN: &str = "[... ";
    const CLOSE: &str = " bytes omitted ...]";
    let Some(start) = text.rfind(OPEN) else {
        return text.to_string();
    };
    let digits = &text[start + OPEN.len()..];
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    if end == 0 || !digits[end..].starts_with(CLOSE) {
        return text.to_string();
    }
    format!(
        "{}{OPEN}{omitted}{}",
        &text[..start],
        &text[start + OPEN.len() + end..]
    )
}

/// What a result whose output was cut says about the complete output: where all of it is,
/// how much of it the (capped) file holds, or that nothing more can be read.
fn output_file_note(out: &toolhost::plugin::process::Output) -> String {
    match (&out.log_path, out.log_bytes) {
        (Some(_), Some(bytes)) if out.log_capped => format!(
            "Output was cut in the middle; output_file holds only its first {} bytes (the host \
             caps the file; the end is in output above).",
            bytes
        ),
        (Some(_), _) => {
            "Output was cut in the middle; output_file holds all of it (grep or page through it)."
                .to_string()
        }
        (None, _) => "Output was cut in the middle; the host keeps no complete copy of it, so \
                      the omitted part cannot be read again."
            .to_string(),
    }
}

/// A process error as a message for the model.
fn process_error(e: toolhost::plugin::process::ProcessError) -> String {
    use toolhost::plugin::process::ProcessError as E;
    match e {
        E::NotFound(m) => format!("{m} (process_list shows the processes of this session)"),
        E::NotRunning(m) | E::InvalidRequest(m) | E::LimitReached(m) | E::Failed(m) => m,
    }
}

/// Milliseconds of a duration, saturating.
fn millis(d: Duration) -> u64 {
    d.as_millis().min(u64::MAX as u128) as u64
}
