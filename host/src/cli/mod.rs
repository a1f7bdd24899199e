//! The `toolhost` binary's own commands, beside what it takes from the library.
//!
//! These modules belong to the binary, not to the library's public API.
//! An embedder of the `toolhost` library needs neither of them.
//! Each uses only the library's public API.
//!
//! - `args`: the flags and subcommands, as clap reads them; `options`: the host and sandbox
//!   settings they make.
//! - `log`: `toolhost log`, the record of commands read back.
//! - `call`: `toolhost call`, with `content` showing a result's content items at a shell;
//!   `serve`: `toolhost serve`; `inspect`: `toolhost sandbox`, `tools`,
//!   `plugins`.
//! - `scaffold`: `toolhost new-policy`, a new policy crate with a copy of the policy SDK, or a
//!   Python or JavaScript plugin project (`scaffold/script.rs`).
//! - `scenarios`: `toolhost test`, scripted scenarios run against a plugin component on the
//!   fake process capability (`toolhost::testing`).

pub(crate) mod args;
pub(crate) mod call;
mod content;
pub(crate) mod inspect;
pub(crate) mod log;
pub(crate) mod options;
pub mod scaffold;
pub mod scenarios;
pub(crate) mod serve;

/// Print a result line on stdout. A reader that went away (`toolhost tools | head`) is not an
/// error: there is nobody left to tell.
pub(crate) fn out(text: impl std::fmt::Display) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if let Err(error) = writeln!(stdout, "{text}").and_then(|()| stdout.flush())
        && error.kind() != std::io::ErrorKind::BrokenPipe
    {
        eprintln!("toolhost: cannot write the result: {error}");
    }
}
