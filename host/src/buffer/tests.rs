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
fn io_write_impls_append() {
    use std::io::Write as _;
    let mut buffer = HeadTailBuffer::new(8, 8);
    write!(buffer, "{}-{}", 12, 'a'.to_ascii_uppercase()).expect("infallible");
    buffer.flush().expect("infallible");
    assert_eq!(buffer.render().text, "12-A");
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
