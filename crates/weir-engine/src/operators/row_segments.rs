//! Stored rows kept as Arrow columns: the batches they arrived in ("segments"), each row found
//! by a number. A join keeps every row of a side for as long as it may still match, and reads
//! stored rows back as columns in two places: a probe's matches (to pair them with the arriving
//! rows) and a snapshot (all of them, or the changed ones, into Parquet). Kept in Arrow's row
//! format, both were a row-by-row decode (a third of a join's time went to decoding its rows
//! for the final snapshot) and storing was a row-by-row encode; kept as columns, storing a
//! batch costs nothing and reading rows back is a gather (`interleave`) of their values.
//!
//! A row's number ([`RowSlot`]) is its place in the order rows were stored: segment after
//! segment, each covering a run of numbers. A removed row stays in its segment until
//! [`RowSegments::compact`] gathers the live ones into new segments (and renumbers them), which
//! the owner does when the removed rows outnumber the live ones. Batches of a few rows (a slow
//! stream) would leave a segment, and its per-column overhead, per row: a run of small segments
//! at the end is concatenated into one, which keeps every number.

use std::ops::Range;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, UInt32Array, new_empty_array};
use datafusion::arrow::compute::{cast, concat, interleave, take};
use datafusion::arrow::datatypes::DataType;

use crate::error::Result;

/// A stored row's number.
pub(crate) type RowSlot = u64;

/// A segment with fewer rows than this is small: runs of small segments are merged.
const SMALL: usize = 1024;

/// How many small segments in a row at the end are merged into one.
const MERGE_SMALL: usize = 32;

/// The most rows a compaction puts in one segment.
const COMPACTED_ROWS: usize = 64 * 1024;

/// Below this many stored rows a compaction is not worth it.
const COMPACT_ABOVE: usize = 16 * 1024;

struct Segment {
    /// The number of its first row.
    start: RowSlot,
    rows: usize,
    columns: Vec<ArrayRef>,
}

pub(crate) struct RowSegments {
    /// Each column's type: every segment's columns have them.
    types: Vec<DataType>,
    segments: Vec<Segment>,
    /// The number the next stored row gets.
    next: RowSlot,
    /// Rows in the segments, and of them the ones not released.
    stored: usize,
    live: usize,
    /// How many segments at the end are small.
    small_tail: usize,
}

impl RowSegments {
    pub(crate) fn new(types: Vec<DataType>) -> Self {
        Self { types, segments: Vec::new(), next: 0, stored: 0, live: 0, small_tail: 0 }
    }

    /// Stores the rows `rows` of `columns` (all of them without `rows`) and returns the number
    /// of the first; the others follow it in order.
    pub(crate) fn push(&mut self, columns: &[ArrayRef], rows: Option<&[u32]>) -> Result<RowSlot> {
        let first = self.next;
        let count = rows.map_or_else(|| columns.first().map_or(0, |c| c.len()), <[u32]>::len);
        if count == 0 {
            return Ok(first);
        }
        let indices = rows.map(|rows| UInt32Array::from(rows.to_vec()));
        let columns = columns
            .iter()
            .zip(&self.types)
            .map(|(column, data_type)| {
                let column = match &indices {
                    Some(indices) => take(column, indices, None)?,
                    None => column.clone(),
                };
                let column = if column.data_type() == data_type { column } else { cast(&column, data_type)? };
                Ok(owned_views(column))
            })
            .collect::<Result<Vec<_>>>()?;
        self.segments.push(Segment { start: first, rows: count, columns });
        self.next += count as u64;
        self.stored += count;
        self.live += count;
        self.small_tail = if count < SMALL { self.small_tail + 1 } else { 0 };
        if self.small_tail >= MERGE_SMALL {
            self.merge_small_tail()?;
        }
        Ok(first)
    }

    /// Concatenates the small segments at the end into one (their numbers stay as they are).
    fn merge_small_tail(&mut self) -> Result<()> {
        let tail = self.segments.split_off(self.segments.len() - self.small_tail);
        let rows: usize = tail.iter().map(|s| s.rows).sum();
        let columns = (0..self.types.len())
            .map(|c| Ok(concat(&tail.iter().map(|s| s.columns[c].as_ref()).collect::<Vec<_>>())?))
            .collect::<Result<Vec<_>>>()?;
        self.segments.push(Segment { start: tail[0].start, rows, columns });
        self.small_tail = usize::from(rows < SMALL);
        Ok(())
    }

    /// The number of columns a row has.
    pub(crate) fn width(&self) -> usize {
        self.types.len()
    }

    /// How many numbers have been given out: every row's number is below it.
    pub(crate) fn numbered(&self) -> usize {
        self.next as usize
    }

    /// Marks a row removed; it stays readable until the next compaction.
    pub(crate) fn release(&mut self) {
        self.live -= 1;
    }

    /// The columns `columns` of the rows `slots` (released ones too, before a compaction), in
    /// that order.
    pub(crate) fn gather(&self, slots: &[RowSlot], columns: Range<usize>) -> Result<Vec<ArrayRef>> {
        if slots.is_empty() {
            return Ok(self.types[columns].iter().map(new_empty_array).collect());
        }
        // The segments the rows are in, numbered in order of first use.
        let mut used: Vec<usize> = Vec::new();
        let mut position = vec![usize::MAX; self.segments.len()];
        let mut indices = Vec::with_capacity(slots.len());
        for slot in slots {
            let segment = self.segments.partition_point(|s| s.start <= *slot).saturating_sub(1);
            if position[segment] == usize::MAX {
                position[segment] = used.len();
                used.push(segment);
            }
            indices.push((position[segment], (*slot - self.segments[segment].start) as usize));
        }
        columns
            .map(|c| match used.as_slice() {
                [only] => {
                    let rows = UInt32Array::from_iter_values(indices.iter().map(|(_, row)| *row as u32));
                    Ok(take(&self.segments[*only].columns[c], &rows, None)?)
                }
                _ => {
                    let arrays: Vec<&dyn Array> = used.iter().map(|s| self.segments[*s].columns[c].as_ref()).collect();
                    Ok(interleave(&arrays, &indices)?)
                }
            })
            .collect()
    }

    /// The columns `columns` of the rows numbered `first..first + rows`, without a copy: a
    /// slice of each segment the numbers cross.
    pub(crate) fn slices(&self, first: RowSlot, rows: usize, columns: Range<usize>) -> Vec<Vec<ArrayRef>> {
        let end = first + rows as u64;
        let mut pieces = Vec::new();
        let mut at = self.segments.partition_point(|s| s.start <= first).saturating_sub(1);
        let mut next = first;
        while next < end && at < self.segments.len() {
            let segment = &self.segments[at];
            let offset = (next - segment.start) as usize;
            let len = (segment.rows - offset).min((end - next) as usize);
            pieces.push(columns.clone().map(|c| segment.columns[c].slice(offset, len)).collect());
            next += len as u64;
            at += 1;
        }
        pieces
    }

    /// Whether the removed rows outnumber the live ones (and there are enough to bother).
    pub(crate) fn needs_compaction(&self) -> bool {
        self.stored > COMPACT_ABOVE && self.stored > 2 * self.live
    }

    /// Gathers the rows of `slots` (every live row, each once) into new segments, in that
    /// order, and renumbers them; released rows are gone.
    pub(crate) fn compact<'a>(&mut self, slots: impl Iterator<Item = &'a mut RowSlot>) -> Result<()> {
        let mut slots: Vec<&mut RowSlot> = slots.collect();
        let mut compacted = RowSegments::new(self.types.clone());
        for chunk in slots.chunks_mut(COMPACTED_ROWS) {
            let numbers: Vec<RowSlot> = chunk.iter().map(|slot| **slot).collect();
            let columns = self.gather(&numbers, 0..self.types.len())?;
            let first = compacted.push(&columns, None)?;
            for (i, slot) in chunk.iter_mut().enumerate() {
                **slot = first + i as u64;
            }
        }
        *self = compacted;
        Ok(())
    }

    /// Drops every row.
    pub(crate) fn clear(&mut self) {
        *self = RowSegments::new(std::mem::take(&mut self.types));
    }
}

/// A string or binary view column copied out of the buffers it shares: a stored row must not
/// keep a whole input buffer alive.
fn owned_views(column: ArrayRef) -> ArrayRef {
    match column.data_type() {
        DataType::Utf8View => Arc::new(column.as_string_view().gc()),
        DataType::BinaryView => Arc::new(column.as_binary_view().gc()),
        _ => column,
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Int64Array, StringArray};

    use super::*;

    fn batch(from: i64, rows: i64) -> Vec<ArrayRef> {
        let ids: Vec<i64> = (from..from + rows).collect();
        vec![
            Arc::new(Int64Array::from(ids.clone())),
            Arc::new(StringArray::from_iter_values(ids.iter().map(|i| format!("row {i}")))),
        ]
    }

    fn ids(columns: &[ArrayRef]) -> Vec<i64> {
        columns[0].as_primitive::<datafusion::arrow::datatypes::Int64Type>().values().to_vec()
    }

    #[test]
    fn rows_are_read_back_by_number_across_segments() {
        let mut segments = RowSegments::new(vec![DataType::Int64, DataType::Utf8]);
        assert_eq!(segments.push(&batch(0, 10), None).unwrap(), 0);
        // Only rows 1 and 3 of this batch are stored: numbers 10 and 11.
        assert_eq!(segments.push(&batch(100, 5), Some(&[1, 3])).unwrap(), 10);
        assert_eq!(segments.push(&batch(200, 3), None).unwrap(), 12);
        let read = segments.gather(&[11, 0, 13, 9, 10], 0..2).unwrap();
        assert_eq!(ids(&read), vec![103, 0, 201, 9, 101]);
        assert_eq!(read[1].as_string::<i32>().value(2), "row 201");
        // A run of numbers, as slices of the segments it crosses.
        let pieces = segments.slices(8, 4, 0..1);
        assert_eq!(pieces.iter().map(|p| ids(p)).collect::<Vec<_>>(), vec![vec![8, 9], vec![101, 103]]);
        // One segment alone, and a column range.
        assert_eq!(ids(&segments.gather(&[4, 2], 0..1).unwrap()), vec![4, 2]);
        assert_eq!(segments.gather(&[], 1..2).unwrap()[0].len(), 0);
    }

    #[test]
    fn small_segments_at_the_end_are_merged_keeping_their_numbers() {
        let mut segments = RowSegments::new(vec![DataType::Int64, DataType::Utf8]);
        segments.push(&batch(0, 2000), None).unwrap();
        for i in 0..100 {
            segments.push(&batch(10_000 + i, 1), None).unwrap();
        }
        // 100 one-row segments: merged at every 32nd, the merged one small still.
        assert!(segments.segments.len() < 40, "{} segments", segments.segments.len());
        let read = segments.gather(&[1999, 2000, 2050, 2099], 0..1).unwrap();
        assert_eq!(ids(&read), vec![1999, 10_000, 10_050, 10_099]);
    }

    #[test]
    fn compaction_keeps_the_live_rows_and_drops_the_released_ones() {
        let mut segments = RowSegments::new(vec![DataType::Int64, DataType::Utf8]);
        for b in 0..30 {
            segments.push(&batch(b * 1000, 1000), None).unwrap();
        }
        assert!(!segments.needs_compaction());
        // Keep every third row: the released ones outnumber the rest.
        let mut kept: Vec<(i64, RowSlot)> = Vec::new();
        for number in 0..30_000u64 {
            match number % 3 {
                0 => kept.push((number as i64, number)),
                _ => segments.release(),
            }
        }
        assert!(segments.needs_compaction());
        // Gathered in the order given (backwards here).
        kept.reverse();
        segments.compact(kept.iter_mut().map(|(_, slot)| slot)).unwrap();
        assert!(!segments.needs_compaction());
        assert_eq!((segments.stored, segments.live), (10_000, 10_000));
        assert_eq!(kept[0].1, 0);
        let slots: Vec<RowSlot> = kept.iter().map(|(_, slot)| *slot).collect();
        let read = segments.gather(&slots, 0..2).unwrap();
        assert_eq!(ids(&read), kept.iter().map(|(id, _)| *id).collect::<Vec<_>>());
        assert_eq!(read[1].as_string::<i32>().value(0), "row 29997");
    }
}
