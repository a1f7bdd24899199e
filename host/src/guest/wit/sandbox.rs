//! The host side of the `toolhost:plugin/sandbox` import.
//! The interface holds types only, so the host implements no function of it.
//! What the host hands a policy through it is the sandbox settings that `tool.tools` gets.
//! 0.5.0, 0.4.0, 0.3.0 and 0.2.0 have the same interface; the 0.1.0 contract has no such
//! interface.

use super::latest::wit_sandbox;
use super::{v0_2_0, v0_3_0, v0_4_0, v0_5_0};
use crate::guest::state::CallState;
use crate::sandbox;

/// The `sandbox` interface holds types only.
impl wit_sandbox::Host for CallState {}

/// So do 0.5.0's, 0.4.0's, 0.3.0's and 0.2.0's.
impl v0_5_0::sandbox::Host for CallState {}

/// See above.
impl v0_4_0::sandbox::Host for CallState {}

/// See above.
impl v0_3_0::sandbox::Host for CallState {}

/// See above.
impl v0_2_0::sandbox::Host for CallState {}

/// The `settings` handed to `tool.tools`: `profile` (the plugin's bound) and the operator's
/// extra writable directories.
pub(crate) fn settings(
    profile: &sandbox::Profile,
    writable: &[std::path::PathBuf],
) -> wit_sandbox::Settings {
    wit_sandbox::Settings {
        mode: profile.mode.into(),
        network: profile.network.into(),
        allowed_hosts: profile
            .network
            .allow_list()
            .map(|list| list.patterns().iter().map(ToString::to_string).collect())
            .unwrap_or_default(),
        writable: writable.iter().map(|p| p.display().to_string()).collect(),
        limits: profile.limits.into(),
        summary: profile.summary(),
    }
}
