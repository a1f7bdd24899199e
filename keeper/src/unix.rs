//! The keeper as the supervisor of the command's `connect` calls (`--unix-supervise`).
//!
//! Landlock below ABI 9 does not look at `connect` on a pathname Unix socket, so a confined
//! command could reach any socket of the host's user (a credential daemon, Docker).
//! The host's seccomp filter refuses Unix datagram sockets (`socket` and `socketpair`), the only
//! kind that reaches a pathname socket without `connect`.
//! Every `connect` then goes through the keeper:
//!
//! 1. The command's process, between its `clone` and `exec`, installs [`program`](filter::program) with
//!    `SECCOMP_FILTER_FLAG_NEW_LISTENER` ([`install`]), sends the listener to the keeper over a
//!    socket pair and closes it: the command never holds it.
//! 2. The keeper's main loop receives each notification ([`Supervisor::receive`]), and a
//!    thread of its own handles it ([`supervisor`]'s `handle`).
//! 3. It copies the address from the caller's memory (`process_vm_readv`), then checks that
//!    the notification is still valid (the pid was not reused).
//! 4. It takes the caller's socket with `pidfd_getfd`: the same open file description, so
//!    non-blocking mode, options and bind are the caller's.
//! 5. A pathname address is opened `O_PATH` from the caller's working directory and checked
//!    where it leads ([`Places::allows`]); the keeper connects the caller's socket to the
//!    pinned descriptor through `/proc/self/fd/N`, so the inode checked is the inode reached.
//! 6. An abstract address is allowed only when every socket bound to that name in the network
//!    namespace is held by a process of the command's tree (Landlock's scoping, which the
//!    keeper's own connect would not get).
//! 7. Any other address (TCP, UDP) is connected as given.
//! 8. The keeper answers with the result; a refusal is `EPERM`, and it is reported to the host
//!    on the status pipe ([`UNIX_REFUSED`](toolhost_keeper_protocol::UNIX_REFUSED)).
//!
//! The keeper never answers `SECCOMP_USER_NOTIF_FLAG_CONTINUE`: the kernel would read the
//! address and the descriptor table again, after the check.
//!
//! The parts, by mechanism:
//!
//! - [`filter`]: the seccomp filter and its listener's way to the keeper (step 1).
//! - [`supervisor`]: the supervisor's threads and the checks of each call (steps 2 to 8).
//! - [`places`]: where a pathname socket may be (step 5).
//! - [`sock_diag`]: the name a listening socket was bound with (step 5, with
//!   `--unix-check-binding`).
//! - [`abstract_names`]: who holds the sockets bound to an abstract name (step 6).

mod abstract_names;
mod filter;
mod places;
mod sock_diag;
mod supervisor;

pub(crate) use filter::{install, program, receive_listener};
pub(crate) use places::Places;
pub(crate) use supervisor::{Received, Supervisor, serve};
