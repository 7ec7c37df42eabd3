//! An incremental table read back. Its files form a chain: a base (`Full`), then for each
//! checkpoint after it the keys that checkpoint removed (`Deletes`) and the rows whose key it
//! changed (`Upserts`). Merged newest first, the latest row of each key wins and a removed key
//! stays removed unless a later checkpoint put it back, so the result holds the rows a full
//! snapshot at the chain's last checkpoint would hold.
//!
//! A key is a group of rows: a table may hold several rows of one key (a join's rows of one join
//! key, a top-N's kept rows of one partition), and a file's rows of a key replace every older
//! row of that key. An operator writes all the rows of each key it changed.

use datafusion::arrow::array::{ArrayRef, BooleanArray, BooleanBufferBuilder, UInt32Array};
use datafusion::arrow::compute::take;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{Row, RowConverter, Rows, SortField};
use hashbrown::HashTable;

use datafusion::common::hash_utils::{RandomState, create_hashes};

use crate::error::{Error, Result};
use crate::keep_rows::keep_rows;
use crate::manifest::FileRole;

/// One file of a chain, read.
#[derive(Debug, Clone)]
pub struct Link {
    pub role: FileRole,
    pub batches: Vec<RecordBatch>,
}

/// The rows `links` (oldest first) stand for: each key's rows of the latest file that holds
/// it, a key identified by the `key` columns. Keys are found by a hash of those columns, not
/// by the stored key hash: that one is the hash of the columns a table is routed by, which
/// many keys may share (a join's rows of one join key, each its own key by its row id).
pub fn merge(links: Vec<Link>, key: &[String]) -> Result<Vec<RecordBatch>> {
    if links.iter().all(|link| link.role.is_full()) && links.len() <= 1 {
        return Ok(links.into_iter().flat_map(|link| link.batches).collect());
    }
    // A file of removed keys hides older rows of them and has none of its own.
    Ok(latest(links, key, false)?.into_iter().filter(|(role, _)| *role != FileRole::Deletes).map(|(_, b)| b).collect())
}

/// A run of a chain's change files (oldest first, no base) as one change: the rows of each key
/// whose latest file upserts it, and the keys whose latest file removes them. Put in the run's
/// place, the two stand for the same rows over any base. For a chain whose changes repeat the
/// same keys: they shrink to one change per key, without rewriting the base.
pub fn merge_changes(links: Vec<Link>, key: &[String]) -> Result<MergedChanges> {
    if let Some(link) = links.iter().find(|link| link.role.is_full()) {
        return Err(Error::Chain(format!("a run of changes holds a {:?} file", link.role)));
    }
    let mut merged = MergedChanges::default();
    for (role, batch) in latest(links, key, true)? {
        match role {
            FileRole::Deletes => merged.deletes.push(batch),
            _ => merged.upserts.push(batch),
        }
    }
    Ok(merged)
}

/// What [`merge_changes`] leaves of a run of changes.
#[derive(Debug, Default)]
pub struct MergedChanges {
    pub upserts: Vec<RecordBatch>,
    /// The removed keys, as the run's files of deletes hold them.
    pub deletes: Vec<RecordBatch>,
}

/// Each key's rows of the latest file that holds it, oldest file first, with the role of the
/// file they come from. The oldest file's removed keys are only looked at with `removed_too`
/// (a base has none, and under a base they hide nothing).
fn latest(links: Vec<Link>, key: &[String], removed_too: bool) -> Result<Vec<(FileRole, RecordBatch)>> {
    // Newest first, each batch of the newer files with its keys encoded once; the table of
    // keys seen refers to them by (part, row), so a key costs no allocation of its own. The
    // oldest file is only looked up, and only its rows whose hash a newer key has are encoded:
    // a large base under small deltas costs little more than reading it.
    let files = links.len();
    let mut parts: Vec<Part> = Vec::new();
    let mut converter: Option<RowConverter> = None;
    for (newer, link) in links.into_iter().rev().enumerate() {
        for batch in link.batches {
            let columns = key_columns(&batch, key)?;
            if converter.is_none() {
                let fields = columns.iter().map(|c| SortField::new(c.data_type().clone())).collect();
                converter = Some(RowConverter::new(fields)?);
            }
            let Some(converter) = &converter else { continue };
            let mut hashes = vec![0; batch.num_rows()];
            create_hashes(&columns, &RandomState::default(), &mut hashes)
                .map_err(|e| Error::KeyHashing(e.to_string()))?;
            let oldest = newer + 1 == files;
            let keys = match oldest {
                true => None,
                false => Some(converter.convert_columns(&columns)?),
            };
            parts.push(Part { batch, role: link.role, file: newer, keys, hashes });
        }
    }
    let newer_rows: usize = parts.iter().filter(|part| part.keys.is_some()).map(|part| part.batch.num_rows()).sum();
    let mut seen: HashTable<(u32, u32)> = HashTable::with_capacity(newer_rows);
    let mut keeps = Vec::with_capacity(parts.len());
    for (index, part) in parts.iter().enumerate() {
        if part.keys.is_none() && part.role == FileRole::Deletes && !removed_too {
            keeps.push(Keep::Nothing);
            continue;
        }
        let keep = match &part.keys {
            Some(keys) => {
                let mut latest = BooleanBufferBuilder::new(part.batch.num_rows());
                for row in 0..part.batch.num_rows() {
                    let hash = part.hashes[row];
                    let key = keys.row(row);
                    let found = seen.find(hash, |&(p, r)| parts[p as usize].key(r as usize, hash) == Some(key));
                    // A key first seen in this file: its other rows here are kept with it.
                    let superseded = found.is_some_and(|&(p, _)| parts[p as usize].file != part.file);
                    if found.is_none() {
                        let entry = (index as u32, row as u32);
                        seen.insert_unique(hash, entry, |&(p, r)| parts[p as usize].hashes[r as usize]);
                    }
                    latest.append(!superseded);
                }
                Keep::Rows(BooleanArray::new(latest.finish(), None))
            }
            None => match &converter {
                Some(converter) => match superseded_in_base(part, &parts, &seen, converter, key)? {
                    Some(superseded) => Keep::Rows(datafusion::arrow::compute::not(&superseded)?),
                    None => Keep::All,
                },
                None => Keep::All,
            },
        };
        keeps.push(keep);
    }
    drop(seen);
    let mut kept = Vec::new();
    for (part, keep) in parts.into_iter().zip(keeps) {
        match keep {
            Keep::Nothing => {}
            Keep::All => kept.push((part.role, part.batch)),
            Keep::Rows(rows) => {
                let latest = keep_rows(part.batch, &rows)?;
                if latest.num_rows() > 0 {
                    kept.push((part.role, latest));
                }
            }
        }
    }
    kept.reverse();
    Ok(kept)
}

/// Which rows of `base` (a batch of the chain's oldest file) a newer file's key supersedes, or
/// `None` when none is. Only the rows whose hash a newer key has are encoded and compared.
fn superseded_in_base(
    base: &Part,
    parts: &[Part],
    seen: &HashTable<(u32, u32)>,
    converter: &RowConverter,
    key: &[String],
) -> Result<Option<BooleanArray>> {
    let same_hash = |hash: u64| seen.find(hash, |&(p, r)| parts[p as usize].hashes[r as usize] == hash).is_some();
    let candidates: Vec<u32> =
        (0..base.batch.num_rows() as u32).filter(|&row| same_hash(base.hashes[row as usize])).collect();
    if candidates.is_empty() {
        return Ok(None);
    }
    let indices = UInt32Array::from(candidates);
    let columns: Vec<ArrayRef> = key_columns(&base.batch, key)?
        .iter()
        .map(|c| take(c, &indices, None))
        .collect::<std::result::Result<_, _>>()?;
    let keys = converter.convert_columns(&columns)?;
    let mut superseded = vec![false; base.batch.num_rows()];
    for (candidate, &row) in indices.values().iter().enumerate() {
        let hash = base.hashes[row as usize];
        let key = keys.row(candidate);
        superseded[row as usize] =
            seen.find(hash, |&(p, r)| parts[p as usize].key(r as usize, hash) == Some(key)).is_some();
    }
    Ok(Some(BooleanArray::from(superseded)))
}

/// The `key` columns of `batch`.
fn key_columns(batch: &RecordBatch, key: &[String]) -> Result<Vec<ArrayRef>> {
    key.iter()
        .map(|name| batch.column_by_name(name).cloned().ok_or_else(|| Error::MissingKeyColumn(name.clone())))
        .collect()
}

/// What a part leaves in the merged table.
enum Keep {
    Nothing,
    All,
    Rows(BooleanArray),
}

/// One batch of a chain's file, with its keys' hashes, and its keys encoded unless it is of
/// the chain's first file (its base).
struct Part {
    batch: RecordBatch,
    role: FileRole,
    /// The file it was read from, numbered newest first.
    file: usize,
    keys: Option<Rows>,
    /// Each row's hash of its key columns.
    hashes: Vec<u64>,
}

impl Part {
    /// Row `row`'s encoded key, if its hash is `hash` (a cheap test first).
    fn key(&self, row: usize, hash: u64) -> Option<Row<'_>> {
        match self.hashes[row] == hash {
            true => self.keys.as_ref().map(|keys| keys.row(row)),
            false => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Int64Array, StringArray, UInt64Array};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    use super::*;
    use crate::KEY_HASH_COLUMN;

    /// The stored key hash: one value for all rows, as in a table whose rows share the column
    /// they are routed by; the merge does not go by it.
    fn hashes(n: usize) -> ArrayRef {
        Arc::new(UInt64Array::from(vec![7; n]))
    }

    fn rows(pairs: &[(&str, i64)]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, false),
            Field::new("v", DataType::Int64, false),
            Field::new(KEY_HASH_COLUMN, DataType::UInt64, false),
        ]));
        let keys = StringArray::from_iter_values(pairs.iter().map(|p| p.0));
        let values = Int64Array::from_iter_values(pairs.iter().map(|p| p.1));
        RecordBatch::try_new(schema, vec![Arc::new(keys), Arc::new(values), hashes(pairs.len())]).unwrap()
    }

    fn keys(names: &[&str]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, false),
            Field::new(KEY_HASH_COLUMN, DataType::UInt64, false),
        ]));
        let keys = StringArray::from_iter_values(names.iter().copied());
        RecordBatch::try_new(schema, vec![Arc::new(keys), hashes(names.len())]).unwrap()
    }

    fn link(role: FileRole, batch: RecordBatch) -> Link {
        Link { role, batches: vec![batch] }
    }

    fn pairs(batches: &[RecordBatch]) -> Vec<(String, i64)> {
        let mut out: Vec<(String, i64)> = batches
            .iter()
            .flat_map(|b| {
                let k = b.column(0).as_any().downcast_ref::<StringArray>().unwrap();
                let v = b.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
                (0..b.num_rows()).map(|i| (k.value(i).to_string(), v.value(i))).collect::<Vec<_>>()
            })
            .collect();
        out.sort();
        out
    }

    #[test]
    fn the_latest_row_of_each_key_wins_and_removed_keys_stay_removed() {
        let chain = vec![
            link(FileRole::Full, rows(&[("a", 1), ("b", 2), ("c", 3)])),
            link(FileRole::Deletes, keys(&["b"])),
            link(FileRole::Upserts, rows(&[("a", 10), ("d", 4)])),
            // Removed and put back within one checkpoint: the upsert wins.
            link(FileRole::Deletes, keys(&["c", "d"])),
            link(FileRole::Upserts, rows(&[("c", 30)])),
        ];
        let merged = merge(chain, &["k".to_string()]).unwrap();
        assert_eq!(pairs(&merged), [("a".into(), 10), ("c".into(), 30)]);
    }

    /// A file's rows of a key, several or one, replace all older rows of that key.
    #[test]
    fn a_key_with_several_rows_is_replaced_as_a_whole() {
        let chain = vec![
            link(FileRole::Full, rows(&[("a", 1), ("a", 2), ("b", 3), ("b", 4), ("c", 5)])),
            link(FileRole::Upserts, rows(&[("a", 10), ("c", 50), ("c", 51)])),
            link(FileRole::Deletes, keys(&["b", "b"])),
            link(FileRole::Upserts, rows(&[("c", 52), ("c", 53), ("d", 6), ("d", 6)])),
        ];
        let merged = merge(chain, &["k".to_string()]).unwrap();
        let expected = [("a", 10), ("c", 52), ("c", 53), ("d", 6), ("d", 6)].map(|(k, v)| (k.to_string(), v));
        assert_eq!(pairs(&merged), expected);
    }

    /// Merged, a run of changes keeps each key's latest rows or its removal, and put in the
    /// run's place over a base it stands for the rows the whole chain does.
    #[test]
    fn a_run_of_changes_merged_stands_for_the_run_over_a_base() {
        let base = || link(FileRole::Full, rows(&[("a", 1), ("b", 2), ("b", 3), ("c", 4), ("e", 5)]));
        let run = || {
            vec![
                link(FileRole::Deletes, keys(&["a", "b"])),
                link(FileRole::Upserts, rows(&[("c", 40), ("d", 50), ("d", 51)])),
                // Removed and put back, then removed again; changed twice.
                link(FileRole::Deletes, keys(&["b", "d"])),
                link(FileRole::Upserts, rows(&[("a", 10), ("c", 41), ("c", 42)])),
                link(FileRole::Deletes, keys(&["a"])),
                link(FileRole::Upserts, rows(&[("e", 60)])),
            ]
        };
        let key = ["k".to_string()];
        let merged = merge_changes(run(), &key).unwrap();
        let names = |batches: &[RecordBatch]| {
            let mut names: Vec<String> = batches
                .iter()
                .flat_map(|b| b.column(0).as_any().downcast_ref::<StringArray>().unwrap().iter().flatten())
                .map(str::to_string)
                .collect();
            names.sort();
            names
        };
        assert_eq!(names(&merged.deletes), ["a", "b", "d"]);
        assert_eq!(pairs(&merged.upserts), [("c", 41), ("c", 42), ("e", 60)].map(|(k, v)| (k.to_string(), v)));
        let whole = merge([vec![base()], run()].concat(), &key).unwrap();
        let compacted = vec![
            base(),
            Link { role: FileRole::Deletes, batches: merged.deletes },
            Link { role: FileRole::Upserts, batches: merged.upserts },
        ];
        assert_eq!(pairs(&merge(compacted, &key).unwrap()), pairs(&whole));
        assert_eq!(pairs(&whole), [("c", 41), ("c", 42), ("e", 60)].map(|(k, v)| (k.to_string(), v)));
        assert!(merge_changes(vec![base()], &key).is_err(), "a base is not a change");
    }

    #[test]
    fn a_missing_key_column_is_named() {
        let chain = vec![link(FileRole::Full, rows(&[("a", 1)])), link(FileRole::Upserts, rows(&[("a", 2)]))];
        let error = merge(chain, &["nope".to_string()]).unwrap_err();
        assert!(error.to_string().contains("'nope'"), "{error}");
    }
}
