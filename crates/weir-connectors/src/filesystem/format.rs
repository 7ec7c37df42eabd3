//! Reading and writing whole files of record batches.

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::Path;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::json::{LineDelimitedWriter, ReaderBuilder};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    Parquet,
    /// One JSON object per line, decoded into the table's schema.
    Json,
}

impl FileFormat {
    pub fn parse(name: &str) -> Option<FileFormat> {
        match name {
            "parquet" => Some(FileFormat::Parquet),
            "json" => Some(FileFormat::Json),
            _ => None,
        }
    }

    pub fn extension(self) -> &'static str {
        match self {
            FileFormat::Parquet => "parquet",
            FileFormat::Json => "json",
        }
    }

    /// Every batch of the file at `path`, as `schema` (JSON is decoded into it; Parquet must
    /// have its columns).
    pub fn read(self, path: &Path, schema: &SchemaRef, batch_size: usize) -> Result<Vec<RecordBatch>, String> {
        let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let batches: Result<Vec<RecordBatch>, _> = match self {
            FileFormat::Parquet => ParquetRecordBatchReaderBuilder::try_new(file)
                .and_then(|b| b.with_batch_size(batch_size).build())
                .map_err(|e| format!("{}: {e}", path.display()))?
                .collect(),
            FileFormat::Json => ReaderBuilder::new(schema.clone())
                .with_batch_size(batch_size)
                .build(BufReader::new(file))
                .map_err(|e| format!("{}: {e}", path.display()))?
                .collect(),
        };
        let batches = batches.map_err(|e| format!("{}: {e}", path.display()))?;
        batches
            .into_iter()
            .map(|b| {
                let columns = schema
                    .fields()
                    .iter()
                    .map(|f| {
                        b.column_by_name(f.name())
                            .cloned()
                            .ok_or_else(|| format!("{}: no column '{}'", path.display(), f.name()))
                    })
                    .collect::<Result<Vec<_>, String>>()?;
                RecordBatch::try_new(schema.clone(), columns).map_err(|e| format!("{}: {e}", path.display()))
            })
            .collect()
    }

    /// Writes `batches` to a new file at `path` and syncs it to disk.
    pub fn write(self, path: &Path, schema: &SchemaRef, batches: &[RecordBatch]) -> Result<(), String> {
        let fail = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
        let file = File::create(path).map_err(|e| fail(&e))?;
        match self {
            FileFormat::Parquet => {
                let mut writer = ArrowWriter::try_new(file.try_clone().map_err(|e| fail(&e))?, schema.clone(), None)
                    .map_err(|e| fail(&e))?;
                for batch in batches {
                    writer.write(batch).map_err(|e| fail(&e))?;
                }
                writer.close().map_err(|e| fail(&e))?;
            }
            FileFormat::Json => {
                let mut out = BufWriter::new(file.try_clone().map_err(|e| fail(&e))?);
                let mut writer = LineDelimitedWriter::new(&mut out);
                let refs: Vec<&RecordBatch> = batches.iter().collect();
                writer.write_batches(&refs).map_err(|e| fail(&e))?;
                writer.finish().map_err(|e| fail(&e))?;
                out.flush().map_err(|e| fail(&e))?;
            }
        }
        file.sync_all().map_err(|e| fail(&e))
    }
}
