//! The `weir` binary as a user runs it (one test binary: each links all of DataFusion).

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cli;
mod client;
mod cluster;
mod exactly_once;
mod postgres;
mod service;

use std::sync::{Mutex, MutexGuard};

/// Tests that use the Kafka broker hard run one at a time: the crash tests drive a weir
/// process each, and one of them restarts the broker under everyone's feet.
fn kafka_serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}
