//! The client blocks of `docs/clients.md`, read as each client reads them: the JSON or TOML
//! parsed, the server entry found where that client looks for it, and the command it names
//! sorted by how it starts toolhost (installed on the `PATH`, through `npx`, through `uvx`).
//! `tests/cli_and_mcp/clients.rs` runs each with the built binary; `tests/packaging` runs the
//! `npx` and `uvx` forms against the packages of `packaging/build.sh`.

use serde_json::Value;
use std::path::Path;

/// One fenced block of the page: its language, its `client=` name and its text.
pub struct Block {
    pub language: String,
    pub client: String,
    pub text: String,
}

/// Every fenced block of `docs/clients.md`.
pub fn blocks() -> Vec<Block> {
    let page =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/clients.md"))
            .expect("docs/clients.md");
    let mut blocks = Vec::new();
    let mut open: Option<Block> = None;
    for line in page.lines() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(info)) => {
                let mut words = info.split_whitespace();
                let language = words.next().unwrap_or_default().to_owned();
                let client = words
                    .find_map(|word| word.strip_prefix("client="))
                    .unwrap_or_default()
                    .to_owned();
                open = Some(Block {
                    language,
                    client,
                    text: String::new(),
                });
            }
            (Some(_), Some("")) => blocks.extend(open.take()),
            (Some(block), _) => {
                block.text.push_str(line);
                block.text.push('\n');
            }
            (None, None) => {}
        }
    }
    blocks
}

/// The command and arguments a client starts for `block` (the server entry where that client
/// looks for it). An argument under `/home/you/` is the reader's own directory (a project
/// for `--workdir`): the system's temporary directory stands for it.
pub fn command_of(block: &Block) -> (String, Vec<String>) {
    let (command, args) = written_command_of(block);
    let own = std::env::temp_dir().display().to_string();
    let args = args
        .into_iter()
        .map(|arg| match arg.starts_with("/home/you/") {
            true => own.clone(),
            false => arg,
        })
        .collect();
    (command, args)
}

/// [`command_of`] as the block writes it.
fn written_command_of(block: &Block) -> (String, Vec<String>) {
    let strings = |value: &Value| -> Vec<String> {
        value
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .map(|item| item.as_str().expect("a string argument").to_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let entry = |parsed: &Value, key: &str| -> (String, Vec<String>) {
        let server = &parsed[key]["toolhost"];
        let command = server["command"]
            .as_str()
            .unwrap_or_else(|| panic!("{}: no {key}.toolhost.command", block.client));
        (command.to_owned(), strings(&server["args"]))
    };
    match (block.language.as_str(), block.client.as_str()) {
        ("sh", "claude-code") => {
            let words: Vec<&str> = block.text.split_whitespace().collect();
            assert_eq!(
                &words[..6],
                ["claude", "mcp", "add", "--scope", "user", "toolhost"],
                "{}",
                block.text
            );
            let split = words.iter().position(|word| *word == "--").expect("`--`");
            let rest: Vec<String> = words[split + 1..].iter().map(|w| (*w).to_owned()).collect();
            (rest[0].clone(), rest[1..].to_vec())
        }
        ("toml", "codex") => {
            let parsed: toml::Value = toml::from_str(&block.text).expect("TOML as Codex reads it");
            let server = &parsed["mcp_servers"]["toolhost"];
            let command = server["command"].as_str().expect("command").to_owned();
            let args = server["args"]
                .as_array()
                .expect("args")
                .iter()
                .map(|arg| arg.as_str().expect("a string").to_owned())
                .collect();
            assert!(
                server["tool_timeout_sec"]
                    .as_integer()
                    .is_some_and(|t| t >= 60)
            );
            (command, args)
        }
        ("json", client) => {
            let parsed: Value = serde_json::from_str(&block.text)
                .unwrap_or_else(|error| panic!("{client}: not JSON ({error}): {}", block.text));
            match client {
                "vscode" => {
                    assert_eq!(parsed["servers"]["toolhost"]["type"], "stdio");
                    entry(&parsed, "servers")
                }
                "zed" => entry(&parsed, "context_servers"),
                _ => entry(&parsed, "mcpServers"),
            }
        }
        (language, client) => panic!("a block the test does not know: {language} {client}"),
    }
}

/// How a block's command starts toolhost; each holds toolhost's own arguments.
#[derive(Debug, PartialEq)]
pub enum Launch {
    /// `toolhost ARGS` (or a path ending in `/toolhost`): the binary installed on the `PATH`.
    Installed(Vec<String>),
    /// `npx -y toolhost@VERSION ARGS`: the npm package.
    Npx(Vec<String>),
    /// `uvx --from toolhost-mcp==VERSION toolhost ARGS`: the PyPI package.
    Uvx(Vec<String>),
}

/// How `command args` (of `client`'s block) starts toolhost. The `npx` and `uvx` forms must
/// pin this version.
pub fn launch_of(client: &str, command: &str, args: &[String]) -> Launch {
    let version = env!("CARGO_PKG_VERSION");
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    match command {
        "toolhost" => Launch::Installed(args.to_vec()),
        path if path.ends_with("/toolhost") => Launch::Installed(args.to_vec()),
        "npx" => {
            let package = format!("toolhost@{version}");
            assert_eq!(
                words.get(..2),
                Some(&["-y", package.as_str()][..]),
                "{client}: npx {args:?}"
            );
            Launch::Npx(args[2..].to_vec())
        }
        "uvx" => {
            let package = format!("toolhost-mcp=={version}");
            assert_eq!(
                words.get(..3),
                Some(&["--from", package.as_str(), "toolhost"][..]),
                "{client}: uvx {args:?}"
            );
            Launch::Uvx(args[3..].to_vec())
        }
        other => panic!("{client}: runs {other}, which is none of toolhost, npx and uvx"),
    }
}
