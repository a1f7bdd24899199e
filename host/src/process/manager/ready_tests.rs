//! Keepers prepared ahead (`ready.rs`): used and replaced, never stale, never another scope's,
//! gone with their scope, and out of their command's reach. Every wait is on an observable
//! condition.

use super::ready::ReadyKeepers;
use super::tests::{LONG, SCOPE, manager, manager_with, request};
use super::*;
use crate::process::{OutputSnapshot, ProcessBackend, ReadFrom};
use nix::unistd::Pid;

/// Poll `check` every 10 ms for up to 10 s (test-side only).
async fn until(mut check: impl FnMut() -> bool) -> bool {
    for _ in 0..1000 {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// Run `command` in `scope` to its end.
async fn run_in(manager: &ProcessManager, scope: &str, command: &str) -> OutputSnapshot {
    let id = manager.start(scope, request(command)).await.expect("start");
    manager
        .wait(scope, &id, LONG, ReadFrom::All)
        .await
        .expect("wait")
}

/// A command of `scope` ran, and the keepers it made ready for the next ones are there: their
/// pids.
async fn ready_in(manager: &ProcessManager, scope: &str) -> Vec<Pid> {
    assert_eq!(run_in(manager, scope, "true").await.exit_code, Some(0));
    assert!(
        until(|| manager.launcher.ready().count(Some(scope)) == ready::PER_PROFILE).await,
        "no keepers were prepared ahead in {scope}"
    );
    manager.launcher.ready().pids(scope)
}

/// Whether the keeper of `id` is one of `ready`.
fn handed_to(manager: &ProcessManager, scope: &str, id: &str, ready: &[Pid]) -> bool {
    keeper_of(manager, scope, id).is_some_and(|keeper| ready.contains(&keeper))
}

/// The keeper of a running process.
fn keeper_of(manager: &ProcessManager, scope: &str, id: &str) -> Option<Pid> {
    let entry = manager.records.find(scope, id).ok()?;
    crate::lock(&entry.keeper).pid.as_ref().map(KeeperPid::pid)
}

/// Whether `pid` is gone (reaped: not even a zombie).
fn gone(pid: Pid) -> bool {
    nix::sys::signal::kill(pid, None) == Err(nix::errno::Errno::ESRCH)
}

async fn wait_for(manager: &ProcessManager, scope: &str, id: &str, needle: &str) -> String {
    let mut text = String::new();
    let seen = until(|| {
        text = manager
            .read(scope, id, ReadFrom::All)
            .map(|snapshot| snapshot.text)
            .unwrap_or_default();
        text.contains(needle)
    })
    .await;
    assert!(seen, "`{needle}` never appeared: {text:?}");
    text
}

#[tokio::test]
async fn a_ready_keeper_is_used_and_replaced() {
    let (dir, manager) = manager();
    let ready = ready_in(&manager, SCOPE).await;
    let workdir = dir.path().canonicalize().expect("workdir");
    let id = manager
        .start(
            SCOPE,
            StartRequest {
                command: "echo \"$PWD $GREETING\"; exec sleep 60".to_owned(),
                env: vec![("GREETING".to_owned(), "hi".to_owned())],
                workdir: Some(workdir.clone()),
                ..StartRequest::default()
            },
        )
        .await
        .expect("start");
    assert!(handed_to(&manager, SCOPE, &id, &ready));
    // The other one stays ready, for a start right after.
    let used = keeper_of(&manager, SCOPE, &id).expect("a keeper");
    let other: Vec<Pid> = ready.iter().copied().filter(|pid| *pid != used).collect();
    assert_eq!(manager.launcher.ready().pids(SCOPE), other);
    // The command got its working directory and environment through the hand-over.
    wait_for(&manager, SCOPE, &id, &format!("{} hi\n", workdir.display())).await;
    // And its replacement is made, off the call path.
    assert!(
        until(|| manager
            .launcher
            .ready()
            .pids(SCOPE)
            .iter()
            .any(|pid| !ready.contains(pid)))
        .await,
        "the used keeper was not replaced"
    );
    assert_eq!(
        manager.launcher.ready().count(Some(SCOPE)),
        ready::PER_PROFILE
    );
    // Signals reach the command through the keeper that took it over.
    manager.signal(SCOPE, &id, Signal::Kill).expect("kill");
    let killed = manager
        .wait(SCOPE, &id, LONG, ReadFrom::All)
        .await
        .expect("wait");
    assert_eq!(
        killed.exit_code,
        Some(128 + nix::libc::SIGKILL),
        "{killed:?}"
    );
    // Not listed: only the commands are processes of the scope.
    assert_eq!(manager.list(SCOPE).len(), 2);
}

#[tokio::test]
async fn a_profile_change_is_never_served_by_a_stale_keeper() {
    // The workspace is writable in the default profile, not in read-only.
    let workspace = tempfile::tempdir().expect("workspace");
    let root = workspace.path().canonicalize().expect("workspace");
    let (_dir, manager) = manager_with(|config| {
        config.sandbox.writable.clear();
        config.default_workdir = Some(root.clone());
    });
    let ready = ready_in(&manager, SCOPE).await;
    let target = root.join("written");
    let touch = format!(
        "touch '{}' 2>/dev/null; echo rc=$?; exec sleep 60",
        target.display()
    );
    let mut read_only = manager.default_profile();
    read_only.mode = sandbox::SandboxMode::ReadOnly;
    let id = manager
        .start(
            SCOPE,
            StartRequest {
                command: touch.clone(),
                profile: Some(read_only),
                ..StartRequest::default()
            },
        )
        .await
        .expect("start read-only");
    assert!(!handed_to(&manager, SCOPE, &id, &ready));
    wait_for(&manager, SCOPE, &id, "rc=1").await;
    assert!(!target.exists());
    // The default profile's keepers stay for the default profile, and serve it.
    let default = manager.default_profile();
    assert_eq!(
        manager.launcher.ready().pids_for(SCOPE, &default).len(),
        ready.len()
    );
    let id = manager.start(SCOPE, request(&touch)).await.expect("start");
    assert!(handed_to(&manager, SCOPE, &id, &ready));
    let used = keeper_of(&manager, SCOPE, &id).expect("a keeper");
    wait_for(&manager, SCOPE, &id, "rc=0").await;

    // The profile's layers made again (its namespaces ended): the keeper made with the old
    // ones is never used, and goes.
    let profile = manager.default_profile();
    assert!(
        until(|| {
            let made = manager.launcher.ready().pids_for(SCOPE, &profile);
            made.len() == ready::PER_PROFILE && !made.contains(&used)
        })
        .await,
        "the used keeper was not replaced"
    );
    let stale = manager.launcher.ready().pids_for(SCOPE, &profile);
    let prepared = manager
        .scope(SCOPE)
        .sandbox
        .clone()
        .ready(&profile)
        .flatten()
        .expect("the default profile's layers");
    let Some(namespaces) = prepared.namespaces.as_ref() else {
        eprintln!("no namespaces here: no layers to make again");
        return;
    };
    nix::sys::signal::kill(
        Pid::from_raw(namespaces.holder()),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill the holder");
    assert!(until(|| !namespaces.holder_alive()).await);
    let id = manager
        .start(SCOPE, request("echo fresh; exec sleep 60"))
        .await
        .expect("start after the layers ended");
    assert!(
        !handed_to(&manager, SCOPE, &id, &stale),
        "served by a stale keeper"
    );
    wait_for(&manager, SCOPE, &id, "fresh").await;
    // The stale ones of the default profile are released.
    assert!(
        until(|| stale.iter().all(|pid| gone(*pid))).await,
        "a stale keeper stayed"
    );
    manager.end_scope(SCOPE).await;
}

#[tokio::test]
async fn ready_keepers_go_when_their_scope_ends() {
    let (_dir, manager) = manager();
    let ready = ready_in(&manager, SCOPE).await;
    manager.end_scope(SCOPE).await;
    // Released and reaped before `end_scope` returns.
    assert_eq!(manager.launcher.ready().count(Some(SCOPE)), 0);
    assert!(
        ready.iter().all(|pid| gone(*pid)),
        "a keeper prepared ahead outlived its scope"
    );
}

#[tokio::test]
async fn a_keeper_prepared_for_one_scope_is_never_used_by_another() {
    let (_dir, manager) = manager();
    let ready = ready_in(&manager, "a").await;
    let id = manager
        .start("b", request("exec sleep 60"))
        .await
        .expect("start in b");
    assert!(!handed_to(&manager, "b", &id, &ready));
    assert_eq!(manager.launcher.ready().pids("a"), ready);
    manager.end_scope("b").await;
    manager.end_scope("a").await;
}

#[tokio::test]
async fn a_command_cannot_signal_the_keeper_it_was_handed_to() {
    if sandbox::probe::support().landlock_abi < 6 {
        eprintln!("Landlock ABI < 6: signals are not scoped here; nothing to check");
        return;
    }
    let (_dir, manager) = manager();
    let ready = ready_in(&manager, SCOPE).await;
    let id = manager
        .start(
            SCOPE,
            request("kill -KILL $PPID 2>/dev/null; echo rc=$?; exec sleep 60"),
        )
        .await
        .expect("start");
    assert!(handed_to(&manager, SCOPE, &id, &ready));
    let keeper = keeper_of(&manager, SCOPE, &id).expect("a keeper");
    wait_for(&manager, SCOPE, &id, "rc=1").await;
    // The keeper is still there, and still stops its command.
    assert!(!gone(keeper));
    manager.signal(SCOPE, &id, Signal::Kill).expect("kill");
    let killed = manager
        .wait(SCOPE, &id, LONG, ReadFrom::All)
        .await
        .expect("wait");
    assert_eq!(
        killed.exit_code,
        Some(128 + nix::libc::SIGKILL),
        "{killed:?}"
    );
}

/// The parent of `pid` and its process state letter, from `/proc/PID/stat`.
fn parent_and_state(pid: Pid) -> Option<(Pid, char)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut fields = stat.get(stat.rfind(')')? + 2..)?.split(' ');
    let state = fields.next()?.chars().next()?;
    let parent = fields.next()?.parse().ok()?;
    Some((Pid::from_raw(parent), state))
}

/// The one resident keeper of `scope`, once there is one.
async fn resident_of(manager: &ProcessManager, scope: &str) -> Arc<resident::Resident> {
    assert!(
        until(|| manager.launcher.ready().residents(scope).len() == 1).await,
        "no resident keeper in {scope}"
    );
    manager.launcher.ready().residents(scope).remove(0)
}

#[tokio::test]
async fn keepers_are_forked_by_the_resident_keeper_of_their_scope() {
    let (_dir, manager) = manager();
    let ready = ready_in(&manager, SCOPE).await;
    let resident = resident_of(&manager, SCOPE).await;
    let resident_pid = resident.pid();
    drop(resident);
    // The resident is the host's child, started with `--resident`.
    let host = Pid::from_raw(i32::try_from(std::process::id()).expect("pid"));
    assert_eq!(
        parent_and_state(resident_pid).map(|(parent, _)| parent),
        Some(host)
    );
    let cmdline = std::fs::read(format!("/proc/{resident_pid}/cmdline")).expect("cmdline");
    assert!(
        cmdline
            .split(|byte| *byte == 0)
            .any(|arg| arg == b"--resident"),
        "{:?}",
        String::from_utf8_lossy(&cmdline)
    );
    // More commands at once than keepers are ready (the first of those were made while the
    // resident was being started): the others' keepers are forked on the call path, by the
    // resident, and run their commands.
    let mut ids = Vec::new();
    let mut forked = 0;
    for n in 0..ready::PER_PROFILE + 2 {
        let id = manager
            .start(SCOPE, request(&format!("echo started-{n}; exec sleep 60")))
            .await
            .expect("start");
        wait_for(&manager, SCOPE, &id, &format!("started-{n}")).await;
        let keeper = keeper_of(&manager, SCOPE, &id).expect("a keeper");
        if !ready.contains(&keeper) {
            assert_eq!(
                parent_and_state(keeper).map(|(parent, _)| parent),
                Some(resident_pid)
            );
            forked += 1;
        }
        ids.push(id);
    }
    assert!(forked >= 2, "only {forked} keepers were forked");
    // The keepers prepared ahead from now on are its children, not the host's.
    assert!(
        until(|| {
            let now = manager.launcher.ready().pids(SCOPE);
            !now.is_empty()
                && now.iter().all(|keeper| {
                    parent_and_state(*keeper).map(|(parent, _)| parent) == Some(resident_pid)
                })
        })
        .await,
        "keepers prepared ahead were not forked by the resident"
    );
    // Signals reach the command of a forked keeper.
    let last = ids.last().expect("an id");
    manager.signal(SCOPE, last, Signal::Kill).expect("kill");
    let killed = manager
        .wait(SCOPE, last, LONG, ReadFrom::All)
        .await
        .expect("wait");
    assert_eq!(
        killed.exit_code,
        Some(128 + nix::libc::SIGKILL),
        "{killed:?}"
    );
    // The resident goes with its scope, and nothing it forked stays.
    let keepers: Vec<Pid> = ids
        .iter()
        .filter_map(|id| keeper_of(&manager, SCOPE, id))
        .collect();
    manager.end_scope(SCOPE).await;
    assert!(
        until(|| gone(resident_pid) && keepers.iter().all(|pid| gone(*pid))).await,
        "the resident keeper or a keeper it forked outlived the scope"
    );
}

/// Start `command` (held running after it) in [`SCOPE`] once every keeper prepared ahead is
/// one `resident` forked (the first ones ready may have been spawned while it started), and
/// check its output, up to `needle`, with `check`.
///
/// 1. Until the pool is full of the resident's children, run `true` to use up one keeper,
///    then wait for the pool to be full again.
/// 2. Start the command: it takes one of them.
/// 3. Check its output, then that its keeper is indeed the resident's child.
async fn run_forked(
    manager: &ProcessManager,
    resident: Pid,
    command: &str,
    needle: &str,
    check: impl Fn(&str),
) {
    let all_forked = || {
        let ready = manager.launcher.ready().pids(SCOPE);
        ready.len() == ready::PER_PROFILE
            && ready
                .iter()
                .all(|keeper| parent_and_state(*keeper).map(|(parent, _)| parent) == Some(resident))
    };
    let mut used = 0;
    while !all_forked() {
        assert!(
            used < 4 * ready::PER_PROFILE,
            "the keepers prepared ahead were still not the resident's after {used} commands"
        );
        assert_eq!(run_in(manager, SCOPE, "true").await.exit_code, Some(0));
        used += 1;
        assert!(
            until(|| manager.launcher.ready().count(Some(SCOPE)) == ready::PER_PROFILE).await,
            "the keepers prepared ahead were not made again"
        );
    }
    let id = manager
        .start(SCOPE, request(&format!("{command}; exec sleep 60")))
        .await
        .expect("start");
    check(&wait_for(manager, SCOPE, &id, needle).await);
    let keeper = keeper_of(manager, SCOPE, &id).expect("a keeper");
    assert_eq!(
        parent_and_state(keeper).map(|(parent, _)| parent),
        Some(resident),
        "the command's keeper was not forked by the resident"
    );
}

/// The reader's seccomp filters and capabilities, from `/proc/self/status`.
const FILTERS: &str = "grep -E '^(Seccomp_filters|Cap(Inh|Prm|Eff|Bnd|Amb)):' /proc/self/status";

#[tokio::test]
async fn a_forked_keeper_s_command_has_the_programs_of_a_spawned_one() {
    let (_dir, manager) = manager();
    // The first command's keeper is spawned: it installs every program in the command.
    let first = run_in(&manager, SCOPE, FILTERS).await;
    assert!(first.text.contains("Seccomp_filters:"), "{first:?}");
    let resident = resident_of(&manager, SCOPE).await.pid();
    // The resident has the shared ones installed; its keepers inherit them.
    let status = std::fs::read_to_string(format!("/proc/{resident}/status")).expect("status");
    assert!(status.contains("Seccomp:\t2"), "{status}");
    // A command whose keeper the resident forked runs under exactly as many programs as the
    // first one (none twice, none missing), with the same capabilities.
    run_forked(&manager, resident, FILTERS, "Seccomp_filters:", |text| {
        assert_eq!(text, first.text);
    })
    .await;
    manager.end_scope(SCOPE).await;
}

#[tokio::test]
async fn a_forked_keeper_s_command_is_refused_what_a_spawned_one_s_is() {
    let (_dir, manager) = manager();
    ready_in(&manager, SCOPE).await;
    let resident = resident_of(&manager, SCOPE).await.pid();
    // A new namespace (the shared deny list) and another process's memory (the program each
    // command installs itself).
    let attempts = "unshare -U true 2>&1; echo unshare=$?; \
        /usr/bin/python3 -c 'import ctypes,os; l=ctypes.CDLL(None, use_errno=True); \
        b=ctypes.create_string_buffer(1); v=(ctypes.c_void_p*2)(ctypes.addressof(b), 1); \
        l.process_vm_readv(os.getppid(), v, 1, v, 1, 0); \
        print(\"readv:\", os.strerror(ctypes.get_errno()))'";
    run_forked(&manager, resident, attempts, "readv:", |text| {
        assert!(text.contains("unshare=1"), "{text}");
        assert!(text.contains("readv: Operation not permitted"), "{text}");
    })
    .await;
    manager.end_scope(SCOPE).await;
}

#[tokio::test]
async fn a_forked_keeper_supervises_its_command_s_connects() {
    let (_dir, manager) = manager();
    ready_in(&manager, SCOPE).await;
    let resident = resident_of(&manager, SCOPE).await.pid();
    // A TCP connect to a closed loopback port goes through the keeper's supervision (where it
    // is on): the keeper reads the caller's address and connects for it, so the command sees
    // the real refusal, not the keeper's failure to inspect the call.
    let connect = "bash -c 'exec 3<>/dev/tcp/127.0.0.1/1' 2>&1; echo done";
    run_forked(&manager, resident, connect, "done", |text| {
        assert!(text.contains("Connection refused"), "{text}");
    })
    .await;
    manager.end_scope(SCOPE).await;
}

#[tokio::test]
async fn a_resident_reaps_a_keeper_only_once_released() {
    let (_dir, manager) = manager();
    ready_in(&manager, SCOPE).await;
    let resident = resident_of(&manager, SCOPE).await;
    let (host, ends) = keeper::channels().expect("channels");
    let keeper = resident.fork(ends, &[]).await.expect("fork");
    assert_eq!(
        parent_and_state(keeper).map(|(parent, _)| parent),
        Some(resident.pid())
    );
    // Let go unused: it exits, and stays a zombie, so its pid names nobody else.
    drop(host);
    assert!(
        until(|| parent_and_state(keeper).is_some_and(|(_, state)| state == 'Z')).await,
        "the keeper did not exit"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(parent_and_state(keeper).map(|(_, state)| state), Some('Z'));
    // Released: reaped.
    resident.release(keeper);
    assert!(
        until(|| gone(keeper)).await,
        "a released keeper was not reaped"
    );
    drop(resident);
    manager.end_scope(SCOPE).await;
}

#[tokio::test]
async fn a_start_after_its_resident_died_spawns_its_keeper() {
    let (_dir, manager) = manager();
    ready_in(&manager, SCOPE).await;
    let resident = resident_of(&manager, SCOPE).await.pid();
    nix::sys::signal::kill(resident, nix::sys::signal::Signal::SIGKILL).expect("kill");
    // The host's child, a zombie until the host lets go of it.
    assert!(
        until(|| parent_and_state(resident).is_none_or(|(_, state)| state == 'Z')).await,
        "the resident keeper did not die"
    );
    // Its keepers prepared ahead went with it (their parent-death signal); every start
    // still gets a keeper.
    for n in 0..ready::PER_PROFILE + 1 {
        let done = run_in(&manager, SCOPE, &format!("echo run-{n}")).await;
        assert_eq!(done.exit_code, Some(0), "{done:?}");
        assert!(done.text.contains(&format!("run-{n}")), "{done:?}");
    }
    // A failed fork let go of the dead resident: reaped.
    assert!(
        until(|| gone(resident)).await,
        "the dead resident was not reaped"
    );
    manager.end_scope(SCOPE).await;
}

#[tokio::test]
async fn no_resident_keeper_outlives_the_manager() {
    let (_dir, manager) = manager();
    ready_in(&manager, SCOPE).await;
    let resident = resident_of(&manager, SCOPE).await.pid();
    manager.shutdown().await;
    assert!(
        until(|| gone(resident)).await,
        "the resident keeper outlived the manager"
    );
}

#[test]
fn ready_keepers_are_bounded_per_scope_and_per_host() {
    let pool = ReadyKeepers::new(5, Duration::from_secs(60));
    let mut profile = sandbox::SandboxSettings::default().profile();
    let first = profile.clone();
    assert!(pool.turn("a", &first).is_some());
    assert!(pool.turn("a", &first).is_some());
    // Two per scope and profile.
    assert!(pool.turn("a", &first).is_none());
    profile.mode = sandbox::SandboxMode::ReadOnly;
    let second = profile.clone();
    assert!(pool.turn("a", &second).is_some());
    // At most two profiles per scope.
    profile.limits.processes = Some(7);
    assert!(pool.turn("a", &profile).is_none());
    // At most five on the host.
    assert!(pool.turn("b", &first).is_some());
    assert!(pool.turn("b", &first).is_some());
    assert!(pool.turn("c", &first).is_none());
    // A scope that ended takes back its turns; what was being made for it comes back.
    assert!(pool.end_scope("a").0.is_empty());
    let turn = pool.turn("c", &first).expect("room again");
    assert!(pool.put(turn, None).is_none());
    assert_eq!(pool.count(None), 0);
}
