//! Every client block of `docs/clients.md`, read as its client reads it: the JSON or TOML is
//! parsed, the server entry found where that client looks for it, and the command it names
//! started through an MCP handshake and `tools/list`, the built binary standing for the
//! `toolhost` it starts (installed, or through `npx -y toolhost@VERSION` or `uvx --from
//! toolhost-mcp==VERSION toolhost`, pinned to this version). `tests/packaging` runs the `npx`
//! and `uvx` forms themselves against the packages. The HTTP block's command is run with a
//! free port and a token file of the test's.

use serde_json::json;
use toolhost_e2e::client_blocks::{Launch, blocks, command_of, launch_of};
use toolhost_e2e::http_session::try_post;
use toolhost_e2e::mcp_client::StdioClient;
use toolhost_e2e::toolhost_bin;

/// Run `command args` as the client would, the built binary standing for the `toolhost` the
/// command starts, through an MCP handshake and `tools/list`.
async fn handshake(client: &str, command: &str, args: &[String]) {
    let args = match launch_of(client, command, args) {
        Launch::Installed(args) | Launch::Npx(args) | Launch::Uvx(args) => args,
    };
    let mut server = StdioClient::spawn_command(&toolhost_bin(), &args);
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
