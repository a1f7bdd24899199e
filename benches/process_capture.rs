//! Process capability benchmarks, each printed as a ratio against a baseline measured in the
//! same run (no timed assertions):
//!
//! 1. Capture throughput: a 1 GiB stream captured by the process manager (bounded head/tail
//!    buffer plus the capped full-output log) against the same stream piped into
//!    `cat > /dev/null`. Target: >= 80% of the baseline's throughput. Peak RSS of this process
//!    is reported after 1 MiB and after 1 GiB of captured output: it must stay flat.
//! 2. Foreground `true`: start to observed exit through the manager against spawning and
//!    awaiting `sh -c true` with tokio directly. Target: <= 1.5x.
//!
//! Run: `cargo bench -p toolhost-e2e --bench process_capture`

use std::time::{Duration, Instant};
use toolhost::process::{
    ProcessBackend, ProcessManager, ProcessManagerConfig, ReadFrom, StartRequest,
};
use toolhost_e2e::stats::{median, native_once, ratio};

const GIB: u64 = 1 << 30;
const LATENCY_ROUNDS: usize = 200;
/// Pipe throughput on 2 cores varies a lot with scheduling: take the median of several runs.
const CAPTURE_ROUNDS: usize = 7;

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|n| n.parse().ok()))
        })
        .unwrap_or(0)
}

async fn capture(manager: &ProcessManager, bytes: u64) -> Duration {
    let started = Instant::now();
    let id = manager
        .start(
            "bench",
            StartRequest {
                command: format!("head -c {bytes} /dev/zero"),
                ..StartRequest::default()
            },
        )
        .await
        .expect("start");
    let out = manager
        .wait(
            "bench",
            &id,
            Duration::from_secs(600),
            ReadFrom::Cursor(u64::MAX),
        )
        .await
        .expect("wait");
    assert!(
        !out.running && out.cursor == bytes,
        "captured {} of {bytes}",
        out.cursor
    );
    started.elapsed()
}

async fn baseline_pipe(bytes: u64) -> Duration {
    let started = Instant::now();
    let status = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(format!("head -c {bytes} /dev/zero | cat > /dev/null"))
        .status()
        .await
        .expect("spawn");
    assert!(status.success());
    started.elapsed()
}

#[tokio::main]
async fn main() {
    let state = tempfile::tempdir().expect("state dir");
    let manager = ProcessManager::new(ProcessManagerConfig {
        state_dir: Some(state.path().to_path_buf()),
        ..ProcessManagerConfig::default()
    });

    // 1. Throughput and memory.
    capture(&manager, 1 << 20).await;
    let rss_small = peak_rss_kib();
    let mut ours = Vec::new();
    let mut base = Vec::new();
    for _ in 0..CAPTURE_ROUNDS {
        base.push(baseline_pipe(GIB).await);
        ours.push(capture(&manager, GIB).await);
    }
    let rss_large = peak_rss_kib();
    let (ours, base) = (median(&mut ours), median(&mut base));
    let gib_s = |d: Duration| GIB as f64 / d.as_secs_f64() / GIB as f64;
    println!("capture of 1 GiB (median of {CAPTURE_ROUNDS})");
    println!("  cat > /dev/null baseline: {:>7.2} GiB/s", gib_s(base));
    println!("  process manager capture:  {:>7.2} GiB/s", gib_s(ours));
    println!(
        "  throughput ratio:         {:>7.2}  (target >= 0.80)",
        ratio(base, ours)
    );
    println!("  peak RSS after 1 MiB:     {rss_small:>7} KiB");
    println!(
        "  peak RSS after {CAPTURE_ROUNDS}x1 GiB:   {rss_large:>7} KiB  (growth {} KiB)",
        rss_large.saturating_sub(rss_small)
    );

    // 2. Foreground `true` latency.
    let mut ours = Vec::new();
    let mut base = Vec::new();
    for _ in 0..LATENCY_ROUNDS {
        base.push(native_once().await);
        let t = Instant::now();
        let id = manager
            .start(
                "bench",
                StartRequest {
                    command: "true".into(),
                    ..StartRequest::default()
                },
            )
            .await
            .expect("start");
        let out = manager
            .wait("bench", &id, Duration::from_secs(10), ReadFrom::All)
            .await
            .expect("wait");
        assert_eq!(out.exit_code, Some(0));
        ours.push(t.elapsed());
    }
    let (ours, base) = (median(&mut ours), median(&mut base));
    println!("foreground `true`, start to observed exit (median of {LATENCY_ROUNDS})");
    println!("  tokio sh -c true:  {:>8.3} ms", base.as_secs_f64() * 1e3);
    println!("  process manager:   {:>8.3} ms", ours.as_secs_f64() * 1e3);
    println!(
        "  ratio:             {:>8.2}  (target <= 1.5)",
        ratio(ours, base)
    );
    manager.shutdown().await;
}
