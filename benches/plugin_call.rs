//! The cost of calling an interpreter plugin: `py_word_count` and `js_word_count`, the Python
//! and JavaScript examples (`guest-tools/python/word_count`, `guest-tools/js/word_count`:
//! components with an interpreter inside, about 18 MB and 12 MB), against the Rust default
//! policy's `process_list` on the fake process capability (a fresh instance and one host call:
//! the floor of any call). All are `ToolHost::call` in process, interleaved, a fresh instance
//! per call; the plugins' code is compiled once, before the rounds, and cached.
//!
//! Also the host's start with each plugin alone: its compiled code not cached (Cranelift
//! compiles the interpreter) and cached (mapped from disk). Beside them, the same two starts
//! with no plugin: the host with the Rust default policy alone, which every start above also
//! loads.
//!
//! Prints medians, p90 and ratios. Asserts nothing about time. Needs the toolchains of
//! `tests/plugin_languages` (installed into the target directory on first use: `python3` with
//! `venv` and PyPI; `node` 20+ with `npm` and the npm registry). A language whose toolchain
//! cannot be had is left out, and the bench says so.
//!
//! Run: `cargo bench -p toolhost-e2e --bench plugin_call`

#[path = "../tests/plugin_languages/toolchains.rs"]
#[allow(dead_code)]
mod toolchains;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use toolhost::ToolHost;
use toolhost::testing::FakeProcesses;
use toolhost_e2e::repo_root;
use toolhost_e2e::stats::{percentile, ratio};

const WARMUP: usize = 10;
const SAMPLES: usize = 200;
const STARTS: usize = 3;
const TEXT_ARGUMENTS: &str = r#"{"text":"The quick brown fox\njumps over the lazy dog."}"#;

/// Build the JavaScript example into `plugins`, beside the toolchain's installed packages.
fn build_js_example(toolchain: &toolchains::JavaScript, plugins: &Path) -> PathBuf {
    let example = repo_root().join("guest-tools/js/word_count");
    toolchains::copy_files(&example, &toolchain.dir, &["app.js", "build.mjs"]);
    let wasm = plugins.join("js_word_count.wasm");
    let status = Command::new("node")
        .arg("build.mjs")
        .arg(&wasm)
        .arg(repo_root().join("wit"))
        .current_dir(&toolchain.dir)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run node build.mjs");
    assert!(status.success(), "componentize-js failed: {status}");
    wasm
}

/// Build the Python example into `plugins`, from a copy of its source in `work`.
fn build_example(componentize_py: &Path, work: &Path, plugins: &Path) -> PathBuf {
    let source = work.join("source");
    std::fs::create_dir_all(&source).expect("source directory");
    std::fs::copy(
        repo_root().join("guest-tools/python/word_count/app.py"),
        source.join("app.py"),
    )
    .expect("copy app.py");
    let wasm = plugins.join("py_word_count.wasm");
    let status = Command::new(componentize_py)
        .arg("-d")
        .arg(repo_root().join("wit"))
        .args(["-w", "tools", "componentize", "app", "-o"])
        .arg(&wasm)
        .current_dir(&source)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run componentize-py");
    assert!(status.success(), "componentize-py failed: {status}");
    wasm
}

/// A host with the default policy and the plugins in `plugins`, its cache in `cache`, and how
/// long it took to build.
async fn host(plugins: &Path, cache: &Path) -> (ToolHost, Duration) {
    let started = Instant::now();
    let host = ToolHost::builder()
        .cache_dir(Some(cache.to_path_buf()))
        .plugin_dir(plugins)
        .process_backend(FakeProcesses::new())
        .build()
        .await
        .expect("the host builds with the plugins");
    (host, started.elapsed())
}

/// One call's wall time.
async fn call(host: &ToolHost, tool: &str, arguments: &str) -> Duration {
    let started = Instant::now();
    let output = host
        .call("bench", tool, arguments)
        .await
        .unwrap_or_else(|error| panic!("{tool} failed: {error}"));
    let elapsed = started.elapsed();
    std::hint::black_box(output);
    elapsed
}

/// Median and p90, in milliseconds.
fn summary(samples: &mut [Duration]) -> (f64, f64) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    (ms(percentile(samples, 0.5)), ms(percentile(samples, 0.9)))
}

#[tokio::main]
async fn main() {
    let work = tempfile::tempdir().expect("work directory");
    // Each language's plugin alone in a directory of its own (for the starts), and all of
    // them in `plugins` (for the calls).
    let plugins = work.path().join("plugins");
    std::fs::create_dir(&plugins).expect("plugins directory");
    let mut languages: Vec<(&str, &str, PathBuf)> = Vec::new();
    let python = toolchains::python();
    match &python {
        Ok(toolchain) => {
            let alone = work.path().join("python");
            std::fs::create_dir(&alone).expect("python directory");
            let wasm = build_example(&toolchain.componentize_py, work.path(), &alone);
            std::fs::copy(&wasm, plugins.join("py_word_count.wasm")).expect("copy");
            languages.push(("Python", "py_word_count", alone));
        }
        Err(unavailable) => eprintln!(
            "plugin_call: no Python toolchain here, Python left out: {}",
            unavailable.reason
        ),
    }
    let example = repo_root().join("guest-tools/js/word_count");
    let javascript = toolchains::javascript(&example);
    match &javascript {
        Ok(toolchain) => {
            let alone = work.path().join("js");
            std::fs::create_dir(&alone).expect("js directory");
            let wasm = build_js_example(toolchain, &alone);
            std::fs::copy(&wasm, plugins.join("js_word_count.wasm")).expect("copy");
            languages.push(("JavaScript", "js_word_count", alone));
        }
        Err(unavailable) => eprintln!(
            "plugin_call: no JavaScript toolchain here, JavaScript left out: {}",
            unavailable.reason
        ),
    }
    if languages.is_empty() {
        eprintln!("plugin_call: no interpreter plugin could be built, nothing measured");
        return;
    }

    // Starts, per language: cold (a fresh cache each time), then warm (the same cache again).
    // First the host with the Rust default policy alone: an empty plugin directory.
    let none = work.path().join("none");
    std::fs::create_dir(&none).expect("an empty plugin directory");
    let rust = ("Rust default policy alone", "", none);
    let mut starts = Vec::new();
    for (language, _, alone) in std::iter::once(&rust).chain(&languages) {
        let mut cold = Vec::new();
        let mut warm = Vec::new();
        for _ in 0..STARTS {
            let cache = tempfile::tempdir().expect("cache directory");
            cold.push(host(alone, cache.path()).await.1);
            warm.push(host(alone, cache.path()).await.1);
        }
        starts.push((*language, summary(&mut cold).0, summary(&mut warm).0));
    }

    // Calls, interleaved, on one host whose code is compiled.
    let cache = tempfile::tempdir().expect("cache directory");
    let (host, _) = host(&plugins, cache.path()).await;
    let mut parts: Vec<(String, &str, &str)> = languages
        .iter()
        .map(|(language, tool, _)| (format!("{tool} ({language} plugin)"), *tool, TEXT_ARGUMENTS))
        .collect();
    parts.push((
        "process_list (Rust default policy, fake)".to_owned(),
        "process_list",
        "{}",
    ));
    let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(SAMPLES); parts.len()];
    for round in 0..WARMUP + SAMPLES {
        for k in 0..parts.len() {
            let index = (k + round) % parts.len();
            let (_, tool, arguments) = &parts[index];
            let took = call(&host, tool, arguments).await;
            if round >= WARMUP {
                samples[index].push(took);
            }
        }
    }
    host.shutdown().await;

    println!("plugin_call: {SAMPLES} calls of each after {WARMUP} warm-up rounds, interleaved");
    println!("  {:<44} {:>10} {:>10}", "call", "median ms", "p90 ms");
    let mut medians = Vec::new();
    for ((label, _, _), samples) in parts.iter().zip(samples.iter_mut()) {
        let (median, p90) = summary(samples);
        medians.push(median);
        println!("  {label:<44} {median:>10.2} {p90:>10.2}");
    }
    let floor = medians[medians.len() - 1];
    for ((language, _, _), median) in languages.iter().zip(&medians) {
        println!(
            "  the {language} plugin's call / the Rust policy's floor: {:.1}x",
            median / floor
        );
    }
    for (language, cold, warm) in starts {
        let with = match language {
            "Rust default policy alone" => "the Rust default policy alone".to_owned(),
            _ => format!("the {language} plugin"),
        };
        println!(
            "host start with {with} ({STARTS} each): compiled now {cold:.0} ms, cached {warm:.0} ms ({:.0}x)",
            ratio(
                Duration::from_secs_f64(cold / 1e3),
                Duration::from_secs_f64(warm / 1e3)
            )
        );
    }
}
