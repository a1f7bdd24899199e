//! Helpers shared by the end-to-end tests and benchmarks: plugin directories with fixture
//! components and manifests, hosts built on them, the `toolhost` binary (built on demand), a
//! scan of `/proc` for leftover processes, and an MCP client ([`mcp_client`]).

pub mod mcp_client;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;
use tempfile::TempDir;
use toolhost::ToolHost;
use toolhost::testing::FakeProcesses;

/// A temporary plugin directory holding `name.wasm` (copied from `component`) and, if given,
/// `name.toml` with `manifest`.
pub fn plugin_dir(component: &Path, name: &str, manifest: Option<&str>) -> TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::copy(component, dir.path().join(format!("{name}.wasm"))).expect("copy component");
    if let Some(text) = manifest {
        std::fs::write(dir.path().join(format!("{name}.toml")), text).expect("write manifest");
    }
    dir
}

/// The hostile fixture component's path.
pub fn hostile_component() -> PathBuf {
    PathBuf::from(toolhost::bundled::fixtures::HOSTILE)
}

/// A host with no bundled policy, loading `dir`, on the fake process backend.
pub async fn fake_host(dir: &Path, fake: std::sync::Arc<FakeProcesses>) -> ToolHost {
    ToolHost::builder()
        .bundled_policy(None)
        .plugin_dir(dir)
        .process_backend(fake)
        .cache_dir(None)
        .build()
        .await
        .expect("host builds")
}

/// The error of building a host like [`fake_host`] does, for loads that must be refused.
pub async fn fake_host_error(dir: &Path) -> toolhost::HostError {
    ToolHost::builder()
        .bundled_policy(None)
        .plugin_dir(dir)
        .process_backend(FakeProcesses::new())
        .cache_dir(None)
        .build()
        .await
        .err()
        .expect("loading the plugin directory must fail")
}

/// Parse a tool result as JSON.
pub fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("result is not JSON ({e}): {text}"))
}

/// A host running bundled policy `policy` on `fake`, with compiled components cached under
/// the test target directory.
pub async fn policy_host(policy: &str, fake: std::sync::Arc<FakeProcesses>) -> ToolHost {
    ToolHost::builder()
        .bundled_policy(Some(policy))
        .process_backend(fake)
        .cache_dir(Some(test_cache_dir()))
        .build()
        .await
        .expect("host builds")
}

/// Compiled-component cache for tests.
/// A directory every test host lets commands write (`--writable`), for files that a test and
/// its commands both see: confined commands have a private `/tmp`, so a plain temporary
/// directory of the test is not there for them.
pub fn shared_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join("toolhost-tests-shared");
        std::fs::create_dir_all(&dir).expect("shared dir");
        // Sticky and open to all, like /tmp: tests also run hosts as an unprivileged user.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777))
            .expect("chmod shared dir");
        dir.canonicalize().expect("canonical shared dir")
    })
}

/// A fresh temporary directory in [`shared_dir`].
pub fn shared_tempdir() -> TempDir {
    tempfile::tempdir_in(shared_dir()).expect("shared temp dir")
}

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

/// The flags that make [`shared_dir`] writable for a `toolhost` process's commands.
pub fn shared_writable() -> [&'static std::ffi::OsStr; 2] {
    ["--writable".as_ref(), shared_dir().as_os_str()]
}

pub fn test_cache_dir() -> PathBuf {
    std::env::temp_dir().join("toolhost-test-component-cache")
}

/// A host on the real process manager with the bundled `policy`, keeping output logs in a
/// temporary state directory (returned so it lives as long as the host).
pub async fn real_host(policy: &str) -> (ToolHost, TempDir) {
    real_host_with(ToolHost::builder().bundled_policy(Some(policy))).await
}

/// A host on the real process manager loading only the plugin directory `dir`.
pub async fn real_plugin_host(dir: &Path) -> (ToolHost, TempDir) {
    real_host_with(ToolHost::builder().bundled_policy(None).plugin_dir(dir)).await
}

/// A host on the real process manager configured by `builder` (the state directory, the
/// shared writable directory and the component cache are set here).
pub async fn real_host_with(builder: toolhost::ToolHostBuilder) -> (ToolHost, TempDir) {
    let state = tempfile::tempdir().expect("state dir");
    let mut config = toolhost::process::ProcessManagerConfig {
        state_dir: Some(state.path().to_path_buf()),
        kill_grace: std::time::Duration::from_millis(500),
        ..Default::default()
    };
    config.sandbox.writable.push(shared_dir().to_path_buf());
    let host = builder
        .process_config(config)
        .cache_dir(Some(test_cache_dir()))
        .build()
        .await
        .expect("host builds");
    (host, state)
}

/// `<target>/<profile>`: where the running test binary was built (it lives in its `deps/`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("test binary lives in <target>/<profile>/deps")
        .to_path_buf()
}

/// The target directory these tests were built in (`CARGO_TARGET_DIR` or `target/`).
pub fn target_dir() -> PathBuf {
    profile_dir()
        .parent()
        .expect("the profile directory lies in the target directory")
        .to_path_buf()
}

/// The variable that names where the confinement tests put their fake machines.
pub const MACHINES_VARIABLE: &str = "TOOLHOST_TEST_MACHINES";

/// Where the confinement tests put their fake machines (a home with secrets, a workspace, an
/// "outside" directory), one fresh directory each.
///
/// 1. `TOOLHOST_TEST_MACHINES` names the root; by default it is `confinement-tests` in the
///    target directory.
/// 2. A root under `/tmp`, `/dev/shm` or the temporary directory cannot hold a fake machine:
///    a confined command sees a private `/tmp` there, or may write it when it runs without
///    namespaces. Such a root is replaced by `/var/tmp/toolhost-test-machines-UID`, which no
///    profile hides or makes writable. A clone under `/tmp` lands here.
pub fn machines_root() -> PathBuf {
    let chosen = std::env::var_os(MACHINES_VARIABLE)
        .filter(|value| !value.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("confinement-tests"));
    let chosen = std::path::absolute(&chosen).unwrap_or(chosen);
    let root = if seen_differently_when_confined(&chosen) {
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        PathBuf::from(format!("/var/tmp/toolhost-test-machines-{uid}"))
    } else {
        chosen
    };
    std::fs::create_dir_all(&root).expect("the fake machines' root can be created");
    root
}

/// Whether `path` lies where a confined command sees something else than the host does (a
/// private `/tmp`), or may write (`/tmp` without namespaces, `/dev/shm`).
pub fn seen_differently_when_confined(path: &Path) -> bool {
    let resolved = path
        .ancestors()
        .find_map(|ancestor| {
            let rest = path.strip_prefix(ancestor).ok()?;
            Some(std::fs::canonicalize(ancestor).ok()?.join(rest))
        })
        .unwrap_or_else(|| path.to_path_buf());
    let temporary = std::env::temp_dir();
    [
        Path::new("/tmp"),
        Path::new("/dev/shm"),
        temporary.as_path(),
    ]
    .iter()
    .any(|shared| resolved.starts_with(shared))
}

/// The repository's root directory.
pub fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ lies in the repository")
}

/// The `toolhost` binary of the profile these tests were built with, built (once per test
/// binary) with `cargo build` so it is never stale.
pub fn toolhost_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let profile_dir = profile_dir();
        let target_dir = target_dir();
        let profile = profile_dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("debug")
            .to_string();
        let bin = profile_dir.join("toolhost");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
        let mut build = std::process::Command::new(cargo);
        build
            .args(["build", "--quiet", "-p", "toolhost", "--bin", "toolhost"])
            .arg("--manifest-path")
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml"))
            .arg("--target-dir")
            .arg(&target_dir);
        match profile.as_str() {
            "debug" => {}
            "release" => {
                build.arg("--release");
            }
            other => {
                build.args(["--profile", other]);
            }
        }
        match build.status() {
            Ok(status) if status.success() => {}
            outcome => eprintln!(
                "warning: `cargo build -p toolhost` failed ({outcome:?}); using {} as it is",
                bin.display()
            ),
        }
        assert!(
            bin.is_file(),
            "the toolhost binary is missing at {}; run `cargo build -p toolhost` first",
            bin.display()
        );
        bin
    })
    .clone()
}

/// A compiled-component cache shared by the MCP tests, so servers start quickly.
pub fn cache_env() -> (&'static str, String) {
    (
        "XDG_CACHE_HOME",
        std::env::temp_dir()
            .join("toolhost-mcp-test-cache")
            .display()
            .to_string(),
    )
}

/// A unique marker for commands whose processes a test looks for in `/proc`.
pub fn marker() -> String {
    static COUNTER: AtomicI64 = AtomicI64::new(0);
    format!(
        "{}{:04}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// The pids of live (not zombie) processes whose command line contains `needle`.
pub fn processes_with(needle: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return pids;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if !cmdline.contains(needle) {
            continue;
        }
        let zombie = std::fs::read_to_string(entry.path().join("stat"))
            .map(|s| {
                s.rsplit_once(')')
                    .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
            })
            .unwrap_or(true);
        if !zombie {
            pids.push(pid);
        }
    }
    pids
}

/// Check `condition` every 20 ms until it holds (true) or `limit` passes (false). For waiting
/// on what a test can observe instead of sleeping for a guessed time.
pub async fn eventually(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if condition() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Wait up to `limit` until no live process's command line contains `needle`.
pub async fn wait_gone(needle: &str, limit: Duration) -> bool {
    eventually(limit, || processes_with(needle).is_empty()).await
}

/// Wait up to `limit` until some live process's command line contains `needle`.
pub async fn wait_present(needle: &str, limit: Duration) -> bool {
    eventually(limit, || !processes_with(needle).is_empty()).await
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

/// How many live `sleep` processes have `marker` on their command line.
pub fn sleeps_with(marker: &str) -> usize {
    processes_with(marker)
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.starts_with(b"sleep\0"))
        })
        .count()
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

/// A copy of the `toolhost` binary that an unprivileged user can run: in a fresh directory under
/// `/var/tmp` (reachable by every user, and not a writable root of the sandbox, unlike `/tmp`),
/// owned by `nobody` when the tests run as root, and run as `nobody` then (through `setpriv`),
/// as the current user otherwise.
pub struct UnprivilegedHost {
    dir: TempDir,
    root: bool,
}

impl UnprivilegedHost {
    /// The directory with the binary and the subdirectories `dirs`, all owned by the user
    /// the host will run as.
    pub fn new(dirs: &[&str]) -> UnprivilegedHost {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        let dir = tempfile::tempdir_in("/var/tmp").expect("dir in /var/tmp");
        for name in dirs {
            std::fs::create_dir_all(dir.path().join(name)).expect("dir");
        }
        std::fs::copy(toolhost_bin(), dir.path().join("toolhost")).expect("copy");
        if root {
            let status = std::process::Command::new("chown")
                .args(["-R", "65534:65534"])
                .arg(dir.path())
                .status()
                .expect("chown");
            assert!(status.success());
        }
        UnprivilegedHost { dir, root }
    }

    /// Whether the tests run as root (and the host as `nobody`).
    pub fn as_nobody(&self) -> bool {
        self.root
    }

    /// A path in the directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The command that runs the copied binary unprivileged.
    pub fn command(&self) -> std::process::Command {
        let binary = self.path("toolhost");
        if self.root {
            let mut command = std::process::Command::new("setpriv");
            command
                .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                .arg(binary);
            command
        } else {
            std::process::Command::new(binary)
        }
    }
}
