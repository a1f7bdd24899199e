//! Plugin manifests: `NAME.toml` beside `NAME.wasm`, holding the plugin's capability grants,
//! its resource limits and a free-form config table handed to the guest on every call.
//!
//! ```toml
//! [grants]
//! process = true                 # may start and control processes (deny by default)
//! workdir_root = "/home/me/src"  # processes start only in this directory or below it
//! max_timeout = "10m"            # longest a single wait on a process may block
//! env = ["PATH", "HOME", "LANG"] # host variables processes inherit (absent: all of them,
//!                                # but secret-named ones when confined)
//! sandbox = "workspace-write"    # its commands at least this confined: "workspace-write",
//!                                # "read-only" or "off" (absent: the operator's --sandbox)
//! network = "none"               # "none", "full" or "allow=HOST,..." (absent: the operator's --network)
//! memory_limit = "2GiB"          # memory of a command and all it started, at most
//! process_limit = 256            # processes of a command at once, at most
//! cpu_limit = "10m"              # CPU time of each process of a command, at most
//!
//! [limits]
//! memory = "64MiB"               # linear memory plus guest buffers
//! cpu_time = "5s"                # guest running time per call (waits not counted)
//! wall_time = "1h"               # whole call, waits included
//!
//! [config]                       # free-form, passed to the guest as JSON
//! default_timeout = "30s"
//! ```

//!
//! What the host enforces is what the *guest* may ask for: a plugin without `process` cannot
//! run anything, a start request outside `workdir_root` is refused, and processes inherit only
//! the `env` variables listed. The commands themselves run under the stricter of two: the
//! operator's confinement flags (`--sandbox`, `--network`, `--memory-limit-per-command`,
//! `--process-limit-per-command`) and the plugin's `sandbox`, `network` and `*_limit` grants.
//! The host enforces both (see docs/confinement.md). A plugin can confine its commands more
//! than the operator does, never less. `workdir_root` bounds where the guest may start commands, not what they may read.

use crate::error::ManifestError;
use crate::guest::{CallLimits, Grants};
use crate::sandbox::{self, Limits, Network, SandboxGrant, SandboxMode};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A plugin's manifest.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Manifest {
    /// What the plugin may touch.
    pub(crate) grants: Grants,
    /// Per-call resource limits.
    pub(crate) limits: CallLimits,
    /// The `[config]` table, handed to the guest as JSON.
    pub(crate) config: serde_json::Map<String, serde_json::Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    #[serde(default)]
    grants: RawGrants,
    #[serde(default)]
    limits: RawLimits,
    #[serde(default)]
    config: toml::Table,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawGrants {
    #[serde(default)]
    process: bool,
    workdir_root: Option<PathBuf>,
    max_timeout: Option<String>,
    env: Option<Vec<String>>,
    sandbox: Option<String>,
    network: Option<String>,
    memory_limit: Option<String>,
    process_limit: Option<u32>,
    cpu_limit: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    memory: Option<String>,
    cpu_time: Option<String>,
    wall_time: Option<String>,
}

impl Manifest {
    /// Parse manifest text; `path` is used in messages and to resolve a relative workdir root
    /// (relative to the manifest's directory).
    pub(crate) fn parse(text: &str, path: &Path) -> Result<Manifest, ManifestError> {
        let invalid = |message: String| ManifestError::Invalid {
            path: path.to_path_buf(),
            message,
        };
        let raw: RawManifest =
            toml::from_str(text).map_err(|e| invalid(e.message().to_string()))?;
        let duration =
            |key: &str, value: &Option<String>| -> Result<Option<Duration>, ManifestError> {
                match value {
                    None => Ok(None),
                    Some(text) => match humantime::parse_duration(text) {
                        Ok(d) if !d.is_zero() => Ok(Some(d)),
                        Ok(_) => Err(invalid(format!("`{key}` must be greater than zero"))),
                        Err(e) => Err(invalid(format!(
                            "`{key}` = {text:?} is not a duration like \"30s\" or \"5m\": {e}"
                        ))),
                    },
                }
            };
        let workdir_root = match raw.grants.workdir_root {
            None => None,
            Some(dir) => {
                let base = path.parent().unwrap_or(Path::new("."));
                let dir = if dir.is_relative() {
                    base.join(dir)
                } else {
                    dir
                };
                Some(dir.canonicalize().map_err(|e| {
                    invalid(format!(
                        "`workdir_root` {} cannot be used: {e}",
                        dir.display()
                    ))
                })?)
            }
        };
        let mut limits = CallLimits::default();
        if let Some(text) = &raw.limits.memory {
            limits.memory_bytes = sandbox::parse_size(text)
                .and_then(|bytes| usize::try_from(bytes).ok())
                .ok_or_else(|| {
                    invalid(format!("`memory` = {text:?} is not a size like \"64MiB\""))
                })?;
        }
        if let Some(d) = duration("cpu_time", &raw.limits.cpu_time)? {
            limits.cpu_time = d;
        }
        if let Some(d) = duration("wall_time", &raw.limits.wall_time)? {
            limits.wall_time = d;
        }
        let sandbox = SandboxGrant {
            mode: raw
                .grants
                .sandbox
                .as_deref()
                .map(|name| {
                    SandboxMode::parse(name).ok_or_else(|| {
                        invalid(format!(
                            "`sandbox` = {name:?} is not one of \"workspace-write\", \
                             \"read-only\", \"off\""
                        ))
                    })
                })
                .transpose()?,
            network: raw
                .grants
                .network
                .as_deref()
                .map(|name| {
                    Network::parse_setting(name)
                        .map_err(|error| invalid(format!("`network` = {name:?}: {error}")))
                })
                .transpose()?,
            limits: Limits {
                memory_bytes: raw
                    .grants
                    .memory_limit
                    .as_deref()
                    .map(|text| {
                        sandbox::parse_size(text).ok_or_else(|| {
                            invalid(format!(
                                "`memory_limit` = {text:?} is not a size like \"2GiB\""
                            ))
                        })
                    })
                    .transpose()?,
                processes: match raw.grants.process_limit {
                    Some(0) => return Err(invalid("`process_limit` must be at least 1".into())),
                    limit => limit,
                },
                cpu_seconds: duration("cpu_limit", &raw.grants.cpu_limit)?
                    .map(|limit| limit.as_secs().max(1)),
            },
        };
        let config = serde_json::to_value(&raw.config)
            .ok()
            .and_then(|v| v.as_object().cloned())
            .unwrap_or_default();
        Ok(Manifest {
            grants: Grants {
                process: raw.grants.process,
                workdir_root,
                max_timeout: duration("max_timeout", &raw.grants.max_timeout)?,
                env: raw.grants.env,
                sandbox,
            },
            limits,
            config,
        })
    }

    /// The config table as JSON text for the call context.
    pub(crate) fn config_json(&self) -> String {
        serde_json::Value::Object(self.config.clone()).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_manifest_parses() {
        let dir = tempfile::tempdir().expect("tempdir");
        let text = format!(
            "[grants]\nprocess = true\nworkdir_root = {:?}\nmax_timeout = \"2m\"\nenv = [\"PATH\"]\n\
             [limits]\nmemory = \"32MiB\"\ncpu_time = \"2s\"\nwall_time = \"10m\"\n\
             [config]\ndefault_timeout = \"30s\"\nlist_limit = 5\n",
            dir.path()
        );
        let m = Manifest::parse(&text, &dir.path().join("p.toml")).expect("parses");
        assert!(m.grants.process);
        assert_eq!(m.grants.max_timeout, Some(Duration::from_secs(120)));
        assert_eq!(m.grants.env, Some(vec!["PATH".to_string()]));
        assert_eq!(
            m.grants.workdir_root.as_deref(),
            Some(dir.path().canonicalize().expect("canon").as_path())
        );
        assert_eq!(m.limits.memory_bytes, 32 << 20);
        assert_eq!(m.limits.cpu_time, Duration::from_secs(2));
        assert_eq!(m.limits.wall_time, Duration::from_secs(600));
        let config: serde_json::Value = serde_json::from_str(&m.config_json()).expect("json");
        assert_eq!(config["default_timeout"], "30s");
        assert_eq!(config["list_limit"], 5);
    }

    #[test]
    fn sandbox_grants_parse_and_bad_values_are_named() {
        let text = "[grants]\nprocess = true\nsandbox = \"read-only\"\nnetwork = \"none\"\n\
                    memory_limit = \"1GiB\"\nprocess_limit = 64\ncpu_limit = \"90s\"\n";
        let m = Manifest::parse(text, Path::new("p.toml")).expect("parses");
        assert_eq!(
            m.grants.sandbox,
            SandboxGrant {
                mode: Some(SandboxMode::ReadOnly),
                network: Some(Network::None),
                limits: Limits {
                    memory_bytes: Some(1 << 30),
                    processes: Some(64),
                    cpu_seconds: Some(90),
                },
            }
        );
        for (bad, named) in [
            ("sandbox = \"strict\"", "`sandbox` = \"strict\""),
            ("network = \"some\"", "`network` = \"some\""),
            ("memory_limit = \"lots\"", "`memory_limit` = \"lots\""),
            ("process_limit = 0", "`process_limit` must be at least 1"),
            ("process_limit = -3", "expected u32"),
            ("cpu_limit = \"soon\"", "`cpu_limit` = \"soon\""),
        ] {
            let text = format!("[grants]\n{bad}\n");
            let error = Manifest::parse(&text, Path::new("p.toml")).expect_err(bad);
            assert!(error.to_string().contains(named), "{bad}: {error}");
        }
    }

    #[test]
    fn the_bundled_manifests_parse() {
        for bundled in crate::plugins::bundled::ALL {
            let m = Manifest::parse(bundled.manifest, Path::new(bundled.file_name))
                .expect("a bundled manifest parses");
            assert!(m.grants.process, "{}", bundled.name);
        }
        let guarded = Manifest::parse(
            crate::plugins::bundled::GUARDED.manifest,
            Path::new("guarded.toml"),
        )
        .expect("parses");
        assert_eq!(
            guarded.grants.sandbox.mode,
            Some(SandboxMode::WorkspaceWrite)
        );
        let network = guarded.grants.sandbox.network.expect("a network grant");
        let list = network.allow_list().expect("an allow-list");
        let host = sandbox::network::Host::parse("pypi.org").expect("a host");
        assert!(list.allows(&host, 443), "{list}");
    }

    #[test]
    fn an_empty_manifest_grants_nothing() {
        let m = Manifest::parse("", Path::new("x.toml")).expect("parses");
        assert!(!m.grants.process);
        assert_eq!(m.config_json(), "{}");
    }

    #[test]
    fn bad_manifests_name_the_problem() {
        let cases = [
            ("[grants]\nprocesss = true\n", "processs"),
            ("[limits]\nmemory = \"lots\"\n", "memory"),
            ("[limits]\ncpu_time = \"fast\"\n", "cpu_time"),
            ("[grants]\nmax_timeout = \"0s\"\n", "max_timeout"),
            (
                "[grants]\nworkdir_root = \"/no/such/dir\"\n",
                "workdir_root",
            ),
            ("[grants\n", "x.toml"),
        ];
        for (text, needle) in cases {
            let err = Manifest::parse(text, Path::new("x.toml")).expect_err(text);
            assert!(err.to_string().contains(needle), "{text}: {err}");
        }
    }
}
