//! Process ids: short, unique within a manager, and not guessable from one another (a keyed
//! permutation of a counter), so one scope cannot probe for another scope's ids.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Hands out ids.
pub(super) struct Ids {
    seed: u64,
    counter: AtomicU64,
}

impl Ids {
    pub(super) fn new() -> Self {
        Self {
            seed: random_seed(),
            counter: AtomicU64::new(0),
        }
    }

    /// The next id, with its sequence number (which orders records by start).
    pub(super) fn next(&self) -> (u64, String) {
        let seq = self.counter.fetch_add(1, Ordering::Relaxed);
        (seq, format!("{:012x}", permute48(seq, self.seed)))
    }
}

fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos());
    hasher.write_u128(now);
    hasher.write_u32(std::process::id());
    hasher.finish()
}

/// A bijection of the 48-bit numbers, keyed by `seed`: unique, unguessable-looking ids from
/// a counter.
fn permute48(n: u64, seed: u64) -> u64 {
    const MASK: u64 = (1 << 48) - 1;
    let mut x = n.wrapping_add(seed) & MASK;
    x ^= x >> 23;
    x = x.wrapping_mul(0x2545_f491_4f6c_dd1d) & MASK;
    x ^= x >> 21;
    x = x.wrapping_mul(0x9e37_79b9_7f4a_7c15) & MASK;
    x ^= x >> 25;
    x
}

#[cfg(test)]
#[path = "ids_tests.rs"]
mod tests;
