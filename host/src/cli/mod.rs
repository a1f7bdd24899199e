//! The `toolhost` binary's own commands, beside what it takes from the library.
//!
//! These modules belong to the binary, not to the library's public API.
//! An embedder of the `toolhost` library needs neither of them.
//! Each uses only the library's public API.
//!
//! - `scaffold`: `toolhost new-policy`, a new policy crate with a copy of the policy SDK.
//! - `scenarios`: `toolhost test`, scripted scenarios run against a plugin component on the
//!   fake process capability (`toolhost::testing`).

pub mod scaffold;
pub mod scenarios;
