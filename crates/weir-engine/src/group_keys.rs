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
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use hashbrown::HashTable;
use twox_hash::XxHash64;

use crate::error::{Error, Result};
use crate::key_bytes::KeyBytes;

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

/// Positions 0..`len` with their hashes (`hash_of`), ordered by the run of neighbouring
/// buckets each hash picks in a table of `buckets` buckets: a counting sort, so positions of one
/// run keep their order. (hashbrown picks a key's first bucket by the low bits of its hash;
/// were that to change, this order would only be slower, not wrong.)
fn by_bucket_run(len: usize, buckets: usize, hash_of: impl Fn(usize) -> u64, sorted: &mut Vec<(u64, u32)>) {
    let shift = buckets.trailing_zeros().saturating_sub(INDEX_RUNS_BITS);
    let run = |hashed: u64| (hashed as usize & (buckets - 1)) >> shift;
    let mut starts = vec![0; (buckets >> shift) + 1];
    for i in 0..len {
        starts[run(hash_of(i)) + 1] += 1;
    }
    for r in 1..starts.len() {
        starts[r] += starts[r - 1];
    }
    sorted.clear();
    sorted.resize(len, (0, 0));
    for i in 0..len {
        let hashed = hash_of(i);
        let at = &mut starts[run(hashed)];
        sorted[*at] = (hashed, i as u32);
        *at += 1;
    }
}

/// How many rows ahead [`GroupKeys::intern_all`] asks for the keys it will compare.
const KEYS_AHEAD: usize = 8;

fn hash(key: &[u8]) -> u64 {
    XxHash64::oneshot(SEED, key)
}

pub struct GroupKeys {
    converter: RowConverter,
    /// Every id's key, removed ones included until the next compaction.
    keys: KeyBytes,
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
        let keys = KeyBytes::new(&converter, types, 0, 0);
        Ok(Self { converter, keys, hashes: Vec::new(), table: HashTable::new() })
    }

    /// The number of ids handed out (live or removed).
    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    /// Makes room for `keys` more keys of about `key_bytes` each (a restore knows how many it
    /// brings back: growing by doubling would copy them and rehash the table as it goes).
    pub fn reserve(&mut self, keys: usize, key_bytes: usize) {
        self.keys.reserve(&self.converter, keys, key_bytes);
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
        let key = rows.row(row).data();
        let keys = &self.keys;
        self.table.find(hash(key), |&id| keys.row(id as usize) == key).map(|&id| id as usize)
    }

    /// The id of `rows`' row `row`, and whether it was made now (its key had no live id).
    pub fn intern(&mut self, rows: &Rows, row: usize) -> Result<(usize, bool)> {
        let key = rows.row(row);
        let hashed = hash(key.data());
        let keys = &self.keys;
        if let Some(&id) = self.table.find(hashed, |&id| keys.row(id as usize) == key.data()) {
            return Ok((id as usize, false));
        }
        let id = self.hashes.len();
        let narrow_id = narrow(id)?;
        self.keys.push(key)?;
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
        self.keys.append(&self.converter, columns)?;
        let keys = &self.keys;
        let end = start + columns.first().map_or(0, |c| c.len());
        self.hashes.extend((start..end).map(|id| hash(keys.row(id))));
        Ok(start..self.len())
    }

    /// Puts the keys of `ids` (appended by [`Self::append_unindexed`]) in the table, in the
    /// order of the buckets their hashes pick rather than by id, so that the table's memory is
    /// walked about once instead of missed twice per key ([`by_bucket_run`]). Fails on a key
    /// already in the table: the restored state held it twice.
    pub fn index(&mut self, ids: Range<usize>) -> Result<()> {
        narrow(ids.end)?;
        let hashes = &self.hashes;
        self.table.reserve(ids.len(), |&id| hashes[id as usize]);
        let buckets = self.buckets();
        let mut sorted = Vec::with_capacity(ids.len().min(INDEX_CHUNK));
        let end = ids.end;
        for chunk in ids.step_by(INDEX_CHUNK).map(|start| start..(start + INDEX_CHUNK).min(end)) {
            let hashes = &self.hashes;
            by_bucket_run(chunk.len(), buckets, |i| hashes[chunk.start + i], &mut sorted);
            let keys = &self.keys;
            for &(hashed, i) in sorted.iter() {
                let id = chunk.start + i as usize;
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

    /// The ids of every row of `parts`, by part and row, each with whether it was made now: what
    /// [`Self::intern`] gives row by row, but the keys are looked up in the order of the buckets
    /// their hashes pick (as [`Self::index`] inserts them). A restore applies millions of
    /// changed groups to a table of tens of millions, where a lookup in row order misses the
    /// cache at every step. Equal keys get their id in `parts`' order (the first of a key the
    /// table lacks makes it). Reserves room for every row as a new key.
    pub fn intern_all(&mut self, parts: &[Rows]) -> Result<Vec<Vec<(usize, bool)>>> {
        let at: Vec<(u32, u32)> = parts
            .iter()
            .enumerate()
            .flat_map(|(p, rows)| (0..rows.num_rows()).map(move |r| (p as u32, r as u32)))
            .collect();
        narrow(self.len() + at.len())?;
        let row_hashes: Vec<u64> = at.iter().map(|&(p, r)| hash(parts[p as usize].row(r as usize).data())).collect();
        let hashes = &self.hashes;
        self.table.reserve(at.len(), |&id| hashes[id as usize]);
        let mut sorted = Vec::with_capacity(at.len());
        by_bucket_run(at.len(), self.buckets(), |i| row_hashes[i], &mut sorted);
        // In bucket order, each row's candidate: the first id the table holds under its hash's
        // tag (hashbrown's 7 bits of it), nearly always the key itself when it is there.
        let mut candidates: Vec<Option<Id>> = vec![None; at.len()];
        for &(hashed, i) in &sorted {
            candidates[i as usize] = self.table.iter_hash(hashed).next().copied();
        }
        // In row order, each row's key against its candidate's, that one asked for some rows
        // ahead (a miss each, overlapped).
        let mut ids: Vec<Vec<(usize, bool)>> = parts.iter().map(|rows| vec![(0, false); rows.num_rows()]).collect();
        let mut unmatched = vec![false; at.len()];
        for (i, &(p, r)) in at.iter().enumerate() {
            if let Some(&Some(ahead)) = candidates.get(i + KEYS_AHEAD) {
                self.keys.prefetch(ahead as usize);
            }
            let key = parts[p as usize].row(r as usize).data();
            match candidates[i] {
                Some(candidate) if self.keys.row(candidate as usize) == key => {
                    ids[p as usize][r as usize] = (candidate as usize, false);
                }
                _ => unmatched[i] = true,
            }
        }
        // In bucket order again, the rest: not held, another key under the same tag, or a key
        // that an earlier row of `parts` makes.
        for &(hashed, i) in sorted.iter().filter(|&&(_, i)| unmatched[i as usize]) {
            let (p, r) = at[i as usize];
            let key = parts[p as usize].row(r as usize);
            let keys = &self.keys;
            let id = match self.table.find(hashed, |&id| keys.row(id as usize) == key.data()) {
                Some(&id) => (id as usize, false),
                None => {
                    let id = self.hashes.len();
                    self.keys.push(key)?;
                    self.hashes.push(hashed);
                    let hashes = &self.hashes;
                    // Below `len() + at.len()`, which fits.
                    self.table.insert_unique(hashed, id as Id, |&id| hashes[id as usize]);
                    (id, true)
                }
            };
            ids[p as usize][r as usize] = id;
        }
        Ok(ids)
    }

    /// The table's buckets (hashbrown keeps at most 7 entries in 8 buckets, a power of two).
    fn buckets(&self) -> usize {
        (self.table.capacity() / 7 * 8).next_power_of_two()
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
        let keys = self.keys.kept(&self.converter, keep, kept);
        let mut hashes = Vec::with_capacity(kept);
        for (id, _) in keep.iter().enumerate().filter(|(_, k)| **k) {
            hashes.push(self.hashes[id]);
        }
        let mut table = HashTable::with_capacity(kept);
        // Fewer ids than before, which fit.
        for (id, &hashed) in hashes.iter().enumerate() {
            table.insert_unique(hashed, id as Id, |&id: &Id| hashes[id as usize]);
        }
        (self.keys, self.hashes, self.table) = (keys, hashes, table);
    }

    #[cfg(test)]
    pub(crate) fn key_bytes(&self) -> &KeyBytes {
        &self.keys
    }

    /// The key columns of `ids`, in that order.
    pub fn columns(&self, ids: &[usize]) -> Result<Vec<ArrayRef>> {
        self.keys.columns(&self.converter, ids)
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

    /// Interned in bulk, out of row order: what interning row by row gives, by part and row.
    #[test]
    fn keys_interned_all_at_once_get_what_interning_row_by_row_gives() {
        let existing: Vec<(&str, i64)> = (0..20_000).map(|i| ("k3", i)).collect();
        let made = || {
            let mut keys = GroupKeys::new(&[DataType::Utf8, DataType::Int64]).unwrap();
            let rows = keys.encode(&columns(&existing)).unwrap();
            for row in 0..rows.num_rows() {
                keys.intern(&rows, row).unwrap();
            }
            keys
        };
        let (mut bulk, mut one_by_one) = (made(), made());
        // Keys already held, keys new in a part and met again in a later one, an empty part.
        let parts: Vec<Vec<(String, i64)>> = [0..50_000, 40_000..90_000, 0..10, 0..0]
            .into_iter()
            .map(|range| range.map(|i| (format!("k{}", i % 7), i)).collect())
            .collect();
        let encoded = |keys: &GroupKeys| -> Vec<Rows> {
            let part_columns =
                |part: &Vec<(String, i64)>| columns(&part.iter().map(|(k, i)| (k.as_str(), *i)).collect::<Vec<_>>());
            parts.iter().map(|part| keys.encode(&part_columns(part)).unwrap()).collect()
        };
        let rows = encoded(&one_by_one);
        let want: Vec<Vec<(usize, bool)>> = rows
            .iter()
            .map(|part| (0..part.num_rows()).map(|row| one_by_one.intern(part, row).unwrap()).collect())
            .collect();
        let got = bulk.intern_all(&encoded(&bulk)).unwrap();
        assert_eq!(got.iter().map(Vec::len).collect::<Vec<_>>(), [50_000, 50_000, 10, 0]);
        // New keys are numbered in another order: compare what each id stands for.
        for (part, (got, want)) in got.iter().zip(&want).enumerate() {
            for (row, (&(id, new), &(other, other_new))) in got.iter().zip(want).enumerate() {
                assert_eq!(new, other_new, "part {part} row {row}");
                assert_eq!(bulk.columns(&[id]).unwrap(), one_by_one.columns(&[other]).unwrap());
            }
        }
        assert_eq!(bulk.len(), one_by_one.len());
    }
}
