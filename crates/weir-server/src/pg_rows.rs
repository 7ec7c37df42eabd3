//! Arrow batches as Postgres rows, the one way every result on the Postgres port is typed and
//! encoded (SELECT rows, SHOW, catalog queries, cursors' FETCH, COPY; simple and extended
//! protocol alike): `arrow-pg`'s mapping of Arrow types to Postgres types and its encoder, in
//! text or binary as the client asks. Before that, [`prepared`] shapes a batch for Postgres:
//!
//! - an updating query's change column (`+I`, `-U`, `+U`, `-D`) comes first, named `op`;
//! - a JSON column is Postgres's `json`;
//! - a column of a type Postgres has no match for (a map, a union, a list of maps, ...) is its
//!   text as weir prints it, typed `text`.

use std::str::FromStr;
use std::sync::Arc;

use arrow_pg::datatypes::{encode_recordbatch, field_into_pg_type};
use datafusion::arrow::array::{Array, ArrayRef, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use futures::stream;
use pgwire::api::Type;
use pgwire::api::portal::Format;
use pgwire::api::results::{FieldInfo, QueryResponse};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::data::DataRow;
use weir_connectors::json_type::{is_json, json_field};
use weir_engine::changelog::{CHANGE_COLUMN, is_changelog};

/// The name of an updating result's change column on the Postgres port.
pub const OP_COLUMN: &str = "op";

/// The Arrow schema of a result whose columns are named with their types as a preview names
/// them (`JSON` for a JSON column), with the change column last if `updating` (as the
/// engine's batches have it).
pub fn preview_schema(columns: &[(String, String)], updating: bool) -> Schema {
    let field = |(name, data_type): &(String, String)| match data_type.as_str() {
        "JSON" => json_field(name, true),
        _ => Field::new(name, DataType::from_str(data_type).unwrap_or(DataType::Utf8), true),
    };
    let change = updating.then(|| Field::new(CHANGE_COLUMN, DataType::Utf8, false));
    Schema::new(columns.iter().map(field).chain(change).collect::<Vec<_>>())
}

/// `schema` as [`prepared`] makes a batch of it.
pub fn prepared_schema(schema: &Schema) -> SchemaRef {
    Arc::new(Schema::new(order(schema).into_iter().map(|i| prepared_field(&schema.fields()[i])).collect::<Vec<_>>()))
}

/// `batch` shaped for Postgres (see the module's doc).
pub fn prepared(batch: &RecordBatch) -> PgWireResult<RecordBatch> {
    let schema = batch.schema();
    let mut fields = Vec::with_capacity(batch.num_columns());
    let mut columns = Vec::with_capacity(batch.num_columns());
    for i in order(&schema) {
        let (field, column) = (&schema.fields()[i], batch.column(i));
        let prepared = prepared_field(field);
        columns.push(if prepared.data_type() == field.data_type() { column.clone() } else { as_text(column)? });
        fields.push(prepared);
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).map_err(|e| internal(e.to_string()))
}

/// The columns' order: the change column first, if any.
fn order(schema: &Schema) -> Vec<usize> {
    let count = schema.fields().len();
    match is_changelog(schema) {
        true => std::iter::once(count - 1).chain(0..count - 1).collect(),
        false => (0..count).collect(),
    }
}

fn prepared_field(field: &FieldRef) -> FieldRef {
    if field.name() == CHANGE_COLUMN {
        Arc::new(Field::new(OP_COLUMN, DataType::Utf8, false))
    } else if is_json(field) || field_into_pg_type(field).is_ok() {
        field.clone()
    } else {
        Arc::new(Field::new(field.name(), DataType::Utf8, field.is_nullable()))
    }
}

/// A column's values as text, as weir prints them (timestamps as Postgres spells them).
fn as_text(column: &ArrayRef) -> PgWireResult<ArrayRef> {
    let options = FormatOptions::new()
        .with_timestamp_format(Some("%Y-%m-%d %H:%M:%S%.f"))
        .with_timestamp_tz_format(Some("%Y-%m-%d %H:%M:%S%.f%:z"));
    let formatter = ArrayFormatter::try_new(column.as_ref(), &options).map_err(|e| internal(e.to_string()))?;
    let text: StringArray =
        (0..column.len()).map(|row| column.is_valid(row).then(|| formatter.value(row).to_string())).collect();
    Ok(Arc::new(text))
}

/// The result columns of a prepared `schema`, in `format`.
pub fn fields(schema: &Schema, format: &Format) -> PgWireResult<Vec<FieldInfo>> {
    let field = |(i, field): (usize, &FieldRef)| {
        let data_type = if is_json(field) { Type::JSON } else { field_into_pg_type(field)? };
        Ok(FieldInfo::new(field.name().clone(), None, None, data_type, format.format_for(i)))
    };
    schema.fields().iter().enumerate().map(field).collect()
}

/// A result of prepared `batches` (of the prepared `schema`) in `format`.
pub fn response(
    schema: &Schema,
    batches: impl IntoIterator<Item = RecordBatch>,
    format: &Format,
) -> PgWireResult<QueryResponse> {
    let fields = Arc::new(fields(schema, format)?);
    let rows: Vec<PgWireResult<DataRow>> =
        batches.into_iter().flat_map(|batch| encode_recordbatch(fields.clone(), batch)).collect();
    Ok(QueryResponse::new(fields, stream::iter(rows)))
}

/// A result of one batch, prepared here, in `format`.
pub fn batch_response(batch: &RecordBatch, format: &Format) -> PgWireResult<QueryResponse> {
    let batch = prepared(batch)?;
    response(&batch.schema(), [batch], format)
}

/// A result of text columns (SHOW, DESCRIBE, EXPLAIN, SHOW PIPELINES, Postgres settings).
pub fn text_response(columns: &[String], rows: Vec<Vec<String>>, format: &Format) -> PgWireResult<QueryResponse> {
    let schema =
        Arc::new(Schema::new(columns.iter().map(|c| Field::new(c, DataType::Utf8, false)).collect::<Vec<_>>()));
    let arrays = (0..columns.len())
        .map(|c| Arc::new(rows.iter().map(|row| row.get(c).map(String::as_str)).collect::<StringArray>()) as ArrayRef)
        .collect();
    let batch = RecordBatch::try_new(schema, arrays).map_err(|e| internal(e.to_string()))?;
    batch_response(&batch, format)
}

/// Each row of a prepared `batch` as its cells' text in Postgres's text format (None is
/// NULL), for COPY's lines and for comparing rows.
pub fn text_cells(batch: &RecordBatch) -> PgWireResult<Vec<Vec<Option<Vec<u8>>>>> {
    let fields = Arc::new(fields(&batch.schema(), &Format::UnifiedText)?);
    encode_recordbatch(fields, batch.clone()).map(|row| row.map(|row| cells(&row))).collect()
}

/// The cells of an encoded row: each a 4-byte length (-1 for NULL), then its bytes.
fn cells(row: &DataRow) -> Vec<Option<Vec<u8>>> {
    let mut cells = Vec::with_capacity(usize::try_from(row.field_count).unwrap_or(0));
    let mut rest = &row.data[..];
    while let Some((length, after)) = rest.split_first_chunk::<4>() {
        match usize::try_from(i32::from_be_bytes(*length)) {
            Ok(length) if length <= after.len() => {
                cells.push(Some(after[..length].to_vec()));
                rest = &after[length..];
            }
            _ => {
                cells.push(None);
                rest = after;
            }
        }
    }
    cells
}

fn internal(message: String) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new("ERROR".into(), "XX000".into(), message)))
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Int64Array, MapBuilder, StringBuilder};

    use super::*;

    #[test]
    fn the_change_column_comes_first_and_a_map_is_text() {
        let mut map = MapBuilder::new(None, StringBuilder::new(), StringBuilder::new());
        map.keys().append_value("k");
        map.values().append_value("v");
        map.append(true).unwrap();
        map.append(false).unwrap();
        let map = map.finish();
        let schema = Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int64, true),
            Field::new("m", map.data_type().clone(), true),
            Field::new(CHANGE_COLUMN, DataType::Utf8, false),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![Some(1), None])),
                Arc::new(map),
                Arc::new(StringArray::from(vec!["+I", "-D"])),
            ],
        )
        .unwrap();
        let prepared = prepared(&batch).unwrap();
        assert_eq!(prepared.schema(), prepared_schema(&schema));
        let names: Vec<_> = prepared.schema().fields().iter().map(|f| f.name().clone()).collect();
        assert_eq!(names, ["op", "n", "m"]);
        let types: Vec<_> =
            fields(&prepared.schema(), &Format::UnifiedText).unwrap().iter().map(|f| f.datatype().clone()).collect();
        assert_eq!(types, [Type::TEXT, Type::INT8, Type::TEXT]);
        let text = |cell: &Option<Vec<u8>>| cell.as_ref().map(|c| String::from_utf8_lossy(c).to_string());
        let rows: Vec<Vec<Option<String>>> =
            text_cells(&prepared).unwrap().iter().map(|row| row.iter().map(text).collect()).collect();
        assert_eq!(
            rows,
            [vec![Some("+I".into()), Some("1".into()), Some("{k: v}".into())], vec![Some("-D".into()), None, None]]
        );
    }
}
