//! A tiny scripted "agent loop" embedding toolhost as a library: list the tools, run a
//! foreground command, start a background job, follow its output incrementally, stop it, and
//! shut down without leaving a process behind.
//!
//! Run: `cargo run --example agent_loop`

use anyhow::Result;
use serde_json::{Value, json};
use toolhost::ToolHost;

/// One step of the script: a tool and its arguments (`{id}` is replaced by the background id).
const SCRIPT: &[(&str, &str)] = &[
    (
        "execute",
        r#"{"command":"uname -s && echo $TOOLHOST_AGENT"}"#,
    ),
    (
        "execute",
        r#"{"command":"for i in 1 2 3 4 5; do echo tick $i; sleep 0.2; done","run_in_background":true}"#,
    ),
    (
        "process_output",
        r#"{"process_id":"{id}","wait":"500ms","only_new":true}"#,
    ),
    ("process_list", "{}"),
    (
        "process_output",
        r#"{"process_id":"{id}","wait":"5s","only_new":true}"#,
    ),
    ("execute", r#"{"command":"sleep 30","timeout":"300ms"}"#),
    (
        "process_signal",
        r#"{"process_id":"{id}","signal":"terminate"}"#,
    ),
];

#[tokio::main]
async fn main() -> Result<()> {
    let host = ToolHost::builder().build().await?;
    let scope = "example-session";
    println!(
        "tools: {:?}",
        host.tools().iter().map(|t| &t.name).collect::<Vec<_>>()
    );

    let mut background_id = String::new();
    for (tool, args) in SCRIPT {
        let args = args.replace("{id}", &background_id);
        println!("\n> {tool} {args}");
        match host.call(scope, tool, &args).await {
            Ok(text) => {
                let result: Value = serde_json::from_str(&text)?;
                if let Some(id) = result["background_process_id"].as_str() {
                    // The last started background process is the one the script follows.
                    background_id = id.to_string();
                }
                println!("{}", serde_json::to_string_pretty(&result)?);
            }
            Err(e) => println!("tool error: {e}"),
        }
    }
    println!("\n{}", json!({"shutting_down": true}));
    host.shutdown().await;
    Ok(())
}
