//! Where [`GroupKeys`](crate::group_keys::GroupKeys) keeps its keys, each in Arrow's row
//! format. Keys of fixed-width columns only are all one width, and are kept back to back: a
//! key's place is its id times that width. Kept as Arrow's `Rows`, a key is found through its
//! offset, a read of its own that misses the cache in a table of tens of millions of keys
//! (37% of a restore's time applying changed groups went to those reads), and the offsets take
//! 8 bytes a key of fresh memory.

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::row::{Row, RowConverter, Rows};

use crate::cache_hint::prefetch;
use crate::error::{Error, Result};

pub(crate) enum KeyBytes {
    /// Keys of any width, each at an offset.
    Rows(Rows),
    /// Keys of `width` bytes each, back to back.
    Fixed { width: usize, bytes: Vec<u8> },
}

impl KeyBytes {
    /// Room for `keys` keys of about `key_bytes` each, made by `converter` from columns of
    /// `types`.
    pub fn new(converter: &RowConverter, types: &[DataType], keys: usize, key_bytes: usize) -> Self {
        match fixed_width(types) {
            Some(width) => KeyBytes::Fixed { width, bytes: Vec::with_capacity(keys * width) },
            None => KeyBytes::Rows(converter.empty_rows(keys, keys * key_bytes)),
        }
    }

    /// Makes room for `keys` more keys of about `key_bytes` each (kept as `Rows`, only while
    /// none is held: Arrow's rows cannot grow their offsets and bytes by a count apart).
    pub fn reserve(&mut self, converter: &RowConverter, keys: usize, key_bytes: usize) {
        match self {
            KeyBytes::Rows(rows) if rows.num_rows() == 0 => *rows = converter.empty_rows(keys, keys * key_bytes),
            KeyBytes::Rows(_) => {}
            KeyBytes::Fixed { width, bytes } => bytes.reserve(keys * *width),
        }
    }

    /// Key `id`'s bytes.
    #[inline]
    pub fn row(&self, id: usize) -> &[u8] {
        match self {
            KeyBytes::Rows(rows) => rows.row(id).data(),
            KeyBytes::Fixed { width, bytes } => &bytes[id * width..(id + 1) * width],
        }
    }

    /// Asks for key `id`'s bytes ahead of a comparison (kept as `Rows`, its offset is read now).
    #[inline]
    pub fn prefetch(&self, id: usize) {
        match self {
            KeyBytes::Rows(rows) => prefetch(rows.row(id).data()),
            KeyBytes::Fixed { width, bytes } => {
                if let Some(first) = bytes.get(id * width) {
                    prefetch(first);
                }
            }
        }
    }

    /// Adds a key (a row of the converter the keys were made by).
    pub fn push(&mut self, key: Row<'_>) -> Result<()> {
        match self {
            KeyBytes::Rows(rows) => rows.push(key),
            KeyBytes::Fixed { width, bytes } => {
                check_width(key.data().len(), *width)?;
                bytes.extend_from_slice(key.data());
            }
        }
        Ok(())
    }

    /// Adds the keys of `columns`, encoded by `converter`.
    pub fn append(&mut self, converter: &RowConverter, columns: &[ArrayRef]) -> Result<()> {
        match self {
            KeyBytes::Rows(rows) => Ok(converter.append(rows, columns)?),
            KeyBytes::Fixed { width, bytes } => {
                let rows = converter.convert_columns(columns)?;
                bytes.reserve(rows.num_rows() * *width);
                for row in rows.iter() {
                    check_width(row.data().len(), *width)?;
                    bytes.extend_from_slice(row.data());
                }
                Ok(())
            }
        }
    }
}

impl KeyBytes {
    /// The keys of the ids with `keep[id]` set (`kept` of them), in their order.
    pub fn kept(&self, converter: &RowConverter, keep: &[bool], kept: usize) -> Self {
        let ids = keep.iter().enumerate().filter(|(_, k)| **k).map(|(id, _)| id);
        match self {
            KeyBytes::Rows(rows) => {
                let mut kept_rows = converter.empty_rows(kept, 0);
                ids.for_each(|id| kept_rows.push(rows.row(id)));
                KeyBytes::Rows(kept_rows)
            }
            KeyBytes::Fixed { width, bytes } => {
                let mut kept_bytes = Vec::with_capacity(kept * width);
                ids.for_each(|id| kept_bytes.extend_from_slice(&bytes[id * width..(id + 1) * width]));
                KeyBytes::Fixed { width: *width, bytes: kept_bytes }
            }
        }
    }

    /// The key columns of `ids`, in that order.
    pub fn columns(&self, converter: &RowConverter, ids: &[usize]) -> Result<Vec<ArrayRef>> {
        Ok(match self {
            KeyBytes::Rows(rows) => converter.convert_rows(ids.iter().map(|&id| rows.row(id)))?,
            KeyBytes::Fixed { .. } => {
                let parser = converter.parser();
                converter.convert_rows(ids.iter().map(|&id| parser.parse(self.row(id))))?
            }
        })
    }
}

fn check_width(got: usize, width: usize) -> Result<()> {
    match got == width {
        true => Ok(()),
        false => Err(Error::Graph(format!("a key of fixed-width columns took {got} bytes, not {width}"))),
    }
}

/// The bytes every key of columns of `types` takes in Arrow's row format, when they are the
/// same for every key: columns of fixed-width types only, each a null marker and the value.
/// (The types listed are those Arrow's row format writes so; a test checks each.)
pub(crate) fn fixed_width(types: &[DataType]) -> Option<usize> {
    types
        .iter()
        .map(|data_type| match data_type {
            DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64
            | DataType::Float32
            | DataType::Float64
            | DataType::Date32
            | DataType::Date64
            | DataType::Timestamp(_, _)
            | DataType::Time32(_)
            | DataType::Time64(_)
            | DataType::Duration(_)
            | DataType::Decimal128(_, _) => data_type.primitive_width().map(|width| 1 + width),
            _ => None,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Int64Array, new_null_array};
    use datafusion::arrow::compute::cast;
    use datafusion::arrow::datatypes::TimeUnit;
    use datafusion::arrow::row::SortField;

    use super::*;
    use crate::group_keys::GroupKeys;

    /// Every type taken as fixed-width is written in that many bytes, null or not; others are
    /// not taken.
    #[test]
    fn the_fixed_widths_are_arrows() {
        let types = [
            DataType::Int8,
            DataType::UInt16,
            DataType::Int32,
            DataType::UInt64,
            DataType::Float32,
            DataType::Float64,
            DataType::Date32,
            DataType::Date64,
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            DataType::Time64(TimeUnit::Microsecond),
            DataType::Duration(TimeUnit::Second),
            DataType::Decimal128(20, 3),
        ];
        for data_type in types {
            let width = fixed_width(std::slice::from_ref(&data_type)).unwrap();
            let converter = RowConverter::new(vec![SortField::new(data_type.clone())]).unwrap();
            let values = cast(&(Arc::new(Int64Array::from(vec![0, 7, -3])) as ArrayRef), &data_type).unwrap();
            for column in [values, new_null_array(&data_type, 2)] {
                let rows = converter.convert_columns(&[column]).unwrap();
                assert!(rows.iter().all(|row| row.data().len() == width), "{data_type}");
            }
        }
        assert_eq!(fixed_width(&[DataType::Int64, DataType::Int32]), Some(9 + 5));
        assert_eq!(fixed_width(&[DataType::Int64, DataType::Utf8]), None);
        assert_eq!(fixed_width(&[DataType::Boolean]), None);
    }

    /// Keys of fixed-width columns kept back to back: found, removed, compacted, read back and
    /// restored as keys kept as Arrow rows are.
    #[test]
    fn fixed_width_keys_are_kept_back_to_back_and_work_as_rows_do() {
        let mut keys = GroupKeys::new(&[DataType::Int64, DataType::Int64]).unwrap();
        let column = |values: &[i64]| -> ArrayRef { Arc::new(Int64Array::from(values.to_vec())) };
        let rows = keys.encode(&[column(&[1, 2, 1, 1]), column(&[5, 5, 5, 6])]).unwrap();
        let ids: Vec<_> = (0..4).map(|row| keys.intern(&rows, row).unwrap()).collect();
        assert_eq!(ids, [(0, true), (1, true), (0, false), (2, true)]);
        keys.remove(1);
        assert_eq!(keys.find(&rows, 1), None);
        keys.compact(&[true, false, true]);
        assert_eq!((keys.find(&rows, 0), keys.find(&rows, 3)), (Some(0), Some(1)));
        let back = keys.columns(&[1, 0]).unwrap();
        assert_eq!((back[0].as_ref(), back[1].as_ref()), (column(&[1, 1]).as_ref(), column(&[6, 5]).as_ref()));

        let appended = keys.append_unindexed(&[column(&[7, 8]), column(&[0, 0])]).unwrap();
        keys.index(appended).unwrap();
        let more = keys.encode(&[column(&[8, 9, 1]), column(&[0, 0, 6])]).unwrap();
        let ids = keys.intern_all(&[more]).unwrap();
        assert_eq!(ids, [vec![(3, false), (4, true), (1, false)]]);
        assert!(matches!(keys.key_bytes(), KeyBytes::Fixed { width: 18, .. }));
        let strings = GroupKeys::new(&[DataType::Utf8]).unwrap();
        assert!(matches!(strings.key_bytes(), KeyBytes::Rows(_)));
    }
}
