//! The policies built into the binary by `build.rs`, so that `toolhost` works with zero
//! configuration.
//!
//! The test fixture components are not embedded: the tests find them by path.

/// A policy component compiled into the binary.
#[derive(Debug, Clone, Copy)]
pub struct BundledPlugin {
    /// Policy name (`default`, `guarded`).
    pub name: &'static str,
    /// File name used by `toolhost plugins export`.
    pub file_name: &'static str,
    /// One line on what it is.
    pub summary: &'static str,
    /// The component bytes.
    pub bytes: &'static [u8],
    /// SHA-256 of `bytes` as lower-case hex, taken when they were embedded.
    pub sha256: &'static str,
    /// Its manifest: the grants and limits it runs with, written beside it by
    /// `toolhost plugins export`.
    pub manifest: &'static str,
}

/// The default policy: generous limits, foreground timeouts handed over to the background.
pub const DEFAULT: BundledPlugin = BundledPlugin {
    name: "default",
    file_name: "default-policy.wasm",
    summary: "execute/process_* with timeouts handed over to the background",
    bytes: include_bytes!(env!("TOOLHOST_GUEST_DEFAULT_POLICY")),
    sha256: env!("TOOLHOST_GUEST_DEFAULT_POLICY_SHA256"),
    manifest: DEFAULT_MANIFEST,
};

/// The guarded policy: destructive commands refused, foreground timeouts killed.
pub const GUARDED: BundledPlugin = BundledPlugin {
    name: "guarded",
    file_name: "guarded-policy.wasm",
    summary: "refuses destructive commands, kills at timeout, lower maximum timeout",
    bytes: include_bytes!(env!("TOOLHOST_GUEST_GUARDED_POLICY")),
    sha256: env!("TOOLHOST_GUEST_GUARDED_POLICY_SHA256"),
    manifest: GUARDED_MANIFEST,
};

/// Every bundled policy.
pub const ALL: &[BundledPlugin] = &[DEFAULT, GUARDED];

/// The bundled policy called `name`.
pub fn find(name: &str) -> Option<&'static BundledPlugin> {
    ALL.iter().find(|p| p.name == name)
}

/// The bundled policies' names.
pub fn names() -> Vec<&'static str> {
    ALL.iter().map(|p| p.name).collect()
}

/// The default policy's manifest: its commands get the operator's settings as they are.
const DEFAULT_MANIFEST: &str = "\
# Grants and limits of this plugin (see docs/writing-a-policy.md).
[grants]
process = true
# How confined its commands are at least (the operator's flags may make them stricter):
# sandbox = \"workspace-write\"   # or \"read-only\"; \"off\" leaves it to the operator
# network = \"none\"              # or \"full\", or \"allow=pypi.org,*.pythonhosted.org\"
# memory_limit = \"2GiB\"         # memory of a command and all it started
# process_limit = 256             # processes of a command at once
# cpu_limit = \"10m\"             # CPU time of each of its processes

[limits]
memory = \"64MiB\"
cpu_time = \"5s\"
wall_time = \"1h\"

# Policy knobs, handed to the guest: default_timeout, max_timeout, output_cap_bytes,
# on_timeout (\"handover\" or \"kill\"), list_limit.
[config]
";

/// The guarded policy's manifest: its commands are confined whatever the operator allows:
/// the workspace is all they write, the network only to package registries and code hosts
/// (through the session's proxy), tight limits.
const GUARDED_MANIFEST: &str = "\
# Grants and limits of this plugin (see docs/writing-a-policy.md).
[grants]
process = true
# How confined its commands are at least (the operator's flags may make them stricter).
sandbox = \"workspace-write\"
# Package registries and code hosts, through the session's proxy (no network at all where the
# machine has no namespaces layer).
network = \"allow=pypi.org,files.pythonhosted.org,registry.npmjs.org,crates.io,index.crates.io,static.crates.io,github.com,codeload.github.com,objects.githubusercontent.com,proxy.golang.org,sum.golang.org\"
memory_limit = \"2GiB\"
process_limit = 256
cpu_limit = \"10m\"

[limits]
memory = \"64MiB\"
cpu_time = \"5s\"
wall_time = \"1h\"

# Policy knobs, handed to the guest: default_timeout, max_timeout, output_cap_bytes,
# on_timeout (\"handover\" or \"kill\"), list_limit.
[config]
";

/// Write every bundled policy into `dir` (created if missing), each with a manifest granting
/// what the bundled copy has, ready for `--plugins DIR`; returns the written paths.
pub fn export(dir: &std::path::Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    for p in ALL {
        let path = dir.join(p.file_name);
        std::fs::write(&path, p.bytes)?;
        let manifest = path.with_extension("toml");
        std::fs::write(&manifest, p.manifest)?;
        written.extend([path, manifest]);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    #[test]
    fn each_embedded_digest_is_that_of_the_embedded_bytes() {
        for plugin in ALL {
            let digest: String = Sha256::digest(plugin.bytes)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            assert_eq!(plugin.sha256, digest, "{}", plugin.name);
        }
    }
}
