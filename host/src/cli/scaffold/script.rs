//! `toolhost new-policy NAME --lang python|js`: a new plugin project in Python or JavaScript,
//! ready to build with pinned toolchains from the package registries, test and install.
//!
//! The project holds:
//! - the tool's source (`app.py` or `app.js`), with one tool named `LIB_run` (world
//!   `shell-tools`: it runs a command through the process capability) or `LIB_reverse` (world
//!   `tools`: no process access);
//! - a copy of the contract, `wit/toolhost.wit`, of the version this binary serves;
//! - the toolchain, pinned: `requirements.txt` (componentize-py) or `package.json` with its
//!   `package-lock.json` and `build.mjs` (componentize-js), at the versions this repository's
//!   own examples (`guest-tools/python`, `guest-tools/js`) are built and tested with;
//! - the manifest `LIB.toml` (granting `process` for `shell-tools`), scenarios for
//!   `toolhost test` that pass, a README and a `.gitignore`.

use super::{Lang, PluginProject, SDK_FILES, ScaffoldError, World};
use std::path::PathBuf;

/// The Python examples' pinned requirements (`guest-tools/python/requirements.txt`).
const PY_REQUIREMENTS: &str = include_str!(env!("TOOLHOST_SCAFFOLD_PY_REQUIREMENTS"));
/// The JavaScript example's lock file (`guest-tools/js/word_count/package-lock.json`).
const JS_LOCK: &str = include_str!(env!("TOOLHOST_SCAFFOLD_JS_LOCK"));
/// The package name in [`JS_LOCK`], replaced by the project's.
const JS_LOCK_NAME: &str = "toolhost-js-word-count";

/// Templates; `{{name}}`, `{{lib_name}}`, `{{tool}}`, `{{world}}`, `{{build}}`,
/// `{{component}}`, `{{language}}`, `{{toolhost_version}}` and `{{wit_version}}` are replaced.
const PY_SHELL_TOOLS: &str = include_str!("python/shell_tools.py.in");
const PY_TOOLS: &str = include_str!("python/tools.py.in");
const JS_SHELL_TOOLS: &str = include_str!("js/shell_tools.js.in");
const JS_TOOLS: &str = include_str!("js/tools.js.in");
const JS_BUILD: &str = include_str!("js/build.mjs.in");
const README: &str = include_str!("script/README.md.in");
const SHELL_TOOLS_SCENARIOS: &str = include_str!("script/shell_tools.toml.in");
const TOOLS_SCENARIOS: &str = include_str!("script/tools.toml.in");
const SHELL_TOOLS_MANIFEST: &str = include_str!("script/shell_tools_manifest.toml.in");
const TOOLS_MANIFEST: &str = include_str!("script/tools_manifest.toml.in");

/// The files of a new Python or JavaScript project called `name` (checked by the caller),
/// targeting `world`. `lang` is not [`Lang::Rust`].
pub fn project(name: &str, lang: Lang, world: World) -> Result<PluginProject, ScaffoldError> {
    let lib_name = name.replace('-', "_");
    let tool = match world {
        World::ShellTools => format!("{lib_name}_run"),
        World::Tools => format!("{lib_name}_reverse"),
    };
    let component = format!("{lib_name}.wasm");
    let build = match lang {
        Lang::Python => format!(
            "python3 -m venv .venv\n\
             .venv/bin/pip install -r requirements.txt\n\
             .venv/bin/componentize-py -d wit -w {} componentize app -o {component}",
            world.wit_name()
        ),
        _ => "npm ci\nnpm run build".to_owned(),
    };
    let wit = SDK_FILES
        .iter()
        .find(|(path, _)| *path == "wit/toolhost.wit")
        .map(|(_, bytes)| bytes.to_vec())
        .ok_or_else(|| ScaffoldError::Embedded {
            what: "wit/toolhost.wit",
            message: "not among the SDK's files".to_owned(),
        })?;
    // The copied WIT is the one this host serves as its newest version.
    let wit_version = toolhost::WIT_VERSIONS.first().copied().unwrap_or_default();
    let fill = |template: &str| {
        template
            .replace("{{name}}", name)
            .replace("{{lib_name}}", &lib_name)
            .replace("{{tool}}", &tool)
            .replace("{{world}}", world.wit_name())
            .replace("{{build}}", &build)
            .replace("{{component}}", &component)
            .replace("{{language}}", language_name(lang))
            .replace("{{toolhost_version}}", env!("CARGO_PKG_VERSION"))
            .replace("{{wit_version}}", wit_version)
            .into_bytes()
    };
    let (scenarios, manifest) = match world {
        World::ShellTools => (SHELL_TOOLS_SCENARIOS, SHELL_TOOLS_MANIFEST),
        World::Tools => (TOOLS_SCENARIOS, TOOLS_MANIFEST),
    };
    let mut files: Vec<(PathBuf, Vec<u8>)> = vec![
        ("wit/toolhost.wit".into(), wit),
        (format!("{lib_name}.toml").into(), fill(manifest)),
        ("scenarios/basic.toml".into(), fill(scenarios)),
        ("README.md".into(), fill(README)),
    ];
    match lang {
        Lang::Python => {
            let source = match world {
                World::ShellTools => PY_SHELL_TOOLS,
                World::Tools => PY_TOOLS,
            };
            files.push(("app.py".into(), fill(source)));
            files.push(("requirements.txt".into(), python_requirements()?));
            files.push((
                ".gitignore".into(),
                b".venv/\n__pycache__/\n*.wasm\n".to_vec(),
            ));
        }
        Lang::Js | Lang::Rust => {
            let source = match world {
                World::ShellTools => JS_SHELL_TOOLS,
                World::Tools => JS_TOOLS,
            };
            let package = format!("toolhost-{name}");
            files.push(("app.js".into(), fill(source)));
            files.push(("build.mjs".into(), fill(JS_BUILD)));
            files.push(("package.json".into(), package_json(&package, name)?));
            files.push((
                "package-lock.json".into(),
                JS_LOCK
                    .replace(
                        &format!("\"name\": \"{JS_LOCK_NAME}\""),
                        &format!("\"name\": \"{package}\""),
                    )
                    .into_bytes(),
            ));
            files.push((".gitignore".into(), b"node_modules/\n*.wasm\n".to_vec()));
        }
    }
    let guide = match lang {
        Lang::Python => "docs/writing-a-plugin-in-python.md",
        Lang::Js => "docs/writing-a-plugin-in-javascript.md",
        Lang::Rust => "docs/writing-a-policy.md",
    };
    Ok(PluginProject::script(name, &lib_name, files, build, guide))
}

/// How the README names `lang`.
fn language_name(lang: Lang) -> &'static str {
    match lang {
        Lang::Rust => "Rust",
        Lang::Python => "Python",
        Lang::Js => "JavaScript",
    }
}

/// The requirements file: the examples' pin, with a comment saying where it comes from.
fn python_requirements() -> Result<Vec<u8>, ScaffoldError> {
    let pins: Vec<&str> = PY_REQUIREMENTS
        .lines()
        .filter(|line| !line.trim().is_empty() && !line.trim_start().starts_with('#'))
        .collect();
    if pins.is_empty() {
        return Err(ScaffoldError::Embedded {
            what: "guest-tools/python/requirements.txt",
            message: "it pins nothing".to_owned(),
        });
    }
    Ok(format!(
        "# The toolchain, pinned to the version toolhost {} tests its Python examples with:\n\
         # componentize-py turns app.py into a WebAssembly component.\n{}\n",
        env!("CARGO_PKG_VERSION"),
        pins.join("\n")
    )
    .into_bytes())
}

/// `package.json`: the lock file's development dependencies, and the build script.
fn package_json(package: &str, name: &str) -> Result<Vec<u8>, ScaffoldError> {
    let embedded = |message: String| ScaffoldError::Embedded {
        what: "guest-tools/js/word_count/package-lock.json",
        message,
    };
    let lock: serde_json::Value =
        serde_json::from_str(JS_LOCK).map_err(|error| embedded(error.to_string()))?;
    let dev = lock
        .pointer("/packages//devDependencies")
        .cloned()
        .ok_or_else(|| embedded("it names no development dependencies".to_owned()))?;
    let manifest = serde_json::json!({
        "name": package,
        "version": "0.1.0",
        "description": format!("The toolhost plugin {name}, built into a WebAssembly component with componentize-js"),
        "private": true,
        "type": "module",
        "scripts": { "build": "node build.mjs" },
        "devDependencies": dev,
    });
    let mut text = serde_json::to_string_pretty(&manifest).map_err(|e| embedded(e.to_string()))?;
    text.push('\n');
    Ok(text.into_bytes())
}
