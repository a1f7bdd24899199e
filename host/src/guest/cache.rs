//! Compiling components, through an on-disk cache of compiled code.
//!
//! Compiled code read from the cache runs natively inside the host, so the cache is trusted
//! like the binary: the directory is created private (0700), and one that another user owns
//! or that group or others may write is refused (logged, and components are compiled afresh).
//! A cached file is named by a SHA-256 over the component's bytes, the engine's compatibility
//! hash (its configuration and the wasmtime version) and the toolhost version: a changed
//! component, engine or host never picks up stale code.
//!
//! Beside each compiled component the cache keeps the tool lists it answered at load, one file
//! per configuration and sandbox settings (`<key>.<hash>.tools.json`): a host that starts does
//! not run the guest to ask again. A component's answer depends on nothing else (a guest has no
//! clock, randomness, files or environment at load), and the list read back passes the same
//! checks as a fresh one.

use super::wit::latest::{ToolAnnotations, ToolDefinition};
use sha2::{Digest, Sha256};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use wasmtime::Engine;
use wasmtime::component::Component;

/// A directory of compiled components that passed the ownership and mode checks.
#[derive(Debug, Clone)]
pub(crate) struct ComponentCache {
    dir: PathBuf,
}

impl ComponentCache {
    /// Use `dir` (created 0700 if missing) as the cache, or `None`, with the reason logged,
    /// when it cannot be created or is not private to the current user.
    pub(crate) fn open(dir: &Path) -> Option<ComponentCache> {
        match prepare(dir, rustix::process::geteuid().as_raw()) {
            Ok(()) => Some(ComponentCache {
                dir: dir.to_path_buf(),
            }),
            Err(reason) => {
                tracing::warn!(
                    dir = %dir.display(),
                    "not using the compiled-component cache: {reason}; components are compiled afresh"
                );
                None
            }
        }
    }

    /// Where the compiled form of the component with SHA-256 `digest` is kept.
    fn path(&self, engine: &Engine, digest: &[u8; 32]) -> PathBuf {
        self.dir
            .join(format!("{}.cwasm", cache_key(engine, digest)))
    }
}

/// Create `dir` private if missing; then require that `uid` owns it and that neither group nor
/// others may write it.
fn prepare(dir: &Path, uid: u32) -> Result<(), String> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create it: {e}"))?;
    let meta = std::fs::metadata(dir).map_err(|e| format!("cannot inspect it: {e}"))?;
    if !meta.is_dir() {
        return Err("it is not a directory".to_string());
    }
    if meta.uid() != uid {
        return Err(format!(
            "it is owned by uid {}, not by the current user (uid {uid})",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "its mode {:o} lets group or others write it (use chmod 700)",
            meta.mode() & 0o777
        ));
    }
    Ok(())
}

/// A compiled component and where its compiled form is cached, if it is.
pub(crate) struct Compiled {
    pub(crate) component: Component,
    /// The cached compiled form (the tool lists are kept beside it); `None` without a cache
    /// or when it could not be written.
    pub(crate) cached: Option<PathBuf>,
}

/// Compile `bytes`, reusing a compiled copy from `cache` when there is one. `sha256` is the
/// digest of `bytes` when it is known already (embedded components); otherwise it is taken
/// here. Compilation runs on a blocking thread.
pub(crate) async fn compile(
    engine: &Engine,
    name: &str,
    bytes: &[u8],
    sha256: Option<[u8; 32]>,
    cache: Option<&ComponentCache>,
) -> Result<Compiled, String> {
    let cached = cache.map(|cache| {
        let digest = sha256.unwrap_or_else(|| Sha256::digest(bytes).into());
        cache.path(engine, &digest)
    });
    if let Some(path) = &cached
        && let Some(component) = load_cached(engine, name, path)
    {
        return Ok(Compiled {
            component,
            cached: cached.clone(),
        });
    }
    let engine2 = engine.clone();
    let owned = bytes.to_vec();
    let component = tokio::task::spawn_blocking(move || Component::new(&engine2, &owned))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("{e:#}"))?;
    let cached = cached.filter(|path| match store_cached(&component, path) {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(plugin = name, path = %path.display(), "could not cache compiled component: {e}");
            false
        }
    });
    Ok(Compiled { component, cached })
}

/// Whether `cache` holds a compiled form of `bytes` for `engine` (it may still turn out
/// unusable when loaded, and is then compiled again).
pub(crate) fn has_compiled(engine: &Engine, bytes: &[u8], cache: Option<&ComponentCache>) -> bool {
    cache.is_some_and(|cache| {
        let digest: [u8; 32] = Sha256::digest(bytes).into();
        cache.path(engine, &digest).is_file()
    })
}

/// The cached component at `path`, if there is a usable one of ours.
fn load_cached(engine: &Engine, name: &str, path: &Path) -> Option<Component> {
    let meta = std::fs::metadata(path).ok()?;
    let uid = rustix::process::geteuid().as_raw();
    if !meta.is_file() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
        tracing::warn!(plugin = name, path = %path.display(), "ignoring a cached component the current user does not own privately");
        return None;
    }
    // SAFETY: `deserialize_file` runs the file's code natively. The cache directory passed
    // `prepare` (ours, writable by nobody else) and so did the file; its files are written
    // only by `store_cached` from `Component::serialize` of an engine with this compatibility
    // hash (part of the name), and wasmtime checks the header and compatibility again.
    match unsafe { Component::deserialize_file(engine, path) } {
        Ok(component) => Some(component),
        Err(e) => {
            tracing::warn!(plugin = name, path = %path.display(), "ignoring unusable cached component: {e}");
            None
        }
    }
}

/// Write `component`'s compiled form to `path` atomically.
fn store_cached(component: &Component, path: &Path) -> std::io::Result<()> {
    let bytes = component
        .serialize()
        .map_err(|e| std::io::Error::other(format!("{e:#}")))?;
    write_atomically(path, &bytes)
}

/// Write `bytes` to `path` through a private temporary file and a rename: concurrent hosts
/// never see half a file.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(&mut tmp, bytes)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Where the tool list that the component cached at `cwasm` answers for `config` and
/// `settings` (any stable rendering of them) is kept.
pub(crate) fn tools_path(cwasm: &Path, config: &str, settings: &str) -> PathBuf {
    let mut hasher = Sha256::new();
    for part in [config, settings] {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part.as_bytes());
    }
    let key = hex(&hasher.finalize()[..12]);
    cwasm.with_extension(format!("{key}.tools.json"))
}

/// The cached tool list at `path`, if there is one of ours that reads back whole.
pub(crate) fn load_tools(path: &Path) -> Option<Vec<ToolDefinition>> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    let uid = rustix::process::geteuid().as_raw();
    if !meta.is_file() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
        return None;
    }
    let text = std::fs::read_to_string(path).ok()?;
    let tools = tools_from_json(&text);
    if tools.is_none() {
        tracing::warn!(path = %path.display(), "ignoring an unreadable cached tool list");
    }
    tools
}

/// Keep `tools` at `path` (a failure only costs the next start a guest run).
pub(crate) fn store_tools(path: &Path, tools: &[ToolDefinition]) {
    if let Err(e) = write_atomically(path, tools_to_json(tools).as_bytes()) {
        tracing::debug!(path = %path.display(), "could not cache a tool list: {e}");
    }
}

fn tools_to_json(tools: &[ToolDefinition]) -> String {
    let tools: Vec<serde_json::Value> = tools
        .iter()
        .map(|t| {
            serde_json::json!({
                "name": t.name,
                "description": t.description,
                "input_schema": t.input_schema,
                "output_schema": t.output_schema,
                "title": t.title,
                "annotations": {
                    "read_only": t.annotations.read_only,
                    "destructive": t.annotations.destructive,
                    "idempotent": t.annotations.idempotent,
                    "open_world": t.annotations.open_world,
                },
            })
        })
        .collect();
    serde_json::Value::Array(tools).to_string()
}

fn tools_from_json(text: &str) -> Option<Vec<ToolDefinition>> {
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    let string = |v: &serde_json::Value, key: &str| v.get(key)?.as_str().map(str::to_owned);
    let optional_string = |v: &serde_json::Value, key: &str| match v.get(key)? {
        serde_json::Value::Null => Some(None),
        serde_json::Value::String(s) => Some(Some(s.clone())),
        _ => None,
    };
    let optional_bool = |v: &serde_json::Value, key: &str| match v.get(key)? {
        serde_json::Value::Null => Some(None),
        serde_json::Value::Bool(b) => Some(Some(*b)),
        _ => None,
    };
    value
        .as_array()?
        .iter()
        .map(|t| {
            let a = t.get("annotations")?;
            Some(ToolDefinition {
                name: string(t, "name")?,
                description: string(t, "description")?,
                input_schema: string(t, "input_schema")?,
                output_schema: optional_string(t, "output_schema")?,
                title: optional_string(t, "title")?,
                annotations: ToolAnnotations {
                    read_only: optional_bool(a, "read_only")?,
                    destructive: optional_bool(a, "destructive")?,
                    idempotent: optional_bool(a, "idempotent")?,
                    open_world: optional_bool(a, "open_world")?,
                },
            })
        })
        .collect()
}

/// Feeds `Hash` input into SHA-256, so a hash of the engine's compatibility is as stable as
/// the engine's own `Hash` impls (it does not depend on std's `DefaultHasher`).
struct Sha256Hasher(Sha256);

impl std::hash::Hasher for Sha256Hasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn finish(&self) -> u64 {
        // Only `write` is used: the digest is taken from the inner SHA-256.
        0
    }
}

/// SHA-256 over the component's digest, the engine's compatibility hash and the toolhost
/// version, as hex.
fn cache_key(engine: &Engine, digest: &[u8; 32]) -> String {
    let mut hasher = Sha256Hasher(Sha256::new());
    hasher.0.update(b"toolhost component cache v2\0");
    hasher.0.update(env!("CARGO_PKG_VERSION").as_bytes());
    hasher.0.update([0]);
    std::hash::Hash::hash(&engine.precompile_compatibility_hash(), &mut hasher);
    hasher.0.update([0]);
    hasher.0.update(digest);
    hex(&hasher.0.finalize()[..20])
}

/// A SHA-256 digest from 64 hex digits.
pub(crate) fn parse_digest(hex: &str) -> Option<[u8; 32]> {
    let mut digest = [0u8; 32];
    if hex.len() != 64 {
        return None;
    }
    for (byte, pair) in digest.iter_mut().zip(hex.as_bytes().chunks(2)) {
        *byte = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(digest)
}

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;
