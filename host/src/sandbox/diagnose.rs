//! Why a confined command failed, as far as the host can tell once it ended: what the
//! confinement refused it ([`Refusal`]), and the note that tells the model.
//!
//! The process record gathers the evidence (its output, its limits' counters, the keeper's
//! refused sockets, the network gate's refusals) and asks [`in_output`] what a failed
//! command's output shows; each [`Refusal`] words its own note.
//!
//! 1. A limit that stopped it: the memory limit's kill (per command, session or host), the
//!    process limit (its cgroup's, or the session's `RLIMIT_NPROC`), the session's own `/tmp`
//!    or `/dev/shm` full.
//! 2. A Unix socket the keeper refused, a host the network gate refused.
//! 3. Only when nothing above explains a failure: a hidden path its output names, an entry
//!    beside a hidden path that Landlock could not grant, or else the confinement in general
//!    when the output reads like a refusal.

use std::path::{Path, PathBuf};

use super::{HiddenPaths, MemoryKill, Network, PrivateSpace, Profile, SandboxMode};

/// How refusals of the confinement read in a command's output.
const DENIALS: &[&str] = &[
    "Permission denied",
    "Operation not permitted",
    "Read-only file system",
    "PermissionError",
    "EACCES",
    "EPERM",
    // Landlock refuses links and renames across its rules with EXDEV.
    "Invalid cross-device link",
];

/// How a refused network access reads under network `none`, also in a network namespace of
/// the command's own (where nothing but its loopback exists).
const NETWORK_DENIALS: &[&str] = &[
    "Network is unreachable",
    "ENETUNREACH",
    "Temporary failure in name resolution",
    "Could not resolve host",
    "getaddrinfo",
    "Address family not supported",
    // Nothing listens on the command's own loopback.
    "Connection refused",
    "Failed to connect",
    "Couldn't connect",
];

/// What the confinement refused a command, as far as the host can tell once it ended. Plain
/// data: a policy gets it typed (WIT `process.refusal`) beside the note the host words for it
/// ([`Refused`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// The session's own `/tmp` or `/dev/shm` is full: their sizes, where the host bounds them.
    SpaceFull {
        /// The size of `/tmp` (`--tmp-size-per-session`).
        tmp_bytes: Option<u64>,
        /// The size of `/dev/shm` (`--shm-size-per-session`).
        shm_bytes: Option<u64>,
    },
    /// Forks failed, maybe at the session's process limit (`RLIMIT_NPROC`, no pids cgroup).
    ScopeProcesses(u32),
    /// A process of the command was killed for want of memory, and whose limit it was.
    Memory(MemoryKill),
    /// The command reached its process limit (its pids cgroup).
    Processes(u32),
    /// Unix sockets the keeper refused, as it named them.
    UnixSockets(Vec<String>),
    /// Hosts the network gate refused.
    Network {
        /// Each host refused (with its port for a connection) and why, oldest first.
        refused: Vec<RefusedHost>,
        /// What the command may reach, in words (`github.com, *.npmjs.org`).
        allowed: String,
    },
    /// A hidden path the output names, and the content scan's rule that found it (`None`: on
    /// the list).
    HiddenPath {
        /// The hidden path.
        path: PathBuf,
        /// The rule that found it.
        rule: Option<String>,
    },
    /// An entry beside a hidden path, made after the command started (or refused creation).
    BesideHidden {
        /// The entry.
        path: PathBuf,
        /// The directory that holds it and a hidden path.
        dir: PathBuf,
    },
    /// The host has no workspace (it was started in `/` without `--workdir`): commands may
    /// write only in their own `/tmp` and the `--writable` directories. Holds the parents
    /// under which a call's `workdir` may choose the session's workspace (none: it cannot).
    NoWorkspace(Vec<PathBuf>),
    /// The output reads like a refusal: what the confinement refuses, in general.
    Confined {
        /// The profile's summary.
        summary: String,
        /// The profile's mode.
        mode: SandboxMode,
        /// The network is not `full`.
        network_none: bool,
    },
}

/// A host the network gate refused to a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedHost {
    /// The host asked for, with its port for a connection (`example.com:443`).
    pub host: String,
    /// Why it was refused.
    pub reason: String,
    /// Whether the session's person may allow it, if asked (the operator's `--network ask`).
    pub askable: bool,
}

/// A refusal and the note the host appended for it to the command's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// What was refused.
    pub reason: Refusal,
    /// The note, starting with a line break, as the output's text ends with it.
    pub note: String,
}

impl Refusal {
    /// The note for the model, starting with a line break.
    pub fn note(&self) -> String {
        match self {
            Refusal::SpaceFull {
                tmp_bytes,
                shm_bytes,
            } => PrivateSpace {
                tmp: *tmp_bytes,
                shm: *shm_bytes,
            }
            .note(),
            Refusal::ScopeProcesses(processes) => format!(
                "\n[toolhost: forks failed: this session's commands may have reached their \
                 limit of {processes} processes together]"
            ),
            Refusal::Memory(kill) => format!(
                "\n[toolhost: a process of this command was killed {}]",
                memory_why(*kill)
            ),
            Refusal::Processes(processes) => format!(
                "\n[toolhost: the command reached its limit of {processes} processes; forks \
                 beyond it failed]"
            ),
            Refusal::UnixSockets(refused) => super::unix::note(refused).unwrap_or_default(),
            Refusal::NoWorkspace(parents) if !parents.is_empty() => format!(
                "\n[toolhost: this session has no workspace yet: the server was started in `/` \
                 without --workdir. Commands can read files, but write only in $TMPDIR and \
                 package caches. To work on a project, run a command with `workdir` set to the \
                 project's directory under {}: that project becomes this session's workspace]",
                parents
                    .iter()
                    .map(|parent| parent.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" or ")
            ),
            Refusal::NoWorkspace(_) => "\n[toolhost: this server has no workspace: it was \
                started in `/` without --workdir. Commands can read files, but write only in \
                $TMPDIR and package caches. To work on a project, ask the person to restart \
                the server with --workdir set to the project's directory]"
                .to_owned(),
            Refusal::Network { refused, allowed } => {
                let mut named: Vec<String> = refused
                    .iter()
                    .take(super::network::MAX_NAMED)
                    .map(|refused| format!("{} ({})", refused.host, refused.reason))
                    .collect();
                if refused.len() > super::network::MAX_NAMED {
                    named.push(format!(
                        "and {} more",
                        refused.len() - super::network::MAX_NAMED
                    ));
                }
                format!(
                    "\n[toolhost: this command's network is limited to {allowed}, through the \
                     proxy in HTTPS_PROXY and HTTP_PROXY. Refused: {}. Do not retry these another \
                     way: ask the user if the task needs another host]",
                    named.join("; ")
                )
            }
            Refusal::HiddenPath { path, rule } => {
                let why = match rule {
                    Some(rule) => format!("the content scan's rule {rule} found a secret in it"),
                    None => "it is on the list of hidden paths".to_owned(),
                };
                format!(
                    "\n[toolhost: {} is hidden from confined commands by the operator's policy \
                     ({why}); it cannot be read or listed from here, so do not retry: ask the \
                     user if you need what it holds (the operator's --reveal {} lets commands \
                     read it)]",
                    path.display(),
                    path.display()
                )
            }
            // Landlock grants the entries a directory around a hidden path holds when the
            // command starts, one by one: it cannot take the hidden one back out of a grant of
            // the whole directory.
            Refusal::BesideHidden { path, dir } => format!(
                "\n[toolhost: {} is not hidden, but {} holds a path hidden from confined \
                 commands, so a command may use only the entries it held when the command \
                 started: creating entries directly in it may be refused, and entries made \
                 there after the command started are not visible to it. A command started \
                 later sees what exists then; make new files in a subdirectory instead]",
                path.display(),
                dir.display()
            ),
            Refusal::Confined {
                summary,
                mode,
                network_none,
            } => {
                let network = if *network_none {
                    ", network access"
                } else {
                    ""
                };
                let writes = if *mode == SandboxMode::ReadOnly {
                    "Writing anywhere but $TMPDIR"
                } else {
                    "Writing outside the workspace, $TMPDIR and package caches"
                };
                format!(
                    "\n[toolhost: this command runs confined ({summary}). {writes}, reading \
                     secrets such as ~/.ssh, reaching other processes, sudo{network} are \
                     refused: an error above may come from that, so do not retry the same way]"
                )
            }
        }
    }
}

/// Why a process was killed for memory, in words.
pub fn memory_why(kill: MemoryKill) -> String {
    let mib = |bytes: u64| bytes / (1024 * 1024);
    match kill {
        MemoryKill::Command(bytes) => format!("by its memory limit of {} MiB", mib(bytes)),
        MemoryKill::Session(bytes) => format!(
            "because this session's commands together reached the session's memory limit of \
             {} MiB (stop what you left running to free memory)",
            mib(bytes)
        ),
        MemoryKill::Host(bytes) => format!(
            "because all sessions' commands together reached the host's memory limit of {} MiB",
            mib(bytes)
        ),
        MemoryKill::Other => "for want of memory".to_owned(),
    }
}

/// What a confined command's output shows it was refused (step 3 of the module's flow), given
/// its `profile`, the host's `hidden` paths, its `workdir` and when it started.
pub(crate) fn in_output(
    text: &str,
    profile: &Profile,
    nproc_rlimit: bool,
    hidden: Option<&HiddenPaths>,
    workdir: &Path,
    started_ms: u64,
) -> Option<Refusal> {
    if profile.mode == SandboxMode::Off {
        return None;
    }
    let network_none = profile.network != Network::Full;
    let denied = DENIALS.iter().any(|denial| text.contains(denial))
        || (network_none && NETWORK_DENIALS.iter().any(|denial| text.contains(denial)));
    let named = hidden.and_then(|hidden| hidden.named_in(text));
    // A covered directory shows empty: a file in it reads "No such file".
    if let Some(path) = named.filter(|_| denied || text.contains("No such file")) {
        let rule = hidden.and_then(|hidden| hidden.rule_of(&path));
        return Some(Refusal::HiddenPath {
            path,
            rule: rule.map(str::to_owned),
        });
    }
    if !denied {
        return None;
    }
    if let Some((path, dir)) =
        hidden.and_then(|hidden| beside_hidden(hidden, workdir, started_ms, text))
    {
        return Some(Refusal::BesideHidden { path, dir });
    }
    Some(Refusal::Confined {
        summary: profile.summary_with(nproc_rlimit),
        mode: profile.mode,
        network_none,
    })
}

/// A path a refusal in `text` names that is not hidden itself but lies directly in a
/// directory holding a hidden path, and that directory: one made or replaced there
/// since the command started (at `started_ms`), or a missing one in or below its
/// `workdir` (a refused creation; elsewhere, one outside the writable roots is refused
/// anyway). Names are looked for on the lines of a refusal: quoted, or the last word
/// before the refusal (`cat: x: Permission denied`); relative ones are taken from
/// `workdir`, `~/` and `$HOME/` from the first home.
pub(crate) fn beside_hidden(
    hidden: &HiddenPaths,
    workdir: &Path,
    started_ms: u64,
    text: &str,
) -> Option<(PathBuf, PathBuf)> {
    use std::os::unix::fs::MetadataExt;
    let resolved = workdir.canonicalize();
    let workdir = resolved.as_deref().unwrap_or(workdir);
    let home = hidden.homes.first();
    let resolve = |name: &str| -> Option<PathBuf> {
        let name = name.trim_end_matches('/');
        if name.is_empty() || name.contains('\0') {
            return None;
        }
        let path = if let Some(rest) = name.strip_prefix("~/") {
            home?.join(rest)
        } else if let Some(rest) = name.strip_prefix("$HOME/") {
            home?.join(rest)
        } else {
            workdir.join(name)
        };
        Some(super::normalize(&path))
    };
    for line in text.lines() {
        // Landlock refuses with EACCES; a read-only file system is another matter.
        let Some(at) = ["Permission denied", "EACCES"]
            .iter()
            .filter_map(|denial| line.find(denial))
            .min()
        else {
            continue;
        };
        let mut names: Vec<&str> = Vec::new();
        for (open, close) in [('\'', '\''), ('‘', '’'), ('"', '"')] {
            let mut rest = line;
            while let Some(start) = rest.find(open) {
                let after = &rest[start + open.len_utf8()..];
                let Some(end) = after.find(close) else {
                    break;
                };
                names.push(&after[..end]);
                rest = &after[end + close.len_utf8()..];
            }
        }
        let before = line[..at].trim_end().trim_end_matches(':');
        if let Some(word) = before
            .rsplit(": ")
            .next()
            .and_then(|segment| segment.split_whitespace().last())
        {
            names.push(word.trim_matches(['\'', '"', '‘', '’']));
        }
        for path in names.into_iter().filter_map(resolve) {
            let Some(parent) = path.parent() else {
                continue;
            };
            let dir = parent
                .canonicalize()
                .unwrap_or_else(|_| parent.to_path_buf());
            let path = dir.join(path.file_name().unwrap_or_default());
            let holds_hidden = hidden
                .paths
                .iter()
                .any(|hidden| hidden.starts_with(&dir) && *hidden != dir);
            let is_hidden = hidden.paths.iter().any(|hidden| path.starts_with(hidden));
            let new = match std::fs::symlink_metadata(&path) {
                Ok(meta) => {
                    let changed_ms =
                        meta.ctime().saturating_mul(1000) + meta.ctime_nsec() / 1_000_000;
                    u64::try_from(changed_ms).is_ok_and(|ms| ms >= started_ms)
                }
                Err(_) => dir.starts_with(workdir),
            };
            if holds_hidden && !is_hidden && new {
                return Some((path, dir));
            }
        }
    }
    None
}
