// What the client scripts of this directory share (`mcp_client.mjs`, the 1.x SDK, and
// `mcp_2026.mjs`, the 2.x SDK): the command line, the children they start, temporary
// directories, markers and the /proc scan for processes, deadlines, the HTTP server, and the
// loop that runs a group of scenarios. No SDK import here: each script brings its own.
//
// Every script is run as `node SCRIPT TOOLHOST_BINARY GROUP`; its last line is `typescript mcp
// client: ok GROUP` when every scenario of the group passed.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export const BIN = process.argv[2];
export const GROUP = process.argv[3];
if (!BIN || !GROUP) {
  console.error(`usage: node ${path.basename(process.argv[1] ?? 'SCRIPT')} TOOLHOST_BINARY GROUP`);
  process.exit(2);
}

/** Every child this script started, killed when it exits (also on failure or SIGTERM). */
const children = new Set();
export function track(child) {
  children.add(child);
  child.on('exit', () => children.delete(child));
  return child;
}
function killChildren() {
  for (const child of children) {
    try {
      child.kill('SIGTERM');
    } catch {
      // gone already
    }
  }
}
process.on('exit', killChildren);
process.on('SIGTERM', () => {
  console.error('SIGTERM: stopping');
  killChildren();
  process.exit(1);
});

/** Environment for servers: the caller's (component cache location and all), quiet logs. */
export const ENV = { ...process.env, TOOLHOST_LOG: process.env.TOOLHOST_LOG ?? 'error' };
export const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'toolhost-ts-'));
process.on('exit', () => fs.rmSync(TMP, { recursive: true, force: true }));
let dirs = 0;
/** A fresh private directory (for state directories and token files). */
export function freshDir(name) {
  const dir = path.join(TMP, `${name}-${dirs++}`);
  fs.mkdirSync(dir, { mode: 0o700 });
  return dir;
}

let markers = 0;
/** A unique, numeric marker: `sleep 300.MARKER` is a valid sleep and shows it in /proc. */
export function marker() {
  return `${process.pid}${String(markers++).padStart(4, '0')}`;
}

/** The pids of live (not zombie) processes whose command line contains `needle`. */
export function processesWith(needle) {
  const pids = [];
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    try {
      const cmdline = fs.readFileSync(`/proc/${name}/cmdline`, 'latin1').replaceAll('\0', ' ');
      if (!cmdline.includes(needle)) continue;
      const stat = fs.readFileSync(`/proc/${name}/stat`, 'latin1');
      if (stat.slice(stat.lastIndexOf(')') + 1).trim().startsWith('Z')) continue;
      pids.push(Number(name));
    } catch {
      // the process ended while we looked
    }
  }
  return pids;
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Check `condition` every 25 ms until it holds (true) or `ms` pass (false). */
export async function eventually(ms, condition) {
  const deadline = Date.now() + ms;
  for (;;) {
    if (await condition()) return true;
    if (Date.now() >= deadline) return false;
    await sleep(25);
  }
}

export async function waitPresent(needle, ms = 15000) {
  assert.ok(
    await eventually(ms, () => processesWith(needle).length > 0),
    `no process with ${needle} appeared within ${ms} ms`,
  );
}

export async function waitGone(needle, ms, what) {
  assert.ok(
    await eventually(ms, () => processesWith(needle).length === 0),
    `${what}: processes with ${needle} still running after ${ms} ms: ${processesWith(needle)}`,
  );
}

/** `promise`, or a rejection naming `what` once `ms` pass. */
export function within(ms, promise, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no outcome within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** The rejection of `promise` (fails if it resolves). */
export async function rejection(promise, what) {
  try {
    const value = await promise;
    assert.fail(`${what}: expected an error, got ${JSON.stringify(value)}`);
  } catch (error) {
    if (error instanceof assert.AssertionError) throw error;
    return error;
  }
}


/** The JSON result of an `execute`-style call: structured content, also as text. */
export function resultJson(result) {
  assert.ok(!result.isError, `tool error: ${JSON.stringify(result)}`);
  const text = result.content.find((c) => c.type === 'text')?.text;
  assert.ok(text, `no text content: ${JSON.stringify(result)}`);
  const parsed = JSON.parse(text);
  if (result.structuredContent !== undefined) {
    assert.deepEqual(result.structuredContent, parsed, 'structured content = text content');
  }
  return parsed;
}
// HTTP server

export const TOKEN = `ts-token-${process.pid}-0123456789abcdef`;

/**
 * `toolhost serve --http 127.0.0.1:0 --token-file F EXTRA...`, once it announces its URL. The
 * token file holds TOKEN alone, or with `tokens` (principal name -> token) one `NAME TOKEN`
 * line each. `env` adds variables to the server's environment.
 */
export async function httpServer(extra = [], { tokens, env = {} } = {}) {
  const dir = freshDir('http');
  const tokenFile = path.join(dir, 'token');
  const lines = tokens
    ? Object.entries(tokens).map(([name, token]) => `${name} ${token}\n`).join('')
    : `${TOKEN}\n`;
  fs.writeFileSync(tokenFile, lines, { mode: 0o600 });
  const child = track(
    spawn(
      BIN,
      ['--state-dir', path.join(dir, 'state'), 'serve', '--http', '127.0.0.1:0',
        '--token-file', tokenFile, ...extra],
      { env: { ...ENV, ...env }, stdio: ['ignore', 'inherit', 'pipe'] },
    ),
  );
  const url = await within(
    30000,
    new Promise((resolve, reject) => {
      let buffer = '';
      child.stderr.setEncoding('utf8');
      child.stderr.on('data', (chunk) => {
        process.stderr.write(chunk);
        buffer += chunk;
        // Only a whole line: a chunk may end in the middle of the address.
        const found = buffer.match(/serving MCP on (http:\/\/\S+)\r?\n/);
        if (found) resolve(found[1]);
      });
      child.on('exit', (code) => reject(new Error(`the HTTP server exited (${code}) before serving`)));
    }),
    'the HTTP server announcing its address',
  );
  // It announces once it listens; check that it accepts connections all the same.
  assert.ok(
    await eventually(10000, async () => {
      try {
        await fetch(url, { method: 'GET' });
        return true;
      } catch {
        return false;
      }
    }),
    `the HTTP server does not accept connections at ${url}`,
  );
  return {
    url,
    origin: new URL(url).origin,
    async stop() {
      if (child.exitCode !== null) return;
      const exited = new Promise((resolve) => child.on('exit', resolve));
      child.kill('SIGTERM');
      await within(15000, exited, 'the HTTP server stopping on SIGTERM');
    },
  };
}

// ---------------------------------------------------------------------------------------------

/**
 * Run the scenarios of `GROUP` from `groups` (name -> [[scenario name, async function]]), each
 * within `limitMs(GROUP)`; every scenario runs, so one failure does not hide another. Exits
 * the process: 0 with the ok line when all passed, 1 naming the failed ones.
 */
export async function runGroup(groups, limitMs = () => 90000) {
  const scenarios = groups[GROUP];
  if (!scenarios) {
    console.error(`unknown group ${GROUP}; groups: ${Object.keys(groups).join(', ')}`);
    process.exit(2);
  }
  const limit = limitMs(GROUP);
  const failed = [];
  for (const [name, scenario] of scenarios) {
    const started = Date.now();
    try {
      await within(limit, scenario(), name);
      console.log(`ok ${name} (${Date.now() - started} ms)`);
    } catch (error) {
      failed.push(name);
      console.log(`FAILED ${name} (${Date.now() - started} ms)`);
      console.error(`FAILED: ${name}\n${error?.stack ?? error}`);
    }
  }
  if (failed.length) {
    console.log(`typescript mcp client: ${failed.length} failed in ${GROUP}: ${failed.join('; ')}`);
    process.exit(1);
  }
  console.log(`typescript mcp client: ok ${GROUP}`);
  process.exit(0);
}
