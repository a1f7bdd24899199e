//! Policy knobs, with defaults from the policy and overrides from the plugin's manifest config
//! table (handed to every call as JSON in the call context).

use crate::args::parse_duration;
use serde_json::Value;
use std::time::Duration;

/// What a foreground command that outlives its timeout turns into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnTimeout {
    /// Keep it running as a tracked background process and tell the model how to follow it.
    Handover,
    /// Kill it and everything it started, and say so.
    Kill,
}

/// The knobs of a shell policy.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Foreground timeout when the call gives none (`default_timeout`).
    pub default_timeout: Duration,
    /// Longest foreground timeout; longer requests are clamped (`max_timeout`).
    pub max_timeout: Duration,
    /// Bytes of output returned to the model, head and tail kept (`output_cap_bytes`).
    pub output_cap_bytes: usize,
    /// What happens at a foreground timeout (`on_timeout`: `"handover"` or `"kill"`).
    pub on_timeout: OnTimeout,
    /// Most entries `process_list` shows (`list_limit`).
    pub list_limit: usize,
}

const KEYS: &[&str] = &[
    "default_timeout",
    "max_timeout",
    "output_cap_bytes",
    "on_timeout",
    "list_limit",
];

impl Settings {
    /// `base` with the overrides of the JSON config table `config` applied. Unknown keys and
    /// bad values are errors naming them, so a typo in a manifest does not pass silently.
    pub fn from_config(base: &Settings, config: &str) -> Result<Settings, String> {
        let mut s = base.clone();
        let trimmed = config.trim();
        if trimmed.is_empty() {
            return Ok(s);
        }
        let value: Value = serde_json::from_str(trimmed)
            .map_err(|e| format!("plugin config is not valid JSON: {e}"))?;
        let Value::Object(map) = value else {
            return Err("plugin config must be a table".to_string());
        };
        for (key, v) in &map {
            let bad = |what: &str| format!("plugin config `{key}` must be {what}, got {v}");
            match key.as_str() {
                "default_timeout" | "max_timeout" => {
                    let text = v.as_str().ok_or_else(|| bad("a duration string"))?;
                    let d = parse_duration(&format!("config {key}"), text)?;
                    if key == "default_timeout" {
                        s.default_timeout = d;
                    } else {
                        s.max_timeout = d;
                    }
                }
                "output_cap_bytes" => {
                    let n = v
                        .as_u64()
                        .filter(|n| *n >= 256)
                        .ok_or_else(|| bad("an integer of at least 256"))?;
                    s.output_cap_bytes = usize::try_from(n).unwrap_or(usize::MAX);
                }
                "on_timeout" => {
                    s.on_timeout = match v.as_str() {
                        Some("handover") => OnTimeout::Handover,
                        Some("kill") => OnTimeout::Kill,
                        _ => return Err(bad("\"handover\" or \"kill\"")),
                    }
                }
                "list_limit" => {
                    let n = v
                        .as_u64()
                        .filter(|n| *n >= 1)
                        .ok_or_else(|| bad("a positive integer"))?;
                    s.list_limit = usize::try_from(n).unwrap_or(usize::MAX);
                }
                _ => {
                    return Err(format!(
                        "unknown plugin config key `{key}`; known: {}",
                        KEYS.join(", ")
                    ));
                }
            }
        }
        s.default_timeout = s.default_timeout.min(s.max_timeout);
        Ok(s)
    }
}
