//! Asking the person before a command a deny rule matches, instead of refusing it outright
//! (WIT 0.5.0 `needs-input`).
//!
//! 1. Where nobody can be asked a form, the command is refused, saying why nobody could be.
//! 2. A command whose prefix the person allowed "from now on" in this scope runs
//!    (`approvals.remembered`).
//! 3. Else the first round asks: run it, and optionally allow its prefix for the rest of the
//!    scope.
//! 4. The next round reads the reply: accepted with `run` set runs the command (and keeps the
//!    prefix when `remember` is set); any other reply refuses it, saying how the person
//!    answered. Replies the host did not check (a client's word) are not an approval: the
//!    person is asked again.

use crate::Policy;
use crate::deny::{Command, DenyRule};
use crate::exports::toolhost::plugin::tool::{
    Ask, CallContext, CanAsk, Field, FieldKind, Form, NeedsInput, Question, Reply, Value,
};
use crate::texts::fill;
use crate::toolhost::plugin::approvals;

/// The key of the question.
const KEY: &str = "approve";

/// What to do with a command a deny rule matched.
pub(crate) enum Decision {
    /// Run it: the person allowed it.
    Run,
    /// Ask the person first.
    Ask(NeedsInput),
    /// Refuse it, with this message for the model.
    Refuse(String),
}

/// Decide about `command`, which `rule` matched, as the module's flow says.
pub(crate) fn decide(
    policy: &Policy,
    rule: &DenyRule,
    command: &str,
    cx: &CallContext,
) -> Decision {
    let refusal = fill(
        policy.texts.refusal,
        &[
            ("policy", policy.name),
            ("rule", rule.name),
            ("reason", rule.reason),
        ],
    );
    if (cx.asking.can & CanAsk::FORM) == CanAsk::empty() {
        let why = cx
            .asking
            .unavailable
            .as_deref()
            .unwrap_or("the client cannot show a form");
        return Decision::Refuse(refusal + &fill(policy.texts.nobody_to_ask, &[("why", why)]));
    }
    let prefix = prefix(rule, command);
    let remembered_key = format!("prefix:{prefix}");
    if approvals::remembered(&remembered_key) {
        return Decision::Run;
    }
    let reply = cx
        .answers
        .as_ref()
        .filter(|answers| answers.checked)
        .and_then(|answers| answers.replies.iter().find(|a| a.key == KEY))
        .map(|answer| &answer.reply);
    let answered = |how: &str| {
        Decision::Refuse(refusal.clone() + &fill(policy.texts.answered, &[("answer", how)]))
    };
    match reply {
        None => Decision::Ask(question(policy, rule, command, &prefix)),
        Some(Reply::Accepted(values)) => {
            let yes = |name: &str| {
                values
                    .iter()
                    .any(|v| v.name == name && matches!(v.value, Value::YesNo(true)))
            };
            if !yes("run") {
                return answered("chose not to run it");
            }
            if yes("remember") {
                approvals::remember(&remembered_key);
            }
            Decision::Run
        }
        Some(Reply::Declined) => answered("declined"),
        Some(Reply::Cancelled) => answered("dismissed the question"),
        Some(Reply::TimedOut) => answered("did not answer in time"),
        Some(Reply::NobodyToAsk) => answered("could not be reached"),
        Some(_) => answered("gave a reply that does not fit the question"),
    }
}

/// The question before `command`.
fn question(policy: &Policy, rule: &DenyRule, command: &str, prefix: &str) -> NeedsInput {
    let message = fill(
        policy.texts.ask,
        &[
            ("policy", policy.name),
            ("rule", rule.name),
            ("reason", rule.reason),
            ("command", command),
        ],
    );
    NeedsInput {
        questions: vec![Question {
            key: KEY.to_string(),
            ask: Ask::Form(Form {
                message,
                fields: vec![
                    Field {
                        name: "run".to_string(),
                        title: Some("Run this command".to_string()),
                        description: None,
                        required: true,
                        kind: FieldKind::YesNo,
                    },
                    Field {
                        name: "remember".to_string(),
                        title: Some(format!(
                            "Also run commands starting with `{prefix}` without asking, for the \
                             rest of this session"
                        )),
                        description: None,
                        required: false,
                        kind: FieldKind::YesNo,
                    },
                ],
            }),
        }],
        state: None,
    }
}

/// The words that start the part of `command` that `rule` matches: the program and its
/// first argument (`git push`) of the first simple command the rule matches alone, else the
/// rule's name.
fn prefix(rule: &DenyRule, command: &str) -> String {
    let parsed = Command::parse(command);
    parsed
        .simple
        .iter()
        .find(|words| (rule.matches)(&Command::parse(&words.join(" "))))
        .map(|words| {
            let program = words[0].rsplit('/').next().unwrap_or(&words[0]);
            // Options are skipped, and the value of `-C DIR` or `-c NAME=VALUE` with them.
            let mut rest = words.iter().skip(1);
            let mut first_argument = None;
            while let Some(word) = rest.next() {
                if word == "-c" || word == "-C" {
                    rest.next();
                } else if !word.starts_with('-') {
                    first_argument = Some(word);
                    break;
                }
            }
            match first_argument {
                Some(argument) => format!("{program} {argument}"),
                None => program.to_string(),
            }
        })
        .unwrap_or_else(|| rule.name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deny::{FORCE_PUSH, RECURSIVE_DELETE_ROOT};

    #[test]
    fn the_prefix_is_the_program_and_its_first_argument() {
        assert_eq!(
            prefix(&FORCE_PUSH, "cd repo && git push --force origin main"),
            "git push"
        );
        assert_eq!(prefix(&FORCE_PUSH, "git -C sub push -f"), "git push");
        assert_eq!(prefix(&RECURSIVE_DELETE_ROOT, "sudo rm -rf /"), "rm /");
    }
}
