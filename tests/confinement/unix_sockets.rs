//! Unix sockets: a confined command reaches the sockets it or its session made and those the
//! operator allows, and none of the host's others (a credential daemon, a server of the
//! user's), in both tiers. The keeper supervises `connect` (see `keeper/src/unix.rs`); a
//! refusal ends the output with a note naming the socket and `--allow-unix-socket`.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::confinement::Machine;

/// Both tiers: with namespaces, and with Landlock alone.
const TIERS: [&[(&str, &str)]; 2] = [&[], &[("TOOLHOST_SANDBOX_DISABLE", "namespaces")]];

/// What a server of the host's answers.
const GREETING: &str = "hello-from-the-host";

/// A Unix stream server of the host's (outside every session), answering [`GREETING`].
struct HostServer {
    child: Child,
}

impl Drop for HostServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const SERVER: &str = r#"
import os, socket, sys
name = sys.argv[1]
address = "\0" + name[1:] if name.startswith("@") else name
if not name.startswith("@") and os.path.exists(name):
    os.unlink(name)
s = socket.socket(socket.AF_UNIX)
s.bind(address)
s.listen()
print("ready", flush=True)
while True:
    c, _ = s.accept()
    c.sendall(sys.argv[2].encode() + b"\n")
    c.close()
"#;

impl HostServer {
    /// Listen at `name` (a path, or `@NAME` for an abstract name); back once it listens.
    fn start(name: &str) -> HostServer {
        let mut child = Command::new("python3")
            .args(["-c", SERVER, name, GREETING])
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the server says it is ready");
        assert_eq!(line.trim(), "ready");
        HostServer { child }
    }
}

/// A confined command that connects to each of its arguments and prints what it got, or
/// `refused: ERROR` (a name starting with `@` is abstract).
fn client(names: &[&str]) -> String {
    let script = r#"
import socket, sys
for name in sys.argv[1:]:
    address = "\0" + name[1:] if name.startswith("@") else name
    c = socket.socket(socket.AF_UNIX)
    try:
        c.connect(address)
        print(name, "got", c.recv(100).decode().strip())
    except OSError as e:
        print(name, "refused:", e)
"#;
    let quoted: Vec<String> = names.iter().map(|name| format!("'{name}'")).collect();
    format!(
        "python3 -c '{}' {}",
        script.replace('\'', "'\\''"),
        quoted.join(" ")
    )
}

fn output(result: &serde_json::Value) -> &str {
    result["output"].as_str().unwrap_or_default()
}

fn tier(env: &[(&str, &str)]) -> &'static str {
    if env.is_empty() {
        "with namespaces"
    } else {
        "with Landlock alone"
    }
}

/// `name`'s line says it was refused with EPERM, the host's greeting does not show, and the
/// note names it and the flag.
fn refused_with_note(result: &serde_json::Value, name: &str, env: &[(&str, &str)]) {
    let text = output(result);
    assert!(
        text.contains(&format!("{name} refused: [Errno 1]")),
        "{}: {name} not refused: {result}",
        tier(env)
    );
    assert!(
        !text.contains(&format!("{name} got")),
        "{}: reached: {result}",
        tier(env)
    );
    assert!(
        text.contains(&format!("Unix socket {name}")) && text.contains("--allow-unix-socket"),
        "{}: no note: {result}",
        tier(env)
    );
}

#[test]
fn the_hosts_sockets_are_refused_with_a_note_and_the_workspaces_are_reached() {
    for env in TIERS {
        let machine = Machine::new();
        let outside = machine.path("outside/user.sock");
        let outside = outside.to_str().expect("UTF-8");
        let inside = machine.path("workspace/project.sock");
        let inside = inside.to_str().expect("UTF-8");
        let _outside = HostServer::start(outside);
        let _inside = HostServer::start(inside);
        let result = machine.execute_with(&[], &client(&[outside, inside]), env);
        refused_with_note(&result, outside, env);
        // The workspace's socket is reached (the note is about the other one only).
        assert!(
            output(&result).contains(&format!("{inside} got {GREETING}")),
            "{}: {result}",
            tier(env)
        );
        // The operator allows the outside one.
        let allowed =
            machine.execute_with(&["--allow-unix-socket", outside], &client(&[outside]), env);
        assert!(
            output(&allowed).contains(&format!("{outside} got {GREETING}")),
            "{}: --allow-unix-socket: {allowed}",
            tier(env)
        );
    }
}

#[test]
fn a_host_socket_under_tmp_is_refused_in_both_tiers() {
    // Under the host's /tmp, as tmux's and ssh-agent's are: with namespaces it shows through
    // the session's /tmp from the overlay's lower layer, without them /tmp is the host's.
    let dir = tempfile::tempdir_in("/tmp").expect("a directory in /tmp");
    let path = dir.path().join("agent.sock");
    let path = path.to_str().expect("UTF-8");
    let _server = HostServer::start(path);
    for env in TIERS {
        let machine = Machine::new();
        let result = machine.execute_with(&[], &client(&[path]), env);
        refused_with_note(&result, path, env);
    }
}

#[test]
fn an_abstract_socket_of_the_host_is_refused_and_the_commands_own_is_reached() {
    let name = format!("@toolhost-test-{}", std::process::id());
    let _server = HostServer::start(&name);
    // The command's own abstract server, in a child process of its tree.
    let own = format!("@toolhost-own-{}", std::process::id());
    for env in TIERS {
        let machine = Machine::new();
        let command = format!(
            "python3 -c '{}' '{own}' mine > ready.txt & \
             while ! grep -q ready ready.txt 2>/dev/null; do sleep 0.05; done; {}; kill %1",
            SERVER.replace('\'', "'\\''"),
            client(&[&name, &own])
        );
        let result = machine.execute_with(&[], &command, env);
        refused_with_note(&result, &name, env);
        assert!(
            output(&result).contains(&format!("{own} got mine")),
            "{}: {result}",
            tier(env)
        );
    }
}

#[test]
fn sockets_the_command_makes_are_reached_and_datagrams_refused() {
    let script = r#"
import os, socket, threading
def serve(address):
    s = socket.socket(socket.AF_UNIX)
    s.bind(address)
    s.listen()
    def answer():
        c, _ = s.accept()
        c.sendall(b"own")
        c.close()
    threading.Thread(target=answer, daemon=True).start()
    c = socket.socket(socket.AF_UNIX)
    c.connect(address)
    print(address, "got", c.recv(10).decode())
serve(os.path.join(os.environ["TMPDIR"], "tmp.sock"))
serve("workspace.sock")
# From a thread that is not its process's first: the keeper gets the thread's id.
worker = threading.Thread(target=serve, args=("thread.sock",))
worker.start()
worker.join()
for kind in ("socket", "socketpair"):
    try:
        getattr(socket, kind)(socket.AF_UNIX, socket.SOCK_DGRAM)
        print(kind, "datagram made")
    except OSError as e:
        print(kind, "datagram refused:", e.errno)
print("socketpair stream", len(socket.socketpair()))
t = socket.socket()
t.bind(("127.0.0.1", 0))
t.listen()
c = socket.create_connection(t.getsockname())
c.setblocking(False)
print("tcp", t.accept()[1][0])
"#;
    for env in TIERS {
        let machine = Machine::new();
        let command = format!("python3 -c '{}'", script.replace('\'', "'\\''"));
        let result = machine.execute_with(&[], &command, env);
        let text = output(&result);
        assert_eq!(result["exit_code"], 0, "{}: {result}", tier(env));
        for expected in [
            "tmp.sock got own",
            "workspace.sock got own",
            "thread.sock got own",
            "socket datagram refused: 13",
            "socketpair datagram refused: 13",
            "socketpair stream 2",
            "tcp 127.0.0.1",
        ] {
            assert!(
                text.contains(expected),
                "{}: {expected}: {result}",
                tier(env)
            );
        }
    }
}

#[test]
fn the_strict_mode_refuses_unix_sockets_but_keeps_socketpair() {
    let script = r#"
import socket
try:
    socket.socket(socket.AF_UNIX)
    print("unix socket made")
except OSError as e:
    print("unix socket refused:", e.errno)
print("socketpair", len(socket.socketpair()))
"#;
    for env in TIERS {
        let mut env = env.to_vec();
        let disabled = match env.first() {
            Some(_) => "namespaces,unix-supervisor",
            None => "unix-supervisor",
        };
        env.retain(|(name, _)| *name != "TOOLHOST_SANDBOX_DISABLE");
        env.push(("TOOLHOST_SANDBOX_DISABLE", disabled));
        let machine = Machine::new();
        let command = format!("python3 -c '{}'", script.replace('\'', "'\\''"));
        let result = machine.execute_with(&[], &command, &env);
        let text = output(&result);
        assert!(
            text.contains("unix socket refused: 13"),
            "{disabled}: {result}"
        );
        assert!(text.contains("socketpair 2"), "{disabled}: {result}");
    }
}

#[test]
fn a_git_credential_cache_daemon_of_the_user_gives_nothing() {
    if Command::new("git").arg("--version").output().is_err() {
        eprintln!("git is not installed: skipped");
        return;
    }
    for env in TIERS {
        let machine = Machine::new();
        let home = machine.path("home");
        let git = |args: &[&str], input: &str| {
            let mut child = Command::new("git")
                .args(args)
                .env("HOME", &home)
                .env("XDG_CACHE_HOME", home.join(".cache"))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("git runs");
            std::io::Write::write_all(&mut child.stdin.take().expect("stdin"), input.as_bytes())
                .expect("input");
            let output = child.wait_with_output().expect("git ends");
            String::from_utf8_lossy(&output.stdout).into_owned()
        };
        // The user stores a credential (the daemon starts), and gets it back outside.
        git(
            &["credential-cache", "store"],
            "protocol=https\nhost=example.invalid\nusername=u\npassword=s3cret-pw\n\n",
        );
        let query = "protocol=https\nhost=example.invalid\n\n";
        assert!(
            git(&["credential-cache", "get"], query).contains("s3cret-pw"),
            "the daemon answers outside the sandbox"
        );
        let socket = home.join(".cache/git/credential/socket");
        assert!(
            is_socket(&socket),
            "the daemon's socket is where the issue says"
        );
        let result = machine.execute_with(
            &[],
            "printf 'protocol=https\\nhost=example.invalid\\n\\n' | git credential-cache get; \
             echo done",
            env,
        );
        git(&["credential-cache", "exit"], "");
        let text = output(&result);
        assert!(!text.contains("s3cret-pw"), "{}: {result}", tier(env));
        assert!(text.contains("done"), "{}: {result}", tier(env));
        assert!(
            text.contains("--allow-unix-socket"),
            "{}: no note: {result}",
            tier(env)
        );
    }
}

fn is_socket(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|meta| meta.file_type().is_socket())
}

#[test]
fn a_host_socket_hard_linked_into_the_workspace_is_refused() {
    for env in TIERS {
        let machine = Machine::new();
        // In a package cache, writable to commands, as git credential-cache's socket is.
        let dir = machine.path("home/.cache/daemon");
        std::fs::create_dir_all(&dir).expect("cache");
        let socket = dir.join("socket");
        let socket = socket.to_str().expect("UTF-8");
        let _server = HostServer::start(socket);
        // A second name in the workspace, then the first removed: one name, in an allowed
        // place (without namespaces both are on one mount; with them the link is refused).
        let command = format!(
            "ln '{socket}' linked.sock && rm '{socket}'; {}",
            client(&["linked.sock"])
        );
        let result = machine.execute_with(&[], &command, env);
        let text = output(&result);
        assert!(!text.contains("linked.sock got"), "{}: {result}", tier(env));
        assert!(
            text.contains("linked.sock refused"),
            "{}: {result}",
            tier(env)
        );
    }
}

#[test]
fn the_system_bus_is_refused_unless_allowed() {
    let bus = "/run/dbus/system_bus_socket";
    if !is_socket(Path::new(bus)) {
        eprintln!("no system D-Bus socket at {bus}: skipped");
        return;
    }
    for env in TIERS {
        let machine = Machine::new();
        let result = machine.execute_with(&[], &client(&[bus]), env);
        refused_with_note(&result, bus, env);
        let allowed = machine.execute_with(&["--allow-unix-socket", bus], &client(&[bus]), env);
        assert!(
            !output(&allowed).contains(&format!("{bus} refused: [Errno 1]")),
            "{}: {allowed}",
            tier(env)
        );
    }
}

#[test]
fn toolhost_sandbox_says_how_unix_sockets_are_confined() {
    let machine = Machine::new();
    let sandbox = |env: &[(&str, &str)]| {
        let output = Command::new(toolhost_e2e::toolhost_bin())
            .args(["sandbox", "--allow-unix-socket", "/srv/db.sock"])
            .env("HOME", machine.path("home"))
            .envs(env.iter().copied())
            .output()
            .expect("toolhost sandbox runs");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let text = sandbox(&[]);
    assert!(
        text.contains("Unix sockets: the keeper supervises every connect"),
        "{text}"
    );
    assert!(
        text.contains("allowed besides: /srv/db.sock, /run/nscd/socket (network full)"),
        "{text}"
    );
    let strict = sandbox(&[("TOOLHOST_SANDBOX_DISABLE", "unix-supervisor")]);
    assert!(strict.contains("Unix sockets: strict"), "{strict}");
}

/// On a host without privileges the keeper inspects a connect by `ptrace` access: granted for
/// an ordinary command (its ancestor, same user), refused for one that made itself
/// non-dumpable without namespaces (with them the keeper holds the capability in the command's
/// user namespace). The connect is then refused and the note says why.
#[test]
fn an_unprivileged_host_supervises_connects_and_says_when_it_cannot() {
    let script = r#"
import ctypes, socket, sys, threading
def serve(address):
    s = socket.socket(socket.AF_UNIX)
    s.bind(address)
    s.listen()
    threading.Thread(target=lambda: s.accept()[0].sendall(b"own"), daemon=True).start()
    c = socket.socket(socket.AF_UNIX)
    try:
        c.connect(address)
        print(address, "got", c.recv(10).decode())
    except OSError as e:
        print(address, "refused:", e.errno)
serve("plain.sock")
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
serve("undumpable.sock")
"#;
    let host = toolhost_e2e::UnprivilegedHost::new(&["home", "workspace", "state", "cache"]);
    let command = format!(
        "rm -f plain.sock undumpable.sock; python3 -c '{}'",
        script.replace('\'', "'\\''")
    );
    for env in TIERS {
        let args = serde_json::json!({ "command": command });
        let output = host
            .command()
            .current_dir(host.path("workspace"))
            .env("HOME", host.path("home"))
            .env("XDG_CACHE_HOME", host.path("cache"))
            .envs(env.iter().copied())
            .arg("--state-dir")
            .arg(host.path("state"))
            .args(["call", "execute", &args.to_string()])
            .stdin(Stdio::null())
            .output()
            .expect("toolhost runs");
        let result = toolhost_e2e::json(&String::from_utf8_lossy(&output.stdout));
        let text = self::output(&result);
        assert!(
            text.contains("plain.sock got own"),
            "{}: {result}",
            tier(env)
        );
        let namespaces = env.is_empty() && toolhost::process::namespaces_available().is_ok();
        if namespaces {
            assert!(
                text.contains("undumpable.sock got own"),
                "{}: {result}",
                tier(env)
            );
        } else {
            assert!(
                text.contains("undumpable.sock refused: 1")
                    && text.contains("the keeper could not inspect it"),
                "{}: {result}",
                tier(env)
            );
        }
    }
}

#[test]
fn a_workspace_that_is_a_home_keeps_its_caches_and_hidden_paths_sockets_refused() {
    for env in TIERS {
        let machine = Machine::new();
        let home = machine.path("home");
        let home = home.to_str().expect("UTF-8");
        let cache = machine.path("home/.cache/git/credential");
        std::fs::create_dir_all(&cache).expect("cache");
        let daemon = cache.join("socket");
        let daemon = daemon.to_str().expect("UTF-8");
        let agent = machine.path("home/.ssh/agent.sock");
        let agent = agent.to_str().expect("UTF-8");
        let project = machine.path("home/project.sock");
        let project = project.to_str().expect("UTF-8");
        let _servers = [daemon, agent, project].map(HostServer::start);
        let result = machine.execute_with(
            &["--workdir", home],
            &client(&[daemon, agent, project]),
            env,
        );
        let text = output(&result);
        // A second name in the home, then the first removed: the socket was bound in the
        // cache all the same. (With namespaces an existing cache is a mount of its own, and
        // the link is refused; the keeper checks the binding there too, for a cache made
        // later inside the home's mount.)
        let linked = machine.execute_with(
            &["--workdir", home],
            &format!(
                "ln '{daemon}' linked.sock && rm '{daemon}'; {}",
                client(&["linked.sock"])
            ),
            env,
        );
        assert!(
            output(&linked).contains("linked.sock refused"),
            "{}: {linked}",
            tier(env)
        );
        for refused in [daemon, agent] {
            assert!(
                !text.contains(&format!("{refused} got")),
                "{}: {result}",
                tier(env)
            );
        }
        assert!(
            text.contains(&format!("{project} got {GREETING}")),
            "{}: {result}",
            tier(env)
        );
    }
}

#[test]
fn a_host_sockets_directory_replaced_by_a_link_into_the_workspace_gives_nothing() {
    // Without namespaces the cache and the workspace share a mount: the socket is linked into
    // the workspace, the cache's directory moved aside and replaced by a link to the
    // workspace's copy, and the original name removed. The socket's bound name then leads to
    // the workspace, but it names the cache.
    let env: &[(&str, &str)] = &[("TOOLHOST_SANDBOX_DISABLE", "namespaces")];
    let machine = Machine::new();
    let dir = machine.path("home/.cache/daemon/run");
    std::fs::create_dir_all(&dir).expect("cache");
    let socket = dir.join("socket");
    let socket = socket.to_str().expect("UTF-8");
    let _server = HostServer::start(socket);
    let cache = machine.path("home/.cache/daemon");
    let cache = cache.to_str().expect("UTF-8");
    let command = format!(
        "mkdir -p copy && ln '{socket}' copy/socket && mv '{cache}/run' '{cache}/old' && \
         ln -s \"$PWD/copy\" '{cache}/run' && rm '{cache}/old/socket' && echo prepared; {}",
        client(&["copy/socket"])
    );
    let result = machine.execute_with(&[], &command, env);
    let text = output(&result);
    assert!(text.contains("prepared"), "the setup failed: {result}");
    assert!(!text.contains("copy/socket got"), "{result}");
}
