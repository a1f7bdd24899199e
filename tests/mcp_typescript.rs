//! `toolhost serve` (stdio and streamable HTTP) and `toolhost call` driven by the official MCP
//! TypeScript SDK (`@modelcontextprotocol/sdk`): the client script
//! `tests/typescript/mcp_client.mjs` runs one group of scenarios per test here, so they run in
//! parallel and a failure names its group (the script names the scenario).
//!
//! The SDK is installed from the committed lockfile (`tests/typescript/package-lock.json`,
//! exact version in `package.json`) with `npm ci --ignore-scripts` into `<target>/mcp-ts/`,
//! again only when `package.json` or the lockfile changed; the script is copied next to it and
//! run there with `node`. Needs `node` (20 or later) and `npm` with access to the npm
//! registry on the first run. Where `node` or `npm` is missing the tests are skipped with a
//! message; `TOOLHOST_SKIP_NODE=1` skips them too.

use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Files of `tests/typescript/` that define the installation.
const MANIFESTS: [&str; 2] = ["package.json", "package-lock.json"];
/// The client script.
const SCRIPT: &str = "mcp_client.mjs";
/// Written into the install directory once `npm ci` succeeded: the manifests it installed.
const STAMP: &str = ".toolhost-installed";

fn source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("typescript")
}

/// Whether `program --version` runs; panics if it exists but fails.
fn available(program: &str) -> bool {
    match Command::new(program).arg("--version").output() {
        Ok(output) => {
            assert!(
                output.status.success(),
                "`{program} --version` failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
            true
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => false,
        Err(error) => panic!("cannot run `{program} --version`: {error}"),
    }
}

/// The manifests as one text: what the stamp records.
fn manifests_text(dir: &Path) -> Option<String> {
    let mut text = String::new();
    for name in MANIFESTS {
        text.push_str(&std::fs::read_to_string(dir.join(name)).ok()?);
        text.push('\0');
    }
    Some(text)
}

/// Copy `name` from the sources into `dir` atomically (a running client never sees half).
fn copy_in(dir: &Path, name: &str) {
    let partial = dir.join(format!(".{name}.{}", std::process::id()));
    std::fs::copy(source_dir().join(name), &partial)
        .unwrap_or_else(|e| panic!("copy {name} into {}: {e}", dir.display()));
    std::fs::rename(&partial, dir.join(name)).expect("rename into place");
}

/// `<target>/mcp-ts` with the SDK installed and the script in place; `None` to skip.
fn client_dir() -> Option<PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(install).clone()
}

fn install() -> Option<PathBuf> {
    if std::env::var_os("TOOLHOST_SKIP_NODE").is_some_and(|v| v == "1") {
        eprintln!("SKIPPED: the TypeScript SDK tests (TOOLHOST_SKIP_NODE=1)");
        return None;
    }
    for program in ["node", "npm"] {
        if !available(program) {
            eprintln!(
                "\n*** SKIPPED: the MCP TypeScript SDK tests: `{program}` is not installed ***\n\
                 *** install Node.js 20+ with npm to run them ***\n"
            );
            return None;
        }
    }
    let dir = toolhost_e2e::target_dir().join("mcp-ts");
    std::fs::create_dir_all(&dir).expect("create <target>/mcp-ts");
    // Other test processes may install at the same time: one at a time.
    let lock = std::fs::File::create(dir.join(".lock")).expect("lock file");
    // SAFETY: flock on a file descriptor we own, which stays open until the end of this function.
    let locked = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(locked, 0, "flock: {}", std::io::Error::last_os_error());

    let wanted = manifests_text(&source_dir()).expect("tests/typescript/package*.json");
    let installed = std::fs::read_to_string(dir.join(STAMP)).ok();
    if installed.as_deref() != Some(wanted.as_str()) || !dir.join("node_modules").is_dir() {
        let _ = std::fs::remove_file(dir.join(STAMP));
        for name in MANIFESTS {
            copy_in(&dir, name);
        }
        let started = Instant::now();
        let output = Command::new("npm")
            .args(["ci", "--ignore-scripts", "--no-audit", "--no-fund"])
            .current_dir(&dir)
            .output()
            .expect("run npm ci");
        assert!(
            output.status.success(),
            "`npm ci --ignore-scripts` in {} failed ({}):\n{}\n{}",
            dir.display(),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        eprintln!(
            "installed the MCP TypeScript SDK into {} in {:?}",
            dir.display(),
            started.elapsed()
        );
        std::fs::write(dir.join(STAMP), &wanted).expect("write the install stamp");
    }
    copy_in(&dir, SCRIPT);
    Some(dir)
}

/// Read all of `from` on a thread.
fn drain(mut from: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = from.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// Run the script's scenario `group` against the toolhost binary; fails with its output
/// unless it exits 0 within `limit` and ends with its ok line.
fn run_group(group: &str, limit: Duration) {
    let Some(dir) = client_dir() else {
        return;
    };
    let (cache_key, cache_value) = toolhost_e2e::cache_env();
    let started = Instant::now();
    let mut child = Command::new("node")
        .arg(dir.join(SCRIPT))
        .arg(toolhost_e2e::toolhost_bin())
        .arg(group)
        .current_dir(&dir)
        .env(cache_key, cache_value)
        .env("TOOLHOST_LOG", "error")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run node");
    let stdout = drain(child.stdout.take().expect("stdout"));
    let stderr = drain(child.stderr.take().expect("stderr"));
    let deadline = started + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for node") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let timed_out = status.is_none();
    let status = status.unwrap_or_else(|| {
        // SIGTERM first: the script then stops the servers it started.
        let pid = libc::pid_t::try_from(child.id()).expect("pid");
        // SAFETY: kill has no memory-safety preconditions; the child is not reaped yet.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let grace = Instant::now() + Duration::from_secs(5);
        while Instant::now() < grace {
            if let Ok(Some(status)) = child.try_wait() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        child.wait().expect("wait for node")
    });
    let stdout = stdout.join().expect("stdout reader");
    let stderr = stderr.join().expect("stderr reader");
    eprintln!(
        "node {SCRIPT} {group}: {status} after {:?}\n{stdout}",
        started.elapsed()
    );
    assert!(
        !timed_out,
        "the TypeScript client ({group}) did not finish within {limit:?}:\n{stdout}\n{stderr}"
    );
    assert!(
        status.success(),
        "the TypeScript client ({group}) failed ({status}):\n{stdout}\n{stderr}"
    );
    let last = stdout.lines().last().unwrap_or_default();
    assert_eq!(
        last,
        format!("typescript mcp client: ok {group}"),
        "{stdout}\n{stderr}"
    );
}

/// Over stdio (the SDK's `StdioClientTransport`): the tools with their titles and
/// annotations, `echo hello`, a cut output as a paged resource, an aborted call stopping its
/// command; and `toolhost call`'s `output_file` complete after the CLI exited.
#[test]
fn typescript_sdk_over_stdio() {
    run_group("stdio", Duration::from_secs(120));
}

/// Broken lines over stdio (a custom SDK transport that also writes raw lines) get their
/// JSON-RPC errors while the SDK client keeps being served; broken HTTP bodies get 400.
#[test]
fn typescript_sdk_malformed_requests() {
    run_group("malformed", Duration::from_secs(120));
}

/// Over streamable HTTP: tools, `echo`, resources private to their session, foreign origins
/// refused, `--max-sessions`, an aborted call stopping its command.
#[test]
fn typescript_sdk_over_http() {
    run_group("http", Duration::from_secs(120));
}

/// An idle HTTP session ends after `--idle-timeout` with its processes; one with a call in
/// flight does not.
#[test]
fn typescript_sdk_http_idle_sessions() {
    run_group("http-idle", Duration::from_secs(120));
}

/// A silent 70 s command completes under the SDK's default 60 s request timeout, restarted by
/// the heartbeat progress notifications.
#[test]
fn typescript_sdk_heartbeat_outlives_request_timeout() {
    run_group("heartbeat", Duration::from_secs(150));
}
