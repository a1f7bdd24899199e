//! Asking the person about a host while a command waits on it (`--network ask`): the network
//! gate's [`HostQuestion`] put to the person through the [`Asker`] of a call in progress.
//!
//! A call that can ask a form holds one for its scope while it runs
//! ([`crate::process::ProcessBackend::hold_host_question`]). A command's connection to a host
//! the person may allow then waits for their answer, instead of being refused and asked about
//! after the command.

use std::sync::Arc;
use std::time::Duration;

use super::{Ask, Asker, Field, FieldKind, Form, Question, Reply, Value};
use crate::sandbox::network::{BoxFuture, HostQuestion};

/// How long past its deadline an asker that does not keep to it is waited for.
const GRACE: Duration = Duration::from_secs(1);

/// The key of the question.
const KEY: &str = "network";

/// A [`HostQuestion`] asked through a call's [`Asker`].
pub(crate) struct AskerQuestion {
    /// The call's asker.
    pub(crate) asker: Arc<dyn Asker>,
    /// How long the person has to answer (`--ask-timeout`).
    pub(crate) timeout: Duration,
}

impl HostQuestion for AskerQuestion {
    fn allow<'a>(&'a self, host: &'a str) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            let question = Question {
                key: KEY.to_owned(),
                ask: Ask::Form(Form {
                    message: format!(
                        "A command of this session is waiting to connect to {host}, which the \
                         network allow-list does not name. Let this session's commands reach \
                         it from now on?"
                    ),
                    fields: vec![Field {
                        name: "allow".to_owned(),
                        title: Some(format!("Allow {host} for this session")),
                        description: None,
                        required: true,
                        kind: FieldKind::YesNo,
                    }],
                }),
                required: false,
            };
            let deadline = tokio::time::Instant::now() + self.timeout;
            let asked = self.asker.ask(std::slice::from_ref(&question), deadline);
            let answers = tokio::time::timeout_at(deadline + GRACE, asked)
                .await
                .unwrap_or_default();
            answers.iter().any(|answer| {
                answer.key == KEY
                    && matches!(&answer.reply, Reply::Accepted(fields)
                        if fields.iter().any(|(name, value)| name == "allow" && *value == Value::YesNo(true)))
            })
        })
    }
}
