//! `ROW_NUMBER()`, `RANK()` or `DENSE_RANK()` `OVER (PARTITION BY window_start, ... ORDER BY
//! ...)` over the output of a window: top-N per window (the `rn <= N` filter runs after it). The rows of a window are buffered
//! until the watermark passes the window's end, when no more can arrive; then they are sorted
//! by partition and order, numbered within each partition, and emitted. The snapshot holds the
//! buffered rows keyed by the hash of the partition columns the input is routed by.
//!
//! Rows are buffered in *segments*: the rows of one window out of one input batch, each with an
//! id of its own (`__segment`, kept in the snapshot). A segment never changes once buffered, so
//! an incremental snapshot is the segments buffered since the previous one and the ids of the
//! segments whose window fired (keyed by window start and id: after a rescale two old subtasks'
//! segments may share an id, and then only within one window, which fires as a whole).

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, ArrayRef, Int64Array, UInt32Array, UInt64Array};
use datafusion::arrow::compute::{SortColumn, SortOptions, cast, concat, concat_batches, lexsort_to_indices, take};
use datafusion::arrow::datatypes::{DataType, Field, SchemaRef, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::physical_expr::PhysicalExpr;

use crate::error::{Error, Result};
use crate::metrics::OperatorMetrics;
use crate::operator::{Collector, Delta, Operator, RestoredState, StateTable};
use crate::operators::numbering::Numbering;
use crate::partition::key_hashes;
use crate::state_table::KeyedTable;
use weir_state::keyed_schema;

const ROWS: &str = "rows";
/// The column of each stored row's segment id.
const SEGMENT: &str = "__segment";

/// The rows of one window out of one input batch.
#[derive(Clone)]
struct Segment {
    id: u64,
    rows: RecordBatch,
}

/// Numbers the rows of each partition of each window.
#[derive(Clone)]
pub struct WindowRank {
    /// The window-start column (an index in the input) and the window's size.
    window_column: usize,
    size_ms: i64,
    /// The partition columns (appended to the input, routed by), the window start among them.
    partition: Vec<String>,
    /// ORDER BY, over the input.
    order: Vec<(Arc<dyn PhysicalExpr>, SortOptions)>,
    /// One numbering per output number column.
    numberings: Vec<Numbering>,
    /// The input: the row columns, then the partition columns.
    input: SchemaRef,
    /// The row columns and the row number.
    output: SchemaRef,
    /// The segments of each window not yet ranked, by window end.
    buffered: BTreeMap<i64, Vec<Segment>>,
    /// The id of the next segment buffered.
    next_segment: u64,
    /// With incremental checkpoints: what changed since the last snapshot.
    changes: Option<SegmentChanges>,
    watermark: i64,
    /// The subtask's counters: late rows and rows without a window are counted there.
    metrics: Arc<OperatorMetrics>,
}

impl WindowRank {
    /// The rows table: the buffered input rows of windows not yet ranked, with their segment.
    fn rows_table(&self) -> KeyedTable {
        let segment = Arc::new(Field::new(SEGMENT, DataType::UInt64, false));
        KeyedTable::new(self.input.fields().iter().cloned().chain([segment]))
    }

    pub fn new(
        window_column: usize,
        size_ms: i64,
        partition: Vec<String>,
        order: Vec<(Arc<dyn PhysicalExpr>, SortOptions)>,
        numberings: Vec<Numbering>,
        input: SchemaRef,
        output: SchemaRef,
    ) -> Self {
        Self {
            window_column,
            size_ms,
            partition,
            order,
            numberings,
            input,
            output,
            buffered: BTreeMap::new(),
            next_segment: 0,
            changes: None,
            watermark: i64::MIN,
            metrics: Arc::default(),
        }
    }

    /// Buffers `batch`'s rows by window end, dropping the rows of windows already emitted:
    /// as new segments, or with `ids` (restored rows) as the segments those name.
    fn buffer(&mut self, batch: &RecordBatch, ids: Option<&UInt64Array>) -> Result<()> {
        let starts = cast(batch.column(self.window_column), &DataType::Timestamp(TimeUnit::Millisecond, None))?;
        let starts = cast(&starts, &DataType::Int64)?;
        let starts = starts
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or_else(|| Error::Graph("window starts did not cast to milliseconds".into()))?;
        let mut rows_of: BTreeMap<(i64, Option<u64>), Vec<u32>> = BTreeMap::new();
        let mut late = 0u64;
        for row in 0..batch.num_rows() {
            if starts.is_valid(row) && starts.value(row) + self.size_ms > self.watermark {
                let id = ids.map(|ids| ids.value(row));
                rows_of.entry((starts.value(row) + self.size_ms, id)).or_default().push(row as u32);
            } else if starts.is_valid(row) {
                late += 1;
            }
        }
        self.metrics.dropped(late, starts.null_count() as u64);
        for ((end, id), rows) in rows_of {
            let indices = UInt32Array::from(rows);
            let columns =
                batch.columns().iter().map(|c| take(c, &indices, None)).collect::<std::result::Result<Vec<_>, _>>()?;
            let id = id.unwrap_or(self.next_segment);
            self.next_segment = self.next_segment.max(id + 1);
            let rows = RecordBatch::try_new(self.input.clone(), columns)?;
            self.buffered.entry(end).or_default().push(Segment { id, rows });
        }
        Ok(())
    }

    /// The rows of one window, sorted and numbered.
    fn rank(&self, segments: &[Segment]) -> Result<RecordBatch> {
        let batch = concat_batches(&self.input, segments.iter().map(|s| &s.rows))?;
        let partition: Vec<ArrayRef> = self
            .partition
            .iter()
            .map(|name| batch.column_by_name(name).cloned().ok_or_else(|| Error::Graph(format!("'{name}' is missing"))))
            .collect::<Result<_>>()?;
        let mut sort: Vec<SortColumn> =
            partition.iter().map(|values| SortColumn { values: values.clone(), options: None }).collect();
        let mut order_fields = Vec::new();
        for (expr, options) in &self.order {
            let values = expr.evaluate(&batch)?.into_array(batch.num_rows())?;
            order_fields.push(SortField::new_with_options(values.data_type().clone(), *options));
            sort.push(SortColumn { values, options: Some(*options) });
        }
        let indices = lexsort_to_indices(&sort, None)?;
        let sorted: Vec<ArrayRef> =
            sort.iter().map(|c| take(&c.values, &indices, None)).collect::<std::result::Result<_, _>>()?;
        let (partition_sorted, order_sorted) = sorted.split_at(partition.len());
        let converter = RowConverter::new(partition.iter().map(|c| SortField::new(c.data_type().clone())).collect())?;
        let keys = converter.convert_columns(partition_sorted)?;
        // Without ORDER BY every row of a partition ties.
        let order_keys = match order_sorted.is_empty() {
            true => None,
            false => Some(RowConverter::new(order_fields)?.convert_columns(order_sorted)?),
        };
        let mut numbers = vec![Vec::with_capacity(batch.num_rows()); self.numberings.len()];
        let mut previous = vec![None; self.numberings.len()];
        for row in 0..batch.num_rows() {
            let same_partition = row > 0 && keys.row(row) == keys.row(row - 1);
            let tie = same_partition && order_keys.as_ref().is_none_or(|k| k.row(row) == k.row(row - 1));
            for (i, numbering) in self.numberings.iter().enumerate() {
                let next = numbering.next(previous[i].filter(|_| same_partition), tie);
                numbers[i].push(next.1);
                previous[i] = Some(next);
            }
        }
        let width = self.output.fields().len() - self.numberings.len();
        let mut columns: Vec<ArrayRef> =
            batch.columns()[..width].iter().map(|c| take(c, &indices, None)).collect::<std::result::Result<_, _>>()?;
        columns.extend(numbers.into_iter().map(|n| Arc::new(UInt64Array::from(n)) as ArrayRef));
        Ok(RecordBatch::try_new(self.output.clone(), columns)?)
    }

    fn fire(&mut self, watermark: i64, out: &mut Collector) -> Result<()> {
        while let Some(entry) = self.buffered.first_entry() {
            if *entry.key() > watermark {
                break;
            }
            let segments = entry.remove();
            out.emit(self.rank(&segments)?);
            if let Some(changes) = &mut self.changes {
                changes.fired(&segments, self.window_column);
            }
        }
        Ok(())
    }

    /// The snapshot table of `segments`' rows, with their key hash and segment id.
    fn rows(&self, segments: &[&Segment], delta: Option<Delta>) -> Result<StateTable> {
        let schema = self.rows_table().schema().clone();
        let mut batches = Vec::new();
        for segment in segments {
            let batch = &segment.rows;
            let mut columns: Vec<ArrayRef> = vec![Arc::new(key_hashes(batch, &self.partition)?)];
            columns.extend(batch.columns().iter().cloned());
            columns.push(Arc::new(UInt64Array::from_value(segment.id, batch.num_rows())));
            batches.push(RecordBatch::try_new(schema.clone(), columns)?);
        }
        if batches.is_empty() {
            batches.push(RecordBatch::new_empty(schema.clone()));
        }
        Ok(StateTable { name: ROWS.into(), schema, batches, delta })
    }

    /// The key of the rows table's changes: a segment within its window.
    fn key(&self) -> Vec<String> {
        vec![self.input.field(self.window_column).name().clone(), SEGMENT.into()]
    }
}

/// The segments buffered and fired since the last snapshot.
#[derive(Clone)]
struct SegmentChanges {
    /// Segments with this id or a later one were buffered since.
    first_new: u64,
    /// The fired segments an earlier snapshot held: their window start (one value) and id.
    fired: Vec<(ArrayRef, u64)>,
}

impl SegmentChanges {
    fn starting_at(first_new: u64) -> Self {
        Self { first_new, fired: Vec::new() }
    }

    /// `segments` of one window fired: those an earlier snapshot held must be removed.
    fn fired(&mut self, segments: &[Segment], window_column: usize) {
        for segment in segments.iter().filter(|s| s.id < self.first_new) {
            self.fired.push((segment.rows.column(window_column).slice(0, 1), segment.id));
        }
    }
}

#[async_trait]
impl Operator for WindowRank {
    /// Working state: a bounded run's final checkpoint leaves it out.
    fn state_needed_after_finish(&self) -> bool {
        false
    }

    async fn open(&mut self, info: &crate::SubtaskInfo, restored: RestoredState) -> Result<()> {
        self.metrics = info.metrics.clone();
        let table = self.rows_table();
        let (row_fields, segment) = table.fields().split_at(self.input.fields().len());
        for batch in restored.table(ROWS) {
            let rows = RecordBatch::try_new(self.input.clone(), table.read(batch, row_fields)?)?;
            // A snapshot from before segments were kept: its rows get fresh ones.
            let ids = match batch.column_by_name(SEGMENT) {
                Some(_) => table.read(batch, segment)?.pop(),
                None => None,
            };
            let ids = ids.as_ref().and_then(|ids| ids.as_any().downcast_ref::<UInt64Array>());
            self.buffer(&rows, ids)?;
        }
        self.changes = info.incremental.then(|| SegmentChanges::starting_at(self.next_segment));
        Ok(())
    }

    async fn process_batch(&mut self, _input: usize, batch: RecordBatch, _out: &mut Collector) -> Result<()> {
        self.buffer(&batch, None)
    }

    async fn process_watermark(&mut self, watermark: i64, out: &mut Collector) -> Result<()> {
        self.watermark = self.watermark.max(watermark);
        self.fire(self.watermark, out)?;
        out.emit_watermark(watermark);
        Ok(())
    }

    async fn snapshot(&mut self, _checkpoint_id: u64) -> Result<Vec<StateTable>> {
        if let Some(changes) = &mut self.changes {
            *changes = SegmentChanges::starting_at(self.next_segment);
        }
        let segments: Vec<&Segment> = self.buffered.values().flatten().collect();
        Ok(vec![self.rows(&segments, None)?])
    }

    /// The segments buffered since the last snapshot, and those it held that fired since.
    async fn snapshot_changes(&mut self, _checkpoint_id: u64) -> Result<Option<Vec<StateTable>>> {
        let Some(changes) = self.changes.replace(SegmentChanges::starting_at(self.next_segment)) else {
            return Ok(None);
        };
        let segments: Vec<&Segment> =
            self.buffered.values().flatten().filter(|segment| segment.id >= changes.first_new).collect();
        let starts: Vec<&dyn Array> = changes.fired.iter().map(|(start, _)| start.as_ref()).collect();
        let start_field = self.input.field(self.window_column).clone();
        let starts = match starts.is_empty() {
            true => datafusion::arrow::array::new_empty_array(start_field.data_type()),
            false => concat(&starts)?,
        };
        let fired = changes.fired.len();
        let key_fields = [start_field, Field::new(SEGMENT, DataType::UInt64, false)];
        let deleted = RecordBatch::try_new(
            keyed_schema(key_fields),
            vec![
                // Tombstones are matched by their key columns; the key hash is not read.
                Arc::new(UInt64Array::from_value(0, fired)),
                starts,
                Arc::new(UInt64Array::from_iter_values(changes.fired.iter().map(|(_, id)| *id))),
            ],
        )?;
        let delta = Delta { key: self.key(), deleted };
        Ok(Some(vec![self.rows(&segments, Some(delta))?]))
    }

    async fn finish(&mut self, out: &mut Collector) -> Result<()> {
        self.fire(i64::MAX, out)
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::TimestampMillisecondArray;
    use datafusion::arrow::datatypes::Schema;
    use datafusion::physical_expr::expressions::col;

    use super::*;
    use crate::SubtaskInfo;
    use crate::state_table::Chains;

    /// Rows (window start, partition, price) in 10 ms windows, ranked by price.
    fn window_rank() -> (WindowRank, SchemaRef) {
        let input = Arc::new(Schema::new(vec![
            Field::new("window_start", DataType::Timestamp(TimeUnit::Millisecond, None), false),
            Field::new("price", DataType::Int64, false),
            Field::new("__partition_0", DataType::Int64, false),
        ]));
        let output = Arc::new(Schema::new(vec![
            Field::new("window_start", DataType::Timestamp(TimeUnit::Millisecond, None), false),
            Field::new("price", DataType::Int64, false),
            Field::new("rn", DataType::UInt64, false),
        ]));
        let order = vec![(col("price", &input).unwrap(), SortOptions { descending: true, nulls_first: false })];
        let partition = vec!["window_start".into(), "__partition_0".into()];
        let rank = WindowRank::new(0, 10, partition, order, vec![Numbering::RowNumber], input.clone(), output);
        (rank, input)
    }

    fn batch(input: &SchemaRef, rows: &[(i64, i64, i64)]) -> RecordBatch {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(TimestampMillisecondArray::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.2))),
        ];
        RecordBatch::try_new(input.clone(), columns).unwrap()
    }

    /// A base and the segments buffered and fired after it, merged as a restore merges them,
    /// hold what a full snapshot at the end holds; each change writes only the new rows. Then
    /// a restart on those chains goes on from them: the restored segments keep their ids, so
    /// a later window's firing removes them, and new segments do not reuse an id.
    #[tokio::test]
    async fn a_base_and_its_segments_restore_the_open_windows_a_full_snapshot_holds() {
        let (mut rank, input) = window_rank();
        let info = SubtaskInfo { incremental: true, ..SubtaskInfo::new("rank", 0, 1) };
        rank.open(&info, RestoredState::default()).await.unwrap();
        let mut out = Collector::default();
        // Windows [0,10) and [10,20): three segments.
        rank.process_batch(0, batch(&input, &[(0, 5, 1), (0, 7, 2), (10, 1, 1)]), &mut out).await.unwrap();
        rank.process_batch(0, batch(&input, &[(0, 9, 1)]), &mut out).await.unwrap();
        let mut chains = Chains::new(rank.snapshot(1).await.unwrap());
        // Window [20,30) opens; the watermark fires [0,10) (two segments of the base).
        rank.process_batch(0, batch(&input, &[(20, 3, 1), (10, 4, 2)]), &mut out).await.unwrap();
        rank.process_watermark(10, &mut out).await.unwrap();
        assert_eq!(out.batches.iter().map(RecordBatch::num_rows).sum::<usize>(), 3, "window [0,10) ranked");
        let written = chains.push(rank.snapshot_changes(2).await.unwrap().unwrap());
        assert_eq!(written, [(2, Some(2))], "the two new rows; the fired window's two segments");
        // A segment buffered and fired between two snapshots is neither written nor removed.
        rank.process_batch(0, batch(&input, &[(30, 2, 1)]), &mut out).await.unwrap();
        rank.process_batch(0, batch(&input, &[(10, 8, 1)]), &mut out).await.unwrap();
        rank.process_watermark(20, &mut out).await.unwrap();
        let written = chains.push(rank.snapshot_changes(3).await.unwrap().unwrap());
        assert_eq!(written, [(1, Some(2))], "[30,40)'s row; [10,20)'s base and checkpoint-2 segments");
        let full = rank.snapshot(4).await.unwrap();
        chains.assert_match(full.clone());

        // Restarted from the full snapshot as if it were the chains: ids kept, none reused.
        let (mut restarted, _) = window_rank();
        let restored = RestoredState {
            checkpoint_id: Some(4),
            tables: [(ROWS.to_string(), full[0].batches.clone())].into(),
            ..Default::default()
        };
        restarted.open(&info, restored).await.unwrap();
        let mut chains = Chains::new(full);
        restarted.process_batch(0, batch(&input, &[(30, 6, 2)]), &mut out).await.unwrap();
        restarted.process_watermark(30, &mut out).await.unwrap();
        let written = chains.push(restarted.snapshot_changes(5).await.unwrap().unwrap());
        assert_eq!(written, [(1, Some(1))], "the new row; window [20,30)'s restored segment");
        chains.assert_match(restarted.snapshot(6).await.unwrap());
    }
}
