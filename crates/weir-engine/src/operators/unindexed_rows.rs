//! Rows an inner join keeps for the other side's rows to come, held in the order they expire
//! instead of in the side's hash index until a probe asks for their key.
//!
//! Why: in Nexmark q7 each bid is kept until its window's maximum has come, and a maximum
//! comes once a window: nearly every bid is stored, never asked for and expired. Indexing it
//! (a hash insert, an entry in the expiry list, a lookup and a removal at expiry, cache misses
//! all, one key per distinct price) was a third of the query. Held here, a row costs a push and
//! its share of a scan; a probe scans the rows for its keys and moves the ones found into the
//! index (where they are matched and kept as before); a side whose rows are asked for often
//! (the scans cost more than indexing would have) is moved into the index whole, and its rows
//! go there as before until it has been indexed whole again.
//!
//! Rows are bucketed by expiry time, so that expiring takes whole buckets and looks only at
//! the one the watermark falls in: a row leaves at the same watermark as an indexed one would.

use std::collections::BTreeMap;

use datafusion::common::HashSet;

/// The span of expiry times in one bucket, in milliseconds.
const BUCKET_MS: i64 = 64;
/// How many rows scans may look at per row added before the side is indexed whole: a look is a
/// sequential key comparison, indexing a row about two cache misses.
const LOOKS_PER_ROW: u64 = 32;
/// Up to this many keys or rows held, a scan compares each row with each key.
const FEW: usize = 8;

/// Rows of one side, `K` their join key (in row format), `T` what is kept of each.
pub(crate) struct UnindexedRows<K, T> {
    /// By expiry bucket, rows in the order they came; a row moved out or expired is `None`.
    buckets: BTreeMap<i64, Vec<Option<(K, T)>>>,
    live: usize,
    /// Rows looked at by scans and rows added, since the side was last indexed whole.
    looked_at: u64,
    added: u64,
}

impl<K: AsRef<[u8]>, T> Default for UnindexedRows<K, T> {
    fn default() -> Self {
        Self { buckets: BTreeMap::new(), live: 0, looked_at: 0, added: 0 }
    }
}

impl<K: AsRef<[u8]>, T> UnindexedRows<K, T> {
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    /// Holds `row` of `key`, which expires when the watermark reaches `expires_at`.
    pub(crate) fn push(&mut self, expires_at: i64, key: K, row: T) {
        let bucket = expires_at.div_euclid(BUCKET_MS);
        match self.buckets.last_entry() {
            Some(mut last) if *last.key() == bucket => last.get_mut().push(Some((key, row))),
            _ => self.buckets.entry(bucket).or_default().push(Some((key, row))),
        }
        self.live += 1;
        self.added += 1;
    }

    /// Takes out the rows whose key is one of `keys`, in expiry-bucket order.
    pub(crate) fn take_matching(&mut self, keys: &[&[u8]]) -> Vec<(K, T)> {
        let mut taken = Vec::new();
        if self.live == 0 || keys.is_empty() {
            return taken;
        }
        // Where the keys or the rows held are few (q7: a window's one maximum against its
        // bids; a batch of bids against the maxima held), each row is compared with the keys;
        // else the keys go into a set.
        let set: Option<HashSet<&[u8]>> = (keys.len().min(self.live) > FEW).then(|| keys.iter().copied().collect());
        let wanted = |key: &[u8]| match &set {
            Some(set) => set.contains(key),
            None => keys.contains(&key),
        };
        for rows in self.buckets.values_mut() {
            self.looked_at += rows.len() as u64;
            for slot in rows.iter_mut() {
                if slot.as_ref().is_some_and(|(key, _)| wanted(key.as_ref()))
                    && let Some(row) = slot.take()
                {
                    taken.push(row);
                }
            }
        }
        self.live -= taken.len();
        self.buckets.retain(|_, rows| rows.iter().any(Option::is_some));
        taken
    }

    /// Whether scans have looked at so many rows that indexing them would have cost less.
    pub(crate) fn worth_indexing(&self) -> bool {
        self.looked_at > LOOKS_PER_ROW.saturating_mul(self.added)
    }

    /// Takes out every row (to be indexed), in expiry-bucket order.
    pub(crate) fn take_all(&mut self) -> Vec<(K, T)> {
        let rows: Vec<(K, T)> = std::mem::take(&mut self.buckets).into_values().flatten().flatten().collect();
        *self = Self::default();
        rows
    }

    /// Takes out the rows whose expiry (`expires_at` of each) the watermark has reached.
    pub(crate) fn expire(&mut self, watermark: i64, expires_at: impl Fn(&T) -> i64) -> Vec<(K, T)> {
        let mut expired = Vec::new();
        while let Some(first) = self.buckets.first_entry() {
            let start = first.key().saturating_mul(BUCKET_MS);
            if start > watermark {
                break;
            }
            if start.saturating_add(BUCKET_MS - 1) <= watermark {
                expired.extend(first.remove().into_iter().flatten());
                continue;
            }
            // The bucket the watermark falls in: its rows up to the watermark.
            let rows = first.into_mut();
            self.looked_at += rows.len() as u64;
            for slot in rows.iter_mut() {
                if slot.as_ref().is_some_and(|(_, row)| expires_at(row) <= watermark)
                    && let Some(row) = slot.take()
                {
                    expired.push(row);
                }
            }
            break;
        }
        self.live -= expired.len();
        expired
    }

    /// Every row held, to be moved (a compaction of the rows' storage).
    pub(crate) fn rows_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.buckets.values_mut().flatten().flatten().map(|(_, row)| row)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(rows: &[(Vec<u8>, (i64, u32))]) -> Vec<u32> {
        rows.iter().map(|(_, (_, id))| *id).collect()
    }

    /// Rows leave by key (moved to an index) or at the watermark that reaches their expiry,
    /// not one bucket earlier or later.
    #[test]
    fn rows_leave_by_key_or_exactly_at_their_expiry() {
        let mut rows: UnindexedRows<Vec<u8>, (i64, u32)> = UnindexedRows::default();
        let expiries = [10, 70, 63, 64, 200, 65, 130];
        for (id, at) in expiries.into_iter().enumerate() {
            rows.push(at, vec![id as u8 % 3], (at, id as u32));
        }
        assert_eq!(rows.len(), 7);
        assert_eq!(keys(&rows.take_matching(&[&[1]])), [1, 4], "key 1: rows 1 (bucket 1) and 4 (bucket 3)");
        assert_eq!(rows.len(), 5);
        assert!(rows.expire(9, |r| r.0).is_empty());
        assert_eq!(keys(&rows.expire(64, |r| r.0)), [0, 2, 3], "up to 64: 10 and 63, and 64 of the next bucket");
        assert_eq!(keys(&rows.expire(129, |r| r.0)), [5]);
        assert_eq!(keys(&rows.take_all()), [6]);
        assert_eq!(rows.len(), 0);
        assert!(rows.expire(i64::MAX, |r| r.0).is_empty());
    }

    #[test]
    fn scans_that_cost_more_than_an_index_say_so() {
        let mut rows: UnindexedRows<Vec<u8>, u32> = UnindexedRows::default();
        for id in 0..100 {
            rows.push(1_000, vec![1], id);
        }
        for _ in 0..LOOKS_PER_ROW {
            assert!(!rows.worth_indexing());
            rows.take_matching(&[&[2]]);
        }
        rows.take_matching(&[&[2]]);
        assert!(rows.worth_indexing());
        rows.take_all();
        assert!(!rows.worth_indexing(), "counted again from the side indexed whole");
    }
}
