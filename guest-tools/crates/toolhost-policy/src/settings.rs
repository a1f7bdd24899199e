//! Policy knobs, with defaults from the policy and overrides from the plugin's manifest config
//! table (handed to every call as JSON in the call context).

use crate::args::parse_duration;
use serde_json::Value;
use std::time::Duration;

/// What a foreground command that outlives its timeout turns into (`on_timeout` in the
/// manifest's config: `"handover"` or `"kill"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnTimeout {
    /// Keep it running as a tracked background process and tell the model how to follow it.
    /// When the caller waits for the end however long it takes (an MCP task), the command is
    /// waited for instead.
    Handover,
    /// Kill it and everything it started, and say so.
    Kill,
}

/// The knobs of the standard tools. A policy's values are defaults: the plugin manifest's
/// `[config]` table overrides any of them per installation, under the key named with each
/// field (durations as text such as `"30s"` or `"5m"`), and a key it does not know, or a bad
/// value, refuses the plugin's load with a message naming it:
///
/// ```toml
/// [config]
/// default_timeout = "30s"
/// max_timeout = "10m"
/// on_timeout = "kill"
/// ```
///
/// The host bounds every single wait as well: a `max_timeout` grant in the manifest's
/// `[grants]` caps how long one wait may block, whatever these settings say (the result then
/// says how long the host waited).
///
/// ```
/// use std::time::Duration;
/// use toolhost_policy::{OnTimeout, Settings};
///
/// const SETTINGS: Settings = Settings { default_timeout: Duration::from_secs(30), ..Settings::DEFAULT };
/// let s = Settings::from_config(&SETTINGS, r#"{"on_timeout": "kill", "max_timeout": "20s"}"#).unwrap();
/// assert_eq!(s.on_timeout, OnTimeout::Kill);
/// // A default timeout above the longest is lowered to it.
/// assert_eq!(s.default_timeout, Duration::from_secs(20));
/// assert!(Settings::from_config(&SETTINGS, r#"{"max_timout": "1m"}"#).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Foreground timeout of `execute` when the call gives none (`default_timeout`); at most
    /// `max_timeout`.
    pub default_timeout: Duration,
    /// Longest foreground timeout, and longest wait of `process_output` and `process_input`;
    /// longer requests are clamped, with a note saying so (`max_timeout`).
    pub max_timeout: Duration,
    /// Bytes of output returned to the model, head and tail kept (`output_cap_bytes`, at
    /// least 256).
    pub output_cap_bytes: usize,
    /// What happens at a foreground timeout (`on_timeout`: `"handover"` or `"kill"`).
    pub on_timeout: OnTimeout,
    /// Most exited processes `process_list` shows besides the running ones (`list_limit`, at
    /// least 1).
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
    /// The bundled default policy's settings: 10 s default timeout, 30 min longest, handed
    /// over to the background at a timeout, 32 KiB of output per result, 20 exited processes
    /// listed.
    pub const DEFAULT: Settings = Settings {
        default_timeout: Duration::from_secs(10),
        max_timeout: Duration::from_secs(30 * 60),
        output_cap_bytes: 32 * 1024,
        on_timeout: OnTimeout::Handover,
        list_limit: 20,
    };

    /// `base` with the overrides of the JSON config table `config` applied (empty text: none).
    /// Unknown keys and bad values are errors naming them, so a typo in a manifest does not
    /// pass silently. A `default_timeout` above `max_timeout` is lowered to it.
    pub fn from_config(base: &Settings, config: &str) -> Result<Settings, String> {
        let mut s = *base;
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
