//! Which host variables hold secrets, so that a confined command does not inherit them.
//!
//! A variable is secret by its name or by its value.
//! The value detectors are a small focused set of their own.
//! Each is a rule in the shape of a gitleaks rule (an id and a regular expression).
//! So the token formats could later come from the shared rule set that `rules.rs` vendors for
//! file contents, without changing how they are used here.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::sync::{LazyLock, Mutex, OnceLock};

use regex::bytes::{Regex, RegexSet};

/// Words that make a variable's name secret wherever they occur in it (in upper case).
const SECRET_SUBSTRINGS: &[&str] = &[
    "KEY",
    "SECRET",
    "TOKEN",
    "PASSWORD",
    "PASSPHRASE",
    "CREDENTIAL",
    "CONNECTION_STRING",
    // .NET reads `ConnectionStrings__NAME` from the environment.
    "CONNECTIONSTRING",
];

/// Words that make a variable's name secret as a whole `_`-separated word (in upper case).
const SECRET_WORDS: &[&str] = &[
    "PWD",
    "PASS",
    "PASSWD",
    "PAT",
    "AUTH",
    "AUTHORIZATION",
    "CRED",
    "CREDS",
    "DSN",
    "COOKIE",
    "JWT",
    "BEARER",
    "PRIVATE",
    "SIGNING",
    "WEBHOOK",
    "CONN",
];

/// A rule that finds a secret in a value: its id and its pattern (a `regex::bytes` pattern).
struct ValueRule {
    id: &'static str,
    pattern: &'static str,
}

/// Well-known token formats, after gitleaks' rules of the same ids.
/// These are the ones the shared rule set of `rules.rs` could provide later.
const TOKEN_FORMATS: &[ValueRule] = &[
    ValueRule {
        id: "github-token",
        pattern: r"(?-u)\bgh[pousr]_[0-9A-Za-z]{36}\b",
    },
    ValueRule {
        id: "github-fine-grained-pat",
        pattern: r"(?-u)\bgithub_pat_[0-9A-Za-z_]{22,}",
    },
    ValueRule {
        id: "gitlab-pat",
        pattern: r"(?-u)\bglpat-[0-9A-Za-z_-]{20,}",
    },
    ValueRule {
        id: "slack-token",
        pattern: r"(?-u)\bxox[abposr]-[0-9A-Za-z-]{10,}",
    },
    ValueRule {
        id: "stripe-key",
        pattern: r"(?-u)\b[sr]k_(?:live|test|prod)_[0-9A-Za-z]{10,}",
    },
    ValueRule {
        id: "anthropic-api-key",
        pattern: r"(?-u)\bsk-ant-[0-9A-Za-z_-]{20,}",
    },
    ValueRule {
        id: "openai-api-key",
        pattern: r"(?-u)\bsk-(?:proj-|svcacct-|admin-)?[0-9A-Za-z_-]{20,}",
    },
    ValueRule {
        id: "huggingface-token",
        pattern: r"(?-u)\bhf_[0-9A-Za-z]{30,}",
    },
    ValueRule {
        id: "npm-token",
        pattern: r"(?-u)\bnpm_[0-9A-Za-z]{36}\b",
    },
    ValueRule {
        id: "pypi-token",
        pattern: r"(?-u)\bpypi-AgEIcHlwaS5vcmc[0-9A-Za-z_-]{50,}",
    },
    ValueRule {
        id: "aws-access-key-id",
        pattern: r"(?-u)\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}\b",
    },
];

/// Shapes of secret values that are not one vendor's token.
const VALUE_SHAPES: &[ValueRule] = &[
    // Three base64url parts, the first two JSON objects (`{"` is `ey` in base64).
    ValueRule {
        id: "jwt",
        pattern: r"(?-u)\bey[0-9A-Za-z_-]{10,}\.ey[0-9A-Za-z_-]{10,}\.[0-9A-Za-z_-]*",
    },
    ValueRule {
        id: "private-key",
        pattern: r"(?-u)-----BEGIN[ A-Z0-9_-]*PRIVATE KEY(?: BLOCK)?-----",
    },
    // libpq (`host=db password=pw`), ODBC and ADO.NET (`;Pwd=pw;`), JDBC (`?password=pw`),
    // Azure storage and service bus (`;AccountKey=...`, `;SharedAccessKey=...`).
    ValueRule {
        id: "connection-string-password",
        pattern: r#"(?i-u)(?:^|[\s;?&,"'-])(?:password|passwd|pwd|accountkey|sharedaccesskey|sharedaccesssignature)\s*=\s*[^\s;&,"']"#,
    },
    ValueRule {
        id: "slack-webhook",
        pattern: r"(?i-u)https://hooks\.slack\.com/(?:services|workflows|triggers)/[0-9A-Za-z+/_-]{8,}",
    },
    ValueRule {
        id: "discord-webhook",
        pattern: r"(?i-u)https://(?:[a-z0-9-]+\.)?discord(?:app)?\.com/api/(?:v[0-9]+/)?webhooks/[0-9]+/[0-9A-Za-z_-]+",
    },
    // Teams: incoming webhooks on `*.webhook.office.com` and the older `outlook.office.com`,
    // and Workflows (Power Automate) URLs signed with `sig=`.
    ValueRule {
        id: "teams-webhook",
        pattern: r"(?i-u)https://(?:[0-9a-z.-]+\.webhook\.office\.com/webhookb2/|outlook\.office(?:365)?\.com/webhook/|[0-9a-z.-]+\.logic\.azure\.com(?::[0-9]+)?/workflows/[^\s]*[?&]sig=)",
    },
    ValueRule {
        id: "google-chat-webhook",
        pattern: r"(?i-u)https://chat\.googleapis\.com/v1/spaces/[^\s/]+/messages\?[^\s]*(?:key|token)=",
    },
];

/// Every value rule, compiled once, in the order of [`value_rules`].
static VALUE_RULES: LazyLock<RegexSet> = LazyLock::new(|| {
    RegexSet::new(value_rules().map(|rule| rule.pattern))
        // The patterns are constants of this file; a unit test compiles them.
        .expect("the value rules compile")
});

fn value_rules() -> impl Iterator<Item = &'static ValueRule> {
    TOKEN_FORMATS.iter().chain(VALUE_SHAPES)
}

/// Whether a host variable holds a secret, so that a confined command does not inherit it.
///
/// 1. `PATH`, every name ending in `PATH`, `PWD` and `OLDPWD` are never secret.
/// 2. A name holding one of [`SECRET_SUBSTRINGS`] anywhere is secret (`KEY`, `SECRET`, `TOKEN`,
///    `PASSWORD`, `PASSPHRASE`, `CREDENTIAL`, `CONNECTION_STRING`, `CONNECTIONSTRING`).
/// 3. A name holding one of [`SECRET_WORDS`] as a whole `_`-separated word is secret (`PWD`,
///    `PASS`, `PASSWD`, `PAT`, `AUTH`, `AUTHORIZATION`, `CRED`, `CREDS`, `DSN`, `COOKIE`,
///    `JWT`, `BEARER`, `PRIVATE`, `SIGNING`, `WEBHOOK`, `CONN`).
/// 4. A value that is a `:`-separated list of absolute paths is not looked at further.
/// 5. A value holding a URL with a password (`scheme://user:password@host`) is secret.
/// 6. A value that a value rule matches is secret (see [`secret_value_rule`]).
pub fn is_secret_variable(name: &OsStr, value: &OsStr) -> bool {
    let name = name.to_string_lossy();
    !never_secret(&name) && (is_secret_name(&name) || secret_value_rule(value).is_some())
}

/// The most names [`is_secret_variable_remembered`] keeps a verdict for; past it, it forgets
/// them all.
const MAX_REMEMBERED: usize = 4096;

/// [`is_secret_variable`], remembered for each name with the value it was worked out for.
/// Every confined command's start asks it of each host variable.
/// The host's variables rarely change.
/// The value rules cost microseconds a variable.
pub(crate) fn is_secret_variable_remembered(name: &OsStr, value: &OsStr) -> bool {
    static VERDICTS: LazyLock<Mutex<HashMap<OsString, (OsString, bool)>>> =
        LazyLock::new(|| Mutex::new(HashMap::new()));
    let lock = || {
        VERDICTS
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    };
    if let Some((seen, verdict)) = lock().get(name)
        && seen.as_os_str() == value
    {
        return *verdict;
    }
    let verdict = is_secret_variable(name, value);
    let mut verdicts = lock();
    if verdicts.len() >= MAX_REMEMBERED && !verdicts.contains_key(name) {
        verdicts.clear();
    }
    verdicts.insert(name.to_os_string(), (value.to_os_string(), verdict));
    verdict
}

/// Step 1 of [`is_secret_variable`]: a name never secret, whatever its value.
fn never_secret(name: &str) -> bool {
    let name = name.to_ascii_uppercase();
    name.ends_with("PATH") || name == "PWD" || name == "OLDPWD"
}

/// Steps 1 to 3 of [`is_secret_variable`]: whether a variable's name alone makes it secret.
fn is_secret_name(name: &str) -> bool {
    if never_secret(name) {
        return false;
    }
    let name = name.to_ascii_uppercase();
    SECRET_SUBSTRINGS.iter().any(|word| name.contains(word))
        || name.split('_').any(|word| SECRET_WORDS.contains(&word))
}

/// The id of the rule by which `value` holds a secret, if one does.
///
/// 1. A `:`-separated list of absolute paths (a `PATH`-like value) holds none.
/// 2. A URL with a password holds one (`url-password`).
/// 3. Else the first of the token formats, then of the other value shapes, that matches.
pub fn secret_value_rule(value: &OsStr) -> Option<&'static str> {
    let value = value.as_bytes();
    if is_path_list(value) {
        return None;
    }
    if has_url_with_password(value) {
        return Some("url-password");
    }
    let matched = VALUE_RULES.matches(value);
    value_rules()
        .enumerate()
        .find(|(index, _)| matched.matched(*index))
        .map(|(_, rule)| rule.id)
}

/// Whether `value` is a `:`-separated list of absolute paths (empty items allowed, as in
/// `PATH`), with at least one item.
fn is_path_list(value: &[u8]) -> bool {
    let mut items = value
        .split(|&byte| byte == b':')
        .filter(|item| !item.is_empty());
    let Some(first) = items.next() else {
        return false;
    };
    first.starts_with(b"/") && items.all(|item| item.starts_with(b"/"))
}

/// Whether `text` holds a URL whose user information has a password (`://user:pw@`, also
/// `://:pw@`).
fn has_url_with_password(text: &[u8]) -> bool {
    let mut rest = text;
    while let Some(start) = find(rest, b"://") {
        let after = &rest[start + 3..];
        let authority_end = after
            .iter()
            .position(|byte| matches!(byte, b'/' | b'?' | b'#') || byte.is_ascii_whitespace())
            .unwrap_or(after.len());
        let authority = &after[..authority_end];
        if let Some(at) = authority.iter().rposition(|&byte| byte == b'@') {
            let user_info = &authority[..at];
            if let Some(colon) = user_info.iter().position(|&byte| byte == b':')
                && colon + 1 < user_info.len()
            {
                return true;
            }
        }
        rest = after;
    }
    false
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(haystack, needle)
}

/// Every value rule on its own, for where it matches ([`redact`]), each compiled the first
/// time [`VALUE_RULES`] finds that rule in a text: most texts match none, and a one-shot host
/// then compiles none.
static VALUE_REGEXES: LazyLock<Vec<(&'static str, &'static str, OnceLock<Regex>)>> =
    LazyLock::new(|| {
        value_rules()
            .map(|rule| (rule.id, rule.pattern, OnceLock::new()))
            .collect()
    });

/// Secrets in a command line that no value rule finds: the value after a secret name and `=`
/// (`PGPASSWORD=x`, `--password='x'`), after `Authorization: Bearer` (or `Basic`, `Token`),
/// and the password of `-u USER:PASSWORD`.
static WORD_RULES: [(&str, &str, &[u8]); 3] = [
    (
        "secret-name",
        r"(?-u)([A-Za-z_][A-Za-z0-9_.-]*)\s*=\s*",
        b"=",
    ),
    (
        "authorization",
        r"(?i-u)authorization:\s*(?:bearer|basic|token)\s+",
        b"authorization",
    ),
    (
        "user-password",
        r"(?-u)(?:^|\s)(?:-u|--user)[\s=]+[^\s:]+:",
        b"-u",
    ),
];

/// [`WORD_RULES`] compiled, each the first time a text holds its hint (the third field, in
/// lower case: the text is looked at in lower case for it).
static WORD_REGEXES: [OnceLock<Regex>; 3] = [const { OnceLock::new() }; 3];

/// Where a value that starts at `start` ends: at its closing quote when it is quoted, else
/// at the next space, `;`, `&`, `,` or quote.
fn value_end(bytes: &[u8], start: usize) -> usize {
    match bytes.get(start) {
        Some(&quote @ (b'"' | b'\'')) => bytes[start + 1..]
            .iter()
            .position(|&byte| byte == quote)
            .map_or(bytes.len(), |end| start + 1 + end),
        _ => bytes[start..]
            .iter()
            .position(|byte| {
                byte.is_ascii_whitespace() || matches!(byte, b';' | b'&' | b',' | b'"' | b'\'')
            })
            .map_or(bytes.len(), |end| start + end),
    }
}

/// `text` with what the detectors take for a secret replaced by `[secret: RULE]`: a URL's
/// password, each match of a token format or value shape, the value after a secret name
/// (as [`is_secret_variable`] judges names) and `=`, an `Authorization` header's credentials,
/// and the password of `-u USER:PASSWORD`. A quoted value goes up to its closing quote.
/// Best effort, for text a person reads later (the record), never for a check.
pub fn redact(text: &str) -> String {
    let bytes = text.as_bytes();
    // 1. The spans to replace, each with its rule.
    let mut spans: Vec<(usize, usize, &str)> = Vec::new();
    let mut rest = 0;
    while let Some(start) = find(&bytes[rest..], b"://") {
        let after = rest + start + 3;
        let authority_end = bytes[after..]
            .iter()
            .position(|byte| byte.is_ascii_whitespace() || matches!(byte, b'"' | b'\''))
            .map_or(bytes.len(), |end| after + end);
        let authority = &bytes[after..authority_end];
        // The user information ends at the last `@` before the path: a password may hold `/`.
        if let Some(at) = authority.iter().rposition(|&byte| byte == b'@')
            && let Some(colon) = authority[..at].iter().position(|&byte| byte == b':')
            && colon + 1 < at
        {
            spans.push((after + colon + 1, after + at, "url-password"));
        }
        rest = after;
    }
    for index in VALUE_RULES.matches(bytes).iter() {
        let Some((id, pattern, regex)) = VALUE_REGEXES.get(index) else {
            continue;
        };
        // The patterns are constants of this file; a unit test compiles them.
        let regex = regex.get_or_init(|| Regex::new(pattern).expect("a value rule compiles"));
        for found in regex.find_iter(bytes) {
            let (mut start, mut end) = (found.start(), found.end());
            if let Some(equals) = found.as_bytes().iter().position(|&byte| byte == b'=') {
                // A `key=value` shape matches the separator before the key, the key and the
                // value's first byte: the separator stays, the whole value goes.
                if found
                    .as_bytes()
                    .first()
                    .is_some_and(|b| !b.is_ascii_alphanumeric())
                {
                    start += 1;
                }
                let value = found.start() + equals + 1;
                let value = value
                    + bytes[value..]
                        .iter()
                        .take_while(|byte| byte.is_ascii_whitespace())
                        .count();
                end = value_end(bytes, value).max(end);
            }
            spans.push((start, end, id));
        }
    }
    let lower = bytes.to_ascii_lowercase();
    for ((id, pattern, hint), regex) in WORD_RULES.iter().zip(&WORD_REGEXES) {
        if find(&lower, hint).is_none() {
            continue;
        }
        // Constants of this file; a unit test runs them.
        let regex =
            regex.get_or_init(|| Regex::new(pattern).expect("a redaction pattern compiles"));
        for found in regex.captures_iter(bytes) {
            let Some(whole) = found.get(0) else { continue };
            if let Some(name) = found.get(1)
                && !is_secret_name(
                    &String::from_utf8_lossy(name.as_bytes()).replace(['-', '.'], "_"),
                )
            {
                continue;
            }
            let mut value = whole.end();
            let quoted = matches!(bytes.get(value), Some(b'"' | b'\''));
            if quoted {
                value += 1;
            }
            let end = if quoted {
                value_end(bytes, value - 1)
            } else {
                value_end(bytes, value)
            };
            if end > value {
                spans.push((value, end, id));
            }
        }
    }
    // 2. Merged where they overlap, then replaced from the start.
    spans.sort();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (start, end, id) in spans {
        if start < at {
            at = at.max(end);
            continue;
        }
        out.push_str(&String::from_utf8_lossy(&bytes[at..start]));
        out.push_str(&format!("[secret: {id}]"));
        at = end;
    }
    out.push_str(&String::from_utf8_lossy(&bytes[at..]));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A remembered verdict is the verdict of the value as it is now: a variable whose value
    /// changes gets the new value's verdict, also once the verdicts kept were forgotten.
    #[test]
    fn a_remembered_verdict_follows_the_variable_s_value() {
        let token = format!("ghp_{}", "a".repeat(36));
        let name = OsStr::new("TOOLHOST_TEST_REMEMBERED");
        for _ in 0..2 {
            assert!(!is_secret_variable_remembered(name, OsStr::new("plain")));
            assert!(is_secret_variable_remembered(name, OsStr::new(&token)));
            assert!(!is_secret_variable_remembered(name, OsStr::new("plain")));
        }
        for n in 0..MAX_REMEMBERED + 1 {
            let value = format!("value-{n}");
            assert_eq!(
                is_secret_variable_remembered(name, OsStr::new(&value)),
                is_secret_variable(name, OsStr::new(&value))
            );
        }
        assert!(is_secret_variable_remembered(name, OsStr::new(&token)));
        assert!(is_secret_variable_remembered(
            OsStr::new("API_KEY"),
            OsStr::new("x")
        ));
    }

    #[test]
    fn redaction_hides_what_the_value_detectors_find_and_keeps_the_rest() {
        assert_eq!(
            redact("git clone https://bob:hunter2@example.com/r.git && ls"),
            "git clone https://bob:[secret: url-password]@example.com/r.git && ls"
        );
        let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.sig";
        assert_eq!(
            redact(&format!("curl -H 'X-Auth: {jwt}' x")),
            "curl -H 'X-Auth: [secret: jwt]' x"
        );
        assert_eq!(
            redact("psql 'host=db password=s3cret dbname=app'"),
            "psql 'host=db [secret: connection-string-password] dbname=app'"
        );
        assert_eq!(redact("echo hello"), "echo hello");
        for (command, redacted) in [
            (
                "PGPASSWORD=pw psql",
                "PGPASSWORD=[secret: secret-name] psql",
            ),
            (
                "GITHUB_TOKEN=ghx make",
                "GITHUB_TOKEN=[secret: secret-name] make",
            ),
            (
                "tool --password='a b' x",
                "tool --password='[secret: secret-name]' x",
            ),
            (
                "curl -H 'Authorization: Bearer abc.def' x",
                "curl -H 'Authorization: Bearer [secret: authorization]' x",
            ),
            ("curl -u bob:pw x", "curl -u bob:[secret: user-password] x"),
            (
                "git clone https://u:p@ss/w@host/r",
                "git clone https://u:[secret: url-password]@host/r",
            ),
            ("make CC=gcc", "make CC=gcc"),
            ("ls é=ü", "ls é=ü"),
        ] {
            assert_eq!(redact(command), redacted, "{command}");
        }
    }

    fn secret(name: &str, value: &str) -> bool {
        is_secret_variable(OsStr::new(name), OsStr::new(value))
    }

    #[test]
    fn variables_named_like_secrets_or_holding_a_password_url_are_secret() {
        for name in [
            "API_KEY",
            "AWS_SECRET_ACCESS_KEY",
            "GITHUB_TOKEN",
            "DB_PASSWORD",
            "MYSQL_PWD",
            "GITHUB_PAT",
            "NPM_AUTH",
            "SENTRY_DSN",
            "PASSWD",
            "PASS",
            "CREDENTIALS",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "AUTH_HEADER",
            "HTTP_AUTHORIZATION",
            "GPG_PASSPHRASE",
            "REGISTRY_CREDS",
            "session_cookie",
        ] {
            assert!(secret(name, "x"), "{name} passes");
        }
        for value in [
            "postgres://u:pw@db.example.com/app",
            "redis://:pw@localhost:6379",
            "--url=https://me:hunter2@example.com",
        ] {
            assert!(secret("DATABASE_URL", value), "{value} passes");
        }
    }

    #[test]
    fn ordinary_variables_and_paths_are_not_secret() {
        for name in [
            "PATH",
            "LD_LIBRARY_PATH",
            "PYTHONPATH",
            "MANPATH",
            "SECRET_PATH",
            "PWD",
            "OLDPWD",
            "HOME",
            "USER",
            "LANG",
            "TERM",
            "SHELL",
            "GIT_AUTHOR_NAME",
            "GIT_AUTHOR_EMAIL",
            "COMPASS",
            "PATTERN",
            "CARGO_HOME",
            "XDG_RUNTIME_DIR",
            "EDITOR",
        ] {
            assert!(!secret(name, "x"), "{name} is withheld");
        }
        for value in [
            "https://example.com/path",
            "https://user@example.com/",
            "postgres://db.example.com:5432/app",
            "ssh://git@github.com:22/org/repo",
            "a:b@c without a scheme",
        ] {
            assert!(!secret("SOME_URL", value), "{value} is withheld");
        }
    }

    fn rule(value: &str) -> Option<&'static str> {
        secret_value_rule(OsStr::new(value))
    }

    #[test]
    fn every_value_rule_compiles() {
        for rule in value_rules() {
            assert!(
                Regex::new(rule.pattern).is_ok(),
                "{} does not compile",
                rule.id
            );
        }
        assert_eq!(VALUE_RULES.len(), value_rules().count());
    }

    #[test]
    fn names_holding_the_new_secret_words_are_secret() {
        for name in [
            "CI_JOB_JWT",
            "JWT",
            "BEARER_HEADER",
            "APP_PRIVATE",
            "SIGNING_SALT",
            "SLACK_WEBHOOK_URL",
            "PG_CONN",
            "DB_CONN_URI",
            "AZURE_STORAGE_CONNECTION_STRING",
            "ConnectionStrings__Default",
        ] {
            assert!(secret(name, "x"), "{name} passes");
        }
        for name in [
            "SSH_CONNECTION",
            "CONNECT_TIMEOUT",
            "JWTISH",
            "PRIVATEER",
            "WEBHOOKS_ENABLED",
        ] {
            assert!(!secret(name, "x"), "{name} is withheld");
        }
    }

    #[test]
    fn connection_strings_with_a_password_are_secret_by_value() {
        for value in [
            "host=db user=u password=pw",
            "host=db user=u PASSWORD = pw",
            "jdbc:postgresql://db:5432/app?user=u&password=pw",
            "jdbc:sqlserver://db;user=u;Password=pw",
            "Driver={ODBC};Server=db;Uid=u;Pwd=pw;",
            "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=abc123==;EndpointSuffix=core.windows.net",
            "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey=abc=",
            "BlobEndpoint=https://a.blob.core.windows.net/;SharedAccessSignature=sv=2020&sig=abc",
            "--db-password=hunter2",
        ] {
            assert_eq!(
                rule(value),
                Some("connection-string-password"),
                "{value} passes"
            );
            assert!(secret("PG", value), "{value} passes");
        }
        for value in [
            "host=db user=u",
            "password=",
            "password_prompt=true",
            "Server=db;Trusted_Connection=True;",
            "AccountName=acct;EndpointSuffix=core.windows.net",
        ] {
            assert_eq!(rule(value), None, "{value} is withheld");
        }
    }

    #[test]
    fn jwts_and_private_keys_are_secret_by_value() {
        let jwt = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.\
                   eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ.\
                   SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c";
        assert_eq!(rule(jwt), Some("jwt"));
        assert_eq!(rule(&format!("Bearer {jwt}")), Some("jwt"));
        assert_eq!(
            rule("-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n-----END OPENSSH PRIVATE KEY-----"),
            Some("private-key")
        );
        assert_eq!(rule("-----BEGIN RSA PRIVATE KEY-----"), Some("private-key"));
        // Not a JWT: a dotted version, a base64 blob of one part.
        assert_eq!(rule("eyes.eyebrows.eyelids"), None);
        assert_eq!(rule("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"), None);
        assert_eq!(rule("-----BEGIN PUBLIC KEY-----"), None);
    }

    #[test]
    fn webhook_urls_with_a_secret_path_are_secret_by_value() {
        for (value, id) in [
            (
                "https://hooks.slack.com/services/T0000/B0000/XXXXXXXXXXXXXXXX",
                "slack-webhook",
            ),
            (
                "https://hooks.slack.com/workflows/T0000/A0000/123/abcdef",
                "slack-webhook",
            ),
            (
                "https://discord.com/api/webhooks/123456789/abcDEF_-xyz",
                "discord-webhook",
            ),
            (
                "https://ptb.discordapp.com/api/webhooks/123456789/abcDEF",
                "discord-webhook",
            ),
            (
                "https://contoso.webhook.office.com/webhookb2/a-b-c@d-e/IncomingWebhook/f/g",
                "teams-webhook",
            ),
            (
                "https://outlook.office.com/webhook/a-b-c@d-e/IncomingWebhook/f/g",
                "teams-webhook",
            ),
            (
                "https://prod-1.westus.logic.azure.com:443/workflows/abc/triggers/manual/paths/invoke?api-version=1&sp=x&sv=1.0&sig=abc",
                "teams-webhook",
            ),
            (
                "https://chat.googleapis.com/v1/spaces/AAAA/messages?key=k&token=t",
                "google-chat-webhook",
            ),
        ] {
            assert_eq!(rule(value), Some(id), "{value}");
        }
        for value in [
            "https://hooks.slack.com/",
            "https://discord.com/channels/123/456",
            "https://example.com/webhook",
            "https://outlook.office.com/mail/",
        ] {
            assert_eq!(rule(value), None, "{value} is withheld");
        }
    }

    #[test]
    fn well_known_token_formats_are_secret_by_value() {
        let a36 = "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8";
        assert_eq!(a36.len(), 36);
        let cases = [
            (format!("ghp_{a36}"), "github-token"),
            (format!("gho_{a36}"), "github-token"),
            (format!("ghu_{a36}"), "github-token"),
            (format!("ghs_{a36}"), "github-token"),
            (format!("ghr_{a36}"), "github-token"),
            (
                format!("github_pat_11ABCDEFG0{a36}_{a36}"),
                "github-fine-grained-pat",
            ),
            ("glpat-xxxxxxxxxxxxxxxxxxxx".to_owned(), "gitlab-pat"),
            ("xoxb-1234567890-abcdefghij".to_owned(), "slack-token"),
            ("xoxp-1234567890-abcdefghij".to_owned(), "slack-token"),
            ("sk_live_4eC39HqLyjWDarjtT1zdp7dc".to_owned(), "stripe-key"),
            ("rk_live_4eC39HqLyjWDarjtT1zdp7dc".to_owned(), "stripe-key"),
            (format!("sk-{a36}"), "openai-api-key"),
            (format!("sk-proj-{a36}"), "openai-api-key"),
            (format!("sk-ant-api03-{a36}"), "anthropic-api-key"),
            (format!("hf_{a36}"), "huggingface-token"),
            (format!("npm_{a36}"), "npm-token"),
            (format!("pypi-AgEIcHlwaS5vcmc{a36}{a36}"), "pypi-token"),
            ("AKIAIOSFODNN7EXAMPLE".to_owned(), "aws-access-key-id"),
            ("ASIAIOSFODNN7EXAMPLE".to_owned(), "aws-access-key-id"),
            (
                format!("--header=Authorization: token ghp_{a36}"),
                "github-token",
            ),
        ];
        for (value, id) in &cases {
            assert_eq!(rule(value), Some(*id), "{value}");
            assert!(secret("STRIPE_SK", value), "{value} passes");
        }
        for value in [
            "ghp_short",
            "sk-short",
            "task-runner-for-the-monorepo-builds",
            "risk-assessment-module-name-long",
            "hf_hub_offline",
            "npm_config_registry",
            "AKIA",
            "xoxb-",
        ] {
            assert_eq!(rule(value), None, "{value} is withheld");
        }
    }

    #[test]
    fn path_like_values_are_never_taken_by_value() {
        let a36 = "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8";
        for value in [
            format!("/opt/sk-{a36}/bin:/usr/bin"),
            "/usr/local/bin:/usr/bin::/bin".to_owned(),
            format!("/srv/ghp_{a36}"),
        ] {
            assert!(!secret("SOME_DIRS", &value), "{value} is withheld");
        }
        // Names ending in PATH are never secret, whatever their value.
        assert!(!secret("MY_PATH", "password=pw"));
        // A secret name stays secret with a path value.
        assert!(secret("GOOGLE_APPLICATION_CREDENTIALS", "/home/u/key.json"));
    }

    #[test]
    fn an_ordinary_environment_passes_untouched() {
        let environment = [
            (
                "PATH",
                "/home/u/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            ),
            (
                "LS_COLORS",
                "rs=0:di=01;34:ln=01;36:mh=00:pi=40;33:so=01;35:do=01;35:bd=40;33;01:cd=40;33;01:or=40;31;01:mi=00:su=37;41:sg=30;43:ca=30;41:tw=30;42:ow=34;42:st=37;44:ex=01;32:*.tar=01;31:*.tgz=01;31:*.zip=01;31:*.jpg=01;35:*.mp3=00;36:",
            ),
            ("SSH_CONNECTION", "192.0.2.10 51234 192.0.2.20 22"),
            ("SSH_CLIENT", "192.0.2.10 51234 22"),
            ("SSH_TTY", "/dev/pts/0"),
            ("LANG", "en_US.UTF-8"),
            ("LC_ALL", "C.UTF-8"),
            ("DISPLAY", ":0"),
            ("WAYLAND_DISPLAY", "wayland-0"),
            ("TERM", "xterm-256color"),
            ("COLORTERM", "truecolor"),
            ("HOME", "/home/u"),
            ("USER", "u"),
            ("LOGNAME", "u"),
            ("SHELL", "/bin/bash"),
            ("PWD", "/home/u/project"),
            ("OLDPWD", "/home/u"),
            ("SHLVL", "2"),
            ("EDITOR", "vim"),
            ("PAGER", "less"),
            ("LESS", "-R -F -X"),
            ("LESSOPEN", "| /usr/bin/lesspipe %s"),
            ("MANPATH", "/usr/share/man:/usr/local/share/man"),
            ("XDG_RUNTIME_DIR", "/run/user/1000"),
            ("XDG_DATA_DIRS", "/usr/local/share:/usr/share"),
            ("XDG_CONFIG_DIRS", "/etc/xdg"),
            ("XDG_SESSION_TYPE", "wayland"),
            (
                "DBUS_SESSION_BUS_ADDRESS",
                "unix:path=/run/user/1000/bus,guid=0123456789abcdef0123456789abcdef",
            ),
            (
                "PS1",
                r"\[\e]0;\u@\h: \w\a\]${debian_chroot:+($debian_chroot)}\u@\h:\w\$ ",
            ),
            (
                "PROMPT_COMMAND",
                "history -a; printf '\\033]0;%s\\007' \"$PWD\"",
            ),
            ("HISTCONTROL", "ignoreboth"),
            ("HISTSIZE", "10000"),
            ("HISTFILE", "/home/u/.bash_history"),
            ("GIT_AUTHOR_NAME", "A U Thor"),
            ("GIT_AUTHOR_EMAIL", "author@example.com"),
            ("GIT_COMMITTER_NAME", "A U Thor"),
            ("GIT_EDITOR", "vim"),
            ("GIT_PAGER", "less -FRX"),
            ("GIT_SSH_COMMAND", "ssh -o IdentitiesOnly=yes"),
            ("GIT_TERMINAL_PROMPT", "0"),
            ("CARGO_HOME", "/home/u/.cargo"),
            ("CARGO_TARGET_DIR", "/home/u/.cache/target"),
            ("CARGO_INCREMENTAL", "0"),
            ("CARGO_TERM_COLOR", "always"),
            ("RUSTUP_TOOLCHAIN", "stable-x86_64-unknown-linux-gnu"),
            ("RUST_LOG", "info,toolhost=debug"),
            ("RUST_BACKTRACE", "1"),
            ("npm_config_registry", "https://registry.npmjs.org/"),
            ("npm_config_cache", "/home/u/.npm"),
            (
                "npm_config_user_agent",
                "npm/10.8.2 node/v22.11.0 linux x64 workspaces/false",
            ),
            ("npm_package_name", "my-app"),
            ("npm_lifecycle_event", "test"),
            ("NODE_ENV", "development"),
            ("NODE_OPTIONS", "--max-old-space-size=4096"),
            ("NVM_DIR", "/home/u/.nvm"),
            ("VIRTUAL_ENV", "/home/u/project/.venv"),
            ("PYTHONDONTWRITEBYTECODE", "1"),
            ("PIP_INDEX_URL", "https://pypi.org/simple"),
            ("GOPATH", "/home/u/go"),
            ("GOFLAGS", "-mod=mod"),
            ("JAVA_HOME", "/usr/lib/jvm/java-21-openjdk-amd64"),
            ("DOCKER_HOST", "unix:///run/user/1000/docker.sock"),
            ("KUBECONFIG", "/home/u/.kube/config"),
            ("AWS_PROFILE", "default"),
            ("AWS_REGION", "eu-west-1"),
            ("HTTP_PROXY", "http://proxy.example.com:3128"),
            ("NO_PROXY", "localhost,127.0.0.1,.example.com"),
            ("SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt"),
            ("TZ", "Europe/Paris"),
            ("TMUX", "/tmp/tmux-1000/default,1234,0"),
            ("VSCODE_IPC_HOOK_CLI", "/run/user/1000/vscode-ipc-1234.sock"),
            ("TERM_PROGRAM", "vscode"),
            ("CI", "true"),
            ("GITHUB_ACTIONS", "true"),
            ("GITHUB_REPOSITORY", "org/repo"),
            ("GITHUB_SHA", "ffac537e6cbbf934b08745a378932722df287a53"),
            ("GITHUB_RUN_ID", "1234567890"),
            ("RUNNER_OS", "Linux"),
            ("DATABASE_URL", "postgres://db.example.com:5432/app"),
            ("GPG_TTY", "/dev/pts/0"),
            ("MAIL", "/var/mail/u"),
            ("_", "/usr/bin/env"),
        ];
        for (name, value) in environment {
            assert!(!secret(name, value), "{name}={value} is withheld");
        }
    }
}
