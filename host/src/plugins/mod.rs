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

use std::path::PathBuf;

/// A loaded plugin, as [`ToolHost::plugins`](crate::ToolHost::plugins) lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginInfo {
    /// The plugin's name: the bundled policy's, or its component's file name without `.wasm`.
    pub name: String,
    /// Where it was loaded from.
    pub origin: PluginOrigin,
}

/// Where a loaded plugin comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginOrigin {
    /// A policy compiled into the binary ([`crate::bundled`]).
    Bundled,
    /// A component file in a plugin directory.
    File(PathBuf),
}

/// `bundled`, or the component file's path.
impl std::fmt::Display for PluginOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PluginOrigin::Bundled => f.write_str("bundled"),
            PluginOrigin::File(path) => write!(f, "{}", path.display()),
        }
    }
}
