//! The scenario format table of `docs/writing-a-policy.md`, checked against the scenario
//! parser: the guide lists exactly the keys the parser knows, at every level.

#[path = "../../plugins/reference/tables.rs"]
mod tables;

use super::ScenarioFile;
use tables::{children, guide, key, known_fields, table};

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
