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
        while inner.rows > self.capacity {
            let Some(oldest) = inner.batches.pop_front() else { break };
            inner.rows -= oldest.num_rows();
            inner.dropped += oldest.num_rows();
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
