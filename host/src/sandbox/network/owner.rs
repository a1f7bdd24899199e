//! Which command made a connection or a lookup the gate refused, so that only its output names
//! the refusal:
//!
//! 1. The client's socket is found in the network namespace's socket table
//!    (`/proc/HOLDER/net/{tcp,tcp6}` or `{udp,udp6}`), by its port (the peer's port as the gate
//!    saw it), and for TCP the gate's port at the other end.
//! 2. The process holding that socket is found among the processes of the namespace (those
//!    whose `/proc/PID/ns/net` is the holder's), by `/proc/PID/fd`.
//! 3. Its ancestors' pids, up to the host: a command's keeper is among them.
//!
//! It runs only for a refusal, at most [`PER_SECOND`] times a second per gate. Past that, a
//! refusal goes to the process of the last one of the same host (a loop retrying it); when the
//! socket or its process is gone, or nothing is known, it counts for every command of the
//! session running at the time.

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Most refusals a gate looks up each second.
const PER_SECOND: u32 = 50;
/// Most ancestors kept.
const MAX_ANCESTORS: usize = 64;

/// The lookups of one gate.
#[derive(Debug)]
pub(super) struct Owners {
    /// The namespace holder's pid.
    holder: i32,
    /// The lookups of the current second.
    budget: Mutex<(Instant, u32)>,
}

/// The protocol of a refused request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Protocol {
    /// A connection to the proxy, whose listener has this port.
    Tcp { listener: u16 },
    /// A lookup at the stub.
    Udp,
}

impl Owners {
    pub(super) fn new(holder: i32) -> Owners {
        Owners {
            holder,
            budget: Mutex::new((Instant::now(), 0)),
        }
    }

    /// The pids of the process whose socket has port `port`, and of its ancestors (empty when
    /// not found); `None` past the budget. Blocking (reads `/proc`).
    pub(super) fn chain(&self, protocol: Protocol, port: u16) -> Option<Vec<i32>> {
        {
            let mut budget = crate::lock(&self.budget);
            if budget.0.elapsed() >= Duration::from_secs(1) {
                *budget = (Instant::now(), 0);
            }
            if budget.1 >= PER_SECOND {
                return None;
            }
            budget.1 += 1;
        }
        let Some(inode) = self.socket_inode(protocol, port) else {
            return Some(Vec::new());
        };
        Some(self.holding(inode).map(ancestors).unwrap_or_default())
    }

    /// Step 1: the inode of the socket whose local port is `port`.
    fn socket_inode(&self, protocol: Protocol, port: u16) -> Option<u64> {
        let tables: &[&str] = match protocol {
            Protocol::Tcp { .. } => &["tcp", "tcp6"],
            Protocol::Udp => &["udp", "udp6"],
        };
        for table in tables {
            let path = format!("/proc/{}/net/{table}", self.holder);
            let Ok(text) = std::fs::read_to_string(path) else {
                continue;
            };
            if let Some(inode) = find_socket(&text, protocol, port) {
                return Some(inode);
            }
        }
        None
    }

    /// Step 2: the process of the holder's network namespace that holds socket `inode`.
    fn holding(&self, inode: u64) -> Option<i32> {
        let namespace = std::fs::read_link(format!("/proc/{}/ns/net", self.holder)).ok()?;
        let wanted = format!("socket:[{inode}]");
        let processes = std::fs::read_dir("/proc").ok()?;
        for entry in processes.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|name| name.parse::<i32>().ok())
            else {
                continue;
            };
            let base = Path::new("/proc").join(pid.to_string());
            if std::fs::read_link(base.join("ns/net")).ok().as_ref() != Some(&namespace) {
                continue;
            }
            let Ok(fds) = std::fs::read_dir(base.join("fd")) else {
                continue;
            };
            for fd in fds.flatten() {
                if std::fs::read_link(fd.path())
                    .is_ok_and(|target| target.as_os_str() == wanted.as_str())
                {
                    return Some(pid);
                }
            }
        }
        None
    }
}

/// The inode of the socket of a `/proc/net/{tcp,udp}[6]` table whose local port is `port`
/// (and, for TCP, whose remote port is the listener's).
fn find_socket(table: &str, protocol: Protocol, port: u16) -> Option<u64> {
    let port_of = |address: &str| {
        address
            .rsplit_once(':')
            .and_then(|(_, port)| u16::from_str_radix(port, 16).ok())
    };
    for line in table.lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(local), Some(remote), Some(inode)) =
            (fields.get(1), fields.get(2), fields.get(9))
        else {
            continue;
        };
        if port_of(local) != Some(port) {
            continue;
        }
        if let Protocol::Tcp { listener } = protocol
            && port_of(remote) != Some(listener)
        {
            continue;
        }
        if let Ok(inode) = inode.parse::<u64>()
            && inode != 0
        {
            return Some(inode);
        }
    }
    None
}

/// Step 3: `pid` and its ancestors' pids.
fn ancestors(pid: i32) -> Vec<i32> {
    let mut chain = vec![pid];
    let mut current = pid;
    while chain.len() < MAX_ANCESTORS {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{current}/stat")) else {
            break;
        };
        // After the command name (in parentheses, which may hold anything): state, ppid.
        let Some(parent) = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<i32>().ok())
        else {
            break;
        };
        if parent <= 1 {
            break;
        }
        chain.push(parent);
        current = parent;
    }
    chain
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_is_found_by_its_port_and_for_tcp_by_the_listeners() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:9277 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1809784 1\n\
   1: 0100007F:C350 0100007F:9277 01 00000000:00000000 00:00000000 00000000     0        0 4242 1\n";
        assert_eq!(
            find_socket(table, Protocol::Tcp { listener: 0x9277 }, 0xC350),
            Some(4242)
        );
        assert_eq!(
            find_socket(table, Protocol::Tcp { listener: 1 }, 0xC350),
            None
        );
        assert_eq!(find_socket(table, Protocol::Udp, 0x9277), Some(1809784));
        assert_eq!(find_socket(table, Protocol::Udp, 7), None);
    }

    #[test]
    fn the_process_holding_a_socket_and_its_ancestors_are_found() {
        // A socket of this test process, in its own network namespace (the holder is us).
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
        let client =
            std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let port = client.local_addr().expect("addr").port();
        let me = std::process::id() as i32;
        let owners = Owners::new(me);
        let chain = owners.chain(
            Protocol::Tcp {
                listener: listener.local_addr().expect("addr").port(),
            },
            port,
        );
        let chain = chain.expect("within the budget");
        assert_eq!(chain.first(), Some(&me), "{chain:?}");
        assert!(chain.len() >= 2, "its parent too: {chain:?}");
        // Past the budget, nothing is looked up.
        for _ in 0..PER_SECOND {
            owners.chain(Protocol::Udp, 1);
        }
        assert_eq!(owners.chain(Protocol::Tcp { listener: 1 }, port), None);
    }
}
