//! Tests that measure the host's memory as the resident memory of the test process, which the
//! host runs in. A binary of its own: a test of another module running beside them would count
//! in what they measure. They take turns with each other (`terminal_memory`'s lock).
//!
//! - `terminal_memory`: a lot of output through a terminal keeps the host's memory bounded.

mod terminal_memory;
