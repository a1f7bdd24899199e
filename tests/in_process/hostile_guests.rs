//! Deliberately hostile guests (runaway loop, memory bomb, panic, endless wait) must each end
//! in a clear tool error naming the plugin, within the plugin's limits, and the host must serve
//! the next call normally.

use std::time::{Duration, Instant};
use toolhost::testing::FakeProcesses;
use toolhost::{CallError, LimitExceeded};
use toolhost_e2e::{fake_host, fake_host_error, hostile_component, json, plugin_dir};

const MANIFEST: &str = r#"
[grants]
process = true

[limits]
memory = "32MiB"
cpu_time = "1s"
wall_time = "3s"
"#;

/// How a hostile call must fail.
enum Expected {
    /// Stopped by a limit this predicate accepts.
    Limit(fn(&LimitExceeded) -> bool),
    /// Failed otherwise, with this text in the reason.
    Reason(&'static str),
}

async fn expect_plugin_failure(tool: &str, expected: Expected, within: Duration) {
    let dir = plugin_dir(&hostile_component(), "hostile", Some(MANIFEST));
    let host = fake_host(dir.path(), FakeProcesses::new()).await;
    let started = Instant::now();
    let err = host
        .call("s1", tool, "{}")
        .await
        .expect_err("hostile call must fail");
    let elapsed = started.elapsed();
    match (&err, expected) {
        (CallError::Limit { plugin, limit }, Expected::Limit(accept)) => {
            assert_eq!(plugin, "hostile");
            assert!(
                accept(limit),
                "{tool}: stopped by the wrong limit: {limit:?}"
            );
        }
        (CallError::Plugin { plugin, reason }, Expected::Reason(needle)) => {
            assert_eq!(plugin, "hostile");
            assert!(
                reason.contains(needle),
                "{tool}: reason {reason:?} lacks {needle:?}"
            );
        }
        (other, _) => panic!("{tool}: not the failure expected: {other:?}"),
    }
    assert!(
        elapsed < within,
        "{tool} took {elapsed:?}, expected under {within:?}"
    );
    // The host keeps serving: a well-behaved call on the same host works.
    let ok = host.call("s1", "scope", "{}").await.expect("healthy call");
    assert_eq!(json(&ok)["scope"], "s1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runaway_loop_hits_the_cpu_limit() {
    let cpu = |l: &LimitExceeded| {
        *l == LimitExceeded::CpuTime {
            limit: Duration::from_secs(1),
        }
    };
    expect_plugin_failure("spin", Expected::Limit(cpu), Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_bomb_hits_the_memory_limit() {
    let memory =
        |l: &LimitExceeded| matches!(l, LimitExceeded::Memory { limit, .. } if *limit == 32 << 20);
    expect_plugin_failure("bomb", Expected::Limit(memory), Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panic_becomes_a_tool_error_with_the_message() {
    let panicked = Expected::Reason("hostile guest panicked on purpose");
    expect_plugin_failure("panic", panicked, Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_host_waits_are_cut_by_a_limit() {
    // With the fake backend the waits return at once, so the guest loop burns CPU.
    let time = |l: &LimitExceeded| {
        matches!(
            l,
            LimitExceeded::CpuTime { .. } | LimitExceeded::WallTime { .. }
        )
    };
    expect_plugin_failure("hang", Expected::Limit(time), Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_import_without_grant_is_refused_at_load() {
    let dir = plugin_dir(&hostile_component(), "hostile", None);
    let err = fake_host_error(dir.path()).await;
    let message = err.to_string();
    assert!(message.contains("hostile"), "{message}");
    assert!(message.contains("process"), "{message}");
    assert!(message.contains("[grants]"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_waiting_forever_on_a_real_process_hits_the_wall_clock_limit() {
    let dir = plugin_dir(&hostile_component(), "hostile", Some(MANIFEST));
    let (host, _state) = toolhost_e2e::real_plugin_host(dir.path()).await;
    let started = Instant::now();
    let err = host.call("s1", "hang", "{}").await.expect_err("cut off");
    let wall = LimitExceeded::WallTime {
        limit: Duration::from_secs(3),
    };
    assert!(
        matches!(&err, CallError::Limit { limit, .. } if *limit == wall),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("wall-clock limit exceeded"),
        "{err}"
    );
    // Waiting inside the host is not guest CPU time: the wall limit (3 s), not the CPU limit
    // (1 s), ended it.
    assert!(started.elapsed() >= Duration::from_secs(3));
    assert!(started.elapsed() < Duration::from_secs(10));
    let ok = host.call("s1", "scope", "{}").await.expect("healthy call");
    assert_eq!(json(&ok)["scope"], "s1");
    // The process it started is still the host's to clean up.
    let list = host.process_backend().list("s1");
    assert_eq!(list.len(), 1);
    assert!(list[0].running);
    host.shutdown().await;
    assert!(
        host.process_backend().list("s1").is_empty()
            || !host.process_backend().list("s1")[0].running
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_flooding_its_output_still_succeeds() {
    let dir = plugin_dir(&hostile_component(), "hostile", Some(MANIFEST));
    let host = fake_host(dir.path(), FakeProcesses::new()).await;
    let ok = host
        .call("s1", "chatty", "{}")
        .await
        .expect("printing is never fatal");
    assert_eq!(json(&ok)["chatty"], true);
}

/// The CPU limit charges CPU time, not time waiting for a thread: a guest that computes well
/// under its limit finishes although the thread running it is taken away for longer than the
/// limit (a starved machine), here by a task blocking the same single-threaded runtime each
/// time the guest yields.
#[tokio::test(flavor = "current_thread")]
async fn the_cpu_limit_does_not_count_time_starved_of_a_thread() {
    const STARVED: &str = r#"
[grants]
process = true

[limits]
cpu_time = "1s"
wall_time = "60s"
"#;
    let dir = plugin_dir(&hostile_component(), "hostile", Some(STARVED));
    let host = fake_host(dir.path(), FakeProcesses::new()).await;
    // About 0.1-0.3 s of computation; the guest yields to the runtime every epoch (10 ms).
    let call = host.call("s1", "work", r#"{"iterations": 300000000}"#);
    let blocker = async {
        let began = Instant::now();
        let mut blocked = Duration::ZERO;
        while blocked < Duration::from_millis(1500) {
            std::thread::sleep(Duration::from_millis(250));
            blocked += Duration::from_millis(250);
            tokio::task::yield_now().await;
        }
        began.elapsed()
    };
    let (result, blocked) = tokio::join!(call, blocker);
    let result = result.expect("the call finishes within its CPU limit");
    assert!(json(&result)["done"].is_u64(), "{result}");
    assert!(blocked >= Duration::from_millis(1500));
}
