//! Filters, projections and UNNEST: DataFusion physical expressions (and its unnest operator)
//! evaluated batch by batch. No state, so nothing to snapshot.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, ArrayRef, BooleanArray};
use datafusion::arrow::compute::{concat_batches, filter_record_batch};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_plan::unnest::UnnestExec;
use datafusion::physical_plan::{ExecutionPlan, collect};

use crate::changelog::{change_column, is_changelog};
use crate::error::{Error, Result};
use crate::operator::{Collector, Operator};

/// One step of a stateless operator.
#[derive(Debug, Clone)]
pub enum Step {
    /// Keep the rows for which the predicate is true.
    Filter(Arc<dyn PhysicalExpr>),
    /// Compute these expressions into a batch of `schema`. On a changelog, `schema` ends with
    /// the change column, which is carried over as it is (one field more than `exprs`).
    Project { exprs: Vec<Arc<dyn PhysicalExpr>>, schema: SchemaRef },
    /// UNNEST: DataFusion's own operator (lists at any depth, several at once, structs into
    /// their fields), planned once over an empty input and run on each batch.
    Unnest(Arc<UnnestExec>),
}

/// Filters and projections in order.
#[derive(Debug, Clone)]
pub struct Stateless {
    steps: Vec<Step>,
}

impl Stateless {
    pub fn new(steps: Vec<Step>) -> Self {
        Self { steps }
    }

    /// Runs every step over `batch`.
    pub async fn apply(&self, mut batch: RecordBatch) -> Result<RecordBatch> {
        for step in &self.steps {
            if batch.num_rows() == 0 {
                break;
            }
            batch = match step {
                Step::Filter(predicate) => {
                    let mask = predicate.evaluate(&batch).and_then(|v| v.into_array(batch.num_rows()))?;
                    let Some(mask) = mask.as_any().downcast_ref::<BooleanArray>() else {
                        return Err(Error::Graph(format!(
                            "a filter predicate gave {} values, not booleans",
                            mask.data_type()
                        )));
                    };
                    filter_record_batch(&batch, mask)?
                }
                Step::Project { exprs, schema } => {
                    let mut columns: Vec<ArrayRef> = exprs
                        .iter()
                        .map(|e| e.evaluate(&batch).and_then(|v| v.into_array(batch.num_rows())))
                        .collect::<datafusion::error::Result<_>>()?;
                    if schema.fields().len() == exprs.len() + 1 && is_changelog(schema) {
                        let Some(change) = change_column(&batch) else {
                            return Err(Error::Graph("a changelog projection got a batch without change kinds".into()));
                        };
                        columns.push(change);
                    }
                    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
                    RecordBatch::try_new_with_options(schema.clone(), columns, &options)?
                }
                Step::Unnest(template) => unnest(template, batch).await?,
            };
        }
        Ok(batch)
    }
}

/// Runs DataFusion's unnest over one batch: `template` with the batch as its input.
async fn unnest(template: &Arc<UnnestExec>, batch: RecordBatch) -> Result<RecordBatch> {
    let schema = batch.schema();
    let input = MemorySourceConfig::try_new_exec(&[vec![batch]], schema, None)?;
    // The batch has the template's input schema, so the plan's properties stay as planned.
    let keep = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Keep);
    let plan = Arc::clone(template).replace_children(vec![input], keep)?;
    let output = plan.schema();
    let batches = collect(plan, Arc::new(TaskContext::default())).await?;
    Ok(concat_batches(&output, &batches)?)
}

#[async_trait]
impl Operator for Stateless {
    async fn process_batch(&mut self, _input: usize, batch: RecordBatch, out: &mut Collector) -> Result<()> {
        out.emit(self.apply(batch).await?);
        Ok(())
    }
}
