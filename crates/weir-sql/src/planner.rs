//! Plans queries into the runtime's graph. DataFusion does the SQL: name resolution, type
//! coercion, optimisation, expressions. weir walks the optimised logical plan bottom-up and
//! builds its streaming operators from it: each plan node becomes a [`Stream`] (the graph node
//! producing it plus the filters and projections not yet placed), and stateful nodes
//! (aggregates, joins) cut the stream with a hash-partitioned edge on their keys.
//!
//! What a stream carries besides rows: which of its columns are *time attributes* (the event
//! time the watermark tracks, or the start of a window), since windows and expiring joins need
//! one, and whether it is *updating* (a changelog, [`weir_engine::changelog`]).

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef, TimeUnit};
use datafusion::common::{Column, DFSchema, ScalarValue};
use datafusion::execution::SessionState;
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{
    Aggregate, BinaryExpr, Cast, Expr, ExprSchemable, Join, JoinType, LogicalPlan, Operator as BinaryOperator, Union,
    WindowFrameBound, WindowFrameUnits, WindowFunctionDefinition, utils::split_conjunction,
};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::aggregate::{AggregateExprBuilder, LoweredAggregateBuilder};
use datafusion::physical_expr::expressions::{
    BinaryExpr as PhysicalBinaryExpr, CastExpr, Column as PhysicalColumn, Literal,
};
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::unnest::{ListUnnest, UnnestExec};
pub use weir_connectors::PlanOptions;
use weir_connectors::read_fields::ReadFields;
use weir_connectors::{NodeContext, Preflight, Registry, SourceRows};
use weir_engine::changelog::{Change, changelog_schema};
use weir_engine::graph::SourceFactory;
use weir_engine::operators::{
    ALL_IN_ONE, AggregateCall, Deduplicate, Expiry, Frame, JoinKind, JoinSide, LateRows, Numbering, OverAggregate,
    PreviewBuffer, PreviewSink, Stateless, Step, StreamingJoin, TopN, UpdatingAggregate, UpsertNormalize,
    WatermarkAssigner, WindowAggregate, WindowKind, WindowRank, join_key_column,
};
use weir_engine::{Graph, NodeId, Partitioning, ProcessingTime};

use crate::catalog::TableDef;
use crate::error::Result;
use crate::plan_err;
use crate::struct_fields_read::struct_fields_read;
use crate::window_functions::{
    CUMULATE_ENDS, DESCRIPTOR, HOP, HOP_STARTS, SESSION, TUMBLE, interval_ms, window_list_fits, window_of_end,
};
use crate::window_table_aggregate::{WindowEdge, WindowTableGrouping, window_table_grouping};

/// Where a query's results go.
#[derive(Debug, Clone)]
pub enum SinkTarget {
    /// A bare SELECT: rows kept for the client.
    Preview(PreviewBuffer),
    /// INSERT INTO this table.
    Table(TableDef),
}

/// What a column of a stream means in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TimeAttr {
    /// The event time the watermark tracks.
    EventTime,
    /// The start of a window of this size: the rows of a value `v` are all in once the
    /// watermark passes `v + size`. A window's end is one of size 0, and Flink's `window_time`
    /// (the end less 1 ms) one of size 1.
    WindowStart { size_ms: i64 },
    /// A list of such values, one per window holding the row (`hop_starts`, `cumulate_ends`):
    /// UNNEST makes each a row with a [`TimeAttr::WindowStart`].
    Windows { size_ms: i64 },
}

/// The time attribute the value of `expr` has over an input whose columns have `times`: a
/// column's own; the event time through `descriptor(...)` (which must be given one); a window
/// start or end computed from the event time; such a value moved by a fixed interval.
fn time_attr_of(expr: &Expr, schema: &DFSchema, times: &HashMap<usize, TimeAttr>) -> Result<Option<TimeAttr>> {
    let attr = match unaliased(expr) {
        Expr::Column(column) => schema.index_of_column(column).ok().and_then(|i| times.get(&i).copied()),
        Expr::ScalarFunction(call) => {
            let event_time = match call.args.first() {
                Some(time) => time_attr_of(time, schema, times)? == Some(TimeAttr::EventTime),
                None => false,
            };
            match call.name() {
                DESCRIPTOR if !event_time => {
                    return plan_err!(
                        "DESCRIPTOR({}) must name a time attribute: declare the table's event time with WATERMARK FOR <column> AS <column> - INTERVAL '...', or a processing-time column <column> AS PROCTIME()",
                        call.args.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
                    );
                }
                DESCRIPTOR => Some(TimeAttr::EventTime),
                TUMBLE if event_time => Some(TimeAttr::WindowStart { size_ms: interval_arg(call, 1, "size")? }),
                HOP_STARTS | CUMULATE_ENDS if event_time => {
                    let (first, size_ms) = (interval_arg(call, 1, "slide or step")?, interval_arg(call, 2, "size")?);
                    if !window_list_fits(call.name(), first, size_ms) {
                        return plan_err!(
                            "the window size ({size_ms} ms) must be at least the slide or step ({first} ms), and for CUMULATE a whole number of steps"
                        );
                    }
                    // Starts complete a size after them; ends at once.
                    let size_ms = if call.name() == HOP_STARTS { size_ms } else { 0 };
                    Some(TimeAttr::Windows { size_ms })
                }
                _ => None,
            }
        }
        Expr::BinaryExpr(BinaryExpr { left, op: op @ (BinaryOperator::Plus | BinaryOperator::Minus), right }) => {
            let shift = match unaliased(right) {
                Expr::Literal(value, _) => interval_ms(value),
                _ => None,
            };
            match (time_attr_of(left, schema, times)?, shift) {
                (Some(TimeAttr::WindowStart { size_ms }), Some(shift)) => {
                    let size_ms = if *op == BinaryOperator::Plus { size_ms - shift } else { size_ms + shift };
                    (size_ms >= 0).then_some(TimeAttr::WindowStart { size_ms })
                }
                _ => None,
            }
        }
        _ => None,
    };
    Ok(attr)
}

/// Among candidate (position, column index) pairs, the one whose column is a window start of
/// the smallest size, with that size: the earliest a group keyed by all of them is complete
/// (GROUP BY window_start, window_end of a cumulating window is complete at its end).
fn earliest_window(
    candidates: impl Iterator<Item = (usize, usize)>,
    times: &HashMap<usize, TimeAttr>,
) -> Option<(usize, usize, i64)> {
    candidates
        .filter_map(|(position, column)| match times.get(&column) {
            Some(TimeAttr::WindowStart { size_ms }) => Some((position, column, *size_ms)),
            _ => None,
        })
        .min_by_key(|(_, _, size_ms)| *size_ms)
}

/// How a windowed GROUP BY finds its window.
struct WindowGrouping {
    kind: WindowKind,
    /// The operator's window column, over the aggregate's input: the window's start for a
    /// tumbling window, the event time for the others.
    column: Expr,
    /// The GROUP BY expressions that are the window's start or end, moved by milliseconds, by
    /// position; the others are keys.
    edges: Vec<(usize, WindowEdge)>,
}

/// The error for a window over a changelog.
fn window_of_changelog<T>() -> Result<T> {
    plan_err!(
        "a window over an updating (changelog) input is not supported: window the append-only rows before they are aggregated or joined"
    )
}

/// The error for a window whose time (the first argument of `function`) is not the event time.
fn window_without_event_time<T>(function: &str) -> Result<T> {
    plan_err!(
        "{function}(...) needs the event time column as its first argument: declare it on the table with WATERMARK FOR column AS column - INTERVAL '...'"
    )
}

/// A window kind as the state description names it.
fn kind_name(kind: WindowKind) -> &'static str {
    match kind {
        WindowKind::Tumbling { .. } => "tumbling",
        WindowKind::Hopping { .. } => "hopping",
        WindowKind::Cumulating { .. } => "cumulating",
        WindowKind::Session { .. } => "session",
    }
}

/// The time attribute of a window's edge moved by a shift: how long after its value every
/// window with it has closed (the size of a window whose start it would be).
fn window_edge_completes(kind: WindowKind, edge: WindowEdge) -> Option<i64> {
    let size_ms = match kind {
        WindowKind::Tumbling { size_ms }
        | WindowKind::Hopping { size_ms, .. }
        | WindowKind::Cumulating { size_ms, .. } => size_ms,
        WindowKind::Session { .. } => return None,
    };
    let completes = match edge {
        WindowEdge::Start(shift) => size_ms - shift,
        WindowEdge::End(shift) => -shift,
    };
    (completes >= 0).then_some(completes)
}

/// `column` (of type `from`) moved by `shift` milliseconds, as `to`.
fn shifted(column: Arc<dyn PhysicalExpr>, from: &DataType, shift: i64, to: &DataType) -> Arc<dyn PhysicalExpr> {
    if shift == 0 && from == to {
        return column;
    }
    let moved: Arc<dyn PhysicalExpr> = if shift == 0 {
        column
    } else {
        let millis = Arc::new(CastExpr::new(column, DataType::Int64, None));
        let by = Arc::new(Literal::new(ScalarValue::Int64(Some(shift))));
        let sum = Arc::new(PhysicalBinaryExpr::new(millis, BinaryOperator::Plus, by));
        Arc::new(CastExpr::new(sum, DataType::Timestamp(TimeUnit::Millisecond, None), None))
    };
    Arc::new(CastExpr::new(moved, to.clone(), None))
}

/// A planned stream: the node producing it and the stateless steps still to run on its rows.
#[derive(Clone)]
struct Stream {
    node: NodeId,
    steps: Vec<Step>,
    /// Time attributes, by column index in the plan node's schema.
    times: HashMap<usize, TimeAttr>,
    /// A changelog rather than append-only rows.
    updating: bool,
}

/// A table's source node (after its watermark assigner, if it has one).
#[derive(Debug, Clone, Copy)]
struct SourceNode {
    node: NodeId,
    /// Its rows are changes, not appends.
    changelog: bool,
}

struct Planner<'a> {
    state: &'a SessionState,
    table_of: &'a dyn Fn(&str) -> Option<TableDef>,
    options: &'a PlanOptions,
    graph: Graph,
    /// Source nodes by table, shared by every query of the pipeline that reads the table.
    sources: HashMap<String, SourceNode>,
    used_names: HashMap<String, usize>,
    /// Checks against the connectors' external systems, to run before the pipeline starts.
    preflight: Vec<Arc<dyn Preflight>>,
    /// (table, prefix) of each exactly-once Kafka writer planned so far.
    transactional_prefixes: Vec<(String, String)>,
    /// Limits on ROW_NUMBER() set by a filter above its window node (by the node's address in
    /// the plan being planned): `WHERE rn <= N` makes a top-N.
    rank_limits: HashMap<usize, u64>,
    /// What the pipeline's queries read of struct columns (sources may skip the rest).
    read: ReadFields,
}

/// A planned pipeline's graph, and what only the brokers can confirm.
pub struct Planned {
    pub graph: Graph,
    /// The tables read, by name, in no particular order.
    pub sources: Vec<String>,
    /// Per query, whether its output is a changelog (rows with a `_change` column).
    pub updating: Vec<bool>,
    /// What only the connectors' external systems can confirm (a Kafka topic exists, a
    /// transaction timeout is within the broker's maximum), checked before it starts.
    pub preflight: Vec<Arc<dyn Preflight>>,
    /// The prefixes of the transactional ids its exactly-once Kafka writers use (distinct: two
    /// writers with one prefix fence each other).
    pub transactional_prefixes: Vec<String>,
}

/// `expr` without aliases.
pub(crate) fn unaliased(expr: &Expr) -> &Expr {
    match expr {
        Expr::Alias(alias) => unaliased(&alias.expr),
        other => other,
    }
}

/// Whether a projection's expression is a call of `PROCTIME()`.
fn is_proctime(expr: &Expr) -> bool {
    matches!(unaliased(expr), Expr::ScalarFunction(f) if f.name() == crate::proctime_function::PROCTIME)
}

/// The window function call of a GROUP BY expression, if it is one.
fn window_call(expr: &Expr) -> Option<&ScalarFunction> {
    match unaliased(expr) {
        Expr::ScalarFunction(f) if [TUMBLE, HOP, SESSION].contains(&f.name()) => Some(f),
        _ => None,
    }
}

/// The window-end function of an aggregate expression (`hop_end(...)`), with the window
/// function it is the end of.
fn window_end_call(expr: &Expr) -> Option<(&str, &'static str)> {
    match unaliased(expr) {
        Expr::AggregateFunction(f) => window_of_end(f.func.name()).map(|window| (f.func.name(), window)),
        _ => None,
    }
}

/// The limit a filter sets on the ROW_NUMBER() of a window node below it (`rn <= N`, `rn < N`,
/// `rn = 1`), with that node.
fn rank_limit(filter: &datafusion::logical_expr::Filter) -> Option<(&datafusion::logical_expr::Window, u64)> {
    for conjunct in split_conjunction(&filter.predicate) {
        let Expr::BinaryExpr(BinaryExpr { left, op, right }) = conjunct else { continue };
        let (column, op, value) = match (unaliased(left), unaliased(right)) {
            (Expr::Column(column), Expr::Literal(value, _)) => (column, *op, value),
            (Expr::Literal(value, _), Expr::Column(column)) => match op.swap() {
                Some(op) => (column, op, value),
                None => continue,
            },
            _ => continue,
        };
        let Ok(ScalarValue::UInt64(Some(n))) = value.cast_to(&DataType::UInt64) else { continue };
        let limit = match op {
            BinaryOperator::LtEq => n,
            BinaryOperator::Lt => n.saturating_sub(1),
            BinaryOperator::Eq if n == 1 => 1,
            _ => continue,
        };
        if let Some(window) = window_column_of(&filter.input, column) {
            return Some((window, limit));
        }
    }
    None
}

/// The window node whose OVER (...) result `column` of `plan` is, seen through projections,
/// aliases and filters.
fn window_column_of<'a>(plan: &'a LogicalPlan, column: &Column) -> Option<&'a datafusion::logical_expr::Window> {
    let index = plan.schema().index_of_column(column).ok()?;
    match plan {
        LogicalPlan::Projection(projection) => match unaliased(projection.expr.get(index)?) {
            Expr::Column(source) => window_column_of(&projection.input, source),
            _ => None,
        },
        LogicalPlan::SubqueryAlias(alias) => {
            let (qualifier, field) = alias.input.schema().qualified_field(index);
            window_column_of(&alias.input, &Column::new(qualifier.cloned(), field.name()))
        }
        LogicalPlan::Filter(filter) => window_column_of(&filter.input, column),
        LogicalPlan::Window(window) => (index >= window.input.schema().fields().len()).then_some(window),
        _ => None,
    }
}

/// Whether a window function is LAG.
fn is_lag(function: &datafusion::logical_expr::expr::WindowFunction) -> bool {
    matches!(&function.fun, WindowFunctionDefinition::WindowUDF(udwf) if udwf.name() == "lag")
}

/// The aggregate that runs `lag(x [, offset [, default]])`: offset and default must be literals.
fn lag_of(args: &[Expr]) -> Result<datafusion::logical_expr::AggregateUDF> {
    let offset = match args.get(1).map(unaliased) {
        None => 1,
        Some(Expr::Literal(value, _)) => match value.cast_to(&DataType::UInt64) {
            Ok(ScalarValue::UInt64(Some(n))) => usize::try_from(n).unwrap_or(usize::MAX),
            _ => return plan_err!("LAG's offset must be a whole number of rows, not {value}"),
        },
        Some(other) => return plan_err!("LAG's offset must be a literal number of rows, not {other}"),
    };
    let default = match args.get(2).map(unaliased) {
        None => ScalarValue::Null,
        Some(Expr::Literal(value, _)) => value.clone(),
        Some(other) => return plan_err!("LAG's default must be a literal, not {other}"),
    };
    if args.is_empty() {
        return plan_err!("LAG needs the value to look back at, as in LAG(price) OVER (...)");
    }
    Ok(crate::lag::lag(offset, default))
}

/// An interval literal argument, in milliseconds.
fn interval_arg(call: &ScalarFunction, index: usize, what: &str) -> Result<i64> {
    match call.args.get(index).map(unaliased) {
        Some(Expr::Literal(value, _)) => match interval_ms(value) {
            Some(ms) => Ok(ms),
            None => {
                plan_err!("{}'s {what} must be a fixed positive interval, such as INTERVAL '10' SECOND", call.name())
            }
        },
        _ => plan_err!("{}'s {what} must be an interval literal, such as INTERVAL '10' SECOND", call.name()),
    }
}

/// `column + offset` (milliseconds) for an expression of that shape, seeing through casts.
pub(crate) fn column_plus_offset(expr: &Expr) -> Option<(Column, i64)> {
    match unaliased(expr) {
        Expr::Column(column) => Some((column.clone(), 0)),
        Expr::Cast(cast) => column_plus_offset(&cast.expr),
        Expr::TryCast(cast) => column_plus_offset(&cast.expr),
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let (column, offset) = column_plus_offset(left)?;
            let Expr::Literal(value, _) = unaliased(right) else { return None };
            let ms = interval_ms(value)?;
            match op {
                BinaryOperator::Plus => Some((column, offset + ms)),
                BinaryOperator::Minus => Some((column, offset - ms)),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The bounds an interval join's condition sets: (largest right - left, largest left - right)
/// between a left and a right time column, with the two columns' indices in the join schema.
fn interval_bounds(filter: &Expr, schema: &DFSchema, left_width: usize) -> Option<(usize, usize, i64, i64)> {
    let (mut columns, mut right_minus_left, mut left_minus_right) = (None, None::<i64>, None::<i64>);
    for conjunct in split_conjunction(filter) {
        let Expr::BinaryExpr(BinaryExpr { left, op, right }) = conjunct else { continue };
        let (Some((a, a_offset)), Some((b, b_offset))) = (column_plus_offset(left), column_plus_offset(right)) else {
            continue;
        };
        let (Ok(a_index), Ok(b_index)) = (schema.index_of_column(&a), schema.index_of_column(&b)) else { continue };
        // Normalise to `left + l op right + r`.
        let (l, l_offset, r, r_offset, op) = match (a_index < left_width, b_index < left_width) {
            (true, false) => (a_index, a_offset, b_index, b_offset, *op),
            (false, true) => match op.swap() {
                Some(swapped) => (b_index, b_offset, a_index, a_offset, swapped),
                None => continue,
            },
            _ => continue,
        };
        if columns.is_some_and(|c| c != (l, r)) {
            return None;
        }
        columns = Some((l, r));
        match op {
            // left + l >= right + r  =>  right - left <= l - r
            BinaryOperator::GtEq | BinaryOperator::Gt => {
                let bound = l_offset - r_offset;
                right_minus_left = Some(right_minus_left.map_or(bound, |b| b.min(bound)));
            }
            // left + l <= right + r  =>  left - right <= r - l
            BinaryOperator::LtEq | BinaryOperator::Lt => {
                let bound = r_offset - l_offset;
                left_minus_right = Some(left_minus_right.map_or(bound, |b| b.min(bound)));
            }
            _ => {}
        }
    }
    let (l, r) = columns?;
    Some((l, r, right_minus_left?, left_minus_right?))
}

impl Planner<'_> {
    /// Records that `table`'s exactly-once writer uses transactional ids starting `prefix`;
    /// refuses a prefix another writer of the pipeline has.
    fn claim_prefix(&mut self, table: &str, prefix: String) -> Result<()> {
        if let Some((other, _)) = self.transactional_prefixes.iter().find(|(_, p)| *p == prefix) {
            return plan_err!(
                "table '{table}': its transactional ids would start '{prefix}' as table '{other}''s do in this pipeline, and two writers with one prefix fence each other: give each its own 'transactional_id.prefix' (or leave it unset: each sink then gets its own)"
            );
        }
        self.transactional_prefixes.push((table.to_string(), prefix));
        Ok(())
    }

    /// A node name not used yet in this graph: `base`, then `base_2`, ...
    fn name(&mut self, base: &str) -> String {
        let count = self.used_names.entry(base.to_string()).or_insert(0);
        *count += 1;
        if *count == 1 { base.to_string() } else { format!("{base}_{count}") }
    }

    fn parallelism(&self) -> usize {
        self.options.parallelism.max(1)
    }

    /// The columns an OVER (...) partitions by, to append to its input: `__partition_<i>` for
    /// each PARTITION BY expression, or one constant column when there is none (so all rows
    /// meet in one subtask); with their names.
    #[allow(clippy::type_complexity)]
    fn partition_columns(
        &self,
        partition_by: &[Expr],
        schema: &DFSchema,
    ) -> Result<(Vec<(String, Arc<dyn PhysicalExpr>, DataType)>, Vec<String>)> {
        let mut extra = Vec::new();
        for (i, expr) in partition_by.iter().enumerate() {
            extra.push((format!("__partition_{i}"), self.physical(expr, schema)?, expr.get_type(schema)?));
        }
        if extra.is_empty() {
            let all: Arc<dyn PhysicalExpr> = Arc::new(Literal::new(ScalarValue::Int64(Some(0))));
            extra.push((ALL_IN_ONE.to_string(), all, DataType::Int64));
        }
        let names = extra.iter().map(|(name, _, _)| name.clone()).collect();
        Ok((extra, names))
    }

    /// When the state of an updating operator is let go, for EXPLAIN.
    fn forgotten(&self) -> String {
        match self.options.state_ttl {
            Some(ttl) => format!("forgotten after {ttl:?} without a row (state.ttl)"),
            None => "kept forever (SET state.ttl to bound it)".to_string(),
        }
    }

    /// Places the stream's pending steps in a node of their own; the node that produces the
    /// stream's rows as they are.
    fn materialize(&mut self, stream: Stream, name: &str) -> NodeId {
        if stream.steps.is_empty() {
            return stream.node;
        }
        let operator = Stateless::new(stream.steps);
        let name = self.name(name);
        let node =
            self.graph.add_operator(&name, self.parallelism(), 1, Arc::new(move |_| Ok(Box::new(operator.clone()))));
        self.graph.connect(stream.node, node, 0, Partitioning::Forward);
        node
    }

    /// A projection calling `PROCTIME()`: the rows are stamped by a processing-time operator,
    /// whose column the calls read; its watermarks follow the clock from there on, so the
    /// column is the stream's only time attribute (an event time before it no longer is).
    fn processing_time(&mut self, projection: &datafusion::logical_expr::Projection, stream: Stream) -> Result<Stream> {
        if stream.updating {
            return plan_err!(
                "PROCTIME() over an updating result (a changelog) is not supported: call it over the rows of a table"
            );
        }
        let input = projection.input.schema();
        let width = input.fields().len();
        let mut fields = input.as_arrow().fields().to_vec();
        fields.push(Arc::new(Field::new("__proctime", DataType::Timestamp(TimeUnit::Millisecond, None), false)));
        let stamped = Arc::new(Schema::new(fields));
        let rows = self.materialize(stream, "project");
        let operator = weir_engine::ProcessingTimeStamp::new(stamped);
        let name = self.name("proctime");
        let node =
            self.graph.add_operator(&name, self.parallelism(), 1, Arc::new(move |_| Ok(Box::new(operator.clone()))));
        self.graph.connect(rows, node, 0, Partitioning::Forward);
        let mut exprs: Vec<Arc<dyn PhysicalExpr>> = Vec::new();
        let mut times = HashMap::new();
        for (i, expr) in projection.expr.iter().enumerate() {
            if is_proctime(expr) {
                exprs.push(Arc::new(PhysicalColumn::new("__proctime", width)));
                times.insert(i, TimeAttr::EventTime);
            } else {
                exprs.push(self.physical(expr, input)?);
            }
        }
        let schema = Arc::new(projection.schema.as_arrow().clone());
        Ok(Stream { node, steps: vec![Step::Project { exprs, schema }], times, updating: false })
    }

    fn physical(&self, expr: &Expr, schema: &DFSchema) -> Result<Arc<dyn PhysicalExpr>> {
        Ok(self.state.create_physical_expr(expr.clone(), schema)?)
    }

    /// A projection keeping every column of `schema` and appending `extra` named columns (and
    /// the change column of an updating stream).
    fn appending(
        &self,
        schema: &DFSchema,
        extra: Vec<(String, Arc<dyn PhysicalExpr>, DataType)>,
        updating: bool,
    ) -> Step {
        let arrow = schema.as_arrow();
        let mut exprs: Vec<Arc<dyn PhysicalExpr>> = Vec::new();
        let mut fields: Vec<FieldRef> = Vec::new();
        for (i, field) in arrow.fields().iter().enumerate() {
            exprs.push(Arc::new(PhysicalColumn::new(field.name(), i)));
            fields.push(field.clone());
        }
        for (name, expr, data_type) in extra {
            exprs.push(expr);
            fields.push(Arc::new(Field::new(name, data_type, true)));
        }
        let schema = Schema::new(fields);
        let schema = if updating { changelog_schema(&schema) } else { Arc::new(schema) };
        Step::Project { exprs, schema }
    }

    fn source(&mut self, definition: &TableDef) -> Result<SourceNode> {
        if let Some(source) = self.sources.get(&definition.name) {
            return Ok(*source);
        }
        let parallelism = self.parallelism();
        // The connector reads the declared columns; a processing-time column is added after.
        let table = &definition.connector_view();
        let name = &table.name;
        let connector = Registry::built_in().connector(&table.options.connector)?;
        let node_name = self.name(name);
        // Computed columns read the table's columns out of the plan's sight.
        let everything = ReadFields::everything();
        let read = if definition.computed.is_empty() { &self.read } else { &everything };
        let context = NodeContext { node: &node_name, options: self.options, read };
        let planned = connector.source(table, parallelism, context)?;
        for prefix in planned.transactional_prefixes {
            self.claim_prefix(name, prefix)?;
        }
        self.preflight.extend(planned.preflight);
        let factory = planned.factory;
        // Processing time: the source is wrapped to stamp each batch as it is read and follow
        // it with a watermark.
        let factory: SourceFactory = match &definition.proctime {
            Some(_) => {
                let schema = definition.read_schema();
                Arc::new(move |info| Ok(Box::new(ProcessingTime::new(factory(info)?, schema.clone()))))
            }
            None => factory,
        };
        let node = self.graph.add_source(&node_name, parallelism, factory);
        self.graph.describe_state(node, planned.state);
        // Upserts become changes by keeping each key's latest row, routed by the key.
        let node = match &planned.rows {
            SourceRows::Upserts { key } => {
                if definition.proctime.is_some() {
                    return plan_err!(
                        "table '{name}': a processing-time column on an upsert table is not supported: add it in a view over the table"
                    );
                }
                let operator =
                    UpsertNormalize::new(key.clone(), table.schema.clone(), changelog_schema(&table.schema))?;
                let normalize = self.name("upsert_normalize");
                let normalize = self.graph.add_operator(
                    &normalize,
                    parallelism,
                    1,
                    Arc::new(move |_| Ok(Box::new(operator.clone()))),
                );
                self.graph.describe_state(normalize, "each key's latest row".to_string());
                self.graph.connect(node, normalize, 0, Partitioning::Hash(key.clone()));
                normalize
            }
            SourceRows::Appends | SourceRows::Changes => node,
        };
        let changelog = planned.rows.have_changes();
        // Computed columns right after, so that an event time may be one of them.
        let node = match definition.computed.is_empty() {
            true => node,
            false => {
                let read = DFSchema::try_from(definition.read_schema().as_ref().clone())?;
                let computed = definition
                    .computed
                    .iter()
                    .map(|(name, sql)| {
                        let expr = self.state.create_logical_expr(sql, &read)?;
                        let data_type = expr.get_type(&read)?;
                        Ok((name.clone(), self.physical(&expr, &read)?, data_type))
                    })
                    .collect::<Result<Vec<_>>>()?;
                let step = self.appending(&read, computed, changelog);
                let stream = Stream { node, steps: vec![step], times: HashMap::new(), updating: changelog };
                self.materialize(stream, "computed")
            }
        };
        // Event time starts right after the source: the watermark is the largest event time
        // seen less the table's allowed lateness, unless the source tracks it itself (Kafka,
        // per partition; not a computed event time, which it never sees).
        let node = match &definition.event_time {
            Some(_) if planned.assigns_watermarks && table.event_time.is_some() => node,
            Some((column, delay)) => {
                let assigner = WatermarkAssigner::new(column, delay.as_millis() as i64);
                let name = self.name("watermark");
                let watermark =
                    self.graph.add_operator(&name, parallelism, 1, Arc::new(move |_| Ok(Box::new(assigner.clone()))));
                self.graph.connect(node, watermark, 0, Partitioning::Forward);
                watermark
            }
            None => node,
        };
        let source = SourceNode { node, changelog };
        self.sources.insert(definition.name.clone(), source);
        Ok(source)
    }

    fn plan(&mut self, plan: &LogicalPlan) -> Result<Stream> {
        match plan {
            LogicalPlan::TableScan(scan) => {
                let table = scan.table_name.table().to_string();
                if !scan.filters.is_empty() || scan.fetch.is_some() {
                    return plan_err!("a scan of '{table}' with pushed-down filters or a limit is not supported yet");
                }
                let Some(definition) = (self.table_of)(&table) else {
                    return plan_err!("there is no table named '{table}'");
                };
                let SourceNode { node, changelog: updating } = self.source(&definition)?;
                // Event time and processing time are both time attributes (a processing-time
                // watermark follows the clock).
                let time_column =
                    definition.event_time.as_ref().map(|(column, _)| column).or(definition.proctime.as_ref());
                let event_time = time_column.and_then(|column| definition.schema.index_of(column).ok());
                let mut times = HashMap::new();
                let mut steps = Vec::new();
                match &scan.projection {
                    Some(indices) => {
                        let source: DFSchema = scan.source.schema().as_ref().clone().try_into()?;
                        let exprs = indices
                            .iter()
                            .map(|&i| {
                                let (qualifier, field) = source.qualified_field(i);
                                self.physical(&Expr::Column(Column::new(qualifier.cloned(), field.name())), &source)
                            })
                            .collect::<Result<_>>()?;
                        let projected = scan.projected_schema.as_arrow();
                        let schema = if updating { changelog_schema(projected) } else { Arc::new(projected.clone()) };
                        steps.push(Step::Project { exprs, schema });
                        if let Some(position) = indices.iter().position(|&i| Some(i) == event_time) {
                            times.insert(position, TimeAttr::EventTime);
                        }
                    }
                    None => {
                        if let Some(index) = event_time {
                            times.insert(index, TimeAttr::EventTime);
                        }
                    }
                }
                Ok(Stream { node, steps, times, updating })
            }
            LogicalPlan::Filter(filter) => {
                if let Some((window, limit)) = rank_limit(filter) {
                    self.rank_limits.insert(std::ptr::from_ref(window) as usize, limit);
                }
                let mut stream = self.plan(&filter.input)?;
                stream.steps.push(Step::Filter(self.physical(&filter.predicate, filter.input.schema())?));
                Ok(stream)
            }
            LogicalPlan::Projection(projection) => {
                let mut stream = self.plan(&projection.input)?;
                if projection.expr.iter().any(is_proctime) {
                    return self.processing_time(projection, stream);
                }
                let input = projection.input.schema();
                let exprs = projection.expr.iter().map(|e| self.physical(e, input)).collect::<Result<Vec<_>>>()?;
                let mut times = HashMap::new();
                for (i, expr) in projection.expr.iter().enumerate() {
                    if let Some(time) = time_attr_of(expr, input, &stream.times)? {
                        times.insert(i, time);
                    }
                }
                let schema = projection.schema.as_arrow();
                let schema = if stream.updating { changelog_schema(schema) } else { Arc::new(schema.clone()) };
                stream.steps.push(Step::Project { exprs, schema });
                stream.times = times;
                Ok(stream)
            }
            LogicalPlan::SubqueryAlias(alias) => self.plan(&alias.input),
            LogicalPlan::Aggregate(aggregate) => {
                if let Some(grouping) = window_table_grouping(aggregate) {
                    return self.window_table_aggregate(aggregate, &grouping);
                }
                let input = self.plan(&aggregate.input)?;
                if let Some(window) = aggregate.group_expr.iter().position(|e| window_call(e).is_some()) {
                    let (kind, column) = self.window_of(aggregate, &input, window)?;
                    let edges = vec![(window, WindowEdge::Start(0))];
                    return self.window_aggregate(aggregate, input, WindowGrouping { kind, column, edges });
                }
                // Grouped by the start of windows computed upstream: the same windows again
                // (Nexmark q5's "max per window" over counts per window).
                // Of several (window_start, window_end), the one complete first.
                let schema = aggregate.input.schema();
                let columns = aggregate.group_expr.iter().enumerate().filter_map(|(i, e)| match unaliased(e) {
                    Expr::Column(column) if !input.updating => schema.index_of_column(column).ok().map(|c| (i, c)),
                    _ => None,
                });
                match earliest_window(columns, &input.times) {
                    Some((window, _, size_ms)) => {
                        let column = unaliased(&aggregate.group_expr[window]).clone();
                        let kind = WindowKind::Tumbling { size_ms };
                        let edges = vec![(window, WindowEdge::Start(0))];
                        self.window_aggregate(aggregate, input, WindowGrouping { kind, column, edges })
                    }
                    None => self.updating_aggregate(aggregate, input),
                }
            }
            LogicalPlan::Join(join) => self.join(join),
            LogicalPlan::Union(union) => self.union(union),
            LogicalPlan::Unnest(unnest) => {
                let mut stream = self.plan(&unnest.input)?;
                if stream.updating {
                    return plan_err!(
                        "UNNEST of an updating (changelog) input is not supported: unnest the append-only rows before aggregating them"
                    );
                }
                // A column keeps its time attribute if it is copied as it is, not unnested.
                let unnested: Vec<usize> = unnest
                    .list_type_columns
                    .iter()
                    .map(|(i, _)| *i)
                    .chain(unnest.struct_type_columns.iter().copied())
                    .collect();
                // A list of windows (hop_starts, cumulate_ends) unnested once gives a window
                // column.
                let depth_one: Vec<usize> =
                    unnest.list_type_columns.iter().filter(|(_, list)| list.depth == 1).map(|(i, _)| *i).collect();
                let times = unnest
                    .dependency_indices
                    .iter()
                    .enumerate()
                    .filter_map(|(i, source)| match stream.times.get(source) {
                        Some(TimeAttr::Windows { size_ms }) if depth_one.contains(source) => {
                            Some((i, TimeAttr::WindowStart { size_ms: *size_ms }))
                        }
                        Some(time) if !unnested.contains(source) => Some((i, *time)),
                        _ => None,
                    })
                    .collect();
                let lists = unnest
                    .list_type_columns
                    .iter()
                    .map(|(index, list)| ListUnnest { index_in_input_schema: *index, depth: list.depth })
                    .collect();
                let input = Arc::new(EmptyExec::new(Arc::new(unnest.input.schema().as_arrow().clone())));
                let template = UnnestExec::new(
                    input,
                    lists,
                    unnest.struct_type_columns.clone(),
                    Arc::new(unnest.schema.as_arrow().clone()),
                    unnest.options.clone(),
                )?;
                stream.steps.push(Step::Unnest(Arc::new(template)));
                stream.times = times;
                Ok(stream)
            }
            LogicalPlan::Window(window) => {
                // Aggregates, and LAG (run as an aggregate of the rows before), go to the OVER
                // operator; ranking functions to a rank or top-N.
                let aggregates = window.window_expr.iter().all(|e| {
                    matches!(unaliased(e), Expr::WindowFunction(f) if matches!(f.fun, WindowFunctionDefinition::AggregateUDF(_)) || is_lag(f))
                });
                if aggregates { self.over_aggregate(window) } else { self.window_rank(window) }
            }
            LogicalPlan::Sort(_) | LogicalPlan::Limit(_) => plan_err!(
                "ORDER BY and LIMIT over an unbounded stream are not supported: a stream has no last row to sort or stop at (the preview keeps the latest rows)"
            ),
            other => plan_err!("{} is not supported yet in a streaming query", other.display()),
        }
    }

    /// UNION ALL: every input projected onto the union's schema, all feeding one pass-through
    /// node whose watermark is the least of theirs. (UNION without ALL is DataFusion's
    /// aggregate over this: an updating DISTINCT.) If any input is updating, so is the union,
    /// and the append-only inputs' rows are inserts.
    fn union(&mut self, union: &Union) -> Result<Stream> {
        let inputs = union.inputs.iter().map(|input| self.plan(input)).collect::<Result<Vec<_>>>()?;
        let updating = inputs.iter().any(|s| s.updating);
        let output = union.schema.as_arrow();
        let schema = if updating { changelog_schema(output) } else { Arc::new(output.clone()) };
        // A column stays a time attribute if it is the same one in every input.
        let times: HashMap<usize, TimeAttr> = inputs[0]
            .times
            .iter()
            .filter(|(column, time)| inputs.iter().all(|s| s.times.get(column) == Some(time)))
            .map(|(column, time)| (*column, *time))
            .collect();
        let count = inputs.len();
        let mut nodes = Vec::new();
        for mut stream in inputs {
            let mut exprs: Vec<Arc<dyn PhysicalExpr>> = output
                .fields()
                .iter()
                .enumerate()
                .map(|(i, field)| Arc::new(PhysicalColumn::new(field.name(), i)) as Arc<dyn PhysicalExpr>)
                .collect();
            if updating && !stream.updating {
                exprs.push(Arc::new(Literal::new(ScalarValue::Utf8(Some(Change::Insert.code().to_string())))));
            }
            stream.steps.push(Step::Project { exprs, schema: schema.clone() });
            nodes.push(self.materialize(stream, "select"));
        }
        let name = self.name("union");
        let pass_through = Stateless::new(Vec::new());
        let node = self.graph.add_operator(
            &name,
            self.parallelism(),
            count,
            Arc::new(move |_| Ok(Box::new(pass_through.clone()))),
        );
        for (index, input) in nodes.into_iter().enumerate() {
            self.graph.connect(input, node, index, Partitioning::Forward);
        }
        Ok(Stream { node, steps: Vec::new(), times, updating })
    }

    /// Aggregates `OVER (PARTITION BY ... ORDER BY <event time> ROWS|RANGE BETWEEN ... PRECEDING
    /// AND CURRENT ROW)`: an [`OverAggregate`] emitting each row with its frame's aggregates
    /// once the watermark passes it. All the functions of one window node share its window.
    fn over_aggregate(&mut self, window: &datafusion::logical_expr::Window) -> Result<Stream> {
        const SUPPORTED: &str = "weir supports aggregates OVER (PARTITION BY ... ORDER BY <event time> [ROWS|RANGE BETWEEN ... PRECEDING AND CURRENT ROW]), all with the same window";
        let mut functions = Vec::new();
        for expr in &window.window_expr {
            let Expr::WindowFunction(function) = unaliased(expr) else {
                return plan_err!("{expr} is not supported: {SUPPORTED}");
            };
            functions.push(function.as_ref());
        }
        let Some(first) = functions.first().map(|f| &f.params) else {
            return plan_err!("an OVER (...) without a function");
        };
        if functions.iter().any(|f| {
            f.params.partition_by != first.partition_by
                || f.params.order_by != first.order_by
                || f.params.window_frame != first.window_frame
        }) {
            return plan_err!(
                "OVER (...) aggregates with different windows in one SELECT are not supported: {SUPPORTED}"
            );
        }
        let mut input = self.plan(&window.input)?;
        if input.updating {
            return plan_err!(
                "an OVER aggregate of an updating (changelog) input is not supported: a row taken back would change every later row's result; {SUPPORTED}"
            );
        }
        let schema = window.input.schema();
        let time_column = match first.order_by.as_slice() {
            [sort] if sort.asc => match unaliased(&sort.expr) {
                Expr::Column(column) => {
                    schema.index_of_column(column).ok().filter(|i| input.times.get(i) == Some(&TimeAttr::EventTime))
                }
                _ => None,
            },
            _ => None,
        };
        let Some(time_column) = time_column else {
            return plan_err!(
                "an OVER aggregate must be ordered by the event time alone, ascending (a stream is only in order up to the watermark): {SUPPORTED}"
            );
        };
        let frame = &first.window_frame;
        let lags = functions.iter().filter(|f| is_lag(f)).count();
        if lags > 0 && lags < functions.len() {
            return plan_err!(
                "LAG() shares its OVER (...) with aggregates, which weir does not run together: compute the LAG in a subquery of its own"
            );
        }
        if frame.end_bound != WindowFrameBound::CurrentRow && lags == 0 {
            return plan_err!(
                "an OVER frame must end at the CURRENT ROW (later rows have not arrived yet): {SUPPORTED}"
            );
        }
        let frame = match (&frame.units, &frame.start_bound) {
            (_, WindowFrameBound::Preceding(bound)) if bound.is_null() => match frame.units {
                WindowFrameUnits::Rows => Frame::Rows { preceding: None },
                _ => Frame::Range { preceding_ms: None },
            },
            (WindowFrameUnits::Rows, WindowFrameBound::CurrentRow) => Frame::Rows { preceding: Some(0) },
            (WindowFrameUnits::Rows, WindowFrameBound::Preceding(bound)) => match bound.cast_to(&DataType::UInt64) {
                Ok(ScalarValue::UInt64(Some(n))) => {
                    Frame::Rows { preceding: Some(usize::try_from(n).unwrap_or(usize::MAX)) }
                }
                _ => return plan_err!("ROWS {bound} PRECEDING: the bound must be a whole number of rows"),
            },
            (WindowFrameUnits::Range, WindowFrameBound::CurrentRow) => Frame::Range { preceding_ms: Some(0) },
            (WindowFrameUnits::Range, WindowFrameBound::Preceding(bound)) => match interval_ms(bound) {
                Some(ms) => Frame::Range { preceding_ms: Some(ms) },
                None => {
                    return plan_err!(
                        "RANGE {bound} PRECEDING: over event time the bound must be a fixed interval, such as INTERVAL '10' SECOND"
                    );
                }
            },
            _ => return plan_err!("this OVER frame is not supported: {SUPPORTED}"),
        };
        // LAG counts rows whatever the frame: fed one row at a time, peers too.
        let frame = if lags > 0 { Frame::Rows { preceding: None } } else { frame };
        let input_arrow = Arc::new(schema.as_arrow().clone());
        let input_width = input_arrow.fields().len();
        let mut aggregates = Vec::new();
        for (i, function) in functions.iter().enumerate() {
            let params = &function.params;
            let (udaf, args) = match &function.fun {
                WindowFunctionDefinition::AggregateUDF(udaf) => (udaf.clone(), params.args.as_slice()),
                _ if is_lag(function) => (Arc::new(lag_of(&params.args)?), params.args.get(..1).unwrap_or_default()),
                _ => return plan_err!("{}() OVER (...) is not an aggregate: {SUPPORTED}", function.fun.name()),
            };
            let args = args.iter().map(|a| self.physical(a, schema)).collect::<Result<Vec<_>>>()?;
            let built = AggregateExprBuilder::new(udaf.clone(), args)
                .schema(input_arrow.clone())
                .alias(window.schema.field(input_width + i).name())
                .with_distinct(params.distinct)
                .with_ignore_nulls(
                    params.null_treatment == Some(datafusion::logical_expr::expr::NullTreatment::IgnoreNulls),
                )
                .build()?;
            if matches!(frame, Frame::Rows { preceding: Some(_) } | Frame::Range { preceding_ms: Some(_) })
                && !built.create_sliding_accumulator()?.supports_retract_batch()
            {
                return plan_err!(
                    "{}() cannot take rows out of a bounded OVER frame: use it with UNBOUNDED PRECEDING",
                    function.fun.name()
                );
            }
            let filter = match &params.filter {
                Some(filter) => Some(self.physical(filter, schema)?),
                None => None,
            };
            aggregates.push(AggregateCall { function: Arc::new(built), filter });
        }
        let (extra, partition) = self.partition_columns(&first.partition_by, schema)?;
        let step = self.appending(schema, extra, false);
        let Step::Project { schema: operator_input, .. } = &step else {
            return plan_err!("the OVER input lost its shape");
        };
        let operator_input = operator_input.clone();
        input.steps.push(step);
        let times = input.times.clone();
        let node = self.materialize(input, "select");
        let output = Arc::new(window.schema.as_arrow().clone());
        let operator = OverAggregate::new(partition.clone(), time_column, frame, aggregates, operator_input, output);
        let name = self.name("over");
        let over =
            self.graph.add_operator(&name, self.parallelism(), 1, Arc::new(move |_| Ok(Box::new(operator.clone()))));
        self.graph.connect(node, over, 0, Partitioning::Hash(partition));
        let kept = match frame {
            Frame::Rows { preceding: Some(n) } => format!("the last {} rows of its frame", n + 1),
            Frame::Range { preceding_ms: Some(ms) } => format!("the rows of its frame's last {ms} ms"),
            _ => "its accumulators (an unbounded frame)".to_string(),
        };
        self.graph.describe_state(over, format!("rows waiting for the watermark; per partition, by key hash, {kept}"));
        Ok(Stream { node: over, steps: Vec::new(), times, updating: false })
    }

    /// `ROW_NUMBER() OVER (PARTITION BY ... ORDER BY ...)`. With a window start among the
    /// partition columns, over a windowed result: a [`WindowRank`] numbering each window's rows
    /// once the window is complete (top-N per window, the filter on the number after it).
    /// Without one, the filter above must limit the number (`WHERE rn <= N`): a [`TopN`]
    /// keeping each partition's top N as a changelog.
    fn window_rank(&mut self, window: &datafusion::logical_expr::Window) -> Result<Stream> {
        const SUPPORTED: &str = "weir supports ROW_NUMBER(), RANK() and DENSE_RANK() OVER (PARTITION BY ... ORDER BY ...) with WHERE rn <= N (top-N), or with a window start among the PARTITION BY columns (top-N per window)";
        // The ranking functions of one window node share its PARTITION BY and ORDER BY.
        let mut numberings = Vec::new();
        let mut functions = Vec::new();
        for expr in &window.window_expr {
            let Expr::WindowFunction(function) = unaliased(expr) else {
                return plan_err!("{expr} is not supported: {SUPPORTED}");
            };
            numberings.push(match function.fun.name() {
                "row_number" => Numbering::RowNumber,
                "rank" => Numbering::Rank,
                "dense_rank" => Numbering::DenseRank,
                other => return plan_err!("{other}() OVER (...) is not supported yet: {SUPPORTED}"),
            });
            functions.push(function);
        }
        let Some(function) = functions.first() else { return plan_err!("an OVER (...) without a function") };
        let mut input = self.plan(&window.input)?;
        let schema = window.input.schema();
        let params = &function.params;
        let columns = params.partition_by.iter().enumerate().filter_map(|(position, e)| match unaliased(e) {
            Expr::Column(column) => schema.index_of_column(column).ok().map(|i| (position, i)),
            _ => None,
        });
        let window_start = earliest_window(columns, &input.times).map(|(_, column, size_ms)| (column, size_ms));
        let limit = self.rank_limits.get(&(std::ptr::from_ref(window) as usize)).copied();
        if window_start.is_none() && limit.is_none() {
            return plan_err!(
                "{}() over a stream needs a limit on the number, as in WHERE rn <= 10 (top-N), or a window start among its PARTITION BY columns: a stream has no end, so all its rows can never be numbered; {SUPPORTED}",
                function.fun.name().to_uppercase()
            );
        }
        if window_start.is_some() && input.updating {
            return plan_err!(
                "{}() per window over an updating (changelog) input is not supported: {SUPPORTED}",
                function.fun.name().to_uppercase()
            );
        }
        let (extra, partition) = self.partition_columns(&params.partition_by, schema)?;
        let order = params
            .order_by
            .iter()
            .map(|sort| {
                let options =
                    datafusion::arrow::compute::SortOptions { descending: !sort.asc, nulls_first: sort.nulls_first };
                Ok((self.physical(&sort.expr, schema)?, options))
            })
            .collect::<Result<Vec<_>>>()?;
        let step = self.appending(schema, extra, input.updating);
        let Step::Project { schema: input_schema, .. } = &step else {
            return plan_err!("the rank's input lost its shape");
        };
        // The rows the operator keeps: the input's columns and the partition columns.
        let width = input_schema.fields().len() - usize::from(input.updating);
        let input_schema = Arc::new(Schema::new(input_schema.fields()[..width].to_vec()));
        let updating = input.updating;
        input.steps.push(step);
        let times = input.times.clone();
        let node = self.materialize(input, "select");
        let output = window.schema.as_arrow();
        let (name, factory, state): (String, weir_engine::OperatorFactory, String) = match (window_start, limit) {
            (Some((window_column, size_ms)), _) => {
                let operator = WindowRank::new(
                    window_column,
                    size_ms,
                    partition.clone(),
                    order,
                    numberings,
                    input_schema,
                    Arc::new(output.clone()),
                );
                let state = "each open window's rows, until the watermark passes its end".to_string();
                (self.name("rank"), Arc::new(move |_| Ok(Box::new(operator.clone()))), state)
            }
            (None, Some(limit)) => {
                let [numbering] = numberings.as_slice() else {
                    return plan_err!("a top-N takes one ranking function, the one its WHERE limits: {SUPPORTED}");
                };
                let numbering = *numbering;
                let limit = usize::try_from(limit).unwrap_or(usize::MAX);
                if numbering == Numbering::RowNumber && limit == 1 && !updating {
                    let operator = Deduplicate::new(partition.clone(), order, input_schema, changelog_schema(output))?;
                    let factory: weir_engine::OperatorFactory = Arc::new(move |_| Ok(Box::new(operator.clone())));
                    (self.name("deduplicate"), factory, "per partition its first row".to_string())
                } else {
                    let operator = TopN::new(
                        partition.clone(),
                        order,
                        numbering,
                        limit,
                        updating,
                        input_schema,
                        changelog_schema(output),
                    )?;
                    let state = match updating {
                        false => format!("per partition its top {limit} rows"),
                        true => "per partition every row (a changelog may take back a top one)".to_string(),
                    };
                    (self.name("top_n"), Arc::new(move |_| Ok(Box::new(operator.clone()))), state)
                }
            }
            (None, None) => return plan_err!("ROW_NUMBER() lost its limit"),
        };
        let rank = self.graph.add_operator(&name, self.parallelism(), 1, factory);
        self.graph.describe_state(rank, state);
        self.graph.connect(node, rank, 0, Partitioning::Hash(partition));
        match window_start {
            Some(_) => Ok(Stream { node: rank, steps: Vec::new(), times, updating: false }),
            None => Ok(Stream { node: rank, steps: Vec::new(), times: HashMap::new(), updating: true }),
        }
    }

    /// The aggregate functions `exprs` of `aggregate`, lowered to physical accumulators' plans.
    fn aggregates(&self, aggregate: &Aggregate, exprs: &[&Expr]) -> Result<Vec<AggregateCall>> {
        let input = aggregate.input.schema();
        let input_arrow = input.as_arrow().clone();
        let mut aggregates = Vec::new();
        for &expr in exprs {
            if let Some((end, window)) = window_end_call(expr) {
                return plan_err!(
                    "{end}(...) is the end of a window: it needs GROUP BY {window}(...) with the same arguments"
                );
            }
            let planning = PhysicalPlanningContext::default();
            let lowered =
                LoweredAggregateBuilder::new(expr, input, &input_arrow, self.state.execution_props(), &planning)
                    .build()?;
            aggregates.push(AggregateCall { function: lowered.aggregate, filter: lowered.filter });
        }
        Ok(aggregates)
    }

    /// The window of GROUP BY's `window`-th expression (a window function call): its kind,
    /// and the expression of the operator's window column (the window start for a tumbling
    /// window, the event time for the others).
    fn window_of(&self, aggregate: &Aggregate, input: &Stream, window: usize) -> Result<(WindowKind, Expr)> {
        if input.updating {
            return window_of_changelog();
        }
        let Some(call) = window_call(&aggregate.group_expr[window]) else {
            return plan_err!("GROUP BY lost its window");
        };
        if aggregate.group_expr.iter().filter(|e| window_call(e).is_some()).count() > 1 {
            return plan_err!("GROUP BY may hold one window function (tumble, hop or session)");
        }
        let schema = aggregate.input.schema();
        let time_ok = match call.args.first() {
            Some(time) => time_attr_of(time, schema, &input.times)? == Some(TimeAttr::EventTime),
            None => false,
        };
        if !time_ok {
            return window_without_event_time(call.name());
        }
        let (kind, window_expr) = match call.name() {
            TUMBLE => (
                WindowKind::Tumbling { size_ms: interval_arg(call, 1, "size")? },
                unaliased(&aggregate.group_expr[window]).clone(),
            ),
            HOP => {
                let (slide_ms, size_ms) = (interval_arg(call, 1, "slide")?, interval_arg(call, 2, "size")?);
                if slide_ms > size_ms {
                    return plan_err!(
                        "hop's slide ({slide_ms} ms) is larger than its size ({size_ms} ms): rows between windows would be lost"
                    );
                }
                (WindowKind::Hopping { slide_ms, size_ms, offset_ms: 0 }, call.args[0].clone())
            }
            _ => (WindowKind::Session { gap_ms: interval_arg(call, 1, "gap")? }, call.args[0].clone()),
        };
        Ok((kind, window_expr))
    }

    /// GROUP BY over the rows of HOP or CUMULATE (`window_table_aggregate.rs`): the native
    /// window aggregate over the table's rows, each taken once, with the event time where the
    /// window column was; the GROUP BY's window columns come from the operator's windows.
    fn window_table_aggregate(&mut self, aggregate: &Aggregate, grouping: &WindowTableGrouping) -> Result<Stream> {
        let mut stream = self.plan(grouping.rows)?;
        let rows = grouping.rows.schema();
        if stream.updating {
            return window_of_changelog();
        }
        if time_attr_of(grouping.time, rows, &stream.times)? != Some(TimeAttr::EventTime) {
            return window_without_event_time("DESCRIPTOR");
        }
        // The unnest's columns, the row's event time in place of its window.
        let unnested = grouping.unnest.schema.as_arrow();
        let mut exprs = Vec::new();
        for (column, &source) in grouping.unnest.dependency_indices.iter().enumerate() {
            let expr = if source == grouping.list {
                Expr::Cast(Cast::new(Box::new(grouping.time.clone()), unnested.field(column).data_type().clone()))
            } else {
                grouping.below.expr[source].clone()
            };
            exprs.push(self.physical(&expr, rows)?);
        }
        stream.steps.push(Step::Project { exprs, schema: Arc::new(unnested.clone()) });
        // The projections above, their window columns left as the event time.
        for (projection, shifted) in grouping.above.iter().zip(&grouping.shifted) {
            let input = projection.input.schema();
            let output = projection.schema.as_arrow();
            let mut exprs = Vec::new();
            for (column, expr) in projection.expr.iter().enumerate() {
                // A window column reads one of the layer below's, each the event time now.
                let time = expr.column_refs().into_iter().next().cloned();
                let expr = match (shifted[column], time) {
                    (Some(_), Some(time)) => {
                        Expr::Cast(Cast::new(Box::new(Expr::Column(time)), output.field(column).data_type().clone()))
                    }
                    _ => expr.clone(),
                };
                exprs.push(self.physical(&expr, input)?);
            }
            stream.steps.push(Step::Project { exprs, schema: Arc::new(output.clone()) });
        }
        stream.times = HashMap::new();
        let Some(&(window, _)) = grouping.edges.first() else { return plan_err!("GROUP BY lost its window") };
        let column = unaliased(&aggregate.group_expr[window]).clone();
        self.window_aggregate(
            aggregate,
            stream,
            WindowGrouping { kind: grouping.kind, column, edges: grouping.edges.clone() },
        )
    }

    /// A windowed GROUP BY: a pre-projection appends the window column and the keys to the
    /// input (whose columns keep their places, so the aggregate arguments still point at
    /// them), the input is partitioned, and a [`WindowAggregate`] runs the accumulators. Its
    /// output holds the window's start, the keys, the aggregates and, if a GROUP BY column is
    /// one, the window's end; a projection gives the GROUP BY's columns and order.
    fn window_aggregate(
        &mut self,
        aggregate: &Aggregate,
        mut input: Stream,
        grouping: WindowGrouping,
    ) -> Result<Stream> {
        let WindowGrouping { kind, column: window_expr, edges } = grouping;
        let schema = aggregate.input.schema();
        let edge_of = |i: usize| edges.iter().find(|(position, _)| *position == i).map(|(_, edge)| *edge);
        // Group columns in the operator's order: the window, then the keys.
        let keys: Vec<usize> = (0..aggregate.group_expr.len()).filter(|&i| edge_of(i).is_none()).collect();
        let mut extra =
            vec![("__group_0".to_string(), self.physical(&window_expr, schema)?, window_expr.get_type(schema)?)];
        let mut group_columns = vec!["__group_0".to_string()];
        for (position, &i) in keys.iter().enumerate() {
            let name = format!("__group_{}", position + 1);
            let data_type = aggregate.schema.field(i).data_type().clone();
            extra.push((name.clone(), self.physical(&aggregate.group_expr[i], schema)?, data_type));
            group_columns.push(name);
        }
        let partition = match kind {
            WindowKind::Tumbling { .. } => group_columns.clone(),
            _ if group_columns.len() > 1 => group_columns[1..].to_vec(),
            _ => {
                let all: Arc<dyn PhysicalExpr> = Arc::new(Literal::new(ScalarValue::Int64(Some(0))));
                extra.push((ALL_IN_ONE.to_string(), all, DataType::Int64));
                vec![ALL_IN_ONE.to_string()]
            }
        };
        input.steps.push(self.appending(schema, extra, false));
        let node = self.materialize(input, "select");
        // Window ends are filled in by the operator; the other aggregates are accumulators.
        let call = edges.first().and_then(|&(window, _)| window_call(&aggregate.group_expr[window]));
        let mut window_ends = Vec::new();
        let mut accumulated = Vec::new();
        for (position, expr) in aggregate.aggr_expr.iter().enumerate() {
            let Some((end, window_name)) = window_end_call(expr) else {
                accumulated.push(expr);
                continue;
            };
            let same_window = call.is_some_and(|call| {
                call.name() == window_name
                    && matches!(unaliased(expr), Expr::AggregateFunction(f) if f.params.args == call.args)
            });
            if !same_window {
                return plan_err!(
                    "{end}(...) must have the arguments of the query's GROUP BY {window_name}(...): it is that window's end"
                );
            }
            window_ends.push(position);
        }
        let aggregates = self.aggregates(aggregate, &accumulated)?;
        let groups = aggregate.group_expr.len();
        let fields = aggregate.schema.as_arrow().fields();
        let millis = DataType::Timestamp(TimeUnit::Millisecond, None);
        // The window's start as the GROUP BY column that is it, if one is.
        let start_field = match edges.iter().find(|(_, edge)| *edge == WindowEdge::Start(0)) {
            Some(&(i, _)) => fields[i].clone(),
            None => Arc::new(Field::new("__window_start", millis.clone(), false)),
        };
        let mut output_fields: Vec<FieldRef> = std::iter::once(start_field)
            .chain(keys.iter().map(|&i| fields[i].clone()))
            .chain(fields[groups..].iter().cloned())
            .collect();
        let end_column = edges.iter().any(|(_, edge)| matches!(edge, WindowEdge::End(_))).then(|| {
            window_ends.push(aggregate.aggr_expr.len());
            output_fields.push(Arc::new(Field::new("__window_end", millis.clone(), false)));
            output_fields.len() - 1
        });
        let output = Arc::new(Schema::new(output_fields));
        let operator =
            WindowAggregate::new(kind, group_columns, partition.clone(), aggregates, window_ends, output.clone());
        let name = self.name("window");
        let window_node =
            self.graph.add_operator(&name, self.parallelism(), 1, Arc::new(move |_| Ok(Box::new(operator.clone()))));
        self.graph.connect(node, window_node, 0, Partitioning::Hash(partition));
        let windows = match kind {
            WindowKind::Session { .. } => "per key its open sessions' accumulators".to_string(),
            _ => format!("accumulators per open {} window and key", kind_name(kind)),
        };
        self.graph
            .describe_state(window_node, format!("{windows}, each dropped when the watermark passes the window's end"));
        // Back to the GROUP BY's columns and order, each window column from the window's edge.
        let mut exprs: Vec<Arc<dyn PhysicalExpr>> = Vec::new();
        let mut times = HashMap::new();
        for (i, field) in fields.iter().enumerate() {
            let column =
                |at: usize| Arc::new(PhysicalColumn::new(output.field(at).name(), at)) as Arc<dyn PhysicalExpr>;
            let expr = match edge_of(i) {
                Some(edge) => {
                    let (at, shift) = match edge {
                        WindowEdge::Start(shift) => (0, shift),
                        WindowEdge::End(shift) => (end_column.unwrap_or(0), shift),
                    };
                    if let Some(size_ms) = window_edge_completes(kind, edge) {
                        times.insert(i, TimeAttr::WindowStart { size_ms });
                    }
                    shifted(column(at), output.field(at).data_type(), shift, field.data_type())
                }
                None if i < groups => column(1 + keys.iter().position(|&k| k == i).unwrap_or(0)),
                None => column(1 + keys.len() + i - groups),
            };
            exprs.push(expr);
        }
        let identity = exprs.len() == output.fields().len()
            && exprs.iter().enumerate().all(|(i, e)| {
                e.downcast_ref::<PhysicalColumn>().is_some_and(|c| c.index() == i)
                    && output.field(i).data_type() == fields[i].data_type()
            });
        let steps = if identity {
            Vec::new()
        } else {
            vec![Step::Project { exprs, schema: Arc::new(aggregate.schema.as_arrow().clone()) }]
        };
        Ok(Stream { node: window_node, steps, times, updating: false })
    }

    /// A GROUP BY without a window: an [`UpdatingAggregate`] emitting a changelog.
    fn updating_aggregate(&mut self, aggregate: &Aggregate, mut input: Stream) -> Result<Stream> {
        let schema = aggregate.input.schema();
        let aggregates = self.aggregates(aggregate, &aggregate.aggr_expr.iter().collect::<Vec<_>>())?;
        if input.updating {
            for a in &aggregates {
                if !UpdatingAggregate::can_retract(&a.function)? {
                    return plan_err!(
                        "{} cannot take back rows, so it cannot aggregate an updating (changelog) input: use it over a window, or over append-only rows",
                        a.function.name()
                    );
                }
            }
        }
        let mut extra = Vec::new();
        let mut group_columns = Vec::new();
        for (i, expr) in aggregate.group_expr.iter().enumerate() {
            let name = format!("__group_{i}");
            extra.push((name.clone(), self.physical(expr, schema)?, aggregate.schema.field(i).data_type().clone()));
            group_columns.push(name);
        }
        if group_columns.is_empty() {
            let all: Arc<dyn PhysicalExpr> = Arc::new(Literal::new(ScalarValue::Int64(Some(0))));
            extra.push((ALL_IN_ONE.to_string(), all, DataType::Int64));
        }
        input.steps.push(self.appending(schema, extra, input.updating));
        let retracting = input.updating;
        let node = self.materialize(input, "select");
        let output = changelog_schema(aggregate.schema.as_arrow());
        let partition = UpdatingAggregate::partition_columns(&group_columns);
        let operator = UpdatingAggregate::new(group_columns, aggregates, output, self.options.state_ttl, retracting);
        let name = self.name("aggregate");
        let aggregate_node =
            self.graph.add_operator(&name, self.parallelism(), 1, Arc::new(move |_| Ok(Box::new(operator.clone()))));
        self.graph.connect(node, aggregate_node, 0, Partitioning::Hash(partition));
        self.graph.describe_state(aggregate_node, format!("accumulators per group, {}", self.forgotten()));
        Ok(Stream { node: aggregate_node, steps: Vec::new(), times: HashMap::new(), updating: true })
    }

    /// An equi-join: both inputs get their key columns appended and are partitioned by them.
    /// A window join (equal window starts among the keys) and an interval join (time columns
    /// bounded by each other in the condition) expire their state by watermark; any other
    /// join is a regular join, kept for the state time-to-live. A regular join may join
    /// changelogs: its output is then a changelog too.
    fn join(&mut self, join: &Join) -> Result<Stream> {
        let kind = match join.join_type {
            JoinType::Inner => JoinKind::Inner,
            JoinType::Left => JoinKind::Left,
            JoinType::Right => JoinKind::Right,
            JoinType::Full => JoinKind::Full,
            JoinType::LeftSemi => JoinKind::LeftSemi,
            JoinType::LeftAnti => JoinKind::LeftAnti,
            other => {
                return plan_err!(
                    "{other} JOIN is not supported yet: weir runs INNER, LEFT, RIGHT and FULL joins, and EXISTS / IN subqueries"
                );
            }
        };
        if join.on.is_empty() {
            return plan_err!(
                "a join needs an equality between the two sides (as in ON a.id = b.id): a streaming cross join would keep every row forever"
            );
        }
        let (mut left, mut right) = (self.plan(&join.left)?, self.plan(&join.right)?);
        let inputs_updating = left.updating || right.updating;
        let (left_schema, right_schema) = (join.left.schema(), join.right.schema());
        let left_width = left_schema.fields().len();
        // Pairs have the left columns then the right ones (as the join's own schema for inner
        // and outer joins; semi and anti joins output the left ones only).
        let combined = match kind {
            JoinKind::Inner | JoinKind::Left | JoinKind::Right | JoinKind::Full => join.schema.as_ref().clone(),
            JoinKind::LeftSemi | JoinKind::LeftAnti => left_schema.join(right_schema)?,
        };
        // Window join: a pair of keys that are both starts of windows of one size.
        let mut expiry: [Option<Expiry>; 2] = [None, None];
        for (l, r) in &join.on {
            let (Expr::Column(lc), Expr::Column(rc)) = (unaliased(l), unaliased(r)) else { continue };
            let (Ok(li), Ok(ri)) = (left_schema.index_of_column(lc), right_schema.index_of_column(rc)) else {
                continue;
            };
            if let (Some(TimeAttr::WindowStart { size_ms }), Some(TimeAttr::WindowStart { size_ms: other })) =
                (left.times.get(&li), right.times.get(&ri))
                && size_ms == other
                // Of several (window_start, window_end), the one complete first.
                && expiry[0].is_none_or(|e| e.after_ms > *size_ms)
            {
                let window = |column| Some(Expiry { column, after_ms: *size_ms, late: LateRows::Drop });
                expiry = [window(li), window(ri)];
            }
        }
        let window_join = expiry[0].is_some();
        // Interval join: how late a time column's rows arrive after the watermark passed their
        // value: never for event time, up to the size for a window start (emitted at its end).
        let lateness = |time: Option<&TimeAttr>| match time {
            Some(TimeAttr::EventTime) => Some(0),
            Some(TimeAttr::WindowStart { size_ms }) => Some(*size_ms),
            Some(TimeAttr::Windows { .. }) | None => None,
        };
        if !window_join
            && let Some(filter) = &join.filter
            && let Some((l, r, right_minus_left, left_minus_right)) = interval_bounds(filter, &combined, left_width)
            && let (Some(left_late), Some(right_late)) =
                (lateness(left.times.get(&l)), lateness(right.times.get(&(r - left_width))))
        {
            // A left row can match right rows up to `right_minus_left` after it, which arrive
            // until the watermark passes that plus their lateness; and the other way round.
            expiry = [
                Some(Expiry { column: l, after_ms: right_minus_left + right_late + 1, late: LateRows::Match }),
                Some(Expiry {
                    column: r - left_width,
                    after_ms: left_minus_right + left_late + 1,
                    late: LateRows::Match,
                }),
            ];
        }
        if inputs_updating && expiry[0].is_some() {
            return plan_err!(
                "a window or interval join of an updating (changelog) input is not supported: a row taken back may already have expired; join the append-only rows, or use a regular join (with state.ttl)"
            );
        }
        let mut key_types = Vec::new();
        let (mut left_keys, mut right_keys) = (Vec::new(), Vec::new());
        for (i, (l, r)) in join.on.iter().enumerate() {
            let data_type = l.get_type(left_schema)?;
            let r = if r.get_type(right_schema)? == data_type {
                r.clone()
            } else {
                Expr::Cast(datafusion::logical_expr::Cast::new(Box::new(r.clone()), data_type.clone()))
            };
            left_keys.push((join_key_column(i), self.physical(l, left_schema)?, data_type.clone()));
            right_keys.push((join_key_column(i), self.physical(&r, right_schema)?, data_type.clone()));
            key_types.push(data_type);
        }
        let keys: Vec<String> = (0..key_types.len()).map(join_key_column).collect();
        left.steps.push(self.appending(left_schema, left_keys, left.updating));
        right.steps.push(self.appending(right_schema, right_keys, right.updating));
        let (left_times, right_times) = (left.times.clone(), right.times.clone());
        let left_node = self.materialize(left, "select");
        let right_node = self.materialize(right, "select");
        let filter = match &join.filter {
            Some(filter) => Some(self.physical(filter, &combined)?),
            None => None,
        };
        let updating = StreamingJoin::is_updating(kind, expiry[0], inputs_updating);
        let ttl = if expiry[0].is_none() { self.options.state_ttl } else { None };
        let output = join.schema.as_arrow();
        let output: SchemaRef = if updating { changelog_schema(output) } else { Arc::new(output.clone()) };
        let sides = [
            JoinSide { schema: Arc::new(left_schema.as_arrow().clone()), expiry: expiry[0] },
            JoinSide { schema: Arc::new(right_schema.as_arrow().clone()), expiry: expiry[1] },
        ];
        let combined = Arc::new(combined.as_arrow().clone());
        let operator = StreamingJoin::new(kind, sides, key_types, filter, combined, output, ttl);
        // Named by kind, so EXPLAIN says which join it is.
        let name = match (expiry[0], window_join) {
            (None, _) => self.name("join"),
            (Some(_), true) => self.name("window_join"),
            (Some(_), false) => self.name("interval_join"),
        };
        let node =
            self.graph.add_operator(&name, self.parallelism(), 2, Arc::new(move |_| Ok(Box::new(operator.clone()))));
        self.graph.connect(left_node, node, 0, Partitioning::Hash(keys.clone()));
        self.graph.connect(right_node, node, 1, Partitioning::Hash(keys));
        let kept = match expiry {
            [Some(left), Some(right)] => format!(
                "each dropped once the watermark passes its time column plus {} ms (left) or {} ms (right)",
                left.after_ms, right.after_ms
            ),
            _ => format!("{}; a side's rows no longer once the other side's input has ended", self.forgotten()),
        };
        self.graph.describe_state(node, format!("both sides' rows by key, {kept}"));
        // An inner window or interval join keeps its inputs' time attributes: the watermark
        // it forwards is held back by its state's expiry, so its rows are never late.
        let mut times = HashMap::new();
        if kind == JoinKind::Inner && expiry[0].is_some() {
            for (i, time) in left_times {
                times.insert(i, time);
            }
            for (i, time) in right_times {
                times.insert(left_width + i, time);
            }
        }
        Ok(Stream { node, steps: Vec::new(), times, updating })
    }

    fn sink(&mut self, stream: Stream, sink: &SinkTarget) -> Result<()> {
        let parallelism = self.parallelism();
        let updating = stream.updating;
        let node = self.materialize(stream, "select");
        let sink_node = match sink {
            SinkTarget::Preview(buffer) => {
                let buffer = buffer.clone();
                let name = self.name("preview");
                self.graph.add_operator(
                    &name,
                    parallelism,
                    1,
                    Arc::new(move |_| Ok(Box::new(PreviewSink::new(buffer.clone())))),
                )
            }
            SinkTarget::Table(target) => {
                let name = self.name(&target.name);
                let table = target.connector_view();
                let connector = Registry::built_in().connector(&table.options.connector)?;
                let planned = connector.sink(
                    &table,
                    updating,
                    NodeContext { node: &name, options: self.options, read: &ReadFields::everything() },
                )?;
                for prefix in planned.transactional_prefixes {
                    self.claim_prefix(&target.name, prefix)?;
                }
                self.preflight.extend(planned.preflight);
                let sink_node = self.graph.add_operator(&name, parallelism, 1, planned.factory);
                if let Some(state) = planned.state {
                    self.graph.describe_state(sink_node, state);
                }
                sink_node
            }
        };
        self.graph.connect(node, sink_node, 0, Partitioning::Forward);
        Ok(())
    }
}

/// The graph of `queries` (each a plan and where its rows go), sharing the sources they
/// read, reading tables from `table_of`.
pub fn build_graph(
    queries: &[(LogicalPlan, SinkTarget)],
    state: &SessionState,
    table_of: &dyn Fn(&str) -> Option<TableDef>,
    options: &PlanOptions,
) -> Result<Planned> {
    let mut planner = Planner {
        state,
        table_of,
        options,
        graph: Graph::new(),
        sources: HashMap::new(),
        used_names: HashMap::new(),
        preflight: Vec::new(),
        transactional_prefixes: Vec::new(),
        rank_limits: HashMap::new(),
        read: struct_fields_read(queries.iter().map(|(plan, _)| plan)),
    };
    let mut updating = Vec::with_capacity(queries.len());
    for (plan, sink) in queries {
        let stream = planner.plan(plan)?;
        updating.push(stream.updating);
        planner.sink(stream, sink)?;
    }
    planner.graph.validate()?;
    Ok(Planned {
        graph: planner.graph,
        sources: planner.sources.into_keys().collect(),
        updating,
        preflight: planner.preflight,
        transactional_prefixes: planner.transactional_prefixes.into_iter().map(|(_, prefix)| prefix).collect(),
    })
}
