//! Commands run confined: every escape attempt below fails, the result says why, and the same
//! host keeps serving. Each case runs a real `toolhost call execute` with a home directory of
//! its own (holding fake secrets), so nothing of the machine's user is touched.
//!
//! The home directory, the workspace and the "outside" directory live under
//! [`machines_root`]: never under `/tmp`, which a confined command sees as its session's
//! private directory (or may write, without namespaces). `TOOLHOST_TEST_MACHINES` moves them;
//! CI runs these tests once with it under `/tmp` (a clone there).

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;
use tempfile::TempDir;
use toolhost_e2e::{
    UnprivilegedHost, json, machines_root, marker, processes_with, toolhost_bin, wait_gone,
};

/// A fake user: home with secrets, a workspace, a state directory, a plugin directory.
pub(crate) struct Machine {
    root: TempDir,
}

impl Machine {
    pub(crate) fn new() -> Machine {
        let root = tempfile::tempdir_in(machines_root()).expect("root");
        let machine = Machine { root };
        for dir in [
            "home/.ssh",
            "home/.config",
            "workspace",
            "outside",
            "state",
            "plugins",
            "run",
        ] {
            std::fs::create_dir_all(machine.path(dir)).expect("dir");
        }
        std::fs::write(machine.path("home/.ssh/id_ed25519"), "PRIVATE KEY").expect("key");
        std::fs::write(machine.path("home/.netrc"), "machine x password y").expect("netrc");
        std::fs::write(machine.path("home/.profile"), "# profile").expect("profile");
        std::fs::write(machine.path("outside/file"), "outside").expect("outside");
        std::fs::write(
            machine.path("state/other-scope.log"),
            "another scope's output",
        )
        .expect("log");
        machine
    }

    pub(crate) fn path(&self, relative: &str) -> PathBuf {
        self.root.path().join(relative)
    }

    /// `toolhost [flags] call execute {command}` in the workspace; the result JSON.
    fn execute(&self, flags: &[&str], command: &str) -> serde_json::Value {
        self.execute_with(flags, command, &[])
    }

    pub(crate) fn execute_with(
        &self,
        flags: &[&str],
        command: &str,
        env: &[(&str, &str)],
    ) -> serde_json::Value {
        let output = self.run(flags, command, env);
        assert!(
            output.status.code().is_some_and(|code| code <= 1),
            "toolhost failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        json(&String::from_utf8_lossy(&output.stdout))
    }

    pub(crate) fn run(
        &self,
        flags: &[&str],
        command: &str,
        env: &[(&str, &str)],
    ) -> std::process::Output {
        let args = serde_json::json!({ "command": command, "timeout": "60s" });
        self.call(flags, "execute", &args, env)
    }

    /// `toolhost [flags] call TOOL ARGS` in the workspace.
    fn call(
        &self,
        flags: &[&str],
        tool: &str,
        args: &serde_json::Value,
        env: &[(&str, &str)],
    ) -> std::process::Output {
        let arguments = args.to_string();
        let mut words = flags.to_vec();
        words.extend(["call", tool, &arguments]);
        self.toolhost(&words)
            .envs(env.iter().copied())
            .output()
            .expect("toolhost runs")
    }

    /// `toolhost [ARGS]` in the workspace, with the fake user's environment, not started yet.
    fn toolhost(&self, args: &[&str]) -> Command {
        let mut command = Command::new(toolhost_bin());
        command
            .current_dir(self.path("workspace"))
            .env("HOME", self.path("home"))
            .env("XDG_CACHE_HOME", self.path("home/.cache"))
            .env("XDG_STATE_HOME", self.path("home/.local/state"))
            .env("XDG_RUNTIME_DIR", self.path("run"))
            .arg("--state-dir")
            .arg(self.path("state"))
            .arg("--plugins")
            .arg(self.path("plugins"))
            .args(args)
            .stdin(Stdio::null());
        command
    }
}

fn output(result: &serde_json::Value) -> &str {
    result["output"].as_str().unwrap_or_default()
}

/// The command failed, and its output names a permission problem.
fn refused(result: &serde_json::Value, what: &str) {
    assert_ne!(result["exit_code"], 0, "{what} succeeded: {result}");
    let text = output(result).to_ascii_lowercase();
    assert!(
        text.contains("permission denied")
            || text.contains("operation not permitted")
            || text.contains("read-only")
            // Landlock refuses links and renames across its rules with EXDEV.
            || text.contains("invalid cross-device link"),
        "{what}: no permission error in {result}"
    );
}

#[test]
fn writes_outside_the_writable_roots_are_refused() {
    let machine = Machine::new();
    let outside = machine.path("outside");
    std::os::unix::fs::symlink(&outside, machine.path("workspace/link")).expect("symlink");
    let outside = outside.display();
    let home = machine.path("home");
    let home = home.display();
    let attempts = [
        ("a file in /etc", "echo x > /etc/toolhost-escape".to_owned()),
        ("a file in $HOME", "echo x > \"$HOME/escape\"".to_owned()),
        ("a dotfile", "echo x >> \"$HOME/.profile\"".to_owned()),
        (
            "the mode of a dotfile",
            "chmod 600 \"$HOME/.profile\"".to_owned(),
        ),
        (
            "through a symlink in the workspace",
            "echo x > link/escape".to_owned(),
        ),
        ("through ..", "echo x > ../outside/escape".to_owned()),
        (
            "a hard link",
            format!("ln {outside}/file hard && echo x >> hard"),
        ),
        (
            "through /proc/self/root",
            format!("echo x > /proc/self/root{outside}/escape"),
        ),
        ("removing a file outside", format!("rm {outside}/file")),
        (
            "renaming a file out",
            format!("touch mine && mv mine {outside}/escape"),
        ),
        ("a directory in $HOME", format!("mkdir {home}/escape")),
    ];
    for (what, command) in attempts {
        let result = machine.execute(&[], &command);
        refused(&result, what);
        assert!(
            output(&result).contains("[toolhost: this command runs confined (workspace-write"),
            "{what}: no note for the model: {result}"
        );
    }
    assert!(!machine.path("home/escape").exists());
    assert!(!machine.path("outside/escape").exists());
    assert_eq!(
        std::fs::read_to_string(machine.path("outside/file")).expect("still there"),
        "outside"
    );
    assert_eq!(
        std::fs::read_to_string(machine.path("home/.profile")).expect("profile"),
        "# profile"
    );
    // The same host writes the workspace, /tmp and its private TMPDIR.
    let result = machine.execute(
        &[],
        "echo ok > here && cat here && t=$(mktemp) && echo tmp > \"$t\" && cat \"$t\" && rm \"$t\"",
    );
    assert_eq!(output(&result), "ok\ntmp\n", "{result}");
}

#[test]
fn secrets_and_the_hosts_own_files_cannot_be_read() {
    let machine = Machine::new();
    // A secret directory that is a link to elsewhere is hidden where it points.
    std::fs::create_dir_all(machine.path("aws-real")).expect("dir");
    std::fs::write(machine.path("aws-real/credentials"), "PRIVATE KEY").expect("credentials");
    std::os::unix::fs::symlink(machine.path("aws-real"), machine.path("home/.aws")).expect("link");
    let attempts = [
        ("an SSH key", "cat \"$HOME/.ssh/id_ed25519\""),
        ("a linked secret", "cat \"$HOME/.aws/credentials\""),
        ("~/.netrc", "cat \"$HOME/.netrc\""),
        (
            "another scope's output log",
            "cat \"$STATE/other-scope.log\"",
        ),
        ("the plugin directory", "touch \"$PLUGINS/evil.wasm\""),
    ];
    let state = machine.path("state").display().to_string();
    let plugins = machine.path("plugins").display().to_string();
    // With namespaces, and with Landlock alone (forced).
    let with = [("STATE", state.as_str()), ("PLUGINS", plugins.as_str())];
    let without = [
        ("STATE", state.as_str()),
        ("PLUGINS", plugins.as_str()),
        ("TOOLHOST_SANDBOX_DISABLE", "namespaces"),
    ];
    for ((what, command), env) in attempts
        .iter()
        .flat_map(|attempt| [(attempt, &with[..]), (attempt, &without[..])])
    {
        let result = machine.execute_with(&[], command, env);
        refused(&result, what);
        assert!(
            !output(&result).contains("PRIVATE KEY")
                && !output(&result).contains("password")
                && !output(&result).contains("another scope"),
            "{what} leaked: {result}"
        );
    }
    assert!(!machine.path("plugins/evil.wasm").exists());
    // In the namespaces, a hidden directory is covered: not even its names show.
    let result = machine.execute(&[], "ls -a \"$HOME/.ssh\"");
    assert!(!output(&result).contains("id_ed25519"), "{result}");
    // Everything else in the home directory is readable.
    let result = machine.execute(&[], "cat \"$HOME/.profile\"");
    assert_eq!(output(&result), "# profile", "{result}");
    // The user's runtime directory is covered too: its session bus (`systemd-run --user`
    // starts anything unconfined through it) cannot be reached.
    let bus = std::os::unix::net::UnixListener::bind(machine.path("run/bus")).expect("bus");
    let result = machine.execute(
        &[],
        "ls -a \"$XDG_RUNTIME_DIR\"; /usr/bin/python3 -c 'import os,socket; \
         socket.socket(socket.AF_UNIX).connect(os.environ[\"XDG_RUNTIME_DIR\"] + \"/bus\")'",
    );
    assert_ne!(result["exit_code"], 0, "{result}");
    assert!(!output(&result).contains("bus\n"), "{result}");
    bus.set_nonblocking(true).expect("nonblocking");
    assert!(bus.accept().is_err(), "the bus was reached");
}

#[test]
fn secret_variables_are_withheld_from_confined_commands() {
    let machine = Machine::new();
    let env = [
        ("MY_API_KEY", "k1"),
        ("GITHUB_TOKEN", "t1"),
        ("PLAIN", "p1"),
    ];
    let result = machine.execute_with(&[], "echo \"$MY_API_KEY-$GITHUB_TOKEN-$PLAIN\"", &env);
    assert_eq!(output(&result), "--p1\n", "{result}");
    let result = machine.execute_with(
        &["--sandbox", "off"],
        "echo \"$MY_API_KEY-$GITHUB_TOKEN-$PLAIN\"",
        &env,
    );
    assert_eq!(output(&result), "k1-t1-p1\n", "{result}");
}

#[test]
fn other_processes_cannot_be_signalled_or_traced() {
    let machine = Machine::new();
    let marker = marker();
    let mut outsider = Command::new("sleep")
        .arg(format!("1{marker}"))
        .spawn()
        .expect("sleep");
    let pid = outsider.id().to_string();
    let attempts = [
        ("kill -9", format!("kill -9 {pid}")),
        (
            "reading its environment",
            format!("cat /proc/{pid}/environ"),
        ),
        (
            "ptrace",
            format!(
                "/usr/bin/python3 -c 'import ctypes,os,sys; l=ctypes.CDLL(None, use_errno=True); \
                 r=l.ptrace(16, {pid}, 0, 0); print(os.strerror(ctypes.get_errno())); \
                 sys.exit(r != 0)'"
            ),
        ),
    ];
    // In its own PID namespace, a command does not even see the process; without one
    // (forced), Landlock's scoping and seccomp refuse.
    for (what, command) in &attempts {
        let result = machine.execute(&[], command);
        if *what == "ptrace" {
            // Seccomp refuses ptrace before the kernel looks for the process.
            refused(&result, what);
        } else {
            assert_ne!(result["exit_code"], 0, "{what} succeeded: {result}");
            let text = output(&result).to_ascii_lowercase();
            assert!(
                text.contains("no such process") || text.contains("no such file"),
                "{what}: the process is visible: {result}"
            );
        }
        let result = machine.execute_with(&[], command, &[("TOOLHOST_SANDBOX_DISABLE", "pid")]);
        refused(&result, what);
    }
    assert!(
        outsider.try_wait().expect("try_wait").is_none(),
        "the outside process was killed"
    );
    outsider.kill().expect("kill");
    outsider.wait().expect("reap");
}

/// A session's commands live in a PID namespace of their own (with its own `/proc`): nothing
/// outside it shows. Forced off, they see the host's processes.
#[test]
fn commands_see_only_their_own_processes() {
    let machine = Machine::new();
    let command = format!(
        "echo $$; test -d /proc/{me} && echo sees-the-host || echo alone",
        me = std::process::id()
    );
    let result = machine.execute(&[], &command);
    let text = output(&result);
    let shell: u32 = text
        .lines()
        .next()
        .and_then(|line| line.parse().ok())
        .unwrap_or(u32::MAX);
    // The namespace's init (1), the keeper (2), then the shell.
    assert!(shell < 10 && text.ends_with("alone\n"), "{result}");
    let result = machine.execute_with(&[], &command, &[("TOOLHOST_SANDBOX_DISABLE", "pid")]);
    assert!(output(&result).ends_with("sees-the-host\n"), "{result}");
}

/// The mount namespace is a read-only view of `/` (the mount layer refuses a write outside the
/// writable roots before Landlock does), with a private `/tmp` as `$TMPDIR`. Without
/// namespaces (forced), Landlock alone refuses the same write.
#[test]
fn the_mount_namespace_is_a_read_only_view_with_a_private_tmp() {
    let machine = Machine::new();
    let name = format!("view-{}", marker());
    let command = format!(
        "echo x > \"$HOME/escape\"; echo x > /tmp/{name} && cat /tmp/{name} && echo $TMPDIR"
    );
    let result = machine.execute(&[], &command);
    assert!(
        output(&result).contains("Read-only file system"),
        "{result}"
    );
    assert!(output(&result).ends_with("x\n/tmp\n"), "{result}");
    assert!(!machine.path("home/escape").exists());
    assert!(
        !std::env::temp_dir().join(&name).exists(),
        "the command's /tmp is the host's"
    );
    let result = machine.execute_with(
        &[],
        "echo x > \"$HOME/escape\"",
        &[("TOOLHOST_SANDBOX_DISABLE", "namespaces")],
    );
    assert!(output(&result).contains("Permission denied"), "{result}");
    assert!(!machine.path("home/escape").exists());
}

/// Read one byte of the parent's memory with `process_vm_readv`; print the error and fail when
/// refused.
const PROCESS_VM_READV: &str = "/usr/bin/python3 -c 'import ctypes,os,sys; \
     l=ctypes.CDLL(None, use_errno=True); b=ctypes.create_string_buffer(1); \
     v=(ctypes.c_void_p*2)(ctypes.addressof(b), 1); \
     r=l.process_vm_readv(os.getppid(), v, 1, v, 1, 0); \
     print(os.strerror(ctypes.get_errno())); sys.exit(r < 0)'";

#[test]
fn the_confinement_cannot_be_undone_from_inside() {
    let machine = Machine::new();
    let attempts = [
        ("remount / read-write", "mount -o remount,rw /"),
        (
            "unmount the cover over ~/.ssh",
            "/usr/bin/python3 -c 'import ctypes,os,sys; l=ctypes.CDLL(None, use_errno=True); \
             r=l.umount2(os.path.expanduser(\"~/.ssh\").encode(), 2); \
             print(os.strerror(ctypes.get_errno())); sys.exit(r != 0)'",
        ),
        (
            "unmount /proc",
            "/usr/bin/python3 -c 'import ctypes,os,sys; l=ctypes.CDLL(None, use_errno=True); \
             r=l.umount2(b\"/proc\", 2); print(os.strerror(ctypes.get_errno())); sys.exit(r != 0)'",
        ),
        ("a new user namespace", "unshare -U true"),
        ("a new mount namespace", "unshare -m true"),
        ("reading another process's memory", PROCESS_VM_READV),
        (
            "clone with CLONE_NEWUSER",
            "/usr/bin/python3 -c 'import ctypes,os,platform,sys; l=ctypes.CDLL(None, use_errno=True); \
             n={\"x86_64\": 56, \"aarch64\": 220}[platform.machine()]; \
             r=l.syscall(n, 0x10000011, 0, 0, 0, 0); r == 0 and os._exit(0); \
             print(os.strerror(ctypes.get_errno())); sys.exit(r <= 0 and 1)'",
        ),
    ];
    for (what, command) in attempts {
        let result = machine.execute(&[], command);
        refused(&result, what);
    }
}

/// The command failed and the result's note says the confinement refuses network access.
fn network_refused(result: &serde_json::Value, what: &str) {
    assert_ne!(result["exit_code"], 0, "{what} succeeded: {result}");
    let text = output(result);
    assert!(
        text.contains("[toolhost: this command runs confined") && text.contains("network access"),
        "{what}: no note in {result}"
    );
}

#[test]
fn network_none_refuses_connections_at_once() {
    let machine = Machine::new();
    let listener = TcpListener::bind("127.0.0.1:0").expect("listen");
    let port = listener.local_addr().expect("addr").port();
    let connect = format!(
        "/usr/bin/python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 5)'"
    );
    let none = ["--network", "none"];
    let dns = "/usr/bin/python3 -c 'import socket; socket.getaddrinfo(\"example.com\", 80)'";
    let udp = "/usr/bin/python3 -c 'import socket; \
               socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b\"x\", (\"1.1.1.1\", 53))'";
    // A network namespace of the command's own: only its loopback exists.
    let result = machine.execute(&none, &connect);
    network_refused(&result, "a TCP connection to the host's loopback");
    network_refused(&machine.execute(&none, udp), "a UDP datagram");
    network_refused(&machine.execute(&none, dns), "name resolution");
    // Its own loopback works: a test server on 127.0.0.1 inside the command.
    let local = "/usr/bin/python3 -c 'import socket; s = socket.socket(); \
                 s.bind((\"127.0.0.1\", 0)); s.listen(); \
                 socket.create_connection(s.getsockname()); print(\"local\")'";
    let result = machine.execute(&none, local);
    assert_eq!(output(&result), "local\n", "{result}");
    // Families that reach past a network namespace stay refused there.
    let vsock = "/usr/bin/python3 -c 'import socket; \
                 socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)'";
    refused(&machine.execute(&none, vsock), "a vsock socket");
    // Without namespaces (forced), seccomp and Landlock refuse every non-Unix socket.
    let fallback = [("TOOLHOST_SANDBOX_DISABLE", "namespaces")];
    refused(
        &machine.execute_with(&none, &connect, &fallback),
        "fallback: a TCP connection",
    );
    let socket =
        "/usr/bin/python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM)'";
    refused(
        &machine.execute_with(&none, socket, &fallback),
        "fallback: a UDP socket",
    );
    let result = machine.execute_with(&none, dns, &fallback);
    assert_ne!(result["exit_code"], 0, "name resolution worked: {result}");
    // Unix sockets still work; with network full the connection is made.
    let pair = "/usr/bin/python3 -c 'import socket; a,b=socket.socketpair(); a.send(b\"u\"); print(b.recv(1).decode())'";
    assert_eq!(
        output(&machine.execute(&["--network", "none"], pair)),
        "u\n"
    );
    listener.set_nonblocking(true).expect("nonblocking");
    assert!(listener.accept().is_err(), "a connection got through");
    let result = machine.execute(&[], &connect);
    assert_eq!(result["exit_code"], 0, "{result}");
}

#[test]
fn read_only_writes_only_the_private_temporary_directory() {
    let machine = Machine::new();
    let result = machine.execute(&["--sandbox", "read-only"], "echo x > here");
    refused(&result, "a write to the workspace");
    assert!(
        output(&result).contains("Writing anywhere but $TMPDIR"),
        "{result}"
    );
    assert!(!machine.path("workspace/here").exists());
    let result = machine.execute(
        &["--sandbox", "read-only"],
        "echo x > \"$TMPDIR/t\" && cat \"$TMPDIR/t\" && cat /etc/hostname >/dev/null && echo read",
    );
    assert_eq!(output(&result), "x\nread\n", "{result}");
}

#[test]
fn sandbox_off_runs_commands_unconfined() {
    let machine = Machine::new();
    let home = machine.path("home");
    let result = machine.execute(
        &["--sandbox", "off"],
        "echo x > \"$HOME/written\" && cat \"$HOME/.ssh/id_ed25519\"",
    );
    assert_eq!(output(&result), "PRIVATE KEY", "{result}");
    assert!(home.join("written").exists());
    // No note about a confinement that is not there, and none for other failures.
    let result = machine.execute(&["--sandbox", "off"], "touch /proc/toolhost-x");
    assert!(!output(&result).contains("[toolhost:"), "{result}");
    let result = machine.execute(&[], "echo fine; exit 3");
    assert_eq!(output(&result), "fine\n", "{result}");
}

#[test]
fn a_missing_layer_is_refused_with_what_is_missing() {
    let machine = Machine::new();
    for layer in ["landlock", "seccomp"] {
        let output = machine.run(&[], "echo hi", &[("TOOLHOST_SANDBOX_DISABLE", layer)]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(!stdout.contains("hi"), "ran unconfined: {stdout}");
        let name = if layer == "landlock" {
            "Landlock"
        } else {
            "seccomp"
        };
        assert!(
            stderr.contains(name) && stderr.contains("--sandbox off"),
            "{layer}: {stderr}"
        );
        // Forced off, the same machine runs it.
        let output = machine.run(
            &["--sandbox", "off"],
            "echo hi",
            &[("TOOLHOST_SANDBOX_DISABLE", layer)],
        );
        assert!(String::from_utf8_lossy(&output.stdout).contains("hi"));
    }
}

/// Everyday project commands work in the default profile.
#[test]
fn everyday_commands_work_in_workspace_write() {
    let machine = Machine::new();
    let table = [
        (
            "git",
            "git init -q repo && cd repo && git -c user.name=t -c user.email=t@e commit -q --allow-empty -m x && git log --oneline | wc -l | tr -d ' '",
            "1\n",
        ),
        (
            "make",
            "printf 'all:\\n\\techo built > out.txt\\n' > Makefile && make -s && cat out.txt",
            "built\n",
        ),
        (
            "a C compiler",
            "printf 'int main(void){return 0;}' > a.c && cc a.c -o a && ./a && echo ran",
            "ran\n",
        ),
        (
            "a virtualenv",
            "/usr/bin/python3 -m venv --without-pip .venv && .venv/bin/python -c 'print(2)'",
            "2\n",
        ),
        (
            "tar",
            "echo x > f && tar czf a.tgz f && tar tzf a.tgz",
            "f\n",
        ),
        (
            "sed -i",
            "echo abc > s && sed -i s/b/B/ s && cat s",
            "aBc\n",
        ),
        (
            "sort spilling to TMPDIR",
            "seq 1 200000 | sort -S 64K -r -n | head -1",
            "200000\n",
        ),
        (
            "moves and links",
            "mkdir -p m/b && mv m/b c2 && ln -s c2 d2 && ls -d d2 && rm -rf m c2 d2",
            "d2\n",
        ),
        (
            "a script",
            "printf '#!/bin/sh\\necho script\\n' > s.sh && chmod +x s.sh && ./s.sh",
            "script\n",
        ),
        (
            "mktemp in /tmp",
            "f=$(mktemp -p /tmp) && echo t > $f && cat $f && rm $f",
            "t\n",
        ),
        (
            "node",
            "node -e 'require(\"fs\").writeFileSync(\"n.txt\", \"n\"); console.log(require(\"fs\").readFileSync(\"n.txt\", \"utf8\"))'",
            "n\n",
        ),
        (
            "a package cache",
            "mkdir -p \"$HOME/.cache/pip/http\" && echo c > \"$HOME/.cache/pip/http/x\" && cat \"$HOME/.cache/pip/http/x\"",
            "c\n",
        ),
    ];
    // An existing cache directory (see the README on caches that do not exist yet).
    std::fs::create_dir_all(machine.path("home/.cache/pip")).expect("cache dir");
    for (what, command, expected) in table {
        let result = machine.execute(&[], command);
        assert_eq!(output(&result), expected, "{what}: {result}");
    }
}

/// The keeper stays outside the command's domain: a confined command cannot kill it, so
/// everything it started is still stopped with the host.
#[test]
fn a_confined_command_cannot_kill_its_keeper() {
    let machine = Machine::new();
    let marker = marker();
    let command = format!(
        "sleep 1{marker} & kill -9 $PPID 2>&1; echo \"rc=$?\"; kill -9 $(cut -d' ' -f4 /proc/$PPID/stat) 2>&1; echo \"rc=$?\""
    );
    let result = machine.execute(&[], &command);
    let text = output(&result);
    assert!(!text.contains("rc=0"), "{result}");
    assert!(
        wait_gone_blocking(&marker),
        "left behind: {:?}",
        processes_with(&marker)
    );
}

fn wait_gone_blocking(marker: &str) -> bool {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime")
        .block_on(wait_gone(marker, Duration::from_secs(10)))
}

/// The unprivileged path: the host runs as `nobody` (dropped with `setpriv` when the tests run
/// as root, as in CI), from a copy of the binary that user can read, with directories it owns.
/// The write outside goes to a directory `nobody` owns, so only the sandbox can refuse it.
#[test]
fn an_unprivileged_host_confines_its_commands_too() {
    let host = UnprivilegedHost::new(&["home/.ssh", "workspace", "state", "outside", "cache"]);
    let root = host.as_nobody();
    let path = |name: &str| host.path(name);
    std::fs::write(path("home/.ssh/id_ed25519"), "PRIVATE KEY").expect("key");
    let run = |command: &str| {
        let args = serde_json::json!({ "command": command });
        let output = host
            .command()
            .current_dir(path("workspace"))
            .env("HOME", path("home"))
            .env("XDG_CACHE_HOME", path("cache"))
            .arg("--state-dir")
            .arg(path("state"))
            .args(["call", "execute", &args.to_string()])
            .stdin(Stdio::null())
            .output()
            .expect("toolhost runs");
        json(&String::from_utf8_lossy(&output.stdout))
    };
    let result = run("id -u; echo ok > here && cat here");
    let expected_uid = if root { "65534" } else { "" };
    assert!(output(&result).starts_with(expected_uid), "{result}");
    assert!(output(&result).ends_with("ok\n"), "{result}");
    refused(
        &run("echo x > ../outside/escape"),
        "a write outside (unprivileged)",
    );
    refused(
        &run("cat \"$HOME/.ssh/id_ed25519\""),
        "an SSH key (unprivileged)",
    );
    refused(&run("unshare -U true"), "a user namespace (unprivileged)");
    assert!(!path("outside/escape").exists());
    // The namespaces layer is there too, unprivileged: a user namespace mapping only the
    // host's own user (where this machine allows unprivileged user namespaces).
    if toolhost::process::namespaces_available().is_ok() {
        let result = run("cat /proc/self/uid_map");
        let map: Vec<&str> = output(&result).split_whitespace().collect();
        let uid = if root {
            "65534"
        } else {
            map.first().copied().unwrap_or("?")
        };
        assert_eq!(map, [uid, uid, "1"], "{result}");
        // And the PID namespace with its own /proc, and the read-only view of /.
        let result = run("echo $$; echo x > \"$HOME/escape\"");
        let shell: u32 = output(&result)
            .lines()
            .next()
            .and_then(|line| line.parse().ok())
            .unwrap_or(u32::MAX);
        assert!(shell < 10, "{result}");
        assert!(
            output(&result).contains("Read-only file system"),
            "{result}"
        );
    }
}

/// `toolhost sandbox` says what this machine enforces and what a missing layer means.
#[test]
fn toolhost_sandbox_reports_the_layers_and_refusals() {
    let run = |env: &[(&str, &str)]| {
        let output = Command::new(toolhost_bin())
            .args(["sandbox", "--network", "none"])
            .envs(env.iter().copied())
            .output()
            .expect("toolhost sandbox");
        assert!(output.status.success());
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let report = run(&[]);
    assert!(report.contains("Landlock: ABI"), "{report}");
    assert!(
        report.contains("namespaces: user; mount (a read-only view"),
        "{report}"
    );
    assert!(
        report.contains("PID namespace with its own /proc: yes"),
        "{report}"
    );
    assert!(report.contains("workspace-write, network none"), "{report}");
    assert!(report.contains("-- enforced"), "{report}");
    assert!(
        report.contains("off: off (unconfined) -- no confinement"),
        "{report}"
    );
    let report = run(&[("TOOLHOST_SANDBOX_DISABLE", "landlock,cgroups,namespaces")]);
    assert!(report.contains("Landlock: NO"), "{report}");
    assert!(report.contains("namespaces: NO (disabled by"), "{report}");
    assert!(report.contains("REFUSED: missing Landlock"), "{report}");
    assert!(report.contains("processes: NOT ENFORCED"), "{report}");
}

/// A host started in `/` (a service's default) does not make the whole filesystem writable:
/// `/` is no workspace, so a command cannot write there and its output says why and what to
/// do; `--writable /`, asked for outright, is refused.
#[test]
fn a_workspace_of_slash_is_no_workspace_rather_than_made_writable() {
    let machine = Machine::new();
    let refused = machine.execute(&["--workdir", "/"], "touch /toolhost-escape");
    assert_ne!(refused["exit_code"], 0, "{refused}");
    let text = output(&refused);
    assert!(
        text.contains("no workspace") && text.contains("--workdir"),
        "{refused}"
    );
    assert!(!std::path::Path::new("/toolhost-escape").exists());
    let read = machine.execute(&["--workdir", "/", "--sandbox", "read-only"], "echo read");
    assert_eq!(output(&read), "read\n", "{read}");
    let asked = machine.run(&["--writable", "/"], "touch /toolhost-escape", &[]);
    let stderr = String::from_utf8_lossy(&asked.stderr);
    assert!(stderr.contains("all of `/` writable"), "{stderr}");
    assert!(!std::path::Path::new("/toolhost-escape").exists());
    // `toolhost sandbox` says so too.
    let report = Command::new(toolhost_bin())
        .args(["--workdir", "/", "sandbox"])
        .output()
        .expect("toolhost sandbox");
    let report = String::from_utf8_lossy(&report.stdout);
    assert!(
        report.contains("Workspace: none") && report.contains("--workdir"),
        "{report}"
    );
}

/// A plugin's grant confines its commands further than the operator does, never less: the
/// guarded policy's commands have no network and write only the workspace even under
/// `--sandbox off`; the default policy's get the operator's settings; the operator can make
/// the guarded policy's stricter still.
#[test]
fn the_guarded_policy_confines_its_own_commands() {
    let machine = Machine::new();
    let listener = TcpListener::bind("127.0.0.1:0").expect("listen");
    let port = listener.local_addr().expect("addr").port();
    let connect = format!(
        "/usr/bin/python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 5)'"
    );
    let guarded = ["--policy", "guarded"];
    network_refused(
        &machine.execute(&guarded, &connect),
        "guarded: a connection",
    );
    let off = ["--policy", "guarded", "--sandbox", "off"];
    network_refused(
        &machine.execute(&off, &connect),
        "guarded, sandbox off: a connection",
    );
    refused(
        &machine.execute(&off, "echo x > \"$HOME/escape\""),
        "guarded, sandbox off: a write to $HOME",
    );
    assert!(!machine.path("home/escape").exists());
    let result = machine.execute(&off, "echo ok > here && cat here");
    assert_eq!(output(&result), "ok\n", "{result}");
    let read_only = ["--policy", "guarded", "--sandbox", "read-only"];
    refused(
        &machine.execute(&read_only, "echo x > here2"),
        "guarded, read-only",
    );
    // The default policy under the same flags: the operator's settings as they are.
    let result = machine.execute(&["--sandbox", "off"], &connect);
    assert_eq!(result["exit_code"], 0, "{result}");
}

#[test]
fn a_0_1_0_policy_runs_its_commands_under_the_operators_confinement() {
    let machine = Machine::new();
    let legacy = std::fs::read(toolhost_e2e::legacy_policy_component()).expect("fixture");
    std::fs::write(machine.path("plugins/legacy.wasm"), legacy).expect("install");
    std::fs::write(
        machine.path("plugins/legacy.toml"),
        "[grants]\nprocess = true\n",
    )
    .expect("manifest");
    let run = |command: &str| {
        let output = machine.call(&[], "run", &serde_json::json!({ "command": command }), &[]);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        json(&String::from_utf8_lossy(&output.stdout))
    };
    refused(&run("echo x > \"$HOME/escape\""), "0.1.0: a write to $HOME");
    assert!(!machine.path("home/escape").exists());
    refused(&run("cat \"$HOME/.ssh/id_ed25519\""), "0.1.0: a secret");
    let result = run("echo ok > here && cat here");
    assert_eq!(output(&result), "ok\n", "{result}");
}

/// A seccomp program that makes every mount call fail with `EPERM` (the old `mount(2)` and the
/// new mount API) and lets everything else through: under it `unshare(CLONE_NEWUSER)` works,
/// but nothing can be mounted in the new namespace, as under Ubuntu 24.04's AppArmor
/// restriction of unprivileged user namespaces. Built before any fork.
fn no_mounts_program() -> seccompiler::BpfProgram {
    let mount_calls = [
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_open_tree,
        libc::SYS_move_mount,
        libc::SYS_fsopen,
        libc::SYS_fsmount,
        libc::SYS_fsconfig,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
    ];
    let arch = seccompiler::TargetArch::try_from(std::env::consts::ARCH)
        .expect("an architecture seccompiler knows");
    let filter = seccompiler::SeccompFilter::new(
        mount_calls.iter().map(|&call| (call, Vec::new())).collect(),
        seccompiler::SeccompAction::Allow,
        seccompiler::SeccompAction::Errno(libc::EPERM.cast_unsigned()),
        arch,
    )
    .expect("the filter");
    seccompiler::BpfProgram::try_from(filter).expect("the program")
}

/// Run `command` under `program`, installed in the child between fork and exec.
fn without_mounts(command: &mut Command, program: &seccompiler::BpfProgram) {
    // Copied now: the child must not allocate.
    let program = program.clone();
    let install = move || -> std::io::Result<()> {
        let len = u16::try_from(program.len())
            .map_err(|_| std::io::Error::from_raw_os_error(libc::E2BIG))?;
        let fprog = libc::sock_fprog {
            len,
            // seccompiler's `sock_filter` is `#[repr(C)]` with the kernel's layout.
            filter: program.as_ptr().cast::<libc::sock_filter>().cast_mut(),
        };
        // SAFETY: integer arguments; sets this (child) process's no_new_privs bit, which an
        // unprivileged process needs to install a filter.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fprog` is a valid sock_fprog pointing at `program`'s `len` instructions,
        // which the closure owns for the duration of the call; the kernel copies them.
        let installed = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                0,
                &raw const fprog,
            )
        };
        if installed != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    };
    // SAFETY: between fork and exec the closure only reads memory it owns and makes two
    // system calls (prctl, seccomp); it allocates nothing and takes no lock.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(command, install);
    }
}

/// Ubuntu 24.04's restriction of unprivileged user namespaces (AppArmor's
/// `unprivileged_userns` profile), simulated with a seccomp filter on the host: a user
/// namespace is made, but nothing privileged works in it (mounting fails with `EPERM`). The
/// namespaces layer is missing, as where user namespaces are refused outright: Landlock and
/// seccomp confine commands alone, the host says so once, and `toolhost sandbox` does not
/// report the layer as there.
#[test]
fn a_user_namespace_without_privileges_falls_back_to_landlock_and_seccomp() {
    let machine = Machine::new();
    let program = no_mounts_program();
    // Where this machine makes the namespaces layer at all, the filter is what takes it away
    // (elsewhere user namespaces are refused outright, which falls back the same way).
    let namespaces_here = toolhost::process::namespaces_available().is_ok();
    let execute = |command: &str| {
        let args = serde_json::json!({ "command": command, "timeout": "60s" });
        let mut toolhost = machine.toolhost(&["call", "execute", &args.to_string()]);
        without_mounts(&mut toolhost, &program);
        let ran = toolhost.output().expect("toolhost runs");
        let stderr = String::from_utf8_lossy(&ran.stderr).into_owned();
        // Refused, the command does not run: no result, and why on stderr.
        let result: serde_json::Value = serde_json::from_slice(&ran.stdout)
            .unwrap_or_else(|_| panic!("`{command}` did not run ({}): {stderr}", ran.status));
        (result, stderr)
    };
    let (result, stderr) = execute("echo ok");
    assert_eq!(result["exit_code"], 0, "{result}\n{stderr}");
    assert_eq!(output(&result), "ok\n", "{result}\n{stderr}");
    // Said once, with why.
    let warning = "commands are confined without namespaces (Landlock and seccomp only)";
    assert_eq!(stderr.matches(warning).count(), 1, "{stderr}");
    if namespaces_here {
        assert!(
            stderr.contains("no privileges in a new user namespace: making / private"),
            "{stderr}"
        );
    }
    // Landlock and seccomp still enforce the profile.
    let (result, _) = execute("echo x > ../outside/escape");
    refused(&result, "a write outside the workspace");
    assert!(!machine.path("outside/escape").exists());
    let (result, _) = execute("cat \"$HOME/.ssh/id_ed25519\"");
    refused(&result, "an SSH key");
    assert!(!output(&result).contains("PRIVATE KEY"), "{result}");
    let (result, _) = execute("unshare -U true");
    refused(&result, "a new user namespace");
    // `toolhost sandbox` under the same restriction: no namespaces layer, and the profiles
    // enforced by the other layers (as the host does).
    let mut sandbox = machine.toolhost(&["sandbox"]);
    without_mounts(&mut sandbox, &program);
    let ran = sandbox.output().expect("toolhost sandbox runs");
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let report = String::from_utf8_lossy(&ran.stdout);
    assert!(report.contains("  namespaces: NO ("), "{report}");
    assert!(
        report.contains("Landlock and seccomp confine commands alone"),
        "{report}"
    );
    assert!(!report.contains("namespaces: user; mount"), "{report}");
    if namespaces_here {
        assert!(
            report.contains(
                "namespaces: NO (no privileges in a new user namespace: making / private"
            ),
            "{report}"
        );
    }
    assert!(report.contains("workspace-write, network"), "{report}");
    assert!(report.contains("-- enforced"), "{report}");
    assert!(!report.contains("REFUSED"), "{report}");
}

/// The credential stores of common developer tools are hidden by default, with a note that says
/// so; the operator adds paths with `--hide` and reveals a default one with `--reveal`, and
/// `toolhost sandbox` prints the effective list.
#[test]
fn credential_stores_of_common_tools_are_hidden_and_the_operator_adjusts_the_list() {
    let machine = Machine::new();
    let stores = [
        ".config/gh/hosts.yml",
        ".git-credentials",
        ".npmrc",
        ".pypirc",
        ".cargo/credentials.toml",
        ".vault-token",
        ".terraform.d/credentials.tfrc.json",
        ".docker/contexts.json",
        ".bash_history",
        ".pgpass",
    ];
    for store in stores {
        let path = machine.path(&format!("home/{store}"));
        std::fs::create_dir_all(path.parent().expect("parent")).expect("dir");
        std::fs::write(&path, "PRIVATE TOKEN").expect("store");
    }
    std::fs::write(machine.path("home/notes.txt"), "ordinary").expect("notes");
    for env in [&[][..], &[("TOOLHOST_SANDBOX_DISABLE", "namespaces")][..]] {
        for store in stores {
            let result = machine.execute_with(&[], &format!("cat \"$HOME/{store}\""), env);
            assert_ne!(result["exit_code"], 0, "{store} was read: {result}");
            assert!(
                !output(&result).contains("PRIVATE TOKEN"),
                "{store} leaked: {result}"
            );
            assert!(
                output(&result).contains("hidden from confined commands by the operator's policy"),
                "{store}: no note that it is hidden: {result}"
            );
        }
    }
    // --hide adds a path; --reveal lets a default one through (a private registry's ~/.npmrc).
    let notes = machine.path("home/notes.txt").display().to_string();
    let npmrc = machine.path("home/.npmrc").display().to_string();
    let flags = ["--hide", notes.as_str(), "--reveal", npmrc.as_str()];
    let result = machine.execute(&flags, "cat \"$HOME/notes.txt\"");
    assert_ne!(result["exit_code"], 0, "{result}");
    assert!(!output(&result).contains("ordinary"), "{result}");
    let result = machine.execute(&flags, "cat \"$HOME/.npmrc\"");
    assert_eq!(output(&result), "PRIVATE TOKEN", "{result}");
    // A --reveal of a path that is not hidden by default is refused before anything runs.
    let project = machine.path("workspace").display().to_string();
    let refused = machine.run(&["--reveal", project.as_str()], "true", &[]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr)
            .contains("is not one of the paths hidden by default"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    // `toolhost sandbox` prints the effective list.
    let report = Command::new(toolhost_bin())
        .env("HOME", machine.path("home"))
        .args(["sandbox"])
        .args(flags)
        .output()
        .expect("toolhost sandbox");
    let report = String::from_utf8_lossy(&report.stdout);
    let home = machine.path("home").canonicalize().expect("home");
    assert!(
        report.contains(&format!("  {}\n", home.join(".config/gh").display())),
        "{report}"
    );
    assert!(
        report.contains(&format!("  {}\n", home.join("notes.txt").display())),
        "{report}"
    );
    assert!(
        !report.contains(&format!("  {}\n", home.join(".npmrc").display())),
        "{report}"
    );
}

/// A host running as root hides the system's password hashes from its confined commands (a
/// mount covers them in the namespaces layer; Landlock would have to freeze /etc).
#[test]
fn a_root_host_hides_the_password_hashes() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || toolhost::process::namespaces_available().is_err() {
        eprintln!("not root, or no namespaces here: nothing to check");
        return;
    }
    let machine = Machine::new();
    for file in ["/etc/shadow", "/etc/gshadow"] {
        if !std::path::Path::new(file).exists() {
            continue;
        }
        let result = machine.execute(&[], &format!("wc -c < {file}; head -c 200 {file}"));
        assert!(
            !output(&result).contains("root:"),
            "{file} leaked: {result}"
        );
        assert_ne!(result["exit_code"], 0, "{file} was read: {result}");
        // What the command sees is the cover, an empty file of mode 000, whatever mode the
        // real file has (mode 000 itself on some distributions).
        let result = machine.execute(&[], &format!("stat -c '%s %a' {file}"));
        assert_eq!(output(&result), "0 0\n", "{file} is not covered: {result}");
    }
    // The rest of /etc stays readable.
    let result = machine.execute(&[], "cat /etc/passwd >/dev/null && echo ok");
    assert_eq!(output(&result), "ok\n", "{result}");
}

/// Variables whose names or values hold secrets stay with the host, beyond the four old
/// words; paths and the working directory's variables always pass.
#[test]
fn secret_variables_of_every_common_shape_are_withheld() {
    let machine = Machine::new();
    let withheld = [
        ("MYSQL_PWD", "w1"),
        ("GITHUB_PAT", "w2"),
        ("DATABASE_URL", "postgres://u:pw@db.example.com/app"),
        ("NPM_AUTH", "w4"),
        ("SENTRY_DSN", "w5"),
        ("PASSWD", "w6"),
        ("CREDENTIALS", "w7"),
        ("AUTH_HEADER", "w8"),
    ];
    let passed = [
        ("LD_LIBRARY_PATH", "/opt/lib"),
        ("SECRET_PATH", "/opt/secrets"),
        ("GIT_AUTHOR_NAME", "Ada"),
        ("PLAIN_URL", "https://example.com/x"),
    ];
    let env: Vec<(&str, &str)> = withheld.iter().chain(&passed).copied().collect();
    let names: Vec<&str> = env.iter().map(|(name, _)| *name).collect();
    let command = names
        .iter()
        .map(|name| format!("echo \"{name}=${name}\""))
        .collect::<Vec<_>>()
        .join("; ");
    let result = machine.execute_with(&[], &command, &env);
    for (name, value) in withheld {
        assert!(
            output(&result).contains(&format!("{name}=\n")),
            "{name} passed: {result}"
        );
        assert!(!output(&result).contains(value), "{name} leaked: {result}");
    }
    for (name, value) in passed {
        assert!(
            output(&result).contains(&format!("{name}={value}\n")),
            "{name}: {result}"
        );
    }
    let result = machine.execute_with(&[], "echo \"$PATH\" && pwd && echo \"$PWD\"", &env);
    assert!(output(&result).contains("/bin"), "{result}");
    // Unconfined, everything passes.
    let result = machine.execute_with(&["--sandbox", "off"], &command, &env);
    for (name, value) in withheld.iter().chain(&passed) {
        assert!(
            output(&result).contains(&format!("{name}={value}\n")),
            "{name}: {result}"
        );
    }
}

/// The home of the user's passwd entry is hidden too, whatever `$HOME` says: unset, relative,
/// `/` or another directory.
#[test]
fn the_passwd_home_is_hidden_whatever_home_says() {
    let Some(home) = nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map(|user| user.dir)
        .filter(|home| home.is_absolute() && home != std::path::Path::new("/"))
    else {
        eprintln!("this user has no passwd home: nothing to check");
        return;
    };
    let home = home.canonicalize().unwrap_or(home);
    let machine = Machine::new();
    let elsewhere = machine.path("home").display().to_string();
    for value in [None, Some("relative"), Some("/"), Some(elsewhere.as_str())] {
        let mut command = Command::new(toolhost_bin());
        command.args(["sandbox"]);
        match value {
            None => command.env_remove("HOME"),
            Some(value) => command.env("HOME", value),
        };
        let report = command.output().expect("toolhost sandbox");
        let report = String::from_utf8_lossy(&report.stdout);
        assert!(
            report.contains(&format!("  {}\n", home.join(".ssh").display())),
            "HOME={value:?}: {report}"
        );
    }
    // Where the real home holds an SSH directory, a confined command cannot read into it.
    let ssh = home.join(".ssh");
    if ssh.is_dir() {
        let command = format!(
            "ls {} >/dev/null 2>&1 && echo readable || echo hidden",
            ssh.display()
        );
        for value in ["/", elsewhere.as_str()] {
            let result = machine.execute_with(&[], &command, &[("HOME", value)]);
            assert_eq!(output(&result), "hidden\n", "HOME={value}: {result}");
        }
    }
}

/// A user id without a passwd entry and `HOME=/` (a container's) leaves no home to hide under:
/// the host says so, once, instead of running with less in silence.
#[test]
fn a_host_without_a_home_says_so() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("not root: cannot run the host as a user without a passwd entry");
        return;
    }
    let dir = tempfile::tempdir_in("/var/tmp").expect("dir");
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    let binary = dir.path().join("toolhost");
    std::fs::copy(toolhost_bin(), &binary).expect("copy");
    let uid = "54321";
    for name in ["state", "work"] {
        std::fs::create_dir(dir.path().join(name)).expect("dir");
        std::os::unix::fs::chown(dir.path().join(name), Some(54321), Some(54321)).expect("chown");
    }
    assert!(
        nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(54321))
            .ok()
            .flatten()
            .is_none()
    );
    let run = |args: &[&str]| {
        Command::new("setpriv")
            .args([
                &format!("--reuid={uid}"),
                &format!("--regid={uid}"),
                "--clear-groups",
                "--",
            ])
            .arg(&binary)
            .arg("--no-cache")
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .arg("--workdir")
            .arg(dir.path().join("work"))
            .args(args)
            .env("HOME", "/")
            .env_remove("XDG_STATE_HOME")
            .env_remove("XDG_CACHE_HOME")
            .current_dir("/")
            .stdin(Stdio::null())
            .output()
            .expect("setpriv")
    };
    let output = run(&[
        "--sandbox",
        "read-only",
        "call",
        "execute",
        r#"{"command":"echo ok"}"#,
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        stderr.matches("no home directory resolves").count(),
        1,
        "{stderr}"
    );
    let report = run(&["sandbox"]);
    let report = String::from_utf8_lossy(&report.stdout);
    assert!(
        report.contains("WARNING: no home directory resolves"),
        "{report}"
    );
}

/// The host's check of a request's `workdir` answers the same for a hidden name that exists
/// and one that does not: it tells nothing of what a hidden directory holds.
#[test]
fn the_workdir_check_tells_nothing_of_hidden_names() {
    let machine = Machine::new();
    let ask = |workdir: &str| {
        let args = serde_json::json!({ "command": "true", "workdir": workdir });
        let output = machine.call(&[], "execute", &args, &[]);
        let text = String::from_utf8_lossy(&output.stderr).into_owned()
            + &String::from_utf8_lossy(&output.stdout);
        text.replace(workdir, "WORKDIR")
    };
    let home = machine.path("home");
    let existing = ask(&home.join(".ssh/id_ed25519").display().to_string());
    let missing = ask(&home.join(".ssh/id_nope").display().to_string());
    let directory = ask(&home.join(".ssh").display().to_string());
    assert_eq!(existing, missing);
    assert_eq!(existing, directory);
    assert!(
        existing.contains("hidden from confined commands"),
        "{existing}"
    );
}

/// A cut output's note never sends a confined model to a file it cannot read: it names what
/// works from there. Unconfined, the file can be read and the note says so.
#[test]
fn the_note_about_the_full_output_points_to_what_works() {
    let machine = Machine::new();
    let command = "seq 1 20000";
    let result = machine.execute(&[], command);
    let note = result["note"].as_str().unwrap_or_default();
    assert!(result["truncated"].is_object(), "{result}");
    assert!(!note.contains("grep or page"), "{result}");
    assert!(
        note.contains("Confined commands cannot read that file"),
        "{result}"
    );
    assert!(note.contains("toolhost://process/"), "{result}");
    // The file is indeed out of reach of a confined command.
    let file = result["output_file"].as_str().expect("output_file");
    let read = machine.execute(&[], &format!("tail -n 1 {file}"));
    assert_ne!(read["exit_code"], 0, "{read}");
    let result = machine.execute(&["--sandbox", "off"], command);
    let note = result["note"].as_str().unwrap_or_default();
    assert!(note.contains("grep or page"), "{result}");
}

/// `/dev/shm` is a session's own: a size-bounded tmpfs in its mount namespace, gone with it,
/// where other sessions' and the host's files are out of view. Without namespaces confined
/// commands cannot write it at all, and read-only commands write it in no tier.
#[test]
fn dev_shm_is_the_sessions_own_and_bounded() {
    if toolhost::process::namespaces_available().is_err() {
        eprintln!("no namespaces here: /dev/shm is not writable confined, checked below");
    }
    let machine = Machine::new();
    let mark = marker();
    let host_file = std::path::Path::new("/dev/shm").join(format!("toolhost-host-{mark}"));
    std::fs::write(&host_file, "the host's").expect("a file in the host's /dev/shm");
    let ours = format!("/dev/shm/toolhost-session-{mark}");
    if toolhost::process::namespaces_available().is_ok() {
        let result = machine.execute(
            &[],
            &format!(
                "echo session > {ours} && cat {ours} && ls /dev/shm | grep -c toolhost-host-{mark}"
            ),
        );
        assert_eq!(output(&result), "session\n0\n", "{result}");
        assert!(
            !std::path::Path::new(&ours).exists(),
            "the session wrote the host's /dev/shm"
        );
        // Bounded by --shm-size-per-session.
        let result = machine.execute(
            &["--shm-size-per-session", "1MiB"],
            "head -c 2000000 /dev/zero > /dev/shm/big",
        );
        assert_ne!(result["exit_code"], 0, "{result}");
        assert!(
            output(&result).contains("No space left on device"),
            "{result}"
        );
        refused(
            &machine.execute(&["--sandbox", "read-only"], &format!("echo x > {ours}")),
            "a read-only write to /dev/shm",
        );
    }
    // Without namespaces, /dev/shm is the host's, shared with every session: not writable.
    let result = machine.execute_with(
        &[],
        &format!("echo x > {ours}"),
        &[("TOOLHOST_SANDBOX_DISABLE", "namespaces")],
    );
    refused(&result, "a write to the host's /dev/shm without namespaces");
    assert!(!std::path::Path::new(&ours).exists());
    let _ = std::fs::remove_file(&host_file);
}

/// A directory of the host's in `base`, named `toolhost-PREFIX…`, removed when dropped.
fn host_dir(base: &std::path::Path, prefix: &str) -> TempDir {
    tempfile::Builder::new()
        .prefix(&format!("toolhost-{prefix}-"))
        .tempdir_in(base)
        .expect("a directory of the host's")
}

#[test]
fn the_hosts_tmp_shows_beneath_the_sessions_own_bounded_writes() {
    let Ok(here) = toolhost::process::namespaces_here() else {
        eprintln!("no namespaces here: /tmp is the host's (checked in other tests)");
        return;
    };
    let machine = Machine::new();
    let mark = marker();
    let report = std::path::Path::new("/tmp").join(format!("toolhost-report-{mark}.txt"));
    std::fs::write(&report, "the user's report\n").expect("a file in the host's /tmp");
    let mine = format!("/tmp/toolhost-mine-{mark}");
    let report_text = report.display();
    match &here.tmp_overlay {
        Ok(()) => {
            let result = machine.execute(
                &[],
                &format!(
                    "cat {report_text}; echo changed > {report_text}; echo mine > {mine}; \
                     cat {mine} {report_text}"
                ),
            );
            assert_eq!(
                output(&result),
                "the user's report\nmine\nchanged\n",
                "{result}"
            );
            assert_eq!(
                std::fs::read_to_string(&report).expect("report"),
                "the user's report\n",
                "a session's write reached the host's /tmp"
            );
            assert!(!std::path::Path::new(&mine).exists());
        }
        Err(reason) => eprintln!("no overlay here ({reason}): the fallback is checked below"),
    }
    // Bounded, with a note that says by what.
    let result = machine.execute(
        &["--tmp-size-per-session", "1MiB"],
        "head -c 2000000 /dev/zero > /tmp/big",
    );
    assert_ne!(result["exit_code"], 0, "{result}");
    let text = output(&result);
    assert!(text.contains("No space left on device"), "{result}");
    assert!(
        text.contains("/tmp at most 1 MiB (--tmp-size-per-session)"),
        "{result}"
    );
    // Where the overlay is missing (forced here), /tmp is the session's own and starts empty,
    // and `toolhost sandbox` says so.
    let without = [("TOOLHOST_SANDBOX_DISABLE", "overlay")];
    let result = machine.execute_with(
        &[],
        &format!("cat {report_text}; echo mine > {mine} && cat {mine}"),
        &without,
    );
    let text = output(&result);
    assert!(
        text.contains("No such file") && text.ends_with("mine\n"),
        "{result}"
    );
    let report_out = machine
        .toolhost(&["sandbox"])
        .envs(without)
        .output()
        .expect("toolhost sandbox");
    let report_out = String::from_utf8_lossy(&report_out.stdout);
    assert!(
        report_out.contains("(an overlay): NO (disabled by TOOLHOST_SANDBOX_DISABLE)"),
        "{report_out}"
    );
    let _ = std::fs::remove_file(&report);
}

#[test]
fn a_workspace_under_tmp_home_or_dev_shm_or_through_a_link_works_in_both_modes() {
    let machine = Machine::new();
    let mut bases = vec![PathBuf::from("/tmp"), machine.path("home")];
    if std::path::Path::new("/dev/shm").is_dir() {
        bases.push(PathBuf::from("/dev/shm"));
    }
    for (index, base) in bases.iter().enumerate() {
        let workspace = host_dir(base, "workspace");
        std::fs::write(workspace.path().join("seen"), "seen\n").expect("seen");
        let link = machine.path(&format!("link-{index}"));
        std::os::unix::fs::symlink(workspace.path(), &link).expect("link");
        let made = workspace.path().join("made");
        for workdir in [workspace.path(), link.as_path()] {
            let workdir = workdir.to_str().expect("utf-8");
            let result = machine.execute(&["--workdir", workdir], "cat seen && touch made");
            assert_eq!(output(&result), "seen\n", "{workdir}: {result}");
            assert!(made.exists(), "{workdir}: nothing written");
            std::fs::remove_file(&made).expect("clean up");
            let result = machine.execute(
                &["--sandbox", "read-only", "--workdir", workdir],
                "cat seen && touch made",
            );
            refused(&result, &format!("a read-only write in {workdir}"));
            assert!(output(&result).starts_with("seen\n"), "{workdir}: {result}");
            assert!(!made.exists(), "{workdir}: written in read-only");
        }
    }
}

#[test]
fn a_home_under_tmp_stays_the_hosts_and_read_only() {
    if toolhost::process::namespaces_available().is_err() {
        eprintln!("no namespaces here: /tmp is the host's");
        return;
    }
    let machine = Machine::new();
    let home = host_dir(std::path::Path::new("/tmp"), "home");
    std::fs::write(home.path().join(".profile"), "# the user's profile\n").expect("profile");
    let home_text = home.path().to_str().expect("utf-8");
    let result = machine.execute_with(
        &[],
        "cat \"$HOME/.profile\"; echo x > \"$HOME/escape\"",
        &[("HOME", home_text)],
    );
    let text = output(&result);
    assert!(text.starts_with("# the user's profile\n"), "{result}");
    assert!(text.contains("Read-only file system"), "{result}");
    assert!(!home.path().join("escape").exists());
}

#[test]
fn git_hooks_and_shell_start_up_files_in_a_writable_root_are_read_only() {
    if toolhost::process::namespaces_available().is_err() {
        eprintln!("no namespaces here: no read-only binds (the git guard still applies)");
        return;
    }
    let machine = Machine::new();
    let git = |args: &[&str]| {
        let status = Command::new("git")
            .args(args)
            .current_dir(machine.path("workspace"))
            .stdout(Stdio::null())
            .status()
            .expect("git");
        assert!(status.success(), "git {args:?}");
    };
    git(&["init", "-q", "."]);
    let result = machine.execute(
        &[],
        "echo 'touch planted' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit; \
         git -c user.name=t -c user.email=t@t commit -q --allow-empty -m one && \
         git log --oneline | wc -l && git config user.name me && git config user.name",
    );
    let text = output(&result);
    assert!(text.contains("Read-only file system"), "{result}");
    assert!(
        text.ends_with("1\nme\n"),
        "ordinary git work failed: {result}"
    );
    assert!(!machine.path("workspace/.git/hooks/pre-commit").exists());
    assert!(!machine.path("workspace/planted").exists());
    // A home that is the workspace: its shell start-up files are out of reach, the rest not.
    let home = machine.path("home");
    std::fs::write(home.join(".bashrc"), "# the user's bashrc\n").expect("bashrc");
    std::fs::create_dir(home.join("project")).expect("project");
    let result = machine.execute(
        &["--workdir", home.to_str().expect("utf-8")],
        "echo evil >> .bashrc; echo ok > project/notes.txt && cat project/notes.txt",
    );
    let text = output(&result);
    assert!(text.contains("Read-only file system"), "{result}");
    assert!(text.ends_with("ok\n"), "{result}");
    assert_eq!(
        std::fs::read_to_string(home.join(".bashrc")).expect("bashrc"),
        "# the user's bashrc\n"
    );
}

#[test]
fn a_sessions_tmpdir_is_out_of_other_sessions_reach_in_both_tiers() {
    let tiers: [&[(&str, &str)]; 2] = [&[], &[("TOOLHOST_SANDBOX_DISABLE", "namespaces")]];
    for env in tiers {
        let machine = Machine::new();
        // Session A keeps a file in its $TMPDIR, says where, and waits.
        let args = serde_json::json!({
            "command": "echo session-a-data > \"$TMPDIR/f\" && echo \"$TMPDIR\" > where.tmp && \
                        mv where.tmp where && sleep 60",
            "timeout": "90s",
        })
        .to_string();
        let mut first = machine
            .toolhost(&["call", "execute", &args])
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .spawn()
            .expect("session A");
        let where_file = machine.path("workspace/where");
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !where_file.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let dir = std::fs::read_to_string(&where_file).expect("session A says where");
        let dir = dir.trim();
        // Session B, at the same time.
        let result = machine.execute_with(&[], &format!("cat {dir}/f; echo b > {dir}/g"), env);
        let _ = first.kill();
        let _ = first.wait();
        assert!(
            !output(&result).contains("session-a-data"),
            "{env:?}: {result}"
        );
        if dir != "/tmp" {
            refused(&result, "a write to another session's $TMPDIR");
            assert!(!std::path::Path::new(dir).join("g").exists(), "{env:?}");
        }
    }
}
