//! Bounded head/tail capture of a process's output.
//!
//! A command run for an agent may print anything from nothing to gigabytes. The agent needs
//! the beginning (what the command was doing) and the end (how it finished), never the
//! middle of a huge log, and the host must not grow without bound while capturing it.
//!
//! [`HeadTailBuffer`] keeps:
//!
//! * the **head**: the first `head_bytes` bytes ever written, and
//! * the **tail**: the last `tail_bytes` bytes written after the head filled, in a ring
//!   buffer,
//!
//! plus the total number of bytes written. Memory is bounded by `head_bytes + tail_bytes`
//! whatever the volume, and writing is a couple of slice copies (a write larger than the tail
//! only copies its last `tail_bytes`).
//!
//! # Stream positions
//!
//! Every byte has a position in the stream (0 for the first byte written). The head covers
//! `[0, min(total, head_bytes))`, the tail covers `[max(head_bytes, total - tail_bytes), total)`
//! and the positions in between, if any, are omitted (dropped for good).
//!
//! # Rendering
//!
//! [`HeadTailBuffer::render_from`] turns the retained bytes at positions `>= cursor` into text
//! for the agent (cursors make incremental "output since my last read" possible):
//!
//! * When nothing is omitted the retained bytes are simply concatenated.
//! * When the range crosses the omitted gap, the head part is followed by a marker line
//!   `[... N bytes omitted ...]` (on its own line) and then the tail part, on a new line.
//!   `N` counts every stream byte between the last byte shown before the marker (or the
//!   cursor) and the first byte shown after it, including partial characters dropped there.
//! * A line longer than [`MAX_LINE_BYTES`] is cut to at most that many bytes followed by
//!   `[... line truncated: N bytes]`, where `N` is the number of bytes of that line removed.
//!   Head and tail are treated separately, so a line crossing the gap is two pieces.
//! * The text is always valid UTF-8. A multi-byte character is never split at a cut (head
//!   end, tail start, line cut, cursor): an incomplete sequence at the head end is dropped,
//!   continuation bytes at the tail start or at the cursor are skipped. Other invalid UTF-8
//!   is rendered lossily as U+FFFD. The end of the stream is not a cut: a character the
//!   process has only half written yet renders as U+FFFD, and a later read starting at that
//!   position skips its remaining continuation bytes (counting them as omitted).
//!
//! Whenever any byte of the requested range is missing from the text (the gap, cut lines or
//! bytes dropped at a character boundary) the [`Rendered::truncation`] metadata says exactly
//! how many, so `retained_bytes + omitted_bytes == original_bytes` always holds.
//!
//! [`SharedBuffer`] wraps the buffer in an `Arc<Mutex<_>>` for a reader thread feeding it
//! while others render it.

use std::fmt;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};

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
///
/// Single-owner core without locking; see [`SharedBuffer`] for the thread-safe handle.
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
    pub fn head_capacity(&self) -> usize {
        self.head_cap
    }

    /// The configured tail size (after clamping).
    pub fn tail_capacity(&self) -> usize {
        self.tail_cap
    }

    /// Bytes currently allocated for the head and tail storage (at most
    /// `head_capacity() + tail_capacity()`).
    pub fn allocated_bytes(&self) -> usize {
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
fn leading_continuations(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .take(3)
        .take_while(|&&b| is_continuation(b))
        .count()
}

/// The largest cut point `<= at` that does not split a character: if a sequence starting
/// in the three bytes before `at` would extend past `at`, the cut moves to its start.
fn char_floor(bytes: &[u8], at: usize) -> usize {
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

/// A cloneable, thread-safe handle to a [`HeadTailBuffer`].
///
/// Clones share the same buffer. A poisoned lock is recovered (the buffer is always in a
/// consistent state between calls), so no method panics.
#[derive(Clone, Default)]
pub struct SharedBuffer {
    inner: Arc<Mutex<HeadTailBuffer>>,
}

impl SharedBuffer {
    /// A shared buffer keeping the first `head_bytes` and the last `tail_bytes` bytes
    /// (both clamped to at least 1).
    pub fn new(head_bytes: usize, tail_bytes: usize) -> Self {
        SharedBuffer::from(HeadTailBuffer::new(head_bytes, tail_bytes))
    }

    /// Locks the buffer, recovering from poisoning.
    fn lock(&self) -> MutexGuard<'_, HeadTailBuffer> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends `data` to the stream (atomically with respect to other writers).
    pub fn write(&self, data: &[u8]) {
        self.lock().write(data);
    }

    /// Bytes ever written.
    pub fn total_bytes(&self) -> u64 {
        self.lock().total_bytes()
    }

    /// Renders everything retained; see [`HeadTailBuffer::render`].
    pub fn render(&self) -> Rendered {
        self.lock().render()
    }

    /// Renders the retained bytes at positions `>= cursor`; see
    /// [`HeadTailBuffer::render_from`].
    pub fn render_from(&self, cursor: u64) -> Rendered {
        self.lock().render_from(cursor)
    }

    /// Runs `f` with the locked buffer, e.g. to read several values consistently.
    pub fn with<R>(&self, f: impl FnOnce(&mut HeadTailBuffer) -> R) -> R {
        f(&mut self.lock())
    }
}

impl From<HeadTailBuffer> for SharedBuffer {
    /// Shares an existing buffer.
    fn from(buffer: HeadTailBuffer) -> Self {
        SharedBuffer {
            inner: Arc::new(Mutex::new(buffer)),
        }
    }
}

impl fmt::Debug for SharedBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `try_lock`: formatting must not deadlock when the caller already holds the lock.
        match self.inner.try_lock() {
            Ok(buffer) => f.debug_tuple("SharedBuffer").field(&*buffer).finish(),
            Err(TryLockError::Poisoned(poisoned)) => f
                .debug_tuple("SharedBuffer")
                .field(&*poisoned.into_inner())
                .finish(),
            Err(TryLockError::WouldBlock) => f.write_str("SharedBuffer(<locked>)"),
        }
    }
}

impl io::Write for SharedBuffer {
    /// Appends all of `buf`; never fails.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        SharedBuffer::write(self, buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A buffer with `data` written in one go.
    fn filled(head: usize, tail: usize, data: &[u8]) -> HeadTailBuffer {
        let mut buffer = HeadTailBuffer::new(head, tail);
        buffer.write(data);
        buffer
    }

    /// The gap marker line as rendered between head and tail.
    fn gap(n: u64) -> String {
        format!("[... {n} bytes omitted ...]\n")
    }

    fn line_cut(n: usize) -> String {
        format!("[... line truncated: {n} bytes]")
    }

    fn trunc(original: u64, retained: u64) -> Option<Truncation> {
        Some(Truncation {
            original_bytes: original,
            retained_bytes: retained,
            omitted_bytes: original - retained,
            strategy: "head_tail".to_owned(),
        })
    }

    /// The tail contents in stream order.
    fn tail_of(buffer: &HeadTailBuffer) -> Vec<u8> {
        let (a, b) = buffer.tail_parts();
        [a, b].concat()
    }

    /// Tiny xorshift64 PRNG so the property tests are deterministic without extra crates.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            let mut x = self.0;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.0 = x;
            x
        }

        /// Uniform-ish in `0..n` (`n > 0`).
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Naive model of rendering: keeps the whole stream and derives head, tail and the
    /// expected text directly from positions. Only valid for ASCII streams whose lines are
    /// all at most `MAX_LINE_BYTES` long (no character or line cuts).
    fn model_render(stream: &[u8], head: usize, tail: usize, cursor: u64) -> Rendered {
        let total = stream.len();
        let cursor = cursor as usize;
        if cursor >= total {
            return Rendered::empty();
        }
        let head_end = total.min(head);
        let tail_start = head_end.max(total.saturating_sub(tail));
        let ascii = |b: &[u8]| String::from_utf8(b.to_vec()).expect("model input is ASCII");
        if head_end < tail_start && cursor < tail_start {
            let from = cursor.min(head_end);
            let mut text = ascii(&stream[from..head_end]);
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            let omitted = tail_start - cursor.max(head_end);
            text.push_str(&gap(omitted as u64));
            text.push_str(&ascii(&stream[tail_start..]));
            Rendered {
                text,
                truncation: trunc(
                    (total - cursor) as u64,
                    (head_end - from + total - tail_start) as u64,
                ),
            }
        } else {
            Rendered {
                text: ascii(&stream[cursor..]),
                truncation: None,
            }
        }
    }

    /// Checks the bookkeeping every rendering must satisfy.
    fn assert_consistent(buffer: &HeadTailBuffer, cursor: u64, rendered: &Rendered) {
        let original = buffer.total_bytes().saturating_sub(cursor);
        match &rendered.truncation {
            None => {
                assert!(original as usize <= buffer.retained_bytes());
            }
            Some(t) => {
                assert_eq!(t.original_bytes, original);
                assert_eq!(t.retained_bytes + t.omitted_bytes, t.original_bytes);
                assert!(t.omitted_bytes > 0);
                assert!(t.retained_bytes as usize <= buffer.retained_bytes());
                assert_eq!(t.strategy, HEAD_TAIL_STRATEGY);
            }
        }
    }

    #[test]
    fn empty_buffer_renders_nothing() {
        let buffer = HeadTailBuffer::default();
        assert_eq!(buffer.total_bytes(), 0);
        assert_eq!(buffer.retained_bytes(), 0);
        assert_eq!(buffer.allocated_bytes(), 0);
        assert_eq!(buffer.render(), Rendered::empty());
        assert_eq!(buffer.render_from(0), Rendered::empty());
        assert_eq!(buffer.render_from(7), Rendered::empty());
        assert_eq!(buffer.head_capacity(), DEFAULT_HEAD_BYTES);
        assert_eq!(buffer.tail_capacity(), DEFAULT_TAIL_BYTES);
    }

    #[test]
    fn small_output_is_rendered_verbatim() {
        let buffer = filled(64, 64, b"hello\nworld\n");
        assert_eq!(buffer.total_bytes(), 12);
        let rendered = buffer.render();
        assert_eq!(rendered.text, "hello\nworld\n");
        assert_eq!(rendered.truncation, None);
        // Nothing reached the tail.
        assert_eq!(tail_of(&buffer), b"");
    }

    #[test]
    fn exactly_head_size_stays_in_head() {
        let buffer = filled(8, 8, b"01234567");
        assert_eq!(buffer.total_bytes(), 8);
        assert_eq!(buffer.head, b"01234567");
        assert!(buffer.ring.is_empty());
        assert_eq!(buffer.render().text, "01234567");
        assert_eq!(buffer.render().truncation, None);

        let mut buffer = buffer;
        buffer.write(b"8");
        assert_eq!(tail_of(&buffer), b"8");
        assert_eq!(buffer.render().text, "012345678");
        assert_eq!(buffer.render().truncation, None);
    }

    #[test]
    fn head_and_tail_without_omission() {
        for data in [&b"0123456789ab"[..], b"0123456789abcdef"] {
            let mut buffer = HeadTailBuffer::new(8, 8);
            for chunk in data.chunks(3) {
                buffer.write(chunk);
            }
            let rendered = buffer.render();
            assert_eq!(rendered.text.as_bytes(), data);
            assert_eq!(rendered.truncation, None);
            assert_eq!(buffer.total_bytes(), data.len() as u64);
        }
    }

    #[test]
    fn omission_is_marked_with_the_exact_count() {
        let data: Vec<u8> = (0..100u8).map(|i| b'0' + i % 10).collect();
        let buffer = filled(10, 10, &data);
        let rendered = buffer.render();
        assert_eq!(
            rendered.text,
            "0123456789\n[... 80 bytes omitted ...]\n0123456789"
        );
        assert_eq!(
            rendered.truncation,
            Some(Truncation {
                original_bytes: 100,
                retained_bytes: 20,
                omitted_bytes: 80,
                strategy: "head_tail".to_owned(),
            })
        );
        assert_eq!(buffer.retained_bytes(), 20);
    }

    #[test]
    fn marker_does_not_double_a_newline_ending_the_head() {
        let buffer = filled(6, 4, b"line1\nmiddle stuff\nend\n");
        let rendered = buffer.render();
        assert_eq!(rendered.text, format!("line1\n{}end\n", gap(13)));
        assert_eq!(rendered.truncation, trunc(23, 10));
    }

    #[test]
    fn multi_megabyte_output_stays_bounded() {
        let mut buffer = HeadTailBuffer::default();
        let limit = DEFAULT_HEAD_BYTES + DEFAULT_TAIL_BYTES;
        let line = b"some log line with a little content in it 0123456789\n";
        let chunk: Vec<u8> = line.iter().copied().cycle().take(64 * 1024).collect();
        let mut written = 0u64;
        for _ in 0..128 {
            buffer.write(&chunk);
            written += chunk.len() as u64;
            assert!(buffer.retained_bytes() <= limit);
            assert!(buffer.allocated_bytes() <= limit);
        }
        assert_eq!(buffer.total_bytes(), 8 * 1024 * 1024);
        assert_eq!(buffer.total_bytes(), written);
        assert_eq!(buffer.retained_bytes(), limit);
        assert_eq!(buffer.allocated_bytes(), limit);

        let rendered = buffer.render();
        let t = rendered.truncation.clone().expect("output was truncated");
        assert_eq!(t.original_bytes, written);
        assert!(t.retained_bytes as usize <= limit);
        assert_eq!(t.retained_bytes + t.omitted_bytes, written);
        assert!(rendered.text.len() <= limit + 100);
        // The tail is the true end of the stream.
        let expected_tail = &chunk[chunk.len() - DEFAULT_TAIL_BYTES..];
        assert_eq!(tail_of(&buffer), expected_tail);
        let expected_tail = std::str::from_utf8(expected_tail).expect("ASCII");
        assert!(
            rendered
                .text
                .ends_with(&format!("{}{expected_tail}", gap(t.omitted_bytes)))
        );
        assert!(rendered.text.starts_with("some log line"));
    }

    #[test]
    fn write_larger_than_tail_keeps_its_last_bytes() {
        let mut buffer = HeadTailBuffer::new(4, 8);
        buffer.write(b"abcdXY");
        buffer.write(b"0123456789ABCDEFGHIJ");
        assert_eq!(buffer.head, b"abcd");
        assert_eq!(tail_of(&buffer), b"CDEFGHIJ");
        assert_eq!(buffer.total_bytes(), 26);
        assert_eq!(buffer.render().text, format!("abcd\n{}CDEFGHIJ", gap(14)));
        // A write that fills the head and overflows the tail in one go.
        let buffer = filled(4, 8, b"abcd0123456789ABCDEFGHIJ");
        assert_eq!(buffer.head, b"abcd");
        assert_eq!(tail_of(&buffer), b"CDEFGHIJ");
        assert_eq!(buffer.ring.len(), 8);
    }

    #[test]
    fn long_line_in_head_is_cut() {
        let mut data = vec![b'x'; 5000];
        data.extend_from_slice(b"\nshort\n");
        let buffer = filled(16 * 1024, 16 * 1024, &data);
        let rendered = buffer.render();
        let expected = format!(
            "{}{}\nshort\n",
            "x".repeat(MAX_LINE_BYTES),
            line_cut(5000 - MAX_LINE_BYTES)
        );
        assert_eq!(rendered.text, expected);
        assert_eq!(
            rendered.truncation,
            trunc(5007, 5007 - (5000 - MAX_LINE_BYTES) as u64)
        );
    }

    #[test]
    fn line_of_exactly_max_bytes_is_kept() {
        let mut data = vec![b'x'; MAX_LINE_BYTES];
        data.push(b'\n');
        data.extend(vec![b'y'; MAX_LINE_BYTES]);
        let rendered = filled(8192, 8192, &data).render();
        assert_eq!(rendered.text.as_bytes(), &data[..]);
        assert_eq!(rendered.truncation, None);
        data.push(b'y');
        let rendered = filled(8192, 8192, &data).render();
        let expected = format!(
            "{}\n{}{}",
            "x".repeat(MAX_LINE_BYTES),
            "y".repeat(MAX_LINE_BYTES),
            line_cut(1)
        );
        assert_eq!(rendered.text, expected);
        assert_eq!(
            rendered.truncation,
            trunc(data.len() as u64, data.len() as u64 - 1)
        );
    }

    #[test]
    fn long_line_in_tail_is_cut() {
        let mut data = b"start\n".to_vec();
        data.extend(vec![b'-'; 10_000]);
        data.push(b'\n');
        data.extend(vec![b'y'; 3000]);
        data.extend_from_slice(b"\nend\n");
        // Head 6 ("start\n"), tail 4000: the tail starts inside the dashes.
        let buffer = filled(6, 4000, &data);
        let total = data.len() as u64;
        let rendered = buffer.render();
        // Tail: 994 dashes, newline, 3000 y's, newline, "end\n".
        let expected = format!(
            "start\n{}{}\n{}{}\nend\n",
            gap(total - 6 - 4000),
            "-".repeat(994),
            "y".repeat(MAX_LINE_BYTES),
            line_cut(3000 - MAX_LINE_BYTES)
        );
        assert_eq!(rendered.text, expected);
        assert_eq!(
            rendered.truncation,
            trunc(total, 6 + 4000 - (3000 - MAX_LINE_BYTES) as u64)
        );
    }

    #[test]
    fn line_crossing_the_gap_is_cut_as_two_pieces() {
        // One 20,000-byte line: the head piece and the tail piece are each cut.
        let data = vec![b'z'; 20_000];
        let buffer = filled(3000, 2500, &data);
        let rendered = buffer.render();
        let expected = format!(
            "{}{}\n{}{}{}",
            "z".repeat(MAX_LINE_BYTES),
            line_cut(3000 - MAX_LINE_BYTES),
            gap(20_000 - 5500),
            "z".repeat(MAX_LINE_BYTES),
            line_cut(2500 - MAX_LINE_BYTES)
        );
        assert_eq!(rendered.text, expected);
        assert_eq!(
            rendered.truncation,
            trunc(20_000, 2 * MAX_LINE_BYTES as u64)
        );
    }

    #[test]
    fn mixed_short_and_long_lines() {
        let lengths = [10, MAX_LINE_BYTES, MAX_LINE_BYTES + 1, 0, 5000, 3, 0, 2500];
        let mut data = Vec::new();
        let mut expected = String::new();
        let mut cut = 0u64;
        for (i, &len) in lengths.iter().enumerate() {
            let c = b'a' + i as u8;
            data.extend(std::iter::repeat_n(c, len));
            data.push(b'\n');
            let kept = len.min(MAX_LINE_BYTES);
            expected.push_str(&String::from(c as char).repeat(kept));
            if len > MAX_LINE_BYTES {
                expected.push_str(&line_cut(len - MAX_LINE_BYTES));
                cut += (len - MAX_LINE_BYTES) as u64;
            }
            expected.push('\n');
        }
        // The last line has no newline.
        data.extend_from_slice(b"tail");
        expected.push_str("tail");
        let buffer = filled(64 * 1024, 1024, &data);
        let rendered = buffer.render();
        assert_eq!(rendered.text, expected);
        let total = data.len() as u64;
        assert_eq!(rendered.truncation, trunc(total, total - cut));
    }

    #[test]
    fn concurrent_writers_lose_nothing() {
        const THREADS: usize = 8;
        const LINES: usize = 500;
        let shared = SharedBuffer::new(1024 * 1024, 1024);
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let shared = shared.clone();
                std::thread::spawn(move || {
                    let mut written = 0u64;
                    for i in 0..LINES {
                        let line = format!("thread {t:02} line {i:04} {}\n", "#".repeat(i % 37));
                        shared.write(line.as_bytes());
                        written += line.len() as u64;
                    }
                    written
                })
            })
            .collect();
        let written: u64 = handles
            .into_iter()
            .map(|h| h.join().expect("writer thread panicked"))
            .sum();
        assert_eq!(shared.total_bytes(), written);
        let rendered = shared.render();
        assert_eq!(rendered.truncation, None);
        assert_eq!(rendered.text.len() as u64, written);
        let mut seen = vec![vec![false; LINES]; THREADS];
        for line in rendered.text.lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            assert_eq!(fields.len(), 5, "mangled line {line:?}");
            assert_eq!(fields[0], "thread");
            assert_eq!(fields[2], "line");
            let t: usize = fields[1].parse().expect("thread number");
            let i: usize = fields[3].parse().expect("line number");
            assert_eq!(fields[4], "#".repeat(i % 37), "mangled line {line:?}");
            assert!(!seen[t][i], "duplicate line {line:?}");
            seen[t][i] = true;
        }
        assert!(seen.iter().flatten().all(|&s| s));
    }

    #[test]
    fn concurrent_writers_into_a_small_buffer_count_exactly() {
        let shared = SharedBuffer::new(100, 100);
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let shared = shared.clone();
                std::thread::spawn(move || {
                    for i in 0..1000usize {
                        shared.write(&vec![b'a' + t as u8; i % 300]);
                    }
                })
            })
            .collect();
        for handle in handles {
            handle.join().expect("writer thread panicked");
        }
        let expected: u64 = 4 * (0..1000u64).map(|i| i % 300).sum::<u64>();
        assert_eq!(shared.total_bytes(), expected);
        let rendered = shared.render();
        assert_eq!(rendered.truncation, trunc(expected, 200));
        shared.with(|b| assert_eq!(b.retained_bytes(), 200));
    }

    #[test]
    fn byte_at_a_time_equals_bulk_write() {
        let mut data = Vec::new();
        for i in 0..400 {
            data.extend_from_slice(format!("line {i} é€😀 ").as_bytes());
            if i % 7 == 0 {
                data.extend(vec![b'L'; 2100]);
            }
            data.push(b'\n');
            if i % 50 == 0 {
                data.extend_from_slice(b"\xff\xc3");
            }
        }
        for (head, tail) in [(1, 1), (100, 100), (5000, 3000), (1 << 20, 1 << 20)] {
            let bulk = filled(head, tail, &data);
            let mut single = HeadTailBuffer::new(head, tail);
            for &b in &data {
                single.write(&[b]);
            }
            assert_eq!(single.total_bytes(), bulk.total_bytes());
            assert_eq!(single.head, bulk.head);
            assert_eq!(tail_of(&single), tail_of(&bulk));
            assert_eq!(single.render(), bulk.render());
            let total = data.len() as u64;
            for cursor in [1, 7, 99, 100, 101, 4000, total - 3000, total - 1, total] {
                assert_eq!(single.render_from(cursor), bulk.render_from(cursor));
            }
        }
    }

    #[test]
    fn empty_writes_change_nothing() {
        let mut buffer = HeadTailBuffer::new(4, 4);
        buffer.write(b"");
        assert_eq!(buffer.total_bytes(), 0);
        assert_eq!(buffer.allocated_bytes(), 0);
        assert_eq!(buffer.render(), Rendered::empty());
        buffer.write(b"abcdef");
        let before = buffer.render();
        buffer.write(&[]);
        assert_eq!(buffer.total_bytes(), 6);
        assert_eq!(buffer.render(), before);
        buffer.write(b"ghijk");
        buffer.write(b"");
        assert_eq!(buffer.total_bytes(), 11);
        assert_eq!(tail_of(&buffer), b"hijk");
    }

    #[test]
    fn ring_wraparound_matches_the_true_end_of_the_stream() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for (head, tail) in [(7, 13), (1, 1), (3, 64), (50, 5)] {
            let mut buffer = HeadTailBuffer::new(head, tail);
            let mut stream = Vec::new();
            for _ in 0..2000 {
                let len = rng.below(40);
                let chunk: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                buffer.write(&chunk);
                stream.extend_from_slice(&chunk);
                let head_end = stream.len().min(head);
                let tail_start = head_end.max(stream.len().saturating_sub(tail));
                assert_eq!(buffer.head, &stream[..head_end]);
                assert_eq!(tail_of(&buffer), &stream[tail_start..]);
                assert_eq!(buffer.total_bytes(), stream.len() as u64);
                assert!(buffer.ring.len() <= tail && buffer.ring.capacity() <= tail);
            }
        }
    }

    /// One character of each UTF-8 width.
    const WIDE_CHARS: [&str; 3] = ["é", "€", "😀"];

    #[test]
    fn multibyte_char_across_the_head_end() {
        const HEAD: usize = 16;
        const TAIL: usize = 16;
        for ch in WIDE_CHARS {
            let w = ch.len();
            for p in 0..=HEAD + 4 {
                let stream = format!("{}{ch}{}", "a".repeat(p), "b".repeat(40));
                let total = stream.len();
                let tail_start = total - TAIL;
                let rendered = filled(HEAD, TAIL, stream.as_bytes()).render();
                // A straddling character is dropped from the head, never split.
                let keep = if p < HEAD && p + w > HEAD { p } else { HEAD };
                let expected = format!(
                    "{}\n{}{}",
                    &stream[..keep],
                    gap((tail_start - keep) as u64),
                    "b".repeat(TAIL)
                );
                assert_eq!(rendered.text, expected, "char {ch:?} at {p}");
                assert_eq!(
                    rendered.truncation,
                    trunc(total as u64, (keep + TAIL) as u64)
                );
            }
        }
    }

    #[test]
    fn multibyte_char_across_the_head_tail_boundary_without_gap_is_intact() {
        for ch in WIDE_CHARS {
            for p in 0..8 {
                let stream = format!("{}{ch}bbb", "a".repeat(p));
                let buffer = filled(8, 16, stream.as_bytes());
                assert!(buffer.total_bytes() as usize <= 24);
                let rendered = buffer.render();
                assert_eq!(rendered.text, stream);
                assert_eq!(rendered.truncation, None);
            }
        }
    }

    #[test]
    fn multibyte_char_across_the_tail_start() {
        const HEAD: usize = 4;
        const TAIL: usize = 16;
        for ch in WIDE_CHARS {
            let w = ch.len();
            for q in 0..=20 {
                let stream = format!("{}{ch}{}", "a".repeat(30), "c".repeat(q));
                let total = stream.len();
                let tail_start = total - TAIL;
                let rendered = filled(HEAD, TAIL, stream.as_bytes()).render();
                // Continuation bytes at the tail start are skipped.
                let shown_from = if 30 < tail_start && tail_start < 30 + w {
                    30 + w
                } else {
                    tail_start
                };
                let expected = format!(
                    "aaaa\n{}{}",
                    gap((shown_from - HEAD) as u64),
                    &stream[shown_from..]
                );
                assert_eq!(
                    rendered.text, expected,
                    "char {ch:?}, tail start {tail_start}"
                );
                assert_eq!(
                    rendered.truncation,
                    trunc(total as u64, (HEAD + total - shown_from) as u64)
                );
            }
        }
    }

    #[test]
    fn multibyte_char_across_the_line_cut() {
        for ch in WIDE_CHARS {
            let w = ch.len();
            for p in MAX_LINE_BYTES - 5..=MAX_LINE_BYTES + 1 {
                let line = format!("{}{ch}{}", "a".repeat(p), "z".repeat(3000));
                let stream = format!("{line}\nnext\n");
                let rendered = filled(8192, 8192, stream.as_bytes()).render();
                let keep = if p < MAX_LINE_BYTES && p + w > MAX_LINE_BYTES {
                    p
                } else {
                    MAX_LINE_BYTES
                };
                let expected = format!("{}{}\nnext\n", &line[..keep], line_cut(line.len() - keep));
                assert_eq!(rendered.text, expected, "char {ch:?} at {p}");
                let total = stream.len() as u64;
                assert_eq!(
                    rendered.truncation,
                    trunc(total, total - (line.len() - keep) as u64)
                );
            }
        }
    }

    #[test]
    fn multibyte_char_at_every_cursor() {
        for ch in WIDE_CHARS {
            let w = ch.len();
            let stream = format!("ab{ch}cd");
            let total = stream.len();
            let buffer = filled(64, 64, stream.as_bytes());
            for cursor in 0..=total + 1 {
                let rendered = buffer.render_from(cursor as u64);
                if cursor > 2 && cursor < 2 + w {
                    assert_eq!(rendered.text, "cd");
                    assert_eq!(rendered.truncation, trunc((total - cursor) as u64, 2));
                } else {
                    assert_eq!(rendered.text, stream.get(cursor..).unwrap_or(""));
                    assert_eq!(rendered.truncation, None);
                }
            }
        }
        // A cursor inside a character in the tail, with a gap before it.
        let stream = format!("{}€tail", "a".repeat(30));
        let buffer = filled(4, 16, stream.as_bytes());
        let rendered = buffer.render_from(31);
        assert_eq!(rendered.text, "tail");
        assert_eq!(rendered.truncation, trunc(stream.len() as u64 - 31, 4));
    }

    #[test]
    fn invalid_utf8_is_rendered_lossily() {
        let buffer = filled(64, 64, b"ok \xff\xfe bad \xc3( \xe2\x82\n");
        let rendered = buffer.render();
        assert_eq!(
            rendered.text,
            "ok \u{FFFD}\u{FFFD} bad \u{FFFD}( \u{FFFD}\n"
        );
        // Invalid bytes are present (as U+FFFD), not omitted.
        assert_eq!(rendered.truncation, None);

        // Lone continuation bytes everywhere, with a gap and long lines.
        let data: Vec<u8> = std::iter::repeat_n(0x80u8, 10_000).collect();
        let buffer = filled(3000, 3000, &data);
        let rendered = buffer.render();
        assert!(rendered.text.contains('\u{FFFD}'));
        assert_consistent(&buffer, 0, &rendered);
        for cursor in [0, 1, 2999, 3000, 5000, 6999, 7000, 7001, 9999, 10_000] {
            assert_consistent(&buffer, cursor, &buffer.render_from(cursor));
        }
    }

    #[test]
    fn render_from_every_region() {
        // head = "0123456789", gap = 80 bytes, tail = "ABCDEFGHIJ".
        let mut data: Vec<u8> = b"0123456789".to_vec();
        data.extend(vec![b'.'; 80]);
        data.extend_from_slice(b"ABCDEFGHIJ");
        let buffer = filled(10, 10, &data);
        assert_eq!(buffer.total_bytes(), 100);

        let at_zero = buffer.render_from(0);
        assert_eq!(at_zero, buffer.render());
        assert_eq!(at_zero.text, format!("0123456789\n{}ABCDEFGHIJ", gap(80)));
        assert_eq!(at_zero.truncation, trunc(100, 20));

        let in_head = buffer.render_from(4);
        assert_eq!(in_head.text, format!("456789\n{}ABCDEFGHIJ", gap(80)));
        assert_eq!(in_head.truncation, trunc(96, 16));

        let at_gap_start = buffer.render_from(10);
        assert_eq!(at_gap_start.text, format!("{}ABCDEFGHIJ", gap(80)));
        assert_eq!(at_gap_start.truncation, trunc(90, 10));

        let in_gap = buffer.render_from(50);
        assert_eq!(in_gap.text, format!("{}ABCDEFGHIJ", gap(40)));
        assert_eq!(in_gap.truncation, trunc(50, 10));

        let at_tail_start = buffer.render_from(90);
        assert_eq!(at_tail_start.text, "ABCDEFGHIJ");
        assert_eq!(at_tail_start.truncation, None);

        let in_tail = buffer.render_from(95);
        assert_eq!(in_tail.text, "FGHIJ");
        assert_eq!(in_tail.truncation, None);

        assert_eq!(buffer.render_from(100), Rendered::empty());
        assert_eq!(buffer.render_from(101), Rendered::empty());
        assert_eq!(buffer.render_from(u64::MAX), Rendered::empty());
    }

    #[test]
    fn render_from_without_gap() {
        let buffer = filled(4, 8, b"abcdefghij");
        assert_eq!(buffer.render_from(2).text, "cdefghij");
        assert_eq!(buffer.render_from(4).text, "efghij");
        assert_eq!(buffer.render_from(9).text, "j");
        assert_eq!(buffer.render_from(2).truncation, None);
    }

    #[test]
    fn truncation_metadata_fields() {
        let buffer = filled(5, 5, b"hello, cruel world");
        let t = buffer.render().truncation.expect("truncated");
        assert_eq!(t.original_bytes, 18);
        assert_eq!(t.retained_bytes, 10);
        assert_eq!(t.omitted_bytes, 8);
        assert_eq!(t.strategy, "head_tail");
        assert_eq!(
            buffer.render().text,
            "hello\n[... 8 bytes omitted ...]\nworld"
        );
        // Incremental: metadata relative to the requested range.
        let t = buffer.render_from(3).truncation.expect("truncated");
        assert_eq!(
            (t.original_bytes, t.retained_bytes, t.omitted_bytes),
            (15, 7, 8)
        );
    }

    #[test]
    fn sizes_are_clamped_to_one() {
        let buffer = filled(0, 0, b"abc");
        assert_eq!(buffer.head_capacity(), 1);
        assert_eq!(buffer.tail_capacity(), 1);
        let rendered = buffer.render();
        assert_eq!(rendered.text, format!("a\n{}c", gap(1)));
        assert_eq!(rendered.truncation, trunc(3, 2));
    }

    #[test]
    fn shared_buffer_recovers_from_poisoning() {
        let shared = SharedBuffer::new(16, 16);
        shared.write(b"before ");
        let clone = shared.clone();
        let result = std::thread::spawn(move || {
            clone.with(|_| panic!("writer died holding the lock"));
        })
        .join();
        assert!(result.is_err());
        shared.write(b"after");
        assert_eq!(shared.total_bytes(), 12);
        assert_eq!(shared.render().text, "before after");
        assert_eq!(shared.render_from(7).text, "after");
        assert!(format!("{shared:?}").contains("total_bytes: 12"));
        shared.with(|b| assert!(format!("{shared:?}").contains("locked") && b.total_bytes() == 12));
    }

    #[test]
    fn io_write_impls_append() {
        use std::io::Write as _;
        let mut buffer = HeadTailBuffer::new(8, 8);
        write!(buffer, "{}-{}", 12, 'a'.to_ascii_uppercase()).expect("infallible");
        buffer.flush().expect("infallible");
        assert_eq!(buffer.render().text, "12-A");

        let mut shared = SharedBuffer::default();
        shared.write_all(b"xyz").expect("infallible");
        assert_eq!(shared.render().text, "xyz");
        let from_core = SharedBuffer::from(buffer);
        assert_eq!(from_core.total_bytes(), 4);
    }

    #[test]
    fn property_ascii_streams_match_the_naive_model() {
        let mut rng = Rng(0x2545_F491_4F6C_DD1D);
        for _ in 0..300 {
            let head = 1 + rng.below(40);
            let tail = 1 + rng.below(40);
            let mut buffer = HeadTailBuffer::new(head, tail);
            let mut stream = Vec::new();
            for _ in 0..rng.below(60) {
                let len = rng.below(50);
                let chunk: Vec<u8> = (0..len).map(|_| b"abc \n"[rng.below(5)]).collect();
                buffer.write(&chunk);
                stream.extend_from_slice(&chunk);
            }
            let total = stream.len() as u64;
            assert_eq!(buffer.total_bytes(), total);
            assert_eq!(buffer.render(), model_render(&stream, head, tail, 0));
            let cursors: Vec<u64> = if total < 200 {
                (0..=total + 1).collect()
            } else {
                (0..50).map(|_| rng.next() % (total + 2)).collect()
            };
            for cursor in cursors {
                let rendered = buffer.render_from(cursor);
                assert_eq!(
                    rendered,
                    model_render(&stream, head, tail, cursor),
                    "head {head} tail {tail} cursor {cursor}"
                );
                assert_consistent(&buffer, cursor, &rendered);
            }
        }
    }

    #[test]
    fn property_utf8_streams_keep_whole_characters() {
        let mut rng = Rng(0xDEAD_BEEF_CAFE_F00D);
        let alphabet = ["a", "\n", "é", "€", "😀", "z"];
        for _ in 0..300 {
            let head = 1 + rng.below(30);
            let tail = 1 + rng.below(30);
            let mut buffer = HeadTailBuffer::new(head, tail);
            let mut stream = String::new();
            for _ in 0..rng.below(30) {
                let mut chunk = String::new();
                for _ in 0..rng.below(10) {
                    chunk.push_str(alphabet[rng.below(alphabet.len())]);
                }
                // Write in random byte-level pieces, splitting characters.
                let bytes = chunk.as_bytes();
                let split = rng.below(bytes.len() + 1);
                buffer.write(&bytes[..split]);
                buffer.write(&bytes[split..]);
                stream.push_str(&chunk);
            }
            let total = stream.len();
            let rendered = buffer.render();
            assert_consistent(&buffer, 0, &rendered);
            let text = &rendered.text;
            match text.find("[... ") {
                None => {
                    assert_eq!(text, &stream);
                    assert_eq!(rendered.truncation, None);
                }
                Some(at) => {
                    let (before, marker) = text.split_at(at);
                    let end = marker.find(" ...]\n").expect("marker end");
                    let count: usize = marker["[... ".len()..end]
                        .strip_suffix(" bytes omitted")
                        .expect("gap marker")
                        .parse()
                        .expect("count");
                    let after = &marker[end + " ...]\n".len()..];
                    // The head piece, minus the newline added before the marker if its last
                    // line was unterminated (an added newline makes it longer than the head
                    // or makes it differ from the stream).
                    let shown_head = if before.len() <= head && stream.starts_with(before) {
                        before
                    } else {
                        before.strip_suffix('\n').expect("added newline")
                    };
                    assert!(stream.starts_with(shown_head));
                    assert!(stream.ends_with(after));
                    assert!(shown_head.len() <= head && head - shown_head.len() <= 3);
                    assert!(after.len() <= tail && tail - after.len() <= 3);
                    assert_eq!(shown_head.len() + count + after.len(), total);
                    assert_eq!(
                        rendered.truncation,
                        trunc(total as u64, (shown_head.len() + after.len()) as u64)
                    );
                }
            }
            for _ in 0..10 {
                let cursor = rng.next() % (total as u64 + 2);
                assert_consistent(&buffer, cursor, &buffer.render_from(cursor));
            }
        }
    }

    #[test]
    fn property_arbitrary_bytes_never_panic_and_stay_consistent() {
        let mut rng = Rng(0x0123_4567_89AB_CDEF);
        let interesting = [
            0x80u8, 0xBF, 0xC0, 0xC3, 0xE2, 0xF0, 0xF4, 0xF5, 0xFF, b'\n',
        ];
        for _ in 0..200 {
            let head = 1 + rng.below(3000);
            let tail = 1 + rng.below(3000);
            let mut buffer = HeadTailBuffer::new(head, tail);
            let mut bulk = Vec::new();
            for _ in 0..rng.below(20) {
                let len = rng.below(2000);
                let chunk: Vec<u8> = (0..len)
                    .map(|_| match rng.below(4) {
                        0 => interesting[rng.below(interesting.len())],
                        1 => rng.next() as u8,
                        _ => b'x',
                    })
                    .collect();
                buffer.write(&chunk);
                bulk.extend_from_slice(&chunk);
            }
            let total = bulk.len() as u64;
            assert_eq!(buffer.total_bytes(), total);
            assert_eq!(filled(head, tail, &bulk).render(), buffer.render());
            for _ in 0..10 {
                let cursor = rng.next() % (total + 2);
                assert_consistent(&buffer, cursor, &buffer.render_from(cursor));
            }
            assert_consistent(&buffer, 0, &buffer.render());
        }
    }
}
