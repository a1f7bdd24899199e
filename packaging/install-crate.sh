#!/usr/bin/env bash
# Installs toolhost from its packaged crate, offline, the way `cargo install toolhost` will
# once the crates are on crates.io: `cargo install --path CRATES/toolhost-VERSION --root ROOT`.
# Until toolhost-keeper-protocol is published, the packaged one in CRATES stands in for it (a
# `[patch.crates-io]` given on the command line). The build is static (musl), and shares
# $CARGO_TARGET_DIR with every other build.
#
# Usage: packaging/install-crate.sh CRATES ROOT   (CRATES: packaging/build.sh's OUT/crates)
set -euo pipefail
if [ "$#" -ne 2 ]; then
    echo "usage: $0 CRATES ROOT" >&2
    exit 2
fi
crates="$(cd "$1" && pwd)"
root="$2"
host="$(find "$crates" -mindepth 1 -maxdepth 1 -type d -name 'toolhost-[0-9]*' | head -n 1)"
protocol="$(find "$crates" -mindepth 1 -maxdepth 1 -type d -name 'toolhost-keeper-protocol-*' | head -n 1)"
if [ -z "$host" ] || [ -z "$protocol" ]; then
    echo "$crates holds no unpacked toolhost and toolhost-keeper-protocol crates" >&2
    exit 1
fi
if ! command -v musl-gcc >/dev/null && ! command -v x86_64-linux-musl-gcc >/dev/null; then
    # wasmtime compiles one small C file (helpers.c: weak-symbol tests, no libc calls). With
    # no musl C compiler (musl-gcc, from Debian's musl-tools), the system's compiles it: it
    # includes only stdbool.h, stdint.h and stdlib.h (for NULL), so nothing of glibc ends up in
    # the binary.
    export CC_x86_64_unknown_linux_musl="${CC_x86_64_unknown_linux_musl:-cc}"
fi
# The keeper's nested build (host/build.rs) reads CARGO_NET_OFFLINE too.
# Stripped: the symbols and debug information are a fifth of the binary, and no user of a
# package reads them.
CARGO_NET_OFFLINE=true cargo install --locked --offline --path "$host" --root "$root" \
    --target x86_64-unknown-linux-musl --config 'profile.release.strip=true' \
    --config "patch.crates-io.toolhost-keeper-protocol.path=\"$protocol\""
