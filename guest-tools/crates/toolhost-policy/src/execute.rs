//! The `execute` tool: run a shell command in the foreground (bounded by a timeout) or in the
//! background, and report its outcome in a shape a model can act on.

use crate::args::Args;
use crate::render::{
    LogFile, Obj, bound_output, format_duration, leftover_fields, leftovers_schema, millis,
    output_file_note, process_error, tool_definition, truncation_json, truncation_schema,
};
use crate::settings::{OnTimeout, Settings};
use crate::texts::fill;
use crate::toolhost::plugin::process::{self as host, ReadFrom, Signal, StartRequest};
use crate::{Policy, deny};
use serde_json::json;
use std::time::{Duration, Instant};

/// One wait of a command whose caller waits for its end (a task); repeated until it exits.
const TASK_WAIT: Duration = Duration::from_secs(600);

/// The environment every command of `execute` gets (on a terminal, `TERM` is
/// `xterm-256color` and git may prompt), so nothing waits for a human: editors, pagers and
/// credential prompts are disabled, colours are off. A tool of a policy's own that starts
/// commands may give them the same.
pub const NON_INTERACTIVE_ENV: &[(&str, &str)] = &[
    ("GIT_EDITOR", "true"),
    ("GIT_SEQUENCE_EDITOR", "true"),
    ("EDITOR", "true"),
    ("VISUAL", "true"),
    ("GIT_TERMINAL_PROMPT", "0"),
    ("NO_COLOR", "1"),
    ("TERM", "dumb"),
    ("PAGER", "cat"),
    ("GIT_PAGER", "cat"),
    // Lets scripts know they run under an agent's tool.
    ("TOOLHOST_AGENT", "1"),
];

/// How long a killed foreground command gets to flush its last output.
const KILL_COLLECT: Duration = Duration::from_secs(2);

const ARGS: &[&str] = &[
    "command",
    "timeout",
    "workdir",
    "run_in_background",
    "tty",
    "rows",
    "cols",
    "stdin",
    "secrets",
];

/// The environment of a command on a terminal: [`NON_INTERACTIVE_ENV`] with a terminal type
/// programs know, and git allowed to prompt.
fn terminal_env() -> Vec<(String, String)> {
    NON_INTERACTIVE_ENV
        .iter()
        .filter(|(k, _)| !matches!(*k, "TERM" | "GIT_TERMINAL_PROMPT"))
        .chain(&[("TERM", "xterm-256color")])
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// What the description says about confinement: what commands may write and reach, and that
/// nothing needing new privileges works. Empty when commands run unconfined.
fn confinement_text(policy: &Policy, sandbox: &crate::SandboxSettings) -> String {
    use crate::{Mode, Network};
    let (mode, network) = policy.confinement.applied(sandbox);
    let files = match mode {
        Mode::Off => return String::new(),
        Mode::WorkspaceWrite => {
            let mut roots = "the working directory".to_string();
            for dir in &sandbox.writable {
                roots.push_str(", ");
                roots.push_str(dir);
            }
            format!(
                "Commands run confined by the host: they may read the machine (credentials such \
                 as ~/.ssh are hidden) but write only {roots}, package caches and $TMPDIR."
            )
        }
        Mode::ReadOnly => "Commands run confined by the host: they may read the machine \
                           (credentials such as ~/.ssh are hidden) but write only $TMPDIR."
            .to_string(),
    };
    let net = match network {
        Network::Full => String::new(),
        Network::Allow => format!(
            " Their network reaches only {}, through the proxy the host names in HTTPS_PROXY \
             and HTTP_PROXY; other hosts and direct DNS lookups are refused, and the output \
             names what was refused.",
            sandbox.allowed_hosts.join(", ")
        ),
        Network::None => " They have no network (downloads, package installs from the \
                          internet and DNS fail at once)."
            .to_string(),
    };
    let mut limits = Vec::new();
    if let Some(bytes) = sandbox.limits.memory_bytes {
        limits.push(format!("{} MiB of memory", bytes / (1024 * 1024)));
    }
    if let Some(processes) = sandbox.limits.processes {
        limits.push(format!("{processes} processes"));
    }
    if let Some(seconds) = sandbox.limits.cpu_seconds {
        limits.push(format!("{seconds} CPU seconds"));
    }
    let limits = if limits.is_empty() {
        String::new()
    } else {
        format!(" Each command is limited to {}.", limits.join(", "))
    };
    format!(
        " {files}{net}{limits} sudo and anything needing new privileges do not work; a command \
         refused by the confinement gets a note saying so: do not retry it unchanged."
    )
}

pub fn definition(
    policy: &Policy,
    s: &Settings,
    sandbox: &crate::SandboxSettings,
) -> crate::exports::toolhost::plugin::tool::ToolDefinition {
    let confinement = confinement_text(policy, sandbox);
    let on_timeout = match s.on_timeout {
        OnTimeout::Handover => {
            "If a foreground command outlives its timeout it is NOT killed: it keeps running as a \
             background process, and the result gives its background_process_id to follow with \
             process_output or stop with process_signal."
        }
        OnTimeout::Kill => {
            "If a foreground command outlives its timeout, it and everything it started are killed and \
             the result says so."
        }
    };
    let refusals = if policy.deny.is_empty() {
        String::new()
    } else {
        let reasons = policy
            .deny
            .iter()
            .map(|r| r.reason)
            .collect::<Vec<_>>()
            .join("; ");
        format!(
            " {}",
            fill(
                policy.texts.deny_summary,
                &[("policy", policy.name), ("reasons", &reasons)]
            )
        )
    };
    let sudo = if sandbox.mode == crate::Mode::Off && policy.confinement.mode.is_none() {
        ""
    } else {
        " (sudo and other privilege prompts cannot work: commands run confined)"
    };
    let extra = if policy.texts.execute_extra.is_empty() {
        String::new()
    } else {
        format!(
            " {}",
            fill(policy.texts.execute_extra, &[("policy", policy.name)])
        )
    };
    let description = format!(
        "Run a shell command (`sh -c`) and return its combined stdout and stderr, exit code and \
         duration. By default commands run non-interactively: stdin is empty and editors, \
         pagers and credential prompts are disabled; keep it that way whenever a command has \
         non-interactive flags (-y, --yes, --no-input). For what needs a person at a terminal \
         (REPLs such as python or psql, y/n prompts, ssh host-key questions, full-screen \
         programs such as less or top) pass tty: true: execute then returns as soon as the \
         program exits or waits for input, with its process id; answer with process_input and \
         read the screen with process_output view \"screen\"{sudo}. stdin: \"open\" gives a \
         program a stdin pipe instead, for feeding it data with process_input. For \
         servers, watchers, long builds or anything that should keep running, set \
         run_in_background to true (never end the command with `&`); then read its output with \
         process_output and stop it with process_signal. Foreground commands time out after {} \
         by default (at most {}). {on_timeout} Output longer than {} KiB keeps its beginning \
         and its end; the middle is cut and the result says how much.{confinement}{refusals}{extra}",
        format_duration(s.default_timeout),
        format_duration(s.max_timeout),
        s.output_cap_bytes / 1024,
    );
    let schema = json!({
        "type": "object",
        "properties": {
            "command": {
                "type": "string",
                "description": "The shell command to run, e.g. \"cargo test 2>&1 | tail -50\". Runs with `sh -c`; pipes, redirections and && work."
            },
            "timeout": {
                "type": "string",
                "description": format!(
                    "Foreground time limit as a duration such as \"500ms\", \"30s\" or \"5m\". Default {}, longest {}. Ignored for background commands.",
                    format_duration(s.default_timeout), format_duration(s.max_timeout)),
            },
            "workdir": {
                "type": "string",
                "description": "Directory to run in (absolute path recommended). Must exist. Default: the host's working directory."
            },
            "run_in_background": {
                "type": "boolean",
                "description": "true to start the command and return at once with a background_process_id, for servers, watchers and long jobs. Default false."
            },
            "tty": {
                "type": "boolean",
                "description": "true to run on a terminal (24x80 unless rows/cols say otherwise) for REPLs, prompts and full-screen programs; execute returns when it exits or waits for input. Default false."
            },
            "rows": {"type": "integer", "minimum": crate::interactive::ROWS.0, "maximum": crate::interactive::ROWS.1, "description": "Terminal rows (with tty). Default 24."},
            "cols": {"type": "integer", "minimum": crate::interactive::COLS.0, "maximum": crate::interactive::COLS.1, "description": "Terminal columns (with tty). Default 80."},
            "stdin": {
                "type": "string",
                "enum": ["closed", "open"],
                "description": "\"open\": give the command a stdin pipe to write with process_input (execute returns when it exits or waits for input). Default \"closed\" (empty stdin)."
            },
            "secrets": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "maxProperties": crate::secrets::MAX_SECRETS,
                "description": "Environment variables the person types in for this command only, each with what it is for, e.g. {\"GH_TOKEN\": \"a token to create the release\"}. The person enters each value on a page on their machine; you never see it, and the output shows [secret] in its place. Use it for passwords, API keys and tokens; never ask the person to paste one into the conversation."
            }
        },
        "required": ["command"],
        "additionalProperties": false
    });
    let output = json!({
        "type": "object",
        "properties": {
            "success": {"type": "boolean", "description": "Exit code 0 within the timeout (background: started)."},
            "output": {"type": "string", "description": "stdout and stderr merged; head and tail kept when long."},
            "exit_code": {"type": "integer", "description": "-1 while still running after a timeout; 128+N when killed by signal N."},
            "wall_duration_ms": {"type": "integer"},
            "error": {"type": "string", "description": "Why it failed: exit code, signal or timeout."},
            "signal": {"type": "string", "description": "The signal that killed it, e.g. SIGKILL."},
            "truncated": truncation_schema(),
            "output_file": {"type": "string", "description": "The complete output, when the text was cut."},
            "background_process_id": {"type": "string", "description": "Follow it with process_output, stop it with process_signal."},
            "waiting_for_input": {"type": "boolean", "description": "true when a tty or open-stdin command is still running and its output has gone quiet: answer it with process_input."},
            "left_running": leftovers_schema(),
            "note": {"type": "string"}
        },
        "required": ["success", "output", "wall_duration_ms"]
    });
    tool_definition(
        "execute",
        "Run a shell command",
        crate::Hints {
            read_only: false,
            destructive: true,
            idempotent: false,
            open_world: true,
        },
        description,
        schema,
        output,
    )
}

/// How a command is to be run, after argument checks and the trailing-`&` rule.
#[derive(Debug, PartialEq, Eq)]
pub struct Plan {
    pub command: String,
    pub background: bool,
    /// The trailing `&` was turned into a background run.
    pub promoted: bool,
}

/// Apply the trailing-ampersand rule: a single trailing `&` (after trimming) means
/// "background" and is stripped; `&&` and `|&` are ordinary shell syntax and stay. With
/// `run_in_background` the command is passed unchanged.
pub fn plan(command: &str, run_in_background: bool) -> Plan {
    if run_in_background {
        return Plan {
            command: command.to_string(),
            background: true,
            promoted: false,
        };
    }
    let trimmed = command.trim_end();
    if trimmed.ends_with('&') && !trimmed.ends_with("&&") && !trimmed.ends_with("|&") {
        let stripped = trimmed[..trimmed.len() - 1].trim_end().to_string();
        if !stripped.trim().is_empty() {
            return Plan {
                command: stripped,
                background: true,
                promoted: true,
            };
        }
    }
    Plan {
        command: command.to_string(),
        background: false,
        promoted: false,
    }
}

pub(crate) fn run(
    policy: &Policy,
    settings: &Settings,
    args: &str,
    cx: &crate::CallContext,
) -> Result<crate::Reply, String> {
    let args = Args::parse(args, ARGS)?;
    let command = args.required_string("command")?;
    let requested_timeout = args.duration("timeout")?;
    let workdir = args.string("workdir")?.map(str::to_string);
    let background = args.bool("run_in_background")?.unwrap_or(false);
    let stdin = crate::interactive::stdin_mode(&args)?;
    let wanted = crate::secrets::parse(args.value("secrets"))?;

    // 1. A command deny rules match runs only once the person allowed it past each of them.
    let mut approved = crate::approval::carried(cx);
    for rule in deny::matching(policy.deny, command) {
        match crate::approval::decide(policy, rule, command, cx, &approved) {
            crate::approval::Decision::Run => approved.push(rule.name.to_owned()),
            crate::approval::Decision::Ask(questions) => return Ok(crate::Reply::ask(questions)),
            crate::approval::Decision::Refuse(message) => return Err(message),
        }
    }
    // 2. A run again after the person allowed hosts its first run was refused.
    let rerun = match crate::approval::network_answer(cx) {
        crate::approval::Rerun::No => None,
        crate::approval::Rerun::Allowed(note) => Some(note),
        crate::approval::Rerun::Refused(message) => return Err(message),
    };
    // 3. Secrets the person types for this command: asked for first, then given to it.
    let carried = crate::approval::state_lines("secrets", &approved);
    let secrets = match crate::secrets::decide(command, &wanted, cx, Some(carried)) {
        crate::secrets::Secrets::Give(secrets) => secrets,
        crate::secrets::Secrets::Ask(questions) => return Ok(crate::Reply::ask(questions)),
        crate::secrets::Secrets::Refuse(message) => return Err(message),
    };

    let plan = plan(command, background);
    let mut notes: Vec<String> = Vec::new();
    if plan.promoted {
        notes.push(
            "The trailing `&` was removed and the command runs in the background; next time \
             set run_in_background to true instead."
                .to_string(),
        );
    }
    let mut timeout = requested_timeout.unwrap_or(settings.default_timeout);
    if timeout > settings.max_timeout {
        notes.push(format!(
            "The timeout {} was above this policy's maximum and was clamped to {}.",
            format_duration(timeout),
            format_duration(settings.max_timeout)
        ));
        timeout = settings.max_timeout;
    }
    notes.extend(
        crate::notes::for_command(policy.notes, &plan.command)
            .into_iter()
            .map(str::to_string),
    );

    let started = Instant::now();
    let env = match stdin {
        Some(host::StdinMode::Terminal(_)) => terminal_env(),
        _ => NON_INTERACTIVE_ENV
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    };
    let id = host::start(&StartRequest {
        command: plan.command.clone(),
        workdir,
        env,
        background: plan.background,
        confinement: policy.confinement.request(),
        stdin: stdin.unwrap_or(host::StdinMode::Closed),
        secrets,
    })
    .map_err(process_error)?;

    let mut result = Obj::default();
    if plan.background {
        let input = if stdin.is_some() {
            " Type into it with process_input."
        } else {
            ""
        };
        notes.push(format!(
            "Started in the background as process {id}. Read its output with process_output \
             (process_id \"{id}\", optionally with wait) and stop it with process_signal.{input}"
        ));
        return Ok(result
            .set("success", true)
            .set("output", "")
            .set("wall_duration_ms", millis(started.elapsed()))
            .set("background_process_id", id)
            .set("note", notes.join(" "))
            .build()
            .into());
    }

    let (mut out, waiting) = match stdin {
        Some(_) => crate::interactive::settle(&id, timeout)?,
        None => (
            host::wait(&id, millis(timeout), ReadFrom::All).map_err(process_error)?,
            false,
        ),
    };
    // A caller that waits for the result however long it takes (an MCP task) gets the
    // command's end, not a handover to the background at the timeout.
    if out.running
        && stdin.is_none()
        && settings.on_timeout == OnTimeout::Handover
        && !host::call_cancelled()
        && host::waits_for_exit()
    {
        notes.push(format!(
            "The command ran past its timeout of {}; the caller waits for its end (a task), so \
             it was not handed over to the background.",
            format_duration(timeout)
        ));
        while out.running && !host::call_cancelled() {
            out = host::wait(&id, millis(TASK_WAIT), ReadFrom::All).map_err(process_error)?;
        }
    }
    // The caller gave up on this call: stop what it started, which would otherwise run on
    // with nobody to follow it.
    if out.running && host::call_cancelled() {
        match host::send_signal(&id, Signal::Kill) {
            Ok(()) | Err(host::ProcessError::NotRunning(_)) => {}
            Err(e) => return Err(process_error(e)),
        }
        return Err(format!(
            "the call was cancelled: process {id} and everything it started were sent SIGKILL"
        ));
    }
    let mut timed_out = false;
    let mut killed = false;
    if out.running && !waiting {
        timed_out = true;
        // The host may cap a single wait below the policy's timeout (a `max_timeout` grant):
        // report the time actually waited (the process's own running time).
        let actually = Duration::from_millis(out.duration_ms);
        if actually + Duration::from_secs(1) < timeout {
            notes.push(format!(
                "The host limits a single wait to about {}.",
                format_duration(Duration::from_secs(actually.as_secs().max(1)))
            ));
            timeout = Duration::from_secs(actually.as_secs().max(1));
        }
        if settings.on_timeout == OnTimeout::Kill {
            match host::send_signal(&id, Signal::Kill) {
                Ok(()) => {
                    out = host::wait(&id, millis(KILL_COLLECT), ReadFrom::All)
                        .map_err(process_error)?;
                    killed = true;
                }
                // It finished between the wait and the signal: report it as finished.
                Err(host::ProcessError::NotRunning(_)) => {
                    out = host::read(&id, ReadFrom::All).map_err(process_error)?;
                    timed_out = out.running;
                }
                Err(e) => return Err(process_error(e)),
            }
        }
    }

    // 4. A first run the network gate refused hosts the person may allow: ask, and run it
    //    again in the next round if they do.
    if !waiting
        && !timed_out
        && rerun.is_none()
        && let Some(question) =
            crate::approval::network_question(&plan.command, &id, &out.refusals, cx, &approved)
    {
        return Ok(crate::Reply::ask(question));
    }
    notes.extend(rerun);

    let log = LogFile::of(&out);
    let left = std::mem::take(&mut out.left_running);
    let (text, truncation) = bound_output(out.text, out.truncation, settings.output_cap_bytes);
    result
        .set("output", text)
        .set("wall_duration_ms", millis(started.elapsed()));
    if let Some(t) = &truncation {
        result.set("truncated", truncation_json(t));
        result.opt("output_file", log.path.clone());
        notes.push(output_file_note(&id, &log));
    }

    if waiting {
        result
            .set("success", true)
            .set("waiting_for_input", true)
            .set("background_process_id", id.clone());
        let view = if matches!(stdin, Some(host::StdinMode::Terminal(_))) {
            " or read its screen with process_output (view \"screen\")"
        } else {
            ""
        };
        notes.push(format!(
            "Process {id} is still running and waiting for input (its output has been quiet for \
             {} ms). Answer it with process_input (process_id \"{id}\", e.g. input \"y\\n\", \
             until the next prompt){view}; stop it with process_signal.",
            crate::interactive::SETTLE.as_millis()
        ));
    } else if timed_out && !killed {
        result
            .set("success", false)
            .set("exit_code", -1)
            .set(
                "error",
                format!("timed out after {}", format_duration(timeout)),
            )
            .set("background_process_id", id.clone());
        notes.push(format!(
            "The command is STILL RUNNING as background process {id}. Follow it with \
             process_output (process_id \"{id}\", wait \"30s\" to block until it finishes) or stop \
             it with process_signal. To let a command finish in the foreground, pass a longer \
             timeout."
        ));
    } else if timed_out {
        result
            .set("success", false)
            .set("exit_code", out.exit_code.unwrap_or(-1))
            .set(
                "error",
                format!(
                    "timed out after {}; the command and everything it started were killed",
                    format_duration(timeout)
                ),
            );
        result.opt("signal", out.signal.clone());
        notes.push(fill(
            policy.texts.killed_at_timeout,
            &[
                ("policy", policy.name),
                ("max_timeout", &format_duration(settings.max_timeout)),
            ],
        ));
    } else {
        let code = out.exit_code.unwrap_or(-1);
        result.set("success", code == 0).set("exit_code", code);
        if let Some(sig) = &out.signal {
            result
                .set("signal", sig.clone())
                .set("error", format!("killed by {sig}"));
        } else if code != 0 {
            result.set("error", format!("exit code {code}"));
        }
    }
    // It exited, but what it started runs on (a server started with `&`).
    leftover_fields(&mut result, &id, &left, &mut notes);
    if !notes.is_empty() {
        result.set("note", notes.join(" "));
    }
    Ok(crate::Reply::linking(result.build(), &id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ampersand_table() {
        let cases = [
            ("sleep 1 &", false, "sleep 1", true),
            ("sleep 1 &  ", false, "sleep 1", true),
            ("a && b", false, "a && b", false),
            ("a", false, "a", false),
            ("a && b &", false, "a && b", true),
            ("a |& b", false, "a |& b", false),
            ("a |&", false, "a |&", false),
            ("server &", true, "server &", true),
            ("&", false, "&", false),
        ];
        for (input, flag, command, background) in cases {
            let p = plan(input, flag);
            assert_eq!(
                (p.command.as_str(), p.background),
                (command, background),
                "{input:?}"
            );
        }
    }
}
