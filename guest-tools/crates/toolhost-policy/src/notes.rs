//! Notes: advice `execute` adds to the result of a command that matches ([`CommandNote`]).

use crate::deny::Command;

/// Advice for the model that `execute` adds to the `note` of a result whose command matches,
/// e.g. to point it to a better tool. The command runs as usual.
///
/// ```
/// use toolhost_policy::{Command, CommandNote, FILE_DUMP_NOTE};
///
/// fn installs_with_npm(command: &Command) -> bool {
///     command.invocations("npm").any(|args| args.first().is_some_and(|a| a == "install"))
/// }
///
/// /// The standard note and one of the policy's own.
/// const NOTES: &[CommandNote] = &[
///     FILE_DUMP_NOTE,
///     CommandNote {
///         text: "Use `npm ci` to install exactly what the lock file says.",
///         matches: installs_with_npm,
///     },
/// ];
/// ```
#[derive(Clone, Copy)]
pub struct CommandNote {
    /// The note.
    pub text: &'static str,
    /// Whether a command gets it.
    pub matches: fn(&Command) -> bool,
}

/// Suggests a file-reading tool for commands that just dump files: `cat FILE`, `rg -l`,
/// `grep ... --include-all` (as written, at the start of the command).
pub const FILE_DUMP_NOTE: CommandNote = CommandNote {
    text: "This command dumps file contents or file lists; a dedicated file-reading or search \
           tool, if you have one, returns them more compactly.",
    matches: file_dump,
};

/// The notes of the bundled policies: [`FILE_DUMP_NOTE`].
pub const STANDARD_NOTES: &[CommandNote] = &[FILE_DUMP_NOTE];

/// The notes of `notes` that `command` gets, in order.
pub(crate) fn for_command(notes: &[CommandNote], command: &str) -> Vec<&'static str> {
    if notes.is_empty() {
        return Vec::new();
    }
    let parsed = Command::parse(command);
    notes
        .iter()
        .filter(|n| (n.matches)(&parsed))
        .map(|n| n.text)
        .collect()
}

/// Whether the command, as written, dumps files.
fn file_dump(command: &Command) -> bool {
    let c = command.raw.trim_start();
    let mut words = c.split_whitespace();
    let Some(first) = words.next() else {
        return false;
    };
    let has_more = c.len() > first.len() && c[first.len()..].starts_with(char::is_whitespace);
    match first {
        "cat" => has_more,
        "rg" | "grep" => {
            let rest: Vec<&str> = words.collect();
            rest.contains(&"--include-all") || rest.first() == Some(&"-l")
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dumps(command: &str) -> bool {
        !for_command(STANDARD_NOTES, command).is_empty()
    }

    #[test]
    fn file_dump_patterns() {
        assert!(dumps("cat foo.txt"));
        assert!(dumps("  cat\tfoo"));
        assert!(dumps("grep -r x . --include-all"));
        assert!(dumps("rg -l pattern"));
        assert!(!dumps("cat"));
        assert!(!dumps("catalog x"));
        assert!(!dumps("grep pattern file"));
        assert!(!dumps("echo cat x"));
    }
}
