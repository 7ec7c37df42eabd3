//! Upserts made a changelog (Flink's ChangelogNormalize): the rows of a table read from an
//! upsert stream, where each record is a key's latest row or a tombstone removing the key
//! (Kafka's `upsert-kafka`, compacted topics), turned into the changes by which downstream
//! operators take rows back.
//!
//! An upsert stream says what a key *is*, never what it was, so the operator keeps each key's
//! latest row: an upsert of a key it does not hold is `+I`; of one it holds, `-U` the kept row
//! and `+U` the new one (nothing when the two are equal: a record written twice changes
//! nothing); a delete is `-D` the kept row (nothing for a key it does not hold, as a tombstone
//! of a key never seen). Its input is keyed by the primary key, so each key's records reach one
//! subtask in the order of their partition.
//!
//! Its state is the latest row of each key; with incremental checkpoints it writes the keys
//! upserted since the last snapshot and the keys deleted (as tombstones).

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, UInt32Array};
use datafusion::arrow::compute::{interleave, take};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{OwnedRow, RowConverter, SortField};

use crate::changelog::{Change, change_array, changes};
use crate::error::{Error, Result};
use crate::group_keys::GroupKeys;
use crate::operator::{Collector, Delta, Operator, RestoredState, StateTable};
use crate::partition::key_hashes;
use crate::state_table::KeyedTable;

/// The state table: each key's latest row.
const LATEST: &str = "latest";

/// Each key's latest row, emitted as a changelog.
pub struct UpsertNormalize {
    /// The primary key's columns (the input is routed by them).
    key: Vec<String>,
    /// The table's columns (the input's, before its change column), all nullable: a delete's
    /// row holds only its key.
    rows: SchemaRef,
    /// The table's columns, then the change column.
    output: SchemaRef,
    table: KeyedTable,
    /// Made on the first batch (or restore).
    latest: Option<Latest>,
    /// Checkpoints are incremental: the keys changed since the last snapshot are listed.
    incremental: bool,
}

struct Latest {
    keys: GroupKeys,
    rows: RowConverter,
    /// By key id; `None` once deleted.
    row: Vec<Option<OwnedRow>>,
    /// With incremental checkpoints, the ids upserted or deleted since the last snapshot
    /// (flagged by id, listed once).
    changed: Option<(Vec<bool>, Vec<usize>)>,
}

/// One change the batch makes: to emit the kept row (taken out of the state) or a batch row.
enum Emitted {
    Kept(OwnedRow, Change),
    New(usize, Change),
}

impl Clone for UpsertNormalize {
    /// A fresh instance with the same plan.
    fn clone(&self) -> Self {
        Self {
            key: self.key.clone(),
            rows: self.rows.clone(),
            output: self.output.clone(),
            table: self.table.clone(),
            latest: None,
            incremental: false,
        }
    }
}

impl UpsertNormalize {
    /// Over rows of `rows` (each with a change column: a retraction deletes its key, anything
    /// else upserts it), keyed by `key`; emits `output` (`rows` as declared, then the change
    /// column).
    pub fn new(key: Vec<String>, rows: SchemaRef, output: SchemaRef) -> Result<Self> {
        let nullable: Vec<Field> = rows.fields().iter().map(|f| f.as_ref().clone().with_nullable(true)).collect();
        let rows = Arc::new(Schema::new(nullable));
        for name in &key {
            rows.field_with_name(name)?;
        }
        let table = KeyedTable::new(rows.fields().iter().cloned());
        Ok(Self { key, rows, output, table, latest: None, incremental: false })
    }

    fn state(&mut self) -> Result<&mut Latest> {
        if self.latest.is_none() {
            let key_types = self
                .key
                .iter()
                .map(|n| Ok(self.rows.field_with_name(n)?.data_type().clone()))
                .collect::<Result<Vec<_>>>()?;
            let fields = self.rows.fields().iter().map(|f| SortField::new(f.data_type().clone())).collect();
            self.latest = Some(Latest {
                keys: GroupKeys::new(&key_types)?,
                rows: RowConverter::new(fields)?,
                row: Vec::new(),
                changed: self.incremental.then(Default::default),
            });
        }
        self.latest.as_mut().ok_or_else(|| Error::Graph("upsert state missing".into()))
    }

    /// Applies `rows` (the table's columns) with their `kinds` to the state, in order; returns
    /// the changes they make.
    fn apply(&mut self, rows: &RecordBatch, kinds: &[Change]) -> Result<Vec<Emitted>> {
        let key_columns = self
            .key
            .iter()
            .map(|name| rows.column_by_name(name).cloned().ok_or_else(|| Error::Graph(format!("'{name}' is missing"))))
            .collect::<Result<Vec<ArrayRef>>>()?;
        let latest = self.state()?;
        let keys = latest.keys.encode(&key_columns)?;
        let encoded = latest.rows.convert_columns(rows.columns())?;
        let mut emitted = Vec::new();
        for (i, kind) in kinds.iter().enumerate() {
            let (id, new) = latest.keys.intern(&keys, i)?;
            if new {
                latest.row.push(None);
            }
            let slot = &mut latest.row[id];
            if kind.is_retraction() {
                match slot.take() {
                    Some(kept) => emitted.push(Emitted::Kept(kept, Change::Delete)),
                    None => continue,
                }
            } else {
                let row = encoded.row(i);
                match slot.as_ref() {
                    Some(kept) if kept.row() == row => continue,
                    Some(_) => {
                        if let Some(kept) = slot.replace(row.owned()) {
                            emitted.push(Emitted::Kept(kept, Change::UpdateBefore));
                        }
                        emitted.push(Emitted::New(i, Change::UpdateAfter));
                    }
                    None => {
                        *slot = Some(row.owned());
                        emitted.push(Emitted::New(i, Change::Insert));
                    }
                }
            }
            if let Some((flags, ids)) = &mut latest.changed {
                flags.resize(latest.row.len(), false);
                if !std::mem::replace(&mut flags[id], true) {
                    ids.push(id);
                }
            }
        }
        Ok(emitted)
    }

    /// The changes as one batch of `output`, in order.
    fn emit(&mut self, rows: &RecordBatch, emitted: Vec<Emitted>, out: &mut Collector) -> Result<()> {
        if emitted.is_empty() {
            return Ok(());
        }
        let news = UInt32Array::from_iter_values(emitted.iter().filter_map(|e| match e {
            Emitted::New(row, _) => Some(*row as u32),
            Emitted::Kept(..) => None,
        }));
        let new: Vec<ArrayRef> =
            rows.columns().iter().map(|c| take(c, &news, None)).collect::<std::result::Result<_, _>>()?;
        let kept_rows: Vec<&OwnedRow> = emitted
            .iter()
            .filter_map(|e| match e {
                Emitted::Kept(row, _) => Some(row),
                Emitted::New(..) => None,
            })
            .collect();
        let kept = self.state()?.rows.convert_rows(kept_rows.iter().map(|r| r.row()))?;
        // (array, row): 0 the kept rows, 1 the batch's, in the order of the changes.
        let (mut next_kept, mut next_new) = (0, 0);
        let mut order = Vec::with_capacity(emitted.len());
        let mut kinds = Vec::with_capacity(emitted.len());
        for change in &emitted {
            match change {
                Emitted::Kept(_, kind) => {
                    order.push((0, next_kept));
                    next_kept += 1;
                    kinds.push(*kind);
                }
                Emitted::New(_, kind) => {
                    order.push((1, next_new));
                    next_new += 1;
                    kinds.push(*kind);
                }
            }
        }
        let mut columns = (0..new.len())
            .map(|c| interleave(&[kept[c].as_ref(), new[c].as_ref()], &order))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        columns.push(change_array(&kinds));
        out.emit(RecordBatch::try_new(self.output.clone(), columns)?);
        Ok(())
    }

    /// The snapshot table of keys `ids`' latest rows, and the key columns of those deleted.
    fn latest_rows(&mut self, ids: &[usize]) -> Result<(StateTable, Vec<usize>)> {
        let (schema, rows_schema, key) = (self.table.schema().clone(), self.rows.clone(), self.key.clone());
        let latest = self.state()?;
        let (live, deleted): (Vec<usize>, Vec<usize>) = ids.iter().partition(|&&id| latest.row[id].is_some());
        let columns =
            latest.rows.convert_rows(live.iter().filter_map(|&id| latest.row[id].as_ref().map(|r| r.row())))?;
        let rows = RecordBatch::try_new(rows_schema, columns)?;
        let mut all: Vec<ArrayRef> = vec![Arc::new(key_hashes(&rows, &key)?)];
        all.extend(rows.columns().iter().cloned());
        let batch = RecordBatch::try_new(schema.clone(), all)?;
        Ok((StateTable { name: LATEST.into(), schema, batches: vec![batch], delta: None }, deleted))
    }
}

#[async_trait]
impl Operator for UpsertNormalize {
    /// Working state: a bounded run's final checkpoint leaves it out.
    fn state_needed_after_finish(&self) -> bool {
        false
    }

    async fn open(&mut self, info: &crate::SubtaskInfo, restored: RestoredState) -> Result<()> {
        self.incremental = info.incremental;
        // The restored rows were emitted before the snapshot.
        for batch in restored.table(LATEST) {
            let rows = RecordBatch::try_new(self.rows.clone(), self.table.read_all(batch)?)?;
            self.apply(&rows, &vec![Change::Insert; rows.num_rows()])?;
        }
        // Changes count from the restored state, which a continued chain already holds.
        if let Some(changed) = self.state()?.changed.as_mut() {
            *changed = Default::default();
        }
        Ok(())
    }

    async fn process_batch(&mut self, _input: usize, batch: RecordBatch, out: &mut Collector) -> Result<()> {
        let kinds = changes(&batch)?;
        let width = self.rows.fields().len();
        let rows = RecordBatch::try_new(self.rows.clone(), batch.columns()[..width].to_vec())?;
        let emitted = self.apply(&rows, &kinds)?;
        self.emit(&rows, emitted, out)
    }

    async fn process_watermark(&mut self, _watermark: i64, _out: &mut Collector) -> Result<()> {
        // Updating results carry no event time on.
        Ok(())
    }

    async fn snapshot(&mut self, _checkpoint_id: u64) -> Result<Vec<StateTable>> {
        let latest = self.state()?;
        if let Some(changed) = &mut latest.changed {
            *changed = Default::default();
        }
        let ids: Vec<usize> = (0..latest.row.len()).collect();
        Ok(vec![self.latest_rows(&ids)?.0])
    }

    /// The keys upserted since the last snapshot, and those deleted as tombstones.
    async fn snapshot_changes(&mut self, _checkpoint_id: u64) -> Result<Option<Vec<StateTable>>> {
        let Some((_, ids)) = self.state()?.changed.take() else { return Ok(None) };
        self.state()?.changed = Some(Default::default());
        let (mut table, deleted) = self.latest_rows(&ids)?;
        let key_columns = self.state()?.keys.columns(&deleted)?;
        let key_fields: Vec<Field> =
            self.key.iter().map(|name| Ok(self.rows.field_with_name(name)?.clone())).collect::<Result<_>>()?;
        let keys = RecordBatch::try_new(Arc::new(Schema::new(key_fields.clone())), key_columns)?;
        let mut columns: Vec<ArrayRef> = vec![Arc::new(key_hashes(&keys, &self.key)?)];
        columns.extend(keys.columns().iter().cloned());
        let schema = Schema::new([vec![table.schema.field(0).clone()], key_fields].concat());
        let deleted = RecordBatch::try_new(Arc::new(schema), columns)?;
        table.delta = Some(Delta { key: self.key.clone(), deleted });
        Ok(Some(vec![table]))
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::DataType;

    use super::*;
    use crate::SubtaskInfo;
    use crate::changelog::changelog_schema;

    fn rows() -> SchemaRef {
        Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, true), Field::new("name", DataType::Utf8, true)]))
    }

    /// The table declares its name NOT NULL, which a delete's row does not hold.
    fn normalize() -> UpsertNormalize {
        let declared =
            Schema::new(vec![Field::new("id", DataType::Int64, false), Field::new("name", DataType::Utf8, false)]);
        UpsertNormalize::new(vec!["id".into()], Arc::new(declared.clone()), changelog_schema(&declared)).unwrap()
    }

    /// `(id, name)` upserts, a `None` name a tombstone of the id (as the source reads it).
    fn batch(records: &[(i64, Option<&str>)]) -> RecordBatch {
        let kinds: Vec<Change> =
            records.iter().map(|(_, name)| if name.is_some() { Change::UpdateAfter } else { Change::Delete }).collect();
        RecordBatch::try_new(
            changelog_schema(&rows()),
            vec![
                Arc::new(Int64Array::from_iter_values(records.iter().map(|(id, _)| *id))),
                Arc::new(StringArray::from_iter(records.iter().map(|(_, name)| *name))),
                change_array(&kinds),
            ],
        )
        .unwrap()
    }

    async fn feed(operator: &mut UpsertNormalize, records: &[(i64, Option<&str>)]) -> Vec<String> {
        let mut out = Collector::default();
        operator.process_batch(0, batch(records), &mut out).await.unwrap();
        let mut lines = Vec::new();
        for batch in out.batches {
            let kinds = changes(&batch).unwrap();
            let ids = batch.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            let names = batch.column(1).as_any().downcast_ref::<StringArray>().unwrap();
            for (row, kind) in kinds.iter().enumerate() {
                lines.push(format!("{} {} {}", kind.code(), ids.value(row), names.value(row)));
            }
        }
        lines
    }

    /// Upserts and tombstones, several of one key in one batch included, become the changes a
    /// retracting consumer needs; repeats and tombstones of absent keys change nothing.
    #[tokio::test]
    async fn upserts_and_tombstones_become_inserts_updates_and_deletes() {
        let mut op = normalize();
        assert_eq!(
            feed(&mut op, &[(1, Some("a")), (2, Some("b")), (1, Some("c")), (3, None), (2, Some("b"))]).await,
            ["+I 1 a", "+I 2 b", "-U 1 a", "+U 1 c"]
        );
        assert_eq!(
            feed(&mut op, &[(2, None), (2, None), (2, Some("d")), (1, Some("e")), (1, None)]).await,
            ["-D 2 b", "+I 2 d", "-U 1 c", "+U 1 e", "-D 1 e"]
        );
        assert!(feed(&mut op, &[(1, None), (2, Some("d"))]).await.is_empty());
    }

    /// A restored operator holds the latest rows: it updates them rather than inserting again.
    #[tokio::test]
    async fn the_latest_rows_survive_a_restore() {
        let mut op = normalize();
        feed(&mut op, &[(1, Some("a")), (2, Some("b")), (3, Some("c")), (3, None)]).await;
        let tables = op.snapshot(1).await.unwrap();
        assert_eq!(tables[0].batches[0].num_rows(), 2, "a deleted key is not kept");
        let state = RestoredState {
            checkpoint_id: Some(1),
            tables: tables.into_iter().map(|t| (t.name, t.batches)).collect(),
            ..Default::default()
        };
        let mut restored = normalize();
        restored.open(&SubtaskInfo::new("normalize", 0, 1), state).await.unwrap();
        assert_eq!(
            feed(&mut restored, &[(1, Some("a")), (2, Some("x")), (3, Some("c"))]).await,
            ["-U 2 b", "+U 2 x", "+I 3 c"]
        );
    }

    /// Incremental checkpoints: a base, then the keys upserted and deleted, merged as a restore
    /// merges them, hold the rows of a full snapshot taken at the end.
    #[tokio::test]
    async fn a_base_and_its_changes_restore_the_rows_a_full_snapshot_holds() {
        let mut op = normalize();
        let info = SubtaskInfo { incremental: true, ..SubtaskInfo::new("normalize", 0, 1) };
        op.open(&info, RestoredState::default()).await.unwrap();
        feed(&mut op, &[(1, Some("a")), (2, Some("b")), (3, Some("c"))]).await;
        let mut chains = crate::state_table::Chains::new(op.snapshot(1).await.unwrap());
        let mut written = Vec::new();
        // 1 updated, 2 deleted, 4 new; then 2 back, 3 deleted, 1 written again unchanged.
        for records in [&[(1, Some("x")), (2, None), (4, Some("d"))][..], &[(2, Some("y")), (3, None), (1, Some("x"))]]
        {
            feed(&mut op, records).await;
            written.extend(chains.push(op.snapshot_changes(2).await.unwrap().unwrap()));
        }
        assert_eq!(written, [(2, Some(1)), (1, Some(1))], "rows written and keys deleted");
        let full = op.snapshot(4).await.unwrap();
        assert_eq!(full[0].batches[0].num_rows(), 3);
        chains.assert_match(full);
    }
}
