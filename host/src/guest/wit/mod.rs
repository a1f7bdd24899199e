//! The WIT contract as the host serves it: one module per served version of the
//! `toolhost:plugin` package, and one module per WIT interface for the host side of it.
//!
//! - `v0_2_0` (alias `latest`): the current contract (`wit/toolhost.wit`).
//!   It holds its version, its bindings, and conversions to and from the host's types.
//! - `v0_1_0`: the frozen 0.1.0 contract (`wit/v0.1.0/toolhost.wit`).
//!   It holds its version, its bindings, and conversions to and from 0.2.0's types.
//! - `process`, `output_buffer`, `sandbox`: the host side of each WIT import, for every
//!   served version, in the shape of wasmtime's `crates/wasi/src/p2/host/`.
//!   Each implements the current interface, then the 0.1.0 one by delegating to it.
//!
//! The version modules import nothing from the rest of the guest runtime.
//! So the rest of it, the errors included, can name a version without an import cycle.

mod output_buffer;
mod process;
mod sandbox;
pub(crate) mod v0_1_0;
pub(crate) mod v0_2_0;

pub(crate) use sandbox::settings;
pub(crate) use v0_2_0 as latest;

/// The WIT package this host implements.
pub(crate) const WIT_PACKAGE: &str = "toolhost:plugin";
