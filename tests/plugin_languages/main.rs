//! The example plugins written in other languages than Rust (`guest-tools/python/word_count`
//! and `guest-tools/js/word_count`), built with their own toolchains and run in the host.
//!
//! Each test builds its example into a temporary plugin directory, as the example's README
//! says.
//! `toolhost test` must then pass the example's own scenario files.
//! Then `toolhost --policy none --plugins DIR serve` is driven over stdio by the hand-written
//! MCP client, once with the example in DIR from the start and once with it dropped into DIR
//! while the server runs.
//! `tools/list` must offer the tool with its schemas and hints.
//! A call must return the right counts as structured content.
//! A call without `text`, and one whose `text` is not a string, must be tool errors.
//! Served without the component cache, the Python example must not delay `initialize`: its
//! tool arrives with `notifications/tools/list_changed` after its compile.
//!
//! The toolchains are installed on the first run into the target directory
//! (`<target>/plugin-toolchains/`, see [`toolchains`]) and reused after that.
//! The first install needs `python3` with `venv` and PyPI, or `node` 20+, `npm` and the npm
//! registry.
//! Where one of those is missing, the test that needs it prints what is missing and passes
//! without checking anything.
//! `TOOLHOST_SKIP_PLUGIN_LANGUAGES=1` skips both tests.
//! Once a toolchain is installed, every failure to build or to serve fails the test.
//!
//! Neither componentize-py nor componentize-js builds byte-for-byte the same component twice.
//! So each run compiles its fresh build once, in `toolhost test` (about 10 s of CPU for a
//! 12-18 MB component).
//! The compiled code goes to the MCP tests' component cache ([`toolhost_e2e::cache_env`]).
//! `serve` then loads it from there.
//! A run first removes the cached code of the example's earlier builds, which no later run
//! can use, so the cache does not grow by 35 MB a run.

mod guides;
mod scaffolded;
mod toolchains;

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use toolchains::{Unavailable, copy_files, printed, run};
use toolhost_e2e::mcp_client::{StdioClient, structured, tool_error};
use toolhost_e2e::{cache_env, repo_root, toolhost_bin};

/// The variable that skips these tests when set to `1`.
const SKIP_VARIABLE: &str = "TOOLHOST_SKIP_PLUGIN_LANGUAGES";

/// How long building one component may take (each takes 5-10 s).
const BUILD_LIMIT: Duration = Duration::from_secs(120);

/// How long `toolhost test` may take on an example's scenarios (a first compile included).
const SCENARIOS_LIMIT: Duration = Duration::from_secs(90);

/// The text that the MCP call of each test counts.
const TEXT: &str = "The quick brown fox\njumps over the lazy dog.\nSphinx of black quartz";

/// The counts of [`TEXT`]: the longest word is the first of the 6-letter ones.
fn counts() -> Value {
    json!({"words": 13, "lines": 3, "longest": "Sphinx"})
}

/// Whether the tests are skipped by [`SKIP_VARIABLE`] (said on stderr).
fn skip_requested(test: &str) -> bool {
    let skip = std::env::var_os(SKIP_VARIABLE).is_some_and(|value| value == "1");
    if skip {
        eprintln!("SKIPPED: {test} ({SKIP_VARIABLE}=1)");
    }
    skip
}

/// Say loudly on stderr that `test` is skipped, and why.
fn announce_skip(test: &str, unavailable: &Unavailable) {
    eprintln!(
        "\n*** SKIPPED: {test}: its toolchain cannot be installed on this machine ***\n\
         *** {} ***\n\
         *** nothing was checked; {SKIP_VARIABLE}=1 skips it without trying ***\n{}",
        unavailable.reason, unavailable.detail
    );
}

/// An example plugin in the repository.
struct Example {
    /// Its directory under `guest-tools/`.
    dir: PathBuf,
    /// The name of its one tool, which is also its component's name.
    tool: &'static str,
}

impl Example {
    /// The example in `guest-tools/RELATIVE`, whose tool is `tool`.
    fn new(relative: &str, tool: &'static str) -> Example {
        Example {
            dir: repo_root().join("guest-tools").join(relative),
            tool,
        }
    }

    /// Its scenario files' directory.
    fn scenarios(&self) -> PathBuf {
        self.dir.join("scenarios")
    }
}

/// The repository's WIT directory, which the examples are built against.
fn wit_dir() -> PathBuf {
    repo_root().join("wit")
}

/// A temporary directory with an empty plugin directory `plugins/` in it.
fn workspace() -> (tempfile::TempDir, PathBuf) {
    let work = tempfile::tempdir().expect("a temporary directory");
    let plugins = work.path().join("plugins");
    std::fs::create_dir(&plugins).expect("create the plugin directory");
    (work, plugins)
}

/// Run a build `command` (described as `what`); panic with its output unless it succeeded
/// and wrote `wasm`.
fn build(command: &mut Command, what: &str, wasm: &Path) {
    let output =
        run(command, what, BUILD_LIMIT).unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{}",
        output.status,
        printed(&output)
    );
    let size = std::fs::metadata(wasm)
        .unwrap_or_else(|e| panic!("{what} wrote no {}: {e}", wasm.display()))
        .len();
    eprintln!("{what}: {} is {size} bytes", wasm.display());
}

/// Remove from the MCP tests' component cache the compiled code of earlier builds of the
/// plugin whose tool is `tool`: the entries whose cached tool list names the tool.
fn forget_earlier_builds(tool: &str) {
    let dir = PathBuf::from(cache_env().1).join("toolhost/components");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    let wanted = format!("\"name\":\"{tool}\"");
    let mut keys = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".tools.json") {
            continue;
        }
        let names_tool =
            std::fs::read_to_string(entry.path()).is_ok_and(|text| text.contains(&wanted));
        if let (true, Some((key, _))) = (names_tool, name.split_once('.')) {
            keys.push(key.to_owned());
        }
    }
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if keys.iter().any(|key| name.starts_with(&format!("{key}."))) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// `toolhost test WASM SCENARIOS` passes every scenario of the example.
fn scenarios_pass(example: &Example, wasm: &Path) {
    let mut command = Command::new(toolhost_bin());
    command.arg("test").arg(wasm).arg(example.scenarios());
    toolhost_test_passes(&mut command, example.tool);
}

/// `command`, a `toolhost test` of the plugin `what`, passes every scenario it runs, and
/// runs some.
fn toolhost_test_passes(command: &mut Command, what: &str) {
    let (key, value) = cache_env();
    let output = run(
        command.env(key, value).env("TOOLHOST_LOG", "error"),
        "toolhost test",
        SCENARIOS_LIMIT,
    )
    .expect("run toolhost test");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    assert!(
        output.status.success() && last.ends_with(" passed, 0 failed") && !last.starts_with("0 "),
        "toolhost test {what} failed or ran no scenario ({}):\n{}",
        output.status,
        printed(&output)
    );
    eprintln!("toolhost test {what}: {last}");
}

/// `toolhost --policy none --plugins PLUGINS serve` offers the example's tool over MCP stdio
/// and answers calls and bad calls.
async fn serves(example: &Example, plugins: &Path) {
    let tool = example.tool;
    let plugins = plugins.to_str().expect("the temporary path is UTF-8");
    let started = Instant::now();
    let mut client = StdioClient::spawn(&["--policy", "none", "--plugins", plugins]);
    let init = client.initialize().await;
    assert!(init.get("result").is_some(), "initialize failed: {init}");

    let list = client.request("tools/list", json!({})).await;
    let tools = list["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("tools/list has no tools: {list}"));
    let listed = tools
        .iter()
        .find(|t| t["name"] == tool)
        .unwrap_or_else(|| panic!("tools/list does not offer {tool}: {list}"));
    assert_eq!(
        listed["inputSchema"],
        json!({
            "type": "object",
            "properties": {"text": {"type": "string", "description": "The text to count."}},
            "required": ["text"],
            "additionalProperties": false,
        }),
        "{listed}"
    );
    assert_eq!(
        listed["outputSchema"]["required"],
        json!(["words", "lines", "longest"]),
        "{listed}"
    );
    for (property, kind) in [
        ("words", "integer"),
        ("lines", "integer"),
        ("longest", "string"),
    ] {
        assert_eq!(
            listed["outputSchema"]["properties"][property]["type"], kind,
            "{listed}"
        );
    }
    assert!(
        listed["title"]
            .as_str()
            .is_some_and(|title| title.starts_with("Count words")),
        "{listed}"
    );
    assert_eq!(listed["annotations"]["readOnlyHint"], true, "{listed}");
    assert_eq!(listed["annotations"]["openWorldHint"], false, "{listed}");

    let result = client.call_tool(tool, json!({"text": TEXT})).await;
    assert_eq!(structured(&result), counts(), "{result}");

    let missing = tool_error(&client.call_tool(tool, json!({})).await);
    assert!(missing.contains("`text` is missing"), "{missing}");
    let wrong = tool_error(&client.call_tool(tool, json!({"text": 7})).await);
    assert!(wrong.contains("`text` must be a string"), "{wrong}");

    client.close_stdin();
    assert_eq!(
        client.wait_exit(Duration::from_secs(10)).await,
        Some(0),
        "toolhost serve did not exit cleanly when its client left"
    );
    eprintln!(
        "toolhost serve {tool}: MCP checks passed in {:.1?}",
        started.elapsed()
    );
}

/// Check the built example in `plugins`: its scenarios, then MCP.
/// Served without the component cache (`--no-cache`), the example is not compiled yet when
/// `initialize` is answered: its tool is not listed at first, and arrives with
/// `notifications/tools/list_changed` once the host compiled it in the background.
async fn arrives_after_its_compile(example: &Example, plugins: &Path) {
    let tool = example.tool;
    let plugins = plugins.to_str().expect("the temporary path is UTF-8");
    let started = Instant::now();
    let mut client = StdioClient::spawn(&["--no-cache", "--policy", "none", "--plugins", plugins]);
    let init = client.initialize().await;
    assert!(init.get("result").is_some(), "initialize failed: {init}");
    let answered = started.elapsed();
    let named = |list: &Value| {
        list["result"]["tools"]
            .as_array()
            .is_some_and(|tools| tools.iter().any(|t| t["name"] == tool))
    };
    let first = client.request("tools/list", json!({})).await;
    assert!(
        !named(&first),
        "{tool} was listed before its compile could finish: {first}"
    );
    let announced = client
        .wait_for("notifications/tools/list_changed", BUILD_LIMIT)
        .await;
    assert!(announced, "no notifications/tools/list_changed for {tool}");
    let list = client.request("tools/list", json!({})).await;
    assert!(
        named(&list),
        "{tool} is not listed after the change: {list}"
    );
    let result = client.call_tool(tool, json!({"text": TEXT})).await;
    assert_eq!(structured(&result), counts(), "{result}");
    eprintln!(
        "toolhost serve --no-cache {tool}: initialize answered after {answered:.1?}, the tool \
         listed after {:.1?}",
        started.elapsed()
    );
    client.close_stdin();
    let _ = client.wait_exit(Duration::from_secs(10)).await;
}

/// The built example dropped into the plugin directory of a server already running (written
/// beside, then renamed in): its tool arrives with `notifications/tools/list_changed`, and a
/// call works. The compiled code is in the cache by now, so the load is quick.
async fn dropped_into_a_running_server(example: &Example, wasm: &Path) {
    let tool = example.tool;
    let empty = tempfile::tempdir().expect("an empty plugin directory");
    let dir = empty.path().to_str().expect("the temporary path is UTF-8");
    let mut client = StdioClient::spawn(&["--policy", "none", "--plugins", dir]);
    let init = client.initialize().await;
    assert!(init.get("result").is_some(), "initialize failed: {init}");
    let partial = empty.path().join(format!(".{tool}.partial"));
    std::fs::copy(wasm, &partial).expect("copy the component");
    std::fs::rename(&partial, empty.path().join(format!("{tool}.wasm"))).expect("rename it in");
    let announced = client
        .wait_for("notifications/tools/list_changed", BUILD_LIMIT)
        .await;
    assert!(
        announced,
        "no notifications/tools/list_changed after dropping {tool} in"
    );
    let result = client.call_tool(tool, json!({"text": TEXT})).await;
    assert_eq!(structured(&result), counts(), "{result}");
    client.close_stdin();
    let _ = client.wait_exit(Duration::from_secs(10)).await;
    eprintln!("toolhost serve {tool}: loaded when dropped into a running server");
}

fn check(example: &Example, plugins: &Path) {
    let wasm = plugins.join(format!("{}.wasm", example.tool));
    scenarios_pass(example, &wasm);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(serves(example, plugins));
    runtime.block_on(dropped_into_a_running_server(example, &wasm));
}

#[test]
fn python_plugin_builds_and_serves() {
    let test = "python_plugin_builds_and_serves";
    if skip_requested(test) {
        return;
    }
    let started = Instant::now();
    let toolchain = match toolchains::python() {
        Ok(toolchain) => toolchain,
        Err(unavailable) => return announce_skip(test, &unavailable),
    };
    let example = Example::new("python/word_count", "py_word_count");
    forget_earlier_builds(example.tool);
    let (work, plugins) = workspace();
    // componentize-py writes __pycache__ beside the module: build from a copy.
    let source = work.path().join("source");
    std::fs::create_dir(&source).expect("create the source directory");
    copy_files(&example.dir, &source, &["app.py"]);
    let wasm = plugins.join("py_word_count.wasm");
    build(
        Command::new(&toolchain.componentize_py)
            .arg("-d")
            .arg(wit_dir())
            .args(["-w", "tools", "componentize", "app", "-o"])
            .arg(&wasm)
            .current_dir(&source),
        "componentize-py componentize",
        &wasm,
    );
    check(&example, &plugins);
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(arrives_after_its_compile(&example, &plugins));
    eprintln!("{test}: passed in {:.1?}", started.elapsed());
}

#[test]
fn js_plugin_builds_and_serves() {
    let test = "js_plugin_builds_and_serves";
    if skip_requested(test) {
        return;
    }
    let started = Instant::now();
    let example = Example::new("js/word_count", "js_word_count");
    let toolchain = match toolchains::javascript(&example.dir) {
        Ok(toolchain) => toolchain,
        Err(unavailable) => return announce_skip(test, &unavailable),
    };
    forget_earlier_builds(example.tool);
    let (_work, plugins) = workspace();
    // The copy beside the installed packages, with the sources of this checkout.
    copy_files(&example.dir, &toolchain.dir, &["app.js", "build.mjs"]);
    let wasm = plugins.join("js_word_count.wasm");
    build(
        Command::new("node")
            .arg("build.mjs")
            .arg(&wasm)
            .arg(wit_dir())
            .current_dir(&toolchain.dir),
        "node build.mjs (componentize-js)",
        &wasm,
    );
    check(&example, &plugins);
    eprintln!("{test}: passed in {:.1?}", started.elapsed());
}
