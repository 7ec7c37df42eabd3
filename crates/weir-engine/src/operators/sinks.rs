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
    inner: Arc<Mutex<(VecDeque<RecordBatch>, usize)>>,
    capacity: usize,
}

impl PreviewBuffer {
    pub fn new(capacity: usize) -> Self {
        Self { inner: Arc::new(Mutex::new((VecDeque::new(), 0))), capacity: capacity.max(1) }
    }

    fn push(&self, batch: RecordBatch) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.1 += batch.num_rows();
        inner.0.push_back(batch);
        while inner.1 > self.capacity {
            let Some(oldest) = inner.0.pop_front() else { break };
            inner.1 -= oldest.num_rows();
        }
    }

    /// The rows kept now, oldest first.
    pub fn batches(&self) -> Vec<RecordBatch> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).0.iter().cloned().collect()
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
