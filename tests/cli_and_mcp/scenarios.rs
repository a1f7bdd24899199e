//! `toolhost test`: the bundled policies pass their own scenario files
//! (`guest-tools/crates/*/scenarios`), and the conformance fixture its own (content items,
//! progress, log lines); a failing scenario is reported with what differs and exits 1, and a
//! malformed scenario file is an error naming its line, exit 2.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use toolhost_e2e::{cache_env, conformance_tools_component, repo_root, toolhost_bin};

/// The bundled policies exported to a temporary directory (components and manifests).
fn exported() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let output = Command::new(toolhost_bin())
        .args(["plugins", "export"])
        .arg(dir.path())
        .output()
        .expect("run toolhost plugins export");
    assert!(output.status.success(), "{output:?}");
    dir
}

fn toolhost_test(plugin: &Path, scenarios: &[PathBuf]) -> Output {
    let (key, value) = cache_env();
    Command::new(toolhost_bin())
        .arg("test")
        .arg(plugin)
        .args(scenarios)
        .env(key, value)
        .env("TOOLHOST_LOG", "error")
        .output()
        .expect("run toolhost test")
}

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn the_bundled_policies_pass_their_scenarios() {
    let plugins = exported();
    for policy in ["default-policy", "guarded-policy"] {
        let scenarios = repo_root()
            .join("guest-tools/crates")
            .join(policy)
            .join("scenarios");
        let output = toolhost_test(&plugins.path().join(format!("{policy}.wasm")), &[scenarios]);
        let (stdout, stderr) = text(&output);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{policy}:\n{stdout}\n{stderr}"
        );
        let last = stdout.lines().last().unwrap_or_default();
        assert!(
            last.ends_with("passed, 0 failed") && !last.starts_with("0 "),
            "{policy}:\n{stdout}"
        );
    }
}

/// Scenarios check a result's content items, progress and log lines (WIT 0.4.0): the
/// conformance fixture's own scenarios pass, and a wrong expectation of each fails.
#[test]
fn scenarios_check_content_progress_and_log_lines() {
    let fixture = repo_root().join("guest-tools/fixtures/conformance-tools");
    let output = toolhost_test(&conformance_tools_component(), &[fixture.join("scenarios")]);
    let (stdout, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.trim_end().ends_with("5 passed, 0 failed"),
        "{stdout}"
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("wrong.toml");
    std::fs::write(
        &file,
        r#"
[[scenario]]
name = "wrong"
[[scenario.call]]
tool = "test_tool_with_progress"
expect.content = [{ type = "image" }]
expect.progress = [{ progress = 1 }]
expect.logs = [{ level = "info" }]
"#,
    )
    .expect("write");
    let output = toolhost_test(&conformance_tools_component(), &[file]);
    let (stdout, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(1), "{stdout}\n{stderr}");
    for line in [
        r#"content[0].type: expected "image", found "text""#,
        "progress: expected 1 items, found 3",
        "logs: expected 1 items, found 0",
    ] {
        assert!(stdout.contains(line), "missing `{line}` in:\n{stdout}");
    }
}

#[test]
fn a_failing_scenario_shows_what_differs_and_exits_1() {
    let plugins = exported();
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("failing.toml");
    std::fs::write(
        &file,
        r#"
[[scenario]]
name = "passes"
[[scenario.process]]
output = "hello\n"
[[scenario.call]]
tool = "execute"
arguments = { command = "echo hello" }
expect.result = { output = "hello\n" }

[[scenario]]
name = "expects the wrong output"
[[scenario.process]]
output = "hello\n"
exit = 3
[[scenario.call]]
tool = "execute"
arguments = { command = "echo hello" }
expect.result = { output = "re:^bye", exit_code = 0 }
expect.starts = [{ command = "echo bye" }]
"#,
    )
    .expect("write");
    let output = toolhost_test(&plugins.path().join("default-policy.wasm"), &[file]);
    let (stdout, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stdout.contains("  ok      passes"), "{stdout}");
    assert!(
        stdout.contains("  FAILED  expects the wrong output"),
        "{stdout}"
    );
    for line in [
        r#"call 1 (execute): result.exit_code: expected 0, found 3"#,
        r#"call 1 (execute): result.output: expected a match of /^bye/, found "hello\n""#,
        r#"call 1 (execute): starts[0].command: expected "echo bye", found "echo hello""#,
        r#"call 1 (execute): the result was: {"#,
    ] {
        assert!(stdout.contains(line), "missing `{line}` in:\n{stdout}");
    }
    assert!(
        stdout.trim_end().ends_with("1 passed, 1 failed"),
        "{stdout}"
    );
}

#[test]
fn malformed_scenario_files_are_errors_with_their_location() {
    let plugins = exported();
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("bad.toml");
    std::fs::write(
        &file,
        "[[scenario]]\nname = \"x\"\n[[scenario.call]]\ntool = \"execute\"\nargs = 3\n",
    )
    .expect("write");
    let output = toolhost_test(&plugins.path().join("default-policy.wasm"), &[file]);
    let (stdout, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(stdout.is_empty(), "nothing ran: {stdout}");
    assert!(
        stderr.contains("bad.toml") && stderr.contains("line 5") && stderr.contains("`args`"),
        "{stderr}"
    );

    let missing = toolhost_test(
        &plugins.path().join("no-such.wasm"),
        &[dir.path().join("bad.toml")],
    );
    let (_, stderr) = text(&missing);
    assert_eq!(missing.status.code(), Some(2));
    assert!(stderr.contains("no-such.wasm"), "{stderr}");
}
