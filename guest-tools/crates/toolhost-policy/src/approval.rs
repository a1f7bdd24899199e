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
use crate::toolhost::plugin::process::{Refusal, Refused};

/// The key of the question.
const KEY: &str = "approve";

/// The key of the question about hosts the network gate refused.
const NETWORK_KEY: &str = "network";
/// The first line of a network question's state; the first run's process id, then each host,
/// then any `approved:RULE` line, follow a line each.
const NETWORK_STATE: &str = "network";
/// A state line saying the person allowed a command deny rule `RULE` matched, in this call.
const APPROVED: &str = "approved:";

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
    // Allowed in an earlier round of this call (a network question followed).
    let carried = format!("{APPROVED}{}", rule.name);
    let checked_state = cx
        .answers
        .as_ref()
        .filter(|answers| answers.checked)
        .and_then(|answers| answers.state.as_deref());
    if checked_state.is_some_and(|state| state.lines().any(|line| line == carried)) {
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

/// What the replies of this call say about the hosts a first run of the command was refused.
pub(crate) enum Rerun {
    /// No network question was answered in this call.
    No,
    /// The person allowed the hosts, and the host let the session reach them: run the command
    /// again, with this note.
    Allowed(String),
    /// Not allowed: the tool error.
    Refused(String),
}

/// Read this call's reply to a network question (the module's flow, for refused hosts):
///
/// 1. Only checked replies count, with the question's state (the first run's process and
///    its hosts).
/// 2. Accepted with `allow`: each host is allowed for the scope (`process.allow-host`, which
///    the host bounds), and the command runs again.
/// 3. Anything else: the tool error names the first run, whose output `process_output` reads.
pub(crate) fn network_answer(cx: &CallContext) -> Rerun {
    let Some(answers) = cx.answers.as_ref().filter(|answers| answers.checked) else {
        return Rerun::No;
    };
    let Some(state) = answers.state.as_deref() else {
        return Rerun::No;
    };
    let mut lines = state.lines();
    if lines.next() != Some(NETWORK_STATE) {
        return Rerun::No;
    }
    let Some(id) = lines.next() else {
        return Rerun::No;
    };
    let hosts: Vec<&str> = lines.filter(|line| !line.starts_with(APPROVED)).collect();
    let Some(reply) = answers
        .replies
        .iter()
        .find(|answer| answer.key == NETWORK_KEY)
        .map(|answer| &answer.reply)
    else {
        return Rerun::No;
    };
    let named = hosts.join(", ");
    let first = format!(
        "its first run, process {id}, was refused {named}; process_output (process_id \"{id}\") \
         reads its output"
    );
    let how = match reply {
        Reply::Accepted(values)
            if values
                .iter()
                .any(|v| v.name == "allow" && matches!(v.value, Value::YesNo(true))) =>
        {
            let mut allowed = Vec::new();
            let mut failed = Vec::new();
            for host in &hosts {
                match crate::toolhost::plugin::process::allow_host(host) {
                    Ok(_) => allowed.push(*host),
                    Err(error) => {
                        failed.push(format!("{host} ({})", crate::render::process_error(error)))
                    }
                }
            }
            if allowed.is_empty() {
                return Rerun::Refused(format!(
                    "The person allowed {named}, but the host did not let this session reach \
                     them: {}. The command was not run again; {first}.",
                    failed.join("; ")
                ));
            }
            let mut note = format!(
                "The person allowed {} for the rest of this session, and the command ran again \
                 ({first}).",
                allowed.join(", ")
            );
            if !failed.is_empty() {
                note.push_str(&format!(" Not allowed: {}.", failed.join("; ")));
            }
            return Rerun::Allowed(note);
        }
        Reply::Accepted(_) => "chose not to allow them",
        Reply::Declined => "declined",
        Reply::Cancelled => "dismissed the question",
        Reply::TimedOut => "did not answer in time",
        Reply::NobodyToAsk => "could not be reached",
        _ => "gave a reply that does not fit the question",
    };
    Rerun::Refused(format!(
        "The command ran once, as process {id}, and was refused {named}. The person was asked \
         to allow them for this session and {how}: do not try to reach them another way. \
         process_output (process_id \"{id}\") reads that run's output."
    ))
}

/// The question after a foreground run of `command` (process `id`) that the network gate
/// refused hosts the person may allow, where a form can be asked. `approved_rule`: a deny rule
/// the person allowed the command past in this call, carried to the next round.
pub(crate) fn network_question(
    command: &str,
    id: &str,
    refusals: &[Refused],
    cx: &CallContext,
    approved_rule: Option<&str>,
) -> Option<NeedsInput> {
    if (cx.asking.can & CanAsk::FORM) == CanAsk::empty() {
        return None;
    }
    let mut hosts: Vec<String> = Vec::new();
    for refused in refusals {
        if let Refusal::Network(network) = &refused.reason {
            for host in &network.refused {
                if host.askable && !hosts.contains(&host.host) && hosts.len() < 8 {
                    hosts.push(host.host.clone());
                }
            }
        }
    }
    if hosts.is_empty() {
        return None;
    }
    let mut state = format!("{NETWORK_STATE}\n{id}\n{}", hosts.join("\n"));
    if let Some(rule) = approved_rule {
        state.push_str(&format!("\n{APPROVED}{rule}"));
    }
    Some(NeedsInput {
        questions: vec![Question {
            key: NETWORK_KEY.to_string(),
            ask: Ask::Form(Form {
                message: format!(
                    "This command tried to reach {}, which this session's network does not \
                     allow:\n\n{command}\n\nAllow them for the rest of this session, and run \
                     the command again?",
                    hosts.join(", ")
                ),
                fields: vec![Field {
                    name: "allow".to_string(),
                    title: Some(format!("Allow {} and run it again", hosts.join(", "))),
                    description: None,
                    required: true,
                    kind: FieldKind::YesNo,
                }],
            }),
        }],
        state: Some(state),
    })
}
