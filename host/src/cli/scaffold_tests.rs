use super::*;
use crate::cli::scenarios::{Runner, ScenarioFile};

/// Write a new policy crate `NAME` into `parent/NAME`, as `toolhost new-policy` does.
fn new_policy(name: &str, parent: &Path) -> Result<PathBuf, ScaffoldError> {
    PluginProject::new(name)?.write(parent)
}

fn text<'a>(policy: &'a PluginProject, path: &str) -> &'a str {
    let (_, bytes) = policy
        .files()
        .find(|(p, _)| *p == Path::new(path))
        .unwrap_or_else(|| panic!("no {path}"));
    std::str::from_utf8(bytes).expect("UTF-8")
}

fn sdk_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-tools/crates/toolhost-policy")
}

/// Every file of the SDK directory (but build output), relative to it.
fn sdk_files_on_disk(dir: &Path, base: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
    for entry in std::fs::read_dir(dir).expect("read the SDK directory") {
        let path = entry.expect("entry").path();
        if path.file_name().is_some_and(|n| n == "target") {
            continue;
        }
        if path.is_dir() {
            sdk_files_on_disk(&path, base, out);
        } else {
            let relative = path.strip_prefix(base).expect("under the SDK");
            let relative = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            out.insert(relative, std::fs::read(&path).expect("read an SDK file"));
        }
    }
}

#[test]
fn the_embedded_sdk_is_every_file_of_the_sdk_directory() {
    let mut on_disk = BTreeMap::new();
    sdk_files_on_disk(&sdk_dir(), &sdk_dir(), &mut on_disk);
    let embedded: BTreeMap<String, Vec<u8>> = SDK_FILES
        .iter()
        .map(|(path, bytes)| (path.to_string(), bytes.to_vec()))
        .collect();
    let missing: Vec<_> = on_disk
        .keys()
        .filter(|p| !embedded.contains_key(*p))
        .collect();
    assert!(missing.is_empty(), "not embedded: {missing:?}");
    assert_eq!(
        embedded.keys().collect::<Vec<_>>(),
        on_disk.keys().collect::<Vec<_>>()
    );
    for (path, bytes) in &on_disk {
        assert!(
            embedded[path] == *bytes,
            "{path} differs from its embedded copy"
        );
    }
    for needed in ["Cargo.toml", "README.md", "src/lib.rs", "wit/toolhost.wit"] {
        assert!(embedded.contains_key(needed), "{needed}");
    }
}

#[test]
fn the_crate_has_the_sdk_copy_and_its_own_files() {
    let policy = PluginProject::new("my-policy").expect("a good name");
    assert_eq!(policy.name(), "my-policy");
    assert_eq!(policy.component_file(), "my_policy.wasm");
    assert_eq!(policy.manifest_file(), "my_policy.toml");
    let paths: BTreeSet<&Path> = policy.files().map(|(p, _)| p).collect();
    for own in [
        "Cargo.toml",
        "Cargo.lock",
        "rust-toolchain.toml",
        "src/lib.rs",
        "my_policy.toml",
        "scenarios/basic.toml",
        "README.md",
        ".gitignore",
    ] {
        assert!(paths.contains(Path::new(own)), "{own}");
    }
    for (path, bytes) in SDK_FILES {
        let copy = Path::new(SDK).join(path);
        assert!(paths.contains(copy.as_path()), "{}", copy.display());
        if *path != "Cargo.toml" {
            let (_, copied) = policy.files().find(|(p, _)| *p == copy).expect("copied");
            assert_eq!(copied, *bytes, "{path}");
        }
    }
    // No placeholder is left in the crate's own files.
    for (path, bytes) in policy.files().filter(|(p, _)| !p.starts_with(SDK)) {
        let text = String::from_utf8_lossy(bytes);
        assert!(!text.contains("{{"), "{}", path.display());
    }
    assert!(text(&policy, "src/lib.rs").contains("..Policy::new(\"my-policy\")"));
}

#[test]
fn the_crate_manifest_is_a_cdylib_in_a_workspace_of_its_own() {
    let policy = PluginProject::new("my-policy").expect("a good name");
    let manifest: toml::Table = text(&policy, "Cargo.toml").parse().expect("TOML");
    assert_eq!(manifest["package"]["name"].as_str(), Some("my-policy"));
    assert_eq!(
        manifest["lib"]["crate-type"],
        toml::Value::Array(vec!["cdylib".into()])
    );
    assert_eq!(
        manifest["dependencies"][SDK]["path"].as_str(),
        Some(SDK),
        "the SDK copy, by path"
    );
    assert_eq!(
        manifest["workspace"],
        toml::Value::Table(toml::Table::new())
    );
    // The release profile of the bundled policies.
    let guests: toml::Table = GUEST_WORKSPACE.parse().expect("TOML");
    assert_eq!(manifest["profile"]["release"], guests["profile"]["release"]);
}

#[test]
fn the_sdk_copy_inherits_nothing() {
    let standalone = standalone_sdk_manifest().expect("written out");
    let table: toml::Table = standalone.parse().expect("TOML");
    assert!(
        !inherits(&toml::Value::Table(table.clone())),
        "{standalone}"
    );
    let guests: toml::Table = GUEST_WORKSPACE.parse().expect("TOML");
    let workspace = &guests["workspace"];
    assert_eq!(table["package"]["name"].as_str(), Some(SDK));
    assert_eq!(table["package"]["version"], workspace["package"]["version"]);
    assert_eq!(table["package"]["edition"], workspace["package"]["edition"]);
    assert_eq!(
        table["dependencies"]["wit-bindgen"],
        workspace["dependencies"]["wit-bindgen"]
    );
    // Comments and everything that was not inherited stay as they were.
    let original = SDK_FILES
        .iter()
        .find(|(path, _)| *path == "Cargo.toml")
        .map(|(_, bytes)| String::from_utf8_lossy(bytes).into_owned())
        .expect("the SDK manifest");
    for line in original.lines().filter(|l| !l.contains("workspace")) {
        assert!(standalone.contains(line), "lost: {line}");
    }
}

#[test]
fn inherited_dependencies_merge_their_own_features() {
    // The rewriting handles the inline-table form too.
    let line = "serde = { workspace = true, features = [\"rc\"], optional = true }";
    let parsed: toml::Table = line.parse().expect("TOML");
    assert!(inherits(&toml::Value::Table(parsed)));
}

#[test]
fn the_lock_pins_the_sdk_and_its_dependencies_as_the_guests_do() {
    let sdk_lock = sdk_lock().expect("the guest lock");
    let lock: Lock = toml::from_str(&lock_file(&sdk_lock, "my-policy")).expect("a lock");
    let guests: Lock = toml::from_str(GUEST_LOCK).expect("the guest lock");
    let names: BTreeSet<&str> = lock.packages.iter().map(|p| p.name.as_str()).collect();
    for needed in ["my-policy", SDK, "wit-bindgen", "serde_json", "humantime"] {
        assert!(names.contains(needed), "{needed}");
    }
    // Nothing of the other guests.
    for other in ["default-policy", "guarded-policy", "hostile"] {
        assert!(!names.contains(other), "{other}");
    }
    let root = lock
        .packages
        .iter()
        .find(|p| p.name == "my-policy")
        .expect("the crate itself");
    assert_eq!(root.dependencies, [SDK]);
    for package in lock.packages.iter().filter(|p| p.name != "my-policy") {
        let pinned = guests
            .packages
            .iter()
            .find(|g| g.name == package.name && g.version == package.version)
            .unwrap_or_else(|| {
                panic!(
                    "{} {} is not in the guest lock",
                    package.name, package.version
                )
            });
        assert_eq!(pinned.checksum, package.checksum, "{}", package.name);
        assert_eq!(pinned.source, package.source, "{}", package.name);
    }
    // Sorted as cargo sorts it.
    let order: Vec<_> = lock
        .packages
        .iter()
        .map(|p| (&p.name, &p.version))
        .collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted);
}

#[test]
fn the_toolchain_is_the_repository_s_with_the_wasm_target() {
    let table: toml::Table = toolchain()
        .expect("a toolchain file")
        .parse()
        .expect("TOML");
    let ours: toml::Table = TOOLCHAIN.parse().expect("TOML");
    assert_eq!(table["toolchain"]["channel"], ours["toolchain"]["channel"]);
    assert_eq!(
        table["toolchain"]["targets"],
        toml::Value::Array(vec![TARGET.into()])
    );
}

#[tokio::test]
async fn the_manifest_grants_process_and_changes_no_setting() {
    let policy = PluginProject::new("my-policy").expect("a good name");
    let manifest: toml::Table = text(&policy, "my_policy.toml").parse().expect("TOML");
    assert_eq!(manifest["grants"]["process"].as_bool(), Some(true));
    assert_eq!(
        manifest["config"],
        toml::Value::Table(toml::Table::new()),
        "no setting is changed"
    );
    // The host loads the manifest, and its scenarios pass on a component with the
    // standard tools (the bundled default policy's) under it.
    let dir = tempfile::tempdir().expect("tempdir");
    let component = dir.path().join("my_policy.wasm");
    std::fs::write(&component, toolhost::bundled::DEFAULT.bytes).expect("a component");
    let manifest_path = dir.path().join("my_policy.toml");
    std::fs::write(&manifest_path, text(&policy, "my_policy.toml")).expect("a manifest");
    let runner = Runner::new(&component, Some(&manifest_path), None).expect("a runner");
    let scenarios =
        ScenarioFile::parse(text(&policy, "scenarios/basic.toml")).expect("the scenarios parse");
    assert!(!scenarios.scenarios.is_empty());
    for outcome in runner.run_file(&scenarios).await {
        assert!(outcome.passed(), "{}: {:?}", outcome.name, outcome.failures);
    }
    // Its commented [config] keys are the policy settings, each shown once.
    let manifest_text = text(&policy, "my_policy.toml");
    let config = &manifest_text[manifest_text
        .find("\n[config]\n")
        .expect("a [config] section")..];
    for key in [
        "default_timeout",
        "max_timeout",
        "output_cap_bytes",
        "on_timeout",
        "list_limit",
    ] {
        assert_eq!(config.matches(&format!("# {key} = ")).count(), 1, "{key}");
    }
}

#[test]
fn bad_names_are_refused_with_the_reason() {
    for (name, reason) in [
        ("", "empty"),
        ("My-Policy", "lowercase letter"),
        ("1policy", "lowercase letter"),
        ("my policy", "lowercase letters, digits"),
        ("../escape", "lowercase letter"),
        ("a/b", "lowercase letters, digits"),
        ("fn", "keyword"),
        ("test", "reserve"),
        ("serde_json", "a crate the policy is built from"),
        ("toolhost_policy", "a crate the policy is built from"),
        ("wit-bindgen", "a crate the policy is built from"),
    ] {
        let error = PluginProject::new(name).expect_err(name);
        assert!(
            matches!(error, ScaffoldError::Name { .. }) && error.to_string().contains(reason),
            "{name:?}: {error}"
        );
    }
    let long = "p".repeat(65);
    assert!(PluginProject::new(&long).is_err());
    for good in ["p", "my-policy", "no_push2", "a-b_c"] {
        PluginProject::new(good).unwrap_or_else(|e| panic!("{good}: {e}"));
    }
}

#[test]
fn writing_refuses_an_existing_directory_and_leaves_it_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = new_policy("no-push", dir.path()).expect("written");
    assert_eq!(root, dir.path().join("no-push"));
    for (path, bytes) in PluginProject::new("no-push").expect("name").files() {
        assert_eq!(std::fs::read(root.join(path)).expect("written"), bytes);
    }
    std::fs::write(root.join("src/lib.rs"), "// mine").expect("edit");
    let error = new_policy("no-push", dir.path()).expect_err("exists");
    assert!(matches!(error, ScaffoldError::Exists { .. }), "{error}");
    assert!(error.to_string().contains("already exists"), "{error}");
    assert_eq!(
        std::fs::read_to_string(root.join("src/lib.rs")).expect("kept"),
        "// mine"
    );
    // A file by that name is not replaced either.
    std::fs::write(dir.path().join("taken"), "x").expect("a file");
    assert!(matches!(
        new_policy("taken", dir.path()),
        Err(ScaffoldError::Exists { .. })
    ));
    // A missing parent directory is created.
    let nested = dir.path().join("a/b");
    assert!(
        new_policy("p", &nested)
            .expect("written")
            .join("Cargo.toml")
            .is_file()
    );
}

#[test]
fn an_unusable_directory_is_an_error_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    // `parent` is a file: nothing can be written under it.
    let file = dir.path().join("file");
    std::fs::write(&file, "x").expect("a file");
    let error = new_policy("p", &file).expect_err("not a directory");
    assert!(matches!(error, ScaffoldError::Write { .. }), "{error}");
    assert!(error.to_string().contains("file"), "{error}");
}

#[test]
fn next_steps_name_the_component_and_manifest() {
    let steps = PluginProject::new("my-policy")
        .expect("name")
        .next_steps(Path::new("projects/my-policy"));
    assert!(steps.contains("cd projects/my-policy\n"), "{steps}");
    assert!(steps.contains("docs/writing-a-policy.md"), "{steps}");
    assert!(
        steps.contains(
            "toolhost test target/wasm32-wasip2/release/my_policy.wasm scenarios/ \
             --manifest my_policy.toml"
        ),
        "{steps}"
    );
}

/// A Python or JavaScript project of either world: its source names its tool and world, the
/// WIT is the one this binary serves, the toolchain is the examples' pin, and the manifest
/// grants the process capability only to `shell-tools`.
#[test]
fn python_and_js_projects_pin_their_toolchain_and_carry_the_contract() {
    let wit = SDK_FILES
        .iter()
        .find(|(path, _)| *path == "wit/toolhost.wit")
        .map(|(_, bytes)| *bytes)
        .expect("the SDK's WIT");
    for (lang, world, source, tool) in [
        (Lang::Python, World::ShellTools, "app.py", "my_tool_run"),
        (Lang::Python, World::Tools, "app.py", "my_tool_reverse"),
        (Lang::Js, World::ShellTools, "app.js", "my_tool_run"),
        (Lang::Js, World::Tools, "app.js", "my_tool_reverse"),
    ] {
        let project = PluginProject::create("my-tool", lang, world).expect("a good name");
        let what = format!("{lang:?} {world:?}");
        let file = |path: &str| {
            project
                .files()
                .find(|(p, _)| *p == Path::new(path))
                .map(|(_, bytes)| String::from_utf8_lossy(bytes).into_owned())
                .unwrap_or_else(|| panic!("{what}: no {path}"))
        };
        assert!(file(source).contains(&format!("\"{tool}\"")), "{what}");
        assert!(
            !file(source).contains("{{"),
            "{what}: a placeholder is left"
        );
        assert_eq!(file("wit/toolhost.wit").as_bytes(), wit, "{what}");
        let uses_process = file(source).contains("from wit_world.imports import process")
            || file(source).contains("from \"toolhost:plugin/process@");
        assert_eq!(uses_process, world == World::ShellTools, "{what}");
        let manifest: toml::Value = toml::from_str(&file("my_tool.toml")).expect("manifest");
        assert_eq!(
            manifest["grants"]["process"].as_bool(),
            Some(world == World::ShellTools),
            "{what}"
        );
        assert!(file("scenarios/basic.toml").contains(&format!("tool = \"{tool}\"")));
        assert!(file("README.md").contains("toolhost test my_tool.wasm scenarios/"));
        match lang {
            Lang::Python => {
                assert!(
                    file("requirements.txt").contains("componentize-py=="),
                    "{what}"
                );
                assert!(
                    file("README.md").contains(&format!("-w {} componentize", world.wit_name()))
                );
            }
            _ => {
                let package: serde_json::Value =
                    serde_json::from_str(&file("package.json")).expect("package.json");
                let lock: serde_json::Value =
                    serde_json::from_str(&file("package-lock.json")).expect("lock");
                assert_eq!(package["name"], "toolhost-my-tool");
                assert_eq!(lock["name"], "toolhost-my-tool");
                assert_eq!(
                    package["devDependencies"], lock["packages"][""]["devDependencies"],
                    "package.json pins what the lock holds"
                );
                assert!(
                    file("build.mjs").contains(&format!("worldName: \"{}\"", world.wit_name()))
                );
            }
        }
    }
}

#[test]
fn the_rust_scaffold_refuses_the_tools_world_and_names_the_way_out() {
    let error = PluginProject::create("my-tool", Lang::Rust, World::Tools)
        .expect_err("the Rust crate is a shell-tools policy");
    assert!(error.to_string().contains("--lang python"), "{error}");
    for bad in ["My-Tool", "1tool", "", "a b"] {
        assert!(
            PluginProject::create(bad, Lang::Python, World::Tools).is_err(),
            "{bad}"
        );
    }
}

/// The checked-in `shell-tools` examples (`guest-tools/python/run_command`,
/// `guest-tools/js/run_command`) are what `toolhost new-policy run_command --lang L --world
/// shell-tools` writes now, file for file: `tests/plugin_languages/scaffolded.rs` builds that
/// project with its toolchain, runs its scenarios and a real command through it. Rewrite them
/// with that command when a template changes.
#[test]
fn the_checked_in_shell_tools_examples_are_the_scaffolds_output() {
    for (lang, dir) in [
        (Lang::Python, "python/run_command"),
        (Lang::Js, "js/run_command"),
    ] {
        let example = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../guest-tools")
            .join(dir);
        let mut on_disk = BTreeMap::new();
        sdk_files_on_disk(&example, &example, &mut on_disk);
        // Build output the project's .gitignore leaves out.
        on_disk.retain(|path, _| {
            !(path.ends_with(".wasm")
                || path.starts_with(".venv/")
                || path.starts_with("node_modules/")
                || path.contains("__pycache__/"))
        });
        let project =
            PluginProject::create("run_command", lang, World::ShellTools).expect("a good name");
        let written: BTreeMap<String, Vec<u8>> = project
            .files()
            .map(|(path, bytes)| (path.to_string_lossy().into_owned(), bytes.to_vec()))
            .collect();
        assert_eq!(
            on_disk.keys().collect::<Vec<_>>(),
            written.keys().collect::<Vec<_>>(),
            "the files of guest-tools/{dir}"
        );
        for (path, bytes) in &written {
            assert!(
                on_disk[path] == *bytes,
                "guest-tools/{dir}/{path} differs from the scaffold's: rewrite the example with \
                 `toolhost new-policy run_command --lang ... --world shell-tools`"
            );
        }
    }
}

/// A Python or JavaScript project's next steps point to its language's guide.
#[test]
fn next_steps_of_script_projects_name_their_language_s_guide() {
    for (lang, guide) in [
        (Lang::Python, "docs/writing-a-plugin-in-python.md"),
        (Lang::Js, "docs/writing-a-plugin-in-javascript.md"),
    ] {
        let steps = PluginProject::create("tool", lang, World::Tools)
            .expect("a project")
            .next_steps(Path::new("here/tool"));
        assert!(steps.contains("cd here/tool\n"), "{steps}");
        assert!(steps.contains(guide), "{lang:?}: {steps}");
    }
}

/// A project path with a space or a quote is one shell word in the next steps.
#[test]
fn next_steps_quote_a_path_a_shell_would_split() {
    let project = PluginProject::new("my-policy").expect("name");
    let steps = project.next_steps(Path::new("my projects/it's/my-policy"));
    assert!(
        steps.contains("cd 'my projects/it'\\''s/my-policy'\n"),
        "{steps}"
    );
    let steps = project.next_steps(Path::new("./my-policy"));
    assert!(steps.contains("cd ./my-policy\n"), "{steps}");
}
