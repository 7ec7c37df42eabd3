//! weir's sources and sinks.
//!
//! `nexmark`: the Nexmark generator, the embedded default source. `filesystem`: Parquet and
//! JSON-lines files, a bounded source and an exactly-once sink. `kafka`: so far the pieces the exactly-once sink rests on: a minimal client for the
//! few Kafka protocol requests librdkafka cannot send for us (committing a transaction that an
//! earlier process began), and, behind the `testing` feature, the helper every Kafka test uses
//! to reach the real broker of `tests/kafka/broker.sh`.

pub mod error;
pub mod filesystem;
pub mod json_type;
pub mod kafka;
pub mod nexmark;

pub use error::{Error, Result};
