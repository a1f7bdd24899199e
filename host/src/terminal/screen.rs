//! The screen view: a terminal emulator (the `vt100` crate) fed with a process's terminal
//! output, so the visible screen of a full-screen program can be read as rows of text. Memory
//! is bounded by the terminal's size (no scrollback is kept).

use std::num::NonZeroU16;

use super::TerminalSize;

/// The visible screen of a terminal at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Screen {
    /// Every row of the screen, top to bottom, trailing blanks removed.
    pub rows: Vec<String>,
    /// The cursor's row (0-based).
    pub cursor_row: u16,
    /// The cursor's column (0-based).
    pub cursor_col: u16,
    /// The program hid the cursor.
    pub cursor_hidden: bool,
    /// The program is showing its alternate screen (full-screen programs such as `less`,
    /// editors).
    pub alternate: bool,
    /// The terminal's size.
    pub size: TerminalSize,
}

/// One terminal's emulator.
pub struct Emulator {
    parser: vt100::Parser,
}

impl std::fmt::Debug for Emulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emulator")
            .field("size", &self.parser.screen().size())
            .finish_non_exhaustive()
    }
}

fn nonzero(n: u16) -> NonZeroU16 {
    NonZeroU16::new(n).unwrap_or(NonZeroU16::MIN)
}

impl Emulator {
    /// An empty screen of `size`.
    pub fn new(size: TerminalSize) -> Emulator {
        Emulator {
            parser: vt100::Parser::new(nonzero(size.rows), nonzero(size.cols), 0),
        }
    }

    /// Apply output the program wrote.
    pub fn process(&mut self, bytes: &[u8]) {
        self.parser.process(bytes);
    }

    /// Change the size (the program learns of it by `SIGWINCH` and redraws).
    pub fn resize(&mut self, size: TerminalSize) {
        self.parser.set_size(nonzero(size.rows), nonzero(size.cols));
    }

    /// Whether the program switched the cursor keys to application mode.
    pub fn application_cursor(&self) -> bool {
        self.parser.screen().application_cursor()
    }

    /// The visible screen now.
    pub fn screen(&self) -> Screen {
        let screen = self.parser.screen();
        let (rows, cols) = screen.size();
        let (cursor_row, cursor_col) = screen.cursor_position();
        Screen {
            rows: screen
                .rows(0, cols.get())
                .map(|row| row.trim_end().to_owned())
                .collect(),
            cursor_row,
            cursor_col,
            cursor_hidden: screen.hide_cursor(),
            alternate: screen.alternate_screen(),
            size: TerminalSize {
                rows: rows.get(),
                cols: cols.get(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_screen_shows_what_a_program_drew() {
        let mut emulator = Emulator::new(TerminalSize { rows: 5, cols: 20 });
        emulator.process(b"first line\r\nsecond\x1b[3;5Hdrawn\x1b[?1h");
        let screen = emulator.screen();
        assert_eq!(screen.rows, ["first line", "second", "    drawn", "", ""]);
        assert_eq!((screen.cursor_row, screen.cursor_col), (2, 9));
        assert!(emulator.application_cursor());
        emulator.resize(TerminalSize { rows: 3, cols: 10 });
        assert_eq!(emulator.screen().size, TerminalSize { rows: 3, cols: 10 });
        assert_eq!(emulator.screen().rows.len(), 3);
    }

    #[test]
    fn a_title_longer_than_the_parser_keeps_still_ends() {
        let mut emulator = Emulator::new(TerminalSize { rows: 3, cols: 20 });
        emulator.process(b"a\x1b]2;");
        for _ in 0..100 {
            emulator.process(&[b'x'; 10_000]);
        }
        emulator.process(b"\x07b\x1bP1q");
        emulator.process(&[b'y'; 10_000]);
        emulator.process(b"\x1b\\c");
        assert_eq!(emulator.screen().rows, ["abc", "", ""]);
    }
}
