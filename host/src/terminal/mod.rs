//! Terminals: what the host needs to run a command on a pseudo-terminal and show a model what
//! it printed. Sizes with their bounds, named keys and the bytes a terminal sends for them,
//! and the two views of terminal output: the *stream* view (`stream.rs`: escape sequences
//! removed, carriage-return overwrites resolved) and the *screen* view (`screen.rs`: the
//! visible screen kept by a terminal emulator). Escape sequences are parsed by the `vte` and
//! `vt100` crates, never here.

mod keys;
mod screen;
mod stream;

pub use keys::Key;
pub use screen::{Emulator, Screen};
pub use stream::stream_view;

/// Fewest rows of a terminal.
pub const MIN_ROWS: u16 = 2;
/// Most rows of a terminal (the emulator's memory grows with rows times columns).
pub const MAX_ROWS: u16 = 200;
/// Fewest columns of a terminal.
pub const MIN_COLS: u16 = 10;
/// Most columns of a terminal.
pub const MAX_COLS: u16 = 500;

/// A terminal's size in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TerminalSize {
    /// Rows (lines).
    pub rows: u16,
    /// Columns.
    pub cols: u16,
}

impl Default for TerminalSize {
    /// 24 rows of 80 columns.
    fn default() -> Self {
        TerminalSize { rows: 24, cols: 80 }
    }
}

impl TerminalSize {
    /// `Err` with a message naming the bounds when the size is outside them.
    pub fn check(self) -> Result<TerminalSize, String> {
        if (MIN_ROWS..=MAX_ROWS).contains(&self.rows) && (MIN_COLS..=MAX_COLS).contains(&self.cols)
        {
            Ok(self)
        } else {
            Err(format!(
                "terminal size {}x{} (rows x columns) is out of bounds: rows {MIN_ROWS}-{MAX_ROWS}, \
                 columns {MIN_COLS}-{MAX_COLS}",
                self.rows, self.cols
            ))
        }
    }
}
