//! The fixture components: guests built only for the tests, found by path.
//!
//! The host's build script (`host/build.rs`) builds every component of `guest-tools/` (the
//! bundled policies and the fixtures in `guest-tools/fixtures/`) into
//! `<target>/wasm-guests/wasm32-wasip2/release/`. Each is `NAME.wasm`, named after its crate
//! with `_` for `-`. The tests depend on the host, so the components are there before a test
//! runs.

use crate::paths::target_dir;
use std::path::PathBuf;

/// The hostile fixture (`guest-tools/fixtures/hostile`): a guest that spins, allocates
/// without end, panics or hangs on purpose.
pub fn hostile_component() -> PathBuf {
    component("hostile")
}

/// The future-version fixture (`guest-tools/fixtures/future-version`): a plugin built against
/// a newer WIT package version than this host implements.
pub fn future_version_component() -> PathBuf {
    component("future_version")
}

/// The legacy-policy fixture (`guest-tools/fixtures/legacy-policy`): a policy built against
/// the frozen `toolhost:plugin@0.1.0` (`run`, `list`, `buffer`).
pub fn legacy_policy_component() -> PathBuf {
    component("legacy_policy")
}

/// The policy-0-2-0 fixture (`guest-tools/fixtures/policy-0-2-0`): a policy built against the
/// frozen `toolhost:plugin@0.2.0` (`run`, `list`).
pub fn policy_0_2_0_component() -> PathBuf {
    component("policy_0_2_0")
}

/// The policy-0-3-0 fixture (`guest-tools/fixtures/policy-0-3-0`): a policy built against the
/// frozen `toolhost:plugin@0.3.0` (`run`, with what a command left and its log; `list`).
pub fn policy_0_3_0_component() -> PathBuf {
    component("policy_0_3_0")
}

/// The tools-0-4-0 fixture (`guest-tools/fixtures/tools-0-4-0`): a tool plugin built against
/// the frozen `toolhost:plugin@0.4.0`, with content items, progress and log lines.
pub fn tools_0_4_0_component() -> PathBuf {
    component("tools_0_4_0")
}

/// The tools-0-5-0 fixture (`guest-tools/fixtures/tools-0-5-0`): a tool plugin built against
/// the frozen `toolhost:plugin@0.5.0`, with a tool that asks a form.
pub fn tools_0_5_0_component() -> PathBuf {
    component("tools_0_5_0")
}

/// The conformance fixture (`guest-tools/fixtures/conformance-tools`): the MCP conformance
/// suite's fixture tools, with content items, progress and log lines (WIT 0.4.0), and tools
/// that ask their client first (WIT 0.5.0), built against the current WIT.
pub fn conformance_tools_component() -> PathBuf {
    component("conformance_tools")
}

/// `<target>/wasm-guests/wasm32-wasip2/release/NAME.wasm`, where the host's build script puts
/// the component `NAME`.
fn component(name: &str) -> PathBuf {
    let path = target_dir()
        .join("wasm-guests")
        .join("wasm32-wasip2")
        .join("release")
        .join(format!("{name}.wasm"));
    assert!(
        path.is_file(),
        "the fixture component {name} is missing at {} (the host's build script builds it)",
        path.display()
    );
    path
}
