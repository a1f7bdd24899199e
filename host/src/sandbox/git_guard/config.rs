//! Git's config format, as far as the guard needs it: sections with subsections
//! (`[remote "origin"]`, the legacy `[branch.main]`), keys, values with quotes, escapes and
//! continuation lines, comments; section and key names case-insensitive, subsections not.

use super::*;
/// One setting of a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Setting {
    /// The section, in lower case.
    pub(crate) section: String,
    /// The subsection: as written in `[section "sub"]`, in lower case in the legacy
    /// `[section.sub]`.
    pub(crate) subsection: Option<String>,
    /// The key, in lower case.
    pub(crate) name: String,
    /// The key as written.
    pub(crate) written: String,
    /// The value; `None` for a key without `=` (boolean true).
    pub(crate) value: Option<String>,
    /// Its bytes in the file, from the key to the end of its line (its comment and
    /// continuation lines included, the newline not).
    pub(crate) span: std::ops::Range<usize>,
}

impl Setting {
    /// The key as git compares it: `section.subsection.name`, section and name in lower case.
    pub(crate) fn key(&self) -> String {
        match &self.subsection {
            Some(sub) => format!("{}.{sub}.{}", self.section, self.name),
            None => format!("{}.{}", self.section, self.name),
        }
    }

    /// The key for people: the name as written.
    pub(crate) fn display(&self) -> String {
        match &self.subsection {
            Some(sub) => format!("{}.{sub}.{}", self.section, self.written),
            None => format!("{}.{}", self.section, self.written),
        }
    }
}

/// Why a config file cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParseError {
    /// The line, from 1.
    pub(crate) line: usize,
    pub(crate) what: &'static str,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.what)
    }
}

/// The settings of a config file, as git reads it (`config.c`): sections `[name]`,
/// `[name "sub"]` and the legacy `[name.sub]`; keys of letters, digits and `-` starting with a
/// letter, each on its own line or after its section's header; values with `"` quotes, the
/// escapes `\n \t \b \" \\`, `\` at the end of a line to go on, and `#` or `;` comments.
/// What git would refuse is an error here too; so is a NUL byte and a key outside a section.
pub(crate) fn parse(text: &[u8]) -> Result<Vec<Setting>, ParseError> {
    let mut parser = Parser {
        text,
        pos: if text.starts_with(b"\xEF\xBB\xBF") {
            3
        } else {
            0
        },
        line: 1,
    };
    let mut settings = Vec::new();
    let mut section: Option<(String, Option<String>)> = None;
    loop {
        let start = parser.pos;
        let Some(c) = parser.next()? else {
            return Ok(settings);
        };
        match c {
            b'\n' => {}
            b'#' | b';' => parser.skip_line()?,
            b'[' => section = Some(parser.header()?),
            c if is_space(c) => {}
            c if c.is_ascii_alphabetic() => {
                let Some((name, sub)) = &section else {
                    return Err(parser.error("a setting outside a section"));
                };
                let setting = parser.setting(start, c, name, sub.as_deref())?;
                settings.push(setting);
            }
            _ => return Err(parser.error("a character that starts nothing")),
        }
    }
}

struct Parser<'a> {
    text: &'a [u8],
    pos: usize,
    line: usize,
}

fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

impl Parser<'_> {
    fn error(&self, what: &'static str) -> ParseError {
        ParseError {
            line: self.line,
            what,
        }
    }

    /// The next character (`\r\n` read as `\n`); `None` at the end.
    fn next(&mut self) -> Result<Option<u8>, ParseError> {
        let Some(&c) = self.text.get(self.pos) else {
            return Ok(None);
        };
        self.pos += 1;
        match c {
            0 => Err(self.error("a NUL byte")),
            b'\r' if self.text.get(self.pos) == Some(&b'\n') => {
                self.pos += 1;
                self.line += 1;
                Ok(Some(b'\n'))
            }
            b'\n' => {
                self.line += 1;
                Ok(Some(b'\n'))
            }
            c => Ok(Some(c)),
        }
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.pos).copied()
    }

    fn skip_line(&mut self) -> Result<(), ParseError> {
        while let Some(c) = self.next()? {
            if c == b'\n' {
                break;
            }
        }
        Ok(())
    }

    /// A section header after its `[`: the section and its subsection.
    fn header(&mut self) -> Result<(String, Option<String>), ParseError> {
        let mut name = String::new();
        let extended = loop {
            match self.next()? {
                None | Some(b'\n') => return Err(self.error("an unfinished section header")),
                Some(b']') => break None,
                Some(c) if is_space(c) => break Some(self.subsection()?),
                Some(c) if c.is_ascii_alphanumeric() || c == b'-' || c == b'.' => {
                    name.push(char::from(c.to_ascii_lowercase()));
                }
                Some(_) => return Err(self.error("a bad character in a section name")),
            }
        };
        if name.is_empty() {
            return Err(self.error("an empty section name"));
        }
        // `[a.b "c"]` is section `a`, subsection `b.c`, as git's keys read.
        let full = match extended {
            Some(sub) => format!("{name}.{sub}"),
            None => name,
        };
        Ok(match full.split_once('.') {
            Some((section, sub)) => (section.to_owned(), Some(sub.to_owned())),
            None => (full, None),
        })
    }

    /// `"sub"]` after a section name and white space.
    fn subsection(&mut self) -> Result<String, ParseError> {
        loop {
            match self.next()? {
                Some(b'"') => break,
                Some(b'\n') | None => return Err(self.error("an unfinished section header")),
                Some(c) if is_space(c) => {}
                Some(_) => return Err(self.error("a section header without its quotes")),
            }
        }
        let mut sub = Vec::new();
        loop {
            match self.next()? {
                Some(b'"') => break,
                Some(b'\\') => match self.next()? {
                    Some(b'\n') | None => return Err(self.error("an unfinished subsection")),
                    Some(c) => sub.push(c),
                },
                Some(b'\n') | None => return Err(self.error("an unfinished subsection")),
                Some(c) => sub.push(c),
            }
        }
        if self.next()? != Some(b']') {
            return Err(self.error("a section header that does not end at its quote"));
        }
        Ok(String::from_utf8_lossy(&sub).into_owned())
    }

    /// A setting whose key starts with `first` at `start`.
    fn setting(
        &mut self,
        start: usize,
        first: u8,
        section: &str,
        subsection: Option<&str>,
    ) -> Result<Setting, ParseError> {
        let mut written = String::from(char::from(first));
        while let Some(c) = self
            .peek()
            .filter(|c| c.is_ascii_alphanumeric() || *c == b'-')
        {
            self.pos += 1;
            written.push(char::from(c));
        }
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.pos += 1;
        }
        let mut end = self.pos;
        let value = match self.next()? {
            None | Some(b'\n') => None,
            Some(b'=') => {
                let (value, value_end) = self.value()?;
                end = value_end;
                Some(value)
            }
            Some(_) => return Err(self.error("a key followed by neither `=` nor its line's end")),
        };
        Ok(Setting {
            section: section.to_owned(),
            subsection: subsection.map(str::to_owned),
            name: written.to_ascii_lowercase(),
            written,
            value,
            span: start..end,
        })
    }

    /// A value after its `=`, as git's `parse_value` reads it, and where its line ends.
    fn value(&mut self) -> Result<(String, usize), ParseError> {
        let mut value: Vec<u8> = Vec::new();
        let (mut quote, mut comment) = (false, false);
        let mut trim_len = 0;
        loop {
            let before = self.pos;
            let c = self.next()?;
            let c = match c {
                None | Some(b'\n') => {
                    if quote {
                        return Err(self.error("an unfinished quote"));
                    }
                    if trim_len > 0 {
                        value.truncate(trim_len);
                    }
                    return Ok((String::from_utf8_lossy(&value).into_owned(), before));
                }
                Some(c) => c,
            };
            if comment {
                continue;
            }
            if is_space(c) && !quote {
                if trim_len == 0 {
                    trim_len = value.len();
                }
                if !value.is_empty() {
                    value.push(c);
                }
                continue;
            }
            if !quote && (c == b';' || c == b'#') {
                comment = true;
                continue;
            }
            trim_len = 0;
            match c {
                b'\\' => match self.next()? {
                    None | Some(b'\n') => {}
                    Some(b't') => value.push(b'\t'),
                    Some(b'b') => value.push(0x08),
                    Some(b'n') => value.push(b'\n'),
                    Some(c @ (b'\\' | b'"')) => value.push(c),
                    Some(_) => return Err(self.error("an unknown escape")),
                },
                b'"' => quote = !quote,
                c => value.push(c),
            }
        }
    }
}

/// `text` without the settings at `indexes` of `parsed` (their key, value and comment; the
/// line and a section header before them on it stay).
pub(crate) fn without(text: &[u8], parsed: &[Setting], indexes: &[usize]) -> Vec<u8> {
    let mut spans: Vec<&std::ops::Range<usize>> =
        indexes.iter().map(|index| &parsed[*index].span).collect();
    spans.sort_by_key(|span| span.start);
    let mut out = Vec::with_capacity(text.len());
    let mut at = 0;
    for span in spans {
        if span.start >= at {
            out.extend_from_slice(&text[at..span.start]);
            at = span.end;
        }
    }
    out.extend_from_slice(&text[at..]);
    out
}
