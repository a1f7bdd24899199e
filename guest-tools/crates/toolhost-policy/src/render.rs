//! How the standard tools write for the model: their definitions, the fields of their
//! results, and the notes and messages in them.
//!
//! The tools' modules (`execute`, `process_tools`, `interactive`) share these helpers.
//! Output is bounded here, with the host's truncation merged into the record of the cut.

pub use crate::args::format_duration;
use crate::exports::toolhost::plugin::tool::ToolDefinition;
use crate::settings::Settings;
use crate::tool::Hints;
use crate::toolhost;
use crate::toolhost::plugin::process::{Leftover, LogPage, Output, Screen};
use serde_json::{Map, Value, json};
use std::time::Duration;

/// Build a standard tool's definition from its parts.
pub(crate) fn tool_definition(
    name: &str,
    title: &str,
    hints: Hints,
    description: String,
    input: Value,
    output: Value,
) -> ToolDefinition {
    ToolDefinition {
        name: name.to_string(),
        description,
        input_schema: input.to_string(),
        output_schema: Some(output.to_string()),
        title: Some(title.to_string()),
        annotations: hints.annotations(),
    }
}

/// The JSON Schema of a truncation record.
pub(crate) fn truncation_schema() -> Value {
    json!({
        "type": "object",
        "description": "Present when output was cut: byte counts of the original stream.",
        "properties": {
            "original_bytes": {"type": "integer"},
            "retained_bytes": {"type": "integer"},
            "omitted_bytes": {"type": "integer"},
            "strategy": {"type": "string"}
        },
        "required": ["original_bytes", "retained_bytes", "omitted_bytes", "strategy"]
    })
}

/// The JSON Schema of a result's `left_running`.
pub(crate) fn leftovers_schema() -> Value {
    json!({
        "type": "array",
        "description": format!(
            "Processes the command started that still run after it exited (at most \
             {LEFTOVERS_LISTED} listed; the note counts them all). Read their output with \
             process_output and stop them with process_signal, by the process_id."
        ),
        "items": {
            "type": "object",
            "properties": {
                "pid": {"type": "integer", "description": "Its pid as the command's processes see it."},
                "command": {"type": "string", "description": "Its command line (cut at 80 characters)."}
            },
            "required": ["pid", "command"]
        }
    })
}

/// Most processes left running that a result lists; the note counts the rest.
pub(crate) const LEFTOVERS_LISTED: usize = 10;

/// What a command left running, as the `left_running` field: the first [`LEFTOVERS_LISTED`].
pub(crate) fn leftovers_json(left: &[Leftover]) -> Value {
    left.iter()
        .take(LEFTOVERS_LISTED)
        .map(|l| json!({"pid": l.pid, "command": l.command}))
        .collect()
}

/// `2 processes` (or `1 process`) and the named ones: `pid 12 `sleep 100`, pid 13 `srv``, the
/// first [`LEFTOVERS_LISTED`], then how many more.
pub(crate) fn leftovers_named(left: &[Leftover]) -> (String, String) {
    let count = match left.len() {
        1 => "1 process".to_string(),
        n => format!("{n} processes"),
    };
    let mut named: Vec<String> = left
        .iter()
        .take(LEFTOVERS_LISTED)
        .map(|l| format!("pid {} `{}`", l.pid, l.command))
        .collect();
    if left.len() > LEFTOVERS_LISTED {
        named.push(format!("and {} more", left.len() - LEFTOVERS_LISTED));
    }
    (count, named.join(", "))
}

/// The note of a result whose process `id` has exited but left processes running; `None`
/// when it left nothing.
pub(crate) fn leftovers_note(id: &str, left: &[Leftover]) -> Option<String> {
    if left.is_empty() {
        return None;
    }
    let (count, named) = leftovers_named(left);
    let (run, they, them) = if left.len() == 1 {
        ("runs", "It still writes", "it")
    } else {
        ("run", "They still write", "them")
    };
    Some(format!(
        "Process {id} has exited, but {count} it started still {run} ({named}). {they} to the \
         output of process {id}: read it with process_output, and stop {them} with \
         process_signal (process_id \"{id}\")."
    ))
}

/// Add what process `id` left running to a result: the `left_running` field and a note.
pub(crate) fn leftover_fields(
    result: &mut Obj,
    id: &str,
    left: &[Leftover],
    notes: &mut Vec<String>,
) {
    if let Some(note) = leftovers_note(id, left) {
        result.set("left_running", leftovers_json(left));
        notes.push(note);
    }
}

/// A page of a process's full output that `process_output` asked for: where it starts (its
/// `offset` argument) and how long it may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PageRequest {
    /// Bytes from the start; negative: from the end.
    pub(crate) offset: i64,
    /// Most bytes of the page.
    pub(crate) length: u64,
    /// The length asked for, when it was above the policy's output cap and was lowered to it.
    pub(crate) clamped_from: Option<u64>,
}

/// What a page of the full output says about itself: which bytes it holds of how many, where
/// the next one starts, and whether the log is complete.
pub(crate) fn page_note(page: &LogPage, request: &PageRequest) -> String {
    let mut notes = Vec::new();
    if let Some(asked) = request.clamped_from {
        notes.push(format!(
            "length {asked} is above this policy's output cap: a page holds at most {} bytes.",
            request.length
        ));
    }
    let total = page.total_bytes;
    let next = page.next_offset;
    if total == 0 {
        notes.push("The output log is empty so far.".to_string());
    } else if page.text.is_empty() && request.offset > 0 && request.offset.unsigned_abs() >= total {
        notes.push(format!(
            "The output has {total} bytes in all: offset {} is at or past its end.",
            request.offset
        ));
    } else {
        notes.push(format!(
            "This page is bytes {} to {next} of the output, {total} bytes in all.",
            page.offset
        ));
    }
    if next < total {
        notes.push(format!(
            "The next page starts at offset {next} (process_output with offset {next})."
        ));
    } else if page.running {
        notes.push(format!(
            "That is the end of the output so far; the process still runs, so more may come \
             from offset {next}."
        ));
    } else if total > 0 {
        notes.push("That is the end of the output.".to_string());
    }
    if page.capped {
        notes.push(format!(
            "The log stops at {total} bytes (the host's cap): the output written after that is \
             kept only in the end that process_output returns without offset and length."
        ));
    }
    notes.join(" ")
}

/// A JSON object builder that leaves absent values out of the result.
#[derive(Default)]
pub(crate) struct Obj(Map<String, Value>);

impl Obj {
    pub(crate) fn set(&mut self, key: &str, value: impl Into<Value>) -> &mut Self {
        self.0.insert(key.to_string(), value.into());
        self
    }

    pub(crate) fn opt(&mut self, key: &str, value: Option<impl Into<Value>>) -> &mut Self {
        if let Some(v) = value {
            self.0.insert(key.to_string(), v.into());
        }
        self
    }

    pub(crate) fn build(&mut self) -> Map<String, Value> {
        std::mem::take(&mut self.0)
    }
}

/// The host's truncation record as JSON.
pub(crate) fn truncation_json(t: &toolhost::plugin::output_buffer::Truncation) -> Value {
    json!({
        "original_bytes": t.original_bytes,
        "retained_bytes": t.retained_bytes,
        "omitted_bytes": t.omitted_bytes,
        "strategy": t.strategy,
    })
}

/// Bound `text` to `cap` bytes, keeping head and tail, and merge the host's truncation (of the
/// process output) with ours (of the text), so the numbers describe the original stream.
pub(crate) fn bound_output(
    text: String,
    host: Option<toolhost::plugin::output_buffer::Truncation>,
    cap: usize,
) -> (String, Option<toolhost::plugin::output_buffer::Truncation>) {
    use toolhost::plugin::output_buffer::{HeadTailBuffer, Truncation};
    if text.len() <= cap {
        return (text, host);
    }
    // Leave room for the omission marker so the whole text stays within the cap.
    let budget = cap.saturating_sub(64).max(2);
    let head = (budget / 2) as u32;
    let tail = (budget - budget / 2) as u32;
    let buffer = HeadTailBuffer::new(head, tail);
    buffer.write(text.as_bytes());
    let rendered = buffer.render();
    let ours = rendered.truncation.map(|t| t.omitted_bytes).unwrap_or(0);
    let original = host
        .as_ref()
        .map(|t| t.original_bytes)
        .unwrap_or(text.len() as u64);
    let omitted = (host.as_ref().map(|t| t.omitted_bytes).unwrap_or(0) + ours).min(original);
    let merged = Truncation {
        original_bytes: original,
        retained_bytes: original - omitted,
        omitted_bytes: omitted,
        strategy: "head_tail".to_string(),
    };
    (restate_omission(&rendered.text, omitted), Some(merged))
}

/// Make the (last) omission marker of `text` state `omitted`, the bytes missing from the whole
/// stream, rather than only those this second cut removed.
fn restate_omission(text: &str, omitted: u64) -> String {
    const OPEN: &str = "[... ";
    const CLOSE: &str = " bytes omitted ...]";
    let Some(start) = text.rfind(OPEN) else {
        return text.to_string();
    };
    let digits = &text[start + OPEN.len()..];
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    if end == 0 || !digits[end..].starts_with(CLOSE) {
        return text.to_string();
    }
    format!(
        "{}{OPEN}{omitted}{}",
        &text[..start],
        &text[start + OPEN.len() + end..]
    )
}

/// What the host says of a process's full-output file, kept apart from its text.
pub(crate) struct LogFile {
    /// The file's path on the host, when it keeps one.
    pub(crate) path: Option<String>,
    /// Bytes of output the file holds.
    pub(crate) bytes: Option<u64>,
    /// The file reached the host's cap.
    pub(crate) capped: bool,
}

impl LogFile {
    /// The log file of `out`.
    pub(crate) fn of(out: &toolhost::plugin::process::Output) -> LogFile {
        LogFile {
            path: out.log_path.clone(),
            bytes: out.log_bytes,
            capped: out.log_capped,
        }
    }
}

/// What a result whose output was cut says about the complete output of process `id`: where
/// all of it is, how much of it the (capped) file holds, or that nothing more can be read.
///
/// The file is on the host, hidden from confined commands: for a confined process the note
/// names what works from there instead of the file.
///
/// Called only for a cut output: finding whether the process is confined asks the host.
pub(crate) fn output_file_note(id: &str, out: &LogFile) -> String {
    let confined = || {
        toolhost::plugin::process::list()
            .iter()
            .find(|process| process.id == id)
            .is_none_or(|process| !process.profile.starts_with("off"))
    };
    let unreadable = "Confined commands cannot read that file";
    let paging = format!(
        "process_output pages through it: process_id \"{id}\" with offset and length in bytes \
         (a negative offset counts from the end)"
    );
    let instead = format!(
        "besides process_output, read the MCP resource toolhost://process/{id}/output (it takes \
         byte or line ranges), or run the command again with its output filtered (grep, head, \
         tail) or redirected to a file in the workspace."
    );
    match (&out.path, out.bytes) {
        (Some(_), Some(bytes)) if out.capped && confined() => format!(
            "Output was cut in the middle; output_file on the host holds only its first {bytes} bytes \
             (the host caps the file; the end is in output above). {paging}. {unreadable}: {instead}"
        ),
        (Some(_), Some(bytes)) if out.capped => format!(
            "Output was cut in the middle; output_file holds only its first {} bytes (the host \
             caps the file; the end is in output above). {paging}.",
            bytes
        ),
        (Some(_), _) if confined() => format!(
            "Output was cut in the middle; output_file on the host holds all of it. {paging}. \
             {unreadable}: {instead}"
        ),
        (Some(_), _) => format!(
            "Output was cut in the middle; output_file holds all of it (grep or page through it). \
             {paging}."
        ),
        (None, _) => "Output was cut in the middle; the host keeps no complete copy of it, so \
                      the omitted part cannot be read again."
            .to_string(),
    }
}

/// A process's output as result fields; when the text was cut, a note about the complete
/// output goes to `notes`, and so does one about what it left running.
pub(crate) fn describe_output(
    settings: &Settings,
    id: &str,
    out: Output,
    notes: &mut Vec<String>,
) -> Map<String, Value> {
    let log = LogFile::of(&out);
    let (text, truncation) = bound_output(out.text, out.truncation, settings.output_cap_bytes);
    let mut r = Obj::default();
    r.set("process_id", id)
        .set("running", out.running)
        .opt("exit_code", out.exit_code)
        .opt("signal", out.signal)
        .set("output", text)
        .set("duration_ms", out.duration_ms);
    if let Some(t) = &truncation {
        r.set("truncated", truncation_json(t))
            .opt("output_file", log.path.clone());
        notes.push(output_file_note(id, &log));
    }
    leftover_fields(&mut r, id, &out.left_running, notes);
    r.build()
}

/// The screen of a terminal as result fields: `output` (the rows as text, trailing blank
/// rows left out), `cursor` and `size`.
pub(crate) fn screen_fields(result: &mut Obj, screen: Screen) {
    let last = screen
        .rows
        .iter()
        .rposition(|row| !row.is_empty())
        .map_or(0, |i| i + 1);
    result
        .set("output", screen.rows[..last].join("\n"))
        .set(
            "cursor",
            json!({"row": screen.cursor_row, "col": screen.cursor_col, "hidden": screen.cursor_hidden}),
        )
        .set(
            "size",
            json!({"rows": screen.size.rows, "cols": screen.size.cols}),
        )
        .set("full_screen", screen.alternate);
}

/// A process error as a message for the model.
pub(crate) fn process_error(e: toolhost::plugin::process::ProcessError) -> String {
    use toolhost::plugin::process::ProcessError as E;
    match e {
        E::NotFound(m) => format!("{m} (process_list shows the processes of this session)"),
        E::NotRunning(m) | E::InvalidRequest(m) | E::LimitReached(m) | E::Failed(m) => m,
    }
}

/// Milliseconds of a duration, saturating.
pub(crate) fn millis(d: Duration) -> u64 {
    d.as_millis().min(u64::MAX as u128) as u64
}
