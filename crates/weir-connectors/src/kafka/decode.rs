//! Kafka record values to Arrow rows, with every record that does not fit reported by index
//! (the source applies the table's `bad_records` policy to them).
//!
//! JSON goes through arrow-json's decoder a whole poll at a time. Only when that fails (a
//! value that does not parse, does not fit the schema, or is not exactly one object) is the
//! poll decoded again record by record, to tell the bad records from the good.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, BinaryArray, StringArray, StructArray, UInt32Array};
use datafusion::arrow::compute::{concat_batches, interleave, take_record_batch};
use datafusion::arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef};
use datafusion::arrow::json::ReaderBuilder;
use datafusion::arrow::record_batch::RecordBatch;
use weir_engine::changelog::{Change, change_array, changelog_schema};

use crate::csv_format::CsvFormat;
use crate::json_type::JsonColumns;
use crate::{Error, Result};

/// The rows of the records that fit, and why the others did not.
#[derive(Debug)]
pub(crate) struct Decoded {
    pub batch: RecordBatch,
    /// For each row of `batch`, the index of the record it came from.
    pub rows_from: Vec<usize>,
    /// (record index, reason) of each record that did not fit.
    pub bad: Vec<(usize, String)>,
}

/// Decodes JSON objects into `schema` (fields not in the schema are ignored; missing ones are
/// null, or an error for a non-nullable column). JSON-typed columns take their field's JSON
/// text (`json_type.rs`).
pub(crate) fn decode_json(schema: &SchemaRef, values: &[Option<&[u8]>]) -> Result<Decoded> {
    match JsonColumns::of(schema) {
        Some(json) => decode_with_json_columns(&json, values),
        None => decode_typed(schema, values),
    }
}

/// The columns arrow-json decodes first, then the JSON columns of the records that fit.
fn decode_with_json_columns(json: &JsonColumns, values: &[Option<&[u8]>]) -> Result<Decoded> {
    let decoded = decode_typed(json.others(), values)?;
    let mut bad = decoded.bad;
    let (mut keep, mut rows_from, mut texts) = (Vec::new(), Vec::new(), Vec::new());
    for (row, &record) in decoded.rows_from.iter().enumerate() {
        match json.values(values[record].unwrap_or_default()) {
            Ok(row_texts) => {
                keep.push(row);
                rows_from.push(record);
                texts.push(row_texts);
            }
            Err(reason) => bad.push((record, reason)),
        }
    }
    bad.sort_by_key(|(record, _)| *record);
    let others = if keep.len() == decoded.batch.num_rows() {
        decoded.batch
    } else {
        let indices = UInt32Array::from_iter_values(keep.iter().map(|&r| r as u32));
        take_record_batch(&decoded.batch, &indices)?
    };
    Ok(Decoded { batch: json.assemble(&others, &texts)?, rows_from, bad })
}

fn decode_typed(schema: &SchemaRef, values: &[Option<&[u8]>]) -> Result<Decoded> {
    if let Some(batch) = decode_all(schema, values) {
        return Ok(Decoded { batch, rows_from: (0..values.len()).collect(), bad: Vec::new() });
    }
    one_by_one(schema, values, |value| decode_one(schema, value))
}

/// Decodes each value on its own with `one`: the rows of those that fit, why the others did not.
fn one_by_one(
    schema: &SchemaRef,
    values: &[Option<&[u8]>],
    one: impl Fn(Option<&[u8]>) -> std::result::Result<RecordBatch, String>,
) -> Result<Decoded> {
    let mut good = Vec::new();
    let mut rows_from = Vec::new();
    let mut bad = Vec::new();
    for (i, value) in values.iter().enumerate() {
        match one(*value) {
            Ok(batch) => {
                good.push(batch);
                rows_from.push(i);
            }
            Err(reason) => bad.push((i, reason)),
        }
    }
    let batch = concat_batches(schema, &good)?;
    Ok(Decoded { batch, rows_from, bad })
}

/// The fast path: every value at once; `None` if any value does not give exactly one row.
fn decode_all(schema: &SchemaRef, values: &[Option<&[u8]>]) -> Option<RecordBatch> {
    let mut decoder = ReaderBuilder::new(schema.clone()).with_batch_size(values.len().max(1)).build_decoder().ok()?;
    for (i, value) in values.iter().enumerate() {
        let value = (*value)?;
        let consumed = decoder.decode(value).ok()?;
        if consumed != value.len() || decoder.has_partial_record() || decoder.len() != i + 1 {
            return None;
        }
    }
    let batch = decoder.flush().ok()?.unwrap_or_else(|| RecordBatch::new_empty(schema.clone()));
    (batch.num_rows() == values.len()).then_some(batch)
}

/// One record's row, or why it is a bad record (the reason a dead letter carries).
fn decode_one(schema: &SchemaRef, value: Option<&[u8]>) -> std::result::Result<RecordBatch, String> {
    let value = value.ok_or("the record has no value")?;
    let mut decoder =
        ReaderBuilder::new(schema.clone()).with_batch_size(2).build_decoder().map_err(|e| e.to_string())?;
    let consumed = decoder.decode(value).map_err(|e| format!("invalid JSON: {e}"))?;
    if consumed != value.len() || decoder.has_partial_record() || decoder.len() != 1 {
        return Err("the value is not exactly one complete JSON object".into());
    }
    let batch = decoder.flush().map_err(|e| format!("does not fit the table: {e}"))?;
    batch.filter(|b| b.num_rows() == 1).ok_or_else(|| "the value is not exactly one JSON object".into())
}

/// The `csv` format: each value one CSV row. All at once first; if that fails, record by record
/// to tell the bad ones (a value that is not one row of the table's columns).
pub(crate) fn decode_csv(csv: &CsvFormat, schema: &SchemaRef, values: &[Option<&[u8]>]) -> Result<Decoded> {
    let one = |value: Option<&[u8]>| -> std::result::Result<RecordBatch, String> {
        let value = value.ok_or("the record has no value")?;
        if value.iter().filter(|b| **b == b'\n').count() > usize::from(value.ends_with(b"\n")) {
            return Err("the value is not exactly one CSV row".into());
        }
        let batches = csv.read(value, schema, 2)?;
        let batch = concat_batches(schema, &batches).map_err(|e| e.to_string())?;
        match batch.num_rows() {
            1 => Ok(batch),
            _ => Err("the value is not exactly one CSV row".into()),
        }
    };
    // The fast path: the values as lines of one text, if that reads as one row each.
    let single_lines = values.iter().all(|v| v.is_some_and(|v| !v.contains(&b'\n') && !v.contains(&b'\r')));
    if single_lines {
        let text: Vec<u8> = values.iter().flatten().flat_map(|v| v.iter().copied().chain([b'\n'])).collect();
        if let Ok(batches) = csv.read(text.as_slice(), schema, values.len().max(1))
            && let Ok(batch) = concat_batches(schema, &batches)
            && batch.num_rows() == values.len()
        {
            return Ok(Decoded { batch, rows_from: (0..values.len()).collect(), bad: Vec::new() });
        }
    }
    one_by_one(schema, values, one)
}

/// The `raw` format: the value as the table's one text or binary column.
pub(crate) fn decode_raw(schema: &SchemaRef, values: &[Option<&[u8]>]) -> Result<Decoded> {
    let mut rows_from = Vec::new();
    let mut bad = Vec::new();
    let column: ArrayRef = match schema.fields().first().map(|f| f.data_type()) {
        Some(DataType::Utf8) => {
            let mut texts = Vec::new();
            for (i, value) in values.iter().enumerate() {
                match value.map(std::str::from_utf8) {
                    Some(Ok(text)) => {
                        texts.push(text);
                        rows_from.push(i);
                    }
                    Some(Err(e)) => bad.push((i, format!("not UTF-8 text: {e}"))),
                    None => bad.push((i, "the record has no value".into())),
                }
            }
            Arc::new(StringArray::from(texts))
        }
        Some(DataType::Binary) => {
            let mut bytes = Vec::new();
            for (i, value) in values.iter().enumerate() {
                match value {
                    Some(value) => {
                        bytes.push(*value);
                        rows_from.push(i);
                    }
                    None => bad.push((i, "the record has no value".into())),
                }
            }
            Arc::new(BinaryArray::from(bytes))
        }
        _ => return Err(Error::Format("format 'raw' needs a table of exactly one text or binary column".into())),
    };
    let batch = RecordBatch::try_new(schema.clone(), vec![column])?;
    Ok(Decoded { batch, rows_from, bad })
}

/// The `debezium_json` format: `{"before": {...}, "after": {...}, "op": "c"|"r"|"u"|"d"}` per
/// record, decoded into changelog rows of `schema` (the table's columns; the rows get the
/// change column): a create or snapshot read is `+I` of `after`, an update `-U` of `before` and
/// `+U` of `after`, a delete `-D` of `before`.
pub(crate) fn decode_debezium(schema: &SchemaRef, values: &[Option<&[u8]>]) -> Result<Decoded> {
    let row_fields: Fields = schema.fields().iter().map(|f| Arc::new(f.as_ref().clone().with_nullable(true))).collect();
    let envelope = Arc::new(Schema::new(vec![
        Field::new("before", DataType::Struct(row_fields.clone()), true),
        Field::new("after", DataType::Struct(row_fields), true),
        Field::new("op", DataType::Utf8, true),
    ]));
    let decoded = decode_json(&envelope, values)?;
    let envelopes = &decoded.batch;
    let structs = |i: usize| {
        let column = envelopes.column(i).as_any().downcast_ref::<StructArray>();
        column.ok_or_else(|| Error::Format("the envelope did not decode into structs".into()))
    };
    let (before, after) = (structs(0)?, structs(1)?);
    let ops = envelopes.column(2).as_any().downcast_ref::<StringArray>();
    let ops = ops.ok_or_else(|| Error::Format("'op' did not decode as text".into()))?;
    // (0 = before, 1 = after, row) for every output row, and its change.
    let mut picks = Vec::new();
    let mut changes = Vec::new();
    let mut rows_from = Vec::new();
    let mut bad = decoded.bad;
    for row in 0..envelopes.num_rows() {
        let record = decoded.rows_from[row];
        let has = |side: &StructArray| side.is_valid(row);
        let op = if ops.is_valid(row) { ops.value(row) } else { "" };
        let emitted: &[(usize, Change)] = match op {
            "c" | "r" if has(after) => &[(1, Change::Insert)],
            "u" if has(before) && has(after) => &[(0, Change::UpdateBefore), (1, Change::UpdateAfter)],
            "d" if has(before) => &[(0, Change::Delete)],
            "c" | "r" | "u" | "d" => {
                bad.push((record, format!("op '{op}' without the 'before'/'after' row it needs")));
                continue;
            }
            other => {
                bad.push((record, format!("'op' is '{other}', not one of c, r, u, d")));
                continue;
            }
        };
        for (side, change) in emitted {
            picks.push((*side, row));
            changes.push(*change);
            rows_from.push(record);
        }
    }
    bad.sort_by_key(|(record, _)| *record);
    let mut columns = Vec::with_capacity(schema.fields().len() + 1);
    for i in 0..schema.fields().len() {
        let sides: [&dyn Array; 2] = [before.column(i).as_ref(), after.column(i).as_ref()];
        columns.push(interleave(&sides, &picks)?);
    }
    columns.push(change_array(&changes));
    let batch = RecordBatch::try_new(changelog_schema(schema), columns)?;
    Ok(Decoded { batch, rows_from, bad })
}

/// The `upsert` format: a record's value is its key's latest row (a JSON object of every
/// column, as the upsert sink writes it), a record without a value is a tombstone whose key (the
/// JSON object of the `key` columns) names the row removed. Upserts become `+U` rows, tombstones
/// `-D` rows holding only the key (the other columns null, so the rows are of `schema` made
/// nullable). A row without its key, or an upsert without a NOT NULL column, is a bad record.
pub(crate) fn decode_upsert(
    schema: &SchemaRef,
    key: &[String],
    keys: &[Option<&[u8]>],
    values: &[Option<&[u8]>],
) -> Result<Decoded> {
    let nullable: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone().with_nullable(true)).collect();
    let nullable = Arc::new(Schema::new(nullable));
    let key_columns = key
        .iter()
        .map(|name| {
            let column = nullable.index_of(name);
            column.map_err(|_| Error::Format(format!("key field '{name}' is not a column of the table")))
        })
        .collect::<Result<Vec<_>>>()?;
    let texts: Vec<Option<&[u8]>> = values.iter().zip(keys).map(|(value, key)| value.or(*key)).collect();
    let decoded = decode_json(&nullable, &texts)?;
    let mut bad: Vec<(usize, String)> = decoded
        .bad
        .into_iter()
        .map(|(record, reason)| match values[record] {
            Some(_) => (record, reason),
            None => (record, format!("a tombstone (no value) whose key does not name the row it removes: {reason}")),
        })
        .collect();
    let (mut keep, mut rows_from, mut kinds) = (Vec::new(), Vec::new(), Vec::new());
    for (row, &record) in decoded.rows_from.iter().enumerate() {
        let tombstone = values[record].is_none();
        let missing = |mut columns: Box<dyn Iterator<Item = usize> + '_>| {
            columns.find(|&c| decoded.batch.column(c).is_null(row)).map(|c| nullable.field(c).name().clone())
        };
        let without_key = missing(Box::new(key_columns.iter().copied()));
        let not_null = (0..schema.fields().len()).filter(|&c| !schema.field(c).is_nullable());
        let without_value = if tombstone { None } else { missing(Box::new(not_null)) };
        match (without_key, without_value) {
            (Some(column), _) => {
                let within = if tombstone { "the tombstone's key" } else { "the value" };
                bad.push((record, format!("{within} lacks key column '{column}'")));
            }
            (None, Some(column)) => bad.push((record, format!("the value lacks NOT NULL column '{column}'"))),
            (None, None) => {
                keep.push(row as u32);
                rows_from.push(record);
                kinds.push(if tombstone { Change::Delete } else { Change::UpdateAfter });
            }
        }
    }
    bad.sort_by_key(|(record, _)| *record);
    let rows = take_record_batch(&decoded.batch, &UInt32Array::from(keep))?;
    let mut columns = rows.columns().to_vec();
    columns.push(change_array(&kinds));
    let batch = RecordBatch::try_new(changelog_schema(&nullable), columns)?;
    Ok(Decoded { batch, rows_from, bad })
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::Int64Array;

    use super::*;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false), Field::new("name", DataType::Utf8, true)]))
    }

    /// A JSON column takes its field's value as JSON text, whatever its type; a record without
    /// a NOT NULL JSON column is a bad record like any other.
    #[test]
    fn json_columns_take_their_value_as_text_and_records_without_them_are_bad() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            crate::json_type::json_field("doc", false),
        ]));
        let records: Vec<Option<&[u8]>> = vec![
            Some(br#"{"id":1,"doc":{"a":[1,2]}}"#),
            Some(br#"{"id":2}"#),
            Some(br#"{"id":"x","doc":1}"#),
            Some(br#"{"doc":"text","id":4}"#),
        ];
        let decoded = decode_json(&schema, &records).unwrap();
        assert_eq!(decoded.rows_from, vec![0, 3]);
        assert_eq!(decoded.bad.iter().map(|(i, _)| *i).collect::<Vec<_>>(), vec![1, 2]);
        assert!(decoded.bad[0].1.contains("'doc' is missing"), "{:?}", decoded.bad);
        let docs = decoded.batch.column(1).as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(docs.iter().collect::<Vec<_>>(), vec![Some(r#"{"a":[1,2]}"#), Some(r#""text""#)]);
        assert_eq!(decoded.batch.schema(), schema);
    }

    #[test]
    fn good_records_decode_in_one_pass_and_bad_ones_are_named() {
        let good: Vec<Option<&[u8]>> = vec![Some(br#"{"id":1,"name":"a"}"#), Some(br#"{"id":2,"extra":true}"#)];
        let decoded = decode_json(&schema(), &good).unwrap();
        assert_eq!(decoded.batch.num_rows(), 2);
        assert!(decoded.bad.is_empty());

        let mixed: Vec<Option<&[u8]>> = vec![
            Some(br#"{"id":1}"#),
            Some(b"not json"),
            Some(br#"{"id":"three"}"#),
            Some(br#"{"name":"no id"}"#),
            Some(br#"{"id":5}{"id":6}"#),
            None,
            Some(br#"{"id":7}"#),
        ];
        let decoded = decode_json(&schema(), &mixed).unwrap();
        let ids = decoded.batch.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(ids.values().to_vec(), vec![1, 7]);
        assert_eq!(decoded.rows_from, vec![0, 6]);
        assert_eq!(decoded.bad.iter().map(|(i, _)| *i).collect::<Vec<_>>(), vec![1, 2, 3, 4, 5]);
        assert!(decoded.bad.iter().all(|(_, reason)| !reason.is_empty()));
    }

    #[test]
    fn debezium_envelopes_become_changelog_rows() {
        let values: Vec<Option<&[u8]>> = vec![
            Some(br#"{"before":null,"after":{"id":1,"name":"a"},"op":"c"}"#),
            Some(br#"{"before":{"id":1,"name":"a"},"after":{"id":1,"name":"b"},"op":"u"}"#),
            Some(br#"{"before":null,"after":null,"op":"d"}"#),
            Some(br#"{"before":{"id":1,"name":"b"},"after":null,"op":"d"}"#),
            Some(br#"{"after":{"id":2},"op":"x"}"#),
        ];
        let decoded = decode_debezium(&schema(), &values).unwrap();
        let changes = weir_engine::changelog::changes(&decoded.batch).unwrap();
        assert_eq!(changes, vec![Change::Insert, Change::UpdateBefore, Change::UpdateAfter, Change::Delete]);
        let names = decoded.batch.column(1).as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(names.iter().collect::<Vec<_>>(), vec![Some("a"), Some("a"), Some("b"), Some("b")]);
        assert_eq!(decoded.rows_from, vec![0, 1, 1, 3]);
        assert_eq!(decoded.bad.iter().map(|(i, _)| *i).collect::<Vec<_>>(), vec![2, 4]);
    }

    /// Values are upserts, tombstones deletes by their key; rows without their key are bad.
    #[test]
    fn upserts_and_tombstones_become_updates_and_deletes_by_key() {
        let keys: Vec<Option<&[u8]>> =
            vec![Some(br#"{"id":1}"#), Some(br#"{"id":1}"#), Some(br#"{"id":2}"#), None, Some(b"{}"), None];
        let values: Vec<Option<&[u8]>> =
            vec![Some(br#"{"id":1,"name":"a"}"#), None, Some(br#"{"name":"b"}"#), None, None, Some(br#"{"id":6}"#)];
        let decoded = decode_upsert(&schema(), &["id".into()], &keys, &values).unwrap();
        let changes = weir_engine::changelog::changes(&decoded.batch).unwrap();
        assert_eq!(changes, vec![Change::UpdateAfter, Change::Delete, Change::UpdateAfter]);
        assert_eq!(decoded.rows_from, vec![0, 1, 5]);
        let ids = decoded.batch.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(ids.values().to_vec(), vec![1, 1, 6]);
        let reasons: Vec<(usize, &str)> = decoded.bad.iter().map(|(i, r)| (*i, r.as_str())).collect();
        assert_eq!(reasons[0], (2, "the value lacks key column 'id'"));
        assert_eq!(reasons[1].0, 3);
        assert!(reasons[1].1.starts_with("a tombstone (no value) whose key"), "{reasons:?}");
        assert_eq!(reasons[2], (4, "the tombstone's key lacks key column 'id'"));
    }

    #[test]
    fn raw_text_rejects_invalid_utf8() {
        let schema = Arc::new(Schema::new(vec![Field::new("line", DataType::Utf8, true)]));
        let values: Vec<Option<&[u8]>> = vec![Some(b"hello"), Some(&[0xff, 0xfe]), None];
        let decoded = decode_raw(&schema, &values).unwrap();
        assert_eq!(decoded.batch.num_rows(), 1);
        assert_eq!(decoded.batch.column(0).len(), 1);
        assert_eq!(decoded.bad.len(), 2);
    }
}
