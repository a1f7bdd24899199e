//! `toolhost test PLUGIN.wasm SCENARIOS...`: scripted scenarios that test a plugin component
//! without real processes.
//!
//! The component may be written in any language.
//! A scenario file (TOML) holds one or more scenarios.
//! Each scenario runs against a fresh host with only the plugin loaded.
//! The plugin's manifest is the one given, else the `NAME.toml` beside the component.
//! The host runs on the fake process capability (`toolhost::testing`).
//! The processes the plugin starts play scripted output, exit status and timing.
//! Time is logical: nothing really waits.
//! Every start, signal and input is recorded.
//! The calls of a scenario run in order, in one scope.
//! Each call may say what must hold afterwards.
//!
//! ```toml
//! config = { default_timeout = "30s" }   # over the manifest's [config], for every scenario
//!
//! [[scenario]]
//! name = "a slow build is handed over to the background"
//!
//! [[scenario.process]]                   # what the first command started does
//! output = "compiling...\n"
//! runs_for = "2m"                        # or: never_exits = true, signal = 9
//! exit = 0
//!
//! [[scenario.call]]
//! tool = "execute"
//! arguments = { command = "make" }
//! expect.result = { success = true, background_process_id = "re:.+" }
//! expect.starts = [{ command = "make", background = false }]
//!
//! [[scenario.call]]
//! tool = "execute"
//! arguments = { command = "git push" }
//! expect.error = "re:refused"
//! ```
//!
//! Expected values match as [`matching`] says.
//! An expected object matches when it is a subset of the actual one.
//! An expected string `re:PATTERN` is a regular expression.
//! The expectations of a call:
//!
//! - `expect.result`: the call's result (a JSON object, or its text);
//! - `expect.error`: the message of its tool error;
//! - `expect.starts`: the start requests the call made (`command`, `workdir`, `env`,
//!   `background`, `stdin`, the names of its `secrets` and the `id` handed out; `stdin` is
//!   `closed`, `pipe` or `terminal`);
//! - `expect.signals`: the signals it sent (`process`, and `signal`: `terminate`, `kill` or
//!   `interrupt`);
//! - `expect.inputs`: the input it wrote (`process`, `text`);
//! - `expect.content`: the result's content items besides its JSON (WIT 0.4.0): `type`
//!   (`text`, `image`, `audio`, `resource_link`, `resource`) and its fields, bytes by their
//!   count (`{ type = "image", mime_type = "image/png", bytes = 69 }`);
//! - `expect.progress`: the progress the tool reported (`progress`, `total`, `message`);
//! - `expect.logs`: the log lines it wrote (`level`, `message`);
//! - `expect.asked`: the questions it asked the scripted person (`key`, `kind`, `message`).
//!
//! A call's `answers` script the person a tool may ask (WIT 0.5.0 `needs-input`): each has
//! the question's `key` and an `action` (`accept` with `content`, `decline`, `cancel`,
//! `timeout`, `sample` with `text`, `roots` with `roots`). A call without `answers` has nobody
//! to ask, and its tool is told so.
//!
//! A scripted process may answer input with `[[scenario.process.reply]]`.
//! A reply has `when` (a text the input must contain), `output` and an optional `exit`.
//! `exits_at_eof = CODE` ends a scripted process when its stdin is closed.
//!
//! ## Flow at a glance
//!
//! 1. [`collect`] turns the paths on the command line into scenario files.
//! 2. [`Runner::new`] reads the component and its manifest.
//! 3. [`run`] parses every file first: a file that is not valid stops everything.
//! 4. For each scenario, [`Runner::run_file`] stages the component in a temporary plugin
//!    directory, with the scenario's `[config]` merged into the manifest.
//! 5. It builds a host on a fresh fake process capability, scripted with the scenario's
//!    processes.
//! 6. It makes each call in order and checks the call's expectations.
//! 7. [`run`] reports each scenario as it finishes, like a test runner, and counts passes and
//!    failures.

pub mod file;
pub mod matching;
#[cfg(test)]
mod reference;
mod runner;

pub use file::{FileError, ScenarioFile};
pub use runner::Runner;

use std::path::{Path, PathBuf};

/// The scenario files `paths` name: files as they are, directories for the `*.toml` files in
/// them (sorted by name).
pub fn collect(paths: &[PathBuf]) -> Result<Vec<PathBuf>, FileError> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let entries = std::fs::read_dir(path).map_err(|source| FileError::Read {
                path: path.display().to_string(),
                source,
            })?;
            let mut found: Vec<PathBuf> = entries
                .flatten()
                .map(|entry| entry.path())
                .filter(|p| p.extension().is_some_and(|e| e == "toml") && p.is_file())
                .collect();
            found.sort();
            if found.is_empty() {
                return Err(FileError::Invalid {
                    path: path.display().to_string(),
                    message: "no *.toml scenario files in this directory".to_owned(),
                });
            }
            files.extend(found);
        } else {
            files.push(path.clone());
        }
    }
    Ok(files)
}

/// Run the scenario `files` against `runner`, writing a report like a test runner's to
/// `out`; returns how many passed and failed. A file that is not valid is an error before
/// anything runs.
pub async fn run(
    runner: &Runner,
    files: &[PathBuf],
    out: &mut impl std::io::Write,
) -> Result<(usize, usize), FileError> {
    let loaded: Vec<(&Path, ScenarioFile)> = files
        .iter()
        .map(|path| ScenarioFile::load(path).map(|file| (path.as_path(), file)))
        .collect::<Result<_, _>>()?;
    let (mut passed, mut failed) = (0, 0);
    for (path, file) in &loaded {
        let _ = writeln!(out, "{}", path.display());
        for outcome in runner.run_file(file).await {
            if outcome.passed() {
                passed += 1;
                let _ = writeln!(out, "  ok      {}", outcome.name);
            } else {
                failed += 1;
                let _ = writeln!(out, "  FAILED  {}", outcome.name);
                for failure in &outcome.failures {
                    let _ = writeln!(out, "          {failure}");
                }
            }
        }
    }
    let _ = writeln!(out, "{passed} passed, {failed} failed");
    Ok((passed, failed))
}
