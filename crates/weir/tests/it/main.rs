//! The `weir` binary as a user runs it (one test binary: each links all of DataFusion).

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cli;
mod exactly_once;
