//! `toolhost call`: one tool call, its result on stdout; Ctrl-C or SIGTERM stops the call and
//! every process it started before the exit.

use anyhow::{Context, Result};
use std::process::ExitCode;

use super::args::Cli;
use super::options::build_host;
use super::out;

/// Call `tool` with `arguments` (JSON text) in `scope`.
pub(crate) async fn call(cli: &Cli, tool: &str, arguments: &str, scope: &str) -> Result<ExitCode> {
    let host = build_host(cli).await?;
    let stop = interrupted()?;
    // Ctrl-C or SIGTERM still cleans up: the call is dropped and every process it
    // started is terminated before the exit.
    let outcome = tokio::select! {
        outcome = host.call(scope, tool, arguments) => Some(outcome),
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
            out(result);
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("toolhost: {}", one_line(&e.to_string()));
            Ok(ExitCode::FAILURE)
        }
    }
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
