//! Top-N without a window: `ROW_NUMBER()`, `RANK()` or `DENSE_RANK()` `OVER (PARTITION BY ...
//! ORDER BY ...)` with a limit on the number (`WHERE rn <= N`) over a stream that never ends,
//! as Flink's Top-N (Nexmark q18's dedup, q19's ten highest bids). With RANK and DENSE_RANK the
//! top holds every row numbered N or less, ties included. The output is a changelog of each partition's top N by rank:
//! when a row enters, leaves or moves, every rank whose row changed is updated (`-U` the old
//! row, `+U` the new one), a rank that appears is inserted (`+I`) and one that vanishes deleted
//! (`-D`). Ties in ORDER BY are broken by the whole row, so the ranks do not depend on arrival
//! order and a restore at another parallelism numbers them alike.
//!
//! An append-only input keeps only the top N rows of a partition (a row below them can never
//! rise); a changelog keeps every row, since taking back a top row brings the next one up.
//! The kept rows stay the columns they came in ([`RowSegments`]: emitted ranks and snapshots
//! gather them, nothing is decoded), each ranked by its ORDER BY key in Arrow's row format; a
//! row is encoded whole only to break a tie or to be found when taken back. The ranks emitted
//! last are not kept: they are the top before the batch, read at a partition's first row in it.
//! A row's identity is its place in the store, so a row taken back and added again in one batch
//! is emitted as `-U`/`+U` of the same values.
//! The snapshot is the kept rows with their number of copies, keyed by the hash of the
//! partition columns; after a restore the emitted ranks are the restored top N, since every
//! batch's changes are emitted before any snapshot. With incremental checkpoints a change is
//! the kept rows of every partition a row reached since the last snapshot (all of them: a later
//! file's rows of a partition replace its earlier ones), and the partitions left empty.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, Int64Array, UInt64Array};
use datafusion::arrow::compute::{SortOptions, cast};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::common::{HashMap, HashSet};
use datafusion::physical_expr::PhysicalExpr;

use crate::changelog::{Change, change_array, changes};
use crate::error::{Error, Result};
use crate::operator::{Collector, Delta, Operator, RestoredState, StateTable};
use crate::operators::numbering::Numbering;
use crate::operators::row_segments::{RowSegments, RowSlot};
use crate::partition::key_hashes;
use crate::state_table::KeyedTable;

const ROWS: &str = "rows";
const COPIES: &str = "__copies";

/// A batch's partition columns (appended to the input) and ORDER BY values, as top-N and
/// deduplication both read them.
pub(crate) fn partition_and_order(
    batch: &RecordBatch,
    partition: &[String],
    order: &[(Arc<dyn PhysicalExpr>, SortOptions)],
) -> Result<(Vec<ArrayRef>, Vec<ArrayRef>)> {
    let partition = partition
        .iter()
        .map(|name| batch.column_by_name(name).cloned().ok_or_else(|| Error::Graph(format!("'{name}' is missing"))))
        .collect::<Result<_>>()?;
    let order = order
        .iter()
        .map(|(e, _)| e.evaluate(batch).and_then(|v| v.into_array(batch.num_rows())))
        .collect::<datafusion::error::Result<_>>()?;
    Ok((partition, order))
}

/// The ORDER BY keys as sort fields over `input` (typed when the plan is made, so a bad
/// expression fails then).
pub(crate) fn order_fields(
    order: &[(Arc<dyn PhysicalExpr>, SortOptions)],
    input: &SchemaRef,
) -> Result<Vec<SortField>> {
    order.iter().map(|(e, options)| Ok(SortField::new_with_options(e.data_type(input)?, *options))).collect()
}

/// Encodes whole rows of `input`, as the kept rows are stored and tie-broken.
pub(crate) fn row_converter(input: &SchemaRef) -> Result<RowConverter> {
    Ok(RowConverter::new(input.fields().iter().map(|f| SortField::new(f.data_type().clone())).collect())?)
}

/// Top-N's state table, which deduplication shares (each restores the other's): every kept
/// input row and its number of copies, keyed by the hash of the partition columns.
pub(crate) struct KeptRows {
    input: SchemaRef,
    table: KeyedTable,
}

impl KeptRows {
    /// The table of rows of `input` (the row columns, then the partition columns).
    pub(crate) fn new(input: &SchemaRef) -> Self {
        let copies = Arc::new(Field::new(COPIES, DataType::Int64, false));
        Self { input: input.clone(), table: KeyedTable::new(input.fields().iter().cloned().chain([copies])) }
    }

    /// The restored rows, as the input's columns, and their copies, batch by batch.
    pub(crate) fn restore(&self, restored: &RestoredState) -> Result<Vec<(RecordBatch, Int64Array)>> {
        let width = self.input.fields().len();
        let fields = self.table.fields();
        restored
            .table(ROWS)
            .iter()
            .map(|batch| {
                let rows = RecordBatch::try_new(self.input.clone(), self.table.read(batch, &fields[..width])?)?;
                let copies = self.table.read(batch, &fields[width..])?;
                let copies = copies[0]
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .cloned()
                    .ok_or_else(|| Error::Graph(format!("top-N state has no Int64 '{COPIES}'")))?;
                Ok((rows, copies))
            })
            .collect()
    }

    /// The snapshot of `rows` (the input's columns, as `columns`) with their `copies`.
    pub(crate) fn snapshot(
        &self,
        columns: Vec<ArrayRef>,
        copies: Int64Array,
        partition: &[String],
    ) -> Result<StateTable> {
        let schema = self.table.schema().clone();
        if copies.is_empty() {
            return Ok(StateTable {
                name: ROWS.into(),
                schema: schema.clone(),
                batches: vec![RecordBatch::new_empty(schema)],
                delta: None,
            });
        }
        let rows = RecordBatch::try_new(self.input.clone(), columns)?;
        let mut all: Vec<ArrayRef> = vec![Arc::new(key_hashes(&rows, partition)?)];
        all.extend(rows.columns().iter().cloned());
        all.push(Arc::new(copies));
        Ok(StateTable {
            name: ROWS.into(),
            schema: schema.clone(),
            batches: vec![RecordBatch::try_new(schema, all)?],
            delta: None,
        })
    }
}

/// The top N rows of each partition, kept up to date as a changelog.
pub struct TopN {
    /// The partition columns (appended to the input, routed by).
    partition: Vec<String>,
    /// ORDER BY, over the input.
    order: Vec<(Arc<dyn PhysicalExpr>, SortOptions)>,
    order_fields: Vec<SortField>,
    numbering: Numbering,
    limit: usize,
    /// The input is a changelog: keep every row, not only the top N.
    retracting: bool,
    /// The input's rows: the row columns, then the partition columns (no change column).
    input: SchemaRef,
    /// The row columns, the row number, then the change column.
    output: SchemaRef,
    converters: Option<Converters>,
    /// By partition key in Arrow's row format (found by a batch's key bytes).
    partitions: HashMap<Vec<u8>, Ranked>,
    /// The kept rows' columns (the input's), each batch's as it came.
    stored: RowSegments,
    /// With incremental checkpoints: the partitions whose kept rows may have changed since
    /// the last snapshot.
    changed: Option<HashSet<Vec<u8>>>,
}

struct Converters {
    partition: RowConverter,
    order: RowConverter,
    rows: RowConverter,
}

/// A kept row's place in its partition: its ORDER BY key in Arrow's row format, then the whole
/// row in row format, which breaks ties. The whole row is there only when it is needed: when
/// another kept row has the same ORDER BY key, and always for a changelog input (a take-back
/// finds its row by it). So no two kept rows with one ORDER BY key differ in having it, and
/// the keys order as (ORDER BY key, whole row) do.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
struct RankKey {
    order: Box<[u8]>,
    row: Option<Box<[u8]>>,
}

/// A kept row: its number in [`TopN::stored`] and its copies.
struct Kept {
    slot: RowSlot,
    copies: usize,
}

#[derive(Default)]
struct Ranked {
    /// Kept rows in rank order.
    rows: BTreeMap<RankKey, Kept>,
    /// The copies kept in all.
    count: usize,
    /// While a batch is applied: its place in the batch's touched partitions, plus one (0: not
    /// touched yet).
    touched: usize,
    /// With incremental checkpoints: in [`TopN::changed`] (so a batch need not look there).
    changed: bool,
}

/// A partition a batch reached: its top before the batch, and whether its kept rows changed.
struct Touched<'a> {
    key: &'a [u8],
    before: Vec<(RowSlot, u64)>,
    modified: bool,
}

impl Ranked {
    /// Walks the rows numbered `limit` or less in rank order, calling `visit` with each row and
    /// its number; returns how many there are and the (position, number) of the last of them.
    fn walk_top(
        &self,
        numbering: Numbering,
        limit: usize,
        mut visit: impl FnMut(&Kept, u64),
    ) -> (usize, Option<(u64, u64)>) {
        let mut count = 0;
        let mut previous: Option<((u64, u64), &[u8])> = None;
        for (key, kept) in &self.rows {
            for _ in 0..kept.copies {
                let tie = previous.is_some_and(|(_, order)| order == &key.order[..]);
                let next = numbering.next(previous.map(|(p, _)| p), tie);
                if next.1 > limit as u64 {
                    return (count, previous.map(|(p, _)| p));
                }
                visit(kept, next.1);
                count += 1;
                previous = Some((next, &key.order));
            }
        }
        (count, previous.map(|(p, _)| p))
    }

    /// The rows numbered `limit` or less, with their numbers, in rank order.
    fn top(&self, numbering: Numbering, limit: usize) -> Vec<(RowSlot, u64)> {
        let mut top = Vec::new();
        self.walk_top(numbering, limit, |kept, number| top.push((kept.slot, number)));
        top
    }

    /// Whether a row ordered by `order` is sure to stay out of the top `limit` of an
    /// append-only input: it orders after every kept row (no tie) and would be numbered past
    /// the limit.
    fn excludes(&self, order: &[u8], numbering: Numbering, limit: usize) -> bool {
        let Some((last, _)) = self.rows.last_key_value() else { return false };
        if order <= &last.order[..] {
            return false;
        }
        if numbering == Numbering::RowNumber {
            // Every kept row has a number of its own: the next one would be `count + 1`.
            return self.count >= limit;
        }
        let (_, after) = self.walk_top(numbering, limit, |_, _| {});
        numbering.next(after, false).1 > limit as u64
    }

    /// Whether a kept row has the ORDER BY key of `key` (which has no whole row).
    fn ties(&self, key: &RankKey) -> bool {
        self.rows.range(key..).next().is_some_and(|(other, _)| other.order == key.order)
    }

    /// Gives the kept row with the ORDER BY key of `key` (which has no whole row), if it is the
    /// only one and has no whole row yet, its whole row (encoded from `stored`), so that a row
    /// tying with it can be ranked.
    fn whole_row_for_tie(&mut self, key: &RankKey, stored: &RowSegments, rows: &RowConverter) -> Result<()> {
        let Some(kept) = self.rows.remove(key) else { return Ok(()) };
        let encoded = rows.convert_columns(&stored.gather(&[kept.slot], 0..stored.width())?)?;
        self.rows.insert(RankKey { order: key.order.clone(), row: Some(encoded.row(0).as_ref().into()) }, kept);
        Ok(())
    }

    /// Takes back up to `copies` copies of the row `key`, if it is kept; returns whether any
    /// was.
    fn take_back(&mut self, key: &RankKey, copies: usize, stored: &mut RowSegments) -> bool {
        let Some(kept) = self.rows.get_mut(key) else { return false };
        let taken = kept.copies.min(copies);
        kept.copies -= taken;
        self.count -= taken;
        if kept.copies == 0 {
            self.rows.remove(key);
            stored.release();
        }
        true
    }

    /// Drops the rows below the top `limit` of an append-only input, which can never rise.
    fn trim(&mut self, numbering: Numbering, limit: usize, stored: &mut RowSegments) {
        let keep = match numbering {
            Numbering::RowNumber => limit,
            _ => self.walk_top(numbering, limit, |_, _| {}).0,
        };
        while self.count > keep {
            let Some(mut last) = self.rows.last_entry() else { break };
            let excess = (self.count - keep).min(last.get().copies);
            last.get_mut().copies -= excess;
            self.count -= excess;
            if last.get().copies == 0 {
                last.remove();
                stored.release();
            }
        }
    }
}

impl Clone for TopN {
    /// A fresh instance with the same plan.
    fn clone(&self) -> Self {
        Self {
            partition: self.partition.clone(),
            order: self.order.clone(),
            order_fields: self.order_fields.clone(),
            numbering: self.numbering,
            limit: self.limit,
            retracting: self.retracting,
            input: self.input.clone(),
            output: self.output.clone(),
            converters: None,
            partitions: HashMap::default(),
            stored: stored_rows(&self.input),
            changed: None,
        }
    }
}

/// An empty store of rows of `input`.
fn stored_rows(input: &SchemaRef) -> RowSegments {
    RowSegments::new(input.fields().iter().map(|f| f.data_type().clone()).collect())
}

impl TopN {
    pub fn new(
        partition: Vec<String>,
        order: Vec<(Arc<dyn PhysicalExpr>, SortOptions)>,
        numbering: Numbering,
        limit: usize,
        retracting: bool,
        input: SchemaRef,
        output: SchemaRef,
    ) -> Result<Self> {
        let order_fields = order_fields(&order, &input)?;
        Ok(Self {
            partition,
            order,
            order_fields,
            numbering,
            limit,
            retracting,
            stored: stored_rows(&input),
            input,
            output,
            converters: None,
            partitions: HashMap::default(),
            changed: None,
        })
    }

    fn converters(&mut self) -> Result<&Converters> {
        if self.converters.is_none() {
            let types = |names: &[String]| -> Result<Vec<SortField>> {
                names.iter().map(|n| Ok(SortField::new(self.input.field_with_name(n)?.data_type().clone()))).collect()
            };
            self.converters = Some(Converters {
                partition: RowConverter::new(types(&self.partition)?)?,
                order: RowConverter::new(self.order_fields.clone())?,
                rows: row_converter(&self.input)?,
            });
        }
        self.converters.as_ref().ok_or_else(|| Error::Graph("top-N row converters missing".into()))
    }

    /// Adds `copies[r]` of each row r of `batch` (negative: takes them back) and returns the
    /// changed ranks of the partitions it touched: (row, rank, change).
    ///
    /// The batch's rows are stored as they came (a row not kept is released at once, or when
    /// it leaves the top); a row is encoded whole only when its ORDER BY key ties with a kept
    /// row's, or when it is taken back.
    fn apply(&mut self, batch: &RecordBatch, copies: &[i64]) -> Result<Vec<(RowSlot, u64, Change)>> {
        let (partition, order) = partition_and_order(batch, &self.partition, &self.order)?;
        self.converters()?;
        let Self { converters: Some(converters), partitions, stored, numbering, limit, retracting, changed, .. } = self
        else {
            return Err(Error::Graph("top-N row converters missing".into()));
        };
        let (numbering, limit, retracting) = (*numbering, *limit, *retracting);
        let keys = converters.partition.convert_columns(&partition)?;
        let orders = converters.order.convert_columns(&order)?;
        let mut whole = retracting.then(|| converters.rows.convert_columns(batch.columns())).transpose()?;
        let first = stored.push(batch.columns(), None)?;
        let mut touched: Vec<Touched<'_>> = Vec::new();
        for (row, &n) in copies.iter().enumerate() {
            let key = keys.row(row).data();
            let ranked = partitions.entry_ref(key).or_default();
            if ranked.touched == 0 {
                touched.push(Touched { key, before: ranked.top(numbering, limit), modified: false });
                ranked.touched = touched.len();
            }
            let order = orders.row(row).data();
            if n > 0 && !retracting && ranked.excludes(order, numbering, limit) {
                stored.release(); // below an append-only top N: it can never rise
                continue;
            }
            let mut rank_key = RankKey { order: order.into(), row: None };
            // Over a changelog every kept row has its whole row already.
            if !retracting && (n < 0 || ranked.ties(&rank_key)) {
                if whole.is_none() {
                    whole = Some(converters.rows.convert_columns(batch.columns())?);
                }
                ranked.whole_row_for_tie(&rank_key, stored, &converters.rows)?;
            }
            if let Some(whole) = &whole {
                rank_key.row = Some(whole.row(row).as_ref().into());
            }
            let modified = if n > 0 {
                match ranked.rows.entry(rank_key) {
                    Entry::Occupied(mut kept) => {
                        kept.get_mut().copies += n as usize;
                        stored.release(); // a copy of a kept row
                    }
                    Entry::Vacant(place) => {
                        place.insert(Kept { slot: first + row as u64, copies: n as usize });
                    }
                }
                ranked.count += n as usize;
                if !retracting {
                    // Rows below the top can never rise: a new row only pushes others down.
                    ranked.trim(numbering, limit, stored);
                }
                true
            } else {
                // A row not kept (below an append-only top N, or never seen) takes nothing back.
                stored.release();
                ranked.take_back(&rank_key, n.unsigned_abs() as usize, stored)
            };
            touched[ranked.touched - 1].modified |= modified;
        }
        let mut emitted = Vec::new();
        for Touched { key, before, modified } in touched {
            let Some(ranked) = partitions.get_mut(key) else { continue };
            ranked.touched = 0;
            let after = ranked.top(numbering, limit);
            for position in 0..after.len().max(before.len()) {
                match (before.get(position), after.get(position)) {
                    (Some(old), Some(new)) if old != new => {
                        emitted.push((old.0, old.1, Change::UpdateBefore));
                        emitted.push((new.0, new.1, Change::UpdateAfter));
                    }
                    (None, Some(new)) => emitted.push((new.0, new.1, Change::Insert)),
                    (Some(old), None) => emitted.push((old.0, old.1, Change::Delete)),
                    _ => {}
                }
            }
            if modified
                && !ranked.changed
                && let Some(changed) = changed.as_mut()
            {
                changed.insert(key.to_vec());
                ranked.changed = true;
            }
            if ranked.rows.is_empty() {
                partitions.remove(key);
            }
        }
        Ok(emitted)
    }

    /// Emits the changed ranks, their rows gathered from the stored ones.
    fn emit(&self, changed: &[(RowSlot, u64, Change)], out: &mut Collector) -> Result<()> {
        if changed.is_empty() {
            return Ok(());
        }
        let width = self.output.fields().len() - 2;
        let slots: Vec<RowSlot> = changed.iter().map(|(slot, _, _)| *slot).collect();
        let mut output = self.stored.gather(&slots, 0..width)?;
        let numbers: ArrayRef = Arc::new(UInt64Array::from_iter_values(changed.iter().map(|(_, n, _)| *n)));
        output.push(cast(&numbers, self.output.field(width).data_type())?);
        output.push(change_array(&changed.iter().map(|(_, _, c)| *c).collect::<Vec<_>>()));
        out.emit(RecordBatch::try_new(self.output.clone(), output)?);
        Ok(())
    }

    /// Gathers the kept rows into new segments once the released ones outnumber them (after
    /// the released ones were emitted).
    fn compact(&mut self) -> Result<()> {
        if self.stored.needs_compaction() {
            let slots =
                self.partitions.values_mut().flat_map(|ranked| ranked.rows.values_mut().map(|kept| &mut kept.slot));
            self.stored.compact(slots)?;
        }
        Ok(())
    }

    /// The snapshot table of the kept rows of every partition, or of the partitions `keys`.
    fn kept_rows(&self, keys: Option<&[Vec<u8>]>) -> Result<StateTable> {
        let partitions: Vec<&Ranked> = match keys {
            Some(keys) => keys.iter().filter_map(|key| self.partitions.get(key)).collect(),
            None => self.partitions.values().collect(),
        };
        let (slots, copies): (Vec<RowSlot>, Vec<i64>) =
            partitions.into_iter().flat_map(|ranked| ranked.rows.values().map(|k| (k.slot, k.copies as i64))).unzip();
        let columns = self.stored.gather(&slots, 0..self.stored.width())?;
        KeptRows::new(&self.input).snapshot(columns, Int64Array::from(copies), &self.partition)
    }
}

#[async_trait]
impl Operator for TopN {
    /// Working state: a bounded run's final checkpoint leaves it out.
    fn state_needed_after_finish(&self) -> bool {
        false
    }

    async fn open(&mut self, info: &crate::SubtaskInfo, restored: RestoredState) -> Result<()> {
        for (rows, copies) in KeptRows::new(&self.input).restore(&restored)? {
            self.apply(&rows, copies.values())?;
        }
        self.compact()?;
        self.changed = info.incremental.then(HashSet::default);
        Ok(())
    }

    async fn process_batch(&mut self, _input: usize, batch: RecordBatch, out: &mut Collector) -> Result<()> {
        let copies: Vec<i64> = changes(&batch)?.iter().map(|c| if c.is_retraction() { -1 } else { 1 }).collect();
        let width = self.input.fields().len();
        let rows = RecordBatch::try_new(self.input.clone(), batch.columns()[..width].to_vec())?;
        let changed = self.apply(&rows, &copies)?;
        self.emit(&changed, out)?;
        self.compact()
    }

    async fn process_watermark(&mut self, _watermark: i64, _out: &mut Collector) -> Result<()> {
        // Updating results carry no event time on.
        Ok(())
    }

    async fn snapshot(&mut self, _checkpoint_id: u64) -> Result<Vec<StateTable>> {
        if let Some(changed) = &mut self.changed {
            changed.clear();
            self.partitions.values_mut().for_each(|ranked| ranked.changed = false);
        }
        Ok(vec![self.kept_rows(None)?])
    }

    /// The kept rows of the partitions changed since the last snapshot, and the changed
    /// partitions left empty as removed.
    async fn snapshot_changes(&mut self, _checkpoint_id: u64) -> Result<Option<Vec<StateTable>>> {
        let Some(changed) = self.changed.replace(HashSet::default()) else { return Ok(None) };
        let (kept, removed): (Vec<Vec<u8>>, Vec<Vec<u8>>) =
            changed.into_iter().partition(|key| self.partitions.contains_key(key));
        let mut table = self.kept_rows(Some(&kept))?;
        for key in &kept {
            if let Some(ranked) = self.partitions.get_mut(key) {
                ranked.changed = false;
            }
        }
        let converter = &self.converters()?.partition;
        let parser = converter.parser();
        let key_columns = converter.convert_rows(removed.iter().map(|key| parser.parse(key)))?;
        let key_fields: Vec<Field> =
            self.partition.iter().map(|name| Ok(self.input.field_with_name(name)?.clone())).collect::<Result<_>>()?;
        let keys = RecordBatch::try_new(Arc::new(Schema::new(key_fields.clone())), key_columns)?;
        let mut fields = vec![table.schema.field(0).clone()];
        fields.extend(key_fields);
        let mut columns: Vec<ArrayRef> = vec![Arc::new(key_hashes(&keys, &self.partition)?)];
        columns.extend(keys.columns().iter().cloned());
        let deleted = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?;
        table.delta = Some(Delta { key: self.partition.clone(), deleted });
        Ok(Some(vec![table]))
    }
}

/// The fixtures deduplication's tests share: rows (partition, id, price) ranked by price.
#[cfg(test)]
pub(crate) mod tests {
    use datafusion::arrow::datatypes::Schema;
    use datafusion::physical_expr::expressions::col;

    use super::*;
    use crate::SubtaskInfo;
    use crate::changelog::CHANGE_COLUMN;

    pub(crate) fn input() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("price", DataType::Int64, false),
            Field::new("__partition_0", DataType::Int64, false),
        ]))
    }

    /// Rows (partition, id, price), as a changelog when `kinds` are given.
    pub(crate) fn batch(rows: &[(i64, i64, i64)], kinds: Option<&[Change]>) -> RecordBatch {
        let mut fields: Vec<Field> = input().fields().iter().map(|f| f.as_ref().clone()).collect();
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.2))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
        ];
        if let Some(kinds) = kinds {
            fields.push(Field::new(CHANGE_COLUMN, DataType::Utf8, false));
            columns.push(change_array(kinds));
        }
        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
    }

    /// The two highest prices per partition.
    fn top_two(retracting: bool) -> TopN {
        top_two_by(Numbering::RowNumber, retracting)
    }

    /// The row columns, the row number and the change column.
    pub(crate) fn output() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("price", DataType::Int64, false),
            Field::new("rn", DataType::UInt64, false),
            Field::new(CHANGE_COLUMN, DataType::Utf8, false),
        ]))
    }

    /// Highest price first.
    pub(crate) fn highest_price() -> Vec<(Arc<dyn PhysicalExpr>, SortOptions)> {
        vec![(col("price", &input()).unwrap(), SortOptions { descending: true, nulls_first: false })]
    }

    fn top_two_by(numbering: Numbering, retracting: bool) -> TopN {
        TopN::new(vec!["__partition_0".into()], highest_price(), numbering, 2, retracting, input(), output()).unwrap()
    }

    /// The changes a ranking operator emits for `batch`, as "kind #number id id price".
    pub(crate) async fn feed(operator: &mut dyn Operator, batch: RecordBatch) -> Vec<String> {
        let mut out = Collector::default();
        operator.process_batch(0, batch, &mut out).await.unwrap();
        let mut lines = Vec::new();
        for batch in &out.batches {
            let int = |c: usize| batch.column(c).as_any().downcast_ref::<Int64Array>().unwrap().clone();
            let rn = batch.column(2).as_any().downcast_ref::<UInt64Array>().unwrap().clone();
            for (row, kind) in changes(batch).unwrap().into_iter().enumerate() {
                lines.push(format!(
                    "{} #{} id {} {}",
                    kind.code(),
                    rn.value(row),
                    int(0).value(row),
                    int(1).value(row)
                ));
            }
        }
        lines
    }

    #[tokio::test]
    async fn ranks_move_as_rows_enter_the_top() {
        let mut top = top_two(false);
        assert_eq!(feed(&mut top, batch(&[(1, 10, 5), (1, 11, 7)], None)).await, ["+I #1 id 11 7", "+I #2 id 10 5"]);
        // A new best pushes both down; the old second leaves.
        assert_eq!(
            feed(&mut top, batch(&[(1, 12, 9)], None)).await,
            ["-U #1 id 11 7", "+U #1 id 12 9", "-U #2 id 10 5", "+U #2 id 11 7"]
        );
        assert!(
            feed(&mut top, batch(&[(1, 13, 1), (2, 20, 1)], None)).await == ["+I #1 id 20 1"],
            "13 is not in the top"
        );
        assert_eq!(top.partitions.values().map(|r| r.rows.len()).sum::<usize>(), 3, "append-only keeps the top 2 only");
    }

    /// A row ordered after a full top is skipped; one that ties with its last row, or that
    /// DENSE_RANK still numbers within the limit, is not.
    #[tokio::test]
    async fn ties_at_the_edge_of_the_top_are_kept() {
        let mut rank = top_two_by(Numbering::Rank, false);
        feed(&mut rank, batch(&[(1, 10, 9), (1, 11, 9)], None)).await;
        assert!(feed(&mut rank, batch(&[(1, 12, 5)], None)).await.is_empty(), "RANK 3 is past the top 2");
        assert_eq!(feed(&mut rank, batch(&[(1, 13, 9)], None)).await, ["+I #1 id 13 9"], "a tie for first");
        let mut dense = top_two_by(Numbering::DenseRank, false);
        feed(&mut dense, batch(&[(1, 10, 9), (1, 11, 9)], None)).await;
        assert_eq!(feed(&mut dense, batch(&[(1, 12, 5)], None)).await, ["+I #2 id 12 5"], "DENSE_RANK 2");
        assert!(feed(&mut dense, batch(&[(1, 14, 1)], None)).await.is_empty(), "DENSE_RANK 3");
        assert_eq!(feed(&mut dense, batch(&[(1, 15, 5)], None)).await, ["+I #2 id 15 5"], "a tie for second");
    }

    /// Identical rows are copies of one kept row, each numbered; a row tying with a lone kept
    /// row on the ORDER BY key is ranked against it by the whole row, in a later batch too.
    #[tokio::test]
    async fn copies_and_ties_rank_by_the_whole_row() {
        let mut top = top_two_by(Numbering::RowNumber, false);
        assert_eq!(feed(&mut top, batch(&[(1, 10, 5), (1, 10, 5)], None)).await, ["+I #1 id 10 5", "+I #2 id 10 5"]);
        assert_eq!(feed(&mut top, batch(&[(1, 9, 5)], None)).await, ["-U #1 id 10 5", "+U #1 id 9 5"], "id 9 first");
        let mut top = top_two_by(Numbering::RowNumber, false);
        feed(&mut top, batch(&[(1, 12, 5)], None)).await;
        assert_eq!(
            feed(&mut top, batch(&[(1, 11, 5)], None)).await,
            ["-U #1 id 12 5", "+U #1 id 11 5", "+I #2 id 12 5"]
        );
    }

    /// Rows pushed out of the top are dropped from the store once they outnumber the kept
    /// ones; the kept rows still answer (emitted, snapshot) after that.
    #[tokio::test]
    async fn rows_pushed_out_are_compacted_away() {
        let mut top = top_two(false);
        // Ten partitions, prices rising: every row enters its partition's top and pushes one out.
        for chunk in (0..40_000i64).collect::<Vec<_>>().chunks(1000) {
            let rows: Vec<(i64, i64, i64)> = chunk.iter().map(|&i| (i % 10, i, i)).collect();
            feed(&mut top, batch(&rows, None)).await;
        }
        assert!(top.stored.numbered() < 40_000, "compacted: {} numbered", top.stored.numbered());
        assert_eq!(
            feed(&mut top, batch(&[(3, 50_000, 50_000)], None)).await,
            ["-U #1 id 39993 39993", "+U #1 id 50000 50000", "-U #2 id 39983 39983", "+U #2 id 39993 39993"]
        );
        let snapshot = top.snapshot(1).await.unwrap();
        let rows = &snapshot[0].batches[0];
        let ids = rows.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
        let mut ids: Vec<i64> = ids.values().to_vec();
        ids.sort_unstable();
        let mut expected: Vec<i64> = (39_980..40_000).filter(|&i| i != 39_983).chain([50_000]).collect();
        expected.sort_unstable();
        assert_eq!(ids, expected);
    }

    /// Incremental checkpoints: a full snapshot, then the kept rows of the partitions rows
    /// reached and the partitions left empty, merged as a restore merges them, hold what a full
    /// snapshot at the end holds (append-only and changelog input).
    #[tokio::test]
    async fn a_base_and_its_changes_restore_what_a_full_snapshot_holds() {
        use Change::{Delete, Insert};
        for retracting in [false, true] {
            let mut top = top_two(retracting);
            let info = SubtaskInfo { incremental: true, ..SubtaskInfo::new("top", 0, 1) };
            top.open(&info, RestoredState::default()).await.unwrap();
            let kinds = |n: usize| retracting.then(|| vec![Insert; n]);
            feed(&mut top, batch(&[(1, 10, 5), (1, 11, 7), (2, 20, 3), (3, 30, 1)], kinds(4).as_deref())).await;
            let mut chains = crate::state_table::Chains::new(top.snapshot(1).await.unwrap());
            // Partition 1 gets a new best (pushing 10 out of an append-only top 2), 4 is new.
            feed(&mut top, batch(&[(1, 12, 9), (4, 40, 1)], kinds(2).as_deref())).await;
            let first = chains.push(top.snapshot_changes(2).await.unwrap().unwrap());
            let kept_of_1 = if retracting { 3 } else { 2 };
            assert_eq!(first, [(kept_of_1 + 1, Some(0))], "partitions 1 and 4");
            // A changelog takes partition 3's only row back: the partition is removed.
            if retracting {
                feed(&mut top, batch(&[(3, 30, 1), (2, 21, 2)], Some(&[Delete, Insert]))).await;
                let second = chains.push(top.snapshot_changes(3).await.unwrap().unwrap());
                assert_eq!(second, [(2, Some(1))], "partition 2's two rows; 3 removed");
            }
            chains.assert_match(top.snapshot(4).await.unwrap());
        }
    }

    #[tokio::test]
    async fn a_taken_back_top_row_brings_the_next_one_up_and_survives_a_restore() {
        let mut top = top_two(true);
        feed(&mut top, batch(&[(1, 10, 5), (1, 11, 7), (1, 12, 9)], None)).await;
        let tables = top.snapshot(1).await.unwrap();
        let mut restored = top_two(true);
        let state = RestoredState {
            checkpoint_id: Some(1),
            tables: tables.into_iter().map(|t| (t.name, t.batches)).collect(),
            ..Default::default()
        };
        restored.open(&SubtaskInfo::new("top", 0, 1), state).await.unwrap();
        let taken_back = batch(&[(1, 12, 9)], Some(&[Change::Delete]));
        assert_eq!(
            feed(&mut restored, taken_back).await,
            ["-U #1 id 12 9", "+U #1 id 11 7", "-U #2 id 11 7", "+U #2 id 10 5"]
        );
        let all_gone = batch(&[(1, 11, 7), (1, 10, 5)], Some(&[Change::Delete, Change::Delete]));
        assert_eq!(feed(&mut restored, all_gone).await, ["-D #1 id 11 7", "-D #2 id 10 5"]);
        assert!(restored.partitions.is_empty());
    }
}
