//! Updating results as a changelog. An updating operator (a non-windowed aggregate, an outer
//! join) emits batches with one more column than its output schema: [`CHANGE_COLUMN`], the kind
//! of each row's change, as Flink writes them: `+I` insert, `-U` the row an update replaces,
//! `+U` the row it becomes, `-D` delete. Rows marked `-U`/`-D` retract an earlier row of the same
//! values; `+I`/`+U` add one. An upsert sink keys by the primary key and keeps `+I`/`+U`/`-D`;
//! a Debezium sink pairs `-U` with `+U`.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::{Error, Result};

/// The name of the change-kind column of a changelog batch (always its last column).
pub const CHANGE_COLUMN: &str = "_change";

/// The kind of one row's change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Change {
    Insert,
    UpdateBefore,
    UpdateAfter,
    Delete,
}

impl Change {
    pub fn code(self) -> &'static str {
        match self {
            Change::Insert => "+I",
            Change::UpdateBefore => "-U",
            Change::UpdateAfter => "+U",
            Change::Delete => "-D",
        }
    }

    pub fn from_code(code: &str) -> Option<Change> {
        match code {
            "+I" => Some(Change::Insert),
            "-U" => Some(Change::UpdateBefore),
            "+U" => Some(Change::UpdateAfter),
            "-D" => Some(Change::Delete),
            _ => None,
        }
    }

    /// Whether the row is taken back (`-U`, `-D`) rather than added.
    pub fn is_retraction(self) -> bool {
        matches!(self, Change::UpdateBefore | Change::Delete)
    }
}

/// `schema` with the change column appended.
pub fn changelog_schema(schema: &Schema) -> SchemaRef {
    let mut fields: Vec<Arc<Field>> = schema.fields().iter().cloned().collect();
    fields.push(Arc::new(Field::new(CHANGE_COLUMN, DataType::Utf8, false)));
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// Whether batches of `schema` carry change kinds.
pub fn is_changelog(schema: &Schema) -> bool {
    schema.fields().last().is_some_and(|f| f.name() == CHANGE_COLUMN)
}

/// The change column of a changelog batch.
pub fn change_column(batch: &RecordBatch) -> Option<ArrayRef> {
    if is_changelog(&batch.schema()) { batch.columns().last().cloned() } else { None }
}

/// The change kind of every row: all inserts for a batch without a change column.
pub fn changes(batch: &RecordBatch) -> Result<Vec<Change>> {
    let Some(column) = change_column(batch) else { return Ok(vec![Change::Insert; batch.num_rows()]) };
    let codes = column
        .as_any()
        .downcast_ref::<StringArray>()
        .ok_or_else(|| Error::Graph(format!("the '{CHANGE_COLUMN}' column holds {}, not text", column.data_type())))?;
    (0..codes.len())
        .map(|i| {
            Change::from_code(codes.value(i))
                .ok_or_else(|| Error::Graph(format!("'{}' is not a change kind", codes.value(i))))
        })
        .collect()
}

/// The change column for `changes`.
pub fn change_array(changes: &[Change]) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(changes.iter().map(|c| c.code())))
}
