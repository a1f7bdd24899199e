//! The `toolhost` command line: list the tools, call one, export the bundled policies, serve
//! them over MCP, test a plugin on scenarios, write a new policy crate.
//! Results go to stdout; logs go to stderr.
//! The commands that only the binary offers live in [`cli`], not in the library: one module
//! per command there, the flags in `cli/args.rs`.

mod cli;

use anyhow::Result;
use std::process::ExitCode;

use cli::args::{Cli, Command, PluginsCommand, parse_cli};
use cli::out;

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
    let _ = cli::serve::ENV_TOKEN.set(std::env::var("TOOLHOST_TOKEN").ok());
    cli::serve::scrub_env_token();
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

/// Run the command the command line names.
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
            let files = match cli::scenarios::collect(scenarios) {
                Ok(files) => files,
                Err(error) => return unusable(&error),
            };
            let runner = match cli::scenarios::Runner::new(plugin, manifest.as_deref(), cache) {
                Ok(runner) => runner,
                Err(error) => return unusable(&error),
            };
            // The report goes out as scenarios finish (a reader that went away is ignored).
            match cli::scenarios::run(&runner, &files, &mut std::io::stdout()).await {
                Ok((_, 0)) => Ok(ExitCode::SUCCESS),
                Ok(_) => Ok(ExitCode::FAILURE),
                Err(error) => unusable(&error),
            }
        }
        Command::NewPolicy {
            name,
            dir,
            lang,
            world,
        } => {
            let project = cli::scaffold::PluginProject::create(name, *lang, *world)?;
            let root = project.write(dir)?;
            let what = match lang {
                cli::scaffold::Lang::Rust => format!(
                    "the policy crate {} (a copy of the policy SDK is in {}/)",
                    root.display(),
                    cli::scaffold::SDK
                ),
                _ => format!(
                    "the plugin project {} (world `{}`)",
                    root.display(),
                    world.wit_name()
                ),
            };
            out(format_args!(
                "Created {what}. Next:\n{}",
                project.next_steps(&root)
            ));
            Ok(ExitCode::SUCCESS)
        }
        Command::Log {
            scope,
            since,
            failed,
            exit,
            json,
        } => cli::log::log(
            &cli,
            &cli::log::Filter {
                scope: scope.clone(),
                since: since.map(Into::into),
                failed: *failed,
                exit: *exit,
            },
            *json,
        ),
        Command::Sandbox => cli::inspect::sandbox(&cli),
        Command::Plugins {
            command: PluginsCommand::Export { dir },
        } => cli::inspect::export_plugins(dir),
        Command::Plugins {
            command: PluginsCommand::List,
        } => cli::inspect::list_plugins(&cli).await,
        Command::Tools { format } => cli::inspect::tools(&cli, format).await,
        Command::Call {
            tool,
            arguments,
            scope,
        } => cli::call::call(&cli, tool, arguments, scope).await,
        Command::Serve(args) => cli::serve::serve(&cli, args).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use clap::Parser;

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
        assert_eq!(new, (Some(3), Some(4), Some(64 * 1024 * 1024), Some(5)));
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
        assert_eq!((after.0, after.1), (Some(3), Some(4)));
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
