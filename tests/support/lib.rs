//! Helpers shared by the end-to-end tests (the test binaries beside this directory) and the
//! benchmarks (`benches/`), as the library `toolhost_e2e`:
//!
//! - [`client_blocks`]: the client blocks of `docs/clients.md`, parsed as their clients do;
//! - [`paths`]: the target directory, the repository, the `toolhost` binary (built on demand),
//!   the component caches, the directory shared with confined commands, the fake machines' root;
//! - [`fixtures`]: the fixture components the host's build script builds;
//! - [`guide_blocks`]: the marked code blocks of a guide under `docs/`, which tests follow;
//! - [`hosts`]: plugin directories and hosts built on them, on the fake or the real process
//!   capability, and a `toolhost` binary run unprivileged;
//! - [`processes`]: markers on command lines, a scan of `/proc` for the processes that carry
//!   them, and waits on what a test can observe;
//! - [`commands`]: commands whose progress a test controls (held, stoppable, met);
//! - [`mcp_client`]: an MCP client over a `toolhost serve` child's stdio;
//! - [`http_session`]: a `toolhost serve --http` child and plain-HTTP MCP sessions with it;
//! - [`stats`]: the benchmarks' statistics and report helpers.
//!
//! The items the tests use most are re-exported here.

pub mod client_blocks;
pub mod commands;
pub mod fixtures;
pub mod guide_blocks;
pub mod hosts;
pub mod http_session;
pub mod mcp_client;
pub mod paths;
pub mod processes;
pub mod stats;

pub use commands::{Gate, Stoppable, rendezvous_command};
pub use fixtures::{
    conformance_tools_component, future_version_component, hostile_component,
    legacy_policy_component, policy_0_2_0_component, policy_0_3_0_component, tools_0_4_0_component,
    tools_0_5_0_component,
};
pub use hosts::{
    UnprivilegedHost, fake_host, fake_host_error, plugin_dir, policy_host, real_host,
    real_host_with, real_plugin_host,
};
pub use paths::{
    MACHINES_VARIABLE, cache_env, machines_root, profile_dir, repo_root,
    seen_differently_when_confined, shared_dir, shared_tempdir, shared_writable, target_dir,
    test_cache_dir, toolhost_bin,
};
pub use processes::{eventually, marker, processes_with, sleeps_with, wait_gone, wait_present};

/// Parse a tool result as JSON.
pub fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("result is not JSON ({e}): {text}"))
}
