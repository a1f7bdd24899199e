//! The packages `packaging/build.sh` makes, each installed the way its users install it, into
//! an empty prefix, virtual environment or directory, with no network but the package
//! registries: every installed command completes an MCP handshake over stdio, lists
//! `execute`, and runs `echo ok` through it.
//!
//! - the crate: `cargo install --path OUT/crates/toolhost-VERSION` offline
//!   (`packaging/install-crate.sh`); the binary is static (no program interpreter), and its
//!   `new-policy` writes every file of the repository's policy SDK;
//! - the wheel: `pip install` into a fresh venv (both `toolhost` and `toolhost-mcp`), `uvx
//!   --from WHEEL toolhost serve`, `uvx toolhost-mcp serve` and `pipx run --spec WHEEL toolhost
//!   serve` (uv and pipx are installed from PyPI into `<target>/packaging-tools`);
//! - npm: both tarballs installed with `npm install --prefix EMPTY --offline`, then
//!   `node_modules/.bin/toolhost serve` and `npx -y toolhost@VERSION serve`; the main tarball
//!   alone gives a launcher that says which package is missing;
//! - the MCP bundle: validated and unpacked by the official `mcpb` CLI (from npm), then the
//!   command of its manifest run;
//! - `server.json`: each package it names is one of these, at this version, and the MCP name
//!   is the one the README, the wheel and the npm package carry;
//! - every client block of `docs/clients.md`: its `npx -y toolhost@VERSION` and `uvx --from
//!   toolhost-mcp==VERSION toolhost` commands run as written, with npm and uv pointed at the
//!   packages; a `toolhost` command runs the binary the crate installed.
//!
//! The tests need the packages, so they are ignored by `cargo test`; `.ci/run` runs them after
//! the packaging script:
//!
//! ```sh
//! packaging/build.sh "$OUT"
//! TOOLHOST_DIST="$OUT" cargo test -p toolhost-e2e --test packaging -- --ignored
//! ```

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use toolhost_e2e::client_blocks::{Launch, blocks, command_of, launch_of};
use toolhost_e2e::mcp_client::StdioClient;

/// uv and pipx, installed from PyPI to run the wheel as their users do.
const UV_VERSION: &str = "0.13.9";
const PIPX_VERSION: &str = "1.18.4";
/// The official MCP bundle CLI (npm `@anthropic-ai/mcpb`).
const MCPB_VERSION: &str = "2.1.2";

/// The packaging script's output directory.
fn dist() -> PathBuf {
    let dir = std::env::var_os("TOOLHOST_DIST")
        .map(PathBuf::from)
        .expect("TOOLHOST_DIST names packaging/build.sh's output directory");
    assert!(
        dir.join("server.json").is_file(),
        "{} is not packaging/build.sh's output",
        dir.display()
    );
    dir
}

/// The version packaged: the workspace's, which this crate shares.
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// The one file in `dir` whose name starts with `prefix` and ends with `suffix`.
fn find(dir: &Path, prefix: &str, suffix: &str) -> PathBuf {
    let found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|entry| entry.expect("dir entry").path())
        .filter(|path| {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.starts_with(prefix) && name.ends_with(suffix)
        })
        .collect();
    assert_eq!(
        found.len(),
        1,
        "{prefix}*{suffix} in {}: {found:?}",
        dir.display()
    );
    found.into_iter().next().expect("one")
}

/// Run `command` to success; its stdout.
fn run(command: &mut Command) -> String {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `program args` as a client starts it (with `env` for the environment and the directory),
/// through `initialize`, `tools/list` and an `execute` of `echo ok`.
async fn serve_and_execute(label: &str, program: &Path, args: &[String]) {
    let mut server = StdioClient::spawn_command(program, args);
    let init = server.initialize().await;
    assert_eq!(
        init["result"]["serverInfo"]["version"],
        version(),
        "{label}: {init}"
    );
    let tools = server.request("tools/list", json!({})).await;
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .map(|tools| tools.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default();
    assert!(names.contains(&"execute"), "{label}: {tools}");
    let result = server
        .call_tool("execute", json!({"command": "echo ok"}))
        .await;
    let output = &result["structuredContent"];
    assert_eq!(output["exit_code"], 0, "{label}: {result}");
    assert_eq!(
        output["output"].as_str().map(str::trim),
        Some("ok"),
        "{label}: {result}"
    );
}

/// `env -C DIR VAR=VALUE... PROGRAM ARGS...`, for [`serve_and_execute`].
fn with_env(dir: &Path, vars: &[(&str, &str)], command: &[&str]) -> (PathBuf, Vec<String>) {
    let mut args = vec![format!("--chdir={}", dir.display())];
    args.extend(vars.iter().map(|(key, value)| format!("{key}={value}")));
    args.extend(command.iter().map(|word| (*word).to_owned()));
    (PathBuf::from("env"), args)
}

fn serve() -> Vec<String> {
    vec!["serve".to_owned()]
}

/// Whether the ELF executable at `path` names a program interpreter (is dynamically linked).
fn has_interpreter(path: &Path) -> bool {
    let bytes = std::fs::read(path).expect("read the binary");
    assert_eq!(&bytes[..5], b"\x7fELF\x02", "a 64-bit ELF file");
    let u16_at = |at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]) as usize;
    let phoff = u64::from_le_bytes(bytes[0x20..0x28].try_into().expect("8 bytes")) as usize;
    let (size, count) = (u16_at(0x36), u16_at(0x38));
    (0..count).any(|i| {
        let at = phoff + i * size;
        u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) == 3 // PT_INTERP
    })
}

/// Whether the ELF file at `path` has a symbol table (a section of type `SHT_SYMTAB`): a
/// stripped binary has none.
fn has_symbols(path: &Path) -> bool {
    let bytes = std::fs::read(path).expect("read the binary");
    assert_eq!(&bytes[..5], b"\x7fELF\x02", "a 64-bit ELF file");
    let u16_at = |at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]) as usize;
    let shoff = u64::from_le_bytes(bytes[0x28..0x30].try_into().expect("8 bytes")) as usize;
    let (size, count) = (u16_at(0x3a), u16_at(0x3c));
    (0..count).any(|i| {
        let at = shoff + i * size + 4;
        u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) == 2 // SHT_SYMTAB
    })
}

/// The npm tarballs: the binary's package, then the launcher's.
fn npm_tarballs(dist: &Path) -> (PathBuf, PathBuf) {
    let npm = dist.join("npm");
    (
        npm.join(format!("toolhost-linux-x64-{}.tgz", version())),
        npm.join(format!("toolhost-{}.tgz", version())),
    )
}

/// `npm install --prefix DIR TARBALLS...`, offline, with a cache of its own in `DIR`.
fn npm_install(dir: &Path, tarballs: &[&Path]) {
    run(Command::new("npm")
        .args(["install", "--offline", "--no-audit", "--no-fund", "--cache"])
        .arg(dir.join(".npm-cache"))
        .arg("--prefix")
        .arg(dir)
        .args(tarballs));
}

/// `<target>/packaging-tools`: a venv with uv and pipx, and the `mcpb` CLI, installed on the
/// first run (a marker records the versions), once for all the tests of this process.
fn tools() -> PathBuf {
    static TOOLS: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    TOOLS.get_or_init(install_tools).clone()
}

fn install_tools() -> PathBuf {
    let dir = toolhost_e2e::target_dir().join("packaging-tools");
    let marker = dir.join("installed");
    let wanted = format!("uv {UV_VERSION}, pipx {PIPX_VERSION}, mcpb {MCPB_VERSION}\n");
    if std::fs::read_to_string(&marker).ok().as_deref() == Some(wanted.as_str()) {
        return dir;
    }
    let _ = std::fs::remove_dir_all(&dir);
    run(Command::new("python3")
        .args(["-m", "venv"])
        .arg(dir.join("venv")));
    run(Command::new(dir.join("venv/bin/pip")).args([
        "install",
        "--quiet",
        &format!("uv=={UV_VERSION}"),
        &format!("pipx=={PIPX_VERSION}"),
    ]));
    run(Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--silent", "--prefix"])
        .arg(dir.join("mcpb"))
        .arg(format!("@anthropic-ai/mcpb@{MCPB_VERSION}")));
    std::fs::write(&marker, wanted).expect("write the marker");
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs packaging/build.sh's output in TOOLHOST_DIST (.ci/run runs it)"]
async fn the_crate_installs_offline_and_serves() {
    let dist = dist();
    let crates = dist.join("crates");
    for name in ["toolhost", "toolhost-keeper-protocol"] {
        let crate_file = crates.join(format!("{name}-{}.crate", version()));
        assert!(crate_file.is_file(), "{}", crate_file.display());
    }
    // What the packaged crate builds from is inside it, and nothing in it names the repository.
    let package = crates.join(format!("toolhost-{}", version()));
    for path in [
        "packaged/guests/default_policy.wasm",
        "packaged/guests/guarded_policy.wasm",
        "packaged/sdk/Cargo.toml.vendored",
        "packaged/keeper/Cargo.toml.vendored",
        "packaged/keeper/Cargo.lock",
        "packaged/keeper/keeper/src/main.rs",
        "README.md",
    ] {
        assert!(package.join(path).is_file(), "the crate lacks {path}");
    }
    let manifest = std::fs::read_to_string(package.join("Cargo.toml")).expect("Cargo.toml");
    assert!(!manifest.contains("path = \"../"), "{manifest}");
    // A registry page resolves the README's relative links against the repository.
    for key in ["repository", "homepage", "documentation"] {
        assert!(
            manifest.contains(&format!("\n{key} = ")),
            "no {key}: {manifest}"
        );
    }

    let root = tempfile::tempdir().expect("root");
    let script = toolhost_e2e::repo_root().join("packaging/install-crate.sh");
    run(Command::new(script).arg(&crates).arg(root.path()));
    let binary = root.path().join("bin/toolhost");
    assert!(
        !has_interpreter(&binary),
        "{} is dynamically linked",
        binary.display()
    );
    assert!(
        !has_symbols(&binary),
        "{} is not stripped",
        binary.display()
    );
    serve_and_execute("cargo install", &binary, &serve()).await;

    // `toolhost new-policy` writes the SDK the crate carries: every file of the repository's
    // (its manifest made standalone).
    let work = tempfile::tempdir().expect("dir");
    run(Command::new(&binary)
        .args(["new-policy", "mine", "--dir"])
        .arg(work.path()));
    let written = work.path().join("mine/toolhost-policy");
    let sdk = toolhost_e2e::repo_root().join("guest-tools/crates/toolhost-policy");
    assert!(written.join("Cargo.toml").is_file());
    for file in files_under(&sdk) {
        let relative = file.strip_prefix(&sdk).expect("under the SDK");
        if relative != Path::new("Cargo.toml") {
            assert_eq!(
                std::fs::read(written.join(relative)).ok(),
                std::fs::read(&file).ok(),
                "the SDK's {}",
                relative.display()
            );
        }
    }
}

/// Every file under `dir`, but build output (`target/`).
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            if path.file_name().is_some_and(|name| name != "target") {
                files.extend(files_under(&path));
            }
        } else {
            files.push(path);
        }
    }
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs packaging/build.sh's output in TOOLHOST_DIST (.ci/run runs it)"]
async fn the_wheel_installs_with_pip_uv_and_pipx() {
    let dist = dist();
    let wheels = dist.join("python");
    let wheel = find(&wheels, &format!("toolhost_mcp-{}-", version()), ".whl");
    let wheel_arg = wheel.to_str().expect("UTF-8 path");
    let home = tempfile::tempdir().expect("dir");

    // pip, into a fresh venv, from the file alone.
    let venv = home.path().join("venv");
    run(Command::new("python3").args(["-m", "venv"]).arg(&venv));
    run(Command::new(venv.join("bin/pip")).args(["install", "--quiet", "--no-index", wheel_arg]));
    serve_and_execute("pip: toolhost", &venv.join("bin/toolhost"), &serve()).await;
    serve_and_execute(
        "pip: toolhost-mcp",
        &venv.join("bin/toolhost-mcp"),
        &serve(),
    )
    .await;

    let tools = tools();
    let bin = tools.join("venv/bin");
    let uv_cache = home.path().join("uv-cache");
    let uv_tools = home.path().join("uv-tools");
    let uv_env = [
        ("UV_CACHE_DIR", uv_cache.to_str().expect("UTF-8")),
        ("UV_TOOL_DIR", uv_tools.to_str().expect("UTF-8")),
        ("UV_PYTHON_DOWNLOADS", "never"),
        ("UV_OFFLINE", "1"),
    ];
    let uvx = bin.join("uvx");
    let uvx = uvx.to_str().expect("UTF-8");
    let (program, args) = with_env(
        home.path(),
        &uv_env,
        &[uvx, "--from", wheel_arg, "toolhost", "serve"],
    );
    serve_and_execute("uvx --from WHEEL toolhost", &program, &args).await;
    // The package's name as the command, resolved from the wheel's directory.
    let mut named = uv_env.to_vec();
    named.push(("UV_FIND_LINKS", wheels.to_str().expect("UTF-8")));
    named.push(("UV_NO_INDEX", "1"));
    let spec = format!("toolhost-mcp=={}", version());
    let (program, args) = with_env(home.path(), &named, &[uvx, &spec, "serve"]);
    serve_and_execute("uvx toolhost-mcp", &program, &args).await;

    let pipx = bin.join("pipx");
    let pipx_home = home.path().join("pipx");
    let (program, args) = with_env(
        home.path(),
        &[
            ("PIPX_HOME", pipx_home.to_str().expect("UTF-8")),
            ("PIP_NO_INDEX", "1"),
        ],
        &[
            pipx.to_str().expect("UTF-8"),
            "run",
            "--spec",
            wheel_arg,
            "toolhost",
            "serve",
        ],
    );
    serve_and_execute("pipx run --spec WHEEL toolhost", &program, &args).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs packaging/build.sh's output in TOOLHOST_DIST (.ci/run runs it)"]
async fn the_npm_packages_install_and_serve_through_npx() {
    let dist = dist();
    let (platform, main) = npm_tarballs(&dist);
    let prefix = tempfile::tempdir().expect("prefix");
    npm_install(prefix.path(), &[&platform, &main]);
    let launcher = prefix.path().join("node_modules/.bin/toolhost");
    serve_and_execute("npm: node_modules/.bin/toolhost", &launcher, &serve()).await;
    // npx finds the version installed in the directory it runs in, as it would the one it
    // fetches once the packages are published.
    let spec = format!("toolhost@{}", version());
    let (program, args) = with_env(
        prefix.path(),
        &[("npm_config_offline", "true")],
        &["npx", "-y", &spec, "serve"],
    );
    serve_and_execute("npx -y toolhost@VERSION serve", &program, &args).await;

    // Without the platform package (npm skips an optional dependency it cannot fetch), the
    // launcher names it.
    let alone = tempfile::tempdir().expect("prefix");
    npm_install(alone.path(), &[&main]);
    let output = Command::new(alone.path().join("node_modules/.bin/toolhost"))
        .arg("--version")
        .output()
        .expect("run the launcher");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("@toolhost/linux-x64"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs packaging/build.sh's output in TOOLHOST_DIST (.ci/run runs it)"]
async fn the_mcp_bundle_is_valid_and_its_command_serves() {
    let dist = dist();
    let bundle = dist.join(format!("toolhost-{}-linux-x64.mcpb", version()));
    let mcpb = tools().join("mcpb/node_modules/.bin/mcpb");
    let dir = tempfile::tempdir().expect("dir");
    let unpacked = dir.path().join("toolhost");
    run(Command::new(&mcpb)
        .arg("unpack")
        .arg(&bundle)
        .arg(&unpacked));
    let validation = run(Command::new(&mcpb)
        .arg("validate")
        .arg(unpacked.join("manifest.json")));
    assert!(validation.contains("validation passes"), "{validation}");

    let manifest: Value = serde_json::from_slice(
        &std::fs::read(unpacked.join("manifest.json")).expect("manifest.json"),
    )
    .expect("JSON");
    assert_eq!(manifest["version"], version());
    assert_eq!(manifest["server"]["type"], "binary");
    let config = &manifest["server"]["mcp_config"];
    // What Claude Desktop runs: the command with ${__dirname} the bundle's directory and the
    // workspace the user chose in ${user_config.workspace}.
    assert_eq!(
        manifest["user_config"]["workspace"]["type"], "directory",
        "{manifest}"
    );
    let workspace = tempfile::tempdir().expect("workspace");
    let workspace = workspace.path().to_str().expect("UTF-8").to_owned();
    let dirname = unpacked.to_str().expect("UTF-8");
    let command = config["command"]
        .as_str()
        .expect("command")
        .replace("${__dirname}", dirname);
    let args: Vec<String> = config["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|arg| {
            arg.as_str()
                .expect("a string")
                .replace("${__dirname}", dirname)
                .replace("${user_config.workspace}", &workspace)
        })
        .collect();
    serve_and_execute("mcpb", Path::new(&command), &args).await;
}

#[test]
#[ignore = "needs packaging/build.sh's output in TOOLHOST_DIST (.ci/run runs it)"]
fn server_json_names_these_packages() {
    let dist = dist();
    let server: Value =
        serde_json::from_slice(&std::fs::read(dist.join("server.json")).expect("server.json"))
            .expect("JSON");
    let name = server["name"].as_str().expect("name");
    assert_eq!(name.matches('/').count(), 1, "{name}");
    assert!(name.starts_with("io.github."), "{name}");
    assert_eq!(server["version"], version());
    let description = server["description"].as_str().expect("description");
    assert!(
        (1..=100).contains(&description.len()),
        "{description}: at most 100 characters"
    );

    // The README (the crate's and the repository's) shows the name.
    let readme =
        std::fs::read_to_string(toolhost_e2e::repo_root().join("README.md")).expect("README.md");
    assert!(readme.contains(&format!("mcp-name: {name}")), "README.md");
    // The wheel's description and the npm package carry it.
    let wheel = find(&dist.join("python"), "toolhost_mcp-", ".whl");
    let metadata = run(Command::new("python3").args([
        "-c",
        "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); \
         print(z.read([n for n in z.namelist() if n.endswith('/METADATA')][0]).decode())",
        wheel.to_str().expect("UTF-8"),
    ]));
    assert!(
        metadata.contains(&format!("mcp-name: {name}")),
        "{metadata}"
    );
    let package = run(Command::new("tar")
        .arg("-xzOf")
        .arg(dist.join(format!("npm/toolhost-{}.tgz", version())))
        .arg("package/package.json"));
    let package: Value = serde_json::from_str(&package).expect("package.json");
    assert_eq!(package["mcpName"], name);

    let packages = server["packages"].as_array().expect("packages");
    let of = |kind: &str| -> &Value {
        packages
            .iter()
            .find(|p| p["registryType"] == kind)
            .unwrap_or_else(|| panic!("no {kind} package"))
    };
    for (kind, identifier) in [
        ("cargo", "toolhost"),
        ("npm", "toolhost"),
        ("pypi", "toolhost-mcp"),
    ] {
        let package = of(kind);
        assert_eq!(package["identifier"], identifier, "{kind}");
        assert_eq!(package["version"], version(), "{kind}");
        assert_eq!(package["transport"]["type"], "stdio", "{kind}");
        assert_eq!(package["packageArguments"][0]["value"], "serve", "{kind}");
    }
    let bundle = of("mcpb");
    let file = format!("toolhost-{}-linux-x64.mcpb", version());
    let identifier = bundle["identifier"].as_str().expect("identifier");
    assert!(identifier.ends_with(&format!("/{file}")), "{identifier}");
    let digest = run(Command::new("sha256sum").arg(dist.join(&file)));
    assert_eq!(
        bundle["fileSha256"].as_str(),
        digest.split_whitespace().next()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs packaging/build.sh's output in TOOLHOST_DIST (.ci/run runs it)"]
async fn every_client_block_runs_through_its_package() {
    let dist = dist();
    // npx finds the packages installed in the directory it runs in.
    let npm_dir = tempfile::tempdir().expect("dir");
    let (platform, main) = npm_tarballs(&dist);
    npm_install(npm_dir.path(), &[&platform, &main]);
    // uvx (on the PATH) finds the wheel in the packages' directory, and nothing else.
    let home = tempfile::tempdir().expect("dir");
    let path = format!(
        "{}:{}",
        tools().join("venv/bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let uv_cache = home.path().join("uv-cache");
    let wheels = dist.join("python");
    let uv_env = [
        ("PATH", path.as_str()),
        ("UV_CACHE_DIR", uv_cache.to_str().expect("UTF-8")),
        ("UV_PYTHON_DOWNLOADS", "never"),
        ("UV_OFFLINE", "1"),
        ("UV_NO_INDEX", "1"),
        ("UV_FIND_LINKS", wheels.to_str().expect("UTF-8")),
    ];

    let mut forms = Vec::new();
    for block in blocks().iter().filter(|block| block.client != "http") {
        let (command, args) = command_of(block);
        let mut line: Vec<&str> = vec![&command];
        line.extend(args.iter().map(String::as_str));
        let label = format!("{}: {}", block.client, line.join(" "));
        let launch = launch_of(&block.client, &command, &args);
        match &launch {
            // The binary the crate installed, standing for the one on the PATH.
            Launch::Installed(args) => {
                let binary = dist.join("cargo-root/bin/toolhost");
                serve_and_execute(&label, &binary, args).await;
            }
            Launch::Npx(_) => {
                let (program, args) =
                    with_env(npm_dir.path(), &[("npm_config_offline", "true")], &line);
                serve_and_execute(&label, &program, &args).await;
            }
            Launch::Uvx(_) => {
                let (program, args) = with_env(home.path(), &uv_env, &line);
                serve_and_execute(&label, &program, &args).await;
            }
        }
        forms.push(launch);
    }
    assert!(forms.iter().any(|form| matches!(form, Launch::Npx(_))));
    assert!(forms.iter().any(|form| matches!(form, Launch::Uvx(_))));
}

/// `toolhost [flags] call execute {command}` from `dir` with `env`: the result, and what the
/// host logged.
fn execute_with(binary: &Path, dir: &Path, env: &[(&str, &str)], command: &str) -> (Value, String) {
    let args = json!({ "command": command, "timeout": "30s" }).to_string();
    let output = Command::new(binary)
        .current_dir(dir)
        .envs(env.iter().copied())
        .env("TOOLHOST_LOG", "warn")
        .args(["--network", "allow=allowed.test", "call", "execute", &args])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()));
    let result = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "{} printed no JSON ({e}): {}",
            binary.display(),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (result, String::from_utf8_lossy(&output.stderr).into_owned())
}

#[test]
#[ignore = "needs packaging/build.sh's output in TOOLHOST_DIST (.ci/run runs it)"]
fn the_release_binary_ignores_the_test_only_switches() {
    if toolhost::process::namespaces_available().is_err() {
        eprintln!("no namespaces here: an allow-list is refused, nothing to compare");
        return;
    }
    let released = dist().join("cargo-root/bin/toolhost");
    assert!(released.is_file(), "{}", released.display());
    // A loopback server that only the test-only resolver map could name `allowed.test`, and
    // that only the test-only public list could let past the proxy's address check.
    let served = tempfile::tempdir().expect("dir");
    std::fs::write(served.path().join("index.html"), "reached").expect("page");
    let mut server = Command::new("python3")
        .args([
            "-m",
            "http.server",
            "--bind",
            "127.0.0.1",
            "0",
            "--directory",
        ])
        .arg(served.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("python3 -m http.server");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(server.stdout.as_mut().expect("stdout")),
        &mut line,
    )
    .expect("the server announces its port");
    // "Serving HTTP on 127.0.0.1 port PORT (http://127.0.0.1:PORT/) ..."
    let port: u16 = line
        .split_whitespace()
        .skip_while(|word| *word != "port")
        .nth(1)
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("no port in {line:?}"));
    let switches = [
        ("TOOLHOST_TEST_RESOLVE", "allowed.test=127.0.0.1"),
        ("TOOLHOST_TEST_PUBLIC", "127.0.0.1"),
    ];
    // `-f`: the proxy's refusal (an HTTP error) fails the command.
    let command = format!("curl -fsS --max-time 10 http://allowed.test:{port}/");
    let workspace = tempfile::tempdir().expect("workspace");
    // The debug build the tests use honours them: the request is made.
    let (debug, _) = execute_with(
        &toolhost_e2e::toolhost_bin(),
        workspace.path(),
        &switches,
        &command,
    );
    // The release build every package ships ignores them, and says so.
    let (release, log) = execute_with(&released, workspace.path(), &switches, &command);
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(debug["output"].as_str(), Some("reached"), "{debug}");
    assert_ne!(release["exit_code"], 0, "{release}");
    assert!(
        !release["output"].as_str().unwrap_or("").contains("reached"),
        "{release}"
    );
    assert!(log.contains("are ignored"), "{log}");
}
