//! How an edge spreads records over the receiving operator's subtasks, and the stable key hash
//! that hash edges and keyed state share.
//!
//! The key hash must never change between runs or machines: keyed state is stored with it and
//! re-split by it on restore, while new records are routed by it. So it is XxHash64 with a fixed
//! seed over the key columns in Arrow's row format (an unambiguous byte encoding of any type),
//! not a randomly seeded or CPU-dependent hasher.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, UInt32Array, UInt64Array};
use datafusion::arrow::compute::take_record_batch;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, SortField};
use twox_hash::XxHash64;
use weir_state::owner_of;

use crate::error::{Error, Result};

const KEY_HASH_SEED: u64 = 0x7765_6972; // "weir"

/// The routing of one edge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Partitioning {
    /// Subtask i sends to subtask i (equal parallelism on both sides).
    Forward,
    /// By the hash of the named key columns, subtask `owner_of(hash, parallelism)`.
    Hash(Vec<String>),
    /// Every record to every subtask.
    Broadcast,
    /// Whole batches in turn to each subtask.
    RoundRobin,
}

impl std::fmt::Display for Partitioning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Partitioning::Forward => write!(f, "forward"),
            Partitioning::Hash(keys) => write!(f, "hash({})", keys.join(", ")),
            Partitioning::Broadcast => write!(f, "broadcast"),
            Partitioning::RoundRobin => write!(f, "round-robin"),
        }
    }
}

/// The stable hash of each row's key (the `key_columns` of `batch`).
pub fn key_hashes(batch: &RecordBatch, key_columns: &[String]) -> Result<UInt64Array> {
    let columns: Vec<ArrayRef> = key_columns
        .iter()
        .map(|name| {
            batch.column_by_name(name).cloned().ok_or_else(|| {
                Error::Graph(format!("key column '{name}' is not in the batch (columns: {})", column_names(batch)))
            })
        })
        .collect::<Result<_>>()?;
    let fields = columns.iter().map(|c| SortField::new(c.data_type().clone())).collect();
    let converter = RowConverter::new(fields)?;
    let rows = converter.convert_columns(&columns)?;
    Ok(rows.iter().map(|row| XxHash64::oneshot(KEY_HASH_SEED, row.as_ref())).collect())
}

fn column_names(batch: &RecordBatch) -> String {
    batch.schema().fields().iter().map(|f| f.name().as_str()).collect::<Vec<_>>().join(", ")
}

/// Splits `batch` by key owner among `parallelism` subtasks; empty parts are left out.
pub fn split_by_key(
    batch: &RecordBatch,
    key_columns: &[String],
    parallelism: usize,
) -> Result<Vec<(usize, RecordBatch)>> {
    if parallelism == 1 {
        return Ok(vec![(0, batch.clone())]);
    }
    let hashes = key_hashes(batch, key_columns)?;
    let mut rows_of: Vec<Vec<u32>> = vec![Vec::new(); parallelism];
    for (row, hash) in hashes.values().iter().enumerate() {
        rows_of[owner_of(*hash, parallelism)].push(row as u32);
    }
    let mut parts = Vec::new();
    for (subtask, rows) in rows_of.into_iter().enumerate() {
        if rows.is_empty() {
            continue;
        }
        let part = if rows.len() == batch.num_rows() {
            batch.clone()
        } else {
            take_record_batch(batch, &UInt32Array::from(rows))?
        };
        parts.push((subtask, part));
    }
    Ok(parts)
}

/// Which receiving subtasks one sender subtask talks to over an edge, and routes a batch.
#[derive(Debug)]
pub struct Router {
    partitioning: Partitioning,
    /// The receiver subtask of each of the sender's channels on this edge, in channel order.
    receivers: Arc<[usize]>,
    receiver_parallelism: usize,
    next: usize,
}

impl Router {
    pub fn new(partitioning: Partitioning, receivers: Vec<usize>, receiver_parallelism: usize) -> Self {
        Self { partitioning, receivers: receivers.into(), receiver_parallelism, next: 0 }
    }

    /// The receiver subtasks of a sender subtask over an edge of this partitioning.
    pub fn receivers_of(partitioning: &Partitioning, sender: usize, receiver_parallelism: usize) -> Vec<usize> {
        match partitioning {
            Partitioning::Forward => vec![sender],
            _ => (0..receiver_parallelism).collect(),
        }
    }

    /// `(channel index, part)` pairs for one batch.
    pub fn route(&mut self, batch: &RecordBatch) -> Result<Vec<(usize, RecordBatch)>> {
        Ok(match &self.partitioning {
            Partitioning::Forward => vec![(0, batch.clone())],
            Partitioning::Broadcast => (0..self.receivers.len()).map(|i| (i, batch.clone())).collect(),
            Partitioning::RoundRobin => {
                let channel = self.next % self.receivers.len();
                self.next = self.next.wrapping_add(1);
                vec![(channel, batch.clone())]
            }
            // With every receiver as a channel, channel index = receiver subtask.
            Partitioning::Hash(keys) => split_by_key(batch, keys, self.receiver_parallelism)?,
        })
    }

    pub fn receivers(&self) -> &[usize] {
        &self.receivers
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn batch(keys: &[&str]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, false),
            Field::new("v", DataType::Int64, false),
        ]));
        let values: Int64Array = (0..keys.len() as i64).collect();
        RecordBatch::try_new(schema, vec![Arc::new(StringArray::from(keys.to_vec())), Arc::new(values)]).unwrap()
    }

    #[test]
    fn the_key_hash_is_fixed_across_runs_and_batches() {
        let keys = vec!["k".to_string()];
        let a = key_hashes(&batch(&["alice", "bob"]), &keys).unwrap();
        let b = key_hashes(&batch(&["bob", "alice", "alice"]), &keys).unwrap();
        assert_eq!(a.value(0), b.value(1));
        assert_eq!(a.value(1), b.value(0));
        // Pinned: a change here would re-route every key of every stored checkpoint.
        assert_eq!(a.value(0), 0xbd50_cc94_57e9_484b, "{:#x}", a.value(0));
    }

    #[test]
    fn a_hash_split_keeps_each_key_on_one_subtask() {
        let keys: Vec<String> = (0..200).map(|i| format!("key-{}", i % 17)).collect();
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let input = batch(&refs);
        let parts = split_by_key(&input, &["k".to_string()], 3).unwrap();
        assert_eq!(parts.iter().map(|(_, b)| b.num_rows()).sum::<usize>(), 200);
        let mut owner_of_key = std::collections::HashMap::new();
        for (subtask, part) in &parts {
            let column = part.column(0).as_any().downcast_ref::<StringArray>().unwrap();
            for key in column.iter().flatten() {
                assert_eq!(*owner_of_key.entry(key.to_string()).or_insert(*subtask), *subtask);
            }
        }
        assert_eq!(owner_of_key.len(), 17);
    }

    #[test]
    fn a_missing_key_column_is_named() {
        let error = key_hashes(&batch(&["a"]), &["nope".to_string()]).unwrap_err();
        assert!(error.to_string().contains("key column 'nope' is not in the batch (columns: k, v)"), "{error}");
    }
}
