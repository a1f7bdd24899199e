//! Reading the reference tables of `docs/writing-a-policy.md`, for the tests that check them
//! against the parsers. The library's manifest reference test and the binary's scenario
//! reference test both include this file.

use std::collections::BTreeSet;
use std::path::Path;

/// The guide's text.
pub(crate) fn guide() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/writing-a-policy.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The rows of the first table after the line `heading`, each as its cells (trimmed; the
/// header and the separator left out).
pub(crate) fn table(text: &str, heading: &str) -> Vec<Vec<String>> {
    let mut lines = text.lines().skip_while(|line| *line != heading);
    assert!(lines.next().is_some(), "the guide has no `{heading}`");
    lines
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .skip(2)
        .map(|line| {
            line.trim_matches('|')
                .split('|')
                .map(|cell| cell.trim().to_owned())
                .collect()
        })
        .collect()
}

/// The key of a row: its first cell, in backticks.
pub(crate) fn key(row: &[String]) -> String {
    let cell = &row[0];
    assert!(
        cell.starts_with('`') && cell.ends_with('`'),
        "a key in backticks: {cell}"
    );
    cell.trim_matches('`').to_owned()
}

/// The keys the documented `keys` have directly under `prefix` (`""`: at the top).
pub(crate) fn children(keys: &[String], prefix: &str) -> BTreeSet<String> {
    keys.iter()
        .filter_map(|key| {
            if prefix.is_empty() {
                Some(key.as_str())
            } else {
                key.strip_prefix(prefix)?.strip_prefix('.')
            }
        })
        .filter_map(|rest| rest.split('.').next())
        .map(str::to_owned)
        .collect()
}

/// The fields a parser knows, from its error for an unknown field (serde lists them).
pub(crate) fn known_fields(error: &str) -> BTreeSet<String> {
    let line = error
        .lines()
        .find(|line| line.contains("unknown field"))
        .unwrap_or_else(|| panic!("not an unknown-field error: {error}"));
    // serde says "expected `a`", "expected `a` or `b`" or "expected one of `a`, `b`, `c`".
    let (_, list) = line
        .split_once("expected ")
        .unwrap_or_else(|| panic!("no list of fields: {line}"));
    let list = list.strip_prefix("one of ").unwrap_or(list);
    list.split(", ")
        .flat_map(|part| part.split(" or "))
        .map(|field| field.trim().trim_matches('`').to_owned())
        .collect()
}

#[test]
fn tables_are_read_row_by_row() {
    let text = "# x\n## T\n\ntext\n\n| Key | Default |\n|---|---|\n| `a.b` | `1` |\n| `a.c` | none |\n\n| `z` | 2 |\n";
    let rows = table(text, "## T");
    assert_eq!(rows, [vec!["`a.b`", "`1`"], vec!["`a.c`", "none"]]);
    let keys: Vec<String> = rows.iter().map(|row| key(row)).collect();
    assert_eq!(children(&keys, ""), BTreeSet::from(["a".to_owned()]));
    assert_eq!(
        children(&keys, "a"),
        BTreeSet::from(["b".to_owned(), "c".to_owned()])
    );
    let ab = BTreeSet::from(["a".to_owned(), "b_c".to_owned()]);
    assert_eq!(
        known_fields("line 1\nunknown field `x`, expected one of `a`, `b_c`\n"),
        ab
    );
    assert_eq!(known_fields("unknown field `x`, expected `a` or `b_c`"), ab);
}
