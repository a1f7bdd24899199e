//! Terminals and stdin pipes through the real manager: typing, keys, the two views, waits on
//! output, resizing, and the errors for input that cannot be taken.

use super::tests::{LONG, SCOPE, manager};
use super::*;
use crate::process::MAX_INPUT_BYTES;
use crate::process::{OutputSnapshot, ProcessBackend, ReadFrom, Until};
use crate::terminal::{Key, TerminalSize};

fn terminal(command: &str) -> StartRequest {
    StartRequest {
        command: command.to_owned(),
        stdin: Stdin::Terminal(TerminalSize { rows: 24, cols: 80 }),
        ..StartRequest::default()
    }
}

async fn until(manager: &ProcessManager, id: &str, until: Until) -> OutputSnapshot {
    manager
        .wait_until(SCOPE, id, until, LONG, ReadFrom::All)
        .await
        .expect("wait_until")
}

#[tokio::test]
async fn a_prompt_on_dev_tty_is_answered_and_echo_off_hides_the_secret() {
    let (_dir, manager) = manager();
    let command = "printf 'Continue? ' > /dev/tty; read x < /dev/tty; echo got:$x; \
                   stty -echo; printf 'Password: '; read p; stty echo; echo; echo len:${#p}";
    let id = manager
        .start(SCOPE, terminal(command))
        .await
        .expect("start");
    let out = until(&manager, &id, Until::Text("Continue? ".into())).await;
    assert!(out.running, "{out:?}");
    manager
        .write_input(SCOPE, &id, b"yes\n", &[])
        .await
        .expect("answer");
    until(&manager, &id, Until::Text("Password: ".into())).await;
    manager
        .write_input(SCOPE, &id, b"hunter2", &[Key::Enter])
        .await
        .expect("password");
    let out = manager
        .wait(SCOPE, &id, LONG, ReadFrom::All)
        .await
        .expect("wait");
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert!(out.text.contains("got:yes"), "{:?}", out.text);
    assert!(out.text.contains("len:7"), "{:?}", out.text);
    assert!(
        !out.text.contains("hunter2"),
        "the secret was echoed: {:?}",
        out.text
    );
    // The stream view: no carriage returns from the terminal's line endings.
    assert!(!out.text.contains('\r'), "{:?}", out.text);
}

/// Says `ready` once SIGINT has its default action and then sleeps. (A shell's `echo ready;
/// sleep 30` would race: a Ctrl-C between the echo and the `exec` of `sleep` reaches the
/// forked shell's handler, and the sleep never sees it.)
const SLEEPER: &str = "exec python3 -c \"import signal, time; \
                       signal.signal(signal.SIGINT, signal.SIG_DFL); \
                       print('ready', flush=True); time.sleep(30)\"";

#[tokio::test]
async fn ctrl_c_interrupts_and_the_result_says_sigint() {
    let (_dir, manager) = manager();
    let id = manager
        .start(SCOPE, terminal(SLEEPER))
        .await
        .expect("start");
    until(&manager, &id, Until::Text("ready".into())).await;
    manager
        .write_input(SCOPE, &id, b"", &[Key::Ctrl('c')])
        .await
        .expect("ctrl-c");
    let out = manager
        .wait(SCOPE, &id, LONG, ReadFrom::All)
        .await
        .expect("wait");
    assert!(!out.running, "{out:?}");
    assert_eq!(out.signal.as_deref(), Some("SIGINT"), "{out:?}");
}

#[tokio::test]
async fn the_screen_follows_a_full_screen_program_and_a_resize() {
    let (_dir, manager) = manager();
    // Draws its size at the top left of a cleared screen, again on every SIGWINCH.
    let command = "draw() { printf '\\033[2J\\033[Hsize %s' \"$(stty size)\"; }; \
                   trap draw WINCH; draw; while :; do sleep 0.05; done";
    let id = manager
        .start(SCOPE, terminal(command))
        .await
        .expect("start");
    until(&manager, &id, Until::Text("size 24 80".into())).await;
    let screen = manager.screen(SCOPE, &id).expect("screen");
    assert_eq!(screen.rows[0], "size 24 80");
    assert_eq!(screen.rows.len(), 24);
    assert_eq!((screen.cursor_row, screen.cursor_col), (0, 10));
    manager
        .resize(SCOPE, &id, TerminalSize { rows: 10, cols: 40 })
        .expect("resize");
    until(&manager, &id, Until::Text("size 10 40".into())).await;
    let screen = manager.screen(SCOPE, &id).expect("screen");
    assert_eq!(screen.rows[0], "size 10 40");
    assert_eq!(screen.size, TerminalSize { rows: 10, cols: 40 });
    for size in [(0, 80), (24, 5000), (1000, 1000)] {
        let error = manager
            .resize(
                SCOPE,
                &id,
                TerminalSize {
                    rows: size.0,
                    cols: size.1,
                },
            )
            .expect_err("absurd size");
        assert!(matches!(error, ProcessError::InvalidRequest(_)), "{error}");
    }
    manager.signal(SCOPE, &id, Signal::Kill).expect("kill");
}

#[tokio::test]
async fn a_stdin_pipe_takes_input_and_ends_at_close() {
    let (_dir, manager) = manager();
    let request = StartRequest {
        command: "while read line; do echo \"<$line>\"; done; echo eof".to_owned(),
        stdin: Stdin::Pipe,
        ..StartRequest::default()
    };
    let id = manager.start(SCOPE, request).await.expect("start");
    manager
        .write_input(SCOPE, &id, b"one\ntwo", &[Key::Enter])
        .await
        .expect("write");
    let out = until(&manager, &id, Until::Text("<two>".into())).await;
    assert!(out.text.contains("<one>\n<two>"), "{:?}", out.text);
    // Nothing more comes: a quiet wait returns while it still runs.
    let out = until(&manager, &id, Until::Quiet(Duration::from_millis(200))).await;
    assert!(out.running);
    manager.close_input(SCOPE, &id).await.expect("close");
    let out = manager
        .wait(SCOPE, &id, LONG, ReadFrom::All)
        .await
        .expect("wait");
    assert_eq!(out.exit_code, Some(0));
    assert!(out.text.ends_with("eof\n"), "{:?}", out.text);
    let error = manager
        .write_input(SCOPE, &id, b"late\n", &[])
        .await
        .expect_err("exited");
    assert!(matches!(error, ProcessError::NotRunning(_)), "{error}");
}

#[tokio::test]
async fn input_that_cannot_be_taken_is_a_clear_error() {
    let (_dir, manager) = manager();
    let closed = manager
        .start(SCOPE, tests::request("sleep 30"))
        .await
        .expect("start");
    let error = manager
        .write_input(SCOPE, &closed, b"x", &[])
        .await
        .expect_err("closed stdin");
    assert!(error.to_string().contains("takes no input"), "{error}");
    let error = manager.screen(SCOPE, &closed).expect_err("no terminal");
    assert!(error.to_string().contains("has no terminal"), "{error}");
    let error = manager
        .write_input(SCOPE, "nope", b"x", &[])
        .await
        .expect_err("unknown id");
    assert!(matches!(error, ProcessError::NotFound(_)), "{error}");

    let id = manager.start(SCOPE, terminal("cat")).await.expect("start");
    let big = vec![b'x'; MAX_INPUT_BYTES + 1];
    let error = manager
        .write_input(SCOPE, &id, &big, &[])
        .await
        .expect_err("too much");
    assert!(error.to_string().contains("at most 65536"), "{error}");
    let error = manager
        .write_input(SCOPE, &id, b"", &[Key::Function(13)])
        .await
        .expect_err("no such key");
    assert!(error.to_string().contains("F13"), "{error}");
    let error = manager.close_input(SCOPE, &id).await.expect_err("terminal");
    assert!(error.to_string().contains("Ctrl-D"), "{error}");
    // The process is unharmed: it still echoes what it is sent.
    manager
        .write_input(SCOPE, &id, b"still here\n", &[])
        .await
        .expect("write");
    let out = manager
        .wait_until(
            SCOPE,
            &id,
            Until::Text("still here\nstill here".into()),
            LONG,
            ReadFrom::All,
        )
        .await
        .expect("echo");
    assert!(out.running, "{out:?}");
    let error = manager
        .start(
            SCOPE,
            StartRequest {
                stdin: Stdin::Terminal(TerminalSize { rows: 1, cols: 80 }),
                ..tests::request("true")
            },
        )
        .await
        .expect_err("absurd size");
    assert!(error.to_string().contains("out of bounds"), "{error}");
    for id in [&closed, &id] {
        manager.signal(SCOPE, id, Signal::Kill).expect("kill");
    }
}

#[tokio::test]
async fn a_progress_bar_reads_as_its_last_state() {
    let (_dir, manager) = manager();
    let id = manager
        .start(
            SCOPE,
            terminal("for p in 10 50 100; do printf '\\r\\033[32m%3d%%\\033[0m' $p; done; echo; echo done"),
        )
        .await
        .expect("start");
    let out = manager
        .wait(SCOPE, &id, LONG, ReadFrom::All)
        .await
        .expect("wait");
    assert_eq!(out.text, "100%\ndone\n");
}

/// A wait for quiet output ends as soon as the command is seen blocked reading its input,
/// long before the quiet time (here the program would give up waiting and print first).
#[tokio::test]
async fn a_program_blocked_reading_its_input_ends_a_quiet_wait_at_once() {
    let (_dir, manager) = manager();
    let long_quiet = Until::Quiet(Duration::from_secs(30));
    for stdin in [
        Stdin::Pipe,
        Stdin::Terminal(TerminalSize { rows: 24, cols: 80 }),
    ] {
        let request = StartRequest {
            command: "printf 'Name? '; timeout --foreground 5 sh -c 'read name' || echo gave-up"
                .to_owned(),
            stdin,
            ..StartRequest::default()
        };
        let id = manager.start(SCOPE, request).await.expect("start");
        let out = until(&manager, &id, long_quiet.clone()).await;
        assert!(out.running, "{stdin:?}: {out:?}");
        assert!(!out.text.contains("gave-up"), "{stdin:?}: {:?}", out.text);
        manager
            .write_input(SCOPE, &id, b"ada\n", &[])
            .await
            .expect("answer");
        let out = manager
            .wait(SCOPE, &id, LONG, ReadFrom::All)
            .await
            .expect("wait");
        assert_eq!(out.exit_code, Some(0), "{stdin:?}: {:?}", out.text);
    }
    // A program that sleeps with its input open is not waiting for it.
    let request = StartRequest {
        command: "sleep 0.5; echo woke".to_owned(),
        stdin: Stdin::Pipe,
        ..StartRequest::default()
    };
    let id = manager.start(SCOPE, request).await.expect("start");
    let out = until(&manager, &id, long_quiet).await;
    assert!(out.text.contains("woke"), "{out:?}");
}
