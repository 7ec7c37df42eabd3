//! OVER aggregates over event time: `agg(x) OVER (PARTITION BY ... ORDER BY ts ROWS|RANGE
//! BETWEEN ... PRECEDING AND CURRENT ROW)`, as Flink's over aggregation. Every input row comes
//! out once, with the aggregates over its frame: the rows of its partition that precede it in
//! event time, as far back as the frame reaches. A row is held until the watermark passes its
//! time, when no earlier row can still arrive; then the partition's rows are taken in time
//! order (arrival order among equal times), added to the partition's accumulators, and the
//! rows that fall out of a bounded frame are taken back (in the order they came in, which is
//! what DataFusion's sliding accumulators, made for window frames, expect). In a RANGE frame,
//! rows of equal time are peers: all are in each other's frame. Late rows (at or behind the
//! watermark) are dropped, as Flink drops them. The output is append-only and keeps the time
//! column: a row leaves before the watermark that passes it is forwarded.
//!
//! The snapshot holds the rows still waiting for the watermark, and per partition either the
//! rows of its bounded frame (fed again on restore) or, for an unbounded frame, its
//! accumulators' state; all keyed by the hash of the partition columns. With incremental
//! checkpoints the frames and accumulators of the partitions that took rows since the last
//! snapshot are written (a partition is never removed); the waiting rows, which the watermark
//! soon lets go, are written whole.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, ArrayRef, BooleanArray, Int64Array, UInt32Array};
use datafusion::arrow::compute::{
    SortColumn, cast, concat_batches, filter_record_batch, lexsort_to_indices, not, take,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{OwnedRow, RowConverter, SortField};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Accumulator;

use crate::error::{Error, Result};
use crate::metrics::OperatorMetrics;
use crate::operator::{Collector, Delta, Operator, RestoredState, StateTable};
use crate::operators::accumulators::{self, AggregateCall};
use crate::operators::frame_rows::{FrameRow, FrameRows};
use crate::partition::key_hashes;
use crate::state_table::KeyedTable;

const PENDING: &str = "pending";
const FRAMES: &str = "frames";
const ACCUMULATORS: &str = "accumulators";
/// A frame row's place in its partition's frame.
const POSITION: &str = "__position";

/// How far back an OVER aggregate's frame reaches from the current row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    /// `ROWS BETWEEN n PRECEDING AND CURRENT ROW`; `None`: UNBOUNDED PRECEDING.
    Rows { preceding: Option<usize> },
    /// `RANGE BETWEEN INTERVAL '...' PRECEDING AND CURRENT ROW` over the time column, in
    /// milliseconds; `None`: UNBOUNDED PRECEDING (the default frame with an ORDER BY).
    Range { preceding_ms: Option<i64> },
}

impl Frame {
    fn bounded(self) -> bool {
        matches!(self, Frame::Rows { preceding: Some(_) } | Frame::Range { preceding_ms: Some(_) })
    }
}

struct Partition {
    accumulators: Vec<Box<dyn Accumulator>>,
    /// The rows in the frame, oldest first (bounded frames only).
    frame: VecDeque<FrameRow>,
}

pub struct OverAggregate {
    /// The partition columns (appended to the input, routed by).
    partition: Vec<String>,
    /// The event-time column the rows are ordered by (an index in the input).
    time_column: usize,
    frame: Frame,
    aggregates: Vec<AggregateCall>,
    /// The input: the row columns, then the partition columns.
    input: SchemaRef,
    /// The row columns, then one column per aggregate.
    output: SchemaRef,
    /// Rows waiting for the watermark to pass their time.
    pending: Vec<RecordBatch>,
    partitions: HashMap<OwnedRow, Partition>,
    /// The rows in the partitions' bounded frames.
    frame_rows: FrameRows,
    converter: Option<RowConverter>,
    watermark: i64,
    /// The subtask's counters: late rows and rows without a time are counted there.
    metrics: Arc<OperatorMetrics>,
    /// With incremental checkpoints: the partitions that took rows since the last snapshot.
    changed: Option<HashSet<OwnedRow>>,
}

impl Clone for OverAggregate {
    /// A fresh instance with the same plan.
    fn clone(&self) -> Self {
        Self::new(
            self.partition.clone(),
            self.time_column,
            self.frame,
            self.aggregates.clone(),
            self.input.clone(),
            self.output.clone(),
        )
    }
}

/// Milliseconds of a time column.
fn millis(column: &ArrayRef) -> Result<Int64Array> {
    let values = cast(&cast(column, &DataType::Timestamp(TimeUnit::Millisecond, None))?, &DataType::Int64)?;
    values
        .as_any()
        .downcast_ref::<Int64Array>()
        .cloned()
        .ok_or_else(|| Error::Graph("an OVER aggregate's time column did not cast to milliseconds".into()))
}

impl OverAggregate {
    pub fn new(
        partition: Vec<String>,
        time_column: usize,
        frame: Frame,
        aggregates: Vec<AggregateCall>,
        input: SchemaRef,
        output: SchemaRef,
    ) -> Self {
        Self {
            partition,
            time_column,
            frame,
            aggregates,
            input,
            output,
            pending: Vec::new(),
            partitions: HashMap::new(),
            frame_rows: FrameRows::default(),
            converter: None,
            watermark: i64::MIN,
            metrics: Arc::default(),
            changed: None,
        }
    }

    fn accumulators(&self) -> Result<Vec<Box<dyn Accumulator>>> {
        let create = |a: &AggregateCall| match self.frame.bounded() {
            true => a.function.create_sliding_accumulator(),
            false => a.function.create_accumulator(),
        };
        Ok(self.aggregates.iter().map(create).collect::<datafusion::error::Result<_>>()?)
    }

    fn partition_columns(&self, batch: &RecordBatch) -> Result<Vec<ArrayRef>> {
        self.partition
            .iter()
            .map(|name| batch.column_by_name(name).cloned().ok_or_else(|| Error::Graph(format!("'{name}' is missing"))))
            .collect()
    }

    /// The partition key of every row of `batch`.
    fn keys(&mut self, batch: &RecordBatch) -> Result<datafusion::arrow::row::Rows> {
        let columns = self.partition_columns(batch)?;
        if self.converter.is_none() {
            let fields = columns.iter().map(|c| SortField::new(c.data_type().clone())).collect();
            self.converter = Some(RowConverter::new(fields)?);
        }
        let converter = self.converter.as_ref().ok_or_else(|| Error::Graph("partition converter missing".into()))?;
        Ok(converter.convert_columns(&columns)?)
    }

    /// Takes out of a bounded frame the rows that the row at `time` leaves behind.
    fn shrink(frame: Frame, partition: &mut Partition, time: i64, rows: &mut FrameRows) -> Result<()> {
        loop {
            let leaves = match (frame, partition.frame.front()) {
                (Frame::Rows { preceding: Some(n) }, Some(_)) => partition.frame.len() > n + 1,
                (Frame::Range { preceding_ms: Some(ms) }, Some(oldest)) => oldest.time < time.saturating_sub(ms),
                _ => false,
            };
            let Some(left) = leaves.then(|| partition.frame.pop_front()).flatten() else { return Ok(()) };
            rows.take_back(left, &mut partition.accumulators)?;
        }
    }

    /// Emits `ready` (rows the watermark has passed) in time order per partition, each with
    /// its frame's aggregates.
    fn compute(&mut self, ready: RecordBatch, out: &mut Collector) -> Result<()> {
        let rows = ready.num_rows();
        if rows == 0 {
            return Ok(());
        }
        // Sorted by partition, time, then arrival.
        let mut sort: Vec<SortColumn> =
            self.partition_columns(&ready)?.into_iter().map(|values| SortColumn { values, options: None }).collect();
        sort.push(SortColumn { values: ready.column(self.time_column).clone(), options: None });
        sort.push(SortColumn { values: Arc::new(UInt32Array::from_iter_values(0..rows as u32)), options: None });
        let order = lexsort_to_indices(&sort, None)?;
        let columns = ready.columns().iter().map(|c| take(c, &order, None)).collect::<std::result::Result<_, _>>()?;
        let ready = RecordBatch::try_new(self.input.clone(), columns)?;
        let times = millis(ready.column(self.time_column))?;
        let keys = self.keys(&ready)?;
        let arguments = accumulators::arguments(&self.aggregates, &ready)?;
        let (frame, bounded) = (self.frame, self.frame.bounded());
        // Every row enters its partition's frame, if the frame is bounded.
        let frame_rows = match bounded {
            true => self.frame_rows.add(ready.clone(), arguments.clone(), times.values()),
            false => Vec::new(),
        };
        let mut values: Vec<Vec<ScalarValue>> = Vec::with_capacity(rows);
        let mut run = 0;
        while run < rows {
            // A partition's rows (the batch is sorted by partition): its accumulators found once.
            let mut run_end = run + 1;
            while run_end < rows && keys.row(run_end) == keys.row(run) {
                run_end += 1;
            }
            let key = keys.row(run).owned();
            if let Some(changed) = &mut self.changed {
                changed.insert(key.clone());
            }
            if !self.partitions.contains_key(&key) {
                let accumulators = self.accumulators()?;
                self.partitions.insert(key.clone(), Partition { accumulators, frame: VecDeque::new() });
            }
            let partition =
                self.partitions.get_mut(&key).ok_or_else(|| Error::Graph("OVER partition vanished".into()))?;
            let mut start = run;
            while start < run_end {
                // The current row, with its peers in a RANGE frame (same time).
                let mut end = start + 1;
                if matches!(frame, Frame::Range { .. }) {
                    while end < run_end && times.value(end) == times.value(start) {
                        end += 1;
                    }
                }
                let indices: Vec<u32> = (start as u32..end as u32).collect();
                accumulators::feed(&mut partition.accumulators, &arguments, &indices, false)?;
                if bounded {
                    partition.frame.extend(&frame_rows[start..end]);
                    Self::shrink(frame, partition, times.value(start), &mut self.frame_rows)?;
                }
                let current: Vec<ScalarValue> = partition
                    .accumulators
                    .iter_mut()
                    .map(|a| a.evaluate())
                    .collect::<datafusion::error::Result<_>>()?;
                for _ in start..end {
                    values.push(current.clone());
                }
                start = end;
            }
            run = run_end;
        }
        if self.frame_rows.needs_compaction() {
            let frames = self.partitions.values_mut().flat_map(|p| p.frame.iter_mut());
            self.frame_rows.compact(&self.input, &self.aggregates, frames)?;
        }
        let width = self.output.fields().len() - self.aggregates.len();
        let mut columns: Vec<ArrayRef> = ready.columns()[..width].to_vec();
        columns.extend(accumulators::columns(&values, &self.output.fields()[width..])?);
        out.emit(RecordBatch::try_new(self.output.clone(), columns)?);
        Ok(())
    }

    /// `columns` (rows of the input) with the hash of their partition columns in front.
    fn keyed(&self, schema: &SchemaRef, batch: &RecordBatch, extra: Vec<ArrayRef>) -> Result<RecordBatch> {
        let mut columns: Vec<ArrayRef> = vec![Arc::new(key_hashes(batch, &self.partition)?)];
        columns.extend(batch.columns().iter().cloned());
        columns.extend(extra);
        Ok(RecordBatch::try_new(schema.clone(), columns)?)
    }

    /// The pending table (rows waiting for the watermark) and, with their position in their
    /// partition's frame after them, the frames table: both hold input rows.
    fn rows_table(&self, with_position: bool) -> KeyedTable {
        let position = with_position.then(|| Arc::new(Field::new(POSITION, DataType::Int64, true)));
        KeyedTable::new(self.input.fields().iter().cloned().chain(position))
    }

    /// The accumulators table (unbounded frames): the partition columns, then each
    /// accumulator's state columns; with the number of state columns of each accumulator.
    fn accumulators_table(&self) -> Result<(KeyedTable, Vec<usize>)> {
        let mut fields = Vec::new();
        for name in &self.partition {
            fields.push(self.input.field_with_name(name)?.clone().with_nullable(true));
        }
        let states = self.accumulators()?.iter_mut().map(accumulators::state_types).collect::<Result<Vec<_>>>()?;
        let widths = accumulators::push_state_fields(&mut fields, states);
        Ok((KeyedTable::new(fields), widths))
    }

    /// The snapshot: the waiting rows, and the frames (bounded) or accumulators (unbounded) of
    /// the partitions `keys`.
    fn tables(&mut self, keys: &[OwnedRow]) -> Result<Vec<StateTable>> {
        let schema = self.rows_table(false).schema().clone();
        let mut pending = Vec::new();
        for batch in &self.pending {
            pending.push(self.keyed(&schema, batch, Vec::new())?);
        }
        if pending.is_empty() {
            pending.push(RecordBatch::new_empty(schema.clone()));
        }
        let mut tables = vec![StateTable { name: PENDING.into(), schema, batches: pending, delta: None }];
        let partitions: Vec<&OwnedRow> = keys.iter().filter(|key| self.partitions.contains_key(*key)).collect();
        if self.frame.bounded() {
            let schema = self.rows_table(true).schema().clone();
            let frames: Vec<&Partition> = partitions.iter().filter_map(|key| self.partitions.get(*key)).collect();
            let positions: Int64Array = frames.iter().flat_map(|p| (0..p.frame.len() as i64).map(Some)).collect();
            let rows = self.frame_rows.gather(&self.input, frames.iter().flat_map(|p| p.frame.iter()))?;
            let batch = match rows.num_rows() {
                0 => RecordBatch::new_empty(schema.clone()),
                _ => self.keyed(&schema, &rows, vec![Arc::new(positions)])?,
            };
            tables.push(StateTable { name: FRAMES.into(), schema, batches: vec![batch], delta: None });
            return Ok(tables);
        }
        let schema = self.accumulators_table()?.0.schema().clone();
        let batch = match (&self.converter, partitions.is_empty()) {
            (Some(converter), false) => {
                let mut states: Vec<Vec<ScalarValue>> = Vec::new();
                for key in &partitions {
                    let fresh = self.accumulators()?;
                    let Some(partition) = self.partitions.get_mut(*key) else { continue };
                    states.push(accumulators::snapshot_states(&mut partition.accumulators, fresh)?);
                }
                let key_columns = converter.convert_rows(partitions.iter().map(|k| k.row()))?;
                let keyed = RecordBatch::try_new(
                    Arc::new(Schema::new(schema.fields()[1..=self.partition.len()].to_vec())),
                    key_columns.clone(),
                )?;
                let mut columns: Vec<ArrayRef> = vec![Arc::new(key_hashes(&keyed, &self.partition)?)];
                columns.extend(key_columns);
                columns.extend(accumulators::columns(&states, &schema.fields()[1 + self.partition.len()..])?);
                RecordBatch::try_new(schema.clone(), columns)?
            }
            _ => RecordBatch::new_empty(schema.clone()),
        };
        tables.push(StateTable { name: ACCUMULATORS.into(), schema, batches: vec![batch], delta: None });
        Ok(tables)
    }

    /// The input rows of a restored pending or frames table.
    fn restored_rows(&self, table: &KeyedTable, batch: &RecordBatch) -> Result<RecordBatch> {
        let width = self.input.fields().len();
        Ok(RecordBatch::try_new(self.input.clone(), table.read(batch, &table.fields()[..width])?)?)
    }
}

#[async_trait]
impl Operator for OverAggregate {
    /// Working state: a bounded run's final checkpoint leaves it out.
    fn state_needed_after_finish(&self) -> bool {
        false
    }

    async fn open(&mut self, info: &crate::SubtaskInfo, restored: RestoredState) -> Result<()> {
        self.metrics = info.metrics.clone();
        let pending = self.rows_table(false);
        for batch in restored.table(PENDING) {
            let rows = self.restored_rows(&pending, batch)?;
            self.pending.push(rows);
        }
        // Frame rows in their old order (the position column), then fed in again.
        let frames: Vec<RecordBatch> = restored.table(FRAMES).to_vec();
        if let Some(first) = frames.first() {
            let all = concat_batches(&first.schema(), &frames)?;
            let table = self.rows_table(true);
            let rows = self.restored_rows(&table, &all)?;
            let positions = table.read(&all, &table.fields()[self.input.fields().len()..])?;
            let mut sort: Vec<SortColumn> =
                self.partition_columns(&rows)?.into_iter().map(|values| SortColumn { values, options: None }).collect();
            sort.extend(positions.into_iter().map(|values| SortColumn { values, options: None }));
            let order = lexsort_to_indices(&sort, None)?;
            let columns =
                rows.columns().iter().map(|c| take(c, &order, None)).collect::<std::result::Result<_, _>>()?;
            let rows = RecordBatch::try_new(self.input.clone(), columns)?;
            let keys = self.keys(&rows)?;
            let times = millis(rows.column(self.time_column))?;
            let arguments = accumulators::arguments(&self.aggregates, &rows)?;
            let frame_rows = self.frame_rows.add(rows.clone(), arguments.clone(), times.values());
            for (row, frame_row) in frame_rows.into_iter().enumerate() {
                let key = keys.row(row).owned();
                if !self.partitions.contains_key(&key) {
                    let accumulators = self.accumulators()?;
                    self.partitions.insert(key.clone(), Partition { accumulators, frame: VecDeque::new() });
                }
                let Some(partition) = self.partitions.get_mut(&key) else { continue };
                accumulators::feed(&mut partition.accumulators, &arguments, &[row as u32], false)?;
                partition.frame.push_back(frame_row);
            }
        }
        let (table, widths) = self.accumulators_table()?;
        let keys_width = self.partition.len();
        for batch in restored.table(ACCUMULATORS) {
            let key_fields = &table.fields()[..keys_width];
            let key_columns = table.read(batch, key_fields)?;
            let states = table.read(batch, &table.fields()[keys_width..])?;
            let keyed = RecordBatch::try_new(Arc::new(Schema::new(key_fields.to_vec())), key_columns)?;
            let keys = self.keys(&keyed)?;
            for row in 0..batch.num_rows() {
                let mut accumulators = self.accumulators()?;
                accumulators::restore_row(&mut accumulators, &states, &widths, row)?;
                self.partitions.insert(keys.row(row).owned(), Partition { accumulators, frame: VecDeque::new() });
            }
        }
        self.changed = info.incremental.then(HashSet::new);
        Ok(())
    }

    async fn process_batch(&mut self, _input: usize, batch: RecordBatch, _out: &mut Collector) -> Result<()> {
        let times = millis(batch.column(self.time_column))?;
        // Late rows (and rows without a time) cannot be placed in event-time order: dropped.
        let keep: BooleanArray = times.iter().map(|t| Some(t.is_some_and(|t| t > self.watermark))).collect();
        let null_time = times.null_count() as u64;
        let late = (times.len() as u64 - null_time).saturating_sub(keep.true_count() as u64);
        self.metrics.dropped(late, null_time);
        let rows = RecordBatch::try_new(self.input.clone(), batch.columns().to_vec())?;
        let kept = filter_record_batch(&rows, &keep)?;
        if kept.num_rows() > 0 {
            self.pending.push(kept);
        }
        Ok(())
    }

    async fn process_watermark(&mut self, watermark: i64, out: &mut Collector) -> Result<()> {
        self.watermark = self.watermark.max(watermark);
        if !self.pending.is_empty() {
            let pending = concat_batches(&self.input, &self.pending)?;
            let times = millis(pending.column(self.time_column))?;
            let due: BooleanArray = times.iter().map(|t| Some(t.is_some_and(|t| t <= self.watermark))).collect();
            let waiting = filter_record_batch(&pending, &not(&due)?)?;
            self.pending = if waiting.num_rows() > 0 { vec![waiting] } else { Vec::new() };
            self.compute(filter_record_batch(&pending, &due)?, out)?;
        }
        out.emit_watermark(watermark);
        Ok(())
    }

    async fn snapshot(&mut self, _checkpoint_id: u64) -> Result<Vec<StateTable>> {
        if let Some(changed) = &mut self.changed {
            changed.clear();
        }
        let keys: Vec<OwnedRow> = self.partitions.keys().cloned().collect();
        self.tables(&keys)
    }

    /// The frames or accumulators of the partitions that took rows since the last snapshot.
    async fn snapshot_changes(&mut self, _checkpoint_id: u64) -> Result<Option<Vec<StateTable>>> {
        let Some(changed) = self.changed.replace(HashSet::new()) else { return Ok(None) };
        let keys: Vec<OwnedRow> = changed.into_iter().collect();
        let mut tables = self.tables(&keys)?;
        for table in tables.iter_mut().filter(|t| t.name != PENDING) {
            let key_fields = table.schema.fields()[..1].iter().cloned().chain(
                self.partition
                    .iter()
                    .filter_map(|name| table.schema.field_with_name(name).ok())
                    .map(|f| Arc::new(f.clone())),
            );
            let deleted = RecordBatch::new_empty(Arc::new(Schema::new(key_fields.collect::<Vec<_>>())));
            table.delta = Some(Delta { key: self.partition.clone(), deleted });
        }
        Ok(Some(tables))
    }

    /// The input ended: every waiting row is complete.
    async fn finish(&mut self, out: &mut Collector) -> Result<()> {
        let pending = concat_batches(&self.input, &self.pending)?;
        self.pending.clear();
        self.compute(pending, out)
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::TimestampMillisecondArray;
    use datafusion::functions_aggregate::sum::sum_udaf;
    use datafusion::physical_expr::aggregate::AggregateExprBuilder;
    use datafusion::physical_expr::expressions::col;

    use super::*;
    use crate::SubtaskInfo;

    fn input() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
            Field::new("k", DataType::Int64, true),
        ]))
    }

    /// `sum(ts) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)`.
    fn sum_of_two() -> OverAggregate {
        sum_over(Frame::Rows { preceding: Some(1) })
    }

    /// `sum(ts) OVER (PARTITION BY k ORDER BY ts <frame>)`.
    fn sum_over(frame: Frame) -> OverAggregate {
        let input = input();
        let ts =
            datafusion::physical_expr::expressions::CastExpr::new(col("ts", &input).unwrap(), DataType::Int64, None);
        let sum =
            AggregateExprBuilder::new(sum_udaf(), vec![Arc::new(ts)]).schema(input.clone()).alias("s").build().unwrap();
        let output =
            Schema::new(vec![input.field(0).clone(), input.field(1).clone(), Field::new("s", DataType::Int64, true)]);
        let call = AggregateCall { function: Arc::new(sum), filter: None };
        OverAggregate::new(vec!["k".into()], 0, frame, vec![call], input, Arc::new(output))
    }

    /// Feeds rows (time, key), passes the watermark over them, and returns each output row's
    /// (time, key, sum).
    async fn feed(over: &mut OverAggregate, rows: &[(i64, i64)]) -> Vec<(i64, i64, i64)> {
        let times: TimestampMillisecondArray = rows.iter().map(|r| Some(r.0)).collect();
        let keys: Int64Array = rows.iter().map(|r| Some(r.1)).collect();
        let batch = RecordBatch::try_new(input(), vec![Arc::new(times), Arc::new(keys)]).unwrap();
        let mut out = Collector::default();
        over.process_batch(0, batch, &mut out).await.unwrap();
        let last = rows.iter().map(|r| r.0).max().unwrap_or(0);
        over.process_watermark(last, &mut out).await.unwrap();
        let mut result = Vec::new();
        for batch in out.batches {
            let times = millis(batch.column(0)).unwrap();
            let int = |i: usize| batch.column(i).as_any().downcast_ref::<Int64Array>().unwrap().clone();
            let (keys, sums) = (int(1), int(2));
            for row in 0..batch.num_rows() {
                result.push((times.value(row), keys.value(row), sums.value(row)));
            }
        }
        result
    }

    /// Quiet partitions keep their last rows, and with them the batches those came in; once
    /// the batches are mostly rows no frame holds, the held ones are gathered into one batch.
    /// Frames still take back the right rows after that, and a restore gets every frame.
    #[tokio::test]
    async fn frames_survive_compaction_and_a_restore() {
        let mut over = sum_of_two();
        over.open(&SubtaskInfo::new("over", 0, 1), RestoredState::default()).await.unwrap();
        // Each batch: 999 rows of the busy key 0, and the only row of a new quiet key.
        let mut time = 0;
        for quiet in 1..=100i64 {
            let mut rows = Vec::new();
            for _ in 0..999 {
                time += 1;
                rows.push((time, 0));
            }
            time += 1;
            rows.push((time, quiet));
            let out = feed(&mut over, &rows).await;
            // The busy key's sum is its row's time and the one before; a quiet key's its own.
            for (t, k, s) in out {
                let expected = match k {
                    0 if t == 1 => 1,
                    0 if (t - 1) % 1000 == 0 => t + t - 2,
                    0 => t + t - 1,
                    _ => t,
                };
                assert_eq!(s, expected, "time {t} key {k}");
            }
        }
        // 100 quiet rows and the busy key's last two are in frames; 100,000 rows came in.
        assert_eq!(over.frame_rows.live, 102);
        assert!(over.frame_rows.stored < 70_000, "compacted: {} rows stored", over.frame_rows.stored);
        let tables = over.snapshot(1).await.unwrap();
        let frames = tables.iter().find(|t| t.name == FRAMES).unwrap();
        assert_eq!(frames.batches.iter().map(RecordBatch::num_rows).sum::<usize>(), 102);
        let mut restored = sum_of_two();
        let state = RestoredState {
            checkpoint_id: Some(1),
            tables: tables.into_iter().map(|t| (t.name, t.batches)).collect(),
            ..Default::default()
        };
        restored.open(&SubtaskInfo::new("over", 0, 1), state).await.unwrap();
        let out = feed(&mut restored, &[(time + 1, 0), (time + 2, 7), (time + 3, 0)]).await;
        assert_eq!(
            out,
            [(time + 1, 0, time + 1 + time - 1), (time + 3, 0, time + 3 + time + 1), (time + 2, 7, time + 2 + 7_000)]
        );
    }

    /// Incremental checkpoints: the frames (bounded) or accumulators (unbounded) of the
    /// partitions that took rows, merged on a full snapshot as a restore merges them, hold what
    /// a full snapshot at the end holds; the rows still waiting are written whole.
    #[tokio::test]
    async fn a_base_and_its_changes_restore_what_a_full_snapshot_holds() {
        for frame in [Frame::Rows { preceding: Some(1) }, Frame::Range { preceding_ms: None }] {
            let mut over = sum_over(frame);
            let info = SubtaskInfo { incremental: true, ..SubtaskInfo::new("over", 0, 1) };
            over.open(&info, RestoredState::default()).await.unwrap();
            feed(&mut over, &[(1, 1), (2, 2), (3, 3), (4, 1)]).await;
            let mut chains = crate::state_table::Chains::new(over.snapshot(1).await.unwrap());
            feed(&mut over, &[(5, 1), (6, 4)]).await;
            // A row that waits for the watermark.
            let batch = RecordBatch::try_new(
                input(),
                vec![Arc::new(TimestampMillisecondArray::from(vec![100])), Arc::new(Int64Array::from(vec![2]))],
            )
            .unwrap();
            over.process_batch(0, batch, &mut Collector::default()).await.unwrap();
            let written = chains.push(over.snapshot_changes(2).await.unwrap().unwrap());
            // Partition 1 keeps its last two rows in a bounded frame; 4 has one; unbounded: one
            // accumulator row each.
            let partitions = if frame.bounded() { 3 } else { 2 };
            assert_eq!(written, [(1, None), (partitions, Some(0))], "{frame:?}");
            feed(&mut over, &[(7, 3)]).await;
            chains.push(over.snapshot_changes(3).await.unwrap().unwrap());
            chains.assert_match(over.snapshot(4).await.unwrap());
        }
    }
}
