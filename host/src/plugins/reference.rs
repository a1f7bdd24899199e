//! The reference tables of `docs/writing-a-policy.md`, checked against the code: the manifest
//! keys of `[grants]` and `[limits]` with their defaults (the manifest parser), and the keys of
//! a scenario file (the scenario parser). The `[config]` keys and their defaults belong to the
//! policy SDK and are checked against a built policy by `tests/guide.rs`.

use crate::plugins::manifest::Manifest;
use crate::scenarios::ScenarioFile;
use std::collections::BTreeSet;
use std::path::Path;

/// The guide's text.
fn guide() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/writing-a-policy.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The rows of the first table after the line `heading`, each as its cells (trimmed; the
/// header and the separator left out).
fn table(text: &str, heading: &str) -> Vec<Vec<String>> {
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
fn key(row: &[String]) -> String {
    let cell = &row[0];
    assert!(
        cell.starts_with('`') && cell.ends_with('`'),
        "a key in backticks: {cell}"
    );
    cell.trim_matches('`').to_owned()
}

/// The keys the documented `keys` have directly under `prefix` (`""`: at the top).
fn children(keys: &[String], prefix: &str) -> BTreeSet<String> {
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
fn known_fields(error: &str) -> BTreeSet<String> {
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
fn the_manifest_reference_has_exactly_the_parser_s_keys_and_defaults() {
    let rows = table(&guide(), "## Manifest reference");
    let keys: Vec<String> = rows.iter().map(|row| key(row)).collect();
    let parse = |text: &str| Manifest::parse(text, Path::new("p.toml"));
    let unknown = |section: &str| {
        let text = if section.is_empty() {
            "bogus_key = 1\n".to_owned()
        } else {
            format!("[{section}]\nbogus_key = 1\n")
        };
        known_fields(&parse(&text).expect_err("an unknown key").to_string())
    };
    assert_eq!(children(&keys, ""), unknown(""), "the manifest's tables");
    for section in ["grants", "limits"] {
        assert_eq!(children(&keys, section), unknown(section), "[{section}]");
    }
    let empty = parse("").expect("an empty manifest");
    for row in rows.iter().filter(|row| !key(row).starts_with("config.")) {
        let key = key(row);
        let default = &row[1];
        let (section, name) = key.split_once('.').expect("SECTION.KEY");
        if default == "none" {
            continue;
        }
        let literal = default
            .strip_prefix('`')
            .and_then(|d| d.strip_suffix('`'))
            .unwrap_or_else(|| panic!("{key}: a default is `VALUE` or none, not {default}"));
        let given = parse(&format!("[{section}]\n{name} = {literal}\n"))
            .unwrap_or_else(|e| panic!("{key} = {literal}: {e}"));
        assert_eq!(given, empty, "{key}: the default is not {literal}");
    }
    // The defaults the table shows are those of an empty manifest.
    assert!(!empty.grants.process);
    assert_eq!(empty, Manifest::default());
}

#[test]
fn the_scenario_reference_has_exactly_the_parser_s_keys() {
    let rows = table(&guide(), "### The scenario format");
    let keys: Vec<String> = rows.iter().map(|row| key(row)).collect();
    // A valid file with `bogus_key` added at each level.
    let cases = [
        (
            "",
            "bogus_key = 1\n[[scenario]]\nname = \"s\"\n[[scenario.call]]\ntool = \"t\"\n",
        ),
        (
            "scenario",
            "[[scenario]]\nname = \"s\"\nbogus_key = 1\n[[scenario.call]]\ntool = \"t\"\n",
        ),
        (
            "scenario.process",
            "[[scenario]]\nname = \"s\"\n[[scenario.process]]\nbogus_key = 1\n\
             [[scenario.call]]\ntool = \"t\"\n",
        ),
        (
            "scenario.process.reply",
            "[[scenario]]\nname = \"s\"\n[[scenario.process]]\n[[scenario.process.reply]]\n\
             when = \"x\"\nbogus_key = 1\n[[scenario.call]]\ntool = \"t\"\n",
        ),
        (
            "scenario.call",
            "[[scenario]]\nname = \"s\"\n[[scenario.call]]\ntool = \"t\"\nbogus_key = 1\n",
        ),
        (
            "scenario.call.expect",
            "[[scenario]]\nname = \"s\"\n[[scenario.call]]\ntool = \"t\"\nexpect.bogus_key = 1\n",
        ),
    ];
    for (prefix, text) in cases {
        let valid = text
            .lines()
            .filter(|line| !line.contains("bogus_key"))
            .collect::<Vec<_>>()
            .join("\n");
        ScenarioFile::parse(&valid).unwrap_or_else(|e| panic!("{prefix}: {e}"));
        let error = ScenarioFile::parse(text).expect_err("an unknown key");
        assert_eq!(
            children(&keys, prefix),
            known_fields(&error),
            "the keys of `{prefix}`"
        );
    }
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
