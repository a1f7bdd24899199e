//! The plugin registry: which components are loaded and where they come from.
//!
//! - `registry`: the loaded set, swapped whole on reload; a call keeps the version it began
//!   with; unchanged files are not recompiled; a failed reload keeps the previous version.
//! - `manifest`: `NAME.toml` beside `NAME.wasm`: a plugin's grants, limits and config.
//! - `bundled`: the policies compiled into the binary.
//! - `watcher`: hot swap: a reload after each burst of changes in the plugin directories.
//! - `scaffold`: `toolhost new-policy`: a new policy crate with a copy of the policy SDK.
//! - `reference` (tests): the guide's manifest and scenario reference, checked against the
//!   parsers.

pub mod bundled;
pub(crate) mod manifest;
#[cfg(test)]
mod reference;
pub(crate) mod registry;
pub mod scaffold;
pub(crate) mod watcher;
