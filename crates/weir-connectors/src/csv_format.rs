//! The CSV format, as Flink's `'format' = 'csv'` reads and writes it: one row per line, no
//! header, fields split by `csv.field-delimiter` (`,`), quoted with `csv.quote-character` (`"`,
//! or none with `csv.disable-quote-character`), `csv.escape-character` inside quotes,
//! `csv.null-literal` for NULL (none by default: an empty field is NULL, so an empty text reads
//! back as NULL; with a literal, an empty field is the empty text), `csv.allow-comments` skipping lines starting with `#`,
//! timestamps written as SQL writes them (`2023-11-14 22:13:20.012`) and read in that form or
//! ISO 8601's. arrow-csv does the work; nested columns (ROW, ARRAY) have no CSV form and are
//! refused when the table is created.

use std::io::{Read, Write};
use std::sync::Arc;

use datafusion::arrow::csv::{ReaderBuilder, WriterBuilder};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;

use crate::options::{ConnectorOptions, Kind, OptionSpec, option};

/// The CSV options a table with `format = 'csv'` may take (Flink's names).
pub const OPTIONS: [OptionSpec; 6] = [
    option("csv.field-delimiter", Kind::Text),
    option("csv.quote-character", Kind::Text),
    option("csv.disable-quote-character", Kind::Boolean),
    option("csv.escape-character", Kind::Text),
    option("csv.null-literal", Kind::Text),
    option("csv.allow-comments", Kind::Boolean),
];

/// How timestamps are written: SQL's form, as Flink's CSV writes them.
const TIMESTAMP_FORMAT: &str = "%Y-%m-%d %H:%M:%S%.3f";

/// A table's CSV dialect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsvFormat {
    delimiter: u8,
    quote: Option<u8>,
    escape: Option<u8>,
    null_literal: Option<Arc<str>>,
    comments: bool,
}

impl CsvFormat {
    /// The dialect `options` give a table of columns `schema`; the error says which option or
    /// column does not fit.
    pub fn of(options: &ConnectorOptions, schema: &SchemaRef) -> Result<CsvFormat, String> {
        let byte = |name: &str, default: Option<u8>| -> Result<Option<u8>, String> {
            match options.get(name) {
                None => Ok(default),
                Some(text) => match text.as_bytes() {
                    [b] => Ok(Some(*b)),
                    // Flink writes a tab as '\t'.
                    b"\\t" => Ok(Some(b'\t')),
                    _ => Err(format!("option '{name}' = '{text}' must be one character")),
                },
            }
        };
        let quote = match options.boolean("csv.disable-quote-character", false) {
            true => None,
            false => byte("csv.quote-character", Some(b'"'))?,
        };
        let format = CsvFormat {
            delimiter: byte("csv.field-delimiter", Some(b','))?.unwrap_or(b','),
            quote,
            escape: byte("csv.escape-character", None)?,
            null_literal: options.get("csv.null-literal").map(Arc::from),
            comments: options.boolean("csv.allow-comments", false),
        };
        for field in schema.fields() {
            if field.data_type().is_nested() || matches!(field.data_type(), DataType::Binary | DataType::LargeBinary) {
                return Err(format!(
                    "column '{}' is {}, which has no CSV form: use format 'json' (or 'parquet' for files)",
                    field.name(),
                    field.data_type()
                ));
            }
        }
        Ok(format)
    }

    /// Every row of `input` as batches of `schema`, `batch_size` rows at most.
    pub fn read(&self, input: impl Read, schema: &SchemaRef, batch_size: usize) -> Result<Vec<RecordBatch>, String> {
        let mut builder = ReaderBuilder::new(schema.clone())
            .with_header(false)
            .with_delimiter(self.delimiter)
            .with_batch_size(batch_size);
        if let Some(quote) = self.quote {
            builder = builder.with_quote(quote);
        }
        if let Some(escape) = self.escape {
            builder = builder.with_escape(escape);
        }
        if self.comments {
            builder = builder.with_comment(b'#');
        }
        if let Some(null) = &self.null_literal {
            let pattern = format!("^{}$", regex::escape(null));
            builder = builder.with_null_regex(regex::Regex::new(&pattern).map_err(|e| e.to_string())?);
        }
        let reader = builder.build(input).map_err(|e| e.to_string())?;
        reader.collect::<Result<Vec<_>, _>>().map_err(|e| e.to_string())
    }

    /// Each row of `batch` as one CSV line (without its line end): a Kafka record's value.
    pub fn lines(&self, batch: &RecordBatch) -> Result<Vec<Vec<u8>>, String> {
        (0..batch.num_rows())
            .map(|row| {
                let mut line = Vec::new();
                self.write(&mut line, &[batch.slice(row, 1)])?;
                while line.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                    line.pop();
                }
                Ok(line)
            })
            .collect()
    }

    /// `batches` as CSV lines.
    pub fn write(&self, output: impl Write, batches: &[RecordBatch]) -> Result<(), String> {
        let mut builder = WriterBuilder::new()
            .with_header(false)
            .with_delimiter(self.delimiter)
            .with_timestamp_format(TIMESTAMP_FORMAT.to_string())
            .with_timestamp_tz_format(TIMESTAMP_FORMAT.to_string());
        if let Some(quote) = self.quote {
            builder = builder.with_quote(quote);
        }
        if let Some(escape) = self.escape {
            builder = builder.with_escape(escape);
        }
        if let Some(null) = &self.null_literal {
            builder = builder.with_null(null.to_string());
        }
        let mut writer = builder.build(output);
        for batch in batches {
            writer.write(batch).map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use datafusion::arrow::array::{Int64Array, StringArray, TimestampMillisecondArray};
    use datafusion::arrow::datatypes::{Field, Schema, TimeUnit};

    use super::*;

    fn format(pairs: &[(&str, &str)], schema: &SchemaRef) -> Result<CsvFormat, String> {
        let values: BTreeMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        CsvFormat::of(&ConnectorOptions { connector: "filesystem".into(), values }, schema)
    }

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
            Field::new("at", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        ]))
    }

    #[test]
    fn rows_written_as_flink_writes_them_read_back_the_same() {
        let schema = schema();
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![Some(1), None])),
                Arc::new(StringArray::from(vec![Some("a, \"quoted\" b"), Some("")])),
                Arc::new(TimestampMillisecondArray::from(vec![Some(1_700_000_000_012), None])),
            ],
        )
        .unwrap();
        let csv = format(&[], &schema).unwrap();
        let mut text = Vec::new();
        csv.write(&mut text, std::slice::from_ref(&batch)).unwrap();
        assert_eq!(String::from_utf8(text.clone()).unwrap(), "1,\"a, \"\"quoted\"\" b\",2023-11-14 22:13:20.012\n,,\n");
        let read = csv.read(text.as_slice(), &schema, 10).unwrap();
        assert_eq!(read[0].slice(0, 1), batch.slice(0, 1));
        assert!(read[0].columns().iter().all(|c| c.is_null(1)), "an empty field is NULL");
        // Another delimiter and a null literal: the empty text stays.
        let piped = format(&[("csv.field-delimiter", "|"), ("csv.null-literal", "NULL")], &schema).unwrap();
        let mut text = Vec::new();
        piped.write(&mut text, std::slice::from_ref(&batch)).unwrap();
        assert_eq!(
            String::from_utf8(text.clone()).unwrap(),
            "1|\"a, \"\"quoted\"\" b\"|2023-11-14 22:13:20.012\nNULL||NULL\n"
        );
        assert_eq!(piped.read(text.as_slice(), &schema, 10).unwrap(), vec![batch]);
        // ISO 8601 timestamps read too; comments when allowed.
        let commented = format(&[("csv.allow-comments", "true")], &schema).unwrap();
        let rows = commented.read("# a comment\n7,x,2023-11-14T22:13:20.5\n".as_bytes(), &schema, 10).unwrap();
        assert_eq!(rows[0].num_rows(), 1);
    }

    #[test]
    fn what_csv_cannot_hold_is_refused_by_name() {
        let nested = Arc::new(Schema::new(vec![Field::new(
            "tags",
            DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true))),
            true,
        )]));
        assert!(format(&[], &nested).unwrap_err().contains("column 'tags' is List"));
        assert!(format(&[("csv.field-delimiter", "ab")], &schema()).unwrap_err().contains("one character"));
    }
}
