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
//! The snapshot is the kept rows with their number of copies, keyed by the hash of the
//! partition columns; after a restore the emitted ranks are the restored top N, since every
//! batch's changes are emitted before any snapshot. With incremental checkpoints a change is
//! the kept rows of every partition a row reached since the last snapshot (all of them: a later
//! file's rows of a partition replace its earlier ones), and the partitions left empty.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, Int64Array, UInt64Array};
use datafusion::arrow::compute::{SortOptions, cast};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{Row, RowConverter, SortField};
use datafusion::common::{HashMap, HashSet};
use datafusion::physical_expr::PhysicalExpr;

use crate::changelog::{Change, change_array, changes};
use crate::error::{Error, Result};
use crate::operator::{Collector, Delta, Operator, RestoredState, StateTable};
use crate::operators::numbering::Numbering;
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
    /// With incremental checkpoints: the partitions whose kept rows may have changed since
    /// the last snapshot.
    changed: Option<HashSet<Vec<u8>>>,
}

struct Converters {
    partition: RowConverter,
    order: RowConverter,
    rows: RowConverter,
}

/// A kept row: its ORDER BY key, then the whole row, in Arrow's row format, in one shared
/// allocation (top-N's emitted ranks hold it too), ordered by the key, then the row. Top-N and
/// deduplication keep their rows so.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct RankedRow {
    bytes: Arc<[u8]>,
    order_len: usize,
}

impl RankedRow {
    pub(crate) fn new(order: Row<'_>, row: Row<'_>) -> Self {
        let (order, row) = (order.as_ref(), row.as_ref());
        let mut bytes = Vec::with_capacity(order.len() + row.len());
        bytes.extend_from_slice(order);
        bytes.extend_from_slice(row);
        Self { bytes: bytes.into(), order_len: order.len() }
    }

    pub(crate) fn order(&self) -> &[u8] {
        &self.bytes[..self.order_len]
    }

    pub(crate) fn row(&self) -> &[u8] {
        &self.bytes[self.order_len..]
    }
}

impl Ord for RankedRow {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.order().cmp(other.order()).then_with(|| self.row().cmp(other.row()))
    }
}

impl PartialOrd for RankedRow {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

#[derive(Default)]
struct Ranked {
    /// Kept rows -> copies, in rank order.
    rows: BTreeMap<RankedRow, usize>,
    /// The copies kept in all.
    count: usize,
    /// The rows last emitted with their numbers, in rank order.
    emitted: Vec<(RankedRow, u64)>,
}

impl Ranked {
    /// Walks the rows numbered `limit` or less in rank order, calling `visit` with each row and
    /// its number; returns how many there are and the (position, number) of the last of them.
    fn walk_top(
        &self,
        numbering: Numbering,
        limit: usize,
        mut visit: impl FnMut(&RankedRow, u64),
    ) -> (usize, Option<(u64, u64)>) {
        let mut count = 0;
        let mut previous: Option<((u64, u64), &[u8])> = None;
        for (row, copies) in &self.rows {
            for _ in 0..*copies {
                let tie = previous.is_some_and(|(_, key)| key == row.order());
                let next = numbering.next(previous.map(|(p, _)| p), tie);
                if next.1 > limit as u64 {
                    return (count, previous.map(|(p, _)| p));
                }
                visit(row, next.1);
                count += 1;
                previous = Some((next, row.order()));
            }
        }
        (count, previous.map(|(p, _)| p))
    }

    /// The rows numbered `limit` or less, with their numbers, in rank order.
    fn top(&self, numbering: Numbering, limit: usize) -> Vec<(RankedRow, u64)> {
        let mut top = Vec::new();
        self.walk_top(numbering, limit, |row, number| top.push((row.clone(), number)));
        top
    }

    /// Whether a row ordered by `order` is sure to stay out of the top `limit` of an
    /// append-only input: it orders after every kept row (no tie) and would be numbered past
    /// the limit.
    fn excludes(&self, order: Row<'_>, numbering: Numbering, limit: usize) -> bool {
        let Some((last, _)) = self.rows.last_key_value() else { return false };
        if order.as_ref() <= last.order() {
            return false;
        }
        if numbering == Numbering::RowNumber {
            // Every kept row has a number of its own: the next one would be `count + 1`.
            return self.count >= limit;
        }
        let (_, after) = self.walk_top(numbering, limit, |_, _| {});
        numbering.next(after, false).1 > limit as u64
    }

    /// Adds copies of a row (negative: takes them back, as far as it is kept).
    fn add(&mut self, row: RankedRow, copies: i64) {
        if copies > 0 {
            *self.rows.entry(row).or_insert(0) += copies as usize;
            self.count += copies as usize;
        } else if let Some(kept) = self.rows.get_mut(&row) {
            // A row not kept (below an append-only top N, or never seen) takes nothing back.
            let taken = (*kept).min(copies.unsigned_abs() as usize);
            *kept -= taken;
            self.count -= taken;
            if *kept == 0 {
                self.rows.remove(&row);
            }
        }
    }

    /// Drops the rows below the top `limit` of an append-only input, which can never rise.
    fn trim(&mut self, numbering: Numbering, limit: usize) {
        let keep = match numbering {
            Numbering::RowNumber => limit,
            _ => self.walk_top(numbering, limit, |_, _| {}).0,
        };
        while self.count > keep {
            let Some(mut last) = self.rows.last_entry() else { break };
            let excess = (self.count - keep).min(*last.get());
            *last.get_mut() -= excess;
            self.count -= excess;
            if *last.get() == 0 {
                last.remove();
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
            changed: None,
        }
    }
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
    fn apply(&mut self, batch: &RecordBatch, copies: &[i64]) -> Result<Vec<(RankedRow, u64, Change)>> {
        let (partition, order) = partition_and_order(batch, &self.partition, &self.order)?;
        let converters = self.converters()?;
        let keys = converters.partition.convert_columns(&partition)?;
        let orders = converters.order.convert_columns(&order)?;
        let rows = converters.rows.convert_columns(batch.columns())?;
        let mut touched = Vec::new();
        let mut seen: HashSet<&[u8]> = HashSet::default();
        for (row, &n) in copies.iter().enumerate() {
            let key = keys.row(row).data();
            if seen.insert(key) {
                touched.push(key);
            }
            let ranked = self.partitions.entry_ref(key).or_default();
            if !self.retracting && n > 0 && ranked.excludes(orders.row(row), self.numbering, self.limit) {
                continue; // below an append-only top N: it can never rise
            }
            ranked.add(RankedRow::new(orders.row(row), rows.row(row)), n);
            if let Some(changed) = &mut self.changed {
                changed.get_or_insert_with(key, <[u8]>::to_vec);
            }
            if !self.retracting {
                // Rows below the top can never rise: a new row only pushes others down.
                ranked.trim(self.numbering, self.limit);
            }
        }
        let mut changed = Vec::new();
        for key in touched {
            let Some(ranked) = self.partitions.get_mut(key) else { continue };
            let top = ranked.top(self.numbering, self.limit);
            for position in 0..top.len().max(ranked.emitted.len()) {
                match (ranked.emitted.get(position), top.get(position)) {
                    (Some(old), Some(new)) if old != new => {
                        changed.push((old.0.clone(), old.1, Change::UpdateBefore));
                        changed.push((new.0.clone(), new.1, Change::UpdateAfter));
                    }
                    (None, Some(new)) => changed.push((new.0.clone(), new.1, Change::Insert)),
                    (Some(old), None) => changed.push((old.0.clone(), old.1, Change::Delete)),
                    _ => {}
                }
            }
            ranked.emitted = top;
            if ranked.rows.is_empty() {
                self.partitions.remove(key);
            }
        }
        Ok(changed)
    }

    fn emit(&mut self, changed: Vec<(RankedRow, u64, Change)>, out: &mut Collector) -> Result<()> {
        if changed.is_empty() {
            return Ok(());
        }
        let converter = &self.converters()?.rows;
        let parser = converter.parser();
        let columns = converter.convert_rows(changed.iter().map(|(kept, _, _)| parser.parse(kept.row())))?;
        let width = self.output.fields().len() - 2;
        let mut output: Vec<ArrayRef> = columns.into_iter().take(width).collect();
        let numbers: ArrayRef = Arc::new(UInt64Array::from_iter_values(changed.iter().map(|(_, n, _)| *n)));
        output.push(cast(&numbers, self.output.field(width).data_type())?);
        output.push(change_array(&changed.iter().map(|(_, _, c)| *c).collect::<Vec<_>>()));
        out.emit(RecordBatch::try_new(self.output.clone(), output)?);
        Ok(())
    }
}

#[async_trait]
impl Operator for TopN {
    async fn open(&mut self, info: &crate::SubtaskInfo, restored: RestoredState) -> Result<()> {
        for (rows, copies) in KeptRows::new(&self.input).restore(&restored)? {
            self.apply(&rows, copies.values())?;
        }
        self.changed = info.incremental.then(HashSet::default);
        Ok(())
    }

    async fn process_batch(&mut self, _input: usize, batch: RecordBatch, out: &mut Collector) -> Result<()> {
        let copies: Vec<i64> = changes(&batch)?.iter().map(|c| if c.is_retraction() { -1 } else { 1 }).collect();
        let width = self.input.fields().len();
        let rows = RecordBatch::try_new(self.input.clone(), batch.columns()[..width].to_vec())?;
        let changed = self.apply(&rows, &copies)?;
        self.emit(changed, out)
    }

    async fn process_watermark(&mut self, _watermark: i64, _out: &mut Collector) -> Result<()> {
        // Updating results carry no event time on.
        Ok(())
    }

    async fn snapshot(&mut self, _checkpoint_id: u64) -> Result<Vec<StateTable>> {
        if let Some(changed) = &mut self.changed {
            changed.clear();
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

impl TopN {
    /// The snapshot table of the kept rows of every partition, or of the partitions `keys`.
    fn kept_rows(&mut self, keys: Option<&[Vec<u8>]>) -> Result<StateTable> {
        self.converters()?;
        let Some(converters) = &self.converters else {
            return Err(Error::Graph("top-N row converters missing".into()));
        };
        let parser = converters.rows.parser();
        let partitions: Vec<&Ranked> = match keys {
            Some(keys) => keys.iter().filter_map(|key| self.partitions.get(key)).collect(),
            None => self.partitions.values().collect(),
        };
        let kept: Vec<(Row<'_>, usize)> = partitions
            .into_iter()
            .flat_map(|ranked| ranked.rows.iter().map(|(kept, copies)| (parser.parse(kept.row()), *copies)))
            .collect();
        let copies = Int64Array::from_iter_values(kept.iter().map(|(_, n)| *n as i64));
        let columns = converters.rows.convert_rows(kept.into_iter().map(|(row, _)| row))?;
        KeptRows::new(&self.input).snapshot(columns, copies, &self.partition)
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
        let state =
            RestoredState { checkpoint_id: Some(1), tables: tables.into_iter().map(|t| (t.name, t.batches)).collect() };
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
