//! `docs/writing-a-policy.md` is compiled and run. Its policy crate is the fixture
//! `guest-tools/fixtures/my-policy` (built with the other guests by the host's build script),
//! its manifest is that crate's `my_policy.toml`, and its test is [`reports_failing_tests`]
//! below. Here the guide's code blocks are checked against those files, and the policy runs in
//! the real host through the CLI with its manifest.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use toolhost_e2e::{json, repo_root, target_dir, toolhost_bin};

/// The guide's policy component, built beside the other fixtures.
fn my_policy_wasm() -> PathBuf {
    Path::new(toolhost::bundled::fixtures::HOSTILE).with_file_name("my_policy.wasm")
}

/// The guide's manifest, with its example `workdir_root` replaced by `root`.
fn my_policy_manifest(root: &Path) -> String {
    let path = repo_root().join("guest-tools/fixtures/my-policy/my_policy.toml");
    let text = std::fs::read_to_string(&path).expect("read the guide's manifest");
    let example = "\"/home/me/project\"";
    assert!(
        text.contains(example),
        "{} no longer names {example}",
        path.display()
    );
    text.replace(example, &format!("{:?}", root.display().to_string()))
}

/// A plugin directory holding the guide's component and manifest (its `workdir_root` is the
/// directory itself), as the guide's test assumes.
fn plugins_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = target_dir().join("guide-plugins");
        std::fs::create_dir_all(&dir).expect("create the plugin dir");
        let dir = dir.canonicalize().expect("canonical plugin dir");
        std::fs::copy(my_policy_wasm(), dir.join("my_policy.wasm")).expect("copy the component");
        std::fs::write(dir.join("my_policy.toml"), my_policy_manifest(&dir))
            .expect("write the manifest");
        dir
    })
}

// guide:begin fake-test
use toolhost::testing::{FakeProcesses, Script};

#[tokio::test]
async fn reports_failing_tests() {
    let fake = FakeProcesses::new();
    fake.push(Script::exits(101).output("test result: FAILED. 1 passed; 1 failed\n"));
    let host = toolhost::ToolHost::builder()
        .bundled_policy(None)
        .plugin_dir(plugins_dir())
        .process_backend(fake.clone())
        .build()
        .await
        .expect("the policy loads");
    let result = host
        .call("test", "run_tests", "{}")
        .await
        .expect("a result");
    assert!(result.contains(r#""passed":false"#), "{result}");
    assert!(result.contains("1 failed"), "{result}");
    assert_eq!(fake.starts()[0].request.command, "cargo test 2>&1");
}
// guide:end fake-test

/// Lines strictly between the lines ending in `guide:begin NAME` and `guide:end NAME`.
fn region(text: &str, name: &str) -> Option<String> {
    let mut lines = text.lines();
    lines.find(|l| l.trim_end().ends_with(&format!("guide:begin {name}")))?;
    let mut body = String::new();
    for line in lines {
        if line.trim_end().ends_with(&format!("guide:end {name}")) {
            return Some(body);
        }
        body.push_str(line);
        body.push('\n');
    }
    None
}

/// Every code block of the guide, except shell commands, is preceded by a line
/// `<!-- source: PATH -->` or `<!-- source: PATH#REGION -->` and is exactly that file or
/// region, so the guide cannot drift from the code that is built and tested.
#[test]
fn the_guides_code_is_the_tested_code() {
    let guide_path = repo_root().join("docs/writing-a-policy.md");
    let guide = std::fs::read_to_string(&guide_path).expect("read the guide");
    let lines: Vec<&str> = guide.lines().collect();
    let mut checked = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(lang) = lines[i].strip_prefix("```") else {
            i += 1;
            continue;
        };
        let end = (i + 1..lines.len())
            .find(|&j| lines[j] == "```")
            .unwrap_or_else(|| panic!("the code block at line {} is not closed", i + 1));
        let body: String = lines[i + 1..end].iter().map(|l| format!("{l}\n")).collect();
        let source = i
            .checked_sub(1)
            .and_then(|p| lines[p].strip_prefix("<!-- source: "))
            .and_then(|s| s.strip_suffix(" -->"));
        match source {
            Some(source) => {
                let (path, name) = match source.split_once('#') {
                    Some((path, name)) => (path, Some(name)),
                    None => (source, None),
                };
                let text = std::fs::read_to_string(repo_root().join(path))
                    .unwrap_or_else(|e| panic!("line {}: {path}: {e}", i + 1));
                let expected = match name {
                    Some(name) => {
                        region(&text, name).unwrap_or_else(|| panic!("{path} has no region {name}"))
                    }
                    None => text,
                };
                if body != expected {
                    let line = body
                        .lines()
                        .zip(expected.lines())
                        .position(|(a, b)| a != b)
                        .map_or_else(|| "the end".to_string(), |n| format!("line {}", n + 1));
                    panic!(
                        "the code block at {}:{} differs from {source} (from {line} on); \
                         copy the file's text into the guide:\n{expected}",
                        guide_path.display(),
                        i + 2
                    );
                }
                checked.push(source.to_string());
            }
            None => assert_eq!(
                lang,
                "sh",
                "the {lang} code block at line {} has no `<!-- source: PATH -->` line",
                i + 1
            ),
        }
        i = end + 1;
    }
    assert_eq!(
        checked,
        [
            "guest-tools/fixtures/my-policy/Cargo.toml#cargo-toml",
            "guest-tools/fixtures/my-policy/src/lib.rs",
            "tests/guide.rs#fake-test",
            "guest-tools/fixtures/my-policy/my_policy.toml",
        ]
    );
}

/// The guide's policy in the real host, loaded with the guide's manifest by the CLI: it runs
/// `cargo test` (a stand-in first on `PATH`, which the manifest lets processes inherit) in the
/// granted directory and reports what it printed and whether it passed.
#[test]
fn the_guides_policy_runs_the_tests_in_the_real_host() {
    // Where the commands see them (they have a private /tmp).
    let project = toolhost_e2e::shared_tempdir();
    let project_dir = project.path().canonicalize().expect("canonical");
    let bin = toolhost_e2e::shared_tempdir();
    let plugins = tempfile::tempdir().expect("plugins dir");
    std::fs::copy(my_policy_wasm(), plugins.path().join("my_policy.wasm")).expect("copy");
    std::fs::write(
        plugins.path().join("my_policy.toml"),
        my_policy_manifest(&project_dir),
    )
    .expect("write the manifest");
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );

    // The stand-in exits with the code in the file `code` beside it.
    let cargo = bin.path().join("cargo");
    std::fs::write(
        &cargo,
        "#!/bin/sh\necho \"cargo $* in $(pwd), color $CARGO_TERM_COLOR\"\n\
         echo 'to stderr' >&2\nexit \"$(cat \"$(dirname \"$0\")/code\")\"\n",
    )
    .expect("write the stand-in");
    let mut mode = std::fs::metadata(&cargo).expect("stat").permissions();
    mode.set_mode(0o755);
    std::fs::set_permissions(&cargo, mode).expect("chmod");

    for (code, passed) in [(0, true), (101, false)] {
        std::fs::write(bin.path().join("code"), code.to_string()).expect("write the code");
        let out = Command::new(toolhost_bin())
            .args(toolhost_e2e::shared_writable())
            .args(["--policy", "none", "--plugins"])
            .arg(plugins.path())
            .args(["call", "run_tests", "{}"])
            .env("PATH", &path)
            .env("TOOLHOST_LOG", "warn")
            .output()
            .expect("run toolhost");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let result = json(&String::from_utf8_lossy(&out.stdout));
        assert_eq!(result["passed"], passed, "{result}");
        assert_eq!(
            result["output"],
            format!(
                "cargo test in {}, color never\nto stderr\n",
                project_dir.display()
            ),
            "{result}"
        );
    }
}
