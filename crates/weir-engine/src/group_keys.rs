//! The group keys of a keyed operator, interned to dense group ids: a batch's key columns are
//! encoded once in Arrow's row format (one contiguous byte string per row, whatever the key
//! types), hashed, and looked up in a hash table of the ids whose keys it holds. An operator then
//! keeps its per-group state in vectors indexed by id (see `operators::group_accumulators`), so
//! a batch is grouped without a `ScalarValue` or an allocation per row.
//!
//! Ids stay put while a group lives. A removed group leaves its id unused (its key stays in
//! the store) until [`GroupKeys::compact`] renumbers the live ones, which the operator does when
//! the unused ids outnumber the live ones.

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::row::{Row, RowConverter, Rows, SortField};
use hashbrown::HashTable;
use twox_hash::XxHash64;

use crate::Result;

/// Not the key hash's seed (`partition::KEY_HASH_SEED`): the rows a subtask owns share the bits
/// of that hash that picked the subtask, and would crowd a table that buckets by them.
const SEED: u64 = 0x9e37_79b9_7f4a_7c15;

fn hash(row: Row<'_>) -> u64 {
    XxHash64::oneshot(SEED, row.as_ref())
}

pub struct GroupKeys {
    converter: RowConverter,
    /// Every id's key, removed ones included until the next compaction.
    keys: Rows,
    /// Each key's hash, by id (to find a removed key's entry, and to rebuild the table).
    hashes: Vec<u64>,
    /// The live ids, found by their key's hash.
    table: HashTable<usize>,
}

impl GroupKeys {
    /// Keys made of columns of `types`.
    pub fn new(types: &[DataType]) -> Result<Self> {
        let converter = RowConverter::new(types.iter().map(|t| SortField::new(t.clone())).collect())?;
        let keys = converter.empty_rows(0, 0);
        Ok(Self { converter, keys, hashes: Vec::new(), table: HashTable::new() })
    }

    /// The number of ids handed out (live or removed).
    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    /// Makes room for `keys` more keys of about `key_bytes` each (a restore knows how many it
    /// brings back: growing by doubling would copy them and rehash the table as it goes).
    pub fn reserve(&mut self, keys: usize, key_bytes: usize) {
        if self.hashes.is_empty() {
            self.keys = self.converter.empty_rows(keys, keys * key_bytes);
        }
        self.hashes.reserve(keys);
        let hashes = &self.hashes;
        self.table.reserve(keys, |&id| hashes[id]);
    }

    /// The key columns of a batch, encoded for [`Self::find`] and [`Self::intern`].
    pub fn encode(&self, columns: &[ArrayRef]) -> Result<Rows> {
        Ok(self.converter.convert_columns(columns)?)
    }

    /// The live id of `rows`' row `row`, if its key has one.
    pub fn find(&self, rows: &Rows, row: usize) -> Option<usize> {
        let key = rows.row(row);
        let keys = &self.keys;
        self.table.find(hash(key), |&id| keys.row(id) == key).copied()
    }

    /// The id of `rows`' row `row`, and whether it was made now (its key had no live id).
    pub fn intern(&mut self, rows: &Rows, row: usize) -> (usize, bool) {
        let key = rows.row(row);
        let hashed = hash(key);
        let keys = &self.keys;
        if let Some(&id) = self.table.find(hashed, |&id| keys.row(id) == key) {
            return (id, false);
        }
        let id = self.hashes.len();
        self.keys.push(key);
        self.hashes.push(hashed);
        let hashes = &self.hashes;
        self.table.insert_unique(hashed, id, |&id| hashes[id]);
        (id, true)
    }

    /// Removes `id`'s key: a later row with that key gets a new id.
    pub fn remove(&mut self, id: usize) {
        if let Ok(entry) = self.table.find_entry(self.hashes[id], |&other| other == id) {
            entry.remove();
        }
    }

    /// Keeps the ids with `keep[id]` set, renumbered 0.. in their order.
    pub fn compact(&mut self, keep: &[bool]) {
        let kept = keep.iter().filter(|&&k| k).count();
        let mut keys = self.converter.empty_rows(kept, 0);
        let mut hashes = Vec::with_capacity(kept);
        for (id, _) in keep.iter().enumerate().filter(|(_, k)| **k) {
            keys.push(self.keys.row(id));
            hashes.push(self.hashes[id]);
        }
        let mut table = HashTable::with_capacity(kept);
        for (id, &hashed) in hashes.iter().enumerate() {
            table.insert_unique(hashed, id, |&id: &usize| hashes[id]);
        }
        (self.keys, self.hashes, self.table) = (keys, hashes, table);
    }

    /// The key columns of `ids`, in that order.
    pub fn columns(&self, ids: &[usize]) -> Result<Vec<ArrayRef>> {
        Ok(self.converter.convert_rows(ids.iter().map(|&id| self.keys.row(id)))?)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Int64Array, StringArray};

    use super::*;

    fn columns(keys: &[(&str, i64)]) -> Vec<ArrayRef> {
        vec![
            Arc::new(StringArray::from_iter_values(keys.iter().map(|k| k.0))),
            Arc::new(Int64Array::from_iter_values(keys.iter().map(|k| k.1))),
        ]
    }

    #[test]
    fn keys_get_dense_ids_that_survive_removal_and_compaction() {
        let mut keys = GroupKeys::new(&[DataType::Utf8, DataType::Int64]).unwrap();
        let rows = keys.encode(&columns(&[("a", 1), ("b", 1), ("a", 1), ("a", 2)])).unwrap();
        let ids: Vec<_> = (0..4).map(|r| keys.intern(&rows, r)).collect();
        assert_eq!(ids, [(0, true), (1, true), (0, false), (2, true)]);
        // Removed: not found any more, and a new row with its key gets a new id.
        keys.remove(1);
        assert_eq!(keys.find(&rows, 1), None);
        assert_eq!(keys.intern(&rows, 1), (3, true));
        // Compaction keeps the live ids' keys, renumbered in order.
        keys.compact(&[true, false, true, true]);
        assert_eq!(keys.len(), 3);
        assert_eq!((keys.find(&rows, 0), keys.find(&rows, 3), keys.find(&rows, 1)), (Some(0), Some(1), Some(2)));
        let back = keys.columns(&[2, 0]).unwrap();
        assert_eq!(back[0].as_any().downcast_ref::<StringArray>().unwrap(), &StringArray::from(vec!["b", "a"]));
        assert_eq!(back[1].as_any().downcast_ref::<Int64Array>().unwrap(), &Int64Array::from(vec![1, 1]));
    }
}
