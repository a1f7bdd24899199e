//! Every client block of `docs/clients.md`, read as its client reads it: the JSON or TOML is
//! parsed, the server entry found where that client looks for it, and the command it names
//! started (the built binary standing for `toolhost` on the `PATH`) through an MCP handshake
//! and `tools/list`. The HTTP block's command is run with a free port and a token file of the
//! test's.

use serde_json::{Value, json};
use std::path::Path;
use toolhost_e2e::http_session::try_post;
use toolhost_e2e::mcp_client::StdioClient;
use toolhost_e2e::toolhost_bin;

/// One fenced block of the page: its language, its `client=` name and its text.
struct Block {
    language: String,
    client: String,
    text: String,
}

fn blocks() -> Vec<Block> {
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
/// looks for it).
fn command_of(block: &Block) -> (String, Vec<String>) {
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
                &words[..4],
                ["claude", "mcp", "add", "toolhost"],
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

/// Run `command args` as the client would, `toolhost` (or a path ending in it) being the
/// built binary, through an MCP handshake and `tools/list`.
async fn handshake(client: &str, command: &str, args: &[String]) {
    assert!(
        command == "toolhost" || command.ends_with("/toolhost"),
        "{client}: runs {command}"
    );
    let mut server = StdioClient::spawn_command(&toolhost_bin(), args);
    let init = server.initialize().await;
    assert!(init.get("result").is_some(), "{client}: {init}");
    let tools = server.request("tools/list", json!({})).await;
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|tool| tool["name"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert!(names.contains(&"execute"), "{client}: {tools}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_client_block_starts_a_server_that_answers() {
    let blocks = blocks();
    let clients: Vec<&str> = blocks.iter().map(|block| block.client.as_str()).collect();
    for wanted in [
        "claude-code",
        "claude-code-project",
        "codex",
        "cursor",
        "vscode",
        "claude-desktop",
        "zed",
        "gemini",
        "http",
    ] {
        assert!(clients.contains(&wanted), "no {wanted} block: {clients:?}");
    }
    for block in blocks.iter().filter(|block| block.client != "http") {
        let (command, args) = command_of(block);
        handshake(&block.client, &command, &args).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_block_serves_behind_its_token() {
    let block = blocks()
        .into_iter()
        .find(|block| block.client == "http")
        .expect("an http block");
    let serve = block
        .text
        .lines()
        .find(|line| line.starts_with("toolhost serve"))
        .expect("a serve line");
    let words: Vec<&str> = serve.split_whitespace().collect();
    assert_eq!(
        &words[..4],
        ["toolhost", "serve", "--http", "127.0.0.1:8080"]
    );
    assert_eq!(words[4], "--token-file");
    // The same command, on a free port and with a token file of the test's.
    let dir = tempfile::tempdir().expect("dir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "0123456789abcdef0123456789abcdef\n").expect("token");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let mut child = std::process::Command::new(toolhost_bin())
        .args([
            "serve",
            "--http",
            &format!("127.0.0.1:{port}"),
            "--token-file",
        ])
        .arg(&token_file)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("toolhost serve --http");
    let url = format!("http://127.0.0.1:{port}/mcp");
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "docs", "version": "0"}}
    });
    let http = reqwest::Client::new();
    let token = "0123456789abcdef0123456789abcdef";
    let limit = std::time::Duration::from_secs(5);
    // Until it listens (test-side polling of an observable condition).
    let mut answered = None;
    for _ in 0..500 {
        if let Ok((status, _, _)) = try_post(&http, &url, Some(token), None, &body, limit).await {
            answered = Some(status.as_u16());
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let refused = try_post(&http, &url, None, None, &body, limit)
        .await
        .map(|(status, _, _)| status.as_u16());
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(answered, Some(200), "with the token");
    assert_eq!(refused, Ok(401), "without it");
}
