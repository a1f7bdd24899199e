//! Commands whose progress a test controls or observes: a [`Gate`] holds its call until the
//! test opens it, a [`Stoppable`] command tells a graceful stop by the host from a kill, and a
//! [`rendezvous_command`] ends only when its copies run at the same time.

use crate::paths::shared_tempdir;
use crate::processes::{eventually, marker, processes_with, wait_gone};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tempfile::TempDir;

/// A command that holds its call until the test lets it go: it says it started (a file in a
/// [`shared_tempdir`]), then waits for the gate to open (another file there).
pub struct Gate {
    dir: TempDir,
    marker: String,
}

impl Gate {
    pub fn new() -> Gate {
        Gate {
            dir: shared_tempdir(),
            marker: marker(),
        }
    }

    fn started_file(&self) -> PathBuf {
        self.dir.path().join("started")
    }

    fn open_file(&self) -> PathBuf {
        self.dir.path().join("open")
    }

    /// The held command: it says it started, waits for the gate, then prints `released`. Its
    /// command line holds [`Self::marker`].
    pub fn command(&self) -> String {
        format!(
            "touch '{}'; while [ ! -e '{}' ]; do sleep 0.02; done; echo released # {}",
            self.started_file().display(),
            self.open_file().display(),
            self.marker
        )
    }

    /// A command that opens the gate: for a call that must not run.
    pub fn opening_command(&self) -> String {
        format!("touch '{}'", self.open_file().display())
    }

    /// Whether the held command started within 20 s.
    pub async fn started(&self) -> bool {
        eventually(Duration::from_secs(20), || self.started_file().exists()).await
    }

    pub fn is_open(&self) -> bool {
        self.open_file().exists()
    }

    /// Let the held command finish.
    pub fn open(&self) {
        std::fs::write(self.open_file(), "").expect("open the gate");
    }

    /// What the held command's command line holds, for [`wait_gone`].
    pub fn marker(&self) -> &str {
        &self.marker
    }
}

impl Default for Gate {
    fn default() -> Self {
        Gate::new()
    }
}

/// A shell command that ends only once `n` copies of it run at the same time: each one
/// registers in `dir` (an empty directory) and waits until `n` have. Calls that ran one after
/// another instead of together would each wait until their timeout.
pub fn rendezvous_command(dir: &Path, n: usize) -> String {
    let dir = dir.display();
    format!(
        "touch '{dir}'/$$; while [ \"$(ls '{dir}' | wc -l)\" -lt {n} ]; do sleep 0.02; done; echo met"
    )
}

/// A command for no-orphan tests that tells a graceful stop from a kill. It starts two
/// long-running shells, one in the command's process group and one in a session of its own
/// (`setsid`), each looping on a marked `sleep` and recording `SIGTERM` in a file (the loop's
/// `sleep` gets `SIGTERM` too, so the trap runs at once); the command itself waits, and on
/// `SIGTERM` waits for both shells before it exits, so a grace period that lasts as long as
/// the command covers them.
///
/// The host's cleanup (`shutdown`, the end of a scope) sends `SIGTERM` to everything a command
/// started: both files appear. What happens when that cleanup is missing (the keeper notices
/// that the host has gone or dropped it) is `SIGKILL`: no file appears. So
/// [`Self::stopped_by_the_host`] fails if the cleanup under test is removed, even though the
/// processes are gone either way.
pub struct Stoppable {
    dir: TempDir,
    marker: String,
}

/// The two shells of a [`Stoppable`] command.
const STOPPABLE_SHELLS: [&str; 2] = ["in-group", "own-session"];

impl Stoppable {
    /// A fresh command with its own marker and record directory.
    pub fn new() -> Stoppable {
        Stoppable {
            dir: shared_tempdir(),
            marker: marker(),
        }
    }

    /// On every command line of its processes.
    pub fn marker(&self) -> &str {
        &self.marker
    }

    /// A shell that says it is ready only once its `sleep` runs (has exec'd: a `SIGTERM` that
    /// reached the forked shell before that would be taken by the shell's trap handler and
    /// lost), and then waits for it with `wait`, which a trapped signal interrupts at once.
    fn shell(&self, name: &str) -> String {
        let dir = self.dir.path().display();
        format!(
            "trap 'echo > {dir}/{name}.term; exit 0' TERM; sleep 300.{marker} & s=\\$!; \
             until [ \\\"\\$(cat /proc/\\$s/comm 2>/dev/null)\\\" = sleep ]; do :; done; \
             echo > {dir}/{name}.ready; \
             while :; do wait \\$s; sleep 300.{marker} & s=\\$!; done",
            marker = self.marker
        )
    }

    /// The command (for `execute`); it runs until stopped. Wait for [`Self::ready`] before
    /// stopping it.
    pub fn command(&self) -> String {
        let [group, session] = STOPPABLE_SHELLS;
        format!(
            "trap 'wait; exit 0' TERM; sh -c \"{}\" >/dev/null 2>&1 & \
             setsid sh -c \"{}\" >/dev/null 2>&1 & wait",
            self.shell(group),
            self.shell(session)
        )
    }

    /// Both shells listen for `SIGTERM`.
    pub fn ready(&self) -> bool {
        STOPPABLE_SHELLS
            .iter()
            .all(|name| self.dir.path().join(format!("{name}.ready")).exists())
    }

    /// Wait up to `limit` until both shells listen for `SIGTERM`.
    pub async fn wait_ready(&self, limit: Duration) {
        assert!(
            eventually(limit, || self.ready()).await,
            "the stoppable command did not start within {limit:?}"
        );
    }

    /// The shells that got `SIGTERM`.
    pub fn terminated(&self) -> Vec<&'static str> {
        STOPPABLE_SHELLS
            .into_iter()
            .filter(|name| self.dir.path().join(format!("{name}.term")).exists())
            .collect()
    }

    /// Wait up to `limit` until none of its processes is left, then check that the host's
    /// cleanup stopped them (`SIGTERM` reached both shells), not a kill after the host was gone.
    pub async fn stopped_by_the_host(&self, limit: Duration) -> Result<(), String> {
        if !wait_gone(&self.marker, limit).await {
            return Err(format!(
                "still running after {limit:?}: {:?}",
                processes_with(&self.marker)
            ));
        }
        let terminated = self.terminated();
        if terminated.len() == STOPPABLE_SHELLS.len() {
            Ok(())
        } else {
            Err(format!(
                "gone, but only {terminated:?} of {STOPPABLE_SHELLS:?} got SIGTERM: killed, \
                 not stopped by the host's cleanup"
            ))
        }
    }
}

impl Default for Stoppable {
    fn default() -> Self {
        Stoppable::new()
    }
}
