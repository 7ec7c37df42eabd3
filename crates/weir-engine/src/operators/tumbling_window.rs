//! Tumbling-window aggregates with DataFusion's accumulators. Its input carries the window start
//! (milliseconds, as a timestamp column) and the group keys as columns; rows are grouped by
//! (window, keys) into accumulators; a window is emitted when the watermark passes its end, and
//! its state is dropped then. The snapshot holds each open group's accumulator state
//! (`Accumulator::state`), keyed by the hash of (window, keys), which is also how the input is
//! partitioned, so a restore at another parallelism re-splits it by key range.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, ArrayRef, Int64Array, UInt32Array};
use datafusion::arrow::compute::{cast, take};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Accumulator;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use weir_state::KEY_HASH_COLUMN;

use crate::error::{Error, Result};
use crate::operator::{Collector, Operator, RestoredState, StateTable};
use crate::partition::key_hashes;

const GROUPS: &str = "groups";

type Group = (Vec<ScalarValue>, Vec<Box<dyn Accumulator>>);

/// A tumbling-window aggregate.
pub struct TumblingWindow {
    /// The window-start column, then the key columns (names in the input).
    group_columns: Vec<String>,
    size_ms: i64,
    aggregates: Vec<Arc<AggregateFunctionExpr>>,
    /// The output: group columns in order, then one column per aggregate.
    output: SchemaRef,
    /// Open windows by start, each with its groups by key values.
    windows: BTreeMap<i64, HashMap<Vec<ScalarValue>, Group>>,
    watermark: i64,
}

impl Clone for TumblingWindow {
    /// A fresh instance with the same plan (accumulators are not cloned: each subtask makes
    /// its own).
    fn clone(&self) -> Self {
        Self::new(self.group_columns.clone(), self.size_ms, self.aggregates.clone(), self.output.clone())
    }
}

impl TumblingWindow {
    pub fn new(
        group_columns: Vec<String>,
        size_ms: i64,
        aggregates: Vec<Arc<AggregateFunctionExpr>>,
        output: SchemaRef,
    ) -> Self {
        Self { group_columns, size_ms, aggregates, output, windows: BTreeMap::new(), watermark: i64::MIN }
    }

    fn accumulators(&self) -> Result<Vec<Box<dyn Accumulator>>> {
        Ok(self.aggregates.iter().map(|a| a.create_accumulator()).collect::<datafusion::error::Result<_>>()?)
    }

    fn window_starts(batch: &RecordBatch, column: &str) -> Result<Int64Array> {
        let starts = batch
            .column_by_name(column)
            .ok_or_else(|| Error::Graph(format!("the window column '{column}' is not in the input")))?;
        let millis = cast(&cast(starts, &DataType::Timestamp(TimeUnit::Millisecond, None))?, &DataType::Int64)?;
        millis
            .as_any()
            .downcast_ref::<Int64Array>()
            .cloned()
            .ok_or_else(|| Error::Graph("window starts did not cast to milliseconds".into()))
    }

    /// Emits every window that ends at or before `watermark`.
    fn fire(&mut self, watermark: i64, out: &mut Collector) -> Result<()> {
        let due: Vec<i64> = self
            .windows
            .range(..)
            .take_while(|(start, _)| **start + self.size_ms <= watermark)
            .map(|(s, _)| *s)
            .collect();
        let mut rows: Vec<Vec<ScalarValue>> = Vec::new();
        for start in due {
            let Some(groups) = self.windows.remove(&start) else { continue };
            for (_, (keys, mut accumulators)) in groups {
                let mut row = keys;
                for accumulator in &mut accumulators {
                    row.push(accumulator.evaluate()?);
                }
                rows.push(row);
            }
        }
        if rows.is_empty() {
            return Ok(());
        }
        let columns = (0..self.output.fields().len())
            .map(|i| {
                let values = ScalarValue::iter_to_array(rows.iter().map(|r| r[i].clone()))?;
                Ok(cast(&values, self.output.field(i).data_type())?)
            })
            .collect::<Result<Vec<ArrayRef>>>()?;
        out.emit(RecordBatch::try_new(self.output.clone(), columns)?);
        Ok(())
    }
}

#[async_trait]
impl Operator for TumblingWindow {
    async fn open(&mut self, info: &crate::SubtaskInfo, restored: RestoredState) -> Result<()> {
        for batch in restored.table(GROUPS) {
            let keys = self.group_columns.len();
            let starts = Self::window_starts(batch, &self.group_columns[0])?;
            for row in 0..batch.num_rows() {
                let key: Vec<ScalarValue> = (0..keys)
                    .map(|k| ScalarValue::try_from_array(batch.column(1 + k), row))
                    .collect::<datafusion::error::Result<_>>()?;
                let mut accumulators = self.accumulators()?;
                let mut column = 1 + keys;
                for (accumulator, aggregate) in accumulators.iter_mut().zip(&self.aggregates) {
                    let fields = aggregate.state_fields()?.len();
                    let states: Vec<ArrayRef> =
                        (column..column + fields).map(|c| batch.column(c).slice(row, 1)).collect();
                    accumulator.merge_batch(&states)?;
                    column += fields;
                }
                let groups = self.windows.entry(starts.value(row)).or_default();
                groups.insert(key.clone(), (key, accumulators));
            }
        }
        let _ = info;
        Ok(())
    }

    async fn process_batch(&mut self, _input: usize, batch: RecordBatch, _out: &mut Collector) -> Result<()> {
        let starts = Self::window_starts(&batch, &self.group_columns[0])?;
        let key_columns: Vec<ArrayRef> = self
            .group_columns
            .iter()
            .map(|c| {
                batch.column_by_name(c).cloned().ok_or_else(|| Error::Graph(format!("group column '{c}' is missing")))
            })
            .collect::<Result<_>>()?;
        // Rows of each (window, keys) group, skipping windows the watermark has closed.
        let mut rows_of: HashMap<Vec<ScalarValue>, Vec<u32>> = HashMap::new();
        for row in 0..batch.num_rows() {
            if starts.is_null(row) || starts.value(row) + self.size_ms <= self.watermark {
                continue; // late: its window was emitted already
            }
            let key: Vec<ScalarValue> = key_columns
                .iter()
                .map(|c| ScalarValue::try_from_array(c, row))
                .collect::<datafusion::error::Result<_>>()?;
            rows_of.entry(key).or_default().push(row as u32);
        }
        let arguments: Vec<Vec<ArrayRef>> = self
            .aggregates
            .iter()
            .map(|a| {
                a.expressions()
                    .iter()
                    .map(|e| e.evaluate(&batch).and_then(|v| v.into_array(batch.num_rows())))
                    .collect()
            })
            .collect::<datafusion::error::Result<_>>()?;
        for (key, rows) in rows_of {
            let indices = UInt32Array::from(rows);
            let start = match &key[0] {
                ScalarValue::TimestampMillisecond(Some(start), _) => *start,
                other => other
                    .cast_to(&DataType::Int64)
                    .ok()
                    .and_then(|v| if let ScalarValue::Int64(v) = v { v } else { None })
                    .unwrap_or_default(),
            };
            let fresh = if self.windows.get(&start).is_some_and(|g| g.contains_key(&key)) {
                None
            } else {
                Some(self.accumulators()?)
            };
            let groups = self.windows.entry(start).or_default();
            let (_, accumulators) = groups.entry(key.clone()).or_insert_with(|| (key, fresh.unwrap_or_default()));
            for (accumulator, args) in accumulators.iter_mut().zip(&arguments) {
                let taken = args.iter().map(|a| take(a, &indices, None)).collect::<std::result::Result<Vec<_>, _>>()?;
                accumulator.update_batch(&taken)?;
            }
        }
        Ok(())
    }

    async fn process_watermark(&mut self, watermark: i64, out: &mut Collector) -> Result<()> {
        self.watermark = self.watermark.max(watermark);
        self.fire(self.watermark, out)?;
        out.emit_watermark(watermark);
        Ok(())
    }

    async fn snapshot(&mut self, _checkpoint_id: u64) -> Result<Vec<StateTable>> {
        let mut fields = vec![Field::new(KEY_HASH_COLUMN, DataType::UInt64, false)];
        for (i, name) in self.group_columns.iter().enumerate() {
            fields.push(Field::new(name, self.output.field(i).data_type().clone(), true));
        }
        for aggregate in &self.aggregates {
            for field in aggregate.state_fields()? {
                fields.push(Field::new(format!("{}_{}", fields.len(), field.name()), field.data_type().clone(), true));
            }
        }
        let schema = Arc::new(Schema::new(fields));
        let mut rows: Vec<Vec<ScalarValue>> = Vec::new();
        for groups in self.windows.values_mut() {
            for (key, accumulators) in groups.values_mut() {
                let mut row = key.clone();
                for accumulator in accumulators.iter_mut() {
                    row.extend(accumulator.state()?);
                }
                rows.push(row);
            }
        }
        if rows.is_empty() {
            return Ok(vec![StateTable {
                name: GROUPS.into(),
                schema: schema.clone(),
                batches: vec![RecordBatch::new_empty(schema)],
            }]);
        }
        let mut columns: Vec<ArrayRef> = Vec::new();
        for i in 0..schema.fields().len() - 1 {
            let values = ScalarValue::iter_to_array(rows.iter().map(|r| r[i].clone()))?;
            columns.push(cast(&values, schema.field(i + 1).data_type())?);
        }
        let groups = RecordBatch::try_new(Arc::new(Schema::new(schema.fields()[1..].to_vec())), columns.clone())?;
        let hashes = key_hashes(&groups, &self.group_columns)?;
        let mut all: Vec<ArrayRef> = vec![Arc::new(hashes)];
        all.extend(columns);
        Ok(vec![StateTable {
            name: GROUPS.into(),
            schema: schema.clone(),
            batches: vec![RecordBatch::try_new(schema, all)?],
        }])
    }

    /// The input ended: every open window is complete.
    async fn finish(&mut self, out: &mut Collector) -> Result<()> {
        self.fire(i64::MAX, out)
    }
}
