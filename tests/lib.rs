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
