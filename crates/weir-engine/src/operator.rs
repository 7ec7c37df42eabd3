//! What an operator, a source and a sink implement. The task runner, not the operator, handles
//! channels, barriers, alignment and in-flight data: an operator only sees the calls below.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::Result;
use crate::metrics::OperatorMetrics;
use crate::restore::RestoredChain;

/// Where a subtask sits in its operator, and its counters (for what only the operator can
/// count, such as bad input records).
#[derive(Debug, Clone)]
pub struct SubtaskInfo {
    pub operator: String,
    pub subtask: usize,
    pub parallelism: usize,
    pub metrics: Arc<OperatorMetrics>,
    /// Checkpoints are incremental: an operator that implements
    /// [`Operator::snapshot_changes`] keeps track of what changed between snapshots.
    pub incremental: bool,
}

impl SubtaskInfo {
    /// A subtask with counters of its own (the runtime passes the registry's).
    pub fn new(operator: &str, subtask: usize, parallelism: usize) -> Self {
        Self { operator: operator.to_string(), subtask, parallelism, metrics: Arc::default(), incremental: false }
    }

    /// An [`crate::Error::Operator`] for this subtask.
    pub fn error(&self, message: impl std::fmt::Display) -> crate::Error {
        crate::Error::Operator { operator: self.operator.clone(), subtask: self.subtask, message: message.to_string() }
    }

    /// An [`crate::Error::Fatal`] for this subtask: no restart will mend it.
    pub fn fatal(&self, message: impl std::fmt::Display) -> crate::Error {
        crate::Error::Fatal { operator: self.operator.clone(), subtask: self.subtask, message: message.to_string() }
    }
}

/// One named table of an operator's snapshot.
///
/// A table with a [`weir_state::KEY_HASH_COLUMN`] column is *keyed*: on restore each subtask
/// gets the rows whose key hash it owns, at whatever parallelism. Any other table is restored
/// as the *union* of all subtasks' rows (every subtask sees them all and keeps what is its own,
/// like Flink's union list state): source positions and pending sink transactions are of this
/// kind.
#[derive(Debug, Clone)]
pub struct StateTable {
    pub name: String,
    pub schema: SchemaRef,
    /// Every row of the table, or with a `delta` the rows whose key changed since the
    /// previous snapshot.
    pub batches: Vec<RecordBatch>,
    pub delta: Option<Delta>,
}

/// What makes a snapshot table a change on top of the previous snapshot's (see
/// [`Operator::snapshot_changes`]): the columns that identify a row, and the keys removed.
#[derive(Debug, Clone)]
pub struct Delta {
    pub key: Vec<String>,
    /// The removed keys: the key hash (not read back: a chain is merged by the `key` columns)
    /// and the `key` columns. A key both removed and changed
    /// since the previous snapshot is in `batches` (it is back), and may be here too.
    pub deleted: RecordBatch,
}

/// The tables an operator subtask gets back on restore, by name. Empty on a fresh start.
#[derive(Debug, Clone, Default)]
pub struct RestoredState {
    /// The checkpoint restored from, if any.
    pub checkpoint_id: Option<u64>,
    pub tables: HashMap<String, Vec<RecordBatch>>,
    /// The tables named by [`Operator::replayed_tables`], not read yet: each old subtask's
    /// chain of files.
    pub chains: HashMap<String, Vec<RestoredChain>>,
}

impl RestoredState {
    pub fn table(&self, name: &str) -> &[RecordBatch] {
        self.tables.get(name).map_or(&[], Vec::as_slice)
    }
}

/// What an operator emits while it handles a call.
#[derive(Debug, Default)]
pub struct Collector {
    pub(crate) batches: Vec<RecordBatch>,
    pub(crate) watermark: Option<i64>,
}

impl Collector {
    pub fn emit(&mut self, batch: RecordBatch) {
        if batch.num_rows() > 0 {
            self.batches.push(batch);
        }
    }

    /// Advances the operator's output watermark.
    pub fn emit_watermark(&mut self, watermark: i64) {
        self.watermark = Some(self.watermark.map_or(watermark, |w| w.max(watermark)));
    }
}

/// An operator with one or more inputs (a sink is an operator with no outputs).
///
/// Checkpoint `n`: `snapshot(n)` is called once the task has taken its snapshot point; its
/// tables are written off the hot path. `checkpoint_complete(n)` follows when the coordinator
/// has committed the manifest of `n` (a sink's second phase: commit), and
/// `checkpoint_aborted(n)` when `n` was given up.
#[async_trait]
pub trait Operator: Send {
    async fn open(&mut self, _info: &SubtaskInfo, _restored: RestoredState) -> Result<()> {
        Ok(())
    }

    /// The tables this operator takes back as chains of files, applying a base and the changes
    /// after it to its state itself ([`RestoredState::chains`]) rather than as their merged rows:
    /// a merge holds every row of the base while it finds the ones a change replaced, which
    /// for a large state costs more than the operator overwriting them.
    fn replayed_tables(&self) -> Vec<&'static str> {
        Vec::new()
    }

    /// A batch on input `input` (0-based, in the order the graph's edges name them).
    async fn process_batch(&mut self, input: usize, batch: RecordBatch, out: &mut Collector) -> Result<()>;

    /// The subtask's watermark advanced (the minimum over its inputs). By default it is
    /// forwarded as it is.
    async fn process_watermark(&mut self, watermark: i64, out: &mut Collector) -> Result<()> {
        out.emit_watermark(watermark);
        Ok(())
    }

    /// How often the operator is to be called with [`Self::process_tick`] while its input is
    /// open: for what follows a clock rather than the input (the processing-time stamp's
    /// watermark, which must move while no input comes). `None` (the default): never.
    fn tick_interval(&self) -> Option<std::time::Duration> {
        None
    }

    /// A tick of [`Self::tick_interval`], between the input's messages.
    async fn process_tick(&mut self, _out: &mut Collector) -> Result<()> {
        Ok(())
    }

    async fn snapshot(&mut self, _checkpoint_id: u64) -> Result<Vec<StateTable>> {
        Ok(Vec::new())
    }

    /// With incremental checkpoints (`SubtaskInfo::incremental`): the snapshot as what changed
    /// since the previous one, full or not; tables with a [`Delta`] are changes, the others
    /// are written whole. `None`: the operator keeps no record of changes and `snapshot` is
    /// taken instead. Both reset the record: the runtime asks for a full `snapshot` whenever
    /// a change could not be written (the chain it belongs to is broken). The record starts
    /// empty after `open`: restored at the same parallelism, a subtask's first change goes on
    /// the chains it was restored from.
    async fn snapshot_changes(&mut self, _checkpoint_id: u64) -> Result<Option<Vec<StateTable>>> {
        Ok(None)
    }

    async fn checkpoint_complete(&mut self, _checkpoint_id: u64) -> Result<()> {
        Ok(())
    }

    async fn checkpoint_aborted(&mut self, _checkpoint_id: u64) -> Result<()> {
        Ok(())
    }

    /// Every channel of input `input` has ended (a bounded source behind it ran out) while
    /// other inputs go on: state kept only to meet that input's future rows can go.
    async fn input_ended(&mut self, _input: usize, _out: &mut Collector) -> Result<()> {
        Ok(())
    }

    /// All inputs ended: emit what is still held (a bounded run's final results).
    async fn finish(&mut self, _out: &mut Collector) -> Result<()> {
        Ok(())
    }

    /// Whether a bounded run's final checkpoint, taken after [`Self::finish`], holds this
    /// operator's state. True (the default) for what a restore of it still acts on, such as a
    /// sink's pending transactions; false for working state (rows to join, groups, ranks):
    /// once `finish` has emitted what it owed, nothing can reach the operator again, since a
    /// pipeline restored from a final checkpoint ends its sources at once. Writing a large
    /// join's or aggregate's state there only made a bounded run end later.
    fn state_needed_after_finish(&self) -> bool {
        true
    }

    /// The pipeline is shutting down normally; not called when it fails.
    async fn close(&mut self) -> Result<()> {
        Ok(())
    }
}

/// What a source's `next` produced.
#[derive(Debug)]
pub enum SourceEvent {
    Batch(RecordBatch),
    Watermark(i64),
    /// Nothing right now; the task checks its control messages and asks again.
    Idle,
    /// A bounded source has no more records.
    End,
}

/// A source: the start of the graph. Its snapshot holds its read position; restored, it
/// replays from there.
#[async_trait]
pub trait Source: Send {
    async fn open(&mut self, _info: &SubtaskInfo, _restored: RestoredState) -> Result<()> {
        Ok(())
    }

    /// The next event. It must return within a short time (about 100 ms at most, `Idle` if
    /// there is nothing), because the task only takes checkpoint triggers between calls.
    async fn next(&mut self) -> Result<SourceEvent>;

    /// The read position as of now: the barrier follows everything `next` returned so far.
    async fn snapshot(&mut self, _checkpoint_id: u64) -> Result<Vec<StateTable>> {
        Ok(Vec::new())
    }

    async fn checkpoint_complete(&mut self, _checkpoint_id: u64) -> Result<()> {
        Ok(())
    }

    async fn checkpoint_aborted(&mut self, _checkpoint_id: u64) -> Result<()> {
        Ok(())
    }

    async fn close(&mut self) -> Result<()> {
        Ok(())
    }
}

/// Column `name` of a restored state table, as `T`: state is read by column name, never by
/// position, so a table's layout can grow without old snapshots being misread.
pub fn state_column<'a, T: 'static>(batch: &'a RecordBatch, name: &str, info: &SubtaskInfo) -> Result<&'a T> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<T>())
        .ok_or_else(|| info.error(format!("restored state: column '{name}' is missing or of the wrong type")))
}
