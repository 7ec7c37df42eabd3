//! `connector = 'kafka'`: a table's options read into the source's and the sink's
//! configuration, the checks that belong to planning (a format that cannot carry an updating
//! result, a transaction timeout too short for the checkpoint interval), and those only the
//! brokers can answer before a pipeline starts (the timeout within the broker's maximum, the
//! topics there).

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use datafusion::arrow::datatypes::{DataType, Fields};

use std::sync::Arc;

use weir_engine::two_phase_commit::TwoPhaseCommitSink;

use super::{
    BadRecords, Delivery, KafkaConnection, KafkaSink, KafkaSinkConfig, KafkaSource, KafkaSourceConfig, RecordColumns,
    RecordMetadata, SinkFormat, SourceFormat, StartupMode, TopicCreation, TopicError, pool_size,
};
use crate::connector::{
    Connector, ConnectorTable, NodeContext, PlanOptions, PlannedSink, PlannedSource, Preflight, PreflightPhase,
    SourceRows,
};
use crate::csv_format::{self, CsvFormat};
use crate::options::{ANY_COUNT, Kind, OptionSpec, option, required};
use crate::{Error, Result, plan_err};

/// weir's default transaction timeout: the broker's default `transaction.max.timeout.ms`, so
/// a pending transaction survives as long a recovery as the broker allows.
const DEFAULT_TRANSACTION_TIMEOUT_MS: u64 = 900_000;
/// On top of the checkpoint interval, the least a transaction timeout must leave for the
/// checkpoint itself and a recovery.
const TIMEOUT_MARGIN: Duration = Duration::from_secs(60);
const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
const DEFAULT_DISCOVERY_INTERVAL: Duration = Duration::from_secs(10);

/// A transaction timeout to check against the broker's maximum (which only the broker knows).
#[derive(Debug, Clone, PartialEq, Eq)]
struct TransactionTimeout {
    table: String,
    connection: KafkaConnection,
    timeout_ms: u64,
}

fn connection(table: &ConnectorTable) -> Result<KafkaConnection> {
    let Some(bootstrap) = table.options.get("bootstrap.servers") else {
        return plan_err!("table '{}': option 'bootstrap.servers' is required", table.name);
    };
    let properties = table
        .options
        .values
        .iter()
        .filter_map(|(k, v)| k.strip_prefix("kafka.").map(|k| (k.to_string(), v.clone())))
        .collect();
    Ok(KafkaConnection::new(bootstrap).with_properties(properties))
}

/// An exactly-once writer's recovery speaks to the brokers itself (librdkafka cannot end a
/// transaction another process began): refuse here security settings it could not connect with.
fn check_recovery_client(table: &ConnectorTable, connection: &KafkaConnection) -> Result<()> {
    match connection.transactions_client() {
        Ok(_) => {}
        Err(Error::Security(message)) => return plan_err!("table '{}': exactly-once writing: {message}", table.name),
        Err(other) => return plan_err!("table '{}': exactly-once writing: {other}", table.name),
    }
    Ok(())
}

fn delivery(table: &ConnectorTable) -> Delivery {
    table.options.get("delivery").and_then(Delivery::parse).unwrap_or(Delivery::ExactlyOnce)
}

fn prefix(table: &ConnectorTable, options: &PlanOptions, node: &str) -> String {
    table
        .options
        .get("transactional_id.prefix")
        .map_or_else(|| format!("{}-{node}", options.pipeline_name), str::to_string)
}

/// The transaction timeout of a table that writes transactionally, checked against how long a
/// pre-committed transaction may have to stay open: the broker aborts a transaction open longer
/// than it, with the records a completed checkpoint promised. A pending transaction stays open
/// from its barrier until its checkpoint completes (up to checkpoint.timeout), or, if that one
/// fails, until the next does (an interval later); after a crash, until the restart (up to the
/// longest back-off) and its recovery commit it.
fn transaction_timeout(table: &ConnectorTable, options: &PlanOptions) -> Result<(u32, Option<TransactionTimeout>)> {
    if table.options.get("kafka.transaction.timeout.ms").is_some() {
        return plan_err!(
            "table '{}': give the transaction timeout as 'transaction.timeout.ms' (checked against the checkpoints), not as the librdkafka pass-through 'kafka.transaction.timeout.ms'",
            table.name
        );
    }
    let timeout_ms = table.options.integer("transaction.timeout.ms", DEFAULT_TRANSACTION_TIMEOUT_MS);
    if delivery(table) != Delivery::ExactlyOnce {
        return Ok((timeout_ms as u32, None));
    }
    let Some(interval) = options.checkpoint_interval else {
        return plan_err!(
            "table '{}': delivery 'exactly_once' commits with the checkpoints, and checkpoint.interval is 'off': set an interval, or delivery = 'at_least_once'",
            table.name
        );
    };
    if !options.exactly_once_checkpoints {
        return plan_err!(
            "table '{}': delivery 'exactly_once' needs exactly-once checkpoints, and checkpoint.mode is 'at_least_once': use delivery = 'at_least_once' or checkpoint.mode = 'exactly_once'",
            table.name
        );
    }
    let required =
        (options.checkpoint_timeout + interval + options.max_restart_backoff + TIMEOUT_MARGIN).as_millis() as u64;
    if timeout_ms < required {
        return plan_err!(
            "table '{}': transaction.timeout.ms = {timeout_ms} is {} ms short: it must be at least {required}, the checkpoint timeout ({:?}, checkpoint.timeout) plus the interval ({interval:?}) plus the longest restart back-off ({:?}) plus {}s for recovery, or the broker may abort a pre-committed transaction before it commits (raise it, or lower checkpoint.timeout)",
            table.name,
            required - timeout_ms,
            options.checkpoint_timeout,
            options.max_restart_backoff,
            TIMEOUT_MARGIN.as_secs()
        );
    }
    let check = TransactionTimeout { table: table.name.clone(), connection: connection(table)?, timeout_ms };
    Ok((timeout_ms as u32, Some(check)))
}

/// A Kafka table read as a source by graph node `node`.
fn source_config(
    table: &ConnectorTable,
    options: &PlanOptions,
    node: &str,
) -> Result<(KafkaSourceConfig, Option<TransactionTimeout>)> {
    let name = &table.name;
    let options_of = &table.options;
    let format = match options_of.get("format") {
        Some("json") => SourceFormat::Json,
        Some("csv") => SourceFormat::Csv(csv_of(table)?),
        Some("raw") => SourceFormat::Raw,
        Some("debezium_json") => {
            if let Some(field) = table.schema.fields().iter().find(|f| crate::json_type::is_json(f)) {
                return plan_err!(
                    "table '{name}': format 'debezium_json' does not read JSON-typed columns yet ('{}'): declare it VARCHAR and write its value as a JSON string, or read the topic with format 'json'",
                    field.name()
                );
            }
            SourceFormat::DebeziumJson
        }
        Some("upsert") => {
            let key = options_of.list("key.fields");
            if let Some(absent) = key.iter().find(|k| table.schema.field_with_name(k).is_err()) {
                return plan_err!("table '{name}': key field '{absent}' is not a column of the table");
            }
            if key.is_empty() {
                return plan_err!(
                    "table '{name}': format 'upsert' reads records by their key: give it option 'key.fields' (or, as upsert-kafka, PRIMARY KEY (...) NOT ENFORCED)"
                );
            }
            SourceFormat::Upsert { key }
        }
        Some(other) => {
            return plan_err!(
                "table '{name}': reading format '{other}' is not supported yet (a source reads 'json', 'csv', 'raw', 'debezium_json' or 'upsert')"
            );
        }
        None => return plan_err!("table '{name}': option 'format' is required"),
    };
    let startup = match options_of.get("scan.startup.mode") {
        None | Some("earliest") => StartupMode::Earliest,
        Some("latest") => StartupMode::Latest,
        Some("group") => {
            if options_of.get("group.id").is_none() {
                return plan_err!("table '{name}': scan.startup.mode 'group' needs option 'group.id'");
            }
            StartupMode::Group
        }
        Some(_) => match options_of.get("scan.startup.timestamp_ms").and_then(|v| v.parse().ok()) {
            Some(ms) => StartupMode::Timestamp(ms),
            None => {
                return plan_err!(
                    "table '{name}': scan.startup.mode 'timestamp' needs option 'scan.startup.timestamp_ms'"
                );
            }
        },
    };
    let bad_records = match options_of.get("bad_records") {
        None | Some("fail") => BadRecords::Fail,
        Some("skip") => BadRecords::Skip,
        Some(_) => match options_of.get("dead_letter.topic") {
            Some(topic) => BadRecords::DeadLetter {
                topic: topic.to_string(),
                create: options_of.boolean("dead_letter.create-topic", false).then(TopicCreation::default),
            },
            None => return plan_err!("table '{name}': bad_records 'dead_letter' needs option 'dead_letter.topic'"),
        },
    };
    let (timeout_ms, check) = match bad_records {
        BadRecords::DeadLetter { .. } => transaction_timeout(table, options)?,
        _ => (DEFAULT_TRANSACTION_TIMEOUT_MS as u32, None),
    };
    let MetadataColumns { timestamp: mut timestamp_column, place: metadata } = metadata_columns(table)?;
    if let Some(column) = options_of.get("timestamp_column") {
        if timestamp_column.is_some() {
            return plan_err!(
                "table '{name}': give its timestamp column once, as 'timestamp_column' or METADATA FROM 'timestamp'"
            );
        }
        timestamp_column = Some(column.to_string());
    }
    if let Some(column) = &timestamp_column
        && table.schema.field_with_name(column).is_err()
    {
        return plan_err!("table '{name}': timestamp_column '{column}' is not a column of the table");
    }
    let topics: Vec<String> = options_of
        .get("topic")
        .unwrap_or_default()
        .split(',')
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .collect();
    let config = KafkaSourceConfig {
        connection: connection(table)?,
        topics,
        format,
        schema: table.schema.clone(),
        startup,
        group_id: options_of.get("group.id").map(str::to_string),
        bounded: options_of.get("scan.bounded.mode") == Some("latest"),
        bad_records,
        delivery: delivery(table),
        transactional_id_prefix: prefix(table, options, node),
        transaction_timeout_ms: timeout_ms,
        transactional_ids_per_subtask: pool_size(options.max_concurrent_checkpoints),
        event_time: table.event_time.as_ref().map(|(column, delay)| (column.clone(), delay.as_millis() as i64)),
        idle_timeout: options_of.duration("watermark.idle_timeout").unwrap_or(DEFAULT_IDLE_TIMEOUT),
        discovery_interval: options_of
            .duration("scan.partition_discovery.interval")
            .unwrap_or(DEFAULT_DISCOVERY_INTERVAL),
        timestamp_column,
        metadata,
        batch_size: options_of.integer("batch_size", 4096) as usize,
    };
    if dead_letter_prefix(&config).is_some() {
        check_recovery_client(table, &config.connection)?;
    }
    Ok((config, check))
}

/// The transactional ids' prefix of a source's exactly-once dead-letter writer, if it has one.
fn dead_letter_prefix(config: &KafkaSourceConfig) -> Option<String> {
    let dead_letters = matches!(config.bad_records, BadRecords::DeadLetter { .. });
    (dead_letters && config.delivery == Delivery::ExactlyOnce)
        .then(|| super::source::dead_letter_prefix(&config.transactional_id_prefix))
}

/// A Kafka table written by graph node `node`; `updating`: the query's result is a changelog.
fn sink_config(
    table: &ConnectorTable,
    updating: bool,
    options: &PlanOptions,
    node: &str,
) -> Result<(KafkaSinkConfig, Option<TransactionTimeout>)> {
    let name = &table.name;
    let format = match table.options.get("format") {
        Some("csv") => Some(SinkFormat::Csv(csv_of(table)?)),
        other => other.and_then(SinkFormat::parse),
    };
    let Some(format) = format else {
        return plan_err!("table '{name}': option 'format' must be 'json', 'csv', 'raw', 'upsert' or 'debezium_json'");
    };
    if updating && !format.takes_updates() {
        return plan_err!(
            "table '{name}': format '{}' takes append-only rows, and this query's result is updating (a changelog): use format = 'upsert' with key.fields, or 'debezium_json'",
            table.options.get("format").unwrap_or_default()
        );
    }
    let topic = table.options.get("topic").unwrap_or_default();
    if topic.contains(',') {
        return plan_err!(
            "table '{name}': a sink writes one topic; '{topic}' names several (make one table per topic)"
        );
    }
    let record_columns = written_metadata(table)?;
    let (timeout_ms, check) = transaction_timeout(table, options)?;
    let key_fields = table
        .options
        .get("key.fields")
        .map(|k| k.split(',').map(|f| f.trim().to_string()).collect())
        .unwrap_or_default();
    let connection = connection(table)?;
    if delivery(table) == Delivery::ExactlyOnce {
        check_recovery_client(table, &connection)?;
    }
    let create_topic = topic_creation(table)?;
    let config = KafkaSinkConfig {
        connection,
        topic: topic.to_string(),
        format,
        key_fields,
        schema: table.schema.clone(),
        delivery: delivery(table),
        transactional_id_prefix: prefix(table, options, node),
        transaction_timeout_ms: timeout_ms,
        transactional_ids_per_subtask: pool_size(options.max_concurrent_checkpoints),
        create_topic,
        record_columns,
    };
    // Builds one, so a format that does not fit the table fails here rather than at run time.
    if let Err(message) = super::KafkaSink::new(config.clone()) {
        return plan_err!("table '{name}': {message}");
    }
    Ok((config, check))
}

/// Checks the transaction timeout against its broker's `transaction.max.timeout.ms`.
#[async_trait]
impl Preflight for TransactionTimeout {
    async fn check(&self) -> Result<()> {
        let maximum = match self.connection.max_transaction_timeout_ms().await {
            Ok(maximum) => maximum,
            Err(message) => {
                return plan_err!(
                    "table '{}': cannot check transaction.timeout.ms against the broker's maximum: {message}",
                    self.table
                );
            }
        };
        if self.timeout_ms > maximum {
            return plan_err!(
                "table '{}': transaction.timeout.ms = {} exceeds the broker's transaction.max.timeout.ms = {maximum} by {} ms: lower it, or raise the broker's maximum",
                self.table,
                self.timeout_ms,
                self.timeout_ms - maximum
            );
        }
        Ok(())
    }
}

/// How weir creates a sink table's topic when it is missing: `sink.create-topic` (off: a missing
/// topic is an error), with `sink.create-topic.partitions` and `.replication-factor` (the
/// broker's defaults without them).
fn topic_creation(table: &ConnectorTable) -> Result<Option<TopicCreation>> {
    let options = &table.options;
    let count = |name: &str| options.get(name).map(|_| options.integer(name, 1) as i32);
    let creation = TopicCreation {
        partitions: count("sink.create-topic.partitions"),
        replication_factor: count("sink.create-topic.replication-factor"),
    };
    if options.boolean("sink.create-topic", false) {
        return Ok(Some(creation));
    }
    if creation != TopicCreation::default() {
        return plan_err!(
            "table '{}': 'sink.create-topic.partitions' and '.replication-factor' need 'sink.create-topic' = 'true'",
            table.name
        );
    }
    Ok(None)
}

/// A topic a pipeline reads or writes, checked against its brokers before the pipeline starts:
/// a missing one would make a source retry forever, and have a producer either fail late or
/// (with the broker's auto-creation) write into a topic nobody configured.
#[derive(Debug, Clone)]
struct TopicCheck {
    table: String,
    connection: KafkaConnection,
    topic: String,
    /// `None`: must exist; `Some`: created when missing (`sink.create-topic`).
    create: Option<TopicCreation>,
    /// The option that lets weir create it, named in the error (none for a source's topics).
    create_option: Option<&'static str>,
}

impl TopicCheck {
    /// The topics a Kafka source reads, and its dead-letter topic.
    fn of_source(table: &str, config: &KafkaSourceConfig) -> Vec<Self> {
        let check = |topic: &str, create, create_option| Self {
            table: table.to_string(),
            connection: config.connection.clone(),
            topic: topic.to_string(),
            create,
            create_option,
        };
        let mut checks: Vec<Self> = config.topics.iter().map(|topic| check(topic, None, None)).collect();
        if let BadRecords::DeadLetter { topic, create } = &config.bad_records {
            checks.push(check(topic, *create, Some("dead_letter.create-topic")));
        }
        checks
    }

    /// The topic a Kafka sink writes.
    fn of_sink(table: &str, config: &KafkaSinkConfig) -> Self {
        Self {
            table: table.to_string(),
            connection: config.connection.clone(),
            topic: config.topic.clone(),
            create: config.create_topic,
            create_option: Some("sink.create-topic"),
        }
    }
}

/// Fails naming the topic when its brokers do not have it (and weir may not create it), after
/// creating it when weir was asked to.
#[async_trait]
impl Preflight for TopicCheck {
    fn phase(&self) -> PreflightPhase {
        PreflightPhase::Provision
    }

    async fn check(&self) -> Result<()> {
        match self.connection.ensure_topic(&self.topic, self.create).await {
            Ok(()) => Ok(()),
            Err(TopicError::Missing(message)) => {
                let fix = match self.create_option {
                    None => "create it, or correct the table's 'topic'".to_string(),
                    Some(option) => format!("create it, or let weir create it with '{option}' = 'true'"),
                };
                plan_err!("table '{}': {message}: {fix}", self.table)
            }
            Err(TopicError::Unavailable(message)) => {
                plan_err!("table '{}': cannot check its topics on the brokers: {message}", self.table)
            }
        }
    }
}

pub struct KafkaConnector;

const OPTIONS: &[OptionSpec] = &[
    required("bootstrap.servers", Kind::Text),
    required("topic", Kind::Text),
    required("format", Kind::OneOf(&["json", "csv", "raw", "debezium_json", "upsert"])),
    option("scan.startup.mode", Kind::OneOf(&["earliest", "latest", "group", "timestamp"])),
    option("scan.startup.timestamp_ms", ANY_COUNT),
    option("group.id", Kind::Text),
    option("bad_records", Kind::OneOf(&["fail", "skip", "dead_letter"])),
    option("dead_letter.topic", Kind::Text),
    option("dead_letter.create-topic", Kind::Boolean),
    option("sink.create-topic", Kind::Boolean),
    option("sink.create-topic.partitions", Kind::Integer { min: 1, max: 100_000 }),
    option("sink.create-topic.replication-factor", Kind::Integer { min: 1, max: 32_767 }),
    option("delivery", Kind::OneOf(&["exactly_once", "at_least_once", "none"])),
    option("transactional_id.prefix", Kind::Text),
    option("transaction.timeout.ms", Kind::Integer { min: 1000, max: 3_600_000 }),
    option("key.fields", Kind::Text),
    option("scan.bounded.mode", Kind::OneOf(&["unbounded", "latest"])),
    option("timestamp_column", Kind::Text),
    option("metadata_columns", Kind::Text),
    option("virtual_columns", Kind::Text),
    option("watermark.idle_timeout", Kind::Duration),
    option("scan.partition_discovery.interval", Kind::Duration),
    option("batch_size", Kind::Integer { min: 1, max: 1_000_000 }),
    csv_format::OPTIONS[0],
    csv_format::OPTIONS[1],
    csv_format::OPTIONS[2],
    csv_format::OPTIONS[3],
    csv_format::OPTIONS[4],
    csv_format::OPTIONS[5],
];

/// A table's metadata columns: the one of the record timestamp, and those of where the record is.
struct MetadataColumns {
    timestamp: Option<String>,
    place: Vec<(String, RecordMetadata)>,
}

/// A table's metadata columns (`metadata_columns`, `name=key,...`, from Flink's `METADATA FROM
/// 'key'`).
fn metadata_columns(table: &ConnectorTable) -> Result<MetadataColumns> {
    let name = &table.name;
    let (mut timestamp, mut metadata) = (None, Vec::new());
    let left_out = table.options.list("virtual_columns");
    for pair in table.options.list("metadata_columns") {
        let Some((column, key)) = pair.split_once('=') else {
            return plan_err!("table '{name}': metadata column '{pair}' is not written name=key");
        };
        let Ok(field) = table.schema.field_with_name(column) else {
            // A VIRTUAL column is not in the table an INSERT writes.
            if left_out.iter().any(|c| c == column) {
                continue;
            }
            return plan_err!("table '{name}': metadata column '{column}' is not a column of the table");
        };
        let fits = |ok: bool, wanted: &str| match ok {
            true => Ok(()),
            false => plan_err!(
                "table '{name}': metadata column '{column}' ({key}) must be {wanted}, not {}",
                field.data_type()
            ),
        };
        match (key, RecordMetadata::of_key(key)) {
            ("timestamp", _) => {
                fits(matches!(field.data_type(), DataType::Timestamp(..)), "a TIMESTAMP")?;
                timestamp = Some(column.to_string());
            }
            (_, Some(RecordMetadata::Topic)) => {
                fits(matches!(field.data_type(), DataType::Utf8 | DataType::LargeUtf8), "text")?;
                metadata.push((column.to_string(), RecordMetadata::Topic));
            }
            (_, Some(RecordMetadata::Headers)) => {
                let text_keys = |fields: &Fields| fields.first().is_some_and(|f| f.data_type() == &DataType::Utf8);
                let values = |fields: &Fields| {
                    fields.get(1).is_some_and(|f| matches!(f.data_type(), DataType::Binary | DataType::Utf8))
                };
                let is_map = match field.data_type() {
                    DataType::Map(entries, _) => match entries.data_type() {
                        DataType::Struct(fields) => text_keys(fields) && values(fields),
                        _ => false,
                    },
                    _ => false,
                };
                fits(is_map, "a MAP<STRING, BYTES> (or MAP<STRING, STRING>)")?;
                metadata.push((column.to_string(), RecordMetadata::Headers));
            }
            (_, Some(kind)) => {
                fits(field.data_type().is_integer(), "an integer type")?;
                metadata.push((column.to_string(), kind));
            }
            (other, None) => {
                return plan_err!(
                    "table '{name}': metadata key '{other}' is not supported: weir's Kafka tables read 'timestamp', 'partition', 'offset', 'topic' and 'headers'"
                );
            }
        }
    }
    Ok(MetadataColumns { timestamp, place: metadata })
}

/// The metadata columns an INSERT writes (those of the table as written: its VIRTUAL ones are
/// left out before), as Flink writes them: `timestamp` the record's timestamp, `headers` its
/// headers; the others are where Kafka puts a record, which no writer chooses.
fn written_metadata(table: &ConnectorTable) -> Result<RecordColumns> {
    let name = &table.name;
    let read = metadata_columns(table)?;
    let mut written = RecordColumns { timestamp: read.timestamp, headers: None };
    for (column, kind) in read.place {
        match kind {
            RecordMetadata::Headers => written.headers = Some(column),
            other => {
                return plan_err!(
                    "table '{name}': metadata column '{column}' ({}) is read-only: declare it METADATA ... VIRTUAL, and an INSERT leaves it out",
                    other.key()
                );
            }
        }
    }
    Ok(written)
}

/// The CSV dialect of a table with `format = 'csv'`.
fn csv_of(table: &ConnectorTable) -> Result<CsvFormat> {
    CsvFormat::of(&table.options, &table.schema).map_err(|e| Error::Plan(format!("table '{}': {e}", table.name)))
}

/// The checks a table's pre-flight runs: its transaction timeout (when it writes
/// transactionally), then its topics.
fn preflight(timeout: Option<TransactionTimeout>, topics: Vec<TopicCheck>) -> Vec<Arc<dyn Preflight>> {
    let timeout = timeout.map(|check| Arc::new(check) as Arc<dyn Preflight>);
    timeout.into_iter().chain(topics.into_iter().map(|check| Arc::new(check) as Arc<dyn Preflight>)).collect()
}

impl Connector for KafkaConnector {
    fn name(&self) -> &'static str {
        "kafka"
    }

    fn options(&self) -> &'static [OptionSpec] {
        OPTIONS
    }

    /// librdkafka's own properties, as `kafka.<property>`.
    fn pass_through(&self) -> Option<&'static str> {
        Some("kafka.")
    }

    fn aliases(&self) -> &'static [&'static str] {
        &["upsert-kafka"]
    }

    /// Metadata columns name keys weir reads, on columns of fitting types.
    fn check(&self, table: &ConnectorTable) -> Result<()> {
        metadata_columns(table).map(|_| ())
    }

    fn take_flink_options(&self, written: &str, options: &mut BTreeMap<String, String>) -> Result<()> {
        super::flink_options::from_flink(written, options)
    }

    fn bounded(&self, table: &ConnectorTable) -> bool {
        table.options.get("scan.bounded.mode") == Some("latest")
    }

    fn reading(&self, table: &ConnectorTable) -> String {
        let options = &table.options;
        let topic = options.get("topic").unwrap_or_default();
        let from = match options.get("scan.startup.mode") {
            Some("latest") => "from the latest offset (only records written from now on)".to_string(),
            Some("group") => {
                format!("from group '{}''s committed offsets", options.get("group.id").unwrap_or_default())
            }
            Some("timestamp") => {
                format!("from timestamp {} ms", options.get("scan.startup.timestamp_ms").unwrap_or_default())
            }
            _ => "from the earliest offset".to_string(),
        };
        let until = match options.get("scan.bounded.mode") {
            Some("latest") => ", until the offsets of the start",
            _ => "",
        };
        format!("{}: kafka topic '{topic}' {from}{until}", table.name)
    }

    fn source(&self, table: &ConnectorTable, _: usize, context: NodeContext<'_>) -> Result<PlannedSource> {
        let (config, timeout) = source_config(table, context.options, context.node)?;
        let topics = TopicCheck::of_source(&table.name, &config);
        let rows = match &config.format {
            SourceFormat::DebeziumJson => SourceRows::Changes,
            SourceFormat::Upsert { key } => SourceRows::Upserts { key: key.clone() },
            _ => SourceRows::Appends,
        };
        let assigns_watermarks = config.event_time.is_some();
        Ok(PlannedSource {
            transactional_prefixes: dead_letter_prefix(&config).into_iter().collect(),
            factory: Arc::new(move |_| Ok(Box::new(KafkaSource::new(config.clone())))),
            state: "the next offset of each partition".into(),
            assigns_watermarks,
            rows,
            preflight: preflight(timeout, topics),
        })
    }

    fn sink(&self, table: &ConnectorTable, updating: bool, context: NodeContext<'_>) -> Result<PlannedSink> {
        let (config, timeout) = sink_config(table, updating, context.options, context.node)?;
        let topics = vec![TopicCheck::of_sink(&table.name, &config)];
        let exactly_once = config.delivery == Delivery::ExactlyOnce;
        Ok(PlannedSink {
            transactional_prefixes: exactly_once.then(|| config.transactional_id_prefix.clone()).into_iter().collect(),
            state: exactly_once
                .then(|| "the open transactions of checkpoints not yet complete (id, producer id, epoch)".to_string()),
            factory: Arc::new(move |_| {
                let sink = KafkaSink::new(config.clone()).map_err(|e| weir_engine::Error::Graph(e.to_string()))?;
                Ok(Box::new(TwoPhaseCommitSink::new(sink)))
            }),
            preflight: preflight(timeout, topics),
        })
    }
}
