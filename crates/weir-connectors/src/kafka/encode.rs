//! Arrow rows to Kafka records, in the sink's format.
//!
//! - `json`: one JSON object per row (append-only results); the key, if `key.fields` names
//!   columns, is the JSON object of those columns.
//! - `upsert`: key from the primary key (`key.fields`, required); `+I`/`+U` write the row,
//!   `-D` writes a tombstone, `-U` writes nothing (the `+U` after it replaces the value).
//! - `debezium_json`: `{"before": ..., "after": ..., "op": ...}` envelopes as Flink writes
//!   them: `+I`/`+U` are creates (`op` "c", `after` the row), `-U`/`-D` deletes (`op` "d",
//!   `before` the row).
//! - `raw`: the single column's bytes as the value.
//!
//! JSON is written by arrow-json's writer a batch at a time (never row by row through
//! serde values); its lines are the records.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, BinaryArray, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;

use crate::{Error, Result};
use weir_engine::changelog::{Change, changes, is_changelog};

use crate::csv_format::CsvFormat;
use crate::json_type::JsonColumnEncoders;

use super::producer_pool::OutRecord;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkFormat {
    Json,
    Raw,
    Upsert,
    DebeziumJson,
    /// One CSV row per record, append-only (Flink's `csv` format).
    Csv(CsvFormat),
}

impl SinkFormat {
    /// The format of a name other than `csv` (whose dialect comes from the table's options).
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "json" => Some(Self::Json),
            "raw" => Some(Self::Raw),
            "upsert" => Some(Self::Upsert),
            "debezium_json" => Some(Self::DebeziumJson),
            _ => None,
        }
    }

    /// Whether the format can carry an updating result (a changelog).
    pub fn takes_updates(&self) -> bool {
        matches!(self, Self::Upsert | Self::DebeziumJson)
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Encoder {
    format: SinkFormat,
    /// The table's columns: the rows are cast to them.
    schema: SchemaRef,
    key: Vec<usize>,
}

impl Encoder {
    pub(crate) fn new(format: SinkFormat, schema: SchemaRef, key_fields: &[String]) -> Result<Self> {
        let key = key_fields
            .iter()
            .map(|name| {
                schema
                    .index_of(name)
                    .map_err(|_| Error::Format(format!("key field '{name}' is not a column of the table")))
            })
            .collect::<Result<Vec<_>>>()?;
        if format == SinkFormat::Upsert && key.is_empty() {
            return Err(Error::Format(
                "format 'upsert' needs the primary key: option 'key.fields' (comma-separated columns)".into(),
            ));
        }
        if format == SinkFormat::Raw
            && !(schema.fields().len() == 1 && matches!(schema.field(0).data_type(), DataType::Utf8 | DataType::Binary))
        {
            return Err(Error::Format("format 'raw' needs a table of exactly one text or binary column".into()));
        }
        Ok(Self { format, schema, key })
    }

    pub(crate) fn encode(&self, batch: &RecordBatch) -> Result<Vec<OutRecord>> {
        let kinds = changes(batch)?;
        let width = batch.num_columns() - usize::from(is_changelog(&batch.schema()));
        if width != self.schema.fields().len() {
            return Err(Error::Format(format!("rows have {width} columns, the table {}", self.schema.fields().len())));
        }
        let columns = batch.columns()[..width]
            .iter()
            .zip(self.schema.fields())
            .map(|(c, f)| cast(c, f.data_type()))
            .collect::<std::result::Result<Vec<ArrayRef>, _>>()?;
        let rows = RecordBatch::try_new(self.schema.clone(), columns)?;
        let keys = if self.key.is_empty() { None } else { Some(json_lines(&rows.project(&self.key)?)?) };
        let key_of = |row: usize| keys.as_ref().map(|k| k[row].clone());
        match &self.format {
            SinkFormat::Csv(csv) => {
                if kinds.iter().any(|k| k.is_retraction()) {
                    return Err(Error::Format("format 'csv' received a retraction: the result is updating".into()));
                }
                let values = csv.lines(&rows).map_err(Error::Format)?;
                Ok(values.into_iter().enumerate().map(|(row, value)| record(key_of(row), Some(value))).collect())
            }
            SinkFormat::Raw => {
                let column = rows.column(0);
                let values: Vec<Option<Vec<u8>>> = if let Some(text) = column.as_any().downcast_ref::<StringArray>() {
                    text.iter().map(|v| v.map(|s| s.as_bytes().to_vec())).collect()
                } else if let Some(bytes) = column.as_any().downcast_ref::<BinaryArray>() {
                    bytes.iter().map(|v| v.map(<[u8]>::to_vec)).collect()
                } else {
                    return Err(Error::Format("format 'raw' needs a text or binary column".into()));
                };
                Ok(values.into_iter().enumerate().map(|(row, value)| record(key_of(row), value)).collect())
            }
            SinkFormat::Json => {
                if kinds.iter().any(|k| k.is_retraction()) {
                    return Err(Error::Format("format 'json' received a retraction: the result is updating".into()));
                }
                let values = json_lines(&rows)?;
                Ok(values.into_iter().enumerate().map(|(row, value)| record(key_of(row), Some(value))).collect())
            }
            SinkFormat::Upsert => {
                let values = json_lines(&rows)?;
                Ok(values
                    .into_iter()
                    .enumerate()
                    .filter_map(|(row, value)| match kinds[row] {
                        Change::Insert | Change::UpdateAfter => Some(record(key_of(row), Some(value))),
                        Change::Delete => Some(record(key_of(row), None)),
                        Change::UpdateBefore => None,
                    })
                    .collect())
            }
            SinkFormat::DebeziumJson => {
                let values = json_lines(&rows)?;
                Ok(values
                    .into_iter()
                    .enumerate()
                    .map(|(row, value)| {
                        let value = String::from_utf8_lossy(&value);
                        let envelope = if kinds[row].is_retraction() {
                            format!(r#"{{"before":{value},"after":null,"op":"d"}}"#)
                        } else {
                            format!(r#"{{"before":null,"after":{value},"op":"c"}}"#)
                        };
                        record(key_of(row), Some(envelope.into_bytes()))
                    })
                    .collect())
            }
        }
    }
}

fn record(key: Option<Vec<u8>>, value: Option<Vec<u8>>) -> OutRecord {
    OutRecord { key, value, headers: Vec::new() }
}

/// One JSON object per row (nulls written out, so every record names every column).
fn json_lines(batch: &RecordBatch) -> Result<Vec<Vec<u8>>> {
    let mut buffer = Vec::with_capacity(batch.num_rows() * 64);
    {
        let mut writer = datafusion::arrow::json::WriterBuilder::new()
            .with_explicit_nulls(true)
            .with_encoder_factory(Arc::new(JsonColumnEncoders))
            .build::<_, datafusion::arrow::json::writer::LineDelimited>(&mut buffer);
        writer.write(batch)?;
        writer.finish()?;
    }
    // JSON strings escape newlines and JSON columns are written compactly, so each line is
    // exactly one row.
    let lines: Vec<Vec<u8>> = buffer.split(|b| *b == b'\n').filter(|l| !l.is_empty()).map(<[u8]>::to_vec).collect();
    if lines.len() != batch.num_rows() {
        return Err(Error::Format(format!("encoding JSON: {} rows gave {} lines", batch.num_rows(), lines.len())));
    }
    Ok(lines)
}
