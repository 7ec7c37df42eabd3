//! Equi-joins of two streams. Each input carries its own columns followed by the join key
//! columns (computed upstream and hash-partitioned on, so equal keys meet in one subtask).
//! A row is stored on its side and probed against the other side's stored rows of its key;
//! the pairs that pass the join's other conditions are emitted.
//!
//! How long a stored row is kept decides the kind of join:
//! - an *interval join* (`a.ts BETWEEN b.ts - x AND b.ts + y`) or a *window join* (both sides
//!   grouped into the same windows) keeps a row until the watermark shows that no row that can
//!   still arrive on the other side can match it ([`Expiry`]); its output is append-only, and an
//!   outer join emits a row of its outer side(s) that never matched, padded with nulls, when
//!   it expires;
//! - a *regular join* keeps rows until they have been idle for the time-to-live (processing
//!   time, forever without one). A regular outer (left, right, full) join is updating: a row of
//!   an outer side is emitted padded with nulls at once, and retracted (`-D`) when its first
//!   match arrives.
//!
//! The snapshot holds each side's stored rows keyed by the hash of their join key. Each row
//! has an id of its own on its side, so with incremental checkpoints a side's change is the
//! rows added or changed (matched, read under a TTL) since the last snapshot, and the rows
//! removed (taken back, expired, forgotten) by join key and id: a join key shared by many rows
//! (a price, a category) costs what changed of it, not all its rows again.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, ArrayRef, BooleanArray, Int64Array, UInt32Array, UInt64Array, new_null_array};
use datafusion::arrow::compute::{cast, filter_record_batch, take};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use datafusion::common::HashMap;
use datafusion::physical_expr::PhysicalExpr;
use hashbrown::hash_map::EntryRef;
use smallvec::SmallVec;

use crate::changelog::{Change, change_array, changes, is_changelog};
use crate::error::{Error, Result};
use crate::operator::{Collector, Delta, Operator, RestoredState, StateTable};
use crate::operators::row_segments::{RowSegments, RowSlot};
use crate::operators::state_ttl::{StateTtl, now_ms};
use crate::operators::unindexed_rows::UnindexedRows;
use crate::partition::key_hashes;
use crate::state_table::KeyedTable;

const MATCHED: &str = "__matched";
const EXPIRES_AT: &str = "__expires_at";
const LAST_ACCESS: &str = "__last_access_ms";
/// A stored row's id on its side: with the join key, the row's key in incremental snapshots.
const ROW_ID: &str = "__row_id";
/// The most rows in one gathered batch of a snapshot.
const SNAPSHOT_ROWS: usize = 64 * 1024;
/// The fewest rows stored one after another that a snapshot writes as slices, not gathered.
const MIN_SLICED_RUN: usize = 256;

/// The name of the `i`-th join key column on both inputs.
pub fn join_key_column(i: usize) -> String {
    format!("__join_key_{i}")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinKind {
    Inner,
    /// Every left row: joined, or padded with nulls when it has no match.
    Left,
    /// Every right row: joined, or padded with nulls when it has no match.
    Right,
    /// Every row of both sides: joined, or padded with nulls when it has no match.
    Full,
    /// The left rows that have a match, once each, left columns only.
    LeftSemi,
    /// The left rows that have no match, left columns only.
    LeftAnti,
}

impl JoinKind {
    /// Whether rows of `side` (0 left, 1 right) without a match are output (padded with nulls,
    /// or alone for an anti join).
    fn emits_unmatched(self, side: usize) -> bool {
        match self {
            JoinKind::Left | JoinKind::LeftAnti => side == 0,
            JoinKind::Right => side == 1,
            JoinKind::Full => true,
            JoinKind::Inner | JoinKind::LeftSemi => false,
        }
    }

    /// Whether the output is pairs of both sides' columns (not the left side's alone).
    fn emits_pairs(self) -> bool {
        matches!(self, JoinKind::Inner | JoinKind::Left | JoinKind::Right | JoinKind::Full)
    }
}

/// A stored row expires when the watermark reaches the value of its `column` (an event time,
/// or a window start) plus `after_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expiry {
    pub column: usize,
    pub after_ms: i64,
    pub late: LateRows,
}

/// What becomes of a row that arrives when the watermark has passed its expiry already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LateRows {
    /// Joined with the rows still kept, and emitted NULL-padded by an outer side if none
    /// matched, as Flink's interval join does.
    Match,
    /// Dropped and counted (`late_records_dropped`; a NULL time as `null_time_records`), as
    /// Flink's window join does: its window was joined and emitted already.
    Drop,
}

/// One input of a join.
#[derive(Debug, Clone)]
pub struct JoinSide {
    /// The side's own columns (the input has the key columns after them).
    pub schema: SchemaRef,
    pub expiry: Option<Expiry>,
}

/// A join key in Arrow's row format: stored rows are found by a batch's key bytes without
/// making a key per row. Up to 16 bytes (an integer key takes 9) are held in place: with keys
/// as distinct as Nexmark q7's prices, an allocation per key and a pointer followed at every
/// comparison were a fifth of the join's time.
type Key = SmallVec<[u8; 16]>;

/// The stored rows of one join key, in the order they came. Most keys of a join on an event's
/// own attributes (q7's prices) hold one row: it is kept in place, not allocated.
type KeyRows = SmallVec<[Stored; 1]>;

#[derive(Clone, Copy)]
struct Stored {
    /// The row (its columns, then its join key's) among its side's stored rows.
    row: RowSlot,
    /// How many output rows it took part in (a left join's unmatched rows have none).
    matched: i64,
    expires_at: i64,
    last_access_ms: i64,
    /// Unique among its side's rows of its join key (ids are never reused).
    id: u64,
    /// Added or changed since the last snapshot.
    dirty: bool,
}

/// A two-input equi-join (input 0 is the left side).
pub struct StreamingJoin {
    kind: JoinKind,
    sides: [JoinSide; 2],
    key_types: Vec<DataType>,
    /// The join's other conditions, over left columns then right columns.
    filter: Option<Arc<dyn PhysicalExpr>>,
    /// Left columns then right columns (nullable on an outer join's inner side).
    combined: SchemaRef,
    /// The output: the combined columns (inner and outer joins) or the left ones (semi and
    /// anti joins), and the change column for an updating join.
    output: SchemaRef,
    ttl: StateTtl,
    converters: Option<Converters>,
    stored: [HashMap<Key, KeyRows>; 2],
    /// An inner join's expiring rows that no probe has asked for yet, outside `stored` and
    /// `expiring` ([`UnindexedRows`]); every other kind of join keeps none here.
    unindexed: [UnindexedRows<Key, Stored>; 2],
    /// Each side's stored rows: its columns, then the join key columns, as they arrived.
    segments: [RowSegments; 2],
    /// Keys of stored rows by expiry time.
    expiring: [BTreeMap<i64, Vec<Key>>; 2],
    watermark: i64,
    /// A side whose input has ended (a bounded side input read to its end): the other side's
    /// rows need not wait for rows of it any more.
    ended: [bool; 2],
    /// A side that has delivered a changelog: its stored rows are kept for its retractions.
    changelog: [bool; 2],
    /// The subtask's counters (late rows dropped).
    metrics: Arc<crate::metrics::OperatorMetrics>,
    /// Each side's next row id.
    next_id: [u64; 2],
    /// With incremental checkpoints: each side's rows changed since the last snapshot.
    changes: Option<SideChanges>,
}

/// What changed of each side's stored rows since the last snapshot.
#[derive(Default)]
struct SideChanges {
    /// The join keys with rows added or changed (those rows are marked dirty), listed when a
    /// row of the key turns dirty: a key may be listed more than once, its dirty rows are
    /// written once. A list, not a set: hashing every new key into a set was a tenth of
    /// Nexmark q7, where nearly every bid's price is a key of its own.
    keys: [Vec<Key>; 2],
    /// The rows removed that an earlier snapshot holds: join key and id.
    removed: [Vec<(Key, u64)>; 2],
    /// Rows with an id below this were in the state at the last snapshot (or restore), so an
    /// earlier snapshot holds them; a row added since and removed before the next one needs
    /// no tombstone (a window's rows joined and expired between two checkpoints).
    persisted_below: [u64; 2],
    /// A side whose rows were all dropped at once (its other input ended): written whole.
    whole: [bool; 2],
}

impl SideChanges {
    /// Changes from now on, when every row with an id below `next_id` is in a snapshot.
    fn after(next_id: [u64; 2]) -> SideChanges {
        SideChanges { persisted_below: next_id, ..SideChanges::default() }
    }

    /// A row of `key` on `side` turned dirty (added, or changed while clean).
    fn changed(changes: &mut Option<SideChanges>, side: usize, key: &[u8]) {
        if let Some(changes) = changes {
            changes.keys[side].push(Key::from_slice(key));
        }
    }

    /// Row `id` of `key` on `side` is gone.
    fn removed(changes: &mut Option<SideChanges>, side: usize, key: &[u8], id: u64) {
        if let Some(changes) = changes
            && id < changes.persisted_below[side]
        {
            changes.removed[side].push((Key::from_slice(key), id));
        }
    }
}

/// A batch of one side, split for joining.
struct SideRows {
    /// The side's own columns.
    values: Vec<ArrayRef>,
    /// Each row's join key in row format.
    key_rows: Rows,
    /// Rows with a NULL key, which match nothing.
    null_key: Vec<bool>,
}

/// Candidate pairs of a batch's rows with the other side's stored rows.
struct Probe {
    /// (row of the batch, index among the other side's stored rows of its key).
    pairs: Vec<(u32, usize)>,
    /// Whether each pair passes the join's other conditions.
    passing: Vec<bool>,
    /// The pairs as rows of the combined schema (none without pairs).
    joined: Option<RecordBatch>,
}

struct Converters {
    keys: RowConverter,
    values: [RowConverter; 2],
}

impl Clone for StreamingJoin {
    fn clone(&self) -> Self {
        Self::new(
            self.kind,
            self.sides.clone(),
            self.key_types.clone(),
            self.filter.clone(),
            self.combined.clone(),
            self.output.clone(),
            self.ttl.ttl(),
        )
    }
}

fn converter(types: impl Iterator<Item = DataType>) -> Result<RowConverter> {
    Ok(RowConverter::new(types.map(SortField::new).collect())?)
}

fn int_column(batch: &RecordBatch, name: &str) -> Result<Int64Array> {
    let column = batch.column(batch.schema().index_of(name)?).clone();
    column
        .as_any()
        .downcast_ref::<Int64Array>()
        .cloned()
        .ok_or_else(|| Error::Graph(format!("join state column '{name}' is not Int64")))
}

impl StreamingJoin {
    /// A side's table: the join key columns, the side's row, and whether it matched, when it
    /// expires and when it was last read.
    fn side_table(&self, side: usize) -> KeyedTable {
        let mut fields = Vec::new();
        for (i, data_type) in self.key_types.iter().enumerate() {
            fields.push(Field::new(join_key_column(i), data_type.clone(), true));
        }
        for (i, field) in self.sides[side].schema.fields().iter().enumerate() {
            fields.push(Field::new(format!("c{i}"), field.data_type().clone(), true));
        }
        for name in [MATCHED, EXPIRES_AT, LAST_ACCESS] {
            fields.push(Field::new(name, DataType::Int64, false));
        }
        fields.push(Field::new(ROW_ID, DataType::UInt64, false));
        KeyedTable::new(fields)
    }

    pub fn new(
        kind: JoinKind,
        sides: [JoinSide; 2],
        key_types: Vec<DataType>,
        filter: Option<Arc<dyn PhysicalExpr>>,
        combined: SchemaRef,
        output: SchemaRef,
        ttl: Option<Duration>,
    ) -> Self {
        let segments = [0, 1].map(|side: usize| {
            let values = sides[side].schema.fields().iter().map(|f| f.data_type().clone());
            RowSegments::new(values.chain(key_types.iter().cloned()).collect())
        });
        Self {
            kind,
            sides,
            key_types,
            filter,
            combined,
            output,
            ttl: StateTtl::new(ttl),
            converters: None,
            stored: [HashMap::default(), HashMap::default()],
            unindexed: [UnindexedRows::default(), UnindexedRows::default()],
            segments,
            expiring: [BTreeMap::new(), BTreeMap::new()],
            watermark: i64::MIN,
            ended: [false; 2],
            changelog: [false; 2],
            metrics: Arc::default(),
            next_id: [0; 2],
            changes: None,
        }
    }

    /// Whether `side`'s rows must be stored: for rows of the other side still to come, or to
    /// be taken back (a changelog), or until they expire (window and interval joins, whose
    /// outer rows are emitted at expiry). A regular join of a stream with a bounded side input
    /// keeps the stream's rows only until the side input has ended.
    fn keeps(&self, side: usize) -> bool {
        !self.ended[1 - side] || self.changelog[side] || self.sides[side].expiry.is_some()
    }

    /// Whether the output is a changelog: a join of an updating input, or a regular
    /// (non-expiring) outer or anti join, whose unmatched rows are taken back when a match
    /// arrives.
    pub fn is_updating(kind: JoinKind, left_expiry: Option<Expiry>, inputs_updating: bool) -> bool {
        inputs_updating || ((kind.emits_unmatched(0) || kind.emits_unmatched(1)) && left_expiry.is_none())
    }

    fn updating(&self) -> bool {
        is_changelog(&self.output)
    }

    fn converters(&mut self) -> Result<&Converters> {
        if self.converters.is_none() {
            let values = |side: &JoinSide| converter(side.schema.fields().iter().map(|f| f.data_type().clone()));
            self.converters = Some(Converters {
                keys: converter(self.key_types.iter().cloned())?,
                values: [values(&self.sides[0])?, values(&self.sides[1])?],
            });
        }
        self.converters.as_ref().ok_or_else(|| Error::Graph("join row converters missing".into()))
    }

    /// Pairs: `left` and `right` columns side by side, each already taken row by row.
    fn joined(&self, left: Vec<ArrayRef>, right: Vec<ArrayRef>, rows: usize) -> Result<RecordBatch> {
        let columns = left
            .into_iter()
            .chain(right)
            .zip(self.combined.fields())
            .map(|(c, f)| if c.data_type() == f.data_type() { Ok(c) } else { cast(&c, f.data_type()) })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        Ok(RecordBatch::try_new_with_options(self.combined.clone(), columns, &options)?)
    }

    /// Emits joined pairs (inner and outer joins).
    fn emit_pairs(&self, pairs: RecordBatch, change: Change, out: &mut Collector) -> Result<()> {
        self.emit(pairs.columns().to_vec(), pairs.num_rows(), change, out)
    }

    /// Emits rows of `side` on their own: padded with nulls where the other side's columns go
    /// for an outer join, as they are for semi and anti joins (left rows only).
    fn emit_unmatched(
        &self,
        side: usize,
        own: Vec<ArrayRef>,
        rows: usize,
        change: Change,
        out: &mut Collector,
    ) -> Result<()> {
        if !self.kind.emits_pairs() {
            return self.emit(own, rows, change, out);
        }
        let left_width = self.sides[0].schema.fields().len();
        let nulls = |fields: &[Arc<Field>]| fields.iter().map(|f| new_null_array(f.data_type(), rows)).collect();
        let (left, right) = match side {
            0 => (own, nulls(&self.combined.fields()[left_width..])),
            _ => (nulls(&self.combined.fields()[..left_width]), own),
        };
        let pairs = self.joined(left, right, rows)?;
        self.emit(pairs.columns().to_vec(), rows, change, out)
    }

    fn emit(&self, mut columns: Vec<ArrayRef>, rows: usize, change: Change, out: &mut Collector) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        // The columns have the output's types already (the pair schema's, or the left side's).
        if self.updating() {
            columns.push(change_array(&vec![change; rows]));
        }
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        out.emit(RecordBatch::try_new_with_options(self.output.clone(), columns, &options)?);
        Ok(())
    }

    /// Stored rows (released ones too, before a compaction) as columns of their side.
    fn slots_to_columns(&self, side: usize, slots: &[RowSlot]) -> Result<Vec<ArrayRef>> {
        self.segments[side].gather(slots, 0..self.sides[side].schema.fields().len())
    }

    /// Gathers each side's live rows into new segments once the removed ones outnumber them.
    fn compact_segments(&mut self) -> Result<()> {
        let sides = self.stored.iter_mut().zip(&mut self.unindexed).zip(&mut self.segments);
        for ((stored, unindexed), segments) in sides {
            if segments.needs_compaction() {
                let indexed = stored.values_mut().flat_map(|rows| rows.iter_mut());
                segments.compact(indexed.chain(unindexed.rows_mut()).map(|s| &mut s.row))?;
            }
        }
        Ok(())
    }

    /// Whether `side` holds rows outside its index until a probe asks for them: an inner
    /// join's expiring rows (no row of it is emitted unmatched, so expiring one is dropping
    /// it), while neither input is a changelog (whose retractions look rows up by key).
    fn holds_unindexed(&self, side: usize) -> bool {
        self.kind == JoinKind::Inner && self.sides[side].expiry.is_some() && !self.changelog.contains(&true)
    }

    /// Puts `side`'s rows of `keys` that are not in its index into it, before a probe of
    /// them; all of them once scanning has cost more than indexing them would have.
    fn index_rows_of(&mut self, side: usize, keys: &[&[u8]]) {
        let found = self.unindexed[side].take_matching(keys);
        self.index(side, found);
        if self.unindexed[side].worth_indexing() {
            self.index_all(side);
        }
    }

    /// Puts every row of `side` held outside its index into it.
    fn index_all(&mut self, side: usize) {
        let rows = self.unindexed[side].take_all();
        self.index(side, rows);
    }

    /// Indexes `rows` of `side`: stored by key, listed to expire, marked changed.
    fn index(&mut self, side: usize, rows: Vec<(Key, Stored)>) {
        for (key, stored) in rows {
            self.expire_at(side, stored.expires_at, vec![key.clone()]);
            if !self.store(side, &key, stored) {
                SideChanges::changed(&mut self.changes, side, &key);
            }
        }
    }

    /// Removes rows whose expiry the watermark has reached; an outer join emits the rows of its
    /// outer side(s) that never matched.
    fn expire(&mut self, watermark: i64, out: &mut Collector) -> Result<()> {
        for side in 0..2 {
            // Held outside the index only by an inner join: nothing to emit, only to drop.
            for (key, row) in self.unindexed[side].expire(watermark, |row| row.expires_at) {
                self.segments[side].release();
                SideChanges::removed(&mut self.changes, side, &key, row.id);
            }
            let mut unmatched: Vec<RowSlot> = Vec::new();
            let emits_unmatched = self.kind.emits_unmatched(side);
            let (stored, segments, changes) = (&mut self.stored[side], &mut self.segments[side], &mut self.changes);
            while let Some(entry) = self.expiring[side].first_entry() {
                if *entry.key() > watermark {
                    break;
                }
                for key in entry.remove() {
                    // One lookup finds the rows and, once they are all gone, removes the key.
                    let EntryRef::Occupied(mut rows) = stored.entry_ref(&key[..]) else { continue };
                    rows.get_mut().retain(|row| {
                        let expired = row.expires_at <= watermark;
                        if expired {
                            if emits_unmatched && row.matched == 0 {
                                unmatched.push(row.row);
                            }
                            segments.release();
                            SideChanges::removed(changes, side, &key, row.id);
                        }
                        !expired
                    });
                    if rows.get().is_empty() {
                        rows.remove();
                    }
                }
            }
            if !unmatched.is_empty() {
                // Released, but readable until the compaction below.
                let own = self.slots_to_columns(side, &unmatched)?;
                self.emit_unmatched(side, own, unmatched.len(), Change::Insert, out)?;
            }
        }
        self.compact_segments()
    }

    /// Adds rows of `side` (append-only rows, or a changelog's `+I` and `+U`): each is stored
    /// and joined with the other side's stored rows of its key.
    fn add(&mut self, side: usize, batch: RecordBatch, now: i64, out: &mut Collector) -> Result<()> {
        let other = 1 - side;
        let SideRows { values, key_rows, null_key: has_null_key } = self.side_rows(side, &batch)?;
        let times: Option<Int64Array> = match self.sides[side].expiry {
            Some(expiry) => {
                let millis = cast(&values[expiry.column], &DataType::Timestamp(TimeUnit::Millisecond, None))?;
                cast(&millis, &DataType::Int64)?.as_any().downcast_ref::<Int64Array>().cloned()
            }
            None => None,
        };
        if self.unindexed[other].len() > 0 {
            let keys: Vec<&[u8]> =
                (0..batch.num_rows()).filter(|r| !has_null_key[*r]).map(|r| key_rows.row(r).data()).collect();
            self.index_rows_of(other, &keys);
        }
        let probe = self.probe(side, &values, &key_rows, (0..batch.num_rows()).filter(|r| !has_null_key[*r]))?;
        let Probe { pairs, passing, joined } = probe;
        if let Some(joined) = joined {
            // Stored rows of the other side matched for the first time: a semi join emits its
            // left ones, an updating outer or anti join takes back what it emitted for them
            // unmatched.
            let change = match self.kind {
                JoinKind::LeftSemi if other == 0 => Some(Change::Insert),
                kind if self.updating() && kind.emits_unmatched(other) => Some(Change::Delete),
                _ => None,
            };
            if let Some(change) = change {
                let mut first: Vec<(&[u8], usize)> = Vec::new();
                let mut seen = HashSet::new();
                for ((row, i), pass) in pairs.iter().zip(&passing) {
                    let key = key_rows.row(*row as usize).data();
                    if *pass
                        && self.stored[other].get(key).is_some_and(|rows| rows[*i].matched == 0)
                        && seen.insert((key, *i))
                    {
                        first.push((key, *i));
                    }
                }
                if !first.is_empty() {
                    let own = self.stored_columns(other, &first)?;
                    self.emit_unmatched(other, own, first.len(), change, out)?;
                }
            }
            if self.kind.emits_pairs() {
                self.emit_pairs(
                    filter_record_batch(&joined, &BooleanArray::from(passing.clone()))?,
                    Change::Insert,
                    out,
                )?;
            }
            for ((row, i), pass) in pairs.iter().zip(&passing) {
                let key = key_rows.row(*row as usize).data();
                if *pass && let Some(rows) = self.stored[other].get_mut(key) {
                    rows[*i].matched += 1;
                    rows[*i].last_access_ms = now;
                    // A key with a dirty row is among the changed ones already.
                    if !std::mem::replace(&mut rows[*i].dirty, true) {
                        SideChanges::changed(&mut self.changes, other, key);
                    }
                }
            }
        }
        let mut matched = vec![0i64; batch.num_rows()];
        for ((row, _), pass) in pairs.iter().zip(&passing) {
            matched[*row as usize] += i64::from(*pass);
        }
        // Arriving rows: a semi join emits the matched left ones; an updating outer or anti join
        // the unmatched ones of an outer side at once (an expiring one waits for their expiry).
        let emit: Option<Vec<u32>> = match self.kind {
            JoinKind::LeftSemi if side == 0 => {
                Some((0..batch.num_rows() as u32).filter(|r| matched[*r as usize] > 0).collect())
            }
            kind if self.updating() && kind.emits_unmatched(side) => {
                Some((0..batch.num_rows() as u32).filter(|r| matched[*r as usize] == 0).collect())
            }
            _ => None,
        };
        if let Some(rows) = emit.filter(|r| !r.is_empty()) {
            let indices = UInt32Array::from(rows);
            let own = values.iter().map(|c| take(c, &indices, None)).collect::<std::result::Result<Vec<_>, _>>()?;
            self.emit_unmatched(side, own, indices.len(), Change::Insert, out)?;
        }
        // Rows of a stream whose bounded side input has ended are met, never kept.
        if !self.keeps(side) {
            return Ok(());
        }
        // The rows kept, with when each expires.
        let mut kept: Vec<(u32, i64)> = Vec::with_capacity(batch.num_rows());
        for row in 0..batch.num_rows() {
            let expires_at = match (&times, self.sides[side].expiry) {
                (Some(times), Some(expiry)) if times.is_valid(row) => times.value(row).saturating_add(expiry.after_ms),
                (Some(_), _) => i64::MIN, // no event time: it can never be matched later
                _ => i64::MAX,
            };
            let late = expires_at <= self.watermark;
            if late && self.sides[side].expiry.is_some_and(|e| e.late == LateRows::Drop) {
                let null_time = times.as_ref().is_some_and(|t| !t.is_valid(row));
                self.metrics.dropped(u64::from(!null_time), u64::from(null_time));
                continue;
            }
            if has_null_key[row] || late {
                if late && self.kind.emits_unmatched(side) && !self.updating() && matched[row] == 0 {
                    let own = values.iter().map(|c| c.slice(row, 1)).collect();
                    self.emit_unmatched(side, own, 1, Change::Insert, out)?;
                }
                continue;
            }
            kept.push((row as u32, expires_at));
        }
        let all = kept.len() == batch.num_rows();
        let rows: Vec<u32> = if all { Vec::new() } else { kept.iter().map(|(row, _)| *row).collect() };
        let first = self.segments[side].push(batch.columns(), (!all).then_some(rows.as_slice()))?;
        let held = self.holds_unindexed(side);
        // Keys of a run of rows that expire at the same time, added to the expiry list at once
        // (rows of a batch mostly come in time order, many in the same millisecond).
        let mut expiring: Option<(i64, Vec<Key>)> = None;
        for (slot, (row, expires_at)) in (first..).zip(kept) {
            let key = key_rows.row(row as usize).data();
            let id = self.next_id[side];
            self.next_id[side] += 1;
            let matched = matched[row as usize];
            let stored = Stored { row: slot, matched, expires_at, last_access_ms: now, id, dirty: true };
            if held {
                self.unindexed[side].push(expires_at, Key::from_slice(key), stored);
                continue;
            }
            if self.sides[side].expiry.is_some() {
                match &mut expiring {
                    Some((at, keys)) if *at == expires_at => keys.push(Key::from_slice(key)),
                    run => {
                        if let Some((at, keys)) = run.replace((expires_at, vec![Key::from_slice(key)])) {
                            self.expire_at(side, at, keys);
                        }
                    }
                }
            }
            // A key with a dirty row is among the changed ones already.
            if !self.store(side, key, stored) {
                SideChanges::changed(&mut self.changes, side, key);
            }
        }
        if let Some((at, keys)) = expiring {
            self.expire_at(side, at, keys);
        }
        Ok(())
    }

    /// Keeps `stored` among `side`'s rows of `key` (one hash lookup); whether the key's last
    /// row was dirty already.
    fn store(&mut self, side: usize, key: &[u8], stored: Stored) -> bool {
        match self.stored[side].entry_ref(key) {
            EntryRef::Occupied(mut rows) => {
                let dirty = rows.get().last().is_some_and(|row| row.dirty);
                rows.get_mut().push(stored);
                dirty
            }
            EntryRef::Vacant(place) => {
                place.insert_with_key(Key::from_slice(key), smallvec::smallvec![stored]);
                false
            }
        }
    }

    /// Rows of `keys` on `side` expire at `at`.
    fn expire_at(&mut self, side: usize, at: i64, keys: Vec<Key>) {
        match self.expiring[side].entry(at) {
            std::collections::btree_map::Entry::Vacant(place) => {
                place.insert(keys);
            }
            std::collections::btree_map::Entry::Occupied(mut listed) => listed.get_mut().extend(keys),
        }
    }

    /// A batch of `side` (its columns, then the key columns) split for joining.
    fn side_rows(&mut self, side: usize, batch: &RecordBatch) -> Result<SideRows> {
        let width = self.sides[side].schema.fields().len();
        let values = batch.columns()[..width].to_vec();
        let converters = self.converters()?;
        let key_rows = converters.keys.convert_columns(&batch.columns()[width..])?;
        let null_key = (0..batch.num_rows()).map(|r| batch.columns()[width..].iter().any(|c| c.is_null(r))).collect();
        Ok(SideRows { values, key_rows, null_key })
    }

    /// Takes back rows of `side` (a changelog's `-U` and `-D`): each removes one stored row
    /// equal to it and retracts the pairs it was in. Rows of the other side left without a
    /// match are unmatched again (an outer join emits them padded, an anti join alone; a semi
    /// join takes its left rows back), and a taken-back row that was output unmatched is taken
    /// back as such. A row not in the state (forgotten by the time-to-live) takes nothing back.
    fn take_back(&mut self, side: usize, batch: RecordBatch, out: &mut Collector) -> Result<()> {
        let other = 1 - side;
        let SideRows { values, key_rows, null_key } = self.side_rows(side, &batch)?;
        let rows = batch.num_rows();
        // The stored rows of the batch's keys, encoded as the batch's rows are, to find the
        // ones taken back by equality.
        let mut candidates: Vec<RowSlot> = Vec::new();
        let mut keys_seen = HashSet::new();
        for row in (0..rows).filter(|r| !null_key[*r]) {
            let key = key_rows.row(row).data();
            if keys_seen.insert(key)
                && let Some(stored) = self.stored[side].get(key)
            {
                candidates.extend(stored.iter().map(|s| s.row));
            }
        }
        let candidate_columns = self.slots_to_columns(side, &candidates)?;
        let converter = &self.converters()?.values[side];
        let (wanted_rows, candidate_rows) =
            (converter.convert_columns(&values)?, converter.convert_columns(&candidate_columns)?);
        let encoded: HashMap<RowSlot, usize> = candidates.iter().enumerate().map(|(i, slot)| (*slot, i)).collect();
        let mut removed = vec![false; rows];
        for row in (0..rows).filter(|r| !null_key[*r]) {
            let key = key_rows.row(row).data();
            let Some(stored) = self.stored[side].get_mut(key) else { continue };
            let wanted = wanted_rows.row(row);
            let equal = |s: &Stored| encoded.get(&s.row).is_some_and(|i| candidate_rows.row(*i) == wanted);
            let Some(position) = stored.iter().position(equal) else { continue };
            let gone = stored.remove(position);
            self.segments[side].release();
            if stored.is_empty() {
                self.stored[side].remove(key);
            }
            SideChanges::removed(&mut self.changes, side, key, gone.id);
            removed[row] = true;
        }
        let Probe { pairs, passing, joined } =
            self.probe(side, &values, &key_rows, (0..rows).filter(|r| removed[*r]))?;
        let mut matched = vec![0i64; rows];
        for ((row, _), pass) in pairs.iter().zip(&passing) {
            matched[*row as usize] += i64::from(*pass);
        }
        if let Some(joined) = joined {
            if self.kind.emits_pairs() {
                let taken_back = filter_record_batch(&joined, &BooleanArray::from(passing.clone()))?;
                self.emit_pairs(taken_back, Change::Delete, out)?;
            }
            let mut lost: Vec<(&[u8], usize)> = Vec::new();
            for ((row, i), pass) in pairs.iter().zip(&passing) {
                let key = key_rows.row(*row as usize).data();
                if let (true, Some(stored)) = (*pass, self.stored[other].get_mut(key).and_then(|r| r.get_mut(*i))) {
                    if !std::mem::replace(&mut stored.dirty, true) {
                        SideChanges::changed(&mut self.changes, other, key);
                    }
                    stored.matched -= 1;
                    if stored.matched == 0 {
                        lost.push((key, *i));
                    }
                }
            }
            let change = match self.kind {
                JoinKind::LeftSemi if other == 0 => Some(Change::Delete),
                kind if kind.emits_unmatched(other) => Some(Change::Insert),
                _ => None,
            };
            if let (Some(change), false) = (change, lost.is_empty()) {
                let own = self.stored_columns(other, &lost)?;
                self.emit_unmatched(other, own, lost.len(), change, out)?;
            }
        }
        let own_output: Vec<u32> = match self.kind {
            JoinKind::LeftSemi if side == 0 => (0..rows as u32).filter(|r| matched[*r as usize] > 0).collect(),
            kind if kind.emits_unmatched(side) => (0..rows as u32)
                .filter(|r| null_key[*r as usize] || (removed[*r as usize] && matched[*r as usize] == 0))
                .collect(),
            _ => Vec::new(),
        };
        if !own_output.is_empty() {
            let indices = UInt32Array::from(own_output);
            let own = values.iter().map(|c| take(c, &indices, None)).collect::<std::result::Result<Vec<_>, _>>()?;
            self.emit_unmatched(side, own, indices.len(), Change::Delete, out)?;
        }
        Ok(())
    }

    /// The candidate pairs of `rows` of a batch of `side` (its `values` and `key_rows`) with
    /// the other side's stored rows of their keys, which of them pass the join's other
    /// conditions, and the pairs as rows of the combined schema.
    fn probe(
        &mut self,
        side: usize,
        values: &[ArrayRef],
        key_rows: &Rows,
        rows: impl Iterator<Item = usize>,
    ) -> Result<Probe> {
        let other = 1 - side;
        let mut pairs: Vec<(u32, usize)> = Vec::new();
        for row in rows {
            if let Some(stored) = self.stored[other].get(key_rows.row(row).data()) {
                pairs.extend((0..stored.len()).map(|i| (row as u32, i)));
            }
        }
        let mut passing = vec![false; pairs.len()];
        if pairs.is_empty() {
            return Ok(Probe { pairs, passing, joined: None });
        }
        let indices = UInt32Array::from_iter_values(pairs.iter().map(|p| p.0));
        let mine = values.iter().map(|c| take(c, &indices, None)).collect::<std::result::Result<Vec<_>, _>>()?;
        let positions: Vec<(&[u8], usize)> =
            pairs.iter().map(|(row, i)| (key_rows.row(*row as usize).data(), *i)).collect();
        let theirs = self.stored_columns(other, &positions)?;
        let joined = match side {
            0 => self.joined(mine, theirs, pairs.len())?,
            _ => self.joined(theirs, mine, pairs.len())?,
        };
        if let Some(filter) = &self.filter {
            let mask = filter.evaluate(&joined)?.into_array(joined.num_rows())?;
            let Some(mask) = mask.as_any().downcast_ref::<BooleanArray>() else {
                return Err(Error::Graph(format!("the join condition gave {} values, not booleans", mask.data_type())));
            };
            for (i, pass) in passing.iter_mut().enumerate() {
                *pass = mask.is_valid(i) && mask.value(i);
            }
        } else {
            passing.fill(true);
        }
        Ok(Probe { pairs, passing, joined: Some(joined) })
    }

    /// Stored rows of `side` at (key, index among that key's rows), as the side's columns.
    fn stored_columns(&mut self, side: usize, positions: &[(&[u8], usize)]) -> Result<Vec<ArrayRef>> {
        let stored = &self.stored[side];
        let slots: Vec<RowSlot> =
            positions.iter().filter_map(|(key, i)| stored.get(*key).and_then(|r| r.get(*i)).map(|s| s.row)).collect();
        self.slots_to_columns(side, &slots)
    }

    /// The snapshot table of `side`'s stored rows: all of them, or the dirty ones of `keys`.
    /// Either way the rows written are no longer dirty.
    fn side_snapshot(&mut self, side: usize, keys: Option<&[Key]>) -> Result<StateTable> {
        let schema = self.side_table(side).schema().clone();
        // The dirty rows of `keys`, each once (a key may be listed twice): no longer dirty.
        let mut dirty: Vec<Stored> = Vec::new();
        for key in keys.into_iter().flatten() {
            for row in self.stored[side].get_mut(key).into_iter().flatten() {
                if std::mem::replace(&mut row.dirty, false) {
                    dirty.push(*row);
                }
            }
        }
        // In the order the rows are stored (which keeps each key's rows in their order), so
        // that reading them back walks the segments instead of jumping about them.
        let written: Vec<&Stored> = match keys {
            None => {
                let mut by_slot: Vec<Option<&Stored>> = vec![None; self.segments[side].numbered()];
                for row in self.stored[side].values().flatten() {
                    by_slot[row.row as usize] = Some(row);
                }
                by_slot.into_iter().flatten().collect()
            }
            Some(_) => {
                dirty.sort_unstable_by_key(|row| row.row);
                dirty.iter().collect()
            }
        };
        let columns = self.segments[side].width();
        let mut batches = Vec::new();
        // A run of rows stored one after another is written as slices of the columns they
        // are kept in; rows here and there are gathered, a part at a time (so that a large
        // side's columns are not all made before any is written).
        let mut scattered: Vec<&Stored> = Vec::new();
        let mut start = 0;
        while start < written.len() {
            let first = written[start].row;
            let run = written[start..].iter().zip(first..).take_while(|(row, slot)| row.row == *slot).count();
            let rows = &written[start..start + run];
            start += run;
            if run < MIN_SLICED_RUN {
                scattered.extend(rows);
                if scattered.len() >= SNAPSHOT_ROWS {
                    batches.push(self.gathered_batch(side, &schema, &scattered)?);
                    scattered.clear();
                }
                continue;
            }
            let mut done = 0;
            for columns in self.segments[side].slices(first, run, 0..columns) {
                let len = columns.first().map_or(0, |c| c.len());
                batches.push(self.side_batch(&schema, columns, &rows[done..done + len])?);
                done += len;
            }
        }
        if !scattered.is_empty() {
            batches.push(self.gathered_batch(side, &schema, &scattered)?);
        }
        if batches.is_empty() {
            batches.push(RecordBatch::new_empty(schema.clone()));
        }
        if keys.is_none() {
            self.stored[side].values_mut().flatten().for_each(|row| row.dirty = false);
        }
        Ok(StateTable { name: format!("side_{side}"), schema, batches, delta: None })
    }

    /// A batch of a side's table: `columns` (the side's, then the key's) of the stored rows
    /// `rows`, with what is kept about each.
    fn side_batch(&self, schema: &SchemaRef, mut values: Vec<ArrayRef>, rows: &[&Stored]) -> Result<RecordBatch> {
        let key_columns = values.split_off(values.len().saturating_sub(self.key_types.len()));
        let int64 = |value: fn(&Stored) -> i64| Arc::new(Int64Array::from_iter_values(rows.iter().map(|s| value(s))));
        values.extend(
            [int64(|s| s.matched), int64(|s| s.expires_at), int64(|s| s.last_access_ms)].map(|c| c as ArrayRef),
        );
        values.push(Arc::new(UInt64Array::from_iter_values(rows.iter().map(|s| s.id))));
        self.hashed(schema.clone(), key_columns, values)
    }

    /// [`Self::side_batch`] of stored rows of `side` gathered from wherever they are.
    fn gathered_batch(&self, side: usize, schema: &SchemaRef, rows: &[&Stored]) -> Result<RecordBatch> {
        let slots: Vec<RowSlot> = rows.iter().map(|s| s.row).collect();
        self.side_batch(schema, self.segments[side].gather(&slots, 0..self.segments[side].width())?, rows)
    }

    /// A batch of `schema`: the key hash of `key_columns`, them, then `rest`.
    fn hashed(&self, schema: SchemaRef, key_columns: Vec<ArrayRef>, rest: Vec<ArrayRef>) -> Result<RecordBatch> {
        let keys = self.key_types.len();
        let keyed = RecordBatch::try_new(Arc::new(Schema::new(schema.fields()[1..=keys].to_vec())), key_columns)?;
        let key_names: Vec<String> = (0..keys).map(join_key_column).collect();
        let mut columns: Vec<ArrayRef> = vec![Arc::new(key_hashes(&keyed, &key_names)?)];
        columns.extend(keyed.columns().iter().cloned());
        columns.extend(rest);
        Ok(RecordBatch::try_new(schema, columns)?)
    }

    /// Forgets rows idle for longer than the time-to-live (checked every half of it).
    fn sweep(&mut self, now: i64) -> Result<()> {
        let Some(oldest) = self.ttl.sweep_due(now) else { return Ok(()) };
        (0..2).for_each(|side| self.index_all(side));
        for (side, (stored, segments)) in self.stored.iter_mut().zip(&mut self.segments).enumerate() {
            stored.retain(|key, rows| {
                rows.retain(|r| {
                    let kept = r.last_access_ms >= oldest;
                    if !kept {
                        segments.release();
                        SideChanges::removed(&mut self.changes, side, key, r.id);
                    }
                    kept
                });
                !rows.is_empty()
            });
        }
        self.compact_segments()
    }
}

#[async_trait]
impl Operator for StreamingJoin {
    /// Working state: a bounded run's final checkpoint leaves it out.
    fn state_needed_after_finish(&self) -> bool {
        false
    }

    async fn open(&mut self, info: &crate::SubtaskInfo, restored: RestoredState) -> Result<()> {
        self.metrics = info.metrics.clone();
        let keys = self.key_types.len();
        for side in 0..2 {
            let width = self.sides[side].schema.fields().len();
            let table = self.side_table(side);
            let fields = table.fields();
            for batch in restored.table(&format!("side_{side}")) {
                let (matched, expires, access) =
                    (int_column(batch, MATCHED)?, int_column(batch, EXPIRES_AT)?, int_column(batch, LAST_ACCESS)?);
                // Snapshots from before row ids had none: each restored row gets a new one.
                let ids = batch.column_by_name(ROW_ID).and_then(|c| c.as_any().downcast_ref::<UInt64Array>().cloned());
                let key_columns = table.read(batch, &fields[..keys])?;
                let key_rows = self.converters()?.keys.convert_columns(&key_columns)?;
                let mut columns = table.read(batch, &fields[keys..keys + width])?;
                columns.extend(key_columns);
                let first = self.segments[side].push(&columns, None)?;
                for (row, slot) in (0..batch.num_rows()).zip(first..) {
                    let key = key_rows.row(row).data();
                    let id = ids.as_ref().map_or(self.next_id[side], |ids| ids.value(row));
                    self.next_id[side] = self.next_id[side].max(id + 1);
                    let stored = Stored {
                        row: slot,
                        matched: matched.value(row),
                        expires_at: expires.value(row),
                        last_access_ms: access.value(row),
                        id,
                        dirty: false,
                    };
                    if self.sides[side].expiry.is_some() {
                        self.expiring[side].entry(stored.expires_at).or_default().push(Key::from_slice(key));
                    }
                    self.store(side, key, stored);
                }
            }
        }
        // Every row restored is in the snapshot it came from.
        self.changes = info.incremental.then(|| SideChanges::after(self.next_id));
        Ok(())
    }

    async fn process_batch(&mut self, input: usize, batch: RecordBatch, out: &mut Collector) -> Result<()> {
        let side = input.min(1);
        let now = now_ms();
        self.sweep(now)?;
        let width = self.sides[side].schema.fields().len();
        let keys = self.key_types.len();
        let changelog = is_changelog(&batch.schema());
        if batch.num_columns() != width + keys + usize::from(changelog) {
            return Err(Error::Graph(format!(
                "join input {side} has {} columns; expected {width} and {keys} key(s)",
                batch.num_columns()
            )));
        }
        if !changelog {
            return self.add(side, batch, now, out);
        }
        if !self.changelog[side] {
            self.changelog[side] = true;
            // Retractions look rows up by key: no more rows outside the index.
            (0..2).for_each(|side| self.index_all(side));
        }
        // A changelog: runs of added and of taken-back rows, in order (a `-U` must leave
        // before its `+U` arrives, for an upsert reader downstream).
        let kinds = changes(&batch)?;
        let batch = batch.project(&(0..width + keys).collect::<Vec<_>>())?;
        let mut start = 0;
        while start < kinds.len() {
            let retract = kinds[start].is_retraction();
            let end = (start..kinds.len()).find(|&r| kinds[r].is_retraction() != retract).unwrap_or(kinds.len());
            let run = batch.slice(start, end - start);
            if retract {
                self.take_back(side, run, out)?
            } else {
                self.add(side, run, now, out)?
            }
            start = end;
        }
        self.compact_segments()
    }

    async fn input_ended(&mut self, input: usize, _out: &mut Collector) -> Result<()> {
        let side = input.min(1);
        self.ended[side] = true;
        let other = 1 - side;
        self.index_all(other);
        if !self.keeps(other) {
            self.stored[other].clear();
            self.segments[other].clear();
            if let Some(changes) = &mut self.changes {
                changes.keys[other].clear();
                changes.removed[other].clear();
                changes.whole[other] = true;
            }
        }
        Ok(())
    }

    async fn process_watermark(&mut self, watermark: i64, out: &mut Collector) -> Result<()> {
        self.watermark = self.watermark.max(watermark);
        self.expire(self.watermark, out)?;
        if !self.updating() {
            // Held back by the longest expiry: a row is emitted while its time plus expiry is
            // ahead of the watermark, so its time columns stay ahead of the forwarded one.
            let hold_back = self.sides.iter().filter_map(|s| s.expiry.map(|e| e.after_ms.max(0))).max().unwrap_or(0);
            out.emit_watermark(watermark.saturating_sub(hold_back));
        }
        Ok(())
    }

    async fn snapshot(&mut self, _checkpoint_id: u64) -> Result<Vec<StateTable>> {
        // A snapshot writes (and a delta lists) indexed rows only.
        (0..2).for_each(|side| self.index_all(side));
        if let Some(changes) = &mut self.changes {
            *changes = SideChanges::after(self.next_id);
        }
        (0..2).map(|side| self.side_snapshot(side, None)).collect()
    }

    /// Each side's rows added or changed since the last snapshot, and the rows removed (join
    /// key and id).
    async fn snapshot_changes(&mut self, _checkpoint_id: u64) -> Result<Option<Vec<StateTable>>> {
        (0..2).for_each(|side| self.index_all(side));
        let Some(changes) = self.changes.replace(SideChanges::after(self.next_id)) else { return Ok(None) };
        let SideChanges { keys: [left, right], removed: [left_removed, right_removed], whole, .. } = changes;
        let mut tables = Vec::new();
        let sides = [(left, left_removed), (right, right_removed)];
        for (side, (keys, removed)) in sides.into_iter().enumerate() {
            if whole[side] {
                tables.push(self.side_snapshot(side, None)?);
                continue;
            }
            let mut table = self.side_snapshot(side, Some(&keys))?;
            let fields = table.schema.fields();
            let key_fields = fields[..=self.key_types.len()].iter().chain(fields.find(ROW_ID).map(|(_, f)| f));
            let key_schema = Arc::new(Schema::new(key_fields.cloned().collect::<Vec<_>>()));
            let deleted = match removed.is_empty() {
                true => RecordBatch::new_empty(key_schema),
                false => {
                    let parser = self.converters()?.keys.parser();
                    let key_columns =
                        self.converters()?.keys.convert_rows(removed.iter().map(|(key, _)| parser.parse(key)))?;
                    let ids: ArrayRef = Arc::new(UInt64Array::from_iter_values(removed.iter().map(|(_, id)| *id)));
                    self.hashed(key_schema, key_columns, vec![ids])?
                }
            };
            let key = (0..self.key_types.len()).map(join_key_column).chain([ROW_ID.to_string()]).collect();
            table.delta = Some(Delta { key, deleted });
            tables.push(table);
        }
        Ok(Some(tables))
    }

    /// Both inputs ended: a left join's left rows that never matched come out now.
    async fn finish(&mut self, out: &mut Collector) -> Result<()> {
        if !self.updating() {
            self.expire(i64::MAX, out)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::TimestampMillisecondArray;

    use super::*;
    use crate::changelog::{changelog_schema, changes};

    fn side_schema(name: &str) -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new(format!("{name}_id"), DataType::Int64, true),
            Field::new(format!("{name}_ts"), DataType::Timestamp(TimeUnit::Millisecond, None), true),
        ]))
    }

    /// Rows (id, ts) of one side with the id as the join key.
    fn rows(name: &str, rows: &[(i64, i64)]) -> RecordBatch {
        let mut fields: Vec<Field> = side_schema(name).fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(Field::new(join_key_column(0), DataType::Int64, true));
        let ids = Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0)));
        let columns: Vec<ArrayRef> =
            vec![ids.clone(), Arc::new(TimestampMillisecondArray::from_iter_values(rows.iter().map(|r| r.1))), ids];
        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
    }

    fn join(kind: JoinKind, expiry: [Option<Expiry>; 2]) -> StreamingJoin {
        let sides = [
            JoinSide { schema: side_schema("l"), expiry: expiry[0] },
            JoinSide { schema: side_schema("r"), expiry: expiry[1] },
        ];
        let mut fields: Vec<Field> = sides[0].schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.extend(sides[1].schema.fields().iter().map(|f| f.as_ref().clone().with_nullable(true)));
        let combined = Arc::new(Schema::new(fields));
        let output = match kind {
            JoinKind::Inner | JoinKind::Left | JoinKind::Right | JoinKind::Full => combined.clone(),
            JoinKind::LeftSemi | JoinKind::LeftAnti => sides[0].schema.clone(),
        };
        let output = match StreamingJoin::is_updating(kind, expiry[0], false) {
            true => changelog_schema(&output),
            false => output,
        };
        StreamingJoin::new(kind, sides, vec![DataType::Int64], None, combined, output, None)
    }

    /// Output rows as "kind left_id right_id" (NULL for a missing side).
    fn lines(out: &Collector) -> Vec<String> {
        let mut lines = Vec::new();
        for batch in &out.batches {
            let ids = |c: usize| batch.column(c).as_any().downcast_ref::<Int64Array>().unwrap().clone();
            let (left, right) = (ids(0), ids(2));
            let shown = |ids: &Int64Array, row: usize| match ids.is_null(row) {
                true => "NULL".to_string(),
                false => ids.value(row).to_string(),
            };
            for (row, kind) in changes(batch).unwrap().into_iter().enumerate() {
                lines.push(format!("{} {} {}", kind.code(), shown(&left, row), shown(&right, row)));
            }
        }
        lines
    }

    async fn feed(join: &mut StreamingJoin, input: usize, batch: RecordBatch) -> Vec<String> {
        lines(&collect(join, input, batch).await)
    }

    async fn collect(join: &mut StreamingJoin, input: usize, batch: RecordBatch) -> Collector {
        let mut out = Collector::default();
        join.process_batch(input, batch, &mut out).await.unwrap();
        out
    }

    /// Left-only output rows as "kind left_id".
    async fn left_rows(join: &mut StreamingJoin, input: usize, batch: RecordBatch) -> Vec<String> {
        let out = collect(join, input, batch).await;
        let mut lines = Vec::new();
        for batch in &out.batches {
            assert_eq!(batch.num_columns(), 2 + usize::from(crate::changelog::is_changelog(&batch.schema())));
            let ids = batch.column(0).as_any().downcast_ref::<Int64Array>().unwrap().clone();
            for (row, kind) in changes(batch).unwrap().into_iter().enumerate() {
                lines.push(format!("{} {}", kind.code(), ids.value(row)));
            }
        }
        lines
    }

    fn stored(join: &StreamingJoin) -> usize {
        let indexed: usize = join.stored.iter().map(|side| side.values().map(|rows| rows.len()).sum::<usize>()).sum();
        indexed + join.unindexed.iter().map(UnindexedRows::len).sum::<usize>()
    }

    #[tokio::test]
    async fn a_regular_left_join_takes_back_the_null_padded_row_when_a_match_arrives() {
        let mut join = join(JoinKind::Left, [None, None]);
        assert_eq!(feed(&mut join, 0, rows("l", &[(1, 0), (2, 0)])).await, ["+I 1 NULL", "+I 2 NULL"]);
        assert_eq!(feed(&mut join, 1, rows("r", &[(1, 5), (1, 6)])).await, ["-D 1 NULL", "+I 1 1", "+I 1 1"]);
        assert_eq!(feed(&mut join, 1, rows("r", &[(1, 7)])).await, ["+I 1 1"], "taken back once only");
        assert_eq!(feed(&mut join, 0, rows("l", &[(1, 8)])).await, ["+I 1 1", "+I 1 1", "+I 1 1"]);
    }

    /// A stream joined with a bounded side input: once the side input has ended, the stream's
    /// rows still meet its stored rows but are no longer kept themselves (Nexmark q13's shape).
    #[tokio::test]
    async fn once_a_side_has_ended_the_other_sides_rows_are_not_kept() {
        let mut join = join(JoinKind::Left, [None, None]);
        assert_eq!(feed(&mut join, 1, rows("r", &[(1, 0), (2, 0)])).await, Vec::<String>::new());
        assert_eq!(feed(&mut join, 0, rows("l", &[(1, 1), (5, 1)])).await, ["+I 1 1", "+I 5 NULL"]);
        assert_eq!(stored(&join), 4);
        join.input_ended(1, &mut Collector::default()).await.unwrap();
        assert_eq!(stored(&join), 2, "the left rows waited for right rows that will not come");
        assert_eq!(feed(&mut join, 0, rows("l", &[(2, 2), (6, 2)])).await, ["+I 2 2", "+I 6 NULL"]);
        assert_eq!(stored(&join), 2, "nor are new left rows kept");
        // A side that ended keeps what it stored, and a changelog side keeps its rows.
        let mut join = self::join(JoinKind::Inner, [None, None]);
        join.changelog[0] = true;
        assert!(feed(&mut join, 0, rows("l", &[(1, 1)])).await.is_empty());
        join.input_ended(1, &mut Collector::default()).await.unwrap();
        assert_eq!(stored(&join), 1);
    }

    #[tokio::test]
    async fn a_regular_full_join_takes_back_padded_rows_of_either_side() {
        let mut join = join(JoinKind::Full, [None, None]);
        assert_eq!(feed(&mut join, 1, rows("r", &[(1, 0), (3, 0)])).await, ["+I NULL 1", "+I NULL 3"]);
        assert_eq!(feed(&mut join, 0, rows("l", &[(1, 5), (2, 5)])).await, ["-D NULL 1", "+I 1 1", "+I 2 NULL"]);
        assert_eq!(feed(&mut join, 1, rows("r", &[(2, 6)])).await, ["-D 2 NULL", "+I 2 2"]);
        assert_eq!(feed(&mut join, 0, rows("l", &[(3, 7)])).await, ["-D NULL 3", "+I 3 3"]);
        let mut right = self::join(JoinKind::Right, [None, None]);
        assert_eq!(feed(&mut right, 0, rows("l", &[(1, 0)])).await, Vec::<String>::new(), "left rows wait");
        assert_eq!(feed(&mut right, 1, rows("r", &[(1, 1), (2, 1)])).await, ["+I 1 1", "+I NULL 2"]);
    }

    /// Rows of one side as a changelog: (change, id, ts).
    fn changelog(name: &str, rows: &[(Change, i64, i64)]) -> RecordBatch {
        let plain = self::rows(name, &rows.iter().map(|r| (r.1, r.2)).collect::<Vec<_>>());
        let mut fields: Vec<Field> = plain.schema().fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(Field::new(crate::changelog::CHANGE_COLUMN, DataType::Utf8, false));
        let mut columns = plain.columns().to_vec();
        columns.push(change_array(&rows.iter().map(|r| r.0).collect::<Vec<_>>()));
        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
    }

    fn updating_join(kind: JoinKind) -> StreamingJoin {
        let plain = join(kind, [None, None]);
        let output = match is_changelog(&plain.output) {
            true => plain.output.clone(),
            false => changelog_schema(&plain.output),
        };
        StreamingJoin::new(kind, plain.sides, plain.key_types, None, plain.combined, output, None)
    }

    #[tokio::test]
    async fn a_join_of_changelogs_takes_back_the_pairs_of_a_retracted_row() {
        use Change::{Delete, Insert, UpdateAfter, UpdateBefore};
        let mut join = updating_join(JoinKind::Left);
        assert_eq!(feed(&mut join, 0, changelog("l", &[(Insert, 1, 0)])).await, ["+I 1 NULL"]);
        assert_eq!(
            feed(&mut join, 1, changelog("r", &[(Insert, 1, 0), (Insert, 1, 1)])).await,
            ["-D 1 NULL", "+I 1 1", "+I 1 1"]
        );
        // An update of a right row: its pair leaves before the new one comes.
        let update = changelog("r", &[(UpdateBefore, 1, 0), (UpdateAfter, 1, 2)]);
        assert_eq!(feed(&mut join, 1, update).await, ["-D 1 1", "+I 1 1"]);
        // The left row's last match leaves: it is unmatched again.
        let gone = changelog("r", &[(Delete, 1, 1), (Delete, 1, 2)]);
        assert_eq!(feed(&mut join, 1, gone).await, ["-D 1 1", "-D 1 1", "+I 1 NULL"]);
        // Taking back the left row takes back its padded row; a row never added takes nothing.
        assert_eq!(feed(&mut join, 0, changelog("l", &[(Delete, 1, 0), (Delete, 7, 0)])).await, ["-D 1 NULL"]);
        assert_eq!(stored(&join), 0);
    }

    #[tokio::test]
    async fn semi_and_anti_joins_of_a_changelog_follow_the_last_match() {
        use Change::{Delete, Insert};
        let mut semi = updating_join(JoinKind::LeftSemi);
        assert!(left_rows(&mut semi, 0, changelog("l", &[(Insert, 1, 0)])).await.is_empty());
        assert_eq!(left_rows(&mut semi, 1, changelog("r", &[(Insert, 1, 0), (Insert, 1, 0)])).await, ["+I 1"]);
        assert!(left_rows(&mut semi, 1, changelog("r", &[(Delete, 1, 0)])).await.is_empty(), "one match is left");
        assert_eq!(left_rows(&mut semi, 1, changelog("r", &[(Delete, 1, 0)])).await, ["-D 1"]);
        let mut anti = updating_join(JoinKind::LeftAnti);
        assert_eq!(left_rows(&mut anti, 0, changelog("l", &[(Insert, 1, 0)])).await, ["+I 1"]);
        assert_eq!(left_rows(&mut anti, 1, changelog("r", &[(Insert, 1, 0)])).await, ["-D 1"]);
        assert_eq!(left_rows(&mut anti, 1, changelog("r", &[(Delete, 1, 0)])).await, ["+I 1"]);
        assert_eq!(left_rows(&mut anti, 0, changelog("l", &[(Delete, 1, 0)])).await, ["-D 1"]);
    }

    /// An interval join's expiry of right rows up to 10 ms after the left one: left rows
    /// expire 11 ms after their time, right rows 1 ms after theirs.
    fn up_to_10_ms_after() -> [Option<Expiry>; 2] {
        [
            Some(Expiry { column: 1, after_ms: 11, late: LateRows::Match }),
            Some(Expiry { column: 1, after_ms: 1, late: LateRows::Match }),
        ]
    }

    #[tokio::test]
    async fn an_interval_join_drops_rows_the_watermark_has_passed_and_holds_its_watermark_back() {
        let mut join = join(JoinKind::Left, up_to_10_ms_after());
        assert!(feed(&mut join, 0, rows("l", &[(1, 100), (2, 100)])).await.is_empty(), "waits for expiry");
        assert_eq!(feed(&mut join, 1, rows("r", &[(1, 105)])).await, ["+I 1 1"]);
        assert_eq!(stored(&join), 3);
        let mut out = Collector::default();
        join.process_watermark(111, &mut out).await.unwrap();
        assert_eq!(lines(&out), ["+I 2 NULL"], "the unmatched left row, once it can no longer match");
        assert_eq!(out.watermark, Some(100), "held back by the longest expiry");
        assert_eq!(stored(&join), 0, "all state dropped");
    }

    /// An inner interval join holds its rows outside the index until a probe asks for their
    /// key; they match, expire at the same watermark as indexed rows, go into a snapshot, and
    /// are indexed whole once scans for keys they do not hold cost more than indexing.
    #[tokio::test]
    async fn an_inner_interval_join_holds_rows_unindexed_until_asked_for() {
        let mut join = join(JoinKind::Inner, up_to_10_ms_after());
        let indexed = |join: &StreamingJoin, side: usize| join.stored[side].values().map(|r| r.len()).sum::<usize>();
        assert!(feed(&mut join, 0, rows("l", &[(1, 100), (2, 100), (3, 150)])).await.is_empty());
        assert_eq!((join.unindexed[0].len(), indexed(&join, 0)), (3, 0), "held, not indexed");
        assert_eq!(feed(&mut join, 1, rows("r", &[(1, 105)])).await, ["+I 1 1"]);
        assert_eq!((join.unindexed[0].len(), indexed(&join, 0)), (2, 1), "the row asked for is indexed");
        assert_eq!(join.unindexed[1].len(), 1);
        assert_eq!(feed(&mut join, 0, rows("l", &[(1, 106)])).await, ["+I 1 1"], "a held right row matches");
        let mut out = Collector::default();
        join.process_watermark(110, &mut out).await.unwrap();
        assert_eq!(stored(&join), 4, "the right row (expiring at 106) is gone, no left row yet");
        join.process_watermark(111, &mut out).await.unwrap();
        assert_eq!(stored(&join), 2, "left rows 1 and 2 expired at 111, indexed or held");
        assert!(feed(&mut join, 1, rows("r", &[(2, 95)])).await.is_empty(), "late: left row 2 is gone");
        assert_eq!(feed(&mut join, 1, rows("r", &[(3, 140)])).await, ["+I 3 3"]);
        let tables = join.snapshot(1).await.unwrap();
        let written: Vec<usize> = tables.iter().map(|t| t.batches.iter().map(|b| b.num_rows()).sum()).collect();
        assert_eq!(written, [2, 1], "held rows are written");
        assert_eq!(join.unindexed.iter().map(UnindexedRows::len).sum::<usize>(), 0);

        assert!(feed(&mut join, 0, rows("l", &[(10, 200), (11, 200), (12, 200), (13, 200)])).await.is_empty());
        for probe in 0..33 {
            assert_eq!(join.unindexed[0].len(), 4, "still held before probe {probe}");
            assert!(feed(&mut join, 1, rows("r", &[(99, 200)])).await.is_empty());
        }
        assert_eq!((join.unindexed[0].len(), indexed(&join, 0)), (0, 6), "indexed whole: scans cost more");
    }

    /// Expired rows are dropped once they outnumber the kept ones, and the kept rows (gathered
    /// into new segments, renumbered) still match, come out unmatched and go into the snapshot.
    #[tokio::test]
    async fn rows_kept_through_a_compaction_still_match_and_snapshot() {
        let expiry = [
            Some(Expiry { column: 1, after_ms: 0, late: LateRows::Match }),
            Some(Expiry { column: 1, after_ms: 0, late: LateRows::Match }),
        ];
        let mut join = join(JoinKind::Left, expiry);
        // 90,000 left rows at times 0..90,000, then a watermark that expires all but the last
        // 10,000: the unmatched ones come out padded, read before the compaction drops them.
        let left: Vec<(i64, i64)> = (0..90_000).map(|i| (i, i)).collect();
        assert!(feed(&mut join, 0, rows("l", &left)).await.is_empty());
        let mut out = Collector::default();
        join.process_watermark(79_999, &mut out).await.unwrap();
        let expired = lines(&out);
        assert_eq!(expired.len(), 80_000);
        assert_eq!((expired[0].as_str(), expired[79_999].as_str()), ("+I 0 NULL", "+I 79999 NULL"));
        assert!(!join.segments[0].needs_compaction(), "compacted");
        assert_eq!(stored(&join), 10_000);
        let matched = feed(&mut join, 1, rows("r", &[(80_000, 90_000), (89_999, 90_000)])).await;
        assert_eq!(matched, ["+I 80000 80000", "+I 89999 89999"]);
        let tables = join.snapshot(1).await.unwrap();
        let column =
            |b: &RecordBatch| b.column_by_name("c0").unwrap().as_any().downcast_ref::<Int64Array>().unwrap().clone();
        let mut ids: Vec<i64> = tables[0].batches.iter().flat_map(|b| column(b).values().to_vec()).collect();
        ids.sort_unstable();
        assert_eq!(ids, (80_000..90_000).collect::<Vec<_>>());
    }

    /// What a test does to a join between its incremental snapshots.
    enum Step {
        Feed(usize, RecordBatch),
        Watermark(i64),
        End(usize),
        Sleep(u64),
        Snapshot,
    }

    /// Runs `steps` on `join` with incremental checkpoints (a full snapshot first), and checks
    /// that each side's base and changes, merged as a restore merges them, hold the rows a full
    /// snapshot at the end holds. Returns what each change wrote per side: rows, removed keys.
    async fn base_and_changes_match_a_full_snapshot(
        mut join: StreamingJoin,
        steps: Vec<Step>,
    ) -> Vec<Vec<(usize, Option<usize>)>> {
        let info = crate::SubtaskInfo { incremental: true, ..crate::SubtaskInfo::new("join", 0, 1) };
        join.open(&info, RestoredState::default()).await.unwrap();
        let mut chains = crate::state_table::Chains::new(join.snapshot(1).await.unwrap());
        let mut written = Vec::new();
        for step in steps {
            let mut out = Collector::default();
            match step {
                Step::Feed(input, batch) => join.process_batch(input, batch, &mut out).await.unwrap(),
                Step::Watermark(w) => join.process_watermark(w, &mut out).await.unwrap(),
                Step::End(input) => join.input_ended(input, &mut out).await.unwrap(),
                Step::Sleep(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
                Step::Snapshot => written.push(chains.push(join.snapshot_changes(2).await.unwrap().unwrap())),
            }
        }
        chains.assert_match(join.snapshot(3).await.unwrap());
        written
    }

    /// Incremental checkpoints of an interval join: the rows added or matched (their match
    /// counts changed), the rows dropped at expiry removed.
    #[tokio::test]
    async fn an_interval_joins_base_and_changes_restore_what_a_full_snapshot_holds() {
        let expiry = [
            Some(Expiry { column: 1, after_ms: 10, late: LateRows::Match }),
            Some(Expiry { column: 1, after_ms: 10, late: LateRows::Match }),
        ];
        let steps = vec![
            Step::Feed(0, rows("l", &[(1, 100), (1, 101), (2, 100), (3, 200)])),
            Step::Snapshot,
            // Both left rows of key 1 matched (their counts change); two new rows on the right.
            Step::Feed(1, rows("r", &[(1, 105), (4, 300)])),
            Step::Snapshot,
            // Rows of times 100, 101 and 105 expire: three leave the left side, one the right;
            // a new left row matches the right row of key 4. A left row added after the last
            // snapshot and expired before the next is in neither: no tombstone for it.
            Step::Feed(0, rows("l", &[(5, 102)])),
            Step::Watermark(116),
            Step::Feed(0, rows("l", &[(4, 301)])),
            Step::Snapshot,
            Step::Snapshot,
        ];
        let written = base_and_changes_match_a_full_snapshot(join(JoinKind::Left, expiry), steps).await;
        assert_eq!(
            written,
            [
                [(4, Some(0)), (0, Some(0))],
                [(2, Some(0)), (2, Some(0))],
                [(1, Some(3)), (1, Some(1))],
                [(0, Some(0)), (0, Some(0))]
            ]
        );
    }

    /// A join of changelogs: rows taken back, keys emptied; a side dropped whole when the
    /// other input ends (written whole); rows forgotten by the time-to-live.
    #[tokio::test]
    async fn a_changelog_joins_base_and_changes_restore_what_a_full_snapshot_holds() {
        use Change::{Delete, Insert};
        let steps = vec![
            Step::Feed(0, changelog("l", &[(Insert, 1, 0), (Insert, 1, 0), (Insert, 2, 0)])),
            Step::Feed(1, changelog("r", &[(Insert, 1, 0), (Insert, 3, 0)])),
            Step::Snapshot,
            // One of the two equal left rows of key 1 leaves (the other stays); key 3 empties.
            Step::Feed(0, changelog("l", &[(Delete, 1, 0)])),
            Step::Feed(1, changelog("r", &[(Delete, 3, 0)])),
            Step::Snapshot,
        ];
        let written = base_and_changes_match_a_full_snapshot(updating_join(JoinKind::Left), steps).await;
        // The left row taken back is removed (its equal twin stays as it is); the right row of
        // key 1 lost a match, and key 3's only row is gone.
        assert_eq!(written, [[(3, Some(0)), (2, Some(0))], [(0, Some(1)), (1, Some(1))]]);
        // A join key shared by many rows: a new row of it is written alone.
        let many: Vec<(i64, i64)> = (0..100).map(|t| (7, t)).collect();
        let steps = vec![
            Step::Feed(0, rows("l", &many)),
            Step::Snapshot,
            Step::Feed(0, rows("l", &[(7, 100)])),
            Step::Snapshot,
        ];
        let written = base_and_changes_match_a_full_snapshot(join(JoinKind::Inner, [None, None]), steps).await;
        assert_eq!(written, [[(100, Some(0)), (0, Some(0))], [(1, Some(0)), (0, Some(0))]]);
        // The right side ends: a regular join's left rows need not wait any more.
        let steps = vec![
            Step::Feed(0, rows("l", &[(1, 0), (2, 0)])),
            Step::Feed(1, rows("r", &[(1, 0)])),
            Step::Snapshot,
            Step::End(1),
            Step::Snapshot,
        ];
        let written = base_and_changes_match_a_full_snapshot(join(JoinKind::Inner, [None, None]), steps).await;
        assert_eq!(written, [[(2, Some(0)), (1, Some(0))], [(0, None), (0, Some(0))]]);
        // Rows idle for longer than the time-to-live are forgotten: their keys removed.
        let plain = join(JoinKind::Inner, [None, None]);
        let ttl = Some(Duration::from_millis(40));
        let join =
            StreamingJoin::new(plain.kind, plain.sides, plain.key_types, None, plain.combined, plain.output, ttl);
        let steps = vec![
            Step::Feed(0, rows("l", &[(1, 0), (2, 0)])),
            Step::Snapshot,
            Step::Sleep(100),
            Step::Feed(1, rows("r", &[(3, 0)])),
            Step::Snapshot,
        ];
        let written = base_and_changes_match_a_full_snapshot(join, steps).await;
        assert_eq!(written, [[(2, Some(0)), (0, Some(0))], [(0, Some(2)), (1, Some(0))]]);
    }

    /// A window join drops a row whose window was joined already, and counts it, where an
    /// interval join (above) would still emit a late outer row NULL-padded.
    #[tokio::test]
    async fn a_window_join_drops_and_counts_rows_of_windows_already_joined() {
        let window = Some(Expiry { column: 1, after_ms: 10, late: LateRows::Drop });
        let mut join = join(JoinKind::Left, [window, window]);
        assert!(feed(&mut join, 0, rows("l", &[(1, 100)])).await.is_empty(), "waits for the window's end");
        let mut out = Collector::default();
        join.process_watermark(110, &mut out).await.unwrap();
        assert_eq!(lines(&out), ["+I 1 NULL"], "the window [100, 110) joined: its unmatched left row");
        assert!(feed(&mut join, 0, rows("l", &[(2, 100)])).await.is_empty(), "late: dropped, not NULL-padded");
        // The time column of a window join is the window's start.
        assert!(feed(&mut join, 1, rows("r", &[(1, 100)])).await.is_empty(), "late on the other side too");
        assert_eq!(join.metrics.late_records_dropped.load(std::sync::atomic::Ordering::Relaxed), 2);
        assert_eq!(stored(&join), 0, "nothing kept of a window already joined");
    }

    #[tokio::test]
    async fn a_semi_join_emits_a_left_row_once_and_an_anti_join_the_unmatched_ones() {
        let mut semi = join(JoinKind::LeftSemi, [None, None]);
        assert!(left_rows(&mut semi, 0, rows("l", &[(1, 0), (2, 0)])).await.is_empty());
        assert_eq!(left_rows(&mut semi, 1, rows("r", &[(1, 0), (1, 0)])).await, ["+I 1"]);
        assert!(left_rows(&mut semi, 1, rows("r", &[(1, 0)])).await.is_empty());
        assert_eq!(left_rows(&mut semi, 0, rows("l", &[(1, 0)])).await, ["+I 1"]);
        let mut anti = join(JoinKind::LeftAnti, [None, None]);
        assert_eq!(left_rows(&mut anti, 0, rows("l", &[(1, 0), (2, 0)])).await, ["+I 1", "+I 2"]);
        assert_eq!(left_rows(&mut anti, 1, rows("r", &[(1, 0)])).await, ["-D 1"]);
    }
}
