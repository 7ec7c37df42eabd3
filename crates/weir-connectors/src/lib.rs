//! weir's sources and sinks, each behind the [`Connector`] trait and found by name in the
//! [`Registry`]: the SQL layer plans tables through them and knows none by name.
//!
//! `nexmark`: the Nexmark generator, the embedded default source. `filesystem`: Parquet,
//! JSON-lines and CSV files, a bounded source and an exactly-once sink. `kafka`: a source and a
//! two-phase-commit sink, with the minimal protocol client that commits or aborts a
//! transaction an earlier process began, and, behind the `testing` feature, the helper every
//! Kafka test uses to reach the real broker of `tests/kafka/broker.sh`. `datagen`: Flink's data generator. `blackhole` and
//! `preview`: sinks that keep nothing. [`options`]: how WITH options are declared, validated
//! and read.

pub mod connector;
pub mod csv_format;
pub mod datagen;
pub mod declared_schema;
pub mod error;
pub mod filesystem;
pub mod generated_source;
pub mod json_type;
pub mod kafka;
pub mod nexmark;
pub mod options;
pub mod read_fields;
pub mod registry;
mod replayable_random;
mod sinks;

pub use connector::{
    Connector, ConnectorTable, NodeContext, PlanOptions, PlannedSink, PlannedSource, Preflight, PreflightPhase,
    SourceRows,
};
pub use error::{Error, Result};
pub use registry::Registry;
