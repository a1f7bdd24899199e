// toolhost driven by the official MCP TypeScript SDK 1.x (`@modelcontextprotocol/sdk`, the
// exact version pinned in package.json and package-lock.json next to this file), with the
// protocol revisions up to 2025-11-25 (`initialize`, sessions). mcp_2026.mjs drives the 2.x SDK
// in the 2026-07-28 era; both share common.mjs.
//
// Run by tests/sdk_clients/mcp_typescript.rs, which installs the SDKs with
// `npm ci --ignore-scripts` into `<target>/mcp-ts/`, copies the scripts there and runs
//
//     node mcp_client.mjs TOOLHOST_BINARY GROUP
//
// GROUP is one of `stdio`, `malformed`, `http`, `http-idle`, `heartbeat`, `logging` (see GROUPS
// at the end). Every scenario checks what the server does and throws on the first mismatch;
// each one that passes prints `ok SCENARIO (MS ms)`, and the last line is `typescript mcp
// client: ok GROUP`. Processes the script starts carry a unique numeric marker on their
// command line (`sleep 300.MARKER`) so the script can look for them in /proc. The `logging`
// group needs the hostile fixture component's path in `TOOLHOST_HOSTILE_COMPONENT`. Plain ESM
// JavaScript: no compile step.

import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import {
  StreamableHTTPClientTransport,
  StreamableHTTPError,
} from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  LATEST_PROTOCOL_VERSION,
  LoggingMessageNotificationSchema,
  McpError,
} from '@modelcontextprotocol/sdk/types.js';

import {
  BIN,
  ENV,
  TOKEN,
  eventually,
  freshDir,
  httpServer,
  marker,
  rejection,
  resultJson,
  runGroup,
  sleep,
  track,
  waitGone,
  waitPresent,
  within,
} from './common.mjs';

/** The whole output of `seq 1 N`. */
function seqOutput(n) {
  const lines = new Array(n);
  for (let i = 0; i < n; i++) lines[i] = String(i + 1);
  return `${lines.join('\n')}\n`;
}
const SEQ_N = 300000;
const SEQ = seqOutput(SEQ_N);

function newClient() {
  return new Client({ name: 'toolhost-ts-e2e', version: '0.0.0' });
}

/** An SDK client on `toolhost serve` over stdio, launched by the SDK's own transport. */
async function stdioClient(stateDir = freshDir('state'), extra = []) {
  const transport = new StdioClientTransport({
    command: BIN,
    args: ['--state-dir', stateDir, ...extra, 'serve'],
    env: ENV,
    stderr: 'inherit',
  });
  const client = newClient();
  await within(30000, client.connect(transport), 'connecting over stdio');
  if (transport._process) track(transport._process);
  assert.equal(client.getServerVersion()?.name, 'toolhost');
  return client;
}

async function execute(client, args, options) {
  return client.callTool({ name: 'execute', arguments: args }, undefined, options);
}

async function echo(client, word = 'hello') {
  const out = resultJson(await execute(client, { command: `echo ${word}` }));
  assert.equal(out.output.trim(), word, JSON.stringify(out));
  assert.equal(out.exit_code, 0, JSON.stringify(out));
}

// ---------------------------------------------------------------------------------------------

function httpTransport(server) {
  return new StreamableHTTPClientTransport(new URL(server.url), {
    requestInit: { headers: { Authorization: `Bearer ${TOKEN}` } },
  });
}

/** An SDK client with its own session on `server`. */
async function httpClient(server) {
  const transport = httpTransport(server);
  const client = newClient();
  await within(30000, client.connect(transport), 'connecting over HTTP');
  assert.ok(transport.sessionId, 'the server gave a session id');
  assert.equal(client.getServerVersion()?.name, 'toolhost');
  return { client, transport };
}

/** End a session (DELETE) and close the client. */
async function endSession({ client, transport }) {
  await transport.terminateSession();
  await client.close();
}

/** A raw POST to the MCP endpoint: status, headers and body text. */
async function rawPost(url, body, headers = {}) {
  const response = await fetch(url, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      authorization: `Bearer ${TOKEN}`,
      ...headers,
    },
    body,
  });
  return { status: response.status, headers: response.headers, text: await response.text() };
}

/** A raw POST through `node:http`, which (unlike fetch) lets the test set `Host`. */
function postWithHost(url, host, body) {
  const target = new URL(url);
  return new Promise((resolve, reject) => {
    const request = http.request(
      {
        host: target.hostname,
        port: target.port,
        path: target.pathname,
        method: 'POST',
        headers: {
          host,
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          authorization: `Bearer ${TOKEN}`,
        },
      },
      (response) => {
        let text = '';
        response.setEncoding('utf8');
        response.on('data', (chunk) => (text += chunk));
        response.on('end', () => resolve({ status: response.statusCode, text }));
      },
    );
    request.on('error', reject);
    request.end(body);
  });
}

/** The status of a POST of `size` bytes of spaces through `node:http`. The server may answer
 *  and close before it has read the whole body, which fetch reports as a failed request: this
 *  takes the answer as it comes and stops sending then. */
function postSized(url, size, headers) {
  const target = new URL(url);
  return new Promise((resolve, reject) => {
    let answered = false;
    const request = http.request(
      {
        host: target.hostname,
        port: target.port,
        path: target.pathname,
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          authorization: `Bearer ${TOKEN}`,
          'content-length': size,
          ...headers,
        },
      },
      (response) => {
        answered = true;
        resolve(response.statusCode);
        response.resume();
        request.destroy();
      },
    );
    request.on('error', (error) => {
      if (!answered) reject(error);
    });
    const chunk = Buffer.alloc(1024 * 1024, ' ');
    let sent = 0;
    const pump = () => {
      while (!answered && sent < size) {
        const piece = chunk.subarray(0, Math.min(chunk.length, size - sent));
        sent += piece.length;
        if (!request.write(piece)) {
          request.once('drain', pump);
          return;
        }
      }
      if (!answered) request.end();
    };
    pump();
  });
}

function initializeBody(id = 0) {
  return JSON.stringify({
    jsonrpc: '2.0',
    id,
    method: 'initialize',
    params: {
      protocolVersion: LATEST_PROTOCOL_VERSION,
      capabilities: {},
      clientInfo: { name: 'toolhost-ts-raw', version: '0' },
    },
  });
}

/** The JSON-RPC messages of a response body: plain JSON or the `data:` lines of SSE. */
function bodyMessages(contentType, text) {
  if ((contentType ?? '').startsWith('application/json')) return [JSON.parse(text)];
  return text
    .split('\n')
    .filter((line) => line.startsWith('data:'))
    .map((line) => line.slice(5).trim())
    .filter((data) => data)
    .map((data) => JSON.parse(data));
}

// ---------------------------------------------------------------------------------------------
// Scenarios that run over either transport

const TOOL_NAMES = ['execute', 'process_input', 'process_list', 'process_output', 'process_signal'];

/** 1. tools/list: the five tools, with titles and the annotations the README promises. */
async function toolsAndAnnotations(client) {
  const { tools } = await client.listTools();
  assert.deepEqual(tools.map((t) => t.name).sort(), TOOL_NAMES);
  const tool = Object.fromEntries(tools.map((t) => [t.name, t]));
  for (const t of tools) {
    assert.equal(typeof t.title, 'string', `${t.name} has a title`);
    assert.ok(t.title.length > 0, `${t.name} has a title`);
    assert.ok(t.annotations, `${t.name} has annotations`);
    assert.equal(t.inputSchema.type, 'object', `${t.name} input schema`);
  }
  assert.ok('command' in tool.execute.inputSchema.properties, 'execute takes a command');
  const a = (name) => tool[name].annotations;
  assert.equal(a('execute').destructiveHint, true, 'execute is destructive');
  assert.equal(a('execute').openWorldHint, true, 'execute is open-world');
  assert.notEqual(a('execute').readOnlyHint, true, 'execute is not read-only');
  assert.equal(a('process_input').destructiveHint, true, 'process_input is destructive');
  assert.equal(a('process_input').openWorldHint, true, 'process_input is open-world');
  assert.equal(a('process_signal').destructiveHint, true, 'process_signal is destructive');
  assert.notEqual(a('process_signal').readOnlyHint, true, 'process_signal is not read-only');
  assert.equal(a('process_output').readOnlyHint, true, 'process_output is read-only');
  assert.notEqual(a('process_output').idempotentHint, true, 'process_output is not idempotent');
  assert.equal(a('process_list').readOnlyHint, true, 'process_list is read-only');
  assert.equal(a('process_list').idempotentHint, true, 'process_list is idempotent');
}

/** 3. The cut output of `seq 1 300000` as a resource: link, listing, template, ranges, pages. */
async function outputResource(client) {
  const result = await execute(client, { command: `seq 1 ${SEQ_N}` });
  const out = resultJson(result);
  assert.ok(out.truncated, `the output is cut: ${JSON.stringify(out).slice(0, 300)}`);
  const links = result.content.filter((c) => c.type === 'resource_link');
  assert.equal(links.length, 1, `one resource_link: ${JSON.stringify(result.content.map((c) => c.type))}`);
  const link = links[0];
  const match = link.uri.match(/^toolhost:\/\/process\/([^/?]+)\/output$/);
  assert.ok(match, `link URI: ${link.uri}`);
  const uri = link.uri;

  const { resources } = await client.listResources();
  const listed = resources.find((r) => r.uri === uri);
  assert.ok(listed, `listResources lists ${uri}: ${JSON.stringify(resources)}`);
  assert.equal(listed.mimeType, 'text/plain');
  if (listed.size !== undefined) assert.equal(listed.size, Buffer.byteLength(SEQ), 'listed size');

  const { resourceTemplates } = await client.listResourceTemplates();
  assert.ok(
    resourceTemplates.some(
      (t) => t.uriTemplate === 'toolhost://process/{id}/output{?offset,length,line,lines}',
    ),
    `template: ${JSON.stringify(resourceTemplates)}`,
  );

  const lines = await client.readResource({ uri: `${uri}?line=299999&lines=2` });
  assert.equal(lines.contents.length, 1);
  assert.equal(lines.contents[0].text, '299999\n300000\n', 'lines 299999 and 300000');

  const bytes = await client.readResource({ uri: `${uri}?offset=7&length=6` });
  assert.equal(bytes.contents[0].text, SEQ.slice(7, 13), 'a byte range');

  // Page through it from the plain URI.
  let next = uri;
  let whole = '';
  let pages = 0;
  while (next) {
    const page = await client.readResource({ uri: next });
    assert.equal(page.contents.length, 1);
    const content = page.contents[0];
    assert.equal(typeof content.text, 'string', `page ${pages} is text`);
    const size = Buffer.byteLength(content.text);
    assert.ok(size <= 256 * 1024, `page ${pages} has ${size} bytes, over 256 KiB`);
    assert.ok(size > 0, `page ${pages} is not empty`);
    if (pages === 0) {
      assert.ok(content.text.startsWith('1\n2\n3\n'), 'the first page starts at the beginning');
    }
    whole += content.text;
    pages += 1;
    next = content._meta?.['toolhost/next'];
    if (next !== undefined) {
      assert.equal(
        next,
        `${uri}?offset=${Buffer.byteLength(whole)}`,
        `page ${pages}: toolhost/next names the rest`,
      );
    }
    assert.ok(pages < 50, 'paging ends');
  }
  assert.ok(pages >= 8, `${Buffer.byteLength(SEQ)} bytes take 8 pages or more, got ${pages}`);
  assert.equal(whole.length, SEQ.length, 'the pages hold the whole output');
  assert.ok(whole === SEQ, 'the pages join up to the exact output');

  const missing = await rejection(
    client.readResource({ uri: 'toolhost://process/nonexistent/output' }),
    'reading an unknown process',
  );
  assert.ok(missing instanceof McpError, String(missing));
  assert.equal(missing.code, -32002, String(missing));
  return uri;
}

/** 5. An aborted call rejects at once and the command it started is gone soon after. */
async function cancellation(client) {
  const mark = marker();
  const controller = new AbortController();
  const call = execute(
    client,
    { command: `echo started; sleep 300.${mark}`, timeout: '120s' },
    { signal: controller.signal, timeout: 120000 },
  );
  // Rejections are checked below; keep Node from calling it unhandled meanwhile.
  call.catch(() => {});
  await waitPresent(mark);
  const aborted = Date.now();
  controller.abort(new Error('cancelled by the test'));
  const error = await rejection(within(5000, call, 'the aborted call'), 'the aborted call');
  assert.match(String(error?.message ?? error), /cancelled by the test|abort/i);
  assert.ok(Date.now() - aborted < 2000, `the call rejected ${Date.now() - aborted} ms after abort`);
  await waitGone(mark, 5000, 'after cancelling the call');
  await echo(client, 'after-cancel');
}

// ---------------------------------------------------------------------------------------------
// stdio group

async function stdioTools() {
  const client = await stdioClient();
  try {
    await toolsAndAnnotations(client);
  } finally {
    await client.close();
  }
}

async function stdioEcho() {
  const client = await stdioClient();
  try {
    await echo(client, 'hello');
    const bad = await client.callTool({ name: 'execute', arguments: { bogus: 1 } });
    assert.equal(bad.isError, true, `bad arguments are a tool error: ${JSON.stringify(bad)}`);
  } finally {
    await client.close();
  }
}

async function stdioResources() {
  const client = await stdioClient();
  try {
    await outputResource(client);
  } finally {
    await client.close();
  }
}

async function stdioCancellation() {
  const client = await stdioClient();
  let mark;
  try {
    await cancellation(client);
    // A disconnect (stdin closes) terminates what the session started, also in the background.
    mark = marker();
    const bg = resultJson(
      await execute(client, { command: `sleep 300.${mark}`, run_in_background: true }),
    );
    assert.ok(bg.background_process_id, `a background process: ${JSON.stringify(bg)}`);
    await waitPresent(mark);
  } finally {
    await client.close();
  }
  await waitGone(mark, 5000, 'after the stdio client disconnected');
}

/** 4. The output file the one-shot CLI names is complete after the CLI has exited. */
async function cliOutputFile() {
  const stateDir = freshDir('cli-state');
  const run = spawnSync(
    BIN,
    ['--state-dir', stateDir, 'call', 'execute', JSON.stringify({ command: `seq 1 ${SEQ_N}` })],
    { env: ENV, encoding: 'utf8', timeout: 60000, maxBuffer: 64 * 1024 * 1024 },
  );
  assert.equal(run.status, 0, `toolhost call failed (${run.status}): ${run.stderr}`);
  const out = JSON.parse(run.stdout);
  assert.ok(out.truncated, 'the CLI result is cut');
  assert.equal(typeof out.output_file, 'string', `output_file: ${JSON.stringify(Object.keys(out))}`);
  assert.ok(out.output_file.startsWith(stateDir), `${out.output_file} lies in ${stateDir}`);
  const text = fs.readFileSync(out.output_file, 'utf8');
  assert.equal(text.length, SEQ.length, 'the output file holds all the output');
  assert.ok(text === SEQ, 'the output file is the exact output');
}

// ---------------------------------------------------------------------------------------------
// heartbeat group

/** 6. A silent 70 s command finishes under the SDK's default 60 s request timeout, which the
 *  heartbeat progress notifications keep restarting. */
async function heartbeat() {
  const client = await stdioClient();
  try {
    const progress = [];
    const started = Date.now();
    const result = await execute(
      client,
      { command: 'sleep 70; echo done', timeout: '90s' },
      { onprogress: (p) => progress.push(p), resetTimeoutOnProgress: true },
    );
    const took = Date.now() - started;
    const out = resultJson(result);
    assert.equal(out.output.trim(), 'done', JSON.stringify(out));
    assert.equal(out.exit_code, 0, JSON.stringify(out));
    assert.ok(took > 60000, `the call took ${took} ms: longer than the default timeout`);
    // At least one every 5 s of silence.
    assert.ok(progress.length >= 12, `${progress.length} progress notifications in ${took} ms`);
    for (let i = 1; i < progress.length; i++) {
      assert.ok(progress[i].progress > progress[i - 1].progress, 'progress increases');
    }
    assert.ok(
      progress.every((p) => typeof p.message === 'string' && p.message.length > 0),
      'each heartbeat says how it goes',
    );
    console.log(`  ${progress.length} progress notifications, last: ${JSON.stringify(progress.at(-1))}`);
  } finally {
    await client.close();
  }
}

// ---------------------------------------------------------------------------------------------
// malformed group: raw lines over stdio with the SDK client in the loop

/**
 * An SDK Transport over `toolhost serve`'s stdin/stdout (one JSON message a line) that can
 * also write raw lines. Answers to requests the SDK did not send (raw ones, or broken lines
 * answered with `id: null`) are kept for the test instead of reaching the SDK.
 */
class RawLineTransport {
  constructor(command, args, env) {
    this.command = command;
    this.args = args;
    this.env = env;
    this.sdkPending = new Set();
    this.raw = [];
    this.rawWaiters = [];
  }

  async start() {
    const child = track(
      spawn(this.command, this.args, { env: this.env, stdio: ['pipe', 'pipe', 'inherit'] }),
    );
    this.child = child;
    let buffer = Buffer.alloc(0);
    child.stdout.on('data', (chunk) => {
      buffer = Buffer.concat([buffer, chunk]);
      for (let nl = buffer.indexOf(10); nl >= 0; nl = buffer.indexOf(10)) {
        const line = buffer.subarray(0, nl).toString('utf8');
        buffer = buffer.subarray(nl + 1);
        if (line.trim()) this.receive(line);
      }
    });
    child.on('error', (error) => this.onerror?.(error));
    child.on('exit', () => this.onclose?.());
    child.stdin.on('error', (error) => this.onerror?.(error));
  }

  receive(line) {
    let message;
    try {
      message = JSON.parse(line);
    } catch (error) {
      this.onerror?.(new Error(`the server wrote a line that is not JSON: ${line}`));
      return;
    }
    const isResponse =
      message && typeof message === 'object' && !Array.isArray(message) && !('method' in message);
    if (isResponse && this.sdkPending.has(message.id)) {
      this.sdkPending.delete(message.id);
      this.onmessage?.(message);
    } else if (isResponse || Array.isArray(message)) {
      const waiter = this.rawWaiters.shift();
      if (waiter) waiter(message);
      else this.raw.push(message);
    } else {
      this.onmessage?.(message);
    }
  }

  async send(message) {
    if ('method' in message && 'id' in message) this.sdkPending.add(message.id);
    await this.write(`${JSON.stringify(message)}\n`);
  }

  /** Write `line` (a string or bytes) and a newline as they are. */
  async sendRaw(line) {
    await this.write(Buffer.concat([Buffer.from(line), Buffer.from('\n')]));
  }

  write(data) {
    return new Promise((resolve, reject) => {
      this.child.stdin.write(data, (error) => (error ? reject(error) : resolve()));
    });
  }

  /** The next answer to a raw line (waiting up to `ms`). */
  nextRaw(what, ms = 5000) {
    if (this.raw.length) return Promise.resolve(this.raw.shift());
    return within(
      ms,
      new Promise((resolve) => this.rawWaiters.push(resolve)),
      `${what}: an answer to the raw line`,
    );
  }

  /** The next `n` answers to raw lines, or as many as come within `ms`. */
  async collectRaw(n, ms) {
    const answers = [];
    const deadline = Date.now() + ms;
    while (answers.length < n && Date.now() < deadline) {
      try {
        answers.push(await this.nextRaw('collecting', Math.max(1, deadline - Date.now())));
      } catch {
        break;
      }
    }
    return answers;
  }

  /** The raw answers that came without being waited for, emptied. */
  takeUnexpected() {
    const left = this.raw;
    this.raw = [];
    return left;
  }

  async close() {
    if (!this.child || this.child.exitCode !== null) return;
    const exited = new Promise((resolve) => this.child.on('exit', resolve));
    this.child.stdin.end();
    await within(15000, exited, 'the stdio server exiting when stdin closes');
  }
}

/** Run `scenario` with an SDK client on a raw-line transport to `toolhost serve`. */
async function withRawSession(scenario) {
  const transport = new RawLineTransport(BIN, ['--state-dir', freshDir('state'), 'serve'], ENV);
  const client = newClient();
  try {
    await within(30000, client.connect(transport), 'connecting the raw-line transport');
    assert.equal(client.getServerVersion()?.name, 'toolhost');
    await echo(client, 'before');
    await scenario({ transport, client });
  } finally {
    await client.close();
  }
}

/** 8. Each kind of broken line gets its error (one at a time, an SDK call after each). */
async function malformedLines({ transport, client }) {
  /** After each broken line: no other answer came, and the SDK client is still served. */
  let round = 0;
  const stillServing = async (what) => {
    await echo(client, `still${round++}`);
    assert.deepEqual(transport.takeUnexpected(), [], `${what}: no answer besides the expected one`);
  };
  const expectError = async (line, code, id, what) => {
    await transport.sendRaw(line);
    const answer = await transport.nextRaw(what);
    assert.equal(answer.jsonrpc, '2.0', `${what}: ${JSON.stringify(answer)}`);
    assert.equal(answer.error?.code, code, `${what}: ${JSON.stringify(answer)}`);
    assert.deepEqual(answer.id, id, `${what}: the answer's id: ${JSON.stringify(answer)}`);
    assert.equal(typeof answer.error.message, 'string');
    await stillServing(what);
  };
  const call = (id, args) =>
    `{"jsonrpc":"2.0","id":${id},"method":"tools/call","params":{"name":"execute","arguments":${args}}}`;

  await expectError('{not json', -32700, null, 'bad syntax');
  await expectError(
    Buffer.concat([
      Buffer.from('{"jsonrpc":"2.0","id":70007,"method":"tools/call","params":{"name":"execute",'),
      Buffer.from('"arguments":{"command":"echo '),
      Buffer.from([0xff, 0xfe, 0xc3]),
      Buffer.from('"}}}'),
    ]),
    -32700,
    70007,
    'invalid UTF-8 in a string',
  );
  await expectError(call(70008, '{"command":"echo \\ud800"}'), -32700, 70008, 'a lone surrogate');
  const deep = `${'['.repeat(10000)}${']'.repeat(10000)}`;
  await expectError(call(70009, `{"command":"echo hi","x":${deep}}`), -32700, 70009, 'nesting 10,000 deep');

  // Two messages on one line: -32700, none of them is run.
  await transport.sendRaw(`${call(70010, '{"command":"echo one"}')}${call(70011, '{"command":"echo two"}')}`);
  const first = await transport.nextRaw('two messages on a line');
  assert.equal(first.error?.code, -32700, `two messages on a line: ${JSON.stringify(first)}`);
  await echo(client, 'after-two');
  for (const answer of [first, ...transport.takeUnexpected()]) {
    assert.equal(answer.error?.code, -32700, `two messages on a line: ${JSON.stringify(answer)}`);
    assert.ok([null, 70010, 70011].includes(answer.id), `two messages: id ${answer.id}`);
  }

  await expectError(
    '{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"execute","arguments":"echo hi"}}',
    -32602,
    9,
    'arguments that are a string',
  );
  await expectError('{"jsonrpc":"2.0","id":10}', -32600, 10, 'an object that is no request');
  await expectError('[]', -32600, null, 'an empty array');
  await expectError('42', -32600, null, 'a number');

  // A reused id of a pending request is refused; the first request keeps its answer.
  await transport.sendRaw(call(70020, '{"command":"sleep 1; echo first"}'));
  await transport.sendRaw('{"jsonrpc":"2.0","id":70020,"method":"ping"}');
  const refused = await transport.nextRaw('a reused pending id');
  assert.equal(refused.id, 70020, JSON.stringify(refused));
  assert.equal(refused.error?.code, -32600, `a reused pending id: ${JSON.stringify(refused)}`);
  const kept = await transport.nextRaw('the first of two requests with one id', 15000);
  assert.equal(kept.id, 70020, JSON.stringify(kept));
  assert.equal(JSON.parse(kept.result?.content?.[0]?.text ?? '{}').output?.trim(), 'first', JSON.stringify(kept));
  await stillServing('a reused pending id');

  // Malformed notifications get no answer, and the session keeps serving.
  await transport.sendRaw('{"jsonrpc":"2.0","method":"notifications/cancelled","params":"bogus"}');
  await transport.sendRaw('{"jsonrpc":"2.0","method":"notifications/progress","params":[1,2]}');
  await stillServing('malformed notifications');
}

/** Broken lines pipelined between valid requests (as a client may write them in one go): each
 *  gets its answer, also while the server is busy writing the others. */
async function pipelinedBrokenLines({ transport, client }) {
  const pairs = 100;
  let burst = '';
  for (let i = 0; i < pairs; i++) {
    burst += `{"jsonrpc":"2.0","id":${80000 + i},"method":"ping"}\n`;
    burst += `{"jsonrpc":"2.0","id":${90000 + i},"method":"ping"}{"jsonrpc":"2.0"}\n`;
  }
  await transport.write(burst);
  const burstAnswers = await transport.collectRaw(2 * pairs, 10000);
  const pings = burstAnswers.filter((m) => m.id >= 80000 && m.id < 80000 + pairs);
  const parseErrors = burstAnswers.filter((m) => m.id >= 90000 && m.id < 90000 + pairs);
  assert.equal(pings.length, pairs, 'answers to the pings of the burst');
  assert.ok(pings.every((m) => m.result !== undefined), 'the pings succeed');
  assert.ok(parseErrors.every((m) => m.error?.code === -32700), 'the broken lines get -32700');
  assert.equal(
    parseErrors.length,
    pairs,
    `of ${pairs} broken lines between pings (each with its id), only ${parseErrors.length} were answered`,
  );
  assert.equal(burstAnswers.length, 2 * pairs, 'nothing else was answered');
  await echo(client, 'after-burst');
}

async function malformedHttp() {
  const server = await httpServer();
  try {
    const session = await httpClient(server);
    const headers = {
      'mcp-session-id': session.transport.sessionId,
      'mcp-protocol-version': session.transport.protocolVersion ?? LATEST_PROTOCOL_VERSION,
    };
    const cases = [
      ['{not json', -32700, null],
      ['{"jsonrpc":"2.0","id":4,"method":', -32700, 4],
      ['{"jsonrpc":"2.0","id":7}', -32600, 7],
    ];
    for (const [body, code, id] of cases) {
      const response = await rawPost(server.url, body, headers);
      assert.equal(response.status, 400, `${body}: status ${response.status}: ${response.text}`);
      const answer = JSON.parse(response.text);
      assert.equal(answer.error?.code, code, `${body}: ${response.text}`);
      assert.deepEqual(answer.id, id, `${body}: ${response.text}`);
    }
    // Malformed params of a known method: the proper error (over the session's normal path).
    const response = await rawPost(
      server.url,
      '{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"execute","arguments":"echo hi"}}',
      headers,
    );
    const answers = bodyMessages(response.headers.get('content-type'), response.text);
    const answer = answers.find((m) => m.id === 9);
    assert.equal(answer?.error?.code, -32602, `string arguments over HTTP: ${response.status} ${response.text}`);
    // A batch: the revision has none; 400 with one refusal per request.
    const batch = await rawPost(
      server.url,
      '[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]',
      headers,
    );
    assert.equal(batch.status, 400, `a batch: ${batch.status} ${batch.text}`);
    const refusals = JSON.parse(batch.text);
    assert.ok(Array.isArray(refusals), batch.text);
    assert.deepEqual(refusals.map((m) => m.id).sort(), [1, 2], batch.text);
    for (const refusal of refusals) assert.equal(refusal.error?.code, -32600, batch.text);
    // Over 16 MiB: 413.
    const big = await postSized(server.url, 17 * 1024 * 1024, headers);
    assert.equal(big, 413, 'a 17 MiB body');

    await echo(session.client, 'http-after-malformed');
    await endSession(session);
  } finally {
    await server.stop();
  }
}

// ---------------------------------------------------------------------------------------------
// http group

async function httpBasics() {
  const server = await httpServer();
  try {
    const session = await httpClient(server);
    await toolsAndAnnotations(session.client);
    await echo(session.client, 'hello');

    // 3. Resources, and another session sees none of them.
    const uri = await outputResource(session.client);
    const other = await httpClient(server);
    const { resources } = await other.client.listResources();
    assert.deepEqual(resources, [], 'another session lists no resources');
    for (const foreign of [uri, `${uri}?line=1&lines=2`]) {
      const error = await rejection(other.client.readResource({ uri: foreign }), 'a foreign read');
      assert.ok(error instanceof McpError, String(error));
      assert.equal(error.code, -32002, `another session reading ${foreign}: ${error}`);
    }
    await endSession(other);
    // The first session can still read it.
    const again = await session.client.readResource({ uri: `${uri}?line=1&lines=3` });
    assert.equal(again.contents[0].text, '1\n2\n3\n');

    // Ending the session (DELETE) terminates its processes, also those in the background.
    const mark = marker();
    const bg = resultJson(
      await execute(session.client, { command: `sleep 300.${mark}`, run_in_background: true }),
    );
    assert.ok(bg.background_process_id, `a background process: ${JSON.stringify(bg)}`);
    await waitPresent(mark);
    await endSession(session);
    await waitGone(mark, 5000, 'after DELETE of the session');
  } finally {
    await server.stop();
  }
}

/** 7. A page of a foreign origin is refused with 403; the server's own origin and those
 *  given with --allowed-origin are accepted; so is only a loopback or the bound `Host`. */
async function httpOrigins() {
  const server = await httpServer([
    '--allowed-origin', 'https://app.example.com:443',
    '--allowed-origin', 'http://tool.example:*',
  ]);
  try {
    const evil = await rawPost(server.url, initializeBody(), { origin: 'http://evil.example' });
    assert.equal(evil.status, 403, `a foreign origin: ${evil.status} ${evil.text}`);
    assert.equal(evil.headers.get('mcp-session-id'), null, 'no session for a foreign origin');
    const scheme = await rawPost(server.url, initializeBody(), { origin: 'https://tool.example:8123' });
    assert.equal(scheme.status, 403, `an allowed host with another scheme: ${scheme.status}`);

    for (const origin of [server.origin, 'https://app.example.com', 'http://tool.example:8123']) {
      const response = await rawPost(server.url, initializeBody(), { origin });
      assert.equal(response.status, 200, `origin ${origin}: ${response.status} ${response.text}`);
      const messages = bodyMessages(response.headers.get('content-type'), response.text);
      assert.equal(messages.find((m) => m.id === 0)?.result?.serverInfo?.name, 'toolhost', response.text);
      const id = response.headers.get('mcp-session-id');
      assert.ok(id, `a session id for origin ${origin}`);
      const deleted = await fetch(server.url, {
        method: 'DELETE',
        headers: { authorization: `Bearer ${TOKEN}`, 'mcp-session-id': id, origin },
      });
      assert.ok(deleted.ok, `DELETE: ${deleted.status}`);
    }

    // The Host header must name a loopback host or the bound address (DNS rebinding).
    const rebound = await postWithHost(server.url, 'evil.example', initializeBody());
    assert.equal(rebound.status, 403, `Host: evil.example: ${rebound.status} ${rebound.text}`);
    const port = new URL(server.url).port;
    const local = await postWithHost(server.url, `localhost:${port}`, initializeBody());
    assert.equal(local.status, 200, `Host: localhost: ${local.status} ${local.text}`);

    // A wrong token: 401.
    const anonymous = await rawPost(server.url, initializeBody(), { authorization: 'Bearer wrong' });
    assert.equal(anonymous.status, 401, `a wrong token: ${anonymous.status}`);
  } finally {
    await server.stop();
  }
}

/** 10. With --max-sessions 1 a second session is refused (503 and a JSON-RPC error) until the
 *  first one ends. */
async function httpMaxSessions() {
  const server = await httpServer(['--max-sessions', '1']);
  try {
    const first = await httpClient(server);
    const second = newClient();
    const error = await rejection(
      within(15000, second.connect(httpTransport(server)), 'a second session'),
      'a second session',
    );
    assert.ok(error instanceof StreamableHTTPError, `the SDK's error: ${error}`);
    assert.equal(error.code, 503, `a second session: ${error}`);
    const raw = await rawPost(server.url, initializeBody(5));
    assert.equal(raw.status, 503, `a raw second initialize: ${raw.status} ${raw.text}`);
    const answer = JSON.parse(raw.text);
    assert.equal(answer.jsonrpc, '2.0', raw.text);
    assert.equal(answer.id, 5, raw.text);
    assert.equal(typeof answer.error?.code, 'number', raw.text);
    assert.match(answer.error.message, /session/i, raw.text);
    // The first session still works; once it ends there is room again.
    await echo(first.client, 'first');
    await endSession(first);
    const third = await httpClient(server);
    await echo(third.client, 'third');
    await endSession(third);
  } finally {
    await server.stop();
  }
}

async function httpCancellation() {
  const server = await httpServer();
  try {
    const session = await httpClient(server);
    await cancellation(session.client);
    await endSession(session);
  } finally {
    await server.stop();
  }
}

// ---------------------------------------------------------------------------------------------
// http-idle group

/** 9. An idle session ends on time (its background process with it; its id is then unknown),
 *  but a call in flight longer than the idle timeout keeps its session. */
async function httpIdle() {
  const server = await httpServer(['--idle-timeout', '2s']);
  try {
    // A call longer than the idle timeout completes, and the session lives on.
    const busy = await httpClient(server);
    const started = Date.now();
    const long = resultJson(
      await execute(busy.client, { command: 'sleep 4; echo slow', timeout: '10s' }),
    );
    assert.equal(long.output.trim(), 'slow', JSON.stringify(long));
    assert.equal(long.exit_code, 0, JSON.stringify(long));
    assert.ok(Date.now() - started >= 4000, 'the call lasted longer than the idle timeout');
    await echo(busy.client, 'still-here');
    await endSession(busy);

    // An idle session ends within a few seconds, with its background process.
    const idle = await httpClient(server);
    const mark = marker();
    const bg = resultJson(
      await execute(idle.client, { command: `sleep 300.${mark}`, run_in_background: true }),
    );
    assert.ok(bg.background_process_id, `a background process: ${JSON.stringify(bg)}`);
    await waitPresent(mark);
    const idleSince = Date.now();
    await waitGone(mark, 10000, 'the idle session expiring');
    console.log(`  the idle session's process ended ${Date.now() - idleSince} ms after its last request`);
    const error = await rejection(
      within(10000, echo(idle.client, 'too-late'), 'a call on the expired session'),
      'a call on the expired session',
    );
    assert.ok(error instanceof StreamableHTTPError, `the SDK's error: ${error}`);
    assert.equal(error.code, 404, `a call on the expired session: ${error}`);
    await idle.client.close();
  } finally {
    await server.stop();
  }
}

// ---------------------------------------------------------------------------------------------
// logging group: the hostile fixture plugin hitting its limits, heard through `logging`

/** The hostile fixture's manifest: a CPU limit `spin` runs into. */
const HOSTILE_MANIFEST = '[grants]\nprocess = true\n[limits]\ncpu_time = "500ms"\nwall_time = "5s"\n';

/** Flags for a server with only the hostile fixture component (its path in
 *  `TOOLHOST_HOSTILE_COMPONENT`, set by the Rust test) as plugin `hostile`. */
function hostileFlags() {
  const component = process.env.TOOLHOST_HOSTILE_COMPONENT ?? '';
  assert.ok(component && fs.statSync(component).isFile(), `TOOLHOST_HOSTILE_COMPONENT ${component} is no file`);
  const dir = freshDir('plugins');
  fs.copyFileSync(component, path.join(dir, 'hostile.wasm'));
  fs.writeFileSync(path.join(dir, 'hostile.toml'), HOSTILE_MANIFEST);
  return ['--policy', 'none', '--plugins', dir];
}

/** The params of every `notifications/message` the SDK hands `client`'s handler. */
function logMessages(client) {
  const received = [];
  client.setNotificationHandler(LoggingMessageNotificationSchema, (notification) => {
    received.push(notification.params);
  });
  return received;
}

/** The hostile plugin's `spin`, which its CPU limit stops: an error result. */
async function spin(client) {
  const result = await client.callTool({ name: 'spin', arguments: {} });
  assert.equal(result.isError, true, `spin is stopped by its limit: ${JSON.stringify(result)}`);
}

/** How long no further log message may arrive, after a ping has come back. */
const LOG_QUIET_MS = 500;

/** A ping (what the server wrote on this path before answering it has arrived), then
 *  LOG_QUIET_MS in which `received` stays at `had` messages (fails at the first more). */
async function noMoreMessages(client, received, had, what) {
  await client.ping();
  const deadline = Date.now() + LOG_QUIET_MS;
  for (;;) {
    assert.equal(received.length, had, `${what}: ${had} log messages expected: ${JSON.stringify(received)}`);
    if (Date.now() >= deadline) return;
    await sleep(20);
  }
}

/** `received` holds one line: the warning that `spin` hit the hostile plugin's limit, without
 *  the session's own scope. */
function checkLimitLine(received, what) {
  assert.equal(received.length, 1, `${what}: one log message: ${JSON.stringify(received)}`);
  const [line] = received;
  assert.equal(line.level, 'warning', `${what}: ${JSON.stringify(line)}`);
  const data = line.data;
  assert.equal(typeof data, 'object', `${what}: data is an object: ${JSON.stringify(line)}`);
  assert.equal(typeof data.message, 'string', `${what}: data.message: ${JSON.stringify(line)}`);
  assert.match(data.message, /limit/, `${what}: names the limit: ${JSON.stringify(line)}`);
  assert.match(data.message, /hostile/, `${what}: names the plugin: ${JSON.stringify(line)}`);
  assert.equal(data.tool, 'spin', `${what}: names the tool: ${JSON.stringify(line)}`);
  assert.ok(!('scope' in data), `${what}: the session's own scope is not repeated: ${JSON.stringify(line)}`);
}

/** The `logging` capability is declared; `spin` before a level is set sends nothing; after
 *  `warning` is set, `spin` arrives as one warning. */
async function checkLogging(client, received, what) {
  assert.ok(client.getServerCapabilities()?.logging, `${what}: the logging capability`);
  await spin(client);
  await noMoreMessages(client, received, 0, `${what}: before a level is set`);
  await client.setLoggingLevel('warning');
  await spin(client);
  assert.ok(
    await eventually(10000, () => received.length > 0),
    `${what}: the limit hit arrives as a log message within 10 s`,
  );
  // Only this one: the spin before the level was set does not come late either.
  await noMoreMessages(client, received, 1, `${what}: after the level was set`);
  checkLimitLine(received, what);
  console.log(`  ${what}: ${JSON.stringify(received[0])}`);
}

async function stdioLogging() {
  const client = await stdioClient(freshDir('state'), hostileFlags());
  try {
    await checkLogging(client, logMessages(client), 'stdio');
  } finally {
    await client.close();
  }
}

/** Over HTTP a session hears of its own calls only: a second session that set the level too
 *  gets none of the first one's lines, and then its own. */
async function httpLogging() {
  const server = await httpServer(hostileFlags());
  try {
    const session = await httpClient(server);
    const mine = logMessages(session.client);
    const bystander = await httpClient(server);
    const theirs = logMessages(bystander.client);
    await bystander.client.setLoggingLevel('warning');
    await checkLogging(session.client, mine, 'http');
    await noMoreMessages(bystander.client, theirs, 0, "the bystander, after the other session's spin");
    // The bystander does hear its own (so its quiet above meant something); the first
    // session does not.
    await spin(bystander.client);
    assert.ok(
      await eventually(10000, () => theirs.length > 0),
      "the bystander's own limit hit arrives within 10 s",
    );
    await noMoreMessages(bystander.client, theirs, 1, 'the bystander, after its spin');
    checkLimitLine(theirs, 'the bystander');
    await noMoreMessages(session.client, mine, 1, "the first session, after the bystander's spin");
    await endSession(bystander);
    await endSession(session);
  } finally {
    await server.stop();
  }
}

// ---------------------------------------------------------------------------------------------

const GROUPS = {
  stdio: [
    ['stdio: tools/list with titles and annotations', stdioTools],
    ['stdio: execute echo hello', stdioEcho],
    ['stdio: cut output as a paged resource', stdioResources],
    ['stdio: an aborted call stops its command', stdioCancellation],
    ['cli: output_file complete after the CLI exits', cliOutputFile],
  ],
  malformed: [
    ['stdio: malformed lines get their errors, the SDK session keeps serving',
      () => withRawSession(malformedLines)],
    ['stdio: broken lines pipelined between requests are all answered',
      () => withRawSession(pipelinedBrokenLines)],
    ['http: malformed bodies get 400 with their JSON-RPC errors', malformedHttp],
  ],
  http: [
    ['http: tools, echo, resources isolated per session', httpBasics],
    ['http: foreign origins are refused, the own one accepted', httpOrigins],
    ['http: --max-sessions 1 refuses a second session', httpMaxSessions],
    ['http: an aborted call stops its command', httpCancellation],
  ],
  'http-idle': [['http: idle sessions end on time, busy ones do not', httpIdle]],
  heartbeat: [['stdio: a silent 70 s command outlives the default request timeout', heartbeat]],
  logging: [
    ['stdio: limit hits reach a client that set a level, none before', stdioLogging],
    ['http: a session hears of its own limit hits only', httpLogging],
  ],
};
await runGroup(GROUPS, (group) => (group === 'heartbeat' ? 120000 : 90000));
