//! The host side of the `toolhost:plugin/report` import (since 0.4.0): a tool's progress and
//! log lines during a call, handed to the caller's sinks ([`CallOptions`]).
//!
//! A guest cannot flood its caller through it:
//! 1. Each call sends at most [`MAX_REPORTS`] progress updates and as many log lines; later
//!    ones are dropped.
//! 2. A message is cut at [`MAX_MESSAGE_BYTES`] (on a character boundary).
//! 3. A progress value that is not finite, or not above the last one the call sent (the
//!    host's own included), is dropped: MCP requires progress to increase ([`increasing`]).
//! 4. Once the tool has sent progress, the host's own updates (while the guest waits on a
//!    process) stop, so the two never interleave ([`Reports::tool_progress`]).
//!
//! The 0.5.0 and 0.4.0 interfaces, at the end, delegate to the current one; older contracts
//! have no such interface.

use super::latest::wit_report;
use super::{v0_4_0, v0_5_0};
use crate::guest::state::{CallOptions, CallState, LogLevel, Progress, ProgressSink, ToolLog};
use std::sync::{Arc, Mutex, PoisonError};

/// Progress updates, and log lines, one call may send.
pub(crate) const MAX_REPORTS: u32 = 1000;
/// Longest message of a report, in bytes.
pub(crate) const MAX_MESSAGE_BYTES: usize = 4096;

/// What a call's tool has reported so far.
#[derive(Debug, Default)]
pub(crate) struct Reports {
    /// The plugin the call belongs to, named in its log lines.
    plugin: String,
    /// Progress updates the tool sent.
    progress_sent: u32,
    /// Log lines sent.
    logs_sent: u32,
}

impl Reports {
    /// Nothing reported yet by a call of `plugin`.
    pub(crate) fn new(plugin: &str) -> Self {
        Reports {
            plugin: plugin.to_string(),
            ..Reports::default()
        }
    }

    /// The plugin the call belongs to.
    pub(crate) fn plugin(&self) -> &str {
        &self.plugin
    }

    /// Whether the tool has sent progress of its own: the host then sends none.
    pub(crate) fn tool_progress(&self) -> bool {
        self.progress_sent > 0
    }

    /// Pass a progress update on, per the rules in the module documentation.
    fn progress(&mut self, options: &CallOptions, update: Progress) {
        let Some(sink) = &options.progress else {
            return;
        };
        let finite = update.progress.is_finite() && update.total.is_none_or(f64::is_finite);
        if self.progress_sent >= MAX_REPORTS || !finite {
            return;
        }
        self.progress_sent += 1;
        sink(update);
    }

    /// Pass a log line on, per the rules in the module documentation.
    fn log(&mut self, options: &CallOptions, level: LogLevel, message: String) {
        let Some(sink) = &options.log else {
            return;
        };
        if self.logs_sent >= MAX_REPORTS {
            return;
        }
        self.logs_sent += 1;
        sink(ToolLog {
            plugin: self.plugin.clone(),
            level,
            message: cut(message),
        });
    }
}

/// `sink` behind a gate that drops an update whose progress is not above the last one passed.
/// Every update of a call, the host's and the tool's, goes through the same gate.
pub(crate) fn increasing(sink: ProgressSink) -> ProgressSink {
    let last: Mutex<Option<f64>> = Mutex::new(None);
    Arc::new(move |update: Progress| {
        let mut last = last.lock().unwrap_or_else(PoisonError::into_inner);
        if last.is_none_or(|last| update.progress > last) {
            *last = Some(update.progress);
            sink(update);
        }
    })
}

/// `message` cut to at most [`MAX_MESSAGE_BYTES`], on a character boundary.
fn cut(mut message: String) -> String {
    message.truncate(message.floor_char_boundary(MAX_MESSAGE_BYTES));
    message
}

impl From<wit_report::Level> for LogLevel {
    fn from(level: wit_report::Level) -> Self {
        use wit_report::Level as L;
        match level {
            L::Debug => LogLevel::Debug,
            L::Info => LogLevel::Info,
            L::Notice => LogLevel::Notice,
            L::Warning => LogLevel::Warning,
            L::Error => LogLevel::Error,
            L::Critical => LogLevel::Critical,
            L::Alert => LogLevel::Alert,
            L::Emergency => LogLevel::Emergency,
        }
    }
}

impl wit_report::Host for CallState {
    async fn progress(
        &mut self,
        done: f64,
        total: Option<f64>,
        message: Option<String>,
    ) -> wasmtime::Result<()> {
        let update = Progress {
            progress: done,
            total,
            message: message.map(cut),
        };
        self.reports.progress(&self.options, update);
        Ok(())
    }

    async fn log(&mut self, level: wit_report::Level, message: String) -> wasmtime::Result<()> {
        self.reports.log(&self.options, level.into(), message);
        Ok(())
    }
}

// The 0.5.0 and 0.4.0 interfaces: the same as the current one.

/// Serve the `report` interface of frozen version `$version`, the current one under its own
/// types.
macro_rules! same_as_current {
    ($version:ident) => {
        impl $version::report::Host for CallState {
            async fn progress(
                &mut self,
                done: f64,
                total: Option<f64>,
                message: Option<String>,
            ) -> wasmtime::Result<()> {
                wit_report::Host::progress(self, done, total, message).await
            }

            async fn log(
                &mut self,
                level: $version::report::Level,
                message: String,
            ) -> wasmtime::Result<()> {
                wit_report::Host::log(self, level.into(), message).await
            }
        }
    };
}

same_as_current!(v0_5_0);
same_as_current!(v0_4_0);

#[cfg(test)]
mod tests {
    use super::*;

    /// What a recording sink got.
    type Recorded<T> = Arc<Mutex<Vec<T>>>;

    fn recording() -> (CallOptions, Recorded<Progress>, Recorded<ToolLog>) {
        let progress = Arc::new(Mutex::new(Vec::new()));
        let logs = Arc::new(Mutex::new(Vec::new()));
        let (p, l) = (progress.clone(), logs.clone());
        let options = CallOptions {
            progress: Some(increasing(Arc::new(move |u| p.lock().unwrap().push(u)))),
            log: Some(Arc::new(move |line| l.lock().unwrap().push(line))),
            ..CallOptions::default()
        };
        (options, progress, logs)
    }

    fn at(progress: f64) -> Progress {
        Progress {
            progress,
            total: Some(100.0),
            message: None,
        }
    }

    #[test]
    fn progress_that_does_not_increase_or_is_not_finite_is_dropped() {
        let (options, sent, _) = recording();
        let mut reports = Reports::new("p");
        assert!(!reports.tool_progress());
        for value in [0.0, 50.0, 50.0, 20.0, f64::NAN, f64::INFINITY, 100.0] {
            reports.progress(&options, at(value));
        }
        let values: Vec<f64> = sent.lock().unwrap().iter().map(|u| u.progress).collect();
        assert_eq!(values, [0.0, 50.0, 100.0]);
        assert!(reports.tool_progress());
    }

    #[test]
    fn a_call_sends_at_most_its_share_of_reports_and_messages_are_cut() {
        let (options, sent, logs) = recording();
        let mut reports = Reports::new("plug");
        for i in 0..MAX_REPORTS + 10 {
            reports.progress(&options, at(f64::from(i)));
            assert!(reports.tool_progress());
            reports.log(&options, LogLevel::Info, "é".repeat(MAX_MESSAGE_BYTES));
        }
        assert_eq!(sent.lock().unwrap().len(), MAX_REPORTS as usize);
        let logs = logs.lock().unwrap();
        assert_eq!(logs.len(), MAX_REPORTS as usize);
        assert!(logs[0].message.len() <= MAX_MESSAGE_BYTES);
        assert_eq!(logs[0].message.len(), MAX_MESSAGE_BYTES);
        assert_eq!(logs[0].plugin, "plug");
    }
}
