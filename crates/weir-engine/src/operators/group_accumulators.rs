//! One aggregate's state for every group of a keyed operator, kept in vectors indexed by group
//! id ([`crate::group_keys`]) and updated for a whole batch at once.
//!
//! Why not DataFusion's `GroupsAccumulator`: it is made for a batch query's one final answer,
//! so `evaluate` and `state` hand over (and drop) the groups they emit, and it cannot take a row
//! back. An updating aggregate reads the current value of the groups a batch changed after every
//! batch, keeps them, and takes rows back when its input is a changelog. So count, sum, avg, min
//! and max over primitive types, the functions almost every streaming GROUP BY uses, are kept
//! natively here: a plain add per row, no allocation; so are `count(DISTINCT x)` of integers and
//! times (over a changelog a hash map of values per group, each value's copies counted so that
//! it can be taken back; over rows never taken back a set of values seen, in
//! [`crate::operators::seen_distinct`]) and min/max of strings (Nexmark q15 and q16). Every other function (and other DISTINCT
//! or ordered forms) keeps DataFusion's per-group `Accumulator`, one per group, in [`PerGroup`].

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, ArrowPrimitiveType, AsArray, Int64Array, Int64Builder, ListBuilder, PrimitiveArray, StringArray,
    UInt32Array, new_empty_array,
};
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::compute::{cast, take};
use datafusion::arrow::datatypes::{
    ArrowNativeTypeOp, DataType, Date32Type, Date64Type, Field, Float32Type, Float64Type, Int8Type, Int16Type,
    Int32Type, Int64Type, TimeUnit, TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Accumulator;
use datafusion::physical_expr::PhysicalExpr;

use crate::error::{Error, Result};
use crate::operators::accumulators::{self, AggregateCall, Arguments, cast_to};
use crate::operators::seen_distinct::share_seen_distinct;
use crate::operators::shared_distinct::share_distinct_counts;

/// An aggregate's state over every group of an operator.
pub(crate) trait GroupAccumulator: Send + Sync {
    /// Makes room for group ids below `groups`.
    fn resize(&mut self, groups: usize);
    /// Adds rows `rows` of the arguments `values` to groups `ids` (pairwise), or takes them
    /// back (`retract`).
    fn update(&mut self, values: &[ArrayRef], rows: &[u32], ids: &[usize], retract: bool) -> Result<()>;
    /// The current values of groups `ids`, keeping them.
    fn evaluate(&mut self, ids: &[usize]) -> Result<ArrayRef>;
    /// The types of the state columns [`Self::state`] writes and [`Self::merge`] reads.
    fn state_types(&self) -> Vec<DataType>;
    /// The state of groups `ids`, one row each, keeping them.
    fn state(&mut self, ids: &[usize]) -> Result<Vec<ArrayRef>>;
    /// Merges row i of `states` (as [`Self::state`] wrote them) into group `ids[i]`.
    fn merge(&mut self, states: &[ArrayRef], ids: &[usize]) -> Result<()>;
    /// Makes room for `additional` more groups, when a restore knows how many at most.
    fn reserve(&mut self, _additional: usize) {}
    /// Empties a group, releasing its memory: a removed group's (its id is not used again
    /// before [`Self::retain`]), or a restored group's that a newer restored state replaces
    /// (merged into it next).
    fn forget(&mut self, id: usize);
    /// Keeps the groups with `keep[id]` set, renumbered 0.. in their order.
    fn retain(&mut self, keep: &[bool]);
    /// A member of a family fed in one pass ([`feed`] feeds the family through it).
    fn fed_as_family(&self) -> Option<&dyn FedAsFamily> {
        None
    }
}

/// Aggregates fed together, a row's work done once for all of them: the distinct counts of
/// one argument under different FILTERs, which share the values they have seen.
pub(crate) trait FedAsFamily {
    /// Feeds rows `rows` of the family's `arguments` (all aggregates', indexed by position) to
    /// groups `ids` (pairwise), or takes them back.
    fn feed(&self, arguments: &[Arguments], rows: &[u32], ids: &[usize], retract: bool) -> Result<()>;
}

/// The accumulator for `call`: a native one where there is one for its function and types
/// (and, for a changelog input, one that takes rows back), else one of `per_group`'s
/// accumulators per group.
pub(crate) fn group_accumulator(
    call: &AggregateCall,
    retracting: bool,
    per_group: impl Fn() -> datafusion::error::Result<Box<dyn Accumulator>> + Send + Sync + 'static,
) -> Result<Box<dyn GroupAccumulator>> {
    let function = &call.function;
    let plain = !function.is_distinct() && function.order_bys().is_empty() && function.expressions().len() == 1;
    let output = function.field().data_type().clone();
    let native: Option<Box<dyn GroupAccumulator>> = match function.fun().name().to_lowercase().as_str() {
        "count" if !function.is_distinct() && function.order_bys().is_empty() => Some(Box::new(Count::default())),
        "count" if lone_distinct_argument(call)?.is_some() => Some(Box::new(CountDistinct::default())),
        "sum" if plain => match output {
            DataType::Int64 => Some(Box::new(Sum::<Int64Type>::new(output))),
            DataType::UInt64 => Some(Box::new(Sum::<UInt64Type>::new(output))),
            DataType::Float64 => Some(Box::new(Sum::<Float64Type>::new(output))),
            _ => None,
        },
        "avg" | "mean" if plain && output == DataType::Float64 => Some(Box::new(Avg::default())),
        "min" | "max" if plain && !retracting && output == DataType::Utf8 => {
            let extreme = if function.fun().name().eq_ignore_ascii_case("min") { Extreme::Min } else { Extreme::Max };
            Some(Box::new(StringExtreme::new(extreme)))
        }
        "min" if plain && !retracting => extreme(output, Extreme::Min),
        "max" if plain && !retracting => extreme(output, Extreme::Max),
        _ => None,
    };
    match native {
        Some(native) => Ok(native),
        None => Ok(Box::new(PerGroup::new(per_group, function.field().data_type().clone())?)),
    }
}

/// The accumulators of `calls`, each as [`group_accumulator`] makes it, except that the
/// distinct counts of one argument under different FILTERs share their values
/// ([`share_distinct_counts`]), and that over rows never taken back every native distinct
/// count is kept as a set of values seen instead ([`share_seen_distinct`]). `per_group` makes
/// the per-group accumulator of a call.
pub(crate) fn group_accumulators<F>(
    calls: &[AggregateCall],
    retracting: bool,
    per_group: impl Fn(&AggregateCall) -> F,
) -> Result<Vec<Box<dyn GroupAccumulator>>>
where
    F: Fn() -> datafusion::error::Result<Box<dyn Accumulator>> + Send + Sync + 'static,
{
    let mut accumulators =
        calls.iter().map(|call| group_accumulator(call, retracting, per_group(call))).collect::<Result<Vec<_>>>()?;
    let distinct_argument = |call: &AggregateCall| lone_distinct_argument(call).ok().flatten();
    if retracting {
        share_distinct_counts(calls, &mut accumulators, distinct_argument);
    } else {
        share_seen_distinct(calls, &mut accumulators, distinct_argument);
    }
    Ok(accumulators)
}

/// The argument of `call` if it is a `count(DISTINCT x)` counted natively ([`CountDistinct`]):
/// one argument of a whole-number or time type.
fn lone_distinct_argument(call: &AggregateCall) -> Result<Option<Arc<dyn PhysicalExpr>>> {
    let function = &call.function;
    if !function.fun().name().eq_ignore_ascii_case("count") || !function.is_distinct() {
        return Ok(None);
    }
    let expressions = function.expressions();
    let [argument] = expressions.as_slice() else { return Ok(None) };
    // DataFusion's state for it is the list of distinct values: their type.
    Ok(match function.state_fields()?.first().map(|f| f.data_type().clone()) {
        Some(DataType::List(values)) if counts_distinct(values.data_type()) => Some(argument.clone()),
        _ => None,
    })
}

/// Feeds rows `rows` of each aggregate's `arguments` to groups `ids` (pairwise) of its
/// accumulator, or takes them back; an aggregate with a FILTER gets only the rows it lets in.
pub(crate) fn feed(
    accumulators: &mut [Box<dyn GroupAccumulator>],
    arguments: &[Arguments],
    rows: &[u32],
    ids: &[usize],
    retract: bool,
) -> Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    for (accumulator, own) in accumulators.iter_mut().zip(arguments) {
        if let Some(family) = accumulator.fed_as_family() {
            family.feed(arguments, rows, ids, retract)?;
        } else if own.filtered() {
            let (rows, ids): (Vec<u32>, Vec<usize>) = rows.iter().zip(ids).filter(|(row, _)| own.admits(**row)).unzip();
            accumulator.update(own.values(), &rows, &ids, retract)?;
        } else {
            accumulator.update(own.values(), rows, ids, retract)?;
        }
    }
    Ok(())
}

fn extreme(data_type: DataType, extreme: Extreme) -> Option<Box<dyn GroupAccumulator>> {
    fn of<T: ArrowPrimitiveType>(data_type: DataType, extreme: Extreme) -> Option<Box<dyn GroupAccumulator>> {
        Some(Box::new(MinMax::<T>::new(data_type, extreme)))
    }
    match &data_type {
        DataType::Int8 => of::<Int8Type>(data_type, extreme),
        DataType::Int16 => of::<Int16Type>(data_type, extreme),
        DataType::Int32 => of::<Int32Type>(data_type, extreme),
        DataType::Int64 => of::<Int64Type>(data_type, extreme),
        DataType::UInt8 => of::<UInt8Type>(data_type, extreme),
        DataType::UInt16 => of::<UInt16Type>(data_type, extreme),
        DataType::UInt32 => of::<UInt32Type>(data_type, extreme),
        DataType::UInt64 => of::<UInt64Type>(data_type, extreme),
        DataType::Float32 => of::<Float32Type>(data_type, extreme),
        DataType::Float64 => of::<Float64Type>(data_type, extreme),
        DataType::Date32 => of::<Date32Type>(data_type, extreme),
        DataType::Date64 => of::<Date64Type>(data_type, extreme),
        DataType::Timestamp(TimeUnit::Second, _) => of::<TimestampSecondType>(data_type, extreme),
        DataType::Timestamp(TimeUnit::Millisecond, _) => of::<TimestampMillisecondType>(data_type, extreme),
        DataType::Timestamp(TimeUnit::Microsecond, _) => of::<TimestampMicrosecondType>(data_type, extreme),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => of::<TimestampNanosecondType>(data_type, extreme),
        _ => None,
    }
}

/// Which rows of `values` are non-null in every column (`None`: all of them).
fn valid_rows(values: &[ArrayRef]) -> Option<NullBuffer> {
    values.iter().fold(None, |all, v| NullBuffer::union(all.as_ref(), v.logical_nulls().as_ref()))
}

pub(crate) fn is_valid(nulls: &Option<NullBuffer>, row: u32) -> bool {
    nulls.as_ref().is_none_or(|n| n.is_valid(row as usize))
}

/// `values` of `ids` (pairwise `set[id]` says whether it has one), as an array of `data_type`.
fn gather<T: ArrowPrimitiveType>(
    values: &[T::Native],
    set: impl Fn(usize) -> bool,
    ids: &[usize],
    data_type: &DataType,
) -> ArrayRef {
    let nulls = NullBuffer::from_iter(ids.iter().map(|&id| set(id)));
    let array = PrimitiveArray::<T>::new(ids.iter().map(|&id| values[id]).collect(), Some(nulls));
    Arc::new(array.with_data_type(data_type.clone()))
}

pub(crate) fn primitive<T: ArrowPrimitiveType>(values: &ArrayRef, data_type: &DataType) -> Result<PrimitiveArray<T>> {
    let values = cast_to(values.clone(), data_type)?;
    values
        .as_primitive_opt::<T>()
        .cloned()
        .ok_or_else(|| Error::Graph(format!("an aggregate's argument is {}, not {data_type}", values.data_type())))
}

fn counts(state: &ArrayRef) -> Result<Int64Array> {
    primitive::<Int64Type>(state, &DataType::Int64)
}

/// Keeps the entries of `values` whose `keep` is set, in order (a compaction of ids).
pub(crate) fn retain_vec<T>(values: &mut Vec<T>, keep: &[bool]) {
    let mut id = 0;
    values.retain(|_| {
        id += 1;
        keep.get(id - 1).copied().unwrap_or(false)
    });
}

/// `count(...)`: rows whose arguments are all non-null (`count(*)` is `count(1)`).
#[derive(Default)]
struct Count {
    counts: Vec<i64>,
}

impl GroupAccumulator for Count {
    fn resize(&mut self, groups: usize) {
        self.counts.resize(groups, 0);
    }

    fn reserve(&mut self, additional: usize) {
        self.counts.reserve(additional);
    }

    fn update(&mut self, values: &[ArrayRef], rows: &[u32], ids: &[usize], retract: bool) -> Result<()> {
        let by = if retract { -1 } else { 1 };
        let nulls = valid_rows(values);
        for (&row, &id) in rows.iter().zip(ids) {
            if is_valid(&nulls, row) {
                self.counts[id] += by;
            }
        }
        Ok(())
    }

    fn evaluate(&mut self, ids: &[usize]) -> Result<ArrayRef> {
        Ok(Arc::new(Int64Array::from_iter_values(ids.iter().map(|&id| self.counts[id]))))
    }

    fn state_types(&self) -> Vec<DataType> {
        vec![DataType::Int64]
    }

    fn state(&mut self, ids: &[usize]) -> Result<Vec<ArrayRef>> {
        Ok(vec![self.evaluate(ids)?])
    }

    fn merge(&mut self, states: &[ArrayRef], ids: &[usize]) -> Result<()> {
        for (count, &id) in counts(&states[0])?.values().iter().zip(ids) {
            self.counts[id] += count;
        }
        Ok(())
    }

    fn forget(&mut self, id: usize) {
        self.counts[id] = 0;
    }

    fn retain(&mut self, keep: &[bool]) {
        retain_vec(&mut self.counts, keep);
    }
}

/// `sum(x)` of 64-bit integers or floats, wrapping on overflow as DataFusion's; null while no
/// non-null value is in (so the non-null values are counted too, for a changelog's retractions).
struct Sum<T: ArrowPrimitiveType> {
    data_type: DataType,
    sums: Vec<T::Native>,
    counts: Vec<i64>,
}

impl<T: ArrowPrimitiveType> Sum<T> {
    fn new(data_type: DataType) -> Self {
        Self { data_type, sums: Vec::new(), counts: Vec::new() }
    }
}

impl<T: ArrowPrimitiveType> GroupAccumulator for Sum<T> {
    fn resize(&mut self, groups: usize) {
        self.sums.resize(groups, T::Native::default());
        self.counts.resize(groups, 0);
    }

    fn reserve(&mut self, additional: usize) {
        self.sums.reserve(additional);
        self.counts.reserve(additional);
    }

    fn update(&mut self, values: &[ArrayRef], rows: &[u32], ids: &[usize], retract: bool) -> Result<()> {
        let values = primitive::<T>(&values[0], &self.data_type)?;
        let nulls = values.logical_nulls();
        let values = values.values();
        for (&row, &id) in rows.iter().zip(ids) {
            if !is_valid(&nulls, row) {
                continue;
            }
            let value = values[row as usize];
            if retract {
                self.sums[id] = self.sums[id].sub_wrapping(value);
                self.counts[id] -= 1;
            } else {
                self.sums[id] = self.sums[id].add_wrapping(value);
                self.counts[id] += 1;
            }
        }
        Ok(())
    }

    fn evaluate(&mut self, ids: &[usize]) -> Result<ArrayRef> {
        Ok(gather::<T>(&self.sums, |id| self.counts[id] > 0, ids, &self.data_type))
    }

    fn state_types(&self) -> Vec<DataType> {
        vec![self.data_type.clone(), DataType::Int64]
    }

    fn state(&mut self, ids: &[usize]) -> Result<Vec<ArrayRef>> {
        let sums = gather::<T>(&self.sums, |_| true, ids, &self.data_type);
        let counts = Int64Array::from_iter_values(ids.iter().map(|&id| self.counts[id]));
        Ok(vec![sums, Arc::new(counts)])
    }

    fn merge(&mut self, states: &[ArrayRef], ids: &[usize]) -> Result<()> {
        let sums = primitive::<T>(&states[0], &self.data_type)?;
        for ((&sum, count), &id) in sums.values().iter().zip(counts(&states[1])?.values()).zip(ids) {
            self.sums[id] = self.sums[id].add_wrapping(sum);
            self.counts[id] += count;
        }
        Ok(())
    }

    fn forget(&mut self, id: usize) {
        self.sums[id] = T::Native::default();
        self.counts[id] = 0;
    }

    fn retain(&mut self, keep: &[bool]) {
        retain_vec(&mut self.sums, keep);
        retain_vec(&mut self.counts, keep);
    }
}

/// `avg(x)` of floats (DataFusion casts integers to floats for it): sum / count.
#[derive(Default)]
struct Avg {
    sum: Sum<Float64Type>,
}

impl Default for Sum<Float64Type> {
    fn default() -> Self {
        Self::new(DataType::Float64)
    }
}

impl GroupAccumulator for Avg {
    fn resize(&mut self, groups: usize) {
        self.sum.resize(groups);
    }

    fn reserve(&mut self, additional: usize) {
        self.sum.reserve(additional);
    }

    fn update(&mut self, values: &[ArrayRef], rows: &[u32], ids: &[usize], retract: bool) -> Result<()> {
        self.sum.update(values, rows, ids, retract)
    }

    fn evaluate(&mut self, ids: &[usize]) -> Result<ArrayRef> {
        let sum = &self.sum;
        let averages = ids.iter().map(|&id| (sum.counts[id] > 0).then(|| sum.sums[id] / sum.counts[id] as f64));
        Ok(Arc::new(PrimitiveArray::<Float64Type>::from_iter(averages)))
    }

    fn state_types(&self) -> Vec<DataType> {
        self.sum.state_types()
    }

    fn state(&mut self, ids: &[usize]) -> Result<Vec<ArrayRef>> {
        self.sum.state(ids)
    }

    fn merge(&mut self, states: &[ArrayRef], ids: &[usize]) -> Result<()> {
        self.sum.merge(states, ids)
    }

    fn forget(&mut self, id: usize) {
        self.sum.forget(id);
    }

    fn retain(&mut self, keep: &[bool]) {
        self.sum.retain(keep);
    }
}

#[derive(Clone, Copy)]
enum Extreme {
    Min,
    Max,
}

/// `min(x)` / `max(x)` of a primitive type over rows that are never taken back (a changelog's
/// extremes need every value's count: `ValueCounts`). Floats are ordered as Arrow's `min`/`max`
/// kernels order them (a total order, NaN highest).
struct MinMax<T: ArrowPrimitiveType> {
    data_type: DataType,
    extreme: Extreme,
    values: Vec<T::Native>,
    set: Vec<bool>,
}

impl<T: ArrowPrimitiveType> MinMax<T> {
    fn new(data_type: DataType, extreme: Extreme) -> Self {
        Self { data_type, extreme, values: Vec::new(), set: Vec::new() }
    }

    fn offer(&mut self, id: usize, value: T::Native) {
        let better = match self.extreme {
            Extreme::Min => value.is_lt(self.values[id]),
            Extreme::Max => value.is_gt(self.values[id]),
        };
        if !self.set[id] || better {
            self.values[id] = value;
            self.set[id] = true;
        }
    }
}

impl<T: ArrowPrimitiveType> GroupAccumulator for MinMax<T> {
    fn resize(&mut self, groups: usize) {
        self.values.resize(groups, T::Native::default());
        self.set.resize(groups, false);
    }

    fn reserve(&mut self, additional: usize) {
        self.values.reserve(additional);
        self.set.reserve(additional);
    }

    fn update(&mut self, values: &[ArrayRef], rows: &[u32], ids: &[usize], retract: bool) -> Result<()> {
        if retract && !rows.is_empty() {
            return Err(Error::Graph("min/max cannot take a row back here".into()));
        }
        let values = primitive::<T>(&values[0], &self.data_type)?;
        let nulls = values.logical_nulls();
        for (&row, &id) in rows.iter().zip(ids) {
            if is_valid(&nulls, row) {
                self.offer(id, values.values()[row as usize]);
            }
        }
        Ok(())
    }

    fn evaluate(&mut self, ids: &[usize]) -> Result<ArrayRef> {
        Ok(gather::<T>(&self.values, |id| self.set[id], ids, &self.data_type))
    }

    fn state_types(&self) -> Vec<DataType> {
        vec![self.data_type.clone()]
    }

    fn state(&mut self, ids: &[usize]) -> Result<Vec<ArrayRef>> {
        Ok(vec![self.evaluate(ids)?])
    }

    fn merge(&mut self, states: &[ArrayRef], ids: &[usize]) -> Result<()> {
        let values = primitive::<T>(&states[0], &self.data_type)?;
        for (row, &id) in ids.iter().enumerate() {
            if values.is_valid(row) {
                self.offer(id, values.value(row));
            }
        }
        Ok(())
    }

    fn forget(&mut self, id: usize) {
        self.set[id] = false;
    }

    fn retain(&mut self, keep: &[bool]) {
        retain_vec(&mut self.values, keep);
        retain_vec(&mut self.set, keep);
    }
}

/// Whether values of `data_type` are whole numbers that an Int64 holds exactly.
fn counts_distinct(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::Date32
            | DataType::Date64
            | DataType::Timestamp(_, _)
    )
}

/// A distinct count's state of groups `ids`: each one's values and their copies (`pairs` of
/// the group), as two lists.
pub(crate) fn distinct_state<P: IntoIterator<Item = (i64, i64)>>(
    ids: &[usize],
    pairs: impl Fn(usize) -> P,
) -> Vec<ArrayRef> {
    let (mut values, mut copies) = (ListBuilder::new(Int64Builder::new()), ListBuilder::new(Int64Builder::new()));
    for &id in ids {
        for (value, count) in pairs(id) {
            values.values().append_value(value);
            copies.values().append_value(count);
        }
        values.append(true);
        copies.append(true);
    }
    vec![Arc::new(values.finish()), Arc::new(copies.finish())]
}

/// Each row of a distinct count's state (as [`distinct_state`] writes it): values and copies.
pub(crate) fn distinct_state_rows(states: &[ArrayRef]) -> Result<Vec<(Int64Array, Int64Array)>> {
    let lists = |state: &ArrayRef| {
        state.as_list_opt::<i32>().cloned().ok_or_else(|| Error::Graph("a distinct count's state is not a list".into()))
    };
    let (values, copies) = (lists(&states[0])?, lists(&states[1])?);
    (0..values.len()).map(|row| Ok((counts(&values.value(row))?, counts(&copies.value(row))?))).collect()
}

pub(crate) fn int64_list() -> DataType {
    DataType::List(Arc::new(Field::new_list_field(DataType::Int64, true)))
}

/// `count(DISTINCT x)` of whole numbers: per group, each distinct value and how many rows of it
/// are in (a changelog takes rows back; the value leaves with its last copy). The state is the
/// values and their copies, as two lists per group.
#[derive(Default)]
struct CountDistinct {
    groups: Vec<hashbrown::HashMap<i64, i64>>,
}

impl GroupAccumulator for CountDistinct {
    fn resize(&mut self, groups: usize) {
        self.groups.resize_with(groups, hashbrown::HashMap::new);
    }

    fn update(&mut self, values: &[ArrayRef], rows: &[u32], ids: &[usize], retract: bool) -> Result<()> {
        let values = primitive::<Int64Type>(&values[0], &DataType::Int64)?;
        let nulls = values.logical_nulls();
        for (&row, &id) in rows.iter().zip(ids) {
            if !is_valid(&nulls, row) {
                continue;
            }
            let value = values.value(row as usize);
            let group = &mut self.groups[id];
            if retract {
                if let Some(copies) = group.get_mut(&value) {
                    *copies -= 1;
                    if *copies <= 0 {
                        group.remove(&value);
                    }
                }
            } else {
                *group.entry(value).or_insert(0) += 1;
            }
        }
        Ok(())
    }

    fn evaluate(&mut self, ids: &[usize]) -> Result<ArrayRef> {
        Ok(Arc::new(Int64Array::from_iter_values(ids.iter().map(|&id| self.groups[id].len() as i64))))
    }

    fn state_types(&self) -> Vec<DataType> {
        vec![int64_list(), int64_list()]
    }

    fn state(&mut self, ids: &[usize]) -> Result<Vec<ArrayRef>> {
        Ok(distinct_state(ids, |id| self.groups[id].iter().map(|(value, count)| (*value, *count))))
    }

    fn merge(&mut self, states: &[ArrayRef], ids: &[usize]) -> Result<()> {
        for (id, (values, copies)) in ids.iter().zip(distinct_state_rows(states)?) {
            for (value, count) in values.values().iter().zip(copies.values()) {
                *self.groups[*id].entry(*value).or_insert(0) += count;
            }
        }
        Ok(())
    }

    fn forget(&mut self, id: usize) {
        self.groups[id] = hashbrown::HashMap::new();
    }

    fn retain(&mut self, keep: &[bool]) {
        retain_vec(&mut self.groups, keep);
    }
}

/// `min(x)` / `max(x)` of strings over rows that are never taken back: a group's string is
/// copied only when a better one comes.
struct StringExtreme {
    extreme: Extreme,
    values: Vec<Option<String>>,
}

impl StringExtreme {
    fn new(extreme: Extreme) -> Self {
        Self { extreme, values: Vec::new() }
    }

    fn offer(&mut self, id: usize, value: &str) {
        let better = match (&self.values[id], self.extreme) {
            (None, _) => true,
            (Some(kept), Extreme::Min) => value < kept.as_str(),
            (Some(kept), Extreme::Max) => value > kept.as_str(),
        };
        if better {
            self.values[id] = Some(value.to_string());
        }
    }

    fn strings(values: &ArrayRef) -> Result<StringArray> {
        let values = cast_to(values.clone(), &DataType::Utf8)?;
        values
            .as_string_opt::<i32>()
            .cloned()
            .ok_or_else(|| Error::Graph(format!("a string min/max got {}", values.data_type())))
    }
}

impl GroupAccumulator for StringExtreme {
    fn resize(&mut self, groups: usize) {
        self.values.resize(groups, None);
    }

    fn update(&mut self, values: &[ArrayRef], rows: &[u32], ids: &[usize], retract: bool) -> Result<()> {
        if retract && !rows.is_empty() {
            return Err(Error::Graph("min/max cannot take a row back here".into()));
        }
        let values = Self::strings(&values[0])?;
        for (&row, &id) in rows.iter().zip(ids) {
            if values.is_valid(row as usize) {
                self.offer(id, values.value(row as usize));
            }
        }
        Ok(())
    }

    fn evaluate(&mut self, ids: &[usize]) -> Result<ArrayRef> {
        Ok(Arc::new(StringArray::from_iter(ids.iter().map(|&id| self.values[id].as_deref()))))
    }

    fn state_types(&self) -> Vec<DataType> {
        vec![DataType::Utf8]
    }

    fn state(&mut self, ids: &[usize]) -> Result<Vec<ArrayRef>> {
        Ok(vec![self.evaluate(ids)?])
    }

    fn merge(&mut self, states: &[ArrayRef], ids: &[usize]) -> Result<()> {
        let values = Self::strings(&states[0])?;
        for (row, &id) in ids.iter().enumerate() {
            if values.is_valid(row) {
                self.offer(id, values.value(row));
            }
        }
        Ok(())
    }

    fn forget(&mut self, id: usize) {
        self.values[id] = None;
    }

    fn retain(&mut self, keep: &[bool]) {
        retain_vec(&mut self.values, keep);
    }
}

type MakeAccumulator = Box<dyn Fn() -> datafusion::error::Result<Box<dyn Accumulator>> + Send + Sync>;

/// Any other function: one DataFusion `Accumulator` per group.
struct PerGroup {
    make: MakeAccumulator,
    output: DataType,
    state_types: Vec<DataType>,
    groups: Vec<Option<Box<dyn Accumulator>>>,
}

impl PerGroup {
    fn new(
        make: impl Fn() -> datafusion::error::Result<Box<dyn Accumulator>> + Send + Sync + 'static,
        output: DataType,
    ) -> Result<Self> {
        // The state a fresh accumulator reports (sliding accumulators keep more than the
        // function's `state_fields` says).
        let state_types = accumulators::state_types(&mut make()?)?;
        Ok(Self { make: Box::new(make), output, state_types, groups: Vec::new() })
    }

    fn group(&mut self, id: usize) -> Result<&mut Box<dyn Accumulator>> {
        let slot = &mut self.groups[id];
        if slot.is_none() {
            *slot = Some((self.make)()?);
        }
        slot.as_mut().ok_or_else(|| Error::Graph("a group's accumulator is missing".into()))
    }

    fn column(values: Vec<ScalarValue>, data_type: &DataType) -> Result<ArrayRef> {
        if values.is_empty() {
            return Ok(new_empty_array(data_type));
        }
        Ok(ScalarValue::iter_to_array(values)?)
    }
}

impl GroupAccumulator for PerGroup {
    fn resize(&mut self, groups: usize) {
        self.groups.resize_with(groups, || None);
    }

    fn update(&mut self, values: &[ArrayRef], rows: &[u32], ids: &[usize], retract: bool) -> Result<()> {
        // Each group's rows in one call, in input order.
        let mut order: Vec<usize> = (0..rows.len()).collect();
        order.sort_by_key(|&i| ids[i]);
        for run in order.chunk_by(|&a, &b| ids[a] == ids[b]) {
            let taken = UInt32Array::from_iter_values(run.iter().map(|&i| rows[i]));
            let arguments = values.iter().map(|v| take(v, &taken, None)).collect::<std::result::Result<Vec<_>, _>>()?;
            let accumulator = self.group(ids[run[0]])?;
            if retract { accumulator.retract_batch(&arguments)? } else { accumulator.update_batch(&arguments)? }
        }
        Ok(())
    }

    fn evaluate(&mut self, ids: &[usize]) -> Result<ArrayRef> {
        let values = ids.iter().map(|&id| Ok(self.group(id)?.evaluate()?)).collect::<Result<Vec<_>>>()?;
        Self::column(values, &self.output)
    }

    fn state_types(&self) -> Vec<DataType> {
        self.state_types.clone()
    }

    /// DataFusion's `Accumulator::state` may consume what it returns (median and string_agg
    /// move their values out: it is made for the last step of a partial aggregate), so each
    /// group is replaced by a fresh accumulator merged from its state, as a restore builds it.
    fn state(&mut self, ids: &[usize]) -> Result<Vec<ArrayRef>> {
        let mut columns: Vec<Vec<ScalarValue>> = vec![Vec::with_capacity(ids.len()); self.state_types.len()];
        for &id in ids {
            let state = self.group(id)?.state()?;
            let arrays = state.iter().map(ScalarValue::to_array).collect::<datafusion::error::Result<Vec<_>>>()?;
            let mut rebuilt = (self.make)()?;
            rebuilt.merge_batch(&arrays)?;
            self.groups[id] = Some(rebuilt);
            for (column, value) in columns.iter_mut().zip(state) {
                column.push(value);
            }
        }
        columns
            .into_iter()
            .zip(&self.state_types)
            .map(|(values, data_type)| Ok(cast(&Self::column(values, data_type)?, data_type)?))
            .collect()
    }

    fn merge(&mut self, states: &[ArrayRef], ids: &[usize]) -> Result<()> {
        for (row, &id) in ids.iter().enumerate() {
            let row_states: Vec<ArrayRef> = states.iter().map(|state| state.slice(row, 1)).collect();
            self.group(id)?.merge_batch(&row_states)?;
        }
        Ok(())
    }

    fn forget(&mut self, id: usize) {
        self.groups[id] = None;
    }

    fn retain(&mut self, keep: &[bool]) {
        retain_vec(&mut self.groups, keep);
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::Float64Array;
    use datafusion::arrow::datatypes::{Field, Schema};
    use datafusion::functions_aggregate::average::avg_udaf;
    use datafusion::functions_aggregate::count::count_udaf;
    use datafusion::functions_aggregate::min_max::{max_udaf, min_udaf};
    use datafusion::functions_aggregate::sum::sum_udaf;
    use datafusion::logical_expr::AggregateUDF;
    use datafusion::physical_expr::aggregate::AggregateExprBuilder;
    use datafusion::physical_expr::expressions::col;

    use super::*;

    const GROUPS: usize = 5;

    /// Whole-numbered values (sums exact in any order), some null, and each row's group.
    fn input(column: &str) -> (ArrayRef, Vec<usize>) {
        let values: Vec<Option<i64>> = (0..200i64).map(|i| (i % 7 != 3).then_some((i * 37) % 101 - 50)).collect();
        let ids = (0..values.len()).map(|i| (i * 3) % GROUPS).collect();
        let array: ArrayRef = match column {
            "i" => Arc::new(Int64Array::from(values)),
            _ => Arc::new(Float64Array::from_iter(values.into_iter().map(|v| v.map(|v| v as f64)))),
        };
        (array, ids)
    }

    fn call(function: Arc<AggregateUDF>, column: &str) -> AggregateCall {
        let schema = Arc::new(Schema::new(vec![
            Field::new("i", DataType::Int64, true),
            Field::new("f", DataType::Float64, true),
        ]));
        let expression = AggregateExprBuilder::new(function, vec![col(column, &schema).unwrap()])
            .schema(schema)
            .alias("a")
            .build()
            .unwrap();
        AggregateCall { function: Arc::new(expression), filter: None }
    }

    /// DataFusion's accumulator of each group over the same rows, evaluated.
    fn expected(call: &AggregateCall, values: &ArrayRef, ids: &[usize], retracted: &[u32]) -> Vec<ScalarValue> {
        (0..GROUPS)
            .map(|group| {
                let mut accumulator = call.function.create_sliding_accumulator().unwrap();
                let rows: UInt32Array = (0..ids.len() as u32).filter(|&r| ids[r as usize] == group).collect();
                accumulator.update_batch(&[take(values, &rows, None).unwrap()]).unwrap();
                let back: UInt32Array = retracted.iter().copied().filter(|&r| ids[r as usize] == group).collect();
                if !back.is_empty() {
                    accumulator.retract_batch(&[take(values, &back, None).unwrap()]).unwrap();
                }
                accumulator.evaluate().unwrap()
            })
            .collect()
    }

    fn values_of(accumulator: &mut Box<dyn GroupAccumulator>) -> Vec<ScalarValue> {
        let all: Vec<usize> = (0..GROUPS).collect();
        let values = accumulator.evaluate(&all).unwrap();
        (0..GROUPS).map(|g| ScalarValue::try_from_array(&values, g).unwrap()).collect()
    }

    /// `count(DISTINCT i)` (with rows taken back: a value leaves with its last copy) and
    /// `max(s)` of strings are native, and come back from their state.
    #[test]
    fn distinct_counts_and_string_extremes_are_native_and_survive_their_state() {
        let schema =
            Arc::new(Schema::new(vec![Field::new("i", DataType::Int32, true), Field::new("s", DataType::Utf8, true)]));
        let build = |function: Arc<AggregateUDF>, column: &str, distinct: bool| {
            let builder = AggregateExprBuilder::new(function, vec![col(column, &schema).unwrap()])
                .schema(schema.clone())
                .alias("a");
            let builder = if distinct { builder.distinct() } else { builder };
            AggregateCall { function: Arc::new(builder.build().unwrap()), filter: None }
        };
        let unreachable = || -> datafusion::error::Result<Box<dyn Accumulator>> { panic!("not native") };
        let ids = [0, 0, 0, 1, 1, 0];
        let rows: Vec<u32> = (0..6).collect();

        let mut distinct = group_accumulator(&build(count_udaf(), "i", true), true, unreachable).unwrap();
        distinct.resize(2);
        let values: ArrayRef = Arc::new(datafusion::arrow::array::Int32Array::from(vec![
            Some(7),
            Some(7),
            Some(8),
            None,
            Some(7),
            Some(9),
        ]));
        distinct.update(std::slice::from_ref(&values), &rows, &ids, false).unwrap();
        let counts = |a: &mut Box<dyn GroupAccumulator>| {
            a.evaluate(&[0, 1]).unwrap().as_primitive::<Int64Type>().values().to_vec()
        };
        assert_eq!(counts(&mut distinct), [3, 1], "7, 8, 9 and 7; NULL not counted");
        // One 7 of group 0 taken back: another is still in. The 8 taken back: gone.
        distinct.update(std::slice::from_ref(&values), &[0, 2], &[0, 0], true).unwrap();
        assert_eq!(counts(&mut distinct), [2, 1]);
        let state = distinct.state(&[0, 1]).unwrap();
        let mut restored = group_accumulator(&build(count_udaf(), "i", true), true, unreachable).unwrap();
        restored.resize(2);
        restored.merge(&state, &[0, 1]).unwrap();
        restored.update(std::slice::from_ref(&values), &[1], &[0], true).unwrap();
        assert_eq!(counts(&mut restored), [1, 1], "the last 7 of group 0 taken back after the restore");

        let mut top = group_accumulator(&build(max_udaf(), "s", false), false, unreachable).unwrap();
        top.resize(2);
        let strings: ArrayRef =
            Arc::new(StringArray::from(vec![Some("b"), Some("c"), None, Some("a"), None, Some("a")]));
        top.update(std::slice::from_ref(&strings), &rows, &ids, false).unwrap();
        let state = top.state(&[0, 1]).unwrap();
        let mut restored = group_accumulator(&build(max_udaf(), "s", false), false, unreachable).unwrap();
        restored.resize(2);
        restored.merge(&state, &[1, 0]).unwrap();
        let values = restored.evaluate(&[0, 1]).unwrap();
        assert_eq!(values.as_string::<i32>(), &StringArray::from(vec!["a", "c"]), "restored into swapped ids");
    }

    #[test]
    fn native_accumulators_agree_with_datafusions_and_survive_their_state() {
        let functions = [
            (count_udaf(), "i", true),
            (sum_udaf(), "i", true),
            (sum_udaf(), "f", true),
            (avg_udaf(), "f", true),
            (min_udaf(), "i", false),
            (max_udaf(), "f", false),
        ];
        for (function, column, retracts) in functions {
            let name = format!("{}({column})", function.name());
            let call = call(function, column);
            let (values, ids) = input(column);
            let unreachable = || -> datafusion::error::Result<Box<dyn Accumulator>> { panic!("not native") };
            let mut accumulator = group_accumulator(&call, retracts, unreachable).unwrap();
            accumulator.resize(GROUPS);
            let rows: Vec<u32> = (0..ids.len() as u32).collect();
            accumulator.update(std::slice::from_ref(&values), &rows, &ids, false).unwrap();
            // Every third row taken back, where the function can.
            let retracted: Vec<u32> =
                if retracts { rows.iter().copied().filter(|r| r % 3 == 0).collect() } else { vec![] };
            let retracted_ids: Vec<usize> = retracted.iter().map(|&r| ids[r as usize]).collect();
            accumulator.update(std::slice::from_ref(&values), &retracted, &retracted_ids, true).unwrap();
            let want = expected(&call, &values, &ids, &retracted);
            assert_eq!(values_of(&mut accumulator), want, "{name}");
            // Evaluating keeps the groups; their state merged into fresh ids gives the same.
            assert_eq!(values_of(&mut accumulator), want, "{name}, evaluated again");
            let state = accumulator.state(&(0..GROUPS).collect::<Vec<_>>()).unwrap();
            let types: Vec<DataType> = state.iter().map(|s| s.data_type().clone()).collect();
            assert_eq!(types, accumulator.state_types(), "{name}");
            let mut restored = group_accumulator(&call, retracts, unreachable).unwrap();
            restored.resize(GROUPS);
            restored.merge(&state, &(0..GROUPS).collect::<Vec<_>>()).unwrap();
            assert_eq!(values_of(&mut restored), want, "{name}, restored");
            // Keeping some groups renumbers them in order.
            restored.retain(&[false, true, false, true, true]);
            let kept = restored.evaluate(&[0, 1, 2]).unwrap();
            let kept: Vec<ScalarValue> = (0..3).map(|g| ScalarValue::try_from_array(&kept, g).unwrap()).collect();
            assert_eq!(kept, [want[1].clone(), want[3].clone(), want[4].clone()], "{name}, retained");
        }
    }
}
