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
//! accumulators' state; all keyed by the hash of the partition columns.

use std::collections::{HashMap, VecDeque};
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
use crate::operator::{Collector, Operator, RestoredState, StateTable};
use crate::operators::accumulators::{self, AggregateCall, Arguments};
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

/// A row in a partition's bounded frame.
struct FrameRow {
    time: i64,
    /// The row itself (input columns), for the snapshot.
    row: RecordBatch,
    /// Its aggregates' arguments, to take it back when it leaves the frame.
    arguments: Vec<Arguments>,
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
    converter: Option<RowConverter>,
    watermark: i64,
    /// The subtask's counters: late rows and rows without a time are counted there.
    metrics: Arc<OperatorMetrics>,
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
            converter: None,
            watermark: i64::MIN,
            metrics: Arc::default(),
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
    fn shrink(frame: Frame, partition: &mut Partition, time: i64) -> Result<()> {
        loop {
            let leaves = match (frame, partition.frame.front()) {
                (Frame::Rows { preceding: Some(n) }, Some(_)) => partition.frame.len() > n + 1,
                (Frame::Range { preceding_ms: Some(ms) }, Some(oldest)) => oldest.time < time.saturating_sub(ms),
                _ => false,
            };
            let Some(left) = leaves.then(|| partition.frame.pop_front()).flatten() else { return Ok(()) };
            accumulators::feed(&mut partition.accumulators, &left.arguments, &[0], true)?;
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
        let mut values: Vec<Vec<ScalarValue>> = Vec::with_capacity(rows);
        let mut start = 0;
        while start < rows {
            // The current row, with its peers in a RANGE frame (same partition and time).
            let mut end = start + 1;
            if matches!(frame, Frame::Range { .. }) {
                while end < rows && keys.row(end) == keys.row(start) && times.value(end) == times.value(start) {
                    end += 1;
                }
            }
            let key = keys.row(start).owned();
            if !self.partitions.contains_key(&key) {
                let accumulators = self.accumulators()?;
                self.partitions.insert(key.clone(), Partition { accumulators, frame: VecDeque::new() });
            }
            let partition =
                self.partitions.get_mut(&key).ok_or_else(|| Error::Graph("OVER partition vanished".into()))?;
            let indices: Vec<u32> = (start as u32..end as u32).collect();
            accumulators::feed(&mut partition.accumulators, &arguments, &indices, false)?;
            if bounded {
                for row in start..end {
                    partition.frame.push_back(FrameRow {
                        time: times.value(row),
                        row: ready.slice(row, 1),
                        arguments: arguments.iter().map(|a| a.slice(row, 1)).collect(),
                    });
                }
                Self::shrink(frame, partition, times.value(start))?;
            }
            let current: Vec<ScalarValue> =
                partition.accumulators.iter_mut().map(|a| a.evaluate()).collect::<datafusion::error::Result<_>>()?;
            for _ in start..end {
                values.push(current.clone());
            }
            start = end;
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

    /// The input rows of a restored pending or frames table.
    fn restored_rows(&self, table: &KeyedTable, batch: &RecordBatch) -> Result<RecordBatch> {
        let width = self.input.fields().len();
        Ok(RecordBatch::try_new(self.input.clone(), table.read(batch, &table.fields()[..width])?)?)
    }
}

#[async_trait]
impl Operator for OverAggregate {
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
            for row in 0..rows.num_rows() {
                let key = keys.row(row).owned();
                if !self.partitions.contains_key(&key) {
                    let accumulators = self.accumulators()?;
                    self.partitions.insert(key.clone(), Partition { accumulators, frame: VecDeque::new() });
                }
                let Some(partition) = self.partitions.get_mut(&key) else { continue };
                accumulators::feed(&mut partition.accumulators, &arguments, &[row as u32], false)?;
                partition.frame.push_back(FrameRow {
                    time: times.value(row),
                    row: rows.slice(row, 1),
                    arguments: arguments.iter().map(|a| a.slice(row, 1)).collect(),
                });
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
        let schema = self.rows_table(false).schema().clone();
        let mut pending = Vec::new();
        for batch in &self.pending {
            pending.push(self.keyed(&schema, batch, Vec::new())?);
        }
        if pending.is_empty() {
            pending.push(RecordBatch::new_empty(schema.clone()));
        }
        let mut tables = vec![StateTable { name: PENDING.into(), schema, batches: pending }];
        if self.frame.bounded() {
            let schema = self.rows_table(true).schema().clone();
            let mut rows = Vec::new();
            let mut positions = Vec::new();
            for partition in self.partitions.values() {
                for (position, row) in partition.frame.iter().enumerate() {
                    rows.push(row.row.clone());
                    positions.push(position as i64);
                }
            }
            let batch = match rows.is_empty() {
                true => RecordBatch::new_empty(schema.clone()),
                false => {
                    let rows = concat_batches(&self.input, &rows)?;
                    self.keyed(&schema, &rows, vec![Arc::new(Int64Array::from(positions))])?
                }
            };
            tables.push(StateTable { name: FRAMES.into(), schema, batches: vec![batch] });
        } else {
            let schema = self.accumulators_table()?.0.schema().clone();
            let converter = self.converter.as_ref();
            let batch = match (converter, self.partitions.is_empty()) {
                (Some(converter), false) => {
                    let mut keys = Vec::new();
                    let mut states: Vec<Vec<ScalarValue>> = Vec::new();
                    let fresh = (0..self.partitions.len()).map(|_| self.accumulators()).collect::<Result<Vec<_>>>()?;
                    for ((key, partition), fresh) in self.partitions.iter_mut().zip(fresh) {
                        keys.push(key.clone());
                        states.push(accumulators::snapshot_states(&mut partition.accumulators, fresh)?);
                    }
                    let key_columns = converter.convert_rows(keys.iter().map(|k| k.row()))?;
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
            tables.push(StateTable { name: ACCUMULATORS.into(), schema, batches: vec![batch] });
        }
        Ok(tables)
    }

    /// The input ended: every waiting row is complete.
    async fn finish(&mut self, out: &mut Collector) -> Result<()> {
        let pending = concat_batches(&self.input, &self.pending)?;
        self.pending.clear();
        self.compute(pending, out)
    }
}
