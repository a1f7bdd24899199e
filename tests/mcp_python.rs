//! `toolhost serve` driven by the official MCP Python SDK (`pip install mcp`): the client in
//! `tests/python/mcp_client.py` launches the server over stdio, lists the tools and runs
//! `echo hello` through `execute`.
//!
//! The SDK lives in a virtualenv under the target directory (`<target>/mcp-venv`), created on
//! the first run (needs `python3` with `venv` and access to PyPI) and reused afterwards. Set
//! `TOOLHOST_SKIP_PYTHON=1` to skip this test on machines without them.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `<target>/mcp-venv`, next to the profile directories.
fn venv_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.ancestors()
        .nth(3)
        .expect("test binary lives in <target>/<profile>/deps")
        .join("mcp-venv")
}

fn run(command: &mut Command, what: &str) {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The venv's python, with the `mcp` package installed.
fn python_with_mcp() -> PathBuf {
    let venv = venv_dir();
    let python = venv.join("bin").join("python");
    let ready = venv.join(".toolhost-mcp-installed");
    if ready.is_file() && python.is_file() {
        return python;
    }
    if !python.is_file() {
        run(
            Command::new("python3").arg("-m").arg("venv").arg(&venv),
            "creating the virtualenv (python3 -m venv)",
        );
    }
    run(
        Command::new(&python).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "mcp",
        ]),
        "pip install mcp",
    );
    std::fs::write(&ready, "mcp\n").expect("mark the virtualenv ready");
    python
}

#[test]
fn python_sdk_client_lists_tools_and_runs_echo() {
    if std::env::var_os("TOOLHOST_SKIP_PYTHON").is_some_and(|v| v == "1") {
        eprintln!("skipped: TOOLHOST_SKIP_PYTHON=1");
        return;
    }
    let python = python_with_mcp();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/mcp_client.py");
    let (cache_key, cache_value) = toolhost_e2e::cache_env();
    let output = Command::new(&python)
        .arg(&script)
        .arg(toolhost_e2e::toolhost_bin())
        .env(cache_key, cache_value)
        .env("TOOLHOST_LOG", "error")
        .output()
        .expect("run the Python client");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the Python MCP client failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    assert!(
        stdout.contains("python mcp client: ok"),
        "{stdout}\n{stderr}"
    );
}
