//! The agent clients themselves read the blocks of `docs/clients.md`: Claude Code, Codex and
//! Gemini CLI, at the exact versions of `tests/agent-clients/package.json` (installed with
//! `npm ci --ignore-scripts` from the committed lockfile into `<target>/agent-clients/`, again
//! only when the lockfile changed). Each block is written where its client reads it, in a home
//! of the test's own, the built binary standing for the `toolhost` it starts (`npx` and `uvx`
//! are run as written by `tests/packaging`). Then the client's own `mcp list`:
//!
//! - Claude Code (`claude mcp add` as written, and the project's `.mcp.json`) and Gemini CLI
//!   start the server and report it connected;
//! - Codex lists it as enabled, with the command and arguments of the block (its `mcp list`
//!   does not start servers).
//!
//! Cursor, VS Code, Claude Desktop and Zed are desktop programs: their blocks are checked by
//! `clients.rs` only. Needs `node` and `npm` with access to the npm registry on the first run;
//! where `npm` is missing, or with `TOOLHOST_SKIP_NODE=1`, the test is skipped with a message.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use toolhost_e2e::client_blocks::{Block, Launch, blocks, command_of, launch_of};
use toolhost_e2e::toolhost_bin;

/// The installed clients, or `None` (said) to skip.
fn clients_dir() -> Option<PathBuf> {
    if std::env::var_os("TOOLHOST_SKIP_NODE").is_some_and(|v| v == "1") {
        eprintln!("SKIPPED: the agent clients (TOOLHOST_SKIP_NODE=1)");
        return None;
    }
    let npm = Command::new("npm").arg("--version").output();
    if !npm.is_ok_and(|output| output.status.success()) {
        eprintln!("\n*** SKIPPED: the agent clients: `npm` is not installed ***\n");
        return None;
    }
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("agent-clients");
    let dir = toolhost_e2e::target_dir().join("agent-clients");
    std::fs::create_dir_all(&dir).expect("<target>/agent-clients");
    // Another test process may install at the same time: one at a time.
    let lock = std::fs::File::create(dir.join(".lock")).expect("lock file");
    // SAFETY: flock on a descriptor we own, open until the end of this function.
    let locked = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(locked, 0, "flock: {}", std::io::Error::last_os_error());
    let wanted = std::fs::read_to_string(source.join("package-lock.json")).expect("lockfile");
    let stamp = dir.join(".installed-lock");
    if std::fs::read_to_string(&stamp).ok().as_deref() != Some(wanted.as_str()) {
        let _ = std::fs::remove_file(&stamp);
        for name in ["package.json", "package-lock.json"] {
            std::fs::copy(source.join(name), dir.join(name)).expect("copy the manifests");
        }
        let output = Command::new("npm")
            .args(["ci", "--ignore-scripts", "--no-audit", "--no-fund"])
            .current_dir(&dir)
            .output()
            .expect("npm ci");
        assert!(
            output.status.success(),
            "npm ci in {}: {}",
            dir.display(),
            String::from_utf8_lossy(&output.stderr)
        );
        std::fs::write(&stamp, &wanted).expect("stamp");
    }
    Some(dir)
}

/// A client's program, and the arguments that come before the client's own. Claude Code's
/// `claude` is a placeholder until its install script copies the native binary over it
/// (scripts are not run here): its wrapper script finds the same binary and runs it.
fn program(dir: &Path, name: &str) -> (PathBuf, Vec<String>) {
    if name == "claude" {
        let wrapper = dir.join("node_modules/@anthropic-ai/claude-code/cli-wrapper.cjs");
        return (PathBuf::from("node"), vec![wrapper.display().to_string()]);
    }
    (dir.join("node_modules/.bin").join(name), Vec::new())
}

/// `program args` in `cwd` with `home` as its home, and the output, checked for success.
fn run(
    program: &(PathBuf, Vec<String>),
    args: &[&str],
    cwd: &Path,
    home: &Path,
    env: &[(&str, &str)],
) -> String {
    let (program, before) = program;
    let output: Output = Command::new(program)
        .args(before)
        .args(args)
        .current_dir(cwd)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("CODEX_HOME", home.join(".codex"))
        .env("NO_COLOR", "1")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|error| panic!("{}: {error}", program.display()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "{} {args:?}: {text}",
        program.display()
    );
    text
}

/// The block of `client`.
fn block<'a>(blocks: &'a [Block], client: &str) -> &'a Block {
    blocks
        .iter()
        .find(|block| block.client == client)
        .unwrap_or_else(|| panic!("no {client} block"))
}

/// The built binary and toolhost's own arguments, for the command of `block`.
fn local_command(block: &Block) -> (String, Vec<String>) {
    let (command, args) = command_of(block);
    let args = match launch_of(&block.client, &command, &args) {
        Launch::Installed(args) | Launch::Npx(args) | Launch::Uvx(args) => args,
    };
    (toolhost_bin().display().to_string(), args)
}

/// `text` (a block's JSON or TOML) with its command and arguments replaced by the built
/// binary's, everything else as written.
fn with_local_command(block: &Block) -> String {
    let (local, args) = local_command(block);
    let (command, original) = command_of(block);
    let quoted = |words: &[String]| -> String {
        words
            .iter()
            .map(|word| format!("\"{word}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let text = block
        .text
        .replacen(&format!("\"{command}\""), &format!("\"{local}\""), 1);
    let compact = |words: &[String]| format!("[{}]", quoted(words));
    let replaced = text.replacen(&compact(&original), &compact(&args), 1);
    assert_ne!(
        replaced, text,
        "{}: the arguments were not found",
        block.client
    );
    replaced
}

#[test]
fn claude_code_codex_and_gemini_cli_read_their_blocks_and_reach_toolhost() {
    let Some(dir) = clients_dir() else {
        return;
    };
    let blocks = blocks();
    let home = tempfile::tempdir().expect("home");
    let project = tempfile::tempdir().expect("project");
    let (home, project) = (home.path(), project.path());

    // Claude Code: `claude mcp add` as written, then `claude mcp list` starts the server.
    let claude = program(&dir, "claude");
    let (local, args) = local_command(block(&blocks, "claude-code"));
    let add = block(&blocks, "claude-code").text.trim().to_owned();
    let words: Vec<&str> = add.split_whitespace().collect();
    let split = words.iter().position(|word| *word == "--").expect("`--`");
    let mut add_args: Vec<&str> = words[1..=split].to_vec();
    add_args.push(&local);
    add_args.extend(args.iter().map(String::as_str));
    run(&claude, &add_args, project, home, &[]);
    let listed = run(&claude, &["mcp", "list"], project, home, &[]);
    assert!(
        listed.contains("toolhost:") && listed.contains("Connected"),
        "claude mcp list: {listed}"
    );

    // Claude Code: the project's `.mcp.json` (approved, as a user does once).
    let shared = tempfile::tempdir().expect("project");
    let other_home = tempfile::tempdir().expect("home");
    std::fs::write(
        shared.path().join(".mcp.json"),
        with_local_command(block(&blocks, "claude-code-project")),
    )
    .expect(".mcp.json");
    std::fs::create_dir_all(other_home.path().join(".claude")).expect(".claude");
    std::fs::write(
        other_home.path().join(".claude/settings.json"),
        r#"{"enableAllProjectMcpServers": true}"#,
    )
    .expect("settings");
    let listed = run(
        &claude,
        &["mcp", "list"],
        shared.path(),
        other_home.path(),
        &[],
    );
    assert!(
        listed.contains("toolhost:") && listed.contains("Connected"),
        "claude mcp list (.mcp.json): {listed}"
    );

    // Codex: `~/.codex/config.toml`; `codex mcp list` reads it (it starts no server).
    let codex_block = block(&blocks, "codex");
    std::fs::create_dir_all(home.join(".codex")).expect(".codex");
    std::fs::write(
        home.join(".codex/config.toml"),
        with_local_command(codex_block),
    )
    .expect("config.toml");
    let listed = run(
        &program(&dir, "codex"),
        &["mcp", "list"],
        project,
        home,
        &[],
    );
    let line = listed
        .lines()
        .find(|line| line.starts_with("toolhost "))
        .unwrap_or_else(|| panic!("codex mcp list: {listed}"));
    let (local, args) = local_command(codex_block);
    assert!(
        line.contains(&local) && line.contains(&args.join(" ")) && line.contains("enabled"),
        "codex mcp list: {listed}"
    );

    // Gemini CLI: `~/.gemini/settings.json`, in a trusted folder; `gemini mcp list` connects.
    std::fs::create_dir_all(home.join(".gemini")).expect(".gemini");
    std::fs::write(
        home.join(".gemini/settings.json"),
        with_local_command(block(&blocks, "gemini")),
    )
    .expect("settings.json");
    let listed = run(
        &program(&dir, "gemini"),
        &["mcp", "list"],
        project,
        home,
        &[("GEMINI_CLI_TRUST_WORKSPACE", "true")],
    );
    assert!(
        listed.contains("toolhost:") && listed.contains("Connected"),
        "gemini mcp list: {listed}"
    );
}
