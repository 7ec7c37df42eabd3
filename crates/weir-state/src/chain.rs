//! An incremental table read back. Its files form a chain: a base (`Full`), then for each
//! checkpoint after it the keys that checkpoint removed (`Deletes`) and the rows whose key it
//! changed (`Upserts`). Merged newest first, the latest row of each key wins and a removed key
//! stays removed unless a later checkpoint put it back, so the result holds the rows a full
//! snapshot at the chain's last checkpoint would hold.
//!
//! Within one file a key appears at most once (the operator writes each changed key once).

use std::collections::HashSet;

use datafusion::arrow::array::{ArrayRef, BooleanArray};
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, SortField};

use crate::error::{Error, Result};
use crate::manifest::FileRole;

/// One file of a chain, read.
#[derive(Debug, Clone)]
pub struct Link {
    pub role: FileRole,
    pub batches: Vec<RecordBatch>,
}

/// The rows `links` (oldest first) stand for, each key's latest, identified by the `key`
/// columns.
pub fn merge(links: Vec<Link>, key: &[String]) -> Result<Vec<RecordBatch>> {
    if links.iter().all(|link| link.role.is_full()) && links.len() <= 1 {
        return Ok(links.into_iter().flat_map(|link| link.batches).collect());
    }
    let mut seen: HashSet<Box<[u8]>> = HashSet::new();
    let mut kept = Vec::new();
    for link in links.into_iter().rev() {
        for batch in link.batches {
            let columns: Vec<ArrayRef> = key
                .iter()
                .map(|name| batch.column_by_name(name).cloned().ok_or_else(|| Error::MissingKeyColumn(name.clone())))
                .collect::<Result<_>>()?;
            let converter = RowConverter::new(columns.iter().map(|c| SortField::new(c.data_type().clone())).collect())?;
            let rows = converter.convert_columns(&columns)?;
            let newest: BooleanArray = rows.iter().map(|row| Some(seen.insert(row.as_ref().into()))).collect();
            if link.role != FileRole::Deletes {
                let latest = filter_record_batch(&batch, &newest)?;
                if latest.num_rows() > 0 {
                    kept.push(latest);
                }
            }
        }
    }
    kept.reverse();
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn rows(pairs: &[(&str, i64)]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, false),
            Field::new("v", DataType::Int64, false),
        ]));
        let keys = StringArray::from_iter_values(pairs.iter().map(|p| p.0));
        let values = Int64Array::from_iter_values(pairs.iter().map(|p| p.1));
        RecordBatch::try_new(schema, vec![Arc::new(keys), Arc::new(values)]).unwrap()
    }

    fn keys(names: &[&str]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Utf8, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(StringArray::from_iter_values(names.iter().copied()))]).unwrap()
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

    #[test]
    fn a_missing_key_column_is_named() {
        let chain = vec![link(FileRole::Full, rows(&[("a", 1)])), link(FileRole::Upserts, rows(&[("a", 2)]))];
        let error = merge(chain, &["nope".to_string()]).unwrap_err();
        assert!(error.to_string().contains("'nope'"), "{error}");
    }
}
