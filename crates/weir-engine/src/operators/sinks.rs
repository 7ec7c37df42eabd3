//! Sinks that need no external system: one that drops everything (benchmarks, tests) and one
//! that keeps the latest rows for a client to look at.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::Result;
use crate::operator::{Collector, Operator};

/// Drops what it gets.
#[derive(Debug, Default)]
pub struct Blackhole;

#[async_trait]
impl Operator for Blackhole {
    async fn process_batch(&mut self, _input: usize, _batch: RecordBatch, _out: &mut Collector) -> Result<()> {
        Ok(())
    }
}

/// The latest rows a preview sink received, at most `capacity` of them (older ones are
/// dropped): bounded memory whatever the query produces.
#[derive(Debug, Clone)]
pub struct PreviewBuffer {
    inner: Arc<Mutex<Kept>>,
    capacity: usize,
}

#[derive(Debug, Default)]
struct Kept {
    batches: VecDeque<RecordBatch>,
    rows: usize,
    /// Rows dropped to stay within the capacity.
    dropped: usize,
}

impl PreviewBuffer {
    pub fn new(capacity: usize) -> Self {
        Self { inner: Arc::new(Mutex::new(Kept::default())), capacity: capacity.max(1) }
    }

    fn push(&self, batch: RecordBatch) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.rows += batch.num_rows();
        inner.batches.push_back(batch);
        // Drop the oldest rows over the capacity: whole batches, and the head of the oldest one
        // left (a single batch larger than the capacity keeps its latest rows; dropping it
        // whole once left a join's preview empty).
        while inner.rows > self.capacity {
            let excess = inner.rows - self.capacity;
            let Some(oldest) = inner.batches.pop_front() else { break };
            let dropped = excess.min(oldest.num_rows());
            if dropped < oldest.num_rows() {
                inner.batches.push_front(oldest.slice(dropped, oldest.num_rows() - dropped));
            }
            inner.rows -= dropped;
            inner.dropped += dropped;
        }
    }

    /// The rows kept now, oldest first.
    pub fn batches(&self) -> Vec<RecordBatch> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).batches.iter().cloned().collect()
    }

    /// The rows from absolute position `position` on (rows are numbered from 0 in arrival
    /// order, dropped ones included): the batches, the position after them, and how many rows
    /// from `position` were dropped before they could be read.
    pub fn since(&self, position: usize) -> (Vec<RecordBatch>, usize, usize) {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let end = inner.dropped + inner.rows;
        let skipped = inner.dropped.saturating_sub(position);
        let mut at = inner.dropped;
        let mut batches = Vec::new();
        for batch in &inner.batches {
            let rows = batch.num_rows();
            if at + rows > position {
                let from = position.saturating_sub(at);
                batches.push(batch.slice(from, rows - from));
            }
            at += rows;
        }
        (batches, end.max(position), skipped)
    }

    /// How many rows were dropped to stay within the capacity.
    pub fn dropped(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).dropped
    }
}

/// Writes into a [`PreviewBuffer`] (not transactional: it is for watching, not for results
/// that must be exact).
#[derive(Debug, Clone)]
pub struct PreviewSink {
    buffer: PreviewBuffer,
}

impl PreviewSink {
    pub fn new(buffer: PreviewBuffer) -> Self {
        Self { buffer }
    }
}

#[async_trait]
impl Operator for PreviewSink {
    async fn process_batch(&mut self, _input: usize, batch: RecordBatch, _out: &mut Collector) -> Result<()> {
        self.buffer.push(batch);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Array, Int64Array};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn batch(values: std::ops::Range<i64>) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from_iter_values(values))]).unwrap()
    }

    fn kept(buffer: &PreviewBuffer) -> Vec<i64> {
        let batches = buffer.batches();
        batches
            .iter()
            .flat_map(|b| b.column(0).as_any().downcast_ref::<Int64Array>().unwrap().values().to_vec())
            .collect()
    }

    /// The latest rows are kept, also when one batch alone is larger than the capacity.
    #[test]
    fn the_latest_rows_are_kept_whatever_the_batches() {
        let buffer = PreviewBuffer::new(5);
        buffer.push(batch(0..3));
        buffer.push(batch(3..6));
        assert_eq!(kept(&buffer), vec![1, 2, 3, 4, 5]);
        buffer.push(batch(6..20));
        assert_eq!(kept(&buffer), vec![15, 16, 17, 18, 19]);
        assert_eq!(buffer.dropped(), 15);
        let (batches, end, skipped) = buffer.since(10);
        assert_eq!((batches.iter().map(RecordBatch::num_rows).sum::<usize>(), end, skipped), (5, 20, 5));
    }
}
