//! Statistics and report helpers shared by the benchmarks (`benches/`).

use std::time::{Duration, Instant};

/// Sorts `samples` in place (so that [`percentile`] can be asked of them next) and returns
/// their median: the middle one, the upper of the two middle ones for an even count.
pub fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    percentile(samples, 0.5)
}

/// The `p` percentile (0.0 to 1.0) of `sorted`, which must be sorted: the sample at the nearest
/// rank. Zero if there are no samples.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

/// `a / b` as a number, `b` taken as at least a nanosecond (no division by zero).
pub fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-9)
}

/// A target's verdict as printed in a report: "met" or "not met".
pub fn met(ok: bool) -> &'static str {
    if ok { "met" } else { "not met" }
}

/// The wall time of one native `sh -c true`, spawned and awaited with `tokio::process`: the
/// baseline a tool call is measured against.
pub async fn native_once() -> Duration {
    let began = Instant::now();
    let status = tokio::process::Command::new("sh")
        .args(["-c", "true"])
        .status()
        .await
        .expect("spawn sh");
    let elapsed = began.elapsed();
    assert!(status.success());
    elapsed
}
