//! How a policy author tests a guest policy without running anything: load the component into
//! the real wasmtime host on top of the scripted fake process capability
//! (`toolhost::testing::FakeProcesses`), script what the "processes" do, call the tools and
//! check both what the policy asked the host to run and what it told the model.
//!
//! Run: `cargo run --example test_policy [path/to/policy.wasm]` (default: the bundled policy).

use anyhow::{Context, Result, ensure};
use serde_json::Value;
use std::time::Duration;
use toolhost::ToolHost;
use toolhost::testing::{FakeProcesses, Script};

#[tokio::main]
async fn main() -> Result<()> {
    let fake = FakeProcesses::new();
    let mut builder = ToolHost::builder().process_backend(fake.clone());
    let _dir;
    if let Some(path) = std::env::args().nth(1) {
        // A plugin directory holding just this component, with the process grant.
        let dir = tempfile::tempdir()?;
        std::fs::copy(&path, dir.path().join("policy.wasm")).context("copying the component")?;
        std::fs::write(dir.path().join("policy.toml"), "[grants]\nprocess = true\n")?;
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
        r["output"] == "hello\n" && r["exit_code"] == 0,
        "unexpected result {r}"
    );
    println!("ok: foreground command -> {r}");

    // 2. A command that outlives its timeout (logical time: instant).
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
    println!("ok: timeout -> {r}");

    // 3. What the policy asked the host to run.
    for start in fake.starts() {
        println!(
            "started {:?} in background={} with {} env vars",
            start.request.command,
            start.request.background,
            start.request.env.len()
        );
    }
    println!("signals sent: {:?}", fake.signals());
    Ok(())
}
