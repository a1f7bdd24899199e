//! The bounds on what a tool may ask, checked before anything is asked: a tool that breaks
//! one gets a tool error naming it.

use super::{Ask, FieldKind, NeedsInput};

/// The most questions in one round.
pub const MAX_QUESTIONS: usize = 8;
/// The most fields in one form.
pub const MAX_FIELDS: usize = 16;
/// The most values of a choice field.
pub const MAX_CHOICES: usize = 32;
/// The longest key or field name, in bytes.
pub const MAX_NAME_BYTES: usize = 64;
/// The longest form message, title or description, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 4096;
/// The longest sampling prompt or system prompt, in bytes.
pub const MAX_PROMPT_BYTES: usize = 64 * 1024;
/// The longest state a tool carries between rounds, in bytes.
pub const MAX_STATE_BYTES: usize = 16 * 1024;

/// Why a tool's questions were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the tool's questions break a bound: {0}")]
pub struct BadQuestions(pub String);

/// Check `needs` against the bounds above: every key and field name a short word of
/// letters, digits, `_` and `-`, keys unique, at least one question.
pub fn needs_input(needs: &NeedsInput) -> Result<(), BadQuestions> {
    let bad = |why: String| Err(BadQuestions(why));
    if needs.questions.is_empty() {
        return bad("no question was asked".into());
    }
    if needs.questions.len() > MAX_QUESTIONS {
        return bad(format!(
            "{} questions in one round (at most {MAX_QUESTIONS})",
            needs.questions.len()
        ));
    }
    if let Some(state) = &needs.state
        && state.len() > MAX_STATE_BYTES
    {
        return bad(format!(
            "a state of {} bytes (at most {MAX_STATE_BYTES})",
            state.len()
        ));
    }
    let mut keys = std::collections::HashSet::new();
    for question in &needs.questions {
        name("key", &question.key)?;
        if !keys.insert(question.key.as_str()) {
            return bad(format!("the key `{}` is used twice", question.key));
        }
        match &question.ask {
            Ask::Form(form) => {
                text("message", &form.message, MAX_MESSAGE_BYTES)?;
                if form.fields.len() > MAX_FIELDS {
                    return bad(format!(
                        "a form of {} fields (at most {MAX_FIELDS})",
                        form.fields.len()
                    ));
                }
                let mut names = std::collections::HashSet::new();
                for field in &form.fields {
                    name("field name", &field.name)?;
                    if !names.insert(field.name.as_str()) {
                        return bad(format!("the field `{}` is named twice", field.name));
                    }
                    for words in [&field.title, &field.description].into_iter().flatten() {
                        text("field title or description", words, MAX_MESSAGE_BYTES)?;
                    }
                    if let FieldKind::Choice(values) = &field.kind {
                        if values.is_empty() || values.len() > MAX_CHOICES {
                            return bad(format!(
                                "the choice `{}` has {} values (1 to {MAX_CHOICES})",
                                field.name,
                                values.len()
                            ));
                        }
                        for value in values {
                            if value.is_empty() {
                                return bad(format!(
                                    "the choice `{}` has an empty value",
                                    field.name
                                ));
                            }
                            text("choice value", value, MAX_MESSAGE_BYTES)?;
                        }
                    }
                }
            }
            Ask::Sample(sample) => {
                text("prompt", &sample.prompt, MAX_PROMPT_BYTES)?;
                if let Some(system) = &sample.system {
                    text("system prompt", system, MAX_PROMPT_BYTES)?;
                }
                if sample.max_tokens == 0 {
                    return bad("a sample of at most 0 tokens".into());
                }
            }
            Ask::Roots => {}
            Ask::Secret(secret) => text("message", &secret.message, MAX_MESSAGE_BYTES)?,
        }
    }
    Ok(())
}

/// Whether `name` may be a key or field name: 1 to [`MAX_NAME_BYTES`] bytes of letters,
/// digits, `_` and `-`.
pub(crate) fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A key or field name, as [`is_name`] says.
fn name(what: &str, name: &str) -> Result<(), BadQuestions> {
    if is_name(name) {
        Ok(())
    } else {
        Err(BadQuestions(format!(
            "the {what} `{}` is not 1 to {MAX_NAME_BYTES} letters, digits, `_` or `-`",
            name.escape_debug()
        )))
    }
}

fn text(what: &str, text: &str, max: usize) -> Result<(), BadQuestions> {
    if text.len() > max {
        Err(BadQuestions(format!(
            "a {what} of {} bytes (at most {max})",
            text.len()
        )))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ask::{Field, Form, Question};

    fn form(fields: Vec<Field>) -> NeedsInput {
        NeedsInput {
            questions: vec![Question {
                key: "approve".into(),
                required: false,
                ask: Ask::Form(Form {
                    message: "Run it?".into(),
                    fields,
                }),
            }],
            state: None,
        }
    }

    fn field(name: &str, kind: FieldKind) -> Field {
        Field {
            name: name.into(),
            title: None,
            description: None,
            required: true,
            kind,
        }
    }

    #[test]
    fn questions_within_the_bounds_pass_and_each_bound_is_named() {
        assert_eq!(
            needs_input(&form(vec![field("run", FieldKind::YesNo)])),
            Ok(())
        );
        let cases = [
            (form(vec![field("bad name", FieldKind::Text)]), "field name"),
            (
                form(vec![
                    field("a", FieldKind::Text),
                    field("a", FieldKind::Text),
                ]),
                "named twice",
            ),
            (
                form(vec![field("c", FieldKind::Choice(vec![]))]),
                "0 values",
            ),
            (
                form(
                    (0..=MAX_FIELDS)
                        .map(|i| field(&format!("f{i}"), FieldKind::Text))
                        .collect(),
                ),
                "fields (at most 16)",
            ),
            (
                NeedsInput {
                    questions: vec![],
                    state: None,
                },
                "no question",
            ),
            (
                NeedsInput {
                    state: Some("x".repeat(MAX_STATE_BYTES + 1)),
                    ..form(vec![])
                },
                "state of",
            ),
        ];
        for (needs, words) in cases {
            let error = needs_input(&needs).expect_err(words);
            assert!(error.0.contains(words), "{error} lacks {words}");
        }
        let mut twice = form(vec![]);
        twice.questions.push(twice.questions[0].clone());
        assert!(
            needs_input(&twice)
                .expect_err("twice")
                .0
                .contains("used twice")
        );
    }
}
