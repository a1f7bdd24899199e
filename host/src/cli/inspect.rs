//! The commands that show what a host would offer, without serving it: `toolhost sandbox`
//! (what confinement this machine supports, and what is hidden), `toolhost tools` (the tools'
//! definitions in a client's format), `toolhost plugins list` and `plugins export`.

use anyhow::{Context, Result};
use std::path::Path;
use std::process::ExitCode;
use toolhost::bundled;
use toolhost::sandbox::{Profile, SandboxMode, probe};

use super::args::{Cli, Format};
use super::options::{build_host, sandbox_settings, scan_settings};
use super::out;

/// `toolhost sandbox`.
pub(crate) fn sandbox(cli: &Cli) -> Result<ExitCode> {
    let settings = sandbox_settings(cli)?;
    let profiles: Vec<(&str, Profile)> = [
        SandboxMode::WorkspaceWrite,
        SandboxMode::ReadOnly,
        SandboxMode::Off,
    ]
    .into_iter()
    .map(|mode| {
        let mut profile = settings.profile();
        profile.mode = mode;
        (mode.name(), profile)
    })
    .collect();
    let namespaces = toolhost::process::namespaces_here();
    let hidden = toolhost::sandbox::HiddenPaths::of_this_user_scanned(
        &settings.hide,
        &settings.reveal,
        &scan_settings(cli, &settings),
    )?;
    let workdir = cli
        .workdir
        .clone()
        .or_else(|| std::env::current_dir().ok())
        .unwrap_or_else(|| "/".into());
    let mut workspace = match toolhost::sandbox::workspace_of(&workdir) {
        Some(dir) => format!("Workspace (written by workspace-write): {}", dir.display()),
        None => "Workspace: none: commands run in `/` (no --workdir, started in `/`); they \
                 read files but write only in $TMPDIR, package caches and --writable \
                 directories. Pass --workdir DIR to give them one"
            .to_owned(),
    };
    let parents = super::options::workspaces_under(cli)?;
    if cli.workdir.is_none() && !parents.is_empty() {
        let parents: Vec<String> = parents.iter().map(|p| p.display().to_string()).collect();
        workspace.push_str(&format!(
            "\nA session may choose its own workspace under {} (its client's roots, or a \
             call's workdir; see `--workspaces-under`)",
            parents.join(", ")
        ));
    }
    out(format_args!(
        "{}\nWith these flags commands get: {}\n{}\n{}\n{}",
        probe::report(&probe::support(), &namespaces, &profiles),
        settings.profile().summary(),
        workspace,
        hidden.report(namespaces.is_ok()),
        toolhost::sandbox::unix::report(&settings.allow_unix_socket)
    ));
    Ok(ExitCode::SUCCESS)
}

/// `toolhost plugins export DIR`.
pub(crate) fn export_plugins(dir: &Path) -> Result<ExitCode> {
    for path in bundled::export(dir).with_context(|| format!("writing to {}", dir.display()))? {
        out(path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// `toolhost plugins list`.
pub(crate) async fn list_plugins(cli: &Cli) -> Result<ExitCode> {
    let host = build_host(cli).await?;
    let plugins: Vec<_> = host
        .plugins()
        .into_iter()
        .map(|plugin| serde_json::json!({"name": plugin.name, "origin": plugin.origin.to_string()}))
        .collect();
    out(serde_json::to_string_pretty(&plugins)?);
    Ok(ExitCode::SUCCESS)
}

/// `toolhost tools --format FORMAT`.
pub(crate) async fn tools(cli: &Cli, format: &Format) -> Result<ExitCode> {
    let host = build_host(cli).await?;
    let tools: Vec<serde_json::Value> = host
        .tools()
        .into_iter()
        .map(|t| match format {
            Format::Plain | Format::Anthropic => serde_json::json!({
                "name": t.name, "description": t.description, "input_schema": t.input_schema
            }),
            Format::Mcp => {
                let mut tool = serde_json::json!({
                    "name": t.name, "description": t.description, "inputSchema": t.input_schema
                });
                if let Some(output) = t.output_schema {
                    tool["outputSchema"] = output;
                }
                tool
            }
            Format::Openai => serde_json::json!({
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.input_schema}
            }),
        })
        .collect();
    out(serde_json::to_string_pretty(&tools)?);
    Ok(ExitCode::SUCCESS)
}
