//! The child's specification, which the parent builds before the spawn (`child.rs` starts
//! the child). It holds the keeper's arguments: its options, then the shell (found in `PATH`)
//! and the command. It holds the environment, without the host variables that hold secrets
//! when the command is confined. It holds the descriptors the keeper gets, each kept at or
//! above [`fd::FIRST_FREE`] until the child installs it.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use toolhost_keeper_protocol::{fd, option, start};

use super::keeper::{KeeperEnds, above_reserved};
use crate::sandbox::secrets::is_secret_variable_remembered;
use crate::sandbox::{CommandCgroups, Prepared};

/// The command's ends of its stdio (`stdio.rs` opens them).
#[derive(Debug)]
pub(super) struct ChildStdio {
    /// Its stdout and stderr.
    pub(super) output: OwnedFd,
    /// Its stdin when it is not `/dev/null`, and whether it is a terminal.
    pub(super) stdin: Option<(OwnedFd, bool)>,
}

impl ChildStdio {
    /// Copies of the descriptors, for a message that sends them.
    fn try_clone(&self) -> io::Result<ChildStdio> {
        Ok(ChildStdio {
            output: self.output.try_clone()?,
            stdin: self
                .stdin
                .as_ref()
                .map(|(fd, terminal)| fd.try_clone().map(|fd| (fd, *terminal)))
                .transpose()?,
        })
    }
}

/// What a command is, whichever keeper runs it: made once per start, and taken by both the
/// keeper prepared ahead ([`StartMessage`]) and the one made for it ([`ChildSpec`]). Its
/// `Debug` names the variables without their values (some are the person's secrets).
pub(super) struct Launch<'a> {
    /// The shell that runs the command (without a `/`: looked up in `PATH`).
    pub(super) shell: &'a Path,
    /// The command, as `shell -c` takes it.
    pub(super) command: &'a str,
    /// Variables set for the command (they win over the host's).
    pub(super) env: &'a [(String, String)],
    /// When given, the only host variables the command inherits.
    pub(super) inherit: Option<&'a [String]>,
    /// Where it runs.
    pub(super) workdir: &'a Path,
    /// Its stdio.
    pub(super) stdio: ChildStdio,
}

impl std::fmt::Debug for Launch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.env.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("Launch")
            .field("shell", &self.shell)
            .field("command", &self.command)
            .field("env", &names)
            .field("inherit", &self.inherit)
            .field("workdir", &self.workdir)
            .field("stdio", &self.stdio)
            .finish()
    }
}

/// Everything a child needs, prepared by the parent: between `clone` and `exec` the child
/// shares the parent's memory and must not allocate or take locks.
///
/// The child executed is the command's keeper (see `keeper.rs`), which runs the shell.
/// Every descriptor here is at or above [`fd::FIRST_FREE`] (see [`above_reserved`]).
/// The fields are read by `child.rs` only.
pub(super) struct ChildSpec {
    /// The keeper's arguments, argv\[0\] first.
    pub(super) argv: Vec<CString>,
    /// The environment, as `NAME=VALUE` strings.
    pub(super) envp: Vec<CString>,
    pub(super) workdir: CString,
    /// Becomes the child's stdout and stderr.
    pub(super) output: OwnedFd,
    /// Becomes the child's stdin; `None`: `/dev/null`.
    pub(super) stdin: Option<OwnedFd>,
    /// Become the keeper's [`fd::STATUS`] and [`fd::CONTROL`].
    pub(super) keeper: KeeperEnds,
    /// The confinement layers (Landlock ruleset, seccomp programs), for the keeper's
    /// [`fd::RULESET`] and [`fd::SECCOMP`].
    pub(super) layers: Option<(OwnedFd, OwnedFd)>,
    /// The scope's namespaces (user, mount, and maybe network and PID), for the keeper's
    /// descriptors from [`fd::FIRST_NAMESPACE`] on.
    pub(super) namespaces: Vec<OwnedFd>,
    /// `tasks` or `cgroup.procs` of the command's cgroups, for the descriptors after the others
    /// ([`fd::first_cgroup`]); the keeper moves itself in (`--join-cgroup=FD`).
    pub(super) cgroups: Vec<OwnedFd>,
    pub(super) nice: i32,
}

/// The numbers of a [`ChildSpec`]'s descriptors in one descriptor table: the spec's own, or
/// copies of them in the spawner thread's table (`own_table.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ChildFds {
    pub(super) output: RawFd,
    pub(super) stdin: Option<RawFd>,
    pub(super) status: RawFd,
    pub(super) control: RawFd,
    pub(super) layers: Option<(RawFd, RawFd)>,
    pub(super) namespaces: Vec<RawFd>,
    pub(super) cgroups: Vec<RawFd>,
}

impl ChildFds {
    /// The same descriptors, each passed through `copy`.
    pub(super) fn map(&self, mut copy: impl FnMut(RawFd) -> io::Result<RawFd>) -> io::Result<Self> {
        Ok(Self {
            output: copy(self.output)?,
            stdin: self.stdin.map(&mut copy).transpose()?,
            status: copy(self.status)?,
            control: copy(self.control)?,
            layers: match self.layers {
                Some((ruleset, seccomp)) => Some((copy(ruleset)?, copy(seccomp)?)),
                None => None,
            },
            namespaces: self
                .namespaces
                .iter()
                .map(|fd| copy(*fd))
                .collect::<io::Result<_>>()?,
            cgroups: self
                .cgroups
                .iter()
                .map(|fd| copy(*fd))
                .collect::<io::Result<_>>()?,
        })
    }
}

impl ChildSpec {
    /// The spec's descriptors, as numbers in the table that holds them.
    pub(super) fn fds(&self) -> ChildFds {
        ChildFds {
            output: self.output.as_raw_fd(),
            stdin: self.stdin.as_ref().map(AsRawFd::as_raw_fd),
            status: self.keeper.status.as_raw_fd(),
            control: self.keeper.control.as_raw_fd(),
            layers: self
                .layers
                .as_ref()
                .map(|(ruleset, seccomp)| (ruleset.as_raw_fd(), seccomp.as_raw_fd())),
            namespaces: self.namespaces.iter().map(AsRawFd::as_raw_fd).collect(),
            cgroups: self.cgroups.iter().map(AsRawFd::as_raw_fd).collect(),
        }
    }

    /// `shell -c command` under a keeper, in `workdir`, with the host environment (only the
    /// `inherit` names, if given) plus `env` (which wins), and the launch's stdio (a terminal
    /// stdin: the keeper makes it the command's controlling terminal). A `shell` without a
    /// `/` is looked up in `PATH`.
    ///
    /// With `confine`, the keeper confines the shell: its options and descriptors are added,
    /// its variables (`TMPDIR`) set, and host variables that hold secrets (see
    /// [`is_secret_variable_remembered`]) left out unless `inherit` names them.
    pub(super) fn new(
        launch: Launch<'_>,
        keeper: KeeperEnds,
        confine: Option<&Prepared>,
        cgroups: Option<&CommandCgroups>,
        nice: i32,
    ) -> io::Result<Self> {
        let (namespaces, cgroups) = keeper_descriptors(confine, cgroups)?;
        let mut argv = vec![cstring(b"toolhost-keeper")?];
        keeper_options(&mut argv, confine, namespaces.len(), cgroups.len())?;
        let (program, args) = shell_command(launch.shell, launch.command)?;
        argv.push(cstring(program.as_os_str().as_bytes())?);
        for arg in &args {
            argv.push(cstring(arg.as_bytes())?);
        }
        let envp = environment(launch.env, launch.inherit, confine)
            .iter()
            .map(|(key, value)| cstring(&pair(key, value)))
            .collect::<io::Result<_>>()?;
        let ChildStdio { output, stdin } = launch.stdio;
        if stdin.as_ref().is_some_and(|(_, terminal)| *terminal) {
            argv.insert(1, cstring(option::TTY.as_bytes())?);
        }
        Ok(Self {
            argv,
            envp,
            workdir: cstring(launch.workdir.as_os_str().as_bytes())?,
            output: above_reserved(output)?,
            stdin: stdin.map(|(fd, _)| above_reserved(fd)).transpose()?,
            keeper,
            layers: match confine {
                Some(prepared) => Some((
                    above_reserved(prepared.ruleset()?)?,
                    above_reserved(prepared.seccomp.try_clone()?)?,
                )),
                None => None,
            },
            namespaces,
            cgroups,
            nice,
        })
    }
}

impl ChildSpec {
    /// A keeper prepared ahead (`--ready`) for a command of `confine`'s profile: it moves
    /// itself into `cgroups` (made for its future command) and joins the namespaces, then
    /// waits for its command on the control socket (see [`StartMessage`]). Its stdio is
    /// `/dev/null`, its environment empty, its working directory `/`.
    pub(super) fn ready(
        keeper: KeeperEnds,
        confine: &Prepared,
        cgroups: Option<&CommandCgroups>,
        nice: i32,
    ) -> io::Result<Self> {
        Self::waiting(option::READY, keeper, confine, cgroups, nice)
    }

    /// A resident keeper for `confine`'s scope and layers (`resident.rs`): it joins the
    /// namespaces and forks keepers prepared ahead on request.
    pub(super) fn resident(keeper: KeeperEnds, confine: &Prepared, nice: i32) -> io::Result<Self> {
        Self::waiting(option::RESIDENT, keeper, confine, None, nice)
    }

    /// A keeper started with `mode` ([`option::READY`] or [`option::RESIDENT`]) and no command.
    fn waiting(
        mode: &str,
        keeper: KeeperEnds,
        confine: &Prepared,
        cgroups: Option<&CommandCgroups>,
        nice: i32,
    ) -> io::Result<Self> {
        let (namespaces, cgroups) = keeper_descriptors(Some(confine), cgroups)?;
        let mut argv = vec![cstring(b"toolhost-keeper")?, cstring(mode.as_bytes())?];
        keeper_options(&mut argv, Some(confine), namespaces.len(), cgroups.len())?;
        let dev_null = std::fs::File::options()
            .read(true)
            .write(true)
            .open("/dev/null")?;
        Ok(Self {
            argv,
            envp: Vec::new(),
            workdir: cstring(b"/")?,
            output: above_reserved(OwnedFd::from(dev_null))?,
            stdin: None,
            keeper,
            layers: Some((
                above_reserved(confine.ruleset()?)?,
                above_reserved(confine.seccomp.try_clone()?)?,
            )),
            namespaces,
            cgroups,
            nice,
        })
    }
}

/// The command a keeper prepared ahead gets on its control socket (see the protocol's
/// [`start`] module): the body, and the descriptors to send with it, in order.
pub(super) struct StartMessage {
    /// The header and the body.
    pub(super) bytes: Vec<u8>,
    /// The output, the ruleset (confined), the stdin (if any).
    pub(super) fds: Vec<OwnedFd>,
}

impl StartMessage {
    /// `shell -c command` in `workdir`, its environment as [`ChildSpec::new`] makes it, copies
    /// of the launch's stdio, and the Landlock ruleset of `confine` current at this start.
    pub(super) fn new(launch: &Launch<'_>, confine: &Prepared) -> io::Result<Self> {
        let ChildStdio { output, stdin } = launch.stdio.try_clone()?;
        let (program, args) = shell_command(launch.shell, launch.command)?;
        let mut flags = Vec::new();
        if stdin.as_ref().is_some_and(|(_, terminal)| *terminal) {
            flags.push(start::TERMINAL);
        }
        if stdin.is_some() {
            flags.push(start::STDIN);
        }
        let env = environment(launch.env, launch.inherit, Some(confine));
        let mut fields: Vec<Vec<u8>> = vec![
            flags,
            launch.workdir.as_os_str().as_bytes().to_vec(),
            program.as_os_str().as_bytes().to_vec(),
            args.len().to_string().into_bytes(),
        ];
        fields.extend(args.iter().map(|arg| arg.as_bytes().to_vec()));
        fields.extend(env.iter().map(|(key, value)| pair(key, value)));
        let mut body = Vec::new();
        for field in fields {
            if field.contains(&0) {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, "NUL byte"));
            }
            body.extend_from_slice(&field);
            body.push(0);
        }
        if body.len() > start::MAX_BODY {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the command and its environment are too long",
            ));
        }
        let length = u32::try_from(body.len()).map_err(io::Error::other)?;
        let mut bytes = Vec::with_capacity(start::HEADER_LEN + body.len());
        bytes.extend_from_slice(&length.to_le_bytes());
        bytes.extend_from_slice(&body);
        let mut fds = vec![output, confine.ruleset()?];
        if let Some((stdin, _)) = stdin {
            fds.push(stdin);
        }
        Ok(Self { bytes, fds })
    }
}

/// The scope's namespaces and the command's cgroup files, as the keeper's descriptors.
fn keeper_descriptors(
    confine: Option<&Prepared>,
    cgroups: Option<&CommandCgroups>,
) -> io::Result<(Vec<OwnedFd>, Vec<OwnedFd>)> {
    let namespaces: Vec<OwnedFd> = confine
        .and_then(|prepared| prepared.namespaces.as_ref())
        .map(|namespaces| {
            namespaces
                .fds
                .iter()
                .take(fd::MAX_NAMESPACES)
                .map(|(_, fd)| above_reserved(fd.try_clone()?))
                .collect::<io::Result<Vec<_>>>()
        })
        .transpose()?
        .unwrap_or_default();
    let cgroups: Vec<OwnedFd> = cgroups
        .map(|cgroups| {
            cgroups
                .procs()
                .iter()
                .take(fd::MAX_CGROUPS)
                .map(|file| above_reserved(OwnedFd::from(file.try_clone()?)))
                .collect::<io::Result<Vec<_>>>()
        })
        .transpose()?
        .unwrap_or_default();
    Ok((namespaces, cgroups))
}

/// The keeper's options after argv\[0\] (and `--ready`): every `--join-cgroup`, then with
/// `confine` `--confine` and the profile's options.
fn keeper_options(
    argv: &mut Vec<CString>,
    confine: Option<&Prepared>,
    namespaces: usize,
    cgroups: usize,
) -> io::Result<()> {
    // The cgroups' files to join follow the other descriptors the keeper gets; it moves
    // itself in before anything else (see `child_main` for why not here).
    let first_cgroup = fd::first_cgroup(confine.is_some(), namespaces);
    for slot in (first_cgroup..).take(cgroups) {
        argv.push(cstring(
            format!("{}{slot}", option::JOIN_CGROUP).as_bytes(),
        )?);
    }
    if let Some(prepared) = confine {
        argv.push(cstring(option::CONFINE.as_bytes())?);
        for option in &prepared.keeper_args {
            argv.push(cstring(option.as_bytes())?);
        }
    }
    Ok(())
}

/// `PROGRAM` (the shell, found) and `ARGV0 -c COMMAND`.
fn shell_command(shell: &Path, command: &str) -> io::Result<(PathBuf, [OsString; 3])> {
    Ok((
        find_program(shell)?,
        [
            shell.as_os_str().to_owned(),
            OsString::from("-c"),
            OsString::from(command),
        ],
    ))
}

/// The command's environment: the host's (only the `inherit` names, if given; without the
/// secret ones when confined), the sandbox's variables, then `env` (which wins).
fn environment(
    env: &[(String, String)],
    inherit: Option<&[String]>,
    confine: Option<&Prepared>,
) -> Vec<(OsString, OsString)> {
    let set_by_sandbox = |key: &OsStr| {
        confine.is_some_and(|prepared| prepared.env.iter().any(|(name, _)| OsStr::new(name) == key))
    };
    let mut vars: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(key, value)| match inherit {
            Some(names) => names.iter().any(|name| OsStr::new(name) == key),
            None => confine.is_none() || !is_secret_variable_remembered(key, value),
        })
        .filter(|(key, _)| !set_by_sandbox(key))
        .filter(|(key, _)| !env.iter().any(|(name, _)| OsStr::new(name) == key))
        .collect();
    if let Some(prepared) = confine {
        vars.extend(
            prepared
                .env
                .iter()
                .filter(|(name, _)| !env.iter().any(|(set, _)| set == name))
                .map(|(k, v)| (OsString::from(k), OsString::from(v))),
        );
    }
    vars.extend(
        env.iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v))),
    );
    vars
}

/// `NAME=VALUE`.
fn pair(key: &OsStr, value: &OsStr) -> Vec<u8> {
    let mut pair = Vec::with_capacity(key.len() + value.len() + 1);
    pair.extend_from_slice(key.as_bytes());
    pair.push(b'=');
    pair.extend_from_slice(value.as_bytes());
    pair
}

fn cstring(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL byte"))
}

/// `program` itself if it contains a `/`, else the first executable file of that name in
/// `PATH`; made absolute (against the host's working directory), since the child changes
/// directory before `exec`.
fn find_program(program: &Path) -> io::Result<PathBuf> {
    let found = if program.as_os_str().as_bytes().contains(&b'/') {
        if !is_executable(program) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "no such executable file",
            ));
        }
        program.to_owned()
    } else {
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .map(|dir| dir.join(program))
            .find(|candidate| is_executable(candidate))
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "not found in PATH"))?
    };
    if found.is_absolute() {
        Ok(found)
    } else {
        Ok(std::env::current_dir()?.join(found))
    }
}

/// Whether `path` is a file with an execute bit set.
fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::super::keeper::channels;
    use super::*;

    #[test]
    fn a_shell_that_is_not_there_is_not_found() {
        let (_reader, writer) = io::pipe().expect("pipe");
        let (_host, keeper) = channels().expect("channels");
        let no_shell = ChildSpec::new(
            Launch {
                shell: Path::new("/nonexistent/sh"),
                command: "true",
                env: &[],
                inherit: None,
                workdir: Path::new("/"),
                stdio: ChildStdio {
                    output: writer.into(),
                    stdin: None,
                },
            },
            keeper,
            None,
            None,
            0,
        );
        let error = no_shell.err().expect("no shell");
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
    }
}
