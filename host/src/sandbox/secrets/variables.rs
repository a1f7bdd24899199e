//! Which host variables hold secrets, so that a confined command does not inherit them.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

/// Words that make a variable's name secret wherever they occur in it (in upper case).
const SECRET_SUBSTRINGS: &[&str] = &[
    "KEY",
    "SECRET",
    "TOKEN",
    "PASSWORD",
    "PASSPHRASE",
    "CREDENTIAL",
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
];

/// Whether a host variable holds a secret, so that a confined command does not inherit it.
///
/// 1. `PATH`, every name ending in `PATH`, `PWD` and `OLDPWD` are never secret.
/// 2. A name holding one of the words `KEY`, `SECRET`, `TOKEN`, `PASSWORD`, `PASSPHRASE` or
///    `CREDENTIAL` anywhere is secret.
/// 3. A name holding `PWD`, `PASS`, `PASSWD`, `PAT`, `AUTH`, `AUTHORIZATION`, `CRED`, `CREDS`,
///    `DSN` or `COOKIE` as a whole `_`-separated word is secret.
/// 4. A value holding a URL with a password (`scheme://user:password@host`) is secret.
pub fn is_secret_variable(name: &OsStr, value: &OsStr) -> bool {
    let name = name.to_string_lossy().to_ascii_uppercase();
    if name.ends_with("PATH") || name == "PWD" || name == "OLDPWD" {
        return false;
    }
    SECRET_SUBSTRINGS.iter().any(|word| name.contains(word))
        || name.split('_').any(|word| SECRET_WORDS.contains(&word))
        || has_url_with_password(value.as_bytes())
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
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
