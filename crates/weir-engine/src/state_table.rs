//! The layout of a keyed state table, declared once by the operator that keeps it and used
//! both ways: the snapshot's schema (the key hash first, added here, as every keyed table has
//! it so a restore can split rows among subtasks) and the restored batches, read column by
//! column *by name* and checked for type, so a snapshot is never misread by position.

use datafusion::arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow::datatypes::{FieldRef, SchemaRef};
use weir_state::keyed_schema;

use crate::{Error, Result};

/// A keyed state table's columns (after the key hash), in the order its snapshot writes them.
#[derive(Debug, Clone)]
pub struct KeyedTable {
    schema: SchemaRef,
}

impl KeyedTable {
    pub fn new<F: Into<FieldRef>>(fields: impl IntoIterator<Item = F>) -> Self {
        Self { schema: keyed_schema(fields) }
    }

    /// The snapshot's schema: the key hash, then the declared columns.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The declared columns, without the key hash.
    pub fn fields(&self) -> &[FieldRef] {
        &self.schema.fields()[1..]
    }

    /// The restored columns of `fields` (some of [`Self::fields`]), by name.
    pub fn read(&self, batch: &RecordBatch, fields: &[FieldRef]) -> Result<Vec<ArrayRef>> {
        fields.iter().map(|field| self.column(batch, field)).collect()
    }

    /// The restored columns of every declared field, by name.
    pub fn read_all(&self, batch: &RecordBatch) -> Result<Vec<ArrayRef>> {
        self.read(batch, self.fields())
    }

    fn column(&self, batch: &RecordBatch, field: &FieldRef) -> Result<ArrayRef> {
        let name = field.name();
        let Some(column) = batch.column_by_name(name) else {
            return Err(Error::Graph(format!("restored state: column '{name}' is missing")));
        };
        if column.data_type() != field.data_type() {
            return Err(Error::Graph(format!(
                "restored state: column '{name}' is {}, expected {}",
                column.data_type(),
                field.data_type()
            )));
        }
        Ok(column.clone())
    }
}

/// Every row of snapshot `batches` as text, sorted: two snapshots hold the same rows iff their
/// lines are equal (how tests compare a restore from base + changes with a full snapshot).
#[cfg(test)]
pub(crate) fn row_lines(batches: &[RecordBatch]) -> Vec<String> {
    let mut lines: Vec<String> = batches
        .iter()
        .flat_map(|batch| {
            (0..batch.num_rows()).map(move |row| {
                let values = batch.columns().iter().map(|c| {
                    datafusion::common::ScalarValue::try_from_array(c, row)
                        .map_or_else(|e| e.to_string(), |v| v.to_string())
                });
                values.collect::<Vec<_>>().join(",")
            })
        })
        .collect();
    lines.sort();
    lines
}

/// A test's record of an operator's incremental snapshots: each table's chain (a base, then
/// removed keys and changed rows), merged at the end as a restore merges it.
#[cfg(test)]
pub(crate) struct Chains {
    chains: Vec<(String, Vec<weir_state::chain::Link>, Vec<String>)>,
}

#[cfg(test)]
impl Chains {
    /// Chains starting from a full snapshot.
    pub(crate) fn new(base: Vec<crate::StateTable>) -> Self {
        let mut chains = Self { chains: Vec::new() };
        chains.push(base);
        chains
    }

    /// Adds a snapshot's tables: a change goes on its table's chain, a whole table starts it
    /// again. Returns per table the rows written and the keys removed (`None` when whole).
    pub(crate) fn push(&mut self, tables: Vec<crate::StateTable>) -> Vec<(usize, Option<usize>)> {
        use weir_state::FileRole;
        use weir_state::chain::Link;
        let mut written = Vec::new();
        for table in tables {
            let rows = table.batches.iter().map(RecordBatch::num_rows).sum();
            let position = self.chains.iter().position(|(name, _, _)| *name == table.name);
            let (links, removed) = match table.delta {
                Some(delta) => {
                    let removed = delta.deleted.num_rows();
                    let links = vec![
                        Link { role: FileRole::Deletes, batches: vec![delta.deleted] },
                        Link { role: FileRole::Upserts, batches: table.batches },
                    ];
                    let Some(position) = position else { panic!("a change of {} without a base", table.name) };
                    self.chains[position].2 = delta.key;
                    self.chains[position].1.extend(links);
                    (rows, Some(removed))
                }
                None => {
                    let base = vec![Link { role: FileRole::Full, batches: table.batches }];
                    match position {
                        Some(position) => self.chains[position].1 = base,
                        None => self.chains.push((table.name, base, Vec::new())),
                    }
                    (rows, None)
                }
            };
            written.push((links, removed));
        }
        written
    }

    /// Asserts that each chain, merged, holds the rows of `full`'s table of its name.
    pub(crate) fn assert_match(self, full: Vec<crate::StateTable>) {
        for (name, links, key) in self.chains {
            let Some(full) = full.iter().find(|t| t.name == name) else {
                panic!("no table {name} in the full snapshot")
            };
            let merged = weir_state::chain::merge(links, &key).unwrap();
            assert_eq!(row_lines(&merged), row_lines(&full.batches), "table {name}");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Int64Array, StringArray, UInt64Array};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    #[test]
    fn columns_are_read_by_name_whatever_their_position() {
        let table = KeyedTable::new([Field::new("k", DataType::Utf8, true), Field::new("n", DataType::Int64, true)]);
        assert_eq!(table.schema().field(0).name(), weir_state::KEY_HASH_COLUMN);
        // A snapshot written with its columns in another order still reads right.
        let shuffled = Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int64, true),
            Field::new(weir_state::KEY_HASH_COLUMN, DataType::UInt64, false),
            Field::new("k", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            shuffled,
            vec![
                Arc::new(Int64Array::from(vec![7])),
                Arc::new(UInt64Array::from(vec![1])),
                Arc::new(StringArray::from(vec!["a"])),
            ],
        )
        .unwrap();
        let columns = table.read_all(&batch).unwrap();
        assert_eq!(columns[0].as_any().downcast_ref::<StringArray>().unwrap().value(0), "a");
        assert_eq!(columns[1].as_any().downcast_ref::<Int64Array>().unwrap().value(0), 7);
        // A missing column or one of another type is an error naming it.
        let other = KeyedTable::new([Field::new("k", DataType::Int64, true)]);
        assert!(other.read_all(&batch).unwrap_err().to_string().contains("column 'k' is Utf8, expected Int64"));
        let missing = KeyedTable::new([Field::new("m", DataType::Int64, true)]);
        assert!(missing.read_all(&batch).unwrap_err().to_string().contains("column 'm' is missing"));
    }
}
