//! Named keys and the bytes a terminal (xterm) sends for them.

/// A key a model may press.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// Enter (Return).
    Enter,
    /// Tab.
    Tab,
    /// Escape.
    Escape,
    /// Backspace (DEL, as terminals send it).
    Backspace,
    /// Cursor up.
    Up,
    /// Cursor down.
    Down,
    /// Cursor left.
    Left,
    /// Cursor right.
    Right,
    /// Home.
    Home,
    /// End.
    End,
    /// Page up.
    PageUp,
    /// Page down.
    PageDown,
    /// A function key, F1 to F12.
    Function(u8),
    /// Control and a letter (`a` to `z`, either case) or one of `@ [ \ ] ^ _`.
    Ctrl(char),
}

impl Key {
    /// The bytes for this key: on a terminal as xterm sends them (`application_cursor`: the
    /// program switched the cursor keys to application mode, as full-screen programs do);
    /// on a pipe the same, except that Enter is a newline. `Err` for a function key outside
    /// F1-F12 or a control character that does not exist.
    pub fn bytes(self, terminal: bool, application_cursor: bool) -> Result<&'static [u8], String> {
        let cursor = |normal: &'static [u8], application: &'static [u8]| {
            if application_cursor {
                application
            } else {
                normal
            }
        };
        Ok(match self {
            Key::Enter if terminal => b"\r",
            Key::Enter => b"\n",
            Key::Tab => b"\t",
            Key::Escape => b"\x1b",
            Key::Backspace => b"\x7f",
            Key::Up => cursor(b"\x1b[A", b"\x1bOA"),
            Key::Down => cursor(b"\x1b[B", b"\x1bOB"),
            Key::Right => cursor(b"\x1b[C", b"\x1bOC"),
            Key::Left => cursor(b"\x1b[D", b"\x1bOD"),
            Key::Home => cursor(b"\x1b[H", b"\x1bOH"),
            Key::End => cursor(b"\x1b[F", b"\x1bOF"),
            Key::PageUp => b"\x1b[5~",
            Key::PageDown => b"\x1b[6~",
            Key::Function(n) => match n {
                1 => b"\x1bOP",
                2 => b"\x1bOQ",
                3 => b"\x1bOR",
                4 => b"\x1bOS",
                5 => b"\x1b[15~",
                6 => b"\x1b[17~",
                7 => b"\x1b[18~",
                8 => b"\x1b[19~",
                9 => b"\x1b[20~",
                10 => b"\x1b[21~",
                11 => b"\x1b[23~",
                12 => b"\x1b[24~",
                other => return Err(format!("there is no function key F{other} (F1-F12)")),
            },
            Key::Ctrl(c) => {
                const CONTROL: &[u8; 32] = b"\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f";
                let upper = c.to_ascii_uppercase();
                if !('@'..='_').contains(&upper) {
                    return Err(format!(
                        "there is no control key Ctrl-{c} (letters and @ [ \\ ] ^ _)"
                    ));
                }
                let index = usize::from(upper as u8 - b'@');
                &CONTROL[index..=index]
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_send_what_xterm_sends() {
        assert_eq!(Key::Enter.bytes(true, false), Ok(&b"\r"[..]));
        assert_eq!(Key::Enter.bytes(false, false), Ok(&b"\n"[..]));
        assert_eq!(Key::Up.bytes(true, false), Ok(&b"\x1b[A"[..]));
        assert_eq!(Key::Up.bytes(true, true), Ok(&b"\x1bOA"[..]));
        assert_eq!(Key::Function(5).bytes(true, false), Ok(&b"\x1b[15~"[..]));
        assert_eq!(Key::Ctrl('c').bytes(true, false), Ok(&b"\x03"[..]));
        assert_eq!(Key::Ctrl('D').bytes(true, false), Ok(&b"\x04"[..]));
        assert_eq!(Key::Ctrl('[').bytes(true, false), Ok(&b"\x1b"[..]));
        assert!(Key::Function(13).bytes(true, false).is_err());
        assert!(Key::Ctrl('1').bytes(true, false).is_err());
        assert!(Key::Ctrl('é').bytes(true, false).is_err());
    }
}
