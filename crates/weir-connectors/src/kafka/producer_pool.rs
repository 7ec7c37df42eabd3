//! Writing records to Kafka with a delivery guarantee: what the sink and the source's dead-letter
//! output share. With exactly-once, the writer is a committer of weir's two-phase commit
//! (`weir_engine::two_phase_commit`), which keeps the pending transactions by checkpoint and
//! their snapshot table; what is Kafka's own is here.
//!
//! `exactly_once` keeps a bounded pool of transactional producers per subtask, with ids
//! `<prefix>-<subtask>-<k>`, reused forever (the broker keeps every id's state for days, so a
//! new id per checkpoint would pile up). A slot goes Free -> Open (records flow into its
//! transaction) -> Pending(n) (barrier n: flushed, left open, and recorded in n's snapshot with
//! the producer id and epoch the coordinator reports) -> Committed (n complete) -> Free.
//!
//! The last step is the subtle one. A committed slot is not reused at once: it stays reserved
//! until a checkpoint whose snapshot no longer lists it has completed. Otherwise a restore from
//! n, which commits what n recorded with EndTxn(producer id, epoch), could commit a *later*
//! transaction of the same id and epoch (librdkafka keeps the epoch across transactions), whose
//! records are replayed after the restore: duplicates. With the reservation, a restore from n
//! finds each id n recorded either still holding n's transaction or having committed it.
//!
//! A checkpoint that aborts rolls nothing back: its pending transaction is committed with the
//! next checkpoint that completes, which covers its records (as Flink's two-phase-commit sink
//! does). If checkpoints keep failing the pool runs dry and the subtask fails, so the pipeline
//! restarts from its last completed checkpoint.
//!
//! Recovery (`open` with a restored checkpoint): commit every transaction the checkpoint
//! recorded for the subtasks this one takes over (EndTxn; "already committed" is success), then
//! fence and abort every other open transaction of those subtasks' ids, probing ids of
//! subtasks beyond the recorded parallelism too, so a lingering transaction never pins a
//! partition's last stable offset. The ids it committed stay reserved (not re-initialised,
//! which would bump their epoch) until a new checkpoint completes: if the process dies before
//! that, the same checkpoint is restored again, and its commits must again find the recorded
//! epoch and be answered "already committed" rather than "fenced". (The crash tests found
//! exactly this.)

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, Int16Array, Int64Array, StringArray, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use kafka_protocol::ResponseError;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Message};
use weir_engine::metrics::OperatorMetrics;
use weir_engine::state_column as column;
use weir_engine::two_phase_commit::{Committable, TwoPhaseCommitter};
use weir_engine::{RestoredState, StateTable, SubtaskInfo};

use super::blocking::blocking;
use super::connection::{KafkaConnection, TopicCreation, TopicError};
use super::transactions::{EndTxnOutcome, PendingTransaction, TransactionResult, TransactionState, TransactionsClient};
use crate::{Error, Result};

/// Transactional ids per subtask with `max_concurrent` checkpoints in flight: one open, one
/// pending per checkpoint in flight, one committed but still listed by a snapshot per
/// checkpoint in flight; five more absorb checkpoints that abort. (8 with one checkpoint at a
/// time; with 4 or more in flight a fixed 8 ran dry.)
pub const fn pool_size(max_concurrent: usize) -> usize {
    2 * if max_concurrent == 0 { 1 } else { max_concurrent } + 6
}

/// Recovery probes this many ids of each subtask at most (the pool at the largest
/// `checkpoint.max_concurrent`, 16): a pipeline resumed with a smaller setting still finds the
/// ids an earlier run used.
const MAX_POOL_SIZE: usize = pool_size(16);
/// The longest a blocking librdkafka call (init, flush, commit) may take.
const BLOCKING_TIMEOUT: Duration = Duration::from_secs(60);

const POOL_TABLE: &str = "kafka_pool";

/// A pre-committed transaction as the snapshot records it (table `kafka_pending`): what
/// recovery's EndTxn needs.
impl Committable for PendingTransaction {
    const TABLE: &'static str = "kafka_pending";

    fn fields() -> Vec<Field> {
        vec![
            Field::new("transactional_id", DataType::Utf8, false),
            Field::new("producer_id", DataType::Int64, false),
            Field::new("producer_epoch", DataType::Int16, false),
        ]
    }

    fn to_columns(items: &[&Self]) -> weir_engine::Result<Vec<ArrayRef>> {
        Ok(vec![
            Arc::new(StringArray::from_iter_values(items.iter().map(|p| p.transactional_id.as_str()))),
            Arc::new(Int64Array::from_iter_values(items.iter().map(|p| p.producer_id))),
            Arc::new(Int16Array::from_iter_values(items.iter().map(|p| p.producer_epoch))),
        ])
    }

    fn from_batch(batch: &RecordBatch, info: &SubtaskInfo) -> weir_engine::Result<Vec<Self>> {
        let ids = column::<StringArray>(batch, "transactional_id", info)?;
        let producer_ids = column::<Int64Array>(batch, "producer_id", info)?;
        let epochs = column::<Int16Array>(batch, "producer_epoch", info)?;
        Ok((0..batch.num_rows())
            .map(|row| PendingTransaction {
                transactional_id: ids.value(row).to_string(),
                producer_id: producer_ids.value(row),
                producer_epoch: epochs.value(row),
            })
            .collect())
    }
}

/// What a Kafka writer guarantees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Two-phase commit with the checkpoints.
    ExactlyOnce,
    /// Idempotent producer, flushed at every barrier: nothing lost, duplicates after a restore.
    AtLeastOnce,
    /// Fire and forget: records in flight at a crash may be lost.
    None,
}

impl Delivery {
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "exactly_once" => Some(Self::ExactlyOnce),
            "at_least_once" => Some(Self::AtLeastOnce),
            "none" => Some(Self::None),
            _ => None,
        }
    }
}

/// Why a writer could not open.
#[derive(Debug)]
pub(crate) enum OpenError {
    /// Worth a restart (the broker away, a timeout).
    Retry(Error),
    /// No restart mends it: a pending transaction of the restored checkpoint can no longer be
    /// committed.
    Fatal(Error),
}

impl OpenError {
    /// The runtime's error for subtask `info`, with `context` in front.
    pub(crate) fn for_subtask(self, info: &SubtaskInfo, context: &str) -> weir_engine::Error {
        match self {
            OpenError::Retry(error) => info.error(format!("{context}{error}")),
            OpenError::Fatal(error) => info.fatal(format!("{context}{error}")),
        }
    }
}

/// One record to produce. No key: librdkafka's partitioner spreads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OutRecord {
    pub key: Option<Vec<u8>>,
    /// `None` is a tombstone.
    pub value: Option<Vec<u8>>,
    /// Epoch milliseconds; `None`: the time it is produced.
    pub timestamp: Option<i64>,
    pub headers: super::encode::Headers,
}

/// Keeps the first delivery failure, checked at every flush.
#[derive(Clone, Default)]
pub(crate) struct DeliveryReport {
    failure: Arc<Mutex<Option<Error>>>,
}

impl DeliveryReport {
    fn take(&self) -> Option<Error> {
        self.failure.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

impl ClientContext for DeliveryReport {
    fn error(&self, error: KafkaError, reason: &str) {
        super::connection::log_client_error(&error, reason);
    }
}

impl ProducerContext for DeliveryReport {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((error, message)) = result {
            let mut failure = self.failure.lock().unwrap_or_else(|p| p.into_inner());
            failure.get_or_insert_with(|| Error::Delivery {
                topic: message.topic().to_string(),
                partition: message.partition(),
                source: error.clone(),
            });
        }
    }
}

type KafkaProducer = ThreadedProducer<DeliveryReport>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotState {
    Free,
    Open,
    /// Pre-committed at the barrier of this checkpoint.
    Pending(u64),
    /// Committed; reusable once a checkpoint taken after the commit (the one named) completes.
    Committed {
        released_by: Option<u64>,
    },
}

struct Slot {
    id: String,
    producer: Option<(Arc<KafkaProducer>, DeliveryReport)>,
    state: SlotState,
    /// Wall-clock ms its transaction began, while open or pending.
    began_ms: Option<i64>,
}

/// Copies the pool's transactions into the subtask's gauges (what the web page's exactly-once
/// panel shows): open, pending, and when the oldest of them began.
fn publish(metrics: &OperatorMetrics, slots: &[Slot]) {
    let open = slots.iter().filter(|s| s.state == SlotState::Open).count() as u64;
    let pending = slots.iter().filter(|s| matches!(s.state, SlotState::Pending(_))).count() as u64;
    let oldest = slots
        .iter()
        .filter(|s| matches!(s.state, SlotState::Open | SlotState::Pending(_)))
        .filter_map(|s| s.began_ms)
        .min();
    metrics.transactions_open.store(open, Ordering::Relaxed);
    metrics.transactions_pending.store(pending, Ordering::Relaxed);
    metrics.oldest_transaction_began_ms.store(oldest.unwrap_or(i64::MIN), Ordering::Relaxed);
}

enum Mode {
    Transactional { slots: Vec<Slot>, current: Option<usize> },
    Plain { producer: Arc<KafkaProducer>, report: DeliveryReport },
}

/// One subtask's writer to one topic.
pub(crate) struct KafkaWriter {
    connection: KafkaConnection,
    topic: String,
    delivery: Delivery,
    prefix: String,
    timeout_ms: u32,
    pool_size: usize,
    /// The protocol client recovery and pre-commit use (exactly-once only).
    client: Option<TransactionsClient>,
    /// Whether (and how) to create the topic when it is missing, rather than fail.
    create_topic: Option<TopicCreation>,
    mode: Option<Mode>,
    /// The subtask's counters: transactions committed and aborted.
    metrics: Arc<OperatorMetrics>,
    /// The subtask, once opened (errors name it).
    info: Option<SubtaskInfo>,
}

impl KafkaWriter {
    /// `prefix`: the transactional ids' prefix (exactly-once only); `timeout_ms`: their
    /// transaction timeout; `pool_size`: ids per subtask ([`pool_size`]).
    pub(crate) fn new(
        connection: KafkaConnection,
        topic: String,
        delivery: Delivery,
        prefix: String,
        timeout_ms: u32,
        pool_size: usize,
        create_topic: Option<TopicCreation>,
    ) -> Result<Self> {
        let client = match delivery {
            Delivery::ExactlyOnce => Some(connection.transactions_client()?),
            Delivery::AtLeastOnce | Delivery::None => None,
        };
        let pool_size = pool_size.clamp(1, MAX_POOL_SIZE);
        Ok(Self {
            connection,
            topic,
            delivery,
            prefix,
            timeout_ms,
            pool_size,
            client,
            create_topic,
            mode: None,
            metrics: Arc::default(),
            info: None,
        })
    }

    fn client(&self) -> Result<&TransactionsClient> {
        self.client
            .as_ref()
            .ok_or_else(|| Error::Unexpected("a writer without transactions has no transactions client".into()))
    }

    fn slot_id(&self, subtask: usize, k: usize) -> String {
        format!("{}-{subtask}-{k}", self.prefix)
    }

    /// Starts the writer; with exactly-once, first recovers: commits `recorded` (what the
    /// restored checkpoint pre-committed for the subtasks this one takes over) and aborts the
    /// rest of their transactions.
    pub(crate) async fn open(
        &mut self,
        info: &SubtaskInfo,
        recorded: Vec<PendingTransaction>,
        restored: &RestoredState,
    ) -> Result<(), OpenError> {
        self.metrics = info.metrics.clone();
        self.info = Some(info.clone());
        self.mode = Some(match self.delivery {
            Delivery::ExactlyOnce => {
                let committed = self.recover_transactions(info, recorded, restored).await?;
                // The ids recovery just committed keep their epoch until a checkpoint taken
                // from now on completes: a crash before that restores the same checkpoint,
                // whose commit must find the same epoch (and answer "already committed").
                let state = |id: &String| {
                    if committed.contains(id) { SlotState::Committed { released_by: None } } else { SlotState::Free }
                };
                let slots = (0..self.pool_size)
                    .map(|k| self.slot_id(info.subtask, k))
                    .map(|id| Slot { state: state(&id), id, producer: None, began_ms: None })
                    .collect();
                self.metrics.transaction_timeout_ms.store(u64::from(self.timeout_ms.max(1)), Ordering::Relaxed);
                Mode::Transactional { slots, current: None }
            }
            Delivery::AtLeastOnce | Delivery::None => {
                let idempotence = if self.delivery == Delivery::AtLeastOnce { "true" } else { "false" };
                let config = self.connection.client_config(&[("enable.idempotence", idempotence), ("linger.ms", "5")]);
                let report = DeliveryReport::default();
                let context = report.clone();
                let producer = blocking(move || {
                    config.create_with_context(context).map_err(Error::client("creating a Kafka producer"))
                })
                .await
                .map_err(OpenError::Retry)?;
                Mode::Plain { producer: Arc::new(producer), report }
            }
        });
        Ok(())
    }

    /// Commits `recorded`, then fences and aborts every other open transaction of the ids of
    /// the subtasks this one takes over. Returns the ids committed.
    ///
    /// A pending transaction the coordinator refuses to commit fails the pipeline for good, but
    /// only after the rest is done: the checkpoint's other transactions committed and the pool
    /// fenced, so that no transaction left open pins the readers' last stable offset until the
    /// broker's timeout aborts it.
    async fn recover_transactions(
        &self,
        info: &SubtaskInfo,
        recorded: Vec<PendingTransaction>,
        restored: &RestoredState,
    ) -> Result<HashSet<String>, OpenError> {
        let (me, parallelism) = (info.subtask, info.parallelism);
        let checkpoint = restored.checkpoint_id.map_or_else(|| "none".to_string(), |id| id.to_string());
        let client = self.client().map_err(OpenError::Fatal)?;
        let mut old_parallelism = 0;
        let mut committed = HashSet::new();
        let mut refused = Vec::new();
        for batch in restored.table(POOL_TABLE) {
            let parallelisms = column::<UInt64Array>(batch, "parallelism", info)
                .map_err(|e| OpenError::Fatal(Error::Unexpected(e.to_string())))?;
            old_parallelism = old_parallelism.max(parallelisms.iter().flatten().max().unwrap_or(0) as usize);
        }
        for pending in recorded {
            let outcome = client
                .end_transaction(&pending, TransactionResult::Commit)
                .await
                .map_err(|e| OpenError::Retry(Error::on(&pending.transactional_id, "recovery commit")(e)))?;
            if let EndTxnOutcome::Rejected(code) = outcome {
                let message = cannot_commit(&checkpoint, &pending, code);
                tracing::error!("{message}");
                refused.push((pending.transactional_id, message));
                continue;
            }
            tracing::info!(
                checkpoint,
                transactional_id = pending.transactional_id,
                "recovery committed a pending transaction"
            );
            committed.insert(pending.transactional_id.clone());
            self.metrics.transactions_committed.fetch_add(1, Ordering::Relaxed);
            // A crash here leaves some of the checkpoint's transactions committed and others
            // not: the next recovery must finish the job.
            fail::fail_point!("weir::mid_recovery_commit", |_| {
                eprintln!(
                    "failpoint weir::mid_recovery_commit: aborting the process after committing {}",
                    pending.transactional_id
                );
                std::process::abort()
            });
        }
        // Every other id of the subtasks taken over: abort what is open. (A transaction in
        // PrepareCommit is being committed; fencing it would only move its epoch on.) Subtasks
        // at or beyond the recorded parallelism are probed until one never used its first id.
        let mut old = me;
        loop {
            let first = self.slot_id(old, 0);
            if old >= old_parallelism.max(parallelism)
                && self.describe(&first).await.map_err(OpenError::Retry)?.is_none()
            {
                break;
            }
            for k in 0..MAX_POOL_SIZE {
                let id = self.slot_id(old, k);
                let Some(state) = self.describe(&id).await.map_err(OpenError::Retry)? else { break };
                if !committed.contains(&id)
                    && matches!(state, TransactionState::Ongoing | TransactionState::PrepareAbort)
                {
                    let timeout = i32::try_from(self.timeout_ms).unwrap_or(i32::MAX);
                    let fenced = client.fence(&id, timeout).await;
                    fenced.map_err(|e| OpenError::Retry(Error::on(&id, "aborting a lingering transaction")(e)))?;
                    self.metrics.transactions_aborted.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(transactional_id = id, ?state, "recovery aborted a lingering transaction");
                }
            }
            old += parallelism;
        }
        match refused.as_slice() {
            [] => Ok(committed),
            [(_, message)] => Err(OpenError::Fatal(Error::CommitRefused(message.clone()))),
            [(_, first), rest @ ..] => {
                let others: Vec<&str> = rest.iter().map(|(id, _)| id.as_str()).collect();
                Err(OpenError::Fatal(Error::CommitRefused(format!("{first} (nor could {})", others.join(", ")))))
            }
        }
    }

    async fn describe(&self, id: &str) -> Result<Option<TransactionState>> {
        let description = self.client()?.describe(id).await.map_err(Error::on(id, "describing"))?;
        Ok(description.map(|d| d.state))
    }

    /// Sends `records` into the open transaction (opening one if needed).
    pub(crate) async fn write(&mut self, records: Vec<OutRecord>) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let producer = match self.mode.as_mut() {
            None => return Err(Error::Unexpected("the Kafka writer was not opened".into())),
            Some(Mode::Plain { producer, .. }) => producer.clone(),
            Some(Mode::Transactional { slots, current }) => {
                let k = match current {
                    Some(k) => *k,
                    None => {
                        let Some(k) = slots.iter().position(|s| s.state == SlotState::Free) else {
                            return Err(Error::Unexpected(format!(
                                "all {} transactional ids of this subtask hold transactions that are not committed yet: checkpoints are not completing",
                                slots.len()
                            )));
                        };
                        let slot = &mut slots[k];
                        let producer = match &slot.producer {
                            Some((producer, _)) => producer.clone(),
                            None => {
                                let created =
                                    transactional_producer(&self.connection, &slot.id, self.timeout_ms).await?;
                                let producer = created.0.clone();
                                slot.producer = Some(created);
                                producer
                            }
                        };
                        let id = slot.id.clone();
                        blocking(move || producer.begin_transaction().map_err(Error::on(&id, "begin"))).await?;
                        slot.state = SlotState::Open;
                        slot.began_ms = Some(weir_engine::operators::state_ttl::now_ms());
                        *current = Some(k);
                        publish(&self.metrics, slots);
                        k
                    }
                };
                let Some((producer, _)) = &slots[k].producer else {
                    return Err(Error::Unexpected("an open slot has no producer".into()));
                };
                producer.clone()
            }
        };
        let topic = self.topic.clone();
        blocking(move || send_all(&producer, &topic, &records)).await
    }

    /// Barrier `checkpoint`: makes everything written so far durable (exactly-once: flushed
    /// and pending, and returned as the snapshot records it; at-least-once: flushed and
    /// acknowledged).
    pub(crate) async fn pre_commit(&mut self, checkpoint: u64) -> Result<Option<PendingTransaction>> {
        match self.mode.as_mut() {
            None => Err(Error::Unexpected("the Kafka writer was not opened".into())),
            Some(Mode::Plain { producer, report }) => {
                if self.delivery == Delivery::AtLeastOnce {
                    let producer = producer.clone();
                    blocking(move || producer.flush(BLOCKING_TIMEOUT).map_err(Error::client("flush"))).await?;
                }
                report.take().map_or(Ok(None), Err)
            }
            Some(Mode::Transactional { slots, current }) => {
                for slot in slots.iter_mut() {
                    if slot.state == (SlotState::Committed { released_by: None }) {
                        slot.state = SlotState::Committed { released_by: Some(checkpoint) };
                    }
                }
                // Only a transaction that holds records is pre-committed (an empty one stays
                // closed: committing empty transactions is pointless).
                let Some(k) = current.take() else { return Ok(None) };
                let client = self
                    .client
                    .as_ref()
                    .ok_or_else(|| Error::Unexpected("a transactional writer without its client".into()))?;
                let slot = &mut slots[k];
                let Some((producer, report)) = slot.producer.clone() else {
                    return Err(Error::Unexpected("an open slot has no producer".into()));
                };
                let id = slot.id.clone();
                blocking(move || producer.flush(BLOCKING_TIMEOUT).map_err(Error::on(&id, "flush"))).await?;
                if let Some(failure) = report.take() {
                    return Err(Error::on(&slot.id, "delivery")(failure));
                }
                // The coordinator's own view of the transaction is what recovery will need.
                let description = client
                    .describe(&slot.id)
                    .await
                    .map_err(Error::on(&slot.id, "describing the pre-committed transaction"))?
                    .ok_or_else(|| {
                        Error::Unexpected(format!("{}: the coordinator does not know the transaction", slot.id))
                    })?;
                if description.state != TransactionState::Ongoing {
                    return Err(Error::Unexpected(format!(
                        "{}: pre-committed transaction is {:?} at the coordinator, not Ongoing",
                        slot.id, description.state
                    )));
                }
                slot.state = SlotState::Pending(checkpoint);
                let pending = PendingTransaction {
                    transactional_id: slot.id.clone(),
                    producer_id: description.producer_id,
                    producer_epoch: description.producer_epoch,
                };
                publish(&self.metrics, slots);
                Ok(Some(pending))
            }
        }
    }

    /// The writer's own table beside the pending transactions: this subtask's parallelism,
    /// so that a recovery at another parallelism knows which old subtasks' ids to probe.
    pub(crate) fn pool_state(&self, info: &SubtaskInfo) -> Result<Vec<StateTable>> {
        if self.delivery != Delivery::ExactlyOnce {
            return Ok(Vec::new());
        }
        let pool_schema = Arc::new(Schema::new(vec![
            Field::new("subtask", DataType::UInt64, false),
            Field::new("parallelism", DataType::UInt64, false),
        ]));
        let pool_batch = RecordBatch::try_new(
            pool_schema.clone(),
            vec![
                Arc::new(UInt64Array::from(vec![info.subtask as u64])),
                Arc::new(UInt64Array::from(vec![info.parallelism as u64])),
            ],
        )?;
        Ok(vec![StateTable { name: POOL_TABLE.into(), schema: pool_schema, batches: vec![pool_batch], delta: None }])
    }

    /// Checkpoint `checkpoint` completed: commits `due` (every transaction pending up to it),
    /// and frees the slots no completed checkpoint lists any more.
    pub(crate) async fn commit(&mut self, checkpoint: u64, due: &[PendingTransaction]) -> Result<()> {
        let Some(Mode::Transactional { slots, .. }) = self.mode.as_mut() else { return Ok(()) };
        for slot in slots.iter_mut() {
            match slot.state {
                SlotState::Committed { released_by: Some(n) } if n <= checkpoint => slot.state = SlotState::Free,
                SlotState::Pending(_) if due.iter().any(|p| p.transactional_id == slot.id) => {
                    let Some((producer, _)) = slot.producer.clone() else {
                        return Err(Error::Unexpected("a pending slot has no producer".into()));
                    };
                    let id = slot.id.clone();
                    blocking(move || producer.commit_transaction(BLOCKING_TIMEOUT).map_err(Error::on(&id, "commit")))
                        .await?;
                    self.metrics.transactions_committed.fetch_add(1, Ordering::Relaxed);
                    // A crash here leaves this sink committed and others (or other subtasks)
                    // not: recovery commits the rest from the checkpoint.
                    fail::fail_point!("weir::after_transaction_commit", |_| {
                        eprintln!(
                            "failpoint weir::after_transaction_commit: aborting the process after committing {}",
                            slot.id
                        );
                        std::process::abort()
                    });
                    slot.state = SlotState::Committed { released_by: None };
                    slot.began_ms = None;
                }
                _ => {}
            }
        }
        publish(&self.metrics, slots);
        Ok(())
    }

    /// Normal shutdown: an open transaction holds records after the last checkpoint; abort it
    /// rather than leave it to pin the partitions until it times out.
    pub(crate) async fn close(&mut self) -> Result<()> {
        if let Some(Mode::Transactional { slots, current: Some(k) }) = self.mode.as_mut()
            && let Some((producer, _)) = slots[*k].producer.clone()
        {
            let id = slots[*k].id.clone();
            blocking(move || producer.abort_transaction(BLOCKING_TIMEOUT).map_err(Error::on(&id, "abort"))).await?;
            self.metrics.transactions_aborted.fetch_add(1, Ordering::Relaxed);
            slots[*k].state = SlotState::Free;
            slots[*k].began_ms = None;
            publish(&self.metrics, slots);
        }
        self.fence_what_is_still_open().await?;
        // Destroying a librdkafka client waits for its threads: not on an async worker.
        let mode = self.mode.take();
        blocking(move || {
            drop(mode);
            Ok(())
        })
        .await
    }
}

impl KafkaWriter {
    /// At a stop nothing this writer began and did not commit may stay open at the coordinator,
    /// holding read_committed readers back until its timeout (no checkpoint completes after a
    /// stop, so a pending transaction is not going to be committed by this run either). Each
    /// id this run used is looked up, and one the coordinator still sees Ongoing is fenced,
    /// which aborts it. (A fresh-clone CI run once found an id Ongoing after a savepoint stop
    /// whose abort had returned.)
    async fn fence_what_is_still_open(&self) -> Result<()> {
        let (Some(Mode::Transactional { slots, .. }), Some(client)) = (&self.mode, &self.client) else {
            return Ok(());
        };
        let timeout = i32::try_from(self.timeout_ms).unwrap_or(i32::MAX);
        for slot in slots.iter().filter(|s| s.producer.is_some() && !matches!(s.state, SlotState::Committed { .. })) {
            let state = client.describe(&slot.id).await.map_err(Error::on(&slot.id, "describing at close"))?;
            if state.is_some_and(|d| d.state == TransactionState::Ongoing) {
                tracing::warn!(transactional_id = slot.id, "a transaction still open at close is fenced");
                client.fence(&slot.id, timeout).await.map_err(Error::on(&slot.id, "fencing at close"))?;
                self.metrics.transactions_aborted.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }
}

/// The error when recovery cannot commit what a completed checkpoint recorded: the data of
/// that transaction is lost, and the pipeline must not go on as if it were not.
fn cannot_commit(checkpoint: &str, pending: &PendingTransaction, code: ResponseError) -> String {
    let cause = match code {
        ResponseError::ProducerFenced | ResponseError::InvalidProducerEpoch => {
            "its producer epoch moved on: most likely the broker aborted it because it stayed open longer than transaction.timeout.ms (raise it above the time from checkpoint to recovery), or a newer producer of the same id fenced it (another pipeline with the same transactional_id.prefix, or a restore of an older checkpoint)"
        }
        ResponseError::InvalidTxnState => "it was aborted",
        ResponseError::InvalidProducerIdMapping => {
            "the broker no longer maps the producer id to this transactional id (expired after transactional.id.expiration.ms, or never known)"
        }
        _ => "the coordinator refused the commit",
    };
    format!(
        "restoring checkpoint {checkpoint}: the pending transaction {} (producer id {}, epoch {}) cannot be committed: {code} - {cause}; its records are not in the output",
        pending.transactional_id, pending.producer_id, pending.producer_epoch
    )
}

/// The writer as a committer of weir's two-phase commit; errors name the subtask and the topic.
#[async_trait]
impl TwoPhaseCommitter for KafkaWriter {
    type Committable = PendingTransaction;

    async fn recover(
        &mut self,
        info: &SubtaskInfo,
        recorded: Vec<PendingTransaction>,
        restored: &RestoredState,
    ) -> weir_engine::Result<()> {
        let context = format!("topic {}: ", self.topic);
        self.open(info, recorded, restored).await.map_err(|e| e.for_subtask(info, &context))
    }

    async fn pre_commit(&mut self, checkpoint: u64) -> weir_engine::Result<Vec<PendingTransaction>> {
        match KafkaWriter::pre_commit(self, checkpoint).await {
            Ok(pending) => Ok(pending.into_iter().collect()),
            Err(error) => Err(self.failure(error).await),
        }
    }

    async fn commit(&mut self, checkpoint: u64, due: Vec<PendingTransaction>) -> weir_engine::Result<()> {
        match KafkaWriter::commit(self, checkpoint, &due).await {
            Ok(()) => Ok(()),
            Err(error) => Err(self.failure(error).await),
        }
    }

    fn state(&self, info: &SubtaskInfo) -> weir_engine::Result<Vec<StateTable>> {
        self.pool_state(info).map_err(|e| self.error(e))
    }

    async fn close(&mut self) -> weir_engine::Result<()> {
        let closed = KafkaWriter::close(self).await;
        closed.map_err(|e| self.error(e))
    }
}

impl KafkaWriter {
    /// The runtime's error for `error`, naming the subtask and the topic.
    pub(crate) fn error(&self, error: impl std::fmt::Display) -> weir_engine::Error {
        let message = error.to_string();
        let message = format!("topic {}: {message}", self.topic);
        match &self.info {
            Some(info) => info.error(message),
            None => weir_engine::Error::Graph(message),
        }
    }

    /// The runtime's error for a write, pre-commit or commit that failed: fatal when the topic
    /// is gone (deleted while the pipeline ran: no restart brings it back, and restarting would
    /// never end), else one a restart may mend. Topics are checked when a pipeline is planned,
    /// and here only when something failed, so a start pays nothing for it.
    pub(crate) async fn failure(&self, error: impl std::fmt::Display) -> weir_engine::Error {
        let message = error.to_string();
        match (self.connection.ensure_topic(&self.topic, self.create_topic).await, &self.info) {
            (Err(TopicError::Missing(gone)), Some(info)) => info.fatal(format!("{gone} (any more): {message}")),
            _ => self.error(message),
        }
    }
}

async fn transactional_producer(
    connection: &KafkaConnection,
    id: &str,
    timeout_ms: u32,
) -> Result<(Arc<KafkaProducer>, DeliveryReport)> {
    let timeout = timeout_ms.to_string();
    let config =
        connection.client_config(&[("transactional.id", id), ("transaction.timeout.ms", &timeout), ("linger.ms", "5")]);
    let report = DeliveryReport::default();
    let context = report.clone();
    let id = id.to_string();
    let producer = blocking(move || {
        let producer: KafkaProducer =
            config.create_with_context(context).map_err(Error::on(&id, "creating the producer"))?;
        producer.init_transactions(BLOCKING_TIMEOUT).map_err(Error::on(&id, "init_transactions"))?;
        Ok(producer)
    })
    .await?;
    Ok((Arc::new(producer), report))
}

/// Queues every record, waiting while librdkafka's queue is full.
fn send_all(producer: &KafkaProducer, topic: &str, records: &[OutRecord]) -> Result<()> {
    for out in records {
        let mut record = BaseRecord::<[u8], [u8]>::to(topic);
        if let Some(key) = &out.key {
            record = record.key(key.as_slice());
        }
        if let Some(value) = &out.value {
            record = record.payload(value.as_slice());
        }
        if !out.headers.is_empty() {
            let headers = out
                .headers
                .iter()
                .fold(OwnedHeaders::new(), |h, (key, value)| h.insert(Header { key, value: value.as_deref() }));
            record = record.headers(headers);
        }
        if let Some(timestamp) = out.timestamp {
            record = record.timestamp(timestamp);
        }
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err((e, _)) => return Err(Error::client(format!("producing to {topic}"))(e)),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::test_broker::TestBroker;
    use super::*;

    fn record(n: usize) -> OutRecord {
        OutRecord { key: None, value: Some(n.to_string().into_bytes()), timestamp: None, headers: Vec::new() }
    }

    /// The worst case at the largest `checkpoint.max_concurrent` (16): every checkpoint in
    /// flight holds a pending transaction while the previous round's committed ids are still
    /// reserved, and one more transaction is open. A fixed pool of 8 ran dry at the 9th.
    #[tokio::test]
    async fn the_pool_holds_every_transaction_of_the_most_checkpoints_in_flight() {
        let broker = TestBroker::get().unwrap_or_else(|e| panic!("no Kafka broker for tests: {e}"));
        let topic = broker.create_topic("pool", 1).await.unwrap();
        let max_concurrent = 16;
        let mut writer = KafkaWriter::new(
            KafkaConnection::new(broker.bootstrap()),
            topic.clone(),
            Delivery::ExactlyOnce,
            TestBroker::unique_name("pool"),
            60_000,
            pool_size(max_concurrent),
            None,
        )
        .unwrap();
        let info = SubtaskInfo::new("sink", 0, 1);
        writer.open(&info, Vec::new(), &RestoredState::default()).await.unwrap();
        let mut written = 0;
        let mut checkpoint = 0;
        let mut due = Vec::new();
        for _round in 0..2 {
            // A full window of checkpoints in flight, each pre-committing a transaction.
            for _ in 0..max_concurrent {
                writer.write(vec![record(written)]).await.unwrap();
                written += 1;
                checkpoint += 1;
                due.extend(writer.pre_commit(checkpoint).await.unwrap());
            }
            // And the transaction after them, open.
            writer.write(vec![record(written)]).await.unwrap();
            written += 1;
            let gauges = (
                info.metrics.transactions_open.load(Ordering::Relaxed),
                info.metrics.transactions_pending.load(Ordering::Relaxed),
            );
            assert_eq!(gauges, (1, max_concurrent as u64), "the panel's gauges");
            // Then they all complete (the open one stays open into the next round).
            writer.commit(checkpoint, &std::mem::take(&mut due)).await.unwrap();
        }
        checkpoint += 1;
        due.extend(writer.pre_commit(checkpoint).await.unwrap());
        writer.commit(checkpoint, &due).await.unwrap();
        assert_eq!(info.metrics.oldest_transaction_began_ms.load(Ordering::Relaxed), i64::MIN, "none left open");
        writer.close().await.unwrap();
        let read = broker.read_to_end(&topic, "read_committed").unwrap();
        let mut values: Vec<usize> = read
            .iter()
            .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).parse().unwrap())
            .collect();
        values.sort_unstable();
        assert_eq!(values, (0..written).collect::<Vec<_>>(), "every record once");
        assert_eq!(
            info.metrics.transactions_committed.load(Ordering::Relaxed),
            2 * max_concurrent as u64 + 1,
            "each transaction committed"
        );
    }
}
