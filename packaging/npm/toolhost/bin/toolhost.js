#!/usr/bin/env node
// The `toolhost` command of the npm package: runs the binary of the platform package npm
// installed beside it (@toolhost/linux-x64 on Linux x86-64), with the same arguments, stdio
// and environment, and exits as it does.
"use strict";

const { spawn } = require("child_process");

const platforms = { "linux x64": "@toolhost/linux-x64" };
const key = `${process.platform} ${process.arch}`;
const pkg = platforms[key];
if (!pkg) {
  console.error(
    `toolhost: no binary for ${key}; the npm package covers ${Object.keys(platforms).join(", ")}. ` +
      "See docs/install.md to build from source.",
  );
  process.exit(1);
}
let binary;
try {
  binary = require.resolve(`${pkg}/bin/toolhost`);
} catch {
  console.error(
    `toolhost: the package ${pkg}, which holds the binary, is not installed. ` +
      "npm skips it when optional dependencies are omitted (--omit=optional, --no-optional) " +
      "or when it cannot be fetched; install toolhost again with optional dependencies.",
  );
  process.exit(1);
}

const child = spawn(binary, process.argv.slice(2), { stdio: "inherit" });
// A client stops a server by signalling this process: pass the signal on, so that the host
// ends its sessions and stops what they started.
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) {
  process.on(signal, () => child.kill(signal));
}
child.on("error", (error) => {
  console.error(`toolhost: cannot run ${binary}: ${error.message}`);
  process.exit(1);
});
child.on("exit", (code, signal) => {
  if (signal) {
    process.removeAllListeners(signal);
    process.kill(process.pid, signal);
  } else {
    process.exit(code ?? 1);
  }
});
