//! The SDK for toolhost policies: the standard shell tools an agent gets from a toolhost host
//! (`execute`, `process_output`, `process_input`, `process_list`, `process_signal`), ready to
//! be made into a policy of your own. The host's bundled policies, `default` and `guarded`,
//! are written with it and nothing else.
//!
//! A policy is a WebAssembly component (`wasm32-wasip2`) that exports the
//! `toolhost:plugin/tool` interface of the host's WIT contract (`wit/toolhost.wit` in this
//! crate, `toolhost:plugin@0.2.0`). With this crate a policy crate is a `cdylib` with a
//! [`Policy`] constant and one [`export!`] line:
//!
//! ```
//! use std::time::Duration;
//! use toolhost_policy::{
//!     Command, DenyRule, Hints, Policy, Reply, Settings, Texts, Tool, ToolCall, deny,
//! };
//!
//! /// `git push`, however it is written (`cd repo && git -C . push`, `sudo git push`, ...).
//! fn git_push(command: &Command) -> bool {
//!     command.invocations("git").any(|args| args.iter().any(|a| a == "push"))
//! }
//!
//! /// A tool of its own, beside the standard ones.
//! const POLICY_NAME: Tool = Tool {
//!     name: "policy_name",
//!     title: "Name the policy",
//!     description: "Say which policy serves this session (foreground timeout {default_timeout}).",
//!     input_schema: r#"{"type":"object","properties":{},"additionalProperties":false}"#,
//!     output_schema: None,
//!     hints: Hints { read_only: true, destructive: false, idempotent: true, open_world: false },
//!     run: |call: &ToolCall| {
//!         call.args(&[])?;
//!         Ok(Reply::new(toolhost_policy::serde_json::json!({ "policy": call.policy.name })))
//!     },
//! };
//!
//! const POLICY: Policy = Policy {
//!     settings: Settings { default_timeout: Duration::from_secs(30), ..Settings::DEFAULT },
//!     deny: &[
//!         DenyRule { name: "git-push", reason: "pushing is for the user", matches: git_push },
//!         deny::FORK_BOMB,
//!     ],
//!     tools: &[POLICY_NAME],
//!     texts: Texts {
//!         refusal: "the {policy} policy does not run this ({reason}): ask the user to do it",
//!         ..Texts::STANDARD
//!     },
//!     ..Policy::new("no-push")
//! };
//!
//! toolhost_policy::export!(POLICY);
//!
//! // Refusals and tools of your own need no host: test them natively with `call`.
//! let cx = toolhost_policy::CallContext { scope: "test".into(), config: "{}".into() };
//! let refused = toolhost_policy::call(&POLICY, "execute", r#"{"command":"git push"}"#, &cx);
//! assert_eq!(
//!     refused.err().as_deref(),
//!     Some("the no-push policy does not run this (pushing is for the user): ask the user to do it")
//! );
//! let named = toolhost_policy::call(&POLICY, "policy_name", "{}", &cx).unwrap();
//! assert_eq!(named.output, r#"{"policy":"no-push"}"#);
//! ```
//!
//! Build it with `cargo build --release --target wasm32-wasip2`: the `.wasm` file is the
//! component; with a manifest granting it `process = true` the host loads it.
//!
//! # Extension points
//!
//! Every field of [`Policy`] is one; [`Policy::new`] gives the standard value of each, so a
//! policy names only what it changes:
//!
//! - [`Policy::settings`]: the knobs of the standard tools ([`Settings`]: default and longest
//!   foreground timeout, what happens at a timeout ([`OnTimeout`]), how much output a result
//!   holds, how many processes a listing shows). They are defaults: the plugin manifest's
//!   `[config]` table overrides them per installation, by the same names.
//! - [`Policy::deny`]: commands refused before they run, each a [`DenyRule`] whose matcher
//!   sees the command parsed as a [`Command`]. The [`deny`] module has the rules of the bundled
//!   guarded policy, each a `const` to reuse; [`deny::check`] tests a rule set natively.
//! - [`Policy::tools`]: tools of your own ([`Tool`]: a definition and a handler that gets a
//!   [`ToolCall`] and returns a [`Reply`]), listed after the standard ones; one named like a
//!   standard tool replaces it. Handlers reach the host through the generated bindings
//!   ([`toolhost::plugin::process`]) and parse arguments with [`Args`].
//! - [`Policy::notes`]: advice added to the result of matching commands ([`CommandNote`]).
//! - [`Policy::texts`]: the wording of refusals, of the description of the deny rules and of
//!   the note at a killed timeout, and sentences of your own for `execute`'s description
//!   ([`Texts`]).
//! - [`Policy::confinement`]: what the policy asks the host for on every command
//!   ([`Confinement`]), within what the operator and the manifest allow.
//!
//! For more than that, implement the exported interface yourself
//! ([`exports::toolhost::plugin::tool::Guest`]), calling [`tools`] and [`call`] for the
//! standard behaviour, and export it with [`export_policy!`] (`export_policy!(MyType
//! with_types_in toolhost_policy)`).
//!
//! # Testing
//!
//! The crate also builds for the host's own target, where calls that reach the host (starting
//! processes) panic: deny rules, argument errors and tools that need no processes can be
//! tested with plain unit tests, as above. Everything else is best tested in the real host,
//! with the fake process capability of `toolhost::testing`.

#![deny(missing_docs)]

mod args;
pub mod deny;
mod execute;
mod interactive;
mod notes;
mod process_tools;
mod settings;
mod texts;
mod tool;

/// The bindings wit-bindgen generates for `wit/toolhost.wit`, re-exported at the crate root
/// (their documentation is the WIT's).
#[allow(missing_docs)]
mod bindings {
    wit_bindgen::generate!({
        world: "toolhost:plugin/shell-tools",
        path: "wit",
        default_bindings_module: "toolhost_policy",
        pub_export_macro: true,
        export_macro_name: "export_policy",
    });
}

pub use bindings::{export_policy, exports, toolhost};

pub use exports::toolhost::plugin::tool::{CallContext, CallResult, ToolDefinition};
use serde_json::{Map, Value, json};
use std::time::Duration;
pub use toolhost::plugin::sandbox::Settings as SandboxSettings;
pub use toolhost::plugin::sandbox::{Mode, Network};

pub use args::{Args, format_duration, parse_duration};
pub use deny::{Command, DenyRule, GUARDED_RULES};
pub use execute::NON_INTERACTIVE_ENV;
pub use notes::{CommandNote, FILE_DUMP_NOTE, STANDARD_NOTES};
/// The JSON library of [`Reply`] and [`Args`], for building replies without a dependency of
/// your own.
pub use serde_json;
pub use settings::{OnTimeout, Settings};
pub use texts::Texts;
pub use tool::{Hints, Reply, Tool, ToolCall};

/// A policy: what distinguishes it from the standard shell tools. Start from
/// [`Policy::new`] and set the fields you change (in a `const`, so the component keeps no
/// state):
///
/// ```
/// use toolhost_policy::{Confinement, Mode, Network, OnTimeout, Policy, Settings};
///
/// const POLICY: Policy = Policy {
///     settings: Settings { on_timeout: OnTimeout::Kill, ..Settings::DEFAULT },
///     confinement: Confinement { mode: Some(Mode::ReadOnly), network: Some(Network::None) },
///     ..Policy::new("careful")
/// };
/// ```
#[derive(Clone, Copy)]
pub struct Policy {
    /// Short policy name, shown in refusals and notes (e.g. `default`, `guarded`).
    pub name: &'static str,
    /// The knobs of the standard tools. Values here are defaults: the plugin manifest's
    /// `[config]` table overrides them (see [`Settings`]).
    pub settings: Settings,
    /// Commands `execute` refuses before they run, checked in order (the first match names
    /// the refusal).
    pub deny: &'static [DenyRule],
    /// The confinement the policy asks the host for on every command it starts.
    pub confinement: Confinement,
    /// Tools of the policy's own, listed after the standard ones; one named like a standard
    /// tool replaces it.
    pub tools: &'static [Tool],
    /// Advice `execute` adds to the results of matching commands, in order.
    pub notes: &'static [CommandNote],
    /// Wording of refusals and notes.
    pub texts: Texts,
}

impl Policy {
    /// A policy called `name` with the standard behaviour: [`Settings::DEFAULT`], no deny
    /// rules, no confinement of its own ([`Confinement::UNCHANGED`]), no tools of its own,
    /// [`STANDARD_NOTES`] and [`Texts::STANDARD`].
    pub const fn new(name: &'static str) -> Policy {
        Policy {
            name,
            settings: Settings::DEFAULT,
            deny: &[],
            confinement: Confinement::UNCHANGED,
            tools: &[],
            notes: STANDARD_NOTES,
            texts: Texts::STANDARD,
        }
    }
}

/// What a policy asks for its commands; `None`: whatever the plugin's bound is. The host
/// applies a request only where it is stricter than the plugin's bound (the operator's flags
/// narrowed by the manifest's `[grants]`), and refuses a request looser than the grant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Confinement {
    /// Filesystem confinement.
    pub mode: Option<Mode>,
    /// Network access.
    pub network: Option<Network>,
}

impl Confinement {
    /// Asks for nothing: commands get whatever the plugin's bound is.
    pub const UNCHANGED: Confinement = Confinement {
        mode: None,
        network: None,
    };

    /// The request to send with a start ([`StartRequest::confinement`]), `None` when the
    /// policy asks for nothing. A tool of the policy's own that starts commands sends it, so
    /// that they are confined like `execute`'s.
    ///
    /// [`StartRequest::confinement`]: toolhost::plugin::process::StartRequest::confinement
    pub fn request(&self) -> Option<toolhost::plugin::sandbox::Request> {
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

/// The names of the standard tools, in the order [`tools`] lists them.
const STANDARD_TOOLS: [&str; 5] = [
    "execute",
    "process_output",
    "process_input",
    "process_list",
    "process_signal",
];

/// The policy's tools: the standard ones (those its own tools do not replace), described with
/// the settings `config` gives and the confinement `sandbox` says its commands get, then its
/// own. This is the exported `tools` function: an error (a bad config table, a tool of the
/// policy's own with a bad name, a schema that is not JSON or a name used twice) refuses the
/// plugin's load, with the message in the host's log.
pub fn tools(
    policy: &Policy,
    config: &str,
    sandbox: &SandboxSettings,
) -> Result<Vec<ToolDefinition>, String> {
    let settings = Settings::from_config(&policy.settings, config)?;
    for (i, tool) in policy.tools.iter().enumerate() {
        if policy.tools[..i].iter().any(|t| t.name == tool.name) {
            return Err(format!(
                "the {} policy has two tools named `{}`",
                policy.name, tool.name
            ));
        }
    }
    let mut list = Vec::new();
    for name in STANDARD_TOOLS {
        if policy.tools.iter().any(|t| t.name == name) {
            continue;
        }
        list.push(match name {
            "execute" => execute::definition(policy, &settings, sandbox),
            "process_output" => process_tools::output_definition(),
            "process_input" => interactive::input_definition(),
            "process_list" => process_tools::list_definition(),
            _ => process_tools::signal_definition(),
        });
    }
    for tool in policy.tools {
        list.push(tool.definition(policy, &settings, sandbox)?);
    }
    Ok(list)
}

/// Run tool `name` of `policy` with `args` (a JSON object as text): a tool of the policy's
/// own by that name, else the standard one. This is the exported `call` function: an error is
/// a message for the model (bad arguments, an unknown process, a refused command).
pub fn call(
    policy: &Policy,
    name: &str,
    args: &str,
    cx: &CallContext,
) -> Result<CallResult, String> {
    let settings = Settings::from_config(&policy.settings, &cx.config)?;
    let reply = if let Some(tool) = policy.tools.iter().find(|t| t.name == name) {
        (tool.run)(&ToolCall {
            name,
            arguments: args,
            policy,
            settings: &settings,
            context: cx,
        })?
    } else {
        match name {
            "execute" => execute::run(policy, &settings, args)?,
            "process_output" => process_tools::output(&settings, args)?,
            "process_input" => interactive::input(&settings, args)?,
            "process_list" => process_tools::list(&settings, args)?.into(),
            "process_signal" => process_tools::signal(args)?.into(),
            other => {
                let names = STANDARD_TOOLS
                    .iter()
                    .copied()
                    .filter(|n| !policy.tools.iter().any(|t| t.name == *n))
                    .chain(policy.tools.iter().map(|t| t.name))
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(format!(
                    "unknown tool `{other}`; this plugin provides {names}"
                ));
            }
        }
    };
    let (output, full_output) = reply.into_parts();
    Ok(CallResult {
        output,
        full_output,
    })
}

/// Make `policy` (a [`Policy`] constant) the component's exported `tool` interface: its tools
/// are [`tools`], its calls [`call`]. Use it once, in the policy's `cdylib` crate:
///
/// ```standalone_crate
/// const POLICY: toolhost_policy::Policy = toolhost_policy::Policy::new("mine");
/// toolhost_policy::export!(POLICY);
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! export {
    ($policy:expr) => {
        #[doc(hidden)]
        struct __ToolhostPolicyComponent;

        impl $crate::exports::toolhost::plugin::tool::Guest for __ToolhostPolicyComponent {
            fn tools(
                config: ::std::string::String,
                sandbox: $crate::SandboxSettings,
            ) -> ::std::result::Result<
                ::std::vec::Vec<$crate::exports::toolhost::plugin::tool::ToolDefinition>,
                ::std::string::String,
            > {
                $crate::tools(&$policy, &config, &sandbox)
            }

            fn call(
                name: ::std::string::String,
                arguments: ::std::string::String,
                context: $crate::CallContext,
            ) -> ::std::result::Result<$crate::CallResult, ::std::string::String> {
                $crate::call(&$policy, &name, &arguments, &context)
            }
        }

        $crate::export_policy!(__ToolhostPolicyComponent with_types_in $crate);
    };
}

/// Build a standard tool's definition from its parts.
fn tool_definition(
    name: &str,
    title: &str,
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
        title: Some(title.to_string()),
        annotations: hints.annotations(),
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

/// What a result whose output was cut says about the complete output of process `id`: where
/// all of it is, how much of it the (capped) file holds, or that nothing more can be read.
///
/// The file is on the host, hidden from confined commands: for a confined process the note
/// names what works from there instead of the file.
fn output_file_note(id: &str, out: &toolhost::plugin::process::Output) -> String {
    let confined = || {
        toolhost::plugin::process::list()
            .iter()
            .find(|process| process.id == id)
            .is_none_or(|process| !process.profile.starts_with("off"))
    };
    let unreadable = "Confined commands cannot read that file";
    let instead = format!(
        "read the MCP resource toolhost://process/{id}/output (it takes byte or line ranges), or \
         run the command again with its output filtered (grep, head, tail) or redirected to a \
         file in the workspace."
    );
    match (&out.log_path, out.log_bytes) {
        (Some(_), Some(bytes)) if out.log_capped && confined() => format!(
            "Output was cut in the middle; output_file on the host holds its first {bytes} bytes \
             (the host caps the file; the end is in output above). {unreadable}: {instead}"
        ),
        (Some(_), Some(bytes)) if out.log_capped => format!(
            "Output was cut in the middle; output_file holds only its first {} bytes (the host \
             caps the file; the end is in output above).",
            bytes
        ),
        (Some(_), _) if confined() => format!(
            "Output was cut in the middle; output_file on the host holds all of it. \
             {unreadable}: {instead}"
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

// The standard tools are tested end to end through the bundled policies, inside the real host
// (tests/policies_fake.rs, tests/tools_real.rs). These tests cover the extension points, with
// what runs without a host: definitions, refusals and tools that start no process.
#[cfg(test)]
mod tests {
    use super::*;
    use toolhost::plugin::sandbox::Limits;

    fn sandbox() -> SandboxSettings {
        SandboxSettings {
            mode: Mode::WorkspaceWrite,
            network: Network::Full,
            writable: Vec::new(),
            limits: Limits {
                memory_bytes: None,
                processes: None,
                cpu_seconds: None,
            },
            summary: "confined to the workspace".into(),
        }
    }

    fn cx(config: &str) -> CallContext {
        CallContext {
            scope: "test".into(),
            config: config.into(),
        }
    }

    fn echo(call: &ToolCall) -> Result<Reply, String> {
        let args = call.args(&["text"])?;
        let text = args.required_string("text")?;
        Ok(Reply::new(json!({
            "tool": call.name,
            "policy": call.policy.name,
            "scope": call.context.scope,
            "echo": text,
            "max_timeout": format_duration(call.settings.max_timeout),
        }))
        .with_full_output("p1"))
    }

    const ECHO: Tool = Tool {
        name: "echo",
        title: "Echo",
        description: "Echo text ({policy} policy, {sandbox}, up to {max_timeout}, {unknown}).",
        input_schema: r#"{"type":"object","properties":{"text":{"type":"string"}}}"#,
        output_schema: Some(r#"{"type":"object"}"#),
        hints: Hints {
            read_only: true,
            destructive: false,
            idempotent: true,
            open_world: false,
        },
        run: echo,
    };

    fn quiet_list(_call: &ToolCall) -> Result<Reply, String> {
        Ok(json!({"processes": []}).into())
    }

    /// Replaces the standard `process_list`.
    const QUIET_LIST: Tool = Tool {
        name: "process_list",
        title: "List nothing",
        description: "Lists nothing.",
        input_schema: "{}",
        output_schema: None,
        hints: Hints {
            read_only: true,
            destructive: false,
            idempotent: true,
            open_world: false,
        },
        run: quiet_list,
    };

    fn names(list: &[ToolDefinition]) -> Vec<&str> {
        list.iter().map(|t| t.name.as_str()).collect()
    }

    #[test]
    fn a_new_policy_has_the_standard_tools_and_wording() {
        let policy = Policy::new("plain");
        let list = tools(&policy, "{}", &sandbox()).unwrap();
        assert_eq!(names(&list), STANDARD_TOOLS);
        assert_eq!(policy.settings, Settings::DEFAULT);
        assert_eq!(policy.texts, Texts::STANDARD);
        assert!(policy.deny.is_empty() && policy.tools.is_empty());
        assert!(policy.confinement.request().is_none());
        let unknown = call(&policy, "nope", "{}", &cx("")).err().unwrap();
        assert_eq!(
            unknown,
            "unknown tool `nope`; this plugin provides execute, process_output, process_input, \
             process_list, process_signal"
        );
    }

    #[test]
    fn tools_of_its_own_are_listed_and_called() {
        const POLICY: Policy = Policy {
            tools: &[ECHO, QUIET_LIST],
            ..Policy::new("mine")
        };
        let list = tools(&POLICY, r#"{"max_timeout": "2m"}"#, &sandbox()).unwrap();
        assert_eq!(
            names(&list),
            [
                "execute",
                "process_output",
                "process_input",
                "process_signal",
                "echo",
                "process_list"
            ]
        );
        let echo = &list[4];
        assert_eq!(
            echo.description,
            "Echo text (mine policy, confined to the workspace, up to 2m, {unknown})."
        );
        assert_eq!(echo.title.as_deref(), Some("Echo"));
        assert_eq!(echo.annotations.read_only, Some(true));
        assert_eq!(echo.output_schema.as_deref(), Some(r#"{"type":"object"}"#));

        let result = call(
            &POLICY,
            "echo",
            r#"{"text": "hi"}"#,
            &cx(r#"{"max_timeout": "2m"}"#),
        )
        .unwrap();
        let output: Value = serde_json::from_str(&result.output).unwrap();
        assert_eq!(
            output,
            json!({"tool": "echo", "policy": "mine", "scope": "test", "echo": "hi", "max_timeout": "2m"})
        );
        assert_eq!(result.full_output, ["p1"]);
        let bad = call(&POLICY, "echo", r#"{"txt": "hi"}"#, &cx("")).err();
        assert_eq!(
            bad.as_deref(),
            Some("unknown argument `txt`; accepted: `text`")
        );

        // The replacement answers for the standard tool.
        let listed = call(&POLICY, "process_list", "", &cx("")).unwrap();
        assert_eq!(listed.output, r#"{"processes":[]}"#);
        let unknown = call(&POLICY, "nope", "{}", &cx("")).err().unwrap();
        assert!(
            unknown.ends_with(
                "execute, process_output, process_input, process_signal, echo, process_list"
            ),
            "{unknown}"
        );
    }

    #[test]
    fn unusable_tools_refuse_the_load() {
        let refused = |tools: &'static [Tool]| {
            let policy = Policy {
                tools,
                ..Policy::new("mine")
            };
            super::tools(&policy, "{}", &sandbox()).err().unwrap()
        };
        assert_eq!(
            refused(&[ECHO, ECHO]),
            "the mine policy has two tools named `echo`"
        );
        const NOT_JSON: Tool = Tool {
            input_schema: "{type: object}",
            ..ECHO
        };
        assert!(
            refused(&[NOT_JSON]).starts_with("tool `echo`: input_schema is not valid JSON"),
            "{}",
            refused(&[NOT_JSON])
        );
        const BAD_NAME: Tool = Tool {
            name: "echo it",
            ..ECHO
        };
        assert_eq!(
            refused(&[BAD_NAME]),
            "tool name `echo it` must be letters, digits, `_` and `-`"
        );
    }

    fn git_push(c: &Command) -> bool {
        c.invocations("git")
            .any(|args| args.iter().any(|a| a == "push"))
    }

    const NO_PUSH: DenyRule = DenyRule {
        name: "git-push",
        reason: "pushing is for the user",
        matches: git_push,
    };

    #[test]
    fn deny_rules_refuse_before_anything_runs_in_the_policy_s_words() {
        const STANDARD: Policy = Policy {
            deny: &[NO_PUSH, deny::FORK_BOMB],
            ..Policy::new("mine")
        };
        let execute = |policy: &Policy, command: &str| {
            let args = json!({ "command": command }).to_string();
            call(policy, "execute", &args, &cx("")).err().unwrap()
        };
        assert_eq!(
            execute(&STANDARD, "cd repo && sudo git -C . push --force"),
            "refused by the mine policy, rule `git-push`: pushing is for the user. Nothing was run."
        );
        assert_eq!(
            execute(&STANDARD, ":(){ :|:& };:"),
            "refused by the mine policy, rule `fork-bomb`: a fork bomb exhausts the machine's \
             processes. Nothing was run."
        );
        let described = &tools(&STANDARD, "", &sandbox()).unwrap()[0].description;
        assert!(
            described.ends_with(
                " This policy refuses some commands: pushing is for the user; a fork bomb \
                 exhausts the machine's processes."
            ),
            "{described}"
        );

        const WORDED: Policy = Policy {
            texts: Texts {
                refusal: "{policy} won't run that ({rule}: {reason})",
                deny_summary: "Never {reasons}.",
                execute_extra: "Ask the user to push for you ({policy}).",
                ..Texts::STANDARD
            },
            ..STANDARD
        };
        assert_eq!(
            execute(&WORDED, "git push"),
            "mine won't run that (git-push: pushing is for the user)"
        );
        let described = &tools(&WORDED, "", &sandbox()).unwrap()[0].description;
        assert!(
            described.ends_with(
                " Never pushing is for the user; a fork bomb exhausts the machine's processes. \
                 Ask the user to push for you (mine)."
            ),
            "{described}"
        );
    }

    #[test]
    fn settings_come_from_the_policy_and_the_manifest_config() {
        const KILLING: Policy = Policy {
            settings: Settings {
                default_timeout: Duration::from_secs(30),
                on_timeout: OnTimeout::Kill,
                ..Settings::DEFAULT
            },
            ..Policy::new("mine")
        };
        let described = |config: &str| {
            tools(&KILLING, config, &sandbox()).unwrap()[0]
                .description
                .clone()
        };
        let own = described("");
        assert!(
            own.contains("time out after 30s by default (at most 30m)"),
            "{own}"
        );
        assert!(
            own.contains("it and everything it started are killed"),
            "{own}"
        );
        let configured = described(r#"{"default_timeout": "5s", "on_timeout": "handover"}"#);
        assert!(
            configured.contains("time out after 5s by default"),
            "{configured}"
        );
        assert!(configured.contains("it is NOT killed"), "{configured}");
        let typo = tools(&KILLING, r#"{"default_timout": "5s"}"#, &sandbox())
            .err()
            .unwrap();
        assert!(
            typo.starts_with("unknown plugin config key `default_timout`"),
            "{typo}"
        );
    }

    #[test]
    fn notes_match_the_command() {
        fn installs(c: &Command) -> bool {
            c.invocations("npm").next().is_some()
        }
        const NOTES: &[CommandNote] = &[
            FILE_DUMP_NOTE,
            CommandNote {
                text: "Prefer npm ci.",
                matches: installs,
            },
        ];
        assert_eq!(
            notes::for_command(NOTES, "sudo npm install"),
            ["Prefer npm ci."]
        );
        assert_eq!(
            notes::for_command(NOTES, "cat package.json && npm i"),
            [FILE_DUMP_NOTE.text, "Prefer npm ci."]
        );
        assert!(notes::for_command(&[], "cat x").is_empty());
    }

    #[test]
    fn confinement_requests_only_what_is_asked() {
        let asked = Confinement {
            mode: Some(Mode::ReadOnly),
            network: None,
        };
        let request = asked.request().unwrap();
        assert_eq!(
            (request.mode, request.network),
            (Some(Mode::ReadOnly), None)
        );
        assert_eq!(asked.applied(&sandbox()), (Mode::ReadOnly, Network::Full));
    }
}
