"""Drive `toolhost serve` with the official MCP Python SDK, over stdio and streamable HTTP.

Usage: mcp_client.py TOOLHOST_BINARY GROUP

GROUP is one of the scenario groups below (`tools`, `resources`, `cancel`, `progress`, `idle`,
`origin`, `logging`, `cli`, `malformed`, `tasks_2026`, `roots`, `asking`); each runs its checks over every
transport it concerns and prints `python mcp client: GROUP ok`, or exits non-zero with a
message on the first mismatch.
HTTP servers are started here (`toolhost serve --http 127.0.0.1:0 --token-file F`, the bound
address read from the server's announcement) and stopped at the end of their scenario; they
also die with this process (`PR_SET_PDEATHSIG`). If `TOOLHOST_EXPECT_MCP` is set, the
installed `mcp` must be that version. The `logging` group loads the hostile fixture component,
whose path is in `TOOLHOST_HOSTILE_COMPONENT`.

The SDK's real client classes are used: `ClientSession` over `stdio_client` and over
`streamable_http_client` (`streamablehttp_client` in older 1.x releases). Field names are
read by their 2.x (snake_case) or 1.x (camelCase) spelling, but the `cancel` group needs a
client that sends `notifications/cancelled` when a call is cancelled: 2.x does, 1.30 does
not (its call just stops waiting, and the command runs on until the session ends).

The `malformed` group runs a `ClientSession` over a transport of its own (`RawLines`: the
stream pair the session takes, around a `toolhost serve` subprocess) that also writes raw
lines and keeps the answers to them from the session. The `tasks_2026` group needs the 2.x
`Client`, which speaks revision 2026-07-28 itself (`mode="auto"`: a `server/discover` probe,
then the revision, client info and capabilities in every request's `_meta`). The SDK has no
client of the Tasks extension (`io.modelcontextprotocol/tasks`; its task types are marked
2025-11-25 only and are in none of its 2026 method tables), so `TasksExtension` here is one,
written on the SDK's extension hooks: a `ClientExtension` declaring the extension with a
`ResultClaim` for `"resultType": "task"`, whose resolver polls `tasks/get`, sent with
`ClientSession.send_request` and the SDK's `GetTaskRequest`/`CancelTaskRequest` models (made
to name the task in the `Mcp-Name` header, which a 2026-07-28 HTTP server requires for
`tasks/*` and those 2025-11-25 models do not send).

The `roots` group starts its servers in `/` with `--workspaces-under PARENT`, PARENT a fresh
directory under `/var/tmp` (not `/tmp`, which confined commands see privately, nor the home
directory, whose caches they may write). Its client offers roots through the SDK's
`list_roots_callback` and announces a change with `send_roots_list_changed`.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import inspect
import json
import os
import pathlib
import queue
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from itertools import count, pairwise
from typing import Any, Literal

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client import stdio as stdio_module
from mcp.client import streamable_http as _streamable_http
from mcp.client.stdio import stdio_client
from pydantic import ConfigDict, FileUrl

try:  # 2.x: the SDK's message types, the high-level `Client` and its extension hooks
    import mcp_types as types
    from mcp import Client
    from mcp.client.extension import ClientExtension, ResultClaim
    from mcp.shared.message import SessionMessage
except ImportError:  # 1.x: only the groups that need none of these run
    types = None  # type: ignore[assignment]
    Client = ClientExtension = ResultClaim = SessionMessage = None  # type: ignore[assignment,misc]

try:  # 2.x, and 1.x from 1.2x on
    from mcp.shared.exceptions import MCPError as McpError
except ImportError:  # older 1.x
    from mcp.shared.exceptions import McpError  # type: ignore[attr-defined,no-redef]

EXPECTED_TOOLS = {
    "execute",
    "process_output",
    "process_input",
    "process_list",
    "process_signal",
}

# The hints each tool must carry (True: must be true; False: must not be true).
EXPECTED_HINTS: dict[str, dict[str, bool]] = {
    "execute": {"destructive": True, "open_world": True, "read_only": False},
    "process_input": {"destructive": True, "open_world": True, "read_only": False},
    "process_signal": {"destructive": True, "read_only": False},
    "process_output": {"read_only": True, "idempotent": False},
    "process_list": {"read_only": True, "idempotent": True},
}

RESOURCE_NOT_FOUND = -32002
PAGE = 256 * 1024
OUTPUT_URI = re.compile(r"^toolhost://process/([^/?]+)/output$")
TEMPLATE = "toolhost://process/{id}/output{?offset,length,line,lines}"
TOKEN = "python-sdk-test-token-" + os.urandom(8).hex()

CLOSING_STDIN = "closing stdin"

HOSTILE_MANIFEST = """[grants]
process = true
[limits]
cpu_time = "500ms"
wall_time = "5s"
"""
# How long a session must stay without a log message it should not get (after a ping).
LOG_QUIET = 0.5

_markers = count()


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def field(obj: Any, snake: str, camel: str) -> Any:
    """An attribute by its SDK 2.x (snake_case) or 1.x (camelCase) name."""
    return getattr(obj, snake) if hasattr(obj, snake) else getattr(obj, camel, None)


def check(condition: Any, message: str) -> None:
    """Like `assert`, but not stripped by `python -O`."""
    if not condition:
        raise AssertionError(message)


def result_json(result: Any) -> dict[str, Any]:
    """The JSON object of a tool result's first text item; the result must not be an error."""
    check(not field(result, "is_error", "isError"), f"tool error: {result}")
    texts = [item.text for item in result.content if item.type == "text"]
    check(texts, f"no text content: {result}")
    return json.loads(texts[0])


# ---- processes -------------------------------------------------------------------------------


def marker() -> str:
    """A number unique to this run, for `sleep 300.MARKER` (a valid duration) and its scan."""
    return f"{os.getpid()}{next(_markers):03d}{int.from_bytes(os.urandom(2), 'big'):05d}"


def processes_with(needle: str) -> list[int]:
    """Live (not zombie) processes whose command line contains `needle`."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            if needle not in cmdline:
                continue
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            pids.append(int(entry))
    return pids


def sleeps_with(needle: str) -> list[int]:
    """Live `sleep` processes whose arguments contain `needle` (not the shell running one)."""
    found = []
    for pid in processes_with(needle):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if os.path.basename(argv[0]) == b"sleep":
            found.append(pid)
    return found


async def wait_until(what: str, limit: float, condition: Callable[[], Any]) -> float:
    """Poll `condition` every 20 ms until it holds; fail naming `what` after `limit` seconds.
    Returns the seconds it took."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > limit:
            raise AssertionError(f"{what}: not within {limit} s")
        await anyio.sleep(0.02)
    return time.monotonic() - start


# ---- transports ------------------------------------------------------------------------------


# PR_SET_PDEATHSIG, resolved before any fork so the child only makes the call.
_PRCTL = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)


def _die_with_parent() -> None:
    """In a child before exec: get SIGTERM when the thread that started it ends. Children are
    started from the main thread only (the event loop's), which lives as long as this process."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGTERM)


class HttpServer:
    """`toolhost serve --http 127.0.0.1:0 --token-file F [EXTRA...]`, started and stopped."""

    def __init__(self, binary: str, extra: list[str]):
        check(threading.current_thread() is threading.main_thread(), "start servers from main")
        self._dir = tempfile.TemporaryDirectory(prefix="toolhost-py-http-")
        token_file = os.path.join(self._dir.name, "token")
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(TOKEN + "\n")
        self.token = TOKEN
        self.url = ""
        self.host = ""
        self.port = 0
        self.process = subprocess.Popen(
            [binary, "serve", "--http", "127.0.0.1:0", "--token-file", token_file, *extra],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - only a prctl call, resolved before
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        """Forward the server's stderr, and queue its lines for `wait_ready`."""
        assert self.process.stderr is not None
        for line in self.process.stderr:
            print(f"server: {line.rstrip()}", file=sys.stderr, flush=True)
            self._lines.put(line)
        self._lines.put(None)

    def wait_ready(self, limit: float = 60) -> None:
        """Blocking: read the bound address from the server's announcement, then wait until
        it accepts connections."""
        deadline = time.monotonic() + limit
        url = None
        while url is None:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"the HTTP server did not announce its address in {limit} s")
            if line is None:
                raise AssertionError(f"the HTTP server exited ({self.process.wait()})")
            url = next((w for w in line.split() if w.startswith("http://")), None)
        match = re.match(r"^http://([^/:]+):(\d+)", url)
        if match is None:
            raise AssertionError(f"announced address {url!r}")
        self.host, self.port = match.group(1), int(match.group(2))
        self.url = f"http://{self.host}:{self.port}/mcp"
        while True:
            try:
                socket.create_connection((self.host, self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"the HTTP server does not accept on {self.url}")
                time.sleep(0.02)
        log(f"HTTP server at {self.url} (pid {self.process.pid})")

    def stop(self) -> None:
        """Blocking: SIGTERM, then wait for the exit (SIGKILL after 15 s)."""
        try:
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
                    raise AssertionError("the HTTP server did not stop on SIGTERM within 15 s")
        finally:
            self._dir.cleanup()


@asynccontextmanager
async def http_server(binary: str, *extra: str) -> AsyncIterator[HttpServer]:
    server = HttpServer(binary, list(extra))
    try:
        await anyio.to_thread.run_sync(server.wait_ready)
        yield server
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(server.stop)


@asynccontextmanager
async def stdio_session(
    binary: str,
    *extra: str,
    logging_callback: Any = None,
    list_roots_callback: Any = None,
    elicitation_callback: Any = None,
    cwd: str | None = None,
    errlog: Any = None,
) -> AsyncIterator[ClientSession]:
    """A session with a fresh `toolhost serve [EXTRA...]` over stdio, started in `cwd` (None:
    this process's). With `list_roots_callback` the SDK declares the `roots` capability, with
    `elicitation_callback` the `elicitation` one (form and URL mode). The server's stderr goes
    to `errlog` (None: this process's)."""
    # The SDK passes only a few variables by default; the cache location and log level matter.
    params = StdioServerParameters(
        command=binary, args=["serve", *extra], env=dict(os.environ), cwd=cwd
    )
    async with (
        stdio_client(params, errlog=errlog or sys.stderr) as (read, write),
        ClientSession(
            read,
            write,
            logging_callback=logging_callback,
            list_roots_callback=list_roots_callback,
            elicitation_callback=elicitation_callback,
        ) as session,
    ):
        await initialize(session)
        yield session


@asynccontextmanager
async def http_session(
    server: HttpServer, logging_callback: Any = None
) -> AsyncIterator[ClientSession]:
    """A new MCP session on `server`, with the SDK's streamable HTTP client."""
    headers = {"Authorization": f"Bearer {server.token}"}
    new_api = getattr(_streamable_http, "streamable_http_client", None)
    if new_api is not None and "http_client" in inspect.signature(new_api).parameters:
        from mcp.shared._httpx_utils import create_mcp_http_client

        async with (
            create_mcp_http_client(headers=headers) as client,
            new_api(server.url, http_client=client) as streams,
            ClientSession(streams[0], streams[1], logging_callback=logging_callback) as session,
        ):
            await initialize(session)
            yield session
    else:  # 1.x before streamable_http_client
        old_api = _streamable_http.streamablehttp_client  # type: ignore[attr-defined]
        async with (
            old_api(server.url, headers=headers) as streams,
            ClientSession(streams[0], streams[1], logging_callback=logging_callback) as session,
        ):
            await initialize(session)
            yield session


async def initialize(session: ClientSession) -> None:
    init = await session.initialize()
    server_info = field(init, "server_info", "serverInfo")
    check(server_info.name == "toolhost", f"server info: {server_info}")


# ---- scenarios -------------------------------------------------------------------------------


async def check_tools(session: ClientSession) -> None:
    """The five tools, with titles and the annotations clients decide approval by."""
    tools = await session.list_tools()
    by_name = {tool.name: tool for tool in tools.tools}
    check(set(by_name) == EXPECTED_TOOLS, f"tools: {sorted(by_name)}")
    for name, expected in EXPECTED_HINTS.items():
        tool = by_name[name]
        annotations = tool.annotations
        if annotations is None:
            raise AssertionError(f"{name}: no annotations")
        title = tool.title or annotations.title
        check(title and title.strip() and title != name, f"{name}: no title ({title!r})")
        for hint, wanted in expected.items():
            camel = hint.split("_")[0] + "".join(w.title() for w in hint.split("_")[1:])
            value = field(annotations, f"{hint}_hint", f"{camel}Hint")
            if wanted:
                check(value is True, f"{name}: {hint}Hint must be true, is {value!r}")
            else:
                check(value is not True, f"{name}: {hint}Hint must not be true, is {value!r}")
    schema = field(by_name["execute"], "input_schema", "inputSchema")
    check("command" in schema["properties"], f"execute schema: {schema}")


async def check_echo(session: ClientSession) -> None:
    result = await session.call_tool("execute", {"command": "echo hello"})
    text = result_json(result)
    check(text["output"].strip() == "hello", f"echo: {text}")
    check(text["exit_code"] == 0, f"echo: {text}")
    structured = field(result, "structured_content", "structuredContent")
    if structured is not None:
        check(structured == text, f"structured content {structured} != text {text}")
    bad = await session.call_tool("execute", {"bogus": 1})
    check(field(bad, "is_error", "isError"), f"bad arguments are no tool error: {bad}")


def resource_text(result: Any) -> tuple[str, dict[str, Any]]:
    """The text and `_meta` of a read's single text item."""
    check(len(result.contents) == 1, f"one content item expected: {result.contents}")
    item = result.contents[0]
    check(hasattr(item, "text"), f"not text: {item}")
    meta = getattr(item, "meta", None) or {}
    return item.text, meta


async def check_resources(session: ClientSession) -> str:
    """A cut output links its full output resource; list, template, line range and paging.
    Returns the resource's URI."""
    result = await session.call_tool("execute", {"command": "seq 1 300000", "timeout": "60s"})
    text = result_json(result)
    check(text.get("truncated"), f"the output of seq 1 300000 is not cut: {text.keys()}")
    links = [item for item in result.content if item.type == "resource_link"]
    check(len(links) == 1, f"one resource_link expected in {[i.type for i in result.content]}")
    uri = str(links[0].uri)
    check(OUTPUT_URI.match(uri), f"resource_link uri {uri!r}")
    check(field(links[0], "mime_type", "mimeType") == "text/plain", f"link: {links[0]}")

    listed = await session.list_resources()
    uris = [str(r.uri) for r in listed.resources]
    check(uri in uris, f"{uri} not in resources/list: {uris}")

    templates = await session.list_resource_templates()
    patterns = [
        field(t, "uri_template", "uriTemplate")
        for t in field(templates, "resource_templates", "resourceTemplates")
    ]
    check(TEMPLATE in patterns, f"template {TEMPLATE} not in {patterns}")

    lines, _ = resource_text(await session.read_resource(f"{uri}?line=299999&lines=2"))
    check(lines == "299999\n300000\n", f"lines 299999-300000: {lines!r}")

    expected = "".join(f"{i}\n" for i in range(1, 300001))
    first, meta = resource_text(await session.read_resource(uri))
    check(len(first.encode()) <= PAGE, f"first page has {len(first.encode())} bytes > {PAGE}")
    check(first and expected.startswith(first), f"first page: {first[:40]!r}...")
    check("toolhost/next" in meta, f"the first page names no next page: {meta}")
    pages, whole = 1, first
    while "toolhost/next" in meta:
        next_uri = meta["toolhost/next"]
        check(next_uri.startswith(uri + "?"), f"next page {next_uri!r} of {uri}")
        page, meta = resource_text(await session.read_resource(next_uri))
        check(page, f"empty page at {next_uri}")
        check(len(page.encode()) <= PAGE, f"page {next_uri} has {len(page.encode())} bytes")
        whole += page
        pages += 1
        check(pages < 100, "more than 100 pages")
    check(
        whole == expected,
        f"following the next links gives {len(whole)} chars, not the {len(expected)} of the output",
    )
    log(f"  read {len(whole)} bytes in {pages} pages")
    return uri


async def check_resource_isolation(server: HttpServer, uri: str) -> None:
    """Another HTTP session neither lists nor reads this session's output resource."""
    async with http_session(server) as other:
        listed = await other.list_resources()
        check(listed.resources == [], f"another session lists {listed.resources}")
        for asked in (uri, f"{uri}?line=1&lines=2"):
            try:
                read = await other.read_resource(asked)
            except McpError as e:
                code = e.error.code
                check(code == RESOURCE_NOT_FOUND, f"reading {asked}: code {code}, not -32002")
            else:
                raise AssertionError(f"another session read {asked}: {read}")


async def check_cancel(session: ClientSession) -> None:
    """Cancelling a call (the SDK sends notifications/cancelled) stops its command promptly;
    the session keeps serving."""
    mark = marker()
    needle = f"300.{mark}"
    outcome: dict[str, Any] = {}
    scope = anyio.CancelScope()

    async def call() -> None:
        with scope:
            outcome["result"] = await session.call_tool(
                "execute", {"command": f"sleep 300.{mark} # {mark}", "timeout": "120s"}
            )

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        await wait_until("the command's process appears", 20, lambda: processes_with(needle))
        scope.cancel()
    check("result" not in outcome, f"the call returned instead of being cancelled: {outcome}")
    took = await wait_until(
        f"no process with {needle} left after the cancellation",
        5,
        lambda: not processes_with(needle),
    )
    log(f"  processes gone {took:.2f} s after the cancellation")
    after = result_json(await session.call_tool("execute", {"command": "echo after-cancel"}))
    check(after["output"].strip() == "after-cancel", f"call after the cancellation: {after}")


async def check_session_end(open_session: Callable[[], Any], how: str) -> None:
    """A background process ends with the session that started it (`how` ends it)."""
    mark = marker()
    needle = f"300.{mark}"
    async with open_session() as session:
        started = result_json(
            await session.call_tool(
                "execute", {"command": f"sleep 300.{mark} # {mark}", "run_in_background": True}
            )
        )
        check(started.get("background_process_id"), f"not in the background: {started}")
        await wait_until("the background process appears", 10, lambda: processes_with(needle))
        closing = time.monotonic()
    closed = time.monotonic() - closing
    log(f"  the session closed in {closed:.2f} s ({how})")
    if how == CLOSING_STDIN:
        # The SDK closes stdin, waits this long for the server to exit, then kills its process
        # group (which would also end the commands): the server must have exited by itself.
        grace = getattr(stdio_module, "PROCESS_TERMINATION_TIMEOUT", 2.0)
        check(closed < grace, f"the server did not exit within {grace} s of its stdin closing")
    took = await wait_until(
        f"the background process is terminated after {how}",
        10,
        lambda: not processes_with(needle),
    )
    log(f"  background process gone {took:.2f} s after {how}")


async def check_progress(session: ClientSession) -> None:
    """A silent foreground command gets heartbeat progress at least every 5 s."""
    seen: list[tuple[float, float, Any, Any]] = []
    start = time.monotonic()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((time.monotonic() - start, progress, total, message))

    result = await session.call_tool(
        "execute",
        {"command": "sleep 12; echo done", "timeout": "30s"},
        progress_callback=on_progress,
    )
    end = time.monotonic() - start
    text = result_json(result)
    for at, progress, total, message in seen:
        log(f"  progress at {at:.1f} s: {progress} / {total}: {message!r}")
    check(text["output"].strip() == "done" and text["exit_code"] == 0, f"result: {text}")
    check(end >= 11.5, f"the call took {end:.1f} s; sleep 12 cannot have run")
    silent = [s for s in seen if s[0] < 11.5]
    check(len(silent) >= 2, f"{len(silent)} progress notifications during the silent 12 s: {seen}")
    values = [s[1] for s in seen]
    check(all(a < b for a, b in pairwise(values)), f"progress does not increase: {values}")
    # At least every 5 s (with slack for a loaded machine), from the start to the result.
    times = [0.0] + [s[0] for s in seen] + [end]
    gaps = [b - a for a, b in pairwise(times)]
    check(max(gaps) <= 7.0, f"a gap of {max(gaps):.1f} s without progress: {seen}")
    for at, _, _, message in silent:
        # A heartbeat says how long the command has run.
        says_time = message and re.search(r"\d+(\.\d+)?\s?s\b", message)
        check(says_time, f"the heartbeat at {at:.1f} s does not say the time: {message!r}")


async def check_origin(server: HttpServer, cases: list[tuple[str | None, int]]) -> None:
    """Each (Origin, status): a raw `initialize` POST with that Origin header (None: without
    one) and a valid token gets that status."""
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "origin-check", "version": "0"},
            },
        }
    ).encode()

    def post(origin: str | None) -> int:
        request = urllib.request.Request(server.url, data=body, method="POST")
        request.add_header("Content-Type", "application/json")
        request.add_header("Accept", "application/json, text/event-stream")
        request.add_header("Authorization", f"Bearer {server.token}")
        if origin is not None:
            request.add_header("Origin", origin)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                response.read(1)
                return response.status
        except urllib.error.HTTPError as e:
            return e.code

    for origin, wanted in cases:
        status = await anyio.to_thread.run_sync(post, origin)
        log(f"  Origin {origin}: {status}")
        check(status == wanted, f"Origin {origin!r}: status {status}, expected {wanted}")


class LogMessages:
    """A session's `logging_callback`: the `notifications/message` params it received."""

    def __init__(self) -> None:
        self.received: list[Any] = []

    async def __call__(self, params: Any) -> None:
        self.received.append(params)

    def __str__(self) -> str:
        return repr([(m.level, m.logger, m.data) for m in self.received])


def hostile_plugins(directory: str) -> str:
    """`directory` with the hostile fixture component (its path in
    `TOOLHOST_HOSTILE_COMPONENT`) as `hostile.wasm` and its manifest `hostile.toml`."""
    component = os.environ.get("TOOLHOST_HOSTILE_COMPONENT", "")
    check(os.path.isfile(component), f"TOOLHOST_HOSTILE_COMPONENT {component!r} is no file")
    shutil.copyfile(component, os.path.join(directory, "hostile.wasm"))
    with open(os.path.join(directory, "hostile.toml"), "w") as f:
        f.write(HOSTILE_MANIFEST)
    return directory


def initialize_capabilities(session: ClientSession) -> Any:
    """The capabilities the server's `initialize` result declared."""
    init = getattr(session, "initialize_result", None)
    if init is not None:
        return init.capabilities
    return session.get_server_capabilities()  # type: ignore[attr-defined]  # 1.x


async def spin(session: ClientSession) -> None:
    """Call the hostile plugin's `spin`, which its CPU limit stops (an error result)."""
    result = await session.call_tool("spin", {})
    check(field(result, "is_error", "isError"), f"spin is no error result: {result}")


def check_limit_line(messages: LogMessages) -> None:
    """`messages` holds exactly one line, the warning that `spin` hit the hostile plugin's
    limit, without the session's own scope."""
    check(len(messages.received) == 1, f"one log message expected: {messages}")
    line = messages.received[0]
    log(f"  log message: {line.level} {line.logger}: {line.data}")
    check(line.level == "warning", f"level {line.level!r}, not 'warning': {messages}")
    data = line.data
    check(isinstance(data, dict), f"data is no object: {messages}")
    text = data.get("message")
    check(isinstance(text, str), f"no data.message: {messages}")
    check("limit" in text and "hostile" in text, f"the message names no limit or plugin: {text!r}")
    check(data.get("tool") == "spin", f"the line names tool {data.get('tool')!r}: {messages}")
    check("scope" not in data, f"the session's own scope is repeated: {data}")


async def no_more_messages(session: ClientSession, messages: LogMessages, had: int) -> None:
    """A ping, then `LOG_QUIET` seconds in which no log message may arrive beyond the `had`
    there are (fails at the first)."""
    await session.send_ping()
    deadline = time.monotonic() + LOG_QUIET
    while True:
        check(len(messages.received) == had, f"{had} log messages expected: {messages}")
        if time.monotonic() >= deadline:
            return
        await anyio.sleep(0.02)


async def set_log_level(session: ClientSession, level: str) -> None:
    """`logging/setLevel`, without the SDK's warning that logging is deprecated after
    2025-11-25 (SEP-2577): the server offers it to the clients of revisions that have it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The logging capability is deprecated")
        await session.set_logging_level(level)  # type: ignore[arg-type]


async def check_logging(session: ClientSession, messages: LogMessages) -> None:
    """The `logging` capability is declared; nothing is sent before a level is set; after
    `warning` is set, `spin` hitting its CPU limit arrives as one warning."""
    capabilities = initialize_capabilities(session)
    check(capabilities.logging is not None, f"no logging capability: {capabilities}")
    await spin(session)
    await no_more_messages(session, messages, 0)
    await set_log_level(session, "warning")
    await spin(session)
    await wait_until("the limit hit arrives as a log message", 10, lambda: messages.received)
    # Only this one: the spin before the level was set is not sent late either.
    await no_more_messages(session, messages, 1)
    check_limit_line(messages)


# ---- the one-shot CLI ------------------------------------------------------------------------

SEQ_N = 300000


async def check_cli_output_file(binary: str) -> None:
    """`toolhost --state-dir DIR call execute '{"command":"seq 1 300000"}'` names its full
    output as `output_file` in DIR, and that file holds all of it once the CLI has exited."""
    expected = "".join(f"{i}\n" for i in range(1, SEQ_N + 1)).encode()
    with tempfile.TemporaryDirectory(prefix="toolhost-py-cli-") as state:
        start = time.monotonic()
        done = await anyio.run_process(
            [binary, "--state-dir", state, "call", "execute", json.dumps({"command": f"seq 1 {SEQ_N}"})],
            check=False,
        )
        took = time.monotonic() - start
        stderr = done.stderr.decode(errors="replace")
        check(done.returncode == 0, f"toolhost call exited {done.returncode}: {stderr}")
        out = json.loads(done.stdout)
        log(f"  toolhost call took {took:.2f} s; result keys {sorted(out)}")
        check(out.get("exit_code") == 0, f"seq failed: { {k: v for k, v in out.items() if k != 'output'} }")
        check(out.get("truncated"), f"the CLI result of seq 1 {SEQ_N} is not cut: {sorted(out)}")
        head, tail = out["output"][:8], out["output"][-8:]
        check(out["output"].startswith("1\n2\n") and tail.endswith("300000\n"), f"{head!r}...{tail!r}")
        path = out.get("output_file")
        check(isinstance(path, str), f"no output_file in the result: {sorted(out)}")
        inside = os.path.realpath(path).startswith(os.path.realpath(state) + os.sep)
        check(inside, f"output_file {path} does not lie in --state-dir {state}")
        # The CLI has exited (and its process with it): the file must be whole now.
        with open(path, "rb") as f:
            data = f.read()
        lines = data.split(b"\n")
        check(data.endswith(b"\n"), f"the file does not end with a newline: ...{data[-20:]!r}")
        check(len(lines) - 1 == SEQ_N, f"the output file has {len(lines) - 1} lines, not {SEQ_N}")
        check(lines[0] == b"1" and lines[-2] == b"300000", f"first {lines[0]!r}, last {lines[-2]!r}")
        check(data == expected, f"the output file ({len(data)} bytes) is not the output of seq")
        log(f"  {path}: {len(data)} bytes, {SEQ_N} lines, complete")


# ---- raw lines over stdio, with an SDK session in the loop -----------------------------------


def _id_key(request_id: Any) -> tuple[str, Any]:
    """A request id as a set member (`7` and `"7"` are different ids)."""
    return (type(request_id).__name__, request_id)


class RawLines:
    """A transport of its own for `ClientSession`: `toolhost serve` as a subprocess, one JSON
    message a line, like the SDK's `stdio_client`, that can also write raw lines. An answer
    whose id is one of the session's pending requests goes to the session; every other answer
    (to a raw line, or with `id: null`, or an array) is kept for the test (`next_raw`); the
    server's requests and notifications go to the session."""

    def __init__(self, process: Any) -> None:
        self.process = process
        self._write_lock = anyio.Lock()
        self._sdk_pending: set[tuple[str, Any]] = set()
        self._raw_send, self._raw = anyio.create_memory_object_stream[Any](1000)
        self.to_session, self.read_stream = anyio.create_memory_object_stream[Any](100)
        self.write_stream, self._from_session = anyio.create_memory_object_stream[Any](100)
        self.not_json: list[bytes] = []

    async def write(self, data: bytes) -> None:
        """Write `data` as it is (whole lines, never interleaved with the session's)."""
        async with self._write_lock:
            await self.process.stdin.send(data)

    async def send_raw(self, line: bytes) -> None:
        """Write one raw line (bytes as they are, then a newline)."""
        await self.write(line + b"\n")

    async def next_raw(self, what: str, limit: float = 5.0) -> Any:
        """The next answer to a raw line, within `limit` seconds."""
        try:
            with anyio.fail_after(limit):
                return await self._raw.receive()
        except TimeoutError:
            raise AssertionError(f"{what}: no answer to the raw line within {limit} s") from None

    def take_unexpected(self) -> list[Any]:
        """The raw answers that came without being waited for (emptied)."""
        left = []
        while True:
            try:
                left.append(self._raw.receive_nowait())
            except anyio.WouldBlock:
                return left

    async def pump_out(self) -> None:
        """The session's messages to the server's stdin."""
        async with self._from_session:
            async for session_message in self._from_session:
                message = session_message.message
                if isinstance(message, types.JSONRPCRequest):
                    self._sdk_pending.add(_id_key(message.id))
                text = message.model_dump_json(by_alias=True, exclude_unset=True)
                await self.write(text.encode() + b"\n")

    async def pump_in(self) -> None:
        """The server's stdout, a line at a time, to the session or to `raw`."""
        buffer = b""
        async with self.to_session:
            async for chunk in self.process.stdout:
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        await self._route(line)

    async def _route(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            self.not_json.append(line)
            return
        answer = isinstance(message, dict) and "method" not in message
        key = _id_key(message.get("id")) if answer else None
        if answer and key in self._sdk_pending:
            self._sdk_pending.discard(key)
        elif answer or not isinstance(message, dict):
            self._raw_send.send_nowait(message)
            return
        await self.to_session.send(SessionMessage(types.jsonrpc_message_adapter.validate_python(message)))


@asynccontextmanager
async def raw_line_session(binary: str, *extra: str) -> AsyncIterator[tuple[ClientSession, RawLines]]:
    """An initialized SDK session on a `RawLines` transport to a fresh `toolhost serve`.
    At the end the server must exit by itself once its stdin closes."""
    process = await anyio.open_process(
        [binary, *extra, "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=None,
        env=dict(os.environ),
    )
    raw = RawLines(process)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(raw.pump_in)
            tg.start_soon(raw.pump_out)
            async with ClientSession(raw.read_stream, raw.write_stream) as session:
                await initialize(session)
                yield session, raw
            check(not raw.not_json, f"the server wrote lines that are not JSON: {raw.not_json}")
            await process.stdin.aclose()
            with anyio.move_on_after(15):
                await process.wait()
            check(process.returncode is not None, "the server did not exit within 15 s of stdin closing")
            tg.cancel_scope.cancel()
    finally:
        if process.returncode is None:
            process.kill()
            with anyio.CancelScope(shield=True):
                await process.wait()


def tools_call_line(request_id: int, arguments: bytes) -> bytes:
    return (
        b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"execute","arguments":%s}}'
        % (request_id, arguments)
    )


def check_error(answer: Any, code: int, request_id: Any, what: str) -> None:
    """`answer` is a JSON-RPC error with `code` answering `request_id` (None: `id: null`)."""
    check(isinstance(answer, dict), f"{what}: the answer is no object: {answer}")
    check(answer.get("jsonrpc") == "2.0", f"{what}: {answer}")
    error = answer.get("error")
    check(isinstance(error, dict), f"{what}: no error: {answer}")
    check(error.get("code") == code, f"{what}: code {error.get('code')}, not {code}: {answer}")
    check(isinstance(error.get("message"), str) and error["message"], f"{what}: {answer}")
    check("id" in answer, f"{what}: the answer has no id member: {answer}")
    same = answer["id"] is None if request_id is None else _id_key(answer["id"]) == _id_key(request_id)
    check(same, f"{what}: answered id {answer['id']!r}, not {request_id!r}: {answer}")


async def check_malformed_lines(session: ClientSession, raw: RawLines) -> None:
    """Each kind of broken line gets its error, nothing else is answered, no command of a
    broken request runs, and the SDK session is served after each."""
    rounds = count()

    async def still_serving(what: str, never_ran: str | None = None) -> None:
        n = next(rounds)
        out = result_json(await session.call_tool("execute", {"command": f"echo still-{n}"}))
        check(out["output"] == f"still-{n}\n", f"after {what}: the SDK call gives {out}")
        left = raw.take_unexpected()
        check(left == [], f"{what}: answers besides the expected one: {left}")
        if never_ran is not None:
            # A run command would be sleeping for 30 s by now (its request came first).
            check(not processes_with(never_ran), f"{what}: its command ran")

    async def expect_error(line: bytes, code: int, request_id: Any, what: str) -> None:
        never_ran = re.search(rb"sleep (30\.\d+)", line)
        await raw.send_raw(line)
        check_error(await raw.next_raw(what), code, request_id, what)
        await still_serving(what, never_ran.group(1).decode() if never_ran else None)
        log(f"  {what}: {code}, id {request_id}")

    def sleeper() -> bytes:
        return f"sleep 30.{marker()}".encode()

    await still_serving("the start")
    await expect_error(b"{not json", -32700, None, "bad syntax")
    await expect_error(
        tools_call_line(7, b'{"command":"' + sleeper() + b' # \xff\xfe\xc3 broken"}'),
        -32700,
        7,
        "invalid UTF-8 in a string",
    )
    await expect_error(
        tools_call_line(8, b'{"command":"' + sleeper() + b' # \\ud800"}'), -32700, 8, "a lone surrogate"
    )
    deep = b"[" * 10000 + b"]" * 10000
    await expect_error(
        tools_call_line(9, b'{"command":"' + sleeper() + b'","x":' + deep + b"}"),
        -32700,
        9,
        "a request nested 10,000 deep",
    )
    await expect_error(deep, -32700, None, "an array nested 10,000 deep")

    # Two messages on one line: each request in it gets -32700 (before anything else is
    # written to the server), and neither runs.
    first, second = sleeper(), sleeper()
    await raw.send_raw(
        tools_call_line(11, b'{"command":"' + first + b'"}')
        + tools_call_line(12, b'{"command":"' + second + b'"}')
    )
    answers = [await raw.next_raw("two messages on one line (first answer)")]
    answers.append(await raw.next_raw("two messages on one line (second answer)"))
    for answer in answers:
        check_error(answer, -32700, answer.get("id"), "two messages on one line")
    ids = sorted(answer["id"] for answer in answers)
    check(ids == [11, 12], f"two messages on one line: answered ids {ids}, not [11, 12]")
    await still_serving("two messages on one line", first.decode()[6:])
    check(not processes_with(second.decode()[6:]), "two messages on one line: the second ran")
    log("  two messages on one line: -32700 for ids 11 and 12")

    await expect_error(
        b'{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"execute","arguments":"echo hi"}}',
        -32602,
        13,
        "arguments that are a string",
    )
    await expect_error(b'{"jsonrpc":"2.0","id":10}', -32600, 10, "an object that is no request")
    await expect_error(b"[]", -32600, None, "an empty array")
    await expect_error(b"42", -32600, None, "a number")

    # An id still in use: refused; the first request keeps its answer (its command sleeps
    # until the refusal has come, then this ends the sleep and the command says "first").
    mark = marker()
    await raw.send_raw(
        tools_call_line(20, b'{"command":"sleep 300.%s; echo first","timeout":"60s"}' % mark.encode())
    )
    await wait_until("the first request's command runs", 10, lambda: sleeps_with(f"300.{mark}"))
    await raw.send_raw(b'{"jsonrpc":"2.0","id":20,"method":"ping"}')
    check_error(await raw.next_raw("a reused pending id"), -32600, 20, "a reused pending id")
    check(sleeps_with(f"300.{mark}"), "the first request's command ended with the refusal")
    for pid in sleeps_with(f"300.{mark}"):
        os.kill(pid, signal.SIGTERM)
    kept = await raw.next_raw("the first request with the reused id", 15)
    check(kept.get("id") == 20 and "result" in kept, f"the first request's answer: {kept}")
    first_out = json.loads(kept["result"]["content"][0]["text"])
    check(str(first_out.get("output")).endswith("first\n"), f"the first request's result: {first_out}")
    await still_serving("a reused pending id")
    log("  a reused pending id: -32600, and the first request answered")

    # Malformed notifications get no answer; a raw ping after them is the next answer.
    for line in (
        b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":"bogus"}',
        b'{"jsonrpc":"2.0","method":"notifications/progress","params":[1,2]}',
        b'{"jsonrpc":"2.0","method":"notifications/initialized","params":7}',
        b'{"jsonrpc":"2.0","method":"no/such/notification","params":{}}',
    ):
        await raw.send_raw(line)
    await raw.send_raw(b'{"jsonrpc":"2.0","id":30,"method":"ping"}')
    pong = await raw.next_raw("a ping after malformed notifications")
    check(pong == {"jsonrpc": "2.0", "id": 30, "result": {}}, f"malformed notifications were answered: {pong}")
    await still_serving("malformed notifications")
    log("  malformed notifications: no answer")


def body_messages(content_type: str | None, text: str) -> list[Any]:
    """The JSON-RPC messages of an HTTP response body (JSON or an SSE stream)."""
    if content_type and content_type.startswith("text/event-stream"):
        found = []
        for line in text.splitlines():
            if line.startswith("data:") and line[5:].strip():
                found.append(json.loads(line[5:]))
        return found
    if not text.strip():
        return []
    value = json.loads(text)
    return value if isinstance(value, list) else [value]


async def check_malformed_http(server: HttpServer) -> None:
    """With an SDK session open, malformed bodies POSTed in that session get 400 and the error
    the stdio server would answer; the session keeps serving."""
    auth = {"Authorization": f"Bearer {server.token}"}
    session_ids: list[str] = []

    async def remember_session(response: Any) -> None:
        if response.headers.get("mcp-session-id"):
            session_ids.append(response.headers["mcp-session-id"])

    from mcp.shared._httpx_utils import create_mcp_http_client

    async with (
        create_mcp_http_client(headers=auth) as sdk_http,
        create_mcp_http_client(headers=auth) as raw_http,
    ):
        sdk_http.event_hooks["response"].append(remember_session)
        async with (
            _streamable_http.streamable_http_client(server.url, http_client=sdk_http) as streams,
            ClientSession(streams[0], streams[1]) as session,
        ):
            await initialize(session)
            check(session_ids, "the SDK's session got no Mcp-Session-Id")
            headers = {
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
                "Mcp-Session-Id": session_ids[-1],
                "Mcp-Protocol-Version": str(session.protocol_version),
            }

            async def post(body: bytes) -> Any:
                return await raw_http.post(server.url, content=body, headers=headers)

            async def echo(n: int) -> None:
                out = result_json(await session.call_tool("execute", {"command": f"echo http-{n}"}))
                check(out["output"] == f"http-{n}\n", f"the SDK session after a malformed body: {out}")

            deep = b"[" * 10000 + b"]" * 10000
            cases: list[tuple[str, bytes, int, Any]] = [
                ("bad syntax", b"{not json", -32700, None),
                ("a body that ends early", b'{"jsonrpc":"2.0","id":4,"method":', -32700, 4),
                (
                    "invalid UTF-8 in a string",
                    tools_call_line(7, b'{"command":"echo \xff\xfe\xc3"}'),
                    -32700,
                    7,
                ),
                ("a lone surrogate", tools_call_line(8, b'{"command":"echo \\ud800"}'), -32700, 8),
                ("nesting 10,000 deep", tools_call_line(9, b'{"command":"x","x":' + deep + b"}"), -32700, 9),
                ("an object that is no request", b'{"jsonrpc":"2.0","id":10}', -32600, 10),
                ("an empty array", b"[]", -32600, None),
                ("a number", b"42", -32600, None),
            ]
            for n, (what, body, code, request_id) in enumerate(cases):
                response = await post(body)
                check(response.status_code == 400, f"{what}: status {response.status_code}: {response.text}")
                answers = body_messages(response.headers.get("content-type"), response.text)
                check(len(answers) == 1, f"{what}: one answer expected: {response.text}")
                check_error(answers[0], code, request_id, what)
                await echo(n)
                log(f"  HTTP {what}: 400, {code}, id {request_id}")

            # Two messages in one body: 400, each request refused with -32700.
            response = await post(
                tools_call_line(11, b'{"command":"echo one"}') + tools_call_line(12, b'{"command":"echo two"}')
            )
            check(response.status_code == 400, f"two messages: {response.status_code} {response.text}")
            answers = body_messages(response.headers.get("content-type"), response.text)
            for answer in answers:
                check_error(answer, -32700, answer.get("id"), "two messages in one body")
            check(sorted(a["id"] for a in answers) == [11, 12], f"two messages: {response.text}")

            # A batch (2025-11-25 has none): 400, one refusal per request.
            response = await post(
                b'[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]'
            )
            check(response.status_code == 400, f"a batch: {response.status_code} {response.text}")
            answers = body_messages(response.headers.get("content-type"), response.text)
            for answer in answers:
                check_error(answer, -32600, answer.get("id"), "a batch")
            check(sorted(a["id"] for a in answers) == [1, 2], f"a batch: {response.text}")

            # Malformed params of a known method: the -32602 error (on the normal path).
            response = await post(
                b'{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"execute","arguments":"echo hi"}}'
            )
            answers = body_messages(response.headers.get("content-type"), response.text)
            check(response.status_code in (200, 400), f"string arguments: {response.status_code}")
            check(len(answers) == 1, f"string arguments: {response.status_code} {response.text}")
            check_error(answers[0], -32602, 13, "string arguments over HTTP")

            # A malformed notification gets no answer.
            response = await post(b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":"bogus"}')
            answers = body_messages(response.headers.get("content-type"), response.text)
            check(
                response.status_code in (202, 400) and all(a.get("id") is None for a in answers),
                f"a malformed notification: {response.status_code} {response.text}",
            )
            await echo(len(cases))

            # Over 16 MiB: 413 (on a connection of its own: the server closes it).
            async with create_mcp_http_client(headers=auth) as big_http:
                big = await big_http.post(server.url, content=b" " * (17 * 1024 * 1024), headers=headers)
            check(big.status_code == 413, f"a 17 MiB body: {big.status_code}")
            await echo(len(cases) + 1)


# ---- protocol revision 2026-07-28 and the Tasks extension -------------------------------------

REVISION = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"
SCOPE_KEY = "toolhost/scope"
PROTOCOL_VERSION_META = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_META = "io.modelcontextprotocol/clientCapabilities"
INVALID_PARAMS = -32602


def scope_meta(scope: str | None) -> dict[str, Any] | None:
    """The `_meta` naming `scope` (`toolhost/scope`), for a request over HTTP."""
    return None if scope is None else {SCOPE_KEY: scope}


class WireTap:
    """The messages a transport carried both ways, as JSON (what `tapped` saw)."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.received: list[dict[str, Any]] = []

    def requests(self) -> list[dict[str, Any]]:
        return [m for m in self.sent if "method" in m and "id" in m]


def _as_json(message: Any) -> dict[str, Any]:
    inner = getattr(message, "message", message)
    if isinstance(inner, Exception):
        return {"exception": repr(inner)}
    return json.loads(inner.model_dump_json(by_alias=True, exclude_unset=True))


@asynccontextmanager
async def tapped(transport: Any, tap: WireTap) -> AsyncIterator[tuple[Any, Any]]:
    """`transport` (an SDK transport: an async context manager giving the stream pair) with
    every message recorded in `tap` on its way, unchanged."""
    async with transport as (read, write):
        to_session, session_read = anyio.create_memory_object_stream[Any](0)
        session_write, from_session = anyio.create_memory_object_stream[Any](0)

        async def outbound() -> None:
            async with from_session:
                async for message in from_session:
                    tap.sent.append(_as_json(message))
                    await write.send(message)

        async def inbound() -> None:
            async with to_session:
                async for message in read:
                    tap.received.append(_as_json(message))
                    await to_session.send(message)

        async with anyio.create_task_group() as tg:
            tg.start_soon(outbound)
            tg.start_soon(inbound)
            try:
                yield session_read, session_write
            finally:
                tg.cancel_scope.cancel()


def check_wire_2026(tap: WireTap, *, tasks: bool) -> None:
    """What the SDK sent is 2026-07-28: no `initialize`, and every request carried the revision
    and the client's capabilities (declaring the Tasks extension or not) in its `_meta`."""
    requests = tap.requests()
    check(requests, "no requests went over the connection")
    methods = [r["method"] for r in requests]
    check("initialize" not in methods, f"initialize sent in the 2026 era: {methods}")
    check(methods[0] == "server/discover", f"the SDK did not probe with server/discover: {methods}")
    for request in requests:
        meta = (request.get("params") or {}).get("_meta") or {}
        what = f"{request['method']} {json.dumps(request.get('params'))[:300]}"
        check(meta.get(PROTOCOL_VERSION_META) == REVISION, f"the revision in _meta: {what}")
        capabilities = meta.get(CLIENT_CAPABILITIES_META)
        check(isinstance(capabilities, dict), f"the client's capabilities in _meta: {what}")
        declared = TASKS in (capabilities.get("extensions") or {})
        check(declared == tasks, f"the Tasks extension declared: {declared}, expected {tasks}: {what}")


if types is not None:

    class CreatedTask(types.Result):
        """A `tools/call` answered with a task (`"resultType": "task"`, the Tasks extension)."""

        model_config = ConfigDict(extra="allow")
        result_type: Literal["task"] = "task"
        task_id: str
        status: str
        status_message: str | None = None

    class TaskState(types.Result):
        """The answer to `tasks/get`: the task, with the call's result once it ended."""

        model_config = ConfigDict(extra="allow")
        task_id: str
        status: Literal["working", "input_required", "completed", "failed", "cancelled"]
        status_message: str | None = None
        result: types.CallToolResult | None = None

    class AnyResult(types.Result):
        """Any result object (the answer to `tasks/cancel`)."""

        model_config = ConfigDict(extra="allow")

    class GetTask(types.GetTaskRequest):
        """`tasks/get`, naming its task in the `Mcp-Name` header as SEP-2663 requires (the
        SDK's model, typed for 2025-11-25, leaves `name_param` unset)."""

        name_param = "taskId"

    class CancelTask(types.CancelTaskRequest):
        """`tasks/cancel`, naming its task in the `Mcp-Name` header."""

        name_param = "taskId"

    class TasksExtension(ClientExtension):
        """The client side of the Tasks extension, on the SDK's extension hooks: declared in the
        client's capabilities, it claims results of `"resultType": "task"`; the SDK's
        `Client.call_tool` hands such a result to `resolve`, which polls `tasks/get` (naming
        `scope` over HTTP) until the task ends and returns the call's result. Every task
        created and every state polled is kept, with its time."""

        identifier = TASKS

        def __init__(self, scope: str | None = None) -> None:
            self.scope = scope
            self.created: list[tuple[float, Any]] = []
            self.seen: list[tuple[float, Any]] = []

        def claims(self) -> list[Any]:
            return [ResultClaim(result_type="task", model=CreatedTask, resolve=self.resolve)]

        async def resolve(self, task: Any, ctx: Any) -> Any:
            self.created.append((time.monotonic(), task))
            final = await poll_task(ctx.session, task.task_id, self.scope, self.seen)
            check(final.status == "completed", f"the task ended {final.status}: {final}")
            check(final.result is not None, f"the completed task has no result: {final}")
            return final.result


async def get_task(session: ClientSession, task_id: str, scope: str | None = None) -> Any:
    """`tasks/get` through the SDK's own request path (`send_request`)."""
    params = types.GetTaskRequestParams(task_id=task_id, _meta=scope_meta(scope))
    return await session.send_request(GetTask(params=params), TaskState)


async def cancel_task(session: ClientSession, task_id: str, scope: str | None = None) -> Any:
    params = types.CancelTaskRequestParams(task_id=task_id, _meta=scope_meta(scope))
    return await session.send_request(CancelTask(params=params), AnyResult)


async def poll_task(
    session: ClientSession,
    task_id: str,
    scope: str | None,
    seen: list[tuple[float, Any]],
    limit: float = 30.0,
) -> Any:
    """Poll `tasks/get` every 100 ms until the task leaves `working` (within `limit` s); every
    state goes to `seen` with its time. Returns the last."""
    deadline = time.monotonic() + limit
    while True:
        state = await get_task(session, task_id, scope)
        seen.append((time.monotonic(), state))
        if state.status != "working":
            return state
        if time.monotonic() > deadline:
            raise AssertionError(f"task {task_id} still working after {limit} s: {state}")
        await anyio.sleep(0.1)


async def refused(what: str, code: int, call: Awaitable[Any]) -> McpError:
    """`call` fails with a JSON-RPC error `code`; returns it."""
    try:
        result = await call
    except McpError as e:
        check(e.error.code == code, f"{what}: code {e.error.code}, not {code}: {e.error.message}")
        return e
    raise AssertionError(f"{what}: not refused, answered {result}")


@asynccontextmanager
async def modern_stdio_client(
    binary: str, extension: Any = None
) -> AsyncIterator[tuple[Any, WireTap]]:
    """The SDK's `Client` on a fresh `toolhost serve` (its own `stdio_client`), negotiating the
    era itself (`mode="auto"`); 2026-07-28 it must be. `extension`: a `TasksExtension`."""
    check(Client is not None, "the 2026-07-28 groups need the 2.x SDK")
    params = StdioServerParameters(command=binary, args=["serve"], env=dict(os.environ))
    tap = WireTap()
    client = Client(
        tapped(stdio_client(params), tap),
        mode="auto",
        extensions=[extension] if extension is not None else None,
    )
    async with client:
        check_modern(client)
        yield client, tap


@asynccontextmanager
async def modern_http_client(
    server: HttpServer, extension: Any = None, elicitation_callback: Any = None
) -> AsyncIterator[tuple[Any, WireTap]]:
    """The SDK's `Client` on `server` over its streamable HTTP transport, in the 2026 era:
    no session (no `Mcp-Session-Id` is ever given). With `elicitation_callback` it declares
    elicitation (form and URL mode) and answers a call's `input_required` through it."""
    check(Client is not None, "the 2026-07-28 groups need the 2.x SDK")
    from mcp.shared._httpx_utils import create_mcp_http_client

    session_ids: list[str] = []

    async def remember_session(response: Any) -> None:
        if response.headers.get("mcp-session-id"):
            session_ids.append(response.headers["mcp-session-id"])

    tap = WireTap()
    async with create_mcp_http_client(headers={"Authorization": f"Bearer {server.token}"}) as http:
        http.event_hooks["response"].append(remember_session)
        client = Client(
            tapped(_streamable_http.streamable_http_client(server.url, http_client=http), tap),
            mode="auto",
            extensions=[extension] if extension is not None else None,
            elicitation_callback=elicitation_callback,
        )
        async with client:
            check_modern(client)
            yield client, tap
            check(not session_ids, f"a session in the 2026 era: Mcp-Session-Id {session_ids}")


def check_modern(client: Any) -> None:
    """The SDK negotiated 2026-07-28 from toolhost's `server/discover`."""
    check(client.protocol_version == REVISION, f"negotiated {client.protocol_version}, not {REVISION}")
    session = client.session
    check(session.initialize_result is None, "an initialize result in the 2026 era")
    discovered = session.discover_result
    check(discovered is not None, "no server/discover result")
    versions = discovered.supported_versions
    check(REVISION in versions and "2025-11-25" in versions, f"supported versions {versions}")
    extensions = discovered.capabilities.extensions or {}
    check(TASKS in extensions, f"the Tasks extension is not offered: {discovered.capabilities}")
    check(discovered.capabilities.tools is not None, f"no tools capability: {discovered.capabilities}")
    info = client.server_info
    check(info is not None and info.name == "toolhost", f"server info {info}")


async def process_list_text(client: Any, scope: str | None = None) -> str:
    result = await client.call_tool("process_list", {}, meta=scope_meta(scope))
    return json.dumps(result_json(result))


async def background_sleep(client: Any, scope: str | None = None) -> tuple[str, str]:
    """`sleep 300.MARK` in the background; its process id and its needle, once it runs."""
    mark = marker()
    out = result_json(
        await client.call_tool(
            "execute",
            {"command": f"sleep 300.{mark}", "run_in_background": True},
            meta=scope_meta(scope),
        )
    )
    process_id = out.get("background_process_id")
    check(isinstance(process_id, str), f"not in the background: {out}")
    needle = f"300.{mark}"
    await wait_until("the background process appears", 10, lambda: processes_with(needle))
    return process_id, needle


async def check_stdio_2026(binary: str) -> None:
    """Over stdio the SDK speaks 2026-07-28 (no `initialize`; `_meta` on every request); a
    client without the Tasks extension gets plain results; the connection is the scope (a
    later call sees an earlier call's background process); closing it ends the process."""
    async with modern_stdio_client(binary) as (client, tap):
        tools = await client.list_tools()
        check({t.name for t in tools.tools} == EXPECTED_TOOLS, f"tools: {tools.tools}")
        out = result_json(await client.call_tool("execute", {"command": "echo hi"}))
        check(out["output"] == "hi\n" and out["exit_code"] == 0, f"echo hi: {out}")
        process_id, needle = await background_sleep(client)
        listed = await process_list_text(client)
        check(process_id in listed and needle in listed, f"a later call does not see {process_id}: {listed}")
        check_wire_2026(tap, tasks=False)
        log(f"  stdio 2026-07-28: {len(tap.requests())} requests, {process_id} seen by a later call")
        closing = time.monotonic()
    took = await wait_until(
        "the 2026 connection's process ends when it closes", 10, lambda: not processes_with(needle)
    )
    log(f"  its process gone {time.monotonic() - closing:.2f} s after the close ({took:.2f} s wait)")


async def check_http_2026(server: HttpServer) -> None:
    """Over HTTP a request may name its scope in `_meta` (`toolhost/scope`): the same id,
    from another connection, reaches the same processes; another id does not, nor does a
    request naming none, which works in its principal's default scope."""
    alpha, beta = f"py-alpha-{marker()}", f"py-beta-{marker()}"
    async with modern_http_client(server) as (first, tap):
        out = result_json(await first.call_tool("execute", {"command": "echo hi"}, meta=scope_meta(alpha)))
        check(out["output"] == "hi\n", f"echo hi in scope {alpha}: {out}")
        process_id, needle = await background_sleep(first, alpha)
        check_wire_2026(tap, tasks=False)
    async with modern_http_client(server) as (again, _):
        listed = await process_list_text(again, alpha)
        check(process_id in listed and needle in listed, f"{alpha} from another client: {listed}")
    async with modern_http_client(server) as (other, _):
        theirs = await process_list_text(other, beta)
        check(process_id not in theirs and needle not in theirs, f"scope {beta} lists {process_id}: {theirs}")
        default = json.dumps(result_json(await other.call_tool("process_list", {})))
        check(process_id not in default, f"the default scope lists {process_id} of {alpha}: {default}")
        tools = await other.list_tools()
        check({t.name for t in tools.tools} == EXPECTED_TOOLS, "tools/list needs no scope")
    log(f"  HTTP 2026-07-28: scope {alpha} shared across connections, not seen from {beta}")


async def check_task_outlives_timeout(client: Any, tasks: Any, scope: str | None, tap: WireTap) -> None:
    """`sleep 2.5; echo done` with timeout 1s, by a client declaring the Tasks extension: a
    task that stays `working` past 1 s and completes with the result at exit (not handed over
    to the background)."""
    start = time.monotonic()
    result = await client.call_tool(
        "execute", {"command": "sleep 2.5; echo done", "timeout": "1s"}, meta=scope_meta(scope)
    )
    end = time.monotonic()
    check(len(tasks.created) == 1, f"one task expected: {tasks.created}")
    created = tasks.created[0][1]
    check(created.status == "working", f"the task as created: {created}")
    working = [at - start for at, state in tasks.seen if state.status == "working"]
    check(working and max(working) > 1.5, f"not seen working past the 1 s timeout: {working}")
    last_at, last = tasks.seen[-1]
    check(last.status == "completed" and last.task_id == created.task_id, f"the task's end: {last}")
    check(last_at - start >= 2.4 and end - start >= 2.4, f"completed after {last_at - start:.2f} s")
    out = result_json(result)
    check(out["output"] == "done\n" and out["exit_code"] == 0, f"the task's result: {out}")
    check("background_process_id" not in out, f"handed over to the background: {out}")
    check_wire_2026(tap, tasks=True)
    log(f"  task working until {max(working):.2f} s, completed at {last_at - start:.2f} s: {out['output']!r}")


async def check_task_cancel(
    client: Any, scope: str | None, stranger: Any = None, stranger_scope: str | None = None
) -> None:
    """A task running `echo line-MARK; sleep 300.MARK`: `tasks/get` shows its output as the
    status message; (over HTTP) another scope does not know it and cannot cancel it;
    `tasks/cancel` ends it `cancelled` and its process within seconds; an unknown task id is
    -32602."""
    session = client.session
    mark = marker()
    needle = f"300.{mark}"
    created = await session.call_tool(
        "execute",
        {"command": f"echo line-{mark}; sleep 300.{mark}"},
        meta=scope_meta(scope),
        allow_claimed=True,
    )
    check(isinstance(created, CreatedTask), f"not a task: {created}")
    check(created.status == "working", f"the task as created: {created}")
    await wait_until("the task's command runs", 10, lambda: processes_with(needle))

    deadline = time.monotonic() + 10
    while True:
        state = await get_task(session, created.task_id, scope)
        if state.status == "working" and f"line-{mark}" in (state.status_message or ""):
            break
        check(state.status == "working", f"the task ended by itself: {state}")
        check(time.monotonic() < deadline, f"the status message does not show the output: {state}")
        await anyio.sleep(0.1)
    log(f"  the working task's status message: {state.status_message!r}")

    if stranger is not None:
        for what, request in (("tasks/get", get_task), ("tasks/cancel", cancel_task)):
            call = request(stranger.session, created.task_id, stranger_scope)
            await refused(f"{what} of another scope's task", INVALID_PARAMS, call)
        state = await get_task(session, created.task_id, scope)
        check(state.status == "working", f"another scope's tasks/cancel ended the task: {state}")
        check(processes_with(needle), "another scope's tasks/cancel ended the command")
        log("  another scope: tasks/get and tasks/cancel refused (-32602), the task runs on")

    cancelled_at = time.monotonic()
    answer = await cancel_task(session, created.task_id, scope)
    seen: list[tuple[float, Any]] = []
    final = await poll_task(session, created.task_id, scope, seen, limit=10)
    check(final.status == "cancelled", f"the cancelled task ends {final.status}: {final}")
    took = await wait_until(
        "the cancelled task's command is gone", 10, lambda: not processes_with(needle)
    )
    log(
        f"  tasks/cancel answered {answer.model_dump(by_alias=True, exclude_none=True)}; "
        f"cancelled after {seen[-1][0] - cancelled_at:.2f} s, the command gone after {took:.2f} s more"
    )
    for what, request in (("tasks/get", get_task), ("tasks/cancel", cancel_task)):
        await refused(f"{what} of an unknown task", INVALID_PARAMS, request(session, "no-such-task", scope))


async def check_tasks_not_before_2026(binary: str) -> None:
    """A 2025-11-25 client (the SDK's `initialize`) that declares the Tasks extension gets
    plain results: the extension is not defined there, so `execute` hands a command over to
    the background at its timeout as usual."""
    params = StdioServerParameters(command=binary, args=["serve"], env=dict(os.environ))
    tap = WireTap()
    async with (
        tapped(stdio_client(params), tap) as (read, write),
        ClientSession(read, write, extensions={TASKS: {}}) as session,
    ):
        await initialize(session)
        check(session.protocol_version == "2025-11-25", f"negotiated {session.protocol_version}")
        init = next(r for r in tap.requests() if r["method"] == "initialize")
        declared = init["params"]["capabilities"].get("extensions") or {}
        check(TASKS in declared, f"the SDK did not declare the extension: {init['params']}")
        out = result_json(await session.call_tool("execute", {"command": "sleep 5; echo late", "timeout": "1s"}))
        check(isinstance(out.get("background_process_id"), str), f"not handed over at its timeout: {out}")
        answer = next(m for m in tap.received if m.get("id") == tap.requests()[-1]["id"])
        check("resultType" not in answer["result"], f"a 2026 result for a 2025-11-25 client: {answer}")
        log(f"  2025-11-25 with the extension declared: a plain result, {out['background_process_id']}")


async def check_tasks_stdio(binary: str) -> None:
    tasks = TasksExtension()
    async with modern_stdio_client(binary, tasks) as (client, tap):
        await check_task_outlives_timeout(client, tasks, None, tap)
        await check_task_cancel(client, None)


async def check_tasks_http(server: HttpServer) -> None:
    alpha, beta = f"py-tasks-alpha-{marker()}", f"py-tasks-beta-{marker()}"
    tasks = TasksExtension(alpha)
    async with (
        modern_http_client(server, tasks) as (client, tap),
        modern_http_client(server, TasksExtension(beta)) as (stranger, _),
    ):
        await check_task_outlives_timeout(client, tasks, alpha, tap)
        await check_task_cancel(client, alpha, stranger, beta)


# ---- a workspace per session (--workspaces-under) --------------------------------------------


def workspaces_root() -> str:
    """Where the `roots` group makes its parent directory: `/var/tmp/toolhost-test-machines-UID`
    (as the confinement tests' fake machines when their root would be under `/tmp`), which no
    profile hides or makes writable. Not under `/tmp`, which a confined command sees privately
    (a write outside its workspace could land there without failing), nor under the home
    directory, whose package caches (`~/.cache`, where the target directory may be) are
    writable."""
    root = f"/var/tmp/toolhost-test-machines-{os.geteuid()}"
    os.makedirs(root, exist_ok=True)
    return os.path.realpath(root)


def make_projects(parent: str) -> None:
    """PARENT/proj-a, PARENT/proj-b/src in a git repository (`git init`, or a bare `.git`
    directory where git is missing: the server only looks for `.git`) and PARENT/.hidden-dir."""
    for sub in ("proj-a", "proj-b/src", ".hidden-dir"):
        os.makedirs(os.path.join(parent, sub))
    repo = os.path.join(parent, "proj-b")
    git = shutil.which("git")
    if git is not None:
        subprocess.run([git, "init", "-q", repo], check=True, stdin=subprocess.DEVNULL)
    else:
        os.mkdir(os.path.join(repo, ".git"))


class OfferedRoots:
    """A session's `list_roots_callback` (which makes the SDK declare `roots`): answers
    `roots/list` with the directories in `dirs`, which the test changes, and counts the asks."""

    def __init__(self, *dirs: str) -> None:
        self.dirs = list(dirs)
        self.asked = 0

    async def __call__(self, context: Any) -> Any:
        model = types if types is not None else importlib.import_module("mcp.types")
        self.asked += 1
        roots = [model.Root(uri=FileUrl(pathlib.Path(d).as_uri())) for d in self.dirs]
        log(f"  roots/list #{self.asked} answered with {self.dirs}")
        return model.ListRootsResult(roots=roots)


async def roots_changed(session: ClientSession) -> None:
    """`notifications/roots/list_changed`, without the SDK's warning that roots are deprecated
    after 2025-11-25 (SEP-2577): this is a 2025-era session."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The roots capability is deprecated")
        await session.send_roots_list_changed()


async def execute(session: ClientSession, arguments: dict[str, Any]) -> dict[str, Any]:
    """One `execute` call's result object (it must not be an error)."""
    return result_json(await session.call_tool("execute", arguments))


def first_line(out: dict[str, Any]) -> str:
    """The first line of a result's output (a note may follow the command's own lines)."""
    lines = out.get("output", "").splitlines()
    return lines[0] if lines else ""


def all_text(result: Any) -> str:
    """Everything a tool result says: its text items and its structured content."""
    texts = [item.text for item in result.content if item.type == "text"]
    structured = field(result, "structured_content", "structuredContent")
    if structured is not None:
        texts.append(json.dumps(structured))
    return "\n".join(texts)


async def check_write(
    session: ClientSession, path: str, allowed: bool, what: str, name: str | None = None
) -> None:
    """`touch PATH` (or `touch NAME`, in the working directory) succeeds and `path` reaches the
    host (`allowed`), or fails and does not."""
    out = await execute(session, {"command": f"touch {shlex.quote(name or path)}"})
    exists = os.path.exists(path)
    if allowed:
        check(out["exit_code"] == 0 and exists, f"{what}: touch {path} did not write it: {out}")
    else:
        check(out["exit_code"] != 0, f"{what}: touch {path} exited 0: {out}")
        check(not exists, f"{what}: touch {path} wrote it on the host: {out}")
    shown = os.path.join(os.path.basename(os.path.dirname(path)), os.path.basename(path))
    log(f"  {what}: touch {'wrote' if allowed else 'refused'} {shown}")


async def check_roots_choose_workspace(binary: str, parent: str) -> None:
    """A client declaring `roots` (started in `/`, so no host workspace): its first root under
    the parent is the workspace from the first call (the working directory, the only place it
    writes); after `notifications/roots/list_changed` the next call asks again, and a root
    inside a repository makes the repository's top the workspace."""
    proj_a, proj_b = os.path.join(parent, "proj-a"), os.path.join(parent, "proj-b")
    offered = OfferedRoots(proj_a)
    flags = ("--workspaces-under", parent)
    async with stdio_session(binary, *flags, list_roots_callback=offered, cwd="/") as session:
        here = await execute(session, {"command": "pwd"})
        check(offered.asked == 1, f"roots/list asked {offered.asked} times at the first call")
        check(here["exit_code"] == 0, f"pwd: {here}")
        check(first_line(here) == proj_a, f"the root {proj_a} is not the working directory: {here}")
        made = os.path.join(proj_a, "made-by-a")
        await check_write(session, made, True, "in the root's project", "made-by-a")
        await check_write(session, os.path.join(proj_b, "nope"), False, "outside the workspace")
        check(offered.asked == 1, f"roots/list asked {offered.asked} times without a change")

        offered.dirs = [os.path.join(proj_b, "src")]
        await roots_changed(session)
        here = await execute(session, {"command": "pwd"})
        check(offered.asked == 2, f"roots/list asked {offered.asked} times after the change")
        check(here["exit_code"] == 0, f"pwd: {here}")
        check(first_line(here) == proj_b, f"the repository's top {proj_b} is not the working directory: {here}")
        await check_write(session, os.path.join(proj_b, "x"), True, "in the new workspace", "x")
        await check_write(session, os.path.join(proj_a, "after-b"), False, "the former workspace")
        check(offered.asked == 2, f"roots/list asked {offered.asked} times without a change")


async def check_workdir_chooses_workspace(binary: str, parent: str) -> None:
    """A client without `roots` (started in `/`): no workspace (a note says so) until a call's
    `workdir` under the parent chooses that project; a dot-directory is never chosen."""
    proj_a = os.path.join(parent, "proj-a")
    async with stdio_session(binary, "--workspaces-under", parent, cwd="/") as session:
        listed = await session.call_tool("execute", {"command": "ls /"})
        out = result_json(listed)
        check(out["exit_code"] == 0 and "etc" in out["output"].split(), f"ls /: {out}")
        check("workspace" in all_text(listed).lower(), f"no note about the workspace: {out}")
        log(f"  ls / without a workspace: {out['output'].strip().splitlines()[-1]!r}")
        await check_write(session, os.path.join(proj_a, "before"), False, "without a workspace")

        chosen = await execute(session, {"command": "touch by-workdir && pwd", "workdir": proj_a})
        check(chosen["exit_code"] == 0, f"the call with workdir {proj_a}: {chosen}")
        check(first_line(chosen) == proj_a, f"pwd in workdir {proj_a}: {chosen}")
        check(os.path.isfile(os.path.join(proj_a, "by-workdir")), f"touch did not reach {proj_a}: {chosen}")
        here = await execute(session, {"command": "pwd"})
        check(first_line(here) == proj_a, f"{proj_a} is not the working directory after: {here}")

        hidden = os.path.join(parent, ".hidden-dir")
        try:
            result = await session.call_tool("execute", {"command": "touch t", "workdir": hidden})
        except McpError as e:
            outcome = f"refused: {e.error.code} {e.error.message}"
        else:
            outcome = f"a result: {all_text(result)[:300]}"
        check(not os.path.exists(os.path.join(hidden, "t")), f"touch t wrote in {hidden}: {outcome}")
        log(f"  workdir {hidden}: {outcome}")


def elicit_result(action: str, content: dict[str, Any] | None) -> Any:
    """An `ElicitResult` of the installed SDK (2.x `mcp_types`, 1.x `mcp.types`)."""
    if types is not None:
        return types.ElicitResult(action=action, content=content)
    from mcp import types as types_1

    return types_1.ElicitResult(action=action, content=content)


def record_lines(path: str) -> list[dict[str, Any]]:
    """The record's commands (`--record FILE`), one JSON object each."""
    with open(path, encoding="utf-8") as file:
        return [json.loads(line) for line in file if line.strip()]


async def check_asking(binary: str, state: str) -> None:
    """The guarded policy under `--ask risky` asks before `git push --force` through the SDK's
    elicitation callback: the command runs when the person accepts, is refused when they
    decline, and the record holds the answers. A client without the callback (no
    `elicitation` capability) gets the refusal with the reason nobody could be asked."""
    record = os.path.join(state, "commands.jsonl")
    command = "git push --force origin main; echo ran-after-approval"
    asked: list[Any] = []
    replies = [("accept", {"run": True}), ("decline", None)]

    async def elicit(_context: Any, params: Any) -> Any:
        asked.append(params)
        action, content = replies.pop(0)
        return elicit_result(action, content)

    flags = ["--policy", "guarded", "--ask", "risky", "--record", record]
    async with stdio_session(binary, *flags, elicitation_callback=elicit, cwd=state) as session:
        accepted = await session.call_tool("execute", {"command": command})
        check(not field(accepted, "is_error", "isError"), f"accepted, yet: {all_text(accepted)}")
        check("ran-after-approval" in all_text(accepted), f"did not run: {all_text(accepted)}")
        check(len(asked) == 1, f"asked {len(asked)} times")
        message = asked[0].message
        check("git push --force origin main" in message and "force-push" in message, message)
        schema = field(asked[0], "requested_schema", "requestedSchema")
        schema = schema if isinstance(schema, dict) else schema.model_dump(by_alias=True)
        check(schema["properties"]["run"]["type"] == "boolean", f"the form: {schema}")
        log(f"  accepted: ran; asked {message.splitlines()[0]!r}")

        declined = await session.call_tool("execute", {"command": command})
        text = all_text(declined)
        check(field(declined, "is_error", "isError"), f"declined, yet a result: {text}")
        check("declined" in text and "force-push" in text, f"the refusal: {text}")
        log(f"  declined: {text[:120]!r}")
    lines = [line for line in record_lines(record) if "git push" in line["command"]]
    check(len(lines) == 1, f"one forced push ran: {lines}")
    check(lines[0]["answers"] == [{"key": "approve", "reply": "accepted"}], f"the record: {lines[0]}")
    log(f"  the record: {lines[0]['answers']}")

    async with stdio_session(binary, "--policy", "guarded", "--ask", "risky", cwd=state) as session:
        refused = await session.call_tool("execute", {"command": command})
        text = all_text(refused)
        check(field(refused, "is_error", "isError"), f"no elicitation, yet a result: {text}")
        check("declared no elicitation" in text, f"the refusal says why: {text}")
        log(f"  without elicitation: {text[:160]!r}")


def give_on_page(url: str, secret: str) -> None:
    """Do what the person does on the host's page for secrets: open the link, type `secret`,
    press "Give". The form goes back with the page's origin, as a browser sends it."""
    # The page is on loopback: never through a proxy of the environment.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=30) as response:
        page = response.read().decode()
    token = re.search(r'name="form" value="([^"]+)"', page)
    check(token is not None, f"no form on the page: {page[:300]}")
    assert token is not None
    origin = "/".join(url.split("/")[:3])
    body = urllib.parse.urlencode({"form": token.group(1), "secret": secret, "action": "give"})
    request = urllib.request.Request(
        url,
        data=body.encode(),
        headers={"Origin": origin, "Content-Type": "application/x-www-form-urlencoded"},
        method="POST",
    )
    with opener.open(request, timeout=30) as response:
        answer = response.read().decode()
    check("received" in answer.lower(), f"the page did not take it: {answer[:300]}")


def page_person(secret: str, asked: list[Any]) -> Any:
    """An elicitation callback that gives `secret` on the page of each URL-mode question and
    accepts, declines any other question, and notes every question in `asked`."""

    async def elicit(_context: Any, params: Any) -> Any:
        asked.append(params)
        if getattr(params, "mode", "form") != "url":
            return elicit_result("decline", None)
        await anyio.to_thread.run_sync(give_on_page, params.url, secret)
        return elicit_result("accept", None)

    return elicit


async def check_secret(binary: str, state: str) -> None:
    """`execute` with `secrets` under `--ask risky`: the SDK's elicitation callback gets a
    URL-mode request with the link of the host's page; the person gives the secret there; the
    command gets it as its variable, and its output, the result, the record and the host's log
    hold `[secret]` in its place. The next command does not get it. A client without the
    callback (no URL-mode elicitation) gets a refusal saying why."""
    record = os.path.join(state, "commands.jsonl")
    host_log = os.path.join(state, "host.log")
    secret = "hunter2-" + os.urandom(8).hex()
    asked: list[Any] = []
    elicit = page_person(secret, asked)

    command = 'printf %s "$API_TOKEN" | wc -c; echo "token: $API_TOKEN"'
    arguments = {"command": command, "secrets": {"API_TOKEN": "the test's API token"}}
    flags = ["--ask", "risky", "--record", record]
    level = os.environ.get("TOOLHOST_LOG")
    os.environ["TOOLHOST_LOG"] = "debug"
    try:
        with open(host_log, "w", encoding="utf-8") as errlog:
            async with stdio_session(
                binary, *flags, elicitation_callback=elicit, cwd=state, errlog=errlog
            ) as session:
                given = await execute(session, arguments)
                check(len(asked) == 1, f"asked {len(asked)} times: {asked}")
                question = asked[0]
                check(question.mode == "url", f"not URL mode: {question}")
                check(question.url.startswith("http://127.0.0.1:"), f"the link: {question.url}")
                check("API_TOKEN" in question.message, f"the message: {question.message}")
                check(question.elicitation_id, f"no elicitationId: {question}")
                text = json.dumps(given)
                check(secret not in text, f"the secret is in the result: {text}")
                check("token: [secret]" in given["output"], f"not replaced: {given}")
                check(first_line(given) == str(len(secret)), f"the variable's length: {given}")
                log(f"  given on the page: {given['output']!r}")

                again = await execute(session, {"command": 'echo "[$API_TOKEN]"'})
                check(first_line(again) == "[]", f"the next command got it: {again}")
                log("  the next command does not get it")
    finally:
        if level is None:
            os.environ.pop("TOOLHOST_LOG", None)
        else:
            os.environ["TOOLHOST_LOG"] = level
    with open(record, encoding="utf-8") as file:
        check(secret not in file.read(), "the secret is in the record")
    with open(host_log, encoding="utf-8") as file:
        logged = file.read()
    check(secret not in logged, "the secret is in the host's log")
    check(logged.strip() != "", "the host logged nothing at debug level")
    log(f"  not in the record, nor in {len(logged)} bytes of the host's log")

    async with stdio_session(binary, *flags, cwd=state) as session:
        refused = await session.call_tool("execute", arguments)
        text = all_text(refused)
        check(field(refused, "is_error", "isError"), f"no elicitation, yet a result: {text}")
        check("URL-mode elicitation" in text, f"the refusal says why: {text}")
        log(f"  without elicitation: {text[:160]!r}")


async def check_secret_2026(binary: str) -> None:
    """The same over HTTP in revision 2026-07-28, with the SDK's `Client`: the call's result is
    `input_required` with a URL-mode request; the callback gives the secret on the page and
    accepts; the SDK retries the call with the signed `requestState`, which waits on the page
    and runs the command with the secret."""
    secret = "hunter2-" + os.urandom(8).hex()
    asked: list[Any] = []
    elicit = page_person(secret, asked)

    arguments = {
        "command": 'echo "token: $API_TOKEN"; printf %s "$API_TOKEN" | wc -c',
        "secrets": {"API_TOKEN": "the test's API token"},
    }
    async with (
        http_server(binary, "--ask", "risky") as server,
        modern_http_client(server, elicitation_callback=elicit) as (client, tap),
    ):
        out = result_json(await client.call_tool("execute", arguments))
        check(len(asked) == 1 and asked[0].mode == "url", f"asked: {asked}")
        check(asked[0].url.startswith("http://127.0.0.1:"), f"the link: {asked[0].url}")
        check(first_line(out) == "token: [secret]", f"not replaced: {out}")
        check(str(len(secret)) in out["output"], f"the variable's length: {out}")
        check(secret not in json.dumps(out), f"the secret is in the result: {out}")
        wire = json.dumps([tap.sent, tap.received], default=str)
        check(secret not in wire, "the secret is in an MCP message")
        check('"input_required"' in wire, "the call did not go through input_required")
        log(f"  2026-07-28 over HTTP: {out['output']!r}")


def namespaces_missing(binary: str) -> str | None:
    """Why `--network allow=...` cannot run here (no namespaces layer), or None when it can."""
    probe = subprocess.run(
        [binary, "--network", "allow=probe.test", "call", "execute", '{"command":"true"}'],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if probe.returncode != 0 and "namespaces layer" in probe.stderr:
        return probe.stderr.strip().splitlines()[-1]
    return None


async def check_network_asking(binary: str, state: str) -> None:
    """`--network allow=allowed.test --network ask=*.test --ask risky`: a command's connection
    to `asked.test` waits while the question goes through the SDK's elicitation callback;
    allowed, the host is allowed for the session and the first run reaches it; the next command
    reaches it without a question; a host declined is refused, and not asked about again after
    the run. The servers
    listen on the host's loopback, named by the test-only resolver map of a debug build."""
    import http.server

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the standard library's name
            body = b"reached-through-the-gate\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: Any) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    os.environ["TOOLHOST_TEST_RESOLVE"] = "asked.test=127.0.0.1;declined.test=127.0.0.1"
    os.environ["TOOLHOST_TEST_PUBLIC"] = "127.0.0.1"
    asked: list[Any] = []
    replies = [("accept", {"allow": True}), ("decline", None)]

    async def elicit(_context: Any, params: Any) -> Any:
        asked.append(params)
        action, content = replies.pop(0)
        return elicit_result(action, content)

    flags = ["--network", "allow=allowed.test", "--network", "ask=*.test", "--ask", "risky"]
    fetch = f"curl -sS --max-time 10 http://asked.test:{port}/"
    try:
        async with stdio_session(binary, *flags, elicitation_callback=elicit, cwd=state) as session:
            # Asked while the connection waits: the first run reaches it.
            first = await execute(session, {"command": fetch})
            check("reached-through-the-gate" in first["output"], f"not reached: {first}")
            check("ran again" not in first.get("note", ""), f"run twice: {first}")
            check(len(asked) == 1 and f"asked.test:{port}" in asked[0].message, f"asked: {asked}")
            check("waiting to connect" in asked[0].message, f"not while it waits: {asked[0]}")
            log(f"  allowed while the connection waited: {first['output'][:60]!r}")
            again = await execute(session, {"command": fetch})
            check("reached-through-the-gate" in again["output"], f"not reached again: {again}")
            check(len(asked) == 1, "asked again for a host allowed for the session")
            log("  the next command reaches it without a question")
            # Declined while the connection waits: refused, and not asked again after the run.
            declined = await execute(
                session, {"command": f"curl -sS --max-time 10 http://declined.test:{port}/"}
            )
            check("reached-through-the-gate" not in declined["output"], f"reached: {declined}")
            check(f"declined.test:{port}" in json.dumps(declined), f"no refusal named: {declined}")
            check(len(asked) == 2, f"asked {len(asked)} times: {asked}")
            log(f"  declined while the connection waited: {declined['output'][:120]!r}")
    finally:
        server.shutdown()
        for name in ("TOOLHOST_TEST_RESOLVE", "TOOLHOST_TEST_PUBLIC"):
            os.environ.pop(name, None)


# ---- groups ----------------------------------------------------------------------------------


async def group_tools(binary: str) -> None:
    """1 and 2: the tools with titles and annotations, `echo hello`, over stdio and HTTP."""
    log("tools over stdio")
    async with stdio_session(binary) as session:
        await check_tools(session)
        await check_echo(session)
    async with http_server(binary) as server:
        log("tools over HTTP")
        async with http_session(server) as session:
            await check_tools(session)
            await check_echo(session)


async def group_resources(binary: str) -> None:
    """3: full output as resources, over stdio and HTTP; sessions do not see each other's."""
    log("resources over stdio")
    async with stdio_session(binary) as session:
        await check_resources(session)
    async with http_server(binary) as server:
        log("resources over HTTP")
        async with http_session(server) as session:
            uri = await check_resources(session)
            await check_resource_isolation(server, uri)
            # The owner still reads it.
            lines, _ = resource_text(await session.read_resource(f"{uri}?line=1&lines=1"))
            check(lines == "1\n", f"the owner reads line 1 as {lines!r}")


async def group_cancel(binary: str) -> None:
    """4: a cancelled call stops its command, over stdio and HTTP; so does the end of the
    session (stdin closed; the SDK's DELETE) for a background process."""
    log("cancellation over stdio")
    async with stdio_session(binary) as session:
        await check_cancel(session)
    await check_session_end(lambda: stdio_session(binary), CLOSING_STDIN)
    async with http_server(binary) as server:
        log("cancellation over HTTP")
        async with http_session(server) as session:
            await check_cancel(session)
        await check_session_end(lambda: http_session(server), "the session's DELETE")


async def group_progress(binary: str) -> None:
    """5: heartbeat progress during a silent command, over stdio and HTTP (concurrently)."""

    async def over_stdio() -> None:
        async with stdio_session(binary) as session:
            await check_progress(session)
        log("progress over stdio: ok")

    async def over_http() -> None:
        async with http_server(binary) as server, http_session(server) as session:
            await check_progress(session)
        log("progress over HTTP: ok")

    async with anyio.create_task_group() as tg:
        tg.start_soon(over_stdio)
        tg.start_soon(over_http)


async def group_idle(binary: str) -> None:
    """6: an idle HTTP session ends with its processes; a long call keeps its session."""
    async with http_server(binary, "--idle-timeout", "2s") as server:
        mark = marker()
        needle = f"300.{mark}"
        log("idle session with a background process")
        async with http_session(server) as session:
            started = result_json(
                await session.call_tool(
                    "execute",
                    {"command": f"sleep 300.{mark} # {mark}", "run_in_background": True},
                )
            )
            check(started.get("background_process_id"), f"not in the background: {started}")
            await wait_until("the background process appears", 10, lambda: processes_with(needle))
            idle_since = time.monotonic()
            took = await wait_until(
                "the idle session's background process is terminated",
                10,
                lambda: not processes_with(needle),
            )
            check(took >= 1.0, f"the process was gone {took:.2f} s after the call, before 2 s idle")
            log(f"  gone {time.monotonic() - idle_since:.2f} s after the session became idle")
            # The session itself is gone too.
            try:
                with anyio.fail_after(20):
                    late = await session.call_tool("execute", {"command": "echo late"})
            except McpError as e:
                log(f"  a call on the expired session: {e.error.code} {e.error.message}")
            else:
                raise AssertionError(f"the expired session still answers: {late}")

        log("a foreground call longer than the idle timeout")
        async with http_session(server) as session:
            start = time.monotonic()
            slept = result_json(
                await session.call_tool(
                    "execute", {"command": "sleep 4; echo slept", "timeout": "10s"}
                )
            )
            took = time.monotonic() - start
            check(slept["output"].strip() == "slept", f"sleep 4 did not complete: {slept}")
            check(slept["exit_code"] == 0 and took >= 3.9, f"{slept} after {took:.1f} s")
            again = result_json(await session.call_tool("execute", {"command": "echo still"}))
            check(again["output"].strip() == "still", f"the session after the call: {again}")


async def group_origin(binary: str) -> None:
    """7: a foreign Origin is refused with 403; no Origin, the server's own and an allowed
    one (as a browser sends it: no default port) are served."""
    async with http_server(binary, "--allowed-origin", "https://app.example.com:443") as server:
        own = server.port
        await check_origin(
            server,
            [
                (None, 200),
                ("https://evil.example", 403),
                (f"http://evil.example:{own}", 403),
                ("null", 403),
                ("https://app.example.com:8443", 403),
                (f"http://127.0.0.1:{own}", 200),
                (f"http://localhost:{own}", 200),
                ("https://app.example.com", 200),
            ],
        )


async def group_logging(binary: str) -> None:
    """8: the logging capability: nothing before `logging/setLevel`, then the session's limit
    hit as a warning, over stdio and HTTP; over HTTP, never to another session."""
    with tempfile.TemporaryDirectory(prefix="toolhost-py-plugins-") as directory:
        flags = ["--policy", "none", "--plugins", hostile_plugins(directory)]
        log("logging over stdio")
        messages = LogMessages()
        async with stdio_session(binary, *flags, logging_callback=messages) as session:
            await check_logging(session, messages)
        async with http_server(binary, *flags) as server:
            log("logging over HTTP, two sessions")
            mine, other = LogMessages(), LogMessages()
            async with (
                http_session(server, logging_callback=mine) as session,
                http_session(server, logging_callback=other) as bystander,
            ):
                await set_log_level(bystander, "warning")
                await check_logging(session, mine)
                await no_more_messages(bystander, other, 0)
                # The bystander does get its own line (so its quiet above meant something),
                # and the first session does not.
                await spin(bystander)
                await wait_until("the bystander's limit hit arrives", 10, lambda: other.received)
                await no_more_messages(bystander, other, 1)
                check_limit_line(other)
                await no_more_messages(session, mine, 1)


async def group_cli(binary: str) -> None:
    """9: the one-shot CLI's output file is whole once the CLI has exited."""
    log("toolhost call: the output file")
    await check_cli_output_file(binary)


async def group_malformed(binary: str) -> None:
    """10: broken messages get their JSON-RPC errors, over stdio (raw lines beside an SDK
    session) and HTTP (raw bodies in an SDK session); the SDK session keeps serving."""
    log("malformed lines over stdio, beside an SDK session")
    async with raw_line_session(binary) as (session, raw):
        await check_malformed_lines(session, raw)
    async with http_server(binary) as server:
        log("malformed bodies over HTTP, in an SDK session")
        await check_malformed_http(server)


async def group_tasks_2026(binary: str) -> None:
    """11: protocol revision 2026-07-28 with the SDK's own negotiation, and the Tasks
    extension, over stdio and HTTP."""
    log("2026-07-28 over stdio")
    await check_stdio_2026(binary)
    log("tasks over stdio")
    await check_tasks_not_before_2026(binary)
    await check_tasks_stdio(binary)
    async with http_server(binary) as server:
        log("2026-07-28 over HTTP")
        await check_http_2026(server)
        log("tasks over HTTP")
        await check_tasks_http(server)


async def group_roots(binary: str) -> None:
    """12: a workspace per session under `--workspaces-under`, over stdio with servers started
    in `/`: chosen by the client's roots (and again after they changed), or by a call's
    `workdir`; never a dot-directory."""
    with tempfile.TemporaryDirectory(prefix="toolhost-py-roots-", dir=workspaces_root()) as parent:
        parent = os.path.realpath(parent)
        make_projects(parent)
        log(f"roots over stdio, under {parent}")
        await check_roots_choose_workspace(binary, parent)
        log("a call's workdir over stdio, a session without roots")
        await check_workdir_chooses_workspace(binary, parent)


async def group_asking(binary: str) -> None:
    """13: the person in the loop over stdio (revision 2025-11-25): elicitation in form mode
    within the call, before a forced push and for a host the network gate refused, and in URL
    mode for a secret typed on the host's page."""
    with tempfile.TemporaryDirectory(prefix="toolhost-py-ask-", dir=workspaces_root()) as state:
        await check_asking(binary, os.path.realpath(state))
    with tempfile.TemporaryDirectory(prefix="toolhost-py-ask-", dir=workspaces_root()) as state:
        await check_secret(binary, os.path.realpath(state))
    if Client is not None:
        await check_secret_2026(binary)
    missing = namespaces_missing(binary)
    if missing:
        log(f"SKIPPED the network question: no namespaces here ({missing})")
        return
    with tempfile.TemporaryDirectory(prefix="toolhost-py-ask-", dir=workspaces_root()) as state:
        await check_network_asking(binary, os.path.realpath(state))


GROUPS: dict[str, Callable[[str], Awaitable[None]]] = {
    "tools": group_tools,
    "resources": group_resources,
    "cancel": group_cancel,
    "progress": group_progress,
    "idle": group_idle,
    "origin": group_origin,
    "logging": group_logging,
    "cli": group_cli,
    "malformed": group_malformed,
    "tasks_2026": group_tasks_2026,
    "roots": group_roots,
    "asking": group_asking,
}


async def main(binary: str, group: str) -> None:
    expected = os.environ.get("TOOLHOST_EXPECT_MCP")
    installed = importlib.metadata.version("mcp")
    if expected:
        check(installed == expected, f"mcp {installed} installed, {expected} expected")
    log(f"mcp {installed}, group {group}")
    with anyio.fail_after(120):
        await GROUPS[group](binary)
    print(f"python mcp client: {group} ok", flush=True)


def leaves(error: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups, which task groups raise."""
    inner = getattr(error, "exceptions", None)
    if not isinstance(inner, (list, tuple)):
        return [error]
    return [leaf for e in inner for leaf in leaves(e)]


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[2] not in GROUPS:
        sys.exit(f"usage: {sys.argv[0]} TOOLHOST_BINARY {{{'|'.join(GROUPS)}}}")
    try:
        anyio.run(main, sys.argv[1], sys.argv[2])
    except BaseException as error:  # noqa: BLE001 - report every failure, then exit 1
        for leaf in leaves(error):
            traceback.print_exception(leaf)
        for leaf in leaves(error):
            print(f"FAILED ({sys.argv[2]}): {type(leaf).__name__}: {leaf}", file=sys.stderr)
        sys.exit(1)
