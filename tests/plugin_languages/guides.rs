//! `docs/writing-a-plugin-in-python.md` and `docs/writing-a-plugin-in-javascript.md`,
//! followed as written, each in a temporary directory (the marks are those of
//! [`toolhost_e2e::guide_blocks`]).
//!
//! The steps:
//!
//! 1. `scaffold`: `toolhost new-policy` writes the project.
//! 2. The guide's files (`app.py` or `app.js`, `scenarios/basic.toml`) are written into it.
//! 3. `build`: the guide's build, which installs the pinned toolchain from the registry.
//! 4. `test`: `toolhost test` passes the guide's scenarios and prints what the guide shows.
//! 5. `serve`, then `install`: a server started on an empty plugins directory offers the tool
//!    after the install, with `notifications/tools/list_changed`, and a call over MCP returns
//!    the changes of the guide's repository.
//! 6. `call`: `toolhost call` prints what the guide shows.
//!
//! Where the language's runtime is missing or its registry cannot be reached, the test says so
//! loudly and checks nothing.

use super::toolchains::{self, printed, run};
use super::{announce_skip, forget_earlier_builds, skip_requested};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;
use toolhost_e2e::guide_blocks::Guide;
use toolhost_e2e::mcp_client::{StdioClient, structured};
use toolhost_e2e::{cache_env, repo_root, target_dir, toolhost_bin};

/// How long one step may take: the build installs the toolchain from the registry, from the
/// installer's cache after the first time.
const STEP_LIMIT: Duration = Duration::from_secs(600);

/// The result every guide shows for its repository: one new file.
fn changes() -> serde_json::Value {
    json!({"clean": false, "files": [{"status": "??", "path": "notes.txt"}]})
}

/// `script` run with `sh -e` in `dir`, as a reader would: the `toolhost` under test first on
/// `PATH`, and the MCP tests' caches (compiled components, the installers' downloads).
fn sh(script: &str, dir: &Path) -> Output {
    let bin = toolhost_bin();
    let path = format!(
        "{}:{}",
        bin.parent().expect("the binary's directory").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let (key, value) = cache_env();
    run(
        Command::new("sh")
            .args(["-ec", script])
            .current_dir(dir)
            .env("PATH", path)
            .env(key, value)
            .env("TOOLHOST_LOG", "error"),
        script.trim(),
        STEP_LIMIT,
    )
    .expect("run sh")
}

/// Panic with the output of `what` unless it succeeded.
fn succeeded(what: &str, output: &Output) {
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{}",
        output.status,
        printed(output)
    );
}

/// A fresh directory under the target directory for one walk through a guide.
fn work_dir() -> tempfile::TempDir {
    let base = target_dir().join("plugin-guides");
    std::fs::create_dir_all(&base).expect("the guides' directory");
    tempfile::tempdir_in(base).expect("a directory for the walk")
}

/// The directory the `scaffold` step leaves the reader in (its last line, `cd DIR`).
fn scaffolded_dir(guide: &Guide) -> String {
    let body = &guide.block("run", "scaffold").body;
    body.lines()
        .last()
        .and_then(|line| line.strip_prefix("cd "))
        .unwrap_or_else(|| panic!("the scaffold step ends with `cd DIR`: {body}"))
        .to_owned()
}

/// The `toolhost serve` line of the `serve` step as arguments, its directories resolved
/// against `project`; the step's other lines are run in `project`.
fn serve_step(guide: &Guide, project: &Path) -> Vec<String> {
    let mut server_args = None;
    for line in guide.block("run", "serve").body.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.starts_with(&["toolhost", "serve"]) {
            let mut args = Vec::new();
            let mut flags = words[2..].iter();
            while let Some(flag) = flags.next() {
                args.push(flag.to_string());
                if matches!(*flag, "--plugins" | "--workdir") {
                    let dir = flags.next().expect("a directory after the flag");
                    args.push(project.join(dir).display().to_string());
                }
            }
            server_args = Some(args);
        } else {
            succeeded(line, &sh(line, project));
        }
    }
    server_args.expect("the serve step starts `toolhost serve`")
}

/// Held by a walk: both guides build a plugin of the same name, whose earlier builds each walk
/// removes from the shared component cache.
static ONE_WALK_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Follow the guide at `relative`, its tool named `tool`.
async fn follow(test: &str, relative: &str, tool: &str) {
    let _walk = ONE_WALK_AT_A_TIME.lock().await;
    let guide = Guide::read(relative);
    // Every block is followed: each is marked, and the steps are the ones below.
    for block in &guide.blocks {
        let kind = block.marker.as_ref().map(|(kind, _)| kind.as_str());
        assert!(
            matches!(kind, Some("run" | "file" | "output")),
            "the block at {}:{} is not marked as run, file or output",
            guide.path.display(),
            block.line
        );
    }
    assert_eq!(
        guide.marked("run"),
        ["scaffold", "build", "test", "serve", "install", "call"]
    );
    assert_eq!(guide.marked("output"), ["test", "call"]);
    let dir = work_dir();
    forget_earlier_builds(tool);

    // 1 and 2: scaffold, then the guide's files.
    succeeded(
        "the scaffold step",
        &sh(&guide.block("run", "scaffold").body, dir.path()),
    );
    let project: PathBuf = dir.path().join(scaffolded_dir(&guide));
    let files = guide.marked("file");
    assert!(
        files.len() == 2 && files.contains(&"scenarios/basic.toml"),
        "the guide writes the plugin and its scenarios: {files:?}"
    );
    guide.write_files(&project);

    // 3: the build, toolchain install included.
    let build = sh(&guide.block("run", "build").body, &project);
    if let Err(unavailable) = toolchains::installed(build, "the guide's build", "the registry") {
        return announce_skip(test, &unavailable);
    }
    assert!(
        project.join(format!("{tool}.wasm")).is_file(),
        "the build wrote no {tool}.wasm"
    );

    // 4: the scenarios pass, and the output is the guide's.
    let tested = sh(&guide.block("run", "test").body, &project);
    succeeded("the test step", &tested);
    guide.shows_output("test", &String::from_utf8_lossy(&tested.stdout));

    // 5: a server on an empty plugins directory, then the install.
    let args = serve_step(&guide, &project);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut client = StdioClient::start(&args).await;
    let listed = client.request("tools/list", json!({})).await;
    assert_eq!(listed["result"]["tools"], json!([]), "{listed}");
    succeeded(
        "the install step",
        &sh(&guide.block("run", "install").body, &project),
    );
    let changed = client
        .wait_for("notifications/tools/list_changed", Duration::from_secs(60))
        .await;
    assert!(
        changed,
        "no notifications/tools/list_changed after the install"
    );
    let listed = client.request("tools/list", json!({})).await;
    assert_eq!(listed["result"]["tools"][0]["name"], tool, "{listed}");
    let result = client.call_tool(tool, json!({})).await;
    assert_eq!(structured(&result), changes(), "{result}");
    client.close_stdin();
    assert_eq!(client.wait_exit(Duration::from_secs(20)).await, Some(0));

    // 6: one call from a shell.
    let called = sh(&guide.block("run", "call").body, &project);
    succeeded("the call step", &called);
    let printed = String::from_utf8_lossy(&called.stdout);
    guide.shows_output("call", &printed);
    assert_eq!(toolhost_e2e::json(&printed), changes());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_guide_works_as_written() {
    let test = "the_python_guide_works_as_written";
    if skip_requested(test) {
        return;
    }
    // The runtime the guide needs: python3 with venv.
    if let Err(unavailable) = toolchains::python() {
        return announce_skip(test, &unavailable);
    }
    follow(test, "docs/writing-a-plugin-in-python.md", "git_changes").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_javascript_guide_works_as_written() {
    let test = "the_javascript_guide_works_as_written";
    if skip_requested(test) {
        return;
    }
    // The runtime the guide needs: node 20 or newer with npm.
    let example = repo_root().join("guest-tools/js/word_count");
    if let Err(unavailable) = toolchains::javascript(&example) {
        return announce_skip(test, &unavailable);
    }
    follow(
        test,
        "docs/writing-a-plugin-in-javascript.md",
        "git_changes",
    )
    .await;
}
