//! Stored rows in Arrow's row format, appended to one buffer. A join keeps every row of a
//! side for as long as it may still match; an allocation per row (an `OwnedRow`) cost more than
//! the join's arithmetic, spread the rows over the heap (a snapshot then decoded them from
//! everywhere), and carried its converter's configuration in every row. Here a row costs its
//! bytes and a [`RowSlot`]. A removed row's bytes stay until [`RowArena::compact`] copies the
//! live ones into a new buffer, which the owner does when the garbage outweighs them.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RowSlot {
    start: usize,
    len: u32,
}

#[derive(Debug, Default)]
pub(crate) struct RowArena {
    bytes: Vec<u8>,
    /// The bytes of the rows not released.
    live: usize,
}

/// Below this many bytes an arena is never compacted: copying is not worth it.
const COMPACT_ABOVE: usize = 1 << 20;

impl RowArena {
    /// Stores a row's bytes.
    pub(crate) fn push(&mut self, row: &[u8]) -> RowSlot {
        let slot = RowSlot { start: self.bytes.len(), len: row.len() as u32 };
        self.bytes.extend_from_slice(row);
        self.live += row.len();
        slot
    }

    /// A stored row's bytes (a released one's until the next compaction).
    pub(crate) fn get(&self, slot: RowSlot) -> &[u8] {
        &self.bytes[slot.start..slot.start + slot.len as usize]
    }

    /// Marks a row's bytes garbage; its slot stays readable until the next compaction.
    pub(crate) fn release(&mut self, slot: RowSlot) {
        self.live -= slot.len as usize;
    }

    /// Whether the garbage outweighs the live rows (and there is enough to bother).
    pub(crate) fn needs_compaction(&self) -> bool {
        self.bytes.len() > COMPACT_ABOVE && self.bytes.len() > 2 * self.live
    }

    /// Copies the rows of `slots` (every live slot, each once) into a new buffer and points the
    /// slots at their new places; released slots become invalid.
    pub(crate) fn compact<'a>(&mut self, slots: impl Iterator<Item = &'a mut RowSlot>) {
        let mut bytes = Vec::with_capacity(self.live);
        for slot in slots {
            let start = bytes.len();
            bytes.extend_from_slice(self.get(*slot));
            slot.start = start;
        }
        self.live = bytes.len();
        self.bytes = bytes;
    }

    /// Drops every row.
    pub(crate) fn clear(&mut self) {
        self.bytes = Vec::new();
        self.live = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compaction_keeps_the_live_rows_and_drops_the_released_ones() {
        let mut arena = RowArena::default();
        let row = |i: usize| vec![i as u8; 1000 + i];
        let mut slots: Vec<RowSlot> = (0..3000).map(|i| arena.push(&row(i))).collect();
        assert!(!arena.needs_compaction());
        // Release two thirds: garbage outweighs the rest.
        let mut kept = Vec::new();
        for (i, slot) in slots.drain(..).enumerate() {
            if i % 3 == 0 {
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
        assert_eq!(arena.bytes.len(), kept.iter().map(|(i, _)| 1000 + i).sum::<usize>());
    }
}
