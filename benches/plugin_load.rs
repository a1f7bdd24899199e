//! Plugin load time: a host built with a cold compiled-component cache (every component
//! compiled by Cranelift, its tool list asked of the guest) against one built with a warm cache
//! (compiled code mapped from disk, the tool list read beside it).
//! Prints medians and the ratio; the target is a warm start of at most 50 ms.
//!
//! Run: `cargo bench -p toolhost-e2e --bench plugin_load`

use std::time::{Duration, Instant};
use toolhost::ToolHost;
use toolhost::testing::FakeProcesses;
use toolhost_e2e::stats::{median, ratio};

const ROUNDS: usize = 7;

async fn build(cache: &std::path::Path) -> Duration {
    let started = Instant::now();
    let host = ToolHost::builder()
        .cache_dir(Some(cache.to_path_buf()))
        .process_backend(FakeProcesses::new())
        .build()
        .await
        .expect("host builds");
    let elapsed = started.elapsed();
    assert!(
        host.tools().iter().any(|tool| tool.name == "execute"),
        "the default policy's tools are there"
    );
    elapsed
}

#[tokio::main]
async fn main() {
    let mut cold = Vec::new();
    let mut warm = Vec::new();
    for _ in 0..ROUNDS {
        let cache = tempfile::tempdir().expect("temp dir");
        cold.push(build(cache.path()).await);
        warm.push(build(cache.path()).await);
    }
    let (cold, warm) = (median(&mut cold), median(&mut warm));
    println!("plugin_load: host ready, default policy, median of {ROUNDS}");
    println!(
        "  cold cache (compile): {:>8.2} ms",
        cold.as_secs_f64() * 1e3
    );
    println!(
        "  warm cache (mmap):    {:>8.2} ms",
        warm.as_secs_f64() * 1e3
    );
    println!(
        "  warm / cold ratio:    {:>8.3}  (target: warm <= 50 ms: {})",
        ratio(warm, cold),
        if warm <= Duration::from_millis(50) {
            "met"
        } else {
            "NOT met"
        }
    );
}
