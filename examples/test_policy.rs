//! How a policy author tests a guest policy without running anything: load the component into
//! the real wasmtime host on top of the scripted fake process capability
//! (`toolhost::testing::FakeProcesses`), script what the "processes" do, call the tools and
//! check both what the policy asked the host to run and what it told the model.
//!
//! Run: `cargo run --example test_policy [path/to/policy.wasm]` (default: the bundled policy).
//! The component is loaded with its manifest when `policy.toml` lies beside `policy.wasm`, else
//! with a manifest granting the process capability alone. The checks fit any policy with an
//! `execute` tool shaped like the bundled ones; a failed check ends the run with an error
//! naming it. `tests/guests_and_docs/examples.rs` runs them against both bundled policies,
//! `tests/guide.rs` against the policy of `docs/writing-a-policy.md` (whose "Testing in Rust" section sets up
//! such a test outside this repository).

use anyhow::{Context, Result, ensure};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toolhost::ToolHost;
use toolhost::testing::{FakeProcesses, Script};

#[tokio::main]
async fn main() -> Result<()> {
    let component = std::env::args_os().nth(1).map(PathBuf::from);
    check_policy(component.as_deref()).await?;
    println!("all checks passed");
    Ok(())
}

/// Load `component` (the bundled default policy if `None`) on the fake process capability,
/// call `execute` twice and check the results and what the policy asked the host for.
pub async fn check_policy(component: Option<&Path>) -> Result<()> {
    let fake = FakeProcesses::new();
    let mut builder = ToolHost::builder().process_backend(fake.clone());
    let _dir;
    if let Some(path) = component {
        // A plugin directory holding just this component, with its manifest or the process
        // grant.
        let dir = tempfile::tempdir()?;
        std::fs::copy(path, dir.path().join("policy.wasm")).context("copying the component")?;
        let manifest = path.with_extension("toml");
        if manifest.is_file() {
            std::fs::copy(&manifest, dir.path().join("policy.toml"))
                .with_context(|| format!("copying {}", manifest.display()))?;
        } else {
            std::fs::write(dir.path().join("policy.toml"), "[grants]\nprocess = true\n")?;
        }
        builder = builder.bundled_policy(None).plugin_dir(dir.path());
        _dir = dir;
    }
    let host = builder.build().await?;

    // 1. A command that finishes: the policy reports output and exit code.
    fake.push(Script::exits(0).output("hello\n"));
    let r: Value = serde_json::from_str(
        &host
            .call("t", "execute", r#"{"command":"echo hello"}"#)
            .await?,
    )?;
    ensure!(
        r["output"] == "hello\n" && r["exit_code"] == 0 && r["success"] == true,
        "a finished command: unexpected result {r}"
    );
    println!("ok: foreground command -> {r}");

    // 2. A command that outlives its timeout (logical time: instant). The policy either hands
    // it over to the background (the default policy) or kills it (the guarded one).
    fake.push(
        Script::never_exits()
            .output("still working\n")
            .runs_for(Duration::from_secs(60)),
    );
    let r: Value = serde_json::from_str(
        &host
            .call("t", "execute", r#"{"command":"sleep 60","timeout":"1s"}"#)
            .await?,
    )?;
    ensure!(
        r["success"] == false && r["output"] == "still working\n",
        "a timed-out command: unexpected result {r}"
    );
    let handed_over = r["background_process_id"].as_str();
    println!("ok: timeout -> {r}");

    // 3. What the policy asked the host to run, and which signals it sent.
    let starts = fake.starts();
    for start in &starts {
        println!(
            "started {:?} in background={} with {} env vars",
            start.request.command,
            start.request.background,
            start.request.env.len()
        );
    }
    let commands: Vec<&str> = starts.iter().map(|s| s.request.command.as_str()).collect();
    ensure!(
        commands == ["echo hello", "sleep 60"],
        "the policy ran {commands:?}"
    );
    ensure!(
        starts.iter().all(|s| !s.request.background),
        "foreground calls started background processes"
    );
    let signals = fake.signals();
    println!("signals sent: {signals:?}");
    let timed_out = starts[1].id.clone().context("the second start has no id")?;
    match handed_over {
        Some(id) => {
            ensure!(
                id == timed_out,
                "handed over {id}, but the command was {timed_out}"
            );
            ensure!(
                signals.is_empty(),
                "a handed-over command was signalled: {signals:?}"
            );
        }
        None => ensure!(
            signals.iter().any(|(id, _)| *id == timed_out),
            "a timed-out command that was not handed over must be stopped: {signals:?}"
        ),
    }
    Ok(())
}
