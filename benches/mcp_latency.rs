//! Latency of one tool call through MCP: `execute {"command":"true"}` sent over stdio to a
//! `toolhost serve` child, against spawning `sh -c true` natively, in the same run. Prints the
//! medians and their ratio (target: at most 2x); asserts nothing about time.
//!
//! Run with `cargo bench -p toolhost-e2e --bench mcp_latency`.

use serde_json::json;
use std::time::{Duration, Instant};

const WARMUP: usize = 20;
const SAMPLES: usize = 200;

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn percentile(samples: &[Duration], p: f64) -> Duration {
    let index = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[index.min(samples.len() - 1)]
}

async fn native_once() -> Duration {
    let began = Instant::now();
    let status = tokio::process::Command::new("sh")
        .args(["-c", "true"])
        .status()
        .await
        .expect("spawn sh");
    assert!(status.success());
    began.elapsed()
}

async fn run() {
    let mut client = toolhost_e2e::mcp_client::StdioClient::start(&[]).await;
    let mut mcp_once = async || {
        let began = Instant::now();
        let result = client
            .call_tool("execute", json!({"command": "true"}))
            .await;
        let elapsed = began.elapsed();
        let output = toolhost_e2e::mcp_client::structured(&result);
        assert_eq!(output["exit_code"], 0, "{output}");
        elapsed
    };
    for _ in 0..WARMUP {
        mcp_once().await;
        native_once().await;
    }
    // Interleave the two so that machine noise hits both alike.
    let mut mcp = Vec::with_capacity(SAMPLES);
    let mut native = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        mcp.push(mcp_once().await);
        native.push(native_once().await);
    }
    let mcp_median = median(&mut mcp);
    let native_median = median(&mut native);
    let ratio = mcp_median.as_secs_f64() / native_median.as_secs_f64();
    println!("mcp_latency: {SAMPLES} samples each, after {WARMUP} warm-up calls");
    println!(
        "  MCP stdio execute {{\"command\":\"true\"}}: median {:>9.3?}  p90 {:>9.3?}",
        mcp_median,
        percentile(&mcp, 0.9)
    );
    println!(
        "  native sh -c true (tokio):            median {:>9.3?}  p90 {:>9.3?}",
        native_median,
        percentile(&native, 0.9)
    );
    println!("  ratio (median MCP / median native): {ratio:.2}x (target <= 2x)");
    client.close_stdin();
    client.wait_exit(Duration::from_secs(15)).await;
}

fn main() {
    // `cargo bench` passes `--bench`; there is nothing to filter.
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(run());
}
