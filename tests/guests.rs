//! The guests' own unit tests, so that `cargo test` at the root runs every test there is.
//!
//! `guest-tools/` is a workspace of its own, built for `wasm32-wasip2` by the host's build
//! script; the unit tests of its shared logic (`policy-core`: argument parsing, the deny list,
//! result shapes) run on the host target. This test runs them with the same cargo, in a target
//! directory of their own (`<target>/guest-host-tests`), so they never wait on the build
//! script's guest build or share its artifacts.

use std::process::Command;
use toolhost_e2e::{repo_root, target_dir};

#[test]
fn policy_core_unit_tests_pass() {
    let manifest = repo_root().join("guest-tools").join("Cargo.toml");
    let out = Command::new(env!("CARGO"))
        .args(["test", "--locked", "-p", "policy-core", "--manifest-path"])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(target_dir().join("guest-host-tests"))
        // The guests' own configuration, not what the outer build was given.
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .env("CARGO_TERM_COLOR", "never")
        .output()
        .expect("run cargo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "`cargo test -p policy-core` failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    // Guard against a run that passes because it found nothing to run.
    let passed: usize = stdout
        .lines()
        .filter_map(|line| line.strip_prefix("test result: ok. "))
        .filter_map(|rest| rest.split_whitespace().next()?.parse::<usize>().ok())
        .sum();
    assert!(passed > 0, "no policy-core test ran:\n{stdout}\n{stderr}");
}
