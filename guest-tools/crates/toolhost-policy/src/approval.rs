//! Asking the person before a command a deny rule matches, instead of refusing it outright
//! (WIT 0.5.0 `needs-input`), and after a run the network gate refused hosts the person may
//! allow.
//!
//! For each deny rule the command matches, in order ([`decide`]):
//!
//! 1. A checked reply to this rule's question (the state names the rule it asked about)
//!    decides: accepted with `run` set runs the command (and keeps its prefix "from now on"
//!    when `remember` is set); any other reply refuses it, saying how the person answered.
//!    Replies the host did not check (a client's word) are no approval.
//! 2. A rule the person allowed in an earlier round of this call (carried in the state) is
//!    passed.
//! 3. Where nobody can be asked a form, the command is refused, saying why nobody could be.
//! 4. A command whose prefix the person allowed "from now on" in this scope passes
//!    (`approvals.remembered`).
//! 5. Else the person is asked: run it, and optionally allow its prefix for the rest of the
//!    scope.

use crate::Policy;
use crate::deny::{Command, DenyRule};
use crate::exports::toolhost::plugin::tool::{
    Ask, CallContext, CanAsk, Field, FieldKind, FieldValue, Form, NeedsInput, Question, Reply,
    Value,
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

/// A state line saying which deny rule a question is about.
const ASKED: &str = "asked:";

/// What to do with a command a deny rule matched.
pub(crate) enum Decision {
    /// Run it (as far as this rule goes): the person allowed it.
    Run,
    /// Ask the person first.
    Ask(NeedsInput),
    /// Refuse it, with this message for the model.
    Refuse(String),
}

/// Whether an accepted form set the yes-no field `name` to yes.
fn yes(values: &[FieldValue], name: &str) -> bool {
    values
        .iter()
        .any(|v| v.name == name && matches!(v.value, Value::YesNo(true)))
}

/// How the person answered, in words for a refusal, when they did not accept.
fn how(reply: &Reply) -> &'static str {
    match reply {
        Reply::Declined => "declined",
        Reply::Cancelled => "dismissed the question",
        Reply::TimedOut => "did not answer in time",
        Reply::NobodyToAsk => "could not be reached",
        _ => "gave a reply that does not fit the question",
    }
}

/// The state of this round's replies, when the host checked them.
fn checked_state(cx: &CallContext) -> Option<&str> {
    cx.answers
        .as_ref()
        .filter(|answers| answers.checked)
        .and_then(|answers| answers.state.as_deref())
}

/// The deny rules the person allowed in earlier rounds of this call (carried in the state).
pub(crate) fn carried(cx: &CallContext) -> Vec<String> {
    checked_state(cx)
        .map(|state| {
            state
                .lines()
                .filter_map(|line| line.strip_prefix(APPROVED))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Decide about `command` for `rule`, as the module's flow says; `approved` holds the rules
/// allowed so far in this call (carried, and passed in this round).
pub(crate) fn decide(
    policy: &Policy,
    rule: &DenyRule,
    command: &str,
    cx: &CallContext,
    approved: &[String],
) -> Decision {
    let refusal = fill(
        policy.texts.refusal,
        &[
            ("policy", policy.name),
            ("rule", rule.name),
            ("reason", rule.reason),
        ],
    );
    let answered = |how: &str| {
        Decision::Refuse(refusal.clone() + &fill(policy.texts.answered, &[("answer", how)]))
    };
    // 1. A checked reply to this rule's own question.
    let asked_here = format!("{ASKED}{}", rule.name);
    let asked = checked_state(cx).is_some_and(|state| state.lines().any(|line| line == asked_here));
    let reply = cx
        .answers
        .as_ref()
        .filter(|_| asked)
        .and_then(|answers| answers.replies.iter().find(|a| a.key == KEY))
        .map(|answer| &answer.reply);
    let prefix = prefix(rule, command);
    let remembered_key = format!("prefix:{prefix}");
    match reply {
        Some(Reply::Accepted(values)) => {
            if !yes(values, "run") {
                return answered("chose not to run it");
            }
            if yes(values, "remember") {
                approvals::remember(&remembered_key);
            }
            return Decision::Run;
        }
        Some(other) => return answered(how(other)),
        None => {}
    }
    // 2. Allowed in an earlier round of this call.
    if approved.iter().any(|name| name == rule.name) {
        return Decision::Run;
    }
    // 3. Nobody to ask.
    if (cx.asking.can & CanAsk::FORM) == CanAsk::empty() {
        let why = cx
            .asking
            .unavailable
            .as_deref()
            .unwrap_or("the client cannot show a form");
        return Decision::Refuse(refusal + &fill(policy.texts.nobody_to_ask, &[("why", why)]));
    }
    // 4. Allowed from now on.
    if approvals::remembered(&remembered_key) {
        return Decision::Run;
    }
    // 5. Ask.
    Decision::Ask(question(policy, rule, command, &prefix, approved))
}

/// The question before `command`, with the rules allowed so far carried in its state.
fn question(
    policy: &Policy,
    rule: &DenyRule,
    command: &str,
    prefix: &str,
    approved: &[String],
) -> NeedsInput {
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
            required: false,
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
        state: Some(state_lines(&format!("{ASKED}{}", rule.name), approved)),
    }
}

/// A state: `first`, then an `approved:RULE` line per rule in `approved`.
pub(crate) fn state_lines(first: &str, approved: &[String]) -> String {
    std::iter::once(first.to_owned())
        .chain(approved.iter().map(|name| format!("{APPROVED}{name}")))
        .collect::<Vec<_>>()
        .join("\n")
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
    let (Some(state), Some(answers)) = (checked_state(cx), cx.answers.as_ref()) else {
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
        Reply::Accepted(values) if yes(values, "allow") => {
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
        other => how(other),
    };
    Rerun::Refused(format!(
        "The command ran once, as process {id}, and was refused {named}. The person was asked \
         to allow them for this session and {how}: do not try to reach them another way. \
         process_output (process_id \"{id}\") reads that run's output."
    ))
}

/// The question after a foreground run of `command` (process `id`) that the network gate
/// refused hosts the person may allow, where a form can be asked. `approved`: the deny rules
/// the person allowed the command past in this call, carried to the next round.
pub(crate) fn network_question(
    command: &str,
    id: &str,
    refusals: &[Refused],
    cx: &CallContext,
    approved: &[String],
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
    let state = state_lines(
        &format!("{NETWORK_STATE}\n{id}\n{}", hosts.join("\n")),
        approved,
    );
    Some(NeedsInput {
        questions: vec![Question {
            key: NETWORK_KEY.to_string(),
            required: false,
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
