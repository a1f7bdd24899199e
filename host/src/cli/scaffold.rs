//! `toolhost new-policy NAME`: a new policy crate, ready to build, test and install, that
//! needs neither the network nor the toolhost repository.
//!
//! The crate holds a copy of the policy SDK (`toolhost-policy`) of the version this binary was
//! built with (its files are embedded by `build.rs`), with its manifest made standalone (no
//! workspace inheritance), and a `Cargo.lock` pinning the SDK's dependencies at the versions
//! the bundled policies are built with (derived from `guest-tools/Cargo.lock`), so that a
//! machine that built toolhost from source builds it offline. Besides: `Cargo.toml` (a
//! `cdylib` in a workspace of its own, with a release profile for small components),
//! `rust-toolchain.toml` (this repository's compiler and the `wasm32-wasip2` target),
//! `src/lib.rs` (the standard tools, with comments showing the extension points), the
//! manifest `LIB.toml` (granting `process`, with the `[config]` keys commented) and
//! `scenarios/basic.toml` (scenarios for `toolhost test` that pass).

mod script;

use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

// `SDK_FILES`: every file of `guest-tools/crates/toolhost-policy`, written by `build.rs`.
include!(concat!(env!("OUT_DIR"), "/sdk_files.rs"));

// The next three are `guest-tools/Cargo.toml`, `guest-tools/Cargo.lock` and
// `rust-toolchain.toml` of the repository, or their copies in a packaged crate (`build.rs`
// names them).
/// The guest workspace's manifest: the values the SDK's manifest inherits.
const GUEST_WORKSPACE: &str = include_str!(env!("TOOLHOST_SCAFFOLD_GUEST_WORKSPACE"));
/// The guest workspace's lock file: the versions the SDK is built with.
const GUEST_LOCK: &str = include_str!(env!("TOOLHOST_SCAFFOLD_GUEST_LOCK"));
/// This repository's toolchain file: its compiler channel.
const TOOLCHAIN: &str = include_str!(env!("TOOLHOST_SCAFFOLD_TOOLCHAIN"));

/// Templates of the crate's own files; `{{name}}`, `{{crate_name}}` and
/// `{{toolhost_version}}` are replaced.
const CARGO_TOML: &str = include_str!("scaffold/Cargo.toml.in");
const LIB_RS: &str = include_str!("scaffold/lib.rs.in");
const MANIFEST: &str = include_str!("scaffold/manifest.toml.in");
const BASIC_SCENARIOS: &str = include_str!("scaffold/basic.toml.in");
const README: &str = include_str!("scaffold/README.md.in");
const GITIGNORE: &str = include_str!("scaffold/gitignore.in");

/// The SDK's package name, and the directory of its copy in a new crate.
pub const SDK: &str = "toolhost-policy";
/// The target a policy is built for.
pub const TARGET: &str = "wasm32-wasip2";

/// Names a policy crate cannot have: Rust keywords, the standard crates, and what cargo
/// reserves for its build directories.
const RESERVED: &[&str] = &[
    "abstract",
    "alloc",
    "as",
    "async",
    "await",
    "become",
    "box",
    "break",
    "build",
    "const",
    "continue",
    "core",
    "crate",
    "deps",
    "do",
    "dyn",
    "else",
    "enum",
    "examples",
    "extern",
    "false",
    "final",
    "fn",
    "for",
    "gen",
    "if",
    "impl",
    "in",
    "incremental",
    "let",
    "loop",
    "macro",
    "match",
    "mod",
    "move",
    "mut",
    "override",
    "priv",
    "proc_macro",
    "pub",
    "ref",
    "return",
    "self",
    "static",
    "std",
    "struct",
    "super",
    "test",
    "trait",
    "true",
    "try",
    "type",
    "typeof",
    "unsafe",
    "unsized",
    "use",
    "virtual",
    "where",
    "while",
    "yield",
];

/// Why a policy crate could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    /// The name cannot name a crate (or a plugin).
    #[error("`{name}` cannot name a policy crate: {reason}")]
    Name {
        /// The name given.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The crate's directory exists already: nothing is overwritten.
    #[error("{} already exists; pick another name or --dir (nothing was written)", path.display())]
    Exists {
        /// The directory.
        path: PathBuf,
    },
    /// A file or directory could not be written (what was written is removed again).
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The language cannot write a plugin of the world asked for.
    #[error("{0}")]
    Unsupported(String),
    /// A file embedded in this binary cannot be used (a bug of the build).
    #[error("the embedded {what} cannot be used: {message}")]
    Embedded {
        /// Which file.
        what: &'static str,
        /// What is wrong.
        message: String,
    },
}

/// A language a plugin project can be written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    /// Rust, with the policy SDK (a crate).
    Rust,
    /// Python, built with componentize-py.
    Python,
    /// JavaScript, built with componentize-js.
    Js,
}

/// The WIT world a plugin targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum World {
    /// Tools that may start processes (the process capability, granted by the manifest).
    ShellTools,
    /// Tools without process access.
    Tools,
}

impl World {
    /// Its name in the WIT.
    pub fn wit_name(self) -> &'static str {
        match self {
            World::ShellTools => "shell-tools",
            World::Tools => "tools",
        }
    }
}

/// A new plugin project: its name, its files ready to be written, and the commands that
/// build, test and install it.
#[derive(Debug, Clone)]
pub struct PluginProject {
    name: String,
    lib_name: String,
    files: Vec<(PathBuf, Vec<u8>)>,
    /// The commands to build it (run in its directory), one per line.
    build: String,
    /// Where the build leaves the component, relative to the project.
    built: String,
    /// The guide for its language, relative to the toolhost repository.
    guide: &'static str,
}

impl PluginProject {
    /// The project called `name` (lowercase letters, digits, `-` and `_`, starting with a
    /// letter) in `lang`, targeting `world` (the Rust crate targets `shell-tools` only).
    pub fn create(name: &str, lang: Lang, world: World) -> Result<PluginProject, ScaffoldError> {
        match (lang, world) {
            (Lang::Rust, World::ShellTools) => PluginProject::new(name),
            (Lang::Rust, World::Tools) => Err(ScaffoldError::Unsupported(
                "the Rust scaffold writes a policy of the world `shell-tools` (the policy SDK's \
                 standard tools); write a `tools` plugin with --lang python or --lang js"
                    .to_owned(),
            )),
            (lang, world) => {
                check_format(name)?;
                script::project(name, lang, world)
            }
        }
    }

    /// The files of a Python or JavaScript project (see `scaffold/script.rs`).
    fn script(
        name: &str,
        lib_name: &str,
        files: Vec<(PathBuf, Vec<u8>)>,
        build: String,
        guide: &'static str,
    ) -> PluginProject {
        PluginProject {
            name: name.to_owned(),
            lib_name: lib_name.to_owned(),
            files,
            build,
            built: format!("{lib_name}.wasm"),
            guide,
        }
    }

    /// The Rust crate called `name` (lowercase letters, digits, `-` and `_`, starting with a
    /// letter).
    pub fn new(name: &str) -> Result<PluginProject, ScaffoldError> {
        let sdk_lock = sdk_lock()?;
        check_name(name, &sdk_lock)?;
        let lib_name = name.replace('-', "_");
        let fill = |template: &str| {
            template
                .replace("{{name}}", name)
                .replace("{{crate_name}}", &lib_name)
                .replace("{{toolhost_version}}", env!("CARGO_PKG_VERSION"))
                .into_bytes()
        };
        let mut files: Vec<(PathBuf, Vec<u8>)> = vec![
            ("Cargo.toml".into(), fill(CARGO_TOML)),
            ("Cargo.lock".into(), lock_file(&sdk_lock, name).into_bytes()),
            ("rust-toolchain.toml".into(), toolchain()?.into_bytes()),
            ("src/lib.rs".into(), fill(LIB_RS)),
            (format!("{lib_name}.toml").into(), fill(MANIFEST)),
            ("scenarios/basic.toml".into(), fill(BASIC_SCENARIOS)),
            ("README.md".into(), fill(README)),
            (".gitignore".into(), fill(GITIGNORE)),
        ];
        for (path, bytes) in SDK_FILES {
            let bytes = if *path == "Cargo.toml" {
                standalone_sdk_manifest()?.into_bytes()
            } else {
                bytes.to_vec()
            };
            files.push((Path::new(SDK).join(path), bytes));
        }
        Ok(PluginProject {
            name: name.to_owned(),
            built: format!("target/{TARGET}/release/{lib_name}.wasm"),
            lib_name,
            files,
            build: format!("cargo build --release --target {TARGET}"),
            guide: "docs/writing-a-policy.md",
        })
    }

    /// The file name of the built component, `LIB.wasm` (the name with `-` as `_`), which is
    /// also the plugin's name.
    #[cfg(test)]
    fn component_file(&self) -> String {
        format!("{}.wasm", self.lib_name)
    }

    /// The file name of the plugin's manifest, `LIB.toml`: beside the component in a plugins
    /// directory.
    pub fn manifest_file(&self) -> String {
        format!("{}.toml", self.lib_name)
    }

    /// Write the crate into `parent/NAME` (`parent` is created if missing); returns that
    /// directory. An existing `parent/NAME` is an error and is left alone; a failure while
    /// writing removes what was written.
    pub fn write(&self, parent: &Path) -> Result<PathBuf, ScaffoldError> {
        let root = parent.join(&self.name);
        let write_error = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ScaffoldError::Write { path, source }
        };
        std::fs::create_dir_all(parent).map_err(write_error(parent))?;
        match std::fs::create_dir(&root) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(ScaffoldError::Exists { path: root });
            }
            Err(e) => return Err(write_error(&root)(e)),
        }
        let written = self.files.iter().try_for_each(|(relative, bytes)| {
            let path = root.join(relative);
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(write_error(dir))?;
            }
            std::fs::write(&path, bytes).map_err(write_error(&path))
        });
        match written {
            Ok(()) => Ok(root),
            Err(error) => {
                // The directory is ours: it did not exist before.
                let _ = std::fs::remove_dir_all(&root);
                Err(error)
            }
        }
    }

    /// What to do next, for people: the commands that build, test and install the project
    /// written to `root`, run in its directory.
    pub fn next_steps(&self, root: &Path) -> String {
        let (root, built, manifest) = (shell_word(root), &self.built, self.manifest_file());
        let guide = self.guide;
        let build: String = self
            .build
            .lines()
            .map(|line| format!("  {line}\n"))
            .collect();
        format!(
            "  cd {root}\n\
             {build}\
             \x20 toolhost test {built} scenarios/ --manifest {manifest}\n\
             Then copy {manifest} and {built} into the plugins directory \
             of `toolhost serve --plugins DIR`.\n\
             The guide: {guide} in the toolhost repository."
        )
    }
}

/// `path` as one word of a POSIX shell: as it is when it holds only characters no shell treats
/// specially, in single quotes otherwise (each single quote in it written `'\''`).
fn shell_word(path: &Path) -> String {
    let text = path.display().to_string();
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+,:@%=".contains(c));
    if plain {
        text
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

/// Refuse a name that cannot name a crate and a plugin, or that would clash with a crate the
/// policy is built from.
fn check_name(name: &str, sdk_lock: &[LockPackage]) -> Result<(), ScaffoldError> {
    check_format(name)?;
    let refuse = |reason: &str| {
        Err(ScaffoldError::Name {
            name: name.to_owned(),
            reason: reason.to_owned(),
        })
    };
    let lib = name.replace('-', "_");
    if RESERVED.contains(&lib.as_str()) {
        return refuse("it is a Rust keyword or a name Rust or cargo reserve");
    }
    if sdk_lock.iter().any(|p| p.name.replace('-', "_") == lib) {
        return refuse("a crate the policy is built from has that name");
    }
    Ok(())
}

/// Refuse a name that cannot name a plugin and its files: lowercase letters, digits, `-` and
/// `_`, starting with a letter, at most 64 characters.
fn check_format(name: &str) -> Result<(), ScaffoldError> {
    let refuse = |reason: &str| {
        Err(ScaffoldError::Name {
            name: name.to_owned(),
            reason: reason.to_owned(),
        })
    };
    let Some(first) = name.chars().next() else {
        return refuse("it is empty");
    };
    if name.len() > 64 {
        return refuse("it is longer than 64 characters");
    }
    if !first.is_ascii_lowercase() {
        return refuse("it must start with a lowercase letter");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
    {
        return refuse("use lowercase letters, digits, `-` and `_` only");
    }
    Ok(())
}

/// `rust-toolchain.toml` of a new crate: this repository's channel, the wasm target.
fn toolchain() -> Result<String, ScaffoldError> {
    let embedded = |message: String| ScaffoldError::Embedded {
        what: "rust-toolchain.toml",
        message,
    };
    let table: toml::Table = TOOLCHAIN.parse().map_err(|e| embedded(format!("{e}")))?;
    let channel = table
        .get("toolchain")
        .and_then(|t| t.get("channel"))
        .and_then(toml::Value::as_str)
        .ok_or_else(|| embedded("no [toolchain] channel".to_owned()))?;
    Ok(format!(
        "# The compiler toolhost {version} is built with, and the target policies are built for.\n\
         [toolchain]\n\
         channel = {channel}\n\
         targets = [\"{TARGET}\"]\n\
         components = [\"rustfmt\", \"clippy\"]\n\
         profile = \"minimal\"\n",
        version = env!("CARGO_PKG_VERSION"),
        channel = toml::Value::from(channel),
    ))
}

/// The SDK's `Cargo.toml` with every value it inherits from the guest workspace
/// (`KEY.workspace = true`, `KEY = { workspace = true, ... }`) written out, comments kept.
fn standalone_sdk_manifest() -> Result<String, ScaffoldError> {
    let embedded = |message: String| ScaffoldError::Embedded {
        what: "toolhost-policy/Cargo.toml",
        message,
    };
    let sdk = SDK_FILES
        .iter()
        .find(|(path, _)| *path == "Cargo.toml")
        .and_then(|(_, bytes)| std::str::from_utf8(bytes).ok())
        .ok_or_else(|| embedded("missing or not UTF-8".to_owned()))?;
    let workspace: toml::Table = GUEST_WORKSPACE
        .parse()
        .map_err(|e| embedded(format!("guest-tools/Cargo.toml: {e}")))?;
    let inherited = |section: &str| {
        workspace
            .get("workspace")
            .and_then(|w| w.get(section))
            .and_then(toml::Value::as_table)
            .cloned()
            .unwrap_or_default()
    };
    let (package, dependencies) = (inherited("package"), inherited("dependencies"));
    let mut out = format!(
        "# The policy SDK as toolhost {} embeds it, copied by `toolhost new-policy` with the values\n\
         # it inherited from toolhost's guest workspace written out.\n",
        env!("CARGO_PKG_VERSION")
    );
    let mut section = String::new();
    for line in sdk.lines() {
        let trimmed = line.trim();
        if let Some(header) = trimmed.strip_prefix('[').and_then(|h| h.split(']').next()) {
            section = header.trim().to_owned();
        }
        let parsed = (!trimmed.starts_with('[') && trimmed.contains("workspace"))
            .then(|| trimmed.parse::<toml::Table>().ok())
            .flatten();
        let Some((key, toml::Value::Table(value))) = parsed
            .as_ref()
            .and_then(|t| (t.len() == 1).then(|| t.iter().next()).flatten())
        else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        if value.get("workspace").and_then(toml::Value::as_bool) != Some(true) {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let resolved = if section == "package" {
            package
                .get(key)
                .cloned()
                .ok_or_else(|| embedded(format!("the workspace has no package.{key}")))?
        } else if section.ends_with("dependencies") {
            let own: Vec<_> = value
                .iter()
                .filter(|(field, _)| *field != "workspace")
                .collect();
            let mut dependency = match dependencies.get(key) {
                // `NAME = "VERSION"` stays in that form.
                Some(version @ toml::Value::String(_)) if own.is_empty() => {
                    out.push_str(&format!("{key} = {version}\n"));
                    continue;
                }
                Some(toml::Value::String(version)) => {
                    toml::Table::from_iter([("version".to_owned(), version.clone().into())])
                }
                Some(toml::Value::Table(table)) => table.clone(),
                _ => return Err(embedded(format!("the workspace has no dependency {key}"))),
            };
            for (field, extra) in own {
                match (dependency.get_mut(field), extra) {
                    (Some(toml::Value::Array(features)), toml::Value::Array(more)) => {
                        features.extend(more.iter().cloned())
                    }
                    _ => {
                        dependency.insert(field.clone(), extra.clone());
                    }
                }
            }
            toml::Value::Table(dependency)
        } else {
            return Err(embedded(format!(
                "`{key}` in [{section}] inherits from the workspace"
            )));
        };
        out.push_str(&format!("{key} = {resolved}\n"));
    }
    // Whatever was not written out (a multi-line value, say) must not stay inherited.
    let table: toml::Table = out
        .parse()
        .map_err(|e| embedded(format!("not valid once written out: {e}")))?;
    if inherits(&toml::Value::Table(table)) {
        return Err(embedded(
            "a value still inherits from the workspace".to_owned(),
        ));
    }
    Ok(out)
}

/// Whether `value` holds a `workspace` key anywhere.
fn inherits(value: &toml::Value) -> bool {
    match value {
        toml::Value::Table(table) => table
            .iter()
            .any(|(key, value)| key == "workspace" || inherits(value)),
        toml::Value::Array(items) => items.iter().any(inherits),
        _ => false,
    }
}

/// A package of a `Cargo.lock`.
#[derive(Debug, Clone, Deserialize)]
struct LockPackage {
    name: String,
    version: String,
    source: Option<String>,
    checksum: Option<String>,
    #[serde(default)]
    dependencies: Vec<String>,
}

#[derive(Deserialize)]
struct Lock {
    version: u32,
    #[serde(rename = "package")]
    packages: Vec<LockPackage>,
}

/// The version of the lock file format of `guest-tools/Cargo.lock`.
fn lock_version() -> u32 {
    toml::from_str::<Lock>(GUEST_LOCK).map_or(4, |lock| lock.version)
}

/// The packages of `guest-tools/Cargo.lock` the SDK is built from: the SDK and everything it
/// depends on, with the dependency lists as written there (`NAME` or `NAME VERSION`).
fn sdk_lock() -> Result<Vec<LockPackage>, ScaffoldError> {
    let embedded = |message: String| ScaffoldError::Embedded {
        what: "guest-tools/Cargo.lock",
        message,
    };
    let lock: Lock = toml::from_str(GUEST_LOCK).map_err(|e| embedded(e.to_string()))?;
    let find = |reference: &str| -> Result<&LockPackage, ScaffoldError> {
        let mut words = reference.split_whitespace();
        let name = words.next().unwrap_or_default();
        let version = words.next();
        let mut found = lock
            .packages
            .iter()
            .filter(|p| p.name == name && version.is_none_or(|v| p.version == v));
        match (found.next(), found.next()) {
            (Some(package), None) => Ok(package),
            _ => Err(embedded(format!("`{reference}` names no single package"))),
        }
    };
    let mut keep: BTreeMap<(String, String), LockPackage> = BTreeMap::new();
    let mut todo = vec![find(SDK)?];
    while let Some(package) = todo.pop() {
        let key = (package.name.clone(), package.version.clone());
        if keep.contains_key(&key) {
            continue;
        }
        for dependency in &package.dependencies {
            todo.push(find(dependency)?);
        }
        keep.insert(key, package.clone());
    }
    Ok(keep.into_values().collect())
}

/// A `Cargo.lock` for crate `name`, which depends on the SDK alone, written as cargo writes
/// it (so that `cargo build --locked` accepts it as it is).
fn lock_file(sdk_lock: &[LockPackage], name: &str) -> String {
    let mut packages = sdk_lock.to_vec();
    packages.push(LockPackage {
        name: name.to_owned(),
        version: "0.1.0".to_owned(),
        source: None,
        checksum: None,
        dependencies: vec![SDK.to_owned()],
    });
    packages.sort_by(|a, b| (&a.name, &a.version).cmp(&(&b.name, &b.version)));
    // Cargo names a dependency by its version only where the lock holds several versions.
    let mut versions: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for package in &packages {
        versions
            .entry(&package.name)
            .or_default()
            .insert(&package.version);
    }
    let mut out = format!(
        "# This file is automatically @generated by Cargo.\n\
         # It is not intended for manual editing.\n\
         version = {}\n",
        lock_version()
    );
    for package in &packages {
        let quoted = |text: &str| toml::Value::from(text).to_string();
        out.push_str("\n[[package]]\n");
        out.push_str(&format!("name = {}\n", quoted(&package.name)));
        out.push_str(&format!("version = {}\n", quoted(&package.version)));
        if let Some(source) = &package.source {
            out.push_str(&format!("source = {}\n", quoted(source)));
        }
        if let Some(checksum) = &package.checksum {
            out.push_str(&format!("checksum = {}\n", quoted(checksum)));
        }
        let mut dependencies: Vec<String> = package
            .dependencies
            .iter()
            .map(|reference| {
                let mut words = reference.split_whitespace();
                let name = words.next().unwrap_or_default();
                match words.next() {
                    Some(version) if versions.get(name).is_some_and(|v| v.len() > 1) => {
                        format!("{name} {version}")
                    }
                    _ => name.to_owned(),
                }
            })
            .collect();
        dependencies.sort();
        if !dependencies.is_empty() {
            out.push_str("dependencies = [\n");
            for dependency in dependencies {
                out.push_str(&format!(" {},\n", quoted(&dependency)));
            }
            out.push_str("]\n");
        }
    }
    out
}

#[cfg(test)]
impl PluginProject {
    /// The crate's (and the policy's) name.
    fn name(&self) -> &str {
        &self.name
    }

    /// The crate's files: paths relative to its directory, contents.
    fn files(&self) -> impl Iterator<Item = (&Path, &[u8])> {
        self.files
            .iter()
            .map(|(path, bytes)| (path.as_path(), bytes.as_slice()))
    }
}

#[cfg(test)]
#[path = "scaffold_tests.rs"]
mod tests;
