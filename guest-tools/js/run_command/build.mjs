// Build app.js into the toolhost plugin component run_command.wasm (world `shell-tools`) with
// componentize-js, against the contract in wit/toolhost.wit:
//
//   npm run build
//
// The `http` and `fetch-event` features are disabled: they import wasi:http, which the host
// does not provide, so a component with them would not load.

import { componentize } from "@bytecodealliance/componentize-js";
import { writeFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { resolve } from "node:path";

const here = fileURLToPath(new URL(".", import.meta.url));
const output = resolve(here, "run_command.wasm");

const { component } = await componentize({
  sourcePath: resolve(here, "app.js"),
  witPath: resolve(here, "wit"),
  worldName: "shell-tools",
  disableFeatures: ["http", "fetch-event"],
});
await writeFile(output, component);
console.log(`wrote ${output} (${component.length} bytes)`);
