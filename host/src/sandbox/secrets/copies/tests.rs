use super::*;
use std::process::Command;

/// `git ARGS` in `dir`, with no configuration of the machine's, an author of its own.
fn git(dir: &Path, args: &[&str]) {
    let ran = Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("HOME", dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .output()
        .expect("git runs");
    // Its warnings (a bare repository given a work tree is one) shown only when it fails.
    assert!(
        ran.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&ran.stderr)
    );
}

/// The paths an index file holds, and whether each is a directory.
fn tracked(index: &Path, hash_len: usize) -> Vec<(String, bool)> {
    let bytes = std::fs::read(index).expect("index");
    let mut paths = Vec::new();
    for_each_tracked(&bytes, hash_len, |path, is_dir| {
        paths.push((String::from_utf8_lossy(path).into_owned(), is_dir));
        false
    })
    .expect("parsed");
    paths
}

/// A home (resolved) with `.npmrc` and a few ordinary files.
fn home() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("dir");
    let home = dir.path().canonicalize().expect("home");
    std::fs::write(home.join(".npmrc"), "//registry.npmjs.org/:_authToken=x").expect("npmrc");
    std::fs::write(home.join(".bashrc"), "# bashrc").expect("bashrc");
    std::fs::create_dir_all(home.join(".config/nvim/lua")).expect("nvim");
    std::fs::write(home.join(".config/nvim/lua/init.lua"), "-- init").expect("init");
    (dir, home)
}

#[test]
fn indexes_of_versions_2_3_and_4_are_read() {
    let (_dir, home) = home();
    git(&home, &["init", "-q"]);
    git(
        &home,
        &["add", ".npmrc", ".bashrc", ".config/nvim/lua/init.lua"],
    );
    let expected = vec![
        (".bashrc".to_owned(), false),
        (".config/nvim/lua/init.lua".to_owned(), false),
        (".npmrc".to_owned(), false),
    ];
    let index = home.join(".git/index");
    assert_eq!(&bytes_version(&index), b"\0\0\0\x02");
    assert_eq!(tracked(&index, 20), expected);
    // Version 3: an intent-to-add entry carries the extended flags.
    std::fs::write(home.join(".profile"), "# profile").expect("profile");
    git(&home, &["add", "-N", ".profile"]);
    assert_eq!(&bytes_version(&index), b"\0\0\0\x03");
    let mut with_profile = expected.clone();
    with_profile.push((".profile".to_owned(), false));
    assert_eq!(tracked(&index, 20), with_profile);
    // Version 4: paths prefix-compressed.
    git(&home, &["update-index", "--index-version", "4"]);
    assert_eq!(&bytes_version(&index), b"\0\0\0\x04");
    assert_eq!(tracked(&index, 20), with_profile);
}

fn bytes_version(index: &Path) -> [u8; 4] {
    let bytes = std::fs::read(index).expect("index");
    [bytes[4], bytes[5], bytes[6], bytes[7]]
}

#[test]
fn a_sha256_repository_is_read_with_its_longer_ids() {
    let (_dir, home) = home();
    git(&home, &["init", "-q", "--object-format=sha256"]);
    git(&home, &["add", ".bashrc", ".npmrc"]);
    assert_eq!(
        tracked(&home.join(".git/index"), 32),
        vec![(".bashrc".to_owned(), false), (".npmrc".to_owned(), false)]
    );
    let hidden = [home.join(".npmrc")];
    assert_eq!(
        of(std::slice::from_ref(&home), &hidden),
        vec![home.join(".git")]
    );
}

#[test]
fn a_damaged_index_is_an_error_never_a_panic() {
    let (_dir, home) = home();
    git(&home, &["init", "-q"]);
    git(
        &home,
        &["add", ".npmrc", ".bashrc", ".config/nvim/lua/init.lua"],
    );
    let index = std::fs::read(home.join(".git/index")).expect("index");
    // Every cut of the entries fails to parse (the checksum and extensions after them are not
    // read).
    let entries_end = 12 + 3 * 64 + 8;
    for length in 0..entries_end.min(index.len()) {
        let result = for_each_tracked(&index[..length], 20, |_, _| false);
        assert!(result.is_err(), "a cut at {length} parsed");
    }
    let mut version = index.clone();
    version[7] = 5;
    assert!(matches!(
        for_each_tracked(&version, 20, |_, _| false),
        Err(IndexError::Version(5))
    ));
    assert!(matches!(
        for_each_tracked(b"PACK\0\0\0\x02\0\0\0\0", 20, |_, _| false),
        Err(IndexError::Signature)
    ));
    // A huge count in a short file ends at the file's end.
    let mut count = index.clone();
    count[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
    assert!(for_each_tracked(&count, 20, |_, _| false).is_err());
    // A version 4 entry that strips more than the previous path has.
    let mut stripped = b"DIRC\0\0\0\x04\0\0\0\x01".to_vec();
    stripped.extend([0u8; 62]);
    stripped.extend([5u8, b'a', 0]);
    assert!(matches!(
        for_each_tracked(&stripped, 20, |_, _| false),
        Err(IndexError::Prefix(0))
    ));
    assert_eq!(varint(&[0xff; 16]), None);
    assert_eq!(varint(&[0x80, 0x00]), Some((128, 2)));
    assert_eq!(varint(&[0x05]), Some((5, 1)));
}

#[test]
fn a_dotfiles_repository_at_the_home_tracking_a_hidden_file_is_hidden() {
    let (_dir, home) = home();
    let hidden = [home.join(".npmrc"), home.join(".ssh")];
    git(&home, &["init", "-q"]);
    git(&home, &["add", ".bashrc"]);
    git(&home, &["commit", "-q", "-m", "bashrc"]);
    // Tracking only ordinary files, it stays.
    assert!(of(std::slice::from_ref(&home), &hidden).is_empty());
    git(&home, &["add", ".npmrc"]);
    assert_eq!(
        of(std::slice::from_ref(&home), &hidden),
        vec![home.join(".git")]
    );
    // A path beneath a hidden directory counts too.
    git(&home, &["rm", "-q", "--cached", ".npmrc"]);
    std::fs::create_dir_all(home.join(".ssh")).expect("ssh");
    std::fs::write(home.join(".ssh/config"), "Host x").expect("config");
    git(&home, &["add", ".ssh/config"]);
    assert_eq!(
        of(std::slice::from_ref(&home), &hidden),
        vec![home.join(".git")]
    );
}

#[test]
fn bare_dotfiles_repositories_take_the_home_as_their_work_tree() {
    let (_dir, home) = home();
    let hidden = [home.join(".npmrc")];
    let work_tree = format!("--work-tree={}", home.display());
    for name in [
        ".cfg",
        ".config/dotfiles.git",
        ".local/share/yadm/repo.git",
        ".config/yadm/repo.git",
        ".config/vcsh/repo.d/zsh.git",
    ] {
        let git_dir = home.join(name);
        std::fs::create_dir_all(&git_dir).expect("dir");
        git(&git_dir, &["init", "-q", "--bare"]);
        let git_dir_flag = format!("--git-dir={}", git_dir.display());
        git(&home, &[&git_dir_flag, &work_tree, "add", ".bashrc"]);
        assert!(
            of(std::slice::from_ref(&home), &hidden).is_empty(),
            "{name} hidden"
        );
        git(&home, &[&git_dir_flag, &work_tree, "add", ".npmrc"]);
        assert_eq!(
            of(std::slice::from_ref(&home), &hidden),
            vec![git_dir.clone()],
            "{name}"
        );
        std::fs::remove_dir_all(&git_dir).expect("removed");
    }
    // A bare repository without an index (a clone never checked out) tracks nothing.
    let mirror = home.join("mirrors/app.git");
    std::fs::create_dir_all(&mirror).expect("dir");
    git(&mirror, &["init", "-q", "--bare"]);
    assert!(of(std::slice::from_ref(&home), &hidden).is_empty());
    // `core.worktree` says where the work tree is.
    let elsewhere = home.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).expect("dir");
    std::fs::write(elsewhere.join(".npmrc"), "project registry").expect("npmrc");
    let git_dir = home.join(".other");
    std::fs::create_dir_all(&git_dir).expect("dir");
    git(&git_dir, &["init", "-q", "--bare"]);
    git(
        &git_dir,
        &["config", "core.worktree", &elsewhere.display().to_string()],
    );
    git(&git_dir, &["config", "core.bare", "false"]);
    let git_dir_flag = format!("--git-dir={}", git_dir.display());
    git(&elsewhere, &[&git_dir_flag, "add", ".npmrc"]);
    assert!(of(std::slice::from_ref(&home), &hidden).is_empty());
}

#[test]
fn a_project_repository_tracking_its_own_npmrc_stays() {
    let (_dir, home) = home();
    let hidden = [home.join(".npmrc")];
    for project in ["project", "src/app"] {
        let project = home.join(project);
        std::fs::create_dir_all(&project).expect("project");
        std::fs::write(project.join(".npmrc"), "registry=https://x").expect("npmrc");
        git(&project, &["init", "-q"]);
        git(&project, &["add", ".npmrc"]);
    }
    assert!(of(std::slice::from_ref(&home), &hidden).is_empty());
    // The same repository with its work tree at the home is hidden.
    let project = home.join("project");
    git(&project, &["config", "core.worktree", "../.."]);
    assert_eq!(
        of(std::slice::from_ref(&home), &hidden),
        vec![project.join(".git")]
    );
}

#[test]
fn a_sparse_directory_entry_above_a_hidden_path_counts() {
    let relative: HashSet<&[u8]> = [b".config/gh".as_slice(), b".npmrc".as_slice()]
        .into_iter()
        .collect();
    assert!(names_hidden(b".config/", true, &relative));
    assert!(names_hidden(b".config/gh/hosts.yml", false, &relative));
    assert!(names_hidden(b".npmrc", false, &relative));
    assert!(!names_hidden(b".config/", false, &relative));
    assert!(!names_hidden(b".config/ghostty/config", false, &relative));
    assert!(!names_hidden(b".npmrc-example", false, &relative));
    assert!(!names_hidden(b"project/.npmrc", false, &relative));
}

#[test]
fn backups_beside_hidden_paths_are_hidden_when_they_exist() {
    let (_dir, home) = home();
    for name in [
        ".npmrc~",
        ".npmrc.bak",
        ".npmrc.orig",
        ".npmrc.old",
        ".npmrc.swp",
        ".npmrc.swo",
        "#.npmrc#",
        ".pypirc.bak",
        ".id.swp",
        ".ssh.old",
    ] {
        std::fs::write(home.join(name), "copy").expect("backup");
    }
    std::fs::create_dir_all(home.join("keys")).expect("dir");
    std::fs::write(home.join("keys/.id.swp"), "swap").expect("swap");
    let hidden = [
        home.join(".npmrc"),
        home.join(".pypirc"),
        home.join(".ssh"),
        home.join("keys/id"),
    ];
    let mut copies = of(std::slice::from_ref(&home), &hidden);
    copies.sort();
    let mut expected: Vec<PathBuf> = [
        "#.npmrc#",
        ".npmrc.bak",
        ".npmrc.old",
        ".npmrc.orig",
        ".npmrc.swo",
        ".npmrc.swp",
        ".npmrc~",
        ".pypirc.bak",
        ".ssh.old",
        "keys/.id.swp",
    ]
    .iter()
    .map(|name| home.join(name))
    .collect();
    expected.sort();
    assert_eq!(copies, expected);
    // `~/.id.swp` is no backup of `~/keys/id`, and `.bashrc` is not hidden.
    assert!(!copies.contains(&home.join(".id.swp")));
}
