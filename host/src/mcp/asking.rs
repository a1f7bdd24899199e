//! Asking the person over MCP: what a client can be asked, and the two ways to ask.
//!
//! - In 2025-era sessions (revisions up to 2025-11-25) the server may send requests during a
//!   call: [`PeerAsker`] sends `elicitation/create` (form mode), `sampling/createMessage` or
//!   `roots/list`, one question at a time, and the host calls the tool again with the
//!   replies.
//! - In revision 2026-07-28 it may not: the call's result is an `InputRequiredResult`
//!   ([`input_required`]) whose `inputRequests` are the questions and whose `requestState` is
//!   the host's signed record of them; the client retries the call with `inputResponses` and
//!   that state ([`resume`]).
//!
//! A question of a kind the client did not declare is never sent ([`asking`]).
//!
//! A secret question is an elicitation in URL mode: the client is sent the link of the host's
//! page ([`crate::ask::page`]), which the person opens to type the secret. It is asked only of
//! a client that declared `elicitation.url` and runs on this machine (the page listens on
//! loopback).

// Sampling and roots are deprecated from revision 2026-07-28 on (SEP-2577), where they are
// still allowed as input requests; 2025-era clients offer them as before.
#![allow(deprecated)]

use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequestParams, CreateMessageRequestParams, CustomNotification, ElicitRequestParams,
    InputRequest, InputRequests, InputRequiredResult, ServerNotification,
};
use rmcp::service::{Peer, RequestContext, RoleServer};
use serde_json::{Value, json};

use super::scope::PeerAddress;
use crate::ask::rounds::read;
use crate::ask::{Answer, Ask, Asker, Asking, BoxFuture, CanAsk, FieldKind, Form, Question, Reply};
use crate::{Relay, Resume};

/// Why a form cannot be asked of a client that did not declare elicitation.
const NO_ELICITATION: &str =
    "the MCP client declared no elicitation capability (it cannot show the person a form)";

/// Why a secret cannot be asked of a client that did not declare URL-mode elicitation.
const NO_URL_ELICITATION: &str = "the MCP client declared no URL-mode elicitation (it cannot \
     send the person to the host's page for secrets)";

/// Why a secret cannot be asked of a client on another machine.
const NOT_LOCAL: &str = "the MCP client is not on this machine, and the host's page for \
     secrets listens on this machine's loopback only";

/// What the client of `context`'s request declared it can be asked: its session's
/// capabilities, or in revision 2026-07-28 the request's own.
pub(super) fn asking(context: &RequestContext<RoleServer>) -> Asking {
    let Some(capabilities) = context.client_capabilities() else {
        return Asking {
            missing: CanAsk::default().complement(),
            secret_unavailable: Some(NO_URL_ELICITATION.to_owned()),
            ..Asking::nobody(NO_ELICITATION)
        };
    };
    let url = capabilities
        .elicitation
        .as_ref()
        .is_some_and(|e| e.url.is_some());
    let local = PeerAddress::is_local(context);
    // An empty `elicitation: {}` (revision 2025-06-18) means form mode.
    let form = capabilities
        .elicitation
        .as_ref()
        .is_some_and(|e| e.form.is_some() || e.url.is_none());
    #[allow(deprecated)]
    let can = CanAsk {
        form,
        sample: capabilities.sampling.is_some(),
        roots: capabilities.roots.is_some(),
        secret: url && local,
    };
    let declared = CanAsk { secret: url, ..can };
    let why_no_secret = if url { NOT_LOCAL } else { NO_URL_ELICITATION };
    Asking {
        missing: declared.complement(),
        ..Asking::of(can, NO_ELICITATION, why_no_secret)
    }
}

/// `ask` as an MCP request: its method and params.
pub(super) fn request(ask: &Ask) -> (&'static str, Value) {
    match ask {
        Ask::Form(form) => ("elicitation/create", form_params(form)),
        Ask::Sample(sample) => {
            let mut params = json!({
                "messages": [{"role": "user", "content": {"type": "text", "text": sample.prompt}}],
                "maxTokens": sample.max_tokens,
            });
            if let Some(system) = &sample.system {
                params["systemPrompt"] = json!(system);
            }
            ("sampling/createMessage", params)
        }
        Ask::Roots => ("roots/list", json!({})),
        Ask::Secret(secret) => {
            let (url, id) = secret
                .page
                .as_ref()
                .map_or(("", ""), |page| (page.url.as_str(), page.id.as_str()));
            (
                "elicitation/create",
                json!({
                    "mode": "url",
                    "message": secret.message,
                    "url": url,
                    "elicitationId": id,
                }),
            )
        }
    }
}

/// A form as `elicitation/create` params: a flat object schema of the fields.
fn form_params(form: &Form) -> Value {
    let mut properties = serde_json::Map::new();
    let mut required = Vec::new();
    for field in &form.fields {
        let mut schema = match &field.kind {
            FieldKind::Text => json!({"type": "string"}),
            FieldKind::YesNo => json!({"type": "boolean"}),
            FieldKind::Number => json!({"type": "number"}),
            FieldKind::Choice(values) => json!({"type": "string", "enum": values}),
        };
        if let Some(title) = &field.title {
            schema["title"] = json!(title);
        }
        if let Some(description) = &field.description {
            schema["description"] = json!(description);
        }
        properties.insert(field.name.clone(), schema);
        if field.required {
            required.push(field.name.clone());
        }
    }
    json!({
        "mode": "form",
        "message": form.message,
        "requestedSchema": {"type": "object", "properties": properties, "required": required},
    })
}

/// `ask` as an MCP input request (an entry of `inputRequests`).
pub(super) fn input_request(ask: &Ask) -> Result<InputRequest, serde_json::Error> {
    let (method, params) = request(ask);
    serde_json::from_value(json!({"method": method, "params": params}))
}

/// The questions a 2026-07-28 client relays, as its call's result; an error naming a question
/// that cannot be put as an MCP request (the host's own failure: it is never dropped, since
/// the signed record lists it as asked).
pub(super) fn input_required(relay: Relay) -> Result<InputRequiredResult, ErrorData> {
    let mut requests = InputRequests::new();
    for question in relay.questions {
        let request = input_request(&question.ask).map_err(|error| {
            ErrorData::internal_error(
                format!("the question `{}` is no MCP request: {error}", question.key),
                None,
            )
        })?;
        requests.insert(question.key, request);
    }
    Ok(InputRequiredResult::new(Some(requests), Some(relay.sealed)))
}

/// The replies a retried call carries, if any.
pub(super) fn resume(request: &CallToolRequestParams) -> Option<Resume> {
    if request.input_responses.is_none() && request.request_state.is_none() {
        return None;
    }
    Some(Resume {
        replies: request
            .input_responses
            .iter()
            .flatten()
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect(),
        sealed: request.request_state.clone(),
    })
}

/// Asks within a call, through the session's client (2025-era sessions).
pub(super) struct PeerAsker {
    /// The session's client.
    pub(super) peer: Peer<RoleServer>,
}

impl PeerAsker {
    /// One question's reply, as the client gave it.
    #[allow(deprecated)]
    async fn ask_one(&self, ask: &Ask) -> Reply {
        let (_, params) = request(ask);
        let failed = |error: &dyn std::fmt::Display| {
            Reply::Unusable(format!("the client answered with an error: {error}"))
        };
        let given = match ask {
            // For a secret, the client says whether the person goes to the page; the round
            // waits there.
            Ask::Form(_) | Ask::Secret(_) => {
                match serde_json::from_value::<ElicitRequestParams>(params) {
                    Ok(params) => self
                        .peer
                        .create_elicitation(params)
                        .await
                        .map_err(|e| failed(&e))
                        .and_then(|r| serde_json::to_value(r).map_err(|e| failed(&e))),
                    Err(e) => Err(failed(&e)),
                }
            }
            Ask::Sample(_) => match serde_json::from_value::<CreateMessageRequestParams>(params) {
                Ok(params) => self
                    .peer
                    .create_message(params)
                    .await
                    .map_err(|e| failed(&e))
                    .and_then(|r| serde_json::to_value(r).map_err(|e| failed(&e))),
                Err(e) => Err(failed(&e)),
            },
            Ask::Roots => self
                .peer
                .list_roots()
                .await
                .map_err(|e| failed(&e))
                .and_then(|r| serde_json::to_value(r).map_err(|e| failed(&e))),
        };
        match given {
            Ok(value) => read(ask.kind(), &value),
            Err(reply) => reply,
        }
    }
}

impl Asker for PeerAsker {
    /// One question at a time; those not answered by `deadline` are left out (timed out).
    fn ask<'a>(
        &'a self,
        questions: &'a [Question],
        deadline: tokio::time::Instant,
    ) -> BoxFuture<'a, Vec<Answer>> {
        Box::pin(async move {
            let mut answers = Vec::with_capacity(questions.len());
            for question in questions {
                let Ok(reply) =
                    tokio::time::timeout_at(deadline, self.ask_one(&question.ask)).await
                else {
                    break;
                };
                answers.push(Answer {
                    key: question.key.clone(),
                    reply,
                });
            }
            answers
        })
    }

    /// Tell the client the person is done on the page (`notifications/elicitation/complete`).
    fn secret_received<'a>(&'a self, page_id: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let notification = ServerNotification::CustomNotification(CustomNotification::new(
                "notifications/elicitation/complete",
                Some(json!({ "elicitationId": page_id })),
            ));
            if let Err(error) = self.peer.send_notification(notification).await {
                tracing::debug!(%error, "the client was not told a secret was received");
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ask::{Field, Sample};

    #[test]
    fn questions_become_requests_that_parse_as_mcp_input_requests() {
        let form = Ask::Form(Form {
            message: "Run `git push --force`?".into(),
            fields: vec![
                Field {
                    name: "run".into(),
                    title: Some("Run it".into()),
                    description: None,
                    required: true,
                    kind: FieldKind::YesNo,
                },
                Field {
                    name: "how".into(),
                    title: None,
                    description: Some("For how long".into()),
                    required: false,
                    kind: FieldKind::Choice(vec!["once".into(), "session".into()]),
                },
            ],
        });
        let sample = Ask::Sample(Sample {
            prompt: "Capital of France?".into(),
            system: None,
            max_tokens: 100,
        });
        let relay = Relay {
            questions: [
                ("approve", form),
                ("capital", sample),
                ("roots", Ask::Roots),
            ]
            .into_iter()
            .map(|(key, ask)| Question {
                key: key.into(),
                ask,
                required: false,
            })
            .collect(),
            sealed: "sealed".into(),
        };
        let result = serde_json::to_value(input_required(relay).expect("put")).expect("json");
        assert_eq!(result["resultType"], "input_required");
        assert_eq!(result["requestState"], "sealed");
        let requests = &result["inputRequests"];
        assert_eq!(requests["approve"]["method"], "elicitation/create");
        let schema = &requests["approve"]["params"]["requestedSchema"];
        assert_eq!(schema["properties"]["run"]["type"], "boolean");
        assert_eq!(
            schema["properties"]["how"]["enum"],
            json!(["once", "session"])
        );
        assert_eq!(schema["required"], json!(["run"]));
        assert_eq!(requests["capital"]["method"], "sampling/createMessage");
        assert_eq!(requests["capital"]["params"]["maxTokens"], 100);
        assert_eq!(requests["roots"]["method"], "roots/list");
    }
}
