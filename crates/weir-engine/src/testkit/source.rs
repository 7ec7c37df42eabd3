//! A deterministic, replayable source. Its records sit at (split, offset) positions like a
//! Kafka topic's; subtask i of p reads the splits s with s % p == i, so a restore at another
//! parallelism re-assigns whole splits. A record's key follows from (seed, split, offset), so
//! every run, and every replay, produces the same records.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, Int64Array, StringArray, UInt32Array, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use twox_hash::XxHash64;

use crate::error::Result;
use crate::operator::{RestoredState, Source, SourceEvent, StateTable, SubtaskInfo};

const POSITIONS: &str = "positions";

/// What a [`ReplayableSource`] produces.
#[derive(Debug, Clone)]
pub struct SourceSpec {
    pub seed: u64,
    /// Tags every record, so two sources' records differ.
    pub name: String,
    pub splits: u32,
    pub records_per_split: u64,
    pub batch_size: usize,
    pub keys: u64,
    /// Wait before each batch, per subtask (missing: none): skew and back-pressure.
    pub delay_per_batch: Vec<Duration>,
}

impl SourceSpec {
    pub fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("source", DataType::Utf8, false),
            Field::new("split", DataType::UInt32, false),
            Field::new("offset", DataType::UInt64, false),
            Field::new("key", DataType::Utf8, false),
            Field::new("value", DataType::Int64, false),
        ]))
    }

    pub fn key_of(&self, split: u32, offset: u64) -> String {
        let bytes = [split.to_le_bytes().as_slice(), offset.to_le_bytes().as_slice()].concat();
        format!("key-{}", XxHash64::oneshot(self.seed, &bytes) % self.keys.max(1))
    }

    /// Every record the source produces, for a failure-free expected output.
    pub fn all_records(&self) -> Result<RecordBatch> {
        let positions = (0..self.splits).flat_map(|s| (0..self.records_per_split).map(move |o| (s, o)));
        self.batch(positions.collect())
    }

    fn batch(&self, positions: Vec<(u32, u64)>) -> Result<RecordBatch> {
        let sources = StringArray::from(vec![self.name.as_str(); positions.len()]);
        let splits: UInt32Array = positions.iter().map(|p| p.0).collect();
        let offsets: UInt64Array = positions.iter().map(|p| p.1).collect();
        let keys: StringArray = positions.iter().map(|&(s, o)| Some(self.key_of(s, o))).collect();
        let values: Int64Array = positions.iter().map(|&(s, o)| (u64::from(s) * 1_000_000 + o) as i64).collect();
        let columns: Vec<Arc<dyn Array>> =
            vec![Arc::new(sources), Arc::new(splits), Arc::new(offsets), Arc::new(keys), Arc::new(values)];
        Ok(RecordBatch::try_new(Self::schema(), columns)?)
    }
}

/// One subtask of the source.
pub struct ReplayableSource {
    spec: SourceSpec,
    /// Next offset per owned split.
    next: BTreeMap<u32, u64>,
    turn: usize,
    delay: Duration,
}

impl ReplayableSource {
    pub fn new(spec: SourceSpec) -> Self {
        Self { spec, next: BTreeMap::new(), turn: 0, delay: Duration::ZERO }
    }
}

#[async_trait]
impl Source for ReplayableSource {
    async fn open(&mut self, info: &SubtaskInfo, restored: RestoredState) -> Result<()> {
        self.delay = self.spec.delay_per_batch.get(info.subtask).copied().unwrap_or_default();
        for split in (0..self.spec.splits).filter(|s| *s as usize % info.parallelism == info.subtask) {
            self.next.insert(split, 0);
        }
        for batch in restored.table(POSITIONS) {
            let (Some(splits), Some(offsets)) = (
                batch.column(0).as_any().downcast_ref::<UInt32Array>(),
                batch.column(1).as_any().downcast_ref::<UInt64Array>(),
            ) else {
                return Err(info.error("restored positions have the wrong types"));
            };
            for (split, offset) in splits.values().iter().zip(offsets.values()) {
                if let Some(next) = self.next.get_mut(split) {
                    *next = *offset;
                }
            }
        }
        Ok(())
    }

    async fn next(&mut self) -> Result<SourceEvent> {
        let open: Vec<u32> =
            self.next.iter().filter(|(_, o)| **o < self.spec.records_per_split).map(|(s, _)| *s).collect();
        if open.is_empty() {
            return Ok(SourceEvent::End);
        }
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        let split = open[self.turn % open.len()];
        self.turn = self.turn.wrapping_add(1);
        let Some(offset) = self.next.get_mut(&split) else { return Ok(SourceEvent::Idle) };
        let end = (*offset + self.spec.batch_size as u64).min(self.spec.records_per_split);
        let positions = (*offset..end).map(|o| (split, o)).collect();
        *offset = end;
        Ok(SourceEvent::Batch(self.spec.batch(positions)?))
    }

    async fn snapshot(&mut self, _checkpoint_id: u64) -> Result<Vec<StateTable>> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("split", DataType::UInt32, false),
            Field::new("offset", DataType::UInt64, false),
        ]));
        let splits: UInt32Array = self.next.keys().copied().collect();
        let offsets: UInt64Array = self.next.values().copied().collect();
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(splits), Arc::new(offsets)])?;
        Ok(vec![StateTable { name: POSITIONS.into(), schema, batches: vec![batch], delta: None }])
    }
}
