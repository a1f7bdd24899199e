//! Projects written by `toolhost new-policy NAME --lang python|js --world shell-tools|tools`,
//! built as their README says with the pinned toolchains, pass their own scenarios under
//! `toolhost test`; a `shell-tools` one also runs a real command in a host.
//!
//! The scaffold pins the toolchain versions of the examples (`guest-tools/python`,
//! `guest-tools/js/word_count`), so these tests build with the toolchains the examples'
//! tests install.

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
    each_world("js", |project, _world, lib| {
        // The project pins the example's lock: its installed packages stand for `npm ci`.
        let lock = std::fs::read_to_string(project.join("package-lock.json")).expect("lock");
        assert_eq!(
            packages(&lock),
            packages(&example_lock),
            "the project pins other packages"
        );
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
