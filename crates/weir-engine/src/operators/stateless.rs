//! Filters and projections: DataFusion physical expressions evaluated batch by batch. No state,
//! so nothing to snapshot.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, ArrayRef, BooleanArray, ListArray, UInt32Array};
use datafusion::arrow::compute::{filter_record_batch, take};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::physical_expr::PhysicalExpr;

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
    /// One row per element of the list column `list`: output column i takes input column
    /// `sources[i]`, repeated, or the elements where that is `list`. A NULL list gives one NULL
    /// element when `preserve_nulls`, none otherwise; an empty list gives none.
    Unnest { list: usize, sources: Vec<usize>, preserve_nulls: bool, schema: SchemaRef },
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
    pub fn apply(&self, mut batch: RecordBatch) -> Result<RecordBatch> {
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
                Step::Unnest { list, sources, preserve_nulls, schema } => {
                    unnest(&batch, *list, sources, *preserve_nulls, schema)?
                }
            };
        }
        Ok(batch)
    }
}

fn unnest(
    batch: &RecordBatch,
    list: usize,
    sources: &[usize],
    preserve_nulls: bool,
    schema: &SchemaRef,
) -> Result<RecordBatch> {
    let Some(lists) = batch.column(list).as_any().downcast_ref::<ListArray>() else {
        return Err(Error::Graph(format!(
            "UNNEST of a {} column: only lists are supported",
            batch.column(list).data_type()
        )));
    };
    let (mut rows, mut elements) = (Vec::new(), Vec::new());
    let offsets = lists.value_offsets();
    for row in 0..lists.len() {
        if lists.is_null(row) {
            if preserve_nulls {
                rows.push(row as u32);
                elements.push(None);
            }
            continue;
        }
        for element in offsets[row]..offsets[row + 1] {
            rows.push(row as u32);
            elements.push(Some(element as u32));
        }
    }
    let (rows, elements) = (UInt32Array::from(rows), UInt32Array::from(elements));
    let columns = sources
        .iter()
        .map(|&source| match source == list {
            true => take(lists.values(), &elements, None),
            false => take(batch.column(source), &rows, None),
        })
        .collect::<std::result::Result<Vec<ArrayRef>, _>>()?;
    let options = RecordBatchOptions::new().with_row_count(Some(rows.len()));
    Ok(RecordBatch::try_new_with_options(schema.clone(), columns, &options)?)
}

#[async_trait]
impl Operator for Stateless {
    async fn process_batch(&mut self, _input: usize, batch: RecordBatch, out: &mut Collector) -> Result<()> {
        out.emit(self.apply(batch)?);
        Ok(())
    }
}
