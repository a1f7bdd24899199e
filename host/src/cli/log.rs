//! `toolhost log`: the record of commands (`--record`) read back, oldest first, filtered.
//!
//! 1. The rotated file (`FILE.1`) is read, then the current one, line by line.
//! 2. A line that is not a JSON object is counted and skipped (a torn last line after a
//!    crash); the count is said on stderr at the end.
//! 3. Each line the filter keeps is printed: as it is with `--json`, else as one line for a
//!    person (`TIME  SCOPE  PLUGIN  EXIT  DURATION  COMMAND`, then what was refused).

use anyhow::{Context, Result};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::args::Cli;
use super::options::record_settings;
use super::out;

/// Which commands to print.
#[derive(Debug, Default)]
pub(crate) struct Filter {
    /// Only this scope's.
    pub(crate) scope: Option<String>,
    /// Only those that ended within this long.
    pub(crate) since: Option<Duration>,
    /// Only those that failed: a non-zero exit, a signal, or a refusal.
    pub(crate) failed: bool,
    /// Only those that exited with this code.
    pub(crate) exit: Option<i32>,
}

impl Filter {
    /// Whether `line` passes, `now_ms` being the time now in Unix milliseconds.
    fn keeps(&self, line: &Value, now_ms: u64) -> bool {
        if let Some(scope) = &self.scope
            && line["scope"].as_str() != Some(scope)
        {
            return false;
        }
        if let Some(since) = self.since {
            let ended = line["ended_ms"].as_u64().unwrap_or(0);
            let since_ms = u64::try_from(since.as_millis()).unwrap_or(u64::MAX);
            if ended < now_ms.saturating_sub(since_ms) {
                return false;
            }
        }
        let exit = line["exit_code"].as_i64();
        if let Some(code) = self.exit
            && exit != Some(i64::from(code))
        {
            return false;
        }
        if self.failed {
            let refused = line["refusals"].as_array().is_some_and(|r| !r.is_empty());
            let signalled = !line["signal"].is_null();
            if exit == Some(0) && !refused && !signalled {
                return false;
            }
        }
        true
    }
}

/// Print the record's commands that `filter` keeps.
pub(crate) fn log(cli: &Cli, filter: &Filter, json: bool) -> Result<ExitCode> {
    let Some(settings) = record_settings(cli)? else {
        anyhow::bail!(
            "there is no record to read: --record is off, or there is no state directory \
             (set --state-dir or --record FILE)"
        );
    };
    let mut rotated = settings.path.clone().into_os_string();
    rotated.push(".1");
    let files = [PathBuf::from(rotated), settings.path.clone()];
    if !files.iter().any(|file| file.exists()) {
        eprintln!(
            "toolhost log: no command is on the record yet ({})",
            settings.path.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let mut unreadable = 0usize;
    for file in files.iter().filter(|file| file.exists()) {
        unreadable += print_file(file, filter, json, now_ms)?;
    }
    if unreadable > 0 {
        eprintln!("toolhost log: {unreadable} lines of the record are not JSON and were skipped");
    }
    Ok(ExitCode::SUCCESS)
}

/// Print the kept lines of one file; how many lines were not JSON objects.
fn print_file(file: &Path, filter: &Filter, json: bool, now_ms: u64) -> Result<usize> {
    let reader = BufReader::new(
        std::fs::File::open(file).with_context(|| format!("reading {}", file.display()))?,
    );
    let mut unreadable = 0;
    for line in reader.split(b'\n') {
        let line = line.with_context(|| format!("reading {}", file.display()))?;
        let Ok(value @ Value::Object(_)) = serde_json::from_slice::<Value>(&line) else {
            unreadable += 1;
            continue;
        };
        if !filter.keeps(&value, now_ms) {
            continue;
        }
        if json {
            out(String::from_utf8_lossy(&line));
        } else {
            out(for_people(&value));
        }
    }
    Ok(unreadable)
}

/// The first millisecond past 9999-12-31T23:59:59Z.
const LAST_RFC3339_MS: u64 = 253_402_300_800_000;

/// One command on one line: `TIME  SCOPE  PLUGIN  EXIT  DURATION  COMMAND`, then what was
/// refused and what the person answered before it, in brackets.
fn for_people(line: &Value) -> String {
    let text = |key: &str| line[key].as_str().unwrap_or("-").to_owned();
    let ended = line["ended_ms"].as_u64().unwrap_or(0);
    let started = line["started_ms"].as_u64().unwrap_or(ended);
    // Past the year 9999 there is no RFC 3339 time: the milliseconds as they are.
    let time = if ended < LAST_RFC3339_MS {
        humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(ended)).to_string()
    } else {
        format!("{ended}ms")
    };
    let how = match (line["exit_code"].as_i64(), line["signal"].as_str()) {
        (_, Some(signal)) => signal.to_owned(),
        (Some(code), None) => format!("exit {code}"),
        (None, None) => "exit ?".to_owned(),
    };
    let took = humantime::format_duration(Duration::from_millis(
        ended.saturating_sub(started) / 100 * 100,
    ));
    let refused: Vec<&str> = line["refusals"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut out = format!(
        "{time}  {}  {}  {how}  {took}  {}",
        text("scope"),
        text("plugin"),
        super::call::one_line(&text("command"))
    );
    if !refused.is_empty() {
        out.push_str(&format!("  [refused: {}]", refused.join(", ")));
    }
    let answers: Vec<String> = line["answers"]
        .as_array()
        .map(|all| {
            all.iter()
                .filter_map(|answer| {
                    Some(format!(
                        "{} {}",
                        answer["key"].as_str()?,
                        answer["reply"].as_str()?
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    if !answers.is_empty() {
        out.push_str(&format!("  [asked: {}]", answers.join(", ")));
    }
    // A record file is text anyone with the state directory's access could have written.
    super::content::printable(&out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_filter_keeps_what_it_names() {
        let line = |scope: &str, exit: i64, ended_ms: u64| json!({"scope": scope, "exit_code": exit, "signal": null, "refusals": [], "ended_ms": ended_ms});
        let now = 10_000_000;
        let all = Filter::default();
        assert!(all.keeps(&line("a", 0, 1), now));
        let scoped = Filter {
            scope: Some("a".into()),
            ..Filter::default()
        };
        assert!(scoped.keeps(&line("a", 0, 1), now));
        assert!(!scoped.keeps(&line("b", 0, 1), now));
        let recent = Filter {
            since: Some(Duration::from_secs(60)),
            ..Filter::default()
        };
        assert!(recent.keeps(&line("a", 0, now - 1_000), now));
        assert!(!recent.keeps(&line("a", 0, now - 61_000), now));
        let failed = Filter {
            failed: true,
            ..Filter::default()
        };
        assert!(!failed.keeps(&line("a", 0, 1), now));
        assert!(failed.keeps(&line("a", 2, 1), now));
        let mut refused = line("a", 0, 1);
        refused["refusals"] = json!(["network"]);
        assert!(failed.keeps(&refused, now));
        let code = Filter {
            exit: Some(2),
            ..Filter::default()
        };
        assert!(code.keeps(&line("a", 2, 1), now));
        assert!(!code.keeps(&line("a", 0, 1), now));
    }

    #[test]
    fn a_line_for_people_says_when_where_how_and_what() {
        let line = json!({
            "scope": "s1", "plugin": "default", "command": "make\n  test",
            "started_ms": 0, "ended_ms": 1_500, "exit_code": 2, "signal": null,
            "refusals": ["network"],
            "answers": [{"key": "approve", "reply": "accepted"}],
        });
        assert_eq!(
            for_people(&line),
            "1970-01-01T00:00:01Z  s1  default  exit 2  1s 500ms  make test  [refused: network]  \
             [asked: approve accepted]"
        );
        let far = json!({"ended_ms": u64::MAX, "command": "x\u{1b}]0;t\u{7}"});
        let text = for_people(&far);
        assert!(text.starts_with(&format!("{}ms", u64::MAX)), "{text}");
        assert!(!text.contains('\u{1b}'), "{text}");
    }
}
