//! Windowed aggregates over event time with DataFusion's accumulators: tumbling, hopping
//! (sliding) and session windows. The input carries a window column (the window start for
//! tumbling windows, computed upstream by `tumble`; the row's event time for hopping and
//! session windows, which are assigned here) and the group keys as columns. A window is emitted
//! when the watermark passes its end, and its state is dropped then; rows that arrive after
//! their window was emitted are late and dropped.
//!
//! The snapshot holds each open window's accumulator state (`Accumulator::state`) with the
//! window's start and end, keyed by the hash of the columns the input is partitioned by, so a
//! restore at another parallelism re-splits it by key range.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, ArrayRef, Int64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Accumulator;

use crate::error::{Error, Result};
use crate::metrics::OperatorMetrics;
use crate::operator::{Collector, Operator, RestoredState, StateTable};
use crate::operators::accumulators::{self, AggregateCall};
use crate::partition::key_hashes;
use crate::state_table::KeyedTable;

const WINDOWS: &str = "windows";
const START: &str = "__window_start";
const END: &str = "__window_end";
/// A constant column the input is partitioned by when a window has no keys (so all its rows
/// meet in one subtask).
pub const ALL_IN_ONE: &str = "__all_in_one";

/// How rows are assigned to windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowKind {
    /// The window column holds each row's window start, computed upstream.
    Tumbling { size_ms: i64 },
    /// The window column holds the row's event time; the row counts in every window of `size`
    /// that starts at a multiple of `slide` and contains it.
    Hopping { slide_ms: i64, size_ms: i64 },
    /// The window column holds the row's event time; rows of a key less than `gap` apart share
    /// a session, which ends `gap` after its last row.
    Session { gap_ms: i64 },
}

/// An open window's accumulators.
type Accumulators = Vec<Box<dyn Accumulator>>;

/// One open session of a key.
struct SessionWindow {
    start: i64,
    end: i64,
    accumulators: Accumulators,
}

/// A windowed aggregate.
pub struct WindowAggregate {
    kind: WindowKind,
    /// The window column, then the key columns (names in the input).
    group_columns: Vec<String>,
    /// The columns the input is partitioned by (state is keyed by their hash).
    partition: Vec<String>,
    aggregates: Vec<AggregateCall>,
    /// Positions among the output's aggregate columns that hold the window's end
    /// (`hop_end(...)` and the like) rather than an accumulator's value.
    window_ends: Vec<usize>,
    /// The output: window start, keys, then the aggregates and window ends.
    output: SchemaRef,
    /// Tumbling and hopping windows by (end, start), each with its groups by key values.
    windows: BTreeMap<(i64, i64), HashMap<Vec<ScalarValue>, Accumulators>>,
    /// Session windows by key, in start order, disjoint.
    sessions: HashMap<Vec<ScalarValue>, Vec<SessionWindow>>,
    watermark: i64,
    /// The subtask's counters: late rows and rows without a time are counted there.
    metrics: Arc<OperatorMetrics>,
}

impl Clone for WindowAggregate {
    /// A fresh instance with the same plan (accumulators are not cloned: each subtask makes
    /// its own).
    fn clone(&self) -> Self {
        Self::new(
            self.kind,
            self.group_columns.clone(),
            self.partition.clone(),
            self.aggregates.clone(),
            self.window_ends.clone(),
            self.output.clone(),
        )
    }
}

/// A column as milliseconds since the epoch.
fn millis_of(batch: &RecordBatch, column: &str) -> Result<Int64Array> {
    let values = batch
        .column_by_name(column)
        .ok_or_else(|| Error::Graph(format!("the window column '{column}' is not in the input")))?;
    let millis = cast(&cast(values, &DataType::Timestamp(TimeUnit::Millisecond, None))?, &DataType::Int64)?;
    millis
        .as_any()
        .downcast_ref::<Int64Array>()
        .cloned()
        .ok_or_else(|| Error::Graph(format!("the window column '{column}' did not cast to milliseconds")))
}

/// Folds `from`'s state into `into` (session merges).
fn merge_into(into: &mut Accumulators, from: &mut Accumulators) -> Result<()> {
    for (target, source) in into.iter_mut().zip(from.iter_mut()) {
        let states = source
            .state()?
            .into_iter()
            .map(|value| value.to_array())
            .collect::<datafusion::error::Result<Vec<ArrayRef>>>()?;
        target.merge_batch(&states)?;
    }
    Ok(())
}

impl WindowAggregate {
    pub fn new(
        kind: WindowKind,
        group_columns: Vec<String>,
        partition: Vec<String>,
        aggregates: Vec<AggregateCall>,
        window_ends: Vec<usize>,
        output: SchemaRef,
    ) -> Self {
        Self {
            kind,
            group_columns,
            partition,
            aggregates,
            window_ends,
            output,
            windows: BTreeMap::new(),
            sessions: HashMap::new(),
            watermark: i64::MIN,
            metrics: Arc::default(),
        }
    }

    fn accumulators(&self) -> Result<Accumulators> {
        Ok(self.aggregates.iter().map(|a| a.function.create_accumulator()).collect::<datafusion::error::Result<_>>()?)
    }

    /// The (start, end) of every tumbling or hopping window holding time `t`.
    fn windows_of(&self, t: i64) -> Vec<(i64, i64)> {
        match self.kind {
            WindowKind::Tumbling { size_ms } => vec![(t, t + size_ms)],
            WindowKind::Hopping { slide_ms, size_ms } => {
                let mut start = t.div_euclid(slide_ms) * slide_ms;
                let mut windows = Vec::new();
                while start + size_ms > t {
                    windows.push((start, start + size_ms));
                    start -= slide_ms;
                }
                windows
            }
            WindowKind::Session { gap_ms } => vec![(t, t + gap_ms)],
        }
    }

    fn row(
        &self,
        (start, end): (i64, i64),
        keys: &[ScalarValue],
        accumulators: &mut Accumulators,
    ) -> Result<Vec<ScalarValue>> {
        let mut row = vec![ScalarValue::TimestampMillisecond(Some(start), None)];
        row.extend(keys.iter().cloned());
        let outputs = self.output.fields().len() - row.len();
        let mut accumulators = accumulators.iter_mut();
        for position in 0..outputs {
            if self.window_ends.contains(&position) {
                row.push(ScalarValue::TimestampMillisecond(Some(end), None));
            } else if let Some(accumulator) = accumulators.next() {
                row.push(accumulator.evaluate()?);
            }
        }
        Ok(row)
    }

    /// Emits every window that ends at or before `watermark`, and forgets it.
    fn fire(&mut self, watermark: i64, out: &mut Collector) -> Result<()> {
        let mut rows: Vec<Vec<ScalarValue>> = Vec::new();
        while let Some(entry) = self.windows.first_entry() {
            if entry.key().0 > watermark {
                break;
            }
            let ((end, start), groups) = entry.remove_entry();
            for (keys, mut accumulators) in groups {
                rows.push(self.row((start, end), &keys, &mut accumulators)?);
            }
        }
        let mut closed = Vec::new();
        for (keys, sessions) in &mut self.sessions {
            while sessions.first().is_some_and(|s| s.end <= watermark) {
                closed.push((keys.clone(), sessions.remove(0)));
            }
        }
        self.sessions.retain(|_, sessions| !sessions.is_empty());
        closed.sort_by_key(|(_, session)| session.start);
        for (keys, mut session) in closed {
            rows.push(self.row((session.start, session.end), &keys, &mut session.accumulators)?);
        }
        if rows.is_empty() {
            return Ok(());
        }
        let columns = accumulators::columns(&rows, self.output.fields())?;
        out.emit(RecordBatch::try_new(self.output.clone(), columns)?);
        Ok(())
    }

    /// Adds the rows `indices` of a key, all at or after `start` and before `end` - gap, as a
    /// session, merging it with the key's open sessions it overlaps.
    fn add_session(&mut self, keys: &[ScalarValue], start: i64, end: i64, rows: Accumulators) -> Result<()> {
        let sessions = self.sessions.entry(keys.to_vec()).or_default();
        let mut merged = SessionWindow { start, end, accumulators: rows };
        let mut kept = Vec::with_capacity(sessions.len() + 1);
        for mut session in sessions.drain(..) {
            if session.start < merged.end && merged.start < session.end {
                merge_into(&mut merged.accumulators, &mut session.accumulators)?;
                merged.start = merged.start.min(session.start);
                merged.end = merged.end.max(session.end);
            } else {
                kept.push(session);
            }
        }
        kept.push(merged);
        kept.sort_by_key(|s| s.start);
        *sessions = kept;
        Ok(())
    }
}

#[async_trait]
impl Operator for WindowAggregate {
    async fn open(&mut self, info: &crate::SubtaskInfo, restored: RestoredState) -> Result<()> {
        self.metrics = info.metrics.clone();
        let keys = self.group_columns.len() - 1;
        let (table, widths) = self.windows_table()?;
        let fields = table.fields();
        for batch in restored.table(WINDOWS) {
            let (starts, ends) = (millis_of(batch, START)?, millis_of(batch, END)?);
            let key_columns = table.read(batch, &fields[2..2 + keys])?;
            let states = table.read(batch, &fields[2 + keys..])?;
            for row in 0..batch.num_rows() {
                let key = accumulators::row_values(&key_columns, row)?;
                let mut accumulators = self.accumulators()?;
                accumulators::restore_row(&mut accumulators, &states, &widths, row)?;
                let (start, end) = (starts.value(row), ends.value(row));
                match self.kind {
                    WindowKind::Session { .. } => {
                        self.sessions.entry(key).or_default().push(SessionWindow { start, end, accumulators })
                    }
                    _ => {
                        self.windows.entry((end, start)).or_default().insert(key, accumulators);
                    }
                }
            }
        }
        for sessions in self.sessions.values_mut() {
            sessions.sort_by_key(|s| s.start);
        }
        Ok(())
    }

    async fn process_batch(&mut self, _input: usize, batch: RecordBatch, _out: &mut Collector) -> Result<()> {
        let times = millis_of(&batch, &self.group_columns[0])?;
        let key_columns: Vec<ArrayRef> = self.group_columns[1..]
            .iter()
            .map(|c| {
                batch.column_by_name(c).cloned().ok_or_else(|| Error::Graph(format!("group column '{c}' is missing")))
            })
            .collect::<Result<_>>()?;
        let arguments = accumulators::arguments(&self.aggregates, &batch)?;
        // The rows of each key, in time order for sessions; rows of closed windows are late.
        let mut rows_of: HashMap<Vec<ScalarValue>, Vec<u32>> = HashMap::new();
        let (mut late, null_time) = (0u64, times.null_count() as u64);
        for row in 0..batch.num_rows() {
            if times.is_null(row) {
                continue;
            }
            let key: Vec<ScalarValue> = key_columns
                .iter()
                .map(|c| ScalarValue::try_from_array(c, row))
                .collect::<datafusion::error::Result<_>>()?;
            rows_of.entry(key).or_default().push(row as u32);
        }
        for (key, mut rows) in rows_of {
            if let WindowKind::Session { gap_ms } = self.kind {
                rows.sort_by_key(|&r| times.value(r as usize));
                let before = rows.len();
                rows.retain(|&r| times.value(r as usize) + gap_ms > self.watermark);
                late += (before - rows.len()) as u64;
                // Runs of rows less than a gap apart, each a session merged into the open ones.
                let mut run: Vec<u32> = Vec::new();
                for (i, &row) in rows.iter().enumerate() {
                    run.push(row);
                    let t = times.value(row as usize);
                    let next = rows.get(i + 1).map(|&r| times.value(r as usize));
                    if next.is_none_or(|n| n - t >= gap_ms) {
                        let start = times.value(run[0] as usize);
                        let mut accumulators = self.accumulators()?;
                        accumulators::feed(&mut accumulators, &arguments, &run, false)?;
                        self.add_session(&key, start, t + gap_ms, accumulators)?;
                        run.clear();
                    }
                }
                continue;
            }
            let mut rows_of_window: BTreeMap<(i64, i64), Vec<u32>> = BTreeMap::new();
            for &row in &rows {
                let mut placed = false;
                for (start, end) in self.windows_of(times.value(row as usize)) {
                    if end > self.watermark {
                        rows_of_window.entry((end, start)).or_default().push(row);
                        placed = true;
                    }
                }
                late += u64::from(!placed);
            }
            for (window, rows) in rows_of_window {
                let fresh = match self.windows.get(&window).is_some_and(|g| g.contains_key(&key)) {
                    true => None,
                    false => Some(self.accumulators()?),
                };
                let groups = self.windows.entry(window).or_default();
                let accumulators = groups.entry(key.clone()).or_insert_with(|| fresh.unwrap_or_default());
                accumulators::feed(accumulators, &arguments, &rows, false)?;
            }
        }
        self.metrics.dropped(late, null_time);
        Ok(())
    }

    async fn process_watermark(&mut self, watermark: i64, out: &mut Collector) -> Result<()> {
        self.watermark = self.watermark.max(watermark);
        self.fire(self.watermark, out)?;
        out.emit_watermark(watermark);
        Ok(())
    }

    async fn snapshot(&mut self, _checkpoint_id: u64) -> Result<Vec<StateTable>> {
        let (table, _) = self.windows_table()?;
        let schema = table.schema().clone();
        let mut rows: Vec<Vec<ScalarValue>> = Vec::new();
        let groups = self.windows.values().map(HashMap::len).sum::<usize>()
            + self.sessions.values().map(Vec::len).sum::<usize>();
        let mut fresh = (0..groups).map(|_| self.accumulators()).collect::<Result<Vec<_>>>()?.into_iter();
        let mut window_row = |start: i64, end: i64, key: &[ScalarValue], accumulators: &mut Accumulators| {
            let mut row = vec![ScalarValue::Int64(Some(start)), ScalarValue::Int64(Some(end))];
            row.extend(key.iter().cloned());
            let fresh =
                fresh.next().ok_or_else(|| Error::Graph("a window group appeared during its snapshot".into()))?;
            row.extend(accumulators::snapshot_states(accumulators, fresh)?);
            Ok::<_, Error>(row)
        };
        for ((end, start), groups) in &mut self.windows {
            for (key, accumulators) in groups.iter_mut() {
                rows.push(window_row(*start, *end, key, accumulators)?);
            }
        }
        for (key, sessions) in &mut self.sessions {
            for session in sessions.iter_mut() {
                rows.push(window_row(session.start, session.end, key, &mut session.accumulators)?);
            }
        }
        if rows.is_empty() {
            return Ok(vec![StateTable {
                name: WINDOWS.into(),
                schema: schema.clone(),
                batches: vec![RecordBatch::new_empty(schema)],
            }]);
        }
        let columns = accumulators::columns(&rows, &schema.fields()[1..])?;
        let hashes = key_hashes(&self.partition_batch(&columns, rows.len())?, &self.partition)?;
        let mut all: Vec<ArrayRef> = vec![Arc::new(hashes)];
        all.extend(columns);
        Ok(vec![StateTable {
            name: WINDOWS.into(),
            schema: schema.clone(),
            batches: vec![RecordBatch::try_new(schema, all)?],
        }])
    }

    /// The input ended: every open window is complete.
    async fn finish(&mut self, out: &mut Collector) -> Result<()> {
        self.fire(i64::MAX, out)
    }
}

impl WindowAggregate {
    /// The windows table: each window's start and end, the group's key columns, then each
    /// accumulator's state columns; with the number of state columns of each accumulator.
    fn windows_table(&self) -> Result<(KeyedTable, Vec<usize>)> {
        let mut fields = vec![Field::new(START, DataType::Int64, false), Field::new(END, DataType::Int64, false)];
        for (i, name) in self.group_columns.iter().enumerate().skip(1) {
            fields.push(Field::new(name, self.output.field(i).data_type().clone(), true));
        }
        let mut widths = Vec::new();
        for aggregate in &self.aggregates {
            let states = aggregate.function.state_fields()?;
            widths.push(states.len());
            for field in states {
                // Numbered as the table's columns, the key hash first.
                let name = format!("{}_{}", fields.len() + 1, field.name());
                fields.push(Field::new(name, field.data_type().clone(), true));
            }
        }
        Ok((KeyedTable::new(fields), widths))
    }

    /// The partition columns of snapshot rows (`columns`: start, end, keys, states), named as
    /// the input names them, so their hash is the one the input was routed by.
    fn partition_batch(&self, columns: &[ArrayRef], rows: usize) -> Result<RecordBatch> {
        let mut fields = Vec::new();
        let mut arrays: Vec<ArrayRef> = Vec::new();
        for name in &self.partition {
            let array: ArrayRef = if name == ALL_IN_ONE {
                Arc::new(Int64Array::from(vec![0; rows]))
            } else if *name == self.group_columns[0] {
                let starts = cast(&columns[0], &DataType::Timestamp(TimeUnit::Millisecond, None))?;
                cast(&starts, self.output.field(0).data_type())?
            } else {
                let Some(k) = self.group_columns.iter().position(|c| c == name) else {
                    return Err(Error::Graph(format!("partition column '{name}' is not a group column")));
                };
                columns[2 + k - 1].clone()
            };
            fields.push(Field::new(name, array.data_type().clone(), true));
            arrays.push(array);
        }
        Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?)
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::TimestampMillisecondArray;
    use datafusion::functions_aggregate::count::count_udaf;
    use datafusion::physical_expr::aggregate::AggregateExprBuilder;
    use datafusion::physical_expr::expressions::col;

    use super::*;
    use crate::SubtaskInfo;

    fn rows(times: &[Option<i64>]) -> RecordBatch {
        let schema = Schema::new(vec![Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true)]);
        RecordBatch::try_new(Arc::new(schema), vec![Arc::new(TimestampMillisecondArray::from(times.to_vec()))]).unwrap()
    }

    fn count_per_window(kind: WindowKind) -> WindowAggregate {
        let schema = rows(&[]).schema();
        let count = AggregateExprBuilder::new(count_udaf(), vec![col("ts", &schema).unwrap()])
            .schema(schema.clone())
            .alias("n")
            .build()
            .unwrap();
        let output = Schema::new(vec![
            Field::new(START, DataType::Timestamp(TimeUnit::Millisecond, None), false),
            Field::new("n", DataType::Int64, true),
        ]);
        let count = AggregateCall { function: Arc::new(count), filter: None };
        WindowAggregate::new(kind, vec!["ts".into()], Vec::new(), vec![count], Vec::new(), Arc::new(output))
    }

    /// Rows whose every window the watermark has passed are counted as late and dropped, rows
    /// without a time as such; rows of open windows are neither.
    #[tokio::test]
    async fn late_rows_and_rows_without_a_time_are_counted() {
        let kinds = [
            WindowKind::Tumbling { size_ms: 10 },
            WindowKind::Hopping { slide_ms: 5, size_ms: 10 },
            WindowKind::Session { gap_ms: 10 },
        ];
        for kind in kinds {
            let info = SubtaskInfo::new("window", 0, 1);
            let mut window = count_per_window(kind);
            window.open(&info, RestoredState::default()).await.unwrap();
            let mut out = Collector::default();
            window.process_batch(0, rows(&[Some(120), Some(200)]), &mut out).await.unwrap();
            window.process_watermark(105, &mut out).await.unwrap();
            // 50 (every window of it ends by 60, or 65 for a hop from 55) is late; 100 is still
            // in an open window (it ends at 110); one row has no time.
            window.process_batch(0, rows(&[Some(50), None, Some(100), Some(51)]), &mut out).await.unwrap();
            let late = info.metrics.late_records_dropped.load(std::sync::atomic::Ordering::Relaxed);
            let null_time = info.metrics.null_time_records.load(std::sync::atomic::Ordering::Relaxed);
            assert_eq!((late, null_time), (2, 1), "{kind:?}");
        }
    }
}
