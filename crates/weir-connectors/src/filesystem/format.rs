//! Reading and writing whole files of record batches.

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::json::writer::LineDelimited;
use datafusion::arrow::json::{ReaderBuilder, WriterBuilder};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::csv_format::CsvFormat;
use crate::json_type::{JsonColumnEncoders, JsonColumns};
use crate::{Error, Result};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileFormat {
    Parquet,
    /// One JSON object per line, decoded into the table's schema.
    Json,
    /// One row per line, as Flink's CSV format writes it.
    Csv(CsvFormat),
}

impl FileFormat {
    pub fn extension(&self) -> &'static str {
        match self {
            FileFormat::Parquet => "parquet",
            FileFormat::Json => "json",
            FileFormat::Csv(_) => "csv",
        }
    }

    /// Every batch of the file at `path`, as `schema` (JSON is decoded into it; Parquet must
    /// have its columns).
    pub fn read(&self, path: &Path, schema: &SchemaRef, batch_size: usize) -> Result<Vec<RecordBatch>> {
        let file = File::open(path).map_err(Error::file(path))?;
        let batches: std::result::Result<Vec<RecordBatch>, _> = match self {
            FileFormat::Parquet => ParquetRecordBatchReaderBuilder::try_new(file)
                .and_then(|b| b.with_batch_size(batch_size).build())
                .map_err(Error::file(path))?
                .collect(),
            FileFormat::Json => match JsonColumns::of(schema) {
                Some(json) => return read_with_json_columns(path, &json, batch_size),
                None => ReaderBuilder::new(schema.clone())
                    .with_batch_size(batch_size)
                    .build(BufReader::new(file))
                    .map_err(Error::file(path))?
                    .collect(),
            },
            FileFormat::Csv(csv) => {
                return csv.read(BufReader::new(file), schema, batch_size).map_err(Error::file(path));
            }
        };
        let batches = batches.map_err(Error::file(path))?;
        batches
            .into_iter()
            .map(|b| {
                let columns = schema
                    .fields()
                    .iter()
                    .map(|f| {
                        b.column_by_name(f.name())
                            .cloned()
                            .ok_or_else(|| Error::file(path)(format!("no column '{}'", f.name())))
                    })
                    .collect::<Result<Vec<_>>>()?;
                RecordBatch::try_new(schema.clone(), columns).map_err(Error::file(path))
            })
            .collect()
    }

    /// Writes `batches` to a new file at `path` and syncs it to disk.
    pub fn write(&self, path: &Path, schema: &SchemaRef, batches: &[RecordBatch]) -> Result<()> {
        let file = File::create(path).map_err(Error::file(path))?;
        match self {
            FileFormat::Parquet => {
                let mut writer =
                    ArrowWriter::try_new(file.try_clone().map_err(Error::file(path))?, schema.clone(), None)
                        .map_err(Error::file(path))?;
                for batch in batches {
                    writer.write(batch).map_err(Error::file(path))?;
                }
                writer.close().map_err(Error::file(path))?;
            }
            FileFormat::Json => {
                let mut out = BufWriter::new(file.try_clone().map_err(Error::file(path))?);
                let mut writer = WriterBuilder::new()
                    .with_encoder_factory(Arc::new(JsonColumnEncoders))
                    .build::<_, LineDelimited>(&mut out);
                let refs: Vec<&RecordBatch> = batches.iter().collect();
                writer.write_batches(&refs).map_err(Error::file(path))?;
                writer.finish().map_err(Error::file(path))?;
                out.flush().map_err(Error::file(path))?;
            }
            FileFormat::Csv(csv) => {
                let mut out = BufWriter::new(file.try_clone().map_err(Error::file(path))?);
                csv.write(&mut out, batches).map_err(Error::file(path))?;
                out.flush().map_err(Error::file(path))?;
            }
        }
        file.sync_all().map_err(Error::file(path))
    }
}

/// A JSON-lines file into a schema with JSON columns: arrow-json decodes the other columns,
/// each line gives its JSON columns' texts (one object per line, as JSON lines are).
fn read_with_json_columns(path: &Path, json: &JsonColumns, batch_size: usize) -> Result<Vec<RecordBatch>> {
    let text = std::fs::read(path).map_err(Error::file(path))?;
    let lines: Vec<&[u8]> = text.split(|b| *b == b'\n').filter(|l| !l.trim_ascii().is_empty()).collect();
    let mut batches = Vec::new();
    for chunk in lines.chunks(batch_size.max(1)) {
        let mut decoder = ReaderBuilder::new(json.others().clone())
            .with_batch_size(chunk.len())
            .build_decoder()
            .map_err(Error::file(path))?;
        let mut texts = Vec::with_capacity(chunk.len());
        for line in chunk {
            decoder.decode(line).map_err(Error::file(path))?;
            texts.push(json.values(line).map_err(Error::file(path))?);
        }
        let others = decoder.flush().map_err(Error::file(path))?.ok_or_else(|| Error::file(path)("no rows decoded"))?;
        if others.num_rows() != chunk.len() {
            return Err(Error::file(path)("a table with JSON columns reads one JSON object per line"));
        }
        batches.push(json.assemble(&others, &texts).map_err(Error::file(path))?);
    }
    Ok(batches)
}
