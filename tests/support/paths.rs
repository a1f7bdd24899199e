//! Where things are: the target directory the tests were built in, the repository, the
//! `toolhost` binary (built on demand), the compiled-component caches, the directory that tests
//! and their confined commands share, and the root of the confinement tests' fake machines.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use tempfile::TempDir;

/// A directory every test host lets commands write (`--writable`), for files that a test and
/// its commands both see: confined commands have a private `/tmp`, so a plain temporary
/// directory of the test is not there for them.
pub fn shared_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join("toolhost-tests-shared");
        std::fs::create_dir_all(&dir).expect("shared dir");
        // Sticky and open to all, like /tmp: tests also run hosts as an unprivileged user.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777))
            .expect("chmod shared dir");
        dir.canonicalize().expect("canonical shared dir")
    })
}

/// A fresh temporary directory in [`shared_dir`].
pub fn shared_tempdir() -> TempDir {
    tempfile::tempdir_in(shared_dir()).expect("shared temp dir")
}

/// The flags that make [`shared_dir`] writable for a `toolhost` process's commands.
pub fn shared_writable() -> [&'static std::ffi::OsStr; 2] {
    ["--writable".as_ref(), shared_dir().as_os_str()]
}

/// Compiled-component cache for tests.
pub fn test_cache_dir() -> PathBuf {
    std::env::temp_dir().join("toolhost-test-component-cache")
}

/// `<target>/<profile>`: where the running test binary was built (it lives in its `deps/`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("test binary lives in <target>/<profile>/deps")
        .to_path_buf()
}

/// The target directory these tests were built in (`CARGO_TARGET_DIR` or `target/`).
pub fn target_dir() -> PathBuf {
    profile_dir()
        .parent()
        .expect("the profile directory lies in the target directory")
        .to_path_buf()
}

/// The variable that names where the confinement tests put their fake machines.
pub const MACHINES_VARIABLE: &str = "TOOLHOST_TEST_MACHINES";

/// Where the confinement tests put their fake machines (a home with secrets, a workspace, an
/// "outside" directory), one fresh directory each.
///
/// 1. `TOOLHOST_TEST_MACHINES` names the root; by default it is `confinement-tests` in the
///    target directory.
/// 2. A root under `/tmp`, `/dev/shm` or the temporary directory cannot hold a fake machine:
///    a confined command sees a private `/tmp` there, or may write it when it runs without
///    namespaces. Such a root is replaced by `/var/tmp/toolhost-test-machines-UID`, which no
///    profile hides or makes writable. A clone under `/tmp` lands here.
pub fn machines_root() -> PathBuf {
    let chosen = std::env::var_os(MACHINES_VARIABLE)
        .filter(|value| !value.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("confinement-tests"));
    let chosen = std::path::absolute(&chosen).unwrap_or(chosen);
    let root = if seen_differently_when_confined(&chosen) {
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        PathBuf::from(format!("/var/tmp/toolhost-test-machines-{uid}"))
    } else {
        chosen
    };
    std::fs::create_dir_all(&root).expect("the fake machines' root can be created");
    root
}

/// Whether `path` lies where a confined command sees something else than the host does (a
/// private `/tmp`), or may write (`/tmp` without namespaces, `/dev/shm`).
pub fn seen_differently_when_confined(path: &Path) -> bool {
    let resolved = path
        .ancestors()
        .find_map(|ancestor| {
            let rest = path.strip_prefix(ancestor).ok()?;
            Some(std::fs::canonicalize(ancestor).ok()?.join(rest))
        })
        .unwrap_or_else(|| path.to_path_buf());
    let temporary = std::env::temp_dir();
    [
        Path::new("/tmp"),
        Path::new("/dev/shm"),
        temporary.as_path(),
    ]
    .iter()
    .any(|shared| resolved.starts_with(shared))
}

/// The repository's root directory.
pub fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ lies in the repository")
}

/// The `toolhost` binary of the profile these tests were built with, built (once per test
/// binary) with `cargo build` so it is never stale. `TOOLHOST_BIN` names another binary
/// instead, used as it is: a bench run against an earlier build compares two commits.
pub fn toolhost_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("TOOLHOST_BIN") {
            return PathBuf::from(bin);
        }
        let profile_dir = profile_dir();
        let target_dir = target_dir();
        let profile = profile_dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("debug")
            .to_string();
        let bin = profile_dir.join("toolhost");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
        let mut build = std::process::Command::new(cargo);
        build
            .args(["build", "--quiet", "-p", "toolhost", "--bin", "toolhost"])
            .arg("--manifest-path")
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml"))
            .arg("--target-dir")
            .arg(&target_dir);
        match profile.as_str() {
            "debug" => {}
            "release" => {
                build.arg("--release");
            }
            other => {
                build.args(["--profile", other]);
            }
        }
        match build.status() {
            Ok(status) if status.success() => {}
            outcome => eprintln!(
                "warning: `cargo build -p toolhost` failed ({outcome:?}); using {} as it is",
                bin.display()
            ),
        }
        assert!(
            bin.is_file(),
            "the toolhost binary is missing at {}; run `cargo build -p toolhost` first",
            bin.display()
        );
        bin
    })
    .clone()
}

/// A compiled-component cache shared by the MCP tests, so servers start quickly.
pub fn cache_env() -> (&'static str, String) {
    (
        "XDG_CACHE_HOME",
        std::env::temp_dir()
            .join("toolhost-mcp-test-cache")
            .display()
            .to_string(),
    )
}
