//! The reference tables of `docs/writing-a-policy.md`, checked against the code: the manifest
//! keys of `[grants]` and `[limits]` with their defaults (the manifest parser). The keys of a
//! scenario file are checked against the scenario parser by the binary (`cli/scenarios`). The
//! `[config]` keys and their defaults belong to the policy SDK and are checked against a built
//! policy by `tests/guide.rs`.

mod tables;

use crate::plugins::manifest::Manifest;
use std::path::Path;
use tables::{children, guide, key, known_fields, table};

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
