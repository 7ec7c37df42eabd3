//! An in-memory two-phase-commit sink, the model of the Kafka sink. The [`TxnLog`] plays the
//! broker: it outlives pipeline attempts, keeps open transactions of dead attempts until they
//! are committed or aborted, and exposes only committed records.
//!
//! Exactly-once: a committer of [`crate::two_phase_commit`]. Records go into the subtask's open
//! transaction; at barrier n it is pre-committed and a new one begins; "n complete" commits
//! every pre-committed transaction up to n. On restore, a subtask commits the pending
//! transactions the checkpoint recorded (already committed is fine; anything else fails
//! loudly), then aborts every other open transaction of the subtasks it took over.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, StringArray};
use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::Result;
use crate::operator::state_column as column;
use crate::operator::{RestoredState, SubtaskInfo};
use crate::two_phase_commit::{BatchWriter, Committable, TwoPhaseCommitSink, TwoPhaseCommitter};

const PENDING: &str = "pending";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Two-phase commit with the checkpoints.
    ExactlyOnce,
    /// Every batch committed as it arrives (duplicates after a restore, never loss).
    AtLeastOnce,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum TxnState {
    Open,
    PreCommitted,
    Committed,
    Aborted,
}

#[derive(Debug)]
struct Txn {
    owner: usize,
    state: TxnState,
    batches: Vec<RecordBatch>,
}

#[derive(Debug, Default)]
struct Log {
    txns: HashMap<String, Txn>,
    committed: Vec<RecordBatch>,
    next: u64,
    commits: u64,
    aborts: u64,
}

/// The "broker" the sink writes to.
#[derive(Debug, Default, Clone)]
pub struct TxnLog {
    log: Arc<Mutex<Log>>,
}

impl TxnLog {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What a read_committed reader sees, in commit order.
    pub fn committed(&self) -> Vec<RecordBatch> {
        self.lock().committed.clone()
    }

    /// Open or pre-committed transactions not yet resolved.
    pub fn unresolved(&self) -> usize {
        self.lock().txns.values().filter(|t| matches!(t.state, TxnState::Open | TxnState::PreCommitted)).count()
    }

    pub fn commits(&self) -> u64 {
        self.lock().commits
    }

    fn begin(&self, sink: &str, owner: usize) -> String {
        let mut log = self.lock();
        log.next += 1;
        let id = format!("{sink}-{owner}-{}", log.next);
        log.txns.insert(id.clone(), Txn { owner, state: TxnState::Open, batches: Vec::new() });
        id
    }

    fn write(&self, id: &str, batch: RecordBatch) -> std::result::Result<(), String> {
        match self.lock().txns.get_mut(id) {
            Some(txn) if txn.state == TxnState::Open => {
                txn.batches.push(batch);
                Ok(())
            }
            other => Err(format!("transaction {id} is not open: {:?}", other.map(|t| &t.state))),
        }
    }

    fn write_committed(&self, batch: RecordBatch) {
        let mut log = self.lock();
        log.committed.push(batch);
        log.commits += 1;
    }

    fn pre_commit(&self, id: &str) {
        if let Some(txn) = self.lock().txns.get_mut(id) {
            txn.state = TxnState::PreCommitted;
        }
    }

    /// Commits `id`; committing a committed transaction again is fine (recovery repeats it).
    fn commit(&self, id: &str) -> std::result::Result<(), String> {
        let mut log = self.lock();
        let log = &mut *log;
        match log.txns.get_mut(id) {
            Some(txn) if txn.state == TxnState::Committed => Ok(()),
            Some(txn) if matches!(txn.state, TxnState::PreCommitted | TxnState::Open) => {
                txn.state = TxnState::Committed;
                log.committed.extend(std::mem::take(&mut txn.batches));
                log.commits += 1;
                Ok(())
            }
            Some(txn) => Err(format!("transaction {id} cannot be committed: it is {:?}", txn.state)),
            None => Err(format!("transaction {id} is unknown")),
        }
    }

    fn abort(&self, id: &str) {
        let mut log = self.lock();
        let log = &mut *log;
        if let Some(txn) = log.txns.get_mut(id)
            && matches!(txn.state, TxnState::Open | TxnState::PreCommitted)
        {
            txn.state = TxnState::Aborted;
            txn.batches.clear();
            log.aborts += 1;
        }
    }

    /// Aborts every unresolved transaction of the owners `owns` accepts.
    fn abort_lingering(&self, owns: impl Fn(usize) -> bool, sink: &str) {
        let mut log = self.lock();
        let log = &mut *log;
        for (id, txn) in log.txns.iter_mut() {
            let ours = id.starts_with(&format!("{sink}-"));
            if ours && owns(txn.owner) && matches!(txn.state, TxnState::Open | TxnState::PreCommitted) {
                txn.state = TxnState::Aborted;
                txn.batches.clear();
                log.aborts += 1;
            }
        }
    }
}

/// A pre-committed transaction of the in-memory sink: its id in the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnId(String);

impl Committable for TxnId {
    const TABLE: &'static str = PENDING;

    fn fields() -> Vec<Field> {
        vec![Field::new("transaction", DataType::Utf8, false)]
    }

    fn to_columns(items: &[&Self]) -> Result<Vec<ArrayRef>> {
        Ok(vec![Arc::new(StringArray::from_iter_values(items.iter().map(|t| t.0.as_str())))])
    }

    fn from_batch(batch: &RecordBatch, info: &SubtaskInfo) -> Result<Vec<Self>> {
        let ids = column::<StringArray>(batch, "transaction", info)?;
        Ok(ids.iter().flatten().map(|id| TxnId(id.to_string())).collect())
    }
}

/// The in-memory sink's side of the two-phase commit, one per subtask.
pub struct TxnCommitter {
    log: TxnLog,
    delivery: Delivery,
    info: Option<SubtaskInfo>,
    current: Option<String>,
}

/// The in-memory sink operator.
pub type TransactionalSink = TwoPhaseCommitSink<TxnCommitter>;

impl TxnLog {
    /// A subtask of a sink writing into this log with `delivery`.
    pub fn sink(&self, delivery: Delivery) -> TransactionalSink {
        TwoPhaseCommitSink::new(TxnCommitter { log: self.clone(), delivery, info: None, current: None })
    }
}

impl TxnCommitter {
    fn info(&self) -> Result<&SubtaskInfo> {
        self.info.as_ref().ok_or_else(|| crate::Error::Graph("the sink was not opened".into()))
    }
}

#[async_trait]
impl TwoPhaseCommitter for TxnCommitter {
    type Committable = TxnId;

    async fn recover(&mut self, info: &SubtaskInfo, recorded: Vec<TxnId>, restored: &RestoredState) -> Result<()> {
        self.info = Some(info.clone());
        let checkpoint = restored.checkpoint_id.unwrap_or_default();
        for TxnId(id) in recorded {
            self.log.commit(&id).map_err(|e| info.error(format!("restoring checkpoint {checkpoint}: pending {e}")))?;
        }
        self.log.abort_lingering(|owner| owner % info.parallelism == info.subtask, &info.operator);
        if self.delivery == Delivery::ExactlyOnce {
            self.current = Some(self.log.begin(&info.operator, info.subtask));
        }
        Ok(())
    }

    async fn pre_commit(&mut self, _checkpoint: u64) -> Result<Vec<TxnId>> {
        let Some(id) = self.current.take() else { return Ok(Vec::new()) };
        let info = self.info()?.clone();
        self.log.pre_commit(&id);
        self.current = Some(self.log.begin(&info.operator, info.subtask));
        Ok(vec![TxnId(id)])
    }

    async fn commit(&mut self, _checkpoint: u64, due: Vec<TxnId>) -> Result<()> {
        for TxnId(id) in due {
            let info = self.info()?;
            self.log.commit(&id).map_err(|e| info.error(e))?;
        }
        Ok(())
    }

    /// The transaction begun after the final checkpoint holds nothing: abort it.
    async fn close(&mut self) -> Result<()> {
        if let Some(id) = self.current.take() {
            self.log.abort(&id);
        }
        Ok(())
    }
}

#[async_trait]
impl BatchWriter for TxnCommitter {
    async fn write(&mut self, batch: RecordBatch) -> Result<()> {
        match &self.current {
            Some(id) => self.log.write(id, batch).map_err(|e| self.info().map_or_else(|e| e, |i| i.error(&e))),
            None => {
                self.log.write_committed(batch);
                Ok(())
            }
        }
    }
}
