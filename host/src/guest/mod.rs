//! The guest runtime: how one plugin component is compiled, checked, pre-linked and run.
//!
//! - `wit`: the served WIT versions (0.6.0, and the frozen 0.5.0, 0.4.0, 0.3.0, 0.2.0 and
//!   0.1.0 served by delegating to it), each with its bindings, and the host impls of the WIT
//!   imports, one file per interface.
//! - `engine`: the engine, the linker with every import, the epoch ticker ([`Loader`]).
//! - `cache`: compiling, through the private on-disk cache of compiled components (and of
//!   each component's tool list).
//! - `plugin`: a loaded [`Plugin`]: its checks at load, a fresh limited store per call.
//! - `state`: the store data of one call; `limits`: grants, limits and the memory limiter.
//! - `content`: the content items of a result besides its JSON, and their bounds.
//! - `log`: a guest's bounded stdout and stderr.
//! - `errors`: why a load or a call failed, limits typed.
//!
//! Nothing here knows where components come from: the plugin registry (`crate::plugins`)
//! reads files and manifests and hands each component in as a [`PluginSource`].

mod cache;
mod content;
mod engine;
mod errors;
mod limits;
mod log;
mod plugin;
mod state;
mod wit;

pub(crate) use cache::{ComponentCache, hex, parse_digest};
pub use content::{ContentItem, ResourceBody};
pub(crate) use engine::Loader;
pub use errors::{CallError, EngineError, LimitExceeded, LoadError};
pub(crate) use limits::{CallLimits, Grants};
pub(crate) use plugin::{Outcome, Plugin, PluginSource};
pub use state::{
    CallOptions, CallOutput, LogLevel, LogSink, Progress, ProgressSink, Relay, Resume, ToolLog,
};
pub(crate) use wit::latest::ToolDefinition;

/// The versions of the `toolhost:plugin` WIT package this host serves, newest first.
pub const WIT_VERSIONS: &[&str] = &[
    wit::v0_6_0::WIT_VERSION,
    wit::v0_5_0::WIT_VERSION,
    wit::v0_4_0::WIT_VERSION,
    wit::v0_3_0::WIT_VERSION,
    wit::v0_2_0::WIT_VERSION,
    wit::v0_1_0::WIT_VERSION,
];
