//! The guard's own tests: the config parser, the allow-list, and checks on real directories.

use super::*;

fn settings(text: &str) -> Vec<(String, Option<String>)> {
    parse(text.as_bytes())
        .unwrap_or_else(|error| panic!("{error}: {text}"))
        .iter()
        .map(|setting| (setting.key(), setting.value.clone()))
        .collect()
}

fn pair(key: &str, value: Option<&str>) -> (String, Option<String>) {
    (key.to_owned(), value.map(str::to_owned))
}

#[test]
fn sections_subsections_and_keys_are_read_as_git_reads_them() {
    let text = "\u{feff}# a comment\n; another\n[Core]\n\tRepositoryFormatVersion = 0\n\
                [remote \"Origin\"]\n  url = https://example.com/x.git\n\
                [branch.Main]\nremote=origin\n[a.b \"C\"]\nk=v\n\
                [user] name = Me\n[core]\nbare\n[sub \"q\\\"x\\\\y\"]\nk = 1\n";
    assert_eq!(
        settings(text),
        [
            pair("core.repositoryformatversion", Some("0")),
            pair("remote.Origin.url", Some("https://example.com/x.git")),
            // The legacy form's subsection is lower-cased.
            pair("branch.main.remote", Some("origin")),
            pair("a.b.C.k", Some("v")),
            // A key may follow its header on the same line.
            pair("user.name", Some("Me")),
            // A key without `=` is true.
            pair("core.bare", None),
            pair("sub.q\"x\\y.k", Some("1")),
        ]
    );
    let parsed = parse(b"[core]\n\tHooksPath = x\n").expect("parses");
    assert_eq!(parsed[0].display(), "core.HooksPath");
}

#[test]
fn values_are_read_with_quotes_escapes_comments_and_continuations() {
    let text = "[s]\n\
                a = \"  quoted ; not a comment \" # a comment\n\
                b = one \\\n  two\n\
                c = tab\\there\\n\\\"q\\\"\\\\\n\
                d =   spaced   out   \n\
                e = x;comment\n\
                f =\n\
                g = \"!cmd\"\r\n\
                h = last";
    assert_eq!(
        settings(text),
        [
            pair("s.a", Some("  quoted ; not a comment ")),
            pair("s.b", Some("one   two")),
            pair("s.c", Some("tab\there\n\"q\"\\")),
            pair("s.d", Some("spaced   out")),
            pair("s.e", Some("x")),
            pair("s.f", Some("")),
            pair("s.g", Some("!cmd")),
            pair("s.h", Some("last")),
        ]
    );
}

#[test]
fn what_git_refuses_to_read_is_an_error() {
    for text in [
        "key = outside\n",
        "[s]\na = \"unfinished\n",
        "[s]\na = bad \\q escape\n",
        "[s]\nkey # no equals\n",
        "[s\n",
        "[s \"sub]\n",
        "[s \"sub\" ]\n",
        "[s_x]\n",
        "[]\n",
        "[s]\n1key = x\n",
        "[s]\na = x\0y\n",
    ] {
        assert!(parse(text.as_bytes()).is_err(), "parsed: {text:?}");
    }
}

#[test]
fn refused_settings_can_be_taken_out_leaving_the_rest() {
    let text = b"[core]\n\tbare = false\n\thooksPath = /x \\\n more # c\n[user] fsmonitor = y\n\tname = me\n";
    let parsed = parse(text).expect("parses");
    let keys: Vec<String> = parsed.iter().map(Setting::key).collect();
    assert_eq!(
        keys,
        ["core.bare", "core.hookspath", "user.fsmonitor", "user.name"]
    );
    let left = without(text, &parsed, &[1, 2]);
    assert_eq!(
        String::from_utf8(left.clone()).expect("utf-8"),
        "[core]\n\tbare = false\n\t\n[user] \n\tname = me\n"
    );
    assert_eq!(
        settings(std::str::from_utf8(&left).expect("utf-8")),
        [
            pair("core.bare", Some("false")),
            pair("user.name", Some("me"))
        ]
    );
}

fn judged(before: &str, now: &str) -> Vec<String> {
    let before: Vec<(String, Option<String>)> = settings(before);
    let now = parse(now.as_bytes()).expect("parses");
    let roots = [PathBuf::from("/work/ws")];
    judge(Some(&before), &now, Path::new("/work/ws/.git"), &roots)
        .into_iter()
        .map(|(index, why)| match why {
            Some(why) => format!("{} ({why})", now[index].display()),
            None => now[index].display(),
        })
        .collect()
}

#[test]
fn only_settings_git_writes_in_ordinary_work_may_be_added() {
    let before = "[core]\n\teditor = vim\n\thooksPath = /mine\n";
    // The user's own settings stay, whatever they are.
    assert!(judged(before, before).is_empty());
    let ordinary = "[core]\n\teditor = vim\n\thooksPath = /mine\n\
                    \trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\
                    \tlogallrefupdates = true\n\tworktree = ../sub\n\
                    [user]\n\tname = x\n\temail = x@y\n\
                    [remote \"origin\"]\n\turl = https://h/x.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n\
                    [branch \"main\"]\n\tremote = origin\n\tmerge = refs/heads/main\n\
                    [submodule \"sub\"]\n\turl = /work/ws/lib\n\tactive = true\n\tupdate = rebase\n\
                    [extensions]\n\tworktreeConfig = true\n[pull]\n\trebase = false\n";
    assert!(
        judged(before, ordinary).is_empty(),
        "{:?}",
        judged(before, ordinary)
    );
    let dangerous = "[core]\n\teditor = evil\n\thooksPath = /mine\n\tfsmonitor = touch x\n\
                     \tworktree = /home/u\n\
                     [include]\n\tpath = /tmp/x\n[includeIf \"gitdir:/\"]\n\tpath = /tmp/y\n\
                     [alias]\n\tst = !sh\n[remote \"o\"]\n\turl = ext::sh -c x\n\tuploadpack = evil\n\
                     [submodule \"s\"]\n\tupdate = !evil\n[filter \"lfs\"]\n\tclean = x\n\
                     [user]\n\tsigningkey = k\n";
    assert_eq!(
        judged(before, dangerous),
        [
            "core.editor",
            "core.fsmonitor",
            "core.worktree (outside the writable directories)",
            "include.path",
            "includeif.gitdir:/.path",
            "alias.st",
            "remote.o.url (a transport that runs a program)",
            "remote.o.uploadpack",
            "submodule.s.update (runs a command)",
            "filter.lfs.clean",
            "user.signingkey",
        ]
    );
    // Adding a second value of a key the user has is adding it.
    assert_eq!(
        judged(before, &format!("{before}[core]\n\thooksPath = /tmp/x\n")),
        ["core.hooksPath"]
    );
    // A remote URL that is an option.
    assert_eq!(
        judged("", "[remote \"o\"]\n\turl = -oProxyCommand=x\n"),
        ["remote.o.url (looks like an option)"]
    );
}

/// A guarded workspace in a temporary directory, its first check made.
struct Workspace {
    dir: tempfile::TempDir,
    roots: Vec<PathBuf>,
    state: State,
}

impl Workspace {
    fn new(setup: impl FnOnce(&Path)) -> Workspace {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical").join("ws");
        std::fs::create_dir(&root).expect("ws");
        setup(&root);
        let mut workspace = Workspace {
            dir,
            roots: vec![root],
            state: State::default(),
        };
        assert!(
            workspace.check().is_empty(),
            "the first check refuses nothing"
        );
        workspace
    }

    fn root(&self) -> &Path {
        &self.roots[0]
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root().join(rel)
    }

    fn check(&mut self) -> Vec<Refusal> {
        self.state.check(&self.roots)
    }
}

/// A repository at `root`, with a hook and a setting of the user's own.
fn init(root: &Path) {
    init_gitdir(&root.join(".git"));
}

fn init_gitdir(gitdir: &Path) {
    for dir in ["hooks", "objects", "refs"] {
        std::fs::create_dir_all(gitdir.join(dir)).expect("dir");
    }
    std::fs::write(gitdir.join("HEAD"), "ref: refs/heads/main\n").expect("HEAD");
    std::fs::write(
        gitdir.join("config"),
        "[core]\n\trepositoryformatversion = 0\n\teditor = vim\n",
    )
    .expect("config");
    std::fs::write(gitdir.join("hooks/pre-commit.sample"), "#!/bin/sh\n").expect("sample");
    write_exec(&gitdir.join("hooks/pre-push"), "#!/bin/sh\necho mine\n");
}

fn write_exec(path: &Path, content: &str) {
    std::fs::write(path, content).expect("write");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).expect("metadata").mode() & 0o777
}

#[test]
fn hooks_created_changed_or_made_executable_are_undone() {
    let mut ws = Workspace::new(init);
    std::fs::write(
        ws.path(".git/hooks/post-merge"),
        "#!/bin/sh\necho disabled\n",
    )
    .expect("write");
    let refused = ws.check();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].what, "a new hook");
    assert_eq!(refused[0].undone, Undone::Removed);
    assert!(!ws.path(".git/hooks/post-merge").exists());

    write_exec(&ws.path(".git/hooks/pre-commit"), "#!/bin/sh\nevil\n");
    std::fs::write(ws.path(".git/hooks/pre-push"), "#!/bin/sh\nevil\n").expect("write");
    std::fs::create_dir(ws.path(".git/hooks/pre-commit.d")).expect("dir");
    std::fs::write(ws.path(".git/hooks/pre-commit.d/x"), "evil").expect("write");
    // New samples are inert, and `git init` writes them.
    std::fs::write(ws.path(".git/hooks/update.sample"), "#!/bin/sh\n").expect("sample");
    let refused = ws.check();
    let whats: Vec<(&str, &Undone)> = refused
        .iter()
        .map(|r| (r.what.as_str(), &r.undone))
        .collect();
    assert_eq!(
        whats,
        [
            ("a new hook", &Undone::Removed),
            ("a new directory in the hooks", &Undone::Removed),
            ("a changed hook", &Undone::PutBack),
        ]
    );
    assert!(!ws.path(".git/hooks/pre-commit").exists());
    assert!(!ws.path(".git/hooks/pre-commit.d").exists());
    assert_eq!(
        std::fs::read_to_string(ws.path(".git/hooks/pre-push")).expect("read"),
        "#!/bin/sh\necho mine\n"
    );
    assert_eq!(mode(&ws.path(".git/hooks/pre-push")), 0o755);
    assert!(ws.path(".git/hooks/update.sample").exists());
    assert!(ws.check().is_empty(), "what was put back is accepted");

    // Touched and made non-executable: runs nothing, accepted.
    std::fs::set_permissions(
        ws.path(".git/hooks/pre-push"),
        std::fs::Permissions::from_mode(0o644),
    )
    .expect("chmod");
    assert!(ws.check().is_empty());
    std::fs::set_permissions(
        ws.path(".git/hooks/pre-push"),
        std::fs::Permissions::from_mode(0o755),
    )
    .expect("chmod");
    let refused = ws.check();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].what, "made executable");
    assert_eq!(refused[0].undone, Undone::ModeRestored);
    assert_eq!(mode(&ws.path(".git/hooks/pre-push")), 0o644);

    // Deleting a hook runs nothing: accepted.
    std::fs::remove_file(ws.path(".git/hooks/pre-push")).expect("remove");
    assert!(ws.check().is_empty());
}

#[test]
fn a_hooks_directory_replaced_by_a_link_is_put_back() {
    let mut ws = Workspace::new(init);
    let elsewhere = ws.dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("dir");
    write_exec(&elsewhere.join("pre-commit"), "evil");
    std::fs::rename(ws.path(".git/hooks"), ws.dir.path().join("moved")).expect("move");
    std::os::unix::fs::symlink(&elsewhere, ws.path(".git/hooks")).expect("link");
    let refused = ws.check();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0].what.starts_with("replaced by a link"),
        "{refused:?}"
    );
    assert_eq!(refused[0].undone, Undone::PutBack);
    let hooks = std::fs::symlink_metadata(ws.path(".git/hooks")).expect("hooks");
    assert!(hooks.is_dir());
    assert_eq!(
        std::fs::read_to_string(ws.path(".git/hooks/pre-push")).expect("put back"),
        "#!/bin/sh\necho mine\n"
    );
    // What the link led to is untouched.
    assert!(elsewhere.join("pre-commit").exists());
}

#[test]
fn refused_settings_are_undone_and_ordinary_ones_accepted() {
    let mut ws = Workspace::new(init);
    let config = ws.path(".git/config");
    let before = std::fs::read_to_string(&config).expect("config");
    let ordinary = format!("{before}[user]\n\tname = x\n[branch \"main\"]\n\tremote = origin\n");
    std::fs::write(&config, &ordinary).expect("write");
    assert!(ws.check().is_empty());
    std::fs::write(
        &config,
        format!("{ordinary}[core]\n\thooksPath = /tmp/x\n\tfsmonitor = y\n"),
    )
    .expect("write");
    let refused = ws.check();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].path, config);
    assert_eq!(
        refused[0].what,
        "the settings core.hooksPath, core.fsmonitor"
    );
    assert_eq!(refused[0].undone, Undone::PutBack);
    assert_eq!(std::fs::read_to_string(&config).expect("config"), ordinary);
    assert!(ws.check().is_empty(), "what was put back is accepted");

    // Changing the user's own setting is refused too; unparseable is refused.
    std::fs::write(&config, ordinary.replace("vim", "evil")).expect("write");
    assert_eq!(ws.check()[0].what, "the setting core.editor");
    assert_eq!(std::fs::read_to_string(&config).expect("config"), ordinary);
    std::fs::write(&config, "[core\n").expect("write");
    assert!(ws.check()[0].what.starts_with("git cannot read it safely"));
    assert_eq!(std::fs::read_to_string(&config).expect("config"), ordinary);
    // A config that is a link now.
    std::fs::remove_file(&config).expect("remove");
    std::os::unix::fs::symlink("/etc/hostname", &config).expect("link");
    assert_eq!(ws.check()[0].what, "replaced by a link");
    assert_eq!(std::fs::read_to_string(&config).expect("config"), ordinary);
    // Taking settings out is accepted.
    std::fs::write(&config, &before).expect("write");
    assert!(ws.check().is_empty());
}

#[test]
fn a_new_repository_is_judged_from_nothing() {
    let mut ws = Workspace::new(|_| {});
    // `git init` and `git clone` in the session: new git directories, also one level down.
    init(&ws.path(""));
    std::fs::create_dir(ws.path("clone")).expect("dir");
    init(&ws.path("clone"));
    let refused = ws.check();
    let mut paths: Vec<&Path> = refused.iter().map(|r| r.path.as_path()).collect();
    paths.sort();
    // The hooks and the editor were made in the session, not by the user.
    assert_eq!(
        paths,
        [
            ws.path(".git/config"),
            ws.path(".git/hooks/pre-push"),
            ws.path("clone/.git/config"),
            ws.path("clone/.git/hooks/pre-push"),
        ]
    );
    let config = std::fs::read_to_string(ws.path(".git/config")).expect("config");
    assert_eq!(config, "[core]\n\trepositoryformatversion = 0\n\t\n");
    assert!(ws.path(".git/hooks/pre-commit.sample").exists());
    assert!(ws.check().is_empty(), "{:?}", ws.check());

    // A submodule's git directory.
    init_gitdir(&ws.path(".git/modules/libs/one"));
    let refused = ws.check();
    assert!(
        refused
            .iter()
            .any(|r| r.path == ws.path(".git/modules/libs/one/hooks/pre-push")),
        "{refused:?}"
    );
    assert!(!ws.path(".git/modules/libs/one/hooks/pre-push").exists());
}

#[test]
fn a_dot_git_that_newly_points_outside_is_removed() {
    let mut ws = Workspace::new(|root| std::fs::create_dir(root.join("sub")).expect("dir"));
    let evil = ws.dir.path().join("evil");
    std::fs::create_dir_all(evil.join("hooks")).expect("dir");
    write_exec(&evil.join("hooks/pre-commit"), "evil");
    std::fs::write(ws.path(".git"), format!("gitdir: {}\n", evil.display())).expect("write");
    std::os::unix::fs::symlink(&evil, ws.path("sub/.git")).expect("link");
    let refused = ws.check();
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(
        refused
            .iter()
            .all(|r| r.what.starts_with("now points git to"))
    );
    assert!(std::fs::symlink_metadata(ws.path(".git")).is_err());
    assert!(std::fs::symlink_metadata(ws.path("sub/.git")).is_err());
    assert!(
        evil.join("hooks/pre-commit").exists(),
        "nothing outside is touched"
    );

    // One that points inside is followed.
    std::fs::create_dir(ws.path("store")).expect("dir");
    init(&ws.path("store"));
    std::fs::write(ws.path(".git"), "gitdir: store/.git\n").expect("write");
    assert!(ws.check().iter().all(|r| !r.what.starts_with("now points")));
    write_exec(&ws.path("store/.git/hooks/post-checkout"), "evil");
    assert!(!ws.check().is_empty());
    assert!(!ws.path("store/.git/hooks/post-checkout").exists());
}

#[test]
fn the_users_own_links_outside_are_left_alone() {
    let outside = tempfile::tempdir().expect("tempdir");
    let main = outside.path().join("main/.git/worktrees/ws");
    std::fs::create_dir_all(&main).expect("dir");
    let mut ws = Workspace::new(|root| {
        std::fs::write(root.join(".git"), format!("gitdir: {}\n", main.display())).expect("write");
    });
    assert!(ws.check().is_empty());
    assert!(ws.path(".git").exists());
}

#[test]
fn the_note_names_the_file_what_was_refused_and_says_not_to_retry() {
    let refusal = Refusal {
        path: PathBuf::from("/ws/.git/config"),
        what: "the setting core.hooksPath".to_owned(),
        undone: Undone::PutBack,
    };
    let text = note(Moment::End, std::slice::from_ref(&refusal)).expect("a note");
    assert!(text.starts_with("\n[toolhost: "), "{text}");
    assert!(
        text.contains("/ws/.git/config: the setting core.hooksPath (put back as it was)"),
        "{text}"
    );
    assert!(text.contains("Do not retry"), "{text}");
    assert!(text.ends_with(']'), "{text}");
    assert!(note(Moment::ScopeEnd, &[refusal]).is_none());
}

/// A guard made without watches (a host that is no server) reads the repositories at every
/// check, so a hook planted between two checks is still undone.
#[tokio::test]
async fn a_guard_without_watches_reads_every_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().canonicalize().expect("canonical");
    init(&root);
    let guard = GitGuard::new("unwatched", std::slice::from_ref(&root), false);
    assert!(
        guard.check(Moment::Start).await.is_none(),
        "the first check records"
    );
    assert!(guard.check(Moment::End).await.is_none(), "nothing changed");
    let hook = root.join(".git/hooks/post-merge");
    write_exec(&hook, "evil");
    let note = guard.check(Moment::End).await;
    assert!(note.is_some(), "the planted hook is refused");
    assert!(!hook.exists(), "and undone");
    let state = guard.state.lock().await;
    assert_eq!(state.skipped, 0, "no check ended at the watches");
    assert!(
        state
            .watches
            .as_ref()
            .is_some_and(|watches| !watches.active()),
        "no inotify descriptor is held"
    );
}

/// A check that read nothing (the watches saw no change) refuses nothing and is counted.
fn skipped_check(ws: &mut Workspace) -> bool {
    let before = ws.state.skipped;
    let refused = ws.check();
    assert!(refused.is_empty(), "{refused:?}");
    ws.state.skipped == before + 1
}

#[test]
fn a_check_reads_again_only_what_the_watches_saw_change() {
    let mut ws = Workspace::new(|root| {
        init(root);
        std::fs::create_dir(root.join("sub")).expect("dir");
    });
    if ws
        .state
        .watches
        .as_mut()
        .is_none_or(|watches| watches.changed())
    {
        eprintln!("no inotify here: every check is a full one");
        return;
    }
    assert!(skipped_check(&mut ws), "nothing changed, yet it read again");
    // Files in the workspace and in a directory of it, and a file in a new directory below
    // one: nothing git runs. The check ends at the watches.
    std::fs::write(ws.path("out.txt"), "build output").expect("write");
    std::fs::write(ws.path("sub/notes.md"), "notes").expect("write");
    assert!(skipped_check(&mut ws), "a plain file made it read again");

    // Each place a change matters is seen, and judged.
    type Change = (&'static str, fn(&Workspace));
    let changes: [Change; 6] = [
        ("a new hook", |ws| {
            write_exec(&ws.path(".git/hooks/post-merge"), "evil")
        }),
        ("a new file in the hooks", |ws| {
            std::fs::write(ws.path(".git/hooks/post-commit"), "evil").expect("write");
        }),
        ("a setting", |ws| {
            let mut config = std::fs::read_to_string(ws.path(".git/config")).expect("read");
            config.push_str("[core]\n\thooksPath = /tmp/evil\n");
            std::fs::write(ws.path(".git/config"), config).expect("write");
        }),
        ("a .git file in a directory of the workspace", |ws| {
            std::fs::write(ws.path("sub/.git"), "gitdir: ../.git\n").expect("write");
        }),
        ("a new repository in a new directory", |ws| {
            init(&ws.path("fresh"));
            write_exec(&ws.path("fresh/.git/hooks/pre-commit"), "evil");
        }),
        ("a directory moved into the workspace", |ws| {
            let elsewhere = ws.dir.path().join("moved");
            init(&elsewhere);
            std::fs::rename(&elsewhere, ws.path("moved")).expect("rename");
        }),
    ];
    for (what, change) in changes {
        change(&ws);
        let before = ws.state.skipped;
        let _ = ws.check();
        assert_eq!(ws.state.skipped, before, "{what}: not read again");
        // What it accepted or put back is quiet again.
        let _ = ws.check();
        assert!(
            skipped_check(&mut ws),
            "{what}: read again with nothing changed"
        );
    }
    assert!(
        !ws.path("fresh/.git/hooks/pre-commit").exists(),
        "judged from nothing"
    );
}
