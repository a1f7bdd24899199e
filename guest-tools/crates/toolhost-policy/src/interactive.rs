//! Interactive processes: the `process_input` tool, named keys, the screen view, and how
//! `execute` returns for a command on a terminal or with an open stdin (as soon as it exits
//! or waits for input).

use crate::args::Args;
use crate::exports::toolhost::plugin::tool::ToolDefinition;
use crate::render::{
    describe_output, format_duration, millis, process_error, tool_definition, truncation_schema,
};
use crate::settings::Settings;
use crate::toolhost::plugin::process::{self as host, Key, Output, ReadFrom, Until};
use serde_json::{Value, json};
use std::time::Duration;

/// Output quiet this long means the program waits for input.
pub const SETTLE: Duration = Duration::from_millis(200);
/// How long `execute` waits for a program's first output before returning it as silent.
pub const FIRST_OUTPUT: Duration = Duration::from_secs(2);
/// Default `wait` of process_input.
const DEFAULT_WAIT: Duration = Duration::from_secs(5);
/// Terminal bounds (the host refuses anything outside them).
pub const ROWS: (u64, u64) = (2, 200);
pub const COLS: (u64, u64) = (10, 500);

/// Every key name process_input accepts, for descriptions and errors.
const KEY_NAMES: &str = "Enter, Tab, Esc, Backspace, Up, Down, Left, Right, Home, End, \
                         PageUp, PageDown, F1-F12, Ctrl-A to Ctrl-Z";

/// A key by its name (case does not matter): `Enter`, `Ctrl-C`, `F5`, ...
pub fn key(name: &str) -> Result<Key, String> {
    let lower = name.trim().to_ascii_lowercase();
    let key = match lower.as_str() {
        "enter" | "return" => Key::Enter,
        "tab" => Key::Tab,
        "esc" | "escape" => Key::Escape,
        "backspace" => Key::Backspace,
        "up" => Key::Up,
        "down" => Key::Down,
        "left" => Key::Left,
        "right" => Key::Right,
        "home" => Key::Home,
        "end" => Key::End,
        "pageup" | "page-up" => Key::PageUp,
        "pagedown" | "page-down" => Key::PageDown,
        other => {
            if let Some(n) = other.strip_prefix('f').and_then(|n| n.parse::<u8>().ok())
                && (1..=12).contains(&n)
            {
                Key::Function(n)
            } else if let Some(c) = other
                .strip_prefix("ctrl-")
                .or_else(|| other.strip_prefix("ctrl+"))
                .or_else(|| other.strip_prefix("c-"))
                .filter(|c| c.len() == 1)
                .and_then(|c| c.chars().next())
                .filter(char::is_ascii_lowercase)
            {
                Key::Ctrl(c)
            } else {
                return Err(format!(
                    "unknown key name \"{name}\"; known keys: {KEY_NAMES}. Nothing was sent."
                ));
            }
        }
    };
    Ok(key)
}

/// The terminal mode for `execute`'s `tty`, `rows`, `cols` and `stdin` arguments; `None`
/// for the default (stdin closed).
pub fn stdin_mode(args: &Args) -> Result<Option<host::StdinMode>, String> {
    let tty = args.bool("tty")?.unwrap_or(false);
    let rows = args.integer("rows", ROWS.0, ROWS.1)?;
    let cols = args.integer("cols", COLS.0, COLS.1)?;
    let stdin = args.string("stdin")?.map(str::trim);
    let open = match stdin {
        None | Some("closed") => false,
        Some("open") => true,
        Some(other) => {
            return Err(format!(
                "`stdin` must be \"closed\" or \"open\", got \"{other}\""
            ));
        }
    };
    if !tty && (rows.is_some() || cols.is_some()) {
        return Err("`rows` and `cols` size a terminal: pass them with tty: true".to_string());
    }
    Ok(if tty {
        Some(host::StdinMode::Terminal(host::TerminalSize {
            rows: rows.unwrap_or(24) as u16,
            cols: cols.unwrap_or(80) as u16,
        }))
    } else if open {
        Some(host::StdinMode::Pipe)
    } else {
        None
    })
}

/// For `execute`: wait until an interactive command exits, waits for input (its output quiet
/// for [`SETTLE`] after its first output, or no output at all for [`FIRST_OUTPUT`]) or
/// `timeout` passes. Returns the output and whether it is waiting for input.
pub fn settle(id: &str, timeout: Duration) -> Result<(Output, bool), String> {
    let first = FIRST_OUTPUT.min(timeout);
    let out = host::wait_until(id, &Until::Output, millis(first), ReadFrom::All)
        .map_err(process_error)?;
    if !out.running {
        return Ok((out, false));
    }
    if out.cursor == 0 {
        // Silent so far: most likely waiting for input without a prompt.
        let waiting = out.duration_ms < millis(timeout);
        return Ok((out, waiting));
    }
    let left = timeout.saturating_sub(Duration::from_millis(out.duration_ms));
    let out = host::wait_until(
        id,
        &Until::Quiet(millis(SETTLE)),
        millis(left),
        ReadFrom::All,
    )
    .map_err(process_error)?;
    let waiting = out.running && Duration::from_millis(out.duration_ms) < timeout;
    Ok((out, waiting))
}

pub fn input_definition() -> ToolDefinition {
    tool_definition(
        "process_input",
        "Type into a process",
        crate::Hints {
            read_only: false,
            destructive: true,
            idempotent: false,
            open_world: true,
        },
        format!(
            "Type into a process started by execute with tty: true (a terminal) or stdin: \
             \"open\", then return the output it produced since. input is literal text; \\n is \
             Enter. keys are named keys sent after the text: {KEY_NAMES} (on a terminal Ctrl-C \
             interrupts and Ctrl-D at the start of a line is end-of-file). rows and cols resize \
             the terminal. Returns as soon as the new output contains until (if given), else \
             once the output has been quiet for {} ms, at wait (default {}) or when the process \
             exits. Pass neither input nor keys to just wait for output. eof: true closes an \
             open stdin after the input (end-of-file for the program).",
            SETTLE.as_millis(),
            format_duration(DEFAULT_WAIT)
        ),
        json!({
            "type": "object",
            "properties": {
                "process_id": {"type": "string", "description": "The id execute returned (background_process_id) or from process_list."},
                "input": {"type": "string", "description": "Text to type; \"\\n\" is Enter. E.g. \"print(1+1)\\n\" or \"y\\n\"."},
                "keys": {"type": "array", "items": {"type": "string"}, "description": format!("Named keys sent after input, e.g. [\"Down\", \"Enter\"] or [\"Ctrl-C\"]. Known: {KEY_NAMES}.")},
                "until": {"type": "string", "description": "Return as soon as the new output contains this text, e.g. the prompt \">>> \"."},
                "wait": {"type": "string", "description": format!("Longest time to wait for output, e.g. \"2s\", \"1m\". Default {}.", format_duration(DEFAULT_WAIT))},
                "rows": {"type": "integer", "minimum": ROWS.0, "maximum": ROWS.1, "description": "Resize the terminal to this many rows (before the input)."},
                "cols": {"type": "integer", "minimum": COLS.0, "maximum": COLS.1, "description": "Resize the terminal to this many columns (before the input)."},
                "eof": {"type": "boolean", "description": "true: close the stdin pipe after the input (stdin: \"open\" only; on a terminal send the key Ctrl-D)."}
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
                "signal": {"type": "string", "description": "The signal that killed it, e.g. SIGINT."},
                "output": {"type": "string", "description": "Output since the input (a terminal's echo of it included)."},
                "until_found": {"type": "boolean", "description": "Whether the until text appeared."},
                "duration_ms": {"type": "integer"},
                "truncated": truncation_schema(),
                "output_file": {"type": "string", "description": "The complete output, when the text was cut."},
                "left_running": crate::render::leftovers_schema(),
                "note": {"type": "string"}
            },
            "required": ["process_id", "running", "output", "duration_ms"]
        }),
    )
}

const INPUT_ARGS: &[&str] = &[
    "process_id",
    "input",
    "keys",
    "until",
    "wait",
    "rows",
    "cols",
    "eof",
];

pub(crate) fn input(settings: &Settings, args: &str) -> Result<crate::Reply, String> {
    let args = Args::parse(args, INPUT_ARGS)?;
    let id = args.required_string("process_id")?;
    let text = args.string("input")?.unwrap_or("");
    let keys = args
        .string_list("keys")?
        .unwrap_or_default()
        .into_iter()
        .map(key)
        .collect::<Result<Vec<_>, _>>()?;
    let until = args.string("until")?.filter(|u| !u.is_empty());
    let mut wait = args.duration("wait")?.unwrap_or(DEFAULT_WAIT);
    let rows = args.integer("rows", ROWS.0, ROWS.1)?;
    let cols = args.integer("cols", COLS.0, COLS.1)?;
    let eof = args.bool("eof")?.unwrap_or(false);
    let mut notes = Vec::new();
    if wait > settings.max_timeout {
        notes.push(format!(
            "The wait {} was above this policy's maximum and was clamped to {}.",
            format_duration(wait),
            format_duration(settings.max_timeout)
        ));
        wait = settings.max_timeout;
    }

    // Where this call's output starts.
    let start = host::read(id, ReadFrom::Cursor(u64::MAX))
        .map_err(process_error)?
        .cursor;
    if rows.is_some() || cols.is_some() {
        let now = host::read_screen(id).map_err(process_error)?.size;
        let size = host::TerminalSize {
            rows: rows.map_or(now.rows, |r| r as u16),
            cols: cols.map_or(now.cols, |c| c as u16),
        };
        host::resize(id, size).map_err(process_error)?;
    }
    if !text.is_empty() || !keys.is_empty() {
        host::write_input(id, text.as_bytes(), &keys).map_err(process_error)?;
    }
    if eof {
        host::close_input(id).map_err(process_error)?;
    }
    let condition = match until {
        Some(text) => Until::Text(text.to_string()),
        None => Until::Quiet(millis(SETTLE)),
    };
    let out = host::wait_until(id, &condition, millis(wait), ReadFrom::Cursor(start))
        .map_err(process_error)?;
    let found = until.map(|u| out.text.contains(u));
    let mut result = describe_output(settings, id, out, &mut notes);
    if let Some(found) = found {
        result.insert("until_found".into(), Value::Bool(found));
        if !found && result.get("running") == Some(&Value::Bool(true)) {
            notes.push(format!(
                "\"{}\" did not appear within {}; the process is still running. Call \
                 process_input again (without input to just wait), or look at the screen with \
                 process_output view \"screen\".",
                until.unwrap_or_default(),
                format_duration(wait)
            ));
        }
    }
    if !notes.is_empty() {
        result.insert("note".into(), Value::String(notes.join(" ")));
    }
    Ok(crate::Reply::linking(result, id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_names() {
        assert!(matches!(key("Enter"), Ok(Key::Enter)));
        assert!(matches!(key("ctrl-c"), Ok(Key::Ctrl('c'))));
        assert!(matches!(key("Ctrl-D"), Ok(Key::Ctrl('d'))));
        assert!(matches!(key("F12"), Ok(Key::Function(12))));
        assert!(matches!(key("PageDown"), Ok(Key::PageDown)));
        assert!(matches!(key("Esc"), Ok(Key::Escape)));
        for bad in ["F13", "F0", "Ctrl-1", "Ctrl-", "Hyper", ""] {
            let error = key(bad).err().unwrap_or_default();
            assert!(error.contains("unknown key name"), "{bad}: {error}");
        }
    }
}
