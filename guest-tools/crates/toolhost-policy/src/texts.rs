//! Wording a policy may change: [`Texts`], templates with `{name}` placeholders.

/// Wording of the standard tools that a policy may change. Each is a template: a placeholder
/// such as `{policy}` is replaced by its value; text in braces that names no placeholder is
/// kept as written. Start from [`Texts::STANDARD`] and change what you need:
///
/// ```
/// use toolhost_policy::Texts;
///
/// const TEXTS: Texts = Texts {
///     refusal: "the {policy} policy does not run this ({reason}); ask the user to run it",
///     ..Texts::STANDARD
/// };
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Texts {
    /// The tool error for a command a deny rule refuses. Placeholders: `{policy}` (the
    /// policy's name), `{rule}` and `{reason}` (the rule's [`name`](crate::DenyRule::name)
    /// and [`reason`](crate::DenyRule::reason)).
    pub refusal: &'static str,
    /// The sentence of `execute`'s description that tells the model what the deny rules
    /// refuse (left out when the policy has none). Placeholders: `{policy}`, `{reasons}`
    /// (every rule's reason, joined by `; `).
    pub deny_summary: &'static str,
    /// The note of a result whose command was killed at its timeout
    /// ([`OnTimeout::Kill`](crate::OnTimeout::Kill)). Placeholders: `{policy}`,
    /// `{max_timeout}` (the longest timeout, e.g. `5m`).
    pub killed_at_timeout: &'static str,
    /// Sentences added at the end of `execute`'s description (empty: none). Placeholder:
    /// `{policy}`.
    pub execute_extra: &'static str,
    /// The question to the person before a command a deny rule matches, when the host lets
    /// the policy ask (`--ask risky` and a client that shows forms). Placeholders:
    /// `{policy}`, `{rule}`, `{reason}`, `{command}`.
    pub ask: &'static str,
    /// What the refusal adds when nobody could be asked. Placeholder: `{why}` (the host's
    /// words for why not).
    pub nobody_to_ask: &'static str,
    /// What the refusal adds after the person's answer. Placeholder: `{answer}` (how they
    /// answered, e.g. `declined`).
    pub answered: &'static str,
}

impl Texts {
    /// The standard wording.
    pub const STANDARD: Texts = Texts {
        refusal: "refused by the {policy} policy, rule `{rule}`: {reason}. Nothing was run.",
        deny_summary: "This policy refuses some commands: {reasons}.",
        killed_at_timeout: "The {policy} policy kills commands at their timeout. Pass a longer \
                            timeout (at most {max_timeout}) or use run_in_background for long \
                            jobs.",
        execute_extra: "",
        ask: "The agent wants to run this command:\n\n{command}\n\nThe {policy} policy \
              refuses it unless you allow it (rule `{rule}`: {reason}). Run it?",
        nobody_to_ask: " The person could not be asked to allow it: {why}.",
        answered: " The person was asked and {answer}: do not retry it.",
    };
}

impl Default for Texts {
    fn default() -> Texts {
        Texts::STANDARD
    }
}

/// `template` with each `{name}` of `values` replaced by its value, in one pass (a value is
/// never searched for placeholders); unknown names are kept as written.
pub(crate) fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let known = after.find('}').and_then(|close| {
            let name = &after[..close];
            values
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (close, *value))
        });
        match known {
            Some((close, value)) => {
                out.push_str(value);
                rest = &after[close + 1..];
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_filled_once_and_unknown_ones_kept() {
        let values = [("policy", "mine"), ("reason", "it says {policy}")];
        assert_eq!(
            fill("{policy}: {reason} {other} {", &values),
            "mine: it says {policy} {other} {"
        );
        assert_eq!(fill("{{policy}}", &values), "{mine}");
        assert_eq!(fill("", &values), "");
    }

    #[test]
    fn the_standard_refusal_is_the_bundled_wording() {
        assert_eq!(
            fill(
                Texts::STANDARD.refusal,
                &[
                    ("policy", "guarded"),
                    ("rule", "fork-bomb"),
                    ("reason", "r")
                ]
            ),
            "refused by the guarded policy, rule `fork-bomb`: r. Nothing was run."
        );
    }
}
