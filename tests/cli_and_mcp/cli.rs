//! The `toolhost` binary: tools, call, plugins export, exit codes and streams.

use std::process::Command;
use std::time::Duration;
use toolhost_e2e::{Stoppable, json, processes_with, shared_writable, toolhost_bin};

fn toolhost(args: &[&str]) -> std::process::Output {
    Command::new(toolhost_bin())
        .args(shared_writable())
        .args(args)
        .env("TOOLHOST_LOG", "warn")
        .output()
        .expect("run toolhost")
}

#[test]
fn the_version_names_every_served_wit_version() {
    let out = Command::new(toolhost_bin())
        .arg("--version")
        .output()
        .expect("run toolhost");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("(serves WIT toolhost:plugin 0.6.0, 0.5.0, 0.4.0, 0.3.0, 0.2.0, 0.1.0)"),
        "{text}"
    );
}

#[test]
fn tools_lists_every_bundled_tool_with_schema() {
    let out = toolhost(&["tools"]);
    assert!(out.status.success());
    let tools = json(&String::from_utf8_lossy(&out.stdout));
    let names: Vec<&str> = tools
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "execute",
            "process_input",
            "process_list",
            "process_output",
            "process_signal"
        ]
    );
    for tool in tools.as_array().expect("array") {
        assert!(
            tool["description"].as_str().is_some_and(|d| d.len() > 40),
            "{tool}"
        );
        assert_eq!(tool["input_schema"]["type"], "object", "{tool}");
    }
    let openai = json(&String::from_utf8_lossy(
        &toolhost(&["tools", "--format", "openai"]).stdout,
    ));
    assert_eq!(openai[0]["type"], "function");
    assert!(openai[0]["function"]["parameters"].is_object());
    let mcp = json(&String::from_utf8_lossy(
        &toolhost(&["tools", "--format", "mcp"]).stdout,
    ));
    assert!(mcp[0]["inputSchema"].is_object());
    assert_eq!(mcp[0]["outputSchema"]["type"], "object");
}

#[test]
fn call_prints_the_result_and_exits_zero_even_for_failing_commands() {
    let out = toolhost(&["call", "execute", r#"{"command":"echo hello"}"#]);
    assert!(out.status.success());
    let r = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(r["output"], "hello\n");

    let out = toolhost(&["call", "execute", r#"{"command":"exit 4"}"#]);
    assert!(
        out.status.success(),
        "a command that failed is still a result"
    );
    assert_eq!(json(&String::from_utf8_lossy(&out.stdout))["exit_code"], 4);
}

#[test]
fn tool_errors_exit_one_with_a_single_line() {
    for (args, needle) in [
        (vec!["call", "execute", "{oops"], "not valid JSON"),
        (vec!["call", "execute", r#"{"command":""}"#], "command"),
        (vec!["call", "nope", "{}"], "unknown tool `nope`"),
        (
            vec!["call", "execute", r#"{"command":"x","timeout":"forever"}"#],
            "forever",
        ),
    ] {
        let out = toolhost(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(out.stdout.is_empty(), "nothing on stdout for {args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let line = stderr.lines().last().unwrap_or_default();
        assert!(line.contains(needle), "{args:?}: {stderr}");
    }
}

#[tokio::test]
async fn call_stops_the_processes_it_started_before_it_exits() {
    // A foreground command handed over at its timeout; its two shells (one in a session of
    // its own) are running when the call returns. The timeout only has to outlast their start.
    let stoppable = Stoppable::new();
    let args = serde_json::json!({"command": stoppable.command(), "timeout": "3s"}).to_string();
    let out = toolhost(&["call", "execute", &args]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = json(&String::from_utf8_lossy(&out.stdout));
    assert!(r["background_process_id"].is_string(), "{r}");
    assert!(
        stoppable.ready(),
        "the command had not started by its timeout"
    );
    assert!(
        processes_with(stoppable.marker()).is_empty(),
        "still running after the exit: {:?}",
        processes_with(stoppable.marker())
    );
    stoppable
        .stopped_by_the_host(Duration::from_secs(5))
        .await
        .expect("the CLI's shutdown stops them");
}

#[test]
fn plugins_export_writes_both_policies_and_they_load() {
    let dir = tempfile::tempdir().expect("dir");
    let out = toolhost(&["plugins", "export", dir.path().to_str().expect("utf8")]);
    assert!(out.status.success());
    for name in [
        "default-policy.wasm",
        "default-policy.toml",
        "guarded-policy.wasm",
        "guarded-policy.toml",
    ] {
        assert!(dir.path().join(name).is_file(), "{name}");
    }
    // The exported manifests grant what the bundled policies have: they load as they are.
    std::fs::remove_file(dir.path().join("default-policy.wasm")).expect("rm");
    let out = toolhost(&[
        "--policy",
        "none",
        "--plugins",
        dir.path().to_str().expect("utf8"),
        "call",
        "execute",
        r#"{"command":"mkfs.ext4 /dev/sda"}"#,
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("make-filesystem"));
}

#[test]
fn workdir_and_shell_flags_configure_the_processes() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().to_str().expect("utf8");
    let out = toolhost(&[
        "--workdir",
        path,
        "--shell",
        "bash",
        "call",
        "execute",
        r#"{"command":"pwd; echo $BASH_VERSION | cut -c1"}"#,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let output = json(&String::from_utf8_lossy(&out.stdout))["output"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut lines = output.lines();
    assert_eq!(lines.next(), Some(path));
    assert!(
        lines
            .next()
            .is_some_and(|l| l.chars().all(|c| c.is_ascii_digit()) && !l.is_empty()),
        "{output}"
    );

    let out = toolhost(&[
        "--workdir",
        "/no/such/dir",
        "call",
        "execute",
        r#"{"command":"true"}"#,
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/no/such/dir"));
}

#[tokio::test]
async fn an_interrupted_call_stops_its_processes() {
    let stoppable = Stoppable::new();
    let args = serde_json::json!({"command": stoppable.command(), "timeout": "60s"}).to_string();
    let mut child = Command::new(toolhost_bin())
        .args(shared_writable())
        .args(["call", "execute", &args])
        .env("TOOLHOST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run toolhost");
    stoppable.wait_ready(Duration::from_secs(20)).await;
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let exit = child.wait().expect("wait");
    assert_eq!(exit.code(), Some(130));
    assert!(
        processes_with(stoppable.marker()).is_empty(),
        "still running after the exit: {:?}",
        processes_with(stoppable.marker())
    );
    stoppable
        .stopped_by_the_host(Duration::from_secs(5))
        .await
        .expect("the CLI's shutdown stops them");
}

#[test]
fn a_reader_that_goes_away_is_not_a_crash() {
    // `toolhost tools | head -c 0`: the pipe is closed before anything is written.
    let mut child = Command::new(toolhost_bin())
        .arg("tools")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run toolhost");
    drop(child.stdout.take());
    let output = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(output.status.code(), Some(0), "{stderr}");
}

#[test]
fn the_output_file_of_a_cut_result_outlives_the_call() {
    let state = tempfile::tempdir().expect("state dir");
    let state_arg = state.path().to_str().expect("utf8");
    let out = toolhost(&[
        "--state-dir",
        state_arg,
        "call",
        "execute",
        r#"{"command":"seq 1 300000"}"#,
    ]);
    assert!(out.status.success(), "{out:?}");
    let result = json(&String::from_utf8_lossy(&out.stdout));
    assert!(
        result["truncated"].is_object(),
        "the output was cut: {result}"
    );
    let file = result["output_file"]
        .as_str()
        .unwrap_or_else(|| panic!("a cut result names its full output: {result}"));
    let full = std::fs::read_to_string(file).expect("the file is there after the call exited");
    assert!(full.starts_with("1\n2\n") && full.ends_with("299999\n300000\n"));
    assert_eq!(full.lines().count(), 300_000);
}

#[test]
fn the_host_raises_its_descriptor_limit_within_the_hard_one() {
    // Started with a low soft limit, the host raises it (each running process costs it about a
    // dozen descriptors); its commands inherit the raised limit.
    let script = format!(
        "ulimit -Sn 256 && exec {} call execute '{{\"command\":\"ulimit -n; ulimit -Hn\"}}'",
        toolhost_bin().display()
    );
    let out = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .env("TOOLHOST_LOG", "warn")
        .output()
        .expect("run toolhost");
    assert!(out.status.success(), "{out:?}");
    let result = json(&String::from_utf8_lossy(&out.stdout));
    let output = result["output"].as_str().expect("output");
    let mut limits = output.lines().map(|l| l.trim().parse::<u64>().ok());
    let (Some(Some(soft)), Some(hard)) = (limits.next(), limits.next()) else {
        panic!("{output}");
    };
    let hard = hard.unwrap_or(u64::MAX); // `unlimited`
    assert_eq!(
        soft,
        hard.min(65_536),
        "raised to the hard limit, at most 65536: {output}"
    );
}

/// A host started with SIGINT and SIGQUIT ignored (as a shell starts a background job:
/// `toolhost serve &`) gives its commands the default dispositions: an interrupt sent to a
/// command reaches it.
#[test]
fn commands_do_not_inherit_signals_the_host_ignores() {
    use std::os::unix::process::CommandExt;
    let args = serde_json::json!({ "command": "grep SigIgn /proc/self/status" });
    let mut command = Command::new(toolhost_bin());
    command
        .args(shared_writable())
        .args(["call", "execute", &args.to_string()]);
    // SAFETY: only async-signal-safe calls (sigaction through `signal`) between fork and exec.
    unsafe {
        command.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            libc::signal(libc::SIGQUIT, libc::SIG_IGN);
            Ok(())
        });
    }
    let out = command.output().expect("run toolhost");
    let result = json(&String::from_utf8_lossy(&out.stdout));
    let line = result["output"].as_str().unwrap_or_default().trim();
    let ignored = line
        .strip_prefix("SigIgn:")
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .unwrap_or_else(|| panic!("no signal mask in {result}"));
    // SIGINT is bit 1, SIGQUIT bit 2, SIGPIPE bit 12 (signal N is bit N - 1).
    assert_eq!(ignored & 0b1000_0000_0110, 0, "{line}");
}
