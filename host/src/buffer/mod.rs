//! Bounded head/tail capture of a process's output.
//!
//! A command run for an agent may print anything from nothing to gigabytes. The agent needs
//! the beginning of it, which shows what the command was doing. It needs the end, which
//! shows how the command finished. It never needs the middle of a huge log. The host must not
//! grow without bound while it captures the output.
//!
//! [`HeadTailBuffer`] keeps three things:
//!
//! * the **head**: the first `head_bytes` bytes ever written;
//! * the **tail**: the last `tail_bytes` bytes written after the head filled, in a ring
//!   buffer;
//! * the total number of bytes written.
//!
//! Its memory is bounded by `head_bytes + tail_bytes`, whatever the volume. A write is at most
//! two slice copies. A write larger than the tail copies only its last `tail_bytes`.
//!
//! # Stream positions
//!
//! Every byte has a position in the stream: 0 for the first byte written. The head covers
//! `[0, min(total, head_bytes))`. The tail covers `[max(head_bytes, total - tail_bytes),
//! total)`. The positions in between, if any, are omitted: they are dropped for good.
//!
//! # Rendering
//!
//! [`HeadTailBuffer::render_from`] turns the retained bytes at positions `>= cursor` into text
//! for the agent. A cursor lets a caller read only the output since its last read. The flow:
//!
//! 1. When nothing in the range is omitted, the retained bytes are concatenated.
//! 2. When the range crosses the omitted gap, the head part comes first. A marker line
//!    `[... N bytes omitted ...]` follows on its own line, then the tail part on a new line.
//!    `N` counts every stream byte between the last byte shown before the marker (or the
//!    cursor) and the first byte shown after it. Partial characters dropped there count too.
//! 3. A line longer than [`MAX_LINE_BYTES`] is cut to at most that many bytes. A marker
//!    `[... line truncated: N bytes]` follows, where `N` is the number of bytes removed from
//!    that line. Head and tail are cut separately, so a line crossing the gap is two pieces.
//! 4. The text is made valid UTF-8. A multi-byte character is never split at a cut: the head
//!    end, the tail start, a line cut or the cursor. An incomplete sequence at the head end is
//!    dropped. Continuation bytes at the tail start or at the cursor are skipped. Other
//!    invalid UTF-8 is rendered lossily as U+FFFD.
//! 5. The end of the stream is not a cut. A character the process has only half written yet
//!    renders as U+FFFD. A later read starting at that position skips its remaining
//!    continuation bytes and counts them as omitted.
//!
//! [`Rendered::truncation`] says how many bytes of the requested range are missing from the
//! text, whenever any are: the gap, cut lines, or bytes dropped at a character boundary. So
//! `retained_bytes + omitted_bytes == original_bytes` always holds.

use std::fmt;
use std::io;

/// Default number of bytes kept from the start of the stream.
pub const DEFAULT_HEAD_BYTES: usize = 16 * 1024;

/// Default number of bytes kept from the end of the stream.
pub const DEFAULT_TAIL_BYTES: usize = 16 * 1024;

/// Longest line (in bytes, excluding its newline) rendered in full; longer lines are cut.
pub const MAX_LINE_BYTES: usize = 2048;

/// The [`Truncation::strategy`] of renderings produced by this module.
pub const HEAD_TAIL_STRATEGY: &str = "head_tail";

/// How a rendering was shortened.
///
/// All counts are in bytes of the original stream and relative to the requested range, so
/// `retained_bytes + omitted_bytes == original_bytes`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Truncation {
    /// Bytes the requested range spans in the original stream.
    pub original_bytes: u64,
    /// Bytes of that range present in the rendered text (invalid UTF-8 counts as present).
    pub retained_bytes: u64,
    /// Bytes of that range missing from the text: the omitted gap, the removed parts of long
    /// lines and partial characters dropped at cuts.
    pub omitted_bytes: u64,
    /// How the output was shortened; always [`HEAD_TAIL_STRATEGY`] (`"head_tail"`).
    pub strategy: String,
}

/// Text rendered from a buffer, with what was left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// The rendered output; always valid UTF-8.
    pub text: String,
    /// `Some` when any byte of the requested range is missing from `text`.
    pub truncation: Option<Truncation>,
}

impl Rendered {
    /// A rendering with no text and nothing omitted.
    fn empty() -> Self {
        Rendered {
            text: String::new(),
            truncation: None,
        }
    }
}

/// Keeps the first and the last bytes of a stream in bounded memory.
pub struct HeadTailBuffer {
    /// Maximum length of `head`.
    head_cap: usize,
    /// Maximum length of `ring`.
    tail_cap: usize,
    /// The first bytes of the stream, at most `head_cap`.
    head: Vec<u8>,
    /// Ring of the last bytes after the head, at most `tail_cap` long. While it is not full it
    /// is filled in order and `ring_pos == ring.len()`; once full, the oldest byte is at
    /// `ring_pos` (the next to be overwritten).
    ring: Vec<u8>,
    /// See `ring`.
    ring_pos: usize,
    /// Bytes ever written.
    total: u64,
}

impl HeadTailBuffer {
    /// A buffer keeping the first `head_bytes` and the last `tail_bytes` bytes of the stream.
    ///
    /// Both sizes are clamped to at least 1. Memory is allocated on first use and never
    /// exceeds `head_bytes + tail_bytes`.
    pub fn new(head_bytes: usize, tail_bytes: usize) -> Self {
        HeadTailBuffer {
            head_cap: head_bytes.max(1),
            tail_cap: tail_bytes.max(1),
            head: Vec::new(),
            ring: Vec::new(),
            ring_pos: 0,
            total: 0,
        }
    }

    /// Appends `data` to the stream.
    pub fn write(&mut self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        self.total = self.total.saturating_add(data.len() as u64);
        let mut rest = data;
        let head_room = self.head_cap.saturating_sub(self.head.len());
        if head_room > 0 {
            if self.head.capacity() == 0 {
                self.head.reserve_exact(self.head_cap);
            }
            let (now, later) = rest.split_at(head_room.min(rest.len()));
            self.head.extend_from_slice(now);
            rest = later;
        }
        if !rest.is_empty() {
            self.push_tail(rest);
        }
    }

    /// Appends `data` (which follows the full head) to the tail ring.
    fn push_tail(&mut self, data: &[u8]) {
        let cap = self.tail_cap;
        if self.ring.capacity() == 0 {
            self.ring.reserve_exact(cap);
        }
        if data.len() >= cap {
            // Only the last `cap` bytes survive this write: replace the ring wholesale.
            self.ring.clear();
            self.ring.extend_from_slice(&data[data.len() - cap..]);
            self.ring_pos = 0;
            return;
        }
        let mut data = data;
        if self.ring.len() < cap {
            let (now, later) = data.split_at((cap - self.ring.len()).min(data.len()));
            self.ring.extend_from_slice(now);
            self.ring_pos = self.ring.len() % cap;
            data = later;
            if data.is_empty() {
                return;
            }
        }
        // The ring is full and `data` is shorter than it: overwrite the oldest bytes,
        // wrapping around at most once.
        let pos = self.ring_pos;
        let (first, second) = data.split_at((cap - pos).min(data.len()));
        self.ring[pos..pos + first.len()].copy_from_slice(first);
        self.ring[..second.len()].copy_from_slice(second);
        self.ring_pos = (pos + data.len()) % cap;
    }

    /// Bytes ever written (including omitted ones).
    pub fn total_bytes(&self) -> u64 {
        self.total
    }

    /// The configured head size (after clamping).
    #[cfg(test)]
    pub(crate) fn head_capacity(&self) -> usize {
        self.head_cap
    }

    /// The configured tail size (after clamping).
    #[cfg(test)]
    pub(crate) fn tail_capacity(&self) -> usize {
        self.tail_cap
    }

    /// Bytes currently allocated for the head and tail storage (at most
    /// `head_capacity() + tail_capacity()`).
    #[cfg(test)]
    pub(crate) fn allocated_bytes(&self) -> usize {
        self.head.capacity() + self.ring.capacity()
    }

    /// Bytes currently held (head plus tail).
    pub fn retained_bytes(&self) -> usize {
        self.head.len() + self.ring.len()
    }

    /// The tail in stream order, as the two halves of the ring.
    fn tail_parts(&self) -> (&[u8], &[u8]) {
        let (newer, older) = self.ring.split_at(self.ring_pos.min(self.ring.len()));
        (older, newer)
    }

    /// Renders everything retained; the same as [`render_from(0)`](Self::render_from).
    pub fn render(&self) -> Rendered {
        self.render_from(0)
    }

    /// Renders the retained bytes at stream positions `>= cursor`.
    ///
    /// A cursor at or past [`total_bytes`](Self::total_bytes) gives empty text and no
    /// truncation. The truncation metadata is relative to `[cursor, total)`. See the module
    /// documentation for the format.
    pub fn render_from(&self, cursor: u64) -> Rendered {
        let total = self.total;
        if cursor >= total {
            return Rendered::empty();
        }
        let head_end = self.head.len() as u64;
        let tail_start = total - self.ring.len() as u64;
        let original = total - cursor;
        let (tail_a, tail_b) = self.tail_parts();

        let mut text = String::new();
        let retained;
        if head_end < tail_start && cursor < tail_start {
            // The range crosses the omitted gap: head piece, marker, tail piece.
            // `marker_from` is the first position hidden behind the marker.
            let mut marker_from = cursor;
            let mut head_kept = 0u64;
            if cursor < head_end {
                let raw = &self.head[cursor as usize..];
                let skip = if cursor > 0 {
                    leading_continuations(raw)
                } else {
                    0
                };
                let raw = &raw[skip..];
                let shown = &raw[..char_floor(raw, raw.len())];
                if !shown.is_empty() {
                    let cut = render_lines(shown, &mut text);
                    head_kept = shown.len() as u64 - cut;
                    marker_from = head_end - (raw.len() - shown.len()) as u64;
                }
            }
            let mut tail = Vec::with_capacity(self.ring.len());
            tail.extend_from_slice(tail_a);
            tail.extend_from_slice(tail_b);
            let skip = leading_continuations(&tail);
            let shown = &tail[skip..];
            let omitted_here = tail_start + skip as u64 - marker_from;
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&omission_marker(omitted_here));
            text.push('\n');
            let cut = render_lines(shown, &mut text);
            retained = head_kept + shown.len() as u64 - cut;
        } else {
            // One contiguous range: head and tail meet (or the cursor is inside the tail).
            let head_part = &self.head[(cursor.min(head_end)) as usize..];
            let mut skip_tail = cursor.saturating_sub(tail_start) as usize;
            let mut bytes = Vec::with_capacity(head_part.len() + self.ring.len());
            bytes.extend_from_slice(head_part);
            for part in [tail_a, tail_b] {
                let from = skip_tail.min(part.len());
                bytes.extend_from_slice(&part[from..]);
                skip_tail -= from;
            }
            let skip = if cursor > 0 {
                leading_continuations(&bytes)
            } else {
                0
            };
            let shown = &bytes[skip..];
            let cut = render_lines(shown, &mut text);
            retained = shown.len() as u64 - cut;
        }

        let omitted = original.saturating_sub(retained);
        let truncation = (omitted > 0).then(|| Truncation {
            original_bytes: original,
            retained_bytes: retained,
            omitted_bytes: omitted,
            strategy: HEAD_TAIL_STRATEGY.to_owned(),
        });
        Rendered { text, truncation }
    }
}

impl Default for HeadTailBuffer {
    /// A buffer with [`DEFAULT_HEAD_BYTES`] and [`DEFAULT_TAIL_BYTES`].
    fn default() -> Self {
        HeadTailBuffer::new(DEFAULT_HEAD_BYTES, DEFAULT_TAIL_BYTES)
    }
}

impl fmt::Debug for HeadTailBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeadTailBuffer")
            .field("head_bytes", &self.head_cap)
            .field("tail_bytes", &self.tail_cap)
            .field("total_bytes", &self.total)
            .field("retained_bytes", &self.retained_bytes())
            .finish()
    }
}

impl io::Write for HeadTailBuffer {
    /// Appends all of `buf`; never fails.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        HeadTailBuffer::write(self, buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The omission marker text (without surrounding newlines).
fn omission_marker(bytes: u64) -> String {
    format!("[... {bytes} bytes omitted ...]")
}

/// The long-line marker text appended after a cut line.
fn line_marker(bytes: usize) -> String {
    format!("[... line truncated: {bytes} bytes]")
}

/// Whether `b` is a UTF-8 continuation byte (`10xxxxxx`).
fn is_continuation(b: u8) -> bool {
    b & 0xC0 == 0x80
}

/// Length of the UTF-8 sequence a byte starts; 1 for ASCII and for bytes that cannot start a
/// valid sequence (they are rendered lossily on their own).
fn sequence_len(b: u8) -> usize {
    match b {
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        _ => 1,
    }
}

/// Number of continuation bytes (at most 3) at the start of `bytes`: the remainder of a
/// character that began before a cut.
pub(crate) fn leading_continuations(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .take(3)
        .take_while(|&&b| is_continuation(b))
        .count()
}

/// The largest cut point `<= at` that does not split a character: if a sequence starting
/// in the three bytes before `at` would extend past `at`, the cut moves to its start.
pub(crate) fn char_floor(bytes: &[u8], at: usize) -> usize {
    let at = at.min(bytes.len());
    for back in 1..=3 {
        let Some(i) = at.checked_sub(back) else {
            break;
        };
        let b = bytes[i];
        if is_continuation(b) {
            continue;
        }
        return if i + sequence_len(b) > at { i } else { at };
    }
    at
}

/// Appends `bytes` to `out`, replacing invalid UTF-8 with U+FFFD.
fn push_lossy(out: &mut String, bytes: &[u8]) {
    out.push_str(&String::from_utf8_lossy(bytes));
}

/// Appends `bytes` to `out` lossily, cutting lines longer than [`MAX_LINE_BYTES`].
/// Returns how many bytes were removed by cutting.
fn render_lines(bytes: &[u8], out: &mut String) -> u64 {
    out.reserve(bytes.len());
    let mut cut_total = 0u64;
    // Runs of short lines are pushed in one go, starting at `run_start`.
    let mut run_start = 0;
    let mut line_start = 0;
    while line_start < bytes.len() {
        let rest = &bytes[line_start..];
        let (line_len, next) = match rest.iter().position(|&b| b == b'\n') {
            Some(i) => (i, line_start + i + 1),
            None => (rest.len(), bytes.len()),
        };
        if line_len > MAX_LINE_BYTES {
            push_lossy(out, &bytes[run_start..line_start]);
            let line = &rest[..line_len];
            let keep = char_floor(line, MAX_LINE_BYTES);
            push_lossy(out, &line[..keep]);
            let removed = line_len - keep;
            out.push_str(&line_marker(removed));
            cut_total += removed as u64;
            // The newline (if any) starts the next run.
            run_start = line_start + line_len;
        }
        line_start = next;
    }
    push_lossy(out, &bytes[run_start..]);
    cut_total
}

#[cfg(test)]
mod tests;
