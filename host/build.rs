//! Builds what the host embeds, each with a nested `cargo build` and its own target directory
//! (the way wasmtime builds its own test programs):
//!
//! - the guest components in `guest-tools/`, for `wasm32-wasip2`, so the guest crates are
//!   never compiled for the host target. For every component `NAME.wasm` it sets
//!   `TOOLHOST_GUEST_<NAME>` (upper case, `-` -> `_`) to the built file's path;
//!   `src/plugins/bundled.rs` embeds the bundled policies with `include_bytes!` and the test
//!   fixtures are found by path;
//! - the process keeper in `keeper/` (with the protocol crate it shares with the host,
//!   `keeper/protocol/`), for the host's own target: `TOOLHOST_KEEPER` is its path, and the
//!   process manager embeds it, so that every program linking the library (the binary, its
//!   tests, an embedder) can run it;
//! - the list of the policy SDK's files (`guest-tools/crates/toolhost-policy`), each embedded
//!   with `include_bytes!` in `$OUT_DIR/sdk_files.rs`, which `src/cli/scaffold.rs`
//!   includes: `toolhost new-policy` writes a copy of the SDK of the binary's own version.
//!
//! It reads these from one of two places:
//!
//! - in the repository (`../guest-tools`, `../keeper` and `../wit` exist), the sources
//!   themselves: the guests are built here, which needs the `wasm32-wasip2` target (added with
//!   rustup when missing);
//! - in a packaged crate (`cargo package`, `cargo install toolhost`), `packaged/`, which
//!   `packaging/build.sh` fills before packaging: the guest components already built (they are
//!   the same on every machine), the SDK's files, the guest workspace's manifest and lock file,
//!   the toolchain file, and the keeper's sources as a workspace of their own with its lock
//!   file. Every `Cargo.toml` there is stored as `Cargo.toml.vendored`, since `cargo package`
//!   leaves out any directory holding a `Cargo.toml`. Nothing outside the package is read,
//!   and rustup is not run: the keeper is built for musl when that target is installed, else
//!   statically against glibc.

use sha2::Digest;
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const TARGET: &str = "wasm32-wasip2";

fn main() {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets it"));
    let root = manifest_dir.parent().expect("a crate lives in a directory");
    let in_repository = ["guest-tools/Cargo.toml", "keeper/Cargo.toml", "wit"]
        .iter()
        .all(|path| root.join(path).exists());
    if in_repository {
        from_repository(root, &out_dir);
    } else {
        let packaged = manifest_dir.join("packaged");
        assert!(
            packaged.join("guests").is_dir(),
            "neither the toolhost repository ({}) nor the packaged sources ({}) are there: \
             build from a clone, or package with packaging/build.sh",
            root.display(),
            packaged.display()
        );
        from_package(&packaged, &out_dir);
    }
}

/// The build in the repository: the guests built from `guest-tools/`, the keeper from
/// `keeper/`, the SDK's files from `guest-tools/crates/toolhost-policy`.
fn from_repository(root: &Path, out_dir: &Path) {
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
    let toolchain = root.join("rust-toolchain.toml");
    println!("cargo:rerun-if-changed={}", toolchain.display());
    let python_requirements = guests.join("python/requirements.txt");
    let js_lock = guests.join("js/word_count/package-lock.json");
    for path in [&python_requirements, &js_lock] {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    scaffold_files(
        &guests.join("Cargo.toml"),
        &guests.join("Cargo.lock"),
        &toolchain,
        &python_requirements,
        &js_lock,
    );

    // OUT_DIR is <target>/<profile>/build/toolhost-<hash>/out: share one guest target dir
    // between profiles and `cargo check`/`clippy`, so the guests build once.
    let target_dir = shared_dir(out_dir, "wasm-guests");

    let keeper = root.join("keeper");
    println!("cargo:rerun-if-changed={}", keeper.display());
    // The protocol crate the keeper shares with the host. It lies inside `keeper/`, and is
    // named here so that moving it out does not lose the rebuild.
    println!(
        "cargo:rerun-if-changed={}",
        keeper.join("protocol").display()
    );
    build_keeper(&root.join("Cargo.toml"), out_dir, true);
    embed_sdk(&guests.join("crates").join("toolhost-policy"), out_dir);
    if !ensure_target(TARGET, true) {
        println!(
            "cargo:warning=could not install the {TARGET} target; run `rustup target add {TARGET}`"
        );
    }

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
    announce_guests(&target_dir.join(TARGET).join("release"));
}

/// The build of a packaged crate, from `packaged/` alone (see the module's comment).
fn from_package(packaged: &Path, out_dir: &Path) {
    println!("cargo:rerun-if-changed={}", packaged.display());
    scaffold_files(
        &packaged.join("guest-workspace.toml"),
        &packaged.join("guest-workspace.lock"),
        &packaged.join("rust-toolchain.toml"),
        &packaged.join("python-requirements.txt"),
        &packaged.join("js-package-lock.json"),
    );
    // The keeper's workspace, copied under OUT_DIR with its manifests named back.
    let keeper = out_dir.join("keeper-workspace");
    copy_unvendored(&packaged.join("keeper"), &keeper);
    build_keeper(&keeper.join("Cargo.toml"), out_dir, false);
    embed_sdk(&packaged.join("sdk"), out_dir);
    announce_guests(&packaged.join("guests"));
}

/// `<target>/NAME`, the directory of a nested build shared by every profile (`OUT_DIR` is
/// `<target>/<profile>/build/toolhost-<hash>/out`).
fn shared_dir(out_dir: &Path, name: &str) -> PathBuf {
    out_dir
        .ancestors()
        .nth(4)
        .map(|t| t.join(name))
        .unwrap_or_else(|| out_dir.join(name))
}

/// The files `src/cli/scaffold.rs` and `src/cli/scaffold/script.rs` include, by absolute
/// path: the guest workspace's manifest and lock file, the toolchain file, the Python
/// examples' pinned requirements and the JavaScript example's lock file.
fn scaffold_files(
    guest_workspace: &Path,
    guest_lock: &Path,
    toolchain: &Path,
    python_requirements: &Path,
    js_lock: &Path,
) {
    for (var, path) in [
        ("TOOLHOST_SCAFFOLD_GUEST_WORKSPACE", guest_workspace),
        ("TOOLHOST_SCAFFOLD_GUEST_LOCK", guest_lock),
        ("TOOLHOST_SCAFFOLD_TOOLCHAIN", toolchain),
        ("TOOLHOST_SCAFFOLD_PY_REQUIREMENTS", python_requirements),
        ("TOOLHOST_SCAFFOLD_JS_LOCK", js_lock),
    ] {
        assert!(path.is_file(), "{} is missing", path.display());
        println!("cargo:rustc-env={var}={}", path.display());
    }
}

/// For every component `NAME.wasm` in `dir`, set `TOOLHOST_GUEST_<NAME>` to its path and
/// `TOOLHOST_GUEST_<NAME>_SHA256` to its digest.
fn announce_guests(dir: &Path) {
    let mut found = 0;
    for entry in std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read the guest components in {}: {e}", dir.display()))
    {
        let path = entry.expect("readable dir entry").path();
        if path.extension().is_some_and(|e| e == "wasm") {
            let stem = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default();
            let var = format!("TOOLHOST_GUEST_{}", stem.to_uppercase().replace('-', "_"));
            println!("cargo:rustc-env={var}={}", path.display());
            // The digest the compiled-component cache is keyed by, so that a host does not
            // hash an embedded component at every start.
            let bytes = std::fs::read(&path).expect("read a built guest component");
            let digest: String = sha2::Sha256::digest(&bytes)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            println!("cargo:rustc-env={var}_SHA256={digest}");
            found += 1;
        }
    }
    assert!(found > 0, "no guest component in {}", dir.display());
}

/// A file's name as it is used: `Cargo.toml.vendored` (how a packaged crate stores a nested
/// manifest) is `Cargo.toml`.
fn unvendored(name: &str) -> &str {
    if name == "Cargo.toml.vendored" {
        "Cargo.toml"
    } else {
        name
    }
}

/// Copy the tree `from` to `to`, naming manifests back (`unvendored`). A file whose content
/// is already there is not rewritten, so that the nested build stays fresh.
fn copy_unvendored(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("create {}: {e}", to.display()));
    for entry in std::fs::read_dir(from).unwrap_or_else(|e| panic!("read {}: {e}", from.display()))
    {
        let path = entry.expect("readable dir entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .expect("a UTF-8 file name");
        let target = to.join(unvendored(name));
        if path.is_dir() {
            copy_unvendored(&path, &target);
        } else {
            let bytes = std::fs::read(&path).expect("read a packaged file");
            if std::fs::read(&target).ok().as_deref() != Some(&bytes[..]) {
                std::fs::write(&target, bytes)
                    .unwrap_or_else(|e| panic!("write {}: {e}", target.display()));
            }
        }
    }
}

/// Write `$OUT_DIR/sdk_files.rs`: `SDK_FILES`, every file under the SDK crate's directory `sdk`
/// (its path relative to `sdk`, with `/` separators, and its bytes), sorted by path. The
/// `include_bytes!` of each file makes the host rebuild when one changes; the directory (under
/// `guest-tools/crates`, watched above) makes it rebuild when one is added or removed.
fn embed_sdk(sdk: &Path, out_dir: &Path) {
    fn walk(dir: &Path, base: &Path, files: &mut Vec<(String, PathBuf)>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
            .map(|entry| entry.expect("readable dir entry").path())
            .collect();
        entries.sort();
        for path in entries {
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            // Build output (of a build inside the SDK's directory) is not part of the crate.
            if name == "target" {
                continue;
            }
            if path.is_dir() {
                walk(&path, base, files);
            } else {
                let relative = path
                    .strip_prefix(base)
                    .expect("under the SDK directory")
                    .components()
                    .map(|c| unvendored(&c.as_os_str().to_string_lossy()).to_owned())
                    .collect::<Vec<_>>()
                    .join("/");
                files.push((relative, path));
            }
        }
    }
    println!("cargo:rerun-if-changed={}", sdk.display());
    let mut files = Vec::new();
    walk(sdk, sdk, &mut files);
    assert!(
        files.iter().any(|(name, _)| name == "Cargo.toml"),
        "no Cargo.toml in {}",
        sdk.display()
    );
    let mut code = String::from(
        "/// The policy SDK crate's files: path relative to the crate, contents.\n\
         pub(crate) const SDK_FILES: &[(&str, &[u8])] = &[\n",
    );
    for (relative, path) in &files {
        code.push_str(&format!(
            "    ({relative:?}, include_bytes!({:?})),\n",
            path.display().to_string()
        ));
    }
    code.push_str("];\n");
    std::fs::write(out_dir.join("sdk_files.rs"), code).expect("write sdk_files.rs");
}

/// rustup installs the targets named in rust-toolchain.toml only when it installs the toolchain
/// itself; on a machine that already had the toolchain, add the target here (when `install`:
/// in the repository, never for a packaged crate). Whether `target`'s standard library is
/// there afterwards.
fn ensure_target(target: &str, install: bool) -> bool {
    let installed = || {
        let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
        Command::new(rustc)
            .args(["--print", "sysroot"])
            .output()
            .ok()
            .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
            .is_some_and(|s| s.join("lib/rustlib").join(target).join("lib").exists())
    };
    if installed() || !install {
        return installed();
    }
    let mut cmd = Command::new("rustup");
    cmd.args(["target", "add", target]);
    if let Some(toolchain) = env::var_os("RUSTUP_TOOLCHAIN") {
        cmd.arg("--toolchain").arg(toolchain);
    }
    match cmd.status() {
        Ok(s) if s.success() => installed(),
        _ => false,
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

/// Build the keeper (the package `toolhost-keeper` of the workspace `manifest`: this
/// repository's, or the one a packaged crate carries) in release mode, statically linked, for
/// the machine the host is built for, and set `TOOLHOST_KEEPER` to the executable.
///
/// Every command pays the keeper's start, so it is built to start fast: statically (no dynamic
/// loader) and, on a `-linux-gnu` host, against musl, whose start-up is a few system calls.
/// glibc's, even static, probes the CPU's caches with `cpuid`, which traps to the hypervisor on
/// a virtual machine: measured here, 720 µs per exec against 160 µs with musl. Where the musl
/// target is not installed (and, when `install`, cannot be), the keeper is linked statically
/// against glibc instead.
fn build_keeper(manifest: &Path, out_dir: &Path, install: bool) {
    let host_target = env::var("TARGET").expect("cargo sets it");
    let musl = host_target
        .strip_suffix("-linux-gnu")
        .map(|arch| format!("{arch}-linux-musl"));
    let target = match musl {
        Some(musl) if ensure_target(&musl, install) => musl,
        Some(musl) => {
            println!(
                "cargo:warning=the keeper is linked against glibc: the {musl} target is not installed (`rustup target add {musl}`), and every command starts about 0.5 ms slower"
            );
            host_target.clone()
        }
        None => host_target.clone(),
    };
    let target_dir = shared_dir(out_dir, "keeper");
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
        .arg(manifest)
        .arg("--target-dir")
        .arg(&target_dir);
    isolate(&mut cmd);
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
