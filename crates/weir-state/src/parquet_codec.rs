//! Arrow batches <-> Parquet bytes. CPU-bound: callers run these off the async workers.

use bytes::Bytes;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use datafusion::parquet::basic::Compression;
use datafusion::parquet::file::properties::{EnabledStatistics, WriterProperties};

use crate::error::{Error, Result};

/// The most [`encode`] reserves up front (batches sharing buffers count them more than once).
const MOST_RESERVED: usize = 256 << 20;

/// LZ4 (raw) without dictionary pages: state columns are keys and accumulator values, nearly
/// all distinct, and trying a dictionary for each was a third of what encoding a checkpoint
/// cost. LZ4 rather than zstd: state is written at every checkpoint and read at every restore,
/// and LZ4 does both for a fraction of zstd's CPU; files are about 40% larger (the disk is the
/// cheaper of the two). `checkpoint_bench 20 20000000 incremental`, two runs each: a restore
/// read 0.44-0.57 s instead of 0.59-0.86 s, a restart 1.59-1.63 s instead of 1.80-2.01 s, the
/// state 242 MB instead of 172 MB.
///
/// Nor statistics: a state file is always read whole, never filtered by its min/max values.
/// The output gets room for the batches' size up front (compressed it is smaller) instead of
/// growing by doubling. The two took q4's run (`nexmark_bench 2000000 q4`, three runs each,
/// its final snapshot holding every bid) from 2.47-2.66 to 2.29-2.44 cpu-s.
pub(crate) fn encode(schema: SchemaRef, batches: &[RecordBatch]) -> Result<Vec<u8>> {
    let properties = WriterProperties::builder()
        .set_compression(Compression::LZ4_RAW)
        .set_dictionary_enabled(false)
        .set_statistics_enabled(EnabledStatistics::None)
        .build();
    let size: usize = batches.iter().map(RecordBatch::get_array_memory_size).sum();
    let mut out = Vec::with_capacity(size.min(MOST_RESERVED));
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

/// Rows in a batch [`batches`] decodes: many, so that what a restore does per batch is paid
/// rarely (the reader's default is 1,024).
const STREAMED_BATCH_ROWS: usize = 8192;

/// The batches of a file, decoded one at a time as they are taken.
pub struct FileBatches(ParquetRecordBatchReader);

impl Iterator for FileBatches {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|batch| batch.map_err(Error::from))
    }
}

pub(crate) fn batches(bytes: Bytes) -> Result<FileBatches> {
    Ok(FileBatches(ParquetRecordBatchReaderBuilder::try_new(bytes)?.with_batch_size(STREAMED_BATCH_ROWS).build()?))
}
