//! Secrets the person types for one command (`execute`'s `secrets` argument, WIT 0.6.0
//! `secret` questions).
//!
//! The model names each variable the command needs and what it is for. The person types each
//! value on the host's page; the tool never sees a value, and hands each to the command by
//! its question's key.
//!
//! 1. No `secrets`: nothing to do. A command too long to show whole gets none.
//! 2. A checked reply for every variable ([`key`]): each `secret-given` one goes to the command
//!    ([`Secrets::Give`]); any other refuses the command, saying how the person answered.
//! 3. Where no secret can be asked, the command is refused, saying why.
//! 4. Else the person is asked, one question per variable, with the deny rules the person
//!    allowed so far carried in the state.

use serde_json::Value;

use crate::exports::toolhost::plugin::tool::{
    Ask, CallContext, CanAsk, NeedsInput, Question, Reply, Secret,
};
use crate::toolhost::plugin::process::SecretVariable;

/// The most variables one command may ask for.
pub(crate) const MAX_SECRETS: usize = 8;

/// The longest variable name (its question's key is `secret-NAME`, at most 64 bytes).
const MAX_NAME: usize = 57;

/// The longest "what it is for" text.
const MAX_WHY: usize = 500;

/// The most characters of a command given secrets (its question shows it whole).
const MAX_COMMAND_SHOWN: usize = 500;

/// What to do about a command's secrets.
pub(crate) enum Secrets {
    /// Run it with these variables (none when it asked for none).
    Give(Vec<SecretVariable>),
    /// Ask the person first.
    Ask(NeedsInput),
    /// Refuse it, with this message for the model.
    Refuse(String),
}

/// The key of the question for variable `name`.
pub(crate) fn key(name: &str) -> String {
    format!("secret-{name}")
}

/// The `secrets` argument: variable names and what each is for, in the order given.
pub(crate) fn parse(value: Option<&Value>) -> Result<Vec<(String, String)>, String> {
    let Some(value) = value else {
        return Ok(Vec::new());
    };
    let Value::Object(map) = value else {
        return Err(format!(
            "`secrets` must be an object of variable names and what each is for, e.g. \
             {{\"GH_TOKEN\": \"a token to create the release\"}}; got {}",
            crate::args::describe(value)
        ));
    };
    if map.len() > MAX_SECRETS {
        return Err(format!(
            "`secrets` names {} variables; at most {MAX_SECRETS}",
            map.len()
        ));
    }
    let mut wanted = Vec::with_capacity(map.len());
    for (name, why) in map {
        let valid = !name.is_empty()
            && name.len() <= MAX_NAME
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(format!(
                "`secrets`: `{}` is no variable name (letters, digits and `_`, not starting \
                 with a digit, at most {MAX_NAME} characters)",
                name.escape_debug()
            ));
        }
        let Value::String(why) = why else {
            return Err(format!(
                "`secrets`: what `{name}` is for must be a text, got {}",
                crate::args::describe(why)
            ));
        };
        if why.trim().is_empty() || why.len() > MAX_WHY {
            return Err(format!(
                "`secrets`: say what `{name}` is for, in at most {MAX_WHY} bytes"
            ));
        }
        wanted.push((name.clone(), why.clone()));
    }
    Ok(wanted)
}

/// How the person answered, in words for a refusal, when they did not give the secret.
fn how(reply: &Reply) -> String {
    match reply {
        Reply::Declined => "declined".to_owned(),
        Reply::Cancelled => "dismissed the question".to_owned(),
        Reply::TimedOut => "did not answer in time".to_owned(),
        Reply::NobodyToAsk => "could not be asked".to_owned(),
        Reply::Unusable(why) => format!("could not be asked ({why})"),
        _ => "gave a reply that does not fit the question".to_owned(),
    }
}

/// Decide about `command`'s `wanted` secrets, as the module's flow says; `state` is carried to
/// the next round when the person is asked.
pub(crate) fn decide(
    command: &str,
    wanted: &[(String, String)],
    cx: &CallContext,
    state: Option<String>,
) -> Secrets {
    // 1. Nothing wanted; a command too long to show the person whole gets no secret.
    if wanted.is_empty() {
        return Secrets::Give(Vec::new());
    }
    if command.chars().count() > MAX_COMMAND_SHOWN {
        return Secrets::Refuse(format!(
            "not run: a command given secrets is shown whole to the person, so it may have at \
             most {MAX_COMMAND_SHOWN} characters; put the rest in a script file and run that"
        ));
    }
    // 2. The replies, when the host checked them and every variable has one.
    let replies = cx
        .answers
        .as_ref()
        .filter(|answers| answers.checked)
        .map(|answers| {
            wanted
                .iter()
                .map(|(name, _)| {
                    let key = key(name);
                    answers
                        .replies
                        .iter()
                        .find(|answer| answer.key == key)
                        .map(|answer| (name, key, &answer.reply))
                })
                .collect::<Option<Vec<_>>>()
        })
        .unwrap_or_default();
    if let Some(replies) = replies {
        let mut give = Vec::with_capacity(replies.len());
        for (name, key, reply) in replies {
            if !matches!(reply, Reply::SecretGiven) {
                return Secrets::Refuse(format!(
                    "not run: the command needs `{name}`, and the person {}. Ask them what to \
                     do instead; never ask them to paste a secret into the conversation.",
                    how(reply)
                ));
            }
            give.push(SecretVariable {
                name: name.clone(),
                key,
            });
        }
        return Secrets::Give(give);
    }
    // 3. Nobody to ask for a secret.
    if (cx.asking.can & CanAsk::SECRET) == CanAsk::empty() {
        let why = cx
            .asking
            .secret_unavailable
            .as_deref()
            .unwrap_or("this caller cannot be asked for secrets");
        let names: Vec<String> = wanted.iter().map(|(name, _)| format!("`{name}`")).collect();
        return Secrets::Refuse(format!(
            "not run: the command needs {} from the person, and nobody can be asked for a \
             secret here: {why}. Run it without `secrets`, or ask the person how they want to \
             provide it; never ask them to paste a secret into the conversation.",
            names.join(", ")
        ));
    }
    // 4. Ask, showing the command whole: the person decides what gets the secret.
    Secrets::Ask(NeedsInput {
        questions: wanted
            .iter()
            .map(|(name, why)| Question {
                key: key(name),
                ask: Ask::Secret(Secret {
                    message: format!("The command `{command}` needs {name}: {why}"),
                }),
                required: false,
            })
            .collect(),
        state,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exports::toolhost::plugin::tool::{Answer, Answers, Asking};
    use serde_json::json;

    fn cx(can: CanAsk, replies: Option<Vec<(&str, Reply)>>) -> CallContext {
        CallContext {
            scope: "test".into(),
            config: "{}".into(),
            asking: Asking {
                can,
                unavailable: None,
                secret_unavailable: ((can & CanAsk::SECRET) == CanAsk::empty())
                    .then(|| "the client declared no URL-mode elicitation".into()),
            },
            answers: replies.map(|replies| Answers {
                replies: replies
                    .into_iter()
                    .map(|(key, reply)| Answer {
                        key: key.into(),
                        reply,
                    })
                    .collect(),
                state: None,
                checked: true,
            }),
        }
    }

    fn wanted() -> Vec<(String, String)> {
        vec![("GH_TOKEN".into(), "a token to create the release".into())]
    }

    #[test]
    fn the_argument_names_variables_with_what_each_is_for() {
        assert_eq!(parse(None), Ok(Vec::new()));
        assert_eq!(
            parse(Some(&json!({"GH_TOKEN": "a token"}))),
            Ok(vec![("GH_TOKEN".into(), "a token".into())])
        );
        for bad in [
            json!(["GH_TOKEN"]),
            json!({"1TOKEN": "a token"}),
            json!({"GH-TOKEN": "a token"}),
            json!({"GH_TOKEN": 1}),
            json!({"GH_TOKEN": " "}),
        ] {
            let error = parse(Some(&bad)).expect_err("refused");
            assert!(error.starts_with("`secrets`"), "{bad}: {error}");
        }
    }

    #[test]
    fn a_command_asks_gets_or_is_refused_its_secrets() {
        // None wanted: nothing to do.
        assert!(matches!(
            decide("true", &[], &cx(CanAsk::empty(), None), None),
            Secrets::Give(given) if given.is_empty()
        ));
        // Nobody to ask: refused, saying why.
        let Secrets::Refuse(why) = decide("gh release", &wanted(), &cx(CanAsk::FORM, None), None)
        else {
            panic!("not refused");
        };
        assert!(
            why.contains("URL-mode elicitation") && why.contains("`GH_TOKEN`"),
            "{why}"
        );
        // Asked: one question per variable, naming the command.
        let Secrets::Ask(needs) = decide(
            "gh release",
            &wanted(),
            &cx(CanAsk::SECRET, None),
            Some("secrets".into()),
        ) else {
            panic!("not asked");
        };
        assert_eq!(needs.questions.len(), 1);
        assert_eq!(needs.questions[0].key, "secret-GH_TOKEN");
        let Ask::Secret(secret) = &needs.questions[0].ask else {
            panic!("not a secret question");
        };
        assert!(
            secret.message.contains("`gh release`"),
            "{}",
            secret.message
        );
        // Too long to show whole: refused.
        let long = "x".repeat(MAX_COMMAND_SHOWN + 1);
        assert!(matches!(
            decide(&long, &wanted(), &cx(CanAsk::SECRET, None), None),
            Secrets::Refuse(why) if why.contains("shown whole")
        ));
        // Given: the variable names its question's key.
        let given = cx(
            CanAsk::SECRET,
            Some(vec![("secret-GH_TOKEN", Reply::SecretGiven)]),
        );
        let Secrets::Give(variables) = decide("gh release", &wanted(), &given, None) else {
            panic!("not given");
        };
        assert_eq!(
            (variables[0].name.as_str(), variables[0].key.as_str()),
            ("GH_TOKEN", "secret-GH_TOKEN")
        );
        // Declined: refused, saying so.
        let declined = cx(
            CanAsk::SECRET,
            Some(vec![("secret-GH_TOKEN", Reply::Declined)]),
        );
        let Secrets::Refuse(why) = decide("gh release", &wanted(), &declined, None) else {
            panic!("not refused");
        };
        assert!(why.contains("declined"), "{why}");
    }
}
