//! Stored rows in Arrow's row format, appended to buffers of a few megabytes. A join keeps
//! every row of a side for as long as it may still match; an allocation per row (an
//! `OwnedRow`) cost more than the join's arithmetic, spread the rows over the heap (a snapshot
//! then decoded them from everywhere), and carried its converter's configuration in every row.
//! Here a row costs its bytes and a [`RowSlot`]. Buffers are filled one after another and never
//! grow in place: one growing buffer copied everything it held at each doubling (a tenth of a
//! join's time went to that copy and to faulting in the new memory). A removed row's bytes stay
//! until [`RowArena::compact`] copies the live ones into new buffers, which the owner does when
//! the garbage outweighs them.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RowSlot {
    chunk: u32,
    start: u32,
    len: u32,
}

#[derive(Debug, Default)]
pub(crate) struct RowArena {
    chunks: Vec<Vec<u8>>,
    /// The bytes of all rows, and of the rows not released.
    stored: usize,
    live: usize,
}

/// A buffer's size (a row longer than this gets a buffer of its own).
const CHUNK: usize = 4 << 20;

/// Below this many bytes an arena is never compacted: copying is not worth it.
const COMPACT_ABOVE: usize = 1 << 20;

impl RowArena {
    /// Stores a row's bytes.
    pub(crate) fn push(&mut self, row: &[u8]) -> RowSlot {
        let fits = self.chunks.last().is_some_and(|chunk| chunk.capacity() - chunk.len() >= row.len());
        if !fits {
            self.chunks.push(Vec::with_capacity(CHUNK.max(row.len())));
        }
        let chunk = self.chunks.len() - 1;
        let bytes = &mut self.chunks[chunk];
        let slot = RowSlot { chunk: chunk as u32, start: bytes.len() as u32, len: row.len() as u32 };
        bytes.extend_from_slice(row);
        self.stored += row.len();
        self.live += row.len();
        slot
    }

    /// A stored row's bytes (a released one's until the next compaction).
    pub(crate) fn get(&self, slot: RowSlot) -> &[u8] {
        let start = slot.start as usize;
        &self.chunks[slot.chunk as usize][start..start + slot.len as usize]
    }

    /// Marks a row's bytes garbage; its slot stays readable until the next compaction.
    pub(crate) fn release(&mut self, slot: RowSlot) {
        self.live -= slot.len as usize;
    }

    /// Whether the garbage outweighs the live rows (and there is enough to bother).
    pub(crate) fn needs_compaction(&self) -> bool {
        self.stored > COMPACT_ABOVE && self.stored > 2 * self.live
    }

    /// Copies the rows of `slots` (every live slot, each once) into new buffers and points the
    /// slots at their new places; released slots become invalid.
    pub(crate) fn compact<'a>(&mut self, slots: impl Iterator<Item = &'a mut RowSlot>) {
        let mut compacted = RowArena::default();
        for slot in slots {
            *slot = compacted.push(self.get(*slot));
        }
        *self = compacted;
    }

    /// Drops every row.
    pub(crate) fn clear(&mut self) {
        *self = RowArena::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compaction_keeps_the_live_rows_and_drops_the_released_ones() {
        let mut arena = RowArena::default();
        // Rows of about 1 kB to 4 kB, and one longer than a buffer: over several buffers.
        let row = |i: usize| vec![i as u8; if i == 7 { CHUNK + 1 } else { 1000 + i }];
        let mut slots: Vec<RowSlot> = (0..3000).map(|i| arena.push(&row(i))).collect();
        assert!(arena.chunks.len() > 2, "{} buffers", arena.chunks.len());
        assert!(arena.chunks.iter().all(|chunk| chunk.capacity() == CHUNK || chunk.len() == CHUNK + 1));
        assert!(!arena.needs_compaction());
        // Release two thirds (and the long row): garbage outweighs the rest.
        let mut kept = Vec::new();
        for (i, slot) in slots.drain(..).enumerate() {
            if i % 3 == 0 && i != 7 {
                kept.push((i, slot));
            } else {
                arena.release(slot);
            }
        }
        assert!(arena.needs_compaction());
        arena.compact(kept.iter_mut().map(|(_, slot)| slot));
        assert!(!arena.needs_compaction());
        for (i, slot) in &kept {
            assert_eq!(arena.get(*slot), row(*i).as_slice(), "row {i}");
        }
        let live: usize = kept.iter().map(|(i, _)| 1000 + i).sum();
        assert_eq!((arena.stored, arena.live), (live, live));
        assert_eq!(arena.chunks.iter().map(Vec::len).sum::<usize>(), live);
    }
}
