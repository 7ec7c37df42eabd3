//! Deduplication: the first row of each partition in an order, `ROW_NUMBER() OVER (PARTITION BY
//! ... ORDER BY ...)` limited to `rn = 1`, over an append-only stream (Flink's Deduplicate;
//! Nexmark q18's last bid of each bidder on each auction, q9's winning bid of each auction).
//!
//! It is the top-N with N = 1, and answers as [`super::TopN`] does: `+I` a partition's first
//! row, then `-U` the kept row and `+U` the new one when a row comes first in the order, ties
//! broken by the whole row; its state is top-N's `rows` table, so either restores the other's.
//! What it saves over the general top-N is work per row: the partition is found by its dense
//! id ([`GroupKeys`]); the kept row is its ORDER BY key in Arrow's row format and its place
//! among the rows kept as columns ([`RowSegments`]: a snapshot and a `-U` gather them back
//! instead of decoding rows), in a vector by id; a batch's rows for one partition are compared
//! before anything is stored; the whole row is encoded only to break a tie on the ORDER BY key;
//! and the new rows are emitted by `take` from the batch. With incremental checkpoints it
//! writes the partitions whose first row changed (a partition is never removed).

use std::cmp::Ordering;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, Int64Array, UInt32Array, UInt64Array};
use datafusion::arrow::compute::{SortOptions, cast, interleave, take};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use datafusion::physical_expr::PhysicalExpr;

use crate::changelog::{Change, change_array};
use crate::error::{Error, Result};
use crate::group_keys::GroupKeys;
use crate::operator::{Collector, Delta, Operator, RestoredState, StateTable};
use crate::operators::row_segments::{RowSegments, RowSlot};
use crate::operators::top_n::{KeptRows, order_fields, partition_and_order, row_converter};

/// The first row of each partition, kept up to date as a changelog.
pub struct Deduplicate {
    /// The partition columns (appended to the input, routed by).
    partition: Vec<String>,
    /// ORDER BY, over the input, and its keys' sort fields.
    order: Vec<(Arc<dyn PhysicalExpr>, SortOptions)>,
    order_fields: Vec<SortField>,
    /// The input's rows: the row columns, then the partition columns.
    input: SchemaRef,
    /// The row columns, the row number, then the change column.
    output: SchemaRef,
    /// Made on the first batch (or restore).
    kept: Option<Kept>,
    /// Checkpoints are incremental: the partitions changed since the last snapshot are listed.
    incremental: bool,
}

/// The partitions' ids and their rows.
struct Kept {
    partitions: GroupKeys,
    order: RowConverter,
    /// Whole rows in Arrow's row format, to break ties on the ORDER BY key.
    rows: RowConverter,
    /// By partition id.
    first: Vec<Option<First>>,
    /// The first rows' columns.
    stored: RowSegments,
    /// With incremental checkpoints, the ids whose first row changed since the last snapshot
    /// (flagged by id, listed once).
    changed: Option<(Vec<bool>, Vec<usize>)>,
}

/// A partition's first row: its ORDER BY key and where its columns are.
struct First {
    order: Box<[u8]>,
    slot: RowSlot,
}

/// A batch's candidate rows: partition and ORDER BY keys encoded once, whole rows when a tie
/// needs them.
struct Candidates<'a> {
    batch: &'a RecordBatch,
    keys: Rows,
    orders: Rows,
    rows: Option<Rows>,
}

impl Candidates<'_> {
    fn rows(&mut self, converter: &RowConverter) -> Result<&Rows> {
        if self.rows.is_none() {
            self.rows = Some(converter.convert_columns(self.batch.columns())?);
        }
        self.rows.as_ref().ok_or_else(|| Error::Graph("deduplication rows missing".into()))
    }

    /// Whether row `a` of the batch comes before row `b` (ORDER BY, then the whole row).
    fn before(&mut self, converter: &RowConverter, a: usize, b: usize) -> Result<bool> {
        Ok(match self.orders.row(a).cmp(&self.orders.row(b)) {
            Ordering::Equal => {
                let rows = self.rows(converter)?;
                rows.row(a) < rows.row(b)
            }
            order => order == Ordering::Less,
        })
    }

    /// Whether rows of the batch come before kept rows (ORDER BY, then the whole row): one
    /// answer per `(row, first)` pair, the kept rows read back and encoded together only for
    /// the pairs tied on the ORDER BY key.
    fn before_kept(&mut self, kept: &Kept, pairs: &[(usize, &First)]) -> Result<Vec<bool>> {
        let mut answers = Vec::with_capacity(pairs.len());
        let mut ties = Vec::new();
        for (at, (row, first)) in pairs.iter().enumerate() {
            let order = self.orders.row(*row).as_ref().cmp(&first.order);
            answers.push(order == Ordering::Less);
            if order == Ordering::Equal {
                ties.push(at);
            }
        }
        if !ties.is_empty() {
            let slots: Vec<RowSlot> = ties.iter().map(|at| pairs[*at].1.slot).collect();
            let theirs = kept.rows.convert_columns(&kept.stored.gather(&slots, 0..self.batch.num_columns())?)?;
            let ours = self.rows(&kept.rows)?;
            for (i, at) in ties.into_iter().enumerate() {
                answers[at] = ours.row(pairs[at].0) < theirs.row(i);
            }
        }
        Ok(answers)
    }
}

/// What the batch changed: a partition's new first row (a row of the batch) and where the row
/// it replaced is, if any (released, readable until the next compaction).
struct Replaced {
    new: usize,
    old: Option<RowSlot>,
}

impl Clone for Deduplicate {
    /// A fresh instance with the same plan.
    fn clone(&self) -> Self {
        Self {
            partition: self.partition.clone(),
            order: self.order.clone(),
            order_fields: self.order_fields.clone(),
            input: self.input.clone(),
            output: self.output.clone(),
            kept: None,
            incremental: false,
        }
    }
}

impl Deduplicate {
    pub fn new(
        partition: Vec<String>,
        order: Vec<(Arc<dyn PhysicalExpr>, SortOptions)>,
        input: SchemaRef,
        output: SchemaRef,
    ) -> Result<Self> {
        let order_fields = order_fields(&order, &input)?;
        Ok(Self { partition, order, order_fields, input, output, kept: None, incremental: false })
    }

    fn state(&mut self) -> Result<&mut Kept> {
        if self.kept.is_none() {
            let partition_types = self
                .partition
                .iter()
                .map(|n| Ok(self.input.field_with_name(n)?.data_type().clone()))
                .collect::<Result<Vec<_>>>()?;
            self.kept = Some(Kept {
                partitions: GroupKeys::new(&partition_types)?,
                order: RowConverter::new(self.order_fields.clone())?,
                rows: row_converter(&self.input)?,
                first: Vec::new(),
                stored: RowSegments::new(self.input.fields().iter().map(|f| f.data_type().clone()).collect()),
                changed: self.incremental.then(Default::default),
            });
        }
        self.kept.as_mut().ok_or_else(|| Error::Graph("deduplication state missing".into()))
    }

    /// Keeps each partition's first row among the kept one and the batch's; returns the
    /// partitions whose first row changed, in the order the batch first reached them.
    fn apply(&mut self, batch: &RecordBatch) -> Result<Vec<Replaced>> {
        let (partition, order) = partition_and_order(batch, &self.partition, &self.order)?;
        let kept = self.state()?;
        let mut candidates = Candidates {
            batch,
            keys: kept.partitions.encode(&partition)?,
            orders: kept.order.convert_columns(&order)?,
            rows: None,
        };
        // The batch's best row for each partition it reaches, in the order it reaches them.
        let mut best: Vec<(usize, usize)> = Vec::new();
        let mut best_of: hashbrown::HashMap<usize, usize> = hashbrown::HashMap::new();
        for row in 0..batch.num_rows() {
            let (id, new) = kept.partitions.intern(&candidates.keys, row)?;
            if new {
                kept.first.push(None);
            }
            match best_of.get(&id) {
                Some(&at) => {
                    if candidates.before(&kept.rows, row, best[at].1)? {
                        best[at].1 = row;
                    }
                }
                None => {
                    best_of.insert(id, best.len());
                    best.push((id, row));
                }
            }
        }
        // Those that beat the kept row (or have none).
        let pairs: Vec<(usize, &First)> =
            best.iter().filter_map(|(id, row)| kept.first[*id].as_ref().map(|first| (*row, first))).collect();
        let mut beats = candidates.before_kept(kept, &pairs)?.into_iter();
        let mut winners = Vec::with_capacity(best.len());
        for (id, row) in best {
            let wins = match kept.first[id] {
                None => true,
                Some(_) => beats.next().unwrap_or(false),
            };
            if wins {
                winners.push((id, row));
            }
        }
        if let Some((flags, ids)) = &mut kept.changed {
            flags.resize(kept.first.len(), false);
            for &(id, _) in &winners {
                if !std::mem::replace(&mut flags[id], true) {
                    ids.push(id);
                }
            }
        }
        let rows: Vec<u32> = winners.iter().map(|(_, row)| *row as u32).collect();
        let first_slot = kept.stored.push(batch.columns(), Some(&rows))?;
        let mut replaced = Vec::with_capacity(winners.len());
        for ((id, row), slot) in winners.into_iter().zip(first_slot..) {
            let new = First { order: candidates.orders.row(row).as_ref().into(), slot };
            let old = kept.first[id].replace(new).map(|old| old.slot);
            if old.is_some() {
                kept.stored.release();
            }
            replaced.push(Replaced { new: row, old });
        }
        Ok(replaced)
    }

    /// Gathers the first rows into new segments once the replaced ones outnumber them (after
    /// the batch's `-U` rows were read).
    fn compact(&mut self) -> Result<()> {
        let Some(kept) = &mut self.kept else { return Ok(()) };
        if kept.stored.needs_compaction() {
            kept.stored.compact(kept.first.iter_mut().flatten().map(|first| &mut first.slot))?;
        }
        Ok(())
    }

    /// `-U` each replaced row and `+U` its successor, `+I` a partition's first row.
    fn emit(&mut self, batch: &RecordBatch, replaced: Vec<Replaced>, out: &mut Collector) -> Result<()> {
        if replaced.is_empty() {
            return Ok(());
        }
        let width = self.output.fields().len() - 2;
        let new_rows = UInt32Array::from_iter_values(replaced.iter().map(|r| r.new as u32));
        let new: Vec<ArrayRef> =
            batch.columns()[..width].iter().map(|c| take(c, &new_rows, None)).collect::<std::result::Result<_, _>>()?;
        let olds: Vec<RowSlot> = replaced.iter().filter_map(|r| r.old).collect();
        let mut columns = if olds.is_empty() {
            new
        } else {
            let old = self.state()?.stored.gather(&olds, 0..width)?;
            // (array, row): 0 the old rows, 1 the new ones, each old row before its successor.
            let mut order = Vec::with_capacity(replaced.len() + olds.len());
            let mut next_old = 0;
            for (position, replacement) in replaced.iter().enumerate() {
                if replacement.old.is_some() {
                    order.push((0, next_old));
                    next_old += 1;
                }
                order.push((1, position));
            }
            (0..width)
                .map(|c| interleave(&[old[c].as_ref(), new[c].as_ref()], &order))
                .collect::<std::result::Result<_, _>>()?
        };
        let changes: Vec<Change> = replaced
            .iter()
            .flat_map(|r| match r.old {
                Some(_) => vec![Change::UpdateBefore, Change::UpdateAfter],
                None => vec![Change::Insert],
            })
            .collect();
        let numbers: ArrayRef = Arc::new(UInt64Array::from_value(1, changes.len()));
        columns.push(cast(&numbers, self.output.field(width).data_type())?);
        columns.push(change_array(&changes));
        out.emit(RecordBatch::try_new(self.output.clone(), columns)?);
        Ok(())
    }
}

#[async_trait]
impl Operator for Deduplicate {
    /// Working state: a bounded run's final checkpoint leaves it out.
    fn state_needed_after_finish(&self) -> bool {
        false
    }

    async fn open(&mut self, info: &crate::SubtaskInfo, restored: RestoredState) -> Result<()> {
        self.incremental = info.incremental;
        // A kept row is the first of its partition whatever its copies; the rows restored were
        // emitted before the snapshot.
        for (rows, _) in KeptRows::new(&self.input).restore(&restored)? {
            self.apply(&rows)?;
            self.compact()?;
        }
        // Changes count from the restored state, which a continued chain already holds.
        if let Some(changed) = self.kept.as_mut().and_then(|kept| kept.changed.as_mut()) {
            *changed = Default::default();
        }
        Ok(())
    }

    async fn process_batch(&mut self, _input: usize, batch: RecordBatch, out: &mut Collector) -> Result<()> {
        let width = self.input.fields().len();
        let rows = RecordBatch::try_new(self.input.clone(), batch.columns()[..width].to_vec())?;
        let replaced = self.apply(&rows)?;
        self.emit(&rows, replaced, out)?;
        self.compact()
    }

    async fn process_watermark(&mut self, _watermark: i64, _out: &mut Collector) -> Result<()> {
        // Updating results carry no event time on.
        Ok(())
    }

    async fn snapshot(&mut self, _checkpoint_id: u64) -> Result<Vec<StateTable>> {
        let kept = self.state()?;
        if let Some(changed) = &mut kept.changed {
            *changed = Default::default();
        }
        let ids: Vec<usize> = (0..kept.first.len()).collect();
        Ok(vec![self.kept_rows(&ids)?])
    }

    /// The partitions whose first row changed since the last snapshot.
    async fn snapshot_changes(&mut self, _checkpoint_id: u64) -> Result<Option<Vec<StateTable>>> {
        let Some((_, ids)) = self.state()?.changed.take() else { return Ok(None) };
        self.state()?.changed = Some(Default::default());
        let mut table = self.kept_rows(&ids)?;
        let schema = table.schema.clone();
        let key_fields: Vec<Field> = std::iter::once(schema.field(0).clone())
            .chain(self.partition.iter().filter_map(|name| schema.field_with_name(name).ok().cloned()))
            .collect();
        let deleted = RecordBatch::new_empty(Arc::new(Schema::new(key_fields)));
        table.delta = Some(Delta { key: self.partition.clone(), deleted });
        Ok(Some(vec![table]))
    }
}

impl Deduplicate {
    /// The snapshot table of partitions `ids`' first rows (top-N's `rows` table).
    fn kept_rows(&mut self, ids: &[usize]) -> Result<StateTable> {
        let (input, partition) = (self.input.clone(), self.partition.clone());
        let kept = self.state()?;
        let slots: Vec<RowSlot> = ids.iter().filter_map(|&id| kept.first[id].as_ref().map(|f| f.slot)).collect();
        let columns = kept.stored.gather(&slots, 0..kept.stored.width())?;
        // One copy each.
        let copies = Int64Array::from_value(1, slots.len());
        KeptRows::new(&input).snapshot(columns, copies, &partition)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SubtaskInfo;
    use crate::operators::top_n::tests::{batch, highest_price, input, output};
    use crate::operators::{Numbering, TopN, top_n};

    async fn feed(operator: &mut dyn Operator, rows: &[(i64, i64, i64)]) -> Vec<String> {
        top_n::tests::feed(operator, batch(rows, None)).await
    }

    /// Each batch answers as the general top-N with N = 1 does, ties broken by the whole row,
    /// several rows of a partition in one batch included.
    #[tokio::test]
    async fn answers_as_top_one_does() {
        let mut dedup = Deduplicate::new(vec!["__partition_0".into()], highest_price(), input(), output()).unwrap();
        let mut top =
            TopN::new(vec!["__partition_0".into()], highest_price(), Numbering::RowNumber, 1, false, input(), output())
                .unwrap();
        let batches: [&[(i64, i64, i64)]; 4] = [
            &[(1, 10, 5), (2, 20, 3), (1, 11, 7), (1, 12, 6)],
            &[(1, 13, 1), (2, 21, 3), (3, 30, 1)],
            &[(2, 19, 3), (1, 14, 9), (1, 15, 9), (3, 31, 2)],
            &[],
        ];
        for rows in batches {
            assert_eq!(feed(&mut dedup, rows).await, feed(&mut top, rows).await, "{rows:?}");
        }
        assert_eq!(
            feed(&mut dedup, &[(1, 16, 8), (2, 18, 3)]).await,
            ["-U #1 id 19 3", "+U #1 id 18 3"],
            "a tie on price goes to the smaller row"
        );
    }

    /// Incremental checkpoints: a full snapshot, then the partitions whose first row changed,
    /// merged as a restore merges them, hold the rows of a full snapshot taken at the end.
    #[tokio::test]
    async fn a_base_and_its_changes_restore_the_first_rows_a_full_snapshot_holds() {
        let mut dedup = Deduplicate::new(vec!["__partition_0".into()], highest_price(), input(), output()).unwrap();
        let info = SubtaskInfo { incremental: true, ..SubtaskInfo::new("dedup", 0, 1) };
        dedup.open(&info, RestoredState::default()).await.unwrap();
        feed(&mut dedup, &[(1, 10, 5), (2, 20, 3), (3, 30, 9)]).await;
        let mut chains = crate::state_table::Chains::new(dedup.snapshot(1).await.unwrap());
        let mut written = Vec::new();
        // By the highest price: 1 gets a new first row (7 over 5), 2 does not (2 under 3), 4 is
        // new; then 1 again (8), and 3 does not (1 under 9).
        for rows in [&[(1, 11, 7), (2, 21, 2), (4, 40, 1)][..], &[(1, 12, 8), (3, 31, 1)][..]] {
            feed(&mut dedup, rows).await;
            written.extend(chains.push(dedup.snapshot_changes(2).await.unwrap().unwrap()));
        }
        assert_eq!(written, [(2, Some(0)), (1, Some(0))], "partitions 1 and 4, then 1");
        let full = dedup.snapshot(4).await.unwrap();
        assert_eq!(full[0].batches[0].num_rows(), 4);
        chains.assert_match(full);
    }

    #[tokio::test]
    async fn the_first_rows_survive_a_restore_as_top_n_state() {
        let mut dedup = Deduplicate::new(vec!["__partition_0".into()], highest_price(), input(), output()).unwrap();
        feed(&mut dedup, &[(1, 10, 5), (1, 11, 7), (2, 20, 3)]).await;
        let tables = dedup.snapshot(1).await.unwrap();
        let state = |tables: Vec<StateTable>| RestoredState {
            checkpoint_id: Some(1),
            tables: tables.into_iter().map(|t| (t.name, t.batches)).collect(),
            ..Default::default()
        };
        let mut restored = Deduplicate::new(vec!["__partition_0".into()], highest_price(), input(), output()).unwrap();
        restored.open(&SubtaskInfo::new("dedup", 0, 1), state(tables.clone())).await.unwrap();
        assert!(feed(&mut restored, &[(1, 12, 6)]).await.is_empty(), "7 is still first");
        assert_eq!(feed(&mut restored, &[(2, 21, 4)]).await, ["-U #1 id 20 3", "+U #1 id 21 4"]);
        // The general top-N reads the same table.
        let mut top =
            TopN::new(vec!["__partition_0".into()], highest_price(), Numbering::RowNumber, 1, false, input(), output())
                .unwrap();
        top.open(&SubtaskInfo::new("top", 0, 1), state(tables)).await.unwrap();
        assert_eq!(feed(&mut top, &[(1, 12, 8)]).await, ["-U #1 id 11 7", "+U #1 id 12 8"]);
        // And the other way: deduplication reads the top-N's table.
        let mut from_top = Deduplicate::new(vec!["__partition_0".into()], highest_price(), input(), output()).unwrap();
        from_top.open(&SubtaskInfo::new("dedup", 0, 1), state(top.snapshot(2).await.unwrap())).await.unwrap();
        assert!(feed(&mut from_top, &[(1, 13, 7)]).await.is_empty(), "8 is still first");
        assert_eq!(feed(&mut from_top, &[(2, 22, 5)]).await, ["-U #1 id 20 3", "+U #1 id 22 5"]);
    }
}
