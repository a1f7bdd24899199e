//! Latency of one tool call through MCP: `execute {"command":"true"}` sent over stdio to a
//! `toolhost serve` child, confined (the default profile) and with `--sandbox off`, against
//! spawning `sh -c true` natively, in the same run, in two ways:
//!
//! - *back to back*: the three interleaved, one call right after another;
//! - *after idle*: each call after a fixed gap of [`IDLE_GAP`] during which nothing of the
//!   benchmark runs (an agent calls a tool after seconds of thought: this is the latency that
//!   counts).
//!
//! Prints the medians, their ratios and whether each target is met: after idle, confined at
//! most 1.3x `--sandbox off`; back to back, confined at most 1.2x `--sandbox off`; `--sandbox
//! off` at most 2.2x native back to back and 3.1x after idle (what it was before the keepers
//! were prepared ahead). Also the first call of each session (which builds the session's
//! confinement). Asserts nothing about time.
//!
//! `TOOLHOST_IDLE_ROUNDS` sets the rounds of the after-idle phase (default 40; each round is
//! three calls, each after the gap).
//!
//! Run with `cargo bench -p toolhost-e2e --bench mcp_latency`.

use serde_json::json;
use std::time::{Duration, Instant};
use toolhost_e2e::stats::{median, met, native_once, percentile, ratio};

const WARMUP: usize = 20;
const SAMPLES: usize = 200;
/// The quiet spell before each after-idle call.
const IDLE_GAP: Duration = Duration::from_secs(1);
const IDLE_ROUNDS: usize = 40;
const TARGET_IDLE_RATIO: f64 = 1.3;
const TARGET_BACK_TO_BACK_RATIO: f64 = 1.2;
/// `--sandbox off` against native: no worse than before (back to back, after idle).
const TARGET_OFF_NATIVE: (f64, f64) = (2.2, 3.1);

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

/// The medians of one phase: confined, off, native.
struct Phase {
    confined: Vec<Duration>,
    off: Vec<Duration>,
    native: Vec<Duration>,
}

impl Phase {
    fn with_capacity(n: usize) -> Self {
        Phase {
            confined: Vec::with_capacity(n),
            off: Vec::with_capacity(n),
            native: Vec::with_capacity(n),
        }
    }

    /// Print the three lines and return the medians (confined, off, native).
    fn report(&mut self, title: &str) -> (Duration, Duration, Duration) {
        let confined = median(&mut self.confined);
        let off = median(&mut self.off);
        let native = median(&mut self.native);
        println!("  {title}:");
        for (label, samples, m) in [
            (
                "MCP stdio execute true, confined:  ",
                &self.confined,
                confined,
            ),
            ("MCP stdio execute true, --sandbox off:", &self.off, off),
            ("native sh -c true (tokio):          ", &self.native, native),
        ] {
            println!(
                "    {label} median {:>9.3?}  p90 {:>9.3?}  ({} samples)",
                m,
                percentile(samples, 0.9),
                samples.len()
            );
        }
        (confined, off, native)
    }
}

async fn run() {
    let rounds = std::env::var("TOOLHOST_IDLE_ROUNDS")
        .ok()
        .and_then(|n| n.parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(IDLE_ROUNDS);
    // The default profile (workspace-write: Landlock, seccomp, namespaces) and no confinement.
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
    // Back to back: interleave the three so that machine noise hits all alike.
    let mut back = Phase::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        back.confined.push(mcp_once(&mut confined).await);
        back.off.push(mcp_once(&mut off).await);
        back.native.push(native_once().await);
    }
    // After idle: each call after the gap, the three in turn.
    let mut idle = Phase::with_capacity(rounds);
    for _ in 0..rounds {
        tokio::time::sleep(IDLE_GAP).await;
        idle.confined.push(mcp_once(&mut confined).await);
        tokio::time::sleep(IDLE_GAP).await;
        idle.off.push(mcp_once(&mut off).await);
        tokio::time::sleep(IDLE_GAP).await;
        idle.native.push(native_once().await);
    }
    println!(
        "mcp_latency: back to back {SAMPLES} samples each after {WARMUP} warm-up calls; after idle {rounds} samples each, each after {IDLE_GAP:?} of quiet"
    );
    println!(
        "  first call of a session: confined {first_confined:.3?}, --sandbox off {first_off:.3?}"
    );
    let (b_confined, b_off, b_native) = back.report("back to back");
    let (i_confined, i_off, i_native) = idle.report(&format!("after {IDLE_GAP:?} idle"));
    println!("targets (nothing asserted):");
    let r = ratio(i_confined, i_off);
    println!(
        "  after idle, confined / off: {r:.2}x (target <= {TARGET_IDLE_RATIO}x: {})",
        met(r <= TARGET_IDLE_RATIO)
    );
    let r = ratio(b_confined, b_off);
    println!(
        "  back to back, confined / off: {r:.2}x (target <= {TARGET_BACK_TO_BACK_RATIO}x: {})",
        met(r <= TARGET_BACK_TO_BACK_RATIO)
    );
    let r = ratio(b_off, b_native);
    println!(
        "  back to back, off / native: {r:.2}x (target <= {}x: {}); confined / native {:.2}x",
        TARGET_OFF_NATIVE.0,
        met(r <= TARGET_OFF_NATIVE.0),
        ratio(b_confined, b_native)
    );
    let r = ratio(i_off, i_native);
    println!(
        "  after idle, off / native: {r:.2}x (target <= {}x: {}); confined / native {:.2}x",
        TARGET_OFF_NATIVE.1,
        met(r <= TARGET_OFF_NATIVE.1),
        ratio(i_confined, i_native)
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
