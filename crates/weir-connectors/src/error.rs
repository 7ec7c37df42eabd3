//! Errors of the connectors crate.

use std::time::Duration;

use kafka_protocol::ResponseError;

/// Every error a connector can report.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A table's options cannot be planned (the message names the table and the option).
    #[error("{0}")]
    Plan(String),
    /// A table's option is unknown, or has a value outside the accepted ones.
    #[error("{0}")]
    Options(String),
    /// A Kafka broker could not be reached, or the connection broke.
    #[error("Kafka broker {broker}: {source}")]
    Io {
        broker: String,
        #[source]
        source: std::io::Error,
    },
    /// A Kafka request or response could not be encoded or decoded.
    #[error("Kafka protocol: {0}")]
    Protocol(String),
    /// The broker answered with an error code that is not retriable for this request.
    #[error("Kafka {request} for transactional id '{transactional_id}' failed: {code} ({code_num})", code_num = .code.code())]
    Broker { request: &'static str, transactional_id: String, code: ResponseError },
    /// A retriable answer (coordinator moving or loading, concurrent transaction) persisted.
    #[error("Kafka {request} for transactional id '{transactional_id}' still failing after {waited:?}: {last}")]
    RetriesExhausted { request: &'static str, transactional_id: String, waited: Duration, last: String },
    /// The `kafka.*` security properties cannot be used (unsupported, or a file unreadable).
    #[error("Kafka security settings: {0}")]
    Security(String),
    /// The broker's certificate was refused (or ours by it).
    #[error("Kafka broker {broker}: TLS: {message}")]
    Tls { broker: String, message: String },
    /// The broker refused the SASL credentials or mechanism.
    #[error("Kafka broker {broker}: SASL authentication failed: {message}")]
    Authentication { broker: String, message: String },
    /// An error from librdkafka.
    #[error("librdkafka: {0}")]
    Rdkafka(#[from] rdkafka::error::KafkaError),
}

/// The connectors crate's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `Err` of an [`Error::Plan`] built like `format!` (an expression: `return plan_err!(...)`).
#[macro_export]
macro_rules! plan_err {
    ($($arg:tt)*) => {
        Err($crate::error::Error::Plan(format!($($arg)*)))
    };
}
