use super::*;
use crate::process::{BoxFuture, OutputSnapshot, ProcessBackend, ReadFrom};
use nix::unistd::Pid;

/// Long enough never to be reached by a passing test.
pub(super) const LONG: Duration = Duration::from_secs(10);
pub(super) const SCOPE: &str = "session-1";

fn test_config(dir: &Path) -> ProcessManagerConfig {
    ProcessManagerConfig {
        kill_grace: Duration::from_millis(300),
        retention: Duration::from_secs(60),
        drain_timeout: Duration::from_millis(300),
        state_dir: Some(dir.join("logs")),
        max_running_per_scope: 16,
        nice: 0,
        sandbox: sandbox::SandboxSettings {
            // The host's /tmp shared with the commands (they get a private one otherwise), for
            // the temporary directories these tests share with them.
            writable: vec![std::env::temp_dir().canonicalize().expect("temp dir")],
            // Each test has a state directory of its own: a scan of the real home would run
            // cold for each (tests/confinement/secret_scan.rs tests the scan).
            secret_scan: false,
            ..Default::default()
        },
        ..ProcessManagerConfig::default()
    }
}

pub(super) fn manager_with(
    edit: impl FnOnce(&mut ProcessManagerConfig),
) -> (tempfile::TempDir, Arc<ProcessManager>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = test_config(dir.path());
    edit(&mut config);
    (dir, ProcessManager::new(config))
}

pub(super) fn manager() -> (tempfile::TempDir, Arc<ProcessManager>) {
    manager_with(|_| {})
}

pub(super) fn request(command: &str) -> StartRequest {
    StartRequest {
        command: command.to_owned(),
        ..StartRequest::default()
    }
}

async fn start(manager: &ProcessManager, command: &str) -> String {
    manager.start(SCOPE, request(command)).await.expect("start")
}

async fn run(manager: &ProcessManager, command: &str) -> OutputSnapshot {
    run_in(manager, SCOPE, command).await
}

/// Start `command` in `scope` and wait until it finished.
async fn run_in(manager: &ProcessManager, scope: &str, command: &str) -> OutputSnapshot {
    let id = manager.start(scope, request(command)).await.expect("start");
    let snapshot = manager
        .wait(scope, &id, LONG, ReadFrom::All)
        .await
        .expect("wait");
    assert!(!snapshot.running, "`{command}` still running: {snapshot:?}");
    snapshot
}

/// The commands `scope` lists, as `list` orders them.
fn commands(manager: &ProcessManager, scope: &str) -> Vec<String> {
    manager
        .list(scope)
        .into_iter()
        .map(|info| info.command)
        .collect()
}

/// Live (non-zombie) processes whose command line contains `marker`.
fn live_processes_with(marker: &str) -> Vec<i32> {
    let Ok(proc_dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    proc_dir
        .flatten()
        .filter_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            if !String::from_utf8_lossy(&cmdline).contains(marker) {
                return None;
            }
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            let state = stat.rsplit_once(") ")?.1.chars().next()?;
            (state != 'Z' && state != 'X').then_some(pid)
        })
        .collect()
}

/// Whether a `sleep` whose command line has `marker` has been exec'd (not a shell's fork).
fn sleep_runs_with(marker: &str) -> bool {
    live_processes_with(marker).iter().any(|pid| {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|cmdline| cmdline.starts_with(b"sleep\0"))
    })
}

/// Poll `check` for up to 5 s (test-side only).
async fn eventually(mut check: impl FnMut() -> bool) -> bool {
    for _ in 0..500 {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

async fn wait_for_output(manager: &ProcessManager, id: &str, needle: &str) {
    let seen = eventually(|| {
        manager
            .read(SCOPE, id, ReadFrom::Cursor(0))
            .is_ok_and(|snapshot| snapshot.text.contains(needle))
    })
    .await;
    assert!(seen, "`{needle}` never appeared in the output of {id}");
}

#[tokio::test]
async fn runs_a_command_and_reports_output_and_exit() {
    let (_dir, manager) = manager();
    let snapshot = run(&manager, "echo hello").await;
    assert_eq!(snapshot.text, "hello\n");
    assert_eq!(snapshot.exit_code, Some(0));
    assert_eq!(snapshot.signal, None);
    assert_eq!(snapshot.cursor, 6);
    assert_eq!(snapshot.truncation, None);

    let snapshot = run(&manager, "echo out; exit 3").await;
    assert_eq!(snapshot.text, "out\n");
    assert_eq!(snapshot.exit_code, Some(3));
    assert_eq!(snapshot.signal, None);
}

#[tokio::test]
async fn stdout_and_stderr_are_merged_in_write_order() {
    let (_dir, manager) = manager();
    let snapshot = run(&manager, "echo a; echo b >&2; echo c").await;
    assert_eq!(snapshot.text, "a\nb\nc\n");
    let snapshot = run(
        &manager,
        "for i in 1 2 3 4; do echo o$i; echo e$i >&2; done",
    )
    .await;
    assert_eq!(snapshot.text, "o1\ne1\no2\ne2\no3\ne3\no4\ne4\n");
}

#[tokio::test]
async fn killed_by_signal_reports_128_plus_n_and_the_name() {
    let (_dir, manager) = manager();
    let snapshot = run(&manager, "kill -KILL $$").await;
    assert_eq!(snapshot.exit_code, Some(137));
    assert_eq!(snapshot.signal.as_deref(), Some("SIGKILL"));
    let snapshot = run(&manager, "kill -TERM $$").await;
    assert_eq!(snapshot.exit_code, Some(143));
    assert_eq!(snapshot.signal.as_deref(), Some("SIGTERM"));
}

#[tokio::test]
async fn environment_is_inherited_and_request_env_wins() {
    let (_dir, manager) = manager();
    let host_path = std::env::var("PATH").unwrap_or_default();
    let snapshot = run(&manager, r#"printf %s "$PATH""#).await;
    assert_eq!(snapshot.text, host_path);

    let id = manager
        .start(
            SCOPE,
            StartRequest {
                command: r#"printf '%s|%s' "$HOME" "$TOOLHOST_TEST_VAR""#.to_owned(),
                env: vec![
                    ("HOME".to_owned(), "/override".to_owned()),
                    ("TOOLHOST_TEST_VAR".to_owned(), "v 1".to_owned()),
                ],
                ..StartRequest::default()
            },
        )
        .await
        .expect("start");
    let snapshot = manager.wait(SCOPE, &id, LONG, ReadFrom::All).await;
    assert_eq!(snapshot.expect("wait").text, "/override|v 1");

    for key in ["", "A=B", "A\0B"] {
        let bad = StartRequest {
            command: "true".to_owned(),
            env: vec![(key.to_owned(), "x".to_owned())],
            ..StartRequest::default()
        };
        let error = manager.start(SCOPE, bad).await.expect_err("bad env name");
        assert!(
            matches!(error, ProcessError::InvalidRequest(_)),
            "{error:?}"
        );
    }
}

#[tokio::test]
async fn an_inherit_list_limits_the_host_environment() {
    let (_dir, manager) = manager();
    let id = manager
        .start(
            SCOPE,
            StartRequest {
                command: r#"printf '%s|%s|%s' "$PATH" "${HOME-unset}" "$MINE""#.to_owned(),
                env: vec![("MINE".to_owned(), "set".to_owned())],
                inherit_env: Some(vec!["PATH".to_owned()]),
                ..StartRequest::default()
            },
        )
        .await
        .expect("start");
    let snapshot = manager.wait(SCOPE, &id, LONG, ReadFrom::All).await;
    let host_path = std::env::var("PATH").unwrap_or_default();
    assert_eq!(
        snapshot.expect("wait").text,
        format!("{host_path}|unset|set")
    );
}

#[tokio::test]
async fn runs_in_the_requested_workdir_and_rejects_bad_ones() {
    let (dir, manager) = manager_with(|_| {});
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).expect("mkdir");
    let id = manager
        .start(
            SCOPE,
            StartRequest {
                command: "pwd".to_owned(),
                workdir: Some(sub.clone()),
                ..StartRequest::default()
            },
        )
        .await
        .expect("start");
    let snapshot = manager.wait(SCOPE, &id, LONG, ReadFrom::All).await;
    let printed = PathBuf::from(snapshot.expect("wait").text.trim_end());
    assert_eq!(
        printed.canonicalize().expect("canonical"),
        sub.canonicalize().expect("canonical")
    );
    assert_eq!(manager.list(SCOPE)[0].workdir, sub);

    let missing = dir.path().join("missing");
    let file = dir.path().join("file");
    std::fs::write(&file, "x").expect("write");
    for (workdir, problem) in [(&missing, "does not exist"), (&file, "is not a directory")] {
        let error = manager
            .start(
                SCOPE,
                StartRequest {
                    command: "true".to_owned(),
                    workdir: Some(workdir.clone()),
                    ..StartRequest::default()
                },
            )
            .await
            .expect_err("bad workdir");
        let ProcessError::InvalidRequest(message) = error else {
            panic!("not InvalidRequest: {error:?}");
        };
        assert!(
            message.contains(&workdir.display().to_string()),
            "{message}"
        );
        assert!(message.contains(problem), "{message}");
    }
}

#[tokio::test]
async fn relative_workdirs_and_the_default_come_from_the_config() {
    let base = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(base.path().join("rel")).expect("mkdir");
    let base_path = base.path().to_owned();
    let (_dir, manager) = manager_with(|config| config.default_workdir = Some(base_path));
    let snapshot = run(&manager, "pwd").await;
    assert_eq!(PathBuf::from(snapshot.text.trim_end()), base.path());
    let id = manager
        .start(
            SCOPE,
            StartRequest {
                command: "pwd".to_owned(),
                workdir: Some(PathBuf::from("rel")),
                ..StartRequest::default()
            },
        )
        .await
        .expect("start");
    let snapshot = manager.wait(SCOPE, &id, LONG, ReadFrom::All).await;
    let printed = snapshot.expect("wait").text;
    assert_eq!(PathBuf::from(printed.trim_end()), base.path().join("rel"));
}

#[tokio::test]
async fn empty_commands_are_rejected() {
    let (_dir, manager) = manager();
    for command in ["", "   \n\t"] {
        let error = manager
            .start(SCOPE, request(command))
            .await
            .expect_err("empty");
        assert!(
            matches!(error, ProcessError::InvalidRequest(_)),
            "{error:?}"
        );
    }
    assert!(manager.list(SCOPE).is_empty());
}

#[tokio::test]
async fn children_lead_their_own_session_with_a_clean_slate() {
    let (_dir, manager) = manager_with(|config| config.nice = 3);
    // The signal state is read by a process the shell execs into: the shell's own mask
    // changes for a moment whenever it starts a command.
    let snapshot = run(
        &manager,
        "cat /proc/$$/stat; echo; ls /proc/$$/fd; \
         exec grep -E '^Sig(Blk|Ign)' /proc/self/status",
    )
    .await;
    let mut lines = snapshot.text.lines();
    let stat = lines.next().expect("stat line");
    let fields: Vec<&str> = stat.rsplit_once(") ").expect("comm").1.split(' ').collect();
    let pid = stat.split(' ').next().expect("pid");
    // state ppid pgrp session ...: its own process group and session.
    assert_eq!(fields[2], pid, "{stat}");
    assert_eq!(fields[3], pid, "{stat}");
    // Field 19 of stat (16 after the comm) is the nice value.
    assert_eq!(fields[16], "3", "{stat}");
    let rest: Vec<&str> = lines.filter(|line| !line.is_empty()).collect();
    // Only stdin, stdout and stderr: nothing of the host leaks into children.
    assert_eq!(rest[..3], ["0", "1", "2"], "{rest:?}");
    assert_eq!(rest[3], "SigBlk:\t0000000000000000", "{rest:?}");
    // SIGPIPE (bit 12) is not inherited as ignored from the Rust runtime. (Bits 31 and
    // 32, glibc's internal signals 32 and 33, are ignored in processes started by
    // `posix_spawn`, such as this test binary started by cargo; they are left alone.)
    let ignored = rest[4].strip_prefix("SigIgn:\t").expect("SigIgn");
    let ignored = u64::from_str_radix(ignored, 16).expect("hex");
    assert_eq!(ignored & !0x1_8000_0000, 0, "{rest:?}");
}

#[tokio::test]
async fn a_missing_shell_is_reported() {
    let (_dir, manager) = manager_with(|config| config.shell = PathBuf::from("/nonexistent/shell"));
    let error = manager
        .start(SCOPE, request("true"))
        .await
        .expect_err("no shell");
    let ProcessError::Failed(message) = error else {
        panic!("not Failed: {error:?}");
    };
    assert!(message.contains("/nonexistent/shell"), "{message}");
    assert!(manager.list(SCOPE).is_empty());
    // The slot taken for the failed start was given back.
    let (_dir, manager) = manager_with(|config| {
        config.shell = PathBuf::from("sh");
        config.max_running_per_scope = 1;
    });
    assert_eq!(
        run(&manager, "echo found in PATH").await.text,
        "found in PATH\n"
    );
}

#[tokio::test]
async fn stdin_is_at_end_of_file() {
    let (_dir, manager) = manager();
    let begun = Instant::now();
    let snapshot = run(&manager, r#"cat; read x; echo "read=$?""#).await;
    assert_eq!(snapshot.text, "read=1\n");
    assert!(begun.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn wait_returns_at_exit_or_at_the_timeout() {
    let (_dir, manager) = manager();
    let id = start(&manager, "sleep 0.2; echo done").await;
    let begun = Instant::now();
    let snapshot = manager.wait(SCOPE, &id, LONG, ReadFrom::All).await;
    let snapshot = snapshot.expect("wait");
    assert!(
        begun.elapsed() < Duration::from_secs(5),
        "{:?}",
        begun.elapsed()
    );
    assert!(!snapshot.running);
    assert_eq!(snapshot.text, "done\n");
    assert!(snapshot.duration_ms >= 150, "{}", snapshot.duration_ms);

    let id = start(&manager, "sleep 5").await;
    let begun = Instant::now();
    let timeout = Duration::from_millis(200);
    let snapshot = manager.wait(SCOPE, &id, timeout, ReadFrom::All).await;
    let snapshot = snapshot.expect("wait");
    let waited = begun.elapsed();
    assert!(
        waited >= timeout && waited < Duration::from_secs(2),
        "{waited:?}"
    );
    assert!(snapshot.running);
    assert_eq!(snapshot.exit_code, None);
    manager.signal(SCOPE, &id, Signal::Kill).expect("kill");
}

#[tokio::test]
async fn many_waiters_all_wake_at_exit() {
    let (_dir, manager) = manager();
    let id = start(&manager, "sleep 0.3; echo bye").await;
    let waiters: Vec<_> = (0..50)
        .map(|_| {
            let manager = Arc::clone(&manager);
            let id = id.clone();
            tokio::spawn(async move { manager.wait(SCOPE, &id, LONG, ReadFrom::Cursor(0)).await })
        })
        .collect();
    for waiter in waiters {
        let snapshot = waiter.await.expect("join").expect("wait");
        assert!(!snapshot.running);
        assert_eq!(snapshot.text, "bye\n");
    }
}

#[tokio::test]
async fn a_grandchild_holding_the_pipe_does_not_hang_wait() {
    let marker = "30.4242";
    let (_dir, manager) = manager();
    let id = start(&manager, &format!("sleep {marker} & echo started")).await;
    let begun = Instant::now();
    let snapshot = manager.wait(SCOPE, &id, LONG, ReadFrom::All).await;
    let snapshot = snapshot.expect("wait");
    assert!(
        begun.elapsed() < Duration::from_secs(2),
        "{:?}",
        begun.elapsed()
    );
    assert!(!snapshot.running);
    assert_eq!(snapshot.exit_code, Some(0));
    assert!(snapshot.text.starts_with("started\n"), "{}", snapshot.text);
    assert_eq!(
        snapshot.left_running.len(),
        1,
        "{:?}",
        snapshot.left_running
    );
    assert_eq!(snapshot.left_running[0].command, format!("sleep {marker}"));
    // The grandchild lives on in the group until the record goes; dropping the manager
    // kills it.
    assert!(!live_processes_with(marker).is_empty());
    drop(manager);
    assert!(eventually(|| live_processes_with(marker).is_empty()).await);
}

#[tokio::test]
async fn a_command_that_leaves_processes_returns_at_its_exit_and_lists_them() {
    // The drain may wait long: a fixed wait for the pipe's end would show in the output.
    let (_dir, manager) = manager_with(|config| config.drain_timeout = LONG);
    let id = start(&manager, "(sleep 1.5; echo late) & echo done").await;
    let snapshot = manager.wait(SCOPE, &id, LONG, ReadFrom::All).await;
    let snapshot = snapshot.expect("wait");
    assert!(!snapshot.running);
    assert!(snapshot.text.starts_with("done\n"), "{}", snapshot.text);
    assert!(
        !snapshot.text.contains("\nlate\n"),
        "the result waited for the leftover: {}",
        snapshot.text
    );
    let left: Vec<&str> = snapshot
        .left_running
        .iter()
        .map(|leftover| leftover.command.as_str())
        .collect();
    assert!(left.contains(&"sleep 1.5"), "{left:?}");
    // What the leftover writes later is not lost.
    wait_for_output(&manager, &id, "late").await;
}

async fn group_signal_reaches_grandchildren(signal: Signal, marker: &str, name: &str) {
    let (_dir, manager) = manager();
    let id = start(&manager, &format!("sleep {marker} & sleep {marker} & wait")).await;
    // The shell and both sleeps.
    assert!(eventually(|| live_processes_with(marker).len() >= 3).await);
    manager.signal(SCOPE, &id, signal).expect("signal");
    let snapshot = manager.wait(SCOPE, &id, LONG, ReadFrom::All).await;
    let snapshot = snapshot.expect("wait");
    assert!(!snapshot.running);
    assert_eq!(snapshot.signal.as_deref(), Some(name));
    assert!(
        eventually(|| live_processes_with(marker).is_empty()).await,
        "left behind: {:?}",
        live_processes_with(marker)
    );
}

#[tokio::test]
async fn terminate_reaches_grandchildren() {
    group_signal_reaches_grandchildren(Signal::Terminate, "300.111", "SIGTERM").await;
}

#[tokio::test]
async fn kill_reaches_grandchildren() {
    group_signal_reaches_grandchildren(Signal::Kill, "300.222", "SIGKILL").await;
}

#[tokio::test]
async fn terminate_escalates_to_kill_after_the_grace() {
    let marker = "30.333";
    let (_dir, manager) = manager();
    let id = start(
        &manager,
        &format!("trap '' TERM; echo ready; sleep {marker}"),
    )
    .await;
    wait_for_output(&manager, &id, "ready").await;
    let begun = Instant::now();
    manager
        .signal(SCOPE, &id, Signal::Terminate)
        .expect("terminate");
    let snapshot = manager.wait(SCOPE, &id, LONG, ReadFrom::All).await;
    let snapshot = snapshot.expect("wait");
    let waited = begun.elapsed();
    assert!(!snapshot.running);
    assert_eq!(snapshot.signal.as_deref(), Some("SIGKILL"));
    assert_eq!(snapshot.exit_code, Some(137));
    assert!(waited >= Duration::from_millis(250), "{waited:?}");
    assert!(waited < Duration::from_secs(3), "{waited:?}");
    assert!(eventually(|| live_processes_with(marker).is_empty()).await);
}

#[tokio::test]
async fn interrupt_sends_sigint() {
    let (_dir, manager) = manager();
    let id = start(
        &manager,
        "trap 'echo got-int; exit 7' INT; echo ready; sleep 30.444 >/dev/null 2>&1 & wait",
    )
    .await;
    wait_for_output(&manager, &id, "ready").await;
    manager
        .signal(SCOPE, &id, Signal::Interrupt)
        .expect("interrupt");
    let snapshot = manager.wait(SCOPE, &id, LONG, ReadFrom::All).await;
    let snapshot = snapshot.expect("wait");
    assert!(!snapshot.running);
    assert_eq!(snapshot.exit_code, Some(7));
    assert!(
        snapshot.text.starts_with("ready\ngot-int\n"),
        "{}",
        snapshot.text
    );
}

#[tokio::test]
async fn unknown_ids_are_not_found_and_exited_ones_not_running() {
    let (_dir, manager) = manager();
    let missing = ProcessError::NotFound("nope".to_owned());
    assert_eq!(
        manager.read(SCOPE, "nope", ReadFrom::All),
        Err(missing.clone())
    );
    assert_eq!(
        manager.signal(SCOPE, "nope", Signal::Kill),
        Err(missing.clone())
    );
    let waited = manager.wait(SCOPE, "nope", LONG, ReadFrom::All).await;
    assert_eq!(waited, Err(missing));

    let snapshot = run(&manager, "true").await;
    assert_eq!(snapshot.exit_code, Some(0));
    // No output, so no log file either.
    assert_eq!(snapshot.log_path, None);
    let id = manager.list(SCOPE)[0].id.clone();
    for signal in [Signal::Terminate, Signal::Kill, Signal::Interrupt] {
        assert_eq!(
            manager.signal(SCOPE, &id, signal),
            Err(ProcessError::NotRunning(id.clone()))
        );
    }
}

#[tokio::test]
async fn scopes_are_isolated() {
    let marker = "30.555";
    let (_dir, manager) = manager();
    let id = manager
        .start("a", request(&format!("echo secret; sleep {marker}")))
        .await
        .expect("start");
    let seen = eventually(|| {
        manager
            .read("a", &id, ReadFrom::All)
            .is_ok_and(|snapshot| snapshot.text == "secret\n")
    });
    assert!(seen.await);
    let not_found = ProcessError::NotFound(id.clone());
    assert!(manager.list("b").is_empty());
    assert_eq!(manager.list("a").len(), 1);
    assert_eq!(
        manager.read("b", &id, ReadFrom::All),
        Err(not_found.clone())
    );
    assert_eq!(
        manager.signal("b", &id, Signal::Kill),
        Err(not_found.clone())
    );
    assert_eq!(
        manager.wait("b", &id, Duration::ZERO, ReadFrom::All).await,
        Err(not_found)
    );
    manager.end_scope("b").await;
    assert!(manager.read("a", &id, ReadFrom::All).expect("read").running);

    let (snapshot, ()) = tokio::join!(
        manager.wait("a", &id, LONG, ReadFrom::All),
        manager.end_scope("a")
    );
    let snapshot = snapshot.expect("wait");
    assert!(!snapshot.running);
    assert_eq!(snapshot.text, "secret\n");
    assert!(eventually(|| live_processes_with(marker).is_empty()).await);
    // An ended scope's records are gone with it (their keepers reaped, their cgroups closed).
    assert!(manager.list("a").is_empty());
    assert!(matches!(
        manager.read("a", &id, ReadFrom::All),
        Err(ProcessError::NotFound(_))
    ));
}

#[tokio::test]
async fn end_scope_waits_for_stubborn_processes_then_kills_them() {
    let marker = "30.999";
    let (_dir, manager) = manager();
    let polite = start(&manager, "sleep 30").await;
    let stubborn = start(
        &manager,
        &format!("trap '' TERM; echo ready; sleep {marker}"),
    )
    .await;
    wait_for_output(&manager, &stubborn, "ready").await;
    let begun = Instant::now();
    let (polite, stubborn, ()) = tokio::join!(
        manager.wait(SCOPE, &polite, LONG, ReadFrom::All),
        manager.wait(SCOPE, &stubborn, LONG, ReadFrom::All),
        manager.end_scope(SCOPE)
    );
    let waited = begun.elapsed();
    assert!(waited >= Duration::from_millis(250), "{waited:?}");
    assert!(waited < Duration::from_secs(3), "{waited:?}");
    assert_eq!(polite.expect("wait").signal.as_deref(), Some("SIGTERM"));
    assert_eq!(stubborn.expect("wait").signal.as_deref(), Some("SIGKILL"));
    assert!(
        live_processes_with(marker).is_empty(),
        "{:?}",
        survivors(marker)
    );
}

#[tokio::test]
async fn end_scope_kills_leftovers_of_finished_processes() {
    let marker = "300.888";
    let (_dir, manager) = manager();
    let snapshot = run(&manager, &format!("sleep {marker} >/dev/null 2>&1 &")).await;
    assert_eq!(snapshot.exit_code, Some(0));
    assert!(eventually(|| !live_processes_with(marker).is_empty()).await);
    manager.end_scope(SCOPE).await;
    assert!(eventually(|| live_processes_with(marker).is_empty()).await);
}

/// What a finished command left behind gets the grace period too: `SIGTERM`, time to finish,
/// and only then `SIGKILL`.
#[tokio::test]
async fn leftovers_of_finished_processes_get_the_grace_period() {
    let marker = "300.889";
    let (_dir, manager) = manager_with(|config| config.kill_grace = Duration::from_secs(5));
    // Not beside the state directory: a confined command cannot create entries next to a
    // hidden path.
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let record = elsewhere.path().join("graceful");
    let ready = elsewhere.path().join("ready");
    let command = format!(
        "(trap 'sleep 0.3; echo graceful > {record}; exit 0' TERM; echo up > {ready}; \
         while :; do sleep {marker}; done) >/dev/null 2>&1 &",
        record = record.display(),
        ready = ready.display()
    );
    let snapshot = run(&manager, &command).await;
    assert_eq!(snapshot.exit_code, Some(0));
    // The forked subshell shows the marker in its command line before its trap is set, and a
    // SIGTERM while it forks `sleep` is taken by the child's inherited handler and lost: wait
    // until `sleep` itself runs.
    assert!(eventually(|| ready.exists() && sleep_runs_with(marker)).await);
    manager.end_scope(SCOPE).await;
    assert_eq!(
        std::fs::read_to_string(&record).ok().as_deref(),
        Some("graceful\n"),
        "killed before its grace period was over"
    );
    assert!(eventually(|| live_processes_with(marker).is_empty()).await);
}

#[tokio::test]
async fn running_processes_are_capped_per_host() {
    let (_dir, manager) = manager_with(|config| config.max_running_total = 2);
    let first = manager.start("a", request("sleep 30")).await.expect("a");
    manager.start("b", request("sleep 30")).await.expect("b");
    let error = manager
        .start("c", request("true"))
        .await
        .expect_err("a third session's start is over the host's limit");
    let ProcessError::LimitReached(message) = error else {
        panic!("not LimitReached: {error:?}");
    };
    assert!(
        message.contains("maximum of 2") && message.contains("--max-processes-total"),
        "{message}"
    );
    manager.signal("a", &first, Signal::Kill).expect("kill");
    manager
        .wait("a", &first, LONG, ReadFrom::All)
        .await
        .expect("wait");
    // Room again once nothing of it is left (its keeper reaped, just after the exit).
    let deadline = Instant::now() + Duration::from_secs(5);
    while manager.start("c", request("true")).await.is_err() {
        assert!(Instant::now() < deadline, "no room after the process ended");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    manager.shutdown().await;
}

#[tokio::test]
async fn leftovers_of_finished_commands_count_against_the_host_limit() {
    let marker = "300.4545";
    let (_dir, manager) = manager_with(|config| config.max_running_total = 1);
    // Finishes at once, but what it started runs on and holds its keeper.
    let snapshot = run(&manager, &format!("sleep {marker} &")).await;
    assert_eq!(snapshot.exit_code, Some(0));
    let error = manager
        .start("other", request("true"))
        .await
        .expect_err("the leftover still counts");
    assert!(matches!(error, ProcessError::LimitReached(_)), "{error:?}");
    manager.end_scope(SCOPE).await;
    assert!(eventually(|| live_processes_with(marker).is_empty()).await);
    manager
        .start("other", request("true"))
        .await
        .expect("room once the scope ended");
    manager.shutdown().await;
}

#[tokio::test]
async fn running_processes_are_capped_per_scope() {
    let (_dir, manager) = manager_with(|config| config.max_running_per_scope = 2);
    let first = manager
        .start("a", request("sleep 30"))
        .await
        .expect("first");
    manager
        .start("a", request("sleep 30"))
        .await
        .expect("second");
    let error = manager
        .start("a", request("sleep 30"))
        .await
        .expect_err("third");
    let ProcessError::LimitReached(message) = error else {
        panic!("not LimitReached: {error:?}");
    };
    assert!(message.contains('2'), "{message}");
    manager
        .start("b", request("true"))
        .await
        .expect("other scope");

    manager.signal("a", &first, Signal::Kill).expect("kill");
    let snapshot = manager.wait("a", &first, LONG, ReadFrom::All).await;
    assert!(!snapshot.expect("wait").running);
    manager
        .start("a", request("true"))
        .await
        .expect("room again");
}

/// The scopes of one owner share its limit; scopes of another owner, and scopes without
/// one, do not count in it.
#[tokio::test]
async fn running_processes_are_capped_per_owner() {
    let (_dir, manager) = manager_with(|config| config.max_running_per_owner = 1);
    for scope in ["m1", "m2"] {
        manager.set_owner(scope, "mallory");
    }
    manager.set_owner("a1", "alice");
    let first = manager
        .start("m1", request("sleep 30"))
        .await
        .expect("mallory's first");
    let error = manager
        .start("m2", request("true"))
        .await
        .expect_err("mallory's second, in another scope of hers");
    let ProcessError::LimitReached(message) = error else {
        panic!("not LimitReached: {error:?}");
    };
    assert!(
        message.contains("--max-processes-per-principal"),
        "{message}"
    );
    manager
        .start("a1", request("sleep 30"))
        .await
        .expect("alice's");
    manager
        .start("unowned", request("true"))
        .await
        .expect("a scope without an owner");
    manager.signal("m1", &first, Signal::Kill).expect("kill");
    let snapshot = manager.wait("m1", &first, LONG, ReadFrom::All).await;
    assert!(!snapshot.expect("wait").running);
    manager
        .start("m2", request("true"))
        .await
        .expect("room again for mallory");
    manager.shutdown().await;
}

#[tokio::test]
async fn exited_processes_are_removed_after_retention() {
    let (_dir, manager) = manager_with(|config| config.retention = Duration::from_millis(200));
    let id = start(&manager, "echo hi").await;
    let snapshot = manager.wait(SCOPE, &id, LONG, ReadFrom::All).await;
    let log_path = snapshot.expect("wait").log_path.expect("log path");
    assert_eq!(std::fs::read_to_string(&log_path).expect("log"), "hi\n");
    let gone = eventually(|| {
        manager.read(SCOPE, &id, ReadFrom::All) == Err(ProcessError::NotFound(id.clone()))
    })
    .await;
    assert!(gone);
    assert!(manager.list(SCOPE).is_empty());
    // The log outlives the record: a path given to a model stays valid for the log retention,
    // and the scope can still read it.
    assert!(log_path.exists());
    assert_eq!(manager.output_log(SCOPE, &id), Some(log_path.clone()));
    assert_eq!(manager.output_log("another scope", &id), None);
    manager.end_scope(SCOPE).await;
    assert_eq!(manager.output_log(SCOPE, &id), None, "the scope ended");
    assert!(log_path.exists(), "the file stays for the retention");
}

#[tokio::test]
async fn logs_outlive_their_host_until_a_later_host_sweeps_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let manager = ProcessManager::new(test_config(dir.path()));
    let id = start(&manager, "echo kept").await;
    let snapshot = manager.wait(SCOPE, &id, LONG, ReadFrom::All).await;
    let log_path = snapshot.expect("wait").log_path.expect("log path");
    manager.shutdown().await;
    drop(manager);
    assert_eq!(std::fs::read_to_string(&log_path).expect("log"), "kept\n");
    // A host within the retention keeps it.
    let later = ProcessManager::new(test_config(dir.path()));
    assert!(log_path.exists());
    later.shutdown().await;
    drop(later);
    // One whose retention it is past, started within the sweep interval of the last sweep
    // (hosts that start often sweep once per interval), leaves it.
    let mut config = test_config(dir.path());
    config.log_retention = Duration::ZERO;
    let log_dir = log_path.parent().expect("log dir");
    let stamp = std::fs::File::options()
        .write(true)
        .open(log_dir.join(".swept"))
        .expect("the sweep stamp");
    // Swept just now, whatever time the steps above took.
    stamp
        .set_modified(std::time::SystemTime::now())
        .expect("mtime");
    let not_due = ProcessManager::new(config.clone());
    assert!(log_path.exists());
    not_due.shutdown().await;
    drop(not_due);
    // Past the interval, it deletes it at start.
    stamp
        .set_modified(std::time::SystemTime::now() - Duration::from_secs(3600))
        .expect("mtime");
    let sweeping = ProcessManager::new(config);
    assert!(!log_path.exists());
    sweeping.shutdown().await;
}

#[tokio::test]
async fn cursor_and_unread_give_only_new_output() {
    let (dir, manager) = manager();
    let flag = dir.path().join("flag");
    let command = format!(
        "echo one; while [ ! -e '{}' ]; do sleep 0.01; done; echo two",
        flag.display()
    );
    let id = start(&manager, &command).await;
    wait_for_output(&manager, &id, "one").await;
    // The cursor reads above did not move the unread mark; an unread read does.
    let snapshot = manager.read(SCOPE, &id, ReadFrom::Unread).expect("read");
    assert_eq!(snapshot.text, "one\n");
    assert_eq!(snapshot.cursor, 4);
    assert!(snapshot.running);
    let snapshot = manager.read(SCOPE, &id, ReadFrom::Unread).expect("read");
    assert_eq!(snapshot.text, "");

    std::fs::write(&flag, "").expect("flag");
    let snapshot = manager.wait(SCOPE, &id, LONG, ReadFrom::Unread).await;
    let snapshot = snapshot.expect("wait");
    assert_eq!(snapshot.text, "two\n");
    assert_eq!(snapshot.cursor, 8);
    assert_eq!(
        manager
            .read(SCOPE, &id, ReadFrom::Unread)
            .expect("read")
            .text,
        ""
    );
    let read = |cursor| {
        manager
            .read(SCOPE, &id, ReadFrom::Cursor(cursor))
            .expect("read")
    };
    assert_eq!(read(4).text, "two\n");
    assert_eq!(read(6).text, "o\n");
    assert_eq!(read(8).text, "");
    assert_eq!(read(100).text, "");
    let all = manager.read(SCOPE, &id, ReadFrom::All).expect("read");
    assert_eq!(all.text, "one\ntwo\n");
}

fn seq_output(n: u32) -> String {
    (1..=n).map(|i| format!("{i}\n")).collect()
}

#[tokio::test]
async fn the_log_file_has_everything_the_buffer_dropped() {
    let (_dir, manager) = manager_with(|config| {
        config.head_bytes = 64;
        config.tail_bytes = 64;
    });
    let expected = seq_output(20000);
    let snapshot = run(&manager, "seq 1 20000").await;
    let truncation = snapshot.truncation.expect("truncated");
    assert_eq!(truncation.original_bytes, expected.len() as u64);
    assert_eq!(snapshot.cursor, expected.len() as u64);
    assert!(snapshot.text.starts_with("1\n2\n"));
    assert!(snapshot.text.ends_with("19999\n20000\n"));
    let log = std::fs::read_to_string(snapshot.log_path.expect("log path")).expect("log");
    assert!(log == expected, "log has {} bytes", log.len());
}

#[tokio::test]
async fn the_log_file_is_capped() {
    let (_dir, manager) = manager_with(|config| config.log_cap_bytes = 1000);
    let expected = seq_output(20000);
    let snapshot = run(&manager, "seq 1 20000").await;
    let log = std::fs::read(snapshot.log_path.expect("log path")).expect("log");
    assert_eq!(log, expected.as_bytes()[..1000]);
}

#[tokio::test]
async fn processes_run_without_a_usable_log_dir() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("file");
    std::fs::write(&file, "").expect("write");
    let (_dir, manager) = manager_with(|config| config.state_dir = Some(file.join("logs")));
    let snapshot = run(&manager, "echo ok").await;
    assert_eq!(snapshot.text, "ok\n");
    assert_eq!(snapshot.log_path, None);

    let (_dir, manager) = manager_with(|config| config.output_logs = false);
    assert_eq!(manager.log_dir(), None);
    let snapshot = run(&manager, "echo ok").await;
    assert_eq!(snapshot.log_path, None);
}

#[tokio::test]
async fn shutdown_leaves_nothing_behind() {
    let marker = "300.666";
    let (dir, manager) = manager();
    start(&manager, &format!("sleep {marker} & sleep {marker} & wait")).await;
    let stubborn = start(
        &manager,
        &format!("trap '' TERM; echo ready; sleep {marker}"),
    )
    .await;
    wait_for_output(&manager, &stubborn, "ready").await;
    run(&manager, "echo done").await;
    assert!(eventually(|| live_processes_with(marker).len() >= 4).await);
    let begun = Instant::now();
    manager.shutdown().await;
    assert!(
        begun.elapsed() < Duration::from_secs(3),
        "{:?}",
        begun.elapsed()
    );
    assert!(eventually(|| live_processes_with(marker).is_empty()).await);
    assert!(manager.list(SCOPE).is_empty());
    // The output logs stay for their retention (paths given to a model stay valid).
    assert_eq!(
        log_files(&dir.path().join("logs")),
        2,
        "the two processes that printed have one"
    );
    let error = manager
        .start(SCOPE, request("true"))
        .await
        .expect_err("closed");
    assert!(matches!(error, ProcessError::Failed(_)), "{error:?}");
}

/// How many output logs (`*.log`) `dir` holds.
fn log_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .expect("log dir")
        .filter(|entry| {
            entry
                .as_ref()
                .is_ok_and(|entry| entry.path().extension().is_some_and(|e| e == "log"))
        })
        .count()
}

#[tokio::test]
async fn dropping_the_manager_kills_everything() {
    let marker = "300.777";
    let (dir, manager) = manager();
    start(&manager, &format!("sleep {marker} & sleep {marker} & wait")).await;
    start(&manager, &format!("trap '' TERM INT; sleep {marker}")).await;
    assert!(eventually(|| live_processes_with(marker).len() >= 4).await);
    let keepers = manager.records.keepers();
    assert_eq!(keepers.len(), 2);
    drop(manager);
    // Every keeper was told to kill everything before the drop returned; the keepers are
    // reaped from another thread, soon after.
    assert!(eventually(|| live_processes_with(marker).is_empty()).await);
    let reaped = |pid: Pid| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| Some(stat.rsplit_once(") ")?.1.starts_with('Z')))
            != Some(true)
    };
    assert!(eventually(|| keepers.iter().all(|&pid| reaped(pid))).await);
    assert_eq!(log_files(&dir.path().join("logs")), 0);
}

#[tokio::test]
async fn list_shows_running_first_then_newest_first() {
    let (_dir, manager) = manager();
    let old_done = run(&manager, "echo 1").await;
    assert!(!old_done.running);
    let old_running = start(&manager, "sleep 30").await;
    run(&manager, "echo 2").await;
    let new_running = manager
        .start(
            SCOPE,
            StartRequest {
                command: "sleep 30".to_owned(),
                background: true,
                ..StartRequest::default()
            },
        )
        .await
        .expect("start");
    let list = manager.list(SCOPE);
    let commands: Vec<&str> = list.iter().map(|info| info.command.as_str()).collect();
    assert_eq!(commands, ["sleep 30", "sleep 30", "echo 2", "echo 1"]);
    assert_eq!(list[0].id, new_running);
    assert_eq!(list[1].id, old_running);
    assert!(list[0].background && !list[1].background);
    assert!(list[0].running && list[1].running);
    assert!(!list[2].running && !list[3].running);
    assert_eq!(list[2].exit_code, Some(0));
    assert!(
        list[2]
            .exited_ms
            .is_some_and(|exited| exited >= list[2].started_ms)
    );
    assert_eq!(list[0].exited_ms, None);
}

/// What this process's descriptors refer to (`pipe:[N]`, file paths, ...).
fn open_descriptors() -> Vec<String> {
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    fds.flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .map(|target| target.display().to_string())
        .collect()
}

/// A start of `command` polled once and left waiting for the spawner (retried in the
/// unlikely case that the spawner answered at once).
async fn start_under_way<'a>(
    manager: &'a ProcessManager,
    command: &str,
) -> BoxFuture<'a, Result<String, ProcessError>> {
    loop {
        let mut start = manager.start(SCOPE, request(command));
        let polled = start
            .as_mut()
            .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()));
        match polled {
            std::task::Poll::Pending => return start,
            std::task::Poll::Ready(started) => {
                let id = started.expect("start");
                manager.signal(SCOPE, &id, Signal::Kill).expect("kill");
            }
        }
    }
}

#[tokio::test]
async fn finished_records_hold_no_descriptors() {
    let marker = "300.1717";
    let (_dir, manager) = manager();
    let snapshot = run(&manager, "readlink /proc/$$/fd/1").await;
    let pipe = snapshot.text.lines().next().unwrap_or_default().to_owned();
    assert!(pipe.starts_with("pipe:["), "{pipe}");
    let log = snapshot.log_path.expect("log path");
    let log = log
        .canonicalize()
        .expect("log exists")
        .display()
        .to_string();
    let open = open_descriptors();
    assert!(!open.contains(&pipe), "the pipe is still open");
    assert!(!open.contains(&log), "the log file is still open");

    // A grandchild holds the pipe past the drain deadline: it keeps being read (so that
    // it does not block) until it ends.
    let id = start(
        &manager,
        &format!("readlink /proc/$$/fd/1; sleep {marker} &"),
    )
    .await;
    let snapshot = manager.wait(SCOPE, &id, LONG, ReadFrom::All).await;
    let snapshot = snapshot.expect("wait");
    assert!(!snapshot.running);
    let pipe = snapshot.text.lines().next().unwrap_or_default().to_owned();
    assert!(open_descriptors().contains(&pipe));
    manager
        .signal(SCOPE, &id, Signal::Kill)
        .expect("kill the leftover");
    assert!(eventually(|| !open_descriptors().contains(&pipe)).await);
    assert!(live_processes_with(marker).is_empty());
}

#[tokio::test]
async fn finished_records_beyond_the_hosts_cap_are_removed_oldest_first_across_scopes() {
    let marker = "300.2525";
    let (_dir, manager) = manager_with(|config| config.max_retained_total = 2);
    // Running processes do not count.
    let running = manager
        .start("c", request("sleep 30"))
        .await
        .expect("start");
    // The oldest finished record, but its leftover still runs: kept.
    let leftover = format!("echo l; sleep {marker} >/dev/null 2>&1 &");
    run_in(&manager, "l", &leftover).await;
    assert!(eventually(|| !live_processes_with(marker).is_empty()).await);
    run_in(&manager, "a", "echo a1").await;
    run_in(&manager, "b", "echo b1").await;
    // Over the cap: the host's oldest with nothing left running goes, from another scope (as
    // soon as its keeper is gone: it may still be exiting when the next record finishes).
    assert!(
        eventually(|| commands(&manager, "a").is_empty()).await,
        "{:?}",
        commands(&manager, "a")
    );
    assert_eq!(commands(&manager, "b"), ["echo b1"]);
    run_in(&manager, "b", "echo b2").await;
    assert!(
        eventually(|| commands(&manager, "b") == ["echo b2"]).await,
        "{:?}",
        commands(&manager, "b")
    );
    assert_eq!(commands(&manager, "l"), [leftover]);
    assert!(
        !live_processes_with(marker).is_empty(),
        "the leftover was killed"
    );
    assert_eq!(commands(&manager, "c"), ["sleep 30"]);
    manager.signal("c", &running, Signal::Kill).expect("kill");
    let id = manager.list("l")[0].id.clone();
    manager
        .signal("l", &id, Signal::Kill)
        .expect("kill the leftover");
    assert!(eventually(|| live_processes_with(marker).is_empty()).await);
}

#[tokio::test]
async fn finished_records_beyond_the_cap_are_removed_oldest_first() {
    let marker = "300.1818";
    let (_dir, manager) = manager_with(|config| config.max_retained_per_scope = 2);
    let first = run(
        &manager,
        &format!("echo 1; sleep {marker} >/dev/null 2>&1 &"),
    )
    .await;
    let first_log = first.log_path.expect("log path");
    assert!(eventually(|| !live_processes_with(marker).is_empty()).await);
    // Running processes and other scopes do not count.
    let running = start(&manager, "sleep 30").await;
    run(&manager, "echo 2").await;
    run_in(&manager, "b", "echo b").await;
    assert_eq!(commands(&manager, SCOPE).len(), 3);

    run(&manager, "echo 3").await;
    assert_eq!(commands(&manager, SCOPE), ["sleep 30", "echo 3", "echo 2"]);
    assert_eq!(commands(&manager, "b"), ["echo b"]);
    assert!(first_log.exists(), "logs stay for their retention");
    // The removed record's leftover was killed.
    assert!(eventually(|| live_processes_with(marker).is_empty()).await);
    manager.signal(SCOPE, &running, Signal::Kill).expect("kill");
}

#[tokio::test]
async fn a_start_dropped_mid_flight_leaves_nothing_behind() {
    let marker = "300.1919";
    let (_dir, manager) = manager();
    let command = format!("sleep {marker}");
    for round in 0..20 {
        let start = start_under_way(&manager, &command).await;
        if round % 2 == 1 {
            // Let the spawner answer: the answer is then dropped, unread, with the future.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        drop(start);
    }
    assert!(
        eventually(|| live_processes_with(marker).is_empty()).await,
        "left behind: {:?}",
        live_processes_with(marker)
    );
    // Every slot was given back: a start that was admitted before it was dropped gives its
    // slot back when its monitor has seen its process die, a moment after the process is gone.
    assert!(
        eventually(|| manager.records.busy(SCOPE) == 0).await,
        "busy slots left: {}",
        manager.records.busy(SCOPE)
    );
}

#[tokio::test]
async fn terminate_kills_members_that_outlive_the_leader() {
    let (marker, later) = ("300.2323", "300.2424");
    // Escalation used to be skipped when the process finished within the grace.
    let (_dir, manager) = manager_with(|config| {
        config.kill_grace = Duration::from_millis(600);
        config.drain_timeout = Duration::from_millis(100);
    });
    // The shell dies of SIGTERM at once; the subshell ignores it and holds the pipe.
    let id = start(
        &manager,
        &format!("(trap '' TERM; sleep {marker}) & echo ready; wait"),
    )
    .await;
    wait_for_output(&manager, &id, "ready").await;
    // `ready` may come before the subshell ignores SIGTERM: wait for its `sleep`.
    assert!(eventually(|| sleep_runs_with(marker)).await);
    let begun = Instant::now();
    manager
        .signal(SCOPE, &id, Signal::Terminate)
        .expect("terminate");
    let snapshot = manager.wait(SCOPE, &id, LONG, ReadFrom::All).await;
    assert_eq!(snapshot.expect("wait").signal.as_deref(), Some("SIGTERM"));
    assert!(eventually(|| live_processes_with(marker).is_empty()).await);
    let waited = begun.elapsed();
    assert!(waited >= Duration::from_millis(500), "{waited:?}");

    // Finished before the signal: its leftover can still be terminated.
    let snapshot = run(&manager, &format!("(trap '' TERM; sleep {later}) &")).await;
    assert_eq!(snapshot.exit_code, Some(0));
    let id = manager.list(SCOPE)[0].id.clone();
    assert!(!live_processes_with(later).is_empty());
    manager
        .signal(SCOPE, &id, Signal::Terminate)
        .expect("terminate the leftover");
    assert!(eventually(|| live_processes_with(later).is_empty()).await);
    // Nothing is left of it now.
    let not_running = eventually(|| {
        manager.signal(SCOPE, &id, Signal::Kill) == Err(ProcessError::NotRunning(id.clone()))
    });
    assert!(not_running.await);
}

#[tokio::test]
async fn end_scope_refuses_starts_still_under_way() {
    let marker = "300.2020";
    let (_dir, manager) = manager();
    let command = format!("sleep {marker}");
    let start = start_under_way(&manager, &command).await;
    manager.end_scope(SCOPE).await;
    let error = start.await.expect_err("refused");
    let ProcessError::Failed(message) = error else {
        panic!("not Failed: {error:?}");
    };
    assert!(message.contains("ended"), "{message}");
    assert!(
        eventually(|| live_processes_with(marker).is_empty()).await,
        "left behind: {:?}",
        live_processes_with(marker)
    );
    assert!(manager.list(SCOPE).iter().all(|info| !info.running));
    // The scope can be used again.
    assert_eq!(run(&manager, "echo again").await.text, "again\n");
}

#[test]
fn a_dropped_monitor_kills_its_process_and_gives_back_its_slot() {
    let marker = "300.2121";
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (_dir, manager) = runtime.block_on(async {
        let (dir, manager) = manager();
        start(&manager, &format!("sleep {marker}")).await;
        // The monitor is under way (this waiting yields to it).
        assert!(eventually(|| !live_processes_with(marker).is_empty()).await);
        (dir, manager)
    });
    assert!(!live_processes_with(marker).is_empty());
    // Drops the monitor's task.
    drop(runtime);
    assert!(manager.list(SCOPE).is_empty());
    assert!(manager.records.all_idle());
    let mut gone = false;
    for _ in 0..500 {
        gone = live_processes_with(marker).is_empty();
        if gone {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(gone, "left behind: {:?}", live_processes_with(marker));
}

/// A command whose descendants leave its process group and session every way people do
/// (`setsid`, `setsid -f`, GNU `timeout`, a double fork, `setpgrp` from Perl, `nohup`), each
/// running `sleep MARKER`, then prints `ready`.
fn escaping(marker: &str) -> String {
    format!(
        "setsid sleep {marker} & setsid -f sleep {marker}; timeout 999 sleep {marker} & \
         ( (sleep {marker} &) & ); perl -e 'setpgrp(0, 0); exec \"sleep\", \"{marker}\"' & \
         nohup sleep {marker} >/dev/null 2>&1 & echo ready; wait"
    )
}

/// `pid ppid state comm` of the live processes with `marker`, for failure messages.
fn survivors(marker: &str) -> Vec<String> {
    live_processes_with(marker)
        .into_iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .collect()
}

/// Wait until all six escapees of [`escaping`] run.
async fn six_running(marker: &str) {
    let running = eventually(|| live_processes_with(marker).len() >= 6);
    assert!(running.await, "only {:?}", live_processes_with(marker));
}

#[tokio::test]
async fn kill_reaches_what_left_the_group() {
    let marker = "300.4141";
    let (_dir, manager) = manager();
    let id = start(&manager, &escaping(marker)).await;
    wait_for_output(&manager, &id, "ready").await;
    six_running(marker).await;
    manager.signal(SCOPE, &id, Signal::Kill).expect("kill");
    assert!(
        eventually(|| live_processes_with(marker).is_empty()).await,
        "left behind: {:?}",
        live_processes_with(marker)
    );
    let snapshot = manager.wait(SCOPE, &id, LONG, ReadFrom::All).await;
    assert_eq!(snapshot.expect("wait").signal.as_deref(), Some("SIGKILL"));
    // Nothing is left to signal.
    let not_running = eventually(|| {
        manager.signal(SCOPE, &id, Signal::Kill) == Err(ProcessError::NotRunning(id.clone()))
    });
    assert!(not_running.await);
}

#[tokio::test]
async fn terminate_reaches_what_left_the_group_after_the_command_exited() {
    let marker = "300.4242";
    let (_dir, manager) = manager();
    // The shell exits at once; only the escapees are left.
    let snapshot = run(&manager, &escaping(marker).replace("; wait", "")).await;
    assert_eq!(snapshot.exit_code, Some(0));
    six_running(marker).await;
    let id = manager.list(SCOPE)[0].id.clone();
    manager
        .signal(SCOPE, &id, Signal::Terminate)
        .expect("terminate the leftovers");
    assert!(
        eventually(|| live_processes_with(marker).is_empty()).await,
        "left behind: {:?}",
        live_processes_with(marker)
    );
}

#[tokio::test]
async fn scope_end_shutdown_and_drop_reach_what_left_the_group() {
    let (_dir, manager) = manager();
    let (ended, shut, dropped) = ("300.4343", "300.4444", "300.4545");
    start(&manager, &escaping(ended)).await;
    six_running(ended).await;
    manager.end_scope(SCOPE).await;
    assert!(
        live_processes_with(ended).is_empty(),
        "end_scope waits until none is left"
    );

    start(&manager, &escaping(shut)).await;
    six_running(shut).await;
    manager.shutdown().await;
    assert!(
        live_processes_with(shut).is_empty(),
        "shutdown waits until none is left: {:?}",
        survivors(shut)
    );

    let (_dir, another) = manager_with(|_| {});
    start(&another, &escaping(dropped)).await;
    six_running(dropped).await;
    drop(another);
    assert!(
        eventually(|| live_processes_with(dropped).is_empty()).await,
        "left behind: {:?}",
        live_processes_with(dropped)
    );
}

#[tokio::test]
async fn a_finished_record_holds_no_keeper_or_cgroup() {
    let (_dir, manager) = manager();
    let id = start(&manager, "echo done").await;
    let snapshot = manager.wait(SCOPE, &id, LONG, ReadFrom::All).await;
    assert!(!snapshot.expect("wait").running);
    let entry = manager.records.find(SCOPE, &id).expect("still listed");
    // Once nothing of it is left, its keeper is reaped and its cgroups removed: a record kept
    // for its retention holds only its output.
    assert!(
        eventually(|| {
            crate::lock(&entry.keeper).pid.is_none() && crate::lock(&entry.cgroups).is_none()
        })
        .await
    );
    let read = manager.read(SCOPE, &id, ReadFrom::All).expect("read");
    assert_eq!(read.text, "done\n");
    assert_eq!(
        manager.signal(SCOPE, &id, Signal::Kill),
        Err(ProcessError::NotRunning(id.clone()))
    );
}

/// A confined command runs in its own cgroups (the keeper moves itself in before it starts
/// the command), for each controller the host may create cgroups with here.
#[tokio::test]
async fn a_confined_command_runs_in_its_own_cgroups() {
    let hierarchies = sandbox::cgroup::hierarchies();
    let expected: Vec<(&str, bool)> =
        [("pids", &hierarchies.pids), ("memory", &hierarchies.memory)]
            .into_iter()
            .filter_map(|(name, hierarchy)| Some((name, hierarchy.as_ref()?.v2)))
            .collect();
    if expected.is_empty() {
        eprintln!("no cgroup the host may create here: nothing to check");
        return;
    }
    let (_dir, manager) = manager();
    let ours = format!("/toolhost-{}-", std::process::id());
    let cgroups = run(&manager, "cat /proc/self/cgroup").await.text;
    for (controller, v2) in &expected {
        let line = cgroups
            .lines()
            .find(|line| {
                if *v2 {
                    line.starts_with("0::")
                } else {
                    line.split(':')
                        .nth(1)
                        .is_some_and(|list| list.split(',').any(|name| name == *controller))
                }
            })
            .unwrap_or_default();
        assert!(
            line.contains(&ours),
            "{controller}: not in the command's cgroup: {cgroups}"
        );
    }
}

/// Ending a scope deletes its private temporary directory without holding the lock every start
/// needs: another scope's command starts and ends while the deletion is still under way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ending_a_scope_with_many_temporary_files_holds_up_no_other_scope() {
    // No shared /tmp: each scope's commands write their own temporary directory.
    let (_dir, manager) = manager_with(|config| config.sandbox.writable.clear());
    let id = manager
        .start(
            "a",
            // Counted by name: a workdir under /tmp shows in the private /tmp too.
            request("cd \"$TMPDIR\" && seq 100000 | xargs touch && ls | grep -cx '[0-9]*'"),
        )
        .await
        .expect("start");
    // Making the files takes seconds on a loaded machine.
    let made = manager
        .wait("a", &id, Duration::from_secs(120), ReadFrom::All)
        .await
        .expect("wait");
    assert_eq!(made.text.trim(), "100000", "{}", made.text);
    if namespaces_available().is_ok() {
        // The files are in the session's tmpfs, which goes with its namespaces: the host
        // deletes nothing.
        eprintln!("namespaces here: the scope's temporary files are not the host's to delete");
        return;
    }
    // The other scope's sandbox is built before, so that its start only needs the lock.
    run_in(&manager, "b", "true").await;
    let teardown = tokio::spawn({
        let manager = manager.clone();
        async move {
            manager.end_scope("a").await;
            std::time::Instant::now()
        }
    });
    // The teardown has taken the scope's sandbox out of the table.
    while manager
        .scopes
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .contains_key("a")
    {
        tokio::task::yield_now().await;
    }
    let started = std::time::Instant::now();
    run_in(&manager, "b", "true").await;
    let other_done = std::time::Instant::now();
    let teardown_done = teardown.await.expect("teardown");
    eprintln!(
        "another scope's command took {:?} during the teardown (which took {:?} more)",
        other_done - started,
        teardown_done.saturating_duration_since(other_done)
    );
    assert!(
        other_done < teardown_done,
        "another scope's command waited for the teardown's deletion"
    );
}

/// The memory of a session's commands together is bounded: a command that takes a session
/// past its limit is killed with a note saying so, while another session is not held to it.
#[tokio::test]
async fn a_sessions_commands_together_are_bounded_by_the_session_memory_limit() {
    if sandbox::cgroup::hierarchies().memory.is_none() {
        eprintln!("no memory cgroup here: nothing bounds a session");
        return;
    }
    let mib = 1024 * 1024;
    let (_dir, manager) = manager_with(|config| {
        config.sandbox.limits.memory_bytes = Some(256 * mib);
        config.sandbox.memory_per_session = Some(112 * mib);
    });
    let hold = "/usr/bin/python3 -c 'import time; x = bytearray(64 << 20); \
                print(\"held\", flush=True); time.sleep(60)'";
    let take = "/usr/bin/python3 -c 'x = bytearray(64 << 20); print(len(x))'";
    let held = start(&manager, hold).await;
    wait_for_output(&manager, &held, "held").await;
    let second = run(&manager, take).await;
    // The kernel kills one of the session's processes: either may be chosen.
    let killed = if second.exit_code == Some(0) {
        manager
            .wait(SCOPE, &held, LONG, ReadFrom::All)
            .await
            .expect("wait")
    } else {
        second
    };
    assert!(!killed.running);
    assert!(
        killed
            .text
            .contains("reached the session's memory limit of 112 MiB"),
        "{}",
        killed.text
    );
    // Another session has a limit of its own.
    let other = run_in(&manager, "session-2", take).await;
    assert_eq!(other.exit_code, Some(0), "{}", other.text);
    assert!(other.text.starts_with("67108864"), "{}", other.text);
}

/// A `kill` of another command's process is refused by the sandbox (one Landlock domain per
/// command); the result names the command that owns the target, to stop it by its id.
#[tokio::test]
async fn a_refused_kill_names_the_command_that_owns_the_target() {
    let marker = "30.5151";
    let (_dir, manager) = manager();
    let server = start(&manager, &format!("sleep {marker}")).await;
    let killer = run(
        &manager,
        &format!("kill $(pgrep -f 'sleep {marker}' | head -n 1)"),
    )
    .await;
    assert_ne!(killer.exit_code, Some(0), "{}", killer.text);
    assert!(
        killer.text.contains("process_signal")
            && killer
                .text
                .contains(&format!("`sleep {marker}` is process {server}'s")),
        "{}",
        killer.text
    );
    assert!(
        manager
            .read(SCOPE, &server, ReadFrom::All)
            .expect("read")
            .running
    );
}

/// A process that a command forks while a terminate goes out (here from its `TERM` trap) gets
/// the signal too, at once, not only at the kill after the grace period.
#[tokio::test]
async fn terminate_reaches_what_is_forked_while_it_goes_out() {
    let marker = "30.6161";
    let (_dir, manager) = manager_with(|config| config.kill_grace = LONG);
    let id = start(
        &manager,
        &format!(
            "trap 'echo trapped; sleep {marker} &' TERM; echo ready; while :; do sleep 0.01; done"
        ),
    )
    .await;
    wait_for_output(&manager, &id, "ready").await;
    manager
        .signal(SCOPE, &id, Signal::Terminate)
        .expect("terminate");
    // The trap's child is forked after the signal went out: a later walk signals it, while
    // the shell (which traps TERM) runs on until the grace period ends.
    // The shell's own command line holds the marker too: only `sleep MARKER` counts.
    let sleeps = || {
        std::fs::read_dir("/proc").map_or(0, |entries| {
            entries
                .flatten()
                .filter(|entry| {
                    std::fs::read(entry.path().join("cmdline"))
                        .is_ok_and(|cmd| cmd == format!("sleep\0{marker}\0").as_bytes())
                })
                .count()
        })
    };
    wait_for_output(&manager, &id, "trapped").await;
    assert!(
        eventually(|| sleeps() == 0).await,
        "the trap's child outlived the terminate"
    );
    assert!(
        manager
            .read(SCOPE, &id, ReadFrom::All)
            .expect("read")
            .running,
        "the shell ended: the check came at the grace period's kill"
    );
    manager.signal(SCOPE, &id, Signal::Kill).expect("kill");
}

/// An unconfined command may kill its keeper; what it started (in a session of its own here)
/// is still listed as left running, stopped by a signal to the command, and gone with the
/// scope.
#[tokio::test]
async fn what_an_unconfined_command_left_after_killing_its_keeper_is_found_and_stopped() {
    let marker = "30.7171";
    let (_dir, manager) = manager_with(|config| config.sandbox.mode = sandbox::SandboxMode::Off);
    let sleeps = || {
        std::fs::read_dir("/proc").map_or(0, |entries| {
            entries
                .flatten()
                .filter(|entry| {
                    std::fs::read(entry.path().join("cmdline"))
                        .is_ok_and(|cmd| cmd == format!("sleep\0{marker}\0").as_bytes())
                })
                .count()
        })
    };
    for end_by_signal in [true, false] {
        let id = start(
            &manager,
            &format!("setsid sleep {marker} >/dev/null 2>&1 & sleep 0.2; kill -9 $PPID"),
        )
        .await;
        let out = manager.wait(SCOPE, &id, LONG, ReadFrom::All).await;
        let out = out.expect("wait");
        assert!(!out.running);
        assert_eq!(sleeps(), 1, "the session leader did not outlive the keeper");
        let listed = manager.list(SCOPE);
        let info = listed.iter().find(|info| info.id == id).expect("listed");
        assert!(
            info.left_running
                .iter()
                .any(|left| left.command == format!("sleep {marker}")),
            "{:?}",
            info.left_running
        );
        if end_by_signal {
            manager
                .signal(SCOPE, &id, Signal::Terminate)
                .expect("signal what it left");
        } else {
            manager.end_scope(SCOPE).await;
        }
        assert!(
            eventually(|| sleeps() == 0).await,
            "what it left outlived it"
        );
    }
}

/// The line of the pids cgroup (or the v2 one) in `text`, a `/proc/self/cgroup` the command
/// printed; empty when there is none.
fn pids_cgroup(text: &str) -> String {
    text.lines()
        .find(|line| {
            line.split(':')
                .nth(1)
                .is_some_and(|c| c.split(',').any(|c| c == "pids"))
                || line.starts_with("0::")
        })
        .map(str::to_owned)
        .unwrap_or_default()
}

/// A session's commands run in cgroups it keeps for them, not made for each; a cgroup whose
/// process limit was reached is not kept, so no later command is said to have reached it.
#[tokio::test]
async fn a_session_keeps_clean_command_cgroups_and_drops_one_whose_limit_was_reached() {
    if sandbox::cgroup::hierarchies().pids.is_none() {
        eprintln!("no pids cgroup here: commands get no cgroups to keep");
        return;
    }
    let (_dir, manager) = manager_with(|config| config.sandbox.limits.processes = Some(8));
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..8 {
        let done = run(&manager, "cat /proc/self/cgroup").await;
        assert_eq!(done.exit_code, Some(0), "{}", done.text);
        seen.insert(pids_cgroup(&done.text));
    }
    assert!(
        seen.len() <= 4,
        "8 commands in a row ran in {} cgroups: {seen:?}",
        seen.len()
    );
    let marker = "0.7171";
    let bomb = run(
        &manager,
        &format!("cat /proc/self/cgroup; for i in 1 2 3 4 5 6 7 8 9 10 11 12; do sleep {marker} & done; wait"),
    )
    .await;
    // Its leftovers gone, its cgroup is kept or removed.
    let deadline = std::time::Instant::now() + LONG;
    while !live_processes_with(marker).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the sleeps did not end"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        bomb.text.contains("reached its limit of 8 processes"),
        "{}",
        bomb.text
    );
    // The refusal is typed too, with the note the text ends with.
    let refused = bomb
        .refusals
        .iter()
        .find(|refused| refused.reason == sandbox::Refusal::Processes(8))
        .unwrap_or_else(|| panic!("a typed refusal: {:?}", bomb.refusals));
    assert!(bomb.text.contains(&refused.note), "{}", bomb.text);
    let full = pids_cgroup(&bomb.text);
    assert!(full.contains("toolhost-"), "{}", bomb.text);
    for _ in 0..8 {
        let done = run(&manager, "cat /proc/self/cgroup").await;
        assert!(
            !done.text.contains("reached its limit"),
            "a later command is said to have reached the limit: {}",
            done.text
        );
        assert!(done.refusals.is_empty(), "{:?}", done.refusals);
        assert_ne!(pids_cgroup(&done.text), full, "the full cgroup was kept");
    }
}

/// A session that runs many commands at once keeps a cgroup for each, up to its bound: a
/// second batch as large as the first runs in the first batch's cgroups, and makes none.
#[tokio::test]
async fn a_session_keeps_as_many_command_cgroups_as_it_ran_at_once() {
    let Some(hierarchy) = sandbox::cgroup::hierarchies().pids.clone() else {
        eprintln!("no pids cgroup here: commands get no cgroups to keep");
        return;
    };
    const AT_ONCE: usize = 10;
    // No keeper prepared ahead: each would take a cgroup of its own ahead of its command.
    let (dir, manager) = manager_with(|config| {
        config.sandbox.limits.processes = Some(8);
        config.ready_keepers = 0;
    });
    let go = dir.path().join("go");
    let command = format!(
        "cat /proc/self/cgroup; while [ ! -e '{}' ]; do sleep 0.01; done",
        go.display()
    );
    // The last part of the command's pids cgroup: its name below its session's.
    let name_of = |text: &str| {
        pids_cgroup(text)
            .rsplit('/')
            .next()
            .map(str::to_owned)
            .unwrap_or_default()
    };
    let batch = || async {
        let mut ids = Vec::new();
        for _ in 0..AT_ONCE {
            ids.push(start(&manager, &command).await);
        }
        for id in &ids {
            wait_for_output(&manager, id, "toolhost-").await;
        }
        std::fs::write(&go, "").expect("go");
        let mut names = std::collections::BTreeSet::new();
        for id in &ids {
            let done = manager
                .wait(SCOPE, id, LONG, ReadFrom::All)
                .await
                .expect("wait");
            assert_eq!(done.exit_code, Some(0), "{}", done.text);
            names.insert(name_of(&done.text));
        }
        std::fs::remove_file(&go).expect("not yet");
        names
    };
    let first = batch().await;
    assert_eq!(first.len(), AT_ONCE, "one cgroup each: {first:?}");
    // Every cgroup of the first batch, once empty (its keeper reaped), is free for a command.
    let host_dir = hierarchy
        .dir
        .join(format!("toolhost-{}", std::process::id()));
    let empty = || {
        std::fs::read_dir(&host_dir)
            .into_iter()
            .flatten()
            .flatten()
            .flat_map(|session| std::fs::read_dir(session.path()).into_iter().flatten())
            .flatten()
            .filter(|cgroup| first.contains(&cgroup.file_name().to_string_lossy().into_owned()))
            .all(|cgroup| {
                std::fs::read_to_string(cgroup.path().join("pids.current"))
                    .is_ok_and(|count| count.trim() == "0")
            })
    };
    assert!(
        eventually(empty).await,
        "the first batch's keepers were not reaped"
    );
    let second = batch().await;
    let made: Vec<&String> = second.difference(&first).collect();
    assert!(
        made.is_empty(),
        "the second batch made cgroups {made:?}, the first ran in {first:?}"
    );
}

#[tokio::test]
async fn a_person_may_allow_only_askable_hosts_a_command_was_refused() {
    use crate::sandbox::network::{AllowList, AllowListId, Askable};
    let list = |text: &str| AllowList::parse(text).expect("a list");
    let (_dir, nobody) = manager_with(|config| {
        config.sandbox.network = sandbox::Network::Allow(AllowListId::of(list("github.com")));
    });
    let error = nobody
        .allow_host(SCOPE, "example.com:443")
        .expect_err("no --network ask");
    assert!(error.to_string().contains("--network ask"), "{error}");

    let (_dir, full) = manager_with(|config| {
        config.sandbox.network_ask = Some(Askable::Any);
    });
    let error = full.allow_host(SCOPE, "example.com:443").expect_err("full");
    assert!(error.to_string().contains("not an allow-list"), "{error}");

    let (_dir, manager) = manager_with(|config| {
        config.sandbox.network = sandbox::Network::Allow(AllowListId::of(list("github.com")));
        config.sandbox.network_ask = Some(Askable::Within(list("*.example.com")));
    });
    // Nothing a command did not try.
    let error = manager
        .allow_host(SCOPE, "api.example.com:443")
        .expect_err("not refused yet");
    assert!(
        error.to_string().contains("no host this session"),
        "{error}"
    );
    let approved = manager.scope(SCOPE).sandbox.approved().clone();
    approved.note_refused("api.example.com:443");
    assert_eq!(
        manager.allow_host(SCOPE, "api.example.com:443"),
        Ok(vec!["api.example.com:443".to_owned()])
    );
    // Outside the bound, a wildcard, an address, every port, or not a host: refused.
    for outside in [
        "example.org:443",
        "*.example.com",
        "169.254.169.254:80",
        "a.example.com",
        "not a host",
    ] {
        approved.note_refused(outside);
        let error = manager.allow_host(SCOPE, outside).expect_err(outside);
        assert!(matches!(error, ProcessError::InvalidRequest(_)), "{error}");
    }
    // Another scope's refusals are its own; the same host twice is kept once; the bound holds.
    assert!(manager.allow_host("other", "api.example.com:443").is_err());
    assert_eq!(
        manager
            .allow_host(SCOPE, "api.example.com:443")
            .map(|hosts| hosts.len()),
        Ok(1)
    );
    for n in 1..crate::process::MAX_ALLOWED_HOSTS {
        let host = format!("h{n}.example.com:443");
        approved.note_refused(&host);
        manager.allow_host(SCOPE, &host).expect("within the bound");
    }
    approved.note_refused("one-more.example.com:443");
    let error = manager
        .allow_host(SCOPE, "one-more.example.com:443")
        .expect_err("over the bound");
    assert!(error.to_string().contains("the most it may"), "{error}");
}
