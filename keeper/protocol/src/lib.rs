//! The protocol between the toolhost host and `toolhost-keeper`, its per-command keeper.
//!
//! Both sides use these names: the host (`host/src/process/manager/` and
//! `host/src/sandbox/namespaces.rs`) and the keeper (`keeper/src/`). No number, byte or option
//! of the protocol is spelt out anywhere else.
//!
//! # A command's life, at a glance
//!
//! 1. The host makes the keeper's two channels.
//!    The *status* pipe carries the command's end from the keeper to the host.
//!    The *control* socket (a connected pair of Unix stream sockets) carries requests from the
//!    host to the keeper.
//! 2. The host starts the keeper from its sealed in-memory executable, in a session of its own,
//!    with `SIGTERM` as its parent-death signal.
//!    Its arguments are `[--tty] [--join-cgroup=FD]... [--confine] [CONFINEMENT]... PROGRAM
//!    ARGV0 [ARG...]` (see [`option`]).
//!    Its descriptors are its stdio, then those of [`fd`]: the status pipe's write end, its
//!    end of the control socket, its own executable, and with `--confine` the Landlock
//!    ruleset, the seccomp programs and the scope's namespaces, then the `tasks` or
//!    `cgroup.procs` of the command's cgroups.
//!    Every other descriptor is closed.
//! 3. The keeper closes its own executable, moves itself into the cgroups and joins the
//!    namespaces.
//!    With a PID namespace it forks once and carries on in the child, inside the namespace.
//! 4. The keeper starts `PROGRAM` (argv\[0\] `ARGV0`) in a new session, confined between `fork`
//!    and `exec`, and lets go of the command's stdio.
//!    A failure in step 3 or 4 is reported as [`Status::Exited`] with [`CANNOT_RUN`], and the
//!    keeper exits.
//! 5. At any time the host may write one [`Control`] byte per request to the control socket.
//!    The keeper sends the signal it names to every descendant.
//! 6. With [`option::UNIX_SUPERVISE`], each `connect` of the command's tree is made by the
//!    keeper (see `keeper/src/unix.rs`).
//!    Each refused Unix socket is reported on the status pipe ([`UNIX_REFUSED`]).
//! 7. When `PROGRAM` exits, the keeper writes one status message (see [`Status::message`]).
//!    The message says whether anything else of the command was left at that moment.
//!    A keeper that ends without writing one (bad arguments, or killed) leaves the host
//!    without the command's exit.
//! 8. The keeper exits once the command has exited and no descendant is left.
//!    The status pipe then reaches end-of-file: the host learns that nothing of the command is
//!    left.
//! 9. End-of-file on the control socket makes the keeper kill every descendant, wait for them
//!    and exit.
//!    The host closes the socket when it lets go of the command; the kernel closes it when the
//!    host dies.
//!    `SIGTERM` (the parent-death signal) and `SIGHUP` do the same.
//!
//! # A keeper prepared ahead, at a glance
//!
//! A keeper may also be started *ready*, before its command is known (see [`start`]).
//!
//! 1. The host starts it as in steps 1 and 2 above, from the same spawner thread, with
//!    [`option::READY`] first and no `PROGRAM`: `--ready [--join-cgroup=FD]... [--confine]
//!    [CONFINEMENT]...`. Its stdio is `/dev/null`.
//! 2. The keeper does step 3: it moves itself into the cgroups made for its future command,
//!    joins the namespaces, and with a PID namespace forks into it.
//!    Then it waits on the control socket.
//! 3. To start a command, the host sends one start message on the control socket
//!    ([`start::message`]): the working directory, the program, its arguments, its
//!    environment, and by `SCM_RIGHTS` the command's output, the Landlock ruleset current at
//!    this start (with `--confine`) and its stdin or terminal (when not `/dev/null`).
//! 4. The keeper enters the working directory, takes the descriptors as the command's stdio
//!    (and [`fd::RULESET`]), and goes on from step 4 above.
//!    A failure of step 2 is only reported now, on the command's output and as [`CANNOT_RUN`],
//!    so that it reaches the command it concerns.
//! 5. End-of-file on the control socket before a start message, or `SIGTERM`, and the keeper
//!    exits: nothing of a command ever ran under it.
//!
//! # A resident keeper, at a glance
//!
//! A keeper may also be *resident*: one per scope, profile and layers, it forks keepers
//! prepared ahead that are already in the scope's namespaces (see [`resident`]).
//!
//! 1. The host starts it as a keeper prepared ahead, with [`option::RESIDENT`] in the place of
//!    [`option::READY`] and no `--join-cgroup`.
//! 2. It joins the namespaces, installs the seccomp programs marked
//!    [`fd::SECCOMP_SHARED`] on itself, and waits on its control socket.
//!    With a PID namespace it does not fork: its children are in the namespace.
//! 3. For each fork request ([`resident::FORK`]) it forks a keeper, which takes the request's
//!    descriptors as its status pipe, its control socket and its cgroup files.
//!    That keeper moves itself into the cgroups and goes on from step 2 of a keeper prepared
//!    ahead (it waits for its start message).
//!    The resident answers with the new keeper's pid.
//! 4. The resident reaps one of its keepers only once the host has released it
//!    ([`resident::RELEASE`]), so that its pid names it until then.
//! 5. End-of-file on the control socket: the resident waits for every keeper it forked, reaps
//!    them and exits.
//!    Its keepers have `SIGTERM` as their parent-death signal.
//!
//! # A scope's namespaces, at a glance
//!
//! The keeper has a second mode, the namespace *helper* (see [`helper`]).
//!
//! 1. The host runs `toolhost-keeper --make-namespaces [--net] [--pid] [--mask=DIR]...
//!    [--mask-file=FILE]... [--writable=PATH]... [--private-tmp=DIR]` with its stdin and stdout
//!    piped.
//! 2. The helper makes the namespaces and forks their *holder* as the host's own child.
//! 3. The helper writes one line to its stdout and exits.
//!    The line is [`helper::READY`] and the holder's pid and the PID namespace's outcome, or
//!    [`helper::ERROR`] and why not.
//! 4. The host opens `/proc/HOLDER_PID/ns/KIND` for each [`NamespaceKind`] made.
//!    It passes them to every keeper of the scope's confined commands (step 2 above).
//! 5. The host keeps the holder's stdin open for the scope's life.
//!    End-of-file on it ends the holder.
//!    When the holder is a PID namespace's init, every process left in that namespace ends
//!    with it.

#![no_std]

pub mod fd {
    //! The descriptor numbers the keeper gets, above its stdio (0, 1 and 2).
    //!
    //! The host installs them between `clone` and `exec`; the keeper takes them over at its
    //! start.

    use crate::NamespaceKind;

    /// The status pipe's write end (see [`Status`](crate::Status)).
    pub const STATUS: i32 = 3;
    /// The keeper's end of the control socket (see [`Control`](crate::Control)).
    pub const CONTROL: i32 = 4;
    /// The keeper's own executable, a sealed memfd.
    /// The host executes it with `execveat`; the keeper closes it at its start.
    pub const EXECUTABLE: i32 = 5;
    /// The Landlock ruleset the keeper applies to the command; given with `--confine` only.
    pub const RULESET: i32 = 6;
    /// A sealed file of seccomp programs the keeper applies to the command; given with
    /// `--confine` only.
    /// Each program is a native-endian `u32` instruction count followed by that many 8-byte
    /// `sock_filter` instructions.
    /// The count may carry [`SECCOMP_SHARED`].
    pub const SECCOMP: i32 = 7;
    /// Set in a seccomp program's instruction count: the keeper itself keeps working under the
    /// program, so a resident keeper installs it on itself once, and the keepers it forks and
    /// their commands inherit it (compiled once, not per command).
    /// Without it, each command's process installs the program before its `exec`.
    pub const SECCOMP_SHARED: u32 = 1 << 31;
    /// The first of the scope's namespaces, in the order `--namespaces=` names them.
    pub const FIRST_NAMESPACE: i32 = 8;
    /// Most namespaces a keeper joins: one of each [`NamespaceKind`].
    pub const MAX_NAMESPACES: usize = NamespaceKind::ALL.len();
    /// Most cgroups a keeper joins: one per controller (`pids` and `memory`).
    /// One cgroup v2 serves both.
    pub const MAX_CGROUPS: usize = 2;
    /// The lowest descriptor number never given to a keeper.
    /// The host keeps the descriptors it is about to give at or above it, so that installing
    /// them cannot clobber one another.
    pub const FIRST_FREE: i32 = FIRST_NAMESPACE + MAX_NAMESPACES as i32 + MAX_CGROUPS as i32;

    /// The first cgroup file descriptor: the one after every other descriptor the keeper
    /// gets.
    /// `confined`: `--confine` is given; `namespaces`: how many namespaces are given.
    pub const fn first_cgroup(confined: bool, namespaces: usize) -> i32 {
        if confined {
            FIRST_NAMESPACE + namespaces as i32
        } else {
            RULESET
        }
    }
}

/// The first byte of the status message: how the command ended, and whether anything else of
/// it was left then.
///
/// The keeper sends it on the status pipe once, when the command (`PROGRAM`) exits.
/// An upper-case byte says that something else of the command may still run.
/// A lower-case byte says that nothing else of the command is left, and the keeper exits next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Status {
    /// The command exited; the value is its exit code.
    Exited = b'C',
    /// A signal killed the command; the value is the signal's number.
    Signalled = b'S',
    /// [`Status::Exited`], and nothing else of the command is left.
    ExitedNothingLeft = b'c',
    /// [`Status::Signalled`], and nothing else of the command is left.
    SignalledNothingLeft = b's',
}

/// The length of a status message: the [`Status`] byte and a little-endian `i32`.
pub const STATUS_MESSAGE_LEN: usize = 5;

/// The exit code the keeper reports (as [`Status::Exited`]) when the command cannot run: the
/// keeper could not join its cgroups or namespaces, or could not start `PROGRAM`.
/// It is the shell's code for a command that cannot be found.
pub const CANNOT_RUN: i32 = 127;

impl Status {
    /// The byte on the status pipe.
    pub const fn as_u8(self) -> u8 {
        self as u8
    }

    /// The status a byte stands for; `None` for a byte that is not one.
    pub const fn from_u8(byte: u8) -> Option<Self> {
        match byte {
            b'C' => Some(Status::Exited),
            b'S' => Some(Status::Signalled),
            b'c' => Some(Status::ExitedNothingLeft),
            b's' => Some(Status::SignalledNothingLeft),
            _ => None,
        }
    }

    /// Whether a signal killed the command (else it exited).
    pub const fn signalled(self) -> bool {
        matches!(self, Status::Signalled | Status::SignalledNothingLeft)
    }

    /// Whether nothing else of the command was left when it ended.
    pub const fn nothing_left(self) -> bool {
        matches!(
            self,
            Status::ExitedNothingLeft | Status::SignalledNothingLeft
        )
    }

    /// The same end, with nothing else of the command left.
    pub const fn with_nothing_left(self) -> Self {
        match self {
            Status::Exited | Status::ExitedNothingLeft => Status::ExitedNothingLeft,
            Status::Signalled | Status::SignalledNothingLeft => Status::SignalledNothingLeft,
        }
    }

    /// The status message the keeper writes: this byte, then `value` (the exit code or the
    /// signal's number) as a little-endian `i32`.
    pub const fn message(self, value: i32) -> [u8; STATUS_MESSAGE_LEN] {
        let [a, b, c, d] = value.to_le_bytes();
        [self.as_u8(), a, b, c, d]
    }

    /// A status message as the host reads it: its status (`None` for a byte that is not one)
    /// and its value.
    pub const fn parse(message: [u8; STATUS_MESSAGE_LEN]) -> (Option<Self>, i32) {
        let [byte, a, b, c, d] = message;
        (Status::from_u8(byte), i32::from_le_bytes([a, b, c, d]))
    }
}

/// A request on the control socket: one byte, which the host sends and the keeper reads.
///
/// The keeper sends the signal it names to every descendant of the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Control {
    /// `SIGTERM` to every descendant.
    Terminate = b'T',
    /// `SIGINT` to every descendant.
    Interrupt = b'I',
    /// `SIGKILL` to every descendant, repeated until none is left.
    Kill = b'K',
}

impl Control {
    /// The byte on the control socket.
    pub const fn as_u8(self) -> u8 {
        self as u8
    }

    /// The request a byte stands for; `None` for a byte that is not one (the keeper ignores
    /// it).
    pub const fn from_u8(byte: u8) -> Option<Self> {
        match byte {
            b'T' => Some(Control::Terminate),
            b'I' => Some(Control::Interrupt),
            b'K' => Some(Control::Kill),
            _ => None,
        }
    }
}

/// A kind of namespace the helper makes and the keeper joins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NamespaceKind {
    /// The user namespace: the host's own user and group only.
    User,
    /// The mount namespace: a read-only view of `/` with the hidden paths covered.
    Mount,
    /// The network namespace: only its own loopback.
    Network,
    /// The PID namespace, whose init is the helper's holder.
    Pid,
}

impl NamespaceKind {
    /// Every kind, in the order the host passes them and the keeper joins them.
    /// The user namespace comes first: it gives the right to join the others.
    pub const ALL: [NamespaceKind; 4] = [
        NamespaceKind::User,
        NamespaceKind::Mount,
        NamespaceKind::Network,
        NamespaceKind::Pid,
    ];

    /// The kind's name in `--namespaces=`, which is also its file's name in `/proc/PID/ns/`.
    pub const fn name(self) -> &'static str {
        match self {
            NamespaceKind::User => "user",
            NamespaceKind::Mount => "mnt",
            NamespaceKind::Network => "net",
            NamespaceKind::Pid => "pid",
        }
    }

    /// The kind named `name`; `None` for a name that is not one.
    pub fn from_name(name: &str) -> Option<Self> {
        NamespaceKind::ALL
            .into_iter()
            .find(|kind| kind.name() == name)
    }
}

pub mod option {
    //! The keeper's command-line options for running a command.
    //!
    //! The host sends them; the keeper reads them in this order: [`TTY`], then every
    //! [`JOIN_CGROUP`], then the confinement options ([`CONFINE`], [`RLIMIT_CPU`],
    //! [`RLIMIT_DATA`], [`RLIMIT_NPROC`], [`NAMESPACES`], [`UNIX_SUPERVISE`], [`UNIX_ALLOW`],
    //! [`UNIX_ALLOW_SOCKET`], [`UNIX_DENY`], [`UNIX_SESSION_TMP`], [`UNIX_CHECK_BINDING`]) in
    //! any order.
    //! The first argument that does not start with [`PREFIX`] is `PROGRAM`, followed by `ARGV0`
    //! and the command's arguments.

    /// How every option starts.
    pub const PREFIX: &str = "--";
    /// The keeper is prepared ahead: no `PROGRAM` follows the options, the command comes in
    /// a start message on the control socket (see [`start`](crate::start)).
    /// Only as the first option (then there is no [`TTY`]: the start message says so).
    pub const READY: &str = "--ready";
    /// The keeper is resident: it joins the namespaces, then forks keepers prepared ahead on
    /// request (see [`resident`](crate::resident)).
    /// Only as the first option, and without [`JOIN_CGROUP`].
    pub const RESIDENT: &str = "--resident";
    /// The command's stdin is a terminal, which the keeper makes the command's controlling
    /// terminal.
    /// Only as the first option.
    pub const TTY: &str = "--tty";
    /// `--join-cgroup=FD`: descriptor `FD` is the open `tasks` (cgroup v1) or `cgroup.procs`
    /// (cgroup v2) of one of the command's cgroups.
    /// The keeper moves itself in before anything else.
    /// A descriptor that is not a cgroup file, or a failed move, and the command does not run.
    pub const JOIN_CGROUP: &str = "--join-cgroup=";
    /// The Landlock ruleset and the seccomp programs are given (descriptors
    /// [`fd::RULESET`](crate::fd::RULESET) and [`fd::SECCOMP`](crate::fd::SECCOMP)).
    pub const CONFINE: &str = "--confine";
    /// `--rlimit-cpu=SECONDS`: the command's `RLIMIT_CPU`.
    pub const RLIMIT_CPU: &str = "--rlimit-cpu=";
    /// `--rlimit-data=BYTES`: the command's `RLIMIT_DATA`.
    pub const RLIMIT_DATA: &str = "--rlimit-data=";
    /// `--rlimit-nproc=N`: the command's `RLIMIT_NPROC`.
    /// The kernel counts it per user, so the host sets it only in the scope's user namespace.
    pub const RLIMIT_NPROC: &str = "--rlimit-nproc=";
    /// `--namespaces=KIND,...`: the scope's namespaces are given from descriptor
    /// [`fd::FIRST_NAMESPACE`](crate::fd::FIRST_NAMESPACE), in this order.
    /// Each `KIND` is a [`NamespaceKind::name`](crate::NamespaceKind::name), at most once.
    pub const NAMESPACES: &str = "--namespaces=";
    /// What separates the kinds in [`NAMESPACES`].
    pub const NAMESPACE_SEPARATOR: &str = ",";
    /// The keeper supervises the command's `connect` calls (seccomp user notification).
    /// It refuses a Unix socket outside the places [`UNIX_ALLOW`] and [`UNIX_SESSION_TMP`]
    /// name, and an abstract one no process of the command's tree listens on.
    pub const UNIX_SUPERVISE: &str = "--unix-supervise";
    /// `--unix-allow=PATH`: with [`UNIX_SUPERVISE`], a socket at `PATH` or below is allowed,
    /// unless a deeper [`UNIX_DENY`] path holds it.
    pub const UNIX_ALLOW: &str = "--unix-allow=";
    /// `--unix-allow-socket=PATH`: with [`UNIX_SUPERVISE`], a socket at `PATH` or below is
    /// allowed whatever [`UNIX_DENY`] says (the operator's `--allow-unix-socket`).
    pub const UNIX_ALLOW_SOCKET: &str = "--unix-allow-socket=";
    /// `--unix-deny=PATH`: with [`UNIX_SUPERVISE`], a socket at `PATH` or below is refused,
    /// unless a [`UNIX_ALLOW_SOCKET`] path or a deeper [`UNIX_ALLOW`] path holds it (hidden
    /// paths and caches, also inside the workspace).
    pub const UNIX_DENY: &str = "--unix-deny=";
    /// `--unix-session-tmp=PATH`: with [`UNIX_SUPERVISE`], a socket below `PATH` is allowed
    /// when it lies on the same file system (overlay layer) as a file the keeper makes there.
    /// It is the session's own `/tmp` in the namespaces, whose lower layer is the host's.
    pub const UNIX_SESSION_TMP: &str = "--unix-session-tmp=";
    /// With [`UNIX_SUPERVISE`], a socket in a place [`UNIX_ALLOW`] names is allowed only when
    /// a socket listens on it that was bound with a name in such a place.
    /// Without namespaces a hard link could otherwise bring a host socket into the workspace.
    pub const UNIX_CHECK_BINDING: &str = "--unix-check-binding";
}

/// A refused Unix socket, reported on the status pipe before the status message.
///
/// The message is [`UNIX_REFUSED`], the little-endian `u16` length of the socket's name,
/// then the name's bytes (at most [`MAX_REFUSED_NAME`]).
/// An abstract name starts with `@`.
pub const UNIX_REFUSED: u8 = b'U';
/// The longest name a [`UNIX_REFUSED`] message carries.
pub const MAX_REFUSED_NAME: usize = 512;

pub mod start {
    //! The start message a keeper prepared ahead ([`option::READY`](crate::option::READY))
    //! gets on its control socket: its command.
    //!
    //! The message is [`HEADER_LEN`] bytes, the little-endian `u32` length of the body, then
    //! the body. The descriptors come by `SCM_RIGHTS` with the header's bytes, in this order:
    //! the command's output (its stdout and stderr), then with `--confine` the Landlock
    //! ruleset, then with [`STDIN`] the command's stdin.
    //!
    //! The body is a sequence of fields, each ended by a NUL byte: the flags (any of
    //! [`TERMINAL`] and [`STDIN`]), the working directory, `PROGRAM`, the number of
    //! arguments in decimal, the arguments (`ARGV0` first), then the environment, one
    //! `NAME=VALUE` field per variable.

    /// The length of the header.
    pub const HEADER_LEN: usize = 4;
    /// The longest body a keeper takes.
    pub const MAX_BODY: usize = 8 << 20;
    /// The most descriptors a start message carries.
    pub const MAX_FDS: usize = 3;
    /// A flag: the command's stdin is a terminal, to become its controlling terminal (it is
    /// the output descriptor too).
    pub const TERMINAL: u8 = b't';
    /// A flag: a stdin descriptor comes last (without it, stdin is `/dev/null`).
    pub const STDIN: u8 = b'i';
}

pub mod resident {
    //! The requests a resident keeper ([`option::RESIDENT`](crate::option::RESIDENT)) takes
    //! on its control socket, and its answer.
    //!
    //! A request is one byte.
    //! [`FORK`] carries by `SCM_RIGHTS` the new keeper's status pipe (write end), its end of a
    //! control socket, then the `tasks` or `cgroup.procs` of each of its command's cgroups (at
    //! most [`MAX_CGROUPS`](crate::fd::MAX_CGROUPS)).
    //! The answer is [`ANSWER_LEN`] bytes: the new keeper's pid as a little-endian `i32`, or
    //! the negated `errno` of the failed fork.
    //! [`RELEASE`] is followed by a pid as a little-endian `i32` and has no answer.

    /// Fork a keeper prepared ahead.
    pub const FORK: u8 = b'F';
    /// The host no longer refers to the keeper with the pid that follows: reap it once it has
    /// exited.
    pub const RELEASE: u8 = b'R';
    /// The length of the answer to [`FORK`], and of the pid after [`RELEASE`].
    pub const ANSWER_LEN: usize = 4;
    /// The most descriptors a [`FORK`] request carries.
    pub const MAX_FDS: usize = 2 + crate::fd::MAX_CGROUPS;
}

pub mod helper {
    //! The keeper's helper mode, which makes a scope's namespaces: its options and its answer.
    //!
    //! The host sends the options (the first of them [`MAKE_NAMESPACES`]); the helper answers one
    //! line on its stdout.

    /// Run as the helper; only as the first argument.
    pub const MAKE_NAMESPACES: &str = "--make-namespaces";
    /// Make a network namespace with only its own loopback (brought up).
    pub const NET: &str = "--net";
    /// Make a PID namespace whose init is the holder, with its own `/proc`.
    pub const PID: &str = "--pid";
    /// Open the session's network gate in the network namespace ([`NET`]; it needs
    /// [`PRIVATE_TMP`] too): `/etc/resolv.conf` names the namespace's loopback, and the answer
    /// carries by `SCM_RIGHTS` a TCP listener on `127.0.0.1` (a port the kernel picks), one on
    /// `[::1]` at the same port where there is `::1`, and UDP sockets on port 53 of both.
    /// The host tells them apart by type and address.
    /// Stdout must then be a Unix socket.
    pub const PROXY: &str = "--proxy";
    /// `--mask=DIR`: cover directory `DIR` with an empty, read-only, mode-000 tmpfs.
    pub const MASK: &str = "--mask=";
    /// `--mask-file=FILE`: cover file `FILE` with an empty mode-000 file.
    /// It needs [`PRIVATE_TMP`].
    pub const MASK_FILE: &str = "--mask-file=";
    /// `--writable=PATH`: `PATH` stays writable in the read-only view of `/`.
    pub const WRITABLE: &str = "--writable=";
    /// `--private-tmp=DIR`: `/tmp` becomes the session's own.
    /// `DIR` is an empty directory of the host's.
    /// The session's tmpfs is mounted on it while the view is made, and detached after.
    pub const PRIVATE_TMP: &str = "--private-tmp=";
    /// `--tmp-size=BYTES`: the session's tmpfs holds at most `BYTES` bytes.
    /// Without it, the kernel's default size applies (half the RAM).
    pub const TMP_SIZE: &str = "--tmp-size=";
    /// The host's `/tmp` shows beneath the session's own writes (an overlay whose upper layer
    /// is the session's tmpfs).
    /// Without it, or where the kernel refuses the overlay, `/tmp` starts empty.
    /// It needs [`PRIVATE_TMP`].
    pub const TMP_OVERLAY: &str = "--tmp-overlay";
    /// `--read-only=PATH`: `PATH` is bound read-only over the view.
    /// It stays read-only inside a writable root and inside the private `/tmp`.
    pub const READ_ONLY: &str = "--read-only=";
    /// `--private-shm=BYTES`: a new tmpfs of at most `BYTES` bytes is mounted on `/dev/shm`,
    /// the namespaces' own (the host's `/dev/shm` is out of view).
    pub const PRIVATE_SHM: &str = "--private-shm=";

    /// What ends a request to the holder on its stdin (a Unix socket): `PATH` then this byte
    /// asks it to cover `PATH`, a hidden path that appeared in the namespaces after they were
    /// made. A directory gets an empty, read-only, mode-000 tmpfs; a regular file gets the
    /// empty mode-000 file ([`MASK_FILE`]'s, so only with [`PRIVATE_TMP`]). The holder answers
    /// each request with 4 bytes on the same socket: an error number in native byte order,
    /// 0 for covered. A path that is missing, reached through a symbolic link, or neither a
    /// directory nor a regular file is refused (`ENOENT`, `ELOOP`, `EINVAL`).
    pub const COVER_END: u8 = 0;

    /// How the answer starts on success: `ready HOLDER_PID TMP PID_NAMESPACE`.
    /// `HOLDER_PID` is the holder's pid in the host's PID namespace.
    /// `TMP` is [`TMP_OVERLAID`], [`TMP_HOST`], or starts with [`TMP_PRIVATE`].
    /// `PID_NAMESPACE` is [`PID_NAMESPACE`] or starts with [`NO_PID_NAMESPACE`].
    pub const READY: &str = "ready ";
    /// What separates the fields of the [`READY`] answer.
    pub const SEPARATOR: &str = " ";
    /// `/tmp` shows the host's `/tmp` beneath the session's own writes.
    pub const TMP_OVERLAID: &str = "tmp=overlay";
    /// `/tmp` is the session's own and started empty.
    /// When [`TMP_OVERLAY`] was asked for, `:ERRNO` follows: the error number of the refusal.
    pub const TMP_PRIVATE: &str = "tmp=private";
    /// `/tmp` is the host's, read-only (no [`PRIVATE_TMP`] was asked for).
    pub const TMP_HOST: &str = "tmp=host";
    /// The holder is the init of a new PID namespace.
    pub const PID_NAMESPACE: &str = "pid";
    /// The holder is not in a PID namespace of its own.
    /// When [`PID`] was asked for, why not follows it.
    pub const NO_PID_NAMESPACE: &str = "-";
    /// How the answer starts on failure: `error: MESSAGE`.
    /// The helper then exits non-zero.
    pub const ERROR: &str = "error: ";
    /// How `MESSAGE` starts when the kernel refuses to make a user namespace.
    pub const REFUSED: &str = "user namespaces refused: ";
    /// How `MESSAGE` starts when the kernel makes a user namespace but denies (`EPERM` or
    /// `EACCES`) the first privileged operations in it.
    /// Those are setting up its user and group maps, and changing the propagation of `/` in
    /// its new mount namespace.
    /// It is the mark of a Linux security module restricting unprivileged user namespaces, as
    /// Ubuntu 24.04's AppArmor `unprivileged_userns` profile does.
    pub const POWERLESS: &str = "no privileges in a new user namespace: ";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_messages_round_trip() {
        for status in [
            Status::Exited,
            Status::Signalled,
            Status::ExitedNothingLeft,
            Status::SignalledNothingLeft,
        ] {
            assert_eq!(Status::from_u8(status.as_u8()), Some(status));
            assert_eq!(Status::parse(status.message(-3)), (Some(status), -3));
            assert!(status.with_nothing_left().nothing_left());
            assert_eq!(status.with_nothing_left().signalled(), status.signalled());
        }
        assert_eq!(Status::Exited.message(3), [b'C', 3, 0, 0, 0]);
        assert_eq!(Status::parse([b'?', 0, 0, 0, 0]), (None, 0));
    }

    #[test]
    fn control_bytes_and_namespace_names_round_trip() {
        for control in [Control::Terminate, Control::Interrupt, Control::Kill] {
            assert_eq!(Control::from_u8(control.as_u8()), Some(control));
        }
        assert_eq!(Control::from_u8(b'x'), None);
        for kind in NamespaceKind::ALL {
            assert_eq!(NamespaceKind::from_name(kind.name()), Some(kind));
        }
        assert_eq!(NamespaceKind::from_name("uts"), None);
    }

    #[test]
    fn descriptors_follow_one_another() {
        assert_eq!(fd::first_cgroup(false, 0), fd::RULESET);
        assert_eq!(fd::first_cgroup(true, 0), fd::FIRST_NAMESPACE);
        assert_eq!(
            fd::first_cgroup(true, fd::MAX_NAMESPACES) + fd::MAX_CGROUPS as i32,
            fd::FIRST_FREE
        );
        assert_eq!(fd::FIRST_FREE, 14);
    }
}
