//! State time-to-live for the operators whose state would otherwise grow forever (updating
//! aggregates, regular joins): entries idle for longer than the TTL, in processing time as in
//! Flink, are forgotten without output. Sweeping every entry on every batch would cost more
//! than the state is worth, so a sweep runs at most every half TTL.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Wall-clock milliseconds since the epoch (kept in snapshots, so it survives a restart).
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

#[derive(Debug, Clone)]
pub struct StateTtl {
    ttl: Option<Duration>,
    last_sweep_ms: i64,
}

impl StateTtl {
    pub fn new(ttl: Option<Duration>) -> Self {
        Self { ttl, last_sweep_ms: now_ms() }
    }

    pub fn ttl(&self) -> Option<Duration> {
        self.ttl
    }

    /// When a sweep is due at `now`: the last access time an entry must have to be kept.
    pub fn sweep_due(&mut self, now: i64) -> Option<i64> {
        let ttl = self.ttl?.as_millis() as i64;
        if now - self.last_sweep_ms < (ttl / 2).max(1) {
            return None;
        }
        self.last_sweep_ms = now;
        Some(now - ttl)
    }
}
