//! What the aggregating operators (windows, updating aggregates) share about DataFusion
//! accumulators: evaluating the aggregates' arguments over a batch, feeding a group's rows to
//! its accumulators, and turning rows of scalar values (groups' outputs or states) back into
//! typed columns.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, UInt32Array};
use datafusion::arrow::compute::{cast, take};
use datafusion::arrow::datatypes::FieldRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Accumulator;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;

use crate::error::Result;

/// Each aggregate's arguments over `batch`.
pub(crate) fn arguments(aggregates: &[Arc<AggregateFunctionExpr>], batch: &RecordBatch) -> Result<Vec<Vec<ArrayRef>>> {
    Ok(aggregates
        .iter()
        .map(|a| {
            a.expressions().iter().map(|e| e.evaluate(batch).and_then(|v| v.into_array(batch.num_rows()))).collect()
        })
        .collect::<datafusion::error::Result<_>>()?)
}

/// Feeds rows `indices` of `arguments` into `accumulators`, or takes them back (`retract`).
pub(crate) fn feed(
    accumulators: &mut [Box<dyn Accumulator>],
    arguments: &[Vec<ArrayRef>],
    indices: &[u32],
    retract: bool,
) -> Result<()> {
    let indices = UInt32Array::from(indices.to_vec());
    for (accumulator, args) in accumulators.iter_mut().zip(arguments) {
        let taken = args.iter().map(|a| take(a, &indices, None)).collect::<std::result::Result<Vec<_>, _>>()?;
        if retract { accumulator.retract_batch(&taken)? } else { accumulator.update_batch(&taken)? }
    }
    Ok(())
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
