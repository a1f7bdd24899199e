//! Host memory while a lot of output goes through a terminal: the host keeps a bounded
//! buffer and a screen, never the stream. In a test binary of its own (`memory`), so that no
//! other test runs in this process while its memory is measured.

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

/// One measurement at a time: the tests of this binary run on threads of one process, and
/// each would count what another holds.
static MEASURING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A field of this process's `/proc/self/status` in KiB (the host runs in this process).
fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(field))
                .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// This process's resident memory in KiB.
fn rss_kib() -> u64 {
    status_kib("VmRSS:")
}

/// This process's peak resident memory in KiB since [`reset_peak`].
fn peak_kib() -> u64 {
    status_kib("VmHWM:")
}

/// Start the peak over from the resident memory now (Linux's `clear_refs`); `false` when the
/// kernel refused, and the peak is then the process's whole life's.
fn reset_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// What one command on a terminal cost the host, measured alone in this process.
struct Measured {
    /// The `execute` result.
    result: Value,
    /// How far the host's resident memory grew, in KiB, once the command ended.
    grown_kib: u64,
    /// How far it grew at its peak, in KiB; `None` where the kernel refused to reset the peak.
    peak_kib: Option<u64>,
}

/// Run `command` on a terminal in a fresh real host, warmed up first (the plugin's first
/// instance, the session's confinement), and measure the host's memory around it.
async fn measure_on_a_terminal(command: &str) -> Measured {
    let _measuring = MEASURING.lock().await;
    let (host, _state) = real_host("default").await;
    call(
        &host,
        "execute",
        json!({"command": "echo warm", "tty": true}),
    )
    .await;
    let before = rss_kib();
    let peak_reset = reset_peak();
    let result = call(
        &host,
        "execute",
        json!({"command": command, "tty": true, "timeout": "120s"}),
    )
    .await;
    Measured {
        result,
        grown_kib: rss_kib().saturating_sub(before),
        peak_kib: peak_reset.then(|| peak_kib().saturating_sub(before)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_megabytes_through_a_terminal_stay_bounded() {
    let Measured {
        result: r,
        grown_kib: grown,
        ..
    } = measure_on_a_terminal("head -c 30000000 /dev/zero | tr '\\0' 'x' | fold -w 100; echo end")
        .await;
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

/// An escape string that never ends (an OSC here: a window title) is not kept: the parsers of
/// both terminal views keep at most a small fixed part of any OSC, DCS or APC payload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unterminated_osc_of_two_hundred_megabytes_stays_bounded() {
    // `ESC ] 0 ;` opens a title and nothing closes it: the 200 MB after it are its payload.
    let Measured {
        result: r,
        grown_kib: grown,
        peak_kib: peak,
    } = measure_on_a_terminal("printf '\\033]0;'; head -c 200000000 /dev/zero | tr '\\0' a").await;
    assert_eq!(r["exit_code"], 0, "{r}");
    let truncated = &r["truncated"];
    // Every byte went through the terminal.
    assert!(
        truncated["original_bytes"].as_u64().unwrap_or(0) >= 200_000_000,
        "{truncated}"
    );
    assert!(r["output"].as_str().unwrap_or("").len() < 100_000);
    // Keeping the payload would take 200 MB or more, to the end of the session.
    assert!(grown < 15 * 1024, "the host grew by {grown} KiB");
    if let Some(peak) = peak {
        assert!(
            peak < 15 * 1024,
            "the host's peak was {peak} KiB above its start"
        );
    }
}
