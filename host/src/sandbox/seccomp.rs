//! The seccomp layer: system calls a confined command may not make.
//!
//! Filters compiled once per scope and profile with `seccompiler` and handed to the keeper
//! in a sealed memory file ([`programs`]). Those the keeper itself makes no call of are marked
//! shared: a resident keeper installs them on itself once, and the keepers it forks and their
//! commands inherit them; each command's process installs the others. They refuse:
//!
//! - `EPERM` for what could undo the other layers or reach other processes: mounting
//!   (old and new mount API), `pivot_root`, `chroot`, new namespaces (`unshare`, `setns`,
//!   `clone` with a `CLONE_NEW*` flag), `ptrace`, `process_vm_readv`/`writev` (in a program
//!   of their own: the keeper makes them), `bpf`,
//!   `perf_event_open`, the kernel keyring, `userfaultfd`, io_uring, loading kernels and
//!   modules, `reboot`, `swapon`/`swapoff`, `acct`, changing the clock; and, when the network
//!   is `none`, `socket` for anything but a Unix socket (`EACCES` there, so that a refused
//!   connection reads as a permission problem);
//! - `ENOSYS` for `clone3`, whose flags live in memory a filter cannot read: the C library
//!   then falls back to `clone`, which the first filter checks;
//! - `EACCES` for Unix sockets of any type but stream and seqpacket (`socket` and
//!   `socketpair`): a datagram socket reaches a pathname socket with `sendto`, which the
//!   keeper does not supervise (`SOCK_RAW` is a datagram socket for `AF_UNIX`); in the strict
//!   mode (see `unix.rs`), for every `socket(AF_UNIX, ..)`.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::fd::OwnedFd;

use nix::libc;
use nix::sys::memfd::{MFdFlags, memfd_create};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use toolhost_keeper_protocol::fd;

use super::Network;
use super::unix::UnixMode;

/// Why the filters could not be built.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SeccompError {
    /// This architecture is not one `seccompiler` supports.
    #[error("seccomp filters are not supported on this architecture ({0})")]
    Arch(&'static str),
    /// Compiling a filter failed.
    #[error("cannot compile the seccomp filter: {0}")]
    Compile(#[from] seccompiler::BackendError),
    /// Writing the programs out failed.
    #[error("cannot store the seccomp filter: {0}")]
    Store(#[from] std::io::Error),
}

/// System calls refused outright.
const DENIED: &[libc::c_long] = &[
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_open_tree,
    libc::SYS_move_mount,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_ptrace,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_userfaultfd,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_acct,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_clock_adjtime,
    libc::SYS_adjtimex,
];

/// System calls refused outright that the keeper itself makes: its `connect` supervision
/// reads the caller's address with `process_vm_readv`. They are in a program of their own,
/// which each command's process installs (not shared, see [`programs`]).
const DENIED_TO_COMMANDS: &[libc::c_long] =
    &[libc::SYS_process_vm_readv, libc::SYS_process_vm_writev];

/// `clone` flags that create namespaces.
const NAMESPACE_FLAGS: &[libc::c_int] = &[
    libc::CLONE_NEWNS,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWCGROUP,
];

/// The filters for `network`, as the keeper reads them: for each program its length in
/// instructions (`u32`, native endian) followed by its instructions (8 bytes each). With
/// network `none` only Unix sockets are allowed, and, in a network namespace of the command's
/// own (`private_network`), the families that stay inside it (IPv4, IPv6, netlink): not
/// `AF_VSOCK` or others that reach past a network namespace.
pub(super) fn programs(
    network: Network,
    private_network: bool,
    unix: &UnixMode,
) -> Result<OwnedFd, SeccompError> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|_| SeccompError::Arch(std::env::consts::ARCH))?;
    let mut denied: BTreeMap<i64, Vec<SeccompRule>> =
        DENIED.iter().map(|&call| (call, Vec::new())).collect();
    let namespaces = NAMESPACE_FLAGS
        .iter()
        .map(|&flag| {
            let flag = u64::from(flag.cast_unsigned());
            SeccompRule::new(vec![SeccompCondition::new(
                0,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::MaskedEq(flag),
                flag,
            )?])
        })
        .collect::<Result<Vec<_>, _>>()?;
    denied.insert(libc::SYS_clone, namespaces);
    let whole = |call: &libc::c_long| (*call, Vec::new());
    // (program, shared): the keeper itself works under a shared one (it makes no call these
    // deny once it has joined the namespaces), so a resident keeper installs it once.
    let mut programs = vec![
        (refusing(denied, libc::EPERM, arch)?, true),
        (
            refusing(
                BTreeMap::from([whole(&libc::SYS_clone3)]),
                libc::ENOSYS,
                arch,
            )?,
            true,
        ),
        (unix_filter(unix, arch)?, true),
        (
            refusing(
                DENIED_TO_COMMANDS.iter().map(whole).collect(),
                libc::EPERM,
                arch,
            )?,
            false,
        ),
    ];
    // An allow-list is `none` with the session's gate on its loopback.
    if network != Network::Full {
        let mut allowed = vec![libc::AF_UNIX];
        if private_network {
            allowed.extend([libc::AF_INET, libc::AF_INET6, libc::AF_NETLINK]);
        }
        // Denied when the family is none of these (the conditions of one rule all hold).
        let other = SeccompRule::new(
            allowed
                .into_iter()
                .map(|family| {
                    SeccompCondition::new(
                        0,
                        SeccompCmpArgLen::Dword,
                        SeccompCmpOp::Ne,
                        family.cast_unsigned().into(),
                    )
                })
                .collect::<Result<Vec<_>, _>>()?,
        )?;
        // Not shared: the keeper's supervisor asks the kernel's socket table over netlink.
        let socket = BTreeMap::from([(libc::SYS_socket, vec![other])]);
        programs.push((refusing(socket, libc::EACCES, arch)?, false));
    }
    store(&programs)
}

/// A program that fails the calls `rules` match with `errno` and lets every other through.
fn refusing(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    errno: libc::c_int,
    arch: TargetArch,
) -> Result<BpfProgram, SeccompError> {
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno.cast_unsigned()),
        arch,
    )?;
    Ok(BpfProgram::try_from(filter)?)
}

/// The `socket` types of `AF_UNIX` a confined command may make.
const UNIX_TYPES: [i32; 2] = [libc::SOCK_STREAM, libc::SOCK_SEQPACKET];

/// `EACCES` for Unix sockets of the other types (`socket` and `socketpair`), and in the
/// strict mode for every `socket(AF_UNIX, ..)`. The type's low four bits are the type; the
/// others are flags (`SOCK_NONBLOCK`, `SOCK_CLOEXEC`).
fn unix_filter(unix: &UnixMode, arch: TargetArch) -> Result<BpfProgram, SeccompError> {
    let unix_family = || {
        SeccompCondition::new(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Eq,
            libc::AF_UNIX.cast_unsigned().into(),
        )
    };
    let other_types = || {
        (0..16)
            .filter(|kind| !UNIX_TYPES.contains(kind))
            .map(|kind| {
                SeccompRule::new(vec![
                    unix_family()?,
                    SeccompCondition::new(
                        1,
                        SeccompCmpArgLen::Dword,
                        SeccompCmpOp::MaskedEq(0xf),
                        u64::from(kind.cast_unsigned()),
                    )?,
                ])
            })
            .collect::<Result<Vec<_>, _>>()
    };
    let socket = match unix {
        UnixMode::Supervised => other_types()?,
        UnixMode::Strict(_) => vec![SeccompRule::new(vec![unix_family()?])?],
    };
    refusing(
        BTreeMap::from([
            (libc::SYS_socket, socket),
            (libc::SYS_socketpair, other_types()?),
        ]),
        libc::EACCES,
        arch,
    )
}

/// The programs in a sealed memory file, each with whether it is shared
/// ([`fd::SECCOMP_SHARED`]).
fn store(programs: &[(BpfProgram, bool)]) -> Result<OwnedFd, SeccompError> {
    let mut bytes = Vec::new();
    for (program, shared) in programs {
        let length = u32::try_from(program.len())
            .ok()
            .filter(|length| length & fd::SECCOMP_SHARED == 0)
            .ok_or_else(|| std::io::Error::other("a seccomp program too long"))?;
        let flag = if *shared { fd::SECCOMP_SHARED } else { 0 };
        bytes.extend_from_slice(&(length | flag).to_ne_bytes());
        for instruction in program {
            bytes.extend_from_slice(&instruction.code.to_ne_bytes());
            bytes.push(instruction.jt);
            bytes.push(instruction.jf);
            bytes.extend_from_slice(&instruction.k.to_ne_bytes());
        }
    }
    let fd = memfd_create(
        c"toolhost-seccomp",
        MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
    )
    .map_err(std::io::Error::from)?;
    let mut file = std::fs::File::from(fd);
    file.write_all(&bytes)?;
    nix::fcntl::fcntl(
        &file,
        nix::fcntl::FcntlArg::F_ADD_SEALS(
            nix::fcntl::SealFlag::F_SEAL_SEAL
                | nix::fcntl::SealFlag::F_SEAL_SHRINK
                | nix::fcntl::SealFlag::F_SEAL_GROW
                | nix::fcntl::SealFlag::F_SEAL_WRITE,
        ),
    )
    .map_err(std::io::Error::from)?;
    Ok(OwnedFd::from(file))
}
