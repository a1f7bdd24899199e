#!/usr/bin/env python3
"""Write the Python wheel `toolhost-mcp` that carries the static `toolhost` binary.

A wheel is a zip file (PEP 427). This one holds the binary as a script
(`toolhost_mcp-VERSION.data/scripts/toolhost`), which pip, uv and pipx install as the
`toolhost` command, and the metadata in `toolhost_mcp-VERSION.dist-info/`. Its one Python
module gives the command `toolhost-mcp`, the package's own name, which runs `toolhost`: so
`uvx toolhost-mcp serve` works as well as `uvx --from toolhost-mcp toolhost serve`. The binary is linked statically against musl, so the wheel is tagged for both glibc
(manylinux 2.17 and later) and musl (musllinux 1.1 and later) Linux on x86-64.

Standard library only, so that packaging needs nothing from PyPI.
"""

import argparse
import base64
import hashlib
import os
import stat
import sys
import zipfile

NAME = "toolhost-mcp"
DIST = "toolhost_mcp"
TAGS = [
    "py3-none-manylinux_2_17_x86_64",
    "py3-none-manylinux2014_x86_64",
    "py3-none-musllinux_1_1_x86_64",
]
# `toolhost-mcp`: replaces itself with the `toolhost` installed beside it.
MODULE = '''"""The `toolhost-mcp` command: runs `toolhost`, the binary installed with it."""

import os
import sys
import sysconfig


def main():
    here = os.path.dirname(os.path.abspath(sys.argv[0]))
    for directory in (here, sysconfig.get_path("scripts")):
        binary = os.path.join(directory, "toolhost")
        if os.access(binary, os.X_OK):
            os.execv(binary, [binary] + sys.argv[1:])
    sys.exit("toolhost-mcp: the toolhost binary is not installed beside " + sys.argv[0])
'''

# Every file gets this time: the wheel's bytes depend only on its contents.
EPOCH = (2020, 1, 1, 0, 0, 0)


def record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"{path},sha256={digest.decode()},{len(data)}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--binary", required=True, help="the static toolhost executable")
    parser.add_argument("--version", required=True)
    parser.add_argument("--readme", required=True, help="the package description (Markdown)")
    parser.add_argument("--mcp-name", required=True, help="the MCP registry's server name")
    parser.add_argument("--repository", required=True, help="the source repository's URL")
    parser.add_argument("--out", required=True, help="the directory to write the wheel in")
    args = parser.parse_args()

    with open(args.binary, "rb") as f:
        binary = f.read()
    if binary[:4] != b"\x7fELF":
        print(f"{args.binary} is not an ELF executable", file=sys.stderr)
        return 1
    with open(args.readme, encoding="utf-8") as f:
        readme = (
            f.read()
            .replace("@MCP_NAME@", args.mcp_name)
            .replace("@REPOSITORY@", args.repository)
        )
    if f"mcp-name: {args.mcp_name}" not in readme:
        print(f"{args.readme} has no 'mcp-name: {args.mcp_name}' line", file=sys.stderr)
        return 1

    metadata = "\n".join(
        [
            "Metadata-Version: 2.1",
            f"Name: {NAME}",
            f"Version: {args.version}",
            "Summary: toolhost: a shell for AI agents over MCP, with commands confined and "
            "tool policies in sandboxed WebAssembly",
            "License: Apache-2.0",
            f"Project-URL: Source, {args.repository}",
            "Requires-Python: >=3.8",
            "Classifier: Operating System :: POSIX :: Linux",
            "Classifier: Programming Language :: Rust",
            "Description-Content-Type: text/markdown",
            "",
            readme,
        ]
    )
    wheel = "\n".join(
        ["Wheel-Version: 1.0", "Generator: toolhost packaging/wheel.py", "Root-Is-Purelib: false"]
        + [f"Tag: {tag}" for tag in TAGS]
    ) + "\n"

    info = f"{DIST}-{args.version}.dist-info"
    files = [
        (f"{DIST}-{args.version}.data/scripts/toolhost", binary, 0o755),
        (f"{DIST}/__init__.py", MODULE.encode(), 0o644),
        (f"{info}/METADATA", metadata.encode(), 0o644),
        (f"{info}/entry_points.txt", b"[console_scripts]\ntoolhost-mcp = toolhost_mcp:main\n", 0o644),
        (f"{info}/WHEEL", wheel.encode(), 0o644),
    ]
    record = [record_line(path, data) for path, data, _ in files] + [f"{info}/RECORD,,"]
    files.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode(), 0o644))

    platform = ".".join(tag.split("-")[2] for tag in TAGS)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"{DIST}-{args.version}-py3-none-{platform}.whl")
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data, mode in files:
            entry = zipfile.ZipInfo(name, date_time=EPOCH)
            entry.external_attr = (stat.S_IFREG | mode) << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(entry, data)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
