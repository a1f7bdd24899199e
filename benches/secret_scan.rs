//! What the content scan of the secrets costs, against the host's own start, in the same run:
//!
//! 1. A throwaway home gets [`FILES`] configuration files under `~/.config` (settings of 0.3 to
//!    2 KiB in TOML, JSON, INI and YAML; [`WITH_SECRETS`] of them hold a token or a password).
//! 2. The cold scan: the scan with an empty cache directory ([`COLD_ROUNDS`] times; the files
//!    are in the page cache after the first round, so this is the cost of reading and checking
//!    them, not of the disk).
//! 3. The warm scan: the scan with the cache the cold one wrote (a stat per file).
//! 4. The host's start as a whole process: `toolhost call execute {"command":"true"}` with
//!    `HOME` at the throwaway home, `--secret-scan off` against `on` with the warm cache,
//!    interleaved ([`CALL_ROUNDS`] rounds), and `on` with an empty state directory each time.
//!
//! Prints each median and the ratios: cold and warm scan to the one-shot call without the scan,
//! and the one-shot call with the scan (warm, cold) to the one without. Asserts nothing about
//! time.
//!
//! Run with `cargo bench -p toolhost-e2e --bench secret_scan`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use toolhost::sandbox::secrets::scan::{LIMITS, scan};
use toolhost_e2e::stats::{median, ratio};
use toolhost_e2e::toolhost_bin;

const FILES: usize = 10_000;
const WITH_SECRETS: usize = 10;
const COLD_ROUNDS: usize = 5;
const WARM_ROUNDS: usize = 20;
const CALL_ROUNDS: usize = 15;
const ARGUMENTS: &str = r#"{"command":"true"}"#;

/// 1. The throwaway home: `FILES` files in 100 tool directories.
fn plant_home(home: &Path) {
    let setting = |i: usize| -> String {
        let mut text = String::new();
        let lines = 10 + i % 50;
        for line in 0..lines {
            match i % 4 {
                0 => text.push_str(&format!("option_{line} = \"value-{i}-{line}\"\n")),
                1 => text.push_str(&format!("  \"option.{line}\": {line},\n")),
                2 => text.push_str(&format!("timeout_{line}={line}\n")),
                _ => text.push_str(&format!("option_{line}: some value {line}\n")),
            }
        }
        text.push_str("token_limit = 5\npassword_prompt = true\n");
        text
    };
    for i in 0..FILES {
        let dir = home.join(format!(".config/tool{}", i % 100));
        std::fs::create_dir_all(&dir).expect("dir");
        let extension = ["toml", "json", "ini", "yaml"][i % 4];
        let mut content = setting(i);
        if i % (FILES / WITH_SECRETS) == 7 {
            content.push_str("github_token = \"ghp_8uMRqXGZ0dJYkWbTq2vLc4NfE7hA1sPx9KoY\"\n");
        }
        std::fs::write(dir.join(format!("settings{i}.{extension}")), content).expect("file");
    }
}

/// 2. and 3. One scan of `home` with the cache in `cache`; its wall time and findings.
fn timed_scan(home: &Path, cache: &Path) -> (Duration, usize) {
    let began = Instant::now();
    let report = scan(&[home.to_path_buf()], &[], Some(cache), &LIMITS);
    (began.elapsed(), report.found.len())
}

/// 4. `toolhost call execute true` as a whole process with `HOME` at `home`.
fn one_shot(home: &Path, state: &Path, workspace: &Path, scan: bool) -> Duration {
    let began = Instant::now();
    let status = Command::new(toolhost_bin())
        .current_dir(workspace)
        .env("HOME", home)
        .arg("--state-dir")
        .arg(state)
        .args(["--secret-scan", if scan { "on" } else { "off" }])
        .args(["call", "execute", ARGUMENTS])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("toolhost runs");
    let elapsed = began.elapsed();
    assert!(status.success(), "toolhost call failed: {status}");
    elapsed
}

fn main() {
    let root = tempfile::tempdir().expect("root");
    let home = root.path().canonicalize().expect("root").join("home");
    let workspace = root.path().join("workspace");
    std::fs::create_dir_all(&workspace).expect("workspace");
    plant_home(&home);
    let _ = toolhost_bin();

    // 2. Cold: an empty cache each round.
    let mut cold = Vec::new();
    let mut found = 0;
    for round in 0..COLD_ROUNDS {
        let cache = root.path().join(format!("cold-{round}"));
        let (elapsed, count) = timed_scan(&home, &cache);
        cold.push(elapsed);
        found = count;
    }
    // 3. Warm: the cache of the last cold round.
    let cache = root.path().join(format!("cold-{}", COLD_ROUNDS - 1));
    let mut warm: Vec<Duration> = (0..WARM_ROUNDS)
        .map(|_| timed_scan(&home, &cache).0)
        .collect();

    // 4. The one-shot call, interleaved: without the scan, with it warm, with it cold.
    let state = root.path().join("state");
    one_shot(&home, &state, &workspace, true);
    let (mut off, mut on, mut on_cold) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..CALL_ROUNDS {
        off.push(one_shot(&home, &state, &workspace, false));
        on.push(one_shot(&home, &state, &workspace, true));
        if round < COLD_ROUNDS {
            let fresh = root.path().join(format!("state-cold-{round}"));
            on_cold.push(one_shot(&home, &fresh, &workspace, true));
        }
    }

    let cold = median(&mut cold);
    let warm = median(&mut warm);
    let off = median(&mut off);
    let on = median(&mut on);
    let on_cold = median(&mut on_cold);
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!("secret scan of a home of {FILES} configuration files ({found} found):");
    println!(
        "  cold scan (no cache)                      {:8.1} ms",
        ms(cold)
    );
    println!(
        "  warm scan (cache validated, a stat a file) {:7.1} ms",
        ms(warm)
    );
    println!(
        "  one-shot `toolhost call execute true`, --secret-scan off        {:7.1} ms",
        ms(off)
    );
    println!(
        "  one-shot `toolhost call execute true`, scan on, warm cache      {:7.1} ms",
        ms(on)
    );
    println!(
        "  one-shot `toolhost call execute true`, scan on, no cache        {:7.1} ms",
        ms(on_cold)
    );
    println!("ratios:");
    println!(
        "  cold scan / one-shot call without the scan: {:.2}x",
        ratio(cold, off)
    );
    println!(
        "  warm scan / one-shot call without the scan: {:.2}x",
        ratio(warm, off)
    );
    println!(
        "  one-shot call with the scan (warm) / without: {:.2}x",
        ratio(on, off)
    );
    println!(
        "  one-shot call with the scan (cold) / without: {:.2}x",
        ratio(on_cold, off)
    );
}
