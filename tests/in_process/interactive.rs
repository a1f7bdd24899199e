//! Interactive processes end to end through the real host and both bundled policies:
//! terminals (`execute` with `tty`), stdin pipes, `process_input` with text, keys and `until`,
//! the stream and screen views, and the errors for input that cannot be taken.

use serde_json::{Value, json};
use toolhost::ToolHost;
use toolhost_e2e::{real_host, shared_tempdir};

async fn call(host: &ToolHost, tool: &str, args: Value) -> Value {
    toolhost_e2e::json(
        &host
            .call("s", tool, &args.to_string())
            .await
            .unwrap_or_else(|e| panic!("{tool} {args}: {e}")),
    )
}

async fn refused(host: &ToolHost, tool: &str, args: Value) -> String {
    host.call("s", tool, &args.to_string())
        .await
        .expect_err(&format!("{tool} {args} should be refused"))
        .to_string()
}

/// `r` if it shows the process `id` exited, else its output once it has (waiting up to 10 s).
async fn until_exit(host: &ToolHost, id: &str, r: Value) -> Value {
    if r["running"] == true {
        call(
            host,
            "process_output",
            json!({"process_id": id, "wait": "10s"}),
        )
        .await
    } else {
        r
    }
}

fn id(result: &Value) -> String {
    result["background_process_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no process id in {result}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_repl_answers_and_ends_with_ctrl_d() {
    for policy in ["default", "guarded"] {
        let (host, _state) = real_host(policy).await;
        let started = call(
            &host,
            "execute",
            json!({"command": "python3 -q", "tty": true, "timeout": "30s"}),
        )
        .await;
        assert_eq!(started["waiting_for_input"], true, "{policy}: {started}");
        let id = id(&started);
        let r = call(
            &host,
            "process_input",
            json!({"process_id": id, "input": "1+1\n", "until": ">>> "}),
        )
        .await;
        assert_eq!(r["until_found"], true, "{policy}: {r}");
        assert!(r["output"].as_str().unwrap_or("").contains("2\n"), "{r}");
        let r = call(
            &host,
            "process_input",
            json!({"process_id": id, "keys": ["Ctrl-D"], "wait": "10s"}),
        )
        .await;
        let r = until_exit(&host, &id, r).await;
        assert_eq!(r["running"], false, "{policy}: {r}");
        assert_eq!(r["exit_code"], 0, "{policy}: {r}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tty_prompt_and_a_password_prompt_are_answered() {
    let (host, _state) = real_host("default").await;
    let started = call(
        &host,
        "execute",
        json!({
            "command": "printf 'Continue? ' > /dev/tty; read x < /dev/tty; echo got:$x; \
                        stty -echo; printf 'Password: '; read p; stty echo; echo; echo len:${#p}",
            "tty": true,
        }),
    )
    .await;
    assert!(
        started["output"]
            .as_str()
            .unwrap_or("")
            .contains("Continue? "),
        "{started}"
    );
    let id = id(&started);
    let r = call(
        &host,
        "process_input",
        json!({"process_id": id, "input": "yes\n", "until": "Password: "}),
    )
    .await;
    assert!(
        r["output"].as_str().unwrap_or("").contains("got:yes"),
        "{r}"
    );
    call(
        &host,
        "process_input",
        json!({"process_id": id, "input": "hunter2\n", "until": "len:"}),
    )
    .await;
    let r = call(
        &host,
        "process_output",
        json!({"process_id": id, "wait": "10s"}),
    )
    .await;
    let output = r["output"].as_str().unwrap_or("");
    assert!(output.contains("len:7"), "{r}");
    assert!(!output.contains("hunter2"), "the secret was echoed: {r}");
    assert_eq!(r["exit_code"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn less_shows_its_screen_also_after_a_resize() {
    let (host, _state) = real_host("default").await;
    let dir = shared_tempdir();
    let file = dir.path().join("lines.txt");
    let text: String = (1..=100).map(|n| format!("line {n}\n")).collect();
    std::fs::write(&file, text).expect("file");
    let started = call(
        &host,
        "execute",
        json!({"command": format!("less {}", file.display()), "tty": true, "rows": 10, "cols": 40}),
    )
    .await;
    let id = id(&started);
    let r = call(
        &host,
        "process_output",
        json!({"process_id": id, "view": "screen"}),
    )
    .await;
    let screen = r["output"].as_str().unwrap_or("");
    assert!(screen.starts_with("line 1\nline 2\n"), "{r}");
    assert!(
        screen.contains("line 9") && !screen.contains("line 10\n"),
        "{r}"
    );
    assert_eq!(r["size"], json!({"rows": 10, "cols": 40}));
    assert_eq!(r["full_screen"], true, "{r}");
    // Bigger: less redraws for the new size.
    let r = call(
        &host,
        "process_input",
        json!({"process_id": id, "rows": 20, "until": "line 19"}),
    )
    .await;
    assert_eq!(r["until_found"], true, "{r}");
    let r = call(
        &host,
        "process_output",
        json!({"process_id": id, "view": "screen"}),
    )
    .await;
    let screen = r["output"].as_str().unwrap_or("");
    assert_eq!(r["size"], json!({"rows": 20, "cols": 40}));
    assert!(
        screen.starts_with("line 1\n") && screen.contains("line 19\n"),
        "{r}"
    );
    // A page down shows the next 19 lines.
    let r = call(
        &host,
        "process_input",
        json!({"process_id": id, "keys": ["PageDown"], "until": "line 38"}),
    )
    .await;
    assert_eq!(r["until_found"], true, "{r}");
    let r = call(
        &host,
        "process_output",
        json!({"process_id": id, "view": "screen"}),
    )
    .await;
    let screen = r["output"].as_str().unwrap_or("");
    assert!(
        screen.starts_with("line 20\n") && screen.contains("line 38\n"),
        "{r}"
    );
    let r = call(
        &host,
        "process_input",
        json!({"process_id": id, "input": "q", "wait": "10s"}),
    )
    .await;
    let r = until_exit(&host, &id, r).await;
    assert_eq!(r["exit_code"], 0, "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_interrupts_and_a_progress_bar_reads_as_its_last_state() {
    // `ready` comes from the process that takes the Ctrl-C, once SIGINT has its default
    // action (a shell's `echo ready; sleep` would race with the fork of `sleep`).
    let (host, _state) = real_host("default").await;
    let started = call(
        &host,
        "execute",
        json!({"command": "for p in 10 50 100; do printf '\\r[%3d%%]' $p; done; echo; exec python3 -c \"import signal, time; signal.signal(signal.SIGINT, signal.SIG_DFL); print('ready', flush=True); time.sleep(60)\"", "tty": true}),
    )
    .await;
    let id = id(&started);
    // The bar, then (python may take longer to start than the settle time) `ready`.
    let output = started["output"].as_str().unwrap_or("");
    assert!(output.starts_with("[100%]\n"), "{started}");
    if !output.contains("ready") {
        // Wait for it: each round waits for new output, then looks at all of it.
        let mut seen = false;
        for _ in 0..20 {
            call(
                &host,
                "process_input",
                json!({"process_id": id, "until": "ready", "wait": "1s"}),
            )
            .await;
            let all = call(&host, "process_output", json!({"process_id": id})).await;
            if all["output"].as_str().unwrap_or("").contains("ready") {
                seen = true;
                break;
            }
        }
        assert!(seen, "python never said ready");
    }
    let r = call(
        &host,
        "process_input",
        json!({"process_id": id, "keys": ["Ctrl-C"], "wait": "10s"}),
    )
    .await;
    let r = until_exit(&host, &id, r).await;
    assert_eq!(r["signal"], "SIGINT", "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_stdin_is_fed_and_closed() {
    let (host, _state) = real_host("default").await;
    let started = call(
        &host,
        "execute",
        json!({"command": "sort", "stdin": "open"}),
    )
    .await;
    assert_eq!(started["waiting_for_input"], true, "{started}");
    let id = id(&started);
    let r = call(
        &host,
        "process_input",
        json!({"process_id": id, "input": "pear\napple\n", "eof": true, "wait": "10s"}),
    )
    .await;
    let r = until_exit(&host, &id, r).await;
    assert_eq!(r["output"], "apple\npear\n", "{r}");
    assert_eq!(r["exit_code"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_clear_error_and_the_process_is_unharmed() {
    let (host, _state) = real_host("default").await;
    let plain = id(&call(
        &host,
        "execute",
        json!({"command": "sleep 60", "run_in_background": true}),
    )
    .await);
    let tty = id(&call(&host, "execute", json!({"command": "cat", "tty": true})).await);
    let done = id(&call(
        &host,
        "execute",
        json!({"command": "true", "stdin": "open", "run_in_background": true}),
    )
    .await);
    let exited = call(
        &host,
        "process_output",
        json!({"process_id": done, "wait": "10s"}),
    )
    .await;
    assert_eq!(exited["exit_code"], 0, "{exited}");

    let cases = [
        (json!({"process_id": "nope", "input": "x"}), "no process"),
        (json!({"process_id": plain, "input": "x"}), "takes no input"),
        (
            json!({"process_id": tty, "keys": ["Hyper"]}),
            "unknown key name",
        ),
        (
            json!({"process_id": tty, "input": "x".repeat(70_000)}),
            "at most 65536",
        ),
        (json!({"process_id": tty, "rows": 5000}), "from 2 to 200"),
        (json!({"process_id": plain, "rows": 30}), "has no terminal"),
        (json!({"process_id": tty, "eof": true}), "Ctrl-D"),
        (
            json!({"process_id": done, "input": "late\n"}),
            "is not running",
        ),
        (
            json!({"process_id": tty, "keys": "Enter"}),
            "list of strings",
        ),
    ];
    for (args, expected) in cases {
        let error = refused(&host, "process_input", args.clone()).await;
        assert!(error.contains(expected), "{args}: {error}");
    }
    let error = refused(
        &host,
        "process_output",
        json!({"process_id": plain, "view": "screen"}),
    )
    .await;
    assert!(error.contains("has no terminal"), "{error}");
    let error = refused(&host, "execute", json!({"command": "true", "rows": 10})).await;
    assert!(error.contains("tty: true"), "{error}");
    let error = refused(
        &host,
        "execute",
        json!({"command": "true", "tty": true, "cols": 3}),
    )
    .await;
    assert!(error.contains("from 10 to 500"), "{error}");

    // Both still there and the terminal still echoes.
    let r = call(
        &host,
        "process_input",
        json!({"process_id": tty, "input": "alive\n", "until": "alive\nalive"}),
    )
    .await;
    assert_eq!(r["until_found"], true, "{r}");
    let list = call(&host, "process_list", json!({})).await;
    let entries = list["processes"].as_array().cloned().unwrap_or_default();
    let input_of = |id: &str| {
        entries
            .iter()
            .find(|p| p["id"] == id)
            .map(|p| p["input"].clone())
    };
    assert_eq!(input_of(&tty), Some(json!("terminal 24x80")), "{list}");
    assert_eq!(input_of(&plain), Some(Value::Null), "{list}");
    for id in [&plain, &tty] {
        call(
            &host,
            "process_signal",
            json!({"process_id": id, "signal": "kill"}),
        )
        .await;
    }
}
