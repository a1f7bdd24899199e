//! `toolhost serve` (stdio and streamable HTTP) and `toolhost call` driven by the official MCP
//! TypeScript SDKs: the 1.x `@modelcontextprotocol/sdk` (protocol revisions up to 2025-11-25,
//! `initialize` and sessions) in `tests/typescript/mcp_client.mjs`, and the 2.x
//! `@modelcontextprotocol/client` (revision 2026-07-28: `server/discover`, per-request `_meta`,
//! default and named scopes, principals, the Tasks extension) in
//! `tests/typescript/mcp_2026.mjs`; both share `common.mjs`.
//! Each test here runs one group of scenarios of one script, so they run in parallel and a
//! failure names its group (the script names the scenario).
//!
//! The SDKs are installed from the committed lockfile (`tests/typescript/package-lock.json`,
//! exact versions in `package.json`) with `npm ci --ignore-scripts` into `<target>/mcp-ts/`,
//! again only when `package.json` or the lockfile changed; the scripts are copied next to it
//! and run there with `node`. Needs `node` (20 or later) and `npm` with access to the npm
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
/// The client scripts, and the module they share.
const SCRIPTS: [&str; 3] = ["common.mjs", "mcp_client.mjs", "mcp_2026.mjs"];
/// The script of the 1.x SDK (`@modelcontextprotocol/sdk`).
const SDK_1: &str = "mcp_client.mjs";
/// The script of the 2.x SDK (`@modelcontextprotocol/client`) in the 2026-07-28 era.
const SDK_2026: &str = "mcp_2026.mjs";
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

/// `<target>/mcp-ts` with the SDKs installed and the scripts in place; `None` to skip.
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
            "installed the MCP TypeScript SDKs into {} in {:?}",
            dir.display(),
            started.elapsed()
        );
        std::fs::write(dir.join(STAMP), &wanted).expect("write the install stamp");
    }
    for script in SCRIPTS {
        copy_in(&dir, script);
    }
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

/// Run the scenario `group` of `script` against the toolhost binary; fails with its output
/// unless it exits 0 within `limit` and ends with its ok line.
fn run_group(script: &str, group: &str, limit: Duration) {
    let Some(dir) = client_dir() else {
        return;
    };
    let (cache_key, cache_value) = toolhost_e2e::cache_env();
    // Built (once per test binary) before the clock starts: `limit` is the client's time.
    let binary = toolhost_e2e::toolhost_bin();
    let started = Instant::now();
    let mut child = Command::new("node")
        .arg(dir.join(script))
        .arg(binary)
        .arg(group)
        .current_dir(&dir)
        .env(cache_key, cache_value)
        .env("TOOLHOST_LOG", "error")
        .env(
            "TOOLHOST_HOSTILE_COMPONENT",
            toolhost_e2e::hostile_component(),
        )
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
        "node {script} {group}: {status} after {:?}\n{stdout}",
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
    run_group(SDK_1, "stdio", Duration::from_secs(120));
}

/// Broken lines over stdio (a custom SDK transport that also writes raw lines) get their
/// JSON-RPC errors while the SDK client keeps being served; broken HTTP bodies get 400.
#[test]
fn typescript_sdk_malformed_requests() {
    run_group(SDK_1, "malformed", Duration::from_secs(120));
}

/// Over streamable HTTP: tools, `echo`, resources private to their session, foreign origins
/// refused, `--max-sessions`, an aborted call stopping its command.
#[test]
fn typescript_sdk_over_http() {
    run_group(SDK_1, "http", Duration::from_secs(120));
}

/// An idle HTTP session ends after `--idle-timeout` with its processes; one with a call in
/// flight does not.
#[test]
fn typescript_sdk_http_idle_sessions() {
    run_group(SDK_1, "http-idle", Duration::from_secs(120));
}

/// A silent 70 s command completes under the SDK's default 60 s request timeout, restarted by
/// the heartbeat progress notifications.
#[test]
fn typescript_sdk_heartbeat_outlives_request_timeout() {
    run_group(SDK_1, "heartbeat", Duration::from_secs(150));
}

/// The `logging` capability (1.x SDK, `setLoggingLevel` and a `LoggingMessageNotification`
/// handler), with the hostile fixture as the only plugin (`--policy none`): `spin` hitting its
/// CPU limit sends nothing before a level is set, then one `warning` naming the limit, the
/// plugin and the tool, without the session's scope; over HTTP a second session that set the
/// level too hears none of the first one's lines, and then its own.
#[test]
fn typescript_sdk_logging() {
    run_group(SDK_1, "logging", Duration::from_secs(120));
}

/// Protocol 2026-07-28 over stdio with the 2.x SDK (`versionNegotiation: auto` picks it from
/// `server/discover`; no `initialize`, the revision and capabilities in every request's
/// `_meta`): tools, `echo hi`, a background process of one call in `process_list` of the next
/// (the connection is the scope), and gone once the connection closes.
#[test]
fn typescript_sdk_2026_over_stdio() {
    run_group(SDK_2026, "2026-stdio", Duration::from_secs(120));
}

/// Protocol 2026-07-28 over streamable HTTP with the 2.x SDK: the scope named in `_meta`
/// (`toolhost/scope`, added by a wrapper of the SDK's transport or in one call's `_meta`) is
/// shared by clients naming the same id and unseen by another id or by the default scope of
/// clients naming none; an idle scope ends with its processes.
#[test]
fn typescript_sdk_2026_over_http() {
    run_group(SDK_2026, "2026-http", Duration::from_secs(120));
}

/// The person in the loop over HTTP in revision 2026-07-28: the guarded policy's question comes
/// back as `input_required`, the 2.x SDK answers through its `elicitation/create` handler and
/// retries with the answer and the signed `requestState`; accepted runs, declined refuses,
/// "from now on" holds for the scope, a replayed record is refused, a client without
/// elicitation gets the reason. Under `--network ask=`, a refused host the person allows is
/// reached by the command's second run and by the next command (skipped, saying so, without
/// namespaces).
#[test]
fn typescript_sdk_2026_asking() {
    run_group(SDK_2026, "asking", Duration::from_secs(120));
}

/// A standard client: the 2.x SDK as it comes (`versionNegotiation: auto`, nothing of
/// toolhost's own), over stdio and streamable HTTP: tools, `execute`, a cut output read as its
/// resource; over HTTP, with a token file of two principals, a background process of one
/// connection read by id from another with the same token (its principal's default scope), a
/// task (raw `tasks/get`), and none of it reached with the other principal's token.
#[test]
fn typescript_sdk_2026_standard_client() {
    run_group(SDK_2026, "2026-standard", Duration::from_secs(120));
}

/// The Tasks extension with a 2.x SDK client that declares it: `execute` answered with a task
/// (SDK 2.4.0 has no client side of tasks: the task is read off the wire, `tasks/get` and
/// `tasks/cancel` go through `client.request`), `working` past its 1 s timeout and `completed`
/// with the result at exit; its output as the status message while working; `tasks/cancel`
/// ending it `cancelled` with its command killed; an unknown or another scope's task -32602.
#[test]
fn typescript_sdk_2026_tasks() {
    run_group(SDK_2026, "tasks", Duration::from_secs(120));
}
