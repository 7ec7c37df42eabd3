//! Per-operator rates for the pipeline view: the engine keeps counters only, so the watcher
//! keeps a few seconds of samples and a rate is the change across them.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde::Serialize;
use weir_engine::metrics::OperatorSample;

/// How far back rates look: long enough to smooth over batches and checkpoint pauses.
const WINDOW: Duration = Duration::from_secs(5);

/// The samples of one pipeline attempt's operators over the last [`WINDOW`].
#[derive(Debug, Default)]
pub struct RateWindow {
    samples: VecDeque<(Instant, Vec<OperatorSample>)>,
}

/// One operator subtask's counters and its rates over the last few seconds.
#[derive(Debug, Clone, Serialize)]
pub struct OperatorView {
    #[serde(flatten)]
    pub counters: OperatorSample,
    pub records_in_per_second: f64,
    pub records_out_per_second: f64,
    /// The share of the time the subtask could not hand on its output (0 to 1).
    pub backpressure_ratio: f64,
    /// How far the watermark is behind the server's wall clock.
    pub watermark_lag_ms: Option<i64>,
}

impl RateWindow {
    pub fn push(&mut self, at: Instant, samples: Vec<OperatorSample>) {
        self.samples.push_back((at, samples));
        while self.samples.len() > 2 && self.samples.front().is_some_and(|(t, _)| at.duration_since(*t) > WINDOW) {
            self.samples.pop_front();
        }
    }

    /// The newest sample of every operator subtask with its rates (zero until two samples).
    pub fn views(&self) -> Vec<OperatorView> {
        let Some((newest_at, newest)) = self.samples.back() else { return Vec::new() };
        let wall_clock_ms = crate::store::now_ms();
        let oldest = self.samples.front().filter(|(t, _)| t < newest_at);
        newest
            .iter()
            .map(|now| {
                let before = oldest.and_then(|(t, samples)| {
                    let sample = samples.iter().find(|s| s.operator == now.operator && s.subtask == now.subtask)?;
                    Some((newest_at.duration_since(*t).as_secs_f64(), sample))
                });
                let per_second = |now: u64, then: u64, seconds: f64| now.saturating_sub(then) as f64 / seconds;
                let (records_in_per_second, records_out_per_second, backpressure_ratio) = match before {
                    Some((seconds, then)) if seconds > 0.0 => (
                        per_second(now.records_in, then.records_in, seconds),
                        per_second(now.records_out, then.records_out, seconds),
                        (per_second(now.backpressure_ms, then.backpressure_ms, seconds) / 1000.0).min(1.0),
                    ),
                    _ => (0.0, 0.0, 0.0),
                };
                OperatorView {
                    watermark_lag_ms: now.watermark.map(|w| wall_clock_ms - w),
                    counters: now.clone(),
                    records_in_per_second,
                    records_out_per_second,
                    backpressure_ratio,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(records_in: u64, backpressure_ms: u64) -> Vec<OperatorSample> {
        vec![OperatorSample {
            operator: "filter".into(),
            subtask: 0,
            records_in,
            records_out: records_in / 2,
            backpressure_ms,
            watermark: None,
            bad_records: 0,
            late_records_dropped: 0,
            null_time_records: 0,
            transactions: None,
            transactions_committed: 0,
            transactions_aborted: 0,
        }]
    }

    #[test]
    fn rates_are_the_change_over_the_window() {
        let start = Instant::now();
        let mut window = RateWindow::default();
        window.push(start, sample(0, 0));
        assert_eq!(window.views()[0].records_in_per_second, 0.0, "one sample has no rate");
        window.push(start + Duration::from_secs(1), sample(1_000, 250));
        window.push(start + Duration::from_secs(2), sample(4_000, 500));
        let view = &window.views()[0];
        assert_eq!(view.records_in_per_second, 2_000.0);
        assert_eq!(view.records_out_per_second, 1_000.0);
        assert_eq!(view.backpressure_ratio, 0.25);
        // Samples older than the window fall out: the rate follows the recent change.
        window.push(start + Duration::from_secs(8), sample(4_000, 500));
        window.push(start + Duration::from_secs(9), sample(4_000, 500));
        assert_eq!(window.views()[0].records_in_per_second, 0.0);
    }
}
