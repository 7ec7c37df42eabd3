//! A generator of rows as a weir source (the Nexmark generator, Flink's datagen): row n is a
//! function of n alone ([`RowGenerator`]). The rows are cut into splits (row n in split n mod
//! splits); a subtask reads the splits s with s mod parallelism = its index, paced to the
//! rate. Its snapshot holds the next row number of each split, so a restore, at any
//! parallelism up to the number of splits, continues every split exactly.
//!
//! A batch takes its splits' next rows in row order (always the least next number), not one
//! split's rows at a time: a split's rows are `splits` numbers apart, so a batch of one split
//! spanned `splits` times its size in row numbers (and in event time) and the next batch, of
//! another split, went back over the same span. In row order a subtask's batches follow each
//! other in time, and a large batch holds neighbouring events (Nexmark bids on the auctions in
//! flight), which keyed operators then find close together.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use datafusion::arrow::array::{UInt32Array, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::record_batch::RecordBatch;
use weir_engine::{RestoredState, Source, SourceEvent, StateTable, SubtaskInfo, state_column};

const POSITIONS: &str = "positions";

/// How a generated source paces and splits its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pacing {
    /// Rows per second of wall-clock time over all subtasks, unless `as_fast_as_possible`.
    pub rate: u64,
    pub as_fast_as_possible: bool,
    /// How many rows there are; unbounded if `None`.
    pub rows: Option<u64>,
    pub splits: u32,
    pub batch_size: usize,
}

/// Rows that are a function of their number alone.
pub trait RowGenerator: Send + Sync + 'static {
    /// The connector's name, for errors.
    fn name(&self) -> &'static str;

    fn pacing(&self) -> Pacing;

    /// The rows numbered `rows`.
    fn batch(&self, rows: &[u64]) -> Result<RecordBatch, ArrowError>;

    /// The event time of row `n`, for a source that emits its own watermarks (rows in time
    /// order per split).
    fn row_time_ms(&self, n: u64) -> Option<i64> {
        let _ = n;
        None
    }
}

/// The longest a paced source waits in one call (the engine wants it back within about 100 ms).
const MAX_WAIT: Duration = Duration::from_millis(100);

/// One subtask of a generated source.
pub struct GeneratedSource<G: RowGenerator> {
    generator: G,
    /// Next event number of each split this subtask reads.
    next: BTreeMap<u32, u64>,
    /// Wall-clock pacing: when this subtask started and how many events it produced since.
    started: Option<(Instant, u64)>,
    /// This subtask's share of the configured rate.
    rate: f64,
    /// With event time on `date_time`: its bounded out-of-orderness, and the watermark
    /// emitted last.
    watermarks: Option<SplitWatermarks>,
}

/// Watermarks per split, as Flink's sources make them: the subtask's watermark is the least of
/// its splits', so a split behind the others (after a restore at another parallelism gives one
/// subtask splits that were read at different speeds) never has its events made late by a
/// split ahead of it. The generator knows each split's next event time exactly, so a split's
/// watermark is that time less the delay (less 1 ms: the next event is not yet late).
struct SplitWatermarks {
    delay_ms: i64,
    emitted: i64,
}

impl<G: RowGenerator> GeneratedSource<G> {
    pub fn new(generator: G) -> Self {
        Self { generator, next: BTreeMap::new(), started: None, rate: 0.0, watermarks: None }
    }

    /// Emits watermarks itself, per split, for event time on the rows' times
    /// ([`RowGenerator::row_time_ms`]) with `delay_ms` of allowed lateness.
    pub fn with_watermarks(mut self, delay_ms: i64) -> Self {
        self.watermarks = Some(SplitWatermarks { delay_ms, emitted: i64::MIN });
        self
    }

    fn limit(&self) -> u64 {
        self.generator.pacing().rows.unwrap_or(u64::MAX)
    }

    /// The watermark to emit now, if it moved: the least next event time over the splits not
    /// yet ended (less 1 ms and the delay); once every split has ended, the last event time
    /// less the delay, as one watermark over all the events would end.
    fn watermark_due(&mut self) -> Option<i64> {
        let limit = self.limit();
        let stride = u64::from(self.generator.pacing().splits.max(1));
        let watermarks = self.watermarks.as_mut()?;
        let open = self
            .next
            .values()
            .filter(|n| **n < limit)
            .filter_map(|n| self.generator.row_time_ms(*n))
            .map(|t| t - 1)
            .min();
        let last_emitted = || {
            let emitted = self.next.iter().filter(|(split, n)| **n > u64::from(**split)).map(|(_, n)| *n - stride);
            emitted.filter_map(|n| self.generator.row_time_ms(n)).max()
        };
        let watermark = open.or_else(last_emitted)?.saturating_sub(watermarks.delay_ms);
        (watermark > watermarks.emitted).then(|| {
            watermarks.emitted = watermark;
            watermark
        })
    }
}

#[async_trait]
impl<G: RowGenerator> Source for GeneratedSource<G> {
    async fn open(&mut self, info: &SubtaskInfo, restored: RestoredState) -> weir_engine::Result<()> {
        let config = self.generator.pacing();
        let splits = config.splits.max(1);
        if info.parallelism > splits as usize {
            return Err(info.error(format!(
                "{} has {splits} splits and cannot run at parallelism {}; raise its 'splits' option",
                self.generator.name(),
                info.parallelism
            )));
        }
        for split in (0..splits).filter(|s| *s as usize % info.parallelism == info.subtask) {
            self.next.insert(split, u64::from(split));
        }
        self.rate = config.rate as f64 * self.next.len() as f64 / f64::from(splits);
        for batch in restored.table(POSITIONS) {
            let splits = state_column::<UInt32Array>(batch, "split", info)?;
            let next = state_column::<UInt64Array>(batch, "next", info)?;
            for (split, n) in splits.values().iter().zip(next.values()) {
                if let Some(position) = self.next.get_mut(split) {
                    *position = *n;
                }
            }
        }
        Ok(())
    }

    async fn next(&mut self) -> weir_engine::Result<SourceEvent> {
        if let Some(watermark) = self.watermark_due() {
            return Ok(SourceEvent::Watermark(watermark));
        }
        let limit = self.limit();
        if self.next.values().all(|n| *n >= limit) {
            return Ok(SourceEvent::End);
        }
        let config = self.generator.pacing();
        let stride = u64::from(config.splits.max(1));
        let mut batch_size = config.batch_size.max(1);
        if !config.as_fast_as_possible {
            // Pace to the rate: the next events are due once the events so far fit the rate.
            // A wait longer than the engine allows a source is taken in parts (Idle between,
            // so barriers pass), and batches hold at most a twentieth of a second's events, so a
            // slow rate comes as a steady trickle rather than a burst per batch.
            let (started, produced) = *self.started.get_or_insert((Instant::now(), 0));
            let due = started + Duration::from_secs_f64(produced as f64 / self.rate.max(1e-9));
            let wait = due.saturating_duration_since(Instant::now());
            if wait > MAX_WAIT {
                tokio::time::sleep(MAX_WAIT).await;
                return Ok(SourceEvent::Idle);
            }
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            batch_size = batch_size.min((self.rate / 20.0).ceil().max(1.0) as usize);
        }
        // The open splits' next rows in row order: the least next number each time (a split
        // behind the others, after a restore at another parallelism, catches up first).
        let mut numbers: Vec<u64> = Vec::with_capacity(batch_size);
        while numbers.len() < batch_size {
            let Some(next) = self.next.values_mut().filter(|n| **n < limit).min_by_key(|n| **n) else { break };
            numbers.push(*next);
            *next += stride;
        }
        if let Some((started, produced)) = self.started {
            self.started = Some((started, produced + numbers.len() as u64));
        }
        let batch = self.generator.batch(&numbers)?;
        Ok(SourceEvent::Batch(batch))
    }

    async fn snapshot(&mut self, _checkpoint_id: u64) -> weir_engine::Result<Vec<StateTable>> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("split", DataType::UInt32, false),
            Field::new("next", DataType::UInt64, false),
        ]));
        let splits: UInt32Array = self.next.keys().copied().collect();
        let next: UInt64Array = self.next.values().copied().collect();
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(splits), Arc::new(next)])?;
        Ok(vec![StateTable { name: POSITIONS.into(), schema, batches: vec![batch], delta: None }])
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use datafusion::arrow::util::display::array_value_to_string;

    use super::*;
    use crate::nexmark::{NexmarkConfig, NexmarkGenerator};

    type NexmarkSource = GeneratedSource<NexmarkGenerator>;

    fn nexmark(config: NexmarkConfig) -> NexmarkSource {
        GeneratedSource::new(NexmarkGenerator::new(config))
    }

    fn config(events: u64) -> NexmarkConfig {
        NexmarkConfig {
            events: Some(events),
            as_fast_as_possible: true,
            splits: 6,
            batch_size: 7,
            ..NexmarkConfig::default()
        }
    }

    fn info(subtask: usize, parallelism: usize) -> SubtaskInfo {
        SubtaskInfo::new("nexmark", subtask, parallelism)
    }

    /// Every column of every row as text: events are compared whole.
    fn rows(batch: &RecordBatch) -> Vec<String> {
        (0..batch.num_rows())
            .map(|r| {
                let values: Vec<String> =
                    batch.columns().iter().map(|c| array_value_to_string(c, r).unwrap()).collect();
                values.join(" | ")
            })
            .collect()
    }

    async fn drain(source: &mut NexmarkSource, at_most: usize) -> Vec<String> {
        let mut seen = Vec::new();
        for _ in 0..at_most {
            match source.next().await.unwrap() {
                SourceEvent::Batch(batch) => seen.extend(rows(&batch)),
                SourceEvent::End => break,
                _ => {}
            }
        }
        seen
    }

    /// The measured rate is the configured one, within 5%, slow or fast, whatever the batch
    /// size; and a source waiting for its next events hands control back (Idle) within 100 ms.
    #[tokio::test]
    async fn the_measured_rate_is_the_configured_rate() {
        for rate in [100, 1_000, 100_000] {
            let config = NexmarkConfig { rate, splits: 4, batch_size: 1000, ..NexmarkConfig::default() };
            let mut source = nexmark(config);
            source.open(&info(0, 1), RestoredState::default()).await.unwrap();
            let started = Instant::now();
            let (mut events, mut longest) = (0u64, Duration::ZERO);
            while started.elapsed() < Duration::from_secs(2) {
                let call = Instant::now();
                if let SourceEvent::Batch(batch) = source.next().await.unwrap() {
                    events += batch.num_rows() as u64;
                }
                longest = longest.max(call.elapsed());
            }
            let measured = events as f64 / started.elapsed().as_secs_f64();
            assert!((measured / rate as f64 - 1.0).abs() <= 0.05, "rate {rate}: measured {measured:.0} events/s");
            assert!(longest <= Duration::from_millis(150), "rate {rate}: one call took {longest:?}");
        }
    }

    /// A subtask's batches take its splits' events in event order, whichever split each is
    /// of, also when a restore left one split ahead of the others: batches follow each other
    /// in time instead of each going back over the span of the one before.
    #[tokio::test]
    async fn batches_take_the_splits_events_in_event_order() {
        let generator = NexmarkGenerator::new(config(1000));
        // Subtask 1 of 2 reads splits 1, 3 and 5 of 6: the odd events.
        let mut source = nexmark(config(1000));
        source.open(&info(1, 2), RestoredState::default()).await.unwrap();
        let odd: Vec<u64> = (1..1000).step_by(2).collect();
        assert_eq!(drain(&mut source, 1000).await, rows(&generator.batch(&odd).unwrap()));

        let positions = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("split", DataType::UInt32, false),
                Field::new("next", DataType::UInt64, false),
            ])),
            vec![Arc::new(UInt32Array::from(vec![1, 3, 5])), Arc::new(UInt64Array::from(vec![601, 3, 5]))],
        )
        .unwrap();
        let restored = RestoredState {
            checkpoint_id: Some(1),
            tables: HashMap::from([(POSITIONS.to_string(), vec![positions])]),
            ..Default::default()
        };
        let mut source = nexmark(config(1000));
        source.open(&info(1, 2), restored).await.unwrap();
        let rest: Vec<u64> = (3..1000).step_by(2).filter(|n| n % 6 != 1 || *n >= 601).collect();
        assert_eq!(drain(&mut source, 1000).await, rows(&generator.batch(&rest).unwrap()));
    }

    #[tokio::test]
    async fn a_restore_at_another_parallelism_continues_every_split_exactly() {
        let mut expected = rows(&NexmarkGenerator::new(config(1000)).batch(&(0..1000).collect::<Vec<_>>()).unwrap());
        expected.sort();

        let mut seen = Vec::new();
        let mut snapshots = Vec::new();
        for subtask in 0..2 {
            let mut source = nexmark(config(1000));
            source.open(&info(subtask, 2), RestoredState::default()).await.unwrap();
            seen.extend(drain(&mut source, 10).await);
            snapshots.extend(source.snapshot(1).await.unwrap().remove(0).batches);
        }
        let restored = RestoredState {
            checkpoint_id: Some(1),
            tables: HashMap::from([(POSITIONS.to_string(), snapshots)]),
            ..Default::default()
        };
        for subtask in 0..3 {
            let mut source = nexmark(config(1000));
            source.open(&info(subtask, 3), restored.clone()).await.unwrap();
            seen.extend(drain(&mut source, 1000).await);
        }
        seen.sort();
        assert_eq!(seen.len(), 1000, "every event once");
        assert_eq!(seen, expected);
    }

    /// A restore at another parallelism can give one subtask splits read at different speeds:
    /// the watermark follows the split behind, so none of its events is late. (One watermark
    /// over the subtask, the largest event time seen less the delay, made the hard-way .slt runs
    /// drop rows under load.)
    #[tokio::test]
    async fn watermarks_follow_the_split_behind_so_no_event_is_late() {
        let positions = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("split", DataType::UInt32, false),
                Field::new("next", DataType::UInt64, false),
            ])),
            vec![Arc::new(UInt32Array::from(vec![0, 1])), Arc::new(UInt64Array::from(vec![600, 1]))],
        )
        .unwrap();
        let restored = RestoredState {
            checkpoint_id: Some(1),
            tables: HashMap::from([(POSITIONS.to_string(), vec![positions])]),
            ..Default::default()
        };
        let config = NexmarkConfig { splits: 2, ..config(1000) };
        let mut source = nexmark(config).with_watermarks(10);
        source.open(&info(0, 1), restored).await.unwrap();
        let (mut watermark, mut events, mut watermarks) = (i64::MIN, 0, 0);
        loop {
            match source.next().await.unwrap() {
                SourceEvent::Watermark(w) => {
                    assert!(w > watermark, "watermarks only move forward");
                    watermark = w;
                    watermarks += 1;
                }
                SourceEvent::Batch(batch) => {
                    let times = batch.column_by_name("date_time").unwrap();
                    let times = datafusion::arrow::compute::cast(times, &DataType::Int64).unwrap();
                    let times = times.as_any().downcast_ref::<datafusion::arrow::array::Int64Array>().unwrap();
                    let earliest = datafusion::arrow::compute::min(times).unwrap();
                    assert!(earliest > watermark, "an event at {earliest} came behind watermark {watermark}");
                    events += batch.num_rows();
                }
                SourceEvent::End => break,
                SourceEvent::Idle => {}
            }
        }
        assert_eq!(events, 700, "split 0 from 600 and split 1 from 1");
        assert!(watermarks > 10, "the watermark advanced as the events came ({watermarks} watermarks)");
    }

    #[tokio::test]
    async fn more_subtasks_than_splits_is_an_error_that_names_the_option() {
        let mut source = nexmark(config(10));
        let error = source.open(&info(0, 7), RestoredState::default()).await.unwrap_err();
        assert!(error.to_string().contains("raise its 'splits' option"), "{error}");
    }

    #[tokio::test]
    async fn the_rate_paces_the_source_in_wall_clock_time() {
        let config =
            NexmarkConfig { events: Some(600), rate: 2_000, splits: 1, batch_size: 100, ..NexmarkConfig::default() };
        let mut source = nexmark(config);
        source.open(&info(0, 1), RestoredState::default()).await.unwrap();
        let started = Instant::now();
        assert_eq!(drain(&mut source, 100).await.len(), 600);
        // 600 events at 2000/s: the last batch (events 500-599) is due at 250 ms.
        assert!(started.elapsed() >= Duration::from_millis(240), "{:?}", started.elapsed());
    }
}
