//! A fake process capability for testing guest policies deterministically.
//!
//! [`FakeProcesses`] implements the same [`ProcessBackend`] the real process manager does, but
//! runs nothing: each start takes the next queued [`Script`] (or the default one), records the
//! request, and plays back scripted output, exit status and timing. Time is logical: a
//! process scripted to run for 30 s is "still running" after a 10 s wait and exits during a
//! later wait, all instantly. Signals are recorded and end a running script as a real kill
//! would.
//!
//! Interactive flows work too: a process started with a terminal or an open stdin records
//! what is written to it ([`FakeProcesses::inputs`]; keys encoded as the real host encodes
//! them) and answers with scripted [`Reply`]s: each fires once, in order, when the input
//! since the previous reply contains its text (a terminal's Enter, `\r`, counts as `\n`),
//! adding output and possibly ending the process. A terminal's screen is kept by the same
//! emulator the real host uses; waits for a text, for any output or for quiet are answered on
//! logical time.
//!
//! A script may also leave processes running after its exit ([`Script::leaves_running`]):
//! reads and listings show them once it has exited, and a signal stops them, as the real host
//! does. A script may keep a full-output log ([`Script::logged`], [`Script::log_cap`]) that
//! [`ProcessBackend::read_log`] pages through.
//!
//! ```no_run
//! use std::sync::Arc;
//! use toolhost::testing::{FakeProcesses, Script};
//! # async fn demo() -> anyhow::Result<()> {
//! let fake = FakeProcesses::new();
//! fake.push(Script::exits(0).output("hello\n"));
//! let host = toolhost::ToolHost::builder()
//!     .process_backend(fake.clone())
//!     .build()
//!     .await?;
//! let result = host.call("test", "execute", r#"{"command":"echo hello"}"#).await?;
//! assert!(result.contains("hello"));
//! assert_eq!(fake.starts()[0].request.command, "echo hello");
//! # Ok(()) }
//! ```

use crate::buffer::HeadTailBuffer;
use crate::process::{
    BoxFuture, Leftover, LogPage, MAX_INPUT_BYTES, MAX_LOG_PAGE_BYTES, OutputSnapshot,
    ProcessBackend, ProcessError, ProcessInfo, ReadFrom, Signal, StartRequest, Stdin, Until,
    no_input, no_log, no_terminal,
};
use crate::sandbox::{Refusal, Refused};
use crate::terminal::{Emulator, Key, Screen, TerminalSize, stream_view};
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// How a scripted process ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Exits with this code after its run time.
    Code(i32),
    /// Dies of signal number N (exit code 128+N) after its run time.
    Signal(i32),
    /// Runs until signalled.
    Never,
}

/// What a started fake process does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Script {
    /// Output visible from the start (all of it, for a process that exits at once).
    pub output: Vec<u8>,
    /// Output that appears only when the process exits.
    pub final_output: Vec<u8>,
    /// Logical run time before it ends.
    pub runs_for: Duration,
    /// How it ends.
    pub ending: Ending,
    /// Answers to input, in order.
    pub replies: Vec<Reply>,
    /// Exit code when its stdin pipe is closed (`None`: closing changes nothing).
    pub exits_at_eof: Option<i32>,
    /// Processes it leaves running once it has exited by itself, until a signal stops them.
    pub left_running: Vec<Leftover>,
    /// Keeps a full-output log of at most this many bytes (`None`: no log).
    pub log_cap: Option<u64>,
    /// What the confinement refused it, reported once it has exited.
    pub refusals: Vec<Refusal>,
}

/// A scripted answer to input: see the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// Fires when the input since the previous reply contains this.
    pub when: Vec<u8>,
    /// Output it adds.
    pub output: Vec<u8>,
    /// Exit code the process then ends with (`None`: it keeps running).
    pub exit: Option<i32>,
}

impl Script {
    /// Exits at once with `code` and no output.
    pub fn exits(code: i32) -> Script {
        Script {
            output: Vec::new(),
            final_output: Vec::new(),
            runs_for: Duration::ZERO,
            ending: Ending::Code(code),
            replies: Vec::new(),
            exits_at_eof: None,
            left_running: Vec::new(),
            log_cap: None,
            refusals: Vec::new(),
        }
    }

    /// A program waiting for input: runs until signalled, shows `prompt` at start.
    pub fn interactive(prompt: impl AsRef<[u8]>) -> Script {
        Script::never_exits().output(prompt)
    }

    /// When the input contains `when`, print `output` (see the module docs).
    pub fn reply(mut self, when: impl AsRef<[u8]>, output: impl AsRef<[u8]>) -> Script {
        self.replies.push(Reply {
            when: when.as_ref().to_vec(),
            output: output.as_ref().to_vec(),
            exit: None,
        });
        self
    }

    /// When the input contains `when`, print `output` and exit with `code`.
    pub fn reply_and_exit(
        mut self,
        when: impl AsRef<[u8]>,
        output: impl AsRef<[u8]>,
        code: i32,
    ) -> Script {
        self.replies.push(Reply {
            when: when.as_ref().to_vec(),
            output: output.as_ref().to_vec(),
            exit: Some(code),
        });
        self
    }

    /// Exit with `code` when the stdin pipe is closed.
    pub fn exits_at_eof(mut self, code: i32) -> Script {
        self.exits_at_eof = Some(code);
        self
    }

    /// Runs until signalled.
    pub fn never_exits() -> Script {
        Script {
            ending: Ending::Never,
            ..Script::exits(0)
        }
    }

    /// Dies of signal number `signal` after its run time.
    pub fn killed_by(signal: i32) -> Script {
        Script {
            ending: Ending::Signal(signal),
            ..Script::exits(0)
        }
    }

    /// Reports that the confinement refused it `refusal`, as the real host does once the
    /// command has ended: typed in its snapshots, and its note at the end of its output.
    pub fn refused(mut self, refusal: Refusal) -> Script {
        self.final_output.extend(refusal.note().as_bytes());
        self.final_output.push(b'\n');
        self.refusals.push(refusal);
        self
    }

    /// Output visible from the start.
    pub fn output(mut self, bytes: impl AsRef<[u8]>) -> Script {
        self.output = bytes.as_ref().to_vec();
        self
    }

    /// Output that appears when it exits.
    pub fn final_output(mut self, bytes: impl AsRef<[u8]>) -> Script {
        self.final_output = bytes.as_ref().to_vec();
        self
    }

    /// Logical run time before it ends.
    pub fn runs_for(mut self, d: Duration) -> Script {
        self.runs_for = d;
        self
    }

    /// Once it has exited by itself, a process `pid` running `command` that it started is
    /// left running, until a signal to it stops what it left.
    pub fn leaves_running(mut self, pid: i32, command: &str) -> Script {
        self.left_running.push(Leftover {
            pid,
            command: command.to_string(),
        });
        self
    }

    /// Keep a full-output log of everything it prints, as the real host does.
    pub fn logged(self) -> Script {
        self.log_cap(u64::MAX)
    }

    /// Keep a full-output log of the first `bytes` bytes it prints (then the log is capped).
    pub fn log_cap(mut self, bytes: u64) -> Script {
        self.log_cap = Some(bytes);
        self
    }
}

/// A start request as the fake received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedStart {
    /// The caller's scope.
    pub scope: String,
    /// The request.
    pub request: StartRequest,
    /// The id handed out (`None` if the start was scripted to fail).
    pub id: Option<String>,
}

struct FakeProcess {
    scope: String,
    request: StartRequest,
    script: Script,
    elapsed: Duration,
    finished: Option<(i32, Option<String>)>,
    buffer: HeadTailBuffer,
    last_read: u64,
    started_ms: u64,
    /// Input since the last reply fired (`\r` as `\n`).
    pending_input: Vec<u8>,
    /// The stdin pipe was closed.
    input_closed: bool,
    /// The screen of a process on a terminal.
    emulator: Option<Emulator>,
    /// Its full-output log, when its script keeps one.
    log: Option<Vec<u8>>,
    /// Output the log could not hold.
    log_capped: bool,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Script>,
    default: Option<Script>,
    next_start_error: Option<ProcessError>,
    read_error: Option<ProcessError>,
    starts: Vec<RecordedStart>,
    signals: Vec<(String, Signal)>,
    inputs: Vec<(String, Vec<u8>)>,
    /// The hosts allowed through `allow-host`, with their scope.
    allowed: Vec<(String, String)>,
    processes: HashMap<String, FakeProcess>,
    order: Vec<String>,
    counter: u64,
}

/// A scripted, deterministic [`ProcessBackend`]. See the module docs.
#[derive(Default)]
pub struct FakeProcesses {
    state: Mutex<State>,
}

impl FakeProcesses {
    /// A fake whose unscripted processes exit at once with code 0 and no output.
    pub fn new() -> Arc<FakeProcesses> {
        Arc::new(FakeProcesses::default())
    }

    /// Queue `script` for the next start.
    pub fn push(&self, script: Script) {
        self.lock().queue.push_back(script);
    }

    /// Use `script` for every start with nothing queued.
    pub fn set_default(&self, script: Script) {
        self.lock().default = Some(script);
    }

    /// Make the next start fail with `error`.
    pub fn fail_next_start(&self, error: ProcessError) {
        self.lock().next_start_error = Some(error);
    }

    /// Make every wait and read fail with `error` (`None` to stop).
    pub fn fail_reads(&self, error: Option<ProcessError>) {
        self.lock().read_error = error;
    }

    /// Every start request so far, in order.
    pub fn starts(&self) -> Vec<RecordedStart> {
        self.lock().starts.clone()
    }

    /// Every signal sent so far, in order.
    pub fn signals(&self) -> Vec<(String, Signal)> {
        self.lock().signals.clone()
    }

    /// Every write to a process's input so far, in order: the id and the bytes as the real
    /// host would send them (on a terminal Enter is `\r`, keys are escape sequences).
    pub fn inputs(&self) -> Vec<(String, Vec<u8>)> {
        self.lock().inputs.clone()
    }

    /// Every host a policy allowed its scope to reach (`allow-host`), with the scope, in
    /// order.
    pub fn allowed_hosts(&self) -> Vec<(String, String)> {
        self.lock().allowed.clone()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn signal_name(n: i32) -> String {
    match n {
        2 => "SIGINT".to_string(),
        9 => "SIGKILL".to_string(),
        15 => "SIGTERM".to_string(),
        n => format!("SIG{n}"),
    }
}

impl FakeProcess {
    fn advance(&mut self, by: Duration) {
        if self.finished.is_some() {
            return;
        }
        let remaining = self.script.runs_for.saturating_sub(self.elapsed);
        if self.script.ending != Ending::Never && remaining <= by {
            self.elapsed = self.script.runs_for;
            let final_output = std::mem::take(&mut self.script.final_output);
            self.print(&final_output);
            self.finished = Some(match self.script.ending {
                Ending::Code(c) => (c, None),
                Ending::Signal(n) => (128 + n, Some(signal_name(n))),
                Ending::Never => (0, None),
            });
        } else {
            self.elapsed += by;
        }
    }

    /// Add output (and show it on the screen, and keep it in the log).
    fn print(&mut self, data: &[u8]) {
        self.buffer.write(data);
        self.keep(data);
        if let Some(emulator) = &mut self.emulator {
            emulator.process(&onlcr(data));
        }
    }

    /// Take input: fire the replies it completes, in order.
    fn take_input(&mut self, bytes: &[u8]) {
        self.pending_input
            .extend(bytes.iter().map(|&b| if b == b'\r' { b'\n' } else { b }));
        while let Some(reply) = self.script.replies.first() {
            let Some(at) = find(&self.pending_input, &reply.when) else {
                break;
            };
            let reply = self.script.replies.remove(0);
            self.pending_input.drain(..at + reply.when.len());
            self.print(&reply.output);
            if let Some(code) = reply.exit {
                self.finished = Some((code, None));
                return;
            }
        }
    }

    /// Append output to the log, up to its cap.
    fn keep(&mut self, data: &[u8]) {
        if let (Some(log), Some(cap)) = (&mut self.log, self.script.log_cap) {
            let room = cap.saturating_sub(log.len() as u64);
            let room = usize::try_from(room).unwrap_or(usize::MAX);
            log.extend_from_slice(&data[..data.len().min(room)]);
            self.log_capped |= data.len() > room;
        }
    }

    /// A signal: it ends a running script, and whatever it would leave running, or stops
    /// what an exited one left running.
    fn kill(&mut self, n: i32) {
        self.script.left_running.clear();
        if self.finished.is_none() {
            self.finished = Some((128 + n, Some(signal_name(n))));
        }
    }

    /// What it left running: nothing while it runs.
    fn left_running(&self) -> Vec<Leftover> {
        match self.finished {
            Some(_) => self.script.left_running.clone(),
            None => Vec::new(),
        }
    }

    /// A page of its log, as the real host reads its log file.
    fn log_page(&self, id: &str, offset: i64, max_bytes: u64) -> Result<LogPage, ProcessError> {
        let log = self.log.as_deref().ok_or_else(|| no_log(id))?;
        let total = log.len();
        let mut start = if offset < 0 {
            total.saturating_sub(usize::try_from(offset.unsigned_abs()).unwrap_or(usize::MAX))
        } else {
            usize::try_from(offset).unwrap_or(usize::MAX).min(total)
        };
        let want = usize::try_from(max_bytes.min(MAX_LOG_PAGE_BYTES)).unwrap_or(usize::MAX);
        let mut end = start + want.min(total - start);
        // A character cut at either end is left to the neighbouring page.
        if start > 0 {
            start += crate::buffer::leading_continuations(&log[start..end]);
        }
        if end < total {
            let cut = crate::buffer::char_floor(&log[start..end], end - start);
            if cut > 0 {
                end = start + cut;
            }
        }
        Ok(LogPage {
            text: String::from_utf8_lossy(&log[start..end]).into_owned(),
            offset: start as u64,
            next_offset: end as u64,
            total_bytes: total as u64,
            capped: self.log_capped,
            running: self.finished.is_none(),
        })
    }

    fn snapshot(&mut self, from: ReadFrom) -> OutputSnapshot {
        let start = match from {
            ReadFrom::All => 0,
            ReadFrom::Cursor(c) => c,
            ReadFrom::Unread => self.last_read,
        };
        let rendered = self.buffer.render_from(start);
        let cursor = self.buffer.total_bytes();
        if matches!(from, ReadFrom::All | ReadFrom::Unread) {
            self.last_read = cursor;
        }
        OutputSnapshot {
            text: if self.emulator.is_some() {
                stream_view(&rendered.text)
            } else {
                rendered.text
            },
            running: self.finished.is_none(),
            exit_code: self.finished.as_ref().map(|f| f.0),
            signal: self.finished.as_ref().and_then(|f| f.1.clone()),
            truncation: rendered.truncation,
            cursor,
            log_path: self
                .log
                .as_ref()
                .map(|_| PathBuf::from(format!("/fake/logs/fake{}.log", self.started_ms))),
            log_bytes: self.log.as_ref().map(|log| log.len() as u64),
            log_capped: self.log_capped,
            duration_ms: self.elapsed.as_millis() as u64,
            left_running: self.left_running(),
            refusals: match self.finished {
                Some(_) => self
                    .script
                    .refusals
                    .iter()
                    .map(|reason| Refused {
                        reason: reason.clone(),
                        note: reason.note(),
                    })
                    .collect(),
                None => Vec::new(),
            },
        }
    }
}

impl State {
    fn process(&mut self, scope: &str, id: &str) -> Result<&mut FakeProcess, ProcessError> {
        match self.processes.get_mut(id) {
            Some(p) if p.scope == scope => Ok(p),
            _ => Err(ProcessError::NotFound(id.to_string())),
        }
    }
}

impl ProcessBackend for FakeProcesses {
    /// Noted, and allowed: the fake has no network to widen.
    fn allow_host(&self, scope: &str, host: &str) -> Result<Vec<String>, ProcessError> {
        let mut state = self.lock();
        state.allowed.push((scope.to_owned(), host.to_owned()));
        Ok(state
            .allowed
            .iter()
            .filter(|(s, _)| s == scope)
            .map(|(_, h)| h.clone())
            .collect())
    }

    fn start<'a>(
        &'a self,
        scope: &'a str,
        request: StartRequest,
    ) -> BoxFuture<'a, Result<String, ProcessError>> {
        Box::pin(async move {
            let mut state = self.lock();
            if let Some(error) = state.next_start_error.take() {
                state.starts.push(RecordedStart {
                    scope: scope.to_string(),
                    request,
                    id: None,
                });
                return Err(error);
            }
            let script = state
                .queue
                .pop_front()
                .or_else(|| state.default.clone())
                .unwrap_or_else(|| Script::exits(0));
            state.counter += 1;
            let id = format!("fake{}", state.counter);
            let mut buffer = HeadTailBuffer::default();
            buffer.write(&script.output);
            let log = script.log_cap.map(|_| Vec::new());
            let emulator = match request.stdin {
                Stdin::Terminal(size) => {
                    if let Err(message) = size.check() {
                        return Err(ProcessError::InvalidRequest(message));
                    }
                    let mut emulator = Emulator::new(size);
                    emulator.process(&onlcr(&script.output));
                    Some(emulator)
                }
                _ => None,
            };
            let mut process = FakeProcess {
                pending_input: Vec::new(),
                input_closed: false,
                emulator,
                log,
                log_capped: false,
                scope: scope.to_string(),
                request: request.clone(),
                script,
                elapsed: Duration::ZERO,
                finished: None,
                buffer,
                last_read: 0,
                started_ms: state.counter,
            };
            let output = process.script.output.clone();
            process.keep(&output);
            process.advance(Duration::ZERO);
            state.processes.insert(id.clone(), process);
            state.order.push(id.clone());
            state.starts.push(RecordedStart {
                scope: scope.to_string(),
                request,
                id: Some(id.clone()),
            });
            Ok(id)
        })
    }

    fn wait<'a>(
        &'a self,
        scope: &'a str,
        id: &'a str,
        timeout: Duration,
        from: ReadFrom,
    ) -> BoxFuture<'a, Result<OutputSnapshot, ProcessError>> {
        Box::pin(async move {
            let mut state = self.lock();
            if let Some(e) = state.read_error.clone() {
                return Err(e);
            }
            let process = state.process(scope, id)?;
            process.advance(timeout);
            Ok(process.snapshot(from))
        })
    }

    fn read(&self, scope: &str, id: &str, from: ReadFrom) -> Result<OutputSnapshot, ProcessError> {
        let mut state = self.lock();
        if let Some(e) = state.read_error.clone() {
            return Err(e);
        }
        Ok(state.process(scope, id)?.snapshot(from))
    }

    fn list(&self, scope: &str) -> Vec<ProcessInfo> {
        let state = self.lock();
        let mut list: Vec<ProcessInfo> = state
            .order
            .iter()
            .rev()
            .filter_map(|id| state.processes.get(id).map(|p| (id, p)))
            .filter(|(_, p)| p.scope == scope)
            .map(|(id, p)| ProcessInfo {
                id: id.clone(),
                command: p.request.command.clone(),
                workdir: p
                    .request
                    .workdir
                    .clone()
                    .unwrap_or_else(|| PathBuf::from(".")),
                background: p.request.background,
                profile: p
                    .request
                    .profile
                    .as_ref()
                    .map_or_else(|| "default".to_owned(), |profile| profile.summary()),
                running: p.finished.is_none(),
                started_ms: p.started_ms,
                exited_ms: p.finished.as_ref().map(|_| p.started_ms),
                exit_code: p.finished.as_ref().map(|f| f.0),
                signal: p.finished.as_ref().and_then(|f| f.1.clone()),
                stdin: p.request.stdin,
                left_running: p.left_running(),
            })
            .collect();
        list.sort_by_key(|p| !p.running);
        list
    }

    fn read_log(
        &self,
        scope: &str,
        id: &str,
        offset: i64,
        max_bytes: u64,
    ) -> Result<LogPage, ProcessError> {
        let mut state = self.lock();
        state.process(scope, id)?.log_page(id, offset, max_bytes)
    }

    fn signal(&self, scope: &str, id: &str, signal: Signal) -> Result<(), ProcessError> {
        let mut state = self.lock();
        let process = state.process(scope, id)?;
        // An exited process can still be signalled while what it left runs.
        if process.finished.is_some() && process.script.left_running.is_empty() {
            return Err(ProcessError::NotRunning(id.to_string()));
        }
        process.kill(match signal {
            Signal::Terminate => 15,
            Signal::Kill => 9,
            Signal::Interrupt => 2,
        });
        state.signals.push((id.to_string(), signal));
        Ok(())
    }

    fn end_scope<'a>(&'a self, scope: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let mut state = self.lock();
            for p in state.processes.values_mut().filter(|p| p.scope == scope) {
                p.kill(15);
            }
        })
    }

    fn write_input<'a>(
        &'a self,
        scope: &'a str,
        id: &'a str,
        data: &'a [u8],
        keys: &'a [Key],
    ) -> BoxFuture<'a, Result<(), ProcessError>> {
        Box::pin(async move {
            let mut state = self.lock();
            let process = state.process(scope, id)?;
            if process.request.stdin == Stdin::Closed {
                return Err(no_input(id));
            }
            if process.finished.is_some() {
                return Err(ProcessError::NotRunning(id.to_string()));
            }
            if process.input_closed {
                return Err(ProcessError::InvalidRequest(format!(
                    "the input of process `{id}` was closed"
                )));
            }
            let terminal = process.emulator.is_some();
            let mut bytes: Vec<u8> = data
                .iter()
                .map(|&b| if terminal && b == b'\n' { b'\r' } else { b })
                .collect();
            let application_cursor = process
                .emulator
                .as_ref()
                .is_some_and(Emulator::application_cursor);
            for key in keys {
                let sequence = key
                    .bytes(terminal, application_cursor)
                    .map_err(ProcessError::InvalidRequest)?;
                bytes.extend_from_slice(sequence);
            }
            if bytes.len() > MAX_INPUT_BYTES {
                return Err(ProcessError::InvalidRequest(format!(
                    "{} bytes of input in one call; at most {MAX_INPUT_BYTES}",
                    bytes.len()
                )));
            }
            process.take_input(&bytes);
            state.inputs.push((id.to_string(), bytes));
            Ok(())
        })
    }

    fn close_input<'a>(
        &'a self,
        scope: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, Result<(), ProcessError>> {
        Box::pin(async move {
            let mut state = self.lock();
            let process = state.process(scope, id)?;
            match process.request.stdin {
                Stdin::Closed => Err(no_input(id)),
                Stdin::Terminal(_) => Err(ProcessError::InvalidRequest(format!(
                    "process `{id}` reads a terminal, which has no stdin to close: send the key \
                     Ctrl-D at the start of a line for end-of-file"
                ))),
                Stdin::Pipe => {
                    process.input_closed = true;
                    if let (Some(code), None) = (process.script.exits_at_eof, &process.finished) {
                        process.finished = Some((code, None));
                    }
                    Ok(())
                }
            }
        })
    }

    fn resize(&self, scope: &str, id: &str, size: TerminalSize) -> Result<(), ProcessError> {
        let mut state = self.lock();
        let process = state.process(scope, id)?;
        let emulator = process.emulator.as_mut().ok_or_else(|| no_terminal(id))?;
        let size = size.check().map_err(ProcessError::InvalidRequest)?;
        emulator.resize(size);
        Ok(())
    }

    fn screen(&self, scope: &str, id: &str) -> Result<Screen, ProcessError> {
        let mut state = self.lock();
        let process = state.process(scope, id)?;
        let emulator = process.emulator.as_ref().ok_or_else(|| no_terminal(id))?;
        Ok(emulator.screen())
    }

    /// On logical time: a condition the output already meets returns at once; otherwise the
    /// process runs on for the timeout (for [`Until::Quiet`], for the quiet time).
    fn wait_until<'a>(
        &'a self,
        scope: &'a str,
        id: &'a str,
        until: Until,
        timeout: Duration,
        from: ReadFrom,
    ) -> BoxFuture<'a, Result<OutputSnapshot, ProcessError>> {
        Box::pin(async move {
            let mut state = self.lock();
            if let Some(e) = state.read_error.clone() {
                return Err(e);
            }
            let process = state.process(scope, id)?;
            let start = match from {
                ReadFrom::All => 0,
                ReadFrom::Cursor(c) => c,
                ReadFrom::Unread => process.last_read,
            };
            let met = match &until {
                Until::Exit | Until::Quiet(_) => false,
                Until::Output => process.buffer.total_bytes() > start,
                Until::Text(text) => process
                    .snapshot(ReadFrom::Cursor(start))
                    .text
                    .contains(text.as_str()),
            };
            if !met {
                let by = match until {
                    Until::Quiet(quiet) => quiet.min(timeout),
                    _ => timeout,
                };
                process.advance(by);
            }
            Ok(process.snapshot(from))
        })
    }
}

/// Output as a terminal shows it: a newline also returns the cursor to the start of the line
/// (the terminal's `onlcr`), so scripts can be written with plain `\n`.
fn onlcr(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len());
    let mut previous = 0u8;
    for &byte in data {
        if byte == b'\n' && previous != b'\r' {
            out.push(b'\r');
        }
        out.push(byte);
        previous = byte;
    }
    out
}

/// Where `needle` first occurs in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

#[cfg(test)]
#[path = "testing_tests.rs"]
mod tests;
