//! Windowed aggregates over event time with DataFusion's accumulators: tumbling, hopping
//! (sliding), cumulating and session windows. The input carries a window column (the window
//! start for tumbling windows, computed upstream by `tumble`; the row's event time for the
//! others, whose windows are assigned here, so a row travels once however many windows hold
//! it) and the group keys as columns. A window is emitted
//! when the watermark passes its end, and its state is dropped then; rows that arrive after
//! their window was emitted are late and dropped.
//!
//! Tumbling, hopping and cumulating windows are grouped by vectors, as the updating aggregate: each (window,
//! key) is interned to a group id ([`GroupKeys`], the window's start and end leading the key)
//! and each aggregate's state lives by id in a [`GroupAccumulator`]. Sessions, which merge as
//! rows arrive, keep one set of DataFusion accumulators per open session of a key.
//!
//! The snapshot holds each open window's accumulator state with the window's start and end,
//! keyed by the hash of the columns the input is partitioned by, so a restore at another
//! parallelism re-splits it by key range. With incremental checkpoints a change holds the
//! groups fed since the last snapshot and the keys of the windows closed; for sessions, which
//! merge, every open session of each key whose sessions changed (a key's rows in a later file
//! replace all its earlier ones), and the keys left without sessions.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, ArrayRef, Int64Array, UInt32Array};
use datafusion::arrow::compute::{cast, concat, take};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Accumulator;

use crate::error::{Error, Result};
use crate::group_keys::GroupKeys;
use crate::metrics::OperatorMetrics;
use crate::operator::{Collector, Delta, Operator, RestoredState, StateTable};
use crate::operators::accumulators::{self, AggregateCall, Arguments, cast_to};
use crate::operators::group_accumulators::{self, GroupAccumulator, group_accumulators};
use crate::partition::key_hashes;
use crate::state_table::KeyedTable;
use weir_state::KEY_HASH_COLUMN;

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
    /// that starts at a multiple of `slide` (plus `offset`) and contains it.
    Hopping { slide_ms: i64, size_ms: i64, offset_ms: i64 },
    /// The window column holds the row's event time; time is cut in periods of `size` (from a
    /// multiple of `size` plus `offset`), and the row counts in every window that starts with
    /// its period and ends a whole number of `step`s later, after the row (Flink's CUMULATE).
    Cumulating { step_ms: i64, size_ms: i64, offset_ms: i64 },
    /// The window column holds the row's event time; rows of a key less than `gap` apart share
    /// a session, which ends `gap` after its last row.
    Session { gap_ms: i64 },
}

/// An open session's accumulators.
type Accumulators = Vec<Box<dyn Accumulator>>;

/// One open session of a key.
struct SessionWindow {
    start: i64,
    end: i64,
    accumulators: Accumulators,
}

/// The groups of the open tumbling, hopping or cumulating windows, by id: the key is the window's start
/// and end, then the group columns.
struct WindowGroups {
    keys: GroupKeys,
    accumulators: Vec<Box<dyn GroupAccumulator>>,
    /// The ids of each open window's groups, by (end, start): the next to close first.
    windows: BTreeMap<(i64, i64), Vec<usize>>,
    /// Whether each id's window is still open.
    open: Vec<bool>,
    /// Ids of closed windows since the last compaction.
    closed: usize,
    /// With incremental checkpoints: what changed since the last snapshot.
    changes: Option<WindowChanges>,
}

/// The groups fed and the groups closed since the last snapshot, for a snapshot of changes.
#[derive(Default)]
struct WindowChanges {
    /// By group id.
    fed: Vec<bool>,
    /// The key columns (start, end, group keys) of the groups closed.
    closed: Vec<Vec<ArrayRef>>,
}

/// Closed windows' ids are reclaimed once they are this many and outnumber the open ones.
const COMPACT_AFTER: usize = 1024;

impl WindowGroups {
    /// Interns each row of `key_columns` (start, end, keys) and returns its id; new ids join
    /// their window's list.
    fn intern(&mut self, key_columns: &[ArrayRef], starts: &[i64], ends: &[i64]) -> Result<Vec<usize>> {
        let rows = self.keys.encode(key_columns)?;
        let mut ids = Vec::with_capacity(starts.len());
        for (row, (&start, &end)) in starts.iter().zip(ends).enumerate() {
            let (id, new) = self.keys.intern(&rows, row)?;
            if new {
                self.windows.entry((end, start)).or_default().push(id);
                self.open.push(true);
            }
            ids.push(id);
        }
        for accumulator in &mut self.accumulators {
            accumulator.resize(self.keys.len());
        }
        if let Some(changes) = &mut self.changes {
            changes.fed.resize(self.keys.len(), false);
            for &id in &ids {
                changes.fed[id] = true;
            }
        }
        Ok(ids)
    }

    /// The groups of every window that ends at or before `watermark`, which are forgotten:
    /// their key columns (start, end, keys) and each aggregate's values.
    fn close(&mut self, watermark: i64) -> Result<Option<(Vec<ArrayRef>, Vec<ArrayRef>)>> {
        let mut ids = Vec::new();
        while let Some(entry) = self.windows.first_entry() {
            if entry.key().0 > watermark {
                break;
            }
            ids.extend(entry.remove());
        }
        if ids.is_empty() {
            return Ok(None);
        }
        let keys = self.keys.columns(&ids)?;
        let values = self.accumulators.iter_mut().map(|a| a.evaluate(&ids)).collect::<Result<Vec<_>>>()?;
        for &id in &ids {
            self.keys.remove(id);
            self.open[id] = false;
            for accumulator in &mut self.accumulators {
                accumulator.forget(id);
            }
        }
        self.closed += ids.len();
        if let Some(changes) = &mut self.changes {
            changes.closed.push(keys.clone());
        }
        self.compact_if_due();
        Ok(Some((keys, values)))
    }

    fn compact_if_due(&mut self) {
        let open = self.open.len() - self.closed;
        if self.closed < COMPACT_AFTER || self.closed < open {
            return;
        }
        let keep = std::mem::replace(&mut self.open, vec![true; open]);
        let mut renumbered = vec![0; keep.len()];
        let mut next = 0;
        for (id, kept) in keep.iter().enumerate() {
            renumbered[id] = next;
            next += usize::from(*kept);
        }
        self.keys.compact(&keep);
        for accumulator in &mut self.accumulators {
            accumulator.retain(&keep);
        }
        if let Some(changes) = &mut self.changes {
            group_accumulators::retain_vec(&mut changes.fed, &keep);
        }
        for ids in self.windows.values_mut() {
            ids.iter_mut().for_each(|id| *id = renumbered[*id]);
        }
        self.closed = 0;
    }

    /// The open groups' key columns (start, end, keys) and each aggregate's state columns:
    /// all of them, or (`changed_only`) those fed since the last snapshot. Either starts a new
    /// record of changes.
    fn snapshot(&mut self, changed_only: bool) -> Result<(Vec<ArrayRef>, Vec<ArrayRef>)> {
        let fed = self.changes.as_mut().map(|changes| {
            changes.closed.clear();
            std::mem::replace(&mut changes.fed, vec![false; self.open.len()])
        });
        let ids: Vec<usize> = self
            .windows
            .values()
            .flatten()
            .copied()
            .filter(|&id| !changed_only || fed.as_ref().is_some_and(|fed| fed.get(id).copied().unwrap_or(false)))
            .collect();
        let keys = self.keys.columns(&ids)?;
        let mut states = Vec::new();
        for accumulator in &mut self.accumulators {
            states.extend(accumulator.state(&ids)?);
        }
        Ok((keys, states))
    }
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
    /// Tumbling, hopping and cumulating windows' groups (made on first use: making accumulators can fail).
    groups: Option<WindowGroups>,
    /// Session windows by key, in start order, disjoint.
    sessions: HashMap<Vec<ScalarValue>, Vec<SessionWindow>>,
    watermark: i64,
    /// The subtask's counters: late rows and rows without a time are counted there.
    metrics: Arc<OperatorMetrics>,
    /// Checkpoints are incremental: the window groups keep a [`WindowChanges`].
    incremental: bool,
    /// With incremental checkpoints: the keys whose sessions changed since the last snapshot.
    session_changes: Option<HashSet<Vec<ScalarValue>>>,
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

/// The start of the window of `size` (its grid shifted by `offset`) holding time `t`: the
/// operator's windows, and the batch functions (`tumble`, `hop_starts`, ...) that must agree.
pub fn window_start(t: i64, size: i64, offset: i64) -> i64 {
    (t - offset).div_euclid(size) * size + offset
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
            groups: None,
            sessions: HashMap::new(),
            watermark: i64::MIN,
            metrics: Arc::default(),
            incremental: false,
            session_changes: None,
        }
    }

    fn accumulators(&self) -> Result<Accumulators> {
        Ok(self.aggregates.iter().map(|a| a.function.create_accumulator()).collect::<datafusion::error::Result<_>>()?)
    }

    /// The types of the key columns: the group columns' (after the window column).
    fn key_types(&self) -> Vec<DataType> {
        (1..self.group_columns.len()).map(|i| self.output.field(i).data_type().clone()).collect()
    }

    fn groups(&mut self) -> Result<&mut WindowGroups> {
        if self.groups.is_none() {
            let accumulators = group_accumulators(&self.aggregates, false, |call| {
                let function = call.function.clone();
                move || function.create_accumulator()
            })?;
            let types: Vec<DataType> = [DataType::Int64, DataType::Int64].into_iter().chain(self.key_types()).collect();
            self.groups = Some(WindowGroups {
                keys: GroupKeys::new(&types)?,
                accumulators,
                windows: BTreeMap::new(),
                open: Vec::new(),
                closed: 0,
                changes: self.incremental.then(WindowChanges::default),
            });
        }
        self.groups.as_mut().ok_or_else(|| Error::Graph("the window groups are missing".into()))
    }

    /// The output columns of closed groups: `keys` (start, end, group keys) and `values`.
    fn output_columns(&self, keys: Vec<ArrayRef>, values: Vec<ArrayRef>) -> Result<Vec<ArrayRef>> {
        let millis = DataType::Timestamp(TimeUnit::Millisecond, None);
        let mut keys = keys.into_iter();
        let (Some(starts), Some(ends)) = (keys.next(), keys.next()) else {
            return Err(Error::Graph("a window group's key has no start and end".into()));
        };
        let (starts, ends) = (cast(&starts, &millis)?, cast(&ends, &millis)?);
        let mut columns = vec![starts];
        columns.extend(keys);
        let mut values = values.into_iter();
        for position in 0..self.output.fields().len() - columns.len() {
            if self.window_ends.contains(&position) {
                columns.push(ends.clone());
            } else if let Some(value) = values.next() {
                columns.push(value);
            }
        }
        columns
            .into_iter()
            .zip(self.output.fields())
            .map(|(column, field)| cast_to(column, field.data_type()))
            .collect()
    }

    /// A closed session's output row.
    fn session_row(&self, keys: &[ScalarValue], session: &mut SessionWindow) -> Result<Vec<ScalarValue>> {
        let mut row = vec![ScalarValue::TimestampMillisecond(Some(session.start), None)];
        row.extend(keys.iter().cloned());
        let outputs = self.output.fields().len() - row.len();
        let mut accumulators = session.accumulators.iter_mut();
        for position in 0..outputs {
            if self.window_ends.contains(&position) {
                row.push(ScalarValue::TimestampMillisecond(Some(session.end), None));
            } else if let Some(accumulator) = accumulators.next() {
                row.push(accumulator.evaluate()?);
            }
        }
        Ok(row)
    }

    /// Emits every window that ends at or before `watermark`, and forgets it.
    fn fire(&mut self, watermark: i64, out: &mut Collector) -> Result<()> {
        if let Some(groups) = self.groups.as_mut()
            && let Some((keys, values)) = groups.close(watermark)?
        {
            let columns = self.output_columns(keys, values)?;
            out.emit(RecordBatch::try_new(self.output.clone(), columns)?);
        }
        let mut closed = Vec::new();
        for (keys, sessions) in &mut self.sessions {
            while sessions.first().is_some_and(|s| s.end <= watermark) {
                closed.push((keys.clone(), sessions.remove(0)));
            }
        }
        self.sessions.retain(|_, sessions| !sessions.is_empty());
        if closed.is_empty() {
            return Ok(());
        }
        if let Some(changed) = &mut self.session_changes {
            changed.extend(closed.iter().map(|(keys, _)| keys.clone()));
        }
        closed.sort_by_key(|(_, session)| session.start);
        let rows =
            closed.iter_mut().map(|(keys, session)| self.session_row(keys, session)).collect::<Result<Vec<_>>>()?;
        let columns = accumulators::columns(&rows, self.output.fields())?;
        out.emit(RecordBatch::try_new(self.output.clone(), columns)?);
        Ok(())
    }

    /// Adds the rows `indices` of a key, all at or after `start` and before `end` - gap, as a
    /// session, merging it with the key's open sessions it overlaps.
    fn add_session(&mut self, keys: &[ScalarValue], start: i64, end: i64, rows: Accumulators) -> Result<()> {
        if let Some(changed) = &mut self.session_changes {
            changed.insert(keys.to_vec());
        }
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

    /// Sessions: each key's rows in time order, runs less than a gap apart merged into the
    /// key's open sessions. Returns the rows dropped as late.
    fn add_sessions(
        &mut self,
        gap_ms: i64,
        times: &Int64Array,
        key_columns: &[ArrayRef],
        arguments: &[Arguments],
    ) -> Result<u64> {
        let mut rows_of: HashMap<Vec<ScalarValue>, Vec<u32>> = HashMap::new();
        for row in 0..times.len() {
            if times.is_valid(row) {
                rows_of.entry(accumulators::row_values(key_columns, row)?).or_default().push(row as u32);
            }
        }
        let mut late = 0;
        for (key, mut rows) in rows_of {
            rows.sort_by_key(|&r| times.value(r as usize));
            let before = rows.len();
            rows.retain(|&r| times.value(r as usize) + gap_ms > self.watermark);
            late += (before - rows.len()) as u64;
            let mut run: Vec<u32> = Vec::new();
            for (i, &row) in rows.iter().enumerate() {
                run.push(row);
                let t = times.value(row as usize);
                let next = rows.get(i + 1).map(|&r| times.value(r as usize));
                if next.is_none_or(|n| n - t >= gap_ms) {
                    let start = times.value(run[0] as usize);
                    let mut accumulators = self.accumulators()?;
                    accumulators::feed(&mut accumulators, arguments, &run, false)?;
                    self.add_session(&key, start, t + gap_ms, accumulators)?;
                    run.clear();
                }
            }
        }
        Ok(late)
    }

    /// Tumbling, hopping and cumulating windows: each row joins the group of its key in every
    /// open window holding its time. Returns the rows dropped as late.
    fn add_to_windows(&mut self, times: &Int64Array, key_columns: &[ArrayRef], arguments: &[Arguments]) -> Result<u64> {
        let (mut rows, mut starts, mut ends) = (Vec::new(), Vec::new(), Vec::new());
        let mut late = 0;
        for (row, t) in times.iter().enumerate() {
            let Some(t) = t else { continue };
            let placed = rows.len();
            match self.kind {
                // The window column holds the window's start.
                WindowKind::Tumbling { size_ms } if t + size_ms > self.watermark => {
                    rows.push(row as u32);
                    starts.push(t);
                    ends.push(t + size_ms);
                }
                WindowKind::Hopping { slide_ms, size_ms, offset_ms } => {
                    let mut start = window_start(t, slide_ms, offset_ms);
                    while start + size_ms > t && start + size_ms > self.watermark {
                        rows.push(row as u32);
                        starts.push(start);
                        ends.push(start + size_ms);
                        start -= slide_ms;
                    }
                }
                WindowKind::Cumulating { step_ms, size_ms, offset_ms } => {
                    let start = window_start(t, size_ms, offset_ms);
                    // The first end after t, then every step to the period's end.
                    let mut end = window_start(t, step_ms, offset_ms) + step_ms;
                    while end <= start + size_ms {
                        if end > self.watermark {
                            rows.push(row as u32);
                            starts.push(start);
                            ends.push(end);
                        }
                        end += step_ms;
                    }
                }
                _ => {}
            }
            late += u64::from(rows.len() == placed);
        }
        let indices = UInt32Array::from(rows.clone());
        let mut keys: Vec<ArrayRef> =
            vec![Arc::new(Int64Array::from(starts.clone())), Arc::new(Int64Array::from(ends.clone()))];
        for (column, data_type) in key_columns.iter().zip(self.key_types()) {
            // Every row in one window each, in order: the batch's own column.
            let column = if rows.len() == column.len() && rows.iter().enumerate().all(|(i, &r)| i == r as usize) {
                column.clone()
            } else {
                take(column, &indices, None)?
            };
            keys.push(cast_to(column, &data_type)?);
        }
        let groups = self.groups()?;
        let ids = groups.intern(&keys, &starts, &ends)?;
        group_accumulators::feed(&mut groups.accumulators, arguments, &rows, &ids, false)?;
        Ok(late)
    }
}

#[async_trait]
impl Operator for WindowAggregate {
    /// Working state: a bounded run's final checkpoint leaves it out.
    fn state_needed_after_finish(&self) -> bool {
        false
    }

    async fn open(&mut self, info: &crate::SubtaskInfo, restored: RestoredState) -> Result<()> {
        self.metrics = info.metrics.clone();
        self.incremental = info.incremental;
        let keys = self.group_columns.len() - 1;
        let (table, widths) = self.windows_table()?;
        let fields = table.fields();
        for batch in restored.table(WINDOWS) {
            let (starts, ends) = (millis_of(batch, START)?, millis_of(batch, END)?);
            let key_columns = table.read(batch, &fields[2..2 + keys])?;
            let states = table.read(batch, &fields[2 + keys..])?;
            if !matches!(self.kind, WindowKind::Session { .. }) {
                let mut columns: Vec<ArrayRef> = vec![Arc::new(starts.clone()), Arc::new(ends.clone())];
                columns.extend(key_columns);
                let groups = self.groups()?;
                let ids = groups.intern(&columns, starts.values(), ends.values())?;
                let mut column = 0;
                for (accumulator, width) in groups.accumulators.iter_mut().zip(&widths) {
                    accumulator.merge(&states[column..column + width], &ids)?;
                    column += width;
                }
                continue;
            }
            for row in 0..batch.num_rows() {
                let key = accumulators::row_values(&key_columns, row)?;
                let mut accumulators = self.accumulators()?;
                accumulators::restore_row(&mut accumulators, &states, &widths, row)?;
                let (start, end) = (starts.value(row), ends.value(row));
                self.sessions.entry(key).or_default().push(SessionWindow { start, end, accumulators });
            }
        }
        for sessions in self.sessions.values_mut() {
            sessions.sort_by_key(|s| s.start);
        }
        // Changes count from the restored state, which a continued chain already holds.
        let sessions = matches!(self.kind, WindowKind::Session { .. });
        self.session_changes = (sessions && info.incremental).then(HashSet::new);
        if let Some(changes) = self.groups.as_mut().and_then(|groups| groups.changes.as_mut()) {
            changes.fed.fill(false);
            changes.closed.clear();
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
        let late = match self.kind {
            WindowKind::Session { gap_ms } => self.add_sessions(gap_ms, &times, &key_columns, &arguments)?,
            _ => self.add_to_windows(&times, &key_columns, &arguments)?,
        };
        self.metrics.dropped(late, times.null_count() as u64);
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
        let columns = match self.kind {
            WindowKind::Session { .. } => {
                if let Some(changed) = &mut self.session_changes {
                    changed.clear();
                }
                let keys: Vec<Vec<ScalarValue>> = self.sessions.keys().cloned().collect();
                self.session_columns(&schema, &keys)?
            }
            _ => {
                let (keys, states) = self.groups()?.snapshot(false)?;
                keys.into_iter().chain(states).collect()
            }
        };
        let batch = self.keyed_batch(&schema, columns)?;
        Ok(vec![StateTable { name: WINDOWS.into(), schema, batches: vec![batch], delta: None }])
    }

    /// The groups fed since the last snapshot, and the keys of those closed; for sessions the
    /// open sessions of the keys whose sessions changed, and the keys left without any.
    async fn snapshot_changes(&mut self, _checkpoint_id: u64) -> Result<Option<Vec<StateTable>>> {
        if matches!(self.kind, WindowKind::Session { .. }) {
            return self.session_changes();
        }
        let Some(closed) = self.groups()?.changes.as_mut().map(|changes| std::mem::take(&mut changes.closed)) else {
            return Ok(None);
        };
        let (table, _) = self.windows_table()?;
        let schema = table.schema().clone();
        let (keys, states) = self.groups()?.snapshot(true)?;
        let batch = self.keyed_batch(&schema, keys.into_iter().chain(states).collect())?;
        // The closed groups' keys: start, end and group columns, under the table's names.
        let key_fields: Vec<Field> =
            schema.fields()[1..self.group_columns.len() + 2].iter().map(|f| f.as_ref().clone()).collect();
        let key_columns = (0..key_fields.len())
            .map(|i| {
                let parts: Vec<&dyn Array> = closed.iter().map(|columns| columns[i].as_ref()).collect();
                match parts.is_empty() {
                    true => Ok(datafusion::arrow::array::new_empty_array(key_fields[i].data_type())),
                    false => Ok(concat(&parts)?),
                }
            })
            .collect::<Result<Vec<ArrayRef>>>()?;
        let key_schema = Arc::new(Schema::new(
            std::iter::once(schema.field(0).clone()).chain(key_fields.iter().cloned()).collect::<Vec<_>>(),
        ));
        // The key columns lead the windows table, so they are written as its rows are.
        let deleted = self.keyed_batch(&key_schema, key_columns)?;
        let key = key_fields.iter().map(|f| f.name().clone()).collect();
        Ok(Some(vec![StateTable {
            name: WINDOWS.into(),
            schema,
            batches: vec![batch],
            delta: Some(Delta { key, deleted }),
        }]))
    }

    /// The input ended: every open window is complete.
    async fn finish(&mut self, out: &mut Collector) -> Result<()> {
        self.fire(i64::MAX, out)
    }
}

impl WindowAggregate {
    /// Snapshot rows: the key hash (of the partition columns among `columns`) and `columns`
    /// (start, end, keys, states) as the table's types.
    fn keyed_batch(&self, schema: &SchemaRef, columns: Vec<ArrayRef>) -> Result<RecordBatch> {
        let columns: Vec<ArrayRef> = columns
            .into_iter()
            .zip(&schema.fields()[1..])
            .map(|(column, field)| cast_to(column, field.data_type()))
            .collect::<Result<_>>()?;
        let rows = columns.first().map_or(0, |c| c.len());
        let hashes = key_hashes(&self.partition_batch(&columns, rows)?, &self.partition)?;
        let mut all: Vec<ArrayRef> = vec![Arc::new(hashes)];
        all.extend(columns);
        Ok(RecordBatch::try_new(schema.clone(), all)?)
    }

    /// The sessions of the keys whose sessions changed since the last snapshot, and the keys
    /// left without sessions as removed. A session table's key is its group columns (the hash
    /// alone without any): start and end are not part of it, since sessions merge.
    fn session_changes(&mut self) -> Result<Option<Vec<StateTable>>> {
        let Some(changed) = self.session_changes.replace(HashSet::new()) else { return Ok(None) };
        let (kept, removed): (Vec<_>, Vec<_>) = changed.into_iter().partition(|key| self.sessions.contains_key(key));
        let (table, _) = self.windows_table()?;
        let schema = table.schema().clone();
        let columns = self.session_columns(&schema, &kept)?;
        let batch = self.keyed_batch(&schema, columns)?;
        // The removed keys, with a start and end of 0 (not read) for the key hash's sake.
        let key_fields = &schema.fields()[1..self.group_columns.len() + 2];
        let rows: Vec<Vec<ScalarValue>> = removed
            .into_iter()
            .map(|key| [ScalarValue::Int64(Some(0)), ScalarValue::Int64(Some(0))].into_iter().chain(key).collect())
            .collect();
        let key_columns = match rows.is_empty() {
            true => key_fields.iter().map(|f| datafusion::arrow::array::new_empty_array(f.data_type())).collect(),
            false => accumulators::columns(&rows, key_fields)?,
        };
        let key_schema = Arc::new(Schema::new(
            std::iter::once(schema.fields()[0].clone()).chain(key_fields.iter().cloned()).collect::<Vec<_>>(),
        ));
        let deleted = self.keyed_batch(&key_schema, key_columns)?;
        let key = match self.group_columns.len() {
            1 => vec![KEY_HASH_COLUMN.to_string()],
            _ => key_fields[2..].iter().map(|f| f.name().clone()).collect(),
        };
        Ok(Some(vec![StateTable {
            name: WINDOWS.into(),
            schema,
            batches: vec![batch],
            delta: Some(Delta { key, deleted }),
        }]))
    }

    /// The open sessions of `keys` as the windows table's columns (after the key hash).
    fn session_columns(&mut self, schema: &SchemaRef, keys: &[Vec<ScalarValue>]) -> Result<Vec<ArrayRef>> {
        let groups = keys.iter().filter_map(|key| self.sessions.get(key)).map(Vec::len).sum::<usize>();
        let mut fresh = (0..groups).map(|_| self.accumulators()).collect::<Result<Vec<_>>>()?.into_iter();
        let mut rows: Vec<Vec<ScalarValue>> = Vec::new();
        for key in keys {
            let Some(sessions) = self.sessions.get_mut(key) else { continue };
            for session in sessions.iter_mut() {
                let mut row = vec![ScalarValue::Int64(Some(session.start)), ScalarValue::Int64(Some(session.end))];
                row.extend(key.iter().cloned());
                let fresh =
                    fresh.next().ok_or_else(|| Error::Graph("a session appeared during its snapshot".into()))?;
                row.extend(accumulators::snapshot_states(&mut session.accumulators, fresh)?);
                rows.push(row);
            }
        }
        if rows.is_empty() {
            return Ok(RecordBatch::new_empty(schema.clone()).columns()[1..].to_vec());
        }
        accumulators::columns(&rows, &schema.fields()[1..])
    }

    /// The windows table: each window's start and end, the group's key columns, then each
    /// accumulator's state columns; with the number of state columns of each accumulator.
    fn windows_table(&mut self) -> Result<(KeyedTable, Vec<usize>)> {
        let mut fields = vec![Field::new(START, DataType::Int64, false), Field::new(END, DataType::Int64, false)];
        for (i, name) in self.group_columns.iter().enumerate().skip(1) {
            fields.push(Field::new(name, self.output.field(i).data_type().clone(), true));
        }
        let states: Vec<Vec<DataType>> = match self.kind {
            WindowKind::Session { .. } => self
                .aggregates
                .iter()
                .map(|a| Ok(a.function.state_fields()?.iter().map(|f| f.data_type().clone()).collect()))
                .collect::<Result<_>>()?,
            _ => self.groups()?.accumulators.iter().map(|a| a.state_types()).collect(),
        };
        let widths = accumulators::push_state_fields(&mut fields, states);
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
            WindowKind::Hopping { slide_ms: 5, size_ms: 10, offset_ms: 0 },
            WindowKind::Cumulating { step_ms: 5, size_ms: 10, offset_ms: 0 },
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
            // in an open window (it ends at 110; the cumulating window ending at 105 is closed);
            // one row has no time.
            window.process_batch(0, rows(&[Some(50), None, Some(100), Some(51)]), &mut out).await.unwrap();
            let late = info.metrics.late_records_dropped.load(std::sync::atomic::Ordering::Relaxed);
            let null_time = info.metrics.null_time_records.load(std::sync::atomic::Ordering::Relaxed);
            assert_eq!((late, null_time), (2, 1), "{kind:?}");
        }
    }

    /// The counts of each window a kind gives rows at `times`, as (start, end, count), in the
    /// order the windows close.
    async fn counts(kind: WindowKind, times: &[i64]) -> Vec<(i64, i64, i64)> {
        let info = SubtaskInfo::new("window", 0, 1);
        let mut window = count_per_window(kind);
        window.output = Arc::new(Schema::new(vec![
            Field::new(START, DataType::Timestamp(TimeUnit::Millisecond, None), false),
            Field::new("n", DataType::Int64, true),
            Field::new(END, DataType::Timestamp(TimeUnit::Millisecond, None), false),
        ]));
        window.window_ends = vec![1];
        window.open(&info, RestoredState::default()).await.unwrap();
        let mut out = Collector::default();
        let times: Vec<Option<i64>> = times.iter().copied().map(Some).collect();
        window.process_batch(0, rows(&times), &mut out).await.unwrap();
        window.process_watermark(i64::MAX, &mut out).await.unwrap();
        let mut counts = Vec::new();
        for batch in out.batches {
            let millis = |i: usize| cast(batch.column(i), &DataType::Int64).unwrap();
            let (starts, n, ends) = (millis(0), millis(1), millis(2));
            let as_i64 = |a: &ArrayRef, row: usize| a.as_any().downcast_ref::<Int64Array>().unwrap().value(row);
            for row in 0..batch.num_rows() {
                counts.push((as_i64(&starts, row), as_i64(&ends, row), as_i64(&n, row)));
            }
        }
        counts.sort();
        counts
    }

    /// Incremental checkpoints: a full snapshot, then snapshots of what changed (windows fed,
    /// windows closed by the watermark), merged as a restore merges them, hold the rows of a
    /// full snapshot taken at the end.
    #[tokio::test]
    async fn a_base_and_its_changes_restore_the_open_windows_a_full_snapshot_holds() {
        let mut window = count_per_window(WindowKind::Hopping { slide_ms: 5, size_ms: 10, offset_ms: 0 });
        window.partition = vec![ALL_IN_ONE.into()];
        let info = SubtaskInfo { incremental: true, ..SubtaskInfo::new("window", 0, 1) };
        window.open(&info, RestoredState::default()).await.unwrap();
        let mut out = Collector::default();
        let times = |t: &[i64]| rows(&t.iter().copied().map(Some).collect::<Vec<_>>());
        window.process_batch(0, times(&[1, 6, 12]), &mut out).await.unwrap();
        let base = window.snapshot(1).await.unwrap();
        assert_eq!(base[0].batches[0].num_rows(), 4, "windows [-5,5) [0,10) [5,15) [10,20)");
        let mut chains = crate::state_table::Chains::new(base);
        let mut written = Vec::new();
        for (batch, watermark) in [(&[13, 7][..], 10), (&[21][..], 20)] {
            window.process_batch(0, times(batch), &mut out).await.unwrap();
            window.process_watermark(watermark, &mut out).await.unwrap();
            let changes = window.snapshot_changes(2).await.unwrap().unwrap();
            assert_eq!(changes[0].delta.as_ref().unwrap().key, [START, END]);
            written.extend(chains.push(changes));
        }
        // 13 and 7 feed [5,15) [10,20) and [0,10) [5,15); the watermark 10 closes [-5,5)
        // (and [0,10), fed and closed since the snapshot). 21 feeds [15,25) [20,30); the
        // watermark 20 closes [5,15) and [10,20).
        assert_eq!(written, [(2, Some(2)), (2, Some(2))]);
        let full = window.snapshot(4).await.unwrap();
        assert_eq!(full[0].batches[0].num_rows(), 2, "[15,25) and [20,30) are open");
        chains.assert_match(full);
    }

    /// Incremental checkpoints of session windows: every open session of each key whose
    /// sessions changed (merged, extended, closed), and the keys left without sessions, merged
    /// as a restore merges them, hold what a full snapshot at the end holds.
    #[tokio::test]
    async fn a_base_and_its_changes_restore_the_open_sessions_a_full_snapshot_holds() {
        let input = Arc::new(Schema::new(vec![
            Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
            Field::new("k", DataType::Int64, true),
        ]));
        let count = AggregateExprBuilder::new(count_udaf(), vec![col("ts", &input).unwrap()])
            .schema(input.clone())
            .alias("n")
            .build()
            .unwrap();
        let output = Schema::new(vec![
            Field::new(START, DataType::Timestamp(TimeUnit::Millisecond, None), false),
            Field::new("k", DataType::Int64, true),
            Field::new("n", DataType::Int64, true),
        ]);
        let count = AggregateCall { function: Arc::new(count), filter: None };
        let kind = WindowKind::Session { gap_ms: 10 };
        let mut window = WindowAggregate::new(
            kind,
            vec!["ts".into(), "k".into()],
            vec!["k".into()],
            vec![count],
            Vec::new(),
            Arc::new(output),
        );
        let info = SubtaskInfo { incremental: true, ..SubtaskInfo::new("window", 0, 1) };
        window.open(&info, RestoredState::default()).await.unwrap();
        let batch = |rows: &[(i64, i64)]| {
            let times = TimestampMillisecondArray::from_iter_values(rows.iter().map(|r| r.0));
            let keys = Int64Array::from_iter_values(rows.iter().map(|r| r.1));
            RecordBatch::try_new(input.clone(), vec![Arc::new(times), Arc::new(keys)]).unwrap()
        };
        let mut out = Collector::default();
        // Key 1: sessions [0,10) and [30,40); key 2: [5,15); key 3: [50,60).
        window.process_batch(0, batch(&[(0, 1), (30, 1), (5, 2), (50, 3)]), &mut out).await.unwrap();
        let mut chains = crate::state_table::Chains::new(window.snapshot(1).await.unwrap());
        // 8, 17 and 26 (a session [8,36)) merge key 1's two into [0,40); the watermark 16
        // closes key 2's only one.
        window.process_batch(0, batch(&[(8, 1), (17, 1), (26, 1)]), &mut out).await.unwrap();
        window.process_watermark(16, &mut out).await.unwrap();
        let written = chains.push(window.snapshot_changes(2).await.unwrap().unwrap());
        assert_eq!(written, [(1, Some(1))], "key 1's one session; key 2 removed");
        // Key 3 gets a second session; key 4 is new.
        window.process_batch(0, batch(&[(70, 3), (75, 4)]), &mut out).await.unwrap();
        let written = chains.push(window.snapshot_changes(3).await.unwrap().unwrap());
        assert_eq!(written, [(3, Some(0))], "key 3's two sessions and key 4's");
        let full = window.snapshot(4).await.unwrap();
        assert_eq!(full[0].batches[0].num_rows(), 4);
        chains.assert_match(full);
    }

    /// Cumulating windows count from their period's start to every step's end after the row;
    /// an offset moves both hopping and cumulating windows off the epoch's grid.
    #[tokio::test]
    async fn cumulating_and_offset_windows_hold_the_rows_flink_puts_in_them() {
        let cumulating = WindowKind::Cumulating { step_ms: 5, size_ms: 10, offset_ms: 0 };
        assert_eq!(counts(cumulating, &[1, 6, 12]).await, vec![(0, 5, 1), (0, 10, 2), (10, 15, 1), (10, 20, 1)]);
        let shifted = WindowKind::Cumulating { step_ms: 5, size_ms: 10, offset_ms: 2 };
        assert_eq!(
            counts(shifted, &[1, 6, 12]).await,
            vec![(-8, 2, 1), (2, 7, 1), (2, 12, 1), (12, 17, 1), (12, 22, 1)]
        );
        let hopping = WindowKind::Hopping { slide_ms: 5, size_ms: 10, offset_ms: 2 };
        assert_eq!(counts(hopping, &[1, 6]).await, vec![(-8, 2, 1), (-3, 7, 2), (2, 12, 1)]);
    }
}
