//! The record: one JSON line per command that ended, appended to a file the operator reads
//! with `toolhost log` (docs/cli.md, "The record").
//!
//! 1. A command ends; its monitor hands the record its line ([`Recorder::write`]).
//! 2. The line's command text is redacted by the secret value detectors first
//!    ([`crate::sandbox::secrets::redact`]); the host's withheld variables never reach it,
//!    since it holds no environment.
//! 3. The file is locked (`flock`), so that hosts sharing it take turns. A file another host
//!    rotated away since it was opened is closed, and the new one opened.
//! 4. When the file would pass its bound, it is renamed to `FILE.1` (replacing the older one)
//!    and a new file is begun: the record takes at most twice its bound on disk.
//! 5. The line is appended in one `write` to the file, made with mode 0600, and the lock let go.
//!
//! A record that cannot be written is warned about once, and the commands run on.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};

use crate::lock;
use crate::process::Origin;
use crate::sandbox::{Refusal, Refused};

/// Where the record goes, and how large its file may grow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordSettings {
    /// The file (made with mode 0600; its directory must exist or be creatable).
    pub path: PathBuf,
    /// Bytes the file may hold before it is rotated to `FILE.1`.
    pub max_bytes: u64,
}

/// The default bound of the record's file: 16 MiB.
pub const DEFAULT_RECORD_BYTES: u64 = 16 * 1024 * 1024;

/// One command, as the record holds it.
pub(super) struct Line<'a> {
    pub(super) scope: &'a str,
    pub(super) id: &'a str,
    pub(super) origin: &'a Origin,
    pub(super) command: &'a str,
    pub(super) workdir: &'a Path,
    pub(super) background: bool,
    pub(super) profile: String,
    pub(super) started_ms: u64,
    pub(super) ended_ms: u64,
    pub(super) exit_code: Option<i32>,
    pub(super) signal: Option<String>,
    pub(super) refusals: &'a [Refused],
}

impl Line<'_> {
    /// The line's JSON (the shape docs/cli.md documents).
    fn json(&self) -> Value {
        json!({
            "scope": self.scope,
            "principal": self.origin.principal,
            "plugin": self.origin.plugin,
            "id": self.id,
            "command": cut(crate::sandbox::secrets::redact(self.command)),
            "workdir": self.workdir.display().to_string(),
            "background": self.background,
            "profile": self.profile,
            "started_ms": self.started_ms,
            "ended_ms": self.ended_ms,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "limits_hit": self.refusals.iter().filter_map(|r| limit_hit(&r.reason)).collect::<Vec<_>>(),
            "refusals": self.refusals.iter().map(|r| kind(&r.reason)).collect::<Vec<_>>(),
            "answers": self
                .origin
                .answers
                .iter()
                .map(|(key, reply)| json!({"key": key, "reply": reply}))
                .collect::<Vec<_>>(),
        })
    }
}

/// Longest command line a line holds, in bytes; a longer one is cut and ends in `…`.
const MAX_COMMAND_BYTES: usize = 4096;

/// `command` cut to [`MAX_COMMAND_BYTES`] on a character boundary.
fn cut(mut command: String) -> String {
    if command.len() > MAX_COMMAND_BYTES {
        command.truncate(command.floor_char_boundary(MAX_COMMAND_BYTES));
        command.push('…');
    }
    command
}

/// The kind of a refusal, as the record names it.
fn kind(reason: &Refusal) -> &'static str {
    match reason {
        Refusal::SpaceFull { .. } => "space-full",
        Refusal::ScopeProcesses(_) => "session-processes",
        Refusal::Memory(_) => "memory",
        Refusal::Processes(_) => "processes",
        Refusal::UnixSockets(_) => "unix-sockets",
        Refusal::Network { .. } => "network",
        Refusal::HiddenPath { .. } => "hidden-path",
        Refusal::BesideHidden { .. } => "beside-hidden",
        Refusal::NoWorkspace(_) => "no-workspace",
        Refusal::Confined { .. } => "confined",
    }
}

/// The limit a refusal says the command reached, if it is one.
fn limit_hit(reason: &Refusal) -> Option<&'static str> {
    match reason {
        Refusal::SpaceFull { .. } => Some("space"),
        Refusal::ScopeProcesses(_) => Some("session-processes"),
        Refusal::Memory(_) => Some("memory"),
        Refusal::Processes(_) => Some("processes"),
        _ => None,
    }
}

/// The record's writer, shared by every monitor of a manager.
pub(super) struct Recorder {
    settings: RecordSettings,
    file: Mutex<Option<File>>,
    /// A failure was warned about already.
    warned: AtomicBool,
}

impl Recorder {
    pub(super) fn new(settings: RecordSettings) -> Recorder {
        Recorder {
            settings,
            file: Mutex::new(None),
            warned: AtomicBool::new(false),
        }
    }

    /// Append `line` (steps 2-4 of the module's flow).
    pub(super) fn write(&self, line: &Line<'_>) {
        let mut text = line.json().to_string();
        text.push('\n');
        let mut file = lock(&self.file);
        if let Err(error) = self.append(&mut file, text.as_bytes()) {
            *file = None;
            if !self.warned.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    path = %self.settings.path.display(),
                    %error,
                    "cannot write the record of commands; commands run on without it"
                );
            }
        }
    }

    fn append(&self, file: &mut Option<File>, bytes: &[u8]) -> std::io::Result<()> {
        use rustix::fs::{FlockOperation, flock};
        let path = &self.settings.path;
        let mut current = match file.take() {
            Some(open) => open,
            None => open(path)?,
        };
        // Step 3, a few times at most: another host may rotate it again meanwhile.
        for _ in 0..3 {
            flock(&current, FlockOperation::LockExclusive)?;
            if same_file(&current, path) {
                break;
            }
            let _ = flock(&current, FlockOperation::Unlock);
            current = open(path)?;
        }
        let written = self.rotate_and_write(&mut current, bytes);
        let _ = flock(&current, FlockOperation::Unlock);
        if written.is_ok() {
            *file = Some(current);
        }
        written
    }

    /// Steps 4 and 5, with `current` locked. Hosts waiting for the lock of the file rotated
    /// away find it moved once they have it, and open the new one.
    fn rotate_and_write(&self, current: &mut File, bytes: &[u8]) -> std::io::Result<()> {
        let path = &self.settings.path;
        let size = current.metadata()?.len();
        if size > 0 && size + bytes.len() as u64 > self.settings.max_bytes {
            let mut rotated = path.clone().into_os_string();
            rotated.push(".1");
            std::fs::rename(path, &rotated)?;
            let old = std::mem::replace(current, open(path)?);
            let _ = rustix::fs::flock(&old, rustix::fs::FlockOperation::Unlock);
        }
        current.write_all(bytes)
    }
}

/// Whether `file` is the file at `path` now (same device and inode).
fn same_file(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(open), Ok(now)) => open.dev() == now.dev() && open.ino() == now.ino(),
        _ => false,
    }
}

/// Make the record's file and its rotated `FILE.1` where they are missing (mode 0600), and
/// return them, to be hidden from confined commands. A file that cannot be made is left out
/// (the first write warns).
pub(super) fn prepare(settings: &RecordSettings) -> Vec<PathBuf> {
    let mut rotated = settings.path.clone().into_os_string();
    rotated.push(".1");
    [settings.path.clone(), PathBuf::from(rotated)]
        .into_iter()
        .filter(|path| open(path).is_ok())
        .collect()
}

/// The record's file, for appending, made with mode 0600 (its directory with 0700).
fn open(path: &Path) -> std::io::Result<File> {
    if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn line<'a>(origin: &'a Origin, command: &'a str, refusals: &'a [Refused]) -> Line<'a> {
        Line {
            scope: "s1",
            id: "p1",
            origin,
            command,
            workdir: Path::new("/work"),
            background: false,
            profile: "workspace-write".into(),
            started_ms: 1,
            ended_ms: 2,
            exit_code: Some(137),
            signal: None,
            refusals,
        }
    }

    #[test]
    fn a_line_holds_the_documented_fields_with_secrets_redacted() {
        let origin = Origin {
            plugin: Some("default".into()),
            principal: Some("alice".into()),
            answers: vec![("approve".into(), "accepted".into())],
        };
        let refused = [Refused {
            reason: Refusal::Processes(8),
            note: String::new(),
        }];
        let value = line(&origin, "curl https://u:hunter2@x.test/", &refused).json();
        assert_eq!(
            value["command"],
            "curl https://u:[secret: url-password]@x.test/"
        );
        assert_eq!(value["principal"], "alice");
        assert_eq!(value["plugin"], "default");
        assert_eq!(value["limits_hit"], json!(["processes"]));
        assert_eq!(value["refusals"], json!(["processes"]));
        assert_eq!(value["exit_code"], 137);
        assert_eq!(
            value["answers"],
            json!([{"key": "approve", "reply": "accepted"}])
        );
        let long = "é".repeat(MAX_COMMAND_BYTES);
        let value = line(&origin, &long, &[]).json();
        let command = value["command"].as_str().expect("a command");
        assert!(command.ends_with('…') && command.len() <= MAX_COMMAND_BYTES + 3);
    }

    #[test]
    fn a_host_writes_to_the_file_another_host_rotated_in() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("commands.jsonl");
        let settings = RecordSettings {
            path: path.clone(),
            max_bytes: 2048,
        };
        let (first, second) = (Recorder::new(settings.clone()), Recorder::new(settings));
        let origin = Origin::default();
        first.write(&line(&origin, "from the first host", &[]));
        // The second host rotates the file the first one holds open.
        for _ in 0..20 {
            second.write(&line(&origin, "from the second host", &[]));
        }
        first.write(&line(&origin, "the first host again", &[]));
        let now = std::fs::read_to_string(&path).expect("read");
        assert!(
            now.lines()
                .last()
                .is_some_and(|l| l.contains("the first host again")),
            "{now}"
        );
    }

    #[test]
    fn the_file_is_private_and_rotates_at_its_bound() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("record").join("commands.jsonl");
        let recorder = Recorder::new(RecordSettings {
            path: path.clone(),
            max_bytes: 1024,
        });
        let origin = Origin::default();
        for _ in 0..20 {
            recorder.write(&line(&origin, "echo hello", &[]));
        }
        let mode = std::fs::metadata(&path).expect("file").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let rotated = dir.path().join("record").join("commands.jsonl.1");
        assert!(rotated.is_file(), "rotated at its bound");
        for file in [&path, &rotated] {
            let text = std::fs::read_to_string(file).expect("read");
            assert!(text.len() <= 1024, "{} bytes", text.len());
            for line in text.lines() {
                let value: Value = serde_json::from_str(line).expect("a JSON line");
                assert_eq!(value["command"], "echo hello");
            }
        }
    }
}
