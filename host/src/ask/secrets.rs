//! Secrets the person types on the host's page ([`page`](super::page)), from the question to
//! the one command that gets each.
//!
//! 1. A tool asks a secret question ([`Ask::Secret`](super::Ask::Secret)). The host opens a
//!    page for it in [`SecretPages`]: an id, an unguessable link, a form token, the caller it
//!    belongs to and a deadline.
//! 2. The client is sent the link (MCP elicitation in URL mode). The person opens it and
//!    types the secret; the page's submission stores it in the page's entry.
//! 3. The round that gets the reply [`Reply::SecretGiven`](super::Reply::SecretGiven) takes
//!    the secret out of [`SecretPages`] into the call's [`CallSecrets`], under the question's
//!    key. The page is gone then.
//! 4. A command the tool starts names the key (WIT `start-request.secrets`): the host takes
//!    the secret out of the call's [`CallSecrets`] and sets it as the command's variable. No
//!    other command can get it, and the command's output has it replaced.
//! 5. Secrets no command took are dropped with the round. A page is dropped when it expires
//!    (`--ask-timeout` after it was opened), given or not. A [`Secret`] is overwritten with
//!    zeroes when it is dropped ([`zeroize`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use zeroize::Zeroizing;

/// A secret value. It never prints: `Debug` shows `[secret]`. Its bytes are zeroed when it is
/// dropped.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Zeroizing<String>);

impl Secret {
    /// `value` as a secret.
    pub fn new(value: String) -> Self {
        Secret(Zeroizing::new(value))
    }

    /// The value itself, for the command's environment and the output's scrubbing only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[secret]")
    }
}

/// The secrets of one round of a call, by the key of the question that got each. Clones share
/// them.
#[derive(Clone, Default)]
pub struct CallSecrets(Arc<Mutex<HashMap<String, Secret>>>);

impl std::fmt::Debug for CallSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys: Vec<String> = crate::lock(&self.0).keys().cloned().collect();
        f.debug_tuple("CallSecrets").field(&keys).finish()
    }
}

impl CallSecrets {
    /// Keep `secret` under `key` (a secret kept under it before is dropped).
    pub fn put(&self, key: &str, secret: Secret) {
        crate::lock(&self.0).insert(key.to_owned(), secret);
    }

    /// Take the secret under `key` out: `None` when there is none, or it was taken already.
    pub fn take(&self, key: &str) -> Option<Secret> {
        crate::lock(&self.0).remove(key)
    }

    /// Drop every secret kept.
    pub fn clear(&self) {
        crate::lock(&self.0).clear();
    }
}

/// Whose a page is: the caller that asked, so that only its own call takes the secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// The principal (an HTTP bearer token's name), if any.
    pub principal: Option<String>,
    /// The scope of the call.
    pub scope: String,
}

/// What a page shows and what its form must carry.
#[derive(Debug, Clone)]
pub(crate) struct PageView {
    /// The question's message.
    pub(crate) message: String,
    /// The form's token, checked on submission.
    pub(crate) form_token: String,
    /// Whether the secret was given already (the link is used up).
    pub(crate) used: bool,
}

/// Why a page's submission was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SubmitError {
    /// No page under that link: never made, expired, or its secret taken.
    #[error("this link is unknown or has expired")]
    Unknown,
    /// The form's token did not match.
    #[error("the form does not match this page; open the link again")]
    WrongForm,
    /// The page has its secret already.
    #[error("a secret was given on this page already")]
    Used,
    /// The person said no on the page.
    #[error("the request was declined")]
    Declined,
}

/// How a page's question ended, as the round reads it.
#[derive(Debug)]
pub(crate) enum Taken {
    /// The person typed the secret.
    Given(Secret),
    /// The person declined on the page.
    Declined,
    /// Nothing was typed by the deadline.
    TimedOut,
    /// No page with that id for this caller (expired, never made, or another caller's).
    Unknown,
}

/// The state of one page.
enum State {
    /// Waiting for the person.
    Open,
    /// The person typed the secret.
    Given(Secret),
    /// The person declined on the page.
    Declined,
}

struct Entry {
    /// The unguessable part of its link.
    link: String,
    form_token: String,
    message: String,
    owner: Owner,
    /// When it is dropped, given or not.
    expires: Instant,
    state: State,
    /// Wakes whoever waits for the person.
    changed: Arc<Notify>,
}

/// The most pages open at once, all callers together; a question beyond them gets a reply
/// saying so.
pub(crate) const MAX_PAGES: usize = 256;

/// The most pages open at once for one caller (principal and scope).
pub(crate) const MAX_PAGES_PER_OWNER: usize = 16;

/// Drop the pages of `entries` that expired, given or not.
fn sweep(entries: &mut HashMap<String, Entry>, now: Instant) {
    entries.retain(|_, entry| entry.expires > now);
}

/// The pages open for secret questions (see the module documentation). Clones share them.
#[derive(Clone, Default)]
pub struct SecretPages {
    /// By page id.
    entries: Arc<Mutex<HashMap<String, Entry>>>,
}

/// `bytes` random bytes as unpadded URL-safe base64.
fn random_text(bytes: usize) -> std::io::Result<String> {
    use base64::Engine as _;
    let mut buf = vec![0u8; bytes];
    super::seal::fill_random(&mut buf)?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&buf))
}

impl SecretPages {
    /// Open a page for `message`, owned by `owner`, open for `lasting`: its id and the
    /// unguessable part of its link. An error when [`MAX_PAGES`] are open, or no random bytes
    /// could be had.
    pub(crate) fn open(
        &self,
        message: &str,
        owner: Owner,
        lasting: Duration,
    ) -> std::io::Result<(String, String)> {
        let id = random_text(16)?;
        let link = random_text(32)?;
        let form_token = random_text(32)?;
        let now = Instant::now();
        let mut entries = crate::lock(&self.entries);
        sweep(&mut entries, now);
        if entries.len() >= MAX_PAGES {
            return Err(std::io::Error::other(format!(
                "the host has {MAX_PAGES} pages for secrets open already"
            )));
        }
        if entries
            .values()
            .filter(|entry| entry.owner == owner)
            .count()
            >= MAX_PAGES_PER_OWNER
        {
            return Err(std::io::Error::other(format!(
                "this caller has {MAX_PAGES_PER_OWNER} pages for secrets open already"
            )));
        }
        entries.insert(
            id.clone(),
            Entry {
                link: link.clone(),
                form_token,
                message: message.to_owned(),
                owner,
                expires: now + lasting,
                state: State::Open,
                changed: Arc::new(Notify::new()),
            },
        );
        Ok((id, link))
    }

    /// The page behind `link`, for showing it; `None` when there is none (or it expired).
    pub(crate) fn view(&self, link: &str) -> Option<PageView> {
        let now = Instant::now();
        let mut entries = crate::lock(&self.entries);
        sweep(&mut entries, now);
        let entry = entries
            .values()
            .find(|entry| entry.expires > now && constant_eq(&entry.link, link))?;
        Some(PageView {
            message: entry.message.clone(),
            form_token: entry.form_token.clone(),
            used: !matches!(entry.state, State::Open),
        })
    }

    /// The person's submission on the page behind `link`: the secret, or `None` when they
    /// declined. The form's token must be the page's.
    pub(crate) fn submit(
        &self,
        link: &str,
        form_token: &str,
        given: Option<Secret>,
    ) -> Result<(), SubmitError> {
        let now = Instant::now();
        let mut entries = crate::lock(&self.entries);
        sweep(&mut entries, now);
        let entry = entries
            .values_mut()
            .find(|entry| entry.expires > now && constant_eq(&entry.link, link))
            .ok_or(SubmitError::Unknown)?;
        if !constant_eq(&entry.form_token, form_token) {
            return Err(SubmitError::WrongForm);
        }
        match entry.state {
            State::Open => {}
            State::Given(_) => return Err(SubmitError::Used),
            State::Declined => return Err(SubmitError::Declined),
        }
        entry.state = match given {
            Some(secret) => State::Given(secret),
            None => State::Declined,
        };
        entry.changed.notify_waiters();
        Ok(())
    }

    /// Wait until the person has answered on page `id` or `deadline` passes, then take what
    /// they gave out (the page is gone then). Only `owner`'s call gets it.
    pub(crate) async fn take(&self, id: &str, owner: &Owner, deadline: Instant) -> Taken {
        loop {
            let changed = {
                let mut entries = crate::lock(&self.entries);
                // An expired page is gone, given or not.
                if entries
                    .get(id)
                    .is_some_and(|entry| entry.expires <= Instant::now())
                {
                    entries.remove(id);
                    return Taken::TimedOut;
                }
                let Some(entry) = entries.get(id) else {
                    return Taken::Unknown;
                };
                if entry.owner != *owner {
                    return Taken::Unknown;
                }
                if matches!(entry.state, State::Open) {
                    if Instant::now() >= deadline.min(entry.expires) {
                        entries.remove(id);
                        return Taken::TimedOut;
                    }
                    entry.changed.clone()
                } else {
                    return match entries.remove(id).map(|entry| entry.state) {
                        Some(State::Given(secret)) => Taken::Given(secret),
                        Some(State::Declined) => Taken::Declined,
                        Some(State::Open) | None => Taken::Unknown,
                    };
                }
            };
            let notified = changed.notified();
            // Checked again under the lock after registering, so a submission between the
            // check above and here is not missed.
            let until = crate::lock(&self.entries)
                .get(id)
                .filter(|entry| matches!(entry.state, State::Open))
                .map(|entry| deadline.min(entry.expires));
            if let Some(until) = until {
                let _ = tokio::time::timeout_at(until, notified).await;
            }
        }
    }

    /// Drop page `id`, whatever its state (its question was declined or cancelled in the
    /// client).
    pub(crate) fn close(&self, id: &str) {
        crate::lock(&self.entries).remove(id);
    }

    /// Drop the pages that expired, given or not; whether any page is left.
    pub(crate) fn sweep(&self) -> bool {
        let mut entries = crate::lock(&self.entries);
        sweep(&mut entries, Instant::now());
        !entries.is_empty()
    }
}

/// Whether `a` and `b` are equal, in a time that does not depend on where they differ.
fn constant_eq(a: &str, b: &str) -> bool {
    use subtle::ConstantTimeEq as _;
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(scope: &str) -> Owner {
        Owner {
            principal: None,
            scope: scope.to_owned(),
        }
    }

    #[test]
    fn a_secret_never_prints() {
        let secret = Secret::new("hunter2".to_owned());
        assert_eq!(format!("{secret:?}"), "[secret]");
        let call = CallSecrets::default();
        call.put("token", secret);
        assert!(!format!("{call:?}").contains("hunter2"));
    }

    #[tokio::test]
    async fn a_page_gives_its_secret_once_to_its_owner() {
        let pages = SecretPages::default();
        let (id, link) = pages
            .open("a token", owner("s"), Duration::from_secs(60))
            .expect("open");
        let view = pages.view(&link).expect("the page");
        assert_eq!(view.message, "a token");
        assert!(!view.used);
        assert_eq!(
            pages.submit(&link, "wrong", Some(Secret::new("x".into()))),
            Err(SubmitError::WrongForm)
        );
        assert_eq!(pages.view("not-the-link").map(|v| v.used), None);
        let deadline = Instant::now() + Duration::from_secs(30);
        let waiting = {
            let pages = pages.clone();
            let id = id.clone();
            tokio::spawn(async move { pages.take(&id, &owner("s"), deadline).await })
        };
        pages
            .submit(&link, &view.form_token, Some(Secret::new("hunter2".into())))
            .expect("submitted");
        assert_eq!(
            pages.submit(&link, &view.form_token, Some(Secret::new("y".into()))),
            Err(SubmitError::Used)
        );
        match waiting.await.expect("joined") {
            Taken::Given(secret) => assert_eq!(secret.expose(), "hunter2"),
            other => panic!("not given: {other:?}"),
        }
        // Taken: the page is gone.
        assert!(pages.view(&link).is_none());
        assert!(matches!(
            pages.take(&id, &owner("s"), deadline).await,
            Taken::Unknown
        ));
    }

    #[tokio::test]
    async fn another_callers_call_gets_nothing_and_an_unanswered_page_times_out() {
        let pages = SecretPages::default();
        let (id, _link) = pages
            .open("a token", owner("s"), Duration::from_secs(60))
            .expect("open");
        let soon = Instant::now() + Duration::from_millis(50);
        assert!(matches!(
            pages.take(&id, &owner("other"), soon).await,
            Taken::Unknown
        ));
        assert!(matches!(
            pages.take(&id, &owner("s"), soon).await,
            Taken::TimedOut
        ));
    }
}
