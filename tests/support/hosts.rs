//! Hosts for the tests: built in the test process on the fake process capability (from a
//! plugin directory or with a bundled policy) or on the real process manager, and a copy of the
//! `toolhost` binary that an unprivileged user runs ([`UnprivilegedHost`]).

use crate::paths::{shared_dir, test_cache_dir, toolhost_bin};
use std::path::{Path, PathBuf};
use tempfile::TempDir;
use toolhost::ToolHost;
use toolhost::testing::FakeProcesses;

/// A temporary plugin directory holding `name.wasm` (copied from `component`) and, if given,
/// `name.toml` with `manifest`.
pub fn plugin_dir(component: &Path, name: &str, manifest: Option<&str>) -> TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::copy(component, dir.path().join(format!("{name}.wasm"))).expect("copy component");
    if let Some(text) = manifest {
        std::fs::write(dir.path().join(format!("{name}.toml")), text).expect("write manifest");
    }
    dir
}

/// A host with no bundled policy, loading `dir`, on the fake process backend.
pub async fn fake_host(dir: &Path, fake: std::sync::Arc<FakeProcesses>) -> ToolHost {
    ToolHost::builder()
        .bundled_policy(None)
        .plugin_dir(dir)
        .process_backend(fake)
        .cache_dir(None)
        .build()
        .await
        .expect("host builds")
}

/// The error of building a host like [`fake_host`] does, for loads that must be refused.
pub async fn fake_host_error(dir: &Path) -> toolhost::HostError {
    ToolHost::builder()
        .bundled_policy(None)
        .plugin_dir(dir)
        .process_backend(FakeProcesses::new())
        .cache_dir(None)
        .build()
        .await
        .err()
        .expect("loading the plugin directory must fail")
}

/// A host running bundled policy `policy` on `fake`, with compiled components cached under
/// the test target directory.
pub async fn policy_host(policy: &str, fake: std::sync::Arc<FakeProcesses>) -> ToolHost {
    ToolHost::builder()
        .bundled_policy(Some(policy))
        .process_backend(fake)
        .cache_dir(Some(test_cache_dir()))
        .build()
        .await
        .expect("host builds")
}

/// A host on the real process manager with the bundled `policy`, keeping output logs in a
/// temporary state directory (returned so it lives as long as the host).
pub async fn real_host(policy: &str) -> (ToolHost, TempDir) {
    real_host_with(ToolHost::builder().bundled_policy(Some(policy))).await
}

/// A host on the real process manager loading only the plugin directory `dir`.
pub async fn real_plugin_host(dir: &Path) -> (ToolHost, TempDir) {
    real_host_with(ToolHost::builder().bundled_policy(None).plugin_dir(dir)).await
}

/// A host on the real process manager configured by `builder` (the state directory, the
/// shared writable directory and the component cache are set here).
pub async fn real_host_with(builder: toolhost::ToolHostBuilder) -> (ToolHost, TempDir) {
    let state = tempfile::tempdir().expect("state dir");
    let mut config = toolhost::process::ProcessManagerConfig {
        state_dir: Some(state.path().to_path_buf()),
        kill_grace: std::time::Duration::from_millis(500),
        ..Default::default()
    };
    config.sandbox.writable.push(shared_dir().to_path_buf());
    let host = builder
        .process_config(config)
        .cache_dir(Some(test_cache_dir()))
        .build()
        .await
        .expect("host builds");
    (host, state)
}

/// A copy of the `toolhost` binary that an unprivileged user can run: in a fresh directory under
/// `/var/tmp` (reachable by every user, and not a writable root of the sandbox, unlike `/tmp`),
/// owned by `nobody` when the tests run as root, and run as `nobody` then (through `setpriv`),
/// as the current user otherwise.
pub struct UnprivilegedHost {
    dir: TempDir,
    root: bool,
}

impl UnprivilegedHost {
    /// The directory with the binary and the subdirectories `dirs`, all owned by the user
    /// the host will run as.
    pub fn new(dirs: &[&str]) -> UnprivilegedHost {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        let dir = tempfile::tempdir_in("/var/tmp").expect("dir in /var/tmp");
        for name in dirs {
            std::fs::create_dir_all(dir.path().join(name)).expect("dir");
        }
        std::fs::copy(toolhost_bin(), dir.path().join("toolhost")).expect("copy");
        if root {
            let status = std::process::Command::new("chown")
                .args(["-R", "65534:65534"])
                .arg(dir.path())
                .status()
                .expect("chown");
            assert!(status.success());
        }
        UnprivilegedHost { dir, root }
    }

    /// Whether the tests run as root (and the host as `nobody`).
    pub fn as_nobody(&self) -> bool {
        self.root
    }

    /// A path in the directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The command that runs the copied binary unprivileged.
    pub fn command(&self) -> std::process::Command {
        let binary = self.path("toolhost");
        if self.root {
            let mut command = std::process::Command::new("setpriv");
            command
                .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                .arg(binary);
            command
        } else {
            std::process::Command::new(binary)
        }
    }
}
