//! The JSON column type. A column declared `JSON` holds JSON documents as text: a Utf8 column
//! marked with Arrow's canonical `arrow.json` extension, so the JSON functions (`->`, `->>`,
//! `json_get_str`, ...) read into it. Read from a JSON record, such a column takes its field's
//! value whatever it is (object, array, number, string) as that value's JSON text, where a text
//! column would refuse anything but a string; written as JSON, its text is embedded as a JSON
//! value rather than quoted as a string (text that is not valid JSON is quoted, so nothing is
//! lost). arrow-json decodes the other columns; the JSON ones are cut out of each record with
//! serde_json's `RawValue`, which keeps the value's text as it was.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::json::writer::{Encoder, EncoderFactory, EncoderOptions, NullableEncoder};
use datafusion::arrow::record_batch::RecordBatch;
use serde_json::value::RawValue;

const EXTENSION_KEY: &str = "ARROW:extension:name";
const EXTENSION_NAME: &str = "arrow.json";

/// A column of the JSON type.
pub fn json_field(name: &str, nullable: bool) -> Field {
    Field::new(name, DataType::Utf8, nullable)
        .with_metadata(HashMap::from([(EXTENSION_KEY.to_string(), EXTENSION_NAME.to_string())]))
}

/// Whether `field` is of the JSON type.
pub fn is_json(field: &Field) -> bool {
    field.metadata().get(EXTENSION_KEY).is_some_and(|name| name == EXTENSION_NAME)
}

/// A table schema's JSON columns, for decoding records into it.
#[derive(Debug, Clone)]
pub(crate) struct JsonColumns {
    schema: SchemaRef,
    /// The schema without the JSON columns: what arrow-json decodes.
    others: SchemaRef,
    /// (index in `schema`, field) of each JSON column.
    columns: Vec<(usize, FieldRef)>,
}

impl JsonColumns {
    /// `None` when the schema has no JSON column.
    pub fn of(schema: &SchemaRef) -> Option<Self> {
        let columns: Vec<(usize, FieldRef)> =
            schema.fields().iter().enumerate().filter(|(_, f)| is_json(f)).map(|(i, f)| (i, f.clone())).collect();
        if columns.is_empty() {
            return None;
        }
        let others = schema.fields().iter().filter(|f| !is_json(f)).cloned().collect::<Vec<_>>();
        Some(Self { schema: schema.clone(), others: Arc::new(Schema::new(others)), columns })
    }

    /// The columns arrow-json decodes (it ignores the JSON ones, which it would refuse).
    pub fn others(&self) -> &SchemaRef {
        &self.others
    }

    /// The JSON columns' texts in one record: `None` where the field is missing or null; `Err`
    /// says why the record is bad (the reason its dead letter carries).
    pub fn values(&self, record: &[u8]) -> Result<Vec<Option<String>>, String> {
        let object: HashMap<String, &RawValue> =
            serde_json::from_slice(record).map_err(|e| format!("invalid JSON: {e}"))?;
        self.columns
            .iter()
            .map(|(_, field)| match object.get(field.name()).map(|v| v.get()) {
                Some(text) if text != "null" => Ok(Some(text.to_string())),
                _ if field.is_nullable() => Ok(None),
                _ => Err(format!("JSON column '{}' is missing and may not be null", field.name())),
            })
            .collect()
    }

    /// The rows of `others` (decoded without the JSON columns) with the JSON columns' `values`
    /// (one entry per row) put in their places.
    pub fn assemble(&self, others: &RecordBatch, values: &[Vec<Option<String>>]) -> crate::Result<RecordBatch> {
        // The JSON columns are in the schema's order, as the others are.
        let mut json = (0..self.columns.len())
            .map(|c| Arc::new(values.iter().map(|row| row[c].as_deref()).collect::<StringArray>()) as ArrayRef);
        let mut rest = others.columns().iter();
        let mut columns = Vec::with_capacity(self.schema.fields().len());
        for field in self.schema.fields() {
            let column = if is_json(field) { json.next() } else { rest.next().cloned() };
            columns.push(column.ok_or_else(|| crate::Error::Format("the decoded rows lost a column".into()))?);
        }
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }
}

/// Writes the JSON columns of the rows arrow-json's writer encodes as embedded JSON.
#[derive(Debug)]
pub(crate) struct JsonColumnEncoders;

impl EncoderFactory for JsonColumnEncoders {
    fn make_default_encoder<'a>(
        &self,
        field: &'a FieldRef,
        array: &'a dyn Array,
        _options: &'a EncoderOptions,
    ) -> Result<Option<NullableEncoder<'a>>, ArrowError> {
        match array.as_any().downcast_ref::<StringArray>() {
            Some(texts) if is_json(field) => {
                Ok(Some(NullableEncoder::new(Box::new(RawJson(texts)), texts.nulls().cloned())))
            }
            _ => Ok(None),
        }
    }
}

struct RawJson<'a>(&'a StringArray);

impl Encoder for RawJson<'_> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        let text = self.0.value(idx);
        match serde_json::from_str::<&RawValue>(text) {
            // One line per row: a document spread over lines is written compactly.
            Ok(value) if value.get().contains(['\n', '\r']) => match serde_json::from_str::<serde_json::Value>(text) {
                Ok(value) => out.extend_from_slice(value.to_string().as_bytes()),
                Err(_) => quoted(text, out),
            },
            Ok(value) => out.extend_from_slice(value.get().as_bytes()),
            Err(_) => quoted(text, out),
        }
    }
}

fn quoted(text: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(serde_json::Value::from(text).to_string().as_bytes());
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::json::WriterBuilder;
    use datafusion::arrow::json::writer::LineDelimited;

    use super::*;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            json_field("doc", true),
            json_field("tags", false),
        ]))
    }

    #[test]
    fn json_columns_take_any_value_as_its_text() {
        let columns = JsonColumns::of(&schema()).unwrap();
        assert_eq!(columns.others().fields().len(), 1);
        let records: [&[u8]; 2] =
            [br#"{"id": 1, "doc": {"a": [1, 2], "b": "x"}, "tags": ["t"]}"#, br#"{"id": 2, "doc": null, "tags": 7}"#];
        let values: Vec<_> = records.iter().map(|r| columns.values(r).unwrap()).collect();
        assert_eq!(values[0], vec![Some(r#"{"a": [1, 2], "b": "x"}"#.to_string()), Some(r#"["t"]"#.to_string())]);
        assert_eq!(values[1], vec![None, Some("7".to_string())]);
        let ids = RecordBatch::try_new(columns.others().clone(), vec![Arc::new(Int64Array::from(vec![1, 2]))]).unwrap();
        let batch = columns.assemble(&ids, &values).unwrap();
        assert_eq!(batch.schema(), schema());
        let error = columns.values(br#"{"id": 3}"#).unwrap_err();
        assert!(error.contains("'tags' is missing"), "{error}");
    }

    #[test]
    fn json_columns_are_written_as_embedded_json() {
        let texts = StringArray::from(vec![Some("{\n  \"a\": 1\n}"), None, Some("not json")]);
        let batch = RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3])),
                Arc::new(texts),
                Arc::new(StringArray::from(vec!["[1,2]", "\"s\"", "3"])),
            ],
        )
        .unwrap();
        let mut out = Vec::new();
        let mut writer = WriterBuilder::new()
            .with_explicit_nulls(true)
            .with_encoder_factory(Arc::new(JsonColumnEncoders))
            .build::<_, LineDelimited>(&mut out);
        writer.write(&batch).unwrap();
        writer.finish().unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"id\":1,\"doc\":{\"a\":1},\"tags\":[1,2]}\n{\"id\":2,\"doc\":null,\"tags\":\"s\"}\n{\"id\":3,\"doc\":\"not json\",\"tags\":3}\n"
        );
    }
}
