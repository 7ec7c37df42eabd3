//! `LAG(x [, offset [, default]]) OVER (PARTITION BY ... ORDER BY <event time>)` over a stream,
//! as Flink's over aggregation runs it: the value `offset` rows back in the partition's time
//! order (arrival order among equal times), or the default while there are not that many rows
//! yet. DataFusion's `lag` is a window function over a whole sorted partition; a stream has no
//! whole partition, so the planner runs `lag` as this aggregate in the OVER operator, whose
//! accumulator keeps the partition's last `offset + 1` values and is fed one row at a time
//! (a ROWS frame). Its state is those values, so it survives checkpoints and restores. LEAD,
//! which needs rows that have not arrived, is not offered (nor is it in Flink).

use std::collections::VecDeque;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, ListArray};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::utils::SingleRowListArrayBuilder;
use datafusion::common::{ScalarValue, exec_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{Accumulator, AggregateUDF, AggregateUDFImpl, Signature, Volatility};

/// The aggregate that stands for `lag(x, offset, default)`; the planner gives it `x` only.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Lag {
    offset: usize,
    default: ScalarValue,
    signature: Signature,
}

/// `lag(x, offset, default)` as an aggregate of `x` (of type `data_type`).
pub fn lag(offset: usize, default: ScalarValue) -> AggregateUDF {
    AggregateUDF::from(Lag { offset, default, signature: Signature::any(1, Volatility::Immutable) })
}

impl AggregateUDFImpl for Lag {
    fn name(&self) -> &str {
        "lag"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> datafusion::error::Result<DataType> {
        match args {
            [value] => Ok(value.clone()),
            _ => exec_err!("lag takes one value"),
        }
    }

    fn state_fields(&self, args: StateFieldsArgs) -> datafusion::error::Result<Vec<FieldRef>> {
        let value = args.return_field.data_type().clone();
        Ok(vec![Arc::new(Field::new(
            format!("{}_last", args.name),
            DataType::List(Arc::new(Field::new_list_field(value, true))),
            true,
        ))])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> datafusion::error::Result<Box<dyn Accumulator>> {
        let data_type = args.return_field.data_type().clone();
        let default = if self.default.is_null() {
            ScalarValue::try_from(&data_type)?
        } else {
            self.default.cast_to(&data_type)?
        };
        Ok(Box::new(LagAccumulator { offset: self.offset, default, data_type, last: VecDeque::new() }))
    }
}

#[derive(Debug)]
struct LagAccumulator {
    offset: usize,
    default: ScalarValue,
    data_type: DataType,
    /// The partition's last `offset + 1` values, oldest first.
    last: VecDeque<ScalarValue>,
}

impl LagAccumulator {
    fn push(&mut self, value: ScalarValue) {
        self.last.push_back(value);
        while self.last.len() > self.offset + 1 {
            self.last.pop_front();
        }
    }
}

impl Accumulator for LagAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> datafusion::error::Result<()> {
        let Some(values) = values.first() else { return Ok(()) };
        for row in 0..values.len() {
            self.push(ScalarValue::try_from_array(values, row)?);
        }
        Ok(())
    }

    /// Rows leaving a frame do not move the row `offset` back: nothing to do.
    fn retract_batch(&mut self, _values: &[ArrayRef]) -> datafusion::error::Result<()> {
        Ok(())
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn evaluate(&mut self) -> datafusion::error::Result<ScalarValue> {
        match self.last.len() == self.offset + 1 {
            true => Ok(self.last.front().cloned().unwrap_or_else(|| self.default.clone())),
            false => Ok(self.default.clone()),
        }
    }

    fn size(&self) -> usize {
        size_of_val(self) + self.last.iter().map(ScalarValue::size).sum::<usize>()
    }

    fn state(&mut self) -> datafusion::error::Result<Vec<ScalarValue>> {
        let values = match self.last.is_empty() {
            true => datafusion::arrow::array::new_empty_array(&self.data_type),
            false => ScalarValue::iter_to_array(self.last.iter().cloned())?,
        };
        Ok(vec![SingleRowListArrayBuilder::new(values).build_list_scalar()])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> datafusion::error::Result<()> {
        let Some(lists) = states.first().and_then(|s| s.as_any().downcast_ref::<ListArray>()) else {
            return exec_err!("lag: its state is not a list");
        };
        for list in lists.iter().flatten() {
            for row in 0..list.len() {
                self.push(ScalarValue::try_from_array(&list, row)?);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::Int64Array;

    use super::*;

    fn accumulator(offset: usize, default: ScalarValue) -> LagAccumulator {
        LagAccumulator { offset, default, data_type: DataType::Int64, last: VecDeque::new() }
    }

    fn one(value: i64) -> Vec<ArrayRef> {
        vec![Arc::new(Int64Array::from(vec![value]))]
    }

    #[test]
    fn the_value_offset_rows_back_or_the_default_and_through_a_restore() {
        let mut lag = accumulator(2, ScalarValue::Int64(Some(-1)));
        let mut seen = Vec::new();
        for value in [10, 20, 30] {
            lag.update_batch(&one(value)).unwrap();
            seen.push(lag.evaluate().unwrap());
        }
        assert_eq!(seen, [-1, -1, 10].map(|v| ScalarValue::Int64(Some(v))));
        let state: Vec<ArrayRef> = lag.state().unwrap().iter().map(|s| s.to_array().unwrap()).collect();
        let mut restored = accumulator(2, ScalarValue::Int64(Some(-1)));
        restored.merge_batch(&state).unwrap();
        restored.update_batch(&one(40)).unwrap();
        assert_eq!(restored.evaluate().unwrap(), ScalarValue::Int64(Some(20)));
    }
}
