//! `count(DISTINCT x)` over rows that are never taken back (an append-only input: Nexmark q15
//! and q16, every window): per group, the set of values seen, each with the aggregates that let
//! it in as bits. The distinct counts of one argument (under different FILTERs, or one alone)
//! share a family, as [`crate::operators::shared_distinct`]'s do for a changelog, but nothing
//! is taken back, so no value's copies are counted.
//!
//! Why not a hash map per group: a busy group's values (every bidder of a day) are far more
//! than the caches hold, so every lookup misses. hashbrown's map of value to copies missed three
//! times a row (control byte, slot, the copies on the heap) one after another: two fifths of
//! q16. Here a group's values are a flat open-addressing table of 16-byte slots (value and
//! member bits, so one cache line a lookup), and a batch's lookups are prefetched some rows
//! ahead so that their misses overlap.

use std::hash::BuildHasher;
use std::sync::{Arc, OnceLock};

use datafusion::arrow::array::{Array, ArrayRef};
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::physical_expr::PhysicalExpr;

use crate::cache_hint::prefetch;
use crate::error::{Error, Result};
use crate::operators::accumulators::{AggregateCall, Arguments};
use crate::operators::distinct_family::{Family, Member, families};
use crate::operators::group_accumulators::{
    FedAsFamily, GroupAccumulator, distinct_state, distinct_state_rows, int64_list, is_valid, primitive,
};

/// The most aggregates in one family: one bit each in a slot.
const MEMBERS: usize = u64::BITS as usize;
/// How many rows ahead a batch's lookups are prefetched: enough misses in flight to overlap,
/// few enough that the lines are still cached when their row comes.
const AHEAD: usize = 8;

/// One value of a group and the members that let it in; no member: an empty slot.
#[derive(Clone, Copy, Default)]
#[repr(C, align(16))]
struct Slot {
    value: i64,
    members: u64,
}

/// A group's values: open addressing, linear probing, at most three quarters full.
#[derive(Default)]
struct ValueSet {
    /// A power of two of them, or none before the first value.
    slots: Vec<Slot>,
    len: usize,
}

/// The hash of `value` under the process's `seed` (random, so that chosen values cannot pile
/// into one run of slots): a folded multiply, whose low bits (the slot) depend on all of it.
fn hash(value: i64, seed: u64) -> u64 {
    let product = u128::from(value as u64 ^ seed) * 0x9E37_79B9_7F4A_7C15_u128;
    (product as u64) ^ ((product >> 64) as u64)
}

fn seed() -> u64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    *SEED.get_or_init(|| std::collections::hash_map::RandomState::new().hash_one(0u64))
}

impl ValueSet {
    /// Warms the slot where a lookup of a value hashed `hash` starts.
    fn prefetch(&self, hash: u64) {
        if !self.slots.is_empty() {
            prefetch(&self.slots[hash as usize & (self.slots.len() - 1)]);
        }
    }

    /// Lets `value` (hashed `hash`) into `members`; the members it was new to.
    fn add(&mut self, value: i64, hash: u64, members: u64, seed: u64) -> u64 {
        if (self.len + 1) * 4 > self.slots.len() * 3 {
            self.grow(seed);
        }
        let mask = self.slots.len() - 1;
        let mut at = hash as usize & mask;
        loop {
            let slot = &mut self.slots[at];
            if slot.members == 0 {
                *slot = Slot { value, members };
                self.len += 1;
                return members;
            }
            if slot.value == value {
                let new = members & !slot.members;
                slot.members |= members;
                return new;
            }
            at = (at + 1) & mask;
        }
    }

    fn grow(&mut self, seed: u64) {
        let capacity = (self.slots.len() * 2).max(8);
        let old = std::mem::replace(&mut self.slots, vec![Slot::default(); capacity]);
        self.len = 0;
        for slot in old.into_iter().filter(|s| s.members != 0) {
            self.add(slot.value, hash(slot.value, seed), slot.members, seed);
        }
    }

    fn iter(&self) -> impl Iterator<Item = &Slot> {
        self.slots.iter().filter(|s| s.members != 0)
    }
}

/// One `count(DISTINCT x)` of a family over rows never taken back.
pub(crate) struct SeenDistinct(Member<ValueSet>);

impl FedAsFamily for SeenDistinct {
    /// Feeds rows `rows` (to groups `ids`, pairwise) to every member of the family, each under
    /// its own FILTER; only the family's first member does, the others' turn is a no-op.
    fn feed(&self, arguments: &[Arguments], rows: &[u32], ids: &[usize], retract: bool) -> Result<()> {
        if !self.0.leads() {
            return Ok(());
        }
        if retract {
            return Err(Error::Graph("a row taken back from a distinct count over rows never taken back".into()));
        }
        let mut family = self.0.family();
        let Family { positions, groups, distinct } = &mut *family;
        let members: Vec<&Arguments> = positions.iter().map(|p| &arguments[*p]).collect();
        let Some(first) = members.first() else { return Ok(()) };
        let values = primitive::<Int64Type>(&first.values()[0], &DataType::Int64)?;
        let nulls = values.logical_nulls();
        let seed = seed();
        // The rows some member lets in: group, value, its hash, the members.
        let mut admitted: Vec<(usize, i64, u64, u64)> = Vec::with_capacity(rows.len());
        for (&row, &id) in rows.iter().zip(ids) {
            if !is_valid(&nulls, row) {
                continue;
            }
            let bits = members.iter().enumerate().fold(0u64, |bits, (m, a)| bits | (u64::from(a.admits(row)) << m));
            if bits != 0 {
                let value = values.value(row as usize);
                admitted.push((id, value, hash(value, seed), bits));
            }
        }
        for (i, &(id, value, hash, bits)) in admitted.iter().enumerate() {
            if let Some(&(ahead, _, hash, _)) = admitted.get(i + AHEAD) {
                groups[ahead].prefetch(hash);
            }
            let mut new = groups[id].add(value, hash, bits, seed);
            while new != 0 {
                distinct[new.trailing_zeros() as usize][id] += 1;
                new &= new - 1;
            }
        }
        Ok(())
    }
}

impl GroupAccumulator for SeenDistinct {
    fn resize(&mut self, groups: usize) {
        self.0.resize(groups);
    }

    fn update(&mut self, _: &[ArrayRef], _: &[u32], _: &[usize], _: bool) -> Result<()> {
        Err(Error::Graph("a distinct count over rows never taken back is fed through its family".into()))
    }

    fn fed_as_family(&self) -> Option<&dyn FedAsFamily> {
        Some(self)
    }

    fn evaluate(&mut self, ids: &[usize]) -> Result<ArrayRef> {
        Ok(self.0.evaluate(ids))
    }

    fn state_types(&self) -> Vec<DataType> {
        vec![int64_list(), int64_list()]
    }

    /// The values this member let in, as a lone distinct count writes them, each with one
    /// copy (copies are not counted: nothing is taken back).
    fn state(&mut self, ids: &[usize]) -> Result<Vec<ArrayRef>> {
        let family = self.0.family();
        let bit = 1u64 << self.0.index();
        let pairs = |id: usize| family.groups[id].iter().filter(move |s| s.members & bit != 0).map(|s| (s.value, 1));
        Ok(distinct_state(ids, pairs))
    }

    fn merge(&mut self, states: &[ArrayRef], ids: &[usize]) -> Result<()> {
        let member = self.0.index();
        let mut family = self.0.family();
        let Family { groups, distinct, .. } = &mut *family;
        let (bit, seed) = (1u64 << member, seed());
        for (&id, (values, copies)) in ids.iter().zip(distinct_state_rows(states)?) {
            for (value, _) in values.values().iter().zip(copies.values()).filter(|(_, copies)| **copies > 0) {
                let new = groups[id].add(*value, hash(*value, seed), bit, seed);
                distinct[member][id] += i64::from(new != 0);
            }
        }
        Ok(())
    }

    fn forget(&mut self, id: usize) {
        self.0.forget(id);
    }

    fn retain(&mut self, keep: &[bool]) {
        self.0.retain(keep);
    }
}

/// Replaces every lone `count(DISTINCT x)` accumulator of `calls` (of an operator whose input
/// is never taken back) by a member of the family of its argument `x`, one family per argument
/// (a family of one for an argument counted once). `distinct_argument` says which calls are
/// counted natively as lone distinct counts, and of what.
pub(crate) fn share_seen_distinct(
    calls: &[AggregateCall],
    accumulators: &mut [Box<dyn GroupAccumulator>],
    distinct_argument: impl Fn(&AggregateCall) -> Option<Arc<dyn PhysicalExpr>>,
) {
    for positions in families(calls, distinct_argument, 1) {
        for positions in positions.chunks(MEMBERS) {
            for (position, member) in positions.iter().zip(Member::family_of(positions)) {
                accumulators[*position] = Box::new(SeenDistinct(member));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{AsArray, Int64Array};
    use datafusion::arrow::datatypes::{Field, Schema};
    use datafusion::arrow::record_batch::RecordBatch;
    use datafusion::functions_aggregate::count::count_udaf;
    use datafusion::logical_expr::{Accumulator, Operator};
    use datafusion::physical_expr::aggregate::AggregateExprBuilder;
    use datafusion::physical_expr::expressions::{binary, col, lit};

    use super::*;
    use crate::operators::accumulators::arguments;
    use crate::operators::group_accumulators::{feed, group_accumulator, group_accumulators};

    const GROUPS: usize = 5;

    /// `count(DISTINCT column) FILTER (WHERE j <op> bound)`.
    fn distinct(schema: &Arc<Schema>, column: &str, filter: Option<(Operator, i64)>) -> AggregateCall {
        let function = AggregateExprBuilder::new(count_udaf(), vec![col(column, schema).unwrap()])
            .schema(schema.clone())
            .alias("a")
            .distinct()
            .build()
            .unwrap();
        let filter = filter.map(|(op, bound)| binary(col("j", schema).unwrap(), op, lit(bound), schema).unwrap());
        AggregateCall { function: Arc::new(function), filter }
    }

    fn values_of(accumulator: &mut Box<dyn GroupAccumulator>, groups: usize) -> Vec<i64> {
        let ids: Vec<usize> = (0..groups).collect();
        accumulator.evaluate(&ids).unwrap().as_primitive::<Int64Type>().values().to_vec()
    }

    /// Each group's values in an accumulator's state, in order.
    fn values_in_state(accumulator: &mut Box<dyn GroupAccumulator>, groups: usize) -> Vec<Vec<i64>> {
        let ids: Vec<usize> = (0..groups).collect();
        let state = accumulator.state(&ids).unwrap();
        let rows = distinct_state_rows(&state).unwrap().into_iter();
        rows.map(|(values, copies)| {
            assert!(copies.values().iter().all(|c| *c > 0));
            let mut values = values.values().to_vec();
            values.sort();
            values
        })
        .collect()
    }

    /// Over rows never taken back, every native distinct count is a member of its argument's
    /// family (one alone too) and gives, over batches that grow the sets many times over, after
    /// a restore from its state, a group forgotten and the others compacted, what the counted
    /// (changelog) form gives alone; a row taken back is refused.
    #[test]
    fn distinct_counts_over_rows_never_taken_back_agree_with_counted_ones() {
        let schema =
            Arc::new(Schema::new(vec![Field::new("i", DataType::Int64, true), Field::new("j", DataType::Int64, true)]));
        let calls = vec![
            distinct(&schema, "i", None),
            distinct(&schema, "i", Some((Operator::Lt, 0))),
            distinct(&schema, "j", None),
            distinct(&schema, "i", Some((Operator::GtEq, 5))),
        ];
        let unreachable = || -> datafusion::error::Result<Box<dyn Accumulator>> { panic!("not native") };
        let build = || group_accumulators(&calls, false, |_| unreachable).unwrap();
        let mut seen = build();
        assert!(seen.iter().all(|a| a.fed_as_family().is_some()));
        let mut counted: Vec<Box<dyn GroupAccumulator>> =
            calls.iter().map(|call| group_accumulator(call, true, unreachable).unwrap()).collect();
        seen.iter_mut().chain(&mut counted).for_each(|a| a.resize(GROUPS));

        // Three batches of 4000 rows: values repeat within and across batches and groups.
        for batch in 0..3i64 {
            let i: Vec<Option<i64>> =
                (0..4000i64).map(|r| (r % 11 != 4).then_some((r * 7919 + batch * 1000) % 5003 - 100)).collect();
            let j: Vec<Option<i64>> = (0..4000i64).map(|r| (r % 13 != 6).then_some((r * 5) % 19 - 9)).collect();
            let batch = RecordBatch::try_new(
                schema.clone(),
                vec![Arc::new(Int64Array::from(i)) as ArrayRef, Arc::new(Int64Array::from(j))],
            )
            .unwrap();
            let args = arguments(&calls, &batch).unwrap();
            let rows: Vec<u32> = (0..4000).collect();
            let ids: Vec<usize> = rows.iter().map(|r| (*r as usize * 3) % GROUPS).collect();
            feed(&mut seen, &args, &rows, &ids, false).unwrap();
            for (k, accumulator) in counted.iter_mut().enumerate() {
                feed(std::slice::from_mut(accumulator), &args[k..k + 1], &rows, &ids, false).unwrap();
            }
            let back = feed(&mut seen, &args, &rows[..1], &ids[..1], true);
            assert!(back.is_err(), "a row taken back is refused");
        }
        for (k, (a, b)) in seen.iter_mut().zip(&mut counted).enumerate() {
            assert_eq!(values_of(a, GROUPS), values_of(b, GROUPS), "aggregate {k}");
            assert_eq!(values_in_state(a, GROUPS), values_in_state(b, GROUPS), "aggregate {k}'s state");
            assert!(values_of(a, GROUPS).iter().any(|v| *v > 0), "aggregate {k} counts something");
        }
        assert!(values_of(&mut seen[0], GROUPS).iter().all(|v| *v > 1000), "the sets grew many times over");

        // Restored from its own state, then a group forgotten and the others compacted.
        let mut restored = build();
        let all: Vec<usize> = (0..GROUPS).collect();
        for (a, b) in restored.iter_mut().zip(&mut seen) {
            a.resize(GROUPS);
            a.merge(&b.state(&all).unwrap(), &all).unwrap();
        }
        for accumulators in [&mut restored, &mut counted] {
            for accumulator in accumulators.iter_mut() {
                accumulator.forget(1);
            }
            for accumulator in accumulators.iter_mut() {
                accumulator.retain(&[true, false, true, true, true]);
            }
        }
        for (k, (a, b)) in restored.iter_mut().zip(&mut counted).enumerate() {
            assert_eq!(values_of(a, GROUPS - 1), values_of(b, GROUPS - 1), "aggregate {k} after a restore");
            assert_eq!(values_in_state(a, GROUPS - 1), values_in_state(b, GROUPS - 1), "aggregate {k}'s state");
        }
    }
}
