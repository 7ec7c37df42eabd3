//! An in-memory two-phase-commit sink, the model of the Kafka sink. The [`TxnLog`] plays the
//! broker: it outlives pipeline attempts, keeps open transactions of dead attempts until they
//! are committed or aborted, and exposes only committed records.
//!
//! Exactly-once: records go into the subtask's open transaction; at barrier n it is
//! pre-committed (recorded in the snapshot) and a new one begins; "n complete" commits every
//! pre-committed transaction up to n. "n aborted" rolls nothing back: the pipeline goes on, and
//! the records of those transactions happened before barriers the next completed checkpoint
//! includes, so that checkpoint commits them (Flink's two-phase-commit sink does the same;
//! rolling them back would lose them). On restore, a subtask commits the pending transactions
//! the checkpoint recorded (already committed is fine; anything else fails loudly), then aborts
//! every other open transaction of the subtasks it took over.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use datafusion::arrow::array::{Array, StringArray, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::Result;
use crate::operator::{Collector, Operator, RestoredState, StateTable, SubtaskInfo};

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

/// One subtask of the sink.
pub struct TransactionalSink {
    log: TxnLog,
    delivery: Delivery,
    info: Option<SubtaskInfo>,
    current: Option<String>,
    /// Pre-committed transactions by the checkpoint whose barrier closed them.
    pending: BTreeMap<u64, String>,
}

impl TransactionalSink {
    pub fn new(log: TxnLog, delivery: Delivery) -> Self {
        Self { log, delivery, info: None, current: None, pending: BTreeMap::new() }
    }

    fn info(&self) -> Result<&SubtaskInfo> {
        self.info.as_ref().ok_or_else(|| crate::Error::Graph("the sink was not opened".into()))
    }
}

#[async_trait]
impl Operator for TransactionalSink {
    async fn open(&mut self, info: &SubtaskInfo, restored: RestoredState) -> Result<()> {
        self.info = Some(info.clone());
        let owns = |owner: usize| owner % info.parallelism == info.subtask;
        for batch in restored.table(PENDING) {
            let (Some(owners), Some(ids)) = (
                batch.column(0).as_any().downcast_ref::<UInt64Array>(),
                batch.column(2).as_any().downcast_ref::<StringArray>(),
            ) else {
                return Err(info.error("restored pending transactions have the wrong types"));
            };
            for row in 0..batch.num_rows() {
                if owns(owners.value(row) as usize) {
                    let checkpoint = restored.checkpoint_id.unwrap_or_default();
                    self.log
                        .commit(ids.value(row))
                        .map_err(|e| info.error(format!("restoring checkpoint {checkpoint}: pending {e}")))?;
                }
            }
        }
        self.log.abort_lingering(owns, &info.operator);
        if self.delivery == Delivery::ExactlyOnce {
            self.current = Some(self.log.begin(&info.operator, info.subtask));
        }
        Ok(())
    }

    async fn process_batch(&mut self, _input: usize, batch: RecordBatch, _out: &mut Collector) -> Result<()> {
        match &self.current {
            Some(id) => self.log.write(id, batch).map_err(|e| self.info().map_or_else(|e| e, |i| i.error(&e))),
            None => {
                self.log.write_committed(batch);
                Ok(())
            }
        }
    }

    async fn snapshot(&mut self, checkpoint_id: u64) -> Result<Vec<StateTable>> {
        let info = self.info()?.clone();
        if let Some(id) = self.current.take() {
            self.log.pre_commit(&id);
            self.pending.insert(checkpoint_id, id);
            self.current = Some(self.log.begin(&info.operator, info.subtask));
        }
        let schema = Arc::new(Schema::new(vec![
            Field::new("owner", DataType::UInt64, false),
            Field::new("checkpoint", DataType::UInt64, false),
            Field::new("transaction", DataType::Utf8, false),
        ]));
        let owners = UInt64Array::from(vec![info.subtask as u64; self.pending.len()]);
        let checkpoints: UInt64Array = self.pending.keys().copied().collect();
        let ids: StringArray = self.pending.values().map(Some).collect();
        let columns: Vec<Arc<dyn Array>> = vec![Arc::new(owners), Arc::new(checkpoints), Arc::new(ids)];
        let batch = RecordBatch::try_new(schema.clone(), columns)?;
        Ok(vec![StateTable { name: PENDING.into(), schema, batches: vec![batch] }])
    }

    async fn checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<()> {
        let done: Vec<u64> = self.pending.range(..=checkpoint_id).map(|(id, _)| *id).collect();
        for id in done {
            if let Some(txn) = self.pending.remove(&id) {
                let info = self.info()?;
                self.log.commit(&txn).map_err(|e| info.error(e))?;
            }
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
