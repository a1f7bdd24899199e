//! Why a [`ToolHost`](crate::ToolHost) could not be built or its plugins (re)loaded.
//!
//! [`ManifestError`] lives here rather than beside the manifest parser (`plugins::manifest`).
//! So the plugin registry can return a [`HostError`] without an import cycle.

use crate::guest::{EngineError, LoadError};
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

/// Why a manifest could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The file could not be read.
    #[error("cannot read manifest {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The file is not valid TOML or has unknown keys / wrong types.
    #[error("invalid manifest {path}: {message}")]
    Invalid { path: PathBuf, message: String },
}
