//! What the person allowed "from now on": keys a policy noted after an answer (WIT 0.5.0
//! `approvals`), kept per plugin and scope until the scope ends.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

/// The most keys kept per plugin and scope.
pub const MAX_KEYS: usize = 256;
/// The longest key kept, in bytes.
pub const MAX_KEY_BYTES: usize = 256;
/// The most plugin-and-scope pairs holding keys at once in a host.
pub const MAX_HOLDERS: usize = 4096;

/// The keys of every plugin and scope.
#[derive(Debug, Default)]
pub struct Approvals {
    /// Keys by scope, then by plugin.
    kept: Mutex<HashMap<String, HashMap<String, HashSet<String>>>>,
}

impl Approvals {
    /// Keep `key` for `plugin` in `scope`: whether it is kept (a key over the bounds is not).
    pub fn remember(&self, scope: &str, plugin: &str, key: &str) -> bool {
        if key.is_empty() || key.len() > MAX_KEY_BYTES {
            return false;
        }
        let mut kept = crate::lock(&self.kept);
        let holders: usize = kept.values().map(HashMap::len).sum();
        let known = kept.get(scope).is_some_and(|p| p.contains_key(plugin));
        if !known && holders >= MAX_HOLDERS {
            return false;
        }
        let keys = kept
            .entry(scope.to_owned())
            .or_default()
            .entry(plugin.to_owned())
            .or_default();
        if keys.contains(key) {
            return true;
        }
        if keys.len() >= MAX_KEYS {
            return false;
        }
        keys.insert(key.to_owned())
    }

    /// Whether `plugin` kept `key` in `scope`.
    pub fn remembered(&self, scope: &str, plugin: &str, key: &str) -> bool {
        crate::lock(&self.kept)
            .get(scope)
            .and_then(|plugins| plugins.get(plugin))
            .is_some_and(|keys| keys.contains(key))
    }

    /// Forget everything kept in `scope` (it ended).
    pub fn end_scope(&self, scope: &str) {
        crate::lock(&self.kept).remove(scope);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_per_plugin_and_scope_bounded_and_go_with_the_scope() {
        let approvals = Approvals::default();
        assert!(approvals.remember("s1", "guarded", "git push"));
        assert!(approvals.remembered("s1", "guarded", "git push"));
        assert!(!approvals.remembered("s2", "guarded", "git push"));
        assert!(!approvals.remembered("s1", "other", "git push"));
        assert!(!approvals.remember("s1", "guarded", &"k".repeat(MAX_KEY_BYTES + 1)));
        for i in 1..MAX_KEYS {
            assert!(approvals.remember("s1", "guarded", &format!("key {i}")));
        }
        assert!(!approvals.remember("s1", "guarded", "one too many"));
        assert!(
            approvals.remember("s1", "guarded", "git push"),
            "a kept key stays kept"
        );
        approvals.end_scope("s1");
        assert!(!approvals.remembered("s1", "guarded", "git push"));
    }
}
