//! The WIT contract as the host serves it: one module per served version of the
//! `toolhost:plugin` package, and one module per WIT interface for the host side of it.
//!
//! - `v0_6_0` (alias `latest`): the current contract (`wit/toolhost.wit`).
//!   It holds its version, its bindings, and conversions to and from the host's types.
//! - `v0_5_0`, `v0_4_0`, `v0_3_0`, `v0_2_0`, `v0_1_0`: the frozen contracts
//!   (`wit/v0.5.0/toolhost.wit`, `wit/v0.4.0/toolhost.wit`, `wit/v0.3.0/toolhost.wit`,
//!   `wit/v0.2.0/toolhost.wit`, `wit/v0.1.0/toolhost.wit`).
//!   Each holds its version, its bindings, and conversions to and from the latest types.
//! - `process`, `output_buffer`, `sandbox`, `report`, `approvals`: the host side of each WIT
//!   import, for every served version, in the shape of wasmtime's `crates/wasi/src/p2/host/`.
//!   Each implements the current interface, then each older one by delegating to it.
//!
//! A new version: freeze `wit/toolhost.wit` as `wit/vX.Y.Z/`, make the current module a
//! frozen one like `v0_5_0` (bindings from the frozen file, conversions to and from the new
//! latest types), and add its delegating impls to the interface modules (for an interface the
//! new version leaves as it was, one `same_as_current!(vX_Y_Z)` line there); `engine.rs` links
//! it, `plugin.rs` instantiates it, and `WIT_VERSIONS` lists it.
//! Every older module's conversions to the latest types fill in what the new version added
//! (0.6.0's `start-request.secrets`: empty).
//!
//! The version modules import nothing from the rest of the guest runtime.
//! So the rest of it, the errors included, can name a version without an import cycle.

mod approvals;
mod output_buffer;
mod process;
mod report;
mod sandbox;
pub(crate) mod v0_1_0;
pub(crate) mod v0_2_0;
pub(crate) mod v0_3_0;
pub(crate) mod v0_4_0;
pub(crate) mod v0_5_0;
pub(crate) mod v0_6_0;

pub(crate) use report::{Reports, increasing};
pub(crate) use sandbox::settings;
pub(crate) use v0_6_0 as latest;

/// The WIT package this host implements.
pub(crate) const WIT_PACKAGE: &str = "toolhost:plugin";
