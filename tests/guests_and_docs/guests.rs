//! The guests' own unit tests, so that `cargo test` at the root runs every test there is, and
//! the checks that keep the policy SDK (`guest-tools/crates/toolhost-policy`) publishable.
//!
//! `guest-tools/` is a workspace of its own, built for `wasm32-wasip2` by the host's build
//! script; the unit tests and doc examples of the policy SDK (`toolhost-policy`: argument
//! parsing, deny rules, extension points, result shapes) run on the host target. This test
//! runs them with the same cargo, in a target directory of their own
//! (`<target>/guest-host-tests`), so they never wait on the build script's guest build or
//! share its artifacts.

use std::path::PathBuf;
use std::process::{Command, Output};
use toolhost_e2e::{repo_root, target_dir};

/// The SDK crate's directory.
fn sdk_dir() -> PathBuf {
    repo_root()
        .join("guest-tools")
        .join("crates")
        .join("toolhost-policy")
}

/// `cargo ARGS` on the guest workspace, in the guests' host-target directory.
fn guest_cargo(args: &[&str]) -> Output {
    let manifest = repo_root().join("guest-tools").join("Cargo.toml");
    Command::new(env!("CARGO"))
        .args(args)
        .arg("--manifest-path")
        .arg(&manifest)
        .arg("--target-dir")
        .arg(target_dir().join("guest-host-tests"))
        // The guests' own configuration, not what the outer build was given.
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .env("CARGO_TERM_COLOR", "never")
        .output()
        .expect("run cargo")
}

#[test]
fn policy_sdk_unit_tests_pass() {
    let out = guest_cargo(&["test", "--locked", "-p", "toolhost-policy"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "`cargo test -p toolhost-policy` failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    // Guard against a run that passes because it found nothing to run.
    let passed: usize = stdout
        .lines()
        .filter_map(|line| line.strip_prefix("test result: ok. "))
        .filter_map(|rest| rest.split_whitespace().next()?.parse::<usize>().ok())
        .sum();
    assert!(
        passed > 0,
        "no toolhost-policy test ran:\n{stdout}\n{stderr}"
    );
}

/// The SDK binds its own copy of the contract (a published crate cannot reach outside its
/// directory): it must be the repository's `wit/toolhost.wit`, byte for byte.
#[test]
fn policy_sdk_binds_the_repository_wit() {
    let contract = repo_root().join("wit").join("toolhost.wit");
    let copy = sdk_dir().join("wit").join("toolhost.wit");
    let read = |path: &PathBuf| {
        std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
    };
    assert!(
        read(&contract) == read(&copy),
        "{} differs from {}: copy the contract into the SDK (`cp wit/toolhost.wit {}`)",
        copy.display(),
        contract.display(),
        copy.strip_prefix(repo_root()).unwrap_or(&copy).display()
    );
    // Only the current contract: the SDK builds 0.6.0 components.
    let files: Vec<_> = std::fs::read_dir(sdk_dir().join("wit"))
        .expect("the SDK has a wit directory")
        .map(|entry| entry.expect("readable entry").file_name())
        .collect();
    assert_eq!(files, ["toolhost.wit"], "the SDK's wit directory");
}

/// The SDK packages and builds as crates.io would have it: from its own directory alone.
#[test]
fn policy_sdk_packages_on_its_own() {
    let out = guest_cargo(&[
        "package",
        "--allow-dirty",
        "--offline",
        "--locked",
        "-p",
        "toolhost-policy",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "`cargo package -p toolhost-policy` failed ({}):\n{stderr}",
        out.status
    );
    let list = guest_cargo(&[
        "package",
        "--list",
        "--allow-dirty",
        "--offline",
        "--locked",
        "-p",
        "toolhost-policy",
    ]);
    let files = String::from_utf8_lossy(&list.stdout);
    assert!(
        list.status.success(),
        "{}",
        String::from_utf8_lossy(&list.stderr)
    );
    for needed in ["Cargo.toml", "README.md", "src/lib.rs", "wit/toolhost.wit"] {
        assert!(
            files.lines().any(|line| line == needed),
            "the package lacks {needed}:\n{files}"
        );
    }
}
