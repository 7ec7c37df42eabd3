//! The two-phase commit every exactly-once sink runs with the checkpoints, written once:
//!
//! 1. records go into the sink's open transaction (`write`);
//! 2. at barrier n the transaction is flushed and left open: pre-committed (`pre_commit`), and
//!    what identifies it (a transactional id and epoch, a file name: the [`Committable`]) goes
//!    into n's snapshot, in a table of the sink's own;
//! 3. when n completes, every pre-committed transaction up to n is committed (`commit`). A
//!    checkpoint that aborts rolls nothing back: its transactions hold records from before
//!    the barrier of the next checkpoint, which commits them when it completes (as Flink's
//!    `TwoPhaseCommitSinkFunction` does; rolling them back would lose them);
//! 4. on restore, a subtask commits what the restored checkpoint recorded for the old subtasks
//!    it takes over (old subtask s with s mod parallelism = this subtask; already committed is
//!    success) and aborts whatever else those subtasks left open (`recover`).
//!
//! [`TwoPhaseCommit`] owns the bookkeeping (the pending transactions by checkpoint, their
//! snapshot table, what is due when, what a restore hands back); a sink says how to write,
//! pre-commit, commit and recover ([`TwoPhaseCommitter`]). [`TwoPhaseCommitSink`] is the
//! operator around both. The Kafka sink, the file sink and the test kit's in-memory sink are
//! committers; the Kafka source's dead-letter output drives a [`TwoPhaseCommit`] itself.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::Result;
use crate::operator::{Collector, Operator, RestoredState, StateTable, SubtaskInfo, state_column};

/// What identifies one pre-committed transaction, as the snapshot stores it: the columns after
/// `subtask` and `checkpoint` in the sink's pending table.
pub trait Committable: Clone + Send + Sync + 'static {
    /// The pending table's name in the sink's state.
    const TABLE: &'static str;
    /// The columns that identify a transaction.
    fn fields() -> Vec<Field>;
    /// `items` as those columns.
    fn to_columns(items: &[&Self]) -> Result<Vec<ArrayRef>>;
    /// The transactions of a restored pending table, one per row (columns found by name;
    /// errors name `info`'s subtask).
    fn from_batch(batch: &RecordBatch, info: &SubtaskInfo) -> Result<Vec<Self>>;
}

/// One sink's side of the protocol (see the module documentation).
#[async_trait]
pub trait TwoPhaseCommitter: Send {
    type Committable: Committable;

    /// Restore: commits `recorded`, the restored checkpoint's pre-committed transactions of the
    /// old subtasks this one takes over, then aborts whatever else those subtasks left open.
    /// `restored` holds the rest of the sink's restored state (see [`Self::state`]).
    async fn recover(
        &mut self,
        info: &SubtaskInfo,
        recorded: Vec<Self::Committable>,
        restored: &RestoredState,
    ) -> Result<()>;

    /// Barrier `checkpoint`: what was written since the previous barrier, flushed into
    /// transactions left open (none when nothing was written: nothing to commit).
    async fn pre_commit(&mut self, checkpoint: u64) -> Result<Vec<Self::Committable>>;

    /// `checkpoint` completed: commits `due`, every transaction pre-committed up to it, oldest
    /// first (called when nothing is due too).
    async fn commit(&mut self, checkpoint: u64, due: Vec<Self::Committable>) -> Result<()>;

    /// Tables the sink keeps beside the pending one.
    fn state(&self, _info: &SubtaskInfo) -> Result<Vec<StateTable>> {
        Ok(Vec::new())
    }

    /// Shutdown: aborts the open transaction (its records follow the last checkpoint).
    async fn close(&mut self) -> Result<()>;
}

/// A committer that writes the rows an operator receives.
#[async_trait]
pub trait BatchWriter: Send {
    async fn write(&mut self, batch: RecordBatch) -> Result<()>;

    /// The input's watermark moved to `watermark` (`i64::MAX`: the input ended); a sink whose
    /// commits depend on event time keeps it (the file sink's partition commit).
    async fn watermark(&mut self, watermark: i64) -> Result<()> {
        let _ = watermark;
        Ok(())
    }
}

/// The protocol's bookkeeping around a committer `C`.
pub struct TwoPhaseCommit<C: TwoPhaseCommitter> {
    committer: C,
    /// Pre-committed transactions by the checkpoint whose barrier closed them.
    pending: BTreeMap<u64, Vec<C::Committable>>,
}

impl<C: TwoPhaseCommitter> TwoPhaseCommit<C> {
    pub fn new(committer: C) -> Self {
        Self { committer, pending: BTreeMap::new() }
    }

    pub fn committer(&mut self) -> &mut C {
        &mut self.committer
    }

    /// Restore: hands the committer what `restored` recorded for the subtasks `info` takes over.
    pub async fn open(&mut self, info: &SubtaskInfo, restored: &RestoredState) -> Result<()> {
        let mut recorded = Vec::new();
        for batch in restored.table(C::Committable::TABLE) {
            let subtasks = state_column::<UInt64Array>(batch, "subtask", info)?;
            let items = C::Committable::from_batch(batch, info)?;
            let owned = items
                .into_iter()
                .enumerate()
                .filter(|(row, _)| subtasks.value(*row) as usize % info.parallelism.max(1) == info.subtask);
            recorded.extend(owned.map(|(_, item)| item));
        }
        self.pending.clear();
        self.committer.recover(info, recorded, restored).await
    }

    /// Barrier `checkpoint`: pre-commits, and returns the snapshot's tables: every transaction
    /// still pending (those of earlier checkpoints that aborted too) and the committer's own.
    pub async fn snapshot(&mut self, info: &SubtaskInfo, checkpoint: u64) -> Result<Vec<StateTable>> {
        let pre_committed = self.committer.pre_commit(checkpoint).await?;
        if !pre_committed.is_empty() {
            self.pending.entry(checkpoint).or_default().extend(pre_committed);
        }
        let mut fields =
            vec![Field::new("subtask", DataType::UInt64, false), Field::new("checkpoint", DataType::UInt64, false)];
        fields.extend(C::Committable::fields());
        let schema = Arc::new(Schema::new(fields));
        let rows: Vec<(u64, &C::Committable)> =
            self.pending.iter().flat_map(|(n, items)| items.iter().map(|item| (*n, item))).collect();
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(UInt64Array::from(vec![info.subtask as u64; rows.len()])),
            Arc::new(UInt64Array::from_iter_values(rows.iter().map(|(n, _)| *n))),
        ];
        let items: Vec<&C::Committable> = rows.iter().map(|(_, item)| *item).collect();
        columns.extend(C::Committable::to_columns(&items)?);
        let batch = RecordBatch::try_new(schema.clone(), columns)?;
        let mut tables =
            vec![StateTable { name: C::Committable::TABLE.into(), schema, batches: vec![batch], delta: None }];
        tables.extend(self.committer.state(info)?);
        Ok(tables)
    }

    /// `checkpoint` completed: commits every transaction pending up to it.
    pub async fn complete(&mut self, checkpoint: u64) -> Result<()> {
        let later = self.pending.split_off(&(checkpoint + 1));
        let due = std::mem::replace(&mut self.pending, later).into_values().flatten().collect();
        self.committer.commit(checkpoint, due).await
    }

    pub async fn close(&mut self) -> Result<()> {
        self.committer.close().await
    }
}

/// The operator of an exactly-once sink: rows go to the committer, barriers, completions and
/// restores through [`TwoPhaseCommit`].
pub struct TwoPhaseCommitSink<C: TwoPhaseCommitter + BatchWriter> {
    protocol: TwoPhaseCommit<C>,
    info: Option<SubtaskInfo>,
}

impl<C: TwoPhaseCommitter + BatchWriter> TwoPhaseCommitSink<C> {
    pub fn new(committer: C) -> Self {
        Self { protocol: TwoPhaseCommit::new(committer), info: None }
    }
}

#[async_trait]
impl<C: TwoPhaseCommitter + BatchWriter> Operator for TwoPhaseCommitSink<C> {
    async fn open(&mut self, info: &SubtaskInfo, restored: RestoredState) -> Result<()> {
        self.info = Some(info.clone());
        self.protocol.open(info, &restored).await
    }

    async fn process_batch(&mut self, _input: usize, batch: RecordBatch, _out: &mut Collector) -> Result<()> {
        self.protocol.committer().write(batch).await
    }

    async fn process_watermark(&mut self, watermark: i64, _out: &mut Collector) -> Result<()> {
        self.protocol.committer().watermark(watermark).await
    }

    /// All input is in (before a bounded run's final checkpoint): no event time will come
    /// before any other, as the watermark of an ended input says.
    async fn finish(&mut self, _out: &mut Collector) -> Result<()> {
        self.protocol.committer().watermark(i64::MAX).await
    }

    async fn snapshot(&mut self, checkpoint_id: u64) -> Result<Vec<StateTable>> {
        let Some(info) = self.info.clone() else {
            return Err(crate::Error::Graph("the sink was not opened".into()));
        };
        self.protocol.snapshot(&info, checkpoint_id).await
    }

    async fn checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<()> {
        self.protocol.complete(checkpoint_id).await
    }

    async fn close(&mut self) -> Result<()> {
        self.protocol.close().await
    }
}
