//! The default shell policy: the standard tools with generous limits. A foreground command
//! that outlives its timeout is handed over to the background, never silently leaked or
//! killed.
//!
//! Written with the policy SDK (`toolhost-policy`) alone: a [`Policy`] constant and
//! [`toolhost_policy::export!`].

use std::time::Duration;
use toolhost_policy::{OnTimeout, Policy, Settings};

/// Every field is the SDK's standard (`Policy::new`), spelled out here as the example of a
/// policy's settings.
const POLICY: Policy = Policy {
    settings: Settings {
        default_timeout: Duration::from_secs(10),
        max_timeout: Duration::from_secs(30 * 60),
        output_cap_bytes: 32 * 1024,
        on_timeout: OnTimeout::Handover,
        list_limit: 20,
    },
    ..Policy::new("default")
};

toolhost_policy::export!(POLICY);
