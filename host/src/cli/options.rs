//! What the global flags make: the host ([`build_host`]) and its sandbox settings.

use anyhow::{Context, Result};
use toolhost::ToolHost;
use toolhost::sandbox::{Network, SandboxMode, SandboxSettings};

use super::args::{Cli, Command};

/// Each principal's share of a host serving HTTP.
pub(crate) struct Shares {
    /// Calls in progress at once of one principal (`--max-calls-per-principal`).
    pub(crate) calls: usize,
    /// Processes running at once of one principal (`--max-processes-per-principal`); `None`:
    /// the default share of the host's total.
    pub(crate) processes: Option<usize>,
    /// The server has several principals: a default share is half the total.
    pub(crate) several: bool,
}

/// The host the global flags make, for a command without principals.
pub(crate) async fn build_host(cli: &Cli) -> Result<ToolHost> {
    build_host_with(cli, None).await
}

/// The host the global flags make, with each principal's `shares` when it serves HTTP.
pub(crate) async fn build_host_with(cli: &Cli, shares: Option<Shares>) -> Result<ToolHost> {
    let mut builder = ToolHost::builder().bundled_policy(match cli.policy.as_str() {
        "none" => None,
        name => Some(name),
    });
    for dir in &cli.plugin_dirs {
        builder = builder.plugin_dir(dir);
    }
    if cli.no_cache {
        builder = builder.cache_dir(None);
    }
    let mut config = toolhost::process::ProcessManagerConfig::default();
    if let Some(dir) = &cli.state_dir {
        config.state_dir = Some(dir.clone());
    }
    config.record = record_settings(cli)?;
    config.log_retention = cli.log_retention.into();
    config.log_max_total = cli.log_max_total;
    if let Some(max) = cli.max_processes_total {
        config.max_running_total = max as usize;
    }
    if let Some(shell) = &cli.shell {
        config.shell = shell.clone();
    }
    if let Some(dir) = &cli.workdir {
        anyhow::ensure!(
            dir.is_dir(),
            "--workdir {} is not an existing directory",
            dir.display()
        );
        config.default_workdir = Some(dir.clone());
    }
    config.workspaces_under = workspaces_under(cli)?;
    config.sandbox = sandbox_settings(cli)?;
    // A host that is no server prepares nothing for a later call: a keeper prepared ahead
    // would be made after the command and waited for at its exit, and the git guard's
    // watches cost their removal at exit.
    config.serves_one_call = !matches!(cli.command, Command::Serve(_));
    if let Command::Serve(args) = &cli.command
        && let Some(file) = &args.token_file
    {
        config.protected.push(file.clone());
    }
    if let Some(shares) = &shares {
        let total = config.max_running_total;
        config.max_running_per_owner = shares.processes.unwrap_or(if shares.several {
            (total / 2).max(1)
        } else {
            total
        });
        builder = builder.max_calls_per_principal(shares.calls);
    }
    builder = builder
        .process_config(config)
        .max_calls_total(cli.calls_total())
        .max_calls_per_session(cli.max_calls_per_session as usize)
        .ask_mode(if cli.ask == "risky" {
            toolhost::ask::AskMode::Risky
        } else {
            toolhost::ask::AskMode::Never
        })
        .ask_timeout(cli.ask_timeout.into());
    // A server runs long: pick up plugin changes (and tell MCP clients about them).
    let serving = matches!(cli.command, Command::Serve(_));
    // A server answers `initialize` before a new interpreter plugin's first compile; a
    // one-shot command needs every tool at once.
    builder = builder
        .watch_plugins(serving)
        .defer_uncompiled_plugins(serving);
    builder.build().await.context("loading plugins")
}

/// Where the content scan keeps its cache (the state directory) and what it skips (the
/// workspace), as the process manager will have them.
pub(crate) fn scan_settings(
    cli: &Cli,
    settings: &SandboxSettings,
) -> toolhost::sandbox::ScanSettings {
    let state_dir = state_dir(cli);
    let workdir = cli.workdir.clone().or_else(|| std::env::current_dir().ok());
    toolhost::sandbox::ScanSettings {
        enabled: settings.secret_scan && settings.mode != SandboxMode::Off,
        skip: workdir.into_iter().chain(state_dir.clone()).collect(),
        cache_dir: state_dir,
    }
}

/// The operator's network from the `--network` flags, and what a session's person may allow:
///
/// 1. The accesses combine as `Network::combine` says.
/// 2. `ask` values join into what a person may allow (`ask` alone: any host).
/// 3. With an `ask` value and no `allow=`, the network is an empty allow-list: nothing is
///    reachable until allowed. With `full` or `none`, `ask` is refused: there is nothing to
///    allow, or nothing may be.
/// 4. `ask` needs `--ask risky`: without it nobody is asked.
fn network_flags(cli: &Cli) -> Result<(Network, Option<toolhost::sandbox::network::Askable>)> {
    use super::args::NetworkFlag;
    use toolhost::sandbox::network::{AllowList, AllowListId, Askable};
    let accesses: Vec<Network> = cli
        .network
        .iter()
        .filter_map(|flag| match flag {
            NetworkFlag::Access(network) => Some(*network),
            NetworkFlag::Ask(_) => None,
        })
        .collect();
    let mut askable: Option<Askable> = None;
    for flag in &cli.network {
        if let NetworkFlag::Ask(more) = flag {
            askable = Some(match (askable, more) {
                (Some(Askable::Any), _) | (_, Askable::Any) => Askable::Any,
                (Some(Askable::Within(mine)), Askable::Within(theirs)) => {
                    Askable::Within(mine.either(theirs))
                }
                (None, more) => more.clone(),
            });
        }
    }
    let network = match (accesses.is_empty(), &askable) {
        (true, Some(_)) => Network::Allow(AllowListId::of(AllowList::new(Vec::new()))),
        _ => Network::combine(&accesses).map_err(|error| anyhow::anyhow!("--network: {error}"))?,
    };
    if askable.is_some() {
        if network.allow_list().is_none() {
            anyhow::bail!(
                "--network ask needs an allow-list (`allow=...`, or `ask` alone): under `{network}` \
                 there is nothing a person could allow"
            );
        }
        if cli.ask != "risky" {
            anyhow::bail!("--network ask needs --ask risky: without it nobody is ever asked");
        }
    }
    Ok((network, askable))
}

/// The operator's sandbox settings from the flags.
pub(crate) fn sandbox_settings(cli: &Cli) -> Result<SandboxSettings> {
    let (network, network_ask) = network_flags(cli)?;
    if network.allow_list().is_some() {
        if cli.sandbox_mode == SandboxMode::Off {
            anyhow::bail!(
                "--network allow=... needs a confined sandbox: with `--sandbox off` commands \
                 reach every host"
            );
        }
        if let Err(error) = toolhost::process::namespaces_here() {
            anyhow::bail!(
                "--network allow=... needs the namespaces layer, missing here ({error}): \
                 without a network namespace no route can be taken away (Landlock filters TCP \
                 by port only, and seccomp cannot read a connect address). Use `--network \
                 none` or `full` (see `toolhost sandbox`)"
            );
        }
    }
    let mut settings = SandboxSettings {
        mode: cli.sandbox_mode,
        network,
        network_ask,
        ..SandboxSettings::default()
    };
    for dir in &cli.writable {
        let canonical = dir
            .canonicalize()
            .ok()
            .filter(|dir| dir.is_dir())
            .with_context(|| {
                format!("--writable {} is not an existing directory", dir.display())
            })?;
        settings.writable.push(canonical);
    }
    for path in &cli.hide {
        settings
            .hide
            .push(std::path::absolute(path).with_context(|| {
                format!("--hide {} cannot be made an absolute path", path.display())
            })?);
    }
    for path in &cli.reveal {
        settings
            .reveal
            .push(std::path::absolute(path).with_context(|| {
                format!(
                    "--reveal {} cannot be made an absolute path",
                    path.display()
                )
            })?);
    }
    settings.secret_scan = cli.secret_scan == "on";
    for path in &cli.allow_unix_socket {
        settings
            .allow_unix_socket
            .push(std::path::absolute(path).with_context(|| {
                format!(
                    "--allow-unix-socket {} cannot be made an absolute path",
                    path.display()
                )
            })?);
    }
    // A --reveal path that is not hidden by default is a mistake: said before anything runs.
    if !settings.reveal.is_empty() {
        toolhost::sandbox::HiddenPaths::of_this_user_scanned(
            &settings.hide,
            &settings.reveal,
            &scan_settings(cli, &settings),
        )?;
    }
    if let Some(bytes) = cli.memory_limit_per_command {
        settings.limits.memory_bytes = Some(bytes);
    }
    if let Some(processes) = cli.process_limit_per_command {
        settings.limits.processes = Some(processes);
    }
    if let Some(bytes) = cli.memory_limit_per_session {
        settings.memory_per_session = Some(bytes);
    }
    if let Some(bytes) = cli.memory_limit_total {
        settings.memory_total = Some(bytes);
    }
    if let Some(bytes) = cli.shm_size_per_session {
        anyhow::ensure!(bytes > 0, "--shm-size-per-session must be more than 0");
        settings.shm_bytes = bytes;
    }
    if let Some(bytes) = cli.tmp_size_per_session {
        anyhow::ensure!(bytes > 0, "--tmp-size-per-session must be more than 0");
        settings.tmp_bytes = bytes;
    }
    settings.allow_hook_writes = cli.allow_hook_writes;
    Ok(settings)
}

/// The parents a session may choose its workspace under: `--workspaces-under` (each an
/// existing directory, or `none` for no choosing), else the user's home directories.
pub(crate) fn workspaces_under(cli: &Cli) -> Result<Vec<std::path::PathBuf>> {
    if cli
        .workspaces_under
        .iter()
        .any(|dir| dir.as_os_str() == "none")
    {
        anyhow::ensure!(
            cli.workspaces_under.len() == 1,
            "--workspaces-under none cannot be given with directories"
        );
        return Ok(Vec::new());
    }
    if cli.workspaces_under.is_empty() {
        return Ok(toolhost::sandbox::Homes::of_this_user().distinct());
    }
    for dir in &cli.workspaces_under {
        anyhow::ensure!(
            dir.is_absolute() && dir.is_dir(),
            "--workspaces-under {} is not an existing directory given by its absolute path",
            dir.display()
        );
        anyhow::ensure!(
            dir.as_path() != std::path::Path::new("/"),
            "--workspaces-under / would let a session make any directory its workspace"
        );
    }
    Ok(cli.workspaces_under.clone())
}

/// Where the record of commands goes (`--record`, `--record-max-size`): `None` for `off`.
pub(crate) fn record_settings(cli: &Cli) -> Result<Option<toolhost::process::RecordSettings>> {
    let path = match cli.record.as_deref() {
        Some("off") => return Ok(None),
        Some(file) => std::path::PathBuf::from(file),
        None => match state_dir(cli) {
            Some(dir) => dir.join("commands.jsonl"),
            // No state directory (no HOME, no XDG_STATE_HOME): nowhere to keep it.
            None => return Ok(None),
        },
    };
    anyhow::ensure!(
        !path.as_os_str().is_empty() && !path.is_dir(),
        "--record {} is a directory, not a file",
        path.display()
    );
    Ok(Some(toolhost::process::RecordSettings {
        path,
        max_bytes: cli.record_max_size,
    }))
}

/// The state directory: `--state-dir`, or the process manager's default.
fn state_dir(cli: &Cli) -> Option<std::path::PathBuf> {
    cli.state_dir
        .clone()
        .or_else(toolhost::process::ProcessManagerConfig::default_state_dir)
}
