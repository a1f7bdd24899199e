//! `toolhost serve` driven by the official MCP Python SDK (`mcp` from PyPI, pinned to
//! [`MCP_VERSION`]), over stdio and streamable HTTP: the client in
//! `tests/python/mcp_client.py` uses the SDK's own `ClientSession`, `stdio_client` and
//! `streamable_http_client` (and, for revision 2026-07-28, its `Client`). Each test below runs one group of its scenarios (they run in
//! parallel, and a failure names its group):
//!
//! - `tools`: the five tools with titles and annotations, `echo hello`, a bad-arguments error;
//! - `resources`: a cut output's `resource_link`, `resources/list`, the template, a line range,
//!   paging through `toolhost/next` to the whole output, and (HTTP) another session neither
//!   listing nor reading it (`-32002`);
//! - `cancel`: cancelling a call (the SDK sends `notifications/cancelled`) stops its command
//!   and the session keeps serving; the end of a session (stdin closed, HTTP `DELETE`) stops
//!   its background processes;
//! - `progress`: heartbeat progress during a silent 12 s command;
//! - `idle`: an idle HTTP session (`--idle-timeout 2s`) ends with its background processes,
//!   a foreground call longer than the idle timeout completes;
//! - `origin`: a foreign `Origin` gets 403 over HTTP, the server's own and allowed ones do not;
//! - `logging`: with the hostile fixture plugin (`--policy none`), the `logging` capability is
//!   declared, nothing arrives before `logging/setLevel`, then `spin` hitting its CPU limit
//!   arrives as one `warning` (`notifications/message`, through the SDK's `logging_callback`)
//!   naming the limit and the plugin, without the session's scope; over HTTP only the session
//!   that called it gets it;
//! - `cli`: `toolhost --state-dir DIR call execute '{"command":"seq 1 300000"}'` names its full
//!   output as `output_file` in DIR, and the file holds all 300000 lines once the CLI exited;
//! - `malformed`: an SDK `ClientSession` on a transport of the script's own that also writes
//!   raw lines: bad syntax, invalid UTF-8, a lone surrogate, nesting 10,000 deep and two
//!   messages on one line get `-32700` (with the request's id where it shows), string
//!   `arguments` `-32602`, no request and a pending request's id `-32600` (the first keeps its
//!   answer), malformed notifications nothing; no broken request runs and the session is
//!   served after each; over HTTP the same bodies in an SDK session get 400 with those errors
//!   (a batch one refusal per request, a body over 16 MiB 413);
//! - `tasks_2026`: the SDK's `Client` negotiates revision 2026-07-28 itself (`server/discover`,
//!   no `initialize`, `_meta` on every request): over stdio the connection is the scope, over
//!   HTTP the `toolhost/scope` named in `_meta` (the same id from another connection sees a
//!   background process, another id does not, none is `-32602`); with the Tasks extension
//!   (the SDK has no client of it: the script's is built on the SDK's extension hooks)
//!   `execute` of `sleep 2.5; echo done` with timeout 1s is a task working past 1 s that
//!   completes with `done`, and `tasks/cancel` ends a task `cancelled` with its command;
//!   another scope neither sees nor cancels it; a 2025-11-25 client declaring the extension
//!   gets plain results;
//! - `roots`: servers started in `/` with `--workspaces-under PARENT`, PARENT a fresh directory
//!   under `/var/tmp` (never `/tmp`, which confined commands see privately, nor the home
//!   directory, whose caches they may write). A client declaring `roots` (the SDK's
//!   `list_roots_callback`) is asked for them at its first call only. Its root `proj-a` becomes
//!   the working directory and the only place its commands write. After
//!   `notifications/roots/list_changed` the next call asks again, and the root `proj-b/src`
//!   makes the repository's top `proj-b` the workspace in place of `proj-a`. A client without
//!   `roots` has no workspace, and its first result says so in a note. A call's `workdir` of
//!   `PARENT/proj-a` makes that project its workspace and working directory from then on. A
//!   `workdir` in a dot-directory under PARENT writes nothing there.
//!
//! The SDK lives in a virtualenv under the target directory (`<target>/mcp-venv`), created on
//! the first run (needs `python3` with `venv` and access to PyPI) and reused while its marker
//! file records the pinned version; a different pin reinstalls. Set `TOOLHOST_SKIP_PYTHON=1`
//! to skip these tests on machines without them.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The `mcp` release the client is tested with (the newest that runs on this machine's
/// Python 3.11).
const MCP_VERSION: &str = "2.3.0";

/// How long one scenario group may take before its client is killed (each takes well under a
/// minute; the client gives up on its own after 120 s).
const GROUP_LIMIT: Duration = Duration::from_secs(150);

fn skipped() -> bool {
    let skip = std::env::var_os("TOOLHOST_SKIP_PYTHON").is_some_and(|v| v == "1");
    if skip {
        eprintln!("skipped: TOOLHOST_SKIP_PYTHON=1");
    }
    skip
}

/// `<target>/mcp-venv`, next to the profile directories.
fn venv_dir() -> PathBuf {
    toolhost_e2e::target_dir().join("mcp-venv")
}

fn run(command: &mut Command, what: &str) -> Result<String, String> {
    let output = command
        .output()
        .map_err(|e| format!("{what}: cannot run {command:?}: {e}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "{what} failed ({}):\n{}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// The `mcp` version installed for `python`, if it runs at all.
fn installed_mcp(python: &Path) -> Option<String> {
    let output = Command::new(python)
        .args([
            "-c",
            "import importlib.metadata as m; print(m.version('mcp'))",
        ])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// Make the virtualenv hold `mcp==MCP_VERSION`, under a lock (other test binaries or runs
/// may be doing the same), and return its python.
fn install() -> Result<PathBuf, String> {
    let venv = venv_dir();
    let python = venv.join("bin").join("python");
    let ready = venv.join(".toolhost-mcp-installed");
    let pin = format!("mcp=={MCP_VERSION}");

    let lock_path = toolhost_e2e::target_dir().join("mcp-venv.lock");
    let lock = std::fs::File::create(&lock_path)
        .map_err(|e| format!("cannot create {}: {e}", lock_path.display()))?;
    lock.lock()
        .map_err(|e| format!("cannot lock {}: {e}", lock_path.display()))?;

    let recorded = std::fs::read_to_string(&ready).unwrap_or_default();
    if recorded.trim() == pin && python.is_file() {
        return Ok(python);
    }
    // A venv whose python no longer runs (the system python changed) is made anew.
    if !python.is_file()
        || !Command::new(&python)
            .args(["-c", ""])
            .status()
            .is_ok_and(|s| s.success())
    {
        run(
            Command::new("python3")
                .args(["-m", "venv", "--clear"])
                .arg(&venv),
            "creating the virtualenv (python3 -m venv)",
        )?;
    }
    let _ = std::fs::remove_file(&ready);
    run(
        Command::new(&python).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            &pin,
        ]),
        &format!("pip install {pin}"),
    )?;
    match installed_mcp(&python) {
        Some(version) if version == MCP_VERSION => {}
        other => return Err(format!("after pip install {pin}, mcp is {other:?}")),
    }
    std::fs::write(&ready, format!("{pin}\n"))
        .map_err(|e| format!("cannot write {}: {e}", ready.display()))?;
    Ok(python)
}

/// The venv's python with the pinned `mcp`, installed once per test binary.
fn python_with_mcp() -> PathBuf {
    static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match PYTHON.get_or_init(install) {
        Ok(python) => python.clone(),
        Err(message) => panic!(
            "{message}\n(set TOOLHOST_SKIP_PYTHON=1 to skip the Python SDK tests on a machine \
             without python3, venv or PyPI)"
        ),
    }
}

/// Read all of `stream` on a thread.
fn collect(mut stream: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stream.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// Run the client's scenario group `group`; panic with its output unless it reports success.
fn run_group(group: &str) {
    if skipped() {
        return;
    }
    let python = python_with_mcp();
    let binary = toolhost_e2e::toolhost_bin();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/mcp_client.py");
    let (cache_key, cache_value) = toolhost_e2e::cache_env();
    let start = Instant::now();
    let mut child = Command::new(&python)
        .arg(&script)
        .arg(&binary)
        .arg(group)
        .env(cache_key, cache_value)
        .env("TOOLHOST_LOG", "error")
        .env("TOOLHOST_EXPECT_MCP", MCP_VERSION)
        .env(
            "TOOLHOST_HOSTILE_COMPONENT",
            toolhost_e2e::hostile_component(),
        )
        .env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the Python client");
    let stdout = collect(child.stdout.take().expect("stdout"));
    let stderr = collect(child.stderr.take().expect("stderr"));
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the Python client") {
            break Some(status);
        }
        if start.elapsed() > GROUP_LIMIT {
            // Its HTTP servers get SIGTERM when it dies (PR_SET_PDEATHSIG); stdio servers see
            // their stdin close.
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let elapsed = start.elapsed();
    let stdout = stdout.join().expect("stdout reader");
    let stderr = stderr.join().expect("stderr reader");
    let Some(status) = status else {
        panic!(
            "the Python MCP client ({group}) did not finish within {GROUP_LIMIT:?}:\n{stdout}\n{stderr}"
        );
    };
    assert!(
        status.success(),
        "the Python MCP client ({group}) failed ({status}) after {elapsed:.1?}:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains(&format!("python mcp client: {group} ok")),
        "{stdout}\n{stderr}"
    );
    eprintln!("{group}: ok in {elapsed:.1?}\n{stderr}");
}

#[test]
fn python_sdk_tools_and_echo() {
    run_group("tools");
}

#[test]
fn python_sdk_output_resources() {
    run_group("resources");
}

#[test]
fn python_sdk_cancellation_and_session_end() {
    run_group("cancel");
}

#[test]
fn python_sdk_progress_heartbeat() {
    run_group("progress");
}

#[test]
fn python_sdk_http_idle_sessions() {
    run_group("idle");
}

#[test]
fn python_sdk_http_foreign_origin() {
    run_group("origin");
}

#[test]
fn python_sdk_logging() {
    run_group("logging");
}

#[test]
fn python_sdk_cli_output_file() {
    run_group("cli");
}

#[test]
fn python_sdk_malformed_messages() {
    run_group("malformed");
}

#[test]
fn python_sdk_protocol_2026_and_tasks() {
    run_group("tasks_2026");
}

#[test]
fn python_sdk_roots_and_workdir_choose_workspaces() {
    run_group("roots");
}

#[test]
fn python_sdk_elicitation_asks_before_a_forced_push_and_for_a_secret() {
    run_group("asking");
}
