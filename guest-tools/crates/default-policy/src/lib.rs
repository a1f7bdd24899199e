//! The default shell policy: the four process tools with generous limits. A foreground command
//! that outlives its timeout is handed over to the background, never silently leaked or
//! killed.

use policy_core::exports::toolhost::plugin::tool::{
    CallContext, CallResult, Guest, ToolDefinition,
};
use policy_core::{Confinement, OnTimeout, Policy, SandboxSettings, Settings};
use std::time::Duration;

const POLICY: Policy = Policy {
    name: "default",
    settings: Settings {
        default_timeout: Duration::from_secs(10),
        max_timeout: Duration::from_secs(30 * 60),
        output_cap_bytes: 32 * 1024,
        on_timeout: OnTimeout::Handover,
        list_limit: 20,
    },
    deny: &[],
    confinement: Confinement {
        mode: None,
        network: None,
    },
};

struct DefaultPolicy;

impl Guest for DefaultPolicy {
    fn tools(config: String, sandbox: SandboxSettings) -> Result<Vec<ToolDefinition>, String> {
        policy_core::tools(&POLICY, &config, &sandbox)
    }

    fn call(name: String, arguments: String, context: CallContext) -> Result<CallResult, String> {
        policy_core::call(&POLICY, &name, &arguments, &context)
    }
}

policy_core::export_policy!(DefaultPolicy with_types_in policy_core);
