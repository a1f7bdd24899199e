//! Where the cost of one tool call goes: `execute {"command":"true"}` taken apart, each part
//! measured in the same run, interleaved (round-robin, the order rotating every round, so that
//! machine noise hits all alike):
//!
//! 1. native: `sh -c true` spawned with `tokio::process` (the baseline);
//! 2. the process manager alone: `ProcessManager` starts `true` and waits for its exit, no
//!    guest (`--sandbox off` and the default confined profile);
//! 3. the guest alone: `execute` in a host on the fake process capability, which runs nothing
//!    (instantiation, the policy's own work, JSON, its host calls on the fake); and, as its
//!    floor, `process_list` there (instantiation and one host call);
//! 4. the in-process host: `ToolHost::call` on the real process manager (off and confined);
//! 5. MCP over stdio: a `toolhost serve` child (off and confined);
//! 6. the one-shot CLI as a whole process: `toolhost call execute` (confined and off) against
//!    `sh -c true` as a whole process, wall time of spawn and wait.
//!
//! Prints each part's median and p90, what it adds over native and its ratio to native; then
//! the differences of medians (the guest's cost, the host-call overhead (4) - (2), the MCP
//! transport (5) - (4)) and the targets: MCP at most 200 us over native and at most 1.2x of it;
//! the one-shot call confined within 1.5x of `--sandbox off` (at most 2.3x where a layer's
//! fixed cost stands in the way). The one-shot calls run in a project with a git repository;
//! variants that leave one layer out (cgroups, namespaces, the Unix-socket supervisor, the
//! content scan, the git guard) or add the network gate give each layer's fixed cost in a
//! session's first command. The costs no variant can leave out (the host refuses to confine
//! without Landlock or seccomp) are named by the host itself: the confined call runs again with
//! the debug lines of `toolhost::timings`, which time each step of the layers' build, the
//! confinement and the keeper's launch.
//!
//! Then the same parts that run a process again *after idle*: each call after a fixed gap of
//! [`IDLE_GAP`] in which nothing of the benchmark runs (`TOOLHOST_IDLE_ROUNDS` rounds, default
//! 20), with the ratios confined / `--sandbox off` and their targets: MCP after idle and back
//! to back at most 1.2x. Asserts nothing about time.
//!
//! Run with `cargo bench -p toolhost-e2e --bench call_cost`.

use serde_json::{Value, json};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolhost::ToolHost;
use toolhost::process::{
    ProcessBackend, ProcessManager, ProcessManagerConfig, ReadFrom, StartRequest,
};
use toolhost::sandbox::SandboxMode;
use toolhost::testing::FakeProcesses;
use toolhost_e2e::mcp_client::{StdioClient, structured};
use toolhost_e2e::stats::{self, met, native_once, ratio};

const WARMUP: usize = 20;
const SAMPLES: usize = 200;
const ONE_SHOT_WARMUP: usize = 3;
const ONE_SHOT_SAMPLES: usize = 50;
const ARGUMENTS: &str = r#"{"command":"true"}"#;
/// What each part may add over native at most (the MCP target).
const TARGET_ADDED_US: f64 = 200.0;
const TARGET_MCP_RATIO: f64 = 1.2;
/// The one-shot call, confined against `--sandbox off`, as whole processes.
const TARGET_ONE_SHOT_RATIO: f64 = 1.5;
/// The most it may take where the fixed costs of the layers stand in the way (and are named).
const CEILING_ONE_SHOT_RATIO: f64 = 2.3;
/// The quiet spell before each after-idle call.
const IDLE_GAP: Duration = Duration::from_secs(1);
const IDLE_ROUNDS: usize = 20;
/// The parts measured again after idle.
const IDLE_PARTS: [Part; 5] = [
    Part::Native,
    Part::BackendOff,
    Part::BackendConfined,
    Part::McpOff,
    Part::McpConfined,
];
const TARGET_IDLE_RATIO: f64 = 1.2;
const TARGET_BACK_TO_BACK_RATIO: f64 = 1.2;

/// The in-process parts, in the order of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Native,
    BackendOff,
    BackendConfined,
    GuestExecute,
    GuestList,
    HostOff,
    HostConfined,
    McpOff,
    McpConfined,
}

const PARTS: [Part; 9] = [
    Part::Native,
    Part::BackendOff,
    Part::BackendConfined,
    Part::GuestExecute,
    Part::GuestList,
    Part::HostOff,
    Part::HostConfined,
    Part::McpOff,
    Part::McpConfined,
];

impl Part {
    fn label(self) -> &'static str {
        match self {
            Part::Native => "1  native sh -c true (tokio::process)",
            Part::BackendOff => "2  process manager alone, --sandbox off",
            Part::BackendConfined => "2  process manager alone, confined",
            Part::GuestExecute => "3  guest alone: execute on the fake capability",
            Part::GuestList => "3  guest floor: process_list on the fake",
            Part::HostOff => "4  in-process ToolHost::call, --sandbox off",
            Part::HostConfined => "4  in-process ToolHost::call, confined",
            Part::McpOff => "5  MCP stdio round trip, --sandbox off",
            Part::McpConfined => "5  MCP stdio round trip, confined",
        }
    }

    /// It runs a process (what it adds over native means something).
    fn runs_a_process(self) -> bool {
        !matches!(self, Part::GuestExecute | Part::GuestList)
    }
}

/// Everything the in-process parts call.
struct Subjects {
    manager_off: Arc<ProcessManager>,
    manager_confined: Arc<ProcessManager>,
    /// What the guest asks the process capability for (recorded on the fake), profile left
    /// to the manager's settings.
    request: StartRequest,
    fake_host: ToolHost,
    host_off: ToolHost,
    host_confined: ToolHost,
    mcp_off: StdioClient,
    mcp_confined: StdioClient,
}

#[derive(Debug, Clone, Copy)]
struct Stats {
    median: Duration,
    p90: Duration,
}

/// The median and p90 of `samples` (sorted in place).
fn summary(samples: &mut [Duration]) -> Stats {
    let median = stats::median(samples);
    Stats {
        median,
        p90: stats::percentile(samples, 0.9),
    }
}

fn as_strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The settings of a manager like the CLI's with `--sandbox MODE`, logs in `state`; the
/// shared directory writable as the MCP servers have it.
fn manager_config(mode: SandboxMode, state: &Path) -> ProcessManagerConfig {
    let mut config = ProcessManagerConfig {
        state_dir: Some(state.to_path_buf()),
        ..Default::default()
    };
    config.sandbox.mode = mode;
    config
        .sandbox
        .writable
        .push(toolhost_e2e::shared_dir().to_path_buf());
    config
}

async fn real_host(mode: SandboxMode, state: &Path) -> ToolHost {
    ToolHost::builder()
        .process_config(manager_config(mode, state))
        .cache_dir(Some(toolhost_e2e::test_cache_dir()))
        .build()
        .await
        .expect("host builds")
}

/// A manager on its own, like the one a host makes (the host also protects its cache).
fn manager(mode: SandboxMode, state: &Path) -> Arc<ProcessManager> {
    let mut config = manager_config(mode, state);
    config.protected.push(toolhost_e2e::test_cache_dir());
    ProcessManager::new(config)
}

async fn backend_once(manager: &ProcessManager, scope: &str, request: &StartRequest) -> Duration {
    let began = Instant::now();
    let id = manager
        .start(scope, request.clone())
        .await
        .expect("the manager starts true");
    let out = manager
        .wait(scope, &id, Duration::from_secs(30), ReadFrom::All)
        .await
        .expect("the manager waits for true");
    let elapsed = began.elapsed();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    elapsed
}

async fn host_once(host: &ToolHost, scope: &str, tool: &str, arguments: &str) -> Duration {
    let began = Instant::now();
    let text = host
        .call(scope, tool, arguments)
        .await
        .expect("the call succeeds");
    let elapsed = began.elapsed();
    if tool == "execute" {
        let output = toolhost_e2e::json(&text);
        assert_eq!(output["exit_code"], 0, "{output}");
    }
    elapsed
}

async fn mcp_once(client: &mut StdioClient) -> Duration {
    let began = Instant::now();
    let result = client
        .call_tool("execute", json!({"command": "true"}))
        .await;
    let elapsed = began.elapsed();
    let output = structured(&result);
    assert_eq!(output["exit_code"], 0, "{output}");
    elapsed
}

async fn once(part: Part, s: &mut Subjects) -> Duration {
    match part {
        Part::Native => native_once().await,
        Part::BackendOff => backend_once(&s.manager_off, "cost-backend-off", &s.request).await,
        Part::BackendConfined => {
            backend_once(&s.manager_confined, "cost-backend-confined", &s.request).await
        }
        Part::GuestExecute => {
            host_once(&s.fake_host, "cost-guest-execute", "execute", ARGUMENTS).await
        }
        Part::GuestList => host_once(&s.fake_host, "cost-guest-list", "process_list", "{}").await,
        Part::HostOff => host_once(&s.host_off, "cost-host-off", "execute", ARGUMENTS).await,
        Part::HostConfined => {
            host_once(&s.host_confined, "cost-host-confined", "execute", ARGUMENTS).await
        }
        Part::McpOff => mcp_once(&mut s.mcp_off).await,
        Part::McpConfined => mcp_once(&mut s.mcp_confined).await,
    }
}

/// The one-shot parts: whole processes, wall time of spawn and wait. Each confined variant
/// but the first leaves one layer out (or, for the network gate, adds it), so that the
/// difference to the first is that layer's fixed cost in a session's first command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct OneShot {
    label: &'static str,
    /// `sh -c true` rather than `toolhost call`.
    sh: bool,
    /// Arguments before `call`.
    args: &'static [&'static str],
    /// `TOOLHOST_SANDBOX_DISABLE`, if set.
    disable: Option<&'static str>,
}

const SH: OneShot = OneShot {
    label: "6  sh -c true as a process",
    sh: true,
    args: &[],
    disable: None,
};
const CALL_CONFINED: OneShot = OneShot {
    label: "6  toolhost call execute, confined",
    sh: false,
    args: &[],
    disable: None,
};
const CALL_OFF: OneShot = OneShot {
    label: "6  toolhost --sandbox off call execute",
    sh: false,
    args: &["--sandbox", "off"],
    disable: None,
};

/// The one-shot processes: `sh`, confined, off, then the confined variants of
/// [`LAYERS`], in that order.
const ONE_SHOTS: [OneShot; 3 + LAYERS.len()] = {
    let mut all = [SH; 3 + LAYERS.len()];
    all[1] = CALL_CONFINED;
    all[2] = CALL_OFF;
    let mut index = 0;
    while index < LAYERS.len() {
        all[3 + index] = LAYERS[index].1;
        index += 1;
    }
    all
};

/// Each layer with a fixed cost in a session's first command, and the confined call without
/// it (with it, for the network gate, which is off by default): the layer's name, the
/// variant, and whether the variant adds the layer.
const LAYERS: [(&str, OneShot, bool); 6] = [
    (
        "cgroups (made, joined, removed)",
        OneShot {
            label: "6  confined, TOOLHOST_SANDBOX_DISABLE=cgroups",
            sh: false,
            args: &[],
            disable: Some("cgroups"),
        },
        false,
    ),
    (
        "namespaces (user, mount, PID; the masks)",
        OneShot {
            label: "6  confined, TOOLHOST_SANDBOX_DISABLE=namespaces",
            sh: false,
            args: &[],
            disable: Some("namespaces"),
        },
        false,
    ),
    (
        "the Unix-socket supervisor",
        OneShot {
            label: "6  confined, TOOLHOST_SANDBOX_DISABLE=unix-supervisor",
            sh: false,
            args: &[],
            disable: Some("unix-supervisor"),
        },
        false,
    ),
    (
        "the content scan for secrets (cache warm)",
        OneShot {
            label: "6  confined, --secret-scan off",
            sh: false,
            args: &["--secret-scan", "off"],
            disable: None,
        },
        false,
    ),
    (
        "the git guard's first read (one repository)",
        OneShot {
            label: "6  confined, --allow-hook-writes (no git guard)",
            sh: false,
            args: &["--allow-hook-writes"],
            disable: None,
        },
        false,
    ),
    (
        "the network gate (--network allow=example.com)",
        OneShot {
            label: "6  confined, --network allow=example.com",
            sh: false,
            args: &["--network", "allow=example.com"],
            disable: None,
        },
        true,
    ),
];

/// The process of `which`, in `project` (a directory holding one git repository).
fn one_shot_command(which: OneShot, bin: &Path, state: &Path, project: &Path) -> Command {
    let mut command = if which.sh {
        let mut command = Command::new("sh");
        command.args(["-c", "true"]);
        command
    } else {
        let mut command = Command::new(bin);
        let mut args: Vec<OsString> = vec!["--state-dir".into(), state.into()];
        args.extend(which.args.iter().map(OsString::from));
        args.extend(["call".into(), "execute".into(), ARGUMENTS.into()]);
        let (cache_key, cache_value) = toolhost_e2e::cache_env();
        command
            .args(args)
            .env(cache_key, cache_value)
            .env("TOOLHOST_LOG", "error");
        if let Some(layer) = which.disable {
            command.env("TOOLHOST_SANDBOX_DISABLE", layer);
        }
        command
    };
    command.current_dir(project);
    command
}

/// One run of `which`, in `project` (a directory holding one git repository).
fn one_shot_once(which: OneShot, bin: &Path, state: &Path, project: &Path) -> Duration {
    let mut command = one_shot_command(which, bin, state, project);
    let began = Instant::now();
    let output = command.output().expect("spawn the one-shot process");
    let elapsed = began.elapsed();
    assert!(output.status.success(), "{which:?}: {output:?}");
    if !which.sh {
        let result: Value = serde_json::from_slice(&output.stdout).expect("the result is JSON");
        assert_eq!(result["exit_code"], 0, "{which:?}: {result}");
    }
    elapsed
}

/// The confined one-shot call run [`ONE_SHOT_SAMPLES`] times with the host's debug lines of
/// `toolhost::timings`: each part of the command's start it times (the steps of the layers'
/// build; the request's check, the confinement and the keeper's launch), and the command's own
/// run from its start to its exit, in milliseconds, every run's value.
fn one_shot_timings(
    bin: &Path,
    state: &Path,
    project: &Path,
) -> std::collections::BTreeMap<String, Vec<f64>> {
    let mut parts: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
    for _ in 0..ONE_SHOT_SAMPLES {
        let output = one_shot_command(CALL_CONFINED, bin, state, project)
            .env("TOOLHOST_LOG", "error,toolhost::timings=debug")
            .env("NO_COLOR", "1")
            .output()
            .expect("spawn the timed one-shot process");
        assert!(output.status.success(), "the timed one-shot: {output:?}");
        let result: Value = serde_json::from_slice(&output.stdout).expect("the result is JSON");
        if let Some(ms) = result["wall_duration_ms"].as_f64() {
            parts
                .entry("from the policy's start call to the exit (wall_duration_ms)".to_owned())
                .or_default()
                .push(ms);
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        for line in stderr.lines() {
            // `steps="roots=0.090 covers=0.355 ..."` of `layers built`; `check=0.08
            // confinement=4.79 launch=2.01` of `command launched`.
            let fields = line
                .split_once("steps=\"")
                .map(|(_, rest)| rest.trim_end_matches('"').to_owned())
                .map(|steps| (steps, "layers: "))
                .or_else(|| {
                    line.contains("command launched")
                        .then(|| (line.to_owned(), "start: "))
                });
            let Some((fields, prefix)) = fields else {
                continue;
            };
            for field in fields.split_whitespace() {
                let Some((name, value)) = field.split_once('=') else {
                    continue;
                };
                if let Ok(ms) = value.trim_matches('"').parse::<f64>() {
                    parts.entry(format!("{prefix}{name}")).or_default().push(ms);
                }
            }
        }
    }
    parts
}

/// One line of a table: its median and p90, what it adds over `native`, the ratio.
fn print_row(label: &str, stats: Stats, native: Stats, runs_a_process: bool) {
    let added = if runs_a_process {
        format!("{:>+9.0}", us(stats.median) - us(native.median))
    } else {
        format!("{:>9}", "-")
    };
    println!(
        "  {label:<50} {:>9.0} {:>9.0} {added} {:>7.2}x",
        us(stats.median),
        us(stats.p90),
        ratio(stats.median, native.median)
    );
}

fn print_header(first: &str) {
    println!(
        "  {first:<50} {:>9} {:>9} {:>9} {:>8}",
        "median", "p90", "added", "ratio"
    );
    println!(
        "  {:<50} {:>9} {:>9} {:>9} {:>8}",
        "", "(us)", "(us)", "(us)", "/native"
    );
}

async fn run() {
    let state = tempfile::tempdir().expect("state dir");
    let state_path = |name: &str| -> PathBuf {
        let dir = state.path().join(name);
        std::fs::create_dir_all(&dir).expect("state subdirectory");
        dir
    };
    let mcp_state_off = state_path("mcp-off");
    let mcp_state_confined = state_path("mcp-confined");
    let mcp_args = |dir: &Path, off: bool| -> Vec<String> {
        let mut args = vec!["--state-dir".to_owned(), dir.display().to_string()];
        if off {
            args.extend(["--sandbox".to_owned(), "off".to_owned()]);
        }
        args
    };
    let off_args = mcp_args(&mcp_state_off, true);
    let confined_args = mcp_args(&mcp_state_confined, false);

    let fake = FakeProcesses::new();
    let fake_host = ToolHost::builder()
        .process_backend(fake.clone())
        .cache_dir(Some(toolhost_e2e::test_cache_dir()))
        .build()
        .await
        .expect("host on the fake builds");
    // What the guest asks for, to ask the manager alone the same.
    host_once(&fake_host, "cost-guest-execute", "execute", ARGUMENTS).await;
    let mut request = fake
        .starts()
        .first()
        .expect("the guest started a process")
        .request
        .clone();
    request.profile = None;

    let mut subjects = Subjects {
        manager_off: manager(SandboxMode::Off, &state_path("manager-off")),
        manager_confined: manager(SandboxMode::WorkspaceWrite, &state_path("manager-confined")),
        request,
        fake_host,
        host_off: real_host(SandboxMode::Off, &state_path("host-off")).await,
        host_confined: real_host(SandboxMode::WorkspaceWrite, &state_path("host-confined")).await,
        mcp_off: StdioClient::start(&as_strs(&off_args)).await,
        mcp_confined: StdioClient::start(&as_strs(&confined_args)).await,
    };

    let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(SAMPLES); PARTS.len()];
    let began = Instant::now();
    for round in 0..WARMUP + SAMPLES {
        for k in 0..PARTS.len() {
            let index = (k + round) % PARTS.len();
            let took = once(PARTS[index], &mut subjects).await;
            if round >= WARMUP {
                samples[index].push(took);
            }
        }
    }
    let in_process_time = began.elapsed();

    // After idle: each part after the gap, in turn.
    let idle_rounds = std::env::var("TOOLHOST_IDLE_ROUNDS")
        .ok()
        .and_then(|n| n.parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(IDLE_ROUNDS);
    let mut idle_samples: Vec<Vec<Duration>> =
        vec![Vec::with_capacity(idle_rounds); IDLE_PARTS.len()];
    for _ in 0..idle_rounds {
        for (index, part) in IDLE_PARTS.iter().enumerate() {
            tokio::time::sleep(IDLE_GAP).await;
            idle_samples[index].push(once(*part, &mut subjects).await);
        }
    }

    // Everything down before the one-shot processes, so that nothing else runs meanwhile.
    let Subjects {
        manager_off,
        manager_confined,
        fake_host,
        host_off,
        host_confined,
        mut mcp_off,
        mut mcp_confined,
        ..
    } = subjects;
    for host in [&fake_host, &host_off, &host_confined] {
        host.shutdown().await;
    }
    manager_off.shutdown().await;
    manager_confined.shutdown().await;
    for client in [&mut mcp_off, &mut mcp_confined] {
        client.close_stdin();
        client.wait_exit(Duration::from_secs(15)).await;
    }

    let bin = toolhost_e2e::toolhost_bin();
    let one_shot_state = state_path("one-shot");
    // The one-shot calls run in a project with a git repository, as an agent's do.
    let project = state_path("project");
    let init = Command::new("git")
        .args(["init", "-q"])
        .current_dir(&project)
        .status()
        .expect("run git init");
    assert!(init.success(), "git init in the project");
    let began = Instant::now();
    let (timed_bin, timed_state, timed_project) =
        (bin.clone(), one_shot_state.clone(), project.clone());
    let mut one_shot_samples = tokio::task::spawn_blocking(move || {
        let mut samples: Vec<Vec<Duration>> =
            vec![Vec::with_capacity(ONE_SHOT_SAMPLES); ONE_SHOTS.len()];
        for round in 0..ONE_SHOT_WARMUP + ONE_SHOT_SAMPLES {
            for k in 0..ONE_SHOTS.len() {
                let index = (k + round) % ONE_SHOTS.len();
                let took = one_shot_once(ONE_SHOTS[index], &bin, &one_shot_state, &project);
                if round >= ONE_SHOT_WARMUP {
                    samples[index].push(took);
                }
            }
        }
        samples
    })
    .await
    .expect("the one-shot runs");
    let one_shot_time = began.elapsed();
    // The confined call again, the host saying how long each part of the start took.
    let timings = tokio::task::spawn_blocking(move || {
        one_shot_timings(&timed_bin, &timed_state, &timed_project)
    })
    .await
    .expect("the timed one-shot runs");

    let stats_of: Vec<Stats> = samples.iter_mut().map(|s| summary(s)).collect();
    let of = |part: Part| {
        let index = PARTS
            .iter()
            .position(|p| *p == part)
            .expect("a measured part");
        stats_of[index]
    };
    let native = of(Part::Native);
    println!(
        "call_cost: execute {ARGUMENTS}, {SAMPLES} samples of each part after {WARMUP} warm-up rounds, interleaved ({in_process_time:.1?})"
    );
    print_header("part");
    for part in PARTS {
        print_row(part.label(), of(part), native, part.runs_a_process());
    }

    let one_shot: Vec<Stats> = one_shot_samples.iter_mut().map(|s| summary(s)).collect();
    let sh = one_shot[0];
    println!(
        "one-shot processes, {ONE_SHOT_SAMPLES} samples each after {ONE_SHOT_WARMUP} warm-up rounds, interleaved ({one_shot_time:.1?})"
    );
    print_header("part (ratio against sh -c true as a process)");
    for (which, stats) in ONE_SHOTS.iter().zip(&one_shot) {
        print_row(which.label, *stats, sh, true);
    }

    let idle_stats: Vec<Stats> = idle_samples.iter_mut().map(|s| summary(s)).collect();
    let idle_of = |part: Part| {
        let index = IDLE_PARTS
            .iter()
            .position(|p| *p == part)
            .expect("a part measured after idle");
        idle_stats[index]
    };
    let idle_native = idle_of(Part::Native);
    println!(
        "after idle: {idle_rounds} samples of each part, each call after {IDLE_GAP:?} of quiet"
    );
    print_header("part");
    for part in IDLE_PARTS {
        print_row(
            part.label(),
            idle_of(part),
            idle_native,
            part.runs_a_process(),
        );
    }

    let m = |part: Part| us(of(part).median);
    println!("where the time goes (differences of medians, us):");
    println!(
        "  guest cost (execute on the fake; runs no process):          {:>7.0}  of which instantiation + one host call (process_list) {:.0}, execute's own work and host calls {:.0}",
        m(Part::GuestExecute),
        m(Part::GuestList),
        m(Part::GuestExecute) - m(Part::GuestList)
    );
    for (label, backend, host, mcp) in [
        (
            "--sandbox off",
            Part::BackendOff,
            Part::HostOff,
            Part::McpOff,
        ),
        (
            "confined",
            Part::BackendConfined,
            Part::HostConfined,
            Part::McpConfined,
        ),
    ] {
        println!("  {label}:");
        println!(
            "    process manager over native (2) - (1):                   {:>+7.0}",
            m(backend) - m(Part::Native)
        );
        println!(
            "    host-call overhead (4) - (2) (guest, WIT, resolution):   {:>+7.0}",
            m(host) - m(backend)
        );
        println!(
            "    MCP transport overhead (5) - (4) (JSON, rmcp, pipes):    {:>+7.0}",
            m(mcp) - m(host)
        );
    }
    println!("targets (nothing asserted):");
    for (label, part) in [
        ("confined", Part::McpConfined),
        ("--sandbox off", Part::McpOff),
    ] {
        let added = m(part) - m(Part::Native);
        let ratio = ratio(of(part).median, native.median);
        println!(
            "  MCP execute true, {label:<13}: {added:>+6.0} us over native (target <= {TARGET_ADDED_US:.0} us: {}), ratio {ratio:.2}x (target <= {TARGET_MCP_RATIO}x: {})",
            met(added <= TARGET_ADDED_US),
            met(ratio <= TARGET_MCP_RATIO)
        );
    }
    for (label, confined, off) in [
        ("process manager", Part::BackendConfined, Part::BackendOff),
        ("MCP stdio", Part::McpConfined, Part::McpOff),
    ] {
        let back = ratio(of(confined).median, of(off).median);
        let idle = ratio(idle_of(confined).median, idle_of(off).median);
        println!(
            "  {label}, confined / --sandbox off: back to back {back:.2}x (target <= {TARGET_BACK_TO_BACK_RATIO}x: {}), after idle {idle:.2}x (target <= {TARGET_IDLE_RATIO}x: {})",
            met(back <= TARGET_BACK_TO_BACK_RATIO),
            met(idle <= TARGET_IDLE_RATIO)
        );
    }
    let (confined, off) = (one_shot[1].median, one_shot[2].median);
    let one_shot_ratio = ratio(confined, off);
    println!(
        "  one-shot toolhost call, confined / --sandbox off: {one_shot_ratio:.2}x (target <= {TARGET_ONE_SHOT_RATIO}x: {}; with the fixed costs below named, at most {CEILING_ONE_SHOT_RATIO}x: {})",
        met(one_shot_ratio <= TARGET_ONE_SHOT_RATIO),
        met(one_shot_ratio <= CEILING_ONE_SHOT_RATIO)
    );
    println!(
        "fixed costs in the one-shot call, a session's first command (difference of medians against the confined call, ms; {:.2} ms over --sandbox off in all):",
        ms(confined) - ms(off)
    );
    for (index, (layer, _, adds)) in LAYERS.iter().enumerate() {
        let variant = ms(one_shot[3 + index].median);
        let cost = if *adds {
            variant - ms(confined)
        } else {
            ms(confined) - variant
        };
        println!("  {layer:<48} {cost:>+7.2}");
    }
    println!(
        "inside the confined one-shot call, as the host times it ({ONE_SHOT_SAMPLES} runs with the debug lines of `toolhost::timings`; medians, ms):"
    );
    for (part, values) in timings {
        let mut values = values;
        values.sort_by(f64::total_cmp);
        println!("  {part:<48} {:>7.2}", values[values.len() / 2]);
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    // `cargo bench` passes `--bench`; there is nothing to filter.
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(run());
}
