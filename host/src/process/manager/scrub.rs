//! Replacing the secrets a command was given in its output, as the output arrives.
//!
//! A command given secrets (`StartRequest::secrets`) has every occurrence of each value in its
//! output replaced with [`REPLACEMENT`] before the output reaches its buffer, its log file or
//! its terminal's screen.
//!
//! 1. Each read is appended to the bytes held back from the reads before.
//! 2. The end of the bytes that could still grow into a secret with the next read is held
//!    back, a whole shorter secret inside it included.
//! 3. Before it, every whole occurrence is replaced (the longest one where two start at the
//!    same byte), and the rest goes on.
//! 4. At the end of the output, what is held back goes on, with any whole secret in it
//!    replaced.
//!
//! Only the values themselves are found: a secret the command changed (encoded, split by
//! other output, in another case) goes through as it was written.

use aho_corasick::{AhoCorasick, MatchKind};
use zeroize::Zeroizing;

use crate::ask::Secret;

/// What a secret in the output becomes.
pub(super) const REPLACEMENT: &[u8] = b"[secret]";

/// Replaces a command's secrets in the host's text about it: the command lines of what it
/// left running, which the shell may have given a secret as an argument.
pub(super) struct Redactor {
    finder: AhoCorasick,
}

impl Redactor {
    /// `text` with every whole secret replaced.
    pub(super) fn text(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        self.finder.replace_all_with(text, &mut out, |_, _, dst| {
            dst.push_str("[secret]");
            true
        });
        out
    }
}

/// Replaces a command's secrets in its output (see the module documentation).
pub(super) struct Scrubber {
    finder: AhoCorasick,
    /// The values, to find the start of one at the end of a read.
    needles: Vec<Zeroizing<Vec<u8>>>,
    /// Bytes held back: the start of what may be a secret.
    held: Zeroizing<Vec<u8>>,
    /// The longest value's length.
    longest: usize,
}

impl Scrubber {
    /// A scrubber for `secrets`; `None` when there is nothing to find (no secret, or only
    /// empty ones).
    pub(super) fn new(secrets: &[&Secret]) -> Option<Self> {
        let needles: Vec<Zeroizing<Vec<u8>>> = secrets
            .iter()
            .map(|secret| secret.expose().as_bytes())
            .filter(|value| !value.is_empty())
            .map(|value| Zeroizing::new(value.to_vec()))
            .collect();
        if needles.is_empty() {
            return None;
        }
        let finder = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(needles.iter().map(|needle| needle.as_slice()))
            .ok()?;
        let longest = needles.iter().map(|needle| needle.len()).max().unwrap_or(0);
        Some(Scrubber {
            finder,
            longest,
            needles,
            held: Zeroizing::new(Vec::new()),
        })
    }

    /// A redactor of the same secrets, for the host's text about the command.
    pub(super) fn redactor(&self) -> Redactor {
        Redactor {
            finder: self.finder.clone(),
        }
    }

    /// `data`, read next, with the secrets replaced: what can go on now.
    pub(super) fn feed(&mut self, data: &[u8]) -> Vec<u8> {
        let mut buf = Zeroizing::new(std::mem::take(&mut *self.held));
        buf.extend_from_slice(data);
        let mut out = Vec::with_capacity(buf.len());
        let mut pos = 0;
        // Where the bytes that could still grow into a secret start: nothing from there on
        // goes out yet, not even a whole shorter secret inside them.
        let mut hold = self.hold_from(&buf, 0);
        for found in self.finder.find_iter(buf.as_slice()) {
            if found.start() >= hold {
                break;
            }
            out.extend_from_slice(&buf[pos..found.start()]);
            out.extend_from_slice(REPLACEMENT);
            pos = found.end();
            if pos > hold {
                hold = self.hold_from(&buf, pos);
            }
        }
        let hold = hold.max(pos);
        out.extend_from_slice(&buf[pos..hold]);
        self.held.extend_from_slice(&buf[hold..]);
        out
    }

    /// The first index from `from` on where the rest of `buf` could grow into a secret with
    /// more bytes; `buf.len()` when none. Only the last bytes, fewer than the longest secret,
    /// can.
    fn hold_from(&self, buf: &[u8], from: usize) -> usize {
        let first = from.max(buf.len().saturating_sub(self.longest));
        (first..buf.len())
            .find(|&start| self.could_grow(&buf[start..]))
            .unwrap_or(buf.len())
    }

    /// What is held back, at the end of the output, with the secrets in it replaced (a
    /// shorter secret held back in case a longer one grew from it).
    pub(super) fn finish(&mut self) -> Vec<u8> {
        let held = Zeroizing::new(std::mem::take(&mut *self.held));
        let mut out = Vec::with_capacity(held.len());
        self.finder
            .replace_all_with_bytes(held.as_slice(), &mut out, |_, _, dst| {
                dst.extend_from_slice(REPLACEMENT);
                true
            });
        out
    }

    /// Whether `tail` is the start of a secret longer than it.
    fn could_grow(&self, tail: &[u8]) -> bool {
        self.needles
            .iter()
            .any(|needle| needle.len() > tail.len() && needle.starts_with(tail))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrub(secrets: &[&str], reads: &[&[u8]]) -> Vec<u8> {
        let secrets: Vec<Secret> = secrets.iter().map(|s| Secret::new((*s).into())).collect();
        let refs: Vec<&Secret> = secrets.iter().collect();
        let mut scrubber = Scrubber::new(&refs).expect("a scrubber");
        let mut out = Vec::new();
        for read in reads {
            out.extend(scrubber.feed(read));
        }
        out.extend(scrubber.finish());
        out
    }

    #[test]
    fn a_secret_is_replaced_wherever_the_reads_split_it() {
        let text = b"token=hunter2; again hunter2.";
        let whole = scrub(&["hunter2"], &[text]);
        assert_eq!(whole, b"token=[secret]; again [secret].");
        for split in 0..text.len() {
            let (a, b) = text.split_at(split);
            assert_eq!(scrub(&["hunter2"], &[a, b]), whole, "split at {split}");
        }
        let bytes: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(scrub(&["hunter2"], &bytes), whole);
    }

    #[test]
    fn output_that_only_starts_like_a_secret_goes_on() {
        assert_eq!(scrub(&["hunter2"], &[b"hunt", b"ing"]), b"hunting");
        // Held back only while it could still be one; the end goes on at the finish.
        let secret = Secret::new("hunter2".into());
        let mut scrubber = Scrubber::new(&[&secret]).expect("a scrubber");
        assert_eq!(scrubber.feed(b"Password: hun"), b"Password: ");
        assert_eq!(scrubber.finish(), b"hun");
        assert_eq!(scrubber.feed(b"no secret here\n"), b"no secret here\n");
    }

    #[test]
    fn a_command_line_has_its_secrets_replaced() {
        let secret = Secret::new("hunter2".into());
        let redactor = Scrubber::new(&[&secret]).expect("a scrubber").redactor();
        assert_eq!(
            redactor.text("curl -H 'Authorization: Bearer hunter2' x"),
            "curl -H 'Authorization: Bearer [secret]' x"
        );
    }

    #[test]
    fn the_longest_of_two_secrets_that_start_alike_is_replaced() {
        assert_eq!(scrub(&["abc", "abcdef"], &[b"xabcdefy"]), b"x[secret]y");
        assert_eq!(scrub(&["abc", "abcdef"], &[b"xabc", b"dy"]), b"x[secret]dy");
        assert_eq!(scrub(&["abc", "abcdef"], &[b"xabc", b"def"]), b"x[secret]");
        assert_eq!(scrub(&["abc", "abcdef"], &[b"xabcde", b"f"]), b"x[secret]");
        // The shorter one, held back in case the longer grew from it, at the end.
        assert_eq!(scrub(&["abc", "abcdef"], &[b"xabc"]), b"x[secret]");
        // A shorter one inside a longer one that may still come is held back with it.
        assert_eq!(scrub(&["cd", "abcdef"], &[b"abcde", b"f"]), b"[secret]");
        let text = b"zabcdefz cd abcd";
        let whole = scrub(&["cd", "abcdef"], &[text]);
        assert_eq!(whole, b"z[secret]z [secret] ab[secret]");
        for split in 0..text.len() {
            let (a, b) = text.split_at(split);
            assert_eq!(scrub(&["cd", "abcdef"], &[a, b]), whole, "split at {split}");
        }
        assert!(Scrubber::new(&[]).is_none());
    }
}
