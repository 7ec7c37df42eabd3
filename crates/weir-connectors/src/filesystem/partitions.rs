//! Hive-style partition directories, as Flink's filesystem connector writes them: a table
//! `PARTITIONED BY (dt, hr)` keeps each row under `dt=<value>/hr=<value>/`, and the files hold
//! the other columns only. Values are written as text with the characters that would break a
//! path (`/`, `=`, `%`, control characters, ...) escaped as `%XX`; NULL is
//! `__DEFAULT_PARTITION__`. Reading, the values are taken from the path and cast back to the
//! columns' types.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, StringArray, UInt32Array, new_null_array};
use datafusion::arrow::compute::{cast, take};
use datafusion::arrow::datatypes::{DataType, FieldRef, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;

use crate::{Error, Result};

/// The directory name of a NULL partition value (Flink's `partition.default-name`).
const NULL_VALUE: &str = "__DEFAULT_PARTITION__";

/// How a table's rows map to partition directories.
#[derive(Debug, Clone)]
pub struct HivePartitions {
    table: SchemaRef,
    /// The partition columns: (index in the table, field), in the PARTITIONED BY order.
    fields: Vec<(usize, FieldRef)>,
    /// The columns the files hold: the table's without the partition columns.
    files: SchemaRef,
}

impl HivePartitions {
    /// `None` without partition columns; an error naming a column the table does not have, or
    /// when nothing would be left for the files.
    pub fn new(table: &SchemaRef, names: &[String]) -> Result<Option<Self>> {
        if names.is_empty() {
            return Ok(None);
        }
        let mut fields = Vec::new();
        for name in names {
            let index = table
                .index_of(name)
                .map_err(|_| Error::Format(format!("partition column '{name}' is not a column of the table")))?;
            fields.push((index, Arc::new(table.field(index).clone())));
        }
        let files: Vec<FieldRef> = table.fields().iter().filter(|f| !names.contains(f.name())).cloned().collect();
        if files.is_empty() {
            return Err(Error::Format("every column is a partition column: the files would hold nothing".into()));
        }
        Ok(Some(Self { table: table.clone(), fields, files: Arc::new(Schema::new(files)) }))
    }

    /// The columns the files hold.
    pub fn file_schema(&self) -> &SchemaRef {
        &self.files
    }

    /// The rows of `batch` (the table's columns) by partition directory (`dt=x/hr=y`), each
    /// with the file columns only.
    pub fn split(&self, batch: &RecordBatch) -> Result<Vec<(String, RecordBatch)>> {
        let values = self
            .fields
            .iter()
            .map(|(index, _)| {
                let text = cast(batch.column(*index), &DataType::Utf8)?;
                text.as_any()
                    .downcast_ref::<StringArray>()
                    .cloned()
                    .ok_or_else(|| Error::Format("a partition value is not text".into()))
            })
            .collect::<Result<Vec<StringArray>>>()?;
        let mut rows: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for row in 0..batch.num_rows() {
            let directory = self
                .fields
                .iter()
                .zip(&values)
                .map(|((_, field), values)| {
                    let value = if values.is_null(row) { NULL_VALUE.to_string() } else { escape(values.value(row)) };
                    format!("{}={value}", field.name())
                })
                .collect::<Vec<_>>()
                .join("/");
            rows.entry(directory).or_default().push(row as u32);
        }
        let kept: Vec<usize> = (0..batch.num_columns()).filter(|i| self.fields.iter().all(|(p, _)| p != i)).collect();
        let mut parts = Vec::with_capacity(rows.len());
        for (directory, indices) in rows {
            let indices = UInt32Array::from(indices);
            let columns = kept
                .iter()
                .map(|&c| take(batch.column(c), &indices, None))
                .collect::<std::result::Result<Vec<ArrayRef>, _>>()?;
            parts.push((directory, RecordBatch::try_new(self.files.clone(), columns)?));
        }
        Ok(parts)
    }

    /// The partition values of `directory` (`dt=x/hr=y`), in the PARTITIONED BY order (NULL as
    /// Flink's default partition name).
    pub fn values(&self, directory: &str) -> Result<Vec<(String, String)>> {
        let found: BTreeMap<&str, &str> = directory.split('/').filter_map(|part| part.split_once('=')).collect();
        self.fields
            .iter()
            .map(|(_, field)| {
                let value = found.get(field.name().as_str()).copied().unwrap_or(NULL_VALUE);
                let value = if value == NULL_VALUE { value.to_string() } else { unescape(value)? };
                Ok((field.name().clone(), value))
            })
            .collect()
    }

    /// The table's rows of a file's `batch` found under `directory` (relative to the table's
    /// root): the partition columns filled in from the directory names.
    pub fn complete(&self, directory: &str, batch: RecordBatch) -> Result<RecordBatch> {
        let found: BTreeMap<&str, &str> = directory.split('/').filter_map(|part| part.split_once('=')).collect();
        let rows = batch.num_rows();
        let mut file_columns = batch.columns().iter();
        let mut columns = Vec::with_capacity(self.table.fields().len());
        for (index, field) in self.table.fields().iter().enumerate() {
            let column = match self.fields.iter().find(|(p, _)| *p == index) {
                Some(_) => match found.get(field.name().as_str()) {
                    Some(value) if *value != NULL_VALUE => {
                        let text: ArrayRef = Arc::new(StringArray::from(vec![unescape(value)?; rows]));
                        cast(&text, field.data_type()).map_err(|e| {
                            Error::Format(format!(
                                "partition '{}={value}' is not {}: {e}",
                                field.name(),
                                field.data_type()
                            ))
                        })?
                    }
                    _ => new_null_array(field.data_type(), rows),
                },
                None => file_columns.next().cloned().ok_or_else(|| Error::Format("a file lost a column".into()))?,
            };
            columns.push(column);
        }
        Ok(RecordBatch::try_new(self.table.clone(), columns)?)
    }
}

/// A partition value as one path segment.
fn escape(value: &str) -> String {
    let mut escaped = String::with_capacity(value.len());
    for c in value.chars() {
        if c.is_control()
            || matches!(c, '/' | '\\' | '=' | '%' | ':' | '#' | '?' | '*' | '"' | '\'' | '[' | ']' | '^' | '{')
        {
            let mut bytes = [0; 4];
            for byte in c.encode_utf8(&mut bytes).bytes() {
                escaped.push_str(&format!("%{byte:02X}"));
            }
        } else {
            escaped.push(c);
        }
    }
    if escaped.is_empty() || escaped.starts_with('.') || escaped.starts_with('_') {
        // A segment the listing would skip as hidden: its first character escaped.
        let first = escaped.chars().next().map_or(String::new(), |c| format!("%{:02X}", c as u32));
        return first + &escaped[escaped.chars().next().map_or(0, char::len_utf8)..];
    }
    escaped
}

fn unescape(segment: &str) -> Result<String> {
    let bad = || Error::Format(format!("a bad escape in partition value '{segment}'"));
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = segment.get(i + 1..i + 3).ok_or_else(bad)?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| Error::Format(format!("partition value '{segment}' is not UTF-8")))
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::Field;

    use super::*;

    fn table() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("dt", DataType::Utf8, true),
            Field::new("hr", DataType::Int64, true),
        ]))
    }

    #[test]
    fn rows_go_to_their_directories_and_come_back_whole() {
        let partitioning = HivePartitions::new(&table(), &["dt".into(), "hr".into()]).unwrap().unwrap();
        let batch = RecordBatch::try_new(
            table(),
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3, 4])),
                Arc::new(StringArray::from(vec![Some("2023-11-14"), Some("a/b=c%"), None, Some("2023-11-14")])),
                Arc::new(Int64Array::from(vec![Some(22), Some(1), Some(2), Some(22)])),
            ],
        )
        .unwrap();
        let parts = partitioning.split(&batch).unwrap();
        let directories: Vec<&str> = parts.iter().map(|(d, _)| d.as_str()).collect();
        assert_eq!(directories, ["dt=2023-11-14/hr=22", "dt=__DEFAULT_PARTITION__/hr=2", "dt=a%2Fb%3Dc%25/hr=1"]);
        assert_eq!(parts[0].1.num_rows(), 2);
        assert_eq!(parts[0].1.schema().fields().len(), 1, "files hold the other columns");
        let whole = partitioning.complete(&parts[2].0, parts[2].1.clone()).unwrap();
        assert_eq!(whole, batch.slice(1, 1));
        let whole = partitioning.complete(&parts[1].0, parts[1].1.clone()).unwrap();
        assert_eq!(whole, batch.slice(2, 1));
    }

    #[test]
    fn hidden_looking_values_and_mistakes() {
        assert_eq!(escape(".x"), "%2Ex");
        assert_eq!(escape("_x"), "%5Fx");
        assert_eq!(unescape("%2Ex").unwrap(), ".x");
        assert!(HivePartitions::new(&table(), &["nope".into()]).unwrap_err().to_string().contains("'nope'"));
        assert!(
            HivePartitions::new(&table(), &["id".into(), "dt".into(), "hr".into()])
                .unwrap_err()
                .to_string()
                .contains("nothing")
        );
        assert!(HivePartitions::new(&table(), &[]).unwrap().is_none());
    }
}
