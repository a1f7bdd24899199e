//! The SDK for toolhost policies: the standard shell tools an agent gets from a toolhost host
//! (`execute`, `process_output`, `process_input`, `process_list`, `process_signal`), ready to
//! be made into a policy of your own. The host's bundled policies, `default` and `guarded`,
//! are written with it and nothing else.
//!
//! A policy is a WebAssembly component (`wasm32-wasip2`) that exports the
//! `toolhost:plugin/tool` interface of the host's WIT contract (`wit/toolhost.wit` in this
//! crate, `toolhost:plugin@0.6.0`). With this crate a policy crate is a `cdylib` with a
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
//!         // Nothing added when nobody can be asked first (see `Texts::nobody_to_ask`).
//!         nobody_to_ask: "",
//!         ..Texts::STANDARD
//!     },
//!     ..Policy::new("no-push")
//! };
//!
//! toolhost_policy::export!(POLICY);
//!
//! // Refusals and tools of your own need no host: test them natively with `call`.
//! let cx = toolhost_policy::CallContext {
//!     scope: "test".into(),
//!     config: "{}".into(),
//!     asking: toolhost_policy::Asking {
//!         can: toolhost_policy::CanAsk::empty(),
//!         unavailable: Some("nobody is here".into()),
//!         secret_unavailable: Some("nobody is here".into()),
//!     },
//!     answers: None,
//! };
//! let refused = toolhost_policy::call(&POLICY, "execute", r#"{"command":"git push"}"#, &cx);
//! assert_eq!(
//!     refused.err().as_deref(),
//!     Some("the no-push policy does not run this (pushing is for the user): ask the user to do it")
//! );
//! let toolhost_policy::CallOutcome::Done(named) =
//!     toolhost_policy::call(&POLICY, "policy_name", "{}", &cx).unwrap()
//! else {
//!     panic!("a tool of its own asks nothing")
//! };
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

mod approval;
mod args;
pub mod deny;
mod execute;
mod interactive;
mod notes;
mod process_tools;
mod render;
mod secrets;
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

pub use exports::toolhost::plugin::tool::{
    Answers, Asking, CallContext, CallOutcome, CallResult, CanAsk, NeedsInput, ToolDefinition,
};
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
                allowed_hosts: None,
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
            (Network::Allow, _) | (_, Some(Network::Allow)) => Network::Allow,
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
) -> Result<CallOutcome, String> {
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
            "execute" => execute::run(policy, &settings, args, cx)?,
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
    Ok(reply.into_outcome())
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
            ) -> ::std::result::Result<$crate::CallOutcome, ::std::string::String> {
                $crate::call(&$policy, &name, &arguments, &context)
            }
        }

        $crate::export_policy!(__ToolhostPolicyComponent with_types_in $crate);
    };
}

#[cfg(test)]
mod tests;
