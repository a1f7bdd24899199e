//! Load: one `toolhost serve --http` and N concurrent MCP sessions (N = 1, 10, 100, 500). Each
//! session keeps one background process streaming output (a line every 100 ms) and issues one
//! `execute {"command":"true"}` every 100 ms, on schedule whether or not the previous call has
//! come back (an open loop: the offered rate grows with N). Prints per N the offered and
//! achieved rate, p50 and p99 latency and their ratios against N = 1, the host's memory per
//! idle session, its open descriptors and threads before, during and after (sessions ended),
//! and the errors by kind: what gives first as N grows. Confined (the default profile) and with
//! `--sandbox off` side by side. Asserts nothing about time.
//!
//! Beside each N, a native baseline measured in the same run, just before the host's phase:
//! the same open-loop schedule with `sh -c true` spawned by `tokio::process` (N tasks, one
//! spawn each every 100 ms whether or not the previous one has finished) while N native
//! background processes run the same streaming shell loop; its achieved rate, p50 and p99, and
//! the host's p99 against it at the same N (what the host adds, apart from what the machine
//! cannot do natively either).
//!
//! Beside the rates, confined against `--sandbox off` at each N: the machine's busy CPU time
//! (`/proc/stat`) from the load's start until every call was answered, divided by the calls
//! that ran. Below overload both modes run every call offered. There the ratio of those
//! figures says what the rates would be at the machine's limit. It moves much less from run
//! to run than the rates past that limit.
//!
//! Targets on the 2-core machine: p99 at N = 100 within 3x of N = 1; at most 256 KiB of host
//! memory per idle session; descriptors and threads back to their baseline once the sessions
//! end; no error but a configured cap's refusal.
//!
//! Run with `cargo bench -p toolhost-e2e --bench http_load` (`TOOLHOST_LOAD_N=1,10` for other
//! session counts, `TOOLHOST_LOAD_SECS` for the length of each load phase, default 3,
//! `TOOLHOST_LOAD_ARGS` for server options of both modes, `TOOLHOST_BIN` for another build).

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolhost_e2e::http_session::{self, HttpServer, Session};
use toolhost_e2e::stats::{percentile, ratio};

/// What each session's background process runs (and each native streamer).
const STREAMER: &str = "while :; do echo tick; sleep 0.1; done";
/// How often each session (and each native task) issues a call.
const PERIOD: Duration = Duration::from_millis(100);

/// What the host process uses.
#[derive(Debug, Clone, Copy)]
struct Usage {
    rss_kib: u64,
    fds: usize,
    threads: u64,
}

fn usage(pid: u32) -> Usage {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    Usage {
        rss_kib: field("VmRSS:"),
        fds: std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count()),
        threads: field("Threads:"),
    }
}

/// The outcome of one call: its latency, or what went wrong.
type Sample = Result<Duration, String>;

/// One `execute true`; the kind of error is the first words of its message.
async fn call(session: &Session) -> Sample {
    execute(session, json!({"command": "true"})).await
}

/// One `execute` with `arguments`.
async fn execute(session: &Session, arguments: Value) -> Sample {
    let began = Instant::now();
    let id = session
        .next_id
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "execute", "arguments": arguments}});
    let (status, _, answer) = http_session::try_post(
        &session.http,
        &session.url,
        Some(http_session::TOKEN),
        Some(&session.id),
        &body,
        Duration::from_secs(120),
    )
    .await?;
    if !status.is_success() {
        return Err(format!("HTTP {status}"));
    }
    let Some(message) = answer.iter().rfind(|m| m.get("id") == Some(&json!(id))) else {
        return Err("no answer".to_owned());
    };
    if let Some(error) = message.get("error") {
        return Err(kind(&error["message"]));
    }
    let result = &message["result"];
    if result["isError"] == true {
        return Err(kind(&result["content"][0]["text"]));
    }
    let exit = &result["structuredContent"]["exit_code"];
    if !exit.is_null() && *exit != 0 {
        return Err(format!("exit {exit}"));
    }
    Ok(began.elapsed())
}

fn kind(message: &Value) -> String {
    let text = message.as_str().unwrap_or("?");
    text.split_whitespace()
        .take(6)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Figures of one N.
struct Figures {
    n: usize,
    offered: f64,
    achieved: f64,
    p50: Duration,
    p99: Duration,
    idle_kib_per_session: f64,
    during: Usage,
    after: Usage,
    baseline: Usage,
    errors: BTreeMap<String, usize>,
    /// How long the server took to stop on SIGTERM (`None`: over a minute).
    stopped: Option<Duration>,
    /// The machine's busy CPU time from the load's start until every call was answered,
    /// divided by the calls that ran: the streamers and the load client are in it.
    cpu_per_call: Option<Duration>,
}

/// The machine's busy CPU time so far (`/proc/stat`: user, nice, system, irq, softirq and
/// steal of all CPUs).
fn busy_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let ticks: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .map(|field| field.parse().ok())
        .collect::<Option<_>>()?;
    let busy: u64 = [0, 1, 2, 5, 6, 7]
        .iter()
        .filter_map(|&at| ticks.get(at))
        .sum();
    // SAFETY: sysconf reads a configuration value; no pointer is passed.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let per_second = u64::try_from(per_second).ok().filter(|&n| n > 0)?;
    Some(Duration::from_secs_f64(busy as f64 / per_second as f64))
}

async fn open_sessions(server: &HttpServer, n: usize) -> Vec<Arc<Session>> {
    let mut sessions = Vec::with_capacity(n);
    // In batches, so the opening itself is not the load.
    for chunk in (0..n).collect::<Vec<_>>().chunks(50) {
        let opened = futures_join(chunk.iter().map(|_| Session::open_at(server.url.clone()))).await;
        sessions.extend(opened.into_iter().map(Arc::new));
    }
    sessions
}

/// Run `futures` as tasks at once; their outputs in order.
async fn futures_join<F>(futures: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for handle in handles {
        match handle.await {
            Ok(output) => out.push(output),
            Err(error) => panic!("a benchmark task failed: {error}"),
        }
    }
    out
}

async fn measure(n: usize, extra: &[&str], secs: u64) -> Figures {
    let mut args = vec!["--max-sessions", "1000", "--idle-timeout", "30m"];
    args.extend_from_slice(extra);
    let server = HttpServer::start(&args).await;
    let pid = server.child.id().expect("server pid");
    // Settled: one session opened and ended warms up the engine and the plugin.
    let warm = Session::open(&server).await;
    let _ = call(&warm).await;
    warm.delete().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let baseline = usage(pid);

    let sessions = open_sessions(&server, n).await;
    let idle = usage(pid);
    let idle_kib_per_session = idle.rss_kib.saturating_sub(baseline.rss_kib) as f64 / n as f64;

    // One streaming background process per session.
    let streamers = futures_join(sessions.iter().cloned().map(|session| async move {
        execute(
            &session,
            json!({"command": STREAMER, "run_in_background": true}),
        )
        .await
    }))
    .await;
    let mut errors = BTreeMap::new();
    for error in streamers.into_iter().filter_map(Result::err) {
        *errors
            .entry(format!("starting a streamer: {error}"))
            .or_insert(0) += 1;
    }

    // The open loop: a call per session every 100 ms, on schedule. Said on stderr, with the
    // host's pid, for a profiler to attach to the load alone.
    eprintln!("http_load: load begins, N={n}, host pid {pid}");
    let busy_before = busy_cpu();
    let began = Instant::now();
    let length = Duration::from_secs(secs);
    let mut calls = Vec::new();
    let mut tick = tokio::time::interval(PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    while began.elapsed() < length {
        tick.tick().await;
        for session in &sessions {
            let session = session.clone();
            calls.push(tokio::spawn(async move { call(&session).await }));
        }
    }
    let offered_calls = calls.len();
    eprintln!("http_load: load offered, N={n}, host pid {pid}");
    let during = usage(pid);
    let mut samples = Vec::with_capacity(offered_calls);
    for handle in calls {
        match tokio::time::timeout(Duration::from_secs(120), handle).await {
            Ok(Ok(sample)) => samples.push(sample),
            Ok(Err(error)) => samples.push(Err(format!("task: {error}"))),
            Err(_) => samples.push(Err("no answer within 120 s".to_owned())),
        }
    }
    let elapsed = began.elapsed();
    let busy = busy_before
        .zip(busy_cpu())
        .map(|(before, after)| after.saturating_sub(before));
    let mut latencies: Vec<Duration> = samples.iter().filter_map(|s| s.clone().ok()).collect();
    latencies.sort();
    for error in samples.iter().filter_map(|s| s.clone().err()) {
        *errors.entry(error).or_insert(0) += 1;
    }

    // End every session; the host should be back where it started.
    let sessions: Vec<Session> = sessions
        .into_iter()
        .map(|s| Arc::try_unwrap(s).ok().expect("no call in flight"))
        .collect();
    futures_join(sessions.into_iter().map(|s| s.delete())).await;
    let settle = Instant::now();
    let mut after = usage(pid);
    while (after.fds > baseline.fds || after.threads > baseline.threads)
        && settle.elapsed() < Duration::from_secs(15)
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
        after = usage(pid);
    }
    let stopped = server.stop_within(Duration::from_secs(60)).await;
    Figures {
        stopped,
        n,
        offered: offered_calls as f64 / length.as_secs_f64(),
        achieved: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50: percentile(&latencies, 0.5),
        p99: percentile(&latencies, 0.99),
        idle_kib_per_session,
        during,
        after,
        baseline,
        errors,
        cpu_per_call: busy
            .filter(|_| !latencies.is_empty())
            .map(|busy| busy.div_f64(latencies.len() as f64)),
    }
}

/// Figures of the native baseline at one N.
struct NativeFigures {
    offered: f64,
    achieved: f64,
    p50: Duration,
    p99: Duration,
    errors: BTreeMap<String, usize>,
}

/// One native `sh -c true`; its wall time from spawn to exit.
async fn native_spawn() -> Sample {
    let began = Instant::now();
    let status = tokio::process::Command::new("sh")
        .args(["-c", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await;
    match status {
        Ok(status) if status.success() => Ok(began.elapsed()),
        Ok(status) => Err(format!("native sh -c true: {status}")),
        Err(error) => Err(format!("native spawn: {error}")),
    }
}

/// N native background processes running [`STREAMER`], each in a process group of its own
/// (so that its `sleep` goes with it), their output read and dropped as it comes.
struct NativeStreamers {
    children: Vec<tokio::process::Child>,
    readers: Vec<tokio::task::JoinHandle<()>>,
}

impl NativeStreamers {
    fn start(n: usize, errors: &mut BTreeMap<String, usize>) -> NativeStreamers {
        let mut children = Vec::with_capacity(n);
        let mut readers = Vec::with_capacity(n);
        for _ in 0..n {
            let spawned = tokio::process::Command::new("sh")
                .args(["-c", STREAMER])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .process_group(0)
                .kill_on_drop(true)
                .spawn();
            match spawned {
                Ok(mut child) => {
                    if let Some(mut stdout) = child.stdout.take() {
                        readers.push(tokio::spawn(async move {
                            let _ = tokio::io::copy(&mut stdout, &mut tokio::io::sink()).await;
                        }));
                    }
                    children.push(child);
                }
                Err(error) => {
                    *errors
                        .entry(format!("starting a native streamer: {error}"))
                        .or_insert(0) += 1;
                }
            }
        }
        NativeStreamers { children, readers }
    }

    /// SIGKILL every streamer's process group, reap them and end their readers.
    async fn stop(mut self) {
        let groups: Vec<String> = self
            .children
            .iter()
            .filter_map(|child| child.id())
            .map(|pid| format!("-{pid}"))
            .collect();
        if !groups.is_empty() {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--"])
                .args(&groups)
                .stderr(Stdio::null())
                .status();
        }
        for child in &mut self.children {
            // `kill` above took the group; this is for a child it missed.
            let _ = child.start_kill();
            let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
        }
        for reader in self.readers {
            let _ = tokio::time::timeout(Duration::from_secs(10), reader).await;
        }
    }
}

/// The native baseline of N sessions: the same open loop (N spawns of `sh -c true` every
/// 100 ms, on schedule) beside N native streamers, which are gone when this returns.
async fn measure_native(n: usize, secs: u64) -> NativeFigures {
    let mut errors = BTreeMap::new();
    let streamers = NativeStreamers::start(n, &mut errors);
    let began = Instant::now();
    let length = Duration::from_secs(secs);
    let mut spawns = Vec::new();
    let mut tick = tokio::time::interval(PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    while began.elapsed() < length {
        tick.tick().await;
        for _ in 0..n {
            spawns.push(tokio::spawn(native_spawn()));
        }
    }
    let offered = spawns.len();
    let mut samples = Vec::with_capacity(offered);
    for handle in spawns {
        match tokio::time::timeout(Duration::from_secs(120), handle).await {
            Ok(Ok(sample)) => samples.push(sample),
            Ok(Err(error)) => samples.push(Err(format!("task: {error}"))),
            Err(_) => samples.push(Err("native: no exit within 120 s".to_owned())),
        }
    }
    let elapsed = began.elapsed();
    streamers.stop().await;
    let mut latencies: Vec<Duration> = samples.iter().filter_map(|s| s.clone().ok()).collect();
    latencies.sort();
    for error in samples.iter().filter_map(|s| s.clone().err()) {
        *errors.entry(error).or_insert(0) += 1;
    }
    // Settled before the host's phase.
    tokio::time::sleep(Duration::from_millis(300)).await;
    NativeFigures {
        offered: offered as f64 / length.as_secs_f64(),
        achieved: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50: percentile(&latencies, 0.5),
        p99: percentile(&latencies, 0.99),
        errors,
    }
}

/// One N's line (ratios against `base`, the first N) and its errors.
fn print_line(f: &Figures, base: &Figures, native: &NativeFigures) {
    println!(
        "  N={:<4} offered {:>7.1}/s achieved {:>7.1}/s  p50 {:>9.2?} ({:>5.2}x)  p99 {:>9.2?} ({:>5.2}x)  idle {:>6.1} KiB/session  RSS under load {} MiB  fds {}->{}->{}  threads {}->{}->{}",
        f.n,
        f.offered,
        f.achieved,
        f.p50,
        ratio(f.p50, base.p50),
        f.p99,
        ratio(f.p99, base.p99),
        f.idle_kib_per_session,
        f.during.rss_kib / 1024,
        f.baseline.fds,
        f.during.fds,
        f.after.fds,
        f.baseline.threads,
        f.during.threads,
        f.after.threads,
    );
    for (error, count) in &f.errors {
        println!("         {count} x {error}");
    }
    println!(
        "         native, same schedule: offered {:>7.1}/s achieved {:>7.1}/s  p50 {:>9.2?}  p99 {:>9.2?}  toolhost / native at N={}: p50 {:.2}x, p99 {:.2}x",
        native.offered,
        native.achieved,
        native.p50,
        native.p99,
        f.n,
        ratio(f.p50, native.p50),
        ratio(f.p99, native.p99),
    );
    for (error, count) in &native.errors {
        println!("         native: {count} x {error}");
    }
    match f.stopped {
        Some(took) => println!("         stopped on SIGTERM in {took:.2?}"),
        None => println!("         did NOT stop within a minute of SIGTERM"),
    }
}

/// The targets, from all N of one configuration (each with its native baseline).
fn print_summary(figures: &[Figures], natives: &[NativeFigures]) {
    let base = &figures[0];
    if let Some(hundred) = figures.iter().find(|f| f.n == 100) {
        println!(
            "  p99 at N=100 / N={}: {:.2}x (target <= 3x)",
            base.n,
            ratio(hundred.p99, base.p99)
        );
    }
    let per_n = |of: &dyn Fn(&Figures, &NativeFigures) -> f64| {
        figures
            .iter()
            .zip(natives)
            .map(|(f, native)| format!("N={} {:.2}x", f.n, of(f, native)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "  p99 toolhost / native p99 at the same N: {}",
        per_n(&|f, native| ratio(f.p99, native.p99))
    );
    println!(
        "  native p99 / native p99 at N={}: {}",
        base.n,
        per_n(&|_, native| ratio(native.p99, natives[0].p99))
    );
    let worst_idle = figures
        .iter()
        .map(|f| f.idle_kib_per_session)
        .fold(0.0, f64::max);
    println!("  idle memory per session: at most {worst_idle:.1} KiB (target <= 256 KiB)");
    let leaked = figures
        .iter()
        .filter(|f| f.after.fds > f.baseline.fds || f.after.threads > f.baseline.threads)
        .map(|f| f.n.to_string())
        .collect::<Vec<_>>();
    println!(
        "  descriptors and threads back to baseline after the sessions ended: {}",
        if leaked.is_empty() {
            "yes".to_owned()
        } else {
            format!("no, for N = {}", leaked.join(", "))
        }
    );
}

async fn run() {
    let counts: Vec<usize> = std::env::var("TOOLHOST_LOAD_N")
        .ok()
        .map(|text| {
            text.split(',')
                .filter_map(|n| n.trim().parse().ok())
                .collect()
        })
        .filter(|counts: &Vec<usize>| !counts.is_empty())
        .unwrap_or_else(|| vec![1, 10, 100, 500]);
    let secs = std::env::var("TOOLHOST_LOAD_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    // Server options for both modes, e.g. `TOOLHOST_LOAD_ARGS="--max-connections 2048"`.
    let common = std::env::var("TOOLHOST_LOAD_ARGS").unwrap_or_default();
    let common: Vec<&str> = common.split_whitespace().collect();
    let mut both: Vec<Vec<Figures>> = Vec::new();
    for (label, mode) in [
        ("confined, the default profile", &[][..]),
        ("--sandbox off", &["--sandbox", "off"][..]),
    ] {
        let extra: Vec<&str> = common.iter().chain(mode).copied().collect();
        let extra = extra.as_slice();
        println!("http_load ({label}), {secs} s of load per N:");
        let mut figures: Vec<Figures> = Vec::new();
        let mut natives: Vec<NativeFigures> = Vec::new();
        for &n in &counts {
            // The machine's own answer to the same schedule, just before the host's.
            let native = measure_native(n, secs).await;
            let measured = measure(n, extra, secs).await;
            print_line(&measured, figures.first().unwrap_or(&measured), &native);
            figures.push(measured);
            natives.push(native);
        }
        print_summary(&figures, &natives);
        both.push(figures);
    }
    // Confined beside unconfined at each N: what confinement costs under load.
    if let [confined, off] = &both[..] {
        println!("http_load: confined against --sandbox off");
        for (confined, off) in confined.iter().zip(off) {
            println!(
                "  N={}: achieved {:.1}/s against {:.1}/s ({:.2}x), p50 {:.2}x, p99 {:.2}x",
                confined.n,
                confined.achieved,
                off.achieved,
                confined.achieved / off.achieved,
                ratio(confined.p50, off.p50),
                ratio(confined.p99, off.p99)
            );
            // Below overload the rates are the offered one in both modes; what each call
            // costs the machine then says what the rates would be at its limit.
            if let (Some(confined_cpu), Some(off_cpu)) = (confined.cpu_per_call, off.cpu_per_call) {
                println!(
                    "        machine CPU per call {confined_cpu:.2?} against {off_cpu:.2?} (off / confined {:.2})",
                    off_cpu.as_secs_f64() / confined_cpu.as_secs_f64()
                );
            }
        }
    }
}

fn main() {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(run());
}
