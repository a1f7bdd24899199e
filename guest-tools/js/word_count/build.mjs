// Build app.js into a toolhost plugin component (world `tools`) with componentize-js.
//
//   node build.mjs [OUTPUT.wasm] [WIT_DIR]
//
// OUTPUT.wasm defaults to `js_word_count.wasm` in the current directory. WIT_DIR defaults to
// the repository's `wit/` directory (three levels up from this file), whose `toolhost.wit` is
// the current contract (toolhost:plugin@0.6.0). Its frozen older versions in `v0.1.0/` to
// `v0.5.0/` do not get in the way: a WIT directory's subdirectories are not
// read, only `deps/` is, and there is none. So the build reads the WIT where it is, without a copy.
//
// The `http` and `fetch-event` features are disabled: they import wasi:http, which the host
// does not provide, so a component with them would not load.

import { componentize } from "@bytecodealliance/componentize-js";
import { writeFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { resolve } from "node:path";

const here = fileURLToPath(new URL(".", import.meta.url));
const output = resolve(process.argv[2] ?? "js_word_count.wasm");
const witPath = resolve(process.argv[3] ?? resolve(here, "../../../wit"));

const { component, imports } = await componentize({
  sourcePath: resolve(here, "app.js"),
  witPath,
  worldName: "tools",
  disableFeatures: ["http", "fetch-event"],
});
await writeFile(output, component);

// The host's interfaces the component imports (WASI imports are not listed).
const names = [...new Set(imports.map(([name]) => name))];
console.log(`wrote ${output} (${component.length} bytes); imports: ${names.join(", ") || "none"}`);
