//! Where a Kafka table's brokers are, and the librdkafka properties its `kafka.*` options pass
//! through as they are.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientConfig, ClientContext};

use super::blocking::blocking;
use super::security::ClientSecurity;
use super::transactions::TransactionsClient;
use crate::{Error, Result};

const ADMIN_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a topic found missing is looked for again before it counts as missing: a broker
/// that has just restarted may answer before its metadata has caught up.
const MISSING_CHECKS: usize = 3;
const MISSING_RECHECK_AFTER: Duration = Duration::from_secs(1);

/// How weir creates a topic it writes, when the table asks it to (`sink.create-topic`):
/// `None` leaves the count to the broker's defaults (`num.partitions`,
/// `default.replication.factor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TopicCreation {
    pub partitions: Option<i32>,
    pub replication_factor: Option<i32>,
}

/// Why a topic cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicError {
    /// The brokers answered, and do not have it (nor was weir asked to create it): a setting
    /// to fix, not worth retrying.
    Missing(String),
    /// The brokers could not be asked, or refused to create it: may pass.
    Unavailable(String),
}

impl std::fmt::Display for TopicError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Missing(message) | Self::Unavailable(message) => f.write_str(message),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaConnection {
    /// `bootstrap.servers`: comma-separated `host:port`.
    pub bootstrap: String,
    /// librdkafka properties (the table's `kafka.<property>` options, prefix removed). They
    /// are applied last, so a user can override any default weir sets.
    properties: Vec<(String, String)>,
}

impl KafkaConnection {
    pub fn new(bootstrap: &str) -> Self {
        Self { bootstrap: bootstrap.to_string(), properties: Vec::new() }
    }

    /// With librdkafka `properties`.
    pub fn with_properties(mut self, properties: Vec<(String, String)>) -> Self {
        self.properties = properties;
        self
    }

    /// A protocol client for the transactions of this connection's brokers, reaching them as
    /// the properties' security settings say. Fails for settings it cannot honour (GSSAPI,
    /// keystores): an exactly-once writer must be able to recover where it writes.
    pub fn transactions_client(&self) -> Result<TransactionsClient> {
        let security = ClientSecurity::from_properties(&self.properties)?;
        Ok(TransactionsClient::new(&self.bootstrap).with_security(security))
    }

    /// A client configuration with `defaults` (weir's choice for this client), then the user's
    /// properties.
    pub(crate) fn client_config(&self, defaults: &[(&str, &str)]) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.bootstrap);
        // weir creates topics only when a table asks (`sink.create-topic`): a producer must not
        // have a broker with auto.create.topics.enable recreate a deleted topic behind a pipeline.
        config.set("allow.auto.create.topics", "false");
        for (key, value) in defaults {
            config.set(*key, *value);
        }
        for (key, value) in &self.properties {
            config.set(key, value);
        }
        config
    }

    /// The broker's `transaction.max.timeout.ms`: the longest transaction timeout it accepts.
    pub async fn max_transaction_timeout_ms(&self) -> Result<u64> {
        let config = self.client_config(&[]);
        let bootstrap = self.bootstrap.clone();
        // Creating, asking and destroying a librdkafka client all happen on a blocking thread;
        // the admin request's future is driven by librdkafka's own thread.
        let runtime = tokio::runtime::Handle::current();
        blocking(move || {
            let admin: AdminClient<QuietContext> = config
                .create_with_context(QuietContext)
                .map_err(Error::client(format!("admin client for {bootstrap}")))?;
            let metadata =
                admin.inner().fetch_metadata(None, ADMIN_TIMEOUT).map_err(Error::client("broker metadata"))?;
            let Some(broker) = metadata.brokers().first().map(|b| b.id()) else {
                return Err(Error::Unexpected("no brokers in the metadata".into()));
            };
            let options = AdminOptions::new().request_timeout(Some(ADMIN_TIMEOUT));
            let configuration = format!("broker {broker} configuration");
            let results = runtime
                .block_on(admin.describe_configs(&[ResourceSpecifier::Broker(broker)], &options))
                .map_err(Error::client(configuration.clone()))?;
            let Some(resource) = results.into_iter().next() else {
                return Err(Error::Unexpected(format!("{configuration}: none returned")));
            };
            let resource = resource.map_err(|code| Error::client(configuration)(KafkaError::AdminOp(code)))?;
            resource
                .get("transaction.max.timeout.ms")
                .and_then(|entry| entry.value.as_deref())
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| Error::Unexpected(format!("broker {broker} did not report transaction.max.timeout.ms")))
        })
        .await
    }
}

impl KafkaConnection {
    /// Those of `topics` the brokers do not have. Asks for every topic's metadata (asking for
    /// one by name would let a broker with `auto.create.topics.enable` create it).
    pub async fn missing_topics(&self, topics: &[String]) -> Result<Vec<String>> {
        let config = self.client_config(&[]);
        let bootstrap = self.bootstrap.clone();
        let topics = topics.to_vec();
        blocking(move || {
            let admin: AdminClient<QuietContext> = config
                .create_with_context(QuietContext)
                .map_err(Error::client(format!("admin client for {bootstrap}")))?;
            let metadata = admin
                .inner()
                .fetch_metadata(None, ADMIN_TIMEOUT)
                .map_err(Error::client(format!("the metadata of {bootstrap}")))?;
            let known: Vec<&str> = metadata.topics().iter().map(|t| t.name()).collect();
            Ok(topics.into_iter().filter(|t| !known.contains(&t.as_str())).collect())
        })
        .await
    }
}

impl KafkaConnection {
    /// Makes sure `topic` exists: created as `create` says when it is missing, else
    /// [`TopicError::Missing`], naming the topic and the brokers.
    pub async fn ensure_topic(&self, topic: &str, create: Option<TopicCreation>) -> Result<(), TopicError> {
        let topics = [topic.to_string()];
        for check in 1..=MISSING_CHECKS {
            let missing = self.missing_topics(&topics).await.map_err(|e| TopicError::Unavailable(e.to_string()))?;
            if missing.is_empty() {
                return Ok(());
            }
            if create.is_some() || check == MISSING_CHECKS {
                break;
            }
            tokio::time::sleep(MISSING_RECHECK_AFTER).await;
        }
        let Some(creation) = create else {
            return Err(TopicError::Missing(format!("kafka topic '{topic}' does not exist on {}", self.bootstrap)));
        };
        self.create_topic(topic, creation).await.map_err(|e| {
            TopicError::Unavailable(format!("creating kafka topic '{topic}' on {}: {e}", self.bootstrap))
        })?;
        tracing::info!(topic, partitions = ?creation.partitions, "created the kafka topic");
        Ok(())
    }

    /// Creates `topic`; one that exists already (another subtask was first) is fine.
    async fn create_topic(&self, topic: &str, creation: TopicCreation) -> Result<()> {
        let config = self.client_config(&[]);
        let topic = topic.to_string();
        let runtime = tokio::runtime::Handle::current();
        blocking(move || {
            let admin: AdminClient<QuietContext> =
                config.create_with_context(QuietContext).map_err(Error::client("admin client"))?;
            let new = NewTopic::new(
                &topic,
                creation.partitions.unwrap_or(-1),
                TopicReplication::Fixed(creation.replication_factor.unwrap_or(-1)),
            );
            let options =
                AdminOptions::new().operation_timeout(Some(ADMIN_TIMEOUT)).request_timeout(Some(ADMIN_TIMEOUT));
            let results =
                runtime.block_on(admin.create_topics([&new], &options)).map_err(Error::client("CreateTopics"))?;
            for result in results {
                match result {
                    Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                    Err((_, code)) => return Err(Error::client("CreateTopics")(KafkaError::AdminOp(code))),
                }
            }
            Ok(())
        })
        .await
    }
}

/// Client-level errors of weir's Kafka clients, logged as what they are: librdkafka reports a
/// broker that went away (and reconnects by itself) and a partition's end (with
/// `enable.partition.eof`) through the same callback as real errors.
pub(crate) fn log_client_error(error: &KafkaError, reason: &str) {
    match error {
        KafkaError::PartitionEOF(_) => {}
        KafkaError::Global(code) if !matches!(code, rdkafka::types::RDKafkaErrorCode::Fatal) => {
            tracing::warn!(%error, reason, "Kafka client (librdkafka retries)");
        }
        _ => tracing::error!(%error, reason, "Kafka client"),
    }
}

/// The context of the source's consumer: quiet about partition ends.
#[derive(Clone, Default)]
pub(crate) struct QuietContext;

impl ClientContext for QuietContext {
    fn error(&self, error: KafkaError, reason: &str) {
        log_client_error(&error, reason);
    }
}

impl rdkafka::consumer::ConsumerContext for QuietContext {}
