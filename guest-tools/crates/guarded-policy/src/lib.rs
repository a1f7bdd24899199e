//! The guarded shell policy: the same four tools, stricter. Destructive commands are refused
//! before they run (each refusal names its rule), a foreground command is killed with
//! everything it started at its timeout, and the longest timeout is lower.

use policy_core::exports::toolhost::plugin::tool::{
    CallContext, CallResult, Guest, ToolDefinition,
};
use policy_core::{Confinement, Mode, Network, OnTimeout, Policy, SandboxSettings, Settings};
use std::time::Duration;

const POLICY: Policy = Policy {
    name: "guarded",
    settings: Settings {
        default_timeout: Duration::from_secs(10),
        max_timeout: Duration::from_secs(5 * 60),
        output_cap_bytes: 32 * 1024,
        on_timeout: OnTimeout::Kill,
        list_limit: 20,
    },
    deny: policy_core::GUARDED_RULES,
    // Its manifest's grant already bounds its commands this way; asking as well keeps the
    // policy confined under a manifest that grants more.
    confinement: Confinement {
        mode: Some(Mode::WorkspaceWrite),
        network: Some(Network::None),
    },
};

struct GuardedPolicy;

impl Guest for GuardedPolicy {
    fn tools(config: String, sandbox: SandboxSettings) -> Result<Vec<ToolDefinition>, String> {
        policy_core::tools(&POLICY, &config, &sandbox)
    }

    fn call(name: String, arguments: String, context: CallContext) -> Result<CallResult, String> {
        policy_core::call(&POLICY, &name, &arguments, &context)
    }
}

policy_core::export_policy!(GuardedPolicy with_types_in policy_core);
