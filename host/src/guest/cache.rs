//! Compiling components, through an on-disk cache of compiled code.
//!
//! Compiled code read from the cache runs natively inside the host, so the cache is trusted
//! like the binary: the directory is created private (0700), and one that another user owns
//! or that group or others may write is refused (logged, and components are compiled afresh).
//! A cached file is named by a SHA-256 over the component's bytes, the engine's compatibility
//! hash (its configuration and the wasmtime version) and the toolhost version: a changed
//! component, engine or host never picks up stale code.

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

    /// Where the compiled form of `bytes` is kept.
    fn path(&self, engine: &Engine, bytes: &[u8]) -> PathBuf {
        self.dir.join(format!("{}.cwasm", cache_key(engine, bytes)))
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

/// Compile `bytes`, reusing a compiled copy from `cache` when there is one. Compilation runs
/// on a blocking thread.
pub(crate) async fn compile(
    engine: &Engine,
    name: &str,
    bytes: &[u8],
    cache: Option<&ComponentCache>,
) -> Result<Component, String> {
    let cached = cache.map(|cache| cache.path(engine, bytes));
    if let Some(path) = &cached
        && let Some(component) = load_cached(engine, name, path)
    {
        return Ok(component);
    }
    let engine2 = engine.clone();
    let owned = bytes.to_vec();
    let component = tokio::task::spawn_blocking(move || Component::new(&engine2, &owned))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("{e:#}"))?;
    if let Some(path) = cached
        && let Err(e) = store_cached(&component, &path)
    {
        tracing::warn!(plugin = name, path = %path.display(), "could not cache compiled component: {e}");
    }
    Ok(component)
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

/// Write `component`'s compiled form to `path` atomically (a private temporary file, then a
/// rename): concurrent hosts never see half a file.
fn store_cached(component: &Component, path: &Path) -> std::io::Result<()> {
    let bytes = component
        .serialize()
        .map_err(|e| std::io::Error::other(format!("{e:#}")))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(&mut tmp, &bytes)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
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

/// SHA-256 over the component, the engine's compatibility hash and the toolhost version,
/// as hex.
fn cache_key(engine: &Engine, bytes: &[u8]) -> String {
    let mut hasher = Sha256Hasher(Sha256::new());
    hasher.0.update(b"toolhost component cache v2\0");
    hasher.0.update(env!("CARGO_PKG_VERSION").as_bytes());
    hasher.0.update([0]);
    std::hash::Hash::hash(&engine.precompile_compatibility_hash(), &mut hasher);
    hasher.0.update([0]);
    hasher.0.update(Sha256::digest(bytes));
    hex(&hasher.0.finalize()[..20])
}

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;
