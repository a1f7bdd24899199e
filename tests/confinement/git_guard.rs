//! The git guard (`host/src/sandbox/git_guard/`): what a confined command writes that git
//! would run later outside the sandbox (a hook, `core.hooksPath`, `core.fsmonitor`,
//! `include.path`, ...) is undone, and the command's result says so, while git's ordinary work
//! goes on in the same session.
//!
//! Each case keeps one MCP session (over HTTP) across several commands, on a fake machine of its
//! own under [`machines_root`] (see `confinement.rs`), with namespaces and with Landlock alone
//! (`TOOLHOST_SANDBOX_DISABLE=namespaces`). The repositories are made during the session, after
//! its namespaces: the read-only binds of `.git/hooks` (made when the namespaces are) do not
//! cover them, so only the guard stands between a planted hook and the user's next commit.
//! Every `git commit` names its author with `-c`, so nothing depends on the machine's identity.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use toolhost_e2e::http_session::{Session, TOKEN};
use toolhost_e2e::mcp_client::{ANSWER_TIMEOUT, structured};
use toolhost_e2e::{json as parse_json, machines_root, toolhost_bin};

/// Both tiers: with namespaces, and with Landlock alone.
const TIERS: [&[(&str, &str)]; 2] = [&[], &[("TOOLHOST_SANDBOX_DISABLE", "namespaces")]];

/// `git` with an author of its own.
const GIT: &str = "git -c user.name=t -c user.email=t@t";

/// What the host logs for each refusal.
const LOGGED: &str = "refused a change to what git runs outside the sandbox";

/// A hook in the repository `dir` that would leave a mark in the home when git runs it.
fn plant(dir: &str, hook: &str) -> String {
    format!(
        "printf '#!/bin/sh\\ntouch \"$HOME/pwned\"\\n' > {dir}/hooks/{hook} && chmod +x {dir}/hooks/{hook}"
    )
}

/// A fake user: a home, a workspace, a state directory, a plugin directory.
struct Machine {
    root: TempDir,
}

impl Machine {
    fn new() -> Machine {
        let root = tempfile::tempdir_in(machines_root()).expect("root");
        let machine = Machine { root };
        for dir in ["home/.config", "workspace", "state", "plugins", "run"] {
            std::fs::create_dir_all(machine.path(dir)).expect("dir");
        }
        machine
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.root.path().join(relative)
    }

    /// `toolhost [ARGS]` in the workspace, with the fake user's environment and `env`.
    fn toolhost(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut command = Command::new(toolhost_bin());
        command
            .current_dir(self.path("workspace"))
            .env("HOME", self.path("home"))
            .env("XDG_CACHE_HOME", self.path("home/.cache"))
            .env("XDG_STATE_HOME", self.path("home/.local/state"))
            .env("XDG_RUNTIME_DIR", self.path("run"))
            .env("TOOLHOST_LOG", "warn")
            .envs(env.iter().copied())
            .arg("--state-dir")
            .arg(self.path("state"))
            .arg("--plugins")
            .arg(self.path("plugins"))
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        command
    }

    /// `toolhost [FLAGS] serve --http` for this machine, and one session with it.
    async fn serve(&self, flags: &[&str], env: &[(&str, &str)]) -> Server {
        let mut command = self.toolhost(flags, env);
        command
            .args(["serve", "--http", "127.0.0.1:0"])
            .env("TOOLHOST_TOKEN", TOKEN)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("start toolhost serve --http");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let log = Arc::new(Mutex::new(Vec::new()));
        let url = tokio::time::timeout(ANSWER_TIMEOUT, async {
            while let Ok(Some(line)) = lines.next_line().await {
                eprintln!("server: {line}");
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
        Server {
            _child: child,
            session: Some(Session::open_at(url).await),
            log,
        }
    }

    /// The value of `key` in the workspace repository's config, read by the host's git.
    fn config(&self, key: &str) -> Option<String> {
        let output = std::process::Command::new("git")
            .current_dir(self.path("workspace"))
            .env("HOME", self.path("home"))
            .args(["config", "--local", "--get", key])
            .output()
            .expect("git config");
        output
            .status
            .success()
            .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
    }
}

/// A `toolhost serve --http` and one session with it.
struct Server {
    _child: Child,
    session: Option<Session>,
    /// The server's log lines so far.
    log: Arc<Mutex<Vec<String>>>,
}

impl Server {
    /// Run `command` in the workspace; its result.
    async fn execute(&self, command: &str) -> Value {
        let session = self.session.as_ref().expect("the session is open");
        let result = session
            .call_tool("execute", json!({ "command": command, "timeout": "60s" }))
            .await;
        structured(&result)
    }

    /// Run `command`, which must succeed without a note of the guard; its output.
    async fn ordinary(&self, command: &str) -> String {
        let result = self.execute(command).await;
        assert_eq!(result["exit_code"], 0, "`{command}` failed: {result}");
        let text = output(&result);
        assert!(
            !text.contains("what git runs outside the sandbox"),
            "`{command}` was refused: {result}"
        );
        text.to_owned()
    }

    fn logged(&self, text: &str) -> bool {
        self.log
            .lock()
            .expect("log")
            .iter()
            .any(|line| line.contains(text))
    }

    /// End the session (the scope ends: its last check runs).
    async fn end_session(&mut self) {
        let session = self.session.take().expect("the session is open");
        session.delete().await;
    }
}

fn output(result: &Value) -> &str {
    result["output"].as_str().unwrap_or_default()
}

fn tier(env: &[(&str, &str)]) -> &'static str {
    if env.is_empty() {
        "with namespaces"
    } else {
        "with Landlock alone"
    }
}

/// The result's note says the guard undid `what` in `file`, and tells the model not to retry.
fn undone(result: &Value, file: &str, what: &str, env: &[(&str, &str)]) {
    let text = output(result);
    let note = text
        .find("[toolhost: ")
        .map(|at| &text[at..])
        .filter(|note| note.contains("what git runs outside the sandbox"))
        .unwrap_or_else(|| panic!("{}: no note of the git guard: {result}", tier(env)));
    assert!(
        note.contains(file),
        "{}: the note names no {file}: {note}",
        tier(env)
    );
    assert!(
        note.contains(what),
        "{}: the note says no `{what}`: {note}",
        tier(env)
    );
    assert!(note.contains("Do not retry"), "{}: {note}", tier(env));
}

/// Wait until `check` holds, at most 20 seconds.
async fn eventually(what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_planted_hook_is_removed_while_everyday_git_goes_on() {
    for env in TIERS {
        let machine = Machine::new();
        let server = machine.serve(&[], env).await;
        server.ordinary("git init -q -b main").await;
        let work = format!(
            "echo a > a && git add a && {GIT} commit -q -m one && git branch feature && \
             git config user.name x && git config branch.main.remote origin && git config user.name"
        );
        assert_eq!(server.ordinary(&work).await, "x\n", "{}", tier(env));

        let planted = server.execute(&plant(".git", "pre-commit")).await;
        undone(
            &planted,
            ".git/hooks/pre-commit",
            "a new hook (removed)",
            env,
        );
        assert!(
            !machine.path("workspace/.git/hooks/pre-commit").exists(),
            "{}: the hook is still there",
            tier(env)
        );
        assert!(server.logged(LOGGED), "{}: not logged", tier(env));

        // Git goes on working, the hook does not run, the settings git wrote stay.
        let count = server
            .ordinary(&format!(
                "{GIT} commit -q --allow-empty -m two && git log --oneline | wc -l"
            ))
            .await;
        assert_eq!(count.trim(), "2", "{}", tier(env));
        assert!(!machine.path("home/pwned").exists());
        assert_eq!(machine.config("user.name").as_deref(), Some("x"));
        assert_eq!(
            machine.config("branch.main.remote").as_deref(),
            Some("origin")
        );
    }
}

#[tokio::test]
async fn settings_that_make_git_run_programs_are_undone() {
    for env in TIERS {
        let machine = Machine::new();
        let server = machine.serve(&[], env).await;
        server
            .ordinary("git init -q -b main && git config user.name me")
            .await;
        for (key, value) in [
            ("core.hooksPath", "/tmp/x"),
            ("core.fsmonitor", "touch \"$HOME/pwned\""),
            ("include.path", "/tmp/evil.cfg"),
            ("alias.st", "!touch \"$HOME/pwned\""),
        ] {
            let result = server
                .execute(&format!(
                    "git config {key} '{value}' && git config user.email me@x"
                ))
                .await;
            undone(
                &result,
                ".git/config",
                &format!("the setting {key} (put back as it was)"),
                env,
            );
            assert_eq!(machine.config(key), None, "{}: {key} stayed", tier(env));
            // The rest of that command's change to the file went with it.
            assert_eq!(machine.config("user.email"), None, "{}", tier(env));
        }
        assert_eq!(machine.config("user.name").as_deref(), Some("me"));
        server.ordinary("git config user.email me@x").await;
        assert_eq!(machine.config("user.email").as_deref(), Some("me@x"));
    }
}

#[tokio::test]
async fn the_users_own_settings_are_left_alone_and_kept() {
    for env in TIERS {
        let machine = Machine::new();
        let workspace = machine.path("workspace");
        for args in [
            &["init", "-q", "-b", "main"][..],
            &["config", "core.editor", "vim"],
        ] {
            let status = std::process::Command::new("git")
                .current_dir(&workspace)
                .env("HOME", machine.path("home"))
                .args(args)
                .status()
                .expect("git");
            assert!(status.success(), "git {args:?}");
        }
        let server = machine.serve(&[], env).await;
        server
            .ordinary("git config user.name me && git config pull.rebase false")
            .await;
        assert_eq!(machine.config("core.editor").as_deref(), Some("vim"));
        let changed = server.execute("git config core.editor 'touch x #'").await;
        undone(&changed, ".git/config", "the setting core.editor", env);
        assert_eq!(machine.config("core.editor").as_deref(), Some("vim"));
        assert_eq!(machine.config("user.name").as_deref(), Some("me"));
    }
}

#[tokio::test]
async fn a_submodules_hooks_and_a_clones_are_guarded() {
    for env in TIERS {
        let machine = Machine::new();
        let server = machine.serve(&[], env).await;
        server
            .ordinary(&format!(
                "git init -q -b main lib && {GIT} -C lib commit -q --allow-empty -m lib && \
                 git init -q -b main && \
                 {GIT} -c protocol.file.allow=always submodule add -q \"$PWD/lib\" sub && \
                 {GIT} commit -q -m sub"
            ))
            .await;
        let planted = server
            .execute(&plant(".git/modules/sub", "post-checkout"))
            .await;
        undone(
            &planted,
            ".git/modules/sub/hooks/post-checkout",
            "a new hook (removed)",
            env,
        );
        assert!(
            !machine
                .path("workspace/.git/modules/sub/hooks/post-checkout")
                .exists()
        );
        // A repository directly in the workspace (a clone, here the submodule's origin).
        let planted = server.execute(&plant("lib/.git", "pre-commit")).await;
        undone(
            &planted,
            "lib/.git/hooks/pre-commit",
            "a new hook (removed)",
            env,
        );
        assert!(!machine.path("workspace/lib/.git/hooks/pre-commit").exists());
        // The submodule still works.
        let status = server.ordinary("git submodule status | wc -l").await;
        assert_eq!(status.trim(), "1", "{}", tier(env));
    }
}

#[tokio::test]
async fn a_hook_a_leftover_plants_is_caught_at_the_next_start_and_at_the_sessions_end() {
    for env in TIERS {
        let machine = Machine::new();
        let mut server = machine.serve(&[], env).await;
        server.ordinary("git init -q -b main").await;
        let hook = machine.path("workspace/.git/hooks/pre-commit");
        // Not with a trailing `&`: the policy would run the whole command in the background.
        let later = |hook_name: &str| {
            format!(
                "(sleep 1; {}) >/dev/null 2>&1 & echo started",
                plant(".git", hook_name)
            )
        };
        // The command ends at once; what it left running plants the hook a second later.
        server.ordinary(&later("pre-commit")).await;
        eventually("the leftover plants its hook", || hook.exists()).await;
        let next = server.execute("true").await;
        undone(&next, ".git/hooks/pre-commit", "a new hook (removed)", env);
        assert!(
            output(&next).contains("before this command started"),
            "{}: {next}",
            tier(env)
        );
        assert!(!hook.exists(), "{}: the hook is still there", tier(env));

        // Planted after the session's last command: undone when the session ends.
        let hook = machine.path("workspace/.git/hooks/pre-push");
        server.ordinary(&later("pre-push")).await;
        eventually("the leftover plants its hook", || hook.exists()).await;
        server.end_session().await;
        eventually("the session's end undoes the hook", || !hook.exists()).await;
    }
}

#[tokio::test]
async fn allow_hook_writes_leaves_hooks_and_settings_to_confined_commands() {
    for env in TIERS {
        let machine = Machine::new();
        let server = machine.serve(&["--allow-hook-writes"], env).await;
        server.ordinary("git init -q -b main").await;
        server.ordinary(&plant(".git", "pre-commit")).await;
        server.ordinary("git config core.hooksPath .githooks").await;
        assert!(machine.path("workspace/.git/hooks/pre-commit").exists());
        assert_eq!(
            machine.config("core.hooksPath").as_deref(),
            Some(".githooks")
        );
    }
}

#[tokio::test]
async fn a_one_shot_call_is_checked_when_its_command_ends() {
    let machine = Machine::new();
    let arguments = json!({
        "command": format!("git init -q -b main && {}", plant(".git", "pre-commit")),
    })
    .to_string();
    let output = machine
        .toolhost(&["call", "execute", &arguments], &[])
        .output()
        .await
        .expect("toolhost call");
    let result = parse_json(&String::from_utf8_lossy(&output.stdout));
    undone(
        &result,
        ".git/hooks/pre-commit",
        "a new hook (removed)",
        &[],
    );
    assert!(!machine.path("workspace/.git/hooks/pre-commit").exists());
}
