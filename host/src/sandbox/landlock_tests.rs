use super::*;

/// A fresh directory, canonical.
fn base() -> (tempfile::TempDir, PathBuf) {
    let root = tempfile::tempdir().unwrap();
    let base = root.path().canonicalize().unwrap();
    (root, base)
}

fn make(base: &Path, dirs: &[&str], files: &[&str]) {
    for dir in dirs {
        std::fs::create_dir_all(base.join(dir)).unwrap();
    }
    for file in files {
        std::fs::write(base.join(file), "content").unwrap();
    }
}

#[test]
fn hidden_paths_are_carved_out_by_granting_their_siblings() {
    let (_root, base) = base();
    make(
        &base,
        &["home/me/.ssh", "home/me/src", "home/other", "etc"],
        &["home/me/.netrc"],
    );
    std::os::unix::fs::symlink(base.join("home/me"), base.join("link")).unwrap();
    let hidden = [base.join("home/me/.ssh"), base.join("home/me/.netrc")];
    let plan = Plan::beneath(&base, &[], &hidden, &mut Carving::default());
    assert_eq!(
        plan.read.into_iter().collect::<Vec<_>>(),
        vec![
            base.join("etc"),
            base.join("home/me/src"),
            base.join("home/other")
        ],
        "the link is skipped, the hidden entries get nothing"
    );
    let listed = vec![base.clone(), base.join("home"), base.join("home/me")];
    assert_eq!(plan.list.iter().cloned().collect::<Vec<_>>(), listed);
    assert_eq!(plan.watch.into_iter().collect::<Vec<_>>(), listed);
    assert!(plan.create.is_empty());
}

#[test]
fn a_writable_root_inside_a_hidden_path_is_still_granted() {
    let (_root, base) = base();
    make(&base, &["cache/toolhost/work"], &[]);
    let hidden = [base.join("cache/toolhost")];
    let plan = Plan::new(
        &[base.join("cache/toolhost/work"), base.join("missing/cache")],
        &hidden,
        &mut Carving::default(),
    );
    assert_eq!(
        plan.write.into_iter().collect::<Vec<_>>(),
        vec![base.join("cache/toolhost/work")]
    );
    assert!(
        plan.watch.contains(&base),
        "the nearest directory of a missing root is watched"
    );
}

#[test]
fn a_carved_directory_takes_new_entries_only_where_its_hidden_entries_are_covered() {
    let (_root, base) = base();
    make(
        &base,
        &["w/state", "w/src", "deep/a/state", "files", "gone"],
        &["files/token"],
    );
    let roots = ["w", "deep", "files", "gone"].map(|root| base.join(root));
    let hidden = [
        base.join("w/state"),
        base.join("w/state/logs"),
        base.join("deep/a/state"),
        base.join("files/token"),
        base.join("gone/missing"),
    ];
    let covered = hidden.to_vec();
    let mut carving = Carving {
        view: View::Pretend(covered),
        ..Carving::default()
    };
    let plan = Plan::beneath(&base, &roots, &hidden, &mut carving);
    assert_eq!(
        plan.create.iter().cloned().collect::<Vec<_>>(),
        vec![base.join("deep/a"), base.join("files"), base.join("w")],
        "not `deep`, whose hidden path is deeper (an entry it could rename holds it), nor \
         `gone`, whose hidden path is missing (a command could make it)"
    );
    assert!(plan.write.contains(&base.join("w/src")));
    // Where nothing covers them (Landlock alone), or some are not covered, list only.
    let plan = Plan::beneath(&base, &roots, &hidden, &mut Carving::default());
    assert!(plan.create.is_empty(), "{:?}", plan.create);
    let mut carving = Carving {
        view: View::Pretend(vec![base.join("w/state")]),
        ..Carving::default()
    };
    let plan = Plan::beneath(&base, &roots, &hidden, &mut carving);
    assert_eq!(
        plan.create.into_iter().collect::<Vec<_>>(),
        [base.join("w")]
    );
}

#[test]
fn a_hidden_entry_under_another_name_is_never_granted() {
    let (_root, base) = base();
    make(&base, &["w"], &["w/token", "w/old"]);
    let roots = [base.join("w")];
    let hidden = [base.join("w/token")];
    let mut carving = Carving {
        view: View::Pretend(hidden.to_vec()),
        ..Carving::default()
    };
    let plan = Plan::beneath(&base, &roots, &hidden, &mut carving);
    assert!(plan.create.contains(&base.join("w")));
    // Renamed or linked to an ordinary name (as a command could if its cover went).
    std::fs::hard_link(base.join("w/token"), base.join("w/linked")).unwrap();
    let plan = Plan::beneath(&base, &roots, &hidden, &mut carving);
    assert!(
        !plan.write.contains(&base.join("w/linked")),
        "{:?}",
        plan.write
    );
    std::fs::rename(base.join("w/token"), base.join("w/renamed")).unwrap();
    let plan = Plan::beneath(&base, &roots, &hidden, &mut carving);
    assert!(
        !plan.write.contains(&base.join("w/renamed")),
        "{:?}",
        plan.write
    );
    assert!(plan.create.is_empty(), "the hidden entry is gone");
}

#[test]
fn a_replaced_hidden_entry_takes_back_what_is_new_beside_it() {
    let (_root, base) = base();
    make(&base, &["w"], &["w/token", "w/old"]);
    let roots = [base.join("w")];
    let hidden = [base.join("w/token")];
    let mut carving = Carving {
        view: View::Pretend(hidden.to_vec()),
        ..Carving::default()
    };
    let plan = Plan::beneath(&base, &roots, &hidden, &mut carving);
    assert!(plan.create.contains(&base.join("w")));
    // Replaced from outside (its cover goes), then renamed by a command to a name of its
    // own; meanwhile a command made another entry.
    std::fs::write(base.join("w/token.new"), "new secret").unwrap();
    std::fs::rename(base.join("w/token.new"), base.join("w/token")).unwrap();
    std::fs::rename(base.join("w/token"), base.join("w/mine")).unwrap();
    std::fs::write(base.join("w/made"), "made").unwrap();
    let plan = Plan::beneath(&base, &roots, &hidden, &mut carving);
    assert_eq!(
        plan.write.iter().cloned().collect::<Vec<_>>(),
        [base.join("w/old")],
        "nothing new since the hidden entry was replaced is granted"
    );
    assert!(plan.create.is_empty());
    let plan = Plan::beneath(&base, &roots, &hidden, &mut carving);
    assert!(!plan.write.contains(&base.join("w/mine")), "nor later");
}

/// Rules planned beneath `base` instead of `/`, with times trusted 200 ms after a change and
/// changes watched with inotify, and every plan they made; `None` (said) where this kernel
/// has no Landlock.
fn rules(base: &Path, hidden: &[PathBuf]) -> Option<(Rules, Arc<Mutex<Vec<Plan>>>)> {
    rules_watched(base, hidden, true)
}

/// [`rules`], with changes watched with inotify only when `watch` is set (otherwise each
/// start compares the directories' stamps, as where inotify cannot be used).
fn rules_watched(
    base: &Path,
    hidden: &[PathBuf],
    watch: bool,
) -> Option<(Rules, Arc<Mutex<Vec<Plan>>>)> {
    let plans = Arc::new(Mutex::new(Vec::new()));
    let (made, base, hidden) = (plans.clone(), base.to_path_buf(), hidden.to_vec());
    let make: MakePlan = Box::new(move |carving: &mut Carving| {
        let plan = Plan::beneath(&base, &[], &hidden, carving);
        lock(&made).push(plan.clone());
        plan
    });
    match Rules::with_margin(
        make,
        Carving::default(),
        Network::Full,
        false,
        Duration::from_millis(200),
        watch,
    ) {
        Ok(rules) => Some((rules, plans)),
        Err(LandlockError::Unsupported) => {
            eprintln!("no Landlock in this kernel: nothing to test");
            None
        }
        Err(error) => panic!("{error}"),
    }
}

fn settle() {
    std::thread::sleep(Duration::from_millis(250));
}

#[test]
fn rules_are_made_again_when_a_carved_directory_changes() {
    made_again_when_a_carved_directory_changes(true);
}

/// Where inotify cannot be used, the directories' stamps say the same.
#[test]
fn without_inotify_the_stamps_say_when_a_carved_directory_changed() {
    made_again_when_a_carved_directory_changes(false);
}

fn made_again_when_a_carved_directory_changes(watch: bool) {
    let (_root, base) = base();
    make(&base, &["home/.ssh"], &["home/a"]);
    settle();
    let Some((rules, plans)) = rules_watched(&base, &[base.join("home/.ssh")], watch) else {
        return;
    };
    let count = || lock(&plans).len();
    rules.current().unwrap();
    assert_eq!(count(), 1, "nothing changed: the same rules");
    // A file written in place keeps its inode, and its directory's times.
    std::fs::write(base.join("home/a"), "more").unwrap();
    rules.current().unwrap();
    assert_eq!(count(), 1);
    // So does a file whose mode changes.
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o600);
    std::fs::set_permissions(base.join("home/a"), mode).unwrap();
    rules.current().unwrap();
    assert_eq!(count(), 1);
    std::fs::write(base.join("home/b"), "new").unwrap();
    rules.current().unwrap();
    assert_eq!(count(), 2, "a new entry: made again");
    assert!(lock(&plans)[1].read.contains(&base.join("home/b")));
    // Stamped within the margin of the change: not trusted, made once more by the next
    // start, then trusted.
    settle();
    rules.current().unwrap();
    assert_eq!(count(), 3, "a racy stamp: made again");
    rules.current().unwrap();
    assert_eq!(count(), 3);
    // The directory replaced whole.
    std::fs::rename(base.join("home"), base.join("home.old")).unwrap();
    std::fs::create_dir_all(base.join("home/.ssh")).unwrap();
    settle();
    rules.current().unwrap();
    assert_eq!(count(), 4, "a new directory: made again");
}

#[test]
fn hidden_names_are_never_granted_after_a_rebuild() {
    let (_root, base) = base();
    make(&base, &["home/.ssh"], &["home/a"]);
    let hidden = [
        base.join("home/.ssh"),
        base.join("home/.aws"),
        base.join("home/.netrc"),
    ];
    settle();
    let Some((rules, plans)) = rules(&base, &hidden) else {
        return;
    };
    make(
        &base,
        &["home/.aws", "home/new"],
        &["home/.aws/credentials", "home/.netrc"],
    );
    rules.current().unwrap();
    let plans = lock(&plans);
    let last = plans.last().unwrap();
    assert_eq!(plans.len(), 2);
    assert_eq!(
        last.read.iter().cloned().collect::<Vec<_>>(),
        [base.join("home/a"), base.join("home/new")]
    );
}

#[test]
fn concurrent_starts_share_one_rebuild() {
    let (_root, base) = base();
    make(&base, &["home/.ssh"], &[]);
    settle();
    let Some((rules, plans)) = rules(&base, &[base.join("home/.ssh")]) else {
        return;
    };
    std::fs::write(base.join("home/b"), "new").unwrap();
    settle();
    let rules = Arc::new(rules);
    let barrier = Arc::new(std::sync::Barrier::new(4));
    let starts: Vec<_> = (0..4)
        .map(|_| {
            let (rules, barrier) = (rules.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                rules.current().unwrap();
            })
        })
        .collect();
    for start in starts {
        start.join().unwrap();
    }
    assert_eq!(lock(&plans).len(), 2, "one rebuild for all four starts");
}
