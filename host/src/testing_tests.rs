use super::*;

#[tokio::test]
async fn scripted_process_runs_on_logical_time() {
    let fake = FakeProcesses::new();
    fake.push(
        Script::exits(3)
            .output("partial\n")
            .final_output("done\n")
            .runs_for(Duration::from_secs(30)),
    );
    let id = fake
        .start("s", StartRequest::default())
        .await
        .expect("start");
    let first = fake
        .wait("s", &id, Duration::from_secs(10), ReadFrom::All)
        .await
        .expect("wait");
    assert!(first.running);
    assert_eq!(first.text, "partial\n");
    let second = fake
        .wait("s", &id, Duration::from_secs(30), ReadFrom::Unread)
        .await
        .expect("wait");
    assert!(!second.running);
    assert_eq!(second.exit_code, Some(3));
    assert_eq!(second.text, "done\n");
    assert!(matches!(
        fake.read("other", &id, ReadFrom::All),
        Err(ProcessError::NotFound(_))
    ));
}

#[tokio::test]
async fn signals_end_running_scripts_and_are_recorded() {
    let fake = FakeProcesses::new();
    fake.push(Script::never_exits());
    let id = fake
        .start("s", StartRequest::default())
        .await
        .expect("start");
    fake.signal("s", &id, Signal::Kill).expect("signal");
    let out = fake.read("s", &id, ReadFrom::All).expect("read");
    assert_eq!(
        (out.exit_code, out.signal.as_deref()),
        (Some(137), Some("SIGKILL"))
    );
    assert_eq!(fake.signals(), vec![(id.clone(), Signal::Kill)]);
    assert!(matches!(
        fake.signal("s", &id, Signal::Kill),
        Err(ProcessError::NotRunning(_))
    ));
}

#[tokio::test]
async fn leftovers_show_after_the_exit_until_a_signal_stops_them() {
    let fake = FakeProcesses::new();
    fake.push(
        Script::exits(0)
            .runs_for(Duration::from_secs(5))
            .leaves_running(41, "server --port 8080"),
    );
    let id = fake
        .start("s", StartRequest::default())
        .await
        .expect("start");
    let running = fake.read("s", &id, ReadFrom::All).expect("read");
    assert!(running.left_running.is_empty(), "none while it runs");
    let exited = fake
        .wait("s", &id, Duration::from_secs(10), ReadFrom::All)
        .await
        .expect("wait");
    let left = vec![Leftover {
        pid: 41,
        command: "server --port 8080".into(),
    }];
    assert_eq!(exited.left_running, left);
    assert_eq!(fake.list("s")[0].left_running, left);
    fake.signal("s", &id, Signal::Terminate).expect("signal");
    assert!(fake.list("s")[0].left_running.is_empty());
    let out = fake.read("s", &id, ReadFrom::All).expect("read");
    assert_eq!(out.exit_code, Some(0), "the command's own exit stays");
    assert!(matches!(
        fake.signal("s", &id, Signal::Terminate),
        Err(ProcessError::NotRunning(_))
    ));
}

#[tokio::test]
async fn a_logged_script_pages_like_the_real_log() {
    let fake = FakeProcesses::new();
    fake.push(
        Script::exits(0)
            .output("0123456789")
            .final_output("é!")
            .logged(),
    );
    fake.push(Script::exits(0).output("0123456789").log_cap(4));
    fake.push(Script::exits(0).output("unlogged"));
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(
            fake.start("s", StartRequest::default())
                .await
                .expect("start"),
        );
    }
    let page = |id: &str, offset, max| fake.read_log("s", id, offset, max);
    let first = page(&ids[0], 0, 4).expect("page");
    assert_eq!(
        (
            first.text.as_str(),
            first.offset,
            first.next_offset,
            first.total_bytes
        ),
        ("0123", 0, 4, 13)
    );
    // A page ending inside `é` stops before it; one starting inside it starts after it.
    assert_eq!(page(&ids[0], 8, 3).expect("page").text, "89");
    let last = page(&ids[0], -2, 100).expect("page");
    assert_eq!(
        (last.text.as_str(), last.offset, last.next_offset),
        ("!", 12, 13)
    );
    let past = page(&ids[0], 100, 10).expect("page");
    assert_eq!(
        (past.text.as_str(), past.offset, past.next_offset),
        ("", 13, 13)
    );
    let capped = page(&ids[1], 0, 100).expect("page");
    assert_eq!((capped.text.as_str(), capped.capped), ("0123", true));
    assert!(matches!(
        page(&ids[2], 0, 10),
        Err(ProcessError::InvalidRequest(_))
    ));
    assert!(matches!(
        fake.read_log("other", &ids[0], 0, 10),
        Err(ProcessError::NotFound(_))
    ));
    let out = fake.read("s", &ids[0], ReadFrom::All).expect("read");
    assert_eq!(out.log_bytes, Some(13));
    assert!(out.log_path.is_some());
}
