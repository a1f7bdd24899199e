//! Full process output as MCP resources: each process of a session that has an output log is
//! the resource `toolhost://process/{id}/output`, readable only by that session, in pages.
//!
//! A read returns at most [`PAGE`] bytes. Without a range it starts at the beginning; the
//! template `toolhost://process/{id}/output{?offset,length,line,lines}` takes a byte range
//! (`offset`, `length`) or a line range (`line`, 1-based, and `lines`, a count). A read that
//! stops before the end names the URI of the next page in its `_meta`
//! (`toolhost/next`), with the range it covers (`toolhost/range`).

use rmcp::ErrorData;
use rmcp::model::{JsonObject, MetaObject, Resource, ResourceContents, ResourceTemplate};
use std::io::{BufRead, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// The most bytes one read returns.
pub const PAGE: u64 = 256 * 1024;

const PREFIX: &str = "toolhost://process/";
const SUFFIX: &str = "/output";

/// The URI of process `id`'s output.
pub fn uri(id: &str) -> String {
    format!("{PREFIX}{id}{SUFFIX}")
}

/// The resource describing process `id`'s output log at `path`.
pub fn describe(id: &str, path: &Path) -> Resource {
    let mut resource = Resource::new(uri(id), format!("output of process {id}"))
        .with_title(format!("Complete output of process {id}"))
        .with_description(format!(
            "Everything process {id} wrote (stdout and stderr merged, up to the host's log \
             cap). Reads return {} KiB at most; page with ?offset=&length= (bytes) or \
             ?line=&lines= (lines, from 1).",
            PAGE / 1024
        ))
        .with_mime_type("text/plain");
    if let Ok(meta) = std::fs::metadata(path) {
        resource = resource.with_size(meta.len());
    }
    resource
}

/// The template for reading a range of an output.
pub fn template() -> ResourceTemplate {
    ResourceTemplate::new(
        format!("{PREFIX}{{id}}{SUFFIX}{{?offset,length,line,lines}}"),
        "process output (a range)",
    )
    .with_title("A range of a process's complete output")
    .with_description(format!(
        "The complete output of process {{id}} of this session: bytes from `offset` (0-based) \
         for `length`, or `lines` lines from line `line` (1-based). At most {} KiB per read.",
        PAGE / 1024
    ))
    .with_mime_type("text/plain")
}

/// What a URI asks for.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    /// The process.
    pub id: String,
    /// The part of its output.
    pub range: Range,
}

/// A part of an output.
#[derive(Debug, PartialEq, Eq)]
pub enum Range {
    /// Bytes from `offset`, `length` of them at most (`None`: to the end), and at most
    /// [`PAGE`].
    Bytes { offset: u64, length: Option<u64> },
    /// Lines from `first` (1-based), `count` of them at most (and at most [`PAGE`] bytes).
    Lines { first: u64, count: u64 },
}

/// Parse a resource URI; the error is an invalid-params error saying what is wrong.
pub fn parse(uri: &str) -> Result<Request, ErrorData> {
    let bad = |why: &str| {
        ErrorData::invalid_params(
            format!(
                "bad resource URI `{uri}`: {why}; expected {PREFIX}ID{SUFFIX} with optional \
                 ?offset=N&length=N or ?line=N&lines=N"
            ),
            None,
        )
    };
    let rest = uri.strip_prefix(PREFIX).ok_or_else(|| {
        ErrorData::resource_not_found(
            format!("no resource `{uri}`"),
            Some(serde_json::json!({ "uri": uri })),
        )
    })?;
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let id = path
        .strip_suffix(SUFFIX)
        .filter(|id| !id.is_empty() && !id.contains('/'))
        .ok_or_else(|| bad("no process id"))?;
    let mut offset = None;
    let mut length = None;
    let mut line = None;
    let mut lines = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| bad("a parameter without a value"))?;
        let number: u64 = value
            .parse()
            .map_err(|_| bad(&format!("`{key}` is not a whole number")))?;
        let slot = match key {
            "offset" => &mut offset,
            "length" => &mut length,
            "line" => &mut line,
            "lines" => &mut lines,
            other => return Err(bad(&format!("unknown parameter `{other}`"))),
        };
        *slot = Some(number);
    }
    let range = match (
        offset.is_some() || length.is_some(),
        line.is_some() || lines.is_some(),
    ) {
        (true, true) => return Err(bad("give a byte range or a line range, not both")),
        (_, true) => {
            let first = line.unwrap_or(1);
            if first == 0 {
                return Err(bad("lines count from 1"));
            }
            Range::Lines {
                first,
                count: lines.unwrap_or(u64::MAX),
            }
        }
        _ => Range::Bytes {
            offset: offset.unwrap_or(0),
            length,
        },
    };
    Ok(Request {
        id: id.to_owned(),
        range,
    })
}

/// Read `range` of the log at `path` as the contents of `uri` (blocking file-system work).
pub fn read(
    uri: &str,
    id: &str,
    path: &PathBuf,
    range: &Range,
) -> std::io::Result<ResourceContents> {
    let mut file = std::fs::File::open(path)?;
    let total = file.metadata()?.len();
    let (text, covered, next) = match *range {
        Range::Bytes { offset, length } => {
            let start = offset.min(total);
            let wanted_end = length.map_or(total, |l| start.saturating_add(l).min(total));
            let want = (wanted_end - start).min(PAGE);
            file.seek(SeekFrom::Start(start))?;
            let mut bytes = Vec::with_capacity(usize::try_from(want).unwrap_or(0));
            file.by_ref().take(want).read_to_end(&mut bytes)?;
            // End on a character boundary when more follows, so pages join up exactly.
            // (Never to nothing: a page is never empty while more follows, or `next` would
            // name the same page again.)
            if start + (bytes.len() as u64) < total {
                let cut = utf8_boundary(&bytes);
                if cut > 0 {
                    bytes.truncate(cut);
                }
            }
            let end = start + bytes.len() as u64;
            let covered =
                serde_json::json!({ "offset": start, "length": bytes.len(), "total": total });
            let next = (end < wanted_end).then(|| match length {
                Some(_) => format!("{}?offset={end}&length={}", self::uri(id), wanted_end - end),
                None => format!("{}?offset={end}", self::uri(id)),
            });
            (String::from_utf8_lossy(&bytes).into_owned(), covered, next)
        }
        Range::Lines { first, count } => {
            let mut reader = std::io::BufReader::new(file);
            // To the start of line `first`, without holding a line in memory.
            let mut number = 1u64;
            let mut position = 0u64;
            while number < first {
                let buffer = reader.fill_buf()?;
                if buffer.is_empty() {
                    break;
                }
                let used = match buffer.iter().position(|&b| b == b'\n') {
                    Some(newline) => {
                        number += 1;
                        newline + 1
                    }
                    None => buffer.len(),
                };
                reader.consume(used);
                position += used as u64;
            }
            // Whole lines while they fit in a page; none is read past what a page holds.
            let mut text = Vec::new();
            let mut taken = 0u64;
            let mut more = false;
            let mut cut_line = false;
            let mut line = Vec::new();
            while taken < count {
                line.clear();
                let room = PAGE - text.len() as u64;
                if (&mut reader).take(room + 1).read_until(b'\n', &mut line)? == 0 {
                    break;
                }
                if line.len() as u64 > room {
                    more = true;
                    if taken == 0 {
                        // One line longer than a page: its first page; the rest by bytes.
                        line.truncate(usize::try_from(room).unwrap_or(0));
                        let cut = utf8_boundary(&line);
                        line.truncate(if cut == 0 { line.len() } else { cut });
                        text = std::mem::take(&mut line);
                        cut_line = true;
                    }
                    break;
                }
                text.extend_from_slice(&line);
                taken += 1;
            }
            let (covered, next) = if cut_line {
                let end = position + text.len() as u64;
                (
                    serde_json::json!({ "line": first, "lines": 0, "offset": position, "length": text.len(), "partial": true }),
                    Some(format!("{}?offset={end}", self::uri(id))),
                )
            } else {
                let next_line = first + taken;
                let next = (more && taken < count).then(|| {
                    let left = if count == u64::MAX {
                        String::new()
                    } else {
                        format!("&lines={}", count - taken)
                    };
                    format!("{}?line={next_line}{left}", self::uri(id))
                });
                (serde_json::json!({ "line": first, "lines": taken }), next)
            };
            (String::from_utf8_lossy(&text).into_owned(), covered, next)
        }
    };
    let mut meta = JsonObject::new();
    meta.insert("toolhost/range".to_owned(), covered);
    if let Some(next) = next {
        meta.insert("toolhost/next".to_owned(), serde_json::Value::String(next));
    }
    Ok(ResourceContents::TextResourceContents {
        uri: uri.to_owned(),
        mime_type: Some("text/plain".to_owned()),
        text,
        meta: Some(MetaObject(meta)),
    })
}

/// The length of the longest prefix of `bytes` that does not end inside a UTF-8 character.
fn utf8_boundary(bytes: &[u8]) -> usize {
    crate::buffer::char_floor(bytes, bytes.len())
}

#[cfg(test)]
#[path = "resources_tests.rs"]
mod tests;
