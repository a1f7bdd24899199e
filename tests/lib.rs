//! Helpers shared by the end-to-end tests: plugin directories with fixture components and
//! manifests, and hosts built on them.

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

/// The hostile fixture component's path.
pub fn hostile_component() -> PathBuf {
    PathBuf::from(toolhost::bundled::fixtures::HOSTILE)
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

/// Parse a tool result as JSON.
pub fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("result is not JSON ({e}): {text}"))
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

/// Compiled-component cache for tests.
pub fn test_cache_dir() -> PathBuf {
    std::env::temp_dir().join("toolhost-test-component-cache")
}

/// A host on the real process manager with the bundled `policy`, keeping output logs in a
/// temporary state directory (returned so it lives as long as the host).
pub async fn real_host(policy: &str) -> (ToolHost, TempDir) {
    let state = tempfile::tempdir().expect("state dir");
    let config = toolhost::process::ProcessManagerConfig {
        state_dir: Some(state.path().to_path_buf()),
        kill_grace: std::time::Duration::from_millis(500),
        ..Default::default()
    };
    let host = ToolHost::builder()
        .bundled_policy(Some(policy))
        .process_config(config)
        .cache_dir(Some(test_cache_dir()))
        .build()
        .await
        .expect("host builds");
    (host, state)
}

/// The `toolhost` binary, built once per test process with the same cargo and profile.
pub fn toolhost_bin() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            // target/<profile>/deps/<test-binary> -> target/<profile>/toolhost
            let exe = std::env::current_exe().expect("current exe");
            let profile_dir = exe
                .parent()
                .and_then(Path::parent)
                .expect("test binary lives in target/<profile>/deps");
            let release = profile_dir.file_name().is_some_and(|n| n == "release");
            let mut cmd = std::process::Command::new(env!("CARGO"));
            cmd.args(["build", "--quiet", "-p", "toolhost", "--bin", "toolhost"])
                .current_dir(env!("CARGO_MANIFEST_DIR"));
            if release {
                cmd.arg("--release");
            }
            let status = cmd.status().expect("run cargo build");
            assert!(status.success(), "building the toolhost binary failed");
            let bin = profile_dir.join("toolhost");
            assert!(bin.is_file(), "no binary at {}", bin.display());
            bin
        })
        .clone()
}

/// Processes whose command line contains `marker`, from /proc.
pub fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let path = entry.path().join("cmdline");
            if let Ok(raw) = std::fs::read(&path) {
                let cmdline = String::from_utf8_lossy(&raw).replace('\0', " ");
                if cmdline.contains(marker) && !cmdline.contains("grep") {
                    found.push(cmdline);
                }
            }
        }
    }
    found
}

/// `sleep` processes whose command line contains `marker`.
pub fn sleeps_with(marker: &str) -> usize {
    processes_with(marker)
        .iter()
        .filter(|c| c.starts_with("sleep "))
        .count()
}

/// A marker unique to this test run, for finding processes in /proc.
pub fn unique_marker() -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // `sleep` takes fractional seconds: the marker is a distinctive duration.
    format!("{}.{}{:03}", 300 + n, std::process::id() % 100_000, n)
}
