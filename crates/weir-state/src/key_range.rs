//! Keyed state is split by key-hash *range*, not modulo: subtask i of p owns the hashes in
//! [i * 2^64 / p, (i + 1) * 2^64 / p). A row's owner at any parallelism follows from its hash
//! alone, so state written at parallelism 2 can be re-split for 3 by filtering on the stored
//! hash column, and the runtime's hash edges route records by the same rule.

use std::sync::Arc;

use datafusion::arrow::array::{Array, BooleanArray, UInt64Array};
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::{Error, Result};

/// The column that carries each keyed state row's key hash.
pub const KEY_HASH_COLUMN: &str = "_key_hash";

/// The schema of a keyed state table: the key hash first (a restore splits the rows among the
/// subtasks by it), then `fields`. Every keyed table is built with it.
pub fn keyed_schema<F: Into<FieldRef>>(fields: impl IntoIterator<Item = F>) -> SchemaRef {
    let key_hash = Arc::new(Field::new(KEY_HASH_COLUMN, DataType::UInt64, false));
    Arc::new(Schema::new(std::iter::once(key_hash).chain(fields.into_iter().map(Into::into)).collect::<Vec<_>>()))
}

/// The subtask (of `parallelism`) that owns `hash`.
pub fn owner_of(hash: u64, parallelism: usize) -> usize {
    ((u128::from(hash) * parallelism as u128) >> 64) as usize
}

/// The rows of `batch` that subtask `subtask` of `parallelism` owns.
pub fn owned_rows(batch: &RecordBatch, subtask: usize, parallelism: usize) -> Result<RecordBatch> {
    let hashes = batch
        .column_by_name(KEY_HASH_COLUMN)
        .and_then(|c| c.as_any().downcast_ref::<UInt64Array>())
        .ok_or(Error::MissingKeyHash)?;
    let keep: BooleanArray =
        hashes.iter().map(|hash| Some(hash.is_some_and(|h| owner_of(h, parallelism) == subtask))).collect();
    // A restore at the same parallelism keeps every row: no copy of the state.
    if keep.true_count() == batch.num_rows() {
        return Ok(batch.clone());
    }
    Ok(filter_record_batch(batch, &keep)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_cover_the_hash_space_in_order() {
        assert_eq!(owner_of(0, 3), 0);
        assert_eq!(owner_of(u64::MAX, 3), 2);
        assert_eq!(owner_of(u64::MAX / 3, 3), 0);
        assert_eq!(owner_of(u64::MAX / 3 + 1, 3), 1);
        assert_eq!(owner_of(u64::MAX / 2, 2), 0);
        assert_eq!(owner_of(u64::MAX / 2 + 1, 2), 1);
        let mut last = 0;
        for i in 0..1000u64 {
            let owner = owner_of(i.wrapping_mul(u64::MAX / 1000), 7);
            assert!(owner >= last && owner < 7);
            last = owner;
        }
    }
}
