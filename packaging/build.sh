#!/usr/bin/env bash
# Builds toolhost once, in release mode and statically linked against musl, and packages that
# one binary for every install channel (docs/install.md):
#
#   OUT/crates/toolhost-VERSION.crate            the crate (`cargo install toolhost`), and the
#   OUT/crates/toolhost-keeper-protocol-VERSION.crate   protocol crate it depends on;
#   OUT/crates/toolhost-VERSION/                 the crate unpacked (`cargo install --path`);
#   OUT/cargo-root/bin/toolhost                  the binary, installed from that crate;
#   OUT/python/toolhost_mcp-VERSION-*.whl        the PyPI wheel (`uvx --from toolhost-mcp`);
#   OUT/npm/toolhost-VERSION.tgz                 the npm launcher package (`npx toolhost`),
#   OUT/npm/toolhost-linux-x64-VERSION.tgz       and its Linux x86-64 binary package;
#   OUT/toolhost-VERSION-linux-x64.mcpb          the MCP bundle (MCPB);
#   OUT/server.json                              the MCP registry's description of all these.
#
# The binary is the one `cargo install` builds from the packaged crate, so the crate package is
# proven by the build itself: it builds offline, from nothing but its own files.
#
# Usage: packaging/build.sh [OUT]   (OUT defaults to $CARGO_TARGET_DIR/dist)
# Needs: rustup (the toolchain of rust-toolchain.toml), python3, npm, zip, and the crates of
# Cargo.lock (fetched here, the only network used).
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}"
out="${1:-$CARGO_TARGET_DIR/dist}"
# The target packaging/install-crate.sh builds for.
target=x86_64-unknown-linux-musl

step() { printf '\n== packaging: %s\n' "$*"; }

version="$(cargo pkgid -p toolhost)"
version="${version##*[#@]}"
# The MCP registry's name for toolhost: the README's visible `mcp-name:` line (crates.io
# shows only visible text, and the registry checks the crate's README for it).
mcp_name="$(sed -n 's/^.*mcp-name: *\([^ `]*\).*$/\1/p' README.md | head -n 1)"
if [ -z "$mcp_name" ]; then
    echo "README.md has no 'mcp-name: NAME' line" >&2
    exit 1
fi
owner="${mcp_name#io.github.}"
owner="${owner%%/*}"
repository="${TOOLHOST_REPOSITORY:-https://github.com/$owner/toolhost}"
echo "toolhost $version, MCP name $mcp_name, repository $repository, output $out"

step "fetch the locked crates (host and guests), so that everything after builds offline"
cargo fetch --locked
cargo fetch --locked --manifest-path guest-tools/Cargo.toml

step "guest components (wasm32-wasip2), as host/build.rs builds them"
# The same command and target directory as host/build.rs, so the build is shared with it.
cargo build --release --locked --offline --target wasm32-wasip2 \
    --manifest-path guest-tools/Cargo.toml \
    --target-dir "$CARGO_TARGET_DIR/wasm-guests" --workspace

step "host/packaged: what the packaged crate builds from"
packaged="$repo/host/packaged"
rm -rf "$packaged"
mkdir -p "$packaged/guests" "$packaged/keeper/keeper" "$packaged/keeper/keeper/protocol"
# Only the bundled policies: the other components are test fixtures.
for guest in default_policy guarded_policy; do
    cp "$CARGO_TARGET_DIR/wasm-guests/wasm32-wasip2/release/$guest.wasm" "$packaged/guests/"
done
cp guest-tools/Cargo.toml "$packaged/guest-workspace.toml"
cp guest-tools/Cargo.lock "$packaged/guest-workspace.lock"
cp rust-toolchain.toml "$packaged/rust-toolchain.toml"
# The pinned toolchains that `toolhost new-policy --lang python|js` writes into a project.
cp guest-tools/python/requirements.txt "$packaged/python-requirements.txt"
cp guest-tools/js/word_count/package-lock.json "$packaged/js-package-lock.json"
# The SDK, and the keeper's sources. `cargo package` leaves out every directory holding a
# Cargo.toml, so each is stored as Cargo.toml.vendored (host/build.rs names them back).
(cd guest-tools/crates && tar --exclude=target -cf - toolhost-policy) | tar -xf - -C "$packaged"
mv "$packaged/toolhost-policy" "$packaged/sdk"
mv "$packaged/sdk/Cargo.toml" "$packaged/sdk/Cargo.toml.vendored"
cp -r keeper/src "$packaged/keeper/keeper/src"
cp keeper/Cargo.toml "$packaged/keeper/keeper/Cargo.toml.vendored"
cp -r keeper/protocol/src "$packaged/keeper/keeper/protocol/src"
cp keeper/protocol/Cargo.toml "$packaged/keeper/keeper/protocol/Cargo.toml.vendored"
# The keeper's workspace: the two crates, and the values they inherit from this repository's
# workspace manifest, copied from it.
{
    printf '# The keeper and its protocol crate, as toolhost'"'"'s packaged crate builds them.\n'
    printf '[workspace]\nresolver = "3"\nmembers = ["keeper", "keeper/protocol"]\n\n'
    awk '/^\[/ { keep = ($0 == "[workspace.package]" || $0 == "[workspace.lints.clippy]") }
         keep' Cargo.toml
} >"$packaged/keeper/Cargo.toml.vendored"
# Its lock file: this repository's, trimmed by cargo to the keeper's dependencies (at the
# versions locked here).
lock_dir="$(mktemp -d)"
trap 'rm -rf "$lock_dir"' EXIT
cp -r "$packaged/keeper/." "$lock_dir/"
find "$lock_dir" -name Cargo.toml.vendored -execdir mv Cargo.toml.vendored Cargo.toml \;
cp Cargo.lock "$lock_dir/Cargo.lock"
cargo metadata --offline --format-version 1 --manifest-path "$lock_dir/Cargo.toml" >/dev/null
cp "$lock_dir/Cargo.lock" "$packaged/keeper/Cargo.lock"

step "crate packages (cargo package)"
# Not verified by `cargo package` (a debug build of everything): the release install below
# builds the same package.
cargo package --locked --offline --no-verify --allow-dirty \
    -p toolhost-keeper-protocol -p toolhost
# Everything but the unpacked crates, which are kept while their content is the same.
rm -rf "$out/python" "$out/npm" "$out/cargo-root" "$out"/*.mcpb "$out/server.json"
mkdir -p "$out/crates" "$out/python" "$out/npm"
# cargo package gives every file the same old time, and cargo tells a fresh build by times:
# unpacked as they are, changed sources would look older than the last build. So they are
# unpacked with the current time (-m), and replace the last ones only if something changed
# (but the commit they were packaged from).
for crate in toolhost toolhost-keeper-protocol; do
    cp "$CARGO_TARGET_DIR/package/$crate-$version.crate" "$out/crates/"
    unpacked="$(mktemp -d)"
    tar -m -xzf "$out/crates/$crate-$version.crate" -C "$unpacked"
    if ! diff -rq -x .cargo_vcs_info.json "$unpacked/$crate-$version" "$out/crates/$crate-$version" \
        >/dev/null 2>&1; then
        rm -rf "$out/crates/$crate-$version"
        mv "$unpacked/$crate-$version" "$out/crates/"
    fi
    rm -rf "$unpacked"
done

step "the release build: cargo install from the packaged crate, offline, for $target"
# Until toolhost-keeper-protocol is on crates.io, the packaged one stands in for it.
# (packaging/install-crate.sh also says how wasmtime's C file is compiled for musl.)
# Its bin directory on the PATH for the install alone: cargo warns when the root it installs
# into is not, and this one is ours, not the user's.
PATH="$out/cargo-root/bin:$PATH" "$repo/packaging/install-crate.sh" "$out/crates" "$out/cargo-root"
binary="$out/cargo-root/bin/toolhost"
"$binary" --version

step "Python wheel (toolhost-mcp)"
python3 packaging/wheel.py --binary "$binary" --version "$version" \
    --readme packaging/package-readme.md --mcp-name "$mcp_name" \
    --repository "$repository" --out "$out/python"

step "npm packages (toolhost, @toolhost/linux-x64)"
npm_stage="$out/npm/stage"
for package in toolhost linux-x64; do
    mkdir -p "$npm_stage/$package"
    cp -r "packaging/npm/$package/." "$npm_stage/$package/"
    sed -e "s|@VERSION@|$version|g" -e "s|@MCP_NAME@|$mcp_name|g" \
        -e "s|@REPOSITORY@|$repository|g" \
        "packaging/npm/$package/package.json" >"$npm_stage/$package/package.json"
    sed -e "s|@MCP_NAME@|$mcp_name|g" -e "s|@REPOSITORY@|$repository|g" \
        packaging/package-readme.md >"$npm_stage/$package/README.md"
done
mkdir -p "$npm_stage/linux-x64/bin"
install -m 755 "$binary" "$npm_stage/linux-x64/bin/toolhost"
for package in linux-x64 toolhost; do
    (cd "$npm_stage/$package" && npm pack --silent --pack-destination "$out/npm" >/dev/null)
done
rm -rf "$npm_stage"

step "MCP bundle (.mcpb)"
mcpb_stage="$out/mcpb-stage"
mkdir -p "$mcpb_stage/server"
sed -e "s|@VERSION@|$version|g" -e "s|@REPOSITORY@|$repository|g" \
    packaging/mcpb/manifest.json >"$mcpb_stage/manifest.json"
install -m 755 "$binary" "$mcpb_stage/server/toolhost"
mcpb="$out/toolhost-$version-linux-x64.mcpb"
# No directory entries (-D): the official unpacker (`mcpb unpack`) fails on them. The files
# keep their Unix modes, which it restores: the binary stays executable.
(cd "$mcpb_stage" && zip -q -X -D -r "$mcpb" manifest.json server)
rm -rf "$mcpb_stage"

step "server.json (the MCP registry)"
mcpb_sha256="$(sha256sum "$mcpb" | cut -d' ' -f1)"
sed -e "s|@VERSION@|$version|g" -e "s|@MCP_NAME@|$mcp_name|g" \
    -e "s|@REPOSITORY@|$repository|g" -e "s|@MCPB_SHA256@|$mcpb_sha256|g" \
    -e "s|@MCPB_FILE@|$(basename "$mcpb")|g" \
    packaging/server.json >"$out/server.json"

step "done"
find "$out" -maxdepth 2 -type f \( -name '*.crate' -o -name '*.whl' -o -name '*.tgz' \
    -o -name '*.mcpb' -o -name server.json -o -path '*/bin/toolhost' \) -printf '%p %s bytes\n'
find "$out/cargo-root/bin" -type f -printf '%p %s bytes\n'
