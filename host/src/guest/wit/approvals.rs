//! The host side of the `toolhost:plugin/approvals` import (since 0.5.0): the keys a policy
//! keeps for the rest of its scope, in the host's
//! [`Approvals`](crate::ask::approvals::Approvals).
//!
//! The 0.5.0 interface, at the end, delegates to the current one; older contracts have no
//! such interface.

use super::latest::wit_approvals;
use super::v0_5_0;
use crate::guest::state::CallState;

impl wit_approvals::Host for CallState {
    async fn remember(&mut self, key: String) -> wasmtime::Result<bool> {
        Ok(self
            .approvals
            .as_ref()
            .is_some_and(|kept| kept.remember(&self.scope, self.reports.plugin(), &key)))
    }

    async fn remembered(&mut self, key: String) -> wasmtime::Result<bool> {
        Ok(self
            .approvals
            .as_ref()
            .is_some_and(|kept| kept.remembered(&self.scope, self.reports.plugin(), &key)))
    }
}

// The 0.5.0 interface: the same as the current one.

impl v0_5_0::approvals::Host for CallState {
    async fn remember(&mut self, key: String) -> wasmtime::Result<bool> {
        wit_approvals::Host::remember(self, key).await
    }

    async fn remembered(&mut self, key: String) -> wasmtime::Result<bool> {
        wit_approvals::Host::remembered(self, key).await
    }
}
