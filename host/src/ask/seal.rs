//! The host's signed record of the questions a call asked, for callers that relay them and
//! call again with the replies (MCP revision 2026-07-28's `requestState`).
//!
//! The record is signed with a key made at random when the host starts (HMAC-SHA256, rmcp's
//! `RequestStateCodec`), never encrypted: it holds no secret, only the tool's state, the
//! questions' keys and kinds, the round and a nonce.
//! It is bound to the caller (principal), scope, tool and a digest of the arguments, and
//! expires with the host's time for an answer.
//! Each record is accepted once: its nonce is kept until it expires.
//! A host restarted in between has another key, so a retry then is refused and asked anew.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rmcp::model::{RequestStateCodec, RequestStateError, SealOptions};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The most records accepted and not yet expired that the host remembers; beyond it a retry is
/// refused until some expire.
pub const MAX_USED: usize = 65_536;

/// What a call to be retried needs back from its caller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    /// The rounds of questions asked so far in this call, this one included.
    pub round: u32,
    /// The tool's own state.
    pub state: Option<String>,
    /// The questions sent: key and kind (`form`, `sample`, `roots`, `secret`).
    pub asked: Vec<(String, String)>,
    /// The keys of questions that could not be sent (their reply is nobody-to-ask).
    pub unasked: Vec<String>,
    /// The pages opened for the secret questions sent: key and page id.
    #[serde(default)]
    pub pages: Vec<(String, String)>,
    /// Makes this record single-use.
    nonce: String,
    /// When the record expires, in milliseconds since the Unix epoch: its nonce is kept
    /// until then.
    #[serde(default)]
    expires_ms: u64,
}

impl Pending {
    /// A record of a round; its nonce is made when it is sealed.
    pub fn new(
        round: u32,
        state: Option<String>,
        asked: Vec<(String, String)>,
        unasked: Vec<String>,
    ) -> Self {
        Pending {
            round,
            state,
            asked,
            unasked,
            pages: Vec::new(),
            nonce: String::new(),
            expires_ms: 0,
        }
    }
}

/// What a record is bound to.
#[derive(Debug, Clone, Copy)]
pub struct Binding<'a> {
    /// The caller's principal (an HTTP bearer token's name), if any.
    pub principal: Option<&'a str>,
    /// The call's scope.
    pub scope: &'a str,
    /// The tool called.
    pub tool: &'a str,
    /// The call's arguments, as JSON text.
    pub arguments: &'a str,
}

impl Binding<'_> {
    /// The bytes the signature covers besides the record: each part with its length, and a
    /// SHA-256 of the arguments in a canonical form (object keys sorted, no spaces), so that
    /// a client re-encoding the same arguments still matches.
    fn bytes(&self) -> Vec<u8> {
        let arguments = serde_json::from_str::<serde_json::Value>(self.arguments)
            .map(|value| canonical(&value))
            .unwrap_or_else(|_| self.arguments.to_owned());
        let digest = Sha256::digest(arguments.as_bytes());
        let mut bytes = b"toolhost ask v1".to_vec();
        for part in [
            self.principal.unwrap_or("").as_bytes(),
            self.scope.as_bytes(),
            self.tool.as_bytes(),
            digest.as_slice(),
        ] {
            bytes.extend_from_slice(&(part.len() as u64).to_be_bytes());
            bytes.extend_from_slice(part);
        }
        bytes
    }
}

/// `value` as JSON text with every object's keys sorted.
fn canonical(value: &serde_json::Value) -> String {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let items: Vec<String> = keys
                .into_iter()
                .map(|key| format!("{}:{}", Value::String(key.clone()), canonical(&map[key])))
                .collect();
            format!("{{{}}}", items.join(","))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(canonical).collect();
            format!("[{}]", items.join(","))
        }
        other => other.to_string(),
    }
}

/// Why a record was refused. The words for the client are the same for every forgery (the
/// details stay in the host's log).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// Forged, changed, expired, or for another caller, scope, tool or arguments.
    #[error(
        "the requestState is not one this host gave for this call (changed, expired, from \
         before a restart, or for another caller, tool or arguments): call again without it \
         to be asked anew"
    )]
    Refused,
    /// Accepted once already.
    #[error("the requestState was used already: call again without it to be asked anew")]
    Used,
    /// Too many records accepted recently to remember another.
    #[error("too many answers arrived recently to check this one: try again shortly")]
    Busy,
}

/// Why a record could not be made.
#[derive(Debug, thiserror::Error)]
#[error("cannot seal the request state: {0}")]
pub struct SealError(String);

/// Seals and opens records with the host's key, and remembers the nonces accepted.
pub struct Seals {
    codec: RequestStateCodec,
    used: Mutex<HashMap<String, Instant>>,
}

impl std::fmt::Debug for Seals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Seals").finish_non_exhaustive()
    }
}

impl Seals {
    /// Seals with a fresh random key.
    pub fn new() -> Result<Self, SealError> {
        let mut key = [0u8; 32];
        random(&mut key)?;
        let codec =
            RequestStateCodec::try_new(key.to_vec()).map_err(|e| SealError(e.to_string()))?;
        Ok(Seals {
            codec,
            used: Mutex::new(HashMap::new()),
        })
    }

    /// Seal `pending`, bound to `binding`, valid for `ttl`.
    pub fn seal(
        &self,
        mut pending: Pending,
        binding: Binding<'_>,
        ttl: Duration,
    ) -> Result<String, SealError> {
        let mut nonce = [0u8; 16];
        random(&mut nonce)?;
        pending.nonce = nonce.iter().map(|b| format!("{b:02x}")).collect();
        pending.expires_ms =
            unix_ms().saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
        let bound = binding.bytes();
        let options = SealOptions::new().associated_data(&bound).ttl(ttl);
        self.codec
            .seal_json_with(&pending, &options)
            .map_err(|e| SealError(e.to_string()))
    }

    /// Open `sealed` for `binding`: the record, once (its nonce is kept until it expires).
    pub fn open(&self, sealed: &str, binding: Binding<'_>) -> Result<Pending, OpenError> {
        let pending: Pending = self
            .codec
            .open_json_with(sealed, &binding.bytes())
            .map_err(|error: RequestStateError| {
                tracing::info!(%error, tool = binding.tool, "a retry's requestState was refused");
                OpenError::Refused
            })?;
        let now = Instant::now();
        let mut used = crate::lock(&self.used);
        if used.contains_key(&pending.nonce) {
            return Err(OpenError::Used);
        }
        if used.len() >= MAX_USED {
            used.retain(|_, until| *until > now);
            if used.len() >= MAX_USED {
                return Err(OpenError::Busy);
            }
        }
        let left = Duration::from_millis(pending.expires_ms.saturating_sub(unix_ms()));
        used.insert(pending.nonce.clone(), now + left);
        Ok(pending)
    }
}

/// Milliseconds since the Unix epoch.
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
        })
}

/// Fill `bytes` from the kernel's random source.
pub(crate) fn fill_random(bytes: &mut [u8]) -> std::io::Result<()> {
    let mut filled = 0;
    while filled < bytes.len() {
        match rustix::rand::getrandom(&mut bytes[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// [`fill_random`], failing as a seal does.
fn random(bytes: &mut [u8]) -> Result<(), SealError> {
    fill_random(bytes).map_err(|e| SealError(format!("no random bytes: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(60);

    fn binding(arguments: &str) -> Binding<'_> {
        Binding {
            principal: Some("alice"),
            scope: "s",
            tool: "execute",
            arguments,
        }
    }

    fn pending() -> Pending {
        Pending::new(
            1,
            Some("step=1".into()),
            vec![("approve".into(), "form".into())],
            vec![],
        )
    }

    #[test]
    fn a_record_opens_once_for_its_own_call_and_for_nothing_else() {
        let seals = Seals::new().expect("seals");
        let args = r#"{"command":"git push --force","timeout":"5s"}"#;
        let sealed = seals.seal(pending(), binding(args), TTL).expect("seal");
        // The same arguments in another order and spacing are the same call.
        let reordered = r#"{ "timeout": "5s", "command": "git push --force" }"#;
        let opened = seals.open(&sealed, binding(reordered)).expect("open");
        assert_eq!(opened.state.as_deref(), Some("step=1"));
        assert_eq!(opened.asked, pending().asked);
        assert_eq!(seals.open(&sealed, binding(args)), Err(OpenError::Used));

        let sealed = seals.seal(pending(), binding(args), TTL).expect("seal");
        let other_args = r#"{"command":"git push --force origin other"}"#;
        let other_principal = Binding {
            principal: Some("bob"),
            ..binding(args)
        };
        let other_tool = Binding {
            tool: "process_input",
            ..binding(args)
        };
        let other_scope = Binding {
            scope: "t",
            ..binding(args)
        };
        for other in [
            binding(other_args),
            other_principal,
            other_tool,
            other_scope,
        ] {
            assert_eq!(seals.open(&sealed, other), Err(OpenError::Refused));
        }
        let tampered = format!("{sealed}-TAMPERED");
        assert_eq!(
            seals.open(&tampered, binding(args)),
            Err(OpenError::Refused)
        );
        // Another host (another key) refuses it too.
        let other_host = Seals::new().expect("seals");
        assert_eq!(
            other_host.open(&sealed, binding(args)),
            Err(OpenError::Refused)
        );
        // Untouched, it still opens.
        assert!(seals.open(&sealed, binding(args)).is_ok());
    }

    #[test]
    fn an_expired_record_is_refused() {
        let seals = Seals::new().expect("seals");
        let args = "{}";
        let sealed = seals
            .seal(pending(), binding(args), Duration::from_millis(1))
            .expect("seal");
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(seals.open(&sealed, binding(args)), Err(OpenError::Refused));
    }
}
