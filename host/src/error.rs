//! Why a [`ToolHost`](crate::ToolHost) could not be built or its plugins (re)loaded.

use crate::guest::{EngineError, LoadError};
use crate::plugins::manifest::ManifestError;
use std::path::PathBuf;

/// Errors building a [`ToolHost`](crate::ToolHost) or loading plugins.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The engine or linker could not be set up.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// A plugin directory is unusable.
    #[error("plugin directory {path}: {message}")]
    PluginDir { path: PathBuf, message: String },
    /// A component failed to load.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// A manifest is invalid.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The plugin directories cannot be watched.
    #[error("cannot watch plugin directories: {0}")]
    Watch(String),
    /// An unknown bundled policy was asked for.
    #[error("unknown bundled policy `{0}`; bundled: {1}")]
    UnknownPolicy(String, String),
}
