//! `count(DISTINCT x)` of one argument under different FILTERs over a changelog, as Nexmark q16
//! has them (`count(DISTINCT bidder)`, then the same `FILTER (WHERE price < 10000)`, and two
//! more price ranges): one hash map of values per group for all of them, each value with its
//! copies per aggregate, so a row costs one lookup, not one per aggregate that lets it in, and a
//! value leaves when its last copy is taken back. The maps of a busy group hold every bidder or
//! auction seen, far larger than the caches: a lookup is a cache miss, and they were a fifth of
//! q16. Flink shares one `MapView` per distinct argument the same way. (Over rows never taken
//! back, [`crate::operators::seen_distinct`] keeps the values alone.)
//!
//! Each aggregate stays an accumulator of its own ([`crate::operators::distinct_family`]), its
//! value and state columns a lone `count(DISTINCT x)`'s, so snapshots read the same.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef};
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::physical_expr::PhysicalExpr;
use smallvec::SmallVec;

use crate::error::{Error, Result};
use crate::operators::accumulators::{AggregateCall, Arguments};
use crate::operators::distinct_family::{Family, Member, families};
use crate::operators::group_accumulators::{
    FedAsFamily, GroupAccumulator, distinct_state, distinct_state_rows, int64_list, is_valid, primitive,
};

/// A value's copies in each aggregate of the family (most families have up to four members).
type Copies = SmallVec<[i64; 4]>;

/// A group's values, each with its copies in each member; a value leaves when no member has one.
type CountedValues = hashbrown::HashMap<i64, Copies>;

impl Family<CountedValues> {
    /// Adds one copy of `value` to the members `admitted` of group `id` (or takes one back).
    fn count(&mut self, id: usize, value: i64, admitted: &[bool], retract: bool) {
        let members = self.positions.len();
        let group = &mut self.groups[id];
        if retract {
            let Some(copies) = group.get_mut(&value) else { return };
            for (member, _) in admitted.iter().enumerate().filter(|(_, admits)| **admits) {
                if copies[member] > 0 {
                    copies[member] -= 1;
                    if copies[member] == 0 {
                        self.distinct[member][id] -= 1;
                    }
                }
            }
            if copies.iter().all(|c| *c <= 0) {
                group.remove(&value);
            }
        } else {
            let copies = group.entry(value).or_insert_with(|| smallvec::smallvec![0; members]);
            for (member, _) in admitted.iter().enumerate().filter(|(_, admits)| **admits) {
                if copies[member] == 0 {
                    self.distinct[member][id] += 1;
                }
                copies[member] += 1;
            }
        }
    }
}

/// One `count(DISTINCT x)` of a family over a changelog.
pub(crate) struct SharedDistinct(Member<CountedValues>);

impl FedAsFamily for SharedDistinct {
    /// Feeds rows `rows` (to groups `ids`, pairwise) to every member of the family, each under
    /// its own FILTER; only the family's first member does, the others' turn is a no-op.
    fn feed(&self, arguments: &[Arguments], rows: &[u32], ids: &[usize], retract: bool) -> Result<()> {
        if !self.0.leads() {
            return Ok(());
        }
        let mut family = self.0.family();
        let members: Vec<&Arguments> = family.positions.iter().map(|p| &arguments[*p]).collect();
        let Some(first) = members.first() else { return Ok(()) };
        let values = primitive::<Int64Type>(&first.values()[0], &DataType::Int64)?;
        let nulls = values.logical_nulls();
        let mut admitted = vec![false; members.len()];
        for (&row, &id) in rows.iter().zip(ids) {
            if !is_valid(&nulls, row) {
                continue;
            }
            let mut any = false;
            for (admits, member) in admitted.iter_mut().zip(&members) {
                *admits = member.admits(row);
                any |= *admits;
            }
            if any {
                family.count(id, values.value(row as usize), &admitted, retract);
            }
        }
        Ok(())
    }
}

impl GroupAccumulator for SharedDistinct {
    fn resize(&mut self, groups: usize) {
        self.0.resize(groups);
    }

    fn update(&mut self, _: &[ArrayRef], _: &[u32], _: &[usize], _: bool) -> Result<()> {
        Err(Error::Graph("a shared distinct count is fed through its family (SharedDistinct::feed)".into()))
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

    /// The values this member has copies of and their copies, as a lone distinct count writes.
    fn state(&mut self, ids: &[usize]) -> Result<Vec<ArrayRef>> {
        let family = self.0.family();
        let member = self.0.index();
        let pairs = |id: usize| {
            let kept = family.groups[id].iter().filter(move |(_, counts)| counts[member] > 0);
            kept.map(move |(value, counts)| (*value, counts[member]))
        };
        Ok(distinct_state(ids, pairs))
    }

    fn merge(&mut self, states: &[ArrayRef], ids: &[usize]) -> Result<()> {
        let mut family = self.0.family();
        let (member, members) = (self.0.index(), family.positions.len());
        for (&id, (values, copies)) in ids.iter().zip(distinct_state_rows(states)?) {
            for (value, count) in values.values().iter().zip(copies.values()) {
                let copies = family.groups[id].entry(*value).or_insert_with(|| smallvec::smallvec![0; members]);
                let before = copies[member];
                copies[member] += count;
                let after = copies[member];
                family.distinct[member][id] += i64::from(after > 0) - i64::from(before > 0);
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

/// Replaces the lone `count(DISTINCT x)` accumulators of `calls` that share their argument `x`
/// (differing in FILTER) by the members of one family each. `distinct_argument` says which
/// calls are counted natively as lone distinct counts, and of what.
pub(crate) fn share_distinct_counts(
    calls: &[AggregateCall],
    accumulators: &mut [Box<dyn GroupAccumulator>],
    distinct_argument: impl Fn(&AggregateCall) -> Option<Arc<dyn PhysicalExpr>>,
) {
    for positions in families(calls, distinct_argument, 2) {
        for (position, member) in positions.iter().zip(Member::family_of(&positions)) {
            accumulators[*position] = Box::new(SharedDistinct(member));
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

    const GROUPS: usize = 4;

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

    /// Each group's (value, copies) pairs of an accumulator's state, in value order.
    fn state_of(accumulator: &mut Box<dyn GroupAccumulator>) -> Vec<Vec<(i64, i64)>> {
        let all: Vec<usize> = (0..GROUPS).collect();
        let state = accumulator.state(&all).unwrap();
        let rows = distinct_state_rows(&state).unwrap().into_iter();
        rows.map(|(values, copies)| {
            let mut pairs: Vec<(i64, i64)> =
                values.values().iter().copied().zip(copies.values().iter().copied()).collect();
            pairs.sort();
            pairs
        })
        .collect()
    }

    /// The values of groups `0..groups`.
    fn values_of(accumulator: &mut Box<dyn GroupAccumulator>, groups: usize) -> Vec<i64> {
        let ids: Vec<usize> = (0..groups).collect();
        accumulator.evaluate(&ids).unwrap().as_primitive::<Int64Type>().values().to_vec()
    }

    /// The distinct counts of one argument under different FILTERs share one family and give,
    /// through rows added and taken back, a snapshot and a restore, a compaction and a group
    /// forgotten, what each gives alone; a distinct count of another argument stays alone.
    #[test]
    fn distinct_counts_of_one_argument_share_their_values_and_agree_with_lone_ones() {
        let schema =
            Arc::new(Schema::new(vec![Field::new("i", DataType::Int64, true), Field::new("j", DataType::Int64, true)]));
        let calls = vec![
            distinct(&schema, "i", None),
            distinct(&schema, "i", Some((Operator::Lt, 0))),
            distinct(&schema, "j", None),
            distinct(&schema, "i", Some((Operator::GtEq, 5))),
        ];
        let unreachable = || -> datafusion::error::Result<Box<dyn Accumulator>> { panic!("not native") };
        let build = || group_accumulators(&calls, true, |_| unreachable).unwrap();
        let mut shared = build();
        let sharing: Vec<bool> = shared.iter().map(|a| a.fed_as_family().is_some()).collect();
        assert_eq!(sharing, [true, true, false, true]);
        let mut lone: Vec<Box<dyn GroupAccumulator>> =
            calls.iter().map(|call| group_accumulator(call, true, unreachable).unwrap()).collect();

        let i: Vec<Option<i64>> = (0..300i64).map(|r| (r % 11 != 4).then_some((r * 7) % 23)).collect();
        let j: Vec<Option<i64>> = (0..300i64).map(|r| (r % 13 != 6).then_some((r * 5) % 19 - 9)).collect();
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from(i)) as ArrayRef, Arc::new(Int64Array::from(j))],
        )
        .unwrap();
        let args = arguments(&calls, &batch).unwrap();
        let rows: Vec<u32> = (0..300).collect();
        let ids: Vec<usize> = rows.iter().map(|r| (*r as usize * 5) % GROUPS).collect();
        // A third of the rows taken back, and a row never added (nothing to take back).
        let back: Vec<u32> = (0..300).filter(|r| r % 3 == 1).collect();
        let back_ids: Vec<usize> = back.iter().map(|r| (*r as usize * 5) % GROUPS).collect();
        let feed_all = |accumulators: &mut Vec<Box<dyn GroupAccumulator>>, shared: bool| {
            accumulators.iter_mut().for_each(|a| a.resize(GROUPS));
            let steps = [(&rows, &ids, false), (&back, &back_ids, true)];
            for (rows, ids, retract) in steps {
                if shared {
                    feed(accumulators, &args, rows, ids, retract).unwrap();
                } else {
                    for (k, accumulator) in accumulators.iter_mut().enumerate() {
                        feed(std::slice::from_mut(accumulator), &args[k..k + 1], rows, ids, retract).unwrap();
                    }
                }
            }
        };
        feed_all(&mut shared, true);
        feed_all(&mut lone, false);
        for (k, (a, b)) in shared.iter_mut().zip(&mut lone).enumerate() {
            assert_eq!(values_of(a, GROUPS), values_of(b, GROUPS), "aggregate {k}");
            assert_eq!(state_of(a), state_of(b), "aggregate {k}'s state");
            assert!(values_of(a, GROUPS).iter().any(|v| *v > 0), "aggregate {k} counts something");
        }

        // Restored from the lone ones' state, then a group forgotten and the others compacted.
        let mut restored = build();
        let all: Vec<usize> = (0..GROUPS).collect();
        for (a, b) in restored.iter_mut().zip(&mut lone) {
            a.resize(GROUPS);
            a.merge(&b.state(&all).unwrap(), &all).unwrap();
        }
        for accumulators in [&mut restored, &mut lone] {
            for accumulator in accumulators.iter_mut() {
                accumulator.forget(1);
            }
            for accumulator in accumulators.iter_mut() {
                accumulator.retain(&[true, false, true, true]);
            }
        }
        for (k, (a, b)) in restored.iter_mut().zip(&mut lone).enumerate() {
            assert_eq!(values_of(a, GROUPS - 1), values_of(b, GROUPS - 1), "aggregate {k} after a restore");
        }
    }
}
