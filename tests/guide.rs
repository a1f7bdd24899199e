//! `docs/writing-a-policy.md`, followed as written, in a temporary directory. The guide marks
//! its code blocks with a comment on the line before each:
//!
//! - `<!-- run: STEP -->`: a `sh` block of commands; the test runs them as they are (with the
//!   `toolhost` being tested first on `PATH`, and cargo offline), in the temporary directory
//!   for `scaffold` and in the new crate for the other steps;
//! - `<!-- file: PATH -->`: a file of the policy crate; the test writes it there;
//! - `<!-- output: STEP -->`: what a step prints, line by line (a line ending in `...` is a
//!   prefix of the actual line);
//! - `<!-- source: PATH#REGION -->`: exactly the region of a file of this repository that is
//!   compiled and run (the Rust testing example is [`git_status_runs_git_and_git_push_is_refused`]
//!   below);
//! - `<!-- example: NAME -->`: a fragment checked here by name.
//!
//! A block without a marker must be a `sh` block shown for reading only. The steps: scaffold with
//! `toolhost new-policy`, write the guide's policy and scenarios, build them offline for
//! `wasm32-wasip2` (in a target directory shared by these tests, `target/scaffold-guests`, so
//! later runs are incremental), run `toolhost test` (the scenarios pass; the guide's deliberate
//! mistake fails with exit 1), then hot-swap the component into a running `toolhost serve` over
//! stdio and check what the guide says: `git push` refused with the guide's reason, the extra tool
//! listed, a 30 s default timeout. Besides, the untouched scaffold builds with `--locked`, passes
//! its scenarios, and the `[config]` rows of the guide's manifest reference are the SDK's keys
//! and defaults.

use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use toolhost_e2e::guide_blocks::{Block, Guide};
use toolhost_e2e::mcp_client::{StdioClient, tool_error};
use toolhost_e2e::{repo_root, target_dir, test_cache_dir, toolhost_bin};

/// The guide, read once.
fn the_guide() -> &'static Guide {
    static GUIDE: OnceLock<Guide> = OnceLock::new();
    GUIDE.get_or_init(|| Guide::read("docs/writing-a-policy.md"))
}

/// The guide's file.
fn guide_path() -> &'static Path {
    &the_guide().path
}

/// The guide's text.
fn guide() -> &'static str {
    &the_guide().text
}

/// The guide's code blocks, in order.
fn blocks() -> &'static [Block] {
    &the_guide().blocks
}

/// The one block marked `kind: name`.
fn block(kind: &str, name: &str) -> &'static Block {
    the_guide().block(kind, name)
}

/// The names of the blocks marked `kind`, in order.
fn marked(kind: &str) -> Vec<&'static str> {
    the_guide().marked(kind)
}

/// The target directory the policy crates of these tests build in (through a `target` link
/// in each crate, so the guide's paths hold), shared so that later runs are incremental.
fn shared_target() -> PathBuf {
    let dir = target_dir().join("scaffold-guests");
    std::fs::create_dir_all(&dir).expect("the shared target directory");
    dir
}

/// A fresh directory for a walk through the guide, under the target directory (directories
/// of earlier runs are removed once they are an hour old).
fn work_dir() -> tempfile::TempDir {
    let base = target_dir().join("guide-walkthrough");
    std::fs::create_dir_all(&base).expect("the walkthrough directory");
    for entry in std::fs::read_dir(&base).into_iter().flatten().flatten() {
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > Duration::from_secs(3600));
        if old {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    tempfile::tempdir_in(base).expect("a walkthrough directory")
}

/// A command as a reader of the guide would run it in `dir`: the `toolhost` under test first
/// on `PATH`, cargo offline and free of the outer build's settings.
fn reader_command(program: &str, dir: &Path) -> Command {
    let bin = toolhost_bin();
    let path = format!(
        "{}:{}",
        bin.parent().expect("the binary's directory").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new(program);
    cmd.current_dir(dir)
        .env("PATH", path)
        .env("CARGO_NET_OFFLINE", "true")
        .env("CARGO_TERM_COLOR", "never")
        .env("TOOLHOST_LOG", "error")
        .env("XDG_CACHE_HOME", test_cache_dir());
    for var in [
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTUP_TOOLCHAIN",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// Run `script` with `sh -e` in `dir`, as a reader would.
fn sh(script: &str, dir: &Path) -> Output {
    let started = Instant::now();
    let out = reader_command("sh", dir)
        .arg("-ec")
        .arg(script)
        .output()
        .expect("run sh");
    eprintln!(
        "ran in {:.1?} ({}): {}",
        started.elapsed(),
        out.status,
        script.trim()
    );
    out
}

/// Run the guide's step `step` in `dir`; returns its output (not checked).
fn run_step(step: &str, dir: &Path) -> Output {
    let block = block("run", step);
    assert_eq!(block.lang, "sh", "the `run: {step}` block is a sh block");
    sh(&block.body, dir)
}

fn succeeded(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `actual` is what the guide's `output: step` block shows.
fn shows_output(step: &str, actual: &str) {
    the_guide().shows_output(step, actual);
}

/// The directory the `scaffold` step leaves the reader in (its last line, `cd DIR`).
fn scaffolded_dir() -> &'static str {
    let body = &block("run", "scaffold").body;
    body.lines()
        .last()
        .and_then(|line| line.strip_prefix("cd "))
        .unwrap_or_else(|| panic!("the scaffold step ends with `cd DIR`: {body}"))
}

/// A crate made by the guide's steps up to the build, once per test binary.
struct Walkthrough {
    _dir: tempfile::TempDir,
    crate_dir: PathBuf,
}

/// Scaffold, write the guide's files, build: the guide's steps 1 to 3.
fn walkthrough() -> &'static Walkthrough {
    static WALK: OnceLock<Walkthrough> = OnceLock::new();
    WALK.get_or_init(|| {
        let dir = work_dir();
        succeeded("the scaffold step", &run_step("scaffold", dir.path()));
        let crate_dir = dir.path().join(scaffolded_dir());
        std::os::unix::fs::symlink(shared_target(), crate_dir.join("target"))
            .expect("link the shared target directory");
        for path in marked("file") {
            let block = block("file", path);
            let target = crate_dir.join(path);
            assert!(
                target.starts_with(&crate_dir) && !path.contains(".."),
                "{path} is in the crate"
            );
            std::fs::create_dir_all(target.parent().expect("a parent")).expect("mkdir");
            std::fs::write(&target, &block.body).expect("write the guide's file");
        }
        // The guide's code is formatted as `cargo fmt` formats it.
        succeeded("cargo fmt --check", &sh("cargo fmt --check", &crate_dir));
        let build = run_step("build", &crate_dir);
        succeeded("the build step", &build);
        let stderr = String::from_utf8_lossy(&build.stderr);
        assert!(!stderr.contains("warning"), "the build warns:\n{stderr}");
        Walkthrough {
            _dir: dir,
            crate_dir,
        }
    })
}

/// The reason of the guide's deny rule, from its `src/lib.rs`.
fn guide_reason() -> &'static str {
    block("file", "src/lib.rs")
        .body
        .lines()
        .find_map(|line| line.trim().strip_prefix("reason: \""))
        .and_then(|rest| rest.strip_suffix("\","))
        .expect("the guide's deny rule has a reason")
}

/// Steps 4 and 5: the scenarios pass (and the guide's deliberate mistake fails with exit 1,
/// showing what the guide shows), then the component swaps into a running server, which
/// serves what the guide says it does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guide_works_as_written() {
    let crate_dir = &walkthrough().crate_dir;

    let test = run_step("test", crate_dir);
    succeeded("the test step", &test);
    shows_output("test", &String::from_utf8_lossy(&test.stdout));

    let scenarios = crate_dir.join("scenarios/policy.toml");
    let right = std::fs::read_to_string(&scenarios).expect("the scenarios");
    let (good, bad) = ("\"timed out after 30s\"", "\"timed out after 10s\"");
    assert!(
        right.contains(good) && guide().contains(&format!("change `{good}` to `{bad}`")),
        "the guide's deliberate mistake"
    );
    std::fs::write(&scenarios, right.replace(good, bad)).expect("break a scenario");
    let wrong = run_step("test", crate_dir);
    assert_eq!(wrong.status.code(), Some(1), "a failing scenario exits 1");
    shows_output("test-failing", &String::from_utf8_lossy(&wrong.stdout));
    std::fs::write(&scenarios, &right).expect("change it back");
    succeeded("the test step again", &run_step("test", crate_dir));

    // Step 5: a server on an empty plugins directory, then the install.
    let serve = &block("run", "serve").body;
    let mut server_args = None;
    for line in serve.lines() {
        let words: Vec<&str> = line
            .split_whitespace()
            .skip_while(|word| word.contains('='))
            .collect();
        if words.starts_with(&["toolhost", "serve"]) {
            let mut args = Vec::new();
            let mut flags = words[2..].iter();
            while let Some(flag) = flags.next() {
                args.push(flag.to_string());
                if *flag == "--plugins" {
                    let dir = flags.next().expect("--plugins DIR");
                    args.push(crate_dir.join(dir).display().to_string());
                }
            }
            server_args = Some(args);
        } else {
            succeeded(line, &sh(line, crate_dir));
        }
    }
    let server_args = server_args.expect("the serve step starts `toolhost serve`");
    let args: Vec<&str> = server_args.iter().map(String::as_str).collect();
    assert!(args.contains(&"--plugins"), "{args:?}");
    let mut client = StdioClient::start(&args).await;
    let listed = client.request("tools/list", json!({})).await;
    assert_eq!(
        listed["result"]["tools"],
        json!([]),
        "nothing is served before the install"
    );

    let started = Instant::now();
    succeeded("the install step", &run_step("install", crate_dir));
    let changed = client
        .wait_for("notifications/tools/list_changed", Duration::from_secs(20))
        .await;
    assert!(
        changed,
        "no notifications/tools/list_changed after the install"
    );
    eprintln!("swapped in after {:.1?}", started.elapsed());

    let listed = client.request("tools/list", json!({})).await;
    let tools = listed["result"]["tools"].as_array().expect("tools").clone();
    let mut names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "execute",
            "git_status",
            "process_input",
            "process_list",
            "process_output",
            "process_signal"
        ],
        "the standard tools and the guide's own"
    );
    let description = |name: &str| -> String {
        tools
            .iter()
            .find(|t| t["name"] == name)
            .and_then(|t| t["description"].as_str())
            .unwrap_or_default()
            .to_owned()
    };
    let execute = description("execute");
    assert!(
        execute.contains("time out after 30s by default"),
        "a 30 s default timeout: {execute}"
    );
    assert!(execute.contains(guide_reason()), "{execute}");
    assert!(
        description("git_status").contains("Gives up after 30s"),
        "{}",
        description("git_status")
    );

    let refused = tool_error(
        &client
            .call_tool(
                "execute",
                json!({"command": "cd /tmp && git push origin main"}),
            )
            .await,
    );
    assert_eq!(
        refused,
        format!(
            "refused by the my-policy policy, rule `git-push`: {}. Nothing was run. The person \
             could not be asked to allow it: the operator did not enable asking (start toolhost \
             with `--ask risky`).",
            guide_reason()
        )
    );
    client.close_stdin();
    assert_eq!(client.wait_exit(Duration::from_secs(20)).await, Some(0));
}

// The checks of `examples/test_policy.rs`, a module of this test binary's root.
use crate::test_policy;

/// `cargo run --example test_policy PATH.wasm`, which the guide points to, passes on the
/// guide's policy (loaded with its manifest, as the example does when it lies beside it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_test_policy_example_passes_on_the_guides_policy() {
    let crate_dir = &walkthrough().crate_dir;
    let dir = tempfile::tempdir().expect("a directory");
    let wasm = dir.path().join("my_policy.wasm");
    std::fs::copy(
        crate_dir.join("target/wasm32-wasip2/release/my_policy.wasm"),
        &wasm,
    )
    .expect("the built policy");
    std::fs::copy(
        crate_dir.join("my_policy.toml"),
        dir.path().join("my_policy.toml"),
    )
    .expect("its manifest");
    test_policy::check_policy(Some(&wasm))
        .await
        .expect("the example's checks pass");
}

/// The policy crate the guide's steps made (the guide's `policy_crate()` for a test crate
/// beside it).
fn policy_crate() -> PathBuf {
    walkthrough().crate_dir.clone()
}

// guide:begin rust-test
use toolhost::testing::{FakeProcesses, Script};

/// A plugin directory holding the built component and its manifest, as `--plugins` wants
/// them.
fn plugins_dir(policy_crate: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let built = policy_crate.join("target/wasm32-wasip2/release/my_policy.wasm");
    std::fs::copy(built, dir.path().join("my_policy.wasm")).expect("the policy is built");
    let manifest = policy_crate.join("my_policy.toml");
    std::fs::copy(manifest, dir.path().join("my_policy.toml")).expect("its manifest");
    dir
}

#[tokio::test]
async fn git_status_runs_git_and_git_push_is_refused() {
    let plugins = plugins_dir(&policy_crate());
    // `FakeProcesses::new()` returns an `Arc`: the host gets a clone, the test keeps one to
    // script processes and to see what the policy asked for.
    let fake = FakeProcesses::new();
    fake.push(Script::exits(0).output("## main\n M src/lib.rs\n"));
    let host = toolhost::ToolHost::builder()
        .bundled_policy(None)
        .plugin_dir(plugins.path())
        .process_backend(fake.clone())
        .build()
        .await
        .expect("the policy loads");

    let status = host
        .call("test", "git_status", "{}")
        .await
        .expect("a result");
    assert!(status.contains(r#""exit_code":0"#), "{status}");
    assert_eq!(
        fake.starts()[0].request.command,
        "git status --short --branch"
    );

    let refused = host
        .call("test", "execute", r#"{"command":"git push"}"#)
        .await
        .expect_err("git push is refused");
    assert!(
        refused.to_string().contains("pushing is for the user"),
        "{refused}"
    );
    assert_eq!(fake.starts().len(), 1, "git push never started");
    host.shutdown().await;
}
// guide:end rust-test

/// Lines strictly between the lines ending in `guide:begin NAME` and `guide:end NAME`.
fn region(text: &str, name: &str) -> Option<String> {
    let mut lines = text.lines();
    lines.find(|l| l.trim_end().ends_with(&format!("guide:begin {name}")))?;
    let mut body = String::new();
    for line in lines {
        if line.trim_end().ends_with(&format!("guide:end {name}")) {
            return Some(body);
        }
        body.push_str(line);
        body.push('\n');
    }
    None
}

/// Every code block is run, written, compared or checked: a block without a marker is a `sh`
/// block for reading; `source:` blocks are exactly the code they name; the examples hold what
/// the Rust testing path needs.
#[test]
fn every_code_block_of_the_guide_is_checked() {
    for block in blocks() {
        let at = format!("{}:{}", guide_path().display(), block.line);
        match block.marker.as_ref().map(|(k, n)| (k.as_str(), n.as_str())) {
            None => assert_eq!(
                block.lang, "sh",
                "{at}: a {} block without a marker",
                block.lang
            ),
            Some(("run", _)) => assert_eq!(block.lang, "sh", "{at}"),
            Some(("output", _)) => assert_eq!(block.lang, "text", "{at}"),
            Some(("file", _) | ("example", _)) => {}
            Some(("source", source)) => {
                let (path, name) = source.split_once('#').expect("PATH#REGION");
                let text = std::fs::read_to_string(repo_root().join(path))
                    .unwrap_or_else(|e| panic!("{at}: {path}: {e}"));
                let expected =
                    region(&text, name).unwrap_or_else(|| panic!("{path} has no region {name}"));
                assert!(
                    block.body == expected,
                    "the code block at {at} differs from {source}; copy the region into the \
                     guide:\n{expected}"
                );
            }
            Some((kind, name)) => panic!("{at}: unknown marker `{kind}: {name}`"),
        }
    }
    assert_eq!(
        marked("run"),
        ["scaffold", "build", "test", "serve", "install"]
    );
    assert_eq!(marked("file"), ["src/lib.rs", "scenarios/policy.toml"]);
    assert_eq!(marked("output"), ["test", "test-failing"]);
    assert_eq!(marked("source"), ["tests/guide.rs#rust-test"]);
    assert_eq!(
        marked("example"),
        ["rust-test-dependencies", "policy-crate"]
    );

    // The test crate's dependencies: the toolhost library from a checkout's host/ directory,
    // and every crate the example uses.
    let dependencies = &block("example", "rust-test-dependencies").body;
    assert!(
        dependencies.starts_with("[dev-dependencies]\n"),
        "{dependencies}"
    );
    let dependency = |name: &str| -> &str {
        dependencies
            .lines()
            .find(|line| line.starts_with(&format!("{name} = ")))
            .unwrap_or_else(|| panic!("{name} is a dev-dependency: {dependencies}"))
    };
    let toolhost = dependency("toolhost");
    assert!(
        toolhost.contains("{ path = \"") && toolhost.contains("/host\" }"),
        "{toolhost}"
    );
    let host_manifest =
        std::fs::read_to_string(repo_root().join("host/Cargo.toml")).expect("host/Cargo.toml");
    assert!(host_manifest.contains("\nname = \"toolhost\"\n"));
    let example = &block("source", "tests/guide.rs#rust-test").body;
    for krate in ["toolhost", "tokio", "tempfile"] {
        assert!(example.contains(&format!("{krate}::")), "{krate}");
        dependency(krate);
    }
    let tokio = dependency("tokio");
    assert!(
        tokio.contains("\"macros\"") && tokio.contains("\"rt-multi-thread\""),
        "#[tokio::test] needs macros and a runtime: {tokio}"
    );
    // The test crate is made beside the policy crate, which `policy_crate()` names.
    let crate_name = scaffolded_dir();
    assert!(
        guide().contains(&format!("cargo new --lib {crate_name}-tests\n")),
        "the guide makes the test crate beside {crate_name}"
    );
    let policy_crate = &block("example", "policy-crate").body;
    assert!(
        policy_crate.contains(&format!(".join(\"../{crate_name}\")")),
        "{policy_crate}"
    );
}

/// The policy crate `toolhost new-policy` makes, untouched: it is formatted, builds offline
/// with its own lock file as it is (`--locked`) and without a warning, its scenarios pass, and
/// it refuses to be written over. On its component, the `[config]` rows of the guide's manifest reference
/// are checked against the SDK: exactly its keys, each with its default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_policy_builds_offline_and_passes_its_scenarios() {
    let dir = work_dir();
    let name = "plain-policy";
    let new = reader_command(toolhost_bin().to_str().expect("UTF-8 path"), dir.path())
        .args(["new-policy", name, "--dir", "."])
        .output()
        .expect("run toolhost new-policy");
    succeeded("toolhost new-policy", &new);
    let crate_dir = dir.path().join(name);
    let again = reader_command(toolhost_bin().to_str().expect("UTF-8 path"), dir.path())
        .args(["new-policy", name])
        .output()
        .expect("run toolhost new-policy");
    assert_eq!(again.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("already exists"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );

    std::os::unix::fs::symlink(shared_target(), crate_dir.join("target")).expect("link");
    succeeded("cargo fmt --check", &sh("cargo fmt --check", &crate_dir));
    let lock = std::fs::read_to_string(crate_dir.join("Cargo.lock")).expect("Cargo.lock");
    let build = sh(
        "cargo build --release --target wasm32-wasip2 --offline --locked",
        &crate_dir,
    );
    succeeded("building the new policy", &build);
    let stderr = String::from_utf8_lossy(&build.stderr);
    assert!(!stderr.contains("warning"), "the build warns:\n{stderr}");
    assert_eq!(
        std::fs::read_to_string(crate_dir.join("Cargo.lock")).expect("Cargo.lock"),
        lock,
        "cargo left the lock file as it is"
    );
    let test = sh(
        "toolhost test target/wasm32-wasip2/release/plain_policy.wasm scenarios/ --manifest plain_policy.toml",
        &crate_dir,
    );
    succeeded("its scenarios", &test);
    assert!(
        String::from_utf8_lossy(&test.stdout).contains(" passed, 0 failed"),
        "{}",
        String::from_utf8_lossy(&test.stdout)
    );

    let wasm = crate_dir.join("target/wasm32-wasip2/release/plain_policy.wasm");
    config_reference_is_the_sdk_s(&wasm).await;
    grant_max_timeout_is_as_the_guide_says(&wasm).await;
    // The manifest's commented [config] shows the same standard values.
    let manifest = std::fs::read_to_string(crate_dir.join("plain_policy.toml")).expect("manifest");
    let commented: String = manifest[manifest.find("\n[config]\n").expect("[config]")..]
        .lines()
        .filter_map(|line| line.strip_prefix("# "))
        .filter(|line| line.contains(" = "))
        .map(|line| format!("{}\n", line.split("  #").next().unwrap_or(line).trim()))
        .collect();
    assert_eq!(commented.lines().count(), 5, "{commented}");
    assert_eq!(
        tools_with(&wasm, &commented).await.expect("loads"),
        tools_with(&wasm, "").await.expect("loads"),
        "the manifest's commented [config] is the standard:\n{commented}"
    );
}

/// The tools of the component `wasm` with `config` as its manifest's `[config]`, on the fake
/// process capability.
async fn tools_with(wasm: &Path, config: &str) -> Result<Vec<toolhost::ToolInfo>, String> {
    let (host, _dir) = host_with(wasm, &config_manifest(config), FakeProcesses::new()).await?;
    let tools = host.tools();
    host.shutdown().await;
    Ok(tools)
}

/// A manifest granting the process capability, with `config` as its `[config]`.
fn config_manifest(config: &str) -> String {
    format!("[grants]\nprocess = true\n[config]\n{config}")
}

/// A host loading only the component `wasm` with `manifest`, on `fake`.
async fn host_with(
    wasm: &Path,
    manifest: &str,
    fake: std::sync::Arc<FakeProcesses>,
) -> Result<(toolhost::ToolHost, tempfile::TempDir), String> {
    let dir = tempfile::tempdir().expect("a plugins directory");
    std::fs::copy(wasm, dir.path().join("p.wasm")).expect("copy the component");
    std::fs::write(dir.path().join("p.toml"), manifest).expect("write the manifest");
    let host = toolhost::ToolHost::builder()
        .bundled_policy(None)
        .plugin_dir(dir.path())
        .process_backend(fake)
        .cache_dir(Some(test_cache_dir()))
        .build()
        .await
        .map_err(|e| format!("{e:#}"))?;
    Ok((host, dir))
}

/// How many processes `process_list` shows after `runs` commands ended, with `config`.
async fn listed_after(wasm: &Path, config: &str, runs: usize) -> usize {
    let fake = FakeProcesses::new();
    fake.set_default(Script::exits(0));
    let (host, _dir) = host_with(wasm, &config_manifest(config), fake)
        .await
        .expect("loads");
    for _ in 0..runs {
        host.call("t", "execute", r#"{"command":"true"}"#)
            .await
            .expect("runs");
    }
    let listed: Value =
        serde_json::from_str(&host.call("t", "process_list", "{}").await.expect("lists"))
            .expect("JSON");
    host.shutdown().await;
    listed["processes"].as_array().expect("processes").len()
}

/// The `config.*` rows of the guide's manifest reference: the keys the SDK knows (a
/// policy's load with an unknown one names them), and each default is the SDK's standard:
/// the component of a policy that keeps the standard settings behaves the same with the
/// documented defaults as its `[config]` and without.
async fn config_reference_is_the_sdk_s(wasm: &Path) {
    let text = guide();
    let section = &text[text
        .find("\n## Manifest reference\n")
        .expect("the manifest reference")..];
    let rows: Vec<(String, String)> = section
        .lines()
        .filter_map(|line| line.strip_prefix("| `config."))
        .map(|rest| {
            let (key, rest) = rest.split_once("` |").expect("| `config.KEY` | DEFAULT |");
            let default = rest.split('|').next().unwrap_or_default().trim();
            let literal = default
                .strip_prefix('`')
                .and_then(|d| d.strip_suffix('`'))
                .unwrap_or_else(|| panic!("config.{key}: the default is `VALUE`"));
            (key.to_owned(), literal.to_owned())
        })
        .collect();
    let documented: BTreeSet<&str> = rows.iter().map(|(key, _)| key.as_str()).collect();

    let refused = tools_with(wasm, "bogus_key = 1\n")
        .await
        .expect_err("an unknown [config] key refuses the load");
    let known: BTreeSet<&str> = refused
        .split_once("known: ")
        .unwrap_or_else(|| panic!("the error names the known keys: {refused}"))
        .1
        .lines()
        .next()
        .unwrap_or_default()
        .split(", ")
        .map(str::trim)
        .collect();
    assert_eq!(documented, known, "the [config] keys");

    let defaults: String = rows
        .iter()
        .map(|(key, value)| format!("{key} = {value}\n"))
        .collect();
    let standard = tools_with(wasm, "").await.expect("loads");
    assert_eq!(
        tools_with(wasm, &defaults).await.expect("loads"),
        standard,
        "the documented defaults are the standard settings:\n{defaults}"
    );
    // The descriptions show the settings, so a wrong default would have shown.
    for other in [
        "default_timeout = \"7s\"",
        "max_timeout = \"7m\"",
        "output_cap_bytes = 7168",
        "on_timeout = \"kill\"",
    ] {
        assert_ne!(
            tools_with(wasm, other).await.expect("loads"),
            standard,
            "{other} shows in the descriptions"
        );
    }
    // `list_limit` shows in what `process_list` lists.
    let limit: usize = rows
        .iter()
        .find(|(key, _)| key == "list_limit")
        .and_then(|(_, value)| value.parse().ok())
        .expect("a list_limit default");
    assert_eq!(
        listed_after(wasm, "", limit + 1).await,
        listed_after(wasm, &format!("list_limit = {limit}\n"), limit + 1).await,
        "list_limit's default is {limit}"
    );
}

/// The guide's example of a grant's `max_timeout` below the policy's: with the standard
/// settings and `max_timeout = "15m"` under `[grants]`, a call asking for 20 minutes gets 15,
/// and the result says why.
async fn grant_max_timeout_is_as_the_guide_says(wasm: &Path) {
    let flat = guide().split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains(
            "With `max_timeout = \"15m\"` under `[grants]` and the standard settings, a call \
             asking for `\"20m\"` gets 15 minutes."
        ),
        "the guide's example"
    );
    let fake = FakeProcesses::new();
    fake.push(Script::never_exits().output("building\n"));
    let manifest = "[grants]\nprocess = true\nmax_timeout = \"15m\"\n";
    let (host, _dir) = host_with(wasm, manifest, fake).await.expect("loads");
    let result: Value = serde_json::from_str(
        &host
            .call("t", "execute", r#"{"command":"make","timeout":"20m"}"#)
            .await
            .expect("a result"),
    )
    .expect("JSON");
    host.shutdown().await;
    assert_eq!(result["error"], "timed out after 15m", "{result}");
    let note = result["note"].as_str().unwrap_or_default();
    assert!(
        note.contains("The host limits a single wait to about 15m"),
        "{result}"
    );
}

/// Every relative link of the documentation (`README.md`, `ARCHITECTURE.md`, `CHANGELOG.md` and
/// `docs/*.md`) leads somewhere: its file exists, relative to the linking file's directory, and
/// its `#anchor`, on its own or after a Markdown file, names a heading of that file as GitHub
/// makes anchors of headings. Links in fenced code blocks and code spans are not links; web and
/// mail links are not checked.
#[test]
fn every_relative_link_and_anchor_in_the_docs_resolves() {
    /// Whether `line` opens or closes a fenced code block: its fence character and length.
    fn fence(line: &str) -> Option<(char, usize)> {
        let trimmed = line.trim_start();
        let c = trimmed.chars().next().filter(|c| *c == '`' || *c == '~')?;
        let len = trimmed.chars().take_while(|x| *x == c).count();
        (len >= 3).then_some((c, len))
    }

    /// The lines of `text` outside fenced code blocks (a line inside one is empty).
    fn prose_lines(text: &str) -> Vec<&str> {
        let mut open: Option<(char, usize)> = None;
        let mut lines = Vec::new();
        for line in text.lines() {
            match (open, fence(line)) {
                (None, Some(opening)) => {
                    open = Some(opening);
                    lines.push("");
                }
                (Some((c, len)), Some((c2, len2)))
                    if c == c2 && len2 >= len && line.trim().chars().all(|x| x == c) =>
                {
                    open = None;
                    lines.push("");
                }
                (Some(_), _) => lines.push(""),
                (None, None) => lines.push(line),
            }
        }
        lines
    }

    /// `text` without its code spans (a run of backticks up to the next run of as many).
    fn without_code_spans(text: &str) -> String {
        let chars: Vec<char> = text.chars().collect();
        let run = |at: usize| chars[at..].iter().take_while(|c| **c == '`').count();
        let mut out = String::new();
        let mut i = 0;
        while i < chars.len() {
            if chars[i] != '`' {
                out.push(chars[i]);
                i += 1;
                continue;
            }
            let opening = run(i);
            let mut j = i + opening;
            let mut close = None;
            while j < chars.len() {
                if chars[j] == '`' {
                    let n = run(j);
                    if n == opening {
                        close = Some(j + n);
                        break;
                    }
                    j += n;
                } else {
                    j += 1;
                }
            }
            match close {
                // A code span reads as one word.
                Some(end) => {
                    out.push_str("code");
                    i = end;
                }
                // No closing run: the backticks are literal.
                None => {
                    out.extend(&chars[i..i + opening]);
                    i += opening;
                }
            }
        }
        out
    }

    /// The targets of the inline links `[text](target)` (and images) and of the link
    /// definitions `[label]: target` in `text`, outside code.
    fn link_targets(text: &str) -> Vec<String> {
        let mut targets = Vec::new();
        let lines = prose_lines(text);
        // Paragraphs: a link or a code span may wrap, but never crosses a blank line.
        for paragraph in lines.split(|line| line.trim().is_empty()) {
            let paragraph = without_code_spans(&paragraph.join("\n"));
            for line in paragraph.lines() {
                let line = line.trim_start();
                if let Some(rest) = line.strip_prefix('[')
                    && let Some((label, target)) = rest.split_once("]:")
                    && !label.contains(']')
                {
                    let target = target.split_whitespace().next().unwrap_or_default();
                    targets.push(
                        target
                            .trim_start_matches('<')
                            .trim_end_matches('>')
                            .to_owned(),
                    );
                }
            }
            let chars: Vec<char> = paragraph.chars().collect();
            let mut opened = 0usize;
            let mut i = 0;
            while i < chars.len() {
                match chars[i] {
                    '\\' => i += 1,
                    '[' => opened += 1,
                    ']' if opened > 0 => {
                        opened -= 1;
                        if chars.get(i + 1) == Some(&'(') {
                            // The target ends at the parenthesis that balances the opening one.
                            let mut depth = 0usize;
                            let Some(end) = (i + 1..chars.len()).find(|&k| {
                                match chars[k] {
                                    '(' => depth += 1,
                                    ')' => depth -= 1,
                                    _ => {}
                                }
                                depth == 0
                            }) else {
                                break;
                            };
                            let inside: String = chars[i + 2..end].iter().collect();
                            let inside = inside.trim();
                            let target = match inside.strip_prefix('<') {
                                Some(rest) => rest.split('>').next().unwrap_or_default(),
                                None => inside.split_whitespace().next().unwrap_or_default(),
                            };
                            targets.push(target.to_owned());
                            i = end;
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        targets
    }

    /// GitHub's anchor of a heading: lower case, every character but letters, digits, spaces,
    /// `-` and `_` removed, spaces made `-`.
    fn slug(heading: &str) -> String {
        heading
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect()
    }

    /// The anchors of the headings of `text`: a heading repeated gets `-1`, `-2`, ...
    fn anchors(text: &str) -> BTreeSet<String> {
        let mut anchors = BTreeSet::new();
        let mut counts = std::collections::HashMap::<String, usize>::new();
        for line in prose_lines(text) {
            let indent = line.len() - line.trim_start_matches(' ').len();
            let hashes = line.trim_start().chars().take_while(|c| *c == '#').count();
            let rest = &line.trim_start()[hashes..];
            if indent > 3
                || !(1..=6).contains(&hashes)
                || !(rest.is_empty() || rest.starts_with(' '))
            {
                continue;
            }
            // The heading's text as rendered: no closing hashes, no code or link markup.
            let mut text = rest.trim().trim_end_matches('#').trim_end().to_owned();
            text = text.replace('`', "");
            while let Some(open) = text.find("](") {
                let Some(close) = text[open..].find(')') else {
                    break;
                };
                text.replace_range(open..open + close + 1, "");
            }
            let base = slug(&text);
            let mut anchor = base.clone();
            while anchors.contains(&anchor) {
                let count = counts.entry(base.clone()).or_insert(0);
                *count += 1;
                anchor = format!("{base}-{count}");
            }
            anchors.insert(anchor);
        }
        anchors
    }

    let root = repo_root();
    let read = |path: &Path| {
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
    };
    let mut files: Vec<PathBuf> = ["README.md", "ARCHITECTURE.md", "CHANGELOG.md"]
        .iter()
        .map(|name| root.join(name))
        .collect();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("read docs/")
        .map(|entry| entry.expect("a docs/ entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    docs.sort();
    assert!(!docs.is_empty(), "docs/ holds Markdown files");
    files.extend(docs);

    let mut broken = Vec::new();
    let mut checked = 0;
    for file in &files {
        let shown = file
            .strip_prefix(root)
            .unwrap_or(file)
            .display()
            .to_string();
        for target in link_targets(&read(file)) {
            if ["http://", "https://", "mailto:"]
                .iter()
                .any(|scheme| target.starts_with(scheme))
            {
                continue;
            }
            checked += 1;
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target.as_str(), None),
            };
            let dest = if path.is_empty() {
                file.clone()
            } else {
                file.parent().expect("a directory").join(path)
            };
            if (path.is_empty() && anchor.is_none()) || !dest.exists() {
                broken.push(format!("{shown} -> {target}: no such file"));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if dest.extension().is_some_and(|ext| ext == "md") {
                if !anchors(&read(&dest)).contains(anchor) {
                    broken.push(format!("{shown} -> {target}: no such heading"));
                }
            } else if dest.is_dir() {
                broken.push(format!("{shown} -> {target}: an anchor in a directory"));
            }
        }
    }
    assert!(checked > 0, "no relative link found in {files:?}");
    assert!(
        broken.is_empty(),
        "{} broken link(s) in the documentation:\n{}",
        broken.len(),
        broken.join("\n")
    );
}
