//! A batch's rows that a mask keeps, in the batch's own memory where nothing else holds it.
//!
//! A restore's chain merge drops from each batch of a base the rows a newer file replaced.
//! With a third of the keys changed since the base nearly every batch loses a row, and
//! filtering copied the whole base (about 1.1 GB a chain of 31 M groups) into fresh memory,
//! which is what a restore on the 2-core VM spends most of its time on. So a column of
//! fixed-width values without nulls whose buffer is the batch's alone (as a decoded file's
//! are) is compacted where it is; any other column is filtered into a copy.

use std::mem::size_of;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, ArrowPrimitiveType, AsArray, BooleanArray, PrimitiveArray, RecordBatch, RecordBatchOptions,
    downcast_primitive,
};
use datafusion::arrow::buffer::ScalarBuffer;
use datafusion::arrow::compute::filter;

use crate::error::Result;

/// The rows of `batch` where `keep` is true.
pub(crate) fn keep_rows(batch: RecordBatch, keep: &BooleanArray) -> Result<RecordBatch> {
    let rows = keep.true_count();
    let (schema, columns, _) = batch.into_parts();
    let columns = columns.into_iter().map(|column| keep_column(column, keep)).collect::<Result<Vec<_>>>()?;
    let options = RecordBatchOptions::new().with_row_count(Some(rows));
    Ok(RecordBatch::try_new_with_options(schema, columns, &options)?)
}

fn keep_column(column: ArrayRef, keep: &BooleanArray) -> Result<ArrayRef> {
    if column.null_count() > 0 || keep.null_count() > 0 {
        return Ok(filter(&column, keep)?);
    }
    macro_rules! compacted {
        ($t:ty, $column:expr, $keep:expr) => {
            compacted::<$t>($column, $keep)
        };
    }
    let data_type = column.data_type().clone();
    downcast_primitive! {
        &data_type => (compacted, column, keep),
        _ => Ok(filter(&column, keep)?)
    }
}

/// `column`'s values where `keep` is true, moved to the front of its own buffer when it is
/// the only holder of it.
fn compacted<T: ArrowPrimitiveType>(column: ArrayRef, keep: &BooleanArray) -> Result<ArrayRef> {
    let array = column.as_primitive::<T>().clone();
    drop(column);
    let (data_type, values, _) = array.into_parts();
    match values.into_inner().into_mutable() {
        Ok(mut buffer) => {
            let values = buffer.typed_data_mut::<T::Native>();
            let mut kept = 0;
            for row in keep.values().set_indices() {
                values[kept] = values[row];
                kept += 1;
            }
            buffer.truncate(kept * size_of::<T::Native>());
            let values = ScalarBuffer::from(buffer);
            Ok(Arc::new(PrimitiveArray::<T>::new(values, None).with_data_type(data_type)))
        }
        Err(shared) => {
            let array = PrimitiveArray::<T>::new(ScalarBuffer::from(shared), None).with_data_type(data_type);
            Ok(filter(&array, keep)?)
        }
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Int64Array, StringArray, TimestampMillisecondArray};
    use datafusion::arrow::compute::filter_record_batch;
    use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};

    use super::*;

    fn batch() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int64, false),
            Field::new("at", DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())), false),
            Field::new("name", DataType::Utf8, false),
            Field::new("maybe", DataType::Int64, true),
        ]));
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from_iter_values(0..100)),
            Arc::new(TimestampMillisecondArray::from_iter_values(1000..1100).with_timezone("UTC")),
            Arc::new(StringArray::from_iter_values((0..100).map(|i| format!("k{i}")))),
            Arc::new(Int64Array::from_iter((0..100).map(|i| (i % 3 != 0).then_some(i)))),
        ];
        RecordBatch::try_new(schema, columns).unwrap()
    }

    fn every_third() -> BooleanArray {
        BooleanArray::from_iter((0..100).map(|i| Some(i % 3 == 1)))
    }

    #[test]
    fn the_kept_rows_are_a_filters_and_a_lone_buffer_is_reused() {
        let batch = batch();
        let expected = filter_record_batch(&batch, &every_third()).unwrap();
        let before = batch.column(0).as_primitive::<datafusion::arrow::datatypes::Int64Type>().values().as_ptr();
        let kept = keep_rows(batch, &every_third()).unwrap();
        assert_eq!(kept, expected);
        let after = kept.column(0).as_primitive::<datafusion::arrow::datatypes::Int64Type>().values().as_ptr();
        assert_eq!(before, after, "the values stayed where they were");
    }

    #[test]
    fn a_state_files_decoded_columns_are_compacted_where_they_are() {
        let batch = batch();
        let bytes = crate::parquet_codec::encode(batch.schema(), std::slice::from_ref(&batch)).unwrap();
        let mut decoded = crate::parquet_codec::decode(bytes::Bytes::from(bytes)).unwrap();
        let decoded = decoded.remove(0);
        let before = decoded.column(0).as_primitive::<datafusion::arrow::datatypes::Int64Type>().values().as_ptr();
        let kept = keep_rows(decoded, &every_third()).unwrap();
        assert_eq!(kept, filter_record_batch(&batch, &every_third()).unwrap());
        let after = kept.column(0).as_primitive::<datafusion::arrow::datatypes::Int64Type>().values().as_ptr();
        assert_eq!(before, after, "the decoded values stayed where they were");
    }

    #[test]
    fn a_shared_buffer_is_copied_and_left_as_it_was() {
        let batch = batch();
        let held = batch.clone();
        let kept = keep_rows(batch, &every_third()).unwrap();
        assert_eq!(kept, filter_record_batch(&held, &every_third()).unwrap());
        assert_eq!(held, self::batch());
    }
}
