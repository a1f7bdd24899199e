//! How an expected value matches an actual one: an expected object matches when each of its
//! keys is in the actual object with a matching value (other keys are ignored); an array
//! matches an array of the same length item by item; a string `re:PATTERN` matches a string
//! in which the regular expression finds a match (unanchored: use `^` and `$`), any other
//! string only itself; numbers match equal numbers (`1` and `1.0` alike); booleans and null
//! match themselves. A mismatch is told as a list of paths with what was expected and found.

use serde_json::Value;

/// The prefix of a string that is a regular expression.
pub const REGEX_PREFIX: &str = "re:";

/// Where `actual` differs from `expected`: one line per difference (empty: it matches).
/// `path` names the value in the lines (e.g. `result`).
pub fn differences(path: &str, expected: &Value, actual: &Value) -> Vec<String> {
    let mut out = Vec::new();
    compare(path, expected, actual, &mut out);
    out
}

fn compare(path: &str, expected: &Value, actual: &Value, out: &mut Vec<String>) {
    match (expected, actual) {
        (Value::Object(want), Value::Object(got)) => {
            for (key, value) in want {
                let here = format!("{path}.{key}");
                match got.get(key) {
                    Some(found) => compare(&here, value, found, out),
                    None => out.push(format!("{here}: expected {}, missing", short(value))),
                }
            }
        }
        (Value::Array(want), Value::Array(got)) => {
            if want.len() != got.len() {
                out.push(format!(
                    "{path}: expected {} items, found {}: {}",
                    want.len(),
                    got.len(),
                    short(actual)
                ));
                return;
            }
            for (n, (value, found)) in want.iter().zip(got).enumerate() {
                compare(&format!("{path}[{n}]"), value, found, out);
            }
        }
        (Value::String(want), found) if want.starts_with(REGEX_PREFIX) => {
            let pattern = &want[REGEX_PREFIX.len()..];
            match (regex::Regex::new(pattern), found) {
                (Err(error), _) => out.push(format!("{path}: bad regular expression: {error}")),
                (Ok(regex), Value::String(text)) if regex.is_match(text) => {}
                (Ok(_), _) => out.push(format!(
                    "{path}: expected a match of /{pattern}/, found {}",
                    short(found)
                )),
            }
        }
        (Value::Number(want), Value::Number(got)) if want.as_f64() == got.as_f64() => {}
        (want, got) if want == got => {}
        (want, got) => out.push(format!(
            "{path}: expected {}, found {}",
            short(want),
            short(got)
        )),
    }
}

/// A value as JSON, cut to a readable length.
fn short(value: &Value) -> String {
    const MAX: usize = 300;
    let text = value.to_string();
    if text.len() <= MAX {
        return text;
    }
    let mut end = MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes)", &text[..end], text.len())
}

/// Whether `text` matches the expected string `want` (a `re:` pattern or the text itself).
pub fn text_matches(path: &str, want: &str, text: &str) -> Vec<String> {
    differences(
        path,
        &Value::String(want.to_owned()),
        &Value::String(text.to_owned()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_object_matches_a_superset_and_strings_may_be_patterns() {
        let actual = json!({"success": true, "output": "hello\n", "exit_code": 0, "extra": [1]});
        assert!(differences("r", &json!({"success": true}), &actual).is_empty());
        assert!(differences("r", &json!({"output": "re:^hel+o"}), &actual).is_empty());
        assert!(differences("r", &json!({"exit_code": 0.0}), &actual).is_empty());
        assert_eq!(
            differences("r", &json!({"output": "bye\n", "missing": 1}), &actual),
            vec![
                "r.missing: expected 1, missing".to_owned(),
                r#"r.output: expected "bye\n", found "hello\n""#.to_owned(),
            ]
        );
        assert_eq!(
            differences("r", &json!({"output": "re:^bye"}), &actual),
            vec![r#"r.output: expected a match of /^bye/, found "hello\n""#.to_owned()]
        );
    }

    #[test]
    fn arrays_match_item_by_item() {
        let actual = json!([{"command": "ls -l"}, {"command": "pwd"}]);
        assert!(differences("s", &json!([{"command": "re:^ls"}, {}]), &actual).is_empty());
        assert_eq!(differences("s", &json!([{}]), &actual).len(), 1);
        assert_eq!(
            differences("s", &json!([{}, {"command": "cd"}]), &actual),
            vec![r#"s[1].command: expected "cd", found "pwd""#.to_owned()]
        );
    }

    #[test]
    fn a_bad_pattern_is_reported() {
        let found = differences("x", &json!("re:("), &json!("("));
        assert!(found[0].contains("bad regular expression"), "{found:?}");
    }
}
