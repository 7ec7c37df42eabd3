//! Live counters of a running pipeline: per operator subtask and per channel. Tasks update
//! atomics; readers take a snapshot whenever they like.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::channel::ChannelMetrics;

/// Counters of one operator subtask.
#[derive(Debug)]
pub struct OperatorMetrics {
    pub records_in: AtomicU64,
    pub records_out: AtomicU64,
    pub batches_in: AtomicU64,
    /// Nanoseconds the subtask's task had output it could not queue (back-pressure).
    pub backpressure_ns: AtomicU64,
    /// The subtask's current watermark (`i64::MIN` before the first).
    pub watermark: AtomicI64,
    /// Input records a source could not decode and skipped or sent to a dead-letter topic.
    pub bad_records: AtomicU64,
    /// Transactions the subtask's transactional writer (a Kafka sink's, or a Kafka source's
    /// dead-letter writer) committed, at checkpoint complete or in recovery.
    pub transactions_committed: AtomicU64,
    /// Transactions that writer aborted (lingering ones fenced in recovery, the open one at
    /// shutdown).
    pub transactions_aborted: AtomicU64,
    /// Rows an event-time operator dropped because the watermark had passed where they belong
    /// (a window already emitted), as Flink's `numLateRecordsDropped`.
    pub late_records_dropped: AtomicU64,
    /// Rows an event-time operator skipped because their event time was NULL.
    pub null_time_records: AtomicU64,
    /// The transactional writer's transactions now: open (taking records), and pre-committed
    /// (flushed at a barrier, waiting for that checkpoint to complete).
    pub transactions_open: AtomicU64,
    pub transactions_pending: AtomicU64,
    /// Wall-clock ms at which the oldest transaction not yet committed began (`i64::MIN` when
    /// none): the broker aborts it at `transaction.timeout.ms` after that.
    pub oldest_transaction_began_ms: AtomicI64,
    /// The writer's `transaction.timeout.ms`; 0 for an operator without transactions.
    pub transaction_timeout_ms: AtomicU64,
}

impl OperatorMetrics {
    /// Counts rows an event-time operator dropped: `late` ones and ones without a time.
    pub fn dropped(&self, late: u64, null_time: u64) {
        self.late_records_dropped.fetch_add(late, Ordering::Relaxed);
        self.null_time_records.fetch_add(null_time, Ordering::Relaxed);
    }
}

impl Default for OperatorMetrics {
    fn default() -> Self {
        Self {
            records_in: AtomicU64::new(0),
            records_out: AtomicU64::new(0),
            batches_in: AtomicU64::new(0),
            backpressure_ns: AtomicU64::new(0),
            watermark: AtomicI64::new(i64::MIN),
            bad_records: AtomicU64::new(0),
            transactions_committed: AtomicU64::new(0),
            transactions_aborted: AtomicU64::new(0),
            late_records_dropped: AtomicU64::new(0),
            null_time_records: AtomicU64::new(0),
            transactions_open: AtomicU64::new(0),
            transactions_pending: AtomicU64::new(0),
            oldest_transaction_began_ms: AtomicI64::new(i64::MIN),
            transaction_timeout_ms: AtomicU64::new(0),
        }
    }
}

/// A point-in-time copy of one operator subtask's counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorSample {
    pub operator: String,
    pub subtask: usize,
    pub records_in: u64,
    pub records_out: u64,
    pub backpressure_ms: u64,
    pub watermark: Option<i64>,
    pub bad_records: u64,
    pub transactions_committed: u64,
    pub transactions_aborted: u64,
    pub late_records_dropped: u64,
    pub null_time_records: u64,
    /// Present for a transactional writer only.
    pub transactions: Option<TransactionsSample>,
}

/// A transactional writer's transactions at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransactionsSample {
    pub open: u64,
    pub pending: u64,
    pub committed: u64,
    pub aborted: u64,
    pub oldest_began_ms: Option<i64>,
    pub timeout_ms: u64,
}

/// A point-in-time copy of one channel's counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelSample {
    pub from: String,
    pub from_subtask: usize,
    pub to: String,
    pub to_subtask: usize,
    pub records: u64,
    pub bytes: u64,
    pub blocked_ms: u64,
    pub queued_batches: u64,
}

/// One channel's ends and counters.
#[derive(Debug)]
struct ChannelEntry {
    from: (String, usize),
    to: (String, usize),
    metrics: Arc<ChannelMetrics>,
}

/// The counters of an attempt's tasks on one worker, as it last sent them.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WorkerSamples {
    pub operators: Vec<OperatorSample>,
    pub channels: Vec<ChannelSample>,
}

/// Every counter of one pipeline attempt: its tasks' here, and the last samples of its tasks on
/// each worker.
#[derive(Debug, Default)]
pub struct MetricsRegistry {
    operators: Mutex<Vec<(String, usize, Arc<OperatorMetrics>)>>,
    channels: Mutex<Vec<ChannelEntry>>,
    remote: Mutex<BTreeMap<usize, WorkerSamples>>,
}

impl MetricsRegistry {
    pub(crate) fn operator(&self, operator: &str, subtask: usize) -> Arc<OperatorMetrics> {
        let metrics = Arc::new(OperatorMetrics::default());
        self.operators.lock().unwrap_or_else(|p| p.into_inner()).push((operator.to_string(), subtask, metrics.clone()));
        metrics
    }

    pub(crate) fn channel(&self, from: (&str, usize), to: (&str, usize), metrics: Arc<ChannelMetrics>) {
        let entry = ChannelEntry { from: (from.0.to_string(), from.1), to: (to.0.to_string(), to.1), metrics };
        self.channels.lock().unwrap_or_else(|p| p.into_inner()).push(entry);
    }

    /// Worker `worker`'s latest samples.
    pub(crate) fn set_remote(&self, worker: usize, samples: WorkerSamples) {
        self.remote.lock().unwrap_or_else(|p| p.into_inner()).insert(worker, samples);
    }

    /// This process's samples, as a worker sends them.
    pub(crate) fn samples(&self) -> WorkerSamples {
        WorkerSamples { operators: self.local_operators(), channels: self.local_channels() }
    }

    fn remote(&self) -> Vec<WorkerSamples> {
        self.remote.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect()
    }

    pub fn operators(&self) -> Vec<OperatorSample> {
        let mut operators = self.local_operators();
        operators.extend(self.remote().into_iter().flat_map(|r| r.operators));
        operators
    }

    pub fn channels(&self) -> Vec<ChannelSample> {
        let mut channels = self.local_channels();
        channels.extend(self.remote().into_iter().flat_map(|r| r.channels));
        channels
    }

    fn local_operators(&self) -> Vec<OperatorSample> {
        let operators = self.operators.lock().unwrap_or_else(|p| p.into_inner());
        operators
            .iter()
            .map(|(operator, subtask, m)| {
                let watermark = m.watermark.load(Ordering::Relaxed);
                let timeout_ms = m.transaction_timeout_ms.load(Ordering::Relaxed);
                let oldest = m.oldest_transaction_began_ms.load(Ordering::Relaxed);
                let transactions = (timeout_ms > 0).then(|| TransactionsSample {
                    open: m.transactions_open.load(Ordering::Relaxed),
                    pending: m.transactions_pending.load(Ordering::Relaxed),
                    committed: m.transactions_committed.load(Ordering::Relaxed),
                    aborted: m.transactions_aborted.load(Ordering::Relaxed),
                    oldest_began_ms: (oldest != i64::MIN).then_some(oldest),
                    timeout_ms,
                });
                OperatorSample {
                    operator: operator.clone(),
                    subtask: *subtask,
                    records_in: m.records_in.load(Ordering::Relaxed),
                    records_out: m.records_out.load(Ordering::Relaxed),
                    backpressure_ms: m.backpressure_ns.load(Ordering::Relaxed) / 1_000_000,
                    watermark: (watermark != i64::MIN).then_some(watermark),
                    bad_records: m.bad_records.load(Ordering::Relaxed),
                    transactions_committed: m.transactions_committed.load(Ordering::Relaxed),
                    transactions_aborted: m.transactions_aborted.load(Ordering::Relaxed),
                    late_records_dropped: m.late_records_dropped.load(Ordering::Relaxed),
                    null_time_records: m.null_time_records.load(Ordering::Relaxed),
                    transactions,
                }
            })
            .collect()
    }

    fn local_channels(&self) -> Vec<ChannelSample> {
        let channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        channels
            .iter()
            .map(|ChannelEntry { from, to, metrics: m }| ChannelSample {
                from: from.0.clone(),
                from_subtask: from.1,
                to: to.0.clone(),
                to_subtask: to.1,
                records: m.records_in.load(Ordering::Relaxed),
                bytes: m.bytes_in.load(Ordering::Relaxed),
                blocked_ms: m.blocked_ns.load(Ordering::Relaxed) / 1_000_000,
                queued_batches: m.queued_batches.load(Ordering::Relaxed),
            })
            .collect()
    }
}
