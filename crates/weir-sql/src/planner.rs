//! Plans a query into the runtime's graph. DataFusion does the SQL: name resolution, type
//! coercion, optimisation, expressions. weir walks the optimised logical plan and builds its
//! streaming operators from it.
//!
//! So far: projections and filters over one table (stateless pipelines, Nexmark q0-q2 and the
//! like). Anything else is refused here, at planning, with what is not supported yet.

use std::sync::Arc;

use datafusion::common::{Column, DFSchema};
use datafusion::execution::SessionState;
use datafusion::logical_expr::Expr;
use datafusion::logical_expr::LogicalPlan;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::physical_expr::aggregate::LoweredAggregateBuilder;
use weir_connectors::nexmark::{NexmarkConfig, NexmarkSource};
use weir_engine::operators::{
    Blackhole, PreviewBuffer, PreviewSink, Stateless, Step, TumblingWindow, WatermarkAssigner,
};
use weir_engine::{Graph, Partitioning};

use crate::catalog::TableDef;
use crate::error::Result;
use crate::plan_err;
use crate::window_functions::{TUMBLE, interval_ms};

/// Where a pipeline's results go.
#[derive(Debug, Clone)]
pub enum SinkTarget {
    /// A bare SELECT: rows kept for the client.
    Preview(PreviewBuffer),
    /// INSERT INTO this table.
    Table(TableDef),
}

/// A tumbling-window aggregate in the plan, and the stateless steps after it.
struct WindowStage {
    operator: TumblingWindow,
    /// Columns the input is hash-partitioned by: the window and the keys.
    partition: Vec<String>,
    after: Vec<Step>,
}

/// The source table, the stateless steps above it, and an optional window stage.
struct Stages {
    table: String,
    steps: Vec<Step>,
    window: Option<WindowStage>,
}

impl Stages {
    /// Where a new stateless step goes: after the window if there is one.
    fn push(&mut self, step: Step) {
        match &mut self.window {
            Some(window) => window.after.push(step),
            None => self.steps.push(step),
        }
    }
}

/// `GROUP BY tumble(ts, INTERVAL ...), keys...`: a pre-projection appends the group values as
/// columns to the input (whose columns keep their places, so the aggregate arguments still
/// point at them), the input is partitioned by those columns, and a `TumblingWindow` runs the
/// DataFusion accumulators.
fn window_stage(
    aggregate: &datafusion::logical_expr::Aggregate,
    state: &SessionState,
    below: &mut Stages,
) -> Result<WindowStage> {
    if below.window.is_some() {
        plan_err!("an aggregate over an aggregate is not supported yet");
    }
    let Some(Expr::ScalarFunction(first)) = aggregate.group_expr.first() else {
        plan_err!("GROUP BY without a window is not supported yet: group by tumble(time, INTERVAL '...') first");
    };
    if first.name() != TUMBLE {
        plan_err!("GROUP BY {} is not supported yet: group by tumble(time, INTERVAL '...') first", first.name());
    }
    let size = match first.args.get(1) {
        Some(Expr::Literal(value, _)) => interval_ms(value),
        _ => None,
    };
    let Some(size_ms) = size else {
        plan_err!("tumble's size must be a fixed interval literal, such as INTERVAL '10' SECOND")
    };
    let input = aggregate.input.schema();
    let input_arrow = input.as_arrow().clone();
    let mut exprs = Vec::new();
    let mut fields: Vec<datafusion::arrow::datatypes::FieldRef> = input_arrow.fields().iter().cloned().collect();
    for i in 0..input.fields().len() {
        let (qualifier, field) = input.qualified_field(i);
        let column = Expr::Column(Column::new(qualifier.cloned(), field.name()));
        exprs.push(state.create_physical_expr(column, input)?);
    }
    let mut group_columns = Vec::new();
    for (i, group) in aggregate.group_expr.iter().enumerate() {
        if i > 0 && matches!(group, Expr::ScalarFunction(f) if f.name() == TUMBLE) {
            plan_err!("GROUP BY may hold one window, first");
        }
        let name = format!("__group_{i}");
        let data_type = aggregate.schema.field(i).data_type().clone();
        exprs.push(state.create_physical_expr(group.clone(), input)?);
        fields.push(Arc::new(datafusion::arrow::datatypes::Field::new(&name, data_type, true)));
        group_columns.push(name);
    }
    below.steps.push(Step::Project { exprs, schema: Arc::new(datafusion::arrow::datatypes::Schema::new(fields)) });
    let mut aggregates = Vec::new();
    for expr in &aggregate.aggr_expr {
        let planning = PhysicalPlanningContext::default();
        let lowered =
            LoweredAggregateBuilder::new(expr, input, &input_arrow, state.execution_props(), &planning).build()?;
        if lowered.filter.is_some() || !lowered.order_bys.is_empty() {
            plan_err!("{expr}: FILTER and ORDER BY inside an aggregate are not supported yet");
        }
        aggregates.push(lowered.aggregate);
    }
    let output = Arc::new(aggregate.schema.as_arrow().clone());
    let operator = TumblingWindow::new(group_columns.clone(), size_ms, aggregates, output);
    Ok(WindowStage { operator, partition: group_columns, after: Vec::new() })
}

fn stages(plan: &LogicalPlan, state: &SessionState) -> Result<Stages> {
    match plan {
        LogicalPlan::TableScan(scan) => {
            let table = scan.table_name.table().to_string();
            if !scan.filters.is_empty() || scan.fetch.is_some() {
                plan_err!("a scan of '{table}' with pushed-down filters or a limit is not supported yet");
            }
            let mut steps = Vec::new();
            if let Some(indices) = &scan.projection {
                let source: DFSchema = scan.source.schema().as_ref().clone().try_into()?;
                let exprs = indices
                    .iter()
                    .map(|&i| {
                        let (qualifier, field) = source.qualified_field(i);
                        let column = Column::new(qualifier.cloned(), field.name());
                        state.create_physical_expr(Expr::Column(column), &source)
                    })
                    .collect::<datafusion::error::Result<_>>()?;
                steps.push(Step::Project { exprs, schema: Arc::new(scan.projected_schema.as_arrow().clone()) });
            }
            Ok(Stages { table, steps, window: None })
        }
        LogicalPlan::Filter(filter) => {
            let mut below = stages(&filter.input, state)?;
            let predicate = state.create_physical_expr(filter.predicate.clone(), filter.input.schema())?;
            below.push(Step::Filter(predicate));
            Ok(below)
        }
        LogicalPlan::Projection(projection) => {
            let mut below = stages(&projection.input, state)?;
            let exprs = projection
                .expr
                .iter()
                .map(|e| state.create_physical_expr(e.clone(), projection.input.schema()))
                .collect::<datafusion::error::Result<_>>()?;
            below.push(Step::Project { exprs, schema: Arc::new(projection.schema.as_arrow().clone()) });
            Ok(below)
        }
        LogicalPlan::SubqueryAlias(alias) => stages(&alias.input, state),
        LogicalPlan::Aggregate(aggregate) => {
            let mut below = stages(&aggregate.input, state)?;
            below.window = Some(window_stage(aggregate, state, &mut below)?);
            Ok(below)
        }
        other => plan_err!(
            "{} is not supported yet: weir plans projections and filters over one table so far (windows, aggregates and joins are being built)",
            other.display()
        ),
    }
}

/// The graph of `plan` reading from `tables` and writing to `sink`, at `parallelism`.
pub fn build_graph(
    plan: &LogicalPlan,
    state: &SessionState,
    table_of: impl Fn(&str) -> Option<TableDef>,
    sink: &SinkTarget,
    parallelism: usize,
) -> Result<Graph> {
    let Stages { table, steps, window } = stages(plan, state)?;
    let Some(source_table) = table_of(&table) else { plan_err!("there is no table named '{table}'") };
    let mut graph = Graph::new();
    let source = match source_table.connector.connector.as_str() {
        "nexmark" => {
            let options = &source_table.connector;
            let defaults = NexmarkConfig::default();
            let config = NexmarkConfig {
                seed: options.integer("seed", defaults.seed),
                rate: options.integer("rate", defaults.rate),
                as_fast_as_possible: options.boolean("as_fast_as_possible", defaults.as_fast_as_possible),
                events: options.get("events").and_then(|v| v.parse().ok()),
                splits: options.integer("splits", u64::from(defaults.splits)).try_into().unwrap_or(defaults.splits),
                batch_size: options
                    .integer("batch_size", defaults.batch_size as u64)
                    .try_into()
                    .unwrap_or(defaults.batch_size),
                ..defaults
            };
            if parallelism > config.splits as usize {
                plan_err!(
                    "table '{table}' has {} splits; the pipeline's parallelism {parallelism} needs at least as many (option 'splits')",
                    config.splits
                );
            }
            graph.add_source(&table, parallelism, Arc::new(move |_| Ok(Box::new(NexmarkSource::new(config.clone())))))
        }
        other => plan_err!("table '{table}': reading from a '{other}' table is not supported yet (nexmark is)"),
    };
    // Event time starts right after the source: the watermark is the largest event time seen
    // less the table's allowed lateness.
    let source = match &source_table.event_time {
        Some((column, delay)) => {
            let assigner = WatermarkAssigner::new(column, delay.as_millis() as i64);
            let node =
                graph.add_operator("watermark", parallelism, 1, Arc::new(move |_| Ok(Box::new(assigner.clone()))));
            graph.connect(source, node, 0, Partitioning::Forward);
            node
        }
        None => source,
    };
    let select = Stateless::new(steps);
    let mut select = graph.add_operator("select", parallelism, 1, Arc::new(move |_| Ok(Box::new(select.clone()))));
    graph.connect(source, select, 0, Partitioning::Forward);
    if let Some(WindowStage { operator, partition, after }) = window {
        if source_table.event_time.is_none() {
            plan_err!(
                "windows need event time: declare it on '{table}' with WATERMARK FOR column AS column - INTERVAL '...'"
            );
        }
        let window = graph.add_operator("window", parallelism, 1, Arc::new(move |_| Ok(Box::new(operator.clone()))));
        graph.connect(select, window, 0, Partitioning::Hash(partition));
        let after = Stateless::new(after);
        select = graph.add_operator("project", parallelism, 1, Arc::new(move |_| Ok(Box::new(after.clone()))));
        graph.connect(window, select, 0, Partitioning::Forward);
    }
    let sink_node = match sink {
        SinkTarget::Preview(buffer) => {
            let buffer = buffer.clone();
            graph.add_operator(
                "preview",
                parallelism,
                1,
                Arc::new(move |_| Ok(Box::new(PreviewSink::new(buffer.clone())))),
            )
        }
        SinkTarget::Table(target) => match target.connector.connector.as_str() {
            "blackhole" => graph.add_operator(&target.name, parallelism, 1, Arc::new(|_| Ok(Box::new(Blackhole)))),
            "preview" => {
                let buffer = PreviewBuffer::new(target.connector.integer("capacity", 10_000) as usize);
                graph.add_operator(
                    &target.name,
                    parallelism,
                    1,
                    Arc::new(move |_| Ok(Box::new(PreviewSink::new(buffer.clone())))),
                )
            }
            other => plan_err!(
                "table '{}': writing to a '{other}' table is not supported yet (blackhole and preview are)",
                target.name
            ),
        },
    };
    graph.connect(select, sink_node, 0, Partitioning::Forward);
    graph.validate()?;
    Ok(graph)
}
