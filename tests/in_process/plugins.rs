//! Plugin directories, manifests and hot swap: grants are enforced by the host, config reaches
//! the guest, and swapping components in a running host changes behaviour without a restart.

use std::path::Path;
use std::time::Duration;
use toolhost::testing::{FakeProcesses, Script};
use toolhost::{CallError, ToolHost, bundled};
use toolhost_e2e::{
    Gate, future_version_component, json, legacy_policy_component, policy_0_2_0_component,
    policy_0_3_0_component, test_cache_dir, tools_0_4_0_component, tools_0_5_0_component,
};

const GRANT: &str = "[grants]\nprocess = true\n";

fn install(dir: &Path, name: &str, bytes: &[u8], manifest: Option<&str>) {
    // Write beside, then rename: the watcher must never see a half-written component.
    let tmp = dir.join(format!(".{name}.partial"));
    std::fs::write(&tmp, bytes).expect("write component");
    if let Some(text) = manifest {
        std::fs::write(dir.join(format!("{name}.toml")), text).expect("write manifest");
    }
    std::fs::rename(&tmp, dir.join(format!("{name}.wasm"))).expect("rename component");
}

async fn watching_host(dir: &Path, fake: std::sync::Arc<FakeProcesses>) -> ToolHost {
    ToolHost::builder()
        .bundled_policy(None)
        .plugin_dir(dir)
        .process_backend(fake)
        .cache_dir(Some(test_cache_dir()))
        .watch_plugins(true)
        .build()
        .await
        .expect("host builds")
}

/// Wait until the tool set changes (the watcher reloaded), or fail after a generous bound.
async fn next_change(changes: &mut tokio::sync::watch::Receiver<u64>) {
    tokio::time::timeout(Duration::from_secs(10), changes.changed())
        .await
        .expect("the host reloads after the plugin directory changes")
        .expect("host alive");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swapping_policies_changes_behaviour_without_restart() {
    let dir = tempfile::tempdir().expect("dir");
    let fake = FakeProcesses::new();
    let host = watching_host(dir.path(), fake.clone()).await;
    assert!(host.tools().is_empty());
    let mut changes = host.changes();

    install(dir.path(), "policy", bundled::DEFAULT.bytes, Some(GRANT));
    next_change(&mut changes).await;
    assert_eq!(host.tools().len(), 5);
    let dangerous = r#"{"command":"rm -rf /"}"#;
    host.call("s", "execute", dangerous)
        .await
        .expect("default policy runs it (on the fake)");
    assert_eq!(fake.starts().len(), 1);

    install(dir.path(), "policy", bundled::GUARDED.bytes, None);
    next_change(&mut changes).await;
    let refused = host
        .call("s", "execute", dangerous)
        .await
        .expect_err("guarded refuses");
    assert!(
        refused.to_string().contains("recursive-delete-root"),
        "{refused}"
    );
    assert_eq!(fake.starts().len(), 1, "nothing new ran");

    install(dir.path(), "policy", bundled::DEFAULT.bytes, None);
    next_change(&mut changes).await;
    host.call("s", "execute", dangerous)
        .await
        .expect("default again");
    assert_eq!(fake.starts().len(), 2);

    std::fs::remove_file(dir.path().join("policy.wasm")).expect("remove");
    next_change(&mut changes).await;
    assert!(host.tools().is_empty());
    let err = host.call("s", "execute", "{}").await.expect_err("gone");
    assert!(matches!(err, CallError::UnknownTool { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_replacement_keeps_the_previous_version_serving() {
    let dir = tempfile::tempdir().expect("dir");
    let fake = FakeProcesses::new();
    install(dir.path(), "policy", bundled::DEFAULT.bytes, Some(GRANT));
    let host = watching_host(dir.path(), fake.clone()).await;
    assert_eq!(host.tools().len(), 5);

    let mut changes = host.changes();
    install(dir.path(), "policy", b"\0asm garbage", None);
    // A broken file changes no tool, so nothing announces its rejection. Add a second plugin
    // after it: the reload that announces the new tools also read the broken policy.
    install(
        dir.path(),
        "other",
        &std::fs::read(toolhost_e2e::hostile_component()).expect("fixture"),
        Some(GRANT),
    );
    next_change(&mut changes).await;
    let tools: Vec<String> = host.tools().into_iter().map(|t| t.name).collect();
    assert!(
        tools.iter().any(|t| t == "execute") && tools.iter().any(|t| t == "spin"),
        "{tools:?}"
    );
    assert_eq!(tools.len(), 5 + 13, "{tools:?}");
    // A direct reload reports the same outcome.
    host.reload().await.expect("a lenient reload does not fail");
    assert_eq!(host.tools().len(), 5 + 13);
    host.call("s", "execute", r#"{"command":"echo still here"}"#)
        .await
        .expect("previous version still serves");
}

#[tokio::test]
async fn manifest_config_reaches_the_guest() {
    let dir = tempfile::tempdir().expect("dir");
    install(
        dir.path(),
        "policy",
        bundled::DEFAULT.bytes,
        Some("[grants]\nprocess = true\n[config]\ndefault_timeout = \"2s\"\n"),
    );
    let fake = FakeProcesses::new();
    fake.push(Script::never_exits());
    let host = toolhost_e2e::fake_host(dir.path(), fake.clone()).await;
    let r = json(
        &host
            .call("s", "execute", r#"{"command":"sleep 9"}"#)
            .await
            .expect("result"),
    );
    assert_eq!(r["error"], "timed out after 2s");

    // The description states the configured timeout.
    let execute = host
        .tools()
        .into_iter()
        .find(|t| t.name == "execute")
        .expect("execute");
    assert!(
        execute.description.contains("after 2s"),
        "{}",
        execute.description
    );

    // A typo in the config refuses the load with a message naming it; a running host keeps
    // the previous version serving.
    std::fs::write(
        dir.path().join("policy.toml"),
        "[grants]\nprocess = true\n[config]\ndefault_timout = \"2s\"\n",
    )
    .expect("write");
    host.reload().await.expect("a lenient reload does not fail");
    fake.push(Script::never_exits());
    let r = json(
        &host
            .call("s", "execute", r#"{"command":"sleep 9"}"#)
            .await
            .expect("result"),
    );
    assert_eq!(
        r["error"], "timed out after 2s",
        "previous version still serves"
    );
    let err = toolhost_e2e::fake_host_error(dir.path()).await;
    assert!(err.to_string().contains("default_timout"), "{err}");
    assert!(err.to_string().contains("refused to load"), "{err}");
}

#[tokio::test]
async fn workdir_root_is_enforced_by_the_host() {
    let root = tempfile::tempdir().expect("root");
    std::fs::create_dir(root.path().join("inside")).expect("mkdir");
    let dir = tempfile::tempdir().expect("dir");
    let manifest = format!(
        "[grants]\nprocess = true\nworkdir_root = {:?}\n",
        root.path()
    );
    install(
        dir.path(),
        "policy",
        bundled::DEFAULT.bytes,
        Some(&manifest),
    );
    let fake = FakeProcesses::new();
    let host = toolhost_e2e::fake_host(dir.path(), fake.clone()).await;

    let err = host
        .call("s", "execute", r#"{"command":"ls","workdir":"/"}"#)
        .await
        .expect_err("outside the root");
    assert!(err.to_string().contains("outside"), "{err}");
    let escape = host
        .call(
            "s",
            "execute",
            r#"{"command":"ls","workdir":"inside/../.."}"#,
        )
        .await
        .expect_err("escape via ..");
    assert!(escape.to_string().contains("outside"), "{escape}");
    assert!(fake.starts().is_empty());

    host.call("s", "execute", r#"{"command":"ls","workdir":"inside"}"#)
        .await
        .expect("inside");
    host.call("s", "execute", r#"{"command":"ls"}"#)
        .await
        .expect("default workdir");
    let starts = fake.starts();
    let canonical = root.path().canonicalize().expect("canon");
    assert_eq!(
        starts[0].request.workdir.as_deref(),
        Some(canonical.join("inside").as_path())
    );
    assert_eq!(
        starts[1].request.workdir.as_deref(),
        Some(canonical.as_path())
    );
}

#[tokio::test]
async fn a_component_of_another_wit_version_is_refused_naming_every_served_one() {
    let dir = tempfile::tempdir().expect("dir");
    let bytes = std::fs::read(future_version_component()).expect("fixture");
    install(dir.path(), "future", &bytes, None);
    let err = toolhost_e2e::fake_host_error(dir.path()).await;
    let message = err.to_string();
    assert!(
        message.contains("built against toolhost:plugin@0.99.0")
            && message.contains(
                "implements toolhost:plugin@0.6.0, @0.5.0, @0.4.0, @0.3.0, @0.2.0 and @0.1.0"
            ),
        "{message}"
    );
    assert!(message.contains("future"), "{message}");
}

#[tokio::test]
async fn a_plugin_tool_replaces_the_bundled_one() {
    let dir = tempfile::tempdir().expect("dir");
    install(dir.path(), "strict", bundled::GUARDED.bytes, Some(GRANT));
    let host = ToolHost::builder()
        .plugin_dir(dir.path())
        .process_backend(FakeProcesses::new())
        .cache_dir(Some(test_cache_dir()))
        .build()
        .await
        .expect("host");
    let tools = host.tools();
    assert_eq!(tools.len(), 5);
    assert!(tools.iter().all(|t| t.plugin == "strict"), "{tools:?}");
}

#[tokio::test]
async fn missing_plugin_dir_is_a_clear_error() {
    let err = ToolHost::builder()
        .plugin_dir("/no/such/plugins")
        .process_backend(FakeProcesses::new())
        .build()
        .await
        .err()
        .expect("error");
    assert!(err.to_string().contains("/no/such/plugins"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_max_timeout_grant_caps_waits_and_the_result_says_so() {
    let dir = tempfile::tempdir().expect("dir");
    install(
        dir.path(),
        "policy",
        bundled::DEFAULT.bytes,
        Some("[grants]\nprocess = true\nmax_timeout = \"1s\"\n"),
    );
    let (host, _state) = toolhost_e2e::real_plugin_host(dir.path()).await;
    let started = std::time::Instant::now();
    let r = json(
        &host
            .call("s", "execute", r#"{"command":"sleep 5","timeout":"4s"}"#)
            .await
            .expect("result"),
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the host cut the wait at 1s"
    );
    assert_eq!(r["error"], "timed out after 1s", "{r}");
    assert!(
        r["note"]
            .as_str()
            .expect("note")
            .contains("host limits a single wait"),
        "{r}"
    );
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_in_flight_finishes_on_the_version_it_started_with() {
    let dir = tempfile::tempdir().expect("dir");
    install(dir.path(), "policy", bundled::DEFAULT.bytes, Some(GRANT));
    let (host, _state) = toolhost_e2e::real_plugin_host(dir.path()).await;
    let host = std::sync::Arc::new(host);
    // The marked command runs once the call has its plugin and is inside it.
    let command = format!("sleep 5.{}", toolhost_e2e::marker());
    let slow = serde_json::json!({"command": command, "timeout": "1500ms"}).to_string();
    let in_flight = {
        let host = host.clone();
        let slow = slow.clone();
        tokio::spawn(async move { host.call("s", "execute", &slow).await })
    };
    assert!(
        toolhost_e2e::wait_present(&command, Duration::from_secs(20)).await,
        "the first call never started its command"
    );
    install(dir.path(), "policy", bundled::GUARDED.bytes, None);
    host.reload().await.expect("reload");

    // Started under the default policy: handed over at its timeout, not killed.
    let old = json(&in_flight.await.expect("join").expect("call"));
    assert!(old["background_process_id"].is_string(), "{old}");
    // A new call runs under the guarded policy: killed at its timeout.
    let new = json(&host.call("s", "execute", &slow).await.expect("call"));
    assert!(new.get("background_process_id").is_none(), "{new}");
    assert!(
        new["error"].as_str().expect("error").contains("killed"),
        "{new}"
    );
    host.shutdown().await;
}

// The contract versions: components built against the frozen 0.1.0, 0.2.0 and 0.3.0 keep working
// beside 0.4.0 ones; policies since 0.2.0 ask for confinement and are told what their commands
// get.

async fn host_with(
    dir: &Path,
    fake: std::sync::Arc<FakeProcesses>,
    sandbox: toolhost::sandbox::SandboxSettings,
    policy: Option<&str>,
) -> Result<ToolHost, toolhost::HostError> {
    let config = toolhost::process::ProcessManagerConfig {
        sandbox,
        ..Default::default()
    };
    ToolHost::builder()
        .bundled_policy(policy)
        .plugin_dir(dir)
        .process_backend(fake)
        .process_config(config)
        .cache_dir(Some(test_cache_dir()))
        .build()
        .await
}

#[tokio::test]
async fn a_0_1_0_component_works_beside_newer_ones_and_gets_the_operators_confinement() {
    let dir = tempfile::tempdir().expect("dir");
    let bytes = std::fs::read(legacy_policy_component()).expect("fixture");
    install(dir.path(), "legacy", &bytes, Some(GRANT));
    let fake = FakeProcesses::new();
    fake.push(Script::exits(0).output("from the old contract\n"));
    fake.push(Script::exits(0).output("from the new contract\n"));
    let operator = toolhost::sandbox::SandboxSettings {
        network: toolhost::sandbox::Network::None,
        ..Default::default()
    };
    let host = host_with(dir.path(), fake.clone(), operator.clone(), Some("default"))
        .await
        .expect("both versions load in one host");
    let names: Vec<String> = host.tools().into_iter().map(|t| t.name).collect();
    assert!(names.contains(&"run".to_string()), "{names:?}");
    assert!(names.contains(&"execute".to_string()), "{names:?}");
    // 0.1.0 states no title or hints; later tools do.
    for tool in host.tools() {
        let stated = tool.title.is_some() && !tool.annotations.is_empty();
        assert_eq!(stated, tool.plugin != "legacy", "{tool:?}");
    }

    // The 0.1.0 process import: start, wait, list.
    let result = json(
        &host
            .call("s", "run", r#"{"command":"echo old"}"#)
            .await
            .expect("run"),
    );
    assert_eq!(result["exit_code"], 0, "{result}");
    assert_eq!(result["output"], "from the old contract\n", "{result}");
    let result = json(
        &host
            .call("s", "execute", r#"{"command":"echo new"}"#)
            .await
            .expect("execute"),
    );
    assert_eq!(result["exit_code"], 0, "{result}");
    let list = json(&host.call("s", "list", "{}").await.expect("list"));
    assert_eq!(
        list["processes"].as_array().map(Vec::len),
        Some(2),
        "{list}"
    );
    // It cannot ask: its command got the operator's profile, like the 0.3.0 policy's.
    let starts = fake.starts();
    assert_eq!(starts[0].request.command, "echo old");
    assert_eq!(starts[0].request.profile, Some(operator.profile()));
    assert_eq!(starts[1].request.profile, Some(operator.profile()));

    // The 0.1.0 output-buffer import.
    let result = json(
        &host
            .call(
                "s",
                "buffer",
                r#"{"text":"0123456789abcdef","head":4,"tail":4}"#,
            )
            .await
            .expect("buffer"),
    );
    assert_eq!(result["omitted"], 8, "{result}");
    assert!(
        result["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("0123")),
        "{result}"
    );
}

#[tokio::test]
async fn a_0_2_0_component_works_beside_newer_ones() {
    let dir = tempfile::tempdir().expect("dir");
    let bytes = std::fs::read(policy_0_2_0_component()).expect("fixture");
    install(dir.path(), "frozen", &bytes, Some(GRANT));
    let fake = FakeProcesses::new();
    // What it left running and its log are 0.3.0's: a 0.2.0 component sees neither.
    fake.push(
        Script::exits(3)
            .output("from the 0.2.0 contract\n")
            .leaves_running(7, "server")
            .logged(),
    );
    fake.push(Script::exits(0));
    let operator = toolhost::sandbox::SandboxSettings {
        network: toolhost::sandbox::Network::None,
        ..Default::default()
    };
    let host = host_with(dir.path(), fake.clone(), operator.clone(), Some("default"))
        .await
        .expect("0.2.0 and 0.3.0 components load in one host");
    // `tools` got the settings, and its title and hints came through.
    let run = host
        .tools()
        .into_iter()
        .find(|t| t.name == "run")
        .expect("the 0.2.0 tool is listed");
    assert_eq!(run.plugin, "frozen");
    assert_eq!(run.title.as_deref(), Some("Run a command"));
    assert!(
        run.description.contains(&operator.profile().summary()),
        "{}",
        run.description
    );
    assert!(!run.annotations.is_empty(), "{run:?}");

    // The 0.2.0 process import: start, wait, read, list.
    let result = json(
        &host
            .call("s", "run", r#"{"command":"echo frozen"}"#)
            .await
            .expect("run"),
    );
    assert_eq!(result["exit_code"], 3, "{result}");
    assert_eq!(result["output"], "from the 0.2.0 contract\n", "{result}");
    assert_eq!(result["read"], "from the 0.2.0 contract\n", "{result}");
    assert_eq!(result["running"], false, "{result}");
    host.call("s", "execute", r#"{"command":"true"}"#)
        .await
        .expect("execute");
    let list = json(&host.call("s", "list", "{}").await.expect("list"));
    let processes = list["processes"].as_array().expect("processes");
    assert_eq!(processes.len(), 2, "{list}");
    assert_eq!(processes[1]["command"], "echo frozen", "{list}");
    assert_eq!(
        processes[1]["profile"],
        operator.profile().summary().as_str(),
        "{list}"
    );
    let starts = fake.starts();
    assert_eq!(starts[0].request.profile, Some(operator.profile()));
    assert_eq!(starts[0].request.stdin, toolhost::process::Stdin::Closed);
}

#[tokio::test]
async fn a_0_3_0_component_works_beside_newer_ones() {
    let dir = tempfile::tempdir().expect("dir");
    let bytes = std::fs::read(policy_0_3_0_component()).expect("fixture");
    install(dir.path(), "frozen", &bytes, Some(GRANT));
    let fake = FakeProcesses::new();
    // What it left running and its log are 0.3.0's own: a 0.3.0 component sees both.
    fake.push(
        Script::exits(3)
            .output("from the 0.3.0 contract\n")
            .leaves_running(7, "server")
            .logged(),
    );
    let operator = toolhost::sandbox::SandboxSettings::default();
    let host = host_with(dir.path(), fake.clone(), operator, Some("default"))
        .await
        .expect("0.3.0 and 0.6.0 components load in one host");
    let run = host
        .tools()
        .into_iter()
        .find(|t| t.name == "run")
        .expect("the 0.3.0 tool is listed");
    assert_eq!(run.plugin, "frozen");
    let output = host
        .call("s", "run", r#"{"command":"echo frozen"}"#)
        .output()
        .await
        .expect("run");
    assert!(output.content.is_empty(), "0.3.0 has no content items");
    let result = json(&output.text);
    assert_eq!(result["exit_code"], 3, "{result}");
    assert_eq!(result["output"], "from the 0.3.0 contract\n", "{result}");
    assert_eq!(result["log"], "from the 0.3.0 contract\n", "{result}");
    assert_eq!(result["left_running"][0]["pid"], 7, "{result}");
    assert_eq!(result["left_running"][0]["command"], "server", "{result}");
}

#[tokio::test]
async fn a_0_4_0_component_works_beside_0_6_0_ones() {
    let dir = tempfile::tempdir().expect("dir");
    let bytes = std::fs::read(tools_0_4_0_component()).expect("fixture");
    install(dir.path(), "frozen", &bytes, None);
    let host = host_with(
        dir.path(),
        FakeProcesses::new(),
        toolhost::sandbox::SandboxSettings::default(),
        Some("default"),
    )
    .await
    .expect("0.4.0 and 0.6.0 components load in one host");
    assert!(host.tools().iter().any(|t| t.name == "execute"));
    // Its content items and its progress reach the caller as a 0.6.0 component's do.
    let output = host
        .call("s", "test_image_content", "{}")
        .output()
        .await
        .expect("a 0.4.0 tool's result");
    assert!(
        matches!(&output.content[..], [toolhost::ContentItem::Image { mime_type, .. }] if mime_type == "image/png"),
        "{output:?}"
    );
    let progress = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = progress.clone();
    let options = toolhost::CallOptions {
        progress: Some(std::sync::Arc::new(move |p: toolhost::Progress| {
            seen.lock().expect("lock").push(p.progress)
        })),
        tool_progress_only: true,
        ..Default::default()
    };
    host.call("s", "test_tool_with_progress", "{}")
        .options(options)
        .output()
        .await
        .expect("progress");
    assert_eq!(*progress.lock().expect("lock"), [0.0, 50.0, 100.0]);
}

/// Accepts every question with `run` set to yes.
struct Yes;

impl toolhost::ask::Asker for Yes {
    fn ask<'a>(
        &'a self,
        questions: &'a [toolhost::ask::Question],
        _deadline: tokio::time::Instant,
    ) -> toolhost::ask::BoxFuture<'a, Vec<toolhost::ask::Answer>> {
        let yes = toolhost::ask::Reply::Accepted(vec![(
            "run".to_owned(),
            toolhost::ask::Value::YesNo(true),
        )]);
        Box::pin(async move {
            questions
                .iter()
                .map(|q| toolhost::ask::Answer {
                    key: q.key.clone(),
                    reply: yes.clone(),
                })
                .collect()
        })
    }
}

#[tokio::test]
async fn a_0_5_0_component_works_beside_0_6_0_ones() {
    let dir = tempfile::tempdir().expect("dir");
    let bytes = std::fs::read(tools_0_5_0_component()).expect("fixture");
    install(dir.path(), "frozen", &bytes, None);
    let host = ToolHost::builder()
        .bundled_policy(Some("default"))
        .plugin_dir(dir.path())
        .process_backend(FakeProcesses::new())
        .cache_dir(Some(test_cache_dir()))
        .ask_mode(toolhost::ask::AskMode::Risky)
        .build()
        .await
        .expect("0.5.0 and 0.6.0 components load in one host");
    assert!(host.tools().iter().any(|t| t.name == "execute"));
    let output = host
        .call("s", "test_simple_text", "{}")
        .output()
        .await
        .expect("a 0.5.0 tool's result");
    assert!(
        matches!(&output.content[..], [toolhost::ContentItem::Text(text)] if text.contains("simple text")),
        "{output:?}"
    );
    // It asks as a 0.6.0 component does, and is never told a secret could be asked.
    let can = toolhost::ask::CanAsk {
        form: true,
        secret: true,
        ..Default::default()
    };
    let options = toolhost::CallOptions {
        asking: toolhost::ask::Asking::of(can, "", ""),
        asker: Some(std::sync::Arc::new(Yes)),
        ..Default::default()
    };
    let output = host
        .call("s", "ask_to_go", "{}")
        .options(options)
        .output()
        .await
        .expect("a 0.5.0 tool's questions and its result");
    assert!(
        matches!(&output.content[..], [toolhost::ContentItem::Text(text)] if text == "can: form; reply: accepted"),
        "{output:?}"
    );
}

/// The same 0.2.0 component on the real process manager: its command runs, and what it reads
/// and lists is the real process's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_0_2_0_component_runs_a_real_command() {
    let dir = tempfile::tempdir().expect("dir");
    let bytes = std::fs::read(policy_0_2_0_component()).expect("fixture");
    install(dir.path(), "frozen", &bytes, Some(GRANT));
    let (host, _state) = toolhost_e2e::real_plugin_host(dir.path()).await;
    let result = json(
        &host
            .call("s", "run", r#"{"command":"echo real; exit 4"}"#)
            .await
            .expect("run"),
    );
    assert_eq!(result["exit_code"], 4, "{result}");
    assert_eq!(result["output"], "real\n", "{result}");
    assert_eq!(result["read"], "real\n", "{result}");
    let list = json(&host.call("s", "list", "{}").await.expect("list"));
    assert_eq!(list["processes"][0]["id"], result["id"], "{list}");
    assert_eq!(list["processes"][0]["running"], false, "{list}");
    host.shutdown().await;
}

#[tokio::test]
async fn a_policys_request_tightens_its_commands_and_one_looser_than_its_grant_is_refused() {
    // The guarded policy asks for workspace-write on every command; it leaves the network to
    // its grant (an allow-list in its own manifest; none in this test's).
    let dir = tempfile::tempdir().expect("dir");
    install(dir.path(), "strict", bundled::GUARDED.bytes, Some(GRANT));
    let fake = FakeProcesses::new();
    fake.push(Script::exits(0));
    let operator = toolhost::sandbox::SandboxSettings {
        mode: toolhost::sandbox::SandboxMode::Off,
        ..Default::default()
    };
    let host = host_with(dir.path(), fake.clone(), operator.clone(), None)
        .await
        .expect("loads");
    host.call("s", "execute", r#"{"command":"true"}"#)
        .await
        .expect("runs");
    let profile = fake.starts()[0].request.profile.clone().expect("a profile");
    assert_eq!(profile.mode, toolhost::sandbox::SandboxMode::WorkspaceWrite);
    assert_eq!(profile.network, toolhost::sandbox::Network::Full);
    assert_eq!(profile.limits, operator.limits);

    // Its manifest grants only read-only: asking for workspace-write is a policy bug.
    let dir = tempfile::tempdir().expect("dir");
    let manifest = format!("{GRANT}sandbox = \"read-only\"\n");
    install(
        dir.path(),
        "strict",
        bundled::GUARDED.bytes,
        Some(&manifest),
    );
    let fake = FakeProcesses::new();
    let host = host_with(dir.path(), fake.clone(), operator, None)
        .await
        .expect("loads");
    let error = host
        .call("s", "execute", r#"{"command":"true"}"#)
        .await
        .expect_err("refused");
    let message = error.to_string();
    assert!(
        message.contains("workspace-write") && message.contains("read-only"),
        "{message}"
    );
    assert!(fake.starts().is_empty(), "nothing ran");
}

#[tokio::test]
async fn tool_descriptions_say_what_commands_may_do() {
    let dir = tempfile::tempdir().expect("dir");
    let description = |host: &ToolHost| {
        host.tools()
            .into_iter()
            .find(|t| t.name == "execute")
            .map(|t| t.description)
            .expect("execute")
    };
    let confined = toolhost::sandbox::SandboxSettings {
        network: toolhost::sandbox::Network::None,
        writable: vec![std::path::PathBuf::from("/srv/shared")],
        ..Default::default()
    };
    let host = host_with(dir.path(), FakeProcesses::new(), confined, Some("default"))
        .await
        .expect("loads");
    let text = description(&host);
    assert!(text.contains("confined"), "{text}");
    assert!(text.contains("/srv/shared"), "{text}");
    assert!(text.contains("no network"), "{text}");
    assert!(text.contains("sudo"), "{text}");

    let off = toolhost::sandbox::SandboxSettings {
        mode: toolhost::sandbox::SandboxMode::Off,
        ..Default::default()
    };
    let host = host_with(
        dir.path(),
        FakeProcesses::new(),
        off.clone(),
        Some("default"),
    )
    .await
    .expect("loads");
    assert!(
        !description(&host).contains("confined"),
        "{}",
        description(&host)
    );
    // The guarded policy's commands stay confined under --sandbox off, and it says so: its
    // grant's allow-list is named.
    let host = host_with(dir.path(), FakeProcesses::new(), off, Some("guarded"))
        .await
        .expect("loads");
    let text = description(&host);
    assert!(
        text.contains("confined")
            && text.contains("network reaches only")
            && text.contains("pypi.org"),
        "{text}"
    );
}

/// The tools of the host built on `cache` (a fake process capability: nothing runs).
async fn tools_with_cache(cache: &Path) -> Vec<toolhost::ToolInfo> {
    let host = ToolHost::builder()
        .process_backend(FakeProcesses::new())
        .cache_dir(Some(cache.to_path_buf()))
        .build()
        .await
        .expect("host");
    host.tools()
}

#[tokio::test]
async fn a_host_takes_a_plugins_tool_list_from_the_cache_and_checks_it() {
    let cache = tempfile::tempdir().expect("tempdir");
    let fresh = tools_with_cache(cache.path()).await;
    let lists: Vec<_> = std::fs::read_dir(cache.path())
        .expect("cache dir")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.to_string_lossy().ends_with(".tools.json"))
        .collect();
    assert_eq!(
        lists.len(),
        1,
        "one list kept beside the compiled component"
    );
    let list = &lists[0];
    let text = std::fs::read_to_string(list).expect("list");
    let execute = fresh
        .iter()
        .find(|tool| tool.name == "execute")
        .expect("execute");
    let marked = text.replacen(
        &serde_json::to_string(&execute.description).expect("json"),
        "\"as the cache has it\"",
        1,
    );
    assert_ne!(marked, text);
    std::fs::write(list, &marked).expect("write");
    // The next host reads the list instead of asking the guest.
    let cached = tools_with_cache(cache.path()).await;
    let description = |tools: &[toolhost::ToolInfo]| {
        tools
            .iter()
            .find(|tool| tool.name == "execute")
            .map(|tool| tool.description.clone())
    };
    assert_eq!(description(&cached).as_deref(), Some("as the cache has it"));
    assert_eq!(cached.len(), fresh.len());
    // A list that fails the load checks (a tool listed twice) is asked for afresh.
    let twice = marked.replacen("\"name\":\"process_list\"", "\"name\":\"execute\"", 1);
    assert_ne!(twice, marked);
    std::fs::write(list, &twice).expect("write");
    let asked = tools_with_cache(cache.path()).await;
    assert_eq!(description(&asked), Some(execute.description.clone()));
}

#[tokio::test]
async fn calls_beyond_the_hosts_limit_are_refused_and_a_cancelled_call_gives_its_place_back() {
    let (host, _state) = toolhost_e2e::real_host_with(ToolHost::builder().max_calls_total(1)).await;
    let host = std::sync::Arc::new(host);
    let gate = Gate::new();
    // The one place is taken once the held call's command runs.
    let held = hold_a_call(&host, &gate).await;
    let refused = host
        .call("b", "process_list", "{}")
        .await
        .expect_err("no place left");
    assert_eq!(refused, CallError::Busy { max_calls: 1 });
    assert!(
        refused.to_string().contains("--max-calls-total"),
        "{refused}"
    );
    assert!(host.admit("b").is_err());
    // An unknown tool is that, whatever the load.
    let unknown = host.call("b", "nope", "{}").await.expect_err("unknown");
    assert!(
        matches!(unknown, CallError::UnknownTool { .. }),
        "{unknown:?}"
    );
    // The held call is cancelled (its future dropped): its place is free again.
    held.abort();
    assert!(held.await.is_err_and(|error| error.is_cancelled()));
    let listed = host.call("b", "process_list", "{}").await;
    assert!(listed.is_ok(), "{listed:?}");
    host.shutdown().await;
    assert!(toolhost_e2e::wait_gone(gate.marker(), Duration::from_secs(10)).await);
}

/// An `execute` in scope `a` held at `gate`, once its command runs (so the call holds its
/// place); aborting the task cancels the call.
async fn hold_a_call(
    host: &std::sync::Arc<ToolHost>,
    gate: &Gate,
) -> tokio::task::JoinHandle<Result<String, CallError>> {
    let held = tokio::spawn({
        let host = host.clone();
        let arguments = serde_json::json!({"command": gate.command(), "timeout": "10m"});
        async move { host.call("a", "execute", &arguments.to_string()).await }
    });
    assert!(
        gate.started().await,
        "the held call's command did not start"
    );
    held
}

#[tokio::test]
async fn a_session_at_its_limit_is_refused_while_others_go_on() {
    let (host, _state) =
        toolhost_e2e::real_host_with(ToolHost::builder().max_calls_per_session(1)).await;
    let host = std::sync::Arc::new(host);
    let gate = Gate::new();
    let held = hold_a_call(&host, &gate).await;
    let refused = host
        .call("a", "process_list", "{}")
        .await
        .expect_err("session a is full");
    assert_eq!(refused, CallError::ScopeBusy { max_calls: 1 });
    assert!(
        refused.to_string().contains("--max-calls-per-session"),
        "{refused}"
    );
    // Another session is not held up by it.
    let other = host.call("b", "process_list", "{}").await;
    assert!(other.is_ok(), "{other:?}");
    held.abort();
    assert!(held.await.is_err_and(|error| error.is_cancelled()));
    let again = host.call("a", "process_list", "{}").await;
    assert!(again.is_ok(), "{again:?}");
    host.shutdown().await;
    assert!(toolhost_e2e::wait_gone(gate.marker(), Duration::from_secs(10)).await);
}

/// A host that defers uncompiled plugins still waits for a small one (a policy written in
/// Rust compiles in well under a second): its tools are there when `build` returns, with an
/// empty component cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_uncompiled_plugin_is_loaded_before_the_host_is_built() {
    let dir = tempfile::tempdir().expect("dir");
    let cache = tempfile::tempdir().expect("an empty cache");
    install(dir.path(), "policy", bundled::DEFAULT.bytes, Some(GRANT));
    let host = ToolHost::builder()
        .bundled_policy(None)
        .plugin_dir(dir.path())
        .process_backend(FakeProcesses::new())
        .cache_dir(Some(cache.path().to_path_buf()))
        .defer_uncompiled_plugins(true)
        .build()
        .await
        .expect("host builds");
    assert_eq!(host.tools().len(), 5, "{:?}", host.tools());
}

/// A 0.4.0 policy sees the allow-list by name in its settings, and a start request may narrow
/// it to hosts within it, never widen it.
#[tokio::test]
async fn a_policy_sees_the_allow_list_and_may_only_narrow_it() {
    let dir = tempfile::tempdir().expect("dir");
    let bytes = std::fs::read(toolhost_e2e::hostile_component()).expect("fixture");
    install(dir.path(), "hostile", &bytes, Some(GRANT));
    let fake = FakeProcesses::new();
    fake.push(Script::exits(0));
    fake.push(Script::exits(0));
    let operator = toolhost::sandbox::SandboxSettings {
        network: toolhost::sandbox::Network::parse("allow=pypi.org,*.github.com").expect("a list"),
        ..Default::default()
    };
    let host = host_with(dir.path(), fake.clone(), operator, Some("default"))
        .await
        .expect("loads");
    // The bundled policy's description names the hosts from `settings.allowed-hosts`.
    let execute = host
        .tools()
        .into_iter()
        .find(|t| t.name == "execute")
        .expect("execute");
    assert!(
        execute
            .description
            .contains("reaches only pypi.org, *.github.com, through the proxy"),
        "{}",
        execute.description
    );

    host.call(
        "s",
        "refusals",
        r#"{"command":"true","allowed_hosts":["api.github.com"]}"#,
    )
    .await
    .expect("a narrower list is taken");
    let profile = fake.starts()[0].request.profile.clone().expect("a profile");
    let list = profile.network.allow_list().expect("an allow-list");
    assert_eq!(list.for_people(), "api.github.com");

    for (hosts, why) in [
        (r#"["example.com"]"#, "not within the plugin's allow-list"),
        (r#"["bad host"]"#, "allowed host `bad host`"),
    ] {
        let error = host
            .call(
                "s",
                "refusals",
                &format!(r#"{{"command":"true","allowed_hosts":{hosts}}}"#),
            )
            .await
            .expect_err("refused");
        let message = error.to_string();
        assert!(
            message.contains("InvalidRequest") && message.contains(why),
            "{message}"
        );
    }
    assert_eq!(fake.starts().len(), 1, "a refused request starts nothing");
}
