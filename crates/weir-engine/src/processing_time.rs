//! Processing time: the time a record enters the pipeline, for tables without an event time
//! (Flink's `PROCTIME()` column). A source wrapped in [`ProcessingTime`] appends a column with
//! the wall-clock time each batch was read, and follows it with a watermark just behind that
//! time, so windows, interval joins and OVER aggregates run on processing time exactly as on
//! event time. While the source is idle the watermark keeps moving with the clock (every
//! [`IDLE_WATERMARK_MS`]), so a processing-time window closes on time without new records.
//! Times never go backwards, even if the wall clock does.
//!
//! `PROCTIME()` in a query (Flink's `CREATE VIEW v AS SELECT *, PROCTIME() AS pt FROM t`) is
//! [`ProcessingTimeStamp`], an operator doing the same to the rows that reach it: their
//! stream's watermark becomes processing time from there on (the event time's watermarks it
//! receives only move its clock along, as ticks, and the end of input still ends it).

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, TimestampMillisecondArray};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::Result;
use crate::operator::{Collector, Operator, RestoredState, Source, SourceEvent, StateTable, SubtaskInfo};
use crate::operators::state_ttl::now_ms;

/// How often an idle source's watermark follows the clock.
pub const IDLE_WATERMARK_MS: i64 = 100;

/// Times that never go back, and watermarks just behind them.
#[derive(Clone)]
struct Clock {
    /// The latest time given.
    last_time: i64,
    last_watermark: i64,
    read: fn() -> i64,
}

impl Clock {
    fn new(read: fn() -> i64) -> Self {
        Self { last_time: i64::MIN, last_watermark: i64::MIN, read }
    }

    /// The time now, never before the last one given.
    fn now(&mut self) -> i64 {
        self.last_time = self.last_time.max((self.read)());
        self.last_time
    }

    /// A watermark one millisecond behind `time`, if that moves it: records stamped `time` or
    /// later are never behind it.
    fn watermark_behind(&mut self, time: i64) -> Option<i64> {
        let watermark = time.saturating_sub(1);
        (watermark > self.last_watermark).then(|| {
            self.last_watermark = watermark;
            watermark
        })
    }

    /// A watermark following the clock while no records come, at most every
    /// [`IDLE_WATERMARK_MS`].
    fn idle_watermark(&mut self) -> Option<i64> {
        let now = self.now();
        match now.saturating_sub(self.last_watermark) > IDLE_WATERMARK_MS {
            true => self.watermark_behind(now),
            false => None,
        }
    }

    /// `batch` with a last column of the time now (the columns of `schema`).
    fn stamp(&mut self, batch: &RecordBatch, schema: &SchemaRef) -> Result<(RecordBatch, i64)> {
        let time = self.now();
        let mut columns = batch.columns().to_vec();
        let times: ArrayRef = Arc::new(TimestampMillisecondArray::from(vec![time; batch.num_rows()]));
        columns.push(times);
        Ok((RecordBatch::try_new(schema.clone(), columns)?, time))
    }
}

pub struct ProcessingTime {
    inner: Box<dyn Source>,
    /// The inner source's columns and the processing-time column last.
    schema: SchemaRef,
    /// A watermark to emit before reading on.
    pending_watermark: Option<i64>,
    clock: Clock,
}

impl ProcessingTime {
    /// `schema`: the inner source's columns followed by the processing-time column.
    pub fn new(inner: Box<dyn Source>, schema: SchemaRef) -> Self {
        Self::with_clock(inner, schema, now_ms)
    }

    fn with_clock(inner: Box<dyn Source>, schema: SchemaRef, clock: fn() -> i64) -> Self {
        Self { inner, schema, pending_watermark: None, clock: Clock::new(clock) }
    }
}

/// `PROCTIME()` in a query: each batch gets a last column of the time it reached this
/// operator, followed by a watermark just behind it.
#[derive(Clone)]
pub struct ProcessingTimeStamp {
    /// The input's columns and the processing-time column last.
    schema: SchemaRef,
    clock: Clock,
}

impl ProcessingTimeStamp {
    /// `schema`: the input's columns followed by the processing-time column.
    pub fn new(schema: SchemaRef) -> Self {
        Self::with_clock(schema, now_ms)
    }

    fn with_clock(schema: SchemaRef, clock: fn() -> i64) -> Self {
        Self { schema, clock: Clock::new(clock) }
    }
}

#[async_trait]
impl Operator for ProcessingTimeStamp {
    async fn process_batch(&mut self, _input: usize, batch: RecordBatch, out: &mut Collector) -> Result<()> {
        let (stamped, time) = self.clock.stamp(&batch, &self.schema)?;
        out.emit(stamped);
        if let Some(watermark) = self.clock.watermark_behind(time) {
            out.emit_watermark(watermark);
        }
        Ok(())
    }

    /// The input's own event time is not this stream's time any more: its watermarks only
    /// tick the clock, and its end (`i64::MAX`) ends this one.
    async fn process_watermark(&mut self, watermark: i64, out: &mut Collector) -> Result<()> {
        let next = match watermark {
            i64::MAX => Some(i64::MAX),
            _ => self.clock.idle_watermark(),
        };
        if let Some(watermark) = next {
            out.emit_watermark(watermark);
        }
        Ok(())
    }

    /// While no input comes, the clock still moves the watermark, as for an idle source.
    fn tick_interval(&self) -> Option<std::time::Duration> {
        Some(std::time::Duration::from_millis(IDLE_WATERMARK_MS as u64))
    }

    async fn process_tick(&mut self, out: &mut Collector) -> Result<()> {
        if let Some(watermark) = self.clock.idle_watermark() {
            out.emit_watermark(watermark);
        }
        Ok(())
    }
}

#[async_trait]
impl Source for ProcessingTime {
    async fn open(&mut self, info: &SubtaskInfo, restored: RestoredState) -> Result<()> {
        self.inner.open(info, restored).await
    }

    async fn next(&mut self) -> Result<SourceEvent> {
        if let Some(watermark) = self.pending_watermark.take() {
            return Ok(SourceEvent::Watermark(watermark));
        }
        match self.inner.next().await? {
            SourceEvent::Batch(batch) => {
                let (stamped, time) = self.clock.stamp(&batch, &self.schema)?;
                self.pending_watermark = self.clock.watermark_behind(time);
                Ok(SourceEvent::Batch(stamped))
            }
            // The inner source's own event time, if it has one, is not this table's time.
            SourceEvent::Watermark(_) | SourceEvent::Idle => {
                Ok(self.clock.idle_watermark().map_or(SourceEvent::Idle, SourceEvent::Watermark))
            }
            SourceEvent::End => Ok(SourceEvent::End),
        }
    }

    async fn snapshot(&mut self, checkpoint_id: u64) -> Result<Vec<StateTable>> {
        self.inner.snapshot(checkpoint_id).await
    }

    async fn checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<()> {
        self.inner.checkpoint_complete(checkpoint_id).await
    }

    async fn checkpoint_aborted(&mut self, checkpoint_id: u64) -> Result<()> {
        self.inner.checkpoint_aborted(checkpoint_id).await
    }

    async fn close(&mut self) -> Result<()> {
        self.inner.close().await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicI64, Ordering};

    use datafusion::arrow::array::{Array, Int64Array};
    use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};

    use super::*;

    static CLOCK: AtomicI64 = AtomicI64::new(1_000);

    fn clock() -> i64 {
        CLOCK.load(Ordering::SeqCst)
    }

    /// One batch of three rows, then nothing.
    struct OneBatch(bool);

    #[async_trait]
    impl Source for OneBatch {
        async fn next(&mut self) -> Result<SourceEvent> {
            if std::mem::replace(&mut self.0, false) {
                let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, false)]));
                return Ok(SourceEvent::Batch(RecordBatch::try_new(
                    schema,
                    vec![Arc::new(Int64Array::from(vec![1, 2, 3]))],
                )?));
            }
            Ok(SourceEvent::Idle)
        }
    }

    #[tokio::test]
    async fn batches_get_the_time_they_were_read_and_the_watermark_follows_the_clock() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("pt", DataType::Timestamp(TimeUnit::Millisecond, None), false),
        ]));
        let mut source = ProcessingTime::with_clock(Box::new(OneBatch(true)), schema, clock);
        let SourceEvent::Batch(batch) = source.next().await.unwrap() else { panic!("a batch first") };
        let times = batch.column(1).as_any().downcast_ref::<TimestampMillisecondArray>().unwrap();
        assert_eq!((times.len(), times.value(0), times.value(2)), (3, 1_000, 1_000));
        assert!(matches!(source.next().await.unwrap(), SourceEvent::Watermark(999)), "just behind the batch");
        CLOCK.store(1_050, Ordering::SeqCst);
        assert!(matches!(source.next().await.unwrap(), SourceEvent::Idle), "not yet worth a watermark");
        CLOCK.store(1_200, Ordering::SeqCst);
        assert!(matches!(source.next().await.unwrap(), SourceEvent::Watermark(1_199)), "idle, the clock moves it");
        CLOCK.store(500, Ordering::SeqCst);
        assert!(matches!(source.next().await.unwrap(), SourceEvent::Idle), "a clock going back moves nothing");
    }

    static STAMP_CLOCK: AtomicI64 = AtomicI64::new(5_000);

    fn stamp_clock() -> i64 {
        STAMP_CLOCK.load(Ordering::SeqCst)
    }

    /// PROCTIME() in a query: rows get the time they came, the event time's watermarks only
    /// tick the clock, and the end of input passes.
    #[tokio::test]
    async fn rows_are_stamped_where_proctime_is_called_and_event_time_no_longer_counts() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("pt", DataType::Timestamp(TimeUnit::Millisecond, None), false),
        ]));
        let input = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(input, vec![Arc::new(Int64Array::from(vec![1, 2]))]).unwrap();
        let mut stamp = ProcessingTimeStamp::with_clock(schema, stamp_clock);
        let mut out = Collector::default();
        stamp.process_batch(0, batch, &mut out).await.unwrap();
        let times = out.batches[0].column(1).as_any().downcast_ref::<TimestampMillisecondArray>().unwrap();
        assert_eq!((times.value(0), times.value(1)), (5_000, 5_000));
        assert_eq!(out.watermark, Some(4_999));
        let mut out = Collector::default();
        stamp.process_watermark(1_700_000_000_000, &mut out).await.unwrap();
        assert_eq!(out.watermark, None, "an event time's watermark is not this stream's");
        STAMP_CLOCK.store(5_500, Ordering::SeqCst);
        stamp.process_watermark(1_700_000_000_001, &mut out).await.unwrap();
        assert_eq!(out.watermark, Some(5_499), "but it ticks the clock");
        // With no input at all, the task's ticks move it with the clock.
        assert!(stamp.tick_interval().is_some());
        let mut out = Collector::default();
        STAMP_CLOCK.store(5_800, Ordering::SeqCst);
        stamp.process_tick(&mut out).await.unwrap();
        assert_eq!(out.watermark, Some(5_799), "a tick moves it");
        stamp.process_watermark(i64::MAX, &mut out).await.unwrap();
        assert_eq!(out.watermark, Some(i64::MAX), "the end of input ends it");
    }
}
