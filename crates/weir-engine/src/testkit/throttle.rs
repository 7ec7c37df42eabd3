//! A slow stage: passes each batch on after a pause, so the queue in front of it fills and the
//! stages before it feel back-pressure.

use std::time::Duration;

use async_trait::async_trait;
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::Result;
use crate::operator::{Collector, Operator};

pub struct Throttle(pub Duration);

#[async_trait]
impl Operator for Throttle {
    async fn process_batch(&mut self, _input: usize, batch: RecordBatch, out: &mut Collector) -> Result<()> {
        tokio::time::sleep(self.0).await;
        out.emit(batch);
        Ok(())
    }
}
