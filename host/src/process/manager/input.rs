//! A process's input side: its stdin pipe or its terminal (the host's end of it and the
//! emulator that keeps its screen), and the operations on them: write, close, resize, read
//! the screen.

use std::os::fd::OwnedFd;
use std::sync::Mutex;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::unix::pipe;
use tokio::time::Instant;

use super::pty;
use crate::lock;
use crate::process::{MAX_INPUT_BYTES, ProcessError, Stdin, no_input, no_terminal};
use crate::terminal::{Emulator, Key, Screen, TerminalSize};

/// How long a write waits for the program to read its input.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// A process's input side.
pub(super) struct InputSide {
    /// How it was started.
    pub(super) kind: Stdin,
    /// The stdin pipe's write end or the terminal's host end; `None` once closed (or never
    /// open).
    writer: tokio::sync::Mutex<Option<pipe::Sender>>,
    terminal: Option<Terminal>,
    /// What `/proc/PID/fd/0` of the command shows for this input (`pipe:[INODE]`, or
    /// `/dev/pts/N`), to see a process blocked reading it; `None` when closed or unknown.
    identity: Option<String>,
}

/// A process's terminal as the host keeps it.
struct Terminal {
    emulator: Mutex<Emulator>,
    /// The host's end, for resizing; `None` once the process has finished.
    master: Mutex<Option<OwnedFd>>,
}

impl InputSide {
    /// A process whose stdin is `/dev/null`.
    pub(super) fn closed() -> InputSide {
        InputSide {
            kind: Stdin::Closed,
            writer: tokio::sync::Mutex::new(None),
            terminal: None,
            identity: None,
        }
    }

    /// A process reading a pipe whose write end is `writer`.
    pub(super) fn pipe(writer: pipe::Sender) -> InputSide {
        // Both ends of a pipe are one inode.
        let identity = rustix::fs::fstat(&writer)
            .ok()
            .map(|stat| format!("pipe:[{}]", stat.st_ino));
        InputSide {
            kind: Stdin::Pipe,
            writer: tokio::sync::Mutex::new(Some(writer)),
            terminal: None,
            identity,
        }
    }

    /// A process on a terminal of `size`: `writer` and `master` are the host's end (the
    /// same open terminal, non-blocking).
    pub(super) fn terminal(writer: pipe::Sender, master: OwnedFd, size: TerminalSize) -> InputSide {
        let identity = rustix::pty::ptsname(&master, Vec::new())
            .ok()
            .map(|name| name.to_string_lossy().into_owned());
        InputSide {
            identity,
            kind: Stdin::Terminal(size),
            writer: tokio::sync::Mutex::new(Some(writer)),
            terminal: Some(Terminal {
                emulator: Mutex::new(Emulator::new(size)),
                master: Mutex::new(Some(master)),
            }),
        }
    }

    /// What the command's stdin shows as in `/proc/PID/fd/0`; `None` when closed.
    pub(super) fn identity(&self) -> Option<&str> {
        self.identity.as_deref()
    }

    /// Whether the process runs on a terminal.
    pub(super) fn is_terminal(&self) -> bool {
        self.terminal.is_some()
    }

    /// Take output the program wrote to its terminal into the screen.
    pub(super) fn feed(&self, data: &[u8]) {
        if let Some(terminal) = &self.terminal {
            lock(&terminal.emulator).process(data);
        }
    }

    /// The bytes to write for `data` and `keys`.
    fn encode(&self, id: &str, data: &[u8], keys: &[Key]) -> Result<Vec<u8>, ProcessError> {
        let terminal = self.is_terminal();
        let mut bytes = Vec::with_capacity(data.len());
        if terminal {
            bytes.extend(data.iter().map(|&b| if b == b'\n' { b'\r' } else { b }));
        } else {
            bytes.extend_from_slice(data);
        }
        let application_cursor = self
            .terminal
            .as_ref()
            .is_some_and(|t| lock(&t.emulator).application_cursor());
        for key in keys {
            let sequence = key
                .bytes(terminal, application_cursor)
                .map_err(|e| ProcessError::InvalidRequest(format!("{e}; nothing was sent")))?;
            bytes.extend_from_slice(sequence);
        }
        if bytes.len() > MAX_INPUT_BYTES {
            return Err(ProcessError::InvalidRequest(format!(
                "{} bytes of input in one call; at most {MAX_INPUT_BYTES} (send it in parts); \
                 nothing was sent to process `{id}`",
                bytes.len()
            )));
        }
        Ok(bytes)
    }

    /// Write `data` (on a terminal `\n` as Enter) and `keys`; see
    /// [`crate::process::ProcessBackend::write_input`].
    pub(super) async fn write(
        &self,
        id: &str,
        data: &[u8],
        keys: &[Key],
    ) -> Result<(), ProcessError> {
        if self.kind == Stdin::Closed {
            return Err(no_input(id));
        }
        let bytes = self.encode(id, data, keys)?;
        let mut writer = self.writer.lock().await;
        let Some(sender) = writer.as_mut() else {
            return Err(ProcessError::InvalidRequest(format!(
                "the input of process `{id}` was closed"
            )));
        };
        let deadline = Instant::now() + WRITE_TIMEOUT;
        let mut written = 0;
        while written < bytes.len() {
            match tokio::time::timeout_at(deadline, sender.write(&bytes[written..])).await {
                Ok(Ok(n)) => written += n,
                Ok(Err(error))
                    if matches!(error.kind(), std::io::ErrorKind::BrokenPipe)
                        || error.raw_os_error() == Some(nix::libc::EIO) =>
                {
                    return Err(ProcessError::Failed(format!(
                        "nothing of process `{id}` reads its input any more ({written} of {} \
                         bytes written)",
                        bytes.len()
                    )));
                }
                Ok(Err(error)) => {
                    return Err(ProcessError::Failed(format!(
                        "cannot write to the input of process `{id}`: {error} ({written} of {} \
                         bytes written)",
                        bytes.len()
                    )));
                }
                Err(_) => {
                    return Err(ProcessError::Failed(format!(
                        "process `{id}` is not reading its input: {written} of {} bytes written \
                         in {} s, the rest was not sent",
                        bytes.len(),
                        WRITE_TIMEOUT.as_secs()
                    )));
                }
            }
        }
        Ok(())
    }

    /// End the stdin pipe (end-of-file for the program).
    pub(super) async fn close(&self, id: &str) -> Result<(), ProcessError> {
        match self.kind {
            Stdin::Closed => Err(no_input(id)),
            Stdin::Terminal(_) => Err(ProcessError::InvalidRequest(format!(
                "process `{id}` reads a terminal, which has no stdin to close: send the key \
                 Ctrl-D at the start of a line for end-of-file"
            ))),
            Stdin::Pipe => match self.writer.lock().await.take() {
                Some(_) => Ok(()),
                None => Err(ProcessError::InvalidRequest(format!(
                    "the input of process `{id}` was closed already"
                ))),
            },
        }
    }

    /// Resize the terminal (and its screen).
    pub(super) fn resize(&self, id: &str, size: TerminalSize) -> Result<(), ProcessError> {
        let terminal = self.terminal.as_ref().ok_or_else(|| no_terminal(id))?;
        let size = size.check().map_err(ProcessError::InvalidRequest)?;
        let master = lock(&terminal.master);
        let master = master
            .as_ref()
            .ok_or_else(|| ProcessError::NotRunning(id.to_owned()))?;
        // The screen is resized under its lock together with the terminal, so the program's
        // redraw (it can only come after the resize) is never drawn on the old size.
        let mut emulator = lock(&terminal.emulator);
        pty::set_size(master, size).map_err(|error| {
            ProcessError::Failed(format!("cannot resize the terminal of `{id}`: {error}"))
        })?;
        emulator.resize(size);
        Ok(())
    }

    /// The terminal's visible screen.
    pub(super) fn screen(&self, id: &str) -> Result<Screen, ProcessError> {
        let terminal = self.terminal.as_ref().ok_or_else(|| no_terminal(id))?;
        Ok(lock(&terminal.emulator).screen())
    }

    /// The process has finished: let go of the descriptors (the screen stays readable). A
    /// write in progress keeps its end until it fails.
    pub(super) fn release(&self) {
        if let Ok(mut writer) = self.writer.try_lock() {
            *writer = None;
        }
        if let Some(terminal) = &self.terminal {
            *lock(&terminal.master) = None;
        }
    }
}
