//! The marked code blocks of a guide under `docs/`, which tests follow as written.
//!
//! A guide marks a code block with a comment on the line before it:
//!
//! - `<!-- run: STEP -->`: a `sh` block of commands that a test runs as they are;
//! - `<!-- file: PATH -->`: a file of the reader's project; a test writes it there;
//! - `<!-- output: STEP -->`: what a step prints, line by line (a line ending in `...` is a
//!   prefix of the actual line);
//! - other kinds (`source`, `example`) that the guide's own test reads by name.
//!
//! `tests/guide.rs` follows `docs/writing-a-policy.md`; `tests/plugin_languages/guides.rs`
//! follows the Python and JavaScript guides.

use std::path::{Path, PathBuf};

/// A code block of a guide.
pub struct Block {
    /// The marker on the line before it, as (kind, argument): `("run", "build")`.
    pub marker: Option<(String, String)>,
    /// The language of its fence.
    pub lang: String,
    /// Its text.
    pub body: String,
    /// The line of its opening fence.
    pub line: usize,
}

/// A guide: its text and its code blocks, in order.
pub struct Guide {
    /// The guide's file.
    pub path: PathBuf,
    /// Its whole text.
    pub text: String,
    /// Its code blocks, in order.
    pub blocks: Vec<Block>,
}

impl Guide {
    /// Read the guide at `relative` (to the repository's root) and find its code blocks.
    pub fn read(relative: &str) -> Guide {
        let path = crate::repo_root().join(relative);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|error| panic!("read {}: {error}", path.display()));
        let blocks = parse(&text);
        Guide { path, text, blocks }
    }

    /// The one block marked `kind: name`.
    pub fn block(&self, kind: &str, name: &str) -> &Block {
        let mut found = self.blocks.iter().filter(|b| {
            b.marker
                .as_ref()
                .is_some_and(|(k, n)| k == kind && n == name)
        });
        let block = found.next().unwrap_or_else(|| {
            panic!(
                "{} has no block marked `<!-- {kind}: {name} -->`",
                self.path.display()
            )
        });
        assert!(found.next().is_none(), "two blocks marked `{kind}: {name}`");
        block
    }

    /// The names of the blocks marked `kind`, in order.
    pub fn marked(&self, kind: &str) -> Vec<&str> {
        self.blocks
            .iter()
            .filter_map(|b| b.marker.as_ref())
            .filter(|(k, _)| k == kind)
            .map(|(_, name)| name.as_str())
            .collect()
    }

    /// Write every block marked `file: PATH` to `PATH` under `dir`.
    pub fn write_files(&self, dir: &Path) {
        for path in self.marked("file") {
            let target = dir.join(path);
            assert!(
                !path.starts_with('/') && !path.contains(".."),
                "{path} is inside the project"
            );
            std::fs::create_dir_all(target.parent().expect("a parent")).expect("mkdir");
            std::fs::write(&target, &self.block("file", path).body)
                .expect("write the guide's file");
        }
    }

    /// Assert that `actual` is what the block marked `output: step` shows.
    pub fn shows_output(&self, step: &str, actual: &str) {
        let block = self.block("output", step);
        let shown: Vec<&str> = block.body.lines().collect();
        let actual: Vec<&str> = actual.lines().collect();
        let matches = shown.len() == actual.len()
            && shown
                .iter()
                .zip(&actual)
                .all(|(want, got)| match want.strip_suffix("...") {
                    Some(prefix) => got.starts_with(prefix),
                    None => want == got,
                });
        assert!(
            matches,
            "the output of step `{step}` is not what {} shows at line {}:\n--- shown\n{}\n--- actual\n{}",
            self.path.display(),
            block.line,
            shown.join("\n"),
            actual.join("\n")
        );
    }
}

/// The code blocks of `text`, each with the marker on the line before it.
fn parse(text: &str) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(lang) = lines[i].strip_prefix("```") else {
            i += 1;
            continue;
        };
        let end = (i + 1..lines.len())
            .find(|&j| lines[j] == "```")
            .unwrap_or_else(|| panic!("the code block at line {} is not closed", i + 1));
        let marker = i
            .checked_sub(1)
            .and_then(|p| lines[p].strip_prefix("<!-- "))
            .and_then(|m| m.strip_suffix(" -->"))
            .and_then(|m| m.split_once(": "))
            .map(|(kind, arg)| (kind.to_owned(), arg.to_owned()));
        blocks.push(Block {
            marker,
            lang: lang.to_owned(),
            body: lines[i + 1..end].iter().map(|l| format!("{l}\n")).collect(),
            line: i + 1,
        });
        i = end + 1;
    }
    blocks
}
