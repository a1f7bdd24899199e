//! The guarded shell policy: the same tools, stricter. Destructive commands are refused
//! before they run (each refusal names its rule), a foreground command is killed with
//! everything it started at its timeout, and the longest timeout is lower.
//!
//! Written with the policy SDK (`toolhost-policy`) alone: a [`Policy`] constant and
//! [`toolhost_policy::export!`].

use std::time::Duration;
use toolhost_policy::{Confinement, Mode, OnTimeout, Policy, Settings, Texts};

const POLICY: Policy = Policy {
    settings: Settings {
        max_timeout: Duration::from_secs(5 * 60),
        on_timeout: OnTimeout::Kill,
        ..Settings::DEFAULT
    },
    deny: toolhost_policy::GUARDED_RULES,
    // Its manifest's grant already bounds its commands this way; asking as well keeps the
    // policy confined under a manifest that grants more. The network is left to the grant: its
    // allow-list (registries and code hosts) is stricter than `full`, and this WIT cannot ask
    // for one.
    confinement: Confinement {
        mode: Some(Mode::WorkspaceWrite),
        network: None,
    },
    // Every rule of this policy is about destruction: say so in `execute`'s description.
    texts: Texts {
        deny_summary: "This policy refuses destructive commands ({reasons}).",
        ..Texts::STANDARD
    },
    ..Policy::new("guarded")
};

toolhost_policy::export!(POLICY);
