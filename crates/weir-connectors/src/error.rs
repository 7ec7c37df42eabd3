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
    /// A librdkafka call failed; `step` says which and on what.
    #[error("{step}: {source}")]
    Client {
        step: String,
        #[source]
        source: rdkafka::error::KafkaError,
    },
    /// A record was not delivered.
    #[error("delivery to {topic} [{partition}] failed: {source}")]
    Delivery {
        topic: String,
        partition: i32,
        #[source]
        source: rdkafka::error::KafkaError,
    },
    /// A step on one transactional id failed.
    #[error("{id}: {step}: {source}")]
    Transaction {
        id: String,
        step: &'static str,
        #[source]
        source: Box<Error>,
    },
    /// A Kafka client or coordinator is not in the state the protocol expects (a writer not
    /// opened, a pre-committed transaction not Ongoing, metadata without brokers).
    #[error("{0}")]
    Unexpected(String),
    /// Rows a sink format cannot carry, or a table it does not fit (no key for upsert...).
    #[error("{0}")]
    Format(String),
    /// A runtime error met inside a connector.
    #[error(transparent)]
    Engine(#[from] weir_engine::Error),
    /// Recovery cannot commit what a completed checkpoint recorded (the message says which
    /// transaction, why, and that its records are lost).
    #[error("{0}")]
    CommitRefused(String),
    /// A blocking client call's thread failed.
    #[error("Kafka client task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// A file could not be read, written, listed or renamed, or its contents decoded.
    #[error("{path}: {source}")]
    File {
        path: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error(transparent)]
    Arrow(#[from] datafusion::arrow::error::ArrowError),
    #[error(transparent)]
    Parquet(#[from] datafusion::parquet::errors::ParquetError),
}

impl Error {
    /// `Error::Client` for a librdkafka call, as a `map_err` argument.
    pub(crate) fn client(step: impl Into<String>) -> impl FnOnce(rdkafka::error::KafkaError) -> Error {
        move |source| Error::Client { step: step.into(), source }
    }

    /// `Error::File` for work on `path`, as a `map_err` argument.
    pub(crate) fn file<E: Into<Box<dyn std::error::Error + Send + Sync>>>(
        path: &std::path::Path,
    ) -> impl FnOnce(E) -> Error {
        let path = path.display().to_string();
        move |source| Error::File { path, source: source.into() }
    }

    /// `Error::Transaction` for a step on transactional id `id`, as a `map_err` argument.
    pub(crate) fn on<E: Into<Error>>(id: &str, step: &'static str) -> impl FnOnce(E) -> Error {
        let id = id.to_string();
        move |source| Error::Transaction { id, step, source: Box::new(source.into()) }
    }
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
