//! The Kafka sink: rows encoded in the table's format ([`super::encode`]) and written with the
//! table's delivery guarantee ([`super::producer_pool`]): for exactly-once, a committer of
//! weir's two-phase commit (pre-committed at each barrier, committed when the checkpoint
//! completes, recovered on restore).

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use weir_engine::two_phase_commit::{BatchWriter, TwoPhaseCommitter};
use weir_engine::{RestoredState, StateTable, SubtaskInfo};

use super::connection::{KafkaConnection, TopicCreation};
use super::encode::{Encoder, RecordColumns, SinkFormat};
use super::producer_pool::{Delivery, KafkaWriter};
use super::transactions::PendingTransaction;

/// Everything a Kafka sink subtask needs, as planned from the table's options.
#[derive(Debug, Clone)]
pub struct KafkaSinkConfig {
    pub connection: KafkaConnection,
    pub topic: String,
    pub format: SinkFormat,
    /// Columns of the message key (the primary key, for `upsert`).
    pub key_fields: Vec<String>,
    /// The table's columns.
    pub schema: SchemaRef,
    pub delivery: Delivery,
    /// Transactional ids are `<prefix>-<subtask>-<k>`: stable across restarts of the pipeline,
    /// distinct between pipelines and sinks.
    pub transactional_id_prefix: String,
    pub transaction_timeout_ms: u32,
    /// Transactional ids per subtask (`producer_pool::pool_size` of the checkpoints in flight).
    pub transactional_ids_per_subtask: usize,
    /// Create the topic when it is missing (`sink.create-topic`), rather than fail.
    pub create_topic: Option<TopicCreation>,
    /// Columns written as the record's timestamp and headers rather than into its value
    /// (Flink's writable metadata columns).
    pub record_columns: RecordColumns,
}

/// The Kafka sink's side of weir's two-phase commit: rows encoded, then written by the
/// [`KafkaWriter`]. The operator is `weir_engine::two_phase_commit::TwoPhaseCommitSink` around
/// it (any delivery: without exactly-once nothing is pre-committed).
pub struct KafkaSink {
    encoder: Encoder,
    writer: KafkaWriter,
}

impl KafkaSink {
    /// Fails if the format does not fit the table (no key for upsert, raw over many columns), or
    /// if exactly-once recovery cannot use the table's security settings.
    pub fn new(config: KafkaSinkConfig) -> crate::Result<Self> {
        let encoder = Encoder::new(config.format, config.schema.clone(), &config.key_fields, &config.record_columns)?;
        let writer = KafkaWriter::new(
            config.connection,
            config.topic,
            config.delivery,
            config.transactional_id_prefix,
            config.transaction_timeout_ms,
            config.transactional_ids_per_subtask,
            config.create_topic,
        )?;
        Ok(Self { encoder, writer })
    }
}

#[async_trait]
impl BatchWriter for KafkaSink {
    async fn write(&mut self, batch: RecordBatch) -> weir_engine::Result<()> {
        let records = self.encoder.encode(&batch).map_err(|e| self.writer.error(e))?;
        match self.writer.write(records).await {
            Ok(()) => Ok(()),
            Err(error) => Err(self.writer.failure(error).await),
        }
    }
}

#[async_trait]
impl TwoPhaseCommitter for KafkaSink {
    type Committable = PendingTransaction;

    async fn recover(
        &mut self,
        info: &SubtaskInfo,
        recorded: Vec<PendingTransaction>,
        restored: &RestoredState,
    ) -> weir_engine::Result<()> {
        TwoPhaseCommitter::recover(&mut self.writer, info, recorded, restored).await
    }

    async fn pre_commit(&mut self, checkpoint: u64) -> weir_engine::Result<Vec<PendingTransaction>> {
        TwoPhaseCommitter::pre_commit(&mut self.writer, checkpoint).await
    }

    async fn commit(&mut self, checkpoint: u64, due: Vec<PendingTransaction>) -> weir_engine::Result<()> {
        TwoPhaseCommitter::commit(&mut self.writer, checkpoint, due).await
    }

    fn state(&self, info: &SubtaskInfo) -> weir_engine::Result<Vec<StateTable>> {
        TwoPhaseCommitter::state(&self.writer, info)
    }

    async fn close(&mut self) -> weir_engine::Result<()> {
        TwoPhaseCommitter::close(&mut self.writer).await
    }
}
