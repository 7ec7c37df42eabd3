//! `min`, `max` and `count(DISTINCT ...)` over a changelog. DataFusion's sliding min/max keep
//! a queue of candidates and take rows back in arrival order only, as a window frame does; a
//! changelog takes back any row at any time. Its sliding distinct count does take back any row,
//! but its state lists the distinct values without their counts, so a restored one forgets that
//! a value was there twice. So, as Flink's `MinWithRetractAggFunction`, this accumulator keeps a
//! count per distinct value, ordered: the minimum is the first value, the maximum the last, the
//! distinct count the number of values; taking a row back lowers its value's count. Values are
//! ordered by Arrow's row format, whose byte order is the values' sort order for every type.
//!
//! Its state (for snapshots and merges) is two lists: the distinct values and their counts.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, Int64Array, ListArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::row::{OwnedRow, RowConverter, SortField};
use datafusion::common::utils::SingleRowListArrayBuilder;
use datafusion::common::{ScalarValue, exec_datafusion_err};
use datafusion::logical_expr::Accumulator;

/// What an accumulator reports of its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reported {
    Min,
    Max,
    DistinctCount,
}

#[derive(Debug)]
pub struct ValueCounts {
    reported: Reported,
    data_type: DataType,
    converter: RowConverter,
    /// Each distinct non-null value (in row format) with the number of rows holding it.
    counts: BTreeMap<OwnedRow, i64>,
}

impl ValueCounts {
    /// Counts values of `data_type`.
    pub fn new(reported: Reported, data_type: DataType) -> datafusion::error::Result<Self> {
        let converter = RowConverter::new(vec![SortField::new(data_type.clone())])?;
        Ok(Self { reported, data_type, converter, counts: BTreeMap::new() })
    }

    /// Adds `by` to the count of every non-null value of `values` (`weights[i]` times each,
    /// when given).
    fn count(&mut self, values: &ArrayRef, weights: Option<&Int64Array>, by: i64) -> datafusion::error::Result<()> {
        let rows = self.converter.convert_columns(std::slice::from_ref(values))?;
        for i in 0..values.len() {
            if values.is_null(i) {
                continue;
            }
            let weight = weights.map_or(1, |w| w.value(i)) * by;
            match self.counts.entry(rows.row(i).owned()) {
                Entry::Occupied(mut count) => {
                    *count.get_mut() += weight;
                    if *count.get() <= 0 {
                        count.remove();
                    }
                }
                // Taking back a value never counted (its group was forgotten): nothing to do.
                Entry::Vacant(count) => {
                    if weight > 0 {
                        count.insert(weight);
                    }
                }
            }
        }
        Ok(())
    }
}

impl Accumulator for ValueCounts {
    fn update_batch(&mut self, values: &[ArrayRef]) -> datafusion::error::Result<()> {
        match values.first() {
            Some(values) => self.count(values, None, 1),
            None => Ok(()),
        }
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> datafusion::error::Result<()> {
        match values.first() {
            Some(values) => self.count(values, None, -1),
            None => Ok(()),
        }
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn evaluate(&mut self) -> datafusion::error::Result<ScalarValue> {
        let extreme = match self.reported {
            Reported::Min => self.counts.keys().next(),
            Reported::Max => self.counts.keys().next_back(),
            Reported::DistinctCount => return Ok(ScalarValue::Int64(Some(self.counts.len() as i64))),
        };
        let Some(row) = extreme else { return ScalarValue::try_from(&self.data_type) };
        let columns = self.converter.convert_rows([row.row()])?;
        let column = columns.first().ok_or_else(|| exec_datafusion_err!("value counts: no value decoded"))?;
        ScalarValue::try_from_array(column, 0)
    }

    fn size(&self) -> usize {
        size_of_val(self) + self.counts.keys().map(|row| row.as_ref().len() + 32).sum::<usize>()
    }

    fn state(&mut self) -> datafusion::error::Result<Vec<ScalarValue>> {
        let values: ArrayRef = match self.counts.is_empty() {
            true => datafusion::arrow::array::new_empty_array(&self.data_type),
            false => {
                let columns = self.converter.convert_rows(self.counts.keys().map(|row| row.row()))?;
                columns.into_iter().next().ok_or_else(|| exec_datafusion_err!("value counts: no values decoded"))?
            }
        };
        let counts: ArrayRef = Arc::new(Int64Array::from_iter_values(self.counts.values().copied()));
        Ok(vec![
            SingleRowListArrayBuilder::new(values).build_list_scalar(),
            SingleRowListArrayBuilder::new(counts).build_list_scalar(),
        ])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> datafusion::error::Result<()> {
        let [values, counts] = states else { return Err(exec_datafusion_err!("value counts: a state has two lists")) };
        let list = |array: &ArrayRef| {
            array
                .as_any()
                .downcast_ref::<ListArray>()
                .cloned()
                .ok_or_else(|| exec_datafusion_err!("value counts: state is not a list"))
        };
        let (values, counts) = (list(values)?, list(counts)?);
        for i in 0..values.len() {
            if values.is_null(i) || counts.is_null(i) {
                continue;
            }
            let weights = counts.value(i);
            let weights = weights
                .as_any()
                .downcast_ref::<Int64Array>()
                .ok_or_else(|| exec_datafusion_err!("value counts: counts are not Int64"))?;
            self.count(&values.value(i), Some(weights), 1)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::StringArray;

    use super::*;

    fn ints(values: &[Option<i64>]) -> Vec<ArrayRef> {
        vec![Arc::new(Int64Array::from(values.to_vec()))]
    }

    #[test]
    fn any_row_can_be_taken_back() {
        let mut max = ValueCounts::new(Reported::Max, DataType::Int64).unwrap();
        let mut min = ValueCounts::new(Reported::Min, DataType::Int64).unwrap();
        for accumulator in [&mut max, &mut min] {
            accumulator.update_batch(&ints(&[Some(5), Some(9), None, Some(1), Some(9)])).unwrap();
        }
        assert_eq!(max.evaluate().unwrap(), ScalarValue::Int64(Some(9)));
        assert_eq!(min.evaluate().unwrap(), ScalarValue::Int64(Some(1)));
        // The oldest row is not the one taken back (a frame's sliding min/max would get this wrong).
        min.retract_batch(&ints(&[Some(1)])).unwrap();
        assert_eq!(min.evaluate().unwrap(), ScalarValue::Int64(Some(5)));
        max.retract_batch(&ints(&[Some(9)])).unwrap();
        assert_eq!(max.evaluate().unwrap(), ScalarValue::Int64(Some(9)), "one 9 is left");
        max.retract_batch(&ints(&[Some(9), Some(5), Some(1)])).unwrap();
        assert_eq!(max.evaluate().unwrap(), ScalarValue::Int64(None));
    }

    #[test]
    fn the_state_restores_every_count() {
        let mut max = ValueCounts::new(Reported::Max, DataType::Utf8).unwrap();
        max.update_batch(&[Arc::new(StringArray::from(vec!["b", "z", "z", "a"]))]).unwrap();
        let state: Vec<ArrayRef> = max.state().unwrap().iter().map(|s| s.to_array().unwrap()).collect();
        let mut restored = ValueCounts::new(Reported::Max, DataType::Utf8).unwrap();
        restored.merge_batch(&state).unwrap();
        restored.retract_batch(&[Arc::new(StringArray::from(vec!["z"]))]).unwrap();
        assert_eq!(restored.evaluate().unwrap(), ScalarValue::Utf8(Some("z".into())));
        restored.retract_batch(&[Arc::new(StringArray::from(vec!["z"]))]).unwrap();
        assert_eq!(restored.evaluate().unwrap(), ScalarValue::Utf8(Some("b".into())));
    }

    /// A distinct count keeps how many rows hold each value, through its state too: taking
    /// back one of two equal rows leaves the value counted.
    #[test]
    fn a_distinct_count_restored_keeps_each_values_rows() {
        let mut distinct = ValueCounts::new(Reported::DistinctCount, DataType::Int64).unwrap();
        distinct.update_batch(&ints(&[Some(1), Some(1), Some(2), None])).unwrap();
        assert_eq!(distinct.evaluate().unwrap(), ScalarValue::Int64(Some(2)));
        let state: Vec<ArrayRef> = distinct.state().unwrap().iter().map(|s| s.to_array().unwrap()).collect();
        let mut restored = ValueCounts::new(Reported::DistinctCount, DataType::Int64).unwrap();
        restored.merge_batch(&state).unwrap();
        restored.retract_batch(&ints(&[Some(1)])).unwrap();
        assert_eq!(restored.evaluate().unwrap(), ScalarValue::Int64(Some(2)), "one 1 is left");
        restored.retract_batch(&ints(&[Some(1), Some(2)])).unwrap();
        assert_eq!(restored.evaluate().unwrap(), ScalarValue::Int64(Some(0)));
    }
}
