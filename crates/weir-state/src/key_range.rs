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

/// Whether subtask `subtask` of `parallelism` owns any hash from `least` to `greatest` (owners
/// rise with the hash, so a range's owners run from its least's to its greatest's).
pub fn owns_any_of(least: u64, greatest: u64, subtask: usize, parallelism: usize) -> bool {
    (owner_of(least, parallelism)..=owner_of(greatest, parallelism)).contains(&subtask)
}

/// The range from `least` to `greatest` widened to take in `range` too, if any.
pub fn spanning(range: Option<(u64, u64)>, least: u64, greatest: u64) -> (u64, u64) {
    range.map_or((least, greatest), |(l, g)| (l.min(least), g.max(greatest)))
}

/// The least and greatest key hash in `batches`, if they are keyed and hold a row.
pub fn key_hashes(batches: &[RecordBatch]) -> Option<(u64, u64)> {
    let column =
        |batch: &RecordBatch| batch.column_by_name(KEY_HASH_COLUMN)?.as_any().downcast_ref::<UInt64Array>().cloned();
    let mut range: Option<(u64, u64)> = None;
    for batch in batches {
        let hashes = column(batch)?;
        let (Some(least), Some(greatest)) =
            (datafusion::arrow::compute::min(&hashes), datafusion::arrow::compute::max(&hashes))
        else {
            continue;
        };
        range = Some(spanning(range, least, greatest));
    }
    range
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

    #[test]
    fn a_range_is_owned_by_the_subtasks_between_its_ends_owners() {
        let third = u64::MAX / 3;
        // Subtask 1 of 3 at parallelism 3: only itself.
        let (least, greatest) = (third + 1, 2 * third);
        assert_eq!((0..3).map(|s| owns_any_of(least, greatest, s, 3)).collect::<Vec<_>>(), [false, true, false]);
        // The same range at 2 straddles the middle: both.
        assert!(owns_any_of(least, greatest, 0, 2) && owns_any_of(least, greatest, 1, 2));
        // At 6: subtasks 2 and 3.
        assert_eq!((0..6).filter(|s| owns_any_of(least, greatest, *s, 6)).collect::<Vec<_>>(), [2, 3]);

        let batch = |hashes: Vec<u64>| {
            let schema = keyed_schema([Field::new("v", DataType::UInt64, false)]);
            let values = Arc::new(UInt64Array::from(hashes.clone()));
            RecordBatch::try_new(schema, vec![Arc::new(UInt64Array::from(hashes)), values]).unwrap()
        };
        assert_eq!(key_hashes(&[batch(vec![7, 3]), batch(vec![]), batch(vec![9])]), Some((3, 9)));
        assert_eq!(key_hashes(&[batch(vec![])]), None);
        let unkeyed = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("v", DataType::UInt64, false)])),
            vec![Arc::new(UInt64Array::from(vec![1u64]))],
        )
        .unwrap();
        assert_eq!(key_hashes(&[unkeyed]), None);
    }
}
