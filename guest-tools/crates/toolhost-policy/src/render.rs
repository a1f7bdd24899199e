//! How the standard tools write for the model: their definitions, the fields of their
//! results, and the notes and messages in them.
//!
//! The tools' modules (`execute`, `process_tools`, `interactive`) share these helpers.
//! Output is bounded here, with the host's truncation merged into the record of the cut.

use crate::exports::toolhost::plugin::tool::ToolDefinition;
use crate::settings::Settings;
use crate::tool::Hints;
use crate::toolhost;
use crate::toolhost::plugin::process::{Output, Screen};
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
    let instead = format!(
        "read the MCP resource toolhost://process/{id}/output (it takes byte or line ranges), or \
         run the command again with its output filtered (grep, head, tail) or redirected to a \
         file in the workspace."
    );
    match (&out.path, out.bytes) {
        (Some(_), Some(bytes)) if out.capped && confined() => format!(
            "Output was cut in the middle; output_file on the host holds only its first {bytes} bytes \
             (the host caps the file; the end is in output above). {unreadable}: {instead}"
        ),
        (Some(_), Some(bytes)) if out.capped => format!(
            "Output was cut in the middle; output_file holds only its first {} bytes (the host \
             caps the file; the end is in output above).",
            bytes
        ),
        (Some(_), _) if confined() => format!(
            "Output was cut in the middle; output_file on the host holds all of it. \
             {unreadable}: {instead}"
        ),
        (Some(_), _) => {
            "Output was cut in the middle; output_file holds all of it (grep or page through it)."
                .to_string()
        }
        (None, _) => "Output was cut in the middle; the host keeps no complete copy of it, so \
                      the omitted part cannot be read again."
            .to_string(),
    }
}

/// A process's output as result fields; when the text was cut, a note about the complete
/// output goes to `notes`.
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

/// Render a duration for people and models: `10s`, `2m 30s`, `250ms`.
pub fn format_duration(d: Duration) -> String {
    // Whole milliseconds are plenty; humantime would print nanoseconds too.
    let ms = Duration::from_millis(d.as_millis().min(u64::MAX as u128) as u64);
    humantime::format_duration(ms).to_string()
}
