//! Step 1 of the supervision: the seccomp filter that sends the command's `connect` calls to
//! the keeper, and its listener's way from the command's process to the keeper.
//!
//! [`program`] is the filter, in classic BPF.
//! [`install`] installs it in the command's process before `exec`, and sends the listener.
//! [`receive_listener`] takes the listener in the keeper.

use std::io;
use std::os::fd::{OwnedFd, RawFd};

use crate::fds::{Received, receive_with_fds, send_with_fds};

/// `AUDIT_ARCH_*` of this build (linux/audit.h).
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xc000_00b7;
#[cfg(target_arch = "riscv64")]
const AUDIT_ARCH: u32 = 0xc000_00f3;
/// x32 system calls share x86_64's audit architecture, with this bit in their number.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// Offsets in `struct seccomp_data`.
const NR_OFFSET: u32 = 0;
const ARCH_OFFSET: u32 = 4;

const fn statement(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

const fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The filter: `connect` goes to the supervisor, everything else is allowed (the host's
/// filters decide on it). Another architecture kills the process, as the host's filters do;
/// an x32 system call is refused (`EPERM`), so that x32's `connect` cannot pass unseen.
pub(crate) fn program() -> Vec<libc::sock_filter> {
    const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const JEQ: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const RET: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    let connect = u32::try_from(libc::SYS_connect).unwrap_or(u32::MAX);
    let mut program = vec![
        statement(LD_W_ABS, ARCH_OFFSET),
        // Not this architecture: to the kill at the end.
        jump(JEQ, AUDIT_ARCH, 0, 0),
        statement(LD_W_ABS, NR_OFFSET),
    ];
    #[cfg(target_arch = "x86_64")]
    {
        const JSET: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
        // x32: to the refusal.
        program.push(jump(JSET, X32_SYSCALL_BIT, 0, 0));
    }
    program.extend([
        jump(JEQ, connect, 1, 0),
        statement(RET, libc::SECCOMP_RET_ALLOW),
        statement(RET, libc::SECCOMP_RET_USER_NOTIF),
        statement(RET, libc::SECCOMP_RET_ERRNO | libc::EPERM.cast_unsigned()),
        statement(RET, libc::SECCOMP_RET_KILL_PROCESS),
    ]);
    // Fill in the forward jumps to the last two statements.
    let last = program.len() - 1;
    let arch_check = 1;
    program[arch_check].jf = u8::try_from(last - arch_check - 1).unwrap_or(u8::MAX);
    #[cfg(target_arch = "x86_64")]
    {
        let x32_check = 3;
        program[x32_check].jt = u8::try_from(last - 1 - x32_check - 1).unwrap_or(u8::MAX);
    }
    program
}

/// Step 1, in the command's process before `exec`: install `filter` ([`program`], built by
/// the keeper before the clone: this allocates nothing) and send its listener over `channel`
/// (the child's end of a socket pair), then close it. `NO_NEW_PRIVS` is set.
pub(crate) fn install(channel: RawFd, filter: &[libc::sock_filter]) -> io::Result<()> {
    let fprog = libc::sock_fprog {
        len: u16::try_from(filter.len()).unwrap_or(u16::MAX),
        filter: filter.as_ptr().cast_mut(),
    };
    let mut listener = -1;
    // A signal while the supervisor handles a call no longer interrupts it (Linux 5.19); older
    // kernels refuse the flag, and get the filter without it.
    for flags in [
        libc::SECCOMP_FILTER_FLAG_NEW_LISTENER | libc::SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV,
        libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
    ] {
        // SAFETY: `fprog` points at `filter`'s instructions, alive for the call; the kernel
        // copies the program.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                flags,
                &raw const fprog,
            )
        };
        if fd >= 0 {
            listener = i32::try_from(fd).map_err(io::Error::other)?;
            break;
        }
        if io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
            return Err(io::Error::last_os_error());
        }
    }
    if listener < 0 {
        return Err(io::Error::last_os_error());
    }
    let sent = send_with_fds(channel, &[0], &[listener]);
    // SAFETY: closing the listener, ours alone: the command must never hold it.
    unsafe { libc::close(listener) };
    sent
}

/// In the keeper after the command started: the listener the command's process sent on
/// `channel` (the keeper's end).
pub(crate) fn receive_listener(channel: RawFd) -> io::Result<OwnedFd> {
    let no_listener = || io::Error::other("the command's process sent no listener");
    let mut byte = [0u8; 1];
    let received = receive_with_fds(channel, &mut byte, libc::MSG_DONTWAIT);
    match received {
        Ok(Received { read: 1, fds, .. }) => fds.into_iter().next().ok_or_else(no_listener),
        _ => Err(no_listener()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run `program` on a `seccomp_data` of `nr` and `arch`, as the kernel would.
    fn run(program: &[libc::sock_filter], nr: u32, arch: u32) -> u32 {
        let mut accumulator = 0u32;
        let mut pc = 0usize;
        loop {
            let s = program[pc];
            let class = u32::from(s.code) & 0x07;
            match class {
                c if c == libc::BPF_LD => {
                    accumulator = match s.k {
                        NR_OFFSET => nr,
                        ARCH_OFFSET => arch,
                        other => panic!("load of offset {other}"),
                    };
                    pc += 1;
                }
                c if c == libc::BPF_JMP => {
                    let op = u32::from(s.code) & 0xf0;
                    let taken = if op == libc::BPF_JEQ {
                        accumulator == s.k
                    } else if op == libc::BPF_JSET {
                        accumulator & s.k != 0
                    } else {
                        panic!("jump op {op:#x}")
                    };
                    pc += 1 + usize::from(if taken { s.jt } else { s.jf });
                }
                c if c == libc::BPF_RET => return s.k,
                other => panic!("class {other:#x}"),
            }
        }
    }

    #[test]
    fn connect_goes_to_the_supervisor_and_nothing_else() {
        let program = program();
        let connect = libc::SYS_connect as u32;
        assert_eq!(
            run(&program, connect, AUDIT_ARCH),
            libc::SECCOMP_RET_USER_NOTIF
        );
        for other in [
            libc::SYS_socket,
            libc::SYS_sendto,
            libc::SYS_sendmsg,
            libc::SYS_bind,
        ] {
            assert_eq!(
                run(&program, other as u32, AUDIT_ARCH),
                libc::SECCOMP_RET_ALLOW,
                "{other}"
            );
        }
        assert_eq!(
            run(&program, connect, 0x4000_0003),
            libc::SECCOMP_RET_KILL_PROCESS,
            "another architecture"
        );
        #[cfg(target_arch = "x86_64")]
        assert_eq!(
            run(&program, connect | X32_SYSCALL_BIT, AUDIT_ARCH),
            libc::SECCOMP_RET_ERRNO | libc::EPERM.cast_unsigned(),
            "x32's connect"
        );
    }
}
