"""Drive `toolhost serve` with the official MCP Python SDK, over stdio and streamable HTTP.

Usage: mcp_client.py TOOLHOST_BINARY GROUP

GROUP is one of the scenario groups below (`tools`, `resources`, `cancel`, `progress`, `idle`,
`origin`, `logging`); each runs its checks over every transport it concerns and prints
`python mcp client: GROUP ok`, or exits non-zero with a message on the first mismatch.
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
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import inspect
import json
import os
import queue
import re
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
import urllib.request
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from itertools import count, pairwise
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client import stdio as stdio_module
from mcp.client import streamable_http as _streamable_http
from mcp.client.stdio import stdio_client

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
    binary: str, *extra: str, logging_callback: Any = None
) -> AsyncIterator[ClientSession]:
    """A session with a fresh `toolhost serve [EXTRA...]` over stdio."""
    # The SDK passes only a few variables by default; the cache location and log level matter.
    params = StdioServerParameters(command=binary, args=["serve", *extra], env=dict(os.environ))
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write, logging_callback=logging_callback) as session,
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


GROUPS: dict[str, Callable[[str], Awaitable[None]]] = {
    "tools": group_tools,
    "resources": group_resources,
    "cancel": group_cancel,
    "progress": group_progress,
    "idle": group_idle,
    "origin": group_origin,
    "logging": group_logging,
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
