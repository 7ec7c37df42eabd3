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

use datafusion::arrow::array::{Array, ArrayRef, BinaryArray, Int64Array, MapArray, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, SchemaRef, TimeUnit};
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

/// Columns a record carries outside its value (Flink's writable metadata columns).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordColumns {
    /// Written as the record's timestamp.
    pub timestamp: Option<String>,
    /// A map written as the record's headers.
    pub headers: Option<String>,
}

#[derive(Debug, Clone)]
pub(crate) struct Encoder {
    format: SinkFormat,
    /// The table's columns: the rows are cast to them.
    schema: SchemaRef,
    key: Vec<usize>,
    /// The columns of the value: all but the record's timestamp and headers.
    value: Vec<usize>,
    timestamp: Option<usize>,
    headers: Option<usize>,
}

impl Encoder {
    pub(crate) fn new(
        format: SinkFormat,
        schema: SchemaRef,
        key_fields: &[String],
        record_columns: &RecordColumns,
    ) -> Result<Self> {
        let index = |name: &String, what: &str| {
            schema.index_of(name).map_err(|_| Error::Format(format!("{what} '{name}' is not a column of the table")))
        };
        let key = key_fields.iter().map(|name| index(name, "key field")).collect::<Result<Vec<_>>>()?;
        let timestamp = record_columns.timestamp.as_ref().map(|name| index(name, "timestamp column")).transpose()?;
        let headers = record_columns.headers.as_ref().map(|name| index(name, "headers column")).transpose()?;
        let value: Vec<usize> =
            (0..schema.fields().len()).filter(|&c| Some(c) != timestamp && Some(c) != headers).collect();
        if format == SinkFormat::Upsert && key.is_empty() {
            return Err(Error::Format(
                "format 'upsert' needs the primary key: option 'key.fields' (comma-separated columns)".into(),
            ));
        }
        let raw_column = |c: &usize| matches!(schema.field(*c).data_type(), DataType::Utf8 | DataType::Binary);
        if format == SinkFormat::Raw && !(value.len() == 1 && value.iter().all(raw_column)) {
            return Err(Error::Format("format 'raw' needs a table of exactly one text or binary column".into()));
        }
        Ok(Self { format, schema, key, value, timestamp, headers })
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
        let all = RecordBatch::try_new(self.schema.clone(), columns)?;
        let keys = if self.key.is_empty() { None } else { Some(json_lines(&all.project(&self.key)?)?) };
        let timestamps = self.timestamp.map(|c| timestamp_millis(all.column(c))).transpose()?;
        let headers = self.headers.map(|c| record_headers(all.column(c))).transpose()?;
        let record = |row: usize, value: Option<Vec<u8>>| OutRecord {
            key: keys.as_ref().map(|k| k[row].clone()),
            value,
            timestamp: timestamps.as_ref().and_then(|t| t[row]),
            headers: headers.as_ref().map(|h| h[row].clone()).unwrap_or_default(),
        };
        let rows = all.project(&self.value)?;
        match &self.format {
            SinkFormat::Csv(csv) => {
                if kinds.iter().any(|k| k.is_retraction()) {
                    return Err(Error::Format("format 'csv' received a retraction: the result is updating".into()));
                }
                let values = csv.lines(&rows).map_err(Error::Format)?;
                Ok(values.into_iter().enumerate().map(|(row, value)| record(row, Some(value))).collect())
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
                Ok(values.into_iter().enumerate().map(|(row, value)| record(row, value)).collect())
            }
            SinkFormat::Json => {
                if kinds.iter().any(|k| k.is_retraction()) {
                    return Err(Error::Format("format 'json' received a retraction: the result is updating".into()));
                }
                let values = json_lines(&rows)?;
                Ok(values.into_iter().enumerate().map(|(row, value)| record(row, Some(value))).collect())
            }
            SinkFormat::Upsert => {
                let values = json_lines(&rows)?;
                Ok(values
                    .into_iter()
                    .enumerate()
                    .filter_map(|(row, value)| match kinds[row] {
                        Change::Insert | Change::UpdateAfter => Some(record(row, Some(value))),
                        Change::Delete => Some(record(row, None)),
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
                        record(row, Some(envelope.into_bytes()))
                    })
                    .collect())
            }
        }
    }
}

/// Each row's timestamp in epoch milliseconds.
fn timestamp_millis(column: &ArrayRef) -> Result<Vec<Option<i64>>> {
    let millis = cast(&cast(column, &DataType::Timestamp(TimeUnit::Millisecond, None))?, &DataType::Int64)?;
    let Some(millis) = millis.as_any().downcast_ref::<Int64Array>() else {
        return Err(Error::Format("the timestamp column did not cast to milliseconds".into()));
    };
    Ok(millis.iter().collect())
}

/// A record's headers: (key, value).
pub(crate) type Headers = Vec<(String, Option<Vec<u8>>)>;

/// Each row's headers, from a map of text keys to bytes or text (NULL: no headers).
fn record_headers(column: &ArrayRef) -> Result<Vec<Headers>> {
    let Some(maps) = column.as_any().downcast_ref::<MapArray>() else {
        return Err(Error::Format("the headers column is not a map".into()));
    };
    let keys = cast(maps.keys(), &DataType::Utf8)?;
    let values = cast(maps.values(), &DataType::Binary)?;
    let (Some(keys), Some(values)) =
        (keys.as_any().downcast_ref::<StringArray>(), values.as_any().downcast_ref::<BinaryArray>())
    else {
        return Err(Error::Format("the headers map's keys are not text or its values not bytes".into()));
    };
    let offsets = maps.value_offsets();
    Ok((0..maps.len())
        .map(|row| match maps.is_valid(row) {
            true => (offsets[row] as usize..offsets[row + 1] as usize)
                .map(|e| (keys.value(e).to_string(), values.is_valid(e).then(|| values.value(e).to_vec())))
                .collect(),
            false => Vec::new(),
        })
        .collect())
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
