//! The rules that tell a file holding a secret by its content.
//!
//! Two kinds of rule look at a file:
//!
//! - Token formats and private-key blocks: the rules of gitleaks (`gitleaks.toml`, vendored
//!   unchanged from <https://github.com/gitleaks/gitleaks>, MIT, its licence in
//!   `gitleaks.LICENSE`). [`SHIPPED`] selects the rules used here by id.
//! - Keys named like a secret (`password`, `secret`, `token`, `api_key`, ...) with a literal
//!   value, in INI, TOML, YAML, JSON, XML, `.properties` and `.env` files: the rule
//!   [`KEY_VALUE_RULE`] of this module.
//!
//! A file is checked in this order:
//!
//! 1. One pass of an Aho-Corasick automaton finds which rules' keywords the file mentions
//!    (case-insensitively, as gitleaks does).
//! 2. Only those rules' regular expressions run over the file.
//! 3. A match counts when its secret passes the rule's entropy threshold and no allow-list
//!    (the rule's, or the global one of `gitleaks.toml`) takes it out.

use std::collections::HashMap;

use aho_corasick::AhoCorasick;
use regex::bytes::{Regex, RegexBuilder};
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// The gitleaks configuration, as published upstream (commit b58d3f1 of `gitleaks/gitleaks`).
const GITLEAKS_TOML: &str = include_str!("gitleaks.toml");

/// The gitleaks rules this host uses, by id: private keys and the token formats of tools a
/// developer's home holds the credentials of. Rules that need context around a generic value
/// (`generic-api-key`, `curl-auth-*`) and rules for ids that are not secrets (`*-client-id`)
/// are left out.
pub const SHIPPED: &[&str] = &[
    // Keys.
    "private-key",
    "age-secret-key",
    "jwt",
    // Source hosting.
    "github-pat",
    "github-oauth",
    "github-app-token",
    "github-fine-grained-pat",
    "github-refresh-token",
    "gitlab-pat",
    "gitlab-pat-routable",
    "gitlab-ptt",
    "gitlab-rrt",
    "gitlab-deploy-token",
    "gitlab-runner-authentication-token",
    "gitlab-runner-authentication-token-routable",
    "gitlab-feed-token",
    "gitlab-scim-token",
    "gitlab-oauth-app-secret",
    "gitlab-kubernetes-agent-token",
    "bitbucket-client-secret",
    // Chat and mail.
    "slack-app-token",
    "slack-bot-token",
    "slack-config-access-token",
    "slack-config-refresh-token",
    "slack-legacy-bot-token",
    "slack-legacy-token",
    "slack-legacy-workspace-token",
    "slack-user-token",
    "slack-webhook-url",
    "microsoft-teams-webhook",
    "telegram-bot-api-token",
    "sendgrid-api-token",
    "mailgun-private-api-token",
    // Payments.
    "stripe-access-token",
    // AI services.
    "openai-api-key",
    "anthropic-api-key",
    "anthropic-admin-api-key",
    "huggingface-access-token",
    "huggingface-organization-api-token",
    "cohere-api-token",
    "perplexity-api-key",
    // Package registries.
    "npm-access-token",
    "pypi-upload-token",
    "rubygems-api-token",
    "clojars-api-token",
    // Cloud, cluster and deployment.
    "aws-access-token",
    "gcp-api-key",
    "azure-ad-client-secret",
    "digitalocean-access-token",
    "digitalocean-pat",
    "digitalocean-refresh-token",
    "databricks-api-token",
    "flyio-access-token",
    "heroku-api-key-v2",
    "pulumi-api-token",
    "hashicorp-tf-api-token",
    "openshift-user-token",
    "grafana-cloud-api-token",
    "grafana-service-account-token",
    "sentry-user-token",
    "sentry-org-token",
    // Secret management.
    "1password-service-account-token",
    "doppler-api-token",
    "vault-service-token",
    "vault-batch-token",
];

/// The id of this module's own rule: a key named like a secret with a literal value.
pub const KEY_VALUE_RULE: &str = "secret-key-value";

/// The version of this module's own rule; part of [`Rules::version`].
const KEY_VALUE_VERSION: u32 = 1;

/// The longest line the key-value rule looks at (longer ones are data, not settings).
const MAX_LINE: usize = 4096;

/// The rule set could not be built.
#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    /// `gitleaks.toml` does not parse.
    #[error("the vendored gitleaks rules do not parse: {0}")]
    Parse(#[from] toml::de::Error),
    /// A pattern of this module does not compile.
    #[error("a pattern of the secret scan does not compile: {0}")]
    Pattern(#[from] regex::Error),
    /// The keyword automaton cannot be built.
    #[error("the keyword automaton of the secret scan cannot be built: {0}")]
    Keywords(#[from] aho_corasick::BuildError),
}

#[derive(Deserialize)]
struct Config {
    #[serde(default)]
    allowlist: Option<RawAllowlist>,
    #[serde(default)]
    rules: Vec<RawRule>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawRule {
    id: String,
    #[serde(default)]
    regex: Option<String>,
    #[serde(default)]
    keywords: Vec<String>,
    #[serde(default)]
    entropy: Option<f64>,
    #[serde(default)]
    secret_group: Option<usize>,
    #[serde(default)]
    allowlists: Vec<RawAllowlist>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawAllowlist {
    #[serde(default)]
    regexes: Vec<String>,
    #[serde(default)]
    regex_target: Option<String>,
    #[serde(default)]
    stopwords: Vec<String>,
    #[serde(default)]
    paths: Vec<String>,
    #[serde(default)]
    condition: Option<String>,
}

/// What an allow-list's regexes are matched against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Secret,
    Match,
    Line,
}

/// An allow-list of gitleaks: a match is no finding when one of its regexes or stopwords fits.
#[derive(Debug)]
struct Allowlist {
    regexes: Vec<Regex>,
    target: Target,
    /// Lowercase.
    stopwords: Vec<String>,
}

impl Allowlist {
    /// The allow-list, or `None` where it depends on a file's path (paths of the configuration
    /// trees are not those of a repository: such lists never take a finding out here).
    fn of(raw: &RawAllowlist, id: &str) -> Option<Allowlist> {
        if !raw.paths.is_empty() || raw.condition.as_deref().is_some_and(|c| c != "OR") {
            return None;
        }
        let target = match raw.regex_target.as_deref() {
            None | Some("secret") => Target::Secret,
            Some("match") => Target::Match,
            Some("line") => Target::Line,
            Some(_) => return None,
        };
        let regexes = raw
            .regexes
            .iter()
            .filter_map(|pattern| match compile(pattern) {
                Ok(regex) => Some(regex),
                Err(error) => {
                    tracing::debug!(rule = id, %error, "an allow-list pattern does not compile");
                    None
                }
            })
            .collect();
        Some(Allowlist {
            regexes,
            target,
            stopwords: raw.stopwords.iter().map(|w| w.to_lowercase()).collect(),
        })
    }

    fn allows(&self, secret: &[u8], matched: &[u8], line: &[u8]) -> bool {
        let target = match self.target {
            Target::Secret => secret,
            Target::Match => matched,
            Target::Line => line,
        };
        if self.regexes.iter().any(|regex| regex.is_match(target)) {
            return true;
        }
        let lower = secret.to_ascii_lowercase();
        self.stopwords
            .iter()
            .any(|word| contains(&lower, word.as_bytes()))
    }
}

/// A token rule of gitleaks, compiled.
#[derive(Debug)]
struct TokenRule {
    id: String,
    regex: Regex,
    entropy: Option<f64>,
    secret_group: Option<usize>,
    allowlists: Vec<Allowlist>,
}

/// The rules a file is checked with.
#[derive(Debug)]
pub struct Rules {
    tokens: Vec<TokenRule>,
    /// The keywords of all rules, lowercase (the automaton matches case-insensitively).
    keywords: AhoCorasick,
    /// For each keyword, the rules it lets run: an index into `tokens`, or `None` for the
    /// key-value rule.
    keyword_rules: Vec<Vec<Option<usize>>>,
    global: Option<Allowlist>,
    key_value: Regex,
    xml_element: Regex,
}

/// Identifies the rule set (the vendored rules, the ids shipped, this module's own rule): a
/// cache made with another version is no use. Computed without compiling the rules, so a scan
/// that the cache answers whole compiles none.
pub fn version() -> &'static str {
    static VERSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    VERSION.get_or_init(|| {
        let mut hasher = Sha256::new();
        hasher.update(GITLEAKS_TOML.as_bytes());
        for id in SHIPPED {
            hasher.update(id.as_bytes());
            hasher.update([0]);
        }
        hasher.update(KEY_VALUE_VERSION.to_le_bytes());
        hasher
            .finalize()
            .iter()
            .take(8)
            .map(|byte| format!("{byte:02x}"))
            .collect()
    })
}

/// Keys whose literal value is a secret: the key, lowercase with `_`, `-` and `.` taken out,
/// ends with one of these (`db_password`, `githubToken`, `client-secret`, `API_KEY`).
const SECRET_KEY_ENDINGS: &[&str] = &[
    "password",
    "passwd",
    "passphrase",
    "secret",
    "secretkey",
    "token",
    "apikey",
    "accesskey",
    "privatekey",
];

/// The keywords that let the key-value rule run (each ending above contains one).
const KEY_VALUE_KEYWORDS: &[&str] = &[
    "passw",
    "passph",
    "secret",
    "token",
    "apikey",
    "api_key",
    "api-key",
    "accesskey",
    "access_key",
    "access-key",
    "privatekey",
    "private_key",
    "private-key",
];

/// Values that are settings, not secrets.
const NOT_SECRET_VALUES: &[&str] = &[
    "true",
    "false",
    "yes",
    "no",
    "on",
    "off",
    "null",
    "none",
    "nil",
    "undefined",
    "prompt",
    "keyring",
    "required",
    "optional",
];

/// Parts that mark a value as a placeholder.
const PLACEHOLDER_PARTS: &[&str] = &["changeme", "example", "your_", "your-", "xxxx", "****"];

impl Rules {
    /// The shipped rules, compiled. A gitleaks rule whose pattern does not compile with the
    /// `regex` crate is left out (logged at debug level; the unit tests check none is).
    pub fn new() -> Result<Rules, RulesError> {
        let config: Config = toml::from_str(GITLEAKS_TOML)?;
        let mut tokens = Vec::new();
        let mut keyword_rules: HashMap<String, Vec<Option<usize>>> = HashMap::new();
        for raw in config.rules {
            if !SHIPPED.contains(&raw.id.as_str()) {
                continue;
            }
            let Some(pattern) = &raw.regex else { continue };
            let regex = match compile(pattern) {
                Ok(regex) => regex,
                Err(error) => {
                    tracing::debug!(rule = raw.id, %error, "a gitleaks rule does not compile");
                    continue;
                }
            };
            let index = tokens.len();
            for keyword in &raw.keywords {
                keyword_rules
                    .entry(keyword.to_lowercase())
                    .or_default()
                    .push(Some(index));
            }
            tokens.push(TokenRule {
                allowlists: raw
                    .allowlists
                    .iter()
                    .filter_map(|list| Allowlist::of(list, &raw.id))
                    .collect(),
                id: raw.id,
                regex,
                entropy: raw.entropy,
                secret_group: raw.secret_group,
            });
        }
        for keyword in KEY_VALUE_KEYWORDS {
            keyword_rules
                .entry((*keyword).to_owned())
                .or_default()
                .push(None);
        }
        let mut keyword_list: Vec<(String, Vec<Option<usize>>)> =
            keyword_rules.into_iter().collect();
        keyword_list.sort_by(|a, b| a.0.cmp(&b.0));
        let keywords = AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .build(keyword_list.iter().map(|(keyword, _)| keyword))?;
        Ok(Rules {
            tokens,
            keywords,
            keyword_rules: keyword_list.into_iter().map(|(_, rules)| rules).collect(),
            global: config
                .allowlist
                .as_ref()
                .and_then(|list| Allowlist::of(list, "global")),
            // 1. Optionally quoted key; 2. `=` or `:`; 3. a quoted or bare value.
            key_value: compile(
                r#"(?:^|[^A-Za-z0-9_.\-])["']?([A-Za-z][A-Za-z0-9_.\-]{0,80})["']?[ \t]*[:=][ \t]*("[^"]*"|'[^']*'|[^\s,;}\]#]*)"#,
            )?,
            xml_element: compile(r"<([A-Za-z][\w.\-]{0,80})>([^<\s]*)</([A-Za-z][\w.\-]{0,80})>")?,
        })
    }

    /// The ids of the token rules in use.
    pub fn token_rule_ids(&self) -> impl Iterator<Item = &str> {
        self.tokens.iter().map(|rule| rule.id.as_str())
    }

    /// The id of the first rule that finds a secret in `content`, if any.
    pub fn find(&self, content: &[u8]) -> Option<&str> {
        // 1. Which rules the file's keywords let run.
        let mut run = vec![false; self.tokens.len()];
        let mut key_value = false;
        for found in self.keywords.find_overlapping_iter(content) {
            for rule in &self.keyword_rules[found.pattern().as_usize()] {
                match rule {
                    Some(index) => run[*index] = true,
                    None => key_value = true,
                }
            }
        }
        // 2. Those rules, token formats first.
        for (rule, _) in self.tokens.iter().zip(&run).filter(|(_, run)| **run) {
            if self.token_found(rule, content) {
                return Some(&rule.id);
            }
        }
        if key_value && self.key_value_found(content) {
            return Some(KEY_VALUE_RULE);
        }
        None
    }

    /// Whether `rule` matches in `content` with a secret that passes its checks.
    fn token_found(&self, rule: &TokenRule, content: &[u8]) -> bool {
        for captures in rule.regex.captures_iter(content) {
            let Some(whole) = captures.get(0) else {
                continue;
            };
            // As gitleaks: the rule's secret group, else the first group that matched.
            let secret = match rule.secret_group {
                Some(group) if group > 0 => captures.get(group),
                _ => captures
                    .iter()
                    .skip(1)
                    .flatten()
                    .find(|group| !group.is_empty()),
            }
            .map_or(whole.as_bytes(), |group| group.as_bytes());
            // 3. The entropy threshold, then the allow-lists.
            if rule
                .entropy
                .is_some_and(|threshold| shannon_entropy(secret) <= threshold)
            {
                continue;
            }
            let line = line_around(content, whole.start(), whole.end());
            let allowed = rule
                .allowlists
                .iter()
                .chain(&self.global)
                .any(|list| list.allows(secret, whole.as_bytes(), line));
            if !allowed {
                return true;
            }
        }
        false
    }

    /// Whether a line of `content` sets a key named like a secret to a literal value.
    fn key_value_found(&self, content: &[u8]) -> bool {
        for line in content.split(|byte| *byte == b'\n') {
            if line.len() > MAX_LINE {
                continue;
            }
            let trimmed = line.trim_ascii_start();
            if [&b"#"[..], b";", b"//", b"<!--", b"--"]
                .iter()
                .any(|comment| trimmed.starts_with(comment))
            {
                continue;
            }
            for captures in self.key_value.captures_iter(line) {
                if let (Some(key), Some(value)) = (captures.get(1), captures.get(2))
                    && is_secret_key(key.as_bytes())
                    && is_literal_secret(value.as_bytes())
                {
                    return true;
                }
            }
            for captures in self.xml_element.captures_iter(line) {
                if let (Some(open), Some(value), Some(close)) =
                    (captures.get(1), captures.get(2), captures.get(3))
                    && open.as_bytes() == close.as_bytes()
                    && is_secret_key(open.as_bytes())
                    && is_literal_secret(value.as_bytes())
                {
                    return true;
                }
            }
        }
        false
    }
}

/// A pattern compiled for byte content (files need not be UTF-8), its classes ASCII-only as in
/// Go's RE2, for which gitleaks writes them (`\w{50,1000}` in Unicode would be too large).
fn compile(pattern: &str) -> Result<Regex, regex::Error> {
    RegexBuilder::new(pattern).unicode(false).build()
}

/// Whether a key names a secret: lowercase, without `_`, `-` and `.`, it ends with one of
/// [`SECRET_KEY_ENDINGS`].
pub fn is_secret_key(key: &[u8]) -> bool {
    let key: Vec<u8> = key
        .iter()
        .filter(|byte| !matches!(byte, b'_' | b'-' | b'.'))
        .map(u8::to_ascii_lowercase)
        .collect();
    SECRET_KEY_ENDINGS
        .iter()
        .any(|ending| key.ends_with(ending.as_bytes()))
}

/// Whether a value (as written, maybe quoted) is a literal secret, not a setting, a reference
/// or a placeholder:
///
/// - it has 6 or more characters, none of them white space;
/// - it is not a number and not a word such as `true`, `prompt` or `keyring`;
/// - it does not start with `$`, `%`, `<`, `{` or `@` (`${VAR}`, `$ENV{VAR}`, `%VAR%`,
///   `<placeholder>`, `{{ template }}`), nor like a path (`/`, `~/`, `./`);
/// - it holds no placeholder part such as `changeme`, `example` or `xxxx`.
pub fn is_literal_secret(value: &[u8]) -> bool {
    let value = value.trim_ascii();
    let value = match value {
        [b'"', inner @ .., b'"'] | [b'\'', inner @ .., b'\''] => inner,
        other => other,
    };
    if value.len() < 6 || value.iter().any(u8::is_ascii_whitespace) {
        return false;
    }
    if value
        .iter()
        .all(|byte| byte.is_ascii_digit() || matches!(byte, b'.' | b'-' | b'+' | b'_'))
    {
        return false;
    }
    let lower = value.to_ascii_lowercase();
    if NOT_SECRET_VALUES
        .iter()
        .any(|word| lower == word.as_bytes())
    {
        return false;
    }
    if matches!(value[0], b'$' | b'%' | b'<' | b'{' | b'@' | b'/')
        || value.starts_with(b"~/")
        || value.starts_with(b"./")
    {
        return false;
    }
    !PLACEHOLDER_PARTS
        .iter()
        .any(|part| contains(&lower, part.as_bytes()))
}

/// Shannon entropy in bits per byte, as gitleaks computes it.
fn shannon_entropy(data: &[u8]) -> f64 {
    if data.is_empty() {
        return 0.0;
    }
    let mut counts = [0usize; 256];
    for byte in data {
        counts[usize::from(*byte)] += 1;
    }
    let length = data.len() as f64;
    counts
        .iter()
        .filter(|count| **count > 0)
        .map(|count| {
            let frequency = *count as f64 / length;
            -frequency * frequency.log2()
        })
        .sum()
}

/// The line of `content` that holds the bytes from `start` to `end`.
fn line_around(content: &[u8], start: usize, end: usize) -> &[u8] {
    let from = content[..start]
        .iter()
        .rposition(|byte| *byte == b'\n')
        .map_or(0, |at| at + 1);
    let to = content[end..]
        .iter()
        .position(|byte| *byte == b'\n')
        .map_or(content.len(), |at| end + at);
    &content[from..to]
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(haystack, needle).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> Rules {
        Rules::new().expect("rules")
    }

    #[test]
    fn every_shipped_rule_is_in_the_vendored_set_and_compiles() {
        let rules = rules();
        let ids: Vec<&str> = rules.token_rule_ids().collect();
        for id in SHIPPED {
            assert!(ids.contains(id), "{id} is missing or does not compile");
        }
        assert_eq!(ids.len(), SHIPPED.len());
        assert_eq!(version().len(), 16);
    }

    #[test]
    fn token_formats_and_private_keys_are_found_by_their_rule() {
        let rules = rules();
        let key_body = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj\n\
                        MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu\n";
        let cases = [
            (
                format!("-----BEGIN OPENSSH PRIVATE KEY-----\n{key_body}-----END OPENSSH PRIVATE KEY-----\n"),
                "private-key",
            ),
            (
                "oauth_token: ghp_8uMRqXGZ0dJYkWbTq2vLc4NfE7hA1sPx9KoY\n".to_owned(),
                "github-pat",
            ),
            ("glpat-Xr3kQ9vT7mLp2Zs8aBcD\n".to_owned(), "gitlab-pat"),
            (
                "token = xoxb-1234567890-1234567890123-aBcDeFgHiJkLmNoPqRsTuVwX\n".to_owned(),
                "slack-bot-token",
            ),
            (
                "key: sk_live_4eC39HqLyjWDarjtT1zdp7dc\n".to_owned(),
                "stripe-access-token",
            ),
            (
                "hf_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh\n".to_owned(),
                "huggingface-access-token",
            ),
            (
                "//registry.npmjs.org/:_authToken=npm_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8\n"
                    .to_owned(),
                "npm-access-token",
            ),
            (
                "aws_access_key_id = AKIAZ5QW7RT3YPL2MXNV\n".to_owned(),
                "aws-access-token",
            ),
            (
                "{\"id_token\": \"eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c\"}\n"
                    .to_owned(),
                "jwt",
            ),
            (
                format!(
                    "ANTHROPIC_API_KEY=sk-ant-api03-{}AA\n",
                    "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5bC7dE9fG1hJ3kL5mN7pQ9rS1tU3vW5xY7zA9bC1dE3fG5hJ7kL9mN1pQ3"
                ),
                "anthropic-api-key",
            ),
        ];
        for (content, rule) in cases {
            assert_eq!(rules.find(content.as_bytes()), Some(rule), "{content}");
        }
        // The allow-list of the AWS rule: AWS's documented example key is no finding.
        assert_eq!(rules.find(b"AKIAIOSFODNN7EXAMPLE\n"), None);
        // Entropy: a token-shaped run of one letter is no finding.
        assert_eq!(
            rules.find(b"ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n"),
            None
        );
    }

    #[test]
    fn literal_values_of_secret_keys_are_found_and_settings_are_not() {
        let rules = rules();
        let found = [
            "password = hunter2xyz\n",
            "{\"api_key\": \"abcd1234efgh\"}\n",
            "[server]\nclient_secret: 'q8Zr-2mXk'\n",
            "db.password=s3cr3tvalue\n",
            "export GITHUB_TOKEN=abcdef123456\n",
            "<settings><server><password>Zx9!mq2Lp</password></server></settings>\n",
            "<add key=\"ApiKey\" value=\"x\" password=\"p4ssw0rd!\"/>\n",
        ];
        for content in found {
            assert_eq!(
                rules.find(content.as_bytes()),
                Some(KEY_VALUE_RULE),
                "{content}"
            );
        }
        let not_found = [
            "token_limit = 5\n",
            "password_prompt = true\n",
            "password = \"\"\n",
            "password = ${DB_PASSWORD}\n",
            "password = $ENV{DB_PASSWORD}\n",
            "password = <your password here>\n",
            "password: <placeholder>\n",
            "use_keyring = true\n",
            "max_tokens: 4096\n",
            "token: 123456789\n",
            "# password = hunter2xyz\n",
            "; secret = hunter2xyz\n",
            "secret_name = production\n",
            "password = changeme123\n",
            "token_file = ~/.config/tool/token\n",
            "password_command = pass show mail\n",
            "{\"editor.semanticTokenColorCustomizations\": {\"enabled\": true}}\n",
            "<password></password>\n",
        ];
        for content in not_found {
            assert_eq!(rules.find(content.as_bytes()), None, "{content}");
        }
    }

    #[test]
    fn binary_and_odd_content_does_not_break_the_rules() {
        let rules = rules();
        assert_eq!(
            rules.find(&[0xff, 0xfe, 0x00, b't', b'o', b'k', b'e', b'n']),
            None
        );
        assert_eq!(rules.find(b""), None);
        let long_line = vec![b'a'; MAX_LINE * 2];
        assert_eq!(rules.find(&long_line), None);
    }
}
