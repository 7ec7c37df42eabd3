//! The real Kafka broker every Kafka test runs against.
//!
//! `WEIR_KAFKA_BOOTSTRAP` names a broker to use as is; otherwise the broker of
//! `tests/kafka/broker.sh` is started (or found running) once per test process. Tests never
//! share topics: each asks for fresh names.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use std::collections::BTreeSet;
use std::time::Instant;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

/// One record as a test reads it back.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ReadRecord {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    /// `None`: a tombstone.
    pub value: Option<Vec<u8>>,
}

/// A broker that answered, with its bootstrap address.
#[derive(Debug)]
pub struct TestBroker {
    bootstrap: String,
}

static BROKER: OnceLock<Result<TestBroker, String>> = OnceLock::new();

impl TestBroker {
    /// The broker for this test process: `WEIR_KAFKA_BOOTSTRAP`, or tests/kafka/broker.sh's.
    pub fn get() -> Result<&'static TestBroker, String> {
        BROKER
            .get_or_init(|| match std::env::var("WEIR_KAFKA_BOOTSTRAP") {
                Ok(bootstrap) if !bootstrap.is_empty() => Ok(TestBroker { bootstrap }),
                _ => start_script_broker().map(|bootstrap| TestBroker { bootstrap }),
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// A topic name no other test (nor an earlier run) uses.
    pub fn unique_name(stem: &str) -> String {
        format!("{stem}-{}", uuid::Uuid::new_v4().simple())
    }

    /// Creates a fresh topic with `partitions` partitions and returns its name.
    pub async fn create_topic(&self, stem: &str, partitions: i32) -> Result<String, String> {
        let name = Self::unique_name(stem);
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .create()
            .map_err(|e| format!("admin client: {e}"))?;
        let topic = NewTopic::new(&name, partitions, TopicReplication::Fixed(1));
        let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        let results = admin.create_topics([&topic], &options).await.map_err(|e| format!("create topic {name}: {e}"))?;
        for result in results {
            result.map_err(|(topic, code)| format!("create topic {topic}: {code}"))?;
        }
        // CreateTopics answers once the controller has made the topic; the broker's metadata
        // can lag behind, and a test looking the topic up at once would find it missing.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let metadata = admin.inner().fetch_metadata(Some(&name), Duration::from_secs(5));
            let visible = metadata.is_ok_and(|m| {
                m.topics()
                    .iter()
                    .any(|t| t.name() == name && t.error().is_none() && t.partitions().len() == partitions as usize)
            });
            if visible {
                return Ok(name);
            }
            if Instant::now() > deadline {
                return Err(format!("topic {name} created but not in the broker's metadata after 30 s"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl TestBroker {
    /// Stops the broker, waits `down_for`, and starts it again (tests/kafka/broker.sh, on the
    /// bootstrap's port). Only for a broker of that script on 127.0.0.1.
    pub fn restart(&self, down_for: Duration) -> Result<(), String> {
        let Some(port) = self.bootstrap.strip_prefix("127.0.0.1:") else {
            return Err(format!("{} is not a tests/kafka/broker.sh broker on 127.0.0.1", self.bootstrap));
        };
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/kafka/broker.sh");
        let run = |action: &str| {
            let output = Command::new("bash")
                .arg(&script)
                .arg(action)
                .env("WEIR_KAFKA_PORT", port)
                .output()
                .map_err(|e| format!("broker.sh {action}: {e}"))?;
            if output.status.success() {
                Ok(())
            } else {
                Err(format!("broker.sh {action} failed: {}", String::from_utf8_lossy(&output.stderr)))
            }
        };
        run("stop")?;
        std::thread::sleep(down_for);
        run("start")
    }

    /// Writes `records` (partition, key, value) to `topic`, plainly (no transaction), and
    /// waits until every one is acknowledged.
    pub fn produce<'a>(
        &self,
        topic: &str,
        records: impl IntoIterator<Item = (i32, Option<&'a [u8]>, &'a [u8])>,
    ) -> Result<(), String> {
        self.produce_or_delete(topic, records.into_iter().map(|(partition, key, value)| (partition, key, Some(value))))
    }

    /// As [`Self::produce`], where a record without a value is a tombstone.
    pub fn produce_or_delete<'a>(
        &self,
        topic: &str,
        records: impl IntoIterator<Item = (i32, Option<&'a [u8]>, Option<&'a [u8]>)>,
    ) -> Result<(), String> {
        self.produce_with_headers(
            topic,
            records.into_iter().map(|(partition, key, value)| (partition, key, value, &[][..])),
        )
    }

    /// As [`Self::produce_or_delete`], each record with its headers.
    pub fn produce_with_headers<'a>(
        &self,
        topic: &str,
        records: impl IntoIterator<Item = (i32, Option<&'a [u8]>, Option<&'a [u8]>, &'a [(&'a str, &'a [u8])])>,
    ) -> Result<(), String> {
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .set("linger.ms", "20")
            .set("enable.idempotence", "true")
            .create()
            .map_err(|e| format!("producer: {e}"))?;
        for (partition, key, value, headers) in records {
            let mut record = BaseRecord::<[u8], [u8]>::to(topic).partition(partition);
            if let Some(value) = value {
                record = record.payload(value);
            }
            if let Some(key) = key {
                record = record.key(key);
            }
            if !headers.is_empty() {
                let owned = headers
                    .iter()
                    .fold(OwnedHeaders::new(), |all, (key, value)| all.insert(Header { key, value: Some(*value) }));
                record = record.headers(owned);
            }
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull), back)) => {
                        record = back;
                        producer.poll(Duration::from_millis(10));
                    }
                    Err((e, _)) => return Err(format!("producing to {topic}: {e}")),
                }
            }
            producer.poll(Duration::ZERO);
        }
        producer.flush(Duration::from_secs(60)).map_err(|e| format!("flushing to {topic}: {e}"))
    }

    /// Every record of `topic` from the beginning to the end each partition has now, read with
    /// `isolation` ("read_committed" or "read_uncommitted"). The end is where the broker
    /// reports partition EOF: the last stable offset under read_committed (an open transaction
    /// stops the reader there), never "high watermark - 1" (transaction markers take offsets
    /// but are not delivered).
    pub fn read_to_end(&self, topic: &str, isolation: &str) -> Result<Vec<ReadRecord>, String> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .set("group.id", Self::unique_name("reader"))
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "true")
            .set("isolation.level", isolation)
            .create()
            .map_err(|e| format!("consumer: {e}"))?;
        let timeout = Duration::from_secs(60);
        let metadata = consumer.fetch_metadata(Some(topic), timeout).map_err(|e| format!("metadata: {e}"))?;
        let mut assignment = TopicPartitionList::new();
        let mut left = BTreeSet::new();
        for partition in metadata.topics().first().map(|t| t.partitions()).unwrap_or_default() {
            assignment.add_partition_offset(topic, partition.id(), Offset::Beginning).map_err(|e| e.to_string())?;
            left.insert(partition.id());
        }
        consumer.assign(&assignment).map_err(|e| format!("assign: {e}"))?;
        let deadline = Instant::now() + timeout;
        let mut records = Vec::new();
        while !left.is_empty() {
            if Instant::now() > deadline {
                return Err(format!("{topic}: partitions {left:?} never reached their end"));
            }
            match consumer.poll(Duration::from_millis(100)) {
                Some(Ok(m)) => records.push(ReadRecord {
                    partition: m.partition(),
                    offset: m.offset(),
                    key: m.key().map(<[u8]>::to_vec),
                    value: m.payload().map(<[u8]>::to_vec),
                }),
                Some(Err(KafkaError::PartitionEOF(partition))) => {
                    left.remove(&partition);
                }
                Some(Err(e)) => return Err(format!("reading {topic}: {e}")),
                None => {}
            }
        }
        Ok(records)
    }
}

/// The test broker's secured listeners and what a client needs for them (tests/kafka/broker.sh
/// writes them to `listeners.env` beside the broker's data).
#[derive(Debug, Clone)]
pub struct SecuredListeners {
    pub sasl_plaintext: String,
    pub ssl: String,
    pub sasl_ssl: String,
    /// The PEM file of the test CA that signed the broker's certificate.
    pub ca_location: String,
    pub username: String,
    pub password: String,
}

impl SecuredListeners {
    /// The `kafka.*` properties (without the prefix) for `protocol` with SASL `mechanism`
    /// (ignored without SASL): what a user puts in a table's options.
    pub fn properties(&self, protocol: &str, mechanism: &str) -> Vec<(String, String)> {
        let mut properties = vec![("security.protocol".to_string(), protocol.to_string())];
        if protocol.contains("SSL") {
            properties.push(("ssl.ca.location".into(), self.ca_location.clone()));
        }
        if protocol.starts_with("SASL") {
            properties.push(("sasl.mechanism".into(), mechanism.to_string()));
            properties.push(("sasl.username".into(), self.username.clone()));
            properties.push(("sasl.password".into(), self.password.clone()));
        }
        properties
    }

    /// The listener (`host:port`) of `protocol`.
    pub fn bootstrap(&self, protocol: &str) -> &str {
        match protocol {
            "SSL" => &self.ssl,
            "SASL_SSL" => &self.sasl_ssl,
            _ => &self.sasl_plaintext,
        }
    }
}

impl TestBroker {
    /// The secured listeners of a tests/kafka/broker.sh broker (found from the bootstrap port).
    pub fn secured(&self) -> Result<SecuredListeners, String> {
        let Some(port) = self.bootstrap.strip_prefix("127.0.0.1:") else {
            return Err(format!("{} is not a tests/kafka/broker.sh broker on 127.0.0.1", self.bootstrap));
        };
        let cache = std::env::var_os("WEIR_CACHE_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/weir"));
        let path = cache.join(format!("broker-{port}/listeners.env"));
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let value = |key: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(key).and_then(|rest| rest.strip_prefix('=')))
                .map(str::to_string)
                .ok_or_else(|| format!("{} has no {key}", path.display()))
        };
        Ok(SecuredListeners {
            sasl_plaintext: value("sasl_plaintext")?,
            ssl: value("ssl")?,
            sasl_ssl: value("sasl_ssl")?,
            ca_location: value("ca_location")?,
            username: value("sasl_username")?,
            password: value("sasl_password")?,
        })
    }
}

fn start_script_broker() -> Result<String, String> {
    weir_state::test_servers::StartedScript::start("tests/kafka/broker.sh")?.field("bootstrap")
}
