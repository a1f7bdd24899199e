//! Tests that run the `toolhost` binary as subprocesses of the test process: the CLI, and the
//! MCP servers driven by the hand-written clients of the support library.
//!
//! - `cli`: `toolhost tools`, `call`, `plugins export`, exit codes and streams;
//! - `clients`: every client block of `docs/clients.md`, parsed and started as its client would;
//! - `content`: a plugin's content items, progress and log lines over MCP and `toolhost call`;
//! - `clients_real`: Claude Code, Codex and Gemini CLI themselves reading their blocks;
//! - `mcp_stdio`: `toolhost serve` over stdio;
//! - `fair`: `toolhost serve --http` under abuse: bounded connections, fair shares;
//! - `mcp_http`: `toolhost serve --http` over plain HTTP;
//! - `record`: the record of commands and `toolhost log`;
//! - `scenarios`: `toolhost test` on scenario files.

mod cli;
mod clients;
mod clients_real;
mod content;
mod fair;
mod mcp_http;
mod mcp_stdio;
mod record;
mod scenarios;
