//! A non-windowed `GROUP BY`: an updating aggregate. Its output is a changelog
//! ([`crate::changelog`]): after each input batch, every group it touched emits `+I` when it is
//! new, `-U` old / `+U` new when its values changed, and `-D` when a retracting input emptied it;
//! one change per group per batch, however many of its rows the batch held (as Flink's
//! mini-batch aggregation). A changelog input is aggregated by accumulators that take rows back:
//! count, sum and avg natively, min, max and DISTINCT counts by [`ValueCounts`], other functions
//! by the accumulators DataFusion makes for sliding window frames (the planner only allows
//! functions whose sliding form takes back any row). With a time-to-live, groups not touched
//! for that long (processing time, as Flink's state TTL) are forgotten without output: a later
//! row for the key starts afresh.
//!
//! A batch is grouped without a value per row: its keys are interned to group ids
//! ([`GroupKeys`]) and each aggregate's state lives in vectors by id
//! ([`group_accumulators`](crate::operators::group_accumulators)). The values a batch replaces
//! are read just before it is applied, so nothing keeps the emitted values.
//!
//! The snapshot holds each group's key, accumulator state, row count and last access, keyed by
//! the hash of the group columns (the input's partitioning).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array, UInt32Array};
use datafusion::arrow::compute::kernels::cmp::distinct;
use datafusion::arrow::compute::{concat, interleave, or, take};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{ScalarValue, exec_err};
use datafusion::logical_expr::Accumulator;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;

use crate::changelog::{Change, change_array, changes};
use crate::error::{Error, Result};
use crate::group_keys::GroupKeys;
use crate::operator::{Collector, Delta, Operator, RestoredState, StateTable};
use crate::operators::accumulators::{self, AggregateCall, Arguments, cast_to};
use crate::operators::group_accumulators::{self, GroupAccumulator, group_accumulators, retain_vec};
use crate::operators::state_ttl::{StateTtl, now_ms};
use crate::operators::value_counts::{Reported, ValueCounts};
use crate::operators::window_aggregate::ALL_IN_ONE;
use crate::partition::key_hashes;
use crate::state_table::KeyedTable;
use weir_state::{FileRole, KEY_HASH_COLUMN};

const GROUPS: &str = "groups";
const ROWS: &str = "__rows";
const LAST_ACCESS: &str = "__last_access_ms";
/// A restore applies changed groups this many rows at a time (about 60 MB of keys and their
/// order held meanwhile).
const UPSERTS_AT_ONCE: usize = if cfg!(test) { 64 } else { 1 << 21 };
/// Removed groups' ids are reclaimed once they are this many and outnumber the live ones.
const COMPACT_AFTER: usize = 1024;

/// What a [`ValueCounts`] reports for `aggregate` over a changelog, if it takes its place:
/// min and max, and DISTINCT counts of one argument.
fn value_counts_for(aggregate: &AggregateFunctionExpr) -> Option<Reported> {
    match aggregate.fun().name().to_lowercase().as_str() {
        "min" => Some(Reported::Min),
        "max" => Some(Reported::Max),
        "count" if aggregate.is_distinct() && aggregate.expressions().len() == 1 => Some(Reported::DistinctCount),
        _ => None,
    }
}

/// The per-group DataFusion accumulator of `function` (for the functions kept natively by
/// [`group_accumulator`] nothing calls it).
fn per_group_accumulator(
    function: &AggregateFunctionExpr,
    retracting: bool,
) -> datafusion::error::Result<Box<dyn Accumulator>> {
    match (retracting, value_counts_for(function)) {
        (true, Some(reported)) => {
            // The values counted are the argument's: min/max return their type, a distinct
            // count's state is a list of them.
            let data_type = match reported {
                Reported::DistinctCount => match function.state_fields()?.first().map(|f| f.data_type()) {
                    Some(DataType::List(values)) => values.data_type().clone(),
                    other => return exec_err!("count(DISTINCT) has a state of {other:?}, not a list"),
                },
                _ => function.field().data_type().clone(),
            };
            Ok(Box::new(ValueCounts::new(reported, data_type)?))
        }
        (true, None) => function.create_sliding_accumulator(),
        (false, _) => function.create_accumulator(),
    }
}

/// Every group's state, by group id.
struct Groups {
    keys: GroupKeys,
    accumulators: Vec<Box<dyn GroupAccumulator>>,
    /// Input rows in each group (inserts less retractions).
    rows: Vec<i64>,
    /// Wall-clock milliseconds of each group's last row, for the time-to-live.
    last_access_ms: Vec<i64>,
    live: Vec<bool>,
    /// Ids removed since the last compaction.
    removed: usize,
    /// The batch that last touched each group (to list a batch's groups once each).
    /// (32 bits: a restore of 31 M groups spends most of its time on fresh memory.)
    touched_by: Vec<u32>,
    /// Batches applied, wrapping (then every group's `touched_by` is cleared).
    batches: u32,
    /// With incremental checkpoints: what changed since the last snapshot.
    changes: Option<ChangeRecord>,
}

/// The groups changed and removed since the last snapshot, for a snapshot of changes.
#[derive(Default)]
struct ChangeRecord {
    /// By group id.
    changed: Vec<bool>,
    /// The ids `changed` marks, each once: a snapshot of 1% of 31 M groups reads and clears
    /// those, where scanning and replacing the marks took tens of milliseconds a subtask at every
    /// checkpoint (and fresh pages for the new marks).
    changed_ids: Vec<usize>,
    /// Removed groups whose ids (and keys) are still in the key store.
    removed: Vec<usize>,
    /// Keys of removed groups whose ids a compaction reclaimed since.
    removed_keys: Vec<Vec<ArrayRef>>,
}

/// What one batch did to one group it touched.
struct Touched {
    id: usize,
    /// A row of the batch holding the group's key.
    key_row: u32,
    /// Its place among the groups that existed before the batch, if it did.
    old: Option<usize>,
    /// Its place among the groups that exist after it, if it does.
    new: Option<usize>,
}

impl ChangeRecord {
    fn mark(&mut self, id: usize) {
        if !self.changed[id] {
            self.changed[id] = true;
            self.changed_ids.push(id);
        }
    }

    /// The ids marked changed (unmarked now).
    fn take_changed(&mut self) -> Vec<usize> {
        let ids = std::mem::take(&mut self.changed_ids);
        for &id in &ids {
            self.changed[id] = false;
        }
        ids
    }
}

impl Groups {
    /// Makes room for `additional` more groups (a restore knows how many at most).
    fn reserve(&mut self, additional: usize) {
        for accumulator in &mut self.accumulators {
            accumulator.reserve(additional);
        }
        self.rows.reserve(additional);
        self.last_access_ms.reserve(additional);
        self.live.reserve(additional);
        self.touched_by.reserve(additional);
        if let Some(changes) = &mut self.changes {
            changes.changed.reserve(additional);
        }
    }

    fn resize(&mut self) {
        let len = self.keys.len();
        for accumulator in &mut self.accumulators {
            accumulator.resize(len);
        }
        self.rows.resize(len, 0);
        self.last_access_ms.resize(len, 0);
        self.live.resize(len, true);
        self.touched_by.resize(len, 0);
        if let Some(changes) = &mut self.changes {
            changes.changed.resize(len, false);
        }
    }

    fn remove(&mut self, id: usize) {
        self.forget(id);
        if let Some(changes) = &mut self.changes {
            changes.removed.push(id);
        }
    }

    /// Removes group `id` without recording it as a change (a restore applying a removal the
    /// checkpoint's chain already holds).
    fn forget(&mut self, id: usize) {
        self.keys.remove(id);
        self.live[id] = false;
        for accumulator in &mut self.accumulators {
            accumulator.forget(id);
        }
        self.removed += 1;
    }

    /// Empties group `id` for a restored row that replaces its state.
    fn clear(&mut self, id: usize) {
        for accumulator in &mut self.accumulators {
            accumulator.forget(id);
        }
        self.rows[id] = 0;
        self.last_access_ms[id] = 0;
    }

    fn live_ids(&self) -> Vec<usize> {
        (0..self.keys.len()).filter(|&id| self.live[id]).collect()
    }

    /// Reclaims removed groups' ids once they are many.
    fn compact_if_due(&mut self) -> Result<()> {
        let live = self.keys.len() - self.removed;
        if self.removed < COMPACT_AFTER || self.removed < live {
            return Ok(());
        }
        let keep = self.live.clone();
        if let Some(changes) = &mut self.changes {
            // The removed keys leave the store: keep them for the next snapshot's deletes.
            if !changes.removed.is_empty() {
                changes.removed_keys.push(self.keys.columns(&changes.removed)?);
                changes.removed.clear();
            }
            retain_vec(&mut changes.changed, &keep);
            changes.changed_ids = changes.changed.iter().enumerate().filter(|(_, c)| **c).map(|(id, _)| id).collect();
        }
        self.keys.compact(&keep);
        for accumulator in &mut self.accumulators {
            accumulator.retain(&keep);
        }
        retain_vec(&mut self.rows, &keep);
        retain_vec(&mut self.last_access_ms, &keep);
        self.live = vec![true; live];
        self.touched_by = vec![0; live];
        self.removed = 0;
        Ok(())
    }

    /// Forgets groups last touched before `oldest`.
    fn expire(&mut self, oldest: i64) -> Result<()> {
        for id in 0..self.keys.len() {
            if self.live[id] && self.last_access_ms[id] < oldest {
                self.remove(id);
            }
        }
        self.compact_if_due()
    }

    /// Merges a restored batch of the groups table (`table`: `keys` group columns, the two
    /// counters, then accumulators' state columns `widths` wide) into the groups `ids` (by row).
    fn merge_restored(
        &mut self,
        table: &KeyedTable,
        keys: usize,
        widths: &[usize],
        batch: &RecordBatch,
        ids: &[usize],
    ) -> Result<()> {
        let fields = table.fields();
        let counters = table.read(batch, &fields[keys..keys + 2])?;
        let states = table.read(batch, &fields[keys + 2..])?;
        let int = |column: &ArrayRef| {
            column
                .as_primitive_opt::<Int64Type>()
                .cloned()
                .ok_or_else(|| Error::Graph("restored state: a counter column is not Int64".into()))
        };
        let (counts, accesses) = (int(&counters[0])?, int(&counters[1])?);
        for (row, &id) in ids.iter().enumerate() {
            self.rows[id] += counts.value(row);
            self.last_access_ms[id] = self.last_access_ms[id].max(accesses.value(row));
        }
        let mut column = 0;
        for (accumulator, width) in self.accumulators.iter_mut().zip(widths) {
            accumulator.merge(&states[column..column + width], ids)?;
            column += width;
        }
        Ok(())
    }

    /// Applies a batch: its key columns, each row's change and each aggregate's arguments. Returns
    /// the groups it touched (in the order the batch first named them) with each aggregate's values
    /// before and after it.
    fn apply(
        &mut self,
        key_columns: &[ArrayRef],
        kinds: &[Change],
        arguments: &[Arguments],
        now: i64,
    ) -> Result<(Vec<Touched>, Vec<ArrayRef>, Vec<ArrayRef>)> {
        let rows = self.keys.encode(key_columns)?;
        let before = self.keys.len();
        self.batches = self.batches.wrapping_add(1);
        if self.batches == 0 {
            self.touched_by.fill(0);
            self.batches = 1;
        }
        let mut touched: Vec<(usize, u32)> = Vec::new();
        // Rows that add, then rows that take back (a key the state does not hold has nothing to
        // take back), as (row, group id).
        let mut added: (Vec<u32>, Vec<usize>) = (Vec::new(), Vec::new());
        let mut retracted: (Vec<u32>, Vec<usize>) = (Vec::new(), Vec::new());
        for retracting in [false, true] {
            for (row, _) in kinds.iter().enumerate().filter(|(_, k)| k.is_retraction() == retracting) {
                let id = if retracting {
                    let Some(id) = self.keys.find(&rows, row) else { continue };
                    id
                } else {
                    let (id, _) = self.keys.intern(&rows, row)?;
                    if id == self.touched_by.len() {
                        self.touched_by.push(0);
                    }
                    id
                };
                if self.touched_by[id] != self.batches {
                    self.touched_by[id] = self.batches;
                    touched.push((id, row as u32));
                }
                let into = if retracting { &mut retracted } else { &mut added };
                into.0.push(row as u32);
                into.1.push(id);
            }
        }
        self.resize();
        let existed: Vec<usize> = touched.iter().map(|t| t.0).filter(|&id| id < before).collect();
        let old = self.accumulators.iter_mut().map(|a| a.evaluate(&existed)).collect::<Result<Vec<_>>>()?;
        group_accumulators::feed(&mut self.accumulators, arguments, &added.0, &added.1, false)?;
        group_accumulators::feed(&mut self.accumulators, arguments, &retracted.0, &retracted.1, true)?;
        for (ids, by) in [(&added.1, 1), (&retracted.1, -1)] {
            for &id in ids {
                self.rows[id] += by;
            }
        }
        let mut groups = Vec::with_capacity(touched.len());
        let (mut olds, mut news) = (0, 0);
        for (id, key_row) in touched {
            self.last_access_ms[id] = now;
            if let Some(changes) = &mut self.changes {
                changes.mark(id);
            }
            let old = (id < before).then(|| {
                olds += 1;
                olds - 1
            });
            let new = (self.rows[id] > 0).then(|| {
                news += 1;
                news - 1
            });
            if new.is_none() {
                self.remove(id);
            }
            groups.push(Touched { id, key_row, old, new });
        }
        let alive: Vec<usize> = groups.iter().filter(|g| g.new.is_some()).map(|g| g.id).collect();
        let new = self.accumulators.iter_mut().map(|a| a.evaluate(&alive)).collect::<Result<Vec<_>>>()?;
        self.compact_if_due()?;
        Ok((groups, old, new))
    }
}

/// What a restore reads the groups table with.
struct Restoring {
    table: KeyedTable,
    /// Each accumulator's state columns.
    widths: Vec<usize>,
    /// Group columns.
    keys: usize,
}

pub struct UpdatingAggregate {
    /// The group columns' names in the input (none for a global aggregate).
    group_columns: Vec<String>,
    aggregates: Vec<AggregateCall>,
    /// Group columns, aggregates, then the change column.
    output: SchemaRef,
    ttl: StateTtl,
    /// The input is a changelog: use accumulators that can take rows back.
    retracting: bool,
    /// Made on first use (making accumulators can fail).
    groups: Option<Groups>,
    /// Checkpoints are incremental: the groups keep a [`ChangeRecord`].
    incremental: bool,
}

impl Clone for UpdatingAggregate {
    /// A fresh instance with the same plan.
    fn clone(&self) -> Self {
        Self::new(
            self.group_columns.clone(),
            self.aggregates.clone(),
            self.output.clone(),
            self.ttl.ttl(),
            self.retracting,
        )
    }
}

impl UpdatingAggregate {
    pub fn new(
        group_columns: Vec<String>,
        aggregates: Vec<AggregateCall>,
        output: SchemaRef,
        ttl: Option<Duration>,
        retracting: bool,
    ) -> Self {
        Self {
            group_columns,
            aggregates,
            output,
            ttl: StateTtl::new(ttl),
            retracting,
            groups: None,
            incremental: false,
        }
    }

    /// Whether `aggregate` can aggregate a changelog: its retracting accumulator must take
    /// back any row, not only the oldest. DataFusion's sliding accumulators are built for
    /// window frames, which retract in arrival order; those whose state is a sum (count, sum,
    /// avg, variances) are right for any order. Min and max (a queue of candidates there) and
    /// DISTINCT counts (right in any order, but whose state forgets how many rows held a value)
    /// use [`ValueCounts`] instead. So: those functions only.
    pub fn can_retract(aggregate: &AggregateFunctionExpr) -> Result<bool> {
        const ANY_ORDER: &[&str] =
            &["count", "sum", "avg", "mean", "stddev", "stddev_pop", "var", "var_samp", "var_pop", "regr_count"];
        let function = aggregate.fun().name().to_lowercase();
        if value_counts_for(aggregate).is_some() {
            return Ok(true);
        }
        Ok(ANY_ORDER.contains(&function.as_str()) && aggregate.create_sliding_accumulator()?.supports_retract_batch())
    }

    /// The columns the input is partitioned by.
    pub fn partition_columns(group_columns: &[String]) -> Vec<String> {
        if group_columns.is_empty() { vec![ALL_IN_ONE.to_string()] } else { group_columns.to_vec() }
    }

    /// The types the groups are keyed by: the group columns' (one constant for a global
    /// aggregate).
    fn key_types(&self) -> Vec<DataType> {
        match self.group_columns.len() {
            0 => vec![DataType::Int64],
            keys => self.output.fields()[..keys].iter().map(|f| f.data_type().clone()).collect(),
        }
    }

    fn groups(&mut self) -> Result<&mut Groups> {
        if self.groups.is_none() {
            let retracting = self.retracting;
            let accumulators = group_accumulators(&self.aggregates, retracting, |call| {
                let function = call.function.clone();
                move || per_group_accumulator(&function, retracting)
            })?;
            self.groups = Some(Groups {
                keys: GroupKeys::new(&self.key_types())?,
                accumulators,
                rows: Vec::new(),
                last_access_ms: Vec::new(),
                live: Vec::new(),
                removed: 0,
                touched_by: Vec::new(),
                batches: 0,
                changes: self.incremental.then(ChangeRecord::default),
            });
        }
        self.groups.as_mut().ok_or_else(|| Error::Graph("the aggregate's groups are missing".into()))
    }

    /// The key columns of `rows` rows of `batch` (or of a restored group table), as the groups
    /// are keyed: the group columns, or one constant for a global aggregate.
    fn key_columns(&self, columns: Option<Vec<ArrayRef>>, rows: usize) -> Result<Vec<ArrayRef>> {
        let Some(columns) = columns else { return Ok(vec![Arc::new(Int64Array::from(vec![0; rows]))]) };
        columns.iter().zip(self.key_types()).map(|(column, data_type)| cast_to(column.clone(), &data_type)).collect()
    }

    fn batch_keys(&self, batch: &RecordBatch) -> Result<Vec<ArrayRef>> {
        if self.group_columns.is_empty() {
            return self.key_columns(None, batch.num_rows());
        }
        let columns = self
            .group_columns
            .iter()
            .map(|c| {
                batch.column_by_name(c).cloned().ok_or_else(|| Error::Graph(format!("group column '{c}' is missing")))
            })
            .collect::<Result<_>>()?;
        self.key_columns(Some(columns), batch.num_rows())
    }

    /// The group columns of a restored batch, as the keys are typed.
    fn restored_keys(&self, restoring: &Restoring, batch: &RecordBatch) -> Result<Vec<ArrayRef>> {
        let Restoring { table, keys, .. } = restoring;
        self.key_columns(Some(table.read(batch, &table.fields()[..*keys])?), batch.num_rows())
    }

    /// Appends a restored base batch's groups (keys each once, not looked up) and merges
    /// their state; the first one reserves room for `unreserved` groups.
    fn restore_base(
        &mut self,
        restoring: &Restoring,
        batch: &RecordBatch,
        unreserved: &mut Option<usize>,
    ) -> Result<()> {
        let Restoring { table, widths, keys } = restoring;
        let key_columns = self.restored_keys(restoring, batch)?;
        let groups = self.groups()?;
        if batch.num_rows() == 0 {
            return Ok(());
        }
        if let Some(most) = unreserved.take() {
            let rows = groups.keys.encode(&key_columns)?;
            groups.keys.reserve(most, rows.size() / rows.num_rows());
            groups.reserve(most);
        }
        let ids = groups.keys.append_unindexed(&key_columns)?;
        groups.resize();
        groups.merge_restored(table, *keys, widths, batch, &ids.collect::<Vec<_>>())
    }

    /// Removes the groups of a restored batch of removed keys.
    fn restore_deletes(&mut self, restoring: &Restoring, batch: &RecordBatch) -> Result<()> {
        let key_columns = self.restored_keys(restoring, batch)?;
        let groups = self.groups()?;
        let rows = groups.keys.encode(&key_columns)?;
        for row in 0..rows.num_rows() {
            if let Some(id) = groups.keys.find(&rows, row) {
                groups.forget(id);
            }
        }
        Ok(())
    }

    /// Applies restored batches of changed groups, in order: each row replaces what the state
    /// holds of its group, or adds it.
    fn restore_upserts(&mut self, restoring: &Restoring, batches: Vec<RecordBatch>) -> Result<()> {
        let Restoring { table, widths, keys } = restoring;
        let mut rows = Vec::with_capacity(batches.len());
        for batch in &batches {
            let key_columns = self.restored_keys(restoring, batch)?;
            rows.push(self.groups()?.keys.encode(&key_columns)?);
        }
        let groups = self.groups()?;
        let ids = groups.keys.intern_all(&rows)?;
        groups.resize();
        for (batch, ids) in batches.iter().zip(ids) {
            let mut plain = Vec::with_capacity(ids.len());
            for (id, new) in ids {
                if !new {
                    groups.clear(id);
                }
                plain.push(id);
            }
            groups.merge_restored(table, *keys, widths, batch, &plain)?;
        }
        Ok(())
    }

    /// The groups table: the group columns, the row count and last access, then each
    /// accumulator's state columns; with the number of state columns of each accumulator.
    fn groups_table(&mut self) -> Result<(KeyedTable, Vec<usize>)> {
        let mut fields = Vec::new();
        for (i, name) in self.group_columns.iter().enumerate() {
            fields.push(Field::new(name, self.output.field(i).data_type().clone(), true));
        }
        fields.push(Field::new(ROWS, DataType::Int64, false));
        fields.push(Field::new(LAST_ACCESS, DataType::Int64, false));
        let states: Vec<Vec<DataType>> = self.groups()?.accumulators.iter().map(|a| a.state_types()).collect();
        let widths = accumulators::push_state_fields(&mut fields, states);
        Ok((KeyedTable::new(fields), widths))
    }

    /// The changelog of one batch's `touched` groups, their values `old` before and `new`
    /// after it, keys from `key_columns`.
    fn changelog(
        &self,
        touched: &[Touched],
        key_columns: &[ArrayRef],
        old: &[ArrayRef],
        new: &[ArrayRef],
    ) -> Result<Option<RecordBatch>> {
        // Groups that were and are: emitted only if some value changed.
        let both: Vec<&Touched> = touched.iter().filter(|t| t.old.is_some() && t.new.is_some()).collect();
        let positions = |pick: fn(&Touched) -> Option<usize>| {
            UInt32Array::from_iter_values(both.iter().filter_map(|t| pick(t)).map(|p| p as u32))
        };
        let changed = changed(old, new, &positions(|t| t.old), &positions(|t| t.new))?;
        let mut kinds = Vec::new();
        let mut key_rows = Vec::new();
        let mut values: Vec<(usize, usize)> = Vec::new();
        let mut both_seen = 0;
        for group in touched {
            let changes: &[(Change, usize, Option<usize>)] = match (group.old, group.new) {
                (None, None) => &[],
                (None, Some(new)) => &[(Change::Insert, 1, Some(new))],
                (Some(old), None) => &[(Change::Delete, 0, Some(old))],
                (Some(old), Some(new)) => {
                    both_seen += 1;
                    if !changed.value(both_seen - 1) {
                        continue;
                    }
                    &[(Change::UpdateBefore, 0, Some(old)), (Change::UpdateAfter, 1, Some(new))]
                }
            };
            for &(kind, source, position) in changes {
                kinds.push(kind);
                key_rows.push(group.key_row);
                values.push((source, position.unwrap_or(0)));
            }
        }
        if kinds.is_empty() {
            return Ok(None);
        }
        let fields = self.output.fields();
        let key_rows = UInt32Array::from(key_rows);
        let mut columns = Vec::with_capacity(fields.len());
        for key_column in &key_columns[..self.group_columns.len()] {
            columns.push(take(key_column, &key_rows, None)?);
        }
        for (old, new) in old.iter().zip(new) {
            columns.push(interleave(&[old.as_ref(), new.as_ref()], &values)?);
        }
        let width = fields.len() - 1;
        let mut columns: Vec<ArrayRef> = columns
            .into_iter()
            .zip(&fields[..width])
            .map(|(column, field)| cast_to(column, field.data_type()))
            .collect::<Result<_>>()?;
        columns.push(change_array(&kinds));
        Ok(Some(RecordBatch::try_new(self.output.clone(), columns)?))
    }
}

/// For each pair of rows (`old_rows[i]` of `old`, `new_rows[i]` of `new`), whether any
/// aggregate's value differs (nulls equal to nulls).
fn changed(old: &[ArrayRef], new: &[ArrayRef], old_rows: &UInt32Array, new_rows: &UInt32Array) -> Result<BooleanArray> {
    let mut any = BooleanArray::from(vec![false; old_rows.len()]);
    if old_rows.is_empty() {
        return Ok(any);
    }
    for (old, new) in old.iter().zip(new) {
        let (old, new) = (take(old, old_rows, None)?, take(new, new_rows, None)?);
        let differs = match distinct(&old, &new) {
            Ok(differs) => differs,
            // Types the comparison kernel does not take (nested ones): value by value.
            Err(_) => (0..old.len())
                .map(|row| Ok(Some(ScalarValue::try_from_array(&old, row)? != ScalarValue::try_from_array(&new, row)?)))
                .collect::<Result<BooleanArray>>()?,
        };
        any = or(&any, &differs)?;
    }
    Ok(any)
}

#[async_trait]
impl Operator for UpdatingAggregate {
    /// Working state: a bounded run's final checkpoint leaves it out.
    fn state_needed_after_finish(&self) -> bool {
        false
    }

    /// A keyed aggregate's groups: a large state, each key one row.
    fn replayed_tables(&self) -> Vec<&'static str> {
        match self.group_columns.is_empty() {
            true => Vec::new(),
            false => vec![GROUPS],
        }
    }

    async fn open(&mut self, info: &crate::SubtaskInfo, mut restored: RestoredState) -> Result<()> {
        self.incremental = info.incremental;
        let (table, widths) = self.groups_table()?;
        let keys = self.group_columns.len();
        let batches = restored.table(GROUPS);
        if keys == 0 {
            // A global aggregate: one row from each old subtask, all merged into its one group.
            for batch in batches {
                let key_columns = self.key_columns(None, batch.num_rows())?;
                let groups = self.groups()?;
                let rows = groups.keys.encode(&key_columns)?;
                let ids = (0..batch.num_rows())
                    .map(|row| Ok(groups.keys.intern(&rows, row)?.0))
                    .collect::<Result<Vec<usize>>>()?;
                groups.resize();
                groups.merge_restored(&table, 0, &widths, batch, &ids)?;
            }
            return Ok(());
        }
        // Keyed: the bases first, each batch applied and let go as it is read. Each key is in
        // one base once (the old subtasks' key ranges do not overlap), so their keys are
        // appended, the groups' vectors sized once, and the keys indexed in one pass. Then each
        // chain's changes in order, each row overwriting its group (or adding one) and each
        // removed key removed, as the checkpoints made them.
        let chains = restored.chains.remove(GROUPS).unwrap_or_default();
        let merged = restored.tables.remove(GROUPS).unwrap_or_default();
        let restoring = Restoring { table, widths, keys };
        let files = chains.iter().flat_map(|chain| chain.files());
        let most = files.filter(|file| file.role != FileRole::Deletes).map(|file| file.rows as usize).sum::<usize>()
            + merged.iter().map(RecordBatch::num_rows).sum::<usize>();
        let mut unreserved = Some(most);
        let first = self.groups()?.keys.len();
        for batch in merged {
            self.restore_base(&restoring, &batch, &mut unreserved)?;
        }
        for chain in &chains {
            for file in chain.files().iter().take_while(|file| file.role.is_full()) {
                for batch in chain.read(file).await? {
                    self.restore_base(&restoring, &batch?, &mut unreserved)?;
                }
            }
        }
        let groups = self.groups()?;
        groups.keys.index(first..groups.keys.len())?;
        // Changed groups are applied many at a time (see `GroupKeys::intern_all`), up to a
        // file that removes keys: a later row of a removed key makes a new group.
        let mut upserts = Vec::new();
        for chain in &chains {
            for file in chain.files().iter().skip_while(|file| file.role.is_full()) {
                if file.role.is_full() {
                    return Err(Error::Graph("restored state: a chain holds a base after its changes".into()));
                }
                if file.role == FileRole::Deletes && file.rows > 0 {
                    self.restore_upserts(&restoring, std::mem::take(&mut upserts))?;
                }
                for batch in chain.read(file).await? {
                    let batch = batch?;
                    if file.role == FileRole::Deletes {
                        self.restore_deletes(&restoring, &batch)?;
                        continue;
                    }
                    upserts.push(batch);
                    if upserts.iter().map(RecordBatch::num_rows).sum::<usize>() >= UPSERTS_AT_ONCE {
                        self.restore_upserts(&restoring, std::mem::take(&mut upserts))?;
                    }
                }
            }
        }
        self.restore_upserts(&restoring, upserts)?;
        Ok(())
    }

    async fn process_batch(&mut self, _input: usize, batch: RecordBatch, out: &mut Collector) -> Result<()> {
        let now = now_ms();
        if let Some(oldest) = self.ttl.sweep_due(now) {
            self.groups()?.expire(oldest)?;
        }
        let kinds = changes(&batch)?;
        let key_columns = self.batch_keys(&batch)?;
        let arguments = accumulators::arguments(&self.aggregates, &batch)?;
        let (touched, old, new) = self.groups()?.apply(&key_columns, &kinds, &arguments, now)?;
        if let Some(changes) = self.changelog(&touched, &key_columns, &old, &new)? {
            out.emit(changes);
        }
        Ok(())
    }

    async fn process_watermark(&mut self, _watermark: i64, _out: &mut Collector) -> Result<()> {
        // Updating results carry no event time on: later rows may change any group.
        Ok(())
    }

    async fn snapshot(&mut self, _checkpoint_id: u64) -> Result<Vec<StateTable>> {
        let groups = self.groups()?;
        let live = groups.live_ids();
        if let Some(changes) = &mut groups.changes {
            changes.take_changed();
            (changes.removed, changes.removed_keys) = Default::default();
        }
        let (schema, batch) = self.group_rows(&live)?;
        Ok(vec![StateTable { name: GROUPS.into(), schema, batches: vec![batch], delta: None }])
    }

    /// The groups changed since the last snapshot (their rows) and removed (their keys).
    async fn snapshot_changes(&mut self, _checkpoint_id: u64) -> Result<Option<Vec<StateTable>>> {
        let groups = self.groups()?;
        let Some(changes) = &mut groups.changes else { return Ok(None) };
        let mut changed = changes.take_changed();
        changed.retain(|&id| groups.live[id]);
        changed.sort_unstable();
        let removed = std::mem::take(&mut changes.removed);
        let mut removed_keys = std::mem::take(&mut changes.removed_keys);
        removed_keys.push(groups.keys.columns(&removed)?);
        let (schema, batch) = self.group_rows(&changed)?;
        let keys = self.group_columns.len();
        let key_columns = (0..removed_keys[0].len())
            .map(|i| {
                let parts: Vec<&dyn Array> = removed_keys.iter().map(|columns| columns[i].as_ref()).collect();
                Ok(concat(&parts)?)
            })
            .collect::<Result<Vec<ArrayRef>>>()?;
        let keyed = self.keyed(&schema, key_columns)?;
        let hashes = key_hashes(&keyed, &Self::partition_columns(&self.group_columns))?;
        let mut deleted_fields = vec![schema.field(0).clone()];
        let mut deleted_columns: Vec<ArrayRef> = vec![Arc::new(hashes)];
        if keys > 0 {
            deleted_fields.extend(keyed.schema().fields().iter().map(|f| f.as_ref().clone()));
            deleted_columns.extend(keyed.columns().iter().cloned());
        }
        let deleted = RecordBatch::try_new(Arc::new(Schema::new(deleted_fields)), deleted_columns)?;
        let key = match keys {
            0 => vec![KEY_HASH_COLUMN.to_string()],
            _ => schema.fields()[1..=keys].iter().map(|f| f.name().clone()).collect(),
        };
        let delta = Some(Delta { key, deleted });
        Ok(Some(vec![StateTable { name: GROUPS.into(), schema, batches: vec![batch], delta }]))
    }
}

impl UpdatingAggregate {
    /// The snapshot rows of groups `ids`: key hash, keys, row count, last access, states.
    fn group_rows(&mut self, ids: &[usize]) -> Result<(SchemaRef, RecordBatch)> {
        let (table, _) = self.groups_table()?;
        let schema = table.schema().clone();
        let keys = self.group_columns.len();
        let groups = self.groups()?;
        let key_columns = groups.keys.columns(ids)?;
        let mut columns: Vec<ArrayRef> = Vec::new();
        if keys > 0 {
            columns.extend(key_columns.iter().cloned());
        }
        columns.push(Arc::new(Int64Array::from_iter_values(ids.iter().map(|&id| groups.rows[id]))));
        columns.push(Arc::new(Int64Array::from_iter_values(ids.iter().map(|&id| groups.last_access_ms[id]))));
        for accumulator in &mut groups.accumulators {
            columns.extend(accumulator.state(ids)?);
        }
        let columns: Vec<ArrayRef> = columns
            .into_iter()
            .zip(&schema.fields()[1..])
            .map(|(column, field)| cast_to(column, field.data_type()))
            .collect::<Result<_>>()?;
        let keyed = self.keyed(&schema, key_columns)?;
        let mut all: Vec<ArrayRef> = vec![Arc::new(key_hashes(&keyed, &Self::partition_columns(&self.group_columns))?)];
        all.extend(columns);
        Ok((schema.clone(), RecordBatch::try_new(schema, all)?))
    }

    /// Groups' interned keys (`GroupKeys::columns`) as the batch their key hash is taken over:
    /// under the group columns' names in the groups table `schema`, or as a global
    /// aggregate's one constant.
    fn keyed(&self, schema: &SchemaRef, key_columns: Vec<ArrayRef>) -> Result<RecordBatch> {
        let fields = match self.group_columns.len() {
            0 => vec![Field::new(ALL_IN_ONE, DataType::Int64, true)],
            keys => schema.fields()[1..=keys].iter().map(|f| f.as_ref().clone()).collect(),
        };
        Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), key_columns)?)
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::StringArray;
    use datafusion::functions_aggregate::sum::sum_udaf;
    use datafusion::physical_expr::aggregate::AggregateExprBuilder;
    use datafusion::physical_expr::expressions::col;

    use super::*;
    use crate::SubtaskInfo;
    use crate::changelog::{changelog_schema, changes};

    fn input(rows: &[(&str, i64)], kinds: Option<&[Change]>) -> RecordBatch {
        let mut fields = vec![Field::new("k", DataType::Utf8, false), Field::new("v", DataType::Int64, false)];
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
        ];
        if let Some(kinds) = kinds {
            fields.push(Field::new(crate::changelog::CHANGE_COLUMN, DataType::Utf8, false));
            columns.push(change_array(kinds));
        }
        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
    }

    fn sum_by_key(ttl: Option<Duration>) -> UpdatingAggregate {
        let schema = input(&[], None).schema();
        let sum = AggregateExprBuilder::new(sum_udaf(), vec![col("v", &schema).unwrap()])
            .schema(schema.clone())
            .alias("total")
            .build()
            .unwrap();
        let output =
            Schema::new(vec![Field::new("k", DataType::Utf8, true), Field::new("total", DataType::Int64, true)]);
        let sum = AggregateCall { function: Arc::new(sum), filter: None };
        UpdatingAggregate::new(vec!["k".into()], vec![sum], changelog_schema(&output), ttl, true)
    }

    /// The changes as "kind key value" lines.
    fn lines(out: &Collector) -> Vec<String> {
        let mut lines = Vec::new();
        for batch in &out.batches {
            let keys = batch.column(0).as_any().downcast_ref::<StringArray>().unwrap();
            let totals = batch.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
            for (row, kind) in changes(batch).unwrap().into_iter().enumerate() {
                lines.push(format!("{} {} {}", kind.code(), keys.value(row), totals.value(row)));
            }
        }
        lines
    }

    async fn feed(aggregate: &mut UpdatingAggregate, batch: RecordBatch) -> Vec<String> {
        let mut out = Collector::default();
        aggregate.process_batch(0, batch, &mut out).await.unwrap();
        lines(&out)
    }

    #[tokio::test]
    async fn groups_are_inserted_updated_and_deleted_as_a_changelog() {
        let mut aggregate = sum_by_key(None);
        assert_eq!(feed(&mut aggregate, input(&[("a", 1), ("b", 2), ("a", 3)], None)).await, ["+I a 4", "+I b 2"]);
        assert_eq!(feed(&mut aggregate, input(&[("a", 5)], None)).await, ["-U a 4", "+U a 9"]);
        // A changelog input: taking back b's only row deletes the group.
        let retract = input(&[("b", 2), ("a", 1)], Some(&[Change::Delete, Change::UpdateBefore]));
        assert_eq!(feed(&mut aggregate, retract).await, ["-D b 2", "-U a 9", "+U a 8"]);
        // An unchanged value emits nothing.
        let same = input(&[("a", 0)], None);
        assert_eq!(feed(&mut aggregate, same).await, Vec::<String>::new());
    }

    #[tokio::test]
    async fn a_restored_aggregate_continues_from_the_values_it_had_emitted() {
        let mut aggregate = sum_by_key(None);
        feed(&mut aggregate, input(&[("a", 1), ("b", 2)], None)).await;
        let tables = aggregate.snapshot(1).await.unwrap();
        let mut restored = sum_by_key(None);
        let state = RestoredState {
            checkpoint_id: Some(1),
            tables: tables.into_iter().map(|t| (t.name, t.batches)).collect(),
            ..Default::default()
        };
        let info = SubtaskInfo::new("aggregate", 0, 1);
        restored.open(&info, state).await.unwrap();
        assert_eq!(feed(&mut restored, input(&[("a", 10)], None)).await, ["-U a 1", "+U a 11"]);
    }

    #[tokio::test]
    async fn removed_groups_ids_are_reclaimed_and_the_live_ones_kept() {
        let mut aggregate = sum_by_key(None);
        feed(&mut aggregate, input(&[("keep", 1)], None)).await;
        // Three rounds of 1000 groups inserted, then emptied by a changelog's deletes.
        for round in 0..3 {
            let keys: Vec<String> = (0..1000).map(|i| format!("k{round}-{i}")).collect();
            let rows: Vec<(&str, i64)> = keys.iter().map(|k| (k.as_str(), 1)).collect();
            assert_eq!(feed(&mut aggregate, input(&rows, None)).await.len(), 1000);
            let deletes = vec![Change::Delete; rows.len()];
            let out = feed(&mut aggregate, input(&rows, Some(&deletes))).await;
            assert!(out.len() == 1000 && out.iter().all(|line| line.starts_with("-D")), "{out:?}");
        }
        // The 2000 ids removed by the second round were reclaimed; the last round's 1000 not yet.
        assert_eq!(aggregate.groups.as_ref().map(|g| g.keys.len()), Some(1001));
        assert_eq!(feed(&mut aggregate, input(&[("keep", 2)], None)).await, ["-U keep 1", "+U keep 3"]);
        let tables = aggregate.snapshot(1).await.unwrap();
        assert_eq!(tables[0].batches.iter().map(RecordBatch::num_rows).sum::<usize>(), 1, "only 'keep' is left");
        let mut restored = sum_by_key(None);
        let state = RestoredState {
            checkpoint_id: Some(1),
            tables: tables.into_iter().map(|t| (t.name, t.batches)).collect(),
            ..Default::default()
        };
        restored.open(&SubtaskInfo::new("aggregate", 0, 1), state).await.unwrap();
        let after = input(&[("keep", 1), ("k0-5", 7)], None);
        assert_eq!(feed(&mut restored, after).await, ["-U keep 3", "+U keep 4", "+I k0-5 7"]);
    }

    /// Incremental checkpoints: a full snapshot, then two snapshots of changes (updates,
    /// deletions by retraction, enough of them that the removed ids are reclaimed in between,
    /// a deleted key put back), merged as a restore merges them, hold the same rows as a full
    /// snapshot taken at the end; and the changes are small next to the state.
    #[tokio::test]
    async fn a_base_and_its_changes_restore_what_a_full_snapshot_holds() {
        use weir_state::FileRole;
        use weir_state::chain::{Link, merge};

        use crate::state_table::row_lines;

        let mut aggregate = sum_by_key(None);
        let info = SubtaskInfo { incremental: true, ..SubtaskInfo::new("aggregate", 0, 1) };
        aggregate.open(&info, RestoredState::default()).await.unwrap();
        let keys: Vec<String> = (0..5000).map(|i| format!("k{i}")).collect();
        let rows = |range: std::ops::Range<usize>, value: i64| -> Vec<(&str, i64)> {
            keys[range].iter().map(|k| (k.as_str(), value)).collect()
        };
        feed(&mut aggregate, input(&rows(0..5000, 1), None)).await;
        let base = aggregate.snapshot(1).await.unwrap().remove(0);
        let mut chain = vec![Link { role: FileRole::Full, batches: base.batches }];
        let key = vec!["k".to_string()];
        let changes = |tables: Option<Vec<StateTable>>, chain: &mut Vec<Link>| {
            let table = tables.unwrap().remove(0);
            let delta = table.delta.unwrap();
            assert_eq!(delta.key, ["k"]);
            let upserts: usize = table.batches.iter().map(RecordBatch::num_rows).sum();
            chain.push(Link { role: FileRole::Deletes, batches: vec![delta.deleted.clone()] });
            chain.push(Link { role: FileRole::Upserts, batches: table.batches });
            (upserts, delta.deleted.num_rows())
        };
        // 2: 100 keys updated, 3000 deleted (their ids reclaimed), 10 new.
        feed(&mut aggregate, input(&rows(0..100, 5), None)).await;
        let deletes = vec![Change::Delete; 3000];
        feed(&mut aggregate, input(&rows(2000..5000, 1), Some(&deletes))).await;
        feed(&mut aggregate, input(&[("new-1", 1), ("new-2", 2)], None)).await;
        assert!(aggregate.groups.as_ref().unwrap().keys.len() < 5000, "removed ids were reclaimed");
        let (upserts, deleted) = changes(aggregate.snapshot_changes(2).await.unwrap(), &mut chain);
        assert_eq!((upserts, deleted), (102, 3000));
        // 3: a deleted key back, one more deleted, one updated; a key deleted and put back.
        feed(&mut aggregate, input(&[("k4000", 9), ("k50", 1)], None)).await;
        feed(&mut aggregate, input(&[("k150", 1), ("k160", 1)], Some(&[Change::Delete, Change::Delete]))).await;
        feed(&mut aggregate, input(&[("k160", 3)], None)).await;
        let (upserts, deleted) = changes(aggregate.snapshot_changes(3).await.unwrap(), &mut chain);
        assert_eq!((upserts, deleted), (3, 2), "k4000, k50, k160 changed; k150 and k160 removed");

        let merged = merge(chain.clone(), &key).unwrap();
        let full = aggregate.snapshot(4).await.unwrap().remove(0);
        assert_eq!(row_lines(&merged), row_lines(&full.batches));
        assert_eq!(row_lines(&merged).len(), 2000 - 1 + 2 + 1);
        // A restore replays the chain instead (base, then each change overwriting its groups):
        // the same groups, and from there the same output.
        assert_eq!(aggregate.replayed_tables(), [GROUPS]);
        let dir = tempfile::tempdir().unwrap();
        let store = weir_state::StateStore::local(dir.path()).unwrap();
        let mut files = Vec::new();
        for (checkpoint, link) in chain.into_iter().enumerate() {
            let schema = link.batches[0].schema();
            let target = weir_state::FileTarget {
                checkpoint_id: checkpoint as u64 + 1,
                operator: "aggregate",
                subtask: 0,
                table: GROUPS,
                role: link.role,
                key: &key,
            };
            files.push(store.write_change(target, schema, link.batches).await.unwrap());
        }
        let chain = crate::RestoredChain::new(store, files, 0, 1);
        let mut replayed = sum_by_key(None);
        let state = RestoredState { chains: [(GROUPS.to_string(), vec![chain])].into(), ..Default::default() };
        replayed.open(&info, state).await.unwrap();
        assert_eq!(row_lines(&replayed.snapshot(4).await.unwrap().remove(0).batches), row_lines(&full.batches));
        // After a full snapshot, nothing is left to write as a change.
        let (upserts, deleted) = changes(aggregate.snapshot_changes(5).await.unwrap(), &mut Vec::new());
        assert_eq!((upserts, deleted), (0, 0));
        let after = || input(&[("k10", 1), ("k4000", 1), ("k150", 4), ("k3000", 2)], None);
        assert_eq!(feed(&mut replayed, after()).await, feed(&mut aggregate, after()).await);
    }

    #[tokio::test]
    async fn groups_idle_longer_than_the_ttl_are_forgotten() {
        let mut aggregate = sum_by_key(Some(Duration::from_millis(20)));
        assert_eq!(feed(&mut aggregate, input(&[("a", 1)], None)).await, ["+I a 1"]);
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert_eq!(feed(&mut aggregate, input(&[("a", 2)], None)).await, ["+I a 2"], "a starts afresh");
        assert_eq!(feed(&mut aggregate, input(&[("a", 3)], None)).await, ["-U a 2", "+U a 5"]);
    }
}
