// The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned in
// package.json) against `toolhost serve --http`. Started by run.sh, which installs the suite
// and picks a Node.js 22:
//
//     node run.mjs TOOLHOST_BINARY [CONFORMANCE SERVER OPTIONS...]
//
// Without options it runs the requirement set of revision 2026-07-28 with the baseline in
// expected-failures.yml (`--requirements 2026-07-28 --expected-failures ...`); any options
// replace those (e.g. `--scenario caching --spec-version 2026-07-28`).
//
// The server loads the conformance fixture plugin (`guest-tools/fixtures/conformance-tools`,
// copied by run.sh into plugins/ beside this script) with `--plugins`: it offers the suite's
// fixture tools (`test_simple_text`, `test_image_content`, ...) through the public WIT. It
// runs with `--ask risky`, so that the fixture's `test_input_required_result_*` tools may ask
// their client (docs/mcp.md, "Asking the person").
//
// The suite sends no credentials, and toolhost serves nobody without its bearer token: the
// suite talks to a small proxy on 127.0.0.1 that adds the token and forwards every request
// as it came (method, path, `Host`, `Origin`, body; the answer streamed back unchanged). The
// server accepts the proxy's origin (`--allowed-origin`) as it would its own.

import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const [bin, ...options] = process.argv.slice(2);
if (!bin) {
  console.error('usage: node run.mjs TOOLHOST_BINARY [CONFORMANCE SERVER OPTIONS...]');
  process.exit(2);
}
const suite = path.join(here, 'node_modules', '@modelcontextprotocol', 'conformance', 'dist', 'index.js');
const args = options.length
  ? options
  : ['--requirements', '2026-07-28', '--expected-failures', path.join(here, 'expected-failures.yml')];

const token = crypto.randomBytes(24).toString('hex');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'toolhost-conformance-'));
const tokenFile = path.join(tmp, 'token');
fs.writeFileSync(tokenFile, `${token}\n`, { mode: 0o600 });

let upstream;
const proxy = http.createServer((request, response) => {
  const headers = { ...request.headers, authorization: `Bearer ${token}` };
  const forward = http.request(
    { host: '127.0.0.1', port: upstream, method: request.method, path: request.url, headers },
    (answer) => {
      response.writeHead(answer.statusCode, answer.headers);
      response.flushHeaders();
      answer.pipe(response);
    },
  );
  forward.on('error', (error) => {
    if (!response.headersSent) response.writeHead(502);
    response.end(`proxy: ${error.message}\n`);
  });
  // A client that goes away (a cancelled request, a closed stream) ends the upstream one too.
  response.on('close', () => forward.destroy());
  request.pipe(forward);
});
await new Promise((resolve) => proxy.listen(0, '127.0.0.1', resolve));
const port = proxy.address().port;

const server = spawn(
  bin,
  [
    '--state-dir', path.join(tmp, 'state'),
    '--plugins', path.join(here, 'plugins'),
    '--ask', 'risky',
    'serve', '--http', '127.0.0.1:0', '--token-file', tokenFile,
    '--allowed-origin', `http://127.0.0.1:${port}`,
    '--allowed-origin', `http://localhost:${port}`,
  ],
  { stdio: ['ignore', 'inherit', 'pipe'], env: process.env },
);
function stop() {
  if (server.exitCode === null) server.kill('SIGTERM');
  fs.rmSync(tmp, { recursive: true, force: true });
}
process.on('exit', stop);
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => process.exit(1));

upstream = await new Promise((resolve, reject) => {
  let buffer = '';
  server.stderr.setEncoding('utf8');
  server.stderr.on('data', (chunk) => {
    process.stderr.write(chunk);
    buffer += chunk;
    const found = buffer.match(/serving MCP on http:\/\/127\.0\.0\.1:(\d+)\/mcp\r?\n/);
    if (found) resolve(Number(found[1]));
  });
  server.on('exit', (code) => reject(new Error(`toolhost exited (${code}) before serving`)));
  setTimeout(() => reject(new Error('toolhost did not announce its address within 60 s')), 60000).unref();
});
// Later server output goes on to stderr as it comes.

const url = `http://127.0.0.1:${port}/mcp`;
console.log(`conformance: toolhost at ${url} (through the token proxy): ${args.join(' ')}`);
const run = spawn(process.execPath, [suite, 'server', '--url', url, ...args], { stdio: 'inherit' });
const code = await new Promise((resolve) => run.on('exit', (status, signal) => resolve(status ?? (signal ? 1 : 0))));
proxy.close();
process.exit(code);
