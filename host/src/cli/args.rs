//! The command line: the global flags ([`Cli`]) and the subcommands ([`Command`]), as clap
//! reads them. `docs/cli.md` is their reference.

use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use toolhost::sandbox::{Network, SandboxMode};

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
pub(crate) struct Cli {
    /// Load every `*.wasm` component in DIR besides the bundled policy (repeatable). A
    /// plugin's tool replaces a bundled tool of the same name.
    #[arg(long = "plugins", value_name = "DIR", global = true)]
    pub(crate) plugin_dirs: Vec<PathBuf>,

    /// The bundled policy to load: `default`, `guarded`, or `none`.
    #[arg(long, value_name = "NAME", default_value = "default", global = true)]
    pub(crate) policy: String,

    /// Directory for full process output logs (default: $XDG_STATE_HOME/toolhost/output).
    #[arg(long, value_name = "DIR", global = true)]
    pub(crate) state_dir: Option<PathBuf>,

    /// The record of commands: one JSON line per command that ended, with who asked for it,
    /// where it ran, how it ended and what the confinement refused (`toolhost log` reads it).
    /// `off`: no record. Default: `commands.jsonl` in the state directory.
    #[arg(long, value_name = "FILE|off", global = true)]
    pub(crate) record: Option<String>,

    /// The size at which the record's file is renamed to FILE.1 (replacing the older one) and
    /// begun anew (e.g. `16MiB`).
    #[arg(long, value_name = "SIZE", default_value = "16MiB", value_parser = parse_memory, global = true)]
    pub(crate) record_max_size: u64,

    /// How long full output logs are kept after their last write, also after their process,
    /// session and host are gone: a path or resource link given to a model stays valid this
    /// long. Older logs are deleted every quarter of the retention (at most 10 minutes apart):
    /// by a server while it runs, and by a host that starts when the last sweep is older.
    #[arg(long, value_name = "DURATION", default_value = "24h", global = true)]
    pub(crate) log_retention: humantime::Duration,

    /// The most disk space the output logs in the state directory may take together; past it
    /// the oldest are deleted first, at each sweep (see --log-retention: between two sweeps
    /// the logs can grow past it) (e.g. `1GiB`).
    #[arg(long, value_name = "SIZE", default_value = "1GiB", value_parser = parse_memory, global = true)]
    pub(crate) log_max_total: u64,

    /// Most processes running at once on the whole host, all sessions together (a finished
    /// command's leftovers count while they run); a start beyond is refused with a message
    /// saying so (default: half the host's descriptor limit, `ulimit -n`, at 14 descriptors a
    /// process, at most 2048).
    #[arg(long, alias = "max-processes", value_name = "N", global = true, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_processes_total: Option<u32>,

    /// Most tool calls in progress at once on the whole host, all sessions together (MCP tasks
    /// included); a call beyond is refused at once with a message saying so, nothing of it
    /// run. It also bounds the memory of the guests running calls (at most this many times the
    /// largest memory limit of a plugin). Default: 24 for each CPU the host may use, at most
    /// 256 (a host given more calls than its CPUs can run refuses the rest at once rather than
    /// slow every call down).
    #[arg(long, alias = "max-calls", value_name = "N", global = true, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_calls_total: Option<u32>,

    /// Most tool calls in progress at once in one session; a call beyond is refused at once
    /// with a message saying so, nothing of it run, while other sessions go on (see
    /// --max-calls-total for the whole host).
    #[arg(long, value_name = "N", default_value_t = toolhost::DEFAULT_MAX_CALLS_PER_SESSION as u32, global = true, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_calls_per_session: u32,

    /// Whether tools may ask the person before a step: `never` (every call is told nobody
    /// can be asked; the guarded policy refuses what its rules match) or `risky` (tools may
    /// ask an MCP client that shows forms: the guarded policy asks before a command its rules
    /// match instead of refusing it). See docs/mcp.md, "Asking the person".
    #[arg(long, value_name = "never|risky", default_value = "never", value_parser = ["never", "risky"], global = true)]
    pub(crate) ask: String,

    /// How long one round of a tool's questions waits for the person's replies; a question
    /// left unanswered then gets the reply "timed out" (and a 2026-07-28 client's retry with
    /// the answers is refused after it).
    #[arg(long, value_name = "DURATION", default_value = "10m", global = true)]
    pub(crate) ask_timeout: humantime::Duration,

    /// The workspace: default working directory of processes, and the directory confined
    /// commands may write, for every session (default: the current directory, unless it is
    /// `/`; then a session chooses its own under --workspaces-under).
    #[arg(long, value_name = "DIR", global = true)]
    pub(crate) workdir: Option<PathBuf>,

    /// A parent under which a session may choose its own workspace, when --workdir is not
    /// given: a root its MCP client offers, or a call's `workdir`, under DIR makes that project
    /// the session's workspace (repeatable; default: the user's home directories; never a home
    /// itself, a dot-directory or a directory of PATH). `none` keeps every session on the
    /// host's workspace.
    #[arg(long, value_name = "DIR", global = true)]
    pub(crate) workspaces_under: Vec<PathBuf>,

    /// Shell that runs commands as `SHELL -c COMMAND` (default: /bin/sh).
    #[arg(long, value_name = "PATH", global = true)]
    pub(crate) shell: Option<PathBuf>,

    /// Do not cache compiled components on disk.
    #[arg(long, global = true)]
    pub(crate) no_cache: bool,

    /// How commands are confined: `workspace-write` (read everything but secrets such as
    /// ~/.ssh, write the workdir, the --writable paths, package caches and the session's
    /// private /tmp), `read-only` (write nothing but the private /tmp) or `off` (unconfined). A
    /// policy may ask for stricter, never looser. See `toolhost sandbox`.
    #[arg(long = "sandbox", value_name = "MODE", default_value = "workspace-write", value_parser = parse_mode, global = true)]
    pub(crate) sandbox_mode: SandboxMode,

    /// Network access of confined commands: `full`, `none` (no sockets but Unix ones), or
    /// `allow=HOST[,HOST...]`: only those hosts, through a proxy of the host's (`example.com`,
    /// `*.example.com`, an address; each with an optional `:PORT`; repeatable). `ask` or
    /// `ask=HOST[,HOST...]` (with `--ask risky`): a session's person may allow more hosts
    /// (any, or those within the patterns) when a policy asks; alone, nothing is reachable
    /// until allowed.
    #[arg(long, value_name = "ACCESS", value_parser = parse_network, global = true)]
    pub(crate) network: Vec<NetworkFlag>,

    /// A directory confined commands may write besides the workdir (repeatable; `/tmp` shares
    /// the host's /tmp with them instead of a private one).
    #[arg(long, value_name = "DIR", global = true)]
    pub(crate) writable: Vec<PathBuf>,

    /// Hide PATH from confined commands besides the credential stores hidden by default
    /// (repeatable; `toolhost sandbox` lists the effective list).
    #[arg(long, value_name = "PATH", global = true)]
    pub(crate) hide: Vec<PathBuf>,

    /// Let confined commands read PATH although it is hidden by default, e.g. `~/.npmrc` for
    /// a private registry (repeatable; only paths of the default list).
    #[arg(long, value_name = "PATH", global = true)]
    pub(crate) reveal: Vec<PathBuf>,

    /// Whether files under the home's configuration trees that hold a secret (a private key, a
    /// token, a password) are found at start and hidden like the list (`toolhost sandbox`
    /// lists them; --reveal takes one out).
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = ["on", "off"], global = true)]
    pub(crate) secret_scan: String,
    /// Let confined commands connect to the Unix socket PATH (or any under the directory
    /// PATH), e.g. a database's; by default they reach only sockets in the workspace, the
    /// writable directories and their session's own /tmp (repeatable).
    #[arg(long, value_name = "PATH", global = true)]
    pub(crate) allow_unix_socket: Vec<PathBuf>,

    /// Memory each confined command may use, everything it started included (a memory
    /// cgroup per command; where the host may not create one, per process with RLIMIT_DATA),
    /// e.g. `4GiB` (default: half the machine's memory).
    #[arg(long, alias = "memory-limit", value_name = "SIZE", value_parser = parse_memory, global = true)]
    pub(crate) memory_limit_per_command: Option<u64>,

    /// Processes each confined command may have at once, everything it started included
    /// (default 1024; needs a pids cgroup the host may create, see `toolhost sandbox`; see
    /// --max-processes-total for the whole host).
    #[arg(long, alias = "process-limit", value_name = "N", value_parser = clap::value_parser!(u32).range(1..), global = true)]
    pub(crate) process_limit_per_command: Option<u32>,

    /// Memory of one session's confined commands together, everything they started included,
    /// e.g. `8GiB` (default: half the machine's memory; needs a memory cgroup the host may
    /// create, see `toolhost sandbox`).
    #[arg(long, value_name = "SIZE", value_parser = parse_memory, global = true)]
    pub(crate) memory_limit_per_session: Option<u64>,

    /// Memory of every session's confined commands together, e.g. `16GiB` (default: three
    /// quarters of the machine's memory; needs a memory cgroup the host may create).
    #[arg(long, value_name = "SIZE", value_parser = parse_memory, global = true)]
    pub(crate) memory_limit_total: Option<u64>,

    /// Size of the `/dev/shm` of a session's own (a tmpfs in its mount namespace, one per
    /// session and profile), e.g. `1GiB` (default: 512MiB). Without namespaces, confined
    /// commands cannot write `/dev/shm` at all.
    #[arg(long, value_name = "SIZE", value_parser = parse_memory, global = true)]
    pub(crate) shm_size_per_session: Option<u64>,

    /// Most bytes a session's own `/tmp` holds (its writes go to a tmpfs in its mount
    /// namespace, above the host's `/tmp`), e.g. `4GiB` (default: 1GiB). Without namespaces,
    /// confined commands write the host's `/tmp` and their own `$TMPDIR` instead, unbounded.
    #[arg(long, value_name = "SIZE", value_parser = parse_memory, global = true)]
    pub(crate) tmp_size_per_session: Option<u64>,

    /// Let confined commands write what runs later outside the sandbox: git hooks and the git
    /// settings that run programs (`core.hooksPath`, `core.fsmonitor`, `include.path`, ...) in
    /// the writable directories' repositories, and shell start-up files of a home inside one.
    /// By default these are read-only where namespaces work, and a confined command's changes
    /// to them are undone (see docs/confinement.md).
    #[arg(long, global = true)]
    pub(crate) allow_hook_writes: bool,

    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Print the record of commands (--record), oldest first: a line per command, or its
    /// JSON with --json.
    #[command(after_help = "Example:\n  toolhost log --since 1h --failed")]
    Log {
        /// Only the commands of this scope (session).
        #[arg(long, value_name = "ID")]
        scope: Option<String>,
        /// Only the commands that ended within this long, e.g. `1h` or `30m`.
        #[arg(long, value_name = "DURATION")]
        since: Option<humantime::Duration>,
        /// Only the commands that failed: a non-zero exit, a signal, or a refusal.
        #[arg(long)]
        failed: bool,
        /// Only the commands that exited with this code.
        #[arg(long, value_name = "CODE")]
        exit: Option<i32>,
        /// Print each command's JSON line as the record holds it.
        #[arg(long)]
        json: bool,
    },
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
    /// Write a new plugin project DIR/NAME: a Rust policy crate, or a Python or JavaScript
    /// plugin.
    ///
    /// The Rust crate holds the standard tools written with the policy SDK (a copy of this
    /// version's SDK is inside) and builds offline for wasm32-wasip2. A Python or JavaScript
    /// project holds one tool, a copy of the WIT contract and its pinned toolchain, installed
    /// from the package registries. Each has a manifest and scenarios for `toolhost test`. An
    /// existing DIR/NAME is left alone. docs/writing-a-policy.md goes on from there.
    #[command(
        after_help = "Examples:\n  toolhost new-policy my-policy --dir ~/src\n  toolhost new-policy my-tool --lang python --world tools"
    )]
    NewPolicy {
        /// The project's and the plugin's name: lowercase letters, digits, `-` and `_`.
        name: String,
        /// The directory to write the project in (created if missing).
        #[arg(long, value_name = "DIR", default_value = ".")]
        dir: PathBuf,
        /// The language to write the plugin in.
        #[arg(long, value_enum, default_value = "rust")]
        lang: crate::cli::scaffold::Lang,
        /// The WIT world: `shell-tools` (its tools may start processes) or `tools` (no
        /// process access; Python and JavaScript only).
        #[arg(long, value_enum, default_value = "shell-tools")]
        world: crate::cli::scaffold::World,
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
    Serve(crate::cli::serve::ServeArgs),
}

pub(crate) fn parse_mode(text: &str) -> Result<SandboxMode, String> {
    SandboxMode::parse(text)
        .ok_or_else(|| format!("`{text}` is not one of workspace-write, read-only, off"))
}

/// One `--network` value: an access, or what a session's person may allow.
#[derive(Debug, Clone)]
pub(crate) enum NetworkFlag {
    /// `full`, `none` or `allow=...`.
    Access(Network),
    /// `ask` or `ask=...`.
    Ask(toolhost::sandbox::network::Askable),
}

pub(crate) fn parse_network(text: &str) -> Result<NetworkFlag, String> {
    use toolhost::sandbox::network::{AllowList, Askable};
    match text.trim() {
        "ask" => Ok(NetworkFlag::Ask(Askable::Any)),
        other => match other.strip_prefix("ask=") {
            Some(list) => AllowList::parse(list)
                .map(|list| NetworkFlag::Ask(Askable::Within(list)))
                .map_err(|error| error.to_string()),
            None => Network::parse_setting(text)
                .map(NetworkFlag::Access)
                .map_err(|error| format!("{error}, ask, ask=HOST[,HOST...]")),
        },
    }
}

pub(crate) fn parse_memory(text: &str) -> Result<u64, String> {
    toolhost::sandbox::parse_size(text)
        .ok_or_else(|| format!("`{text}` is not a size like 512MiB or 4GiB"))
}

#[derive(Subcommand)]
pub(crate) enum PluginsCommand {
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
pub(crate) enum Format {
    /// `{name, description, input_schema}`.
    Plain,
    /// MCP `tools/list` entries: `{name, description, inputSchema}`.
    Mcp,
    /// OpenAI function tools: `{type: "function", function: {name, description, parameters}}`.
    Openai,
    /// Anthropic tools: `{name, description, input_schema}`.
    Anthropic,
}

impl Cli {
    /// `--max-calls-total`, or its default for this machine's CPUs.
    pub(crate) fn calls_total(&self) -> usize {
        self.max_calls_total
            .map_or_else(toolhost::default_max_calls_total, |n| n as usize)
    }
}

/// The command line, with a version text that names the WIT versions this host serves.
pub(crate) fn parse_cli() -> Result<Cli, clap::Error> {
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
