//! The test kit: small, deterministic operators for proving the runtime (and, in later crates,
//! what is built on it) against the contract.
//!
//! - [`ReplayableSource`]: seeded records at (split, offset) positions, replayable from a
//!   restored position, with an optional per-subtask delay to create skew and back-pressure;
//! - [`KeyedCounter`]: counts records per key over any number of inputs, keyed state;
//! - [`Recorder`]: a two-input pass-through that remembers every record it saw, so a test can
//!   look inside a snapshot;
//! - [`TransactionalSink`] over a [`TxnLog`]: an in-memory two-phase-commit sink whose log
//!   outlives pipeline attempts (as Kafka does) and exposes only committed output;
//! - [`Throttle`]: a slow pass-through stage, to fill queues and create back-pressure;
//! - [`rows`]: batches as sorted printable rows, to compare outputs record by record;
//! - [`cpu_seconds`]: the CPU this process used, for benchmarks.

mod counter;
mod recorder;
mod source;
mod throttle;
mod txn_sink;

pub use counter::KeyedCounter;
pub use recorder::Recorder;
pub use source::{ReplayableSource, SourceSpec};
pub use throttle::Throttle;
pub use txn_sink::{Delivery, TransactionalSink, TxnCommitter, TxnId, TxnLog};

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::util::display::array_value_to_string;

/// Every row of `batches` as "col=value, ..." text, sorted.
pub fn rows(batches: &[RecordBatch]) -> Vec<String> {
    let mut rows = Vec::new();
    for batch in batches {
        let schema = batch.schema();
        for row in 0..batch.num_rows() {
            let fields: Vec<String> = schema
                .fields()
                .iter()
                .zip(batch.columns())
                .map(|(field, column)| {
                    let value = array_value_to_string(column, row).unwrap_or_else(|e| format!("<{e}>"));
                    format!("{}={value}", field.name())
                })
                .collect();
            rows.push(fields.join(", "));
        }
    }
    rows.sort();
    rows
}

/// CPU seconds this process used so far (user + system), from /proc: on a shared machine the
/// CPU a run costs is steadier than its wall-clock time. 0 where /proc is missing.
pub fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which ends with ')'): utime and stime are the 12th and
    // 13th, in clock ticks of 1/100 s on Linux.
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}
