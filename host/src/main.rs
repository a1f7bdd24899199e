//! The `toolhost` command line: list the tools, call one, export the bundled policies, serve
//! them over MCP, test a plugin on scenarios, write a new policy crate.
//! Results go to stdout; logs go to stderr.
//! The commands that only the binary offers live in [`cli`], not in the library.

mod cli;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;
use toolhost::sandbox::{Network, Profile, SandboxMode, SandboxSettings, probe};
use toolhost::{ToolHost, bundled};

#[derive(Parser)]
#[command(
    name = "toolhost",
    version,
    about = "Give an AI agent a shell: sandboxed WebAssembly tool policies over a native process host",
    after_help = "Examples:
  toolhost call execute '{\"command\":\"echo hello\"}'   run one command, print the result JSON
  toolhost serve                                          serve the tools over MCP on stdio
  toolhost --sandbox read-only call execute '{\"command\":\"ls\"}'
  toolhost sandbox                                        what confinement this machine supports

Every command and flag: docs/cli.md"
)]
struct Cli {
    /// Load every `*.wasm` component in DIR besides the bundled policy (repeatable). A
    /// plugin's tool replaces a bundled tool of the same name.
    #[arg(long = "plugins", value_name = "DIR", global = true)]
    plugin_dirs: Vec<PathBuf>,

    /// The bundled policy to load: `default`, `guarded`, or `none`.
    #[arg(long, value_name = "NAME", default_value = "default", global = true)]
    policy: String,

    /// Directory for full process output logs (default: $XDG_STATE_HOME/toolhost/output).
    #[arg(long, value_name = "DIR", global = true)]
    state_dir: Option<PathBuf>,

    /// How long full output logs are kept after their last write, also after their process,
    /// session and host are gone: a path or resource link given to a model stays valid this
    /// long. Older logs are deleted every quarter of the retention (at most 10 minutes apart):
    /// by a server while it runs, and by a host that starts when the last sweep is older.
    #[arg(long, value_name = "DURATION", default_value = "24h", global = true)]
    log_retention: humantime::Duration,

    /// The most disk space the output logs in the state directory may take together; past it
    /// the oldest are deleted first, at each sweep (see --log-retention: between two sweeps
    /// the logs can grow past it) (e.g. `1GiB`).
    #[arg(long, value_name = "SIZE", default_value = "1GiB", value_parser = parse_memory, global = true)]
    log_max_total: u64,

    /// Most processes running at once on the whole host, all sessions together (a finished
    /// command's leftovers count while they run); a start beyond is refused with a message
    /// saying so (default: half the host's descriptor limit, `ulimit -n`, at 12 descriptors a
    /// process, at most 2048).
    #[arg(long, alias = "max-processes", value_name = "N", global = true, value_parser = clap::value_parser!(u32).range(1..))]
    max_processes_total: Option<u32>,

    /// Most tool calls in progress at once on the whole host, all sessions together (MCP tasks
    /// included); a call beyond is refused at once with a message saying so, nothing of it
    /// run. It also bounds the memory of the guests running calls (at most this many times the
    /// largest memory limit of a plugin).
    #[arg(long, alias = "max-calls", value_name = "N", default_value_t = toolhost::DEFAULT_MAX_CALLS_TOTAL as u32, global = true, value_parser = clap::value_parser!(u32).range(1..))]
    max_calls_total: u32,

    /// Most tool calls in progress at once in one session; a call beyond is refused at once
    /// with a message saying so, nothing of it run, while other sessions go on (see
    /// --max-calls-total for the whole host).
    #[arg(long, value_name = "N", default_value_t = toolhost::DEFAULT_MAX_CALLS_PER_SESSION as u32, global = true, value_parser = clap::value_parser!(u32).range(1..))]
    max_calls_per_session: u32,

    /// Default working directory of processes (default: the current directory).
    #[arg(long, value_name = "DIR", global = true)]
    workdir: Option<PathBuf>,

    /// Shell that runs commands as `SHELL -c COMMAND` (default: /bin/sh).
    #[arg(long, value_name = "PATH", global = true)]
    shell: Option<PathBuf>,

    /// Do not cache compiled components on disk.
    #[arg(long, global = true)]
    no_cache: bool,

    /// How commands are confined: `workspace-write` (read everything but secrets such as
    /// ~/.ssh, write the workdir, the --writable paths, package caches and the session's
    /// private /tmp), `read-only` (write nothing but the private /tmp) or `off` (unconfined). A
    /// policy may ask for stricter, never looser. See `toolhost sandbox`.
    #[arg(long = "sandbox", value_name = "MODE", default_value = "workspace-write", value_parser = parse_mode, global = true)]
    sandbox_mode: SandboxMode,

    /// Network access of confined commands: `full`, `none` (no sockets but Unix ones), or
    /// `allow=HOST[,HOST...]`: only those hosts, through a proxy of the host's (`example.com`,
    /// `*.example.com`, an address; each with an optional `:PORT`; repeatable).
    #[arg(long, value_name = "ACCESS", value_parser = parse_network, global = true)]
    network: Vec<Network>,

    /// A directory confined commands may write besides the workdir (repeatable; `/tmp` shares
    /// the host's /tmp with them instead of a private one).
    #[arg(long, value_name = "DIR", global = true)]
    writable: Vec<PathBuf>,

    /// Hide PATH from confined commands besides the credential stores hidden by default
    /// (repeatable; `toolhost sandbox` lists the effective list).
    #[arg(long, value_name = "PATH", global = true)]
    hide: Vec<PathBuf>,

    /// Let confined commands read PATH although it is hidden by default, e.g. `~/.npmrc` for
    /// a private registry (repeatable; only paths of the default list).
    #[arg(long, value_name = "PATH", global = true)]
    reveal: Vec<PathBuf>,

    /// Whether files under the home's configuration trees that hold a secret (a private key, a
    /// token, a password) are found at start and hidden like the list (`toolhost sandbox`
    /// lists them; --reveal takes one out).
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = ["on", "off"], global = true)]
    secret_scan: String,
    /// Let confined commands connect to the Unix socket PATH (or any under the directory
    /// PATH), e.g. a database's; by default they reach only sockets in the workspace, the
    /// writable directories and their session's own /tmp (repeatable).
    #[arg(long, value_name = "PATH", global = true)]
    allow_unix_socket: Vec<PathBuf>,

    /// Memory each confined command may use, everything it started included (a memory
    /// cgroup per command; where the host may not create one, per process with RLIMIT_DATA),
    /// e.g. `4GiB` (default: half the machine's memory).
    #[arg(long, alias = "memory-limit", value_name = "SIZE", value_parser = parse_memory, global = true)]
    memory_limit_per_command: Option<u64>,

    /// Processes each confined command may have at once, everything it started included
    /// (default 1024; needs a pids cgroup the host may create, see `toolhost sandbox`; see
    /// --max-processes-total for the whole host).
    #[arg(long, alias = "process-limit", value_name = "N", value_parser = clap::value_parser!(u32).range(1..), global = true)]
    process_limit_per_command: Option<u32>,

    /// Memory of one session's confined commands together, everything they started included,
    /// e.g. `8GiB` (default: half the machine's memory; needs a memory cgroup the host may
    /// create, see `toolhost sandbox`).
    #[arg(long, value_name = "SIZE", value_parser = parse_memory, global = true)]
    memory_limit_per_session: Option<u64>,

    /// Memory of every session's confined commands together, e.g. `16GiB` (default: three
    /// quarters of the machine's memory; needs a memory cgroup the host may create).
    #[arg(long, value_name = "SIZE", value_parser = parse_memory, global = true)]
    memory_limit_total: Option<u64>,

    /// Size of the `/dev/shm` of a session's own (a tmpfs in its mount namespace, one per
    /// session and profile), e.g. `1GiB` (default: 512MiB). Without namespaces, confined
    /// commands cannot write `/dev/shm` at all.
    #[arg(long, value_name = "SIZE", value_parser = parse_memory, global = true)]
    shm_size_per_session: Option<u64>,

    /// Most bytes a session's own `/tmp` holds (its writes go to a tmpfs in its mount
    /// namespace, above the host's `/tmp`), e.g. `4GiB` (default: 1GiB). Without namespaces,
    /// confined commands write the host's `/tmp` and their own `$TMPDIR` instead, unbounded.
    #[arg(long, value_name = "SIZE", value_parser = parse_memory, global = true)]
    tmp_size_per_session: Option<u64>,

    /// Let confined commands write what runs later outside the sandbox: git hooks and the git
    /// settings that run programs (`core.hooksPath`, `core.fsmonitor`, `include.path`, ...) in
    /// the writable directories' repositories, and shell start-up files of a home inside one.
    /// By default these are read-only where namespaces work, and a confined command's changes
    /// to them are undone (see docs/confinement.md).
    #[arg(long, global = true)]
    allow_hook_writes: bool,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the loaded tools as JSON.
    #[command(after_help = "Example:\n  toolhost tools --format openai")]
    Tools {
        /// Shape of each tool definition.
        #[arg(long, value_enum, default_value_t = Format::Plain)]
        format: Format,
    },
    /// Call one tool and print its result JSON. Exit 1 on a tool error.
    #[command(after_help = "Examples:
  toolhost call execute '{\"command\":\"echo hello\"}'
  toolhost --workdir ~/project call execute '{\"command\":\"cargo build\",\"timeout\":\"5m\"}'
  toolhost call process_list")]
    Call {
        /// Tool name, e.g. `execute`.
        tool: String,
        /// Arguments as a JSON object, e.g. '{"command":"echo hello"}'.
        #[arg(default_value = "{}")]
        arguments: String,
        /// Scope (session) id for the call.
        #[arg(long, default_value = "cli")]
        scope: String,
    },
    /// Run scripted scenarios (TOML files, or directories of them) against a plugin
    /// component, on a fake process capability: no real command runs. Reports each scenario
    /// like a test runner; exits 1 when one fails, 2 when a file cannot be used. The scenario
    /// format is described in the policy guide (docs/writing-a-policy.md).
    #[command(
        after_help = "Example:\n  toolhost test target/wasm32-wasip2/release/my_policy.wasm scenarios/"
    )]
    Test {
        /// The plugin component (`NAME.wasm`; its `NAME.toml` manifest beside it is used).
        plugin: PathBuf,
        /// Scenario files, or directories whose `*.toml` files are scenario files.
        #[arg(required = true)]
        scenarios: Vec<PathBuf>,
        /// The plugin's manifest, if not `NAME.toml` beside it.
        #[arg(long, value_name = "FILE")]
        manifest: Option<PathBuf>,
    },
    /// Write a new policy crate DIR/NAME, ready to build offline for wasm32-wasip2.
    ///
    /// The crate holds the standard tools written with the policy SDK (a copy of this
    /// version's SDK is inside), a manifest, and scenarios for `toolhost test`. An existing
    /// DIR/NAME is left alone. docs/writing-a-policy.md goes on from there.
    #[command(after_help = "Example:\n  toolhost new-policy my-policy --dir ~/src")]
    NewPolicy {
        /// The crate's and the policy's name: lowercase letters, digits, `-` and `_`.
        name: String,
        /// The directory to write the crate in (created if missing).
        #[arg(long, value_name = "DIR", default_value = ".")]
        dir: PathBuf,
    },
    /// Print which confinement layers this machine supports and what each sandbox mode gets
    /// here with the given flags.
    #[command(
        after_help = "Examples:\n  toolhost sandbox\n  toolhost --sandbox read-only --network none sandbox"
    )]
    Sandbox,
    /// Manage plugins.
    #[command(
        after_help = "Examples:\n  toolhost plugins list\n  toolhost plugins export ./policies"
    )]
    Plugins {
        #[command(subcommand)]
        command: PluginsCommand,
    },
    /// Serve the tools over the Model Context Protocol: on stdin/stdout, or with --http as
    /// streamable HTTP at http://ADDR/mcp. Each MCP session is its own scope; its processes
    /// are terminated when it ends.
    #[command(after_help = "Examples:
  toolhost serve
  TOOLHOST_TOKEN=secret toolhost serve --http 127.0.0.1:8080")]
    Serve {
        /// Serve streamable HTTP on ADDR (e.g. 127.0.0.1:8080; port 0 picks one, announced on
        /// stderr) instead of stdio. Needs a bearer token (--token-file or TOOLHOST_TOKEN).
        #[arg(long, value_name = "ADDR")]
        http: Option<String>,
        /// File of the bearer tokens HTTP clients must send: one `NAME TOKEN` per line, each
        /// a principal whose sessions and scopes no other reaches, or one bare token
        /// (principal `default`). Default: $TOOLHOST_TOKEN, one token.
        #[arg(long, value_name = "FILE", requires = "http")]
        token_file: Option<PathBuf>,
        /// Allow listening on a non-loopback address.
        #[arg(long, requires = "http")]
        allow_remote: bool,
        /// Close an HTTP session idle this long, terminating its processes: no request in
        /// progress and none, nor the end of a response, for this long (a running call keeps
        /// its session open).
        #[arg(
            long,
            value_name = "DURATION",
            default_value = "30m",
            requires = "http"
        )]
        idle_timeout: humantime::Duration,
        /// The most HTTP sessions at once; a new session beyond it is refused (503) until one
        /// ends or expires.
        #[arg(long, value_name = "N", default_value_t = 256, requires = "http", value_parser = clap::value_parser!(u32).range(1..))]
        max_sessions: u32,
        /// The most HTTP sessions of one principal (a `NAME` of --token-file) at once; a new
        /// one beyond it is refused (503). Default: --max-sessions with one principal, half of
        /// it with several. Before another principal is refused for want of a session, the
        /// oldest idle session of a principal at this limit is closed to make room.
        #[arg(long, value_name = "N", requires = "http", value_parser = clap::value_parser!(u32).range(1..))]
        max_sessions_per_principal: Option<u32>,
        /// The most named scopes (protocol 2026-07-28) of one principal at once; a new one
        /// beyond it is refused (-32000). Default: --max-sessions with one principal, half of
        /// it with several. Before another principal is refused for want of a scope, the
        /// oldest idle scope of a principal at this limit is ended to make room.
        #[arg(long, value_name = "N", requires = "http", value_parser = clap::value_parser!(u32).range(1..))]
        max_scopes_per_principal: Option<u32>,
        /// The most connections of clients that sent a valid token; a request beyond it is
        /// refused (503, Retry-After). Default: 512, or a quarter of the descriptor limit
        /// (ulimit -n) when less. Connections without a valid token yet have a pool of their
        /// own (an eighth of this, 4 to 64; the oldest is closed for a new one) and 5 s to
        /// send one.
        #[arg(long, value_name = "N", requires = "http", value_parser = clap::value_parser!(u32).range(1..))]
        max_connections: Option<u32>,
        /// Also accept requests from this browser origin (e.g. https://app.example.com:443;
        /// `:*` for any port). Repeatable. A request with any other Origin header is refused
        /// with 403; the server's own origins are always accepted.
        #[arg(long, value_name = "ORIGIN", requires = "http")]
        allowed_origin: Vec<String>,
    },
}

fn parse_mode(text: &str) -> Result<SandboxMode, String> {
    SandboxMode::parse(text)
        .ok_or_else(|| format!("`{text}` is not one of workspace-write, read-only, off"))
}

fn parse_network(text: &str) -> Result<Network, String> {
    Network::parse_setting(text)
}

fn parse_memory(text: &str) -> Result<u64, String> {
    toolhost::sandbox::parse_size(text)
        .ok_or_else(|| format!("`{text}` is not a size like 512MiB or 4GiB"))
}

#[derive(Subcommand)]
enum PluginsCommand {
    /// Write the bundled policy components to DIR, to start a policy of your own from.
    #[command(after_help = "Example:\n  toolhost plugins export ./policies")]
    Export {
        /// Target directory (created if missing).
        dir: PathBuf,
    },
    /// List the loaded plugins and where they came from.
    #[command(after_help = "Example:\n  toolhost --plugins ./policies plugins list")]
    List,
}

/// Tool definition shapes.
#[derive(Clone, Copy, ValueEnum)]
enum Format {
    /// `{name, description, input_schema}`.
    Plain,
    /// MCP `tools/list` entries: `{name, description, inputSchema}`.
    Mcp,
    /// OpenAI function tools: `{type: "function", function: {name, description, parameters}}`.
    Openai,
    /// Anthropic tools: `{name, description, input_schema}`.
    Anthropic,
}

/// `TOOLHOST_TOKEN`, taken out of the environment at start so that no command inherits it.
static ENV_TOKEN: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

/// The soft descriptor limit the host raises itself to, if its hard limit allows: each running
/// process costs the host about a dozen descriptors, and the default `--max-processes-total` follows
/// this limit. Not more: commands inherit it, and some programs walk every descriptor up to it.
const DESCRIPTOR_LIMIT: u64 = 65_536;

/// Raise the soft `RLIMIT_NOFILE` towards [`DESCRIPTOR_LIMIT`] (within the hard limit).
fn raise_descriptor_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    let wanted = DESCRIPTOR_LIMIT.min(hard);
    if soft < wanted
        && let Err(error) = setrlimit(Resource::RLIMIT_NOFILE, wanted, hard)
    {
        eprintln!("toolhost: warning: cannot raise the descriptor limit to {wanted}: {error}");
    }
}

fn main() -> ExitCode {
    // Commands run with the host's environment and as the host's user: keep the bearer token
    // out of both the environment they inherit and /proc/<host>/environ (a non-dumpable
    // process's /proc files are not readable by other processes of the same user).
    let _ = ENV_TOKEN.set(std::env::var("TOOLHOST_TOKEN").ok());
    scrub_env_token();
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        eprintln!("toolhost: warning: cannot make the host non-dumpable: {e}");
    }
    raise_descriptor_limit();
    {
        use tracing_subscriber::Layer;
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;
        let stderr = tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            // Colour codes only for a person at a terminal, never in a file or a pipe.
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_filter(
                tracing_subscriber::EnvFilter::try_from_env("TOOLHOST_LOG")
                    // rmcp logs every error answer as a warning: an error answer is the
                    // protocol working, not a problem of the server's.
                    .unwrap_or_else(|_| {
                        tracing_subscriber::EnvFilter::new("warn,rmcp::service=error")
                    }),
            );
        tracing_subscriber::registry()
            .with(stderr)
            // Log lines for MCP clients that ask for them (`logging/setLevel`).
            .with(toolhost::mcp::logging::layer())
            .init();
    }
    let cli = match parse_cli() {
        Ok(cli) => cli,
        Err(error) => error.exit(),
    };
    // One call needs no worker threads (the guest, the process monitor and the answer take
    // turns on this one); a server does.
    let mut builder = match cli.command {
        Command::Call { .. } => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    };
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("toolhost: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("toolhost: {e:#}");
            ExitCode::FAILURE
        }
    };
    // Every process is gone and the result is out: do not wait for a blocking task that is
    // still under way (a stopped call's sandbox being built: up to the helper's timeout).
    runtime.shutdown_background();
    code
}

/// The command line, with a version text that names the WIT versions this host serves.
fn parse_cli() -> Result<Cli, clap::Error> {
    use clap::{CommandFactory, FromArgMatches};
    let version = format!(
        "{} (serves WIT toolhost:plugin {})",
        env!("CARGO_PKG_VERSION"),
        toolhost::WIT_VERSIONS.join(", ")
    );
    // Parsed once per process: leaking the text keeps clap's `&'static str` without a feature.
    let version: &'static str = Box::leak(version.into_boxed_str());
    let matches = Cli::command().version(version).try_get_matches()?;
    Cli::from_arg_matches(&matches)
}

async fn build_host(cli: &Cli) -> Result<ToolHost> {
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
    config.sandbox = sandbox_settings(cli)?;
    if let Command::Serve {
        token_file: Some(file),
        ..
    } = &cli.command
    {
        config.protected.push(file.clone());
    }
    builder = builder
        .process_config(config)
        .max_calls_total(cli.max_calls_total as usize)
        .max_calls_per_session(cli.max_calls_per_session as usize);
    // A server runs long: pick up plugin changes (and tell MCP clients about them).
    builder = builder.watch_plugins(matches!(cli.command, Command::Serve { .. }));
    builder.build().await.context("loading plugins")
}

/// Where the content scan keeps its cache (the state directory) and what it skips (the
/// workspace), as the process manager will have them.
fn scan_settings(cli: &Cli, settings: &SandboxSettings) -> toolhost::sandbox::ScanSettings {
    let state_dir = cli
        .state_dir
        .clone()
        .or_else(toolhost::process::ProcessManagerConfig::default_state_dir);
    let workdir = cli.workdir.clone().or_else(|| std::env::current_dir().ok());
    toolhost::sandbox::ScanSettings {
        enabled: settings.secret_scan && settings.mode != SandboxMode::Off,
        skip: workdir.into_iter().chain(state_dir.clone()).collect(),
        cache_dir: state_dir,
    }
}

/// The operator's sandbox settings from the flags.
fn sandbox_settings(cli: &Cli) -> Result<SandboxSettings> {
    let network =
        Network::combine(&cli.network).map_err(|error| anyhow::anyhow!("--network: {error}"))?;
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

async fn run(cli: Cli) -> Result<ExitCode> {
    match &cli.command {
        Command::Test {
            plugin,
            scenarios,
            manifest,
        } => {
            let cache = if cli.no_cache {
                None
            } else {
                toolhost::default_cache_dir()
            };
            let unusable = |error: &dyn std::fmt::Display| {
                eprintln!("toolhost test: {error}");
                Ok(ExitCode::from(2))
            };
            let files = match crate::cli::scenarios::collect(scenarios) {
                Ok(files) => files,
                Err(error) => return unusable(&error),
            };
            let runner =
                match crate::cli::scenarios::Runner::new(plugin, manifest.as_deref(), cache) {
                    Ok(runner) => runner,
                    Err(error) => return unusable(&error),
                };
            // The report goes out as scenarios finish (a reader that went away is ignored).
            match crate::cli::scenarios::run(&runner, &files, &mut std::io::stdout()).await {
                Ok((_, 0)) => Ok(ExitCode::SUCCESS),
                Ok(_) => Ok(ExitCode::FAILURE),
                Err(error) => unusable(&error),
            }
        }
        Command::NewPolicy { name, dir } => {
            let policy = crate::cli::scaffold::PolicyCrate::new(name)?;
            let root = policy.write(dir)?;
            out(format_args!(
                "Created the policy crate {} (a copy of the policy SDK is in {}/). Next:\n{}",
                root.display(),
                crate::cli::scaffold::SDK,
                policy.next_steps()
            ));
            Ok(ExitCode::SUCCESS)
        }
        Command::Sandbox => {
            let settings = sandbox_settings(&cli)?;
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
                &scan_settings(&cli, &settings),
            )?;
            out(format_args!(
                "{}\nWith these flags commands get: {}\n{}\n{}",
                probe::report(&probe::support(), &namespaces, &profiles),
                settings.profile().summary(),
                hidden.report(namespaces.is_ok()),
                toolhost::sandbox::unix::report(&settings.allow_unix_socket)
            ));
            Ok(ExitCode::SUCCESS)
        }
        Command::Plugins {
            command: PluginsCommand::Export { dir },
        } => {
            for path in
                bundled::export(dir).with_context(|| format!("writing to {}", dir.display()))?
            {
                out(path.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Plugins {
            command: PluginsCommand::List,
        } => {
            let host = build_host(&cli).await?;
            let plugins: Vec<_> = host
                .plugins()
                .into_iter()
                .map(|plugin| serde_json::json!({"name": plugin.name, "origin": plugin.origin.to_string()}))
                .collect();
            out(serde_json::to_string_pretty(&plugins)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Tools { format } => {
            let host = build_host(&cli).await?;
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
        Command::Call {
            tool,
            arguments,
            scope,
        } => {
            let host = build_host(&cli).await?;
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
        Command::Serve {
            http,
            token_file,
            allow_remote,
            idle_timeout,
            max_sessions,
            max_sessions_per_principal,
            max_scopes_per_principal,
            max_connections,
            allowed_origin,
        } => {
            let http = match http {
                Some(addr) => {
                    let options = toolhost::mcp::HttpOptions {
                        addr: addr.clone(),
                        tokens: serve_tokens(token_file.as_deref())?,
                        allow_remote: *allow_remote,
                        idle_timeout: (*idle_timeout).into(),
                        max_sessions: *max_sessions as usize,
                        max_sessions_per_principal: max_sessions_per_principal.map(|n| n as usize),
                        max_scopes_per_principal: max_scopes_per_principal.map(|n| n as usize),
                        max_connections: max_connections.map(|n| n as usize),
                        allowed_origins: allowed_origin.clone(),
                    };
                    // Refuse a bad address or token before loading anything.
                    options.resolve().await?;
                    Some(options)
                }
                None => None,
            };
            let host = std::sync::Arc::new(build_host(&cli).await?);
            host.sweep_logs_periodically();
            match http {
                Some(options) => toolhost::mcp::serve_http(host, options).await?,
                None => toolhost::mcp::serve_stdio(host).await?,
            }
            // Every process is gone. Exit now rather than wait for the runtime to drain a
            // blocking stdin read that may never end.
            std::process::exit(0)
        }
    }
}

/// The HTTP bearer tokens: those of `file` (one `NAME TOKEN` per line, or one bare token), or
/// `$TOOLHOST_TOKEN` for principal `default`.
fn serve_tokens(file: Option<&std::path::Path>) -> Result<Vec<toolhost::mcp::BearerToken>> {
    use toolhost::mcp::BearerToken;
    if let Some(path) = file
        && let Ok(meta) = std::fs::metadata(path)
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode();
        if mode & 0o077 != 0 {
            tracing::warn!(
                file = %path.display(),
                "the token file may be read by other users (mode {:o}): anyone who reads it can \
                 run commands here; make it private with chmod 600",
                mode & 0o777
            );
        }
    }
    let missing = || {
        anyhow::anyhow!(
            "`toolhost serve --http` needs a bearer token: put one in a file and pass \
             --token-file FILE, or set TOOLHOST_TOKEN"
        )
    };
    match file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading the token file {}", path.display()))?;
            if text.trim().is_empty() {
                return Err(missing());
            }
            BearerToken::parse_file(&text)
                .map_err(|why| anyhow::anyhow!("the token file {}: {why}", path.display()))
        }
        None => {
            let token = ENV_TOKEN.get().cloned().flatten().unwrap_or_default();
            if token.trim().is_empty() {
                return Err(missing());
            }
            Ok(vec![BearerToken::new(
                BearerToken::DEFAULT_PRINCIPAL,
                token.trim(),
            )])
        }
    }
}

/// Remove `TOOLHOST_TOKEN` from the environment, and overwrite its value in the process's
/// original environment block too: `/proc/<host>/environ` shows that block, not the current
/// environment, and a privileged process can still read it.
fn scrub_env_token() {
    use nix::libc;
    // SAFETY: called first thing in `main`, before any other thread exists. `getenv` returns a
    // pointer to the NUL-terminated value inside the environment block (writable memory set
    // up by the kernel at exec); overwriting its bytes in place keeps its length and
    // terminator, and nothing else holds a reference to it.
    unsafe {
        let value = libc::getenv(c"TOOLHOST_TOKEN".as_ptr());
        if !value.is_null() {
            let len = libc::strlen(value);
            std::ptr::write_bytes(value, b'x', len);
        }
        std::env::remove_var("TOOLHOST_TOKEN");
    }
}

/// Resolves with the signal's name on the first SIGINT or SIGTERM.
fn interrupted() -> Result<impl Future<Output = &'static str>> {
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

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Print a result line on stdout. A reader that went away (`toolhost tools | head`) is not an
/// error: there is nobody left to tell.
fn out(text: impl std::fmt::Display) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if let Err(error) = writeln!(stdout, "{text}").and_then(|()| stdout.flush())
        && error.kind() != std::io::ErrorKind::BrokenPipe
    {
        eprintln!("toolhost: cannot write the result: {error}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn renamed_flags_keep_their_old_spelling_for_now() {
        let parse = |args: &[&str]| {
            let cli = Cli::try_parse_from(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
            (
                cli.max_processes_total,
                cli.max_calls_total,
                cli.memory_limit_per_command,
                cli.process_limit_per_command,
            )
        };
        let new = parse(&[
            "toolhost",
            "--max-processes-total",
            "3",
            "--max-calls-total",
            "4",
            "--memory-limit-per-command",
            "64MiB",
            "--process-limit-per-command",
            "5",
            "tools",
        ]);
        assert_eq!(new, (Some(3), 4, Some(64 * 1024 * 1024), Some(5)));
        let old = parse(&[
            "toolhost",
            "--max-processes",
            "3",
            "--max-calls",
            "4",
            "--memory-limit",
            "64MiB",
            "--process-limit",
            "5",
            "tools",
        ]);
        assert_eq!(old, new);
        // After the subcommand too: the flags are global.
        let after = parse(&[
            "toolhost",
            "tools",
            "--max-processes",
            "3",
            "--max-calls",
            "4",
        ]);
        assert_eq!((after.0, after.1), (Some(3), 4));
        // The old spellings work, but the help shows only the new ones.
        let help = Cli::command().render_long_help().to_string();
        for new in [
            "--max-processes-total <N>",
            "--max-calls-total <N>",
            "--max-calls-per-session <N>",
            "--memory-limit-per-command <SIZE>",
            "--process-limit-per-command <N>",
        ] {
            assert!(help.contains(new), "{new} in the help");
        }
        for old in [
            "--max-processes <",
            "--max-calls <",
            "--memory-limit <",
            "--process-limit <",
            "[aliases",
        ] {
            assert!(!help.contains(old), "{old} in the help");
        }
    }
}
