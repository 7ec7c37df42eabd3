//! The Kafka sink: rows encoded in the table's format ([`super::encode`]) and written with the
//! table's delivery guarantee ([`super::producer_pool`]): for exactly-once, pre-committed at
//! each barrier, committed when the checkpoint completes, recovered on restore.

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use weir_engine::{Collector, Operator, RestoredState, StateTable, SubtaskInfo};

use super::connection::{KafkaConnection, TopicCreation};
use super::encode::{Encoder, SinkFormat};
use super::producer_pool::{Delivery, KafkaWriter};

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
}

pub struct KafkaSink {
    encoder: Encoder,
    writer: KafkaWriter,
    info: Option<SubtaskInfo>,
}

impl KafkaSink {
    /// Fails if the format does not fit the table (no key for upsert, raw over many columns), or
    /// if exactly-once recovery cannot use the table's security settings.
    pub fn new(config: KafkaSinkConfig) -> Result<Self, String> {
        let encoder = Encoder::new(config.format, config.schema.clone(), &config.key_fields)?;
        let writer = KafkaWriter::new(
            config.connection,
            config.topic,
            config.delivery,
            config.transactional_id_prefix,
            config.transaction_timeout_ms,
            config.transactional_ids_per_subtask,
            config.create_topic,
        )?;
        Ok(Self { encoder, writer, info: None })
    }

    fn error(&self, message: String) -> weir_engine::Error {
        match &self.info {
            Some(info) => info.error(message),
            None => weir_engine::Error::Graph(message),
        }
    }
}

#[async_trait]
impl Operator for KafkaSink {
    async fn open(&mut self, info: &SubtaskInfo, restored: RestoredState) -> weir_engine::Result<()> {
        self.info = Some(info.clone());
        self.writer.open(info, &restored).await.map_err(|e| e.for_subtask(info, ""))
    }

    async fn process_batch(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        _out: &mut Collector,
    ) -> weir_engine::Result<()> {
        let records = self.encoder.encode(&batch).map_err(|e| self.error(e))?;
        self.writer.write(records).await.map_err(|e| self.error(e))
    }

    /// Pre-commit: the records before the barrier are flushed into a transaction left open,
    /// which the snapshot records.
    async fn snapshot(&mut self, checkpoint_id: u64) -> weir_engine::Result<Vec<StateTable>> {
        self.writer.pre_commit(checkpoint_id).await.map_err(|e| self.error(e))?;
        let Some(info) = &self.info else { return Err(self.error("the sink was not opened".into())) };
        self.writer.snapshot(info).map_err(|e| self.error(e))
    }

    async fn checkpoint_complete(&mut self, checkpoint_id: u64) -> weir_engine::Result<()> {
        self.writer.commit(checkpoint_id).await.map_err(|e| self.error(e))
    }

    async fn close(&mut self) -> weir_engine::Result<()> {
        self.writer.close().await.map_err(|e| self.error(e))
    }
}
