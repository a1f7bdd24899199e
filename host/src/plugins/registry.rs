//! The plugin registry: the bundled policy and every plugin directory, loaded into an
//! immutable [`Snapshot`] behind a lock. A call takes the current snapshot and finishes on the
//! plugin version it started with, while a reload builds and swaps in a new one.

use super::PluginOrigin;
use super::bundled::{self, BundledPlugin};
use super::manifest::Manifest;
use crate::error::{HostError, ManifestError};
use crate::guest::{Loader, Plugin, PluginSource, hex, parse_digest};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

/// Above this size a component's first compile takes seconds (one with an interpreter inside
/// is 12-40 MB and compiles in 5-10 s of CPU; a policy written in Rust is well under 4 MiB
/// and compiles in under a second): a serving host does not wait for it at start.
pub(crate) const DEFER_OVER_BYTES: usize = 4 << 20;

/// The loaded plugins, immutable once built.
#[derive(Default)]
pub(crate) struct Snapshot {
    /// Every loaded plugin: the bundled policy first, then each directory's in name order.
    pub(crate) plugins: Vec<Arc<Plugin>>,
    /// Which plugin serves each tool (a later plugin's tool replaces an earlier one's).
    pub(crate) by_tool: BTreeMap<String, Arc<Plugin>>,
    /// Plugins loaded from files, with the fingerprint of the component and manifest they
    /// were loaded from, so a reload recompiles only what changed.
    files: BTreeMap<PathBuf, (String, Arc<Plugin>)>,
}

impl Snapshot {
    /// Where `plugin`, one of [`Self::plugins`], was loaded from: a plugin that was not loaded
    /// from a file is the bundled policy.
    pub(crate) fn origin(&self, plugin: &Arc<Plugin>) -> PluginOrigin {
        self.files
            .iter()
            .find(|(_, (_, loaded))| Arc::ptr_eq(loaded, plugin))
            .map_or(PluginOrigin::Bundled, |(path, _)| {
                PluginOrigin::File(path.clone())
            })
    }

    /// The bundled policy, when one is loaded.
    fn bundled(&self) -> Option<&Arc<Plugin>> {
        self.plugins
            .iter()
            .find(|plugin| self.origin(plugin) == PluginOrigin::Bundled)
    }
}

/// Where plugins come from and what is loaded now.
pub(crate) struct Registry {
    loader: Loader,
    policy: Option<String>,
    plugin_dirs: Vec<PathBuf>,
    current: RwLock<Arc<Snapshot>>,
    /// Serialises reloads.
    reloading: tokio::sync::Mutex<()>,
    changes: tokio::sync::watch::Sender<u64>,
}

impl Registry {
    /// An empty registry for the bundled `policy` (if any) and `plugin_dirs`; nothing is
    /// loaded before the first [`Self::reload`].
    pub(crate) fn new(loader: Loader, policy: Option<String>, plugin_dirs: Vec<PathBuf>) -> Self {
        Registry {
            loader,
            policy,
            plugin_dirs,
            current: RwLock::new(Arc::new(Snapshot::default())),
            reloading: tokio::sync::Mutex::new(()),
            changes: tokio::sync::watch::channel(0).0,
        }
    }

    /// What plugins load with.
    pub(crate) fn loader(&self) -> &Loader {
        &self.loader
    }

    /// The directories plugins are loaded from.
    pub(crate) fn plugin_dirs(&self) -> &[PathBuf] {
        &self.plugin_dirs
    }

    /// The plugins loaded now.
    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Sees a new value every time the set of tools changes.
    pub(crate) fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Load the bundled policy and every plugin directory and swap the result in. Unchanged
    /// files keep their loaded plugin. `strict` (at start-up): any failure is an error. Not
    /// strict (hot reload): a plugin that fails to load is logged and its previous version,
    /// if any, keeps serving.
    pub(crate) async fn reload(&self, strict: bool) -> Result<(), HostError> {
        self.reload_deferring(strict, false).await.map(|_| ())
    }

    /// [`Registry::reload`]; with `defer`, a plugin file that is new, larger than
    /// [`DEFER_OVER_BYTES`], and whose compiled code is not in the component cache is left
    /// out, so that serving starts without waiting for its compile. Returns whether one was
    /// left out: the caller then reloads (not strict) in the background, and the plugin's
    /// tools arrive with a change of the tool list.
    pub(crate) async fn reload_deferring(
        &self,
        strict: bool,
        defer: bool,
    ) -> Result<bool, HostError> {
        let _guard = self.reloading.lock().await;
        let mut deferred = false;
        let previous = self.snapshot();
        let mut plugins = Vec::new();
        if let Some(policy) = &self.policy {
            let bundled_plugin = match previous.bundled() {
                Some(p) => p.clone(),
                None => {
                    let bundled = bundled::find(policy).ok_or_else(|| {
                        HostError::UnknownPolicy(policy.clone(), bundled::names().join(", "))
                    })?;
                    Arc::new(load_bundled(&self.loader, bundled).await?)
                }
            };
            plugins.push(bundled_plugin);
        }
        let mut files = BTreeMap::new();
        for dir in &self.plugin_dirs {
            let paths = match plugin_files(dir) {
                Ok(paths) => paths,
                Err(e) if !strict => {
                    // Fail closed: an unreadable directory keeps its plugins, so a stricter
                    // policy is not silently replaced by the bundled one.
                    tracing::error!("{e}; keeping the plugins loaded from it");
                    previous
                        .files
                        .keys()
                        .filter(|p| p.starts_with(dir))
                        .cloned()
                        .collect()
                }
                Err(e) => return Err(e),
            };
            for path in paths {
                let read = read_plugin_file(&path);
                if defer
                    && !previous.files.contains_key(&path)
                    && let Ok((bytes, _, _)) = &read
                    && bytes.len() > DEFER_OVER_BYTES
                    && !self.loader.has_compiled(bytes)
                {
                    tracing::info!(
                        path = %path.display(),
                        "the plugin is compiled in the background: its tools arrive with a change of the tool list"
                    );
                    deferred = true;
                    continue;
                }
                let loaded = match read {
                    Ok((bytes, manifest_text, fingerprint)) => match previous.files.get(&path) {
                        Some((old, plugin)) if *old == fingerprint => {
                            Ok((fingerprint, plugin.clone()))
                        }
                        _ => load_file(&self.loader, &path, &bytes, manifest_text.as_deref())
                            .await
                            .map(|p| (fingerprint, Arc::new(p))),
                    },
                    Err(e) => Err(e),
                };
                match loaded {
                    Ok((fingerprint, plugin)) => {
                        plugins.push(plugin.clone());
                        files.insert(path, (fingerprint, plugin));
                    }
                    Err(e) if strict => return Err(e),
                    Err(e) => {
                        tracing::error!("{e}");
                        if let Some((fingerprint, plugin)) = previous.files.get(&path) {
                            tracing::warn!(plugin = plugin.name(), "keeping the previous version");
                            plugins.push(plugin.clone());
                            files.insert(path, (fingerprint.clone(), plugin.clone()));
                        }
                    }
                }
            }
        }
        let mut by_tool: BTreeMap<String, Arc<Plugin>> = BTreeMap::new();
        for plugin in &plugins {
            for tool in plugin.tools() {
                if let Some(replaced) = by_tool.insert(tool.name.clone(), plugin.clone()) {
                    tracing::info!(
                        tool = %tool.name,
                        replaced = replaced.name(),
                        by = plugin.name(),
                        "tool replaced by a later plugin"
                    );
                }
            }
        }
        let unchanged = plugins.len() == previous.plugins.len()
            && plugins
                .iter()
                .zip(&previous.plugins)
                .all(|(a, b)| Arc::ptr_eq(a, b));
        if unchanged {
            return Ok(deferred);
        }
        for plugin in &plugins {
            tracing::info!(
                plugin = plugin.name(),
                origin = plugin.origin(),
                tools = plugin.tools().len(),
                "plugin loaded"
            );
        }
        let snapshot = Arc::new(Snapshot {
            plugins,
            by_tool,
            files,
        });
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = snapshot;
        self.changes.send_modify(|generation| *generation += 1);
        Ok(deferred)
    }
}

/// Load a bundled component.
async fn load_bundled(loader: &Loader, bundled: &BundledPlugin) -> Result<Plugin, HostError> {
    let manifest = Manifest::parse(bundled.manifest, Path::new(bundled.file_name))?;
    let source = PluginSource {
        name: bundled.name,
        origin: "bundled".to_string(),
        bytes: bundled.bytes,
        sha256: parse_digest(bundled.sha256),
        grants: &manifest.grants,
        limits: manifest.limits,
        config: manifest.config_json(),
    };
    Ok(Plugin::load(loader, source).await?)
}

/// A plugin file's bytes, its manifest text (if any) and a fingerprint of both.
fn read_plugin_file(path: &Path) -> Result<(Vec<u8>, Option<String>, String), HostError> {
    let bytes = std::fs::read(path).map_err(|e| HostError::PluginDir {
        path: path.to_path_buf(),
        message: format!("cannot read: {e}"),
    })?;
    let manifest_path = path.with_extension("toml");
    let manifest = match std::fs::read_to_string(&manifest_path) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(source) => {
            return Err(ManifestError::Read {
                path: manifest_path,
                source,
            }
            .into());
        }
    };
    let mut sha = Sha256::new();
    sha.update(&bytes);
    sha.update([u8::from(manifest.is_some())]);
    sha.update(manifest.as_deref().unwrap_or("").as_bytes());
    let fingerprint = hex(&sha.finalize());
    Ok((bytes, manifest, fingerprint))
}

/// Load plugin `path` (named after its file stem) from its bytes and manifest text; no
/// manifest means no grants and default limits.
async fn load_file(
    loader: &Loader,
    path: &Path,
    bytes: &[u8],
    manifest_text: Option<&str>,
) -> Result<Plugin, HostError> {
    let name = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("plugin")
        .to_string();
    let manifest = match manifest_text {
        Some(text) => Manifest::parse(text, &path.with_extension("toml"))?,
        None => Manifest::default(),
    };
    let source = PluginSource {
        name: &name,
        origin: path.display().to_string(),
        bytes,
        sha256: None,
        grants: &manifest.grants,
        limits: manifest.limits,
        config: manifest.config_json(),
    };
    Ok(Plugin::load(loader, source).await?)
}

/// The `*.wasm` files of a plugin directory, sorted by name.
pub(crate) fn plugin_files(dir: &Path) -> Result<Vec<PathBuf>, HostError> {
    let entries = std::fs::read_dir(dir).map_err(|e| HostError::PluginDir {
        path: dir.to_path_buf(),
        message: e.to_string(),
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "wasm") && p.is_file())
        .collect();
    files.sort();
    Ok(files)
}
