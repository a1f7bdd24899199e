//! Tests that drive `toolhost serve` and `toolhost call` with the official MCP SDK clients,
//! which they install on their first run (each under a lock of its own, in the target
//! directory) and run as subprocesses.
//!
//! - `mcp_python`: the Python SDK (`tests/python/`);
//! - `mcp_typescript`: the TypeScript SDKs (`tests/typescript/`).

mod mcp_python;
mod mcp_typescript;
