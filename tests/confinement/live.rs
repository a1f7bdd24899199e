//! Directories around hidden paths stay live within a session: what the user creates or
//! replaces beside a hidden path after the session's first command is seen by its next
//! commands, hidden names stay refused, and a host file inside the workspace leaves the
//! workspace root writable where a mount covers it.
//!
//! Landlock grants the entries of such a directory one by one, so each case keeps one MCP
//! session (over HTTP) across several commands: a one-shot `toolhost call` is a session per
//! command and would not show what a session's later commands see. Each case has a fake
//! machine of its own under [`machines_root`] (see `confinement.rs`), and runs with namespaces
//! and, where it says so, with Landlock alone (`TOOLHOST_SANDBOX_DISABLE=namespaces`).

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use toolhost_e2e::http_session::{Session, TOKEN};
use toolhost_e2e::mcp_client::{ANSWER_TIMEOUT, structured};
use toolhost_e2e::{machines_root, toolhost_bin};

/// The variable that forces the Landlock-only tier.
const LANDLOCK_ONLY: (&str, &str) = ("TOOLHOST_SANDBOX_DISABLE", "namespaces");

/// Both tiers: with namespaces, and with Landlock alone.
const TIERS: [&[(&str, &str)]; 2] = [&[], &[LANDLOCK_ONLY]];

/// A fake user: a home with secrets, a workspace, a state directory, a plugin directory.
struct Machine {
    root: TempDir,
}

impl Machine {
    fn new() -> Machine {
        let root = tempfile::tempdir_in(machines_root()).expect("root");
        let machine = Machine { root };
        for dir in [
            "home/.ssh",
            "home/.config",
            "workspace",
            "state",
            "plugins",
            "run",
        ] {
            std::fs::create_dir_all(machine.path(dir)).expect("dir");
        }
        std::fs::write(machine.path("home/.ssh/id_ed25519"), "PRIVATE KEY").expect("key");
        std::fs::write(machine.path("home/.netrc"), "machine x password y").expect("netrc");
        std::fs::write(machine.path("home/.profile"), "# profile").expect("profile");
        machine
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.root.path().join(relative)
    }

    /// `toolhost serve --http` for this machine, with `args` after `serve --http ADDR` and
    /// `env` added (the state and plugin directories are the machine's unless `args` name
    /// others).
    async fn serve(&self, args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut command = Command::new(toolhost_bin());
        command
            .current_dir(self.path("workspace"))
            .env("HOME", self.path("home"))
            .env("XDG_CACHE_HOME", self.path("home/.cache"))
            .env("XDG_STATE_HOME", self.path("home/.local/state"))
            .env("XDG_RUNTIME_DIR", self.path("run"))
            .env("TOOLHOST_LOG", "warn")
            .envs(env.iter().copied())
            .args(["serve", "--http", "127.0.0.1:0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for (flag, dir) in [("--state-dir", "state"), ("--plugins", "plugins")] {
            if !args.contains(&flag) {
                command.arg(flag).arg(self.path(dir));
            }
        }
        if !args.contains(&"--token-file") {
            command.env("TOOLHOST_TOKEN", TOKEN);
        }
        let mut child = command.spawn().expect("start toolhost serve --http");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let log = Arc::new(Mutex::new(Vec::new()));
        let url = tokio::time::timeout(ANSWER_TIMEOUT, async {
            while let Ok(Some(line)) = lines.next_line().await {
                eprintln!("server: {line}");
                log.lock().expect("log").push(line.clone());
                if let Some(url) = line.split_whitespace().find(|w| w.starts_with("http://")) {
                    return url.to_owned();
                }
            }
            panic!("the server exited without announcing its address");
        })
        .await
        .expect("the server announces its address");
        let kept = log.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                eprintln!("server: {line}");
                kept.lock().expect("log").push(line);
            }
        });
        let session = Session::open_at(url).await;
        Server {
            _child: child,
            session,
            log,
        }
    }

    /// Replace `relative` with `contents` the way editors save: a new file renamed over it.
    fn replace(&self, relative: &str, contents: &str) {
        let path = self.path(relative);
        let new = path.with_extension("new");
        std::fs::write(&new, contents).expect("new file");
        std::fs::rename(&new, &path).expect("rename over");
    }
}

/// A `toolhost serve --http` and one session with it.
struct Server {
    _child: Child,
    session: Session,
    /// The server's log lines so far.
    log: Arc<Mutex<Vec<String>>>,
}

impl Server {
    /// Run `command` in the session's workspace; its result.
    async fn execute(&self, command: &str) -> Value {
        let result = self
            .session
            .call_tool("execute", json!({ "command": command, "timeout": "60s" }))
            .await;
        structured(&result)
    }

    /// Run `command`, which must succeed; its output.
    async fn output_of(&self, command: &str) -> String {
        let result = self.execute(command).await;
        assert_eq!(result["exit_code"], 0, "`{command}` failed: {result}");
        output(&result).to_owned()
    }

    fn logged(&self, text: &str) -> bool {
        self.log
            .lock()
            .expect("log")
            .iter()
            .any(|line| line.contains(text))
    }
}

fn output(result: &Value) -> &str {
    result["output"].as_str().unwrap_or_default()
}

/// The command failed with a permission error, and nothing of `secret` shows.
fn refused(result: &Value, secret: &str, what: &str) {
    assert_ne!(result["exit_code"], 0, "{what} succeeded: {result}");
    let text = output(result);
    assert!(!text.contains(secret), "{what} leaked: {result}");
    let lower = text.to_ascii_lowercase();
    assert!(
        lower.contains("permission denied") || lower.contains("no such file"),
        "{what}: no refusal in {result}"
    );
}

fn tier(env: &[(&str, &str)]) -> &'static str {
    if env.is_empty() {
        "with namespaces"
    } else {
        "with Landlock alone"
    }
}

#[tokio::test]
async fn files_made_in_home_after_the_first_command_are_seen_by_the_next() {
    for env in TIERS {
        let machine = Machine::new();
        let server = machine.serve(&[], env).await;
        let first = server.output_of("cat \"$HOME/.profile\"").await;
        assert_eq!(first, "# profile", "{}", tier(env));
        std::fs::write(machine.path("home/notes.txt"), "notes").expect("notes");
        std::fs::create_dir_all(machine.path("home/project")).expect("project");
        std::fs::write(machine.path("home/project/README"), "readme").expect("readme");
        let next = server
            .execute("cat \"$HOME/notes.txt\" \"$HOME/project/README\"")
            .await;
        assert_eq!(output(&next), "notesreadme", "{}: {next}", tier(env));
        // A file made while the plan was made is caught by the next start again (its
        // directory's times are not trusted so soon after the change).
        std::fs::write(machine.path("home/later.txt"), "later").expect("later");
        let later = server.output_of("cat \"$HOME/later.txt\"").await;
        assert_eq!(later, "later", "{}", tier(env));
    }
}

#[tokio::test]
async fn a_gitconfig_replaced_by_rename_is_read_by_the_next_command() {
    for env in TIERS {
        let machine = Machine::new();
        std::fs::write(machine.path("home/.gitconfig"), "[user]\n\tname = Before\n")
            .expect("gitconfig");
        let server = machine.serve(&[], env).await;
        let get = "git config --global --get user.name";
        assert_eq!(server.output_of(get).await, "Before\n", "{}", tier(env));
        machine.replace("home/.gitconfig", "[user]\n\tname = After\n");
        let after = server.execute(get).await;
        assert_eq!(output(&after), "After\n", "{}: {after}", tier(env));
    }
}

#[tokio::test]
async fn hidden_names_made_during_a_session_stay_refused() {
    for env in TIERS {
        let machine = Machine::new();
        let server = machine.serve(&[], env).await;
        server.output_of("true").await;
        // The user logs in to a cloud and a database during the session, and writes a note.
        std::fs::create_dir_all(machine.path("home/.aws")).expect("aws");
        std::fs::write(machine.path("home/.aws/credentials"), "PRIVATE KEY").expect("aws");
        std::fs::write(machine.path("home/.pgpass"), "db:5432:*:me:password").expect("pgpass");
        std::fs::write(machine.path("home/note"), "note").expect("note");
        let note = server.execute("cat \"$HOME/note\"").await;
        assert_eq!(
            output(&note),
            "note",
            "{}: the rules were not made again: {note}",
            tier(env)
        );
        for (what, command) in [
            ("new cloud credentials", "cat \"$HOME/.aws/credentials\""),
            ("a new ~/.pgpass", "cat \"$HOME/.pgpass\""),
            ("the SSH key", "cat \"$HOME/.ssh/id_ed25519\""),
            ("~/.netrc", "cat \"$HOME/.netrc\""),
        ] {
            let result = server.execute(command).await;
            refused(&result, "PRIVATE KEY", what);
            assert!(
                !output(&result).contains("password"),
                "{what} leaked: {result}"
            );
        }
    }
}

#[tokio::test]
async fn a_plugin_dir_in_the_workspace_leaves_the_workspace_root_writable() {
    for env in TIERS {
        let machine = Machine::new();
        std::fs::create_dir_all(machine.path("workspace/plugins")).expect("plugins");
        let plugins = machine.path("workspace/plugins").display().to_string();
        let server = machine.serve(&["--plugins", &plugins], env).await;
        assert!(
            server.logged("the plugin directory (--plugins)"),
            "no warning about the plugin directory at start"
        );
        let made = server
            .execute("touch new && mkdir dir && rm new && rm -r dir && touch kept && echo ok")
            .await;
        if env.is_empty() {
            assert_eq!(output(&made), "ok\n", "{made}");
            // A file made directly beside the hidden one is written by the next command.
            let next = server.output_of("echo hi > kept && cat kept").await;
            assert_eq!(next, "hi\n");
            // Its cover cannot be moved or removed from inside.
            let moved = server
                .execute("mv plugins elsewhere || rmdir plugins")
                .await;
            assert_ne!(moved["exit_code"], 0, "{moved}");
        } else {
            // Landlock alone cannot keep a command from renaming the hidden directory: nothing
            // new is made beside it.
            assert_ne!(made["exit_code"], 0, "{made}");
        }
        let planted = server.execute("touch plugins/evil.wasm").await;
        assert_ne!(planted["exit_code"], 0, "{planted}");
        assert!(!machine.path("workspace/plugins/evil.wasm").exists());
        assert!(machine.path("workspace/plugins").is_dir());
    }
}

#[tokio::test]
async fn a_token_file_in_the_workspace_leaves_the_workspace_root_writable() {
    for env in TIERS {
        let machine = Machine::new();
        let token = machine.path("workspace/token");
        std::fs::write(&token, TOKEN).expect("token");
        let token = token.display().to_string();
        let server = machine.serve(&["--token-file", &token], env).await;
        assert!(
            server.logged("the host file (--token-file)"),
            "no warning about the token file at start"
        );
        let read = server.execute("cat token").await;
        refused(&read, TOKEN, "the token file");
        let made = server.execute("touch new && rm new && echo ok").await;
        if env.is_empty() {
            assert_eq!(output(&made), "ok\n", "{made}");
        } else {
            // Landlock alone cannot keep a command from renaming the token to a name it may
            // read: nothing new is made beside it, and the note says why.
            assert_ne!(made["exit_code"], 0, "{made}");
        }
        // What the user makes in the workspace root meanwhile is there for the next command.
        std::fs::write(machine.path("workspace/added"), "added").expect("added");
        let added = server.output_of("cat added").await;
        assert_eq!(added, "added", "{}", tier(env));
        let again = server.execute("cat token").await;
        refused(&again, TOKEN, "the token file");
    }
}

#[tokio::test]
async fn without_namespaces_a_refused_entry_beside_a_hidden_path_is_explained() {
    let machine = Machine::new();
    let secret = machine.path("workspace/secret");
    std::fs::create_dir_all(&secret).expect("secret");
    std::fs::write(secret.join("key"), "PRIVATE KEY").expect("key");
    let secret = secret.display().to_string();
    let server = machine.serve(&["--hide", &secret], &[LANDLOCK_ONLY]).await;
    let made = server.execute("touch new").await;
    assert_ne!(made["exit_code"], 0, "{made}");
    let text = output(&made);
    assert!(
        text.contains("is not hidden, but") && text.contains("holds a path hidden"),
        "no note on the directory beside the hidden path: {made}"
    );
    assert!(
        !text.contains("is hidden from confined commands by"),
        "{made}"
    );
    let read = server.execute(&format!("cat {secret}/key")).await;
    refused(&read, "PRIVATE KEY", "the --hide path");
    assert!(
        output(&read).contains("is hidden from confined commands by"),
        "{read}"
    );
}

#[tokio::test]
async fn a_credential_store_made_late_in_a_home_under_tmp_is_hidden_from_the_next_command() {
    for env in TIERS {
        let machine = Machine::new();
        let home = tempfile::Builder::new()
            .prefix("toolhost-late-home-")
            .tempdir_in("/tmp")
            .expect("home under /tmp");
        std::fs::write(home.path().join(".profile"), "# profile").expect("profile");
        let home_text = home.path().to_str().expect("utf-8");
        let vars: Vec<(&str, &str)> = env.iter().copied().chain([("HOME", home_text)]).collect();
        let server = machine.serve(&[], &vars).await;
        let first = server.output_of("cat \"$HOME/.profile\"").await;
        assert_eq!(first, "# profile", "{}", tier(env));
        assert!(
            server.logged("a home directory under /tmp"),
            "{}: no warning about the home under /tmp",
            tier(env)
        );
        // Made after the session's first command, as a login or `ssh-keygen` would.
        std::fs::create_dir(home.path().join(".ssh")).expect(".ssh");
        std::fs::write(home.path().join(".ssh/id_ed25519"), "LATE PRIVATE KEY").expect("key");
        std::fs::write(home.path().join(".npmrc"), "//r/:_authToken=LATE-TOKEN").expect("npmrc");
        let key = server.execute("cat \"$HOME/.ssh/id_ed25519\"").await;
        refused(
            &key,
            "LATE PRIVATE KEY",
            &format!("{}: a late ~/.ssh", tier(env)),
        );
        let npmrc = server.execute("cat \"$HOME/.npmrc\"").await;
        refused(
            &npmrc,
            "LATE-TOKEN",
            &format!("{}: a late ~/.npmrc", tier(env)),
        );
        let profile = server.output_of("cat \"$HOME/.profile\"").await;
        assert_eq!(profile, "# profile", "{}", tier(env));
        if env.is_empty() {
            // The session's own /tmp stays whole: nothing was carved out of it.
            let tmp = server
                .output_of("echo fine > /tmp/made-here && cat /tmp/made-here")
                .await;
            assert_eq!(tmp, "fine\n");
        }
    }
}

/// A Unix socket server an earlier command of the session left running, in the session's
/// `/tmp` (`$TMPDIR`) and in the workspace, is reached by the next command (short names: a
/// socket's path holds at most 107 bytes): each command is a
/// sandbox of its own, and the keeper allows sockets by where they lie.
#[tokio::test]
async fn a_socket_an_earlier_command_made_is_reached_by_the_next() {
    let server_script = r#"
import os, socket, sys, threading
def serve(address):
    s = socket.socket(socket.AF_UNIX)
    s.bind(address)
    s.listen()
    def loop():
        while True:
            s.accept()[0].sendall(b"earlier")
    threading.Thread(target=loop).start()
serve(os.path.join(os.environ["TMPDIR"], "e.sock"))
serve(os.path.join(os.getcwd(), "e.sock"))
open("ready", "w").close()
"#;
    let client_script = r#"
import os, socket
for address in (os.path.join(os.environ["TMPDIR"], "e.sock"), "e.sock"):
    c = socket.socket(socket.AF_UNIX)
    try:
        c.connect(address)
        print(address, "got", c.recv(10).decode())
    except OSError as e:
        print(address, "refused:", e)
"#;
    let quote = |script: &str| format!("python3 -c '{}'", script.replace('\'', "'\\''"));
    for env in TIERS {
        let machine = Machine::new();
        let server = machine.serve(&[], env).await;
        let started = server
            .execute(&format!(
                "rm -f ready e.sock; {} > /dev/null 2>&1 & \
                 while [ ! -e ready ] && kill -0 $! 2>/dev/null; do sleep 0.05; done; \
                 [ -e ready ] && echo started",
                quote(server_script)
            ))
            .await;
        assert!(
            output(&started).contains("started"),
            "{}: {started}",
            tier(env)
        );
        let next = server.output_of(&quote(client_script)).await;
        assert_eq!(
            next.matches(" got earlier").count(),
            2,
            "{}: {next}",
            tier(env)
        );
    }
}
