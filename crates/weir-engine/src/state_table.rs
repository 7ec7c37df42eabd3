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
