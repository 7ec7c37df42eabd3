//! The rows in an OVER aggregate's bounded frames, kept column-wise. A row stays in its
//! partition's frame until later rows push it out, when its aggregate arguments are taken back
//! from the partition's accumulators; a snapshot writes every frame's rows.
//!
//! Each row used to be a one-row `RecordBatch` with one-row argument slices: an allocation per
//! column per row, and snapshots that concatenated a one-row batch per frame row (a third of a
//! bounded OVER query's time). Here rows stay in the batch they were computed in, kept with its
//! aggregate arguments, and a frame holds (batch, row) references; a batch goes when no frame
//! holds any of its rows. A partition that goes quiet keeps its last rows, and with them whole
//! batches, so when the batches hold more than twice the rows still in frames, those rows are
//! gathered into one new batch.

use std::collections::HashMap;

use datafusion::arrow::array::Array;
use datafusion::arrow::compute::interleave;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::logical_expr::Accumulator;

use crate::error::{Error, Result};
use crate::operators::accumulators::{self, AggregateCall, Arguments};

/// A row in a frame: its time, and where its values are.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FrameRow {
    pub(crate) time: i64,
    batch: u32,
    row: u32,
}

/// Rows that entered frames, with their aggregates' arguments.
struct Stored {
    rows: RecordBatch,
    arguments: Vec<Arguments>,
    /// How many of its rows are still in a frame.
    live: usize,
}

/// Below this many stored rows the batches are never compacted.
const COMPACT_ABOVE: usize = 1 << 16;

#[derive(Default)]
pub(crate) struct FrameRows {
    batches: HashMap<u32, Stored>,
    next: u32,
    /// Rows in the stored batches, and how many of them are in frames.
    pub(crate) stored: usize,
    pub(crate) live: usize,
}

impl FrameRows {
    /// Keeps `rows`, all of which enter frames, and returns a frame row for each.
    pub(crate) fn add(&mut self, rows: RecordBatch, arguments: Vec<Arguments>, times: &[i64]) -> Vec<FrameRow> {
        if rows.num_rows() == 0 {
            return Vec::new();
        }
        let batch = self.next;
        self.next = self.next.wrapping_add(1);
        let count = rows.num_rows();
        self.stored += count;
        self.live += count;
        self.batches.insert(batch, Stored { rows, arguments, live: count });
        times.iter().enumerate().map(|(row, &time)| FrameRow { time, batch, row: row as u32 }).collect()
    }

    /// Takes `row`'s arguments back from `accumulators` as it leaves its frame, and forgets it.
    pub(crate) fn take_back(&mut self, row: FrameRow, accumulators: &mut [Box<dyn Accumulator>]) -> Result<()> {
        let stored =
            self.batches.get_mut(&row.batch).ok_or_else(|| Error::Graph("a frame row's batch is gone".into()))?;
        accumulators::feed(accumulators, &stored.arguments, &[row.row], true)?;
        stored.live -= 1;
        self.live -= 1;
        if stored.live == 0 {
            let rows = stored.rows.num_rows();
            self.batches.remove(&row.batch);
            self.stored -= rows;
        }
        Ok(())
    }

    /// The input rows of `rows`, in their order, as one batch of `schema`.
    pub(crate) fn gather<'a>(
        &self,
        schema: &SchemaRef,
        rows: impl Iterator<Item = &'a FrameRow>,
    ) -> Result<RecordBatch> {
        let ids: Vec<u32> = self.batches.keys().copied().collect();
        let place: HashMap<u32, usize> = ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
        let indices = rows
            .map(|r| place.get(&r.batch).map(|&b| (b, r.row as usize)))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| Error::Graph("a frame row's batch is gone".into()))?;
        if indices.is_empty() {
            return Ok(RecordBatch::new_empty(schema.clone()));
        }
        let mut columns = Vec::with_capacity(schema.fields().len());
        for column in 0..schema.fields().len() {
            let arrays: Vec<&dyn Array> = ids.iter().map(|id| self.batches[id].rows.column(column).as_ref()).collect();
            columns.push(interleave(&arrays, &indices)?);
        }
        Ok(RecordBatch::try_new(schema.clone(), columns)?)
    }

    /// Whether the stored batches are mostly rows no frame holds.
    pub(crate) fn needs_compaction(&self) -> bool {
        self.stored > COMPACT_ABOVE && self.stored > 2 * self.live
    }

    /// Gathers the rows of every frame (`frames`, all of them) into one new batch.
    pub(crate) fn compact<'a>(
        &mut self,
        schema: &SchemaRef,
        aggregates: &[AggregateCall],
        frames: impl Iterator<Item = &'a mut FrameRow>,
    ) -> Result<()> {
        let mut frames: Vec<&mut FrameRow> = frames.collect();
        let rows = self.gather(schema, frames.iter().map(|r| &**r))?;
        let arguments = accumulators::arguments(aggregates, &rows)?;
        let times: Vec<i64> = frames.iter().map(|r| r.time).collect();
        self.batches.clear();
        (self.stored, self.live) = (0, 0);
        for (row, moved) in frames.iter_mut().zip(self.add(rows, arguments, &times)) {
            **row = moved;
        }
        Ok(())
    }
}
