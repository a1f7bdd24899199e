//! Tests that build and run other crates and documents with cargo: the guests' own unit tests,
//! the examples, and the policy guide followed as written.
//!
//! - `architecture`: ARCHITECTURE.md's code map names only what exists;
//! - `guests`: the guest crates' unit tests and the policy SDK's publishability;
//! - `examples`: `examples/test_policy.rs` against the bundled policies;
//! - `guide`: `docs/writing-a-policy.md`, step by step. Its file stays at `tests/guide.rs`:
//!   the guide names that path for the region of it that it shows.

mod architecture;
mod examples;
mod guests;
#[path = "../guide.rs"]
mod guide;

// The checks of `examples/test_policy.rs`, for `examples` and `guide`. The example's own
// `main` is for `cargo run --example test_policy`.
#[allow(dead_code)]
#[path = "../../examples/test_policy.rs"]
mod test_policy;
