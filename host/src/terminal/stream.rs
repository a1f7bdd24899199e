//! The stream view of terminal output: text as a log would show it. Escape sequences (colours,
//! cursor movement, titles) are removed and a line rewritten with carriage returns or
//! backspaces (a progress bar) shows its last state. The `vte` crate parses; this only
//! decides what each parsed action does to the text.

use vte::{Params, Parser, Perform};

/// The furthest a cursor movement may take the column (so a hostile sequence cannot make a
/// line of millions of blanks).
const MAX_COLUMN: usize = 4096;

/// `text` (terminal output, possibly cut anywhere) in the stream view.
pub fn stream_view(text: &str) -> String {
    let mut lines = Lines {
        out: String::with_capacity(text.len()),
        line: Vec::new(),
        column: 0,
    };
    Parser::new().advance(&mut lines, text.as_bytes());
    lines.finish()
}

/// The text so far and the line being written, with its cursor column.
struct Lines {
    out: String,
    line: Vec<char>,
    column: usize,
}

impl Lines {
    fn put(&mut self, c: char) {
        match self.line.get_mut(self.column) {
            Some(cell) => *cell = c,
            None => {
                // A cursor moved past the end: blanks up to it.
                self.line.resize(self.column, ' ');
                self.line.push(c);
            }
        }
        self.column += 1;
    }

    fn end_line(&mut self) {
        self.out.extend(self.line.drain(..));
        self.out.push('\n');
        self.column = 0;
    }

    fn finish(mut self) -> String {
        self.out.extend(self.line.drain(..));
        self.out
    }
}

impl Perform for Lines {
    fn print(&mut self, c: char) {
        self.put(c);
    }

    fn execute(&mut self, byte: u8) {
        match byte {
            b'\n' | 0x0b | 0x0c => self.end_line(),
            b'\r' => self.column = 0,
            0x08 => self.column = self.column.saturating_sub(1),
            b'\t' => self.put('\t'),
            _ => {}
        }
    }

    fn csi_dispatch(&mut self, params: &Params, _: &[u8], _: bool, action: char) {
        let first = params
            .iter()
            .next()
            .and_then(|param| param.first().copied())
            .unwrap_or(0);
        match action {
            // Erase in line: from the cursor (0), to the cursor (1), the whole line (2).
            'K' => match first {
                0 => self.line.truncate(self.column),
                1 => {
                    let end = self.column.min(self.line.len());
                    self.line[..end].fill(' ');
                }
                _ => self.line.clear(),
            },
            // Cursor to a column (1-based), back or forward.
            'G' => self.column = (usize::from(first.max(1)) - 1).min(MAX_COLUMN),
            'D' => self.column = self.column.saturating_sub(usize::from(first.max(1))),
            'C' => self.column = (self.column + usize::from(first.max(1))).min(MAX_COLUMN),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_go_and_overwrites_resolve() {
        assert_eq!(stream_view("\x1b[1;31mred\x1b[0m\r\n"), "red\n");
        assert_eq!(stream_view("10%\r50%\r100%\ndone\n"), "100%\ndone\n");
        assert_eq!(stream_view("long text\rshort\x1b[K\n"), "short\n");
        assert_eq!(stream_view("abc\x08\x08X\n"), "aXc\n");
        assert_eq!(stream_view("\x1b]0;title\x07prompt> "), "prompt> ");
        assert_eq!(stream_view("a\x1b[5Gb"), "a   b");
        // Cut in the middle of a sequence: what is there is dropped, nothing more.
        assert_eq!(stream_view("ok\x1b[3"), "ok");
        assert_eq!(stream_view("héllo ✓\n"), "héllo ✓\n");
    }

    #[test]
    fn an_escape_string_longer_than_the_parser_keeps_still_ends() {
        let long = "t;".repeat(5000);
        for end in ["\x07", "\x1b\\", "\x18"] {
            assert_eq!(
                stream_view(&format!("a\x1b]0;{long}{end}b")),
                "ab",
                "{end:?}"
            );
        }
        assert_eq!(stream_view(&format!("a\x1bP1q{long}\x1b\\b")), "ab");
        assert_eq!(stream_view(&format!("a\x1b_{long}\x1b\\b")), "ab");
    }

    /// vte keeps an OSC payload in a fixed array only without its `std` feature (with it, in a
    /// `Vec` that grows with whatever a program prints). `new_with_size` exists only then, so
    /// this does not compile if something in the dependency tree turns `vte/std` on again
    /// (`cargo tree -e features -i vte` tells what).
    #[test]
    fn vte_keeps_a_bounded_osc_buffer() {
        /// The bytes of every OSC dispatched.
        struct Kept(Vec<usize>);
        impl Perform for Kept {
            fn osc_dispatch(&mut self, params: &[&[u8]], _: bool) {
                self.0.push(params.iter().map(|param| param.len()).sum());
            }
        }
        let mut parser = Parser::<16>::new_with_size();
        let mut kept = Kept(Vec::new());
        parser.advance(&mut kept, b"\x1b]0;");
        for _ in 0..100 {
            parser.advance(&mut kept, &[b'x'; 10_000]);
        }
        parser.advance(&mut kept, b"\x07");
        assert_eq!(kept.0, [16]);
    }
}
