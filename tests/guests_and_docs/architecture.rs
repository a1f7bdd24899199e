//! ARCHITECTURE.md's code map names only files and folders that exist.
//!
//! 1. The code map is the part of ARCHITECTURE.md under its `## Code Map` heading.
//! 2. Each of its `### ` sections names its folders in its heading: a path ending in `/`, or
//!    a file whose folder then counts (`host/src/lib.rs` gives `host/src/`).
//! 3. Every path the section writes in backquotes must exist: one with a `/` inside from the
//!    repository's root or from one of the section's folders, a bare file or folder name
//!    (`keeper.rs`, `scenarios/`) somewhere beneath one of them.

use std::path::{Path, PathBuf};
use toolhost_e2e::repo_root;

/// The extensions of the files the code map names.
const EXTENSIONS: &[&str] = &[
    "rs", "md", "toml", "sh", "wit", "json", "yml", "lock", "py", "ts", "js", "wasm",
];

/// Whether a backquoted word is a path: path characters only, and a folder (a `/`) or a file
/// with a known extension. Placeholders in capitals (`NAME.toml`) are not paths.
fn is_path(word: &str) -> bool {
    let path_characters = word
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_./-".contains(c));
    let placeholder = word
        .split(['/', '.', '-', '_'])
        .any(|part| part.len() > 1 && part.chars().all(|c| c.is_ascii_uppercase()));
    let extension = Path::new(word)
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| EXTENSIONS.contains(&e));
    path_characters && !placeholder && !word.starts_with('-') && (word.contains('/') || extension)
}

/// The backquoted paths of `text`.
fn paths_in(text: &str) -> Vec<&str> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|word| is_path(word))
        .collect()
}

/// Whether a file or folder named `name` is somewhere under `dir` (build output and installed
/// packages left out).
fn found_beneath(dir: &Path, name: &str) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|entry| {
        let file_name = entry.file_name();
        if file_name == name {
            return true;
        }
        let skip = ["target", "node_modules", ".git"];
        entry.file_type().is_ok_and(|kind| kind.is_dir())
            && !skip.iter().any(|skipped| file_name == *skipped)
            && found_beneath(&entry.path(), name)
    })
}

#[test]
fn every_path_in_the_code_map_exists() {
    let root = repo_root();
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let map = text
        .split_once("\n## Code Map")
        .map(|(_, rest)| rest.split("\n## ").next().unwrap_or(rest))
        .expect("a code map");
    // What a build makes and git ignores (`host/packaged/`) is named but not in a clone.
    let ignored: Vec<String> = std::fs::read_to_string(root.join(".gitignore"))
        .unwrap_or_default()
        .lines()
        .map(|line| line.trim().trim_matches('/').to_owned())
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .collect();
    let mut missing = Vec::new();
    let mut checked = 0;
    for section in map.split("\n### ").skip(1) {
        let (heading, body) = section.split_once('\n').unwrap_or((section, ""));
        let mut folders: Vec<PathBuf> = paths_in(heading)
            .iter()
            .map(|path| {
                let path = root.join(path);
                if path.is_dir() {
                    path
                } else {
                    path.parent().unwrap_or(root).to_path_buf()
                }
            })
            .collect();
        if folders.is_empty() {
            folders.push(root.to_path_buf());
        }
        for path in paths_in(heading).into_iter().chain(paths_in(body)) {
            if ignored.iter().any(|entry| entry == path.trim_matches('/')) {
                continue;
            }
            checked += 1;
            let bare = path.trim_end_matches('/');
            let exists = if bare.contains('/') {
                let relative = path.trim_start_matches("./");
                root.join(relative).exists()
                    || folders.iter().any(|folder| folder.join(relative).exists())
            } else {
                root.join(bare).exists()
                    || folders
                        .iter()
                        .any(|folder| folder.ends_with(bare) || found_beneath(folder, bare))
            };
            if !exists {
                missing.push(format!("`{path}` (under {})", heading.trim()));
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} paths found: is the code map still there?"
    );
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names what does not exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn paths_are_told_from_other_words() {
    assert!(is_path("host/src/process/"));
    assert!(is_path("keeper.rs"));
    assert!(!is_path("NAME.toml"));
    assert!(!is_path("toolhost:plugin/process"));
    assert!(!is_path("--sandbox"));
    assert!(!found_beneath(
        &repo_root().join("host/src"),
        "no-such-file.rs"
    ));
    assert!(found_beneath(&repo_root().join("host/src"), "lib.rs"));
}

/// Each numbered entry point names a file that exists and, right after it, a function that
/// the file defines (`host/src/host.rs` `ToolHost::call`: `fn call` in `host/src/host.rs`).
#[test]
fn every_entry_point_exists() {
    let root = repo_root();
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let section = text
        .split_once("\n## Entry points")
        .map(|(_, rest)| rest.split("\n## ").next().unwrap_or(rest))
        .expect("an Entry points section");
    let points: Vec<&str> = section
        .lines()
        .filter(|line| line.starts_with(|c: char| c.is_ascii_digit()))
        .collect();
    assert!(points.len() >= 4, "too few entry points: {points:?}");
    for point in points {
        let quoted: Vec<&str> = point.split('`').skip(1).step_by(2).collect();
        let [file, function, ..] = quoted[..] else {
            panic!("an entry point without a file and a function: {point}");
        };
        let source = std::fs::read_to_string(root.join(file))
            .unwrap_or_else(|error| panic!("entry point `{file}`: {error}"));
        let name = function.rsplit("::").next().unwrap_or(function);
        assert!(
            source.contains(&format!("fn {name}(")) || source.contains(&format!("fn {name}<")),
            "`{file}` defines no `fn {name}`"
        );
    }
}
