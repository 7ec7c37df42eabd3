//! The Kafka source.
//!
//! Partitions are split across subtasks (partition p of the i-th topic goes to subtask
//! (i + p) mod parallelism, stable as partitions are added); new partitions are picked up while
//! running (`scan.partition_discovery.interval`) and read from their start. The consumer is assigned partitions by hand (no group
//! rebalancing) and reads with `read_committed`. The next offset of every partition is in the
//! snapshot, restored as a union so any parallelism takes over where the last one stopped; the
//! offsets are committed to the consumer group when a checkpoint completes, for monitoring only.
//!
//! Event time comes from a column or from the Kafka record timestamp (`timestamp_column`);
//! each partition has its own watermark (its largest event time less the allowed delay), and
//! the subtask's is the minimum over its partitions that are not idle (no record for
//! `idle_timeout`).
//!
//! A record that does not decode follows `bad_records`: the pipeline fails naming the topic,
//! partition, offset and reason; or the record is skipped and counted; or it goes, as it was,
//! to a dead-letter topic with the reason in its headers, written with the table's delivery
//! guarantee (exactly-once: a transaction committed with the checkpoint, like a sink's).

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use datafusion::arrow::array::{
    Array, ArrayRef, BinaryBuilder, Int32Array, Int64Array, MapBuilder, MapFieldNames, StringArray, StringBuilder,
    TimestampMillisecondArray,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Headers;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{Message, Offset, Timestamp, TopicPartitionList};
use weir_engine::changelog::{change_column, changelog_schema};
use weir_engine::two_phase_commit::TwoPhaseCommit;
use weir_engine::{RestoredState, Source, SourceEvent, StateTable, SubtaskInfo, state_column};

use super::blocking::blocking;
use super::connection::{KafkaConnection, QuietContext, TopicCreation, TopicError};
use super::decode::{Decoded, decode_csv, decode_debezium, decode_json, decode_raw, decode_upsert};
use super::producer_pool::{Delivery, KafkaWriter, OutRecord};
use crate::Error;
use crate::csv_format::CsvFormat;

const OFFSETS: &str = "offsets";
/// How long one `next` call may collect records.
const POLL_FOR: Duration = Duration::from_millis(50);
const METADATA_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceFormat {
    Json,
    Raw,
    /// Debezium change events: the source emits a changelog.
    DebeziumJson,
    /// One CSV row per record (Flink's `csv` format).
    Csv(CsvFormat),
    /// Upserts keyed by these columns (Flink's `upsert-kafka`): a record's value is its key's
    /// latest row, a record without a value (a tombstone) removes the key its key names. The
    /// source emits them as `+U` and `-D` rows; the planner keeps each key's latest row to
    /// make a changelog of them (`weir_engine::operators::UpsertNormalize`).
    Upsert {
        key: Vec<String>,
    },
}

/// Where partitions without a checkpointed offset start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartupMode {
    Earliest,
    Latest,
    /// The consumer group's committed offsets (earliest where there are none).
    Group,
    /// The first record at or after this time (milliseconds since the epoch).
    Timestamp(i64),
}

/// What happens to a record that does not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadRecords {
    Fail,
    Skip,
    DeadLetter {
        topic: String,
        /// Create the topic when it is missing (`dead_letter.create-topic`), rather than fail.
        create: Option<TopicCreation>,
    },
}

#[derive(Debug, Clone)]
pub struct KafkaSourceConfig {
    pub connection: KafkaConnection,
    pub topics: Vec<String>,
    pub format: SourceFormat,
    /// The table's columns.
    pub schema: SchemaRef,
    pub startup: StartupMode,
    /// Offsets are committed to this group on checkpoint completion (monitoring only).
    pub group_id: Option<String>,
    /// Stop at the end offsets the partitions had when the subtask opened.
    pub bounded: bool,
    pub bad_records: BadRecords,
    /// The dead-letter output's guarantee and transactional ids' prefix.
    pub delivery: Delivery,
    pub transactional_id_prefix: String,
    pub transaction_timeout_ms: u32,
    /// The dead-letter writer's transactional ids per subtask.
    pub transactional_ids_per_subtask: usize,
    /// (event-time column, allowed delay in ms): the source emits watermarks.
    pub event_time: Option<(String, i64)>,
    pub idle_timeout: Duration,
    /// How often the topics' partitions are looked up again (unbounded reads).
    pub discovery_interval: Duration,
    /// The column filled with the Kafka record timestamp instead of from the value.
    pub timestamp_column: Option<String>,
    /// Columns filled with where the record is (Flink's metadata columns).
    pub metadata: Vec<(String, RecordMetadata)>,
    pub batch_size: usize,
}

/// What carries a record, as a metadata column reads it (Flink's keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordMetadata {
    Topic,
    Partition,
    Offset,
    /// The record's headers, a map of their keys to their values.
    Headers,
}

impl RecordMetadata {
    /// Flink's key of the metadata.
    pub fn key(self) -> &'static str {
        match self {
            Self::Topic => "topic",
            Self::Partition => "partition",
            Self::Offset => "offset",
            Self::Headers => "headers",
        }
    }

    /// The metadata of Flink's key `key`, if weir reads it (`timestamp` is the timestamp column).
    pub fn of_key(key: &str) -> Option<Self> {
        match key {
            "topic" => Some(Self::Topic),
            "partition" => Some(Self::Partition),
            "offset" => Some(Self::Offset),
            "headers" => Some(Self::Headers),
            _ => None,
        }
    }
}

#[derive(Debug)]
struct PartitionState {
    topic: String,
    partition: i32,
    next_offset: i64,
    /// Bounded reads stop here.
    end: Option<i64>,
    max_event_time: Option<i64>,
    last_record: Instant,
}

impl PartitionState {
    fn done(&self) -> bool {
        self.end.is_some_and(|end| self.next_offset >= end)
    }
}

/// What a metadata look at the source's topics found.
enum Discovered {
    /// Partitions this subtask reads and did not know of.
    Partitions(Vec<PartitionState>),
    /// The broker does not know this topic.
    Gone(String),
}

/// What one poll brought: the records' metadata, their values in one buffer, and the
/// partitions that reported reaching their end.
#[derive(Default)]
struct Polled {
    partition: Vec<usize>,
    offset: Vec<i64>,
    timestamp: Vec<Option<i64>>,
    value: Vec<Option<Range<usize>>>,
    /// The records' keys, when the format reads them (upserts).
    key: Vec<Option<Range<usize>>>,
    /// The records' headers, when a column reads them: record i's are those up to
    /// `header_ends[i]`.
    headers: Vec<(String, Option<Vec<u8>>)>,
    header_ends: Vec<usize>,
    buffer: Vec<u8>,
    reached_end: bool,
}

pub struct KafkaSource {
    config: Arc<KafkaSourceConfig>,
    /// The columns decoded from the values (the table's, less the timestamp column).
    value_schema: SchemaRef,
    /// The table's columns as the source emits them: all nullable for upserts (a tombstone's
    /// row holds only its key).
    rows_schema: SchemaRef,
    info: Option<SubtaskInfo>,
    consumer: Option<Arc<BaseConsumer<QuietContext>>>,
    partitions: Vec<PartitionState>,
    index: HashMap<(String, i32), usize>,
    watermark: Option<i64>,
    pending_watermark: Option<i64>,
    /// The dead-letter output, a committer of weir's two-phase commit like the sink.
    dead_letters: Option<TwoPhaseCommit<KafkaWriter>>,
    /// The offsets of each snapshot, committed to the group when it completes.
    snapshots: BTreeMap<u64, Vec<(String, i32, i64)>>,
    last_discovery: Instant,
}

impl KafkaSource {
    pub fn new(config: KafkaSourceConfig) -> Self {
        let value_schema = Arc::new(Schema::new(
            config
                .schema
                .fields()
                .iter()
                .filter(|f| Some(f.name()) != config.timestamp_column.as_ref())
                .filter(|f| config.metadata.iter().all(|(column, _)| column != f.name()))
                .cloned()
                .collect::<Vec<_>>(),
        ));
        let rows_schema = match config.format {
            SourceFormat::Upsert { .. } => {
                let fields: Vec<Field> =
                    config.schema.fields().iter().map(|f| f.as_ref().clone().with_nullable(true)).collect();
                Arc::new(Schema::new(fields))
            }
            _ => config.schema.clone(),
        };
        Self {
            config: Arc::new(config),
            value_schema,
            rows_schema,
            info: None,
            consumer: None,
            partitions: Vec::new(),
            index: HashMap::new(),
            watermark: None,
            pending_watermark: None,
            dead_letters: None,
            snapshots: BTreeMap::new(),
            last_discovery: Instant::now(),
        }
    }

    fn error(&self, message: impl std::fmt::Display) -> weir_engine::Error {
        match &self.info {
            Some(info) => info.error(message),
            None => weir_engine::Error::Graph(message.to_string()),
        }
    }

    fn consumer(&self) -> weir_engine::Result<Arc<BaseConsumer<QuietContext>>> {
        self.consumer.clone().ok_or_else(|| self.error("the source was not opened"))
    }

    /// Finds the partitions this subtask owns that it does not read yet, resolves where each
    /// starts, and adds them to the assignment.
    async fn discover(&mut self, restored: &HashMap<(String, i32), i64>, first: bool) -> weir_engine::Result<()> {
        let (Some(info), consumer) = (self.info.clone(), self.consumer()?) else {
            return Err(self.error("the source was not opened"));
        };
        let config = self.config.clone();
        let known: Vec<(String, i32)> = self.index.keys().cloned().collect();
        let restored = restored.clone();
        let discovered = blocking(move || {
            let mut new = Vec::new();
            for (t, topic) in config.topics.iter().enumerate() {
                let metadata = consumer
                    .fetch_metadata(Some(topic), METADATA_TIMEOUT)
                    .map_err(Error::client(format!("topic {topic}: metadata")))?;
                let Some(found) = metadata.topics().first() else { continue };
                match found.error() {
                    None => {}
                    Some(RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART) => {
                        return Ok(Discovered::Gone(topic.clone()));
                    }
                    Some(e) => return Err(Error::Unexpected(format!("topic {topic}: {e:?}"))),
                }
                for p in found.partitions() {
                    let partition = p.id();
                    let owned = (t + partition as usize) % info.parallelism == info.subtask;
                    if !owned || known.contains(&(topic.clone(), partition)) {
                        continue;
                    }
                    let (low, high) = consumer
                        .fetch_watermarks(topic, partition, METADATA_TIMEOUT)
                        .map_err(Error::client(format!("topic {topic} partition {partition}: offsets")))?;
                    // Partitions the restored checkpoint does not know appeared after it: read
                    // them from the start, like partitions found while running.
                    let start = match restored.get(&(topic.clone(), partition)) {
                        Some(offset) => *offset,
                        None if !first || !restored.is_empty() => low,
                        None => start_offset(&consumer, &config, topic, partition, low, high)?,
                    };
                    new.push(PartitionState {
                        topic: topic.clone(),
                        partition,
                        next_offset: start,
                        end: config.bounded.then_some(high),
                        max_event_time: None,
                        last_record: Instant::now(),
                    });
                }
            }
            if !new.is_empty() {
                let mut assignment = TopicPartitionList::new();
                for p in &new {
                    assignment
                        .add_partition_offset(&p.topic, p.partition, Offset::Offset(p.next_offset))
                        .map_err(Error::client("assigning partitions"))?;
                }
                consumer.incremental_assign(&assignment).map_err(Error::client("assigning partitions"))?;
            }
            Ok(Discovered::Partitions(new))
        })
        .await
        .map_err(|e| self.error(e))?;
        let new = match discovered {
            Discovered::Partitions(new) => new,
            // Deleted while the pipeline ran (or since it was planned): a restart cannot bring
            // it back, so fail for good, once a second look agrees.
            Discovered::Gone(topic) => {
                return Err(match self.config.connection.ensure_topic(&topic, None).await {
                    Err(TopicError::Missing(message)) => info.fatal(message),
                    _ => info.error(format!("topic {topic}: unknown topic or partition")),
                });
            }
        };
        for partition in new {
            tracing::debug!(
                topic = partition.topic,
                partition = partition.partition,
                offset = partition.next_offset,
                "reading partition"
            );
            self.index.insert((partition.topic.clone(), partition.partition), self.partitions.len());
            self.partitions.push(partition);
        }
        self.last_discovery = Instant::now();
        Ok(())
    }

    async fn poll(&self) -> weir_engine::Result<Polled> {
        let consumer = self.consumer()?;
        let index = self.index.clone();
        let batch_size = self.config.batch_size;
        let with_keys = matches!(self.config.format, SourceFormat::Upsert { .. });
        let with_headers = self.config.metadata.iter().any(|(_, m)| *m == RecordMetadata::Headers);
        blocking(move || {
            let deadline = Instant::now() + POLL_FOR;
            let mut polled = Polled::default();
            while polled.offset.len() < batch_size {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                match consumer.poll(left) {
                    None => break,
                    Some(Ok(message)) => {
                        let Some(i) = index.get(&(message.topic().to_string(), message.partition())) else { continue };
                        polled.partition.push(*i);
                        polled.offset.push(message.offset());
                        polled.timestamp.push(match message.timestamp() {
                            Timestamp::NotAvailable => None,
                            Timestamp::CreateTime(t) | Timestamp::LogAppendTime(t) => Some(t),
                        });
                        let mut copy = |bytes: &[u8]| {
                            let start = polled.buffer.len();
                            polled.buffer.extend_from_slice(bytes);
                            start..polled.buffer.len()
                        };
                        polled.value.push(message.payload().map(&mut copy));
                        if with_keys {
                            polled.key.push(message.key().map(&mut copy));
                        }
                        if with_headers {
                            if let Some(headers) = message.headers() {
                                let all = headers.iter().map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)));
                                polled.headers.extend(all);
                            }
                            polled.header_ends.push(polled.headers.len());
                        }
                    }
                    Some(Err(KafkaError::PartitionEOF(_))) => {
                        polled.reached_end = true;
                        break;
                    }
                    Some(Err(e)) => return Err(Error::client("consuming")(e)),
                }
            }
            Ok(polled)
        })
        .await
        .map_err(|e| self.error(e))
    }

    /// A bounded read reached the end of some partition: take the consumer's positions (which
    /// count the transaction markers that are never delivered).
    async fn update_positions(&mut self) -> weir_engine::Result<()> {
        let consumer = self.consumer()?;
        let positions = blocking(move || consumer.position().map_err(Error::client("positions")))
            .await
            .map_err(|e| self.error(e))?;
        for element in positions.elements() {
            if let (Offset::Offset(offset), Some(i)) =
                (element.offset(), self.index.get(&(element.topic().to_string(), element.partition())))
            {
                let partition = &mut self.partitions[*i];
                partition.next_offset = partition.next_offset.max(offset);
            }
        }
        Ok(())
    }

    /// The polled records as rows of the table, after the bad ones are dealt with.
    async fn rows(&mut self, polled: &Polled) -> weir_engine::Result<Option<RecordBatch>> {
        let values: Vec<Option<&[u8]>> =
            polled.value.iter().map(|r| r.as_ref().map(|r| &polled.buffer[r.clone()])).collect();
        let decoded = match &self.config.format {
            SourceFormat::Json => decode_json(&self.value_schema, &values),
            SourceFormat::Raw => decode_raw(&self.value_schema, &values),
            SourceFormat::DebeziumJson => decode_debezium(&self.value_schema, &values),
            SourceFormat::Csv(csv) => decode_csv(csv, &self.value_schema, &values),
            SourceFormat::Upsert { key } => {
                let keys: Vec<Option<&[u8]>> =
                    polled.key.iter().map(|r| r.as_ref().map(|r| &polled.buffer[r.clone()])).collect();
                decode_upsert(&self.value_schema, key, &keys, &values)
            }
        }
        .map_err(|e| self.error(e))?;
        self.bad_records(polled, &values, &decoded).await?;
        if decoded.batch.num_rows() == 0 {
            return Ok(None);
        }
        let batch = self.with_record_columns(polled, &decoded)?;
        self.track_event_time(polled, &decoded.rows_from, &batch)?;
        Ok(Some(batch))
    }

    async fn bad_records(
        &mut self,
        polled: &Polled,
        values: &[Option<&[u8]>],
        decoded: &Decoded,
    ) -> weir_engine::Result<()> {
        if decoded.bad.is_empty() {
            return Ok(());
        }
        let describe = |i: usize, reason: &str| {
            let p = &self.partitions[polled.partition[i]];
            format!("bad record at topic {} partition {} offset {}: {reason}", p.topic, p.partition, polled.offset[i])
        };
        match &self.config.bad_records {
            BadRecords::Fail => {
                // Restarting would meet the same record again: the pipeline fails for good.
                let (i, reason) = &decoded.bad[0];
                let message =
                    format!("{} (option bad_records = 'fail'; 'skip' or 'dead_letter' go on)", describe(*i, reason));
                return Err(match &self.info {
                    Some(info) => info.fatal(message),
                    None => weir_engine::Error::Graph(message),
                });
            }
            BadRecords::Skip => {
                for (i, reason) in &decoded.bad {
                    tracing::debug!("skipped {}", describe(*i, reason));
                }
            }
            BadRecords::DeadLetter { .. } => {
                let records = decoded
                    .bad
                    .iter()
                    .map(|(i, reason)| {
                        let p = &self.partitions[polled.partition[*i]];
                        OutRecord {
                            key: None,
                            value: values[*i].map(<[u8]>::to_vec),
                            timestamp: None,
                            headers: [
                                ("weir.error", reason.clone()),
                                ("weir.topic", p.topic.clone()),
                                ("weir.partition", p.partition.to_string()),
                                ("weir.offset", polled.offset[*i].to_string()),
                            ]
                            .into_iter()
                            .map(|(key, value)| (key.to_string(), Some(value.into_bytes())))
                            .collect(),
                        }
                    })
                    .collect();
                let Some(dead_letters) = self.dead_letters.as_mut() else {
                    return Err(self.error("no dead-letter writer"));
                };
                let writer = dead_letters.committer();
                if let Err(error) = writer.write(records).await {
                    return Err(writer.failure(format!("dead letters: {error}")).await);
                }
            }
        }
        if let Some(info) = &self.info {
            info.metrics.bad_records.fetch_add(decoded.bad.len() as u64, Ordering::Relaxed);
        }
        Ok(())
    }

    /// The decoded rows in the table's column order, with the timestamp column filled from the
    /// records' Kafka timestamps and the metadata columns from where each record is.
    fn with_record_columns(&self, polled: &Polled, decoded: &Decoded) -> weir_engine::Result<RecordBatch> {
        if self.config.timestamp_column.is_none() && self.config.metadata.is_empty() {
            return Ok(decoded.batch.clone());
        }
        let schema = &self.rows_schema;
        let rows = &decoded.rows_from;
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
        for field in schema.fields() {
            let metadata = self.config.metadata.iter().find(|(column, _)| column == field.name()).map(|(_, m)| *m);
            let column: ArrayRef = if Some(field.name()) == self.config.timestamp_column.as_ref() {
                let millis: TimestampMillisecondArray = rows.iter().map(|i| polled.timestamp[*i]).collect();
                cast(&millis, field.data_type())?
            } else if let Some(metadata) = metadata {
                let of = |i: &usize| &self.partitions[polled.partition[*i]];
                let values: ArrayRef = match metadata {
                    RecordMetadata::Topic => {
                        Arc::new(StringArray::from_iter_values(rows.iter().map(|i| of(i).topic.as_str())))
                    }
                    RecordMetadata::Partition => {
                        Arc::new(Int32Array::from_iter_values(rows.iter().map(|i| of(i).partition)))
                    }
                    RecordMetadata::Offset => {
                        Arc::new(Int64Array::from_iter_values(rows.iter().map(|i| polled.offset[*i])))
                    }
                    RecordMetadata::Headers => headers_map(polled, rows)?,
                };
                cast(&values, field.data_type())?
            } else {
                decoded
                    .batch
                    .column_by_name(field.name())
                    .cloned()
                    .ok_or_else(|| self.error(format!("decoded rows lack column '{}'", field.name())))?
            };
            columns.push(column);
        }
        match change_column(&decoded.batch) {
            Some(changes) => {
                columns.push(changes);
                Ok(RecordBatch::try_new(changelog_schema(schema), columns)?)
            }
            None => Ok(RecordBatch::try_new(schema.clone(), columns)?),
        }
    }

    /// Raises each partition's largest event time by the rows it brought.
    fn track_event_time(
        &mut self,
        polled: &Polled,
        rows_from: &[usize],
        batch: &RecordBatch,
    ) -> weir_engine::Result<()> {
        let now = Instant::now();
        for i in rows_from {
            self.partitions[polled.partition[*i]].last_record = now;
        }
        let Some((column, _)) = &self.config.event_time else { return Ok(()) };
        let values = batch
            .column_by_name(column)
            .ok_or_else(|| self.error(format!("the event-time column '{column}' is not in the records")))?;
        let millis = cast(&cast(values, &DataType::Timestamp(TimeUnit::Millisecond, None))?, &DataType::Int64)?;
        let Some(millis) = millis.as_any().downcast_ref::<Int64Array>() else {
            return Err(self.error(format!("event-time column '{column}' did not cast to milliseconds")));
        };
        for (row, i) in rows_from.iter().enumerate() {
            if millis.is_valid(row) {
                let partition = &mut self.partitions[polled.partition[*i]];
                partition.max_event_time =
                    Some(partition.max_event_time.map_or(millis.value(row), |m| m.max(millis.value(row))));
            }
        }
        Ok(())
    }

    /// The subtask's watermark if it advanced: the minimum over partitions that are neither
    /// idle nor finished of their largest event time less the delay. A partition that has not
    /// brought a record yet holds it back until it turns idle.
    fn advanced_watermark(&mut self) -> Option<i64> {
        let (_, delay) = self.config.event_time.as_ref()?;
        let idle_after = self.config.idle_timeout;
        let mut active =
            self.partitions.iter().filter(|p| !p.done() && p.last_record.elapsed() < idle_after).peekable();
        active.peek()?;
        let watermark = active.map(|p| p.max_event_time.map(|m| m.saturating_sub(*delay))).min()??;
        if self.watermark.is_some_and(|w| w >= watermark) {
            return None;
        }
        self.watermark = Some(watermark);
        Some(watermark)
    }
}

/// Where a partition without a checkpointed offset starts, by the startup mode.
fn start_offset(
    consumer: &BaseConsumer<QuietContext>,
    config: &KafkaSourceConfig,
    topic: &str,
    partition: i32,
    low: i64,
    high: i64,
) -> crate::Result<i64> {
    let lookup = |list: TopicPartitionList| -> crate::Result<Option<i64>> {
        Ok(list.find_partition(topic, partition).and_then(|e| match e.offset() {
            Offset::Offset(o) => Some(o),
            _ => None,
        }))
    };
    Ok(match config.startup {
        StartupMode::Earliest => low,
        StartupMode::Latest => high,
        StartupMode::Group => {
            let mut list = TopicPartitionList::new();
            list.add_partition(topic, partition);
            lookup(consumer.committed_offsets(list, METADATA_TIMEOUT).map_err(Error::client("group offsets"))?)?
                .unwrap_or(low)
        }
        StartupMode::Timestamp(ms) => {
            let mut list = TopicPartitionList::new();
            list.add_partition_offset(topic, partition, Offset::Offset(ms))
                .map_err(Error::client("offsets for time"))?;
            lookup(consumer.offsets_for_times(list, METADATA_TIMEOUT).map_err(Error::client("offsets for time"))?)?
                .unwrap_or(high)
        }
    })
}

fn offsets_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("topic", DataType::Utf8, false),
        Field::new("partition", DataType::Int32, false),
        Field::new("offset", DataType::Int64, false),
    ]))
}

#[async_trait]
impl Source for KafkaSource {
    async fn open(&mut self, info: &SubtaskInfo, restored: RestoredState) -> weir_engine::Result<()> {
        self.info = Some(info.clone());
        let mut offsets = HashMap::new();
        for batch in restored.table(OFFSETS) {
            let topics = state_column::<StringArray>(batch, "topic", info)?;
            let partitions = state_column::<Int32Array>(batch, "partition", info)?;
            let next = state_column::<Int64Array>(batch, "offset", info)?;
            for row in 0..batch.num_rows() {
                offsets.insert((topics.value(row).to_string(), partitions.value(row)), next.value(row));
            }
        }
        let group =
            self.config.group_id.clone().unwrap_or_else(|| format!("{}-reader", self.config.transactional_id_prefix));
        let config = self.config.connection.client_config(&[
            ("group.id", &group),
            ("enable.auto.commit", "false"),
            ("enable.auto.offset.store", "false"),
            ("isolation.level", "read_committed"),
            ("enable.partition.eof", if self.config.bounded { "true" } else { "false" }),
            ("auto.offset.reset", "earliest"),
        ]);
        let consumer: BaseConsumer<QuietContext> = blocking(move || {
            config.create_with_context(QuietContext).map_err(Error::client("creating the Kafka consumer"))
        })
        .await
        .map_err(|e| info.error(e))?;
        self.consumer = Some(Arc::new(consumer));
        if let BadRecords::DeadLetter { topic, create } = &self.config.bad_records {
            let writer = KafkaWriter::new(
                self.config.connection.clone(),
                topic.clone(),
                self.config.delivery,
                dead_letter_prefix(&self.config.transactional_id_prefix),
                self.config.transaction_timeout_ms,
                self.config.transactional_ids_per_subtask,
                *create,
            )
            .map_err(|e| info.error(e))?;
            let mut dead_letters = TwoPhaseCommit::new(writer);
            dead_letters.open(info, &restored).await?;
            self.dead_letters = Some(dead_letters);
        }
        self.discover(&offsets, true).await
    }

    async fn next(&mut self) -> weir_engine::Result<SourceEvent> {
        if let Some(watermark) = self.pending_watermark.take() {
            return Ok(SourceEvent::Watermark(watermark));
        }
        if self.config.bounded && self.partitions.iter().all(PartitionState::done) {
            return Ok(SourceEvent::End);
        }
        if !self.config.bounded && self.last_discovery.elapsed() >= self.config.discovery_interval {
            self.discover(&HashMap::new(), false).await?;
        }
        let polled = self.poll().await?;
        for (i, offset) in polled.partition.iter().zip(&polled.offset) {
            let partition = &mut self.partitions[*i];
            partition.next_offset = partition.next_offset.max(offset + 1);
        }
        if polled.reached_end {
            self.update_positions().await?;
        }
        let rows = if polled.offset.is_empty() { None } else { self.rows(&polled).await? };
        let watermark = self.advanced_watermark();
        match (rows, watermark) {
            (Some(batch), watermark) => {
                self.pending_watermark = watermark;
                Ok(SourceEvent::Batch(batch))
            }
            (None, Some(watermark)) => Ok(SourceEvent::Watermark(watermark)),
            (None, None) => Ok(SourceEvent::Idle),
        }
    }

    async fn snapshot(&mut self, checkpoint_id: u64) -> weir_engine::Result<Vec<StateTable>> {
        let schema = offsets_schema();
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from_iter_values(self.partitions.iter().map(|p| p.topic.as_str()))),
                Arc::new(Int32Array::from_iter_values(self.partitions.iter().map(|p| p.partition))),
                Arc::new(Int64Array::from_iter_values(self.partitions.iter().map(|p| p.next_offset))),
            ],
        )?;
        let mut tables = vec![StateTable { name: OFFSETS.into(), schema, batches: vec![batch], delta: None }];
        if self.config.group_id.is_some() {
            let offsets = self.partitions.iter().map(|p| (p.topic.clone(), p.partition, p.next_offset)).collect();
            self.snapshots.insert(checkpoint_id, offsets);
        }
        if let (Some(dead_letters), Some(info)) = (self.dead_letters.as_mut(), self.info.as_ref()) {
            tables.extend(dead_letters.snapshot(info, checkpoint_id).await?);
        }
        Ok(tables)
    }

    async fn checkpoint_complete(&mut self, checkpoint_id: u64) -> weir_engine::Result<()> {
        if let Some(dead_letters) = self.dead_letters.as_mut() {
            dead_letters.complete(checkpoint_id).await?;
        }
        let rest = self.snapshots.split_off(&(checkpoint_id + 1));
        let done = std::mem::replace(&mut self.snapshots, rest);
        if let Some((_, offsets)) = done.into_iter().next_back() {
            let mut list = TopicPartitionList::new();
            for (topic, partition, offset) in offsets {
                list.add_partition_offset(&topic, partition, Offset::Offset(offset)).map_err(|e| self.error(e))?;
            }
            let consumer = self.consumer()?;
            // For monitoring only: a failure is logged, never fatal.
            if let Err(e) =
                blocking(move || consumer.commit(&list, CommitMode::Async).map_err(Error::client("committing offsets")))
                    .await
            {
                tracing::warn!(error = %e, "committing offsets to the consumer group");
            }
        }
        Ok(())
    }

    async fn close(&mut self) -> weir_engine::Result<()> {
        if let Some(dead_letters) = self.dead_letters.as_mut() {
            dead_letters.close().await?;
        }
        // Closing a librdkafka consumer waits for its threads: not on an async worker.
        let consumer = self.consumer.take();
        blocking(move || {
            drop(consumer);
            Ok(())
        })
        .await
        .map_err(|e| self.error(e))
    }
}

/// The transactional ids' prefix of the dead-letter writer of a source whose own prefix is
/// `prefix`.
pub fn dead_letter_prefix(prefix: &str) -> String {
    format!("{prefix}-dead-letters")
}

/// The headers of records `rows` as a map of text keys to bytes (cast to the column's type
/// after, as every metadata column is).
fn headers_map(polled: &Polled, rows: &[usize]) -> weir_engine::Result<ArrayRef> {
    let names = MapFieldNames { entry: "entries".into(), key: "key".into(), value: "value".into() };
    let mut map = MapBuilder::new(Some(names), StringBuilder::new(), BinaryBuilder::new());
    for &i in rows {
        let start = if i == 0 { 0 } else { polled.header_ends[i - 1] };
        for (key, value) in &polled.headers[start..polled.header_ends[i]] {
            map.keys().append_value(key);
            map.values().append_option(value.as_deref());
        }
        map.append(true)?;
    }
    Ok(Arc::new(map.finish()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(partitions: Vec<(Option<i64>, Duration, bool)>) -> KafkaSource {
        let config = KafkaSourceConfig {
            connection: KafkaConnection::new("127.0.0.1:1"),
            topics: vec!["t".into()],
            format: SourceFormat::Json,
            schema: Arc::new(Schema::new(vec![Field::new(
                "ts",
                DataType::Timestamp(TimeUnit::Millisecond, None),
                true,
            )])),
            startup: StartupMode::Earliest,
            group_id: None,
            bounded: true,
            bad_records: BadRecords::Fail,
            delivery: Delivery::ExactlyOnce,
            transactional_id_prefix: "p".into(),
            transaction_timeout_ms: 60_000,
            transactional_ids_per_subtask: 8,
            event_time: Some(("ts".into(), 1_000)),
            idle_timeout: Duration::from_secs(5),
            discovery_interval: Duration::from_secs(10),
            timestamp_column: None,
            metadata: Vec::new(),
            batch_size: 100,
        };
        let mut source = KafkaSource::new(config);
        source.partitions = partitions
            .into_iter()
            .enumerate()
            .map(|(i, (max_event_time, quiet_for, done))| PartitionState {
                topic: "t".into(),
                partition: i as i32,
                next_offset: if done { 10 } else { 0 },
                end: Some(10),
                max_event_time,
                last_record: Instant::now() - quiet_for,
            })
            .collect();
        source
    }

    #[test]
    fn the_watermark_is_the_minimum_over_active_partitions() {
        let busy = Duration::ZERO;
        let mut two = source(vec![(Some(10_000), busy, false), (Some(5_000), busy, false)]);
        assert_eq!(two.advanced_watermark(), Some(4_000), "the slower partition holds it back");
        assert_eq!(two.advanced_watermark(), None, "no advance, nothing new");

        let idle = Duration::from_secs(60);
        let mut one_idle = source(vec![(Some(10_000), busy, false), (Some(5_000), idle, false)]);
        assert_eq!(one_idle.advanced_watermark(), Some(9_000), "an idle partition is left out");

        let mut one_done = source(vec![(Some(10_000), busy, false), (Some(5_000), busy, true)]);
        assert_eq!(one_done.advanced_watermark(), Some(9_000), "a finished partition is left out");

        let mut silent = source(vec![(Some(10_000), busy, false), (None, busy, false)]);
        assert_eq!(silent.advanced_watermark(), None, "a partition with no record yet holds it back");
        silent.partitions[1].last_record = Instant::now() - idle;
        assert_eq!(silent.advanced_watermark(), Some(9_000), "until it turns idle");
    }
}
