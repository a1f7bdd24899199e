//! Tests that build hosts inside the test process: it runs the guests in its own wasmtime
//! engine, on the fake process capability or on the real process manager (whose commands'
//! keepers it starts). Nothing here changes the test process's limits or measures its memory.
//!
//! - `policies_fake`: the bundled policies, deterministically, on the fake process capability;
//! - `asking`: tools that ask the person first, within the call or relayed;
//! - `plugins`: plugin directories, manifests, grants and hot swap;
//! - `content`: content items in results, and a tool's progress and log lines;
//! - `hostile_guests`: guests that spin, allocate without end, panic or hang, within their
//!   plugin's limits;
//! - `tools_real`: every bundled tool on the real process manager;
//! - `interactive`: terminals, stdin pipes and `process_input` on the real process manager;
//! - `escapes`: nothing a command starts escapes the host's bookkeeping (one test runs the
//!   `toolhost` binary instead, to kill it with `SIGKILL`).

mod asking;
mod content;
mod escapes;
mod hostile_guests;
mod interactive;
mod plugins;
mod policies_fake;
mod tools_real;
