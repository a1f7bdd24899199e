//! What one plugin may use and how much: its capability [`Grants`], its per-call
//! [`CallLimits`], and the [`CallLimiter`] that holds every linear memory, table and guest
//! buffer of a call to one memory budget.

use super::errors::LimitExceeded;
use crate::sandbox::SandboxGrant;
use std::path::PathBuf;
use std::time::Duration;
use wasmtime::ResourceLimiter;

/// Capability grants. Everything is denied unless granted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    /// May use the process capability.
    pub process: bool,
    /// Processes run only at or below this directory (canonical).
    pub workdir_root: Option<PathBuf>,
    /// Longest a single process wait may block.
    pub max_timeout: Option<Duration>,
    /// Host environment variables the plugin's processes inherit; `None` (no `env` key)
    /// means all of them. What the guest sets itself is passed on either way.
    pub env: Option<Vec<String>>,
    /// How confined the plugin's commands are at least (`sandbox`, `network`, and the
    /// `memory_limit`, `process_limit`, `cpu_limit` keys); the operator's settings bound it.
    pub sandbox: SandboxGrant,
}

/// Limits applied to one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallLimits {
    /// Linear memories, tables and guest buffers together.
    pub memory_bytes: usize,
    /// CPU time of the call (waiting in host calls or for a CPU is not counted).
    pub cpu_time: Duration,
    /// Whole call, waits included.
    pub wall_time: Duration,
}

impl Default for CallLimits {
    fn default() -> Self {
        CallLimits {
            memory_bytes: 64 * 1024 * 1024,
            cpu_time: Duration::from_secs(5),
            wall_time: Duration::from_secs(60 * 60),
        }
    }
}

/// Elements a single table may grow to.
const MAX_TABLE_ELEMENTS: usize = 1_000_000;

/// One memory budget per call, shared by every linear memory, every table and every guest
/// buffer of the call: a component cannot multiply its limit by declaring several memories.
pub(crate) struct CallLimiter {
    limit: usize,
    used: usize,
}

impl CallLimiter {
    /// A budget of `limit` bytes, none of it used.
    pub(crate) fn new(limit: usize) -> Self {
        CallLimiter { limit, used: 0 }
    }

    /// Take `bytes` more for `what`, or fail with the memory limit.
    pub(crate) fn charge(&mut self, bytes: usize, what: &'static str) -> Result<(), LimitExceeded> {
        match self.used.checked_add(bytes) {
            Some(total) if total <= self.limit => {
                self.used = total;
                Ok(())
            }
            _ => Err(LimitExceeded::Memory {
                what,
                needed: bytes,
                used: self.used,
                limit: self.limit,
            }),
        }
    }

    /// Give back `bytes` (a guest buffer was dropped).
    pub(crate) fn release(&mut self, bytes: usize) {
        self.used = self.used.saturating_sub(bytes);
    }
}

impl ResourceLimiter for CallLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.charge(desired.saturating_sub(current), "linear memory")?;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > MAX_TABLE_ELEMENTS {
            return Err(LimitExceeded::TableElements {
                max: MAX_TABLE_ELEMENTS,
            }
            .into());
        }
        let bytes = desired.saturating_sub(current) * size_of::<usize>();
        self.charge(bytes, "a table")?;
        Ok(true)
    }

    /// Core module instances of one call. A Python plugin built with componentize-py makes
    /// 14 (libc, libpython, the WASI emulation libraries, the runtime, the bindings, the
    /// adapter, shims) and one more per native extension module; 64 leaves room for those.
    /// Each instance's memories and tables are held to the memory budget all the same.
    fn instances(&self) -> usize {
        64
    }

    fn tables(&self) -> usize {
        64
    }

    fn memories(&self) -> usize {
        16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_shared_and_given_back() {
        let mut limiter = CallLimiter::new(100);
        limiter.charge(60, "linear memory").expect("fits");
        let err = limiter.charge(41, "a guest buffer").expect_err("over");
        assert_eq!(
            err,
            LimitExceeded::Memory {
                what: "a guest buffer",
                needed: 41,
                used: 60,
                limit: 100
            }
        );
        limiter.release(60);
        limiter.charge(100, "a table").expect("fits after release");
        assert!(limiter.charge(usize::MAX, "x").is_err(), "no overflow");
    }
}
