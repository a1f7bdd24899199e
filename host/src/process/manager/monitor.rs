//! The task that owns one running process (its *monitor*): it reads the output pipe into the
//! record and the log file, learns of the exit from the keeper's status pipe, drains what
//! grandchildren still write, finishes the record, notes when nothing of the process is left,
//! and removes the record after the retention period.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::sync::watch;
use tokio::time::Instant;

use super::descendants;
use super::entry::{Ended, Entry, LogTarget};
use super::keeper;
use super::output_log::OutputLog;
use super::table::Records;
use crate::process::Signal;

/// After a command's exit, while processes it started still hold its output open, how long
/// the output may stay quiet before the result is made without waiting for more: what they
/// write later still reaches the record and the log.
const QUIET_AFTER_EXIT: Duration = Duration::from_millis(25);

/// Bytes read from a pipe at a time, at most.
const READ_CHUNK: usize = 256 * 1024;
/// Bytes read from a pipe at a time at first (grown when reads fill it).
pub(super) const FIRST_READ_CHUNK: usize = 4 * 1024;

/// The task that owns one process: reads its output, notices its exit, finishes it, and
/// removes it after the retention period.
pub(super) struct Monitor {
    /// Owns the process from the moment the monitor exists, whether or not it ever runs.
    pub(super) guard: MonitorGuard,
    /// The keeper's status pipe.
    pub(super) status: pipe::Receiver,
    /// Readable once the keeper has exited.
    pub(super) keeper_exit: Option<OwnedFd>,
    pub(super) output: OutputReader,
    pub(super) drain_timeout: Duration,
    pub(super) retention: Duration,
    pub(super) closed: watch::Receiver<bool>,
    /// The record of commands, when one is kept.
    pub(super) recorder: Option<Arc<super::Recorder>>,
}

impl Monitor {
    pub(super) async fn run(self) {
        let Monitor {
            guard,
            status,
            keeper_exit,
            output,
            drain_timeout,
            retention,
            mut closed,
            recorder,
        } = self;
        let entry = Arc::clone(&guard.entry);
        // `None` once the pipe reached end-of-file (and everything reading it is released).
        let mut output = Some(output);
        // The command's exit; then the status pipe is watched to its end (the keeper's exit).
        let exit = {
            let entry = Arc::clone(&entry);
            async move {
                let mut status = status;
                let report = keeper::read_exit(&mut status).await;
                if report.exit.is_none() {
                    // The keeper died without a word: an unconfined command killed it.
                    entry.keeper_lost.store(true, Ordering::Release);
                }
                if report.nothing_left {
                    entry.nothing_left.store(true, Ordering::Release);
                }
                entry.unix_refused(report.unix_refused);
                tokio::spawn(async move {
                    keeper::wait_gone(status, keeper_exit).await;
                    entry.nothing_left.store(true, Ordering::Release);
                    entry.gone.send_replace(true);
                });
                report.exit
            }
        };
        tokio::pin!(exit);
        let mut ended: Option<Ended> = None;
        let mut drain_deadline: Option<Instant> = None;
        // Processes the command started still run after its exit: drain only while output
        // keeps coming.
        let mut leftovers = false;

        // Until the exit: read and watch for the exit. After it: read until end-of-file, the
        // drain deadline, or (with leftovers) a quiet spell.
        while let Some(reader) = output.as_mut() {
            let read = if ended.is_none() {
                tokio::select! {
                    biased;
                    status = &mut exit => {
                        ended = Some(entry.ended_now(status));
                        drain_deadline = Instant::now().checked_add(drain_timeout);
                        leftovers = !entry.nothing_left.load(Ordering::Acquire);
                        continue;
                    }
                    read = reader.read() => read,
                }
            } else if let Some(deadline) = drain_deadline {
                let deadline = if leftovers {
                    deadline.min(Instant::now() + QUIET_AFTER_EXIT)
                } else {
                    deadline
                };
                match tokio::time::timeout_at(deadline, reader.read()).await {
                    Ok(read) => read,
                    Err(_) => {
                        tracing::debug!(
                            id = %entry.spec.id,
                            "output still held open after the exit; not waiting for it"
                        );
                        break;
                    }
                }
            } else {
                reader.read().await
            };
            take_read(&mut output, &entry, read).await;
        }
        let ended = match ended {
            Some(ended) => ended,
            // End-of-file before the exit (the process closed its output): wait for the exit.
            None => entry.ended_now((&mut exit).await),
        };
        // Leftovers may still write: what the scrubber holds back waits for the end.
        if let Some(reader) = &mut output {
            reader.flush_log().await;
        }
        if let Some(note) = entry.notes(ended.exit) {
            entry.append(note.as_bytes());
        }
        // What the command (or anything else) changed that git would run outside the sandbox
        // is undone now, and said in its result.
        if let Some(note) = entry.git_notes().await {
            entry.append(note.as_bytes());
        }
        if let Some(recorder) = &recorder {
            record(recorder, &entry, &ended);
        }
        if entry.spec.profile.mode != crate::sandbox::SandboxMode::Off
            && let Some(records) = guard.records.upgrade()
        {
            let text = entry.output_text();
            if let Some(refused) = descendants::refused_kills(&text) {
                let others: Vec<Arc<Entry>> = records
                    .of_scope(&entry.spec.scope)
                    .into_iter()
                    .filter(|other| other.spec.id != entry.spec.id)
                    .collect();
                let owners = tokio::task::spawn_blocking(move || {
                    others
                        .iter()
                        .map(|other| (other.spec.id.clone(), other.processes()))
                        .filter(|(_, processes)| !processes.is_empty())
                        .collect::<Vec<_>>()
                })
                .await
                .unwrap_or_default();
                entry.append(descendants::refused_kill_note(&refused, &owners).as_bytes());
            }
        }
        match guard.records.upgrade() {
            Some(records) => records.finish(&entry, ended),
            None => entry.finish_orphaned(ended),
        }
        entry.input.release();

        // Retention. Whatever still holds the pipe keeps being read, so it neither blocks
        // on a full pipe nor dies of SIGPIPE before the record goes away.
        let mut removed = entry.removed.subscribe();
        let mut gone = entry.gone.subscribe();
        let mut released = false;
        let linger = tokio::time::sleep(retention);
        tokio::pin!(linger);
        loop {
            tokio::select! {
                () = &mut linger => break,
                // Nothing is left of it (its leftovers too): its keeper and cgroups go now.
                is_gone = async { gone.wait_for(|gone| *gone).await.is_ok() }, if !released => {
                    released = true;
                    if is_gone {
                        entry.release_when_gone();
                        if let Some(records) = guard.records.upgrade() {
                            records.let_go(&entry);
                        }
                    }
                }
                () = async {
                    // An error means the manager is gone: stop lingering as well.
                    let _ = closed.wait_for(|closed| *closed).await;
                } => break,
                () = async {
                    let _ = removed.wait_for(|removed| *removed).await;
                } => break,
                read = read_more(&mut output), if output.is_some() => {
                    take_read(&mut output, &entry, read).await;
                }
            }
        }
        drop(output);
        // Removes the record.
        drop(guard);
    }
}

/// Owns a monitor's process: when dropped, at the end of the monitor's run or early (a
/// panic, the runtime dropping the task), it finishes the process if that has not happened
/// (killing everything it started first and giving back its slot in the scope's count) and
/// removes the record: leftovers killed, keeper reaped, log file deleted.
pub(super) struct MonitorGuard {
    pub(super) records: Weak<Records>,
    pub(super) entry: Arc<Entry>,
}

impl Drop for MonitorGuard {
    fn drop(&mut self) {
        let records = self.records.upgrade();
        if !*self.entry.finished.borrow() {
            if std::thread::panicking() {
                tracing::warn!(id = %self.entry.spec.id, "a process monitor panicked; killing the process");
            } else {
                // The runtime is shutting down.
                tracing::debug!(id = %self.entry.spec.id, "a process monitor was dropped; killing the process");
            }
            let _ = self.entry.signal_all(Signal::Kill);
            let ended = self.entry.ended_now(None);
            match &records {
                Some(records) => records.finish(&self.entry, ended),
                None => self.entry.finish_orphaned(ended),
            }
        }
        match records {
            Some(records) => records.remove(&self.entry),
            None => self.entry.dispose(),
        }
    }
}

/// What reads a process's output: the pipe, the read buffer and the log. Dropped as soon
/// as the pipe reaches end-of-file.
pub(super) struct OutputReader {
    /// The output pipe, or the host's end of the process's terminal.
    pub(super) pipe: pipe::Receiver,
    /// `pipe` is a terminal: `EIO` is its end-of-file (nothing has it open any more).
    pub(super) terminal: bool,
    /// Small at first, grown when reads fill it.
    pub(super) buf: Vec<u8>,
    pub(super) log: LogSlot,
    /// Replaces the person's secrets the command was given (`scrub.rs`); `None` without.
    pub(super) scrubber: Option<super::scrub::Scrubber>,
}

impl OutputReader {
    async fn read(&mut self) -> io::Result<usize> {
        match self.pipe.read(&mut self.buf).await {
            Err(error) if self.terminal && error.raw_os_error() == Some(nix::libc::EIO) => Ok(0),
            read => read,
        }
    }

    /// Take the `n` bytes just read: into the record's buffer and the log. Grows the read
    /// buffer when a read filled it (small first, so that quiet processes cost little
    /// memory).
    async fn record(&mut self, entry: &Entry, n: usize) {
        let buf = std::mem::take(&mut self.buf);
        match self
            .scrubber
            .as_mut()
            .map(|scrubber| scrubber.feed(&buf[..n]))
        {
            Some(scrubbed) => self.take(entry, &scrubbed).await,
            None => self.take(entry, &buf[..n]).await,
        }
        self.buf = buf;
        if n == self.buf.len() && self.buf.len() < READ_CHUNK {
            self.buf.resize((self.buf.len() * 4).min(READ_CHUNK), 0);
        }
    }

    /// Take `data`: into the record's buffer and the log.
    async fn take(&mut self, entry: &Entry, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        // The log first: whoever sees the output in the record finds it in the file too.
        if let LogSlot::Pending(target) = &self.log {
            self.log = match entry.create_log(target) {
                Some(file) => LogSlot::Open(file),
                None => LogSlot::Off,
            };
        }
        if let LogSlot::Open(file) = &mut self.log {
            file.append(data).await;
            entry.log_bytes.store(file.written(), Ordering::Release);
        }
        entry.record_output(data);
    }

    /// At the end of the output: take what the scrubber held back, and flush the log file.
    async fn finish(&mut self, entry: &Entry) {
        if let Some(held) = self.scrubber.as_mut().map(super::scrub::Scrubber::finish) {
            self.take(entry, &held).await;
        }
        self.flush_log().await;
    }

    /// Flush the log file.
    async fn flush_log(&mut self) {
        if let LogSlot::Open(log) = &mut self.log {
            log.finish().await;
        }
    }
}

/// A read from `output`; never completes when there is nothing to read from any more.
async fn read_more(output: &mut Option<OutputReader>) -> io::Result<usize> {
    match output {
        Some(reader) => reader.read().await,
        None => std::future::pending().await,
    }
}

/// Handle the result of a read from `output` (which must be `Some`): record the data, or at
/// end-of-file (or a read error) flush the log and release the pipe, the log file and the
/// read buffer.
async fn take_read(output: &mut Option<OutputReader>, entry: &Entry, read: io::Result<usize>) {
    let Some(reader) = output.as_mut() else {
        return;
    };
    match read {
        Ok(0) => {}
        Ok(n) => {
            reader.record(entry, n).await;
            return;
        }
        Err(error) if error.kind() == io::ErrorKind::Interrupted => return,
        Err(error) => {
            tracing::warn!(id = %entry.spec.id, %error, "cannot read process output");
        }
    }
    reader.finish(entry).await;
    *output = None;
}

/// Where a process's log goes.
pub(super) enum LogSlot {
    /// No log (disabled, or creating it failed).
    Off,
    /// Created at the first output, so that silent commands cost no file.
    Pending(LogTarget),
    /// Being written.
    Open(OutputLog),
}

/// Append the record's line for `entry`, which ended as `ended`.
fn record(recorder: &super::Recorder, entry: &Entry, ended: &Ended) {
    let spec = &entry.spec;
    let refusals = crate::lock(&entry.refused).clone();
    recorder.write(&super::record::Line {
        scope: &spec.scope,
        id: &spec.id,
        origin: &spec.origin,
        command: &spec.command,
        workdir: &spec.workdir,
        background: spec.background,
        profile: spec.profile.summary(),
        started_ms: spec.started_ms,
        ended_ms: ended.exited_ms,
        exit_code: ended.exit.map(super::reap::Exit::exit_code),
        signal: ended.exit.and_then(super::reap::Exit::signal_name),
        refusals: &refusals,
    });
}
