//! Kafka tests against the real broker of tests/kafka/broker.sh (one test binary: each links
//! the whole crate).

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod broker_script;
mod secured;
mod transactions;
