//! Arrow batches <-> Parquet bytes. CPU-bound: callers run these off the async workers.

use bytes::Bytes;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use datafusion::parquet::basic::{Compression, ZstdLevel};
use datafusion::parquet::file::properties::WriterProperties;

use crate::error::Result;

/// zstd without dictionary pages: state columns are keys and accumulator values, nearly all
/// distinct, and trying a dictionary for each was a third of what encoding a checkpoint cost.
pub(crate) fn encode(schema: SchemaRef, batches: &[RecordBatch]) -> Result<Vec<u8>> {
    let properties = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_dictionary_enabled(false)
        .build();
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, schema, Some(properties))?;
    for batch in batches {
        writer.write(batch)?;
    }
    writer.close()?;
    Ok(out)
}

/// The schema a file was written with (a file of no rows decodes to no batches).
pub(crate) fn schema(bytes: Bytes) -> Result<SchemaRef> {
    Ok(ParquetRecordBatchReaderBuilder::try_new(bytes)?.schema().clone())
}

pub(crate) fn decode(bytes: Bytes) -> Result<Vec<RecordBatch>> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)?.build()?;
    Ok(reader.collect::<Result<Vec<_>, _>>()?)
}
