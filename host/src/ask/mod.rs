//! Asking the person: what a tool may ask before it goes on, how the host asks, and what it
//! keeps of the answers.
//!
//! A tool's call may end with questions instead of a result ([`NeedsInput`], WIT 0.5.0
//! `needs-input`). The host then asks, and calls the tool again with the replies
//! ([`Answers`]) in a fresh instance: no guest instance waits for the person.
//!
//! 1. The caller says whom the call may ask ([`CallOptions::asking`]): an MCP client that
//!    declared elicitation, sampling or roots, or nobody. The operator's
//!    [`AskMode`] can turn asking off for every caller.
//! 2. The tool's questions are checked against this module's bounds ([`check`]).
//! 3. Questions of a kind the caller cannot ask are not sent; their reply is
//!    [`Reply::NobodyToAsk`].
//! 4. With an [`Asker`] ([`CallOptions::asker`]: a 2025-era MCP session, a scenario's scripted
//!    person), the host asks within the call, at most [`CallOptions::ask_timeout`] per round.
//! 5. Without one, the questions are the call's output ([`CallOutput::needs_input`]): the
//!    caller relays them (MCP revision 2026-07-28's `input_required`) and calls again with
//!    [`CallOptions::answers`]. [`seal`] signs what the host needs back.
//! 6. A call asks at most [`MAX_ROUNDS`] rounds.
//!
//! [`approvals`] keeps what the person allowed "from now on", per plugin and scope.
//!
//! [`CallOptions::asking`]: crate::CallOptions::asking
//! [`CallOptions::asker`]: crate::CallOptions::asker
//! [`CallOptions::ask_timeout`]: crate::CallOptions::ask_timeout
//! [`CallOptions::answers`]: crate::CallOptions::answers
//! [`CallOutput::needs_input`]: crate::CallOutput::needs_input

pub(crate) mod approvals;
pub(crate) mod check;
pub(crate) mod hosts;
pub(crate) mod page;
pub(crate) mod rounds;
pub(crate) mod seal;
pub mod secrets;

pub use secrets::{CallSecrets, Secret};

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// The future an [`Asker`] returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The most rounds of questions one call may ask.
pub const MAX_ROUNDS: u32 = 10;

/// How long the host waits for the replies to one round of questions, unless the caller or
/// the operator says otherwise (`--ask-timeout`).
pub const DEFAULT_ASK_TIMEOUT: Duration = Duration::from_secs(10 * 60);

/// Whether tools may ask the person at all: the operator's choice (`--ask`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AskMode {
    /// No tool asks anybody: every call is told nobody can be asked.
    #[default]
    Never,
    /// Tools may ask a caller that can be asked; the bundled policies ask before a risky
    /// command instead of refusing it.
    Risky,
}

/// What a call may ask of its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CanAsk {
    /// A form the person fills in (MCP elicitation, form mode).
    pub form: bool,
    /// A completion from the client's model (MCP sampling).
    pub sample: bool,
    /// The client's roots.
    pub roots: bool,
    /// A secret typed on the host's page (MCP elicitation, URL mode).
    pub secret: bool,
}

impl CanAsk {
    /// What this cannot ask.
    pub fn complement(self) -> CanAsk {
        CanAsk {
            form: !self.form,
            sample: !self.sample,
            roots: !self.roots,
            secret: !self.secret,
        }
    }

    /// Whether nothing can be asked.
    pub fn is_empty(&self) -> bool {
        !(self.form || self.sample || self.roots || self.secret)
    }

    /// Whether `ask` is of a kind that can be asked.
    pub fn allows(&self, ask: &Ask) -> bool {
        match ask {
            Ask::Form(_) => self.form,
            Ask::Sample(_) => self.sample,
            Ask::Roots => self.roots,
            Ask::Secret(_) => self.secret,
        }
    }
}

/// Whom a call may ask, and why a form cannot be asked when it cannot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asking {
    /// What the caller can be asked.
    pub can: CanAsk,
    /// Why a form cannot be asked, for the tool's note to the model.
    pub unavailable: Option<String>,
    /// Why a secret cannot be asked, for the tool's note to the model.
    pub secret_unavailable: Option<String>,
    /// What an MCP client did not declare it can be asked (its capabilities); empty for
    /// other callers and where the operator turned asking off.
    pub missing: CanAsk,
}

impl Default for Asking {
    fn default() -> Self {
        Asking::nobody("this caller cannot ask anyone")
    }
}

impl Asking {
    /// Nobody can be asked, for `why`.
    pub fn nobody(why: &str) -> Self {
        Asking {
            can: CanAsk::default(),
            unavailable: Some(why.to_owned()),
            secret_unavailable: Some(why.to_owned()),
            missing: CanAsk::default(),
        }
    }

    /// `can` may be asked; `why_no_form` says why a form may not, and `why_no_secret` why a
    /// secret may not, when they may not.
    pub fn of(can: CanAsk, why_no_form: &str, why_no_secret: &str) -> Self {
        Asking {
            can,
            unavailable: (!can.form).then(|| why_no_form.to_owned()),
            secret_unavailable: (!can.secret).then(|| why_no_secret.to_owned()),
            missing: CanAsk::default(),
        }
    }
}

/// What kind of value a form field takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldKind {
    /// Free text.
    Text,
    /// Yes or no.
    YesNo,
    /// A number.
    Number,
    /// One of these values.
    Choice(Vec<String>),
}

/// One field of a form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// Its name in the reply.
    pub name: String,
    /// Its label for the person.
    pub title: Option<String>,
    /// More words about it.
    pub description: Option<String>,
    /// Whether the person must fill it in to accept.
    pub required: bool,
    /// What it takes.
    pub kind: FieldKind,
}

/// A form for the person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Form {
    /// What the person is asked, and why.
    pub message: String,
    /// The fields to fill in.
    pub fields: Vec<Field>,
}

/// A request for a completion from the client's model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// The user message to complete.
    pub prompt: String,
    /// A system prompt.
    pub system: Option<String>,
    /// The most tokens the completion may have.
    pub max_tokens: u32,
}

/// A secret for the person to type on the host's page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretAsk {
    /// What the person is asked for, and why.
    pub message: String,
    /// The page opened for it, set by the host when it asks; `None` from a tool.
    pub page: Option<PageLink>,
}

/// A page opened for a secret question ([`page`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageLink {
    /// The page's id: MCP's `elicitationId`. It names the page; it does not open it.
    pub id: String,
    /// The page's whole URL, with the unguessable part that opens it.
    pub url: String,
}

/// One thing to ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    /// A form the person fills in.
    Form(Form),
    /// A completion from the client's model.
    Sample(Sample),
    /// The client's roots.
    Roots,
    /// A secret typed on the host's page.
    Secret(SecretAsk),
}

impl Ask {
    /// Its kind in one word (`form`, `sample`, `roots`, `secret`), as the sealed state
    /// records it.
    pub fn kind(&self) -> &'static str {
        match self {
            Ask::Form(_) => "form",
            Ask::Sample(_) => "sample",
            Ask::Roots => "roots",
            Ask::Secret(_) => "secret",
        }
    }
}

/// A question under the key its reply comes back with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    /// The key the tool chose.
    pub key: String,
    /// What is asked.
    pub ask: Ask,
    /// The call cannot go on without it: where the client did not declare its kind
    /// ([`Asking::missing`]), the call ends with [`crate::CallError::MissingCapability`].
    pub required: bool,
}

/// A call's questions, and the text the tool carries to its next round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NeedsInput {
    /// The questions, checked ([`check::needs_input`]).
    pub questions: Vec<Question>,
    /// Text the tool gets back in [`Answers::state`]; signed, never encrypted.
    pub state: Option<String>,
}

/// A value given in a form field.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Text (a text or choice field).
    Text(String),
    /// Yes or no.
    YesNo(bool),
    /// A number.
    Number(f64),
}

/// A root the client named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    /// Its URI.
    pub uri: String,
    /// Its name for people.
    pub name: Option<String>,
}

/// How one question was answered.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// The person accepted the form with these fields.
    Accepted(Vec<(String, Value)>),
    /// The person said no.
    Declined,
    /// The person dismissed the question.
    Cancelled,
    /// Nobody answered in time.
    TimedOut,
    /// The question could not be asked.
    NobodyToAsk,
    /// The client's model's completion.
    Sampled(String),
    /// The client's roots.
    Roots(Vec<Root>),
    /// The client's reply did not fit the question.
    Unusable(String),
    /// The person typed the secret on the host's page: the page's id. The value is in the
    /// call's [`CallSecrets`] under the question's key once the round collects it; the tool
    /// gets no value.
    SecretGiven(String),
}

impl Reply {
    /// The reply in a word or two, for the record (`accepted`, `declined`, ...); never the
    /// values given.
    pub fn summary(&self) -> &'static str {
        match self {
            Reply::Accepted(_) => "accepted",
            Reply::Declined => "declined",
            Reply::Cancelled => "cancelled",
            Reply::TimedOut => "timed out",
            Reply::NobodyToAsk => "nobody to ask",
            Reply::Sampled(_) => "sampled",
            Reply::Roots(_) => "roots",
            Reply::Unusable(_) => "unusable",
            Reply::SecretGiven(_) => "secret given",
        }
    }
}

/// A reply under its question's key.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The question's key.
    pub key: String,
    /// The reply.
    pub reply: Reply,
}

/// The replies a call's next round gets.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Answers {
    /// One per key answered.
    pub replies: Vec<Answer>,
    /// The state the tool gave with its questions.
    pub state: Option<String>,
    /// Whether the host knows these replies answer the tool's own questions of this call
    /// (it asked them, or verified its signed record of them); `false`: the client's word.
    pub checked: bool,
}

/// Asks questions within a call: a 2025-era MCP session's client, an MCP task's client, a
/// scenario's scripted person.
pub trait Asker: Send + Sync {
    /// Ask `questions` (each of a kind the caller said it can ask); one answer per question
    /// answered, in any order, returned by `deadline` (the host stops waiting shortly after
    /// it). A question left without an answer gets [`Reply::TimedOut`].
    fn ask<'a>(
        &'a self,
        questions: &'a [Question],
        deadline: tokio::time::Instant,
    ) -> BoxFuture<'a, Vec<Answer>>;

    /// The person gave the secret of page `page_id` (a question this asker asked): an MCP
    /// session tells its client (`notifications/elicitation/complete`). Nothing by default.
    fn secret_received<'a>(&'a self, page_id: &'a str) -> BoxFuture<'a, ()> {
        let _ = page_id;
        Box::pin(std::future::ready(()))
    }
}
