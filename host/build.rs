//! Builds what the host embeds, each with a nested `cargo build` and its own target directory
//! (the way wasmtime builds its own test programs):
//!
//! - the guest components in `guest-tools/`, for `wasm32-wasip2`, so the guest crates are
//!   never compiled for the host target. For every component `NAME.wasm` it sets
//!   `TOOLHOST_GUEST_<NAME>` (upper case, `-` -> `_`) to the built file's path;
//!   `src/plugins/bundled.rs` embeds the bundled policies with `include_bytes!` and the test
//!   fixtures are found by path;
//! - the process keeper in `keeper/`, for the host's own target: `TOOLHOST_KEEPER` is its path,
//!   and the process manager embeds it, so that every program linking the library (the
//!   binary, its tests, an embedder) can run it.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const TARGET: &str = "wasm32-wasip2";

fn main() {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let root = manifest_dir.parent().expect("host/ lives in the workspace");
    let guests = root.join("guest-tools");
    println!(
        "cargo:rerun-if-changed={}",
        guests.join("Cargo.toml").display()
    );
    println!(
        "cargo:rerun-if-changed={}",
        guests.join("Cargo.lock").display()
    );
    for dir in ["crates", "fixtures"] {
        println!("cargo:rerun-if-changed={}", guests.join(dir).display());
    }
    println!("cargo:rerun-if-changed={}", root.join("wit").display());

    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets it"));
    // OUT_DIR is <target>/<profile>/build/toolhost-<hash>/out: share one guest target dir
    // between profiles and `cargo check`/`clippy`, so the guests build once.
    let target_dir = out_dir
        .ancestors()
        .nth(4)
        .map(|t| t.join("wasm-guests"))
        .unwrap_or_else(|| out_dir.join("wasm-guests"));

    build_keeper(root, &out_dir);
    ensure_wasm_target();

    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.arg("build")
        .arg("--release")
        .arg("--locked")
        .arg("--target")
        .arg(TARGET)
        .arg("--manifest-path")
        .arg(guests.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir)
        .arg("--workspace");
    isolate(&mut cmd);
    let status = cmd
        .status()
        .expect("failed to run cargo for the guest components");
    assert!(status.success(), "building the guest components failed");

    let release = target_dir.join(TARGET).join("release");
    let mut found = 0;
    for entry in std::fs::read_dir(&release).expect("guest build output exists") {
        let path = entry.expect("readable dir entry").path();
        if path.extension().is_some_and(|e| e == "wasm") {
            let stem = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default();
            let var = format!("TOOLHOST_GUEST_{}", stem.to_uppercase().replace('-', "_"));
            println!("cargo:rustc-env={var}={}", path.display());
            found += 1;
        }
    }
    assert!(
        found > 0,
        "no guest component was built in {}",
        release.display()
    );
}

/// rustup installs the targets named in rust-toolchain.toml only when it installs the toolchain
/// itself; on a machine that already had the toolchain, add the target here.
fn ensure_wasm_target() {
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let sysroot = Command::new(rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    let installed = sysroot
        .as_deref()
        .map(|s| Path::new(s).join("lib/rustlib").join(TARGET).exists())
        .unwrap_or(false);
    if installed {
        return;
    }
    let mut cmd = Command::new("rustup");
    cmd.args(["target", "add", TARGET]);
    if let Some(toolchain) = env::var_os("RUSTUP_TOOLCHAIN") {
        cmd.arg("--toolchain").arg(toolchain);
    }
    match cmd.status() {
        Ok(s) if s.success() => {}
        _ => println!(
            "cargo:warning=could not install the {TARGET} target; run `rustup target add {TARGET}`"
        ),
    }
}

/// Don't leak the outer build's configuration (clippy's wrapper, host rustflags, a forced
/// target dir) into a nested build.
fn isolate(cmd: &mut Command) {
    for var in [
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTC_WRAPPER",
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_PRIMARY_PACKAGE",
    ] {
        cmd.env_remove(var);
    }
}

/// Build `keeper/` (a member of this workspace) in release mode for the target the host is
/// built for, and set `TOOLHOST_KEEPER` to the executable.
fn build_keeper(root: &Path, out_dir: &Path) {
    let keeper = root.join("keeper");
    println!("cargo:rerun-if-changed={}", keeper.display());
    let target = env::var("TARGET").expect("cargo sets it");
    let target_dir = out_dir
        .ancestors()
        .nth(4)
        .map(|t| t.join("keeper"))
        .unwrap_or_else(|| out_dir.join("keeper"));
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.arg("build")
        .arg("--release")
        .arg("--locked")
        .arg("--package")
        .arg("toolhost-keeper")
        .arg("--target")
        .arg(&target)
        .arg("--manifest-path")
        .arg(root.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir);
    isolate(&mut cmd);
    // Statically linked: every command pays the keeper's start, and a static binary starts
    // without the dynamic loader (foreground `true` through the manager: about 0.5 ms less).
    if target.contains("-linux-gnu") {
        cmd.env("CARGO_ENCODED_RUSTFLAGS", "-Ctarget-feature=+crt-static");
    }
    let status = cmd.status().expect("failed to run cargo for the keeper");
    assert!(status.success(), "building the keeper failed");
    let path = target_dir
        .join(&target)
        .join("release")
        .join("toolhost-keeper");
    assert!(
        path.is_file(),
        "the keeper was not built at {}",
        path.display()
    );
    println!("cargo:rustc-env=TOOLHOST_KEEPER={}", path.display());
}
