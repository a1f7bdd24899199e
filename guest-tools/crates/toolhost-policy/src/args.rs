//! Strict parsing of a tool's JSON arguments: every mistake becomes a message that names the
//! argument and the bad value, so the model can correct itself.

use serde_json::{Map, Value};
use std::time::Duration;

/// The arguments object of one call, parsed strictly: every mistake becomes a message that
/// names the argument and the bad value, so the model can correct itself.
///
/// ```
/// use std::time::Duration;
/// let args = toolhost_policy::Args::parse(r#"{"path": "src", "wait": "2s"}"#, &["path", "wait", "all"]).unwrap();
/// assert_eq!(args.required_string("path"), Ok("src"));
/// assert_eq!(args.duration("wait"), Ok(Some(Duration::from_secs(2))));
/// assert_eq!(args.bool("all"), Ok(None));
/// let typo = toolhost_policy::Args::parse(r#"{"pth": "src"}"#, &["path"]).err().unwrap();
/// assert_eq!(typo, "unknown argument `pth`; accepted: `path`");
/// ```
pub struct Args {
    map: Map<String, Value>,
}

impl Args {
    /// Parse `text` as a JSON object whose keys are all in `allowed`. Empty text and `null`
    /// count as `{}`.
    pub fn parse(text: &str, allowed: &[&str]) -> Result<Args, String> {
        let trimmed = text.trim();
        let value = if trimmed.is_empty() {
            Value::Object(Map::new())
        } else {
            serde_json::from_str::<Value>(trimmed)
                .map_err(|e| format!("arguments are not valid JSON: {e}"))?
        };
        let map = match value {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            other => {
                return Err(format!(
                    "arguments must be a JSON object, got {}",
                    describe(&other)
                ));
            }
        };
        if let Some(unknown) = map.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(format!(
                "unknown argument `{unknown}`; accepted: {}",
                allowed
                    .iter()
                    .map(|a| format!("`{a}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        Ok(Args { map })
    }

    /// An optional string argument (`null` counts as absent).
    pub fn string(&self, key: &str) -> Result<Option<&str>, String> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(other) => Err(format!("`{key}` must be a string, got {}", describe(other))),
        }
    }

    /// A required, non-blank string argument.
    pub fn required_string(&self, key: &str) -> Result<&str, String> {
        match self.string(key)? {
            Some(s) if !s.trim().is_empty() => Ok(s),
            Some(_) => Err(format!("`{key}` must not be empty")),
            None => Err(format!("`{key}` is required")),
        }
    }

    /// An optional boolean argument. Strings such as `"yes"` are refused, not guessed at.
    pub fn bool(&self, key: &str) -> Result<Option<bool>, String> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(format!(
                "`{key}` must be true or false, got {}",
                describe(other)
            )),
        }
    }

    /// An optional whole-number argument within `min..=max`.
    pub fn integer(&self, key: &str, min: u64, max: u64) -> Result<Option<u64>, String> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => match n.as_u64() {
                Some(v) if (min..=max).contains(&v) => Ok(Some(v)),
                _ => Err(format!(
                    "`{key}` must be a whole number from {min} to {max}, got {n}"
                )),
            },
            Some(other) => Err(format!(
                "`{key}` must be a whole number from {min} to {max}, got {}",
                describe(other)
            )),
        }
    }

    /// An argument's JSON value, `null` counting as absent: for the crate's own parsing of
    /// values the methods above do not cover.
    pub(crate) fn value(&self, key: &str) -> Option<&Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// An optional list of strings.
    pub fn string_list(&self, key: &str) -> Result<Option<Vec<&str>>, String> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| match item {
                    Value::String(s) => Ok(s.as_str()),
                    other => Err(format!(
                        "`{key}` must be a list of strings, but it holds {}",
                        describe(other)
                    )),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(other) => Err(format!(
                "`{key}` must be a list of strings, got {}",
                describe(other)
            )),
        }
    }

    /// An optional duration argument written like `"500ms"`, `"30s"`, `"5m"`.
    pub fn duration(&self, key: &str) -> Result<Option<Duration>, String> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => parse_duration(key, s).map(Some),
            Some(other) => Err(format!(
                "`{key}` must be a duration string such as \"30s\" or \"5m\", got {}",
                describe(other)
            )),
        }
    }
}

/// Parse a positive duration such as `"500ms"`, `"30s"`, `"5m"` or `"1h 30m"`; `what` names
/// the setting in the error.
pub fn parse_duration(what: &str, text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if t.starts_with('-') {
        return Err(format!("`{what}` must be positive, got \"{text}\""));
    }
    let d = humantime::parse_duration(t).map_err(|e| {
        format!("`{what}` is not a duration (\"{text}\": {e}); write it like \"500ms\", \"30s\" or \"5m\"")
    })?;
    if d.is_zero() {
        return Err(format!(
            "`{what}` must be greater than zero, got \"{text}\""
        ));
    }
    Ok(d)
}

/// Describe a JSON value in an error message: its type and a short rendering.
pub(crate) fn describe(v: &Value) -> String {
    let kind = match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    let mut text = v.to_string();
    if text.len() > 60 {
        let mut cut = 57;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("...");
    }
    format!("{kind} {text}")
}

/// Render a duration for people and models: `10s`, `2m 30s`, `250ms`.
pub fn format_duration(d: Duration) -> String {
    // Whole milliseconds are plenty; humantime would print nanoseconds too.
    let ms = Duration::from_millis(d.as_millis().min(u64::MAX as u128) as u64);
    humantime::format_duration(ms).to_string()
}
