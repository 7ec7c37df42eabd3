//! Kafka: the source, the two-phase-commit sink, and the protocol-level client that lets a
//! restarted pipeline finish what a dead one pre-committed; [`KafkaConnector`] plans them from
//! a table's options.
//!
//! - [`source`]: partitions split across subtasks, offsets in the snapshot, `read_committed`,
//!   per-partition watermarks, JSON decoded straight into Arrow ([`decode`]), bad records
//!   failed, skipped or sent to a dead-letter topic.
//! - [`sink`]: JSON, upsert and Debezium-JSON records ([`encode`]) with exactly-once,
//!   at-least-once or no delivery guarantee; exactly-once through a [`producer_pool`] of
//!   transactional producers per subtask.
//! - [`transactions`]: FindCoordinator, DescribeTransactions, EndTxn and InitProducerId over the
//!   wire, for recovery; over TLS and SASL as the table's [`security`] properties say.

mod blocking;
mod connection;
mod connector;
mod decode;
mod encode;
mod flink_options;
mod producer_pool;
mod sasl;
pub mod security;
pub mod sink;
pub mod source;
pub mod transactions;
mod wire;

#[cfg(feature = "testing")]
pub mod test_broker;

pub use connection::{KafkaConnection, TopicCreation, TopicError};
pub use connector::KafkaConnector;
pub use encode::{RecordColumns, SinkFormat};
pub use producer_pool::{Delivery, pool_size};
pub use security::ClientSecurity;
pub use sink::{KafkaSink, KafkaSinkConfig};
pub use source::{BadRecords, KafkaSource, KafkaSourceConfig, RecordMetadata, SourceFormat, StartupMode};
pub use transactions::{
    EndTxnOutcome, PendingTransaction, TransactionDescription, TransactionResult, TransactionState, TransactionsClient,
};
