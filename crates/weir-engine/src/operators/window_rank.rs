//! `ROW_NUMBER()`, `RANK()` or `DENSE_RANK()` `OVER (PARTITION BY window_start, ... ORDER BY
//! ...)` over the output of a window: top-N per window (the `rn <= N` filter runs after it). The rows of a window are buffered
//! until the watermark passes the window's end, when no more can arrive; then they are sorted
//! by partition and order, numbered within each partition, and emitted. The snapshot holds the
//! buffered rows keyed by the hash of the partition columns the input is routed by.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, ArrayRef, Int64Array, UInt32Array, UInt64Array};
use datafusion::arrow::compute::{SortColumn, SortOptions, cast, concat_batches, lexsort_to_indices, take};
use datafusion::arrow::datatypes::{DataType, SchemaRef, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::physical_expr::PhysicalExpr;

use crate::error::{Error, Result};
use crate::metrics::OperatorMetrics;
use crate::operator::{Collector, Operator, RestoredState, StateTable};
use crate::operators::numbering::Numbering;
use crate::partition::key_hashes;
use crate::state_table::KeyedTable;

const ROWS: &str = "rows";

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
    buffered: BTreeMap<i64, Vec<RecordBatch>>,
    watermark: i64,
    /// The subtask's counters: late rows and rows without a window are counted there.
    metrics: Arc<OperatorMetrics>,
}

impl WindowRank {
    /// The rows table: the buffered input rows of windows not yet ranked.
    fn rows_table(&self) -> KeyedTable {
        KeyedTable::new(self.input.fields().iter().cloned())
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
            watermark: i64::MIN,
            metrics: Arc::default(),
        }
    }

    /// Buffers `batch`'s rows by window end, dropping the rows of windows already emitted.
    fn buffer(&mut self, batch: &RecordBatch) -> Result<()> {
        let starts = cast(batch.column(self.window_column), &DataType::Timestamp(TimeUnit::Millisecond, None))?;
        let starts = cast(&starts, &DataType::Int64)?;
        let starts = starts
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or_else(|| Error::Graph("window starts did not cast to milliseconds".into()))?;
        let mut rows_of: BTreeMap<i64, Vec<u32>> = BTreeMap::new();
        let mut late = 0u64;
        for row in 0..batch.num_rows() {
            if starts.is_valid(row) && starts.value(row) + self.size_ms > self.watermark {
                rows_of.entry(starts.value(row) + self.size_ms).or_default().push(row as u32);
            } else if starts.is_valid(row) {
                late += 1;
            }
        }
        self.metrics.dropped(late, starts.null_count() as u64);
        for (end, rows) in rows_of {
            let indices = UInt32Array::from(rows);
            let columns =
                batch.columns().iter().map(|c| take(c, &indices, None)).collect::<std::result::Result<Vec<_>, _>>()?;
            self.buffered.entry(end).or_default().push(RecordBatch::try_new(self.input.clone(), columns)?);
        }
        Ok(())
    }

    /// The rows of one window, sorted and numbered.
    fn rank(&self, batches: &[RecordBatch]) -> Result<RecordBatch> {
        let batch = concat_batches(&self.input, batches)?;
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
            let batches = entry.remove();
            out.emit(self.rank(&batches)?);
        }
        Ok(())
    }
}

#[async_trait]
impl Operator for WindowRank {
    async fn open(&mut self, info: &crate::SubtaskInfo, restored: RestoredState) -> Result<()> {
        self.metrics = info.metrics.clone();
        let table = self.rows_table();
        for batch in restored.table(ROWS) {
            let rows = RecordBatch::try_new(self.input.clone(), table.read_all(batch)?)?;
            self.buffer(&rows)?;
        }
        Ok(())
    }

    async fn process_batch(&mut self, _input: usize, batch: RecordBatch, _out: &mut Collector) -> Result<()> {
        self.buffer(&batch)
    }

    async fn process_watermark(&mut self, watermark: i64, out: &mut Collector) -> Result<()> {
        self.watermark = self.watermark.max(watermark);
        self.fire(self.watermark, out)?;
        out.emit_watermark(watermark);
        Ok(())
    }

    async fn snapshot(&mut self, _checkpoint_id: u64) -> Result<Vec<StateTable>> {
        let schema = self.rows_table().schema().clone();
        let mut batches = Vec::new();
        for batch in self.buffered.values().flatten() {
            let mut columns: Vec<ArrayRef> = vec![Arc::new(key_hashes(batch, &self.partition)?)];
            columns.extend(batch.columns().iter().cloned());
            batches.push(RecordBatch::try_new(schema.clone(), columns)?);
        }
        if batches.is_empty() {
            batches.push(RecordBatch::new_empty(schema.clone()));
        }
        Ok(vec![StateTable { name: ROWS.into(), schema, batches, delta: None }])
    }

    async fn finish(&mut self, out: &mut Collector) -> Result<()> {
        self.fire(i64::MAX, out)
    }
}
