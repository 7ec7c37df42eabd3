//! What the two kinds of `count(DISTINCT x)` families share (a changelog's, with copies
//! counted, in [`crate::operators::shared_distinct`]; rows never taken back, values only, in
//! [`crate::operators::seen_distinct`]): the distinct counts of one argument under different
//! FILTERs keep one store of values per group, and each is an accumulator of its own (a
//! [`Member`]) whose value is its count and whose state reads as a lone distinct count's. The
//! family's first member feeds it and compacts it; the others' turns are no-ops.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use datafusion::arrow::array::{ArrayRef, Int64Array};
use datafusion::physical_expr::PhysicalExpr;

use crate::operators::accumulators::AggregateCall;
use crate::operators::group_accumulators::retain_vec;

/// What the members of a family share.
pub(crate) struct Family<G> {
    /// The members' positions among the operator's aggregates (their arguments and FILTERs).
    pub(crate) positions: Vec<usize>,
    /// Per group, its values as the kind of family keeps them.
    pub(crate) groups: Vec<G>,
    /// Per member, per group: how many values it has (its distinct count).
    pub(crate) distinct: Vec<Vec<i64>>,
}

/// One distinct count of a family: the family, and its place in it.
pub(crate) struct Member<G> {
    family: Arc<Mutex<Family<G>>>,
    member: usize,
}

impl<G: Default> Member<G> {
    /// The members of a new family of the aggregates at `positions`, in that order.
    pub(crate) fn family_of(positions: &[usize]) -> Vec<Member<G>> {
        let family = Arc::new(Mutex::new(Family {
            positions: positions.to_vec(),
            groups: Vec::new(),
            distinct: vec![Vec::new(); positions.len()],
        }));
        (0..positions.len()).map(|member| Member { family: family.clone(), member }).collect()
    }

    pub(crate) fn family(&self) -> MutexGuard<'_, Family<G>> {
        // A panic while holding it is a bug that has failed the task already; the data is
        // plain values and counters either way.
        self.family.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Its place in the family.
    pub(crate) fn index(&self) -> usize {
        self.member
    }

    /// Whether it feeds and compacts the family.
    pub(crate) fn leads(&self) -> bool {
        self.member == 0
    }

    /// Makes room for group ids below `groups` (every member asks for the same size).
    pub(crate) fn resize(&self, groups: usize) {
        let mut family = self.family();
        family.groups.resize_with(groups, G::default);
        for distinct in &mut family.distinct {
            distinct.resize(groups, 0);
        }
    }

    /// This member's distinct counts of groups `ids`.
    pub(crate) fn evaluate(&self, ids: &[usize]) -> ArrayRef {
        let family = self.family();
        let distinct = &family.distinct[self.member];
        Arc::new(Int64Array::from_iter_values(ids.iter().map(|&id| distinct[id])))
    }

    /// Empties group `id` for every member.
    pub(crate) fn forget(&self, id: usize) {
        let mut family = self.family();
        family.groups[id] = G::default();
        for distinct in &mut family.distinct {
            distinct[id] = 0;
        }
    }

    /// Keeps the groups with `keep[id]` set, renumbered; every member is asked, the family is
    /// compacted once.
    pub(crate) fn retain(&self, keep: &[bool]) {
        if self.leads() {
            let mut family = self.family();
            retain_vec(&mut family.groups, keep);
            for distinct in &mut family.distinct {
                retain_vec(distinct, keep);
            }
        }
    }
}

/// The positions of `calls` grouped by the argument `distinct_argument` gives them (calls it
/// gives none are in no group), each group in order, the groups by their first position; groups
/// of fewer than `least` calls left out.
pub(crate) fn families(
    calls: &[AggregateCall],
    distinct_argument: impl Fn(&AggregateCall) -> Option<Arc<dyn PhysicalExpr>>,
    least: usize,
) -> Vec<Vec<usize>> {
    let arguments: Vec<Option<Arc<dyn PhysicalExpr>>> = calls.iter().map(&distinct_argument).collect();
    let mut placed = vec![false; calls.len()];
    let mut families = Vec::new();
    for first in 0..calls.len() {
        let Some(argument) = arguments[first].as_ref().filter(|_| !placed[first]) else { continue };
        let positions: Vec<usize> = (first..calls.len()).filter(|p| arguments[*p].as_ref() == Some(argument)).collect();
        for position in &positions {
            placed[*position] = true;
        }
        if positions.len() >= least {
            families.push(positions);
        }
    }
    families
}
