//! What the network gate's proxy costs a download (`--network allow=...`), against the same
//! download made directly (`--network full`), in the same run, interleaved round by round:
//!
//! 1. latency: 50 small `GET`s in one command, each `curl`'s own time (`time_total`), the
//!    median of all; through the proxy it includes the host's check and its connection;
//! 2. throughput: one download of 256 MiB, `curl`'s average speed;
//! 3. connect: 2,000 TCP connects to a loopback listener and 2,000 Unix connects to a socket
//!    in `$TMPDIR`, made by one command, each timed by the command itself; confined (the
//!    keeper supervises every `connect`, see docs/confinement.md "Unix sockets") against
//!    `--sandbox off`, in the same run.
//!
//! The server is Python's `http.server` on the host's loopback, allowed by its address
//! (`allow=127.0.0.1`: a listed address may be a loopback one), so the proxy looks no name up
//! and the bench runs on a release build, which reads no test-only resolver map. Nothing
//! leaves the machine. Asserts nothing about time.
//!
//! Run with `cargo bench -p toolhost-e2e --bench network_proxy` (`TOOLHOST_ROUNDS`, default 5).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use toolhost_e2e::{json, toolhost_bin};

const SERVER: &str = r#"
import functools, http.server, sys
class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args): pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=sys.argv[1]))
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

/// `toolhost [flags] call execute {command}` from `dir`; the command's output.
fn execute(dir: &std::path::Path, flags: &[&str], command: &str) -> String {
    let args = serde_json::json!({ "command": command, "timeout": "10m" }).to_string();
    let output = Command::new(toolhost_bin())
        .current_dir(dir)
        .env("TOOLHOST_LOG", "error")
        .args(flags)
        .args(["call", "execute", &args])
        .stdin(Stdio::null())
        .output()
        .expect("toolhost runs");
    let result = json(&String::from_utf8_lossy(&output.stdout));
    assert_eq!(result["exit_code"], 0, "{result}");
    result["output"].as_str().unwrap_or_default().to_owned()
}

/// The numbers `curl -w` printed, one per line.
fn numbers(text: &str) -> Vec<f64> {
    text.lines()
        .filter_map(|line| line.trim().parse().ok())
        .collect()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

/// 2,000 TCP and 2,000 Unix connects, timed one by one inside the command: the medians in
/// microseconds, one line each (`tcp US`, `unix US`).
const CONNECTS: &str = r#"
import os, socket, statistics, time
def run(family, address):
    server = socket.socket(family)
    server.bind(address)
    server.listen(4096)
    target = server.getsockname()
    times = []
    for _ in range(2000):
        c = socket.socket(family)
        start = time.perf_counter()
        c.connect(target)
        times.append(time.perf_counter() - start)
        c.close()
        server.accept()[0].close()
    return statistics.median(times) * 1e6
print("tcp", run(socket.AF_INET, ("127.0.0.1", 0)))
print("unix", run(socket.AF_UNIX, os.path.join(os.environ.get("TMPDIR", "/tmp"), "bench.sock")))
"#;

/// The per-connect medians of [`CONNECTS`], confined and with `--sandbox off`, interleaved.
fn connects(workspace: &std::path::Path, rounds: usize) {
    let command = format!(
        "rm -f \"${{TMPDIR:-/tmp}}/bench.sock\"; python3 -c '{}'",
        CONNECTS.replace('\'', "'\\''")
    );
    let cases: [(&str, &[&str]); 2] = [
        ("--sandbox off", &["--sandbox", "off"]),
        ("confined (workspace-write)", &[]),
    ];
    let mut medians = [[Vec::new(), Vec::new()], [Vec::new(), Vec::new()]];
    for round in 0..rounds {
        for turn in 0..cases.len() {
            let index = (turn + round) % cases.len();
            let output = execute(workspace, cases[index].1, &command);
            for line in output.lines() {
                let mut words = line.split_whitespace();
                let kind = match words.next() {
                    Some("tcp") => 0,
                    Some("unix") => 1,
                    _ => continue,
                };
                if let Some(us) = words.next().and_then(|us| us.parse::<f64>().ok()) {
                    medians[index][kind].push(us);
                }
            }
        }
    }
    println!("connect: {rounds} rounds of 2,000 each, interleaved");
    for (index, (name, _)) in cases.iter().enumerate() {
        println!(
            "  {name}: TCP connect median {:.1} us, Unix connect median {:.1} us",
            median(medians[index][0].clone()),
            median(medians[index][1].clone())
        );
    }
    for (kind, name) in ["TCP", "Unix"].iter().enumerate() {
        let (off, on) = (
            median(medians[0][kind].clone()),
            median(medians[1][kind].clone()),
        );
        println!(
            "  the supervisor adds {:.1} us per {name} connect ({:.2}x)",
            on - off,
            on / off
        );
    }
}

fn main() {
    let rounds: usize = std::env::var("TOOLHOST_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(5);
    let served = tempfile::tempdir().expect("served");
    std::fs::write(served.path().join("small"), "ok\n").expect("small");
    let big = std::fs::File::create(served.path().join("big")).expect("big");
    big.set_len(256 * 1024 * 1024).expect("256 MiB");
    let workspace = tempfile::tempdir().expect("workspace");
    let mut server = Command::new("python3")
        .arg("-c")
        .arg(SERVER)
        .arg(served.path())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let mut line = String::new();
    BufReader::new(server.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the port");
    let port: u16 = line.trim().parse().expect("a port");

    let small = |host: &str| {
        format!(
            "for i in $(seq 50); do curl -s -o /dev/null -w '%{{time_total}}\\n' \
             http://{host}:{port}/small; done"
        )
    };
    let big = |host: &str| {
        format!("curl -s -o /dev/null -w '%{{speed_download}}\\n' http://{host}:{port}/big")
    };
    let cases: [(&str, &[&str], &str); 2] = [
        (
            "direct (--network full)",
            &["--network", "full"],
            "127.0.0.1",
        ),
        (
            "through the proxy (--network allow=127.0.0.1)",
            &["--network", "allow=127.0.0.1"],
            "127.0.0.1",
        ),
    ];
    let mut latency = [Vec::new(), Vec::new()];
    let mut speed = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        for turn in 0..cases.len() {
            let index = (turn + round) % cases.len();
            let (_, flags, host) = cases[index];
            latency[index].extend(numbers(&execute(workspace.path(), flags, &small(host))));
            speed[index].extend(numbers(&execute(workspace.path(), flags, &big(host))));
        }
    }
    let _ = server.kill();
    let _ = server.wait();
    connects(workspace.path(), rounds);

    println!("network_proxy: {rounds} rounds, interleaved");
    let mut medians = Vec::new();
    for (index, (name, _, _)) in cases.iter().enumerate() {
        let latency = median(latency[index].clone()) * 1e6;
        let speed = median(speed[index].clone()) / (1024.0 * 1024.0);
        println!("  {name}: GET median {latency:.0} us, download {speed:.0} MiB/s");
        medians.push((latency, speed));
    }
    let (direct, proxied) = (medians[0], medians[1]);
    println!(
        "  the proxy adds {:.0} us per request ({:.2}x) and keeps {:.2}x of the direct throughput",
        proxied.0 - direct.0,
        proxied.0 / direct.0,
        proxied.1 / direct.1
    );
}
