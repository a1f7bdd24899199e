//! The toolchains that build the example plugins, installed once into the target directory and
//! reused while a marker file records what was installed.
//!
//! - Python: a virtualenv at `<target>/plugin-toolchains/python` holding
//!   `guest-tools/python/requirements.txt` (componentize-py, pinned). The marker is a copy of
//!   that file: a changed pin reinstalls.
//! - JavaScript: `npm ci` of the example's `package.json` and `package-lock.json`, copied into
//!   `<target>/plugin-toolchains/js`. The marker is a copy of both files: a changed lockfile
//!   reinstalls.
//!
//! Each toolchain has a lock file beside its directory (`python.lock`, `js.lock`). A test
//! holds the lock from the install to its end, so two test processes never install or build in
//! the same directory at once.
//!
//! A toolchain that cannot be installed here is an [`Unavailable`] with the reason: `python3`,
//! its `venv` module, `node` 20+ or `npm` missing, or the registry unreachable. Any other
//! failure of an install panics: a broken pin or lockfile must fail the test.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use toolhost_e2e::{repo_root, target_dir};

/// Why a toolchain cannot be installed on this machine: the test that needs it is skipped.
pub struct Unavailable {
    /// What is missing, in one line.
    pub reason: String,
    /// What the failed command printed (empty when nothing ran).
    pub detail: String,
}

impl Unavailable {
    /// `reason`, with nothing printed to show.
    fn new(reason: impl Into<String>) -> Unavailable {
        Unavailable {
            reason: reason.into(),
            detail: String::new(),
        }
    }

    /// `reason`, and what the failed command printed.
    fn with_output(reason: impl Into<String>, output: &Output) -> Unavailable {
        Unavailable {
            reason: reason.into(),
            detail: printed(output).trim().to_owned(),
        }
    }

    /// The same, with `hint` (what to install) after the reason.
    fn hint(mut self, hint: &str) -> Unavailable {
        self.reason = format!("{}: {hint}", self.reason);
        self
    }
}

/// The file inside a toolchain's directory that records what was installed there.
const MARKER: &str = ".toolhost-installed";

/// How long an install (`python3 -m venv`, `pip install`, `npm ci`) may take.
const INSTALL_LIMIT: Duration = Duration::from_secs(300);

/// Texts in an installer's output that mean the registry could not be reached (pip's
/// urllib3 errors, npm's errno codes, the resolver's messages).
const UNREACHABLE: [&str; 16] = [
    "NewConnectionError",
    "ConnectTimeoutError",
    "ReadTimeoutError",
    "ProxyError",
    "Max retries exceeded",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "No route to host",
    "ENOTFOUND",
    "EAI_AGAIN",
    "ECONNREFUSED",
    "ECONNRESET",
    "ETIMEDOUT",
    "ENETUNREACH",
    "EHOSTUNREACH",
];

/// `<target>/plugin-toolchains`: where the toolchains live.
fn toolchains_dir() -> PathBuf {
    target_dir().join("plugin-toolchains")
}

/// The exclusive lock of the toolchain `name`, held until the returned file is dropped.
fn lock(name: &str) -> File {
    let dir = toolchains_dir();
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    let path = dir.join(format!("{name}.lock"));
    let file =
        File::create(&path).unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
    file.lock()
        .unwrap_or_else(|e| panic!("cannot lock {}: {e}", path.display()));
    file
}

/// What a finished command printed, both streams.
pub fn printed(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Read all of `stream` on a thread.
fn collect(mut stream: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stream.read_to_end(&mut bytes);
        bytes
    })
}

/// Run `command` (described as `what`) to its end, killing it after `limit`.
/// `Err` means that it could not start.
/// A command killed at the limit panics.
pub fn run(command: &mut Command, what: &str, limit: Duration) -> std::io::Result<Output> {
    let started = Instant::now();
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let stdout = collect(child.stdout.take().expect("piped stdout"));
    let stderr = collect(child.stderr.take().expect("piped stderr"));
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not finish within {limit:?}: {command:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = Output {
        status,
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
    };
    eprintln!(
        "{what}: {} in {:.1?}",
        if output.status.success() {
            "done".to_owned()
        } else {
            output.status.to_string()
        },
        started.elapsed()
    );
    Ok(output)
}

/// The version `program --version` prints.
/// `Err` says that the program is missing or does not run.
fn version_of(program: &str) -> Result<String, Unavailable> {
    match Command::new(program).arg("--version").output() {
        Ok(output) if output.status.success() => {
            Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
        }
        Ok(output) => Err(Unavailable::with_output(
            format!("`{program} --version` failed ({})", output.status),
            &output,
        )),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            Err(Unavailable::new(format!("`{program}` is not installed")))
        }
        Err(error) => Err(Unavailable::new(format!("cannot run `{program}`: {error}"))),
    }
}

/// Whether an installer's output says that the registry could not be reached.
fn unreachable(output: &str) -> bool {
    UNREACHABLE.iter().any(|sign| output.contains(sign))
}

/// The outcome of an install step: the registry unreachable is [`Unavailable`], any other
/// failure panics.
pub fn installed(output: Output, what: &str, registry: &str) -> Result<(), Unavailable> {
    if output.status.success() {
        return Ok(());
    }
    let text = printed(&output);
    if unreachable(&text) {
        return Err(Unavailable::with_output(
            format!(
                "{registry} is unreachable: {what} failed ({})",
                output.status
            ),
            &output,
        ));
    }
    panic!(
        "{what} failed ({}) although {registry} answered:\n{}\n\
         (set TOOLHOST_SKIP_PLUGIN_LANGUAGES=1 to skip these tests)",
        output.status,
        text.trim()
    );
}

/// The Python toolchain: componentize-py in its virtualenv, locked for the holder.
pub struct Python {
    /// The `componentize-py` program.
    pub componentize_py: PathBuf,
    /// The toolchain's lock, held while this value lives.
    _lock: File,
}

/// The version of `componentize-py` that `requirements` pins (`componentize-py==VERSION`).
fn pinned_componentize_py(requirements: &str) -> Option<&str> {
    requirements
        .lines()
        .map(str::trim)
        .find_map(|line| line.strip_prefix("componentize-py=="))
        .map(str::trim)
}

/// The Python toolchain, installed if the marker does not record the current requirements.
pub fn python() -> Result<Python, Unavailable> {
    let requirements_path = repo_root().join("guest-tools/python/requirements.txt");
    let requirements = std::fs::read_to_string(&requirements_path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", requirements_path.display()));
    let pin = pinned_componentize_py(&requirements).unwrap_or_else(|| {
        panic!(
            "{} pins no componentize-py==VERSION",
            requirements_path.display()
        )
    });
    let lock = lock("python");
    let venv = toolchains_dir().join("python");
    let componentize_py = venv.join("bin").join("componentize-py");
    let marker = venv.join(MARKER);
    let wanted_version = format!("componentize-py {pin}");
    let current = |program: &Path| {
        version_of(&program.to_string_lossy()).is_ok_and(|version| version == wanted_version)
    };
    let recorded = std::fs::read_to_string(&marker).ok();
    if recorded.as_deref() == Some(requirements.as_str()) && current(&componentize_py) {
        return Ok(Python {
            componentize_py,
            _lock: lock,
        });
    }

    version_of("python3")
        .map_err(|missing| missing.hint("install Python 3 with its venv module"))?;
    let _ = std::fs::remove_file(&marker);
    let made = run(
        Command::new("python3")
            .args(["-m", "venv", "--clear"])
            .arg(&venv),
        "python3 -m venv",
        INSTALL_LIMIT,
    )
    .map_err(|e| Unavailable::new(format!("cannot run python3: {e}")))?;
    if !made.status.success() {
        return Err(Unavailable::with_output(
            "`python3 -m venv` cannot make a virtualenv: install the venv module \
             (python3-venv on Debian or Ubuntu)",
            &made,
        ));
    }
    let python = venv.join("bin").join("python");
    let pip = run(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--retries",
                "1",
                "--timeout",
                "30",
                "-r",
            ])
            .arg(&requirements_path),
        "pip install -r guest-tools/python/requirements.txt",
        INSTALL_LIMIT,
    )
    .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    installed(
        pip,
        "pip install -r guest-tools/python/requirements.txt",
        "PyPI",
    )?;
    assert!(
        current(&componentize_py),
        "after pip install, {} is not {wanted_version}",
        componentize_py.display()
    );
    std::fs::write(&marker, &requirements)
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", marker.display()));
    Ok(Python {
        componentize_py,
        _lock: lock,
    })
}

/// The JavaScript toolchain: the example's packages installed from its lockfile, locked for
/// the holder.
pub struct JavaScript {
    /// The directory holding the copy of the example and its `node_modules`.
    pub dir: PathBuf,
    /// The toolchain's lock, held while this value lives.
    _lock: File,
}

/// The files of the JavaScript example that define its installation.
const JS_MANIFESTS: [&str; 2] = ["package.json", "package-lock.json"];

/// The oldest Node.js major version componentize-js runs on.
const NODE_MAJOR: u32 = 20;

/// The JavaScript toolchain for the example in `example` (its manifests and sources copied
/// into `<target>/plugin-toolchains/js`), installed with `npm ci` if the marker does not
/// record the current manifests.
pub fn javascript(example: &Path) -> Result<JavaScript, Unavailable> {
    let needed = format!("install Node.js {NODE_MAJOR} or later with npm");
    let node = version_of("node").map_err(|missing| missing.hint(&needed))?;
    let major = node
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|major| major.parse::<u32>().ok());
    if major.is_none_or(|major| major < NODE_MAJOR) {
        return Err(Unavailable::new(format!(
            "`node --version` says {node}: {needed}"
        )));
    }
    version_of("npm").map_err(|missing| missing.hint(&needed))?;

    let lock = lock("js");
    let dir = toolchains_dir().join("js");
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    let mut wanted = String::new();
    for name in JS_MANIFESTS {
        let path = example.join(name);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        wanted.push_str(&text);
        wanted.push('\0');
    }
    let marker = dir.join(MARKER);
    let recorded = std::fs::read_to_string(&marker).ok();
    let complete = dir
        .join("node_modules/@bytecodealliance/componentize-js/package.json")
        .is_file();
    if recorded.as_deref() != Some(wanted.as_str()) || !complete {
        let _ = std::fs::remove_file(&marker);
        copy_files(example, &dir, &JS_MANIFESTS);
        let npm = run(
            Command::new("npm")
                .args([
                    "ci",
                    "--ignore-scripts",
                    "--no-audit",
                    "--no-fund",
                    "--fetch-retries",
                    "1",
                ])
                .current_dir(&dir),
            "npm ci",
            INSTALL_LIMIT,
        )
        .unwrap_or_else(|e| panic!("cannot run npm: {e}"));
        installed(npm, "npm ci", "the npm registry")?;
        std::fs::write(&marker, &wanted)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", marker.display()));
    }
    Ok(JavaScript { dir, _lock: lock })
}

/// Copy the files `names` from `from` into `to`.
pub fn copy_files(from: &Path, to: &Path, names: &[&str]) {
    for name in names {
        std::fs::copy(from.join(name), to.join(name))
            .unwrap_or_else(|e| panic!("cannot copy {name} into {}: {e}", to.display()));
    }
}
