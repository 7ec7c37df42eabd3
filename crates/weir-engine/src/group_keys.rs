//! The group keys of a keyed operator, interned to dense group ids: a batch's key columns are
//! encoded once in Arrow's row format (one contiguous byte string per row, whatever the key
//! types), hashed, and looked up in a hash table of the ids whose keys it holds. An operator then
//! keeps its per-group state in vectors indexed by id (see `operators::group_accumulators`), so
//! a batch is grouped without a `ScalarValue` or an allocation per row.
//!
//! Ids stay put while a group lives. A removed group leaves its id unused (its key stays in
//! the store) until [`GroupKeys::compact`] renumbers the live ones, which the operator does when
//! the unused ids outnumber the live ones.
//!
//! A restore brings back tens of millions of keys, each once: they are appended without a
//! lookup ([`GroupKeys::append_unindexed`]) and then put in the table in the order of its
//! buckets ([`GroupKeys::index`]). Interned one by one in id order, each key missed the cache
//! twice (its bucket's control bytes, then its slot): that was 35-45% of a restore of 62 M
//! groups, the rest mostly the kernel zeroing the state's fresh pages.

use std::ops::Range;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::row::{Row, RowConverter, Rows, SortField};
use hashbrown::HashTable;
use twox_hash::XxHash64;

use crate::error::{Error, Result};

/// Not the key hash's seed (`partition::KEY_HASH_SEED`): the rows a subtask owns share the bits
/// of that hash that picked the subtask, and would crowd a table that buckets by them.
const SEED: u64 = 0x9e37_79b9_7f4a_7c15;

/// [`GroupKeys::index`] sorts keys into this many runs of neighbouring buckets (at most): one
/// run's buckets fit in a core's L2 cache at any table size a restore makes, and the runs'
/// write heads in its L1.
const INDEX_RUNS_BITS: u32 = 12;

/// [`GroupKeys::index`] sorts and inserts this many keys at a time: one sweep of the table
/// each, about as quick as sorting them all at once, for a fraction of the memory (16 bytes a
/// key, and fresh memory is what a restore spends most of its time on). Tests cross chunks.
const INDEX_CHUNK: usize = if cfg!(test) { 1 << 12 } else { 1 << 23 };

fn hash(row: Row<'_>) -> u64 {
    XxHash64::oneshot(SEED, row.as_ref())
}

pub struct GroupKeys {
    converter: RowConverter,
    /// Every id's key, removed ones included until the next compaction.
    keys: Rows,
    /// Each key's hash, by id (to find a removed key's entry, and to rebuild the table).
    hashes: Vec<u64>,
    /// The live ids, found by their key's hash: 32 bits each, so that a restore's table of tens
    /// of millions of groups is half the fresh memory it would be with `usize` (fresh pages are
    /// most of a restore's time). A subtask's groups are far fewer than 2^32.
    table: HashTable<Id>,
}

/// A group id as the table holds it.
type Id = u32;

/// `id` as the table holds it; a subtask with more groups than 32 bits number is refused.
fn narrow(id: usize) -> Result<Id> {
    Id::try_from(id).map_err(|_| Error::Graph(format!("more than {} groups in one subtask", Id::MAX)))
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
        self.table.reserve(keys, |&id| hashes[id as usize]);
    }

    /// The key columns of a batch, encoded for [`Self::find`] and [`Self::intern`].
    pub fn encode(&self, columns: &[ArrayRef]) -> Result<Rows> {
        Ok(self.converter.convert_columns(columns)?)
    }

    /// The live id of `rows`' row `row`, if its key has one.
    pub fn find(&self, rows: &Rows, row: usize) -> Option<usize> {
        let key = rows.row(row);
        let keys = &self.keys;
        self.table.find(hash(key), |&id| keys.row(id as usize) == key).map(|&id| id as usize)
    }

    /// The id of `rows`' row `row`, and whether it was made now (its key had no live id).
    pub fn intern(&mut self, rows: &Rows, row: usize) -> Result<(usize, bool)> {
        let key = rows.row(row);
        let hashed = hash(key);
        let keys = &self.keys;
        if let Some(&id) = self.table.find(hashed, |&id| keys.row(id as usize) == key) {
            return Ok((id as usize, false));
        }
        let id = self.hashes.len();
        let narrow_id = narrow(id)?;
        self.keys.push(key);
        self.hashes.push(hashed);
        let hashes = &self.hashes;
        self.table.insert_unique(hashed, narrow_id, |&id| hashes[id as usize]);
        Ok((id, true))
    }

    /// Appends the keys of `columns` under new ids, without looking them up: keys a restore
    /// brings back, each once (a keyed table holds each key once). Nothing finds them before
    /// [`Self::index`] puts them in the table.
    pub fn append_unindexed(&mut self, columns: &[ArrayRef]) -> Result<Range<usize>> {
        let start = self.len();
        narrow(start + columns.first().map_or(0, |c| c.len()))?;
        self.converter.append(&mut self.keys, columns)?;
        let keys = &self.keys;
        self.hashes.extend((start..keys.num_rows()).map(|id| hash(keys.row(id))));
        Ok(start..self.len())
    }

    /// Puts the keys of `ids` (appended by [`Self::append_unindexed`]) in the table, in the
    /// order of the buckets their hashes pick rather than by id, so that the table's memory is
    /// walked about once instead of missed twice per key. (hashbrown picks a key's first bucket
    /// by the low bits of its hash; were that to change, this order would only be slower, not
    /// wrong.) Fails on a key already in the table: the restored state held it twice.
    pub fn index(&mut self, ids: Range<usize>) -> Result<()> {
        narrow(ids.end)?;
        let hashes = &self.hashes;
        self.table.reserve(ids.len(), |&id| hashes[id as usize]);
        let buckets = (self.table.capacity() / 7 * 8).next_power_of_two();
        let bits = buckets.trailing_zeros();
        let shift = bits.saturating_sub(INDEX_RUNS_BITS);
        let run = |hashed: u64| (hashed as usize & (buckets - 1)) >> shift;
        let mut sorted = vec![(0, 0); ids.len().min(INDEX_CHUNK)];
        let end = ids.end;
        for chunk in ids.step_by(INDEX_CHUNK).map(|start| start..(start + INDEX_CHUNK).min(end)) {
            // A counting sort of the chunk's (hash, id) by run.
            let mut starts = vec![0; (buckets >> shift) + 1];
            for id in chunk.clone() {
                starts[run(hashes[id]) + 1] += 1;
            }
            for r in 1..starts.len() {
                starts[r] += starts[r - 1];
            }
            let sorted = &mut sorted[..chunk.len()];
            for id in chunk {
                let hashed = hashes[id];
                let at = &mut starts[run(hashed)];
                sorted[*at] = (hashed, id);
                *at += 1;
            }
            let keys = &self.keys;
            for &(hashed, id) in sorted.iter() {
                // The keys are compared only on equal hashes: reading one is a miss of its own.
                let same = |&other: &Id| hashes[other as usize] == hashed && keys.row(other as usize) == keys.row(id);
                if self.table.find(hashed, same).is_some() {
                    return Err(Error::Graph("restored state holds one group key twice".into()));
                }
                // Below `ids.end`, which fits.
                self.table.insert_unique(hashed, id as Id, |&id| hashes[id as usize]);
            }
        }
        Ok(())
    }

    /// Removes `id`'s key: a later row with that key gets a new id.
    pub fn remove(&mut self, id: usize) {
        if let Ok(entry) = self.table.find_entry(self.hashes[id], |&other| other as usize == id) {
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
        // Fewer ids than before, which fit.
        for (id, &hashed) in hashes.iter().enumerate() {
            table.insert_unique(hashed, id as Id, |&id: &Id| hashes[id as usize]);
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
        let ids: Vec<_> = (0..4).map(|r| keys.intern(&rows, r).unwrap()).collect();
        assert_eq!(ids, [(0, true), (1, true), (0, false), (2, true)]);
        // Removed: not found any more, and a new row with its key gets a new id.
        keys.remove(1);
        assert_eq!(keys.find(&rows, 1), None);
        assert_eq!(keys.intern(&rows, 1).unwrap(), (3, true));
        // Compaction keeps the live ids' keys, renumbered in order.
        keys.compact(&[true, false, true, true]);
        assert_eq!(keys.len(), 3);
        assert_eq!((keys.find(&rows, 0), keys.find(&rows, 3), keys.find(&rows, 1)), (Some(0), Some(1), Some(2)));
        let back = keys.columns(&[2, 0]).unwrap();
        assert_eq!(back[0].as_any().downcast_ref::<StringArray>().unwrap(), &StringArray::from(vec!["b", "a"]));
        assert_eq!(back[1].as_any().downcast_ref::<Int64Array>().unwrap(), &Int64Array::from(vec![1, 1]));
    }

    /// Ids are held in 32 bits: one that does not fit is refused, not cut short.
    #[test]
    fn an_id_past_32_bits_is_refused() {
        assert_eq!(narrow(Id::MAX as usize).unwrap(), Id::MAX);
        assert!(narrow(Id::MAX as usize + 1).is_err());
    }

    #[test]
    fn appended_keys_are_found_once_indexed_and_a_key_held_twice_is_refused() {
        let mut keys = GroupKeys::new(&[DataType::Utf8, DataType::Int64]).unwrap();
        let first = keys.encode(&columns(&[("a", 1)])).unwrap();
        assert_eq!(keys.intern(&first, 0).unwrap(), (0, true));
        // Enough keys for a table of many runs of buckets.
        let many: Vec<(String, i64)> = (0..100_000).map(|i| (format!("k{}", i % 1000), i / 1000)).collect();
        let many: Vec<(&str, i64)> = many.iter().map(|(k, i)| (k.as_str(), *i)).collect();
        let appended = keys.append_unindexed(&columns(&many)).unwrap();
        assert_eq!(appended, 1..100_001);
        let rows = keys.encode(&columns(&many)).unwrap();
        assert_eq!(keys.find(&rows, 5), None);
        keys.index(appended).unwrap();
        assert!((0..many.len()).all(|row| keys.find(&rows, row) == Some(row + 1)));
        assert_eq!(keys.find(&first, 0), Some(0));
        assert_eq!(keys.intern(&rows, 7).unwrap(), (8, false));

        let again = keys.append_unindexed(&columns(&[("b", 1), ("a", 1)])).unwrap();
        let error = keys.index(again).unwrap_err();
        assert!(error.to_string().contains("holds one group key twice"), "{error}");
    }
}
