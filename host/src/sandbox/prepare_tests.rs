use super::*;

/// A scope's sandbox with the workspace `workdir`, and the default profile; `None` (said)
/// where this machine lacks a layer of that profile, so nothing can be built.
fn sandbox_with(workdir: &Path) -> Option<(Arc<ScopeSandbox>, Profile)> {
    let sandbox = Arc::new(ScopeSandbox::new(
        Arc::new(Context {
            workdir: Some(workdir.to_path_buf()),
            ..Context::default()
        }),
        "test",
    ));
    let profile = crate::sandbox::SandboxSettings::default().profile();
    if probe::support().missing_for(&profile).is_some() {
        eprintln!("this machine lacks a layer of the default profile: nothing is built");
        return None;
    }
    Some((sandbox, profile))
}

#[test]
fn a_profile_that_failed_to_build_is_not_tried_again_at_once() {
    // A workspace of `/` cannot be confined: the build fails.
    let Some((sandbox, profile)) = sandbox_with(Path::new("/")) else {
        return;
    };
    let turn = sandbox.building.clone().blocking_lock_owned();
    let first = sandbox
        .prepare(&profile, &turn)
        .expect_err("a workspace of / is refused");
    assert!(matches!(first, PrepareError::RootWritable), "{first:?}");
    let again = sandbox.prepare(&profile, &turn).expect_err("still refused");
    let PrepareError::Recent { reason, .. } = &again else {
        panic!("built again at once: {again:?}");
    };
    assert_eq!(reason, &first.to_string());
    assert!(again.to_string().starts_with(&first.to_string()), "{again}");
    assert!(sandbox.ready(&profile).is_none());
}

#[test]
fn asking_whether_a_profile_is_ready_never_waits_for_a_build() {
    let workdir = tempfile::tempdir().expect("workdir");
    let Some((sandbox, profile)) = sandbox_with(workdir.path()) else {
        return;
    };
    {
        let turn = sandbox.building.clone().blocking_lock_owned();
        sandbox.prepare(&profile, &turn).expect("built");
    }
    // Another start holds the build turn (as while it makes another profile's namespaces).
    let (held, release) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
    let holder = {
        let sandbox = sandbox.clone();
        let held = held.0;
        std::thread::spawn(move || {
            let _turn = sandbox.building.clone().blocking_lock_owned();
            held.send(()).expect("tell");
            // Released by the test, or not if `ready` waited for the turn.
            release.1.recv_timeout(Duration::from_secs(10)).is_ok()
        })
    };
    held.1.recv().expect("the turn is held");
    assert!(matches!(sandbox.ready(&profile), Some(Some(_))));
    release.0.send(()).expect("release");
    assert!(
        holder.join().expect("holder"),
        "`ready` waited for the build turn"
    );
}

#[test]
fn temporary_directories_of_hosts_that_are_gone_are_swept() {
    let temp = tempfile::tempdir().expect("tempdir");
    let gone = temp.path().join("toolhost-999999999-abc");
    let alive = temp
        .path()
        .join(format!("toolhost-{}-def", std::process::id()));
    let other = temp.path().join("toolhost-cache");
    for dir in [&gone, &alive, &other] {
        std::fs::create_dir(dir).expect("dir");
    }
    std::fs::write(gone.join("file"), "left").expect("file");
    sweep(temp.path());
    assert!(!gone.exists());
    assert!(alive.exists() && other.exists());
}
