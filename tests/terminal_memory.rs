//! Host memory while a lot of output goes through a terminal: the host keeps a bounded
//! buffer and a screen, never the stream. In a test binary of its own, so that no other test
//! runs in this process while its memory is measured.

use serde_json::{Value, json};
use toolhost::ToolHost;
use toolhost_e2e::real_host;

async fn call(host: &ToolHost, tool: &str, args: Value) -> Value {
    toolhost_e2e::json(
        &host
            .call("s", tool, &args.to_string())
            .await
            .unwrap_or_else(|e| panic!("{tool} {args}: {e}")),
    )
}

/// This process's resident memory in KiB (the host runs in it).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_megabytes_through_a_terminal_stay_bounded() {
    let (host, _state) = real_host("default").await;
    // Warm up (the plugin's first instance, the session's confinement) before measuring.
    call(
        &host,
        "execute",
        json!({"command": "echo warm", "tty": true}),
    )
    .await;
    let before = rss_kib();
    let r = call(
        &host,
        "execute",
        json!({"command": "head -c 30000000 /dev/zero | tr '\\0' 'x' | fold -w 100; echo end", "tty": true, "timeout": "120s"}),
    )
    .await;
    let grown = rss_kib().saturating_sub(before);
    assert_eq!(r["exit_code"], 0, "{r}");
    let truncated = &r["truncated"];
    // Every byte counted (the terminal adds a carriage return per line), most of it cut.
    assert!(
        truncated["original_bytes"].as_u64().unwrap_or(0) >= 30_300_000,
        "{truncated}"
    );
    assert!(r["output"].as_str().unwrap_or("").len() < 100_000);
    assert!(
        r["output"].as_str().unwrap_or("").ends_with("end\n"),
        "{}",
        r["output"]
    );
    // Holding the output (or a screen's history) would take 30 MB or more.
    assert!(grown < 15 * 1024, "the host grew by {grown} KiB");
}
