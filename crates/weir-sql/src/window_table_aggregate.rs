//! GROUP BY over the rows of Flink's HOP and CUMULATE window table functions, recognised in
//! the optimised logical plan so that the planner can run it as the native window aggregate.
//!
//! `window_table_functions.rs` writes `TABLE(HOP(TABLE t, DESCRIPTOR(ts), slide, size))` as
//! `unnest(hop_starts(descriptor(ts), slide, size)) AS window_start`, a copy of each row per
//! window holding it, so that the same SQL also runs as a batch query. Streamed as written, every
//! copy (with all the columns the query reads) crosses the exchange and is aggregated as a
//! tumbling-shaped window, at half the speed of the native hopping window, which sends each row
//! once and assigns its windows in the operator. After DataFusion's optimiser the aggregate reads:
//!
//! ```text
//! Aggregate: groupBy=[[window_start, window_end, key]]        <- the aggregate
//!   Projection: u AS window_start, u + size AS window_end, key  <- `above` (one or more):
//!                                                                  u moved by a shift
//!     Unnest: lists[u]                                           <- one list, depth 1
//!       Projection: ..., hop_starts(descriptor(ts), ...) AS u    <- `below`
//!         <the table's rows>
//! ```
//!
//! That is the native window when the unnested value `u` (a window's start for HOP, its end for
//! CUMULATE) reaches the aggregate only as GROUP BY columns equal to `u` plus a fixed interval:
//! then each such column is the start or the end of the operator's window, moved. Anything else
//! (`u` in an aggregate's argument, a filter on it, a computed expression) keeps the general
//! path, which gives the same answer.

use datafusion::common::Column;
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{Aggregate, Expr, LogicalPlan, Projection, Unnest};
use weir_engine::operators::WindowKind;

use crate::planner::{column_plus_offset, unaliased};
use crate::window_functions::{CUMULATE_ENDS, HOP_STARTS, interval_ms, signed_interval_ms, window_list_fits};

/// Which edge of the operator's window a GROUP BY column holds, moved by milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowEdge {
    Start(i64),
    End(i64),
}

/// A GROUP BY over a HOP or CUMULATE, in the shape the native window aggregate runs.
pub struct WindowTableGrouping<'a> {
    pub kind: WindowKind,
    /// The table's rows, once each (the input of `below`).
    pub rows: &'a LogicalPlan,
    /// The projection making the list of windows (its other columns are the rows' own).
    pub below: &'a Projection,
    /// The list's column in `below`.
    pub list: usize,
    /// The event time: the window functions' first argument, over `rows`.
    pub time: &'a Expr,
    pub unnest: &'a Unnest,
    /// The projections between the unnest and the aggregate, bottom up.
    pub above: Vec<&'a Projection>,
    /// For each column of each of them: whether it is the unnested value moved by a shift (ms).
    pub shifted: Vec<Vec<Option<i64>>>,
    /// The GROUP BY expressions that are the window's edges, by position; the others are keys.
    pub edges: Vec<(usize, WindowEdge)>,
}

/// Sees through subquery aliases, which rename but keep every column in place.
fn unaliased_plan(plan: &LogicalPlan) -> &LogicalPlan {
    match plan {
        LogicalPlan::SubqueryAlias(alias) => unaliased_plan(&alias.input),
        other => other,
    }
}

/// The window of a `hop_starts(descriptor(ts), slide, size [, offset])` or
/// `cumulate_ends(descriptor(ts), step, size [, offset])` call, and whether the list holds
/// window starts (HOP) rather than ends; None for any other expression or a window the
/// general path refuses.
fn window_of_list(call: &ScalarFunction) -> Option<(WindowKind, bool)> {
    let literal = |i: usize| match call.args.get(i).map(unaliased) {
        Some(Expr::Literal(value, _)) => Some(value),
        _ => None,
    };
    let (first, size) = (interval_ms(literal(1)?)?, interval_ms(literal(2)?)?);
    let offset_ms = match call.args.len() {
        3 => 0,
        4 => signed_interval_ms(literal(3)?)?,
        _ => return None,
    };
    if !window_list_fits(call.name(), first, size) {
        return None;
    }
    match call.name() {
        HOP_STARTS => Some((WindowKind::Hopping { slide_ms: first, size_ms: size, offset_ms }, true)),
        CUMULATE_ENDS => Some((WindowKind::Cumulating { step_ms: first, size_ms: size, offset_ms }, false)),
        _ => None,
    }
}

/// The aggregate's shape, if it is a GROUP BY over a HOP or CUMULATE the native window runs.
pub fn window_table_grouping(aggregate: &Aggregate) -> Option<WindowTableGrouping<'_>> {
    // The projections over the unnest, top down (the optimiser may stack several).
    let mut above = Vec::new();
    let mut plan = unaliased_plan(&aggregate.input);
    while let LogicalPlan::Projection(projection) = plan {
        above.push(projection);
        plan = unaliased_plan(&projection.input);
    }
    above.reverse();
    let LogicalPlan::Unnest(unnest) = plan else { return None };
    let [(list, kind)] = unnest.list_type_columns.as_slice() else { return None };
    if kind.depth != 1 || !unnest.struct_type_columns.is_empty() {
        return None;
    }
    let LogicalPlan::Projection(below) = unaliased_plan(&unnest.input) else { return None };
    let Expr::ScalarFunction(call) = unaliased(below.expr.get(*list)?) else { return None };
    let (kind, starts) = window_of_list(call)?;
    // `descriptor(ts)`, or a column the optimiser made of it.
    let time = call.args.first()?;
    // The unnest's output columns each come from one input column, the list's once.
    let mut shifts: Vec<Option<i64>> = unnest.dependency_indices.iter().map(|&d| (d == *list).then_some(0)).collect();
    if shifts.iter().flatten().count() != 1 {
        return None;
    }
    let mut shifted = Vec::with_capacity(above.len());
    for projection in &above {
        let input = projection.input.schema();
        let lower = shifts.clone();
        let shift_of_column =
            |column: &Column| input.index_of_column(column).ok().and_then(|i| lower.get(i).copied().flatten());
        let mut layer = Vec::with_capacity(projection.expr.len());
        for expr in &projection.expr {
            let uses_window = expr.column_refs().into_iter().any(|c| shift_of_column(c).is_some());
            // A window column plus or minus fixed intervals: its shift from the window's edge.
            let shift = column_plus_offset(expr).and_then(|(column, offset)| Some(shift_of_column(&column)? + offset));
            layer.push(match (uses_window, shift) {
                (false, _) => None,
                (true, Some(shift)) => Some(shift),
                (true, None) => return None,
            });
        }
        shifts = layer.clone();
        shifted.push(layer);
    }
    // The window's columns, as the aggregate's input names them.
    let input = aggregate.input.schema();
    let window_column =
        |column: &Column| input.index_of_column(column).ok().and_then(|i| shifts.get(i).copied().flatten());
    let mut edges = Vec::new();
    for (position, expr) in aggregate.group_expr.iter().enumerate() {
        let column_shift = match unaliased(expr) {
            Expr::Column(column) => window_column(column),
            _ => None,
        };
        if let Some(shift) = column_shift {
            edges.push((position, if starts { WindowEdge::Start(shift) } else { WindowEdge::End(shift) }));
        } else if expr.column_refs().iter().any(|c| window_column(c).is_some()) {
            return None;
        }
    }
    let in_aggregates = aggregate.aggr_expr.iter().any(|e| e.column_refs().iter().any(|c| window_column(c).is_some()));
    if edges.is_empty() || in_aggregates {
        return None;
    }
    Some(WindowTableGrouping { kind, rows: &below.input, below, list: *list, time, unnest, above, shifted, edges })
}
