//! The plugin registry: which components are loaded and where they come from.
//!
//! - `registry`: the loaded set, swapped whole on reload; a call keeps the version it began
//!   with; unchanged files are not recompiled; a failed reload keeps the previous version.
//! - `manifest`: `NAME.toml` beside `NAME.wasm`: a plugin's grants, limits and config.
//! - `bundled`: the policies compiled into the binary.
//! - `watcher`: hot swap: a reload after each burst of changes in the plugin directories.
//! - `reference` (tests): the guide's manifest reference, checked against the parser.

pub mod bundled;
pub(crate) mod manifest;
#[cfg(test)]
mod reference;
pub(crate) mod registry;
pub(crate) mod watcher;
