//! The runtime against its contract (ARCHITECTURE.md, "The runtime"): each checkpoint mode, failures at random and
//! at every named step, concurrent checkpoints, failing snapshot writes, rescaling, retention.

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod harness;

mod aligned;
mod at_least_once;
mod exactly_once;
mod lifecycle;
mod unaligned;
