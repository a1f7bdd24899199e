//! `--network allow=...`: commands reach the listed hosts through the session's proxy, nothing
//! else, and their output names what was refused.
//!
//! No test sends a packet beyond the loopback: the servers listen on the host's `127.0.0.1`,
//! and the test-only resolver map (`TOOLHOST_TEST_RESOLVE`) gives every name a test uses a
//! loopback address, with `127.0.0.1` counted as public (`TOOLHOST_TEST_PUBLIC`) and
//! `127.0.0.2` not. Inside the session's network namespace `127.0.0.1` is the namespace's own:
//! the host's servers are out of reach but through the proxy.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::confinement::Machine;

/// Servers on the host's loopback: HTTPS (a self-signed certificate) and plain HTTP, both
/// serving `dir` (an `index.html` and a git repository for the "dumb" HTTP protocol), and
/// plain HTTP on `[::1]` where the host has IPv6.
struct Servers {
    child: Child,
    tls: u16,
    plain: u16,
    /// 0 without IPv6.
    six: u16,
}

impl Drop for Servers {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const SERVER: &str = r#"
import functools, http.server, socket, ssl, sys, threading
root, cert, key = sys.argv[1], sys.argv[2], sys.argv[3]
class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args): pass
    def do_GET(self):
        if self.path != "/host":
            return super().do_GET()
        body = ("host=" + self.headers.get("Host", "") + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
handler = functools.partial(Quiet, directory=root)
plain = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
tls = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)
tls.socket = context.wrap_socket(tls.socket, server_side=True)
servers = [plain, tls]
try:
    class Six(http.server.ThreadingHTTPServer):
        address_family = socket.AF_INET6
    six = Six(("::1", 0), handler)
    servers.append(six)
    six_port = six.server_address[1]
except OSError:
    six_port = 0
for server in servers:
    threading.Thread(target=server.serve_forever, daemon=True).start()
print(tls.server_address[1], plain.server_address[1], six_port, flush=True)
sys.stdin.read()
"#;

impl Servers {
    fn start(dir: &Path) -> Servers {
        std::fs::write(dir.join("index.html"), "hello from the test server\n").expect("index");
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        let made = Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            ])
            .args(["-subj", "/CN=allowed.test", "-keyout"])
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .stderr(Stdio::null())
            .status()
            .expect("openssl runs");
        assert!(made.success(), "a self-signed certificate");
        // A bare repository with one commit, served as files.
        let source = dir.join("source");
        std::fs::create_dir_all(&source).expect("source");
        let git = |args: &[&str], at: &Path| {
            let status = Command::new("git")
                .current_dir(at)
                .args(["-c", "user.name=t", "-c", "user.email=t@t"])
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .expect("git runs");
            assert!(status.success(), "git {args:?}");
        };
        git(&["init", "-q", "-b", "main"], &source);
        std::fs::write(source.join("README"), "cloned through the proxy\n").expect("readme");
        git(&["add", "README"], &source);
        git(&["commit", "-q", "-m", "one"], &source);
        git(&["clone", "-q", "--bare", "source", "repo.git"], dir);
        git(&["update-server-info"], &dir.join("repo.git"));
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(SERVER)
            .arg(dir)
            .arg(&cert)
            .arg(&key)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the ports");
        let ports: Vec<u16> = line
            .split_whitespace()
            .map(|port| port.parse().expect("a port"))
            .collect();
        Servers {
            child,
            tls: ports[0],
            plain: ports[1],
            six: ports[2],
        }
    }
}

/// The test-only resolver: names a test uses, all on the loopback.
const RESOLVE: (&str, &str) = (
    "TOOLHOST_TEST_RESOLVE",
    "allowed.test=127.0.0.1;denied.test=127.0.0.1;inside.test=127.0.0.2;a.wild.test=127.0.0.1;\
     ported.test=127.0.0.1;six.test=::1",
);
const PUBLIC: (&str, &str) = ("TOOLHOST_TEST_PUBLIC", "127.0.0.1,::1");

fn output(result: &serde_json::Value) -> String {
    result["output"].as_str().unwrap_or_default().to_owned()
}

/// The note at the end of a command's output, and what came before it.
fn split_note(result: &serde_json::Value) -> (String, String) {
    let text = output(result);
    match text.split_once("[toolhost: this command's network is limited") {
        Some((before, note)) => (before.to_owned(), note.to_owned()),
        None => (text, String::new()),
    }
}

#[test]
fn an_allow_list_lets_through_only_its_hosts_and_names_what_was_refused() {
    let machine = Machine::new();
    let served = tempfile::tempdir_in(machine.path("outside")).expect("served");
    let servers = Servers::start(served.path());
    let (tls, plain) = (servers.tls, servers.plain);
    let flags = [
        "--network",
        "allow=allowed.test,inside.test,*.wild.test,six.test",
        "--network",
    ];
    let ported = format!("allow=ported.test:{tls}");
    let mut flags = flags.to_vec();
    flags.push(&ported);
    let env = [RESOLVE, PUBLIC];

    // Allowed: HTTPS through CONNECT, plain HTTP forwarded, a wildcard, a listed port.
    let allowed = machine.execute_with(
        &flags,
        &format!(
            "curl -sSk https://allowed.test:{tls}/ && curl -sS http://allowed.test:{plain}/ && \
             curl -sSk https://a.wild.test:{tls}/ && curl -sSk https://ported.test:{tls}/ && \
             curl -sS -H 'Host: denied.test' http://allowed.test:{plain}/host"
        ),
        &env,
    );
    assert!(
        output(&allowed).contains(&format!("host=allowed.test:{plain}\n")),
        "a forwarded request names the host that was checked: {allowed}"
    );
    assert_eq!(allowed["exit_code"], 0, "{allowed}");
    assert_eq!(
        output(&allowed)
            .matches("hello from the test server")
            .count(),
        4,
        "{allowed}"
    );
    assert!(
        !output(&allowed).contains("[toolhost: this command's network"),
        "{allowed}"
    );

    // IPv6: the proxy listens on the namespace's `::1` too, and reaches a name at `::1`.
    if servers.six != 0 {
        let six = servers.six;
        let result = machine.execute_with(
            &flags,
            &format!(
                "curl -sS -x \"http://[::1]:${{HTTP_PROXY##*:}}\" http://allowed.test:{plain}/ && \
                 curl -sS http://six.test:{six}/"
            ),
            &env,
        );
        assert_eq!(result["exit_code"], 0, "{result}");
        assert_eq!(
            output(&result)
                .matches("hello from the test server")
                .count(),
            2,
            "{result}"
        );
    }

    // Refused by name, by port, and by address class: the note names each once.
    let refused = machine.execute_with(
        &flags,
        &format!(
            "curl -sSk https://denied.test:{tls}/; curl -sSk https://denied.test:{tls}/x; \
             curl -sS http://ported.test:{plain}/; curl -sSk https://inside.test:{tls}/; \
             curl -sSk https://wild.test:{tls}/; exit 0"
        ),
        &env,
    );
    let (before, note) = split_note(&refused);
    assert!(!before.contains("hello from the test server"), "{refused}");
    assert!(
        before.contains("403"),
        "curl shows the proxy's refusal: {refused}"
    );
    assert_eq!(
        note.matches(&format!("denied.test:{tls}")).count(),
        1,
        "{refused}"
    );
    assert!(
        note.contains(&format!("ported.test:{plain} (not in the allow-list)")),
        "{refused}"
    );
    assert!(
        note.contains(&format!("inside.test:{tls}")) && note.contains("127.0.0.2"),
        "an allowed name at an unmarked loopback address is refused: {refused}"
    );
    assert!(
        note.contains(&format!("wild.test:{tls}")),
        "a wildcard is not its apex: {refused}"
    );
    assert!(
        note.contains("allowed.test"),
        "the note says what may be reached: {refused}"
    );

    // Around the proxy: the host's servers are out of reach, and a lookup gets nothing.
    let direct = machine.execute_with(
        &flags,
        &format!(
            "curl -sS --noproxy '*' --max-time 5 http://127.0.0.1:{plain}/; echo \"curl=$?\"; \
             python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {plain}), 5)' \
             2>&1 | tail -1; getent hosts denied.test; echo \"getent=$?\""
        ),
        &env,
    );
    let (before, note) = split_note(&direct);
    assert!(!before.contains("hello from the test server"), "{direct}");
    assert!(
        !before.contains("curl=0"),
        "a direct connection succeeded: {direct}"
    );
    assert!(before.contains("ConnectionRefusedError"), "{direct}");
    assert!(
        before.contains("getent=2"),
        "the stub answers no address: {direct}"
    );
    assert!(note.contains("denied.test (looked up directly"), "{direct}");
}

/// A package document of an npm registry, as `npm view` reads it.
const PACKUMENT: &str = r#"{"name":"left-pad","dist-tags":{"latest":"1.3.0"},"versions":{"1.3.0":{"name":"left-pad","version":"1.3.0","dist":{"tarball":"http://allowed.test/left-pad-1.3.0.tgz","shasum":"0"}}}}"#;

#[test]
fn git_python_and_npm_go_through_the_proxy_and_a_program_ignoring_it_is_named() {
    let machine = Machine::new();
    let served = tempfile::tempdir_in(machine.path("outside")).expect("served");
    std::fs::write(served.path().join("left-pad"), PACKUMENT).expect("packument");
    let servers = Servers::start(served.path());
    let (tls, plain) = (servers.tls, servers.plain);
    let result = machine.execute_with(
        &["--network", "allow=allowed.test"],
        &format!(
            "git -c http.sslVerify=false clone -q https://allowed.test:{tls}/repo.git cloned && \
             cat cloned/README && python3 -c 'import urllib.request; \
             print(urllib.request.urlopen(\"http://allowed.test:{plain}/\").read().decode())' && \
             npm view left-pad version --registry http://allowed.test:{plain}/ \
             --cache \"$TMPDIR/npm\" && node -e 'require(\"http\").get(\"http://allowed.test:{plain}/\", \
             r => console.log(r.statusCode)).on(\"error\", e => console.log(\"node:\", e.code))'"
        ),
        &[RESOLVE, PUBLIC],
    );
    assert_eq!(result["exit_code"], 0, "{result}");
    let (before, note) = split_note(&result);
    assert!(before.contains("cloned through the proxy"), "git: {result}");
    assert!(
        before.contains("hello from the test server"),
        "python: {result}"
    );
    assert!(before.contains("1.3.0\n"), "npm: {result}");
    // Node's own `http` ignores the proxy variables before Node 24 (NODE_USE_ENV_PROXY): its
    // lookup reaches the stub, and the note says why it failed.
    if before.contains("node: EAI_AGAIN") {
        assert!(
            note.contains("allowed.test (allowed, but only through the proxy"),
            "{result}"
        );
    } else {
        assert!(before.contains("\n200\n"), "node: {result}");
    }
}

#[test]
fn without_namespaces_an_operators_allow_list_is_refused_with_the_reason() {
    let machine = Machine::new();
    let result = machine.run(
        &["--network", "allow=allowed.test"],
        "echo ran",
        &[("TOOLHOST_SANDBOX_DISABLE", "namespaces"), RESOLVE, PUBLIC],
    );
    assert!(!result.status.success(), "it ran");
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(
        stderr.contains("needs the namespaces layer")
            && stderr.contains("Landlock filters TCP by port"),
        "{stderr}"
    );
    assert!(!String::from_utf8_lossy(&result.stdout).contains("ran"));
    let off = machine.run(
        &["--sandbox", "off", "--network", "allow=a.test"],
        "echo ran",
        &[],
    );
    assert!(!off.status.success());
    assert!(String::from_utf8_lossy(&off.stderr).contains("needs a confined sandbox"));
    let bad = machine.run(&["--network", "allow=bad host"], "echo ran", &[]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("`bad host` is not a host pattern"));
}

#[test]
fn the_guarded_policys_allow_list_holds_and_falls_back_to_no_network_without_namespaces() {
    let machine = Machine::new();
    let served = tempfile::tempdir_in(machine.path("outside")).expect("served");
    let servers = Servers::start(served.path());
    let (tls, plain) = (servers.tls, servers.plain);
    let command = format!(
        "echo \"proxy=${{HTTPS_PROXY:+set}}\"; curl -sSk --max-time 5 https://denied.test:{tls}/; \
         curl -sS --noproxy '*' --max-time 5 http://127.0.0.1:{plain}/; echo ran"
    );
    let guarded = machine.execute_with(&["--policy", "guarded"], &command, &[RESOLVE, PUBLIC]);
    let (before, note) = split_note(&guarded);
    assert!(
        before.contains("proxy=set") && before.contains("ran"),
        "{guarded}"
    );
    assert!(!before.contains("hello from the test server"), "{guarded}");
    assert!(
        note.contains(&format!("denied.test:{tls}")) && note.contains("pypi.org"),
        "the note names the refusal and the registries: {guarded}"
    );
    // Without namespaces there is no gate: the grant's list becomes no network at all.
    let fallback = machine.execute_with(
        &["--policy", "guarded"],
        &command,
        &[("TOOLHOST_SANDBOX_DISABLE", "namespaces"), RESOLVE, PUBLIC],
    );
    let text = output(&fallback);
    assert!(
        text.contains("proxy=\n") && text.contains("ran"),
        "{fallback}"
    );
    assert!(!text.contains("hello from the test server"), "{fallback}");
}

/// A `toolhost --network allow=allowed.test serve` session over stdio, initialized; `env`
/// sets the test-only resolver for the server alone.
async fn allowed_test_session() -> toolhost_e2e::mcp_client::StdioClient {
    let args: Vec<String> = [
        format!("{}={}", RESOLVE.0, RESOLVE.1),
        format!("{}={}", PUBLIC.0, PUBLIC.1),
        toolhost_e2e::toolhost_bin().display().to_string(),
        "--network".to_owned(),
        "allow=allowed.test".to_owned(),
        "serve".to_owned(),
    ]
    .into();
    let mut client = toolhost_e2e::mcp_client::StdioClient::spawn_command(Path::new("env"), &args);
    let init = client.initialize().await;
    assert!(init.get("result").is_some(), "{init}");
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_reaches_the_sessions_log_over_mcp() {
    let mut client = allowed_test_session().await;
    let level = client
        .request("logging/setLevel", serde_json::json!({"level": "warning"}))
        .await;
    assert!(level.get("result").is_some(), "{level}");
    let result = client
        .call_tool(
            "execute",
            serde_json::json!({"command": "curl -sS http://denied.test:1/; exit 0"}),
        )
        .await;
    assert!(result.to_string().contains("denied.test:1"), "{result}");
    let mut seen = Vec::new();
    let logged = loop {
        let Some(message) = client
            .next_notification(std::time::Duration::from_secs(10))
            .await
        else {
            break false;
        };
        if message["method"] == "notifications/message"
            && message["params"].to_string().contains("denied.test:1")
        {
            assert_eq!(message["params"]["level"], "warning", "{message}");
            break true;
        }
        seen.push(message);
    };
    assert!(logged, "no log message names the refused host: {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_is_told_only_the_refusals_of_its_own_processes() {
    let mut client = allowed_test_session().await;
    // A background command keeps being refused while the next one runs.
    let background = client
        .call_tool(
            "execute",
            serde_json::json!({
                "command": "while :; do curl -s http://background.test:1/ >/dev/null; \
                            getent hosts lookup.test; sleep 0.05; done",
                "run_in_background": true
            }),
        )
        .await;
    let id = background["structuredContent"]["background_process_id"]
        .as_str()
        .or_else(|| background["structuredContent"]["id"].as_str())
        .unwrap_or_else(|| panic!("no id: {background}"))
        .to_owned();
    // Once it has been refused at least once (its output says nothing; the next call's does
    // not either), a foreground command runs beside it for a while.
    let foreground = client
        .call_tool(
            "execute",
            serde_json::json!({
                "command": "sleep 1; curl -sS http://foreground.test:1/; exit 0"
            }),
        )
        .await;
    let text = foreground.to_string();
    assert!(text.contains("foreground.test:1"), "{text}");
    assert!(
        !text.contains("background.test") && !text.contains("lookup.test"),
        "another command's refusals were told to this one: {text}"
    );
    // The background command's own note, once it ends, names its refusals.
    let stopped = client
        .call_tool(
            "process_signal",
            serde_json::json!({"process_id": id, "signal": "kill"}),
        )
        .await;
    assert!(
        stopped.get("isError").is_none_or(|e| e == false),
        "{stopped}"
    );
    let mut output = String::new();
    for _ in 0..100 {
        let read = client
            .call_tool("process_output", serde_json::json!({"process_id": id}))
            .await;
        output = read.to_string();
        if output.contains("[toolhost: this command's network") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        output.contains("background.test:1") && output.contains("lookup.test"),
        "{output}"
    );
    assert!(!output.contains("foreground.test"), "{output}");
}

/// Half-sent requests free their place among the proxy's connections: a command holding more
/// request heads than the gate serves at once (256), never finished, does not keep its own next
/// request out for good (the proxy closes a connection whose head is not in within 20 s).
#[test]
fn half_sent_requests_to_the_proxy_free_their_places() {
    let machine = Machine::new();
    let served = tempfile::tempdir_in(machine.path("outside")).expect("served");
    let servers = Servers::start(served.path());
    let plain = servers.plain;
    let script = format!(
        r#"python3 - <<'EOF'
import os, socket, subprocess, urllib.parse
proxy = urllib.parse.urlparse(os.environ["HTTP_PROXY"])
held = []
for _ in range(300):
    try:
        s = socket.create_connection((proxy.hostname, proxy.port), timeout=5)
        s.sendall(b"GET http://allowed.test:{plain}/ HTTP/1.1\r\nHost: allowed")
    except OSError:
        break
    held.append(s)
print("held", len(held), flush=True)
done = subprocess.run(["curl", "-sS", "--max-time", "50", "http://allowed.test:{plain}/"],
                      capture_output=True, text=True)
print(done.stdout, done.stderr, "curl=%d" % done.returncode, flush=True)
EOF"#
    );
    let result = machine.execute_with(
        &["--network", "allow=allowed.test"],
        &script,
        &[RESOLVE, PUBLIC],
    );
    let text = output(&result);
    let held: usize = text
        .split_whitespace()
        .skip_while(|word| *word != "held")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{result}"));
    assert!(held > 256, "the gate's places were not all taken: {result}");
    assert!(text.contains("hello from the test server"), "{result}");
    assert!(text.contains("curl=0"), "{result}");
}

/// The userinfo of a forwarded URL (`http://user:pw@host/`) goes nowhere: the `Host` the
/// upstream server sees is the host that was checked.
#[test]
fn a_urls_userinfo_is_not_forwarded() {
    let machine = Machine::new();
    let served = tempfile::tempdir_in(machine.path("outside")).expect("served");
    let servers = Servers::start(served.path());
    let plain = servers.plain;
    let script = format!(
        r#"python3 - <<'EOF'
import os, socket, urllib.parse
proxy = urllib.parse.urlparse(os.environ["HTTP_PROXY"])
s = socket.create_connection((proxy.hostname, proxy.port), timeout=30)
s.sendall(b"GET http://user:secret-pw@allowed.test:{plain}/host HTTP/1.1\r\n"
          b"Host: allowed.test:{plain}\r\nConnection: close\r\n\r\n")
data = b""
while True:
    chunk = s.recv(4096)
    if not chunk:
        break
    data += chunk
print(data.decode(errors="replace"))
EOF"#
    );
    let result = machine.execute_with(
        &["--network", "allow=allowed.test"],
        &script,
        &[RESOLVE, PUBLIC],
    );
    let text = output(&result);
    assert!(
        text.contains(&format!("host=allowed.test:{plain}\n")),
        "{result}"
    );
    assert!(!text.contains("secret-pw"), "{result}");
}
