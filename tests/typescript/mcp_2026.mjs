// toolhost driven by the official MCP TypeScript SDK v2 (`@modelcontextprotocol/client`, the
// exact version pinned in package.json and package-lock.json next to this file) in the era of
// protocol revision 2026-07-28: no `initialize` and no sessions; the SDK probes with
// `server/discover` at connect and then puts the revision, its client info and capabilities in
// every request's `_meta`.
//
// Run by tests/sdk_clients/mcp_typescript.rs like mcp_client.mjs (the 1.x SDK's script):
//
//     node mcp_2026.mjs TOOLHOST_BINARY GROUP
//
// GROUP is one of `2026-standard`, `2026-stdio`, `2026-http`, `asking`, `tasks` (see GROUPS at
// the end).
//
// `2026-standard` is a standard client: the SDK as it comes, with nothing of toolhost's own
// (no `toolhost/scope`): over HTTP its requests share the default scope of its bearer token's
// principal.
//
// The Tasks extension (`io.modelcontextprotocol/tasks`): SDK 2.4.0 has no client side of it.
// A `tools/call` answered with `"resultType": "task"` makes `callTool` reject with
// `SdkError(UNSUPPORTED_RESULT_TYPE)` (the 2026 codec accepts only `complete` and
// `input_required`), so the task's id is read off the wire: a tap on the SDK's transport
// records the messages both ways without changing them. `tasks/get` and `tasks/cancel` go
// through the SDK's generic `client.request(request, resultSchema)`, which lets these two
// methods of the extension through to a 2026-07-28 server when a result schema is given.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import http from 'node:http';

import {
  CLIENT_CAPABILITIES_META_KEY,
  Client,
  PROTOCOL_VERSION_META_KEY,
  ProtocolError,
  SdkError,
  SdkErrorCode,
  StreamableHTTPClientTransport,
} from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';

import {
  BIN,
  ENV,
  TOKEN,
  eventually,
  freshDir,
  httpServer,
  marker,
  processesWith,
  rejection,
  resultJson,
  runGroup,
  sleep,
  track,
  waitGone,
  waitPresent,
  within,
} from './common.mjs';

const REVISION = '2026-07-28';
const TASKS = 'io.modelcontextprotocol/tasks';
/** Where a 2026-07-28 request over HTTP may name a scope other than its principal's default
 *  one (docs/mcp.md). */
const SCOPE_KEY = 'toolhost/scope';
const TOOL_NAMES = ['execute', 'process_input', 'process_list', 'process_output', 'process_signal'];

// ---------------------------------------------------------------------------------------------
// Clients

/** A v2 client that negotiates the era at connect (`auto`: `server/discover` first, falling
 *  back to `initialize` only for a server that does not speak 2026-07-28). */
function newClient({ tasks = false, elicitation = false } = {}) {
  return new Client(
    { name: 'toolhost-ts-2026', version: '0.0.0' },
    {
      versionNegotiation: { mode: 'auto' },
      capabilities: {
        ...(tasks ? { extensions: { [TASKS]: {} } } : {}),
        ...(elicitation ? { elicitation: { form: {} } } : {}),
      },
    },
  );
}

/**
 * Record every message over `transport` both ways, changing none: `sent` and `received` hold
 * them in order. Set up before `connect`; the SDK installs its handler through `onmessage`.
 */
function wireTap(transport) {
  const tap = {
    sent: [],
    received: [],
    /** The last request of `method` the SDK sent. */
    lastRequest(method) {
      return this.sent.findLast((m) => m.method === method && 'id' in m);
    },
    /** The server's answer (result or error) to request `id`. */
    answerTo(id) {
      return this.received.find((m) => m.id === id && ('result' in m || 'error' in m));
    },
  };
  const send = transport.send.bind(transport);
  transport.send = (message, options) => {
    tap.sent.push(message);
    return send(message, options);
  };
  let handler;
  Object.defineProperty(transport, 'onmessage', {
    configurable: true,
    enumerable: true,
    get: () =>
      handler &&
      ((message, extra) => {
        tap.received.push(message);
        return handler(message, extra);
      }),
    set: (value) => {
      handler = value;
    },
  });
  return tap;
}

/** The SDK negotiated 2026-07-28 with toolhost, from the server's `server/discover`. */
function assertModern(client) {
  assert.equal(client.getProtocolEra(), 'modern', 'the 2026 era');
  assert.equal(client.getNegotiatedProtocolVersion(), REVISION);
  const discovered = client.getDiscoverResult();
  assert.ok(discovered, 'a server/discover result');
  assert.ok(discovered.supportedVersions.includes(REVISION), JSON.stringify(discovered));
  assert.ok(discovered.supportedVersions.includes('2025-11-25'), JSON.stringify(discovered));
  assert.ok(discovered.capabilities?.extensions?.[TASKS], `Tasks offered: ${JSON.stringify(discovered)}`);
  assert.ok(discovered.capabilities?.tools, JSON.stringify(discovered));
  assert.equal(client.getServerVersion()?.name, 'toolhost', 'serverInfo in the discover _meta');
}

/** What the SDK sent over this connection is 2026-07-28: no `initialize`, and every request
 *  carried the revision and the client's capabilities (with the Tasks extension or not) in its
 *  `_meta`; `scope`, when given, is named in each but `server/discover` (which needs none). */
function assertWire2026(tap, { tasks = false, scope } = {}) {
  const requests = tap.sent.filter((m) => 'method' in m && 'id' in m);
  assert.ok(requests.length > 0, 'requests went over the connection');
  assert.ok(!requests.some((m) => m.method === 'initialize'), 'no initialize in the 2026 era');
  for (const request of requests) {
    const meta = request.params?._meta ?? {};
    const what = `${request.method} ${JSON.stringify(request.params)}`;
    assert.equal(meta[PROTOCOL_VERSION_META_KEY], REVISION, `the revision in _meta: ${what}`);
    const capabilities = meta[CLIENT_CAPABILITIES_META_KEY];
    assert.equal(typeof capabilities, 'object', `the client's capabilities in _meta: ${what}`);
    assert.equal(Boolean(capabilities?.extensions?.[TASKS]), tasks, `the Tasks extension: ${what}`);
    if (scope !== undefined && request.method !== 'server/discover') {
      assert.equal(meta[SCOPE_KEY], scope, `the scope in _meta: ${what}`);
    }
  }
}

/** A v2 client on `toolhost serve` over stdio, launched by the SDK's own transport (the SDK
 *  probes with `server/discover` on a sibling process, then starts this one). */
async function stdioClient({ tasks = false, elicitation = false, extra = [] } = {}) {
  const transport = new StdioClientTransport({
    command: BIN,
    args: ['--state-dir', freshDir('state'), ...extra, 'serve'],
    env: ENV,
    stderr: 'inherit',
  });
  const tap = wireTap(transport);
  const client = newClient({ tasks, elicitation });
  await within(30000, client.connect(transport), 'connecting over stdio in the 2026 era');
  if (transport._process) track(transport._process);
  assertModern(client);
  return { client, transport, tap };
}

/** Make `transport` name `scope` in the `_meta` of every message it sends: the 2.x client has
 *  per-call `_meta` (a call's params `_meta`, merged over its own envelope) but no
 *  per-connection one. Wraps `send` after the tap, so the tap records what goes on the wire. */
function nameScope(transport, scope) {
  const send = transport.send.bind(transport);
  transport.send = (message, options) => {
    if ('method' in message) {
      const params = message.params ?? {};
      message = { ...message, params: { ...params, _meta: { ...params._meta, [SCOPE_KEY]: scope } } };
    }
    return send(message, options);
  };
}

/** A v2 client on the HTTP `server` naming `scope` in every request (none if undefined); the
 *  bearer token (`token`, by default TOKEN) comes from the transport's `authProvider`. */
async function httpClient(server, { scope, tasks = false, token = TOKEN } = {}) {
  const transport = new StreamableHTTPClientTransport(new URL(server.url), {
    authProvider: { token: async () => token },
  });
  const tap = wireTap(transport);
  if (scope !== undefined) nameScope(transport, scope);
  const client = newClient({ tasks });
  await within(30000, client.connect(transport), 'connecting over HTTP in the 2026 era');
  assertModern(client);
  assert.equal(transport.sessionId, undefined, 'no session in the 2026 era');
  const discover = tap.lastRequest('server/discover');
  assert.ok(discover, 'the SDK probed with server/discover over HTTP');
  assert.equal(tap.answerTo(discover.id)?.result?.resultType, 'complete', JSON.stringify(tap.received));
  return { client, transport, tap };
}

async function execute(client, args, options) {
  return client.callTool({ name: 'execute', arguments: args }, options);
}

/** `process_list` as the JSON text of its result. */
async function processList(client, params = {}) {
  const result = await client.callTool({ name: 'process_list', arguments: {}, ...params });
  return JSON.stringify(resultJson(result));
}

/** Start `sleep 300.MARK` in the background; its process id and marker, once it runs. */
async function backgroundSleep(client, params = {}) {
  const mark = marker();
  const out = resultJson(
    await client.callTool({
      name: 'execute',
      arguments: { command: `sleep 300.${mark}`, run_in_background: true },
      ...params,
    }),
  );
  assert.equal(typeof out.background_process_id, 'string', `a background process: ${JSON.stringify(out)}`);
  await waitPresent(mark);
  return { id: out.background_process_id, mark };
}

async function toolsAndEcho(client) {
  const { tools } = await client.listTools();
  assert.deepEqual(tools.map((t) => t.name).sort(), TOOL_NAMES);
  assert.ok('command' in tools.find((t) => t.name === 'execute').inputSchema.properties);
  const out = resultJson(await execute(client, { command: 'echo hi' }));
  assert.equal(out.output, 'hi\n', JSON.stringify(out));
  assert.equal(out.exit_code, 0, JSON.stringify(out));
}

// ---------------------------------------------------------------------------------------------
// 2026-standard group

const SEQ_N = 300000;
const SEQ_START = '1\n2\n3\n';

/** No request over `tap` named a scope: the client is the SDK as it comes. */
function assertNoScope(tap) {
  const named = tap.sent.filter((m) => 'method' in m && m.params?._meta?.[SCOPE_KEY] !== undefined);
  assert.deepEqual(named, [], 'no request names a toolhost/scope');
}

/** Tools, `echo hi`, and the cut output of `seq 1 300000` read through its `resource_link` and
 *  found in `resources/list`; returns the resource's URI. */
async function toolsAndResource(client) {
  await toolsAndEcho(client);
  const result = await execute(client, { command: `seq 1 ${SEQ_N}` });
  const out = resultJson(result);
  assert.ok(out.truncated, `the output is cut: ${JSON.stringify(out).slice(0, 300)}`);
  const link = result.content.find((c) => c.type === 'resource_link');
  assert.ok(link, `a resource_link: ${JSON.stringify(result.content.map((c) => c.type))}`);
  assert.match(link.uri, /^toolhost:\/\/process\/[^/?]+\/output$/);
  const page = await client.readResource({ uri: link.uri });
  assert.equal(page.contents.length, 1, JSON.stringify(page).slice(0, 300));
  assert.ok(page.contents[0].text.startsWith(SEQ_START), 'the resource starts at the beginning');
  assert.ok(page.contents[0]._meta?.['toolhost/next'], 'it names its next page');
  const { resources } = await client.listResources();
  assert.ok(resources.some((r) => r.uri === link.uri), `listResources lists ${link.uri}`);
  return link.uri;
}

/** Over stdio, the SDK as it comes: tools, `execute`, the output resource. */
async function standardOverStdio() {
  const { client, tap } = await stdioClient();
  try {
    await toolsAndResource(client);
    assertWire2026(tap);
    assertNoScope(tap);
  } finally {
    await client.close();
  }
}

/** Over HTTP, the SDK as it comes (no `toolhost/scope`): tools, `execute`, the output resource;
 *  a background process started by one client is read by id by another client of the same
 *  token (the principal's default scope); a task runs and is polled by raw requests; a client
 *  of another principal's token reaches none of it. */
async function standardOverHttp() {
  const alice = `alice-${TOKEN}`;
  const bob = `bob-${TOKEN}`;
  const server = await httpServer([], { tokens: { alice, bob } });
  const clients = [];
  try {
    const first = await httpClient(server, { token: alice });
    clients.push(first);
    const uri = await toolsAndResource(first.client);
    const { id, mark } = await backgroundSleep(first.client);

    // Another connection with the same token: the same default scope.
    const second = await httpClient(server, { token: alice, tasks: true });
    clients.push(second);
    const listed = await processList(second.client);
    assert.ok(listed.includes(id) && listed.includes(mark), `the same principal lists ${id}: ${listed}`);
    const read = resultJson(
      await second.client.callTool({ name: 'process_output', arguments: { process_id: id } }),
    );
    assert.equal(read.running, true, JSON.stringify(read));
    const page = await second.client.readResource({ uri });
    assert.ok(page.contents[0].text.startsWith(SEQ_START), 'the resource from another connection');

    // A task, in the default scope too (SDK 2.4.0 has no client side of tasks: raw requests).
    const started = Date.now();
    const created = await startTask(second, { command: 'sleep 0.5; echo tasked' });
    const { task } = await pollTask(second.client, created.taskId, started);
    assert.equal(task.status, 'completed', JSON.stringify(task));
    assert.equal(resultJson(task.result).output, 'tasked\n', JSON.stringify(task));

    // Another principal: nothing of Alice's.
    const other = await httpClient(server, { token: bob, tasks: true });
    clients.push(other);
    const theirs = await processList(other.client);
    assert.ok(!theirs.includes(id) && !theirs.includes(mark), `another principal lists ${id}: ${theirs}`);
    const foreign = await rejection(other.client.readResource({ uri }), 'another principal reading the resource');
    assert.ok(foreign instanceof ProtocolError, String(foreign?.stack ?? foreign));
    const stolen = await rejection(getTask(other.client, created.taskId), 'another principal getting the task');
    assert.ok(stolen instanceof ProtocolError, String(stolen?.stack ?? stolen));
    assert.equal(stolen.code, -32602, String(stolen));
    const signal = await other.client.callTool({
      name: 'process_signal',
      arguments: { process_id: id, signal: 'kill' },
    });
    assert.equal(signal.isError, true, JSON.stringify(signal));
    assert.ok(processesWith(mark).length > 0, "Alice's process survives Bob's signal");

    for (const { tap } of clients) {
      assertNoScope(tap);
    }
    assertWire2026(first.tap);
    assertWire2026(other.tap, { tasks: true });
  } finally {
    for (const { client } of clients) await client.close().catch(() => {});
    await server.stop();
  }
}

// ---------------------------------------------------------------------------------------------
// 2026-stdio group

/** 2026-07-28 over stdio: tools, `echo hi`; the connection is the scope (a later call sees a
 *  background process of an earlier one), and closing it ends its processes. */
async function stdio2026() {
  const { client, tap } = await stdioClient();
  let mark;
  try {
    await toolsAndEcho(client);
    const started = await backgroundSleep(client);
    mark = started.mark;
    const listed = await processList(client);
    assert.ok(listed.includes(started.id), `process_list shows ${started.id}: ${listed}`);
    assert.ok(listed.includes(mark), `process_list shows the command: ${listed}`);
    assertWire2026(tap);
  } finally {
    await client.close();
  }
  const closed = Date.now();
  await waitGone(mark, 10000, 'after the 2026 stdio connection closed');
  console.log(`  the connection's process ended ${Date.now() - closed} ms after close`);
}

// ---------------------------------------------------------------------------------------------
// 2026-http group

/** 2026-07-28 over HTTP: the scope named in `_meta` (`toolhost/scope`) is what requests share,
 *  across connections; another scope, or the default one of requests naming none, sees
 *  nothing of it; the scope ends with its process once idle for --idle-timeout. */
async function http2026() {
  const server = await httpServer(['--idle-timeout', '3s']);
  const clients = [];
  try {
    const scope = `alpha-${process.pid}`;
    const alpha = await httpClient(server, { scope });
    clients.push(alpha);
    await toolsAndEcho(alpha.client);
    const { id, mark } = await backgroundSleep(alpha.client);

    // The same scope from another client (its own transport): the same processes.
    const again = await httpClient(server, { scope });
    clients.push(again);
    const mine = await processList(again.client);
    assert.ok(mine.includes(id), `scope ${scope} from another client lists ${id}: ${mine}`);

    // Another scope does not see it.
    const beta = await httpClient(server, { scope: `beta-${process.pid}` });
    clients.push(beta);
    const theirs = await processList(beta.client);
    assert.ok(!theirs.includes(id) && !theirs.includes(mark), `another scope lists ${id}: ${theirs}`);

    // No scope in _meta: the default scope of the token's principal, which is not the named
    // one. Named in one call's own _meta (the SDK's per-request way), the call reaches it.
    const bare = await httpClient(server);
    clients.push(bare);
    const plain = await processList(bare.client);
    assert.ok(!plain.includes(id) && !plain.includes(mark), `the default scope lists ${id}: ${plain}`);
    const viaMeta = await processList(bare.client, { _meta: { [SCOPE_KEY]: scope } });
    assert.ok(viaMeta.includes(id), `the scope named in the call's _meta lists ${id}: ${viaMeta}`);

    assertWire2026(alpha.tap, { scope });
    assertWire2026(beta.tap, { scope: `beta-${process.pid}` });
    assertWire2026(bare.tap);
    for (const { client } of clients.splice(0)) await client.close();

    // Idle (no request in progress) for the idle timeout, the scope ends with its process.
    const idleSince = Date.now();
    await waitGone(mark, 15000, 'the idle 2026 scope ending');
    console.log(`  the idle scope's process ended ${Date.now() - idleSince} ms after its last request`);
  } finally {
    for (const { client } of clients) await client.close().catch(() => {});
    await server.stop();
  }
}

// ---------------------------------------------------------------------------------------------
// tasks group

/** A Standard Schema (what `client.request` validates a result with) for a task. */
const TASK = {
  '~standard': {
    version: 1,
    vendor: 'toolhost-tests',
    validate(value) {
      const ok =
        value !== null &&
        typeof value === 'object' &&
        typeof value.taskId === 'string' &&
        ['working', 'input_required', 'completed', 'failed', 'cancelled'].includes(value.status);
      return ok ? { value } : { issues: [{ message: `not a task: ${JSON.stringify(value)}` }] };
    },
  },
};
/** Any object (the result of `tasks/cancel`). */
const OBJECT = {
  '~standard': {
    version: 1,
    vendor: 'toolhost-tests',
    validate(value) {
      return value !== null && typeof value === 'object'
        ? { value }
        : { issues: [{ message: `not an object: ${JSON.stringify(value)}` }] };
    },
  },
};

/**
 * `execute` by a client that declared the Tasks extension: the server answers with a task.
 * SDK 2.4.0 rejects that result (`UNSUPPORTED_RESULT_TYPE`, naming `task`); the task itself is
 * the answer the tap saw to the SDK's `tools/call`.
 */
async function startTask({ client, tap }, args) {
  const error = await rejection(
    within(15000, execute(client, args), 'a tools/call answered with a task'),
    'a tools/call answered with a task',
  );
  assert.ok(
    error instanceof SdkError && error.code === SdkErrorCode.UnsupportedResultType,
    `the SDK's error for a task result: ${error?.stack ?? error}`,
  );
  assert.equal(error.data?.resultType, 'task', JSON.stringify(error.data));
  const request = tap.lastRequest('tools/call');
  assert.deepEqual(request.params.arguments, args);
  assert.ok(
    request.params._meta?.[CLIENT_CAPABILITIES_META_KEY]?.extensions?.[TASKS],
    `the call declared the Tasks extension: ${JSON.stringify(request.params._meta)}`,
  );
  const answer = tap.answerTo(request.id);
  const task = answer?.result;
  assert.ok(task, `the answer to tools/call: ${JSON.stringify(answer)}`);
  assert.equal(task.resultType, 'task', JSON.stringify(answer));
  assert.equal(typeof task.taskId, 'string', JSON.stringify(answer));
  assert.equal(task.status, 'working', JSON.stringify(answer));
  return task;
}

async function getTask(client, taskId) {
  return client.request({ method: 'tasks/get', params: { taskId } }, TASK);
}

/** Poll `tasks/get` every 100 ms until the task leaves `working` (within `ms`): its last state,
 *  every state seen with the ms since `since`. */
async function pollTask(client, taskId, since, ms = 30000) {
  const seen = [];
  const deadline = Date.now() + ms;
  for (;;) {
    const task = await getTask(client, taskId);
    seen.push({ at: Date.now() - since, status: task.status, statusMessage: task.statusMessage });
    if (task.status !== 'working') return { task, seen };
    assert.ok(Date.now() < deadline, `task ${taskId} still working after ${ms} ms: ${JSON.stringify(task)}`);
    await sleep(100);
  }
}

/** A task `execute` is not handed over to the background at its timeout: `sleep 2.5; echo done`
 *  with timeout 1s stays `working` past 1 s and completes with the result at exit. A client
 *  without the extension gets the plain result of the same call. */
async function taskOutlivesItsTimeout() {
  const session = await stdioClient({ tasks: true });
  try {
    const started = Date.now();
    const created = await startTask(session, { command: 'sleep 2.5; echo done', timeout: '1s' });
    const { task, seen } = await pollTask(session.client, created.taskId, started);
    const lastWorking = seen.filter((s) => s.status === 'working').at(-1)?.at ?? 0;
    assert.ok(lastWorking > 1500, `working past the 1 s timeout (last seen working at ${lastWorking} ms): ${JSON.stringify(seen)}`);
    assert.equal(task.status, 'completed', JSON.stringify(task));
    assert.ok(Date.now() - started >= 2500, 'completed once the command exited');
    assert.equal(task.taskId, created.taskId);
    const result = task.result;
    assert.ok(result && !result.isError, `the execute result: ${JSON.stringify(task)}`);
    const out = resultJson(result);
    assert.equal(out.output, 'done\n', JSON.stringify(out));
    assert.equal(out.exit_code, 0, JSON.stringify(out));
    assert.equal(out.background_process_id, undefined, `not handed over: ${JSON.stringify(out)}`);
    console.log(`  working until ${lastWorking} ms, completed: ${JSON.stringify(out)}`);
    assertWire2026(session.tap, { tasks: true });
  } finally {
    await session.client.close();
  }

  const plain = await stdioClient();
  try {
    const out = resultJson(await execute(plain.client, { command: 'echo plain' }));
    assert.equal(out.output, 'plain\n', JSON.stringify(out));
  } finally {
    await plain.client.close();
  }
}

/** A task whose tool asks: the guarded policy's question about a forced push is the task's
 *  `input_required` status, with `inputRequests` on `tasks/get`; `tasks/update` answers it,
 *  and the task goes on to run the command and complete. */
async function taskAsks() {
  const session = await stdioClient({
    tasks: true,
    elicitation: true,
    extra: ['--policy', 'guarded', '--ask', 'risky'],
  });
  try {
    const started = Date.now();
    const command = 'git push --force origin main; echo ran-after-approval';
    const created = await startTask(session, { command });
    let task;
    for (;;) {
      task = await getTask(session.client, created.taskId);
      if (task.status !== 'working') break;
      assert.ok(Date.now() - started < 30000, `still working: ${JSON.stringify(task)}`);
      await sleep(100);
    }
    assert.equal(task.status, 'input_required', JSON.stringify(task));
    const request = task.inputRequests?.approve;
    assert.equal(request?.method, 'elicitation/create', JSON.stringify(task));
    assert.match(request.params.message, /git push --force origin main/);
    await session.client.request(
      {
        method: 'tasks/update',
        params: {
          taskId: created.taskId,
          inputResponses: { approve: { action: 'accept', content: { run: true } } },
        },
      },
      OBJECT,
    );
    const { task: done } = await pollTask(session.client, created.taskId, started);
    assert.equal(done.status, 'completed', JSON.stringify(done));
    const out = resultJson(done.result);
    assert.match(out.output, /ran-after-approval/, JSON.stringify(out));
    console.log(`  input_required, answered with tasks/update, completed: ${out.output.trim()}`);
  } finally {
    await session.client.close();
  }
}

/** `tasks/get` shows the command's output as the task's status message while it works. */
async function taskShowsProgress() {
  const session = await stdioClient({ tasks: true });
  try {
    const mark = marker();
    const started = Date.now();
    const created = await startTask(session, { command: `echo line-${mark}; sleep 6; echo done` });
    let last;
    assert.ok(
      await eventually(5000, async () => {
        last = await getTask(session.client, created.taskId);
        return last.status === 'working' && (last.statusMessage ?? '').includes(`line-${mark}`);
      }),
      `the status message of the working task names its output: ${JSON.stringify(last)}`,
    );
    console.log(`  after ${Date.now() - started} ms: ${JSON.stringify(last.statusMessage)}`);
    const { task } = await pollTask(session.client, created.taskId, started);
    assert.equal(task.status, 'completed', JSON.stringify(task));
    assert.equal(resultJson(task.result).output, `line-${mark}\ndone\n`, JSON.stringify(task));
  } finally {
    await session.client.close();
  }
}

/** `tasks/cancel` ends the task `cancelled` and kills its command; an unknown task id is -32602. */
async function cancelledTask() {
  const session = await stdioClient({ tasks: true });
  try {
    const mark = marker();
    const started = Date.now();
    const created = await startTask(session, { command: `sleep 300.${mark}` });
    await waitPresent(mark);
    const cancelledAt = Date.now();
    const answer = await session.client.request(
      { method: 'tasks/cancel', params: { taskId: created.taskId } },
      OBJECT,
    );
    const { task, seen } = await pollTask(session.client, created.taskId, started, 10000);
    assert.equal(task.status, 'cancelled', JSON.stringify(seen));
    await waitGone(mark, 10000, 'the command of the cancelled task');
    console.log(
      `  tasks/cancel answered ${JSON.stringify(answer)}; the command gone ${Date.now() - cancelledAt} ms after`,
    );

    for (const method of ['tasks/get', 'tasks/cancel']) {
      const unknown = await rejection(
        session.client.request({ method, params: { taskId: 'no-such-task' } }, OBJECT),
        `${method} of an unknown task`,
      );
      assert.ok(unknown instanceof ProtocolError, `${method}: ${unknown?.stack ?? unknown}`);
      assert.equal(unknown.code, -32602, `${method}: ${unknown}`);
    }
  } finally {
    await session.client.close();
  }
}

/** Over HTTP a task belongs to its scope: unknown (-32602) in another one, completed in its own. */
async function taskBelongsToItsScope() {
  const server = await httpServer();
  const clients = [];
  try {
    const alpha = await httpClient(server, { scope: `tasks-alpha-${process.pid}`, tasks: true });
    clients.push(alpha);
    const beta = await httpClient(server, { scope: `tasks-beta-${process.pid}`, tasks: true });
    clients.push(beta);
    const started = Date.now();
    const created = await startTask(alpha, { command: 'sleep 0.5; echo scoped' });
    const stolen = await rejection(getTask(beta.client, created.taskId), 'another scope getting the task');
    assert.ok(stolen instanceof ProtocolError, String(stolen?.stack ?? stolen));
    assert.equal(stolen.code, -32602, String(stolen));
    const { task } = await pollTask(alpha.client, created.taskId, started);
    assert.equal(task.status, 'completed', JSON.stringify(task));
    assert.equal(resultJson(task.result).output, 'scoped\n', JSON.stringify(task));
    assertWire2026(alpha.tap, { tasks: true, scope: `tasks-alpha-${process.pid}` });
  } finally {
    for (const { client } of clients) await client.close().catch(() => {});
    await server.stop();
  }
}

// ---------------------------------------------------------------------------------------------
// Asking the person (revision 2026-07-28: input_required, answered by the SDK's handler)

/** The text items of a tool result. */
function textOf(result) {
  return result.content
    .filter((c) => c.type === 'text')
    .map((c) => c.text)
    .join('\n');
}

/** A v2 client over HTTP that declares form elicitation and answers each form with the next of
 *  `replies`; `asked` holds the forms' params in order. The SDK fulfils the server's
 *  `input_required` through this handler and retries the call with the answers. */
async function askingClient(server, replies) {
  const transport = new StreamableHTTPClientTransport(new URL(server.url), {
    authProvider: { token: async () => TOKEN },
  });
  const tap = wireTap(transport);
  const client = new Client(
    { name: 'toolhost-ts-2026', version: '0.0.0' },
    { versionNegotiation: { mode: 'auto' }, capabilities: { elicitation: { form: {} } } },
  );
  const asked = [];
  client.setRequestHandler('elicitation/create', async (request) => {
    asked.push(request.params);
    const reply = replies.shift();
    assert.ok(reply, `an unexpected question: ${JSON.stringify(request.params)}`);
    return reply;
  });
  await within(30000, client.connect(transport), 'connecting over HTTP in the 2026 era');
  assertModern(client);
  return { client, transport, tap, asked };
}

async function askingOverHttp() {
  const server = await httpServer(['--policy', 'guarded', '--ask', 'risky']);
  const clients = [];
  try {
    const command = 'git push --force origin main; echo ran-after-approval';
    const replies = [
      { action: 'accept', content: { run: true } },
      { action: 'decline' },
      { action: 'accept', content: { run: true, remember: true } },
    ];
    const person = await askingClient(server, replies);
    clients.push(person);
    const { client, tap, asked } = person;

    // Accepted: the call came back input_required, the SDK asked and retried with the answer
    // and the server's requestState, and the command ran.
    const ran = await execute(client, { command });
    assert.ok(!ran.isError, textOf(ran));
    assert.match(textOf(ran), /ran-after-approval/);
    assert.equal(asked.length, 1);
    assert.match(asked[0].message, /git push --force origin main/);
    assert.equal(asked[0].requestedSchema.properties.run.type, 'boolean');
    const calls = tap.sent.filter((m) => m.method === 'tools/call');
    assert.equal(calls.length, 2, JSON.stringify(calls));
    const first = tap.answerTo(calls[0].id);
    assert.equal(first?.result?.resultType, 'input_required', JSON.stringify(first));
    assert.equal(first.result.inputRequests.approve.method, 'elicitation/create');
    assert.equal(calls[1].params.requestState, first.result.requestState);
    assert.equal(calls[1].params.inputResponses.approve.action, 'accept');

    // Declined: refused, saying so.
    const declined = await execute(client, { command });
    assert.ok(declined.isError, textOf(declined));
    assert.match(textOf(declined), /force-push.*declined/s);

    // Allowed from now on: a forced push of the same scope (the principal's default) runs
    // without a question.
    await execute(client, { command });
    assert.equal(asked.length, 3);
    const again = await execute(client, { command: 'git push -f origin other; echo again' });
    assert.ok(!again.isError, textOf(again));
    assert.match(textOf(again), /again/);
    assert.equal(asked.length, 3, 'not asked again');
    assert.equal(replies.length, 0);

    // The same record replayed: refused (each is accepted once).
    const replay = await rejection(
      client.request({
        method: 'tools/call',
        params: {
          name: 'execute',
          arguments: { command },
          inputResponses: calls[1].params.inputResponses,
          requestState: calls[1].params.requestState,
        },
      }),
      'a replayed requestState',
    );
    assert.match(String(replay?.message ?? replay), /used already/);

    // A client without elicitation: refused with the reason.
    const plain = await httpClient(server);
    clients.push(plain);
    const refused = await execute(plain.client, { command: 'git push --force; echo no' });
    assert.ok(refused.isError, textOf(refused));
    assert.match(textOf(refused), /declared no elicitation/);
  } finally {
    for (const { client } of clients) await client.close().catch(() => {});
    await server.stop();
  }
}

/** `--network allow=allowed.test --network ask=*.test --ask risky` over HTTP: a command refused
 *  `asked.test` comes back `input_required`; the SDK's handler allows it; the host lets the
 *  principal's scope reach it and the command runs again and reaches it; the next command
 *  reaches it without a question. The server listens on the host's loopback, named by the
 *  test-only resolver map of a debug build. Skipped, saying so, without namespaces. */
async function networkAskOverHttp() {
  const probe = spawnSync(BIN, ['--network', 'allow=probe.test', 'call', 'execute', '{"command":"true"}'], {
    env: ENV,
    encoding: 'utf8',
  });
  if (probe.status !== 0 && /namespaces layer/.test(probe.stderr)) {
    console.log(`  SKIPPED: no namespaces here (${probe.stderr.trim().split('\n').at(-1)})`);
    return;
  }
  const site = http.createServer((_request, response) => response.end('reached-through-the-gate\n'));
  await new Promise((resolve) => site.listen(0, '127.0.0.1', resolve));
  const port = site.address().port;
  const server = await httpServer(
    ['--network', 'allow=allowed.test', '--network', 'ask=*.test', '--ask', 'risky'],
    { env: { TOOLHOST_TEST_RESOLVE: 'asked.test=127.0.0.1', TOOLHOST_TEST_PUBLIC: '127.0.0.1' } },
  );
  const clients = [];
  try {
    const replies = [{ action: 'accept', content: { allow: true } }];
    const person = await askingClient(server, replies);
    clients.push(person);
    const fetch = `curl -sS --max-time 10 http://asked.test:${port}/`;
    const first = resultJson(await execute(person.client, { command: fetch }));
    assert.match(first.output, /reached-through-the-gate/, JSON.stringify(first));
    assert.match(first.note, new RegExp(`allowed asked\\.test:${port}`), JSON.stringify(first));
    assert.equal(person.asked.length, 1);
    assert.match(person.asked[0].message, new RegExp(`asked\\.test:${port}`));
    const again = resultJson(await execute(person.client, { command: fetch }));
    assert.match(again.output, /reached-through-the-gate/, JSON.stringify(again));
    assert.equal(person.asked.length, 1, 'allowed for the scope: not asked again');
  } finally {
    for (const { client } of clients) await client.close().catch(() => {});
    await server.stop();
    site.close();
  }
}

/** What the person does on the host's page for a secret: open the link, type `secret`, press
 *  "Give". The form goes back with the page's origin, as a browser sends it. */
async function giveOnPage(url, secret) {
  const page = await (await fetch(url)).text();
  const token = /name="form" value="([^"]+)"/.exec(page)?.[1];
  assert.ok(token, `no form on the page: ${page.slice(0, 200)}`);
  const answer = await fetch(url, {
    method: 'POST',
    body: new URLSearchParams({ form: token, secret, action: 'give' }),
    headers: { Origin: new URL(url).origin, 'Content-Type': 'application/x-www-form-urlencoded' },
  });
  assert.equal(answer.status, 200, await answer.text());
}

/** `execute` with `secrets` over HTTP in 2026-07-28: the call comes back `input_required` with
 *  a URL-mode request, which the SDK hands to its `elicitation/create` handler (the client
 *  declares `elicitation.url`); the handler gives the secret on the host's page and accepts;
 *  the SDK retries the call, and the command gets the variable, with `[secret]` in its output
 *  and the value in no message. */
async function secretOverHttp() {
  const server = await httpServer(['--ask', 'risky']);
  let client;
  try {
    const transport = new StreamableHTTPClientTransport(new URL(server.url), {
      authProvider: { token: async () => TOKEN },
    });
    const tap = wireTap(transport);
    client = new Client(
      { name: 'toolhost-ts-2026', version: '0.0.0' },
      { versionNegotiation: { mode: 'auto' }, capabilities: { elicitation: { form: {}, url: {} } } },
    );
    const secret = `hunter2-${process.pid}-${Date.now()}`;
    const asked = [];
    client.setRequestHandler('elicitation/create', async (request) => {
      asked.push(request.params);
      assert.equal(request.params.mode, 'url', JSON.stringify(request.params));
      await giveOnPage(request.params.url, secret);
      return { action: 'accept' };
    });
    await within(30000, client.connect(transport), 'connecting over HTTP in the 2026 era');
    const out = resultJson(
      await execute(client, {
        command: 'echo "token: $API_TOKEN"',
        secrets: { API_TOKEN: 'a token for the test' },
      }),
    );
    assert.equal(out.output, 'token: [secret]\n', JSON.stringify(out));
    assert.equal(asked.length, 1);
    assert.match(asked[0].url, /^http:\/\/127\.0\.0\.1:\d+\/secret\//);
    assert.match(asked[0].message, /API_TOKEN/);
    const wire = JSON.stringify([tap.sent, tap.received]);
    assert.ok(!wire.includes(secret), 'the secret is in an MCP message');
    assert.ok(wire.includes('"input_required"'), 'the call did not go through input_required');
  } finally {
    await client?.close().catch(() => {});
    await server.stop();
  }
}

// ---------------------------------------------------------------------------------------------

const GROUPS = {
  '2026-standard': [
    ['stdio 2026-07-28, the SDK as it comes: tools, execute, the output resource', standardOverStdio],
    ['http 2026-07-28, the SDK as it comes: the default scope of each principal', standardOverHttp],
  ],
  '2026-stdio': [['stdio 2026-07-28: tools, echo, the connection is the scope', stdio2026]],
  '2026-http': [['http 2026-07-28: scopes named in _meta, apart from the default one', http2026]],
  asking: [
    ['http 2026-07-28: the guarded policy asks through input_required', askingOverHttp],
    ['http 2026-07-28: a refused host is allowed for the scope and the command runs again', networkAskOverHttp],
    ['http 2026-07-28: a secret typed on the host\'s page reaches the command', secretOverHttp],
  ],
  tasks: [
    ['stdio tasks: execute outlives its timeout, completes with the result', taskOutlivesItsTimeout],
    ['stdio tasks: the status message shows the output', taskShowsProgress],
    ['stdio tasks: tasks/cancel kills the command', cancelledTask],
    ['http tasks: a task belongs to its scope', taskBelongsToItsScope],
    ['stdio tasks: a question is the task\'s input_required status', taskAsks],
  ],
};
await runGroup(GROUPS);
