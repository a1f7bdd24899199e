//! The tools that follow processes after `execute` started them: `process_output`,
//! `process_list` and `process_signal`.

use crate::args::{Args, describe};
use crate::exports::toolhost::plugin::tool::ToolDefinition;
use crate::render::{
    Obj, PageRequest, describe_output, format_duration, leftover_fields, leftovers_json,
    leftovers_named, leftovers_schema, millis, page_note, process_error, screen_fields,
    tool_definition, truncation_schema,
};
use crate::settings::Settings;
use crate::toolhost::plugin::process::{self as host, ReadFrom, Signal};
use serde_json::{Map, Value, json};
use std::time::{Duration, Instant};

/// Longest command text shown in a listing.
const LIST_COMMAND_CHARS: usize = 80;
/// How long process_signal waits to report whether the process is gone.
const SIGNAL_SETTLE: Duration = Duration::from_secs(1);
/// How often process_signal looks whether what a process left running is gone.
const SETTLE_STEP: Duration = Duration::from_millis(50);

pub fn output_definition() -> ToolDefinition {
    tool_definition(
        "process_output",
        "Read a process's output",
        crate::Hints {
            read_only: true,
            destructive: false,
            idempotent: false,
            open_world: false,
        },
        "Read the output of a process started by execute (a background process, or a \
         foreground one that outlived its timeout), with whether it is still running and its \
         exit code. Pass wait (e.g. \"30s\") to block until the process exits or the wait \
         elapses, whichever is first. Pass only_new: true to get just the output produced since \
         your previous read of this process. For a process on a terminal (execute with tty), \
         output is shown as a log (colours and cursor movement removed, a progress bar in its \
         last state); view \"screen\" returns the terminal's visible screen instead (rows of \
         text and the cursor), for full-screen programs. Output longer than a result holds keeps \
         its beginning and its end; offset and length page through all of it instead (the host's \
         log of the complete output): offset in bytes from the start, or from the end when \
         negative (-5000: the last 5000 bytes), and the result says where the next page starts \
         and how many bytes there are in all. A process that exited but left processes running \
         lists them in left_running; process_signal stops them."
            .to_string(),
        json!({
            "type": "object",
            "properties": {
                "process_id": {"type": "string", "description": "The id from execute's background_process_id or from process_list."},
                "wait": {"type": "string", "description": "Block up to this long (\"10s\", \"2m\") for the process to exit before reading. Default: read at once."},
                "only_new": {"type": "boolean", "description": "true: only output written since the previous process_output read of this process. Default false: all retained output."},
                "view": {"type": "string", "enum": ["stream", "screen"], "description": "\"stream\" (default): the output as a log. \"screen\": the visible screen of a process on a terminal."},
                "offset": {"type": "integer", "description": "Page through the complete output from this byte: 0 is the start, a negative number counts from the end (-5000: the last 5000 bytes). The result's note says where the next page starts. Not with only_new or view \"screen\"."},
                "length": {"type": "integer", "minimum": 1, "description": "Most bytes of the page that offset starts (at most this policy's output cap, which is also the default)."}
            },
            "required": ["process_id"],
            "additionalProperties": false
        }),
        json!({
            "type": "object",
            "properties": {
                "process_id": {"type": "string"},
                "running": {"type": "boolean"},
                "exit_code": {"type": "integer", "description": "Once exited; 128+N when killed by signal N."},
                "signal": {"type": "string", "description": "The signal that killed it, e.g. SIGKILL."},
                "output": {"type": "string"},
                "duration_ms": {"type": "integer"},
                "truncated": truncation_schema(),
                "output_file": {"type": "string", "description": "The complete output, when the text was cut."},
                "offset": {"type": "integer", "description": "With offset/length: the byte the page starts at."},
                "next_offset": {"type": "integer", "description": "With offset/length: where the next page starts (pass it as offset)."},
                "total_bytes": {"type": "integer", "description": "With offset/length: bytes of output the host's log holds in all."},
                "left_running": leftovers_schema(),
                "cursor": {"type": "object", "description": "Screen view: the cursor's row and column (0-based) and whether it is hidden."},
                "size": {"type": "object", "description": "Screen view: the terminal's rows and cols."},
                "full_screen": {"type": "boolean", "description": "Screen view: the program shows its full-screen (alternate) screen."},
                "note": {"type": "string"}
            },
            "required": ["process_id", "running", "output", "duration_ms"]
        }),
    )
}

pub fn list_definition() -> ToolDefinition {
    tool_definition(
        "process_list",
        "List processes",
        crate::Hints {
            read_only: true,
            destructive: false,
            idempotent: true,
            open_world: false,
        },
        "List the processes this session started: running ones first, then the most recent. \
         Each entry has the id (for process_output and process_signal), the command, whether it \
         is running, its exit code and start time. An exited process that left processes running \
         lists them in left_running (pid and command): read their output with process_output and \
         stop them with process_signal, by that id. Exited processes are forgotten a few minutes \
         after they end."
            .to_string(),
        json!({"type": "object", "properties": {}, "additionalProperties": false}),
        json!({
            "type": "object",
            "properties": {
                "processes": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "string"},
                            "command": {"type": "string"},
                            "running": {"type": "boolean"},
                            "exit_code": {"type": "integer"},
                            "signal": {"type": "string"},
                            "started_ms": {"type": "integer", "description": "Unix milliseconds."},
                            "background": {"type": "boolean"},
                            "sandbox": {"type": "string", "description": "The confinement it runs under."},
                            "input": {"type": "string", "description": "\"terminal ROWSxCOLS\" or \"stdin pipe\" for a process that takes input (process_input)."},
                            "left_running": leftovers_schema()
                        },
                        "required": ["id", "command", "running", "started_ms", "background"]
                    }
                },
                "omitted": {"type": "integer", "description": "Older exited processes not listed (running ones are always listed)."},
                "note": {"type": "string"}
            },
            "required": ["processes"]
        }),
    )
}

pub fn signal_definition() -> ToolDefinition {
    tool_definition(
        "process_signal",
        "Stop or interrupt a process",
        crate::Hints {
            read_only: false,
            destructive: true,
            idempotent: false,
            open_world: false,
        },
        "Stop or interrupt a process started by execute, together with every process it \
         started. signal: \"terminate\" (SIGTERM, then SIGKILL if it is still alive after a \
         grace period; the default), \"kill\" (SIGKILL at once) or \"interrupt\" (SIGINT, like \
         Ctrl-C). A process that has exited but left processes running (left_running in \
         process_list and process_output) can be signalled too: that stops what it left running."
            .to_string(),
        json!({
            "type": "object",
            "properties": {
                "process_id": {"type": "string", "description": "The id from execute or process_list."},
                "signal": {"type": "string", "enum": ["terminate", "kill", "interrupt"], "description": "Which signal to send. Default \"terminate\"."}
            },
            "required": ["process_id"],
            "additionalProperties": false
        }),
        json!({
            "type": "object",
            "properties": {
                "process_id": {"type": "string"},
                "signal": {"type": "string", "description": "The signal sent."},
                "running": {"type": "boolean", "description": "Whether it was still running a moment later."},
                "exit_code": {"type": "integer"},
                "signal_received": {"type": "string", "description": "The signal it died of."},
                "left_running": leftovers_schema(),
                "message": {"type": "string"}
            },
            "required": ["process_id", "signal", "running", "message"]
        }),
    )
}

const OUTPUT_ARGS: &[&str] = &["process_id", "wait", "only_new", "view", "offset", "length"];

pub(crate) fn output(settings: &Settings, args: &str) -> Result<crate::Reply, String> {
    let args = Args::parse(args, OUTPUT_ARGS)?;
    let id = args.required_string("process_id")?;
    let screen = match args.string("view")?.map(str::trim) {
        None | Some("stream") => false,
        Some("screen") => true,
        Some(other) => {
            return Err(format!(
                "`view` must be \"stream\" or \"screen\", got \"{other}\""
            ));
        }
    };
    let mut wait = args.duration("wait")?;
    let mut clamped = None;
    if let Some(w) = wait.filter(|w| *w > settings.max_timeout) {
        clamped = Some(w);
        wait = Some(settings.max_timeout);
    }
    let only_new = args.bool("only_new")?.unwrap_or(false);
    let page = page_request(&args, settings)?;
    if page.is_some() && screen {
        return Err(
            "`offset` and `length` page through the complete output log; they do not go with \
             view \"screen\""
                .to_string(),
        );
    }
    if page.is_some() && only_new {
        return Err(
            "`only_new` does not go with `offset` and `length`: those page through the complete \
             output by byte position (the note of each page says where the next one starts)"
                .to_string(),
        );
    }
    let from = if only_new {
        ReadFrom::Unread
    } else {
        ReadFrom::All
    };
    // A page reads the log: the process's state is read without moving its unread mark.
    let from = if page.is_some() {
        ReadFrom::Cursor(u64::MAX)
    } else {
        from
    };
    let mut out = match wait {
        Some(w) => host::wait(id, millis(w), from),
        None => host::read(id, from),
    }
    .map_err(process_error)?;
    let mut notes = Vec::new();
    let mut result = if let Some(request) = page {
        let left = std::mem::take(&mut out.left_running);
        let page = host::read_log(id, request.offset, request.length).map_err(|e| match e {
            host::ProcessError::InvalidRequest(m) => format!(
                "{m}. Without offset and length, process_output returns the output the host \
                 retains (its beginning and its end)."
            ),
            other => process_error(other),
        })?;
        let mut r = Obj::default();
        r.set("process_id", id)
            .set("running", out.running)
            .opt("exit_code", out.exit_code)
            .opt("signal", out.signal)
            .set("duration_ms", out.duration_ms)
            .set("offset", page.offset)
            .set("next_offset", page.next_offset)
            .set("total_bytes", page.total_bytes);
        notes.push(page_note(&page, &request));
        r.set("output", page.text);
        leftover_fields(&mut r, id, &left, &mut notes);
        r.build()
    } else if screen {
        let view = host::read_screen(id).map_err(|e| match e {
            host::ProcessError::InvalidRequest(m) => format!("{m}; use view \"stream\""),
            other => process_error(other),
        })?;
        let mut r = Obj::default();
        r.set("process_id", id)
            .set("running", out.running)
            .opt("exit_code", out.exit_code)
            .opt("signal", out.signal)
            .set("duration_ms", out.duration_ms);
        screen_fields(&mut r, view);
        leftover_fields(&mut r, id, &out.left_running, &mut notes);
        r.build()
    } else {
        describe_output(settings, id, out, &mut notes)
    };
    if let Some(asked) = clamped {
        notes.push(format!(
            "The wait {} was above this policy's maximum and was clamped to {}.",
            format_duration(asked),
            format_duration(settings.max_timeout)
        ));
    }
    if let (Some(w), Some(Value::Bool(true))) = (wait, result.get("running")) {
        notes.push(format!(
            "Still running after waiting {}. Call process_output again (only_new: true reads just what is new), or stop it with process_signal.",
            format_duration(w)
        ));
    }
    if !notes.is_empty() {
        result.insert("note".into(), Value::String(notes.join(" ")));
    }
    Ok(crate::Reply::linking(result, id))
}

/// The page `offset` and `length` ask for; `None` when neither is given. `offset` defaults to
/// the start and `length` to the policy's output cap, above which it is lowered.
pub(crate) fn page_request(
    args: &Args,
    settings: &Settings,
) -> Result<Option<PageRequest>, String> {
    let offset = match args.value("offset") {
        None => None,
        Some(Value::Number(n)) if n.as_i64().is_some() => n.as_i64(),
        Some(other) => {
            return Err(format!(
                "`offset` must be a whole number of bytes (negative counts from the end of the \
                 output), got {}",
                describe(other)
            ));
        }
    };
    let length = match args.value("length") {
        None => None,
        Some(Value::Number(n)) if n.as_u64().is_some_and(|n| n > 0) => n.as_u64(),
        Some(other) => {
            return Err(format!(
                "`length` must be a whole number of bytes, at least 1, got {}",
                describe(other)
            ));
        }
    };
    if offset.is_none() && length.is_none() {
        return Ok(None);
    }
    let cap = settings.output_cap_bytes as u64;
    let asked = length.unwrap_or(cap);
    Ok(Some(PageRequest {
        offset: offset.unwrap_or(0),
        length: asked.min(cap),
        clamped_from: (asked > cap).then_some(asked),
    }))
}

pub fn list(settings: &Settings, args: &str) -> Result<Map<String, Value>, String> {
    Args::parse(args, &[])?;
    let all = host::list();
    let total = all.len();
    // Every running process (the host caps how many a session has), then the most recent
    // exited ones up to the limit.
    let shown = all.iter().filter(|p| p.running).count() + settings.list_limit;
    let mut notes = Vec::new();
    let entries: Vec<Value> = all
        .into_iter()
        .take(shown)
        .map(|p| {
            let mut e = Obj::default();
            if !p.left_running.is_empty() {
                let (count, named) = leftovers_named(&p.left_running);
                notes.push(format!(
                    "Process {} has exited but left {count} running ({named}): read their output \
                     with process_output and stop them with process_signal (process_id \"{}\").",
                    p.id, p.id
                ));
                e.set("left_running", leftovers_json(&p.left_running));
            }
            e.set("id", p.id)
                .set("command", shorten(&p.command, LIST_COMMAND_CHARS))
                .set("running", p.running)
                .opt("exit_code", p.exit_code)
                .opt("signal", p.signal)
                .set("started_ms", p.started_ms)
                .set("background", p.background)
                .set("sandbox", p.profile);
            match p.stdin {
                host::StdinMode::Closed => {}
                host::StdinMode::Pipe => {
                    e.set("input", "stdin pipe");
                }
                host::StdinMode::Terminal(size) => {
                    e.set("input", format!("terminal {}x{}", size.rows, size.cols));
                }
            }
            Value::Object(e.build())
        })
        .collect();
    let mut r = Obj::default();
    r.set("processes", entries);
    if total > shown {
        r.set("omitted", total - shown);
        notes.push(format!(
            "{} older exited processes are not shown.",
            total - shown
        ));
    }
    if !notes.is_empty() {
        r.set("note", notes.join(" "));
    }
    Ok(r.build())
}

pub fn signal(args: &str) -> Result<Map<String, Value>, String> {
    let args = Args::parse(args, &["process_id", "signal"])?;
    // Check the signal before the id, so a bad signal is reported even for a bad id.
    let signal = match args.string("signal")?.map(str::trim) {
        None | Some("terminate") => Signal::Terminate,
        Some("kill") => Signal::Kill,
        Some("interrupt") => Signal::Interrupt,
        Some(other) => {
            return Err(format!(
                "unknown signal \"{other}\"; use \"terminate\", \"kill\" or \"interrupt\""
            ));
        }
    };
    let id = args.required_string("process_id")?;
    // Whether it had exited already, leaving processes running: then the signal is for those.
    let before = host::read(id, ReadFrom::Cursor(u64::MAX)).map_err(process_error)?;
    host::send_signal(id, signal).map_err(process_error)?;
    let name = match signal {
        Signal::Terminate => "terminate",
        Signal::Kill => "kill",
        Signal::Interrupt => "interrupt",
    };
    // Give it a moment to go, so the answer can say whether it did.
    let settled = Instant::now() + SIGNAL_SETTLE;
    let mut out =
        host::wait(id, millis(SIGNAL_SETTLE), ReadFrom::Cursor(u64::MAX)).map_err(process_error)?;
    // The wait ends at the exit: what it left running gets the rest of that moment.
    while !out.running && !out.left_running.is_empty() && Instant::now() < settled {
        std::thread::sleep(SETTLE_STEP);
        out = host::read(id, ReadFrom::Cursor(u64::MAX)).map_err(process_error)?;
    }
    let mut r = Obj::default();
    r.set("process_id", id)
        .set("signal", name)
        .set("running", out.running)
        .opt("exit_code", out.exit_code)
        .opt("signal_received", out.signal);
    if !out.left_running.is_empty() {
        r.set("left_running", leftovers_json(&out.left_running));
    }
    let message = if !before.running && !before.left_running.is_empty() {
        left_running_message(signal, &before.left_running, &out.left_running)
    } else if out.running {
        match signal {
            Signal::Terminate => {
                "SIGTERM sent to the process and everything it started; it is still running and gets SIGKILL if it has not exited after the grace period."
            }
            Signal::Kill => {
                "SIGKILL sent to the process and everything it started; it has not been reaped yet."
            }
            Signal::Interrupt => {
                "SIGINT sent to the process and everything it started; it is still running. Use terminate or kill to stop it."
            }
        }
        .to_string()
    } else if !out.left_running.is_empty() {
        let (count, named) = leftovers_named(&out.left_running);
        format!(
            "The process has exited, but {count} it started still run ({named}): signal it again \
             (terminate or kill) to stop them."
        )
    } else {
        "The process has exited.".to_string()
    };
    r.set("message", message);
    Ok(r.build())
}

/// What `process_signal` says of a process that had exited before the signal, leaving
/// `before` running, of which `after` still run a moment later.
pub(crate) fn left_running_message(
    signal: Signal,
    before: &[host::Leftover],
    after: &[host::Leftover],
) -> String {
    let (count, named) = leftovers_named(before);
    if after.is_empty() {
        return format!(
            "The process had already exited; stopped {count} it left running ({named})."
        );
    }
    let (still, still_named) = leftovers_named(after);
    let one = after.len() == 1;
    let (what, then) = match signal {
        Signal::Terminate => (
            "SIGTERM",
            if one {
                "it gets SIGKILL after the grace period"
            } else {
                "they get SIGKILL after the grace period"
            },
        ),
        Signal::Kill => ("SIGKILL", "not reaped yet"),
        Signal::Interrupt => ("SIGINT", "use terminate or kill to stop them"),
    };
    let stopped = before.len().saturating_sub(after.len());
    format!(
        "The process had already exited; {what} sent to the {count} it left running ({named}). \
         Stopped {stopped} of them; {still} still {} ({still_named}): {then}.",
        if one { "runs" } else { "run" }
    )
}

fn shorten(text: &str, max_chars: usize) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= max_chars {
        return one_line;
    }
    let mut s: String = one_line.chars().take(max_chars - 1).collect();
    s.push('…');
    s
}
