//! What the aggregating operators (windows, updating aggregates) share about DataFusion
//! accumulators: the aggregate calls, evaluating their arguments (and FILTER clauses) over a
//! batch, feeding a group's rows to its accumulators, and turning rows of scalar values
//! (groups' outputs or states) back into typed columns.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, BooleanArray, UInt32Array};
use datafusion::arrow::compute::{cast, take};
use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Accumulator;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;

use crate::error::{Error, Result};

/// One aggregate of a GROUP BY: DataFusion's plan of the function (its accumulators and
/// argument expressions) and its `FILTER (WHERE ...)` clause, if any.
#[derive(Debug, Clone)]
pub struct AggregateCall {
    pub function: Arc<AggregateFunctionExpr>,
    pub filter: Option<Arc<dyn PhysicalExpr>>,
}

/// One aggregate's arguments over a batch, and which rows its FILTER lets in.
#[derive(Clone)]
pub(crate) struct Arguments {
    values: Vec<ArrayRef>,
    filter: Option<BooleanArray>,
}

impl Arguments {
    /// The argument columns (then the ORDER BY columns of an order-sensitive aggregate).
    pub(crate) fn values(&self) -> &[ArrayRef] {
        &self.values
    }

    /// Whether the aggregate's FILTER lets `row` in.
    pub(crate) fn admits(&self, row: u32) -> bool {
        self.filter.as_ref().is_none_or(|mask| mask.is_valid(row as usize) && mask.value(row as usize))
    }

    /// Whether the aggregate has a FILTER.
    pub(crate) fn filtered(&self) -> bool {
        self.filter.is_some()
    }
}

/// Each aggregate's arguments over `batch`.
pub(crate) fn arguments(aggregates: &[AggregateCall], batch: &RecordBatch) -> Result<Vec<Arguments>> {
    let evaluate = |e: &Arc<dyn PhysicalExpr>| e.evaluate(batch).and_then(|v| v.into_array(batch.num_rows()));
    aggregates
        .iter()
        .map(|a| {
            // An order-sensitive aggregate (`array_agg(x ORDER BY y)`, `first_value`, ...) takes
            // its ORDER BY columns after its arguments and orders its rows itself, as in
            // DataFusion's own aggregate plans.
            let values = a
                .function
                .expressions()
                .into_iter()
                .chain(a.function.order_bys().iter().map(|sort| sort.expr.clone()))
                .map(|e| evaluate(&e))
                .collect::<datafusion::error::Result<_>>()?;
            let filter = match &a.filter {
                Some(filter) => {
                    let mask = evaluate(filter)?;
                    match mask.as_any().downcast_ref::<BooleanArray>() {
                        Some(mask) => Some(mask.clone()),
                        None => {
                            return Err(Error::Graph(format!(
                                "a FILTER gave {} values, not booleans",
                                mask.data_type()
                            )));
                        }
                    }
                }
                None => None,
            };
            Ok(Arguments { values, filter })
        })
        .collect()
}

/// Feeds rows `indices` of `arguments` into `accumulators`, or takes them back (`retract`);
/// an aggregate with a FILTER gets only the rows it lets in.
pub(crate) fn feed(
    accumulators: &mut [Box<dyn Accumulator>],
    arguments: &[Arguments],
    indices: &[u32],
    retract: bool,
) -> Result<()> {
    // A run of consecutive rows (an OVER aggregate's row and its peers) is a slice, no copy.
    let consecutive = indices.windows(2).all(|pair| pair[0].checked_add(1) == Some(pair[1]));
    let run = indices.first().filter(|_| consecutive).map(|&first| first as usize);
    for (accumulator, args) in accumulators.iter_mut().zip(arguments) {
        let taken = match (&args.filter, run) {
            (None, Some(first)) => args.values.iter().map(|a| a.slice(first, indices.len())).collect(),
            (filter, _) => {
                let indices: UInt32Array = match filter {
                    None => UInt32Array::from(indices.to_vec()),
                    Some(mask) => indices
                        .iter()
                        .copied()
                        .filter(|&i| mask.is_valid(i as usize) && mask.value(i as usize))
                        .collect(),
                };
                if indices.is_empty() {
                    continue;
                }
                args.values.iter().map(|a| take(a, &indices, None)).collect::<std::result::Result<Vec<_>, _>>()?
            }
        };
        if retract { accumulator.retract_batch(&taken)? } else { accumulator.update_batch(&taken)? }
    }
    Ok(())
}

/// The states of one group's `accumulators` for a snapshot, leaving the group as it was.
/// DataFusion's `Accumulator::state` may consume what it returns (median and string_agg move
/// their values out: it is made for the last step of a partial aggregate, and a test lost a
/// window's median that way), so the group's accumulators are replaced by `fresh` ones merged
/// from those states, as a restore builds them.
pub(crate) fn snapshot_states(
    accumulators: &mut Vec<Box<dyn Accumulator>>,
    mut fresh: Vec<Box<dyn Accumulator>>,
) -> Result<Vec<ScalarValue>> {
    let mut states = Vec::new();
    for (accumulator, rebuilt) in accumulators.iter_mut().zip(fresh.iter_mut()) {
        let state = accumulator.state()?;
        let arrays = state.iter().map(ScalarValue::to_array).collect::<datafusion::error::Result<Vec<_>>>()?;
        rebuilt.merge_batch(&arrays)?;
        states.extend(state);
    }
    *accumulators = fresh;
    Ok(states)
}

/// Appends to a state table's `fields` each aggregate's state columns, given their types
/// (named `state_<n>`, n their place in the table, the key hash first), and returns how many
/// each has: the layout snapshots write and restores read.
pub(crate) fn push_state_fields(
    fields: &mut Vec<datafusion::arrow::datatypes::Field>,
    states: impl IntoIterator<Item = Vec<DataType>>,
) -> Vec<usize> {
    let mut widths = Vec::new();
    for types in states {
        widths.push(types.len());
        for data_type in types {
            let name = format!("state_{}", fields.len() + 1);
            fields.push(datafusion::arrow::datatypes::Field::new(name, data_type, true));
        }
    }
    widths
}

/// The state types a fresh accumulator reports (sliding accumulators keep more than the
/// function's `state_fields` says).
pub(crate) fn state_types(accumulator: &mut Box<dyn Accumulator>) -> Result<Vec<DataType>> {
    Ok(accumulator.state()?.iter().map(ScalarValue::data_type).collect())
}

/// `column` as `data_type` (no copy when it is already).
pub(crate) fn cast_to(column: ArrayRef, data_type: &DataType) -> Result<ArrayRef> {
    Ok(if column.data_type() == data_type { column } else { cast(&column, data_type)? })
}

/// Merges row `row` of restored state columns `states` into `accumulators`: each accumulator
/// takes its `widths[i]` columns in turn, as [`snapshot_states`] wrote them.
pub(crate) fn restore_row(
    accumulators: &mut [Box<dyn Accumulator>],
    states: &[ArrayRef],
    widths: &[usize],
    row: usize,
) -> Result<()> {
    let mut column = 0;
    for (accumulator, width) in accumulators.iter_mut().zip(widths) {
        let row_states: Vec<ArrayRef> =
            states[column..column + width].iter().map(|state| state.slice(row, 1)).collect();
        accumulator.merge_batch(&row_states)?;
        column += width;
    }
    Ok(())
}

/// The values of `columns` at `row` (a group's key).
pub(crate) fn row_values(columns: &[ArrayRef], row: usize) -> Result<Vec<ScalarValue>> {
    Ok(columns
        .iter()
        .map(|column| ScalarValue::try_from_array(column, row))
        .collect::<datafusion::error::Result<_>>()?)
}

/// Column i of `rows`, as the type of `fields[i]`, for every field.
pub(crate) fn columns(rows: &[Vec<ScalarValue>], fields: &[FieldRef]) -> Result<Vec<ArrayRef>> {
    fields
        .iter()
        .enumerate()
        .map(|(i, field)| {
            let values = ScalarValue::iter_to_array(rows.iter().map(|r| r[i].clone()))?;
            Ok(cast(&values, field.data_type())?)
        })
        .collect()
}
