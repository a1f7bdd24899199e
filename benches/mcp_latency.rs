//! Latency of one tool call through MCP: `execute {"command":"true"}` sent over stdio to a
//! `toolhost serve` child, confined (the default profile) and with `--sandbox off`, against
//! spawning `sh -c true` natively, in the same run. Prints the medians and their ratios
//! (targets: confined at most 1.5x of off; at most 2x of native) and the first call of each
//! session (which builds the session's confinement); asserts nothing about time.
//!
//! Run with `cargo bench -p toolhost-e2e --bench mcp_latency`.

use serde_json::json;
use std::time::{Duration, Instant};
use toolhost_e2e::stats::{median, native_once, percentile, ratio};

const WARMUP: usize = 20;
const SAMPLES: usize = 200;

/// One `execute true` through `client`; its wall time.
async fn mcp_once(client: &mut toolhost_e2e::mcp_client::StdioClient) -> Duration {
    let began = Instant::now();
    let result = client
        .call_tool("execute", json!({"command": "true"}))
        .await;
    let elapsed = began.elapsed();
    let output = toolhost_e2e::mcp_client::structured(&result);
    assert_eq!(output["exit_code"], 0, "{output}");
    elapsed
}

async fn run() {
    // The default profile (workspace-write: Landlock, seccomp) and no confinement.
    let mut confined = toolhost_e2e::mcp_client::StdioClient::start(&[]).await;
    let mut off = toolhost_e2e::mcp_client::StdioClient::start(&["--sandbox", "off"]).await;
    // The first confined command of a session builds its layers; later ones reuse them.
    let first_confined = mcp_once(&mut confined).await;
    let first_off = mcp_once(&mut off).await;
    for _ in 0..WARMUP {
        mcp_once(&mut confined).await;
        mcp_once(&mut off).await;
        native_once().await;
    }
    // Interleave the three so that machine noise hits all alike.
    let mut mcp = Vec::with_capacity(SAMPLES);
    let mut unconfined = Vec::with_capacity(SAMPLES);
    let mut native = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        mcp.push(mcp_once(&mut confined).await);
        unconfined.push(mcp_once(&mut off).await);
        native.push(native_once().await);
    }
    let mcp_median = median(&mut mcp);
    let off_median = median(&mut unconfined);
    let native_median = median(&mut native);
    println!("mcp_latency: {SAMPLES} samples each, after {WARMUP} warm-up calls");
    println!(
        "  MCP stdio execute {{\"command\":\"true\"}}, confined:   median {:>9.3?}  p90 {:>9.3?}  (first call of the session {:>9.3?})",
        mcp_median,
        percentile(&mcp, 0.9),
        first_confined
    );
    println!(
        "  MCP stdio execute {{\"command\":\"true\"}}, --sandbox off: median {:>9.3?}  p90 {:>9.3?}  (first call of the session {:>9.3?})",
        off_median,
        percentile(&unconfined, 0.9),
        first_off
    );
    println!(
        "  native sh -c true (tokio):                         median {:>9.3?}  p90 {:>9.3?}",
        native_median,
        percentile(&native, 0.9)
    );
    println!(
        "  ratio confined / off: {:.2}x (target <= 1.5x)",
        ratio(mcp_median, off_median)
    );
    println!(
        "  ratio confined / native: {:.2}x, off / native: {:.2}x (target <= 2x)",
        ratio(mcp_median, native_median),
        ratio(off_median, native_median)
    );
    for client in [&mut confined, &mut off] {
        client.close_stdin();
        client.wait_exit(Duration::from_secs(15)).await;
    }
}

fn main() {
    // `cargo bench` passes `--bench`; there is nothing to filter.
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(run());
}
