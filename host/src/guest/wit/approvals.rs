//! The host side of the `toolhost:plugin/approvals` import (0.5.0): the keys a policy keeps
//! for the rest of its scope, in the host's [`Approvals`](crate::ask::approvals::Approvals).

use super::latest::wit_approvals;
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
