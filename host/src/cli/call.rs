//! `toolhost call`: one tool call, its result on stdout (its content items as `content.rs`
//! shows them), its progress and log lines on stderr; Ctrl-C or SIGTERM stops the call and
//! every process it started before the exit.

use anyhow::{Context, Result};
use std::process::ExitCode;
use std::sync::Arc;
use toolhost::{CallOptions, CallOutput, Progress, ToolLog};

use super::args::Cli;
use super::content::{Saved, printable, render};
use super::options::build_host;
use super::out;

/// Call `tool` with `arguments` (JSON text) in `scope`.
pub(crate) async fn call(cli: &Cli, tool: &str, arguments: &str, scope: &str) -> Result<ExitCode> {
    let host = build_host(cli).await?;
    let stop = interrupted()?;
    // Ctrl-C or SIGTERM still cleans up: the call is dropped and every process it
    // started is terminated before the exit.
    let options = CallOptions {
        progress: Some(Arc::new(|update: Progress| {
            eprintln!("toolhost: {}", printable(&progress_line(&update)));
        })),
        log: Some(Arc::new(|line: ToolLog| {
            let text = format!(
                "[{}] {}: {}",
                line.level.as_str(),
                line.plugin,
                line.message
            );
            eprintln!("toolhost: {}", printable(&one_line(&text)));
        })),
        asking: toolhost::ask::Asking::nobody(
            "`toolhost call` has nobody to ask (call the tool through an MCP client that shows \
             forms)",
        ),
        ..CallOptions::default()
    };
    let outcome = tokio::select! {
        outcome = host.call(scope, tool, arguments).options(options).output() => Some(outcome),
        name = stop => {
            eprintln!("toolhost: {name}: stopping the call and its processes");
            None
        }
    };
    host.shutdown().await;
    let Some(outcome) = outcome else {
        return Ok(ExitCode::from(130));
    };
    match outcome {
        Ok(result) => {
            print_result(result)?;
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("toolhost: {}", one_line(&e.to_string()));
            Ok(ExitCode::FAILURE)
        }
    }
}

/// The result's JSON text, then its content items.
fn print_result(result: CallOutput) -> Result<()> {
    let items = render(&result.content, &mut Saved::default())?;
    match (result.text.is_empty(), items.is_empty()) {
        (_, true) => out(&result.text),
        (false, false) => out(format_args!("{}\n{}", result.text, items.trim_end())),
        (true, false) => out(items.trim_end()),
    }
    Ok(())
}

/// A progress update for stderr: `progress 50/100: message`.
fn progress_line(update: &Progress) -> String {
    let mut line = format!("progress {}", update.progress);
    if let Some(total) = update.total {
        line.push_str(&format!("/{total}"));
    }
    if let Some(message) = &update.message {
        line.push_str(&format!(": {}", one_line(message)));
    }
    line
}

/// Resolves with the signal's name on the first SIGINT or SIGTERM.
pub(crate) fn interrupted() -> Result<impl Future<Output = &'static str>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt()).context("installing a SIGINT handler")?;
    let mut terminate = signal(SignalKind::terminate()).context("installing a SIGTERM handler")?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => "SIGINT",
            _ = terminate.recv() => "SIGTERM",
        }
    })
}

pub(crate) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
