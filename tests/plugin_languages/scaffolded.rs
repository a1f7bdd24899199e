//! Projects written by `toolhost new-policy NAME --lang python|js --world shell-tools|tools`
//! build, pass their own scenarios under `toolhost test`, and a `shell-tools` one runs a real
//! command in a host.
//!
//! The `shell-tools` project of each language is built by running its README's build block
//! as written: it installs the pinned toolchain from PyPI or npm into the project. The scaffold
//! pins the toolchain versions of the examples (`guest-tools/python`,
//! `guest-tools/js/word_count`), so the `tools` project is built with the toolchain the
//! examples' tests install. Where the registry cannot be reached, the README's build is
//! skipped loudly and the installed toolchain builds the project instead.

use super::toolchains::{self, printed, run};
use super::{
    SCENARIOS_LIMIT, announce_skip, build, forget_earlier_builds, skip_requested,
    toolhost_test_passes,
};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use toolhost_e2e::{cache_env, json, toolhost_bin};

/// `toolhost new-policy NAME --lang LANG --world WORLD --dir PARENT`; the project's directory.
fn new_policy(parent: &Path, name: &str, lang: &str, world: &str) -> PathBuf {
    let output = Command::new(toolhost_bin())
        .args([
            "new-policy",
            name,
            "--lang",
            lang,
            "--world",
            world,
            "--dir",
        ])
        .arg(parent)
        .output()
        .expect("run toolhost new-policy");
    assert!(
        output.status.success(),
        "toolhost new-policy {name} --lang {lang} --world {world} failed:\n{}",
        printed(&output)
    );
    parent.join(name)
}

/// `toolhost test LIB.wasm scenarios/ --manifest LIB.toml` in `project` passes every scenario.
fn own_scenarios_pass(project: &Path, lib: &str) {
    toolhost_test_passes(
        Command::new(toolhost_bin())
            .arg("test")
            .arg(format!("{lib}.wasm"))
            .arg("scenarios/")
            .arg("--manifest")
            .arg(format!("{lib}.toml"))
            .current_dir(project),
        lib,
    );
}

/// The `shell-tools` project's tool runs a real command in `toolhost --policy none --plugins`.
fn runs_a_command(project: &Path, lib: &str) {
    let plugins = project.join("plugins");
    std::fs::create_dir(&plugins).expect("create the plugin directory");
    for file in [format!("{lib}.wasm"), format!("{lib}.toml")] {
        std::fs::copy(project.join(&file), plugins.join(&file)).expect("copy into the plugins");
    }
    let workspace = tempfile::tempdir().expect("a workspace");
    let (key, value) = cache_env();
    let output = run(
        Command::new(toolhost_bin())
            .args(["--policy", "none", "--plugins"])
            .arg(&plugins)
            .args([
                "call",
                &format!("{lib}_run"),
                r#"{"command":"echo made by new-policy; exit 3"}"#,
            ])
            .current_dir(workspace.path())
            .env(key, value)
            .env("TOOLHOST_LOG", "error"),
        "toolhost call",
        SCENARIOS_LIMIT,
    )
    .expect("run toolhost call");
    let result: Value = json(&String::from_utf8_lossy(&output.stdout));
    assert_eq!(result["exit_code"], 3, "{}", printed(&output));
    assert_eq!(
        result["output"],
        "made by new-policy\n",
        "{}",
        printed(&output)
    );
    assert_eq!(result["timed_out"], false, "{}", printed(&output));
}

/// How long the README's build of a new project may take: it installs the toolchain from the
/// registry into the project (`pip install`, `npm ci`), from the installer's cache after the
/// first time.
const README_BUILD_LIMIT: std::time::Duration = std::time::Duration::from_secs(600);

/// The `sh` block under the heading `## {heading}` of the project's README.
fn readme_block(project: &Path, heading: &str) -> String {
    let readme = std::fs::read_to_string(project.join("README.md")).expect("the README");
    let section = readme
        .split_once(&format!("\n## {heading}\n"))
        .unwrap_or_else(|| panic!("the README has no `## {heading}`:\n{readme}"))
        .1;
    let block = section
        .split_once("```sh\n")
        .and_then(|(_, rest)| rest.split_once("\n```"))
        .unwrap_or_else(|| panic!("`## {heading}` has no sh block:\n{readme}"))
        .0;
    block.to_owned()
}

/// Run the README's `## Build it` block of `project` as written (`sh -e`), which installs the
/// pinned toolchain from the registry; `Err` when the registry cannot be reached.
fn readme_build(project: &Path, lib: &str) -> Result<(), toolchains::Unavailable> {
    let script = readme_block(project, "Build it");
    let output = run(
        Command::new("sh")
            .args(["-e", "-c", &script])
            .current_dir(project),
        "the README's build",
        README_BUILD_LIMIT,
    )
    .expect("run the README's build");
    toolchains::installed(output, "the README's build", "the package registry")?;
    assert!(
        project.join(format!("{lib}.wasm")).is_file(),
        "the README's build wrote no {lib}.wasm"
    );
    Ok(())
}

/// For each world: `toolhost new-policy` writes a project in `lang`, `build_it(project, world,
/// lib)` builds it, its own scenarios pass, and a `shell-tools` project runs a command.
fn each_world(lang: &str, build_it: impl Fn(&Path, &str, &str)) {
    let parent = tempfile::tempdir().expect("a temporary directory");
    for world in ["shell-tools", "tools"] {
        let name = format!("new-{lang}-{world}");
        let lib = name.replace('-', "_");
        let project = new_policy(parent.path(), &name, lang, world);
        let tool = match world {
            "tools" => format!("{lib}_reverse"),
            _ => format!("{lib}_run"),
        };
        forget_earlier_builds(&tool);
        build_it(&project, world, &lib);
        own_scenarios_pass(&project, &lib);
        if world == "shell-tools" {
            runs_a_command(&project, &lib);
        }
    }
}

#[test]
fn python_projects_from_new_policy_build_and_pass_their_scenarios() {
    let test = "python_projects_from_new_policy_build_and_pass_their_scenarios";
    if skip_requested(test) {
        return;
    }
    let toolchain = match toolchains::python() {
        Ok(toolchain) => toolchain,
        Err(unavailable) => return announce_skip(test, &unavailable),
    };
    each_world("python", |project, world, lib| {
        // The shell-tools project is built as its README says, toolchain install included.
        if world == "shell-tools" {
            if let Err(unavailable) = readme_build(project, lib) {
                announce_skip(test, &unavailable);
            } else {
                return;
            }
        }
        // The README's build, with the installed componentize-py for `.venv/bin/componentize-py`.
        build(
            Command::new(&toolchain.componentize_py)
                .args(["-d", "wit", "-w", world, "componentize", "app", "-o"])
                .arg(format!("{lib}.wasm"))
                .current_dir(project),
            "componentize-py componentize (a new project)",
            &project.join(format!("{lib}.wasm")),
        );
    });
}

#[test]
fn js_projects_from_new_policy_build_and_pass_their_scenarios() {
    let test = "js_projects_from_new_policy_build_and_pass_their_scenarios";
    if skip_requested(test) {
        return;
    }
    let example = toolhost_e2e::repo_root().join("guest-tools/js/word_count");
    let toolchain = match toolchains::javascript(&example) {
        Ok(toolchain) => toolchain,
        Err(unavailable) => return announce_skip(test, &unavailable),
    };
    let packages = |text: &str| {
        json(text)["packages"].as_object().map(|packages| {
            packages
                .iter()
                .filter(|(path, _)| !path.is_empty())
                .map(|(path, package)| (path.clone(), package.clone()))
                .collect::<Vec<_>>()
        })
    };
    let example_lock =
        std::fs::read_to_string(example.join("package-lock.json")).expect("example lock");
    each_world("js", |project, world, lib| {
        let lock = std::fs::read_to_string(project.join("package-lock.json")).expect("lock");
        assert_eq!(
            packages(&lock),
            packages(&example_lock),
            "the project pins other packages"
        );
        // The shell-tools project is built as its README says (`npm ci`, `npm run build`).
        if world == "shell-tools" {
            if let Err(unavailable) = readme_build(project, lib) {
                announce_skip(test, &unavailable);
            } else {
                return;
            }
        }
        // The project pins the example's lock: its installed packages stand for `npm ci`.
        let _ = std::fs::remove_dir_all(project.join("node_modules"));
        std::os::unix::fs::symlink(
            toolchain.dir.join("node_modules"),
            project.join("node_modules"),
        )
        .expect("link the installed packages");
        build(
            Command::new("node").arg("build.mjs").current_dir(project),
            "node build.mjs (a new project)",
            &project.join(format!("{lib}.wasm")),
        );
    });
}
