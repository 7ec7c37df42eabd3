//! Assigns watermarks from an event-time column: the largest event time seen so far minus the
//! allowed out-of-orderness (bounded out-of-orderness, as Flink's). Records pass through
//! unchanged; a watermark follows each batch that advanced it.

use async_trait::async_trait;
use datafusion::arrow::array::{Array, Int64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::{Error, Result};
use crate::operator::{Collector, Operator};

#[derive(Debug, Clone)]
pub struct WatermarkAssigner {
    column: String,
    delay_ms: i64,
    max_event_time: Option<i64>,
}

impl WatermarkAssigner {
    pub fn new(column: &str, delay_ms: i64) -> Self {
        Self { column: column.to_string(), delay_ms, max_event_time: None }
    }

    /// The largest event time of `batch`, in milliseconds since the epoch.
    fn max_of(&self, batch: &RecordBatch) -> Result<Option<i64>> {
        let column = batch
            .column_by_name(&self.column)
            .ok_or_else(|| Error::Graph(format!("the event-time column '{}' is not in the records", self.column)))?;
        let millis = cast(column, &DataType::Timestamp(TimeUnit::Millisecond, None))?;
        let millis = cast(&millis, &DataType::Int64)?;
        let values = millis
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or_else(|| Error::Graph(format!("event-time column '{}' did not cast to milliseconds", self.column)))?;
        Ok(datafusion::arrow::compute::max(values).filter(|_| values.null_count() < values.len()))
    }
}

#[async_trait]
impl Operator for WatermarkAssigner {
    async fn process_batch(&mut self, _input: usize, batch: RecordBatch, out: &mut Collector) -> Result<()> {
        let batch_max = self.max_of(&batch)?;
        out.emit(batch);
        if let Some(batch_max) = batch_max.filter(|b| self.max_event_time.is_none_or(|m| *b > m)) {
            self.max_event_time = Some(batch_max);
            out.emit_watermark(batch_max.saturating_sub(self.delay_ms));
        }
        Ok(())
    }

    /// Upstream watermarks are ignored: this operator is where event time starts.
    async fn process_watermark(&mut self, _watermark: i64, _out: &mut Collector) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::TimestampSecondArray;
    use datafusion::arrow::datatypes::{Field, Schema};

    use super::*;

    fn batch(seconds: &[Option<i64>]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("ts", DataType::Timestamp(TimeUnit::Second, None), true)]));
        RecordBatch::try_new(schema, vec![Arc::new(TimestampSecondArray::from(seconds.to_vec()))]).unwrap()
    }

    #[tokio::test]
    async fn the_watermark_is_the_largest_event_time_less_the_delay_and_never_goes_back() {
        let mut assigner = WatermarkAssigner::new("ts", 5_000);
        let mut out = Collector::default();
        assigner.process_batch(0, batch(&[Some(10), Some(30), None]), &mut out).await.unwrap();
        assert_eq!(out.watermark, Some(25_000));
        let mut out = Collector::default();
        assigner.process_batch(0, batch(&[Some(20)]), &mut out).await.unwrap();
        assert_eq!(out.watermark, None, "a late record does not move the watermark back");
        assert_eq!(out.batches.len(), 1, "records pass through");
        let mut out = Collector::default();
        assigner.process_batch(0, batch(&[None]), &mut out).await.unwrap();
        assert_eq!(out.watermark, None);
    }
}
