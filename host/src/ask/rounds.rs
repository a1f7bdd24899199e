//! The rounds of one call: run the tool, ask what it asks, run it again with the replies.
//!
//! 1. A retry that carries replies (a relaying caller's [`Resume`]) has them read: against
//!    the host's signed record when it comes with one ([`seal`](super::seal)), as the
//!    client's unchecked word when it does not.
//! 2. The tool runs; a result ends the call.
//! 3. Questions count as a round; more than [`MAX_ROUNDS`] is a tool error.
//! 4. A required question of a kind the MCP client did not declare ends the call
//!    ([`CallError::MissingCapability`]). Other questions of a kind the caller cannot ask get
//!    [`Reply::NobodyToAsk`]; if none is left, the tool runs again at once with those replies.
//! 5. With an [`Asker`](super::Asker), the host asks within the call, until a deadline the
//!    time for an answer away; what is not answered by then is [`Reply::TimedOut`], and a
//!    call cancelled meanwhile gets [`Reply::Cancelled`]. The tool runs again (step 2); a
//!    cancelled call that asks again ends with a tool error.
//! 6. Without one, the questions and the signed record of the round are the call's output,
//!    for the caller to relay.
//!
//! A secret question gets a page ([`page`](super::page)) before it is asked (step 5 or 6).
//! A reply that the person went to the page is waited for there: the secret goes into the
//! call's [`CallSecrets`](super::CallSecrets) for the next round, and is dropped when that
//! round ends ([`secrets`](super::secrets)).

use std::time::Duration;

use super::page::PageServer;
use super::seal::{Binding, OpenError, Pending, Seals};
use super::secrets::{Owner, Taken};
use super::{Answer, Answers, Ask, MAX_ROUNDS, NeedsInput, PageLink, Question, Reply, Root, Value};
use super::{Asker, BoxFuture};
use crate::guest::{CallError, CallOptions, CallOutput, Outcome, Relay, Resume};

/// How long past the deadline the host waits for an asker that does not keep to it.
const ASKER_GRACE: Duration = Duration::from_secs(1);

/// One round: the tool run with these options and answers.
pub(crate) type Round<'a> = Box<
    dyn Fn(CallOptions, Option<Answers>) -> BoxFuture<'a, Result<Outcome, CallError>>
        + Send
        + Sync
        + 'a,
>;

/// Run a call's rounds as the module's flow says; `ask_timeout` bounds each round's wait.
pub(crate) async fn run(
    round: Round<'_>,
    mut options: CallOptions,
    seals: &Seals,
    pages: &PageServer,
    binding: Binding<'_>,
    ask_timeout: Duration,
) -> Result<CallOutput, CallError> {
    let owner = Owner {
        principal: binding.principal.map(str::to_owned),
        scope: binding.scope.to_owned(),
    };
    let (mut answers, mut rounds) = match options.resume.take() {
        None => (None, 0),
        Some(resume) => {
            let Resumed {
                mut answers,
                pages: pages_asked,
                rounds,
            } = resumed(resume, seals, binding)?;
            let secrets = Secrets {
                pages,
                owner: &owner,
                options: &options,
                asker: None,
            };
            let deadline = tokio::time::Instant::now() + ask_timeout;
            secrets
                .collect(&mut answers.replies, &pages_asked, deadline)
                .await;
            (Some(answers), rounds)
        }
    };
    loop {
        let outcome = round(options.clone(), answers.take()).await;
        // A secret no command of that round took is gone with it.
        options.secrets.clear();
        let needs = match outcome? {
            Outcome::Done(output) => return Ok(output),
            Outcome::NeedsInput(needs) => needs,
        };
        rounds += 1;
        // A call cancelled while its tool asked got its "cancelled" replies once.
        if options.cancel.as_ref().is_some_and(|c| c.is_cancelled()) {
            return Err(CallError::Tool(
                "the call was cancelled while its tool was asking".to_owned(),
            ));
        }
        if rounds > MAX_ROUNDS {
            return Err(CallError::Tool(format!(
                "the tool asked more than {MAX_ROUNDS} rounds of questions in one call"
            )));
        }
        let NeedsInput { questions, state } = needs;
        let (mut askable, unaskable): (Vec<Question>, Vec<Question>) = questions
            .into_iter()
            .partition(|question| options.asking.can.allows(&question.ask));
        // A required question the client did not declare it can be asked ends the call.
        let missing = missing_capabilities(&unaskable, options.asking.missing);
        if !missing.is_empty() {
            return Err(CallError::MissingCapability(missing));
        }
        let mut replies: Vec<Answer> = unaskable
            .iter()
            .map(|q| Answer {
                key: q.key.clone(),
                reply: Reply::NobodyToAsk,
            })
            .collect();
        // Each secret question gets its page; one that cannot is not asked.
        let mut unopened = Vec::new();
        for question in &mut askable {
            if let Ask::Secret(secret) = &mut question.ask {
                match pages
                    .open(&secret.message, owner.clone(), ask_timeout)
                    .await
                {
                    Ok((id, url)) => secret.page = Some(PageLink { id, url }),
                    Err(why) => {
                        tracing::warn!(
                            scope = binding.scope,
                            "a secret question was not asked: {why}"
                        );
                        unopened.push(Answer {
                            key: question.key.clone(),
                            reply: Reply::Unusable(format!(
                                "the host could not open a page for the secret: {why}"
                            )),
                        });
                    }
                }
            }
        }
        askable.retain(|question| !unopened.iter().any(|a| a.key == question.key));
        replies.extend(unopened);
        let pages_asked: Vec<(String, String)> = askable
            .iter()
            .filter_map(|question| match &question.ask {
                Ask::Secret(super::SecretAsk {
                    page: Some(page), ..
                }) => Some((question.key.clone(), page.id.clone())),
                _ => None,
            })
            .collect();
        if askable.is_empty() {
            answers = Some(Answers {
                replies,
                state,
                checked: true,
            });
            continue;
        }
        let Some(asker) = options.asker.clone() else {
            let mut pending = Pending::new(
                rounds,
                state,
                askable
                    .iter()
                    .map(|q| (q.key.clone(), q.ask.kind().to_owned()))
                    .collect(),
                unaskable.iter().map(|q| q.key.clone()).collect(),
            );
            pending.pages = pages_asked;
            let sealed = seals
                .seal(pending, binding, ask_timeout)
                .map_err(|e| CallError::Tool(e.to_string()))?;
            return Ok(CallOutput {
                text: String::new(),
                full_output: Vec::new(),
                content: Vec::new(),
                needs_input: Some(Relay {
                    questions: askable,
                    sealed,
                }),
            });
        };
        let cancelled = async {
            match &options.cancel {
                Some(cancel) => cancel.cancelled().await,
                None => std::future::pending().await,
            }
        };
        // The asker answers what it can by the deadline; a little more time guards against
        // one that does not keep to it.
        let deadline = tokio::time::Instant::now() + ask_timeout;
        let given = tokio::select! {
            given = tokio::time::timeout_at(deadline + ASKER_GRACE, asker.ask(&askable, deadline)) => given.ok(),
            () = cancelled => None,
        };
        let is_cancelled = options.cancel.as_ref().is_some_and(|c| c.is_cancelled());
        let given = given.unwrap_or_default();
        let first = replies.len();
        for question in &askable {
            let reply = given
                .iter()
                .find(|answer| answer.key == question.key)
                .map(|answer| answer.reply.clone())
                .unwrap_or(if is_cancelled {
                    Reply::Cancelled
                } else {
                    Reply::TimedOut
                });
            replies.push(Answer {
                key: question.key.clone(),
                reply,
            });
        }
        let secrets = Secrets {
            pages,
            owner: &owner,
            options: &options,
            asker: Some(asker.as_ref()),
        };
        secrets
            .collect(&mut replies[first..], &pages_asked, deadline)
            .await;
        answers = Some(Answers {
            replies,
            state,
            checked: true,
        });
    }
}

/// Closes the pages of a round's secret questions when dropped.
struct ClosePages<'a> {
    pages: &'a PageServer,
    asked: &'a [(String, String)],
}

impl Drop for ClosePages<'_> {
    fn drop(&mut self) {
        for (_, id) in self.asked {
            self.pages.pages().close(id);
        }
    }
}

/// What collecting a round's secrets needs.
struct Secrets<'a> {
    pages: &'a PageServer,
    owner: &'a Owner,
    options: &'a CallOptions,
    /// The asker that asked, told of each secret received.
    asker: Option<&'a dyn Asker>,
}

impl Secrets<'_> {
    /// For each secret question asked (`asked`: key and page id): a client's "accepted" is
    /// waited for on its page until `deadline` (or the call's cancellation). A secret given
    /// goes into the call's secrets under its key; the page's other ends replace the reply.
    /// A page whose question was not accepted is closed.
    async fn collect(
        &self,
        replies: &mut [Answer],
        asked: &[(String, String)],
        deadline: tokio::time::Instant,
    ) {
        // Every page asked is closed once its secret is taken or not, also when this wait is
        // dropped (the call or its session ended).
        let _close = ClosePages {
            pages: self.pages,
            asked,
        };
        for answer in replies.iter_mut() {
            let Some((_, id)) = asked.iter().find(|(key, _)| *key == answer.key) else {
                continue;
            };
            if !matches!(answer.reply, Reply::SecretGiven(_)) {
                self.pages.pages().close(id);
                continue;
            }
            let cancelled = async {
                match &self.options.cancel {
                    Some(cancel) => cancel.cancelled().await,
                    None => std::future::pending().await,
                }
            };
            let taken = tokio::select! {
                taken = self.pages.pages().take(id, self.owner, deadline) => Some(taken),
                () = cancelled => None,
            };
            answer.reply = match taken {
                Some(Taken::Given(secret)) => {
                    self.options.secrets.put(&answer.key, secret);
                    if let Some(asker) = self.asker {
                        asker.secret_received(id).await;
                    }
                    Reply::SecretGiven(id.clone())
                }
                Some(Taken::Declined) => Reply::Declined,
                Some(Taken::TimedOut) => Reply::TimedOut,
                Some(Taken::Unknown) => Reply::Unusable(
                    "the page for this secret is gone: it expired, or its question belongs to \
                     another caller"
                        .to_owned(),
                ),
                None => {
                    self.pages.pages().close(id);
                    Reply::Cancelled
                }
            };
        }
    }
}

/// The capabilities the required questions of `unaskable` need that the client did not declare
/// (`missing`), each named once, in order of name.
fn missing_capabilities(unaskable: &[Question], missing: super::CanAsk) -> Vec<String> {
    let mut names: Vec<String> = unaskable
        .iter()
        .filter(|question| question.required && missing.allows(&question.ask))
        .map(|question| capability(&question.ask).to_owned())
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// The MCP client capability that `ask` needs.
fn capability(ask: &Ask) -> &'static str {
    match ask {
        Ask::Form(_) | Ask::Secret(_) => "elicitation",
        Ask::Sample(_) => "sampling",
        Ask::Roots => "roots",
    }
}

/// What a retry carries.
struct Resumed {
    /// The replies.
    answers: Answers,
    /// The pages of its secret questions: key and page id.
    pages: Vec<(String, String)>,
    /// The rounds asked before it.
    rounds: u32,
}

/// The answers a retry carries, with what goes with them.
fn resumed(resume: Resume, seals: &Seals, binding: Binding<'_>) -> Result<Resumed, CallError> {
    for (key, value) in &resume.replies {
        if !value.is_object() {
            return Err(CallError::Answers(format!(
                "the reply under `{}` is not an object (an elicitation, sampling or roots result)",
                key.escape_debug()
            )));
        }
    }
    let Some(sealed) = resume.sealed else {
        // The client's word: each reply read by its shape; at most as many as one round may
        // ask, each under a key a tool could have chosen.
        let replies = resume
            .replies
            .iter()
            .filter(|(key, _)| super::check::is_name(key))
            .take(super::check::MAX_QUESTIONS)
            .filter_map(|(key, value)| {
                let kind = if value.get("action").is_some() {
                    "form"
                } else if value.get("roots").is_some() {
                    "roots"
                } else if value.get("role").is_some() || value.get("model").is_some() {
                    "sample"
                } else {
                    return None;
                };
                Some(Answer {
                    key: key.clone(),
                    reply: read(kind, value),
                })
            })
            .collect();
        let answers = Answers {
            replies,
            state: None,
            checked: false,
        };
        return Ok(Resumed {
            answers,
            pages: Vec::new(),
            rounds: 0,
        });
    };
    let pending = seals.open(&sealed, binding).map_err(|error| match error {
        // The host's condition, not the client's request.
        OpenError::Busy => CallError::Tool(error.to_string()),
        other => CallError::Answers(other.to_string()),
    })?;
    let mut replies: Vec<Answer> = pending
        .asked
        .iter()
        .filter_map(|(key, kind)| {
            let value = resume.replies.iter().find(|(k, _)| k == key)?;
            Some(Answer {
                key: key.clone(),
                reply: read(kind, &value.1),
            })
        })
        .collect();
    replies.extend(pending.unasked.iter().map(|key| Answer {
        key: key.clone(),
        reply: Reply::NobodyToAsk,
    }));
    let answers = Answers {
        replies,
        state: pending.state,
        checked: true,
    };
    Ok(Resumed {
        answers,
        pages: pending.pages,
        rounds: pending.round,
    })
}

/// A client's reply to a question of `kind` (`form`, `sample`, `roots`, `secret`), as MCP
/// shapes it. A secret question's "accept" (the person is going to the page) reads as
/// [`Reply::SecretGiven`] with no page id yet: the caller sets it and waits on the page.
pub(crate) fn read(kind: &str, value: &serde_json::Value) -> Reply {
    let unusable = |why: &str| Reply::Unusable(why.to_owned());
    match kind {
        "secret" => match value.get("action").and_then(|a| a.as_str()) {
            Some("accept") => Reply::SecretGiven(String::new()),
            Some("decline") => Reply::Declined,
            Some("cancel") => Reply::Cancelled,
            _ => unusable("a secret's reply has no action of accept, decline or cancel"),
        },
        "form" => match value.get("action").and_then(|a| a.as_str()) {
            Some("accept") => {
                let Some(content) = value
                    .get("content")
                    .map_or(Some(serde_json::Map::new()), |content| {
                        content.as_object().cloned()
                    })
                else {
                    return unusable("an accepted form's content is not an object");
                };
                let mut fields = Vec::new();
                for (name, given) in content {
                    let value = match given {
                        serde_json::Value::String(text) => Value::Text(text),
                        serde_json::Value::Bool(yes) => Value::YesNo(yes),
                        serde_json::Value::Number(n) => match n.as_f64() {
                            Some(n) => Value::Number(n),
                            None => return unusable("a number out of range"),
                        },
                        _ => {
                            return Reply::Unusable(format!(
                                "the field `{}` is not text, yes or no, or a number",
                                name.escape_debug()
                            ));
                        }
                    };
                    fields.push((name, value));
                }
                Reply::Accepted(fields)
            }
            Some("decline") => Reply::Declined,
            Some("cancel") => Reply::Cancelled,
            _ => unusable("a form's reply has no action of accept, decline or cancel"),
        },
        "sample" => {
            let content = value.get("content");
            let text = content
                .into_iter()
                .flat_map(|c| match c {
                    serde_json::Value::Array(items) => items.clone(),
                    other => vec![other.clone()],
                })
                .filter(|item| item.get("type").and_then(|t| t.as_str()) == Some("text"))
                .filter_map(|item| item.get("text").and_then(|t| t.as_str()).map(str::to_owned))
                .collect::<Vec<_>>();
            if content.is_none() {
                unusable("a sampling reply without content")
            } else {
                Reply::Sampled(text.join("\n"))
            }
        }
        "roots" => match value.get("roots").and_then(|r| r.as_array()) {
            Some(roots) => Reply::Roots(
                roots
                    .iter()
                    .filter_map(|root| {
                        Some(Root {
                            uri: root.get("uri")?.as_str()?.to_owned(),
                            name: root.get("name").and_then(|n| n.as_str()).map(str::to_owned),
                        })
                    })
                    .collect(),
            ),
            None => unusable("a roots reply without a list of roots"),
        },
        _ => unusable("a reply to a question of an unknown kind"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ask::{Ask, CanAsk, Form};
    use serde_json::json;

    /// A question under `key`.
    fn question(key: &str, ask: Ask, required: bool) -> Question {
        Question {
            key: key.to_owned(),
            ask,
            required,
        }
    }

    /// A form without fields.
    fn form() -> Ask {
        Ask::Form(Form {
            message: "run it?".to_owned(),
            fields: Vec::new(),
        })
    }

    /// Each missing capability is named once, however its questions are ordered; a question
    /// not required, or of a kind the client declared, names none.
    #[test]
    fn each_missing_capability_is_named_once() {
        let unaskable = [
            question("a", form(), true),
            question("b", Ask::Roots, true),
            question("c", form(), true),
            question("d", Ask::Roots, false),
        ];
        let missing = CanAsk {
            form: true,
            sample: true,
            roots: true,
            secret: false,
        };
        assert_eq!(
            missing_capabilities(&unaskable, missing),
            ["elicitation", "roots"]
        );
        let roots_declared = CanAsk {
            roots: false,
            ..missing
        };
        assert_eq!(
            missing_capabilities(&unaskable, roots_declared),
            ["elicitation"]
        );
    }

    #[test]
    fn replies_are_read_by_the_kind_asked() {
        let accepted = read(
            "form",
            &json!({"action": "accept", "content": {"run": true, "why": "ok", "n": 2}}),
        );
        assert_eq!(
            accepted,
            Reply::Accepted(vec![
                ("n".into(), Value::Number(2.0)),
                ("run".into(), Value::YesNo(true)),
                ("why".into(), Value::Text("ok".into())),
            ])
        );
        assert_eq!(read("form", &json!({"action": "decline"})), Reply::Declined);
        assert_eq!(read("form", &json!({"action": "cancel"})), Reply::Cancelled);
        assert!(matches!(
            read("form", &json!({"content": {}})),
            Reply::Unusable(_)
        ));
        assert!(matches!(
            read("form", &json!({"action": "accept", "content": {"x": [1]}})),
            Reply::Unusable(_)
        ));
        assert_eq!(
            read(
                "sample",
                &json!({"role": "assistant", "content": {"type": "text", "text": "Paris"}, "model": "m"})
            ),
            Reply::Sampled("Paris".into())
        );
        assert_eq!(
            read(
                "roots",
                &json!({"roots": [{"uri": "file:///r", "name": "R"}]})
            ),
            Reply::Roots(vec![Root {
                uri: "file:///r".into(),
                name: Some("R".into())
            }])
        );
        // A form's reply to a roots question does not fit it.
        assert!(matches!(
            read("roots", &json!({"action": "accept"})),
            Reply::Unusable(_)
        ));
    }
}
