//! Plans a query into the runtime's graph. DataFusion does the SQL: name resolution, type
//! coercion, optimisation, expressions. weir walks the optimised logical plan and builds its
//! streaming operators from it.
//!
//! So far: projections and filters over one table (stateless pipelines, Nexmark q0-q2 and the
//! like). Anything else is refused here, at planning, with what is not supported yet.

use std::sync::Arc;

use datafusion::common::DFSchema;
use datafusion::execution::SessionState;
use datafusion::logical_expr::LogicalPlan;
use weir_connectors::nexmark::{NexmarkConfig, NexmarkSource};
use weir_engine::operators::{Blackhole, PreviewBuffer, PreviewSink, Stateless, Step, WatermarkAssigner};
use weir_engine::{Graph, Partitioning};

use crate::catalog::TableDef;
use crate::error::Result;
use crate::plan_err;

/// Where a pipeline's results go.
#[derive(Debug, Clone)]
pub enum SinkTarget {
    /// A bare SELECT: rows kept for the client.
    Preview(PreviewBuffer),
    /// INSERT INTO this table.
    Table(TableDef),
}

/// The source table and the stateless steps above it.
struct Stages {
    table: String,
    steps: Vec<Step>,
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
                        let column = datafusion::common::Column::new(qualifier.cloned(), field.name());
                        state.create_physical_expr(datafusion::logical_expr::Expr::Column(column), &source)
                    })
                    .collect::<datafusion::error::Result<_>>()?;
                steps.push(Step::Project { exprs, schema: Arc::new(scan.projected_schema.as_arrow().clone()) });
            }
            Ok(Stages { table, steps })
        }
        LogicalPlan::Filter(filter) => {
            let mut below = stages(&filter.input, state)?;
            let predicate = state.create_physical_expr(filter.predicate.clone(), filter.input.schema())?;
            below.steps.push(Step::Filter(predicate));
            Ok(below)
        }
        LogicalPlan::Projection(projection) => {
            let mut below = stages(&projection.input, state)?;
            let exprs = projection
                .expr
                .iter()
                .map(|e| state.create_physical_expr(e.clone(), projection.input.schema()))
                .collect::<datafusion::error::Result<_>>()?;
            below.steps.push(Step::Project { exprs, schema: Arc::new(projection.schema.as_arrow().clone()) });
            Ok(below)
        }
        LogicalPlan::SubqueryAlias(alias) => stages(&alias.input, state),
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
    let Stages { table, steps } = stages(plan, state)?;
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
    let select = graph.add_operator("select", parallelism, 1, Arc::new(move |_| Ok(Box::new(select.clone()))));
    graph.connect(source, select, 0, Partitioning::Forward);
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
