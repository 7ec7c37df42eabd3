//! A two-input pass-through that remembers every (input, source, split, offset) it processed,
//! and puts that list in its snapshot: a test can read a snapshot and see exactly which
//! records its state includes.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, StringArray, UInt32Array, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;

use crate::SubtaskInfo;
use crate::error::Result;
use crate::operator::{Collector, Operator, RestoredState, StateTable};

pub const SEEN: &str = "seen";

#[derive(Default)]
pub struct Recorder {
    seen: Vec<(u32, String, u32, u64)>,
}

impl Recorder {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn seen_schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("input", DataType::UInt32, false),
            Field::new("source", DataType::Utf8, false),
            Field::new("split", DataType::UInt32, false),
            Field::new("offset", DataType::UInt64, false),
        ]))
    }
}

fn column<'a, T: 'static>(batch: &'a RecordBatch, index: usize, info: &str) -> Result<&'a T> {
    batch
        .column(index)
        .as_any()
        .downcast_ref::<T>()
        .ok_or_else(|| crate::Error::Graph(format!("recorder: column {index} has the wrong type ({info})")))
}

#[async_trait]
impl Operator for Recorder {
    async fn open(&mut self, _info: &SubtaskInfo, restored: RestoredState) -> Result<()> {
        for batch in restored.table(SEEN) {
            let inputs = column::<UInt32Array>(batch, 0, "restored input")?;
            let sources = column::<StringArray>(batch, 1, "restored source")?;
            let splits = column::<UInt32Array>(batch, 2, "restored split")?;
            let offsets = column::<UInt64Array>(batch, 3, "restored offset")?;
            for row in 0..batch.num_rows() {
                self.seen.push((inputs.value(row), sources.value(row).into(), splits.value(row), offsets.value(row)));
            }
        }
        Ok(())
    }

    async fn process_batch(&mut self, input: usize, batch: RecordBatch, out: &mut Collector) -> Result<()> {
        let sources = column::<StringArray>(&batch, 0, "source")?;
        let splits = column::<UInt32Array>(&batch, 1, "split")?;
        let offsets = column::<UInt64Array>(&batch, 2, "offset")?;
        for row in 0..batch.num_rows() {
            self.seen.push((input as u32, sources.value(row).into(), splits.value(row), offsets.value(row)));
        }
        out.emit(batch);
        Ok(())
    }

    async fn snapshot(&mut self, _checkpoint_id: u64) -> Result<Vec<StateTable>> {
        let inputs: UInt32Array = self.seen.iter().map(|s| s.0).collect();
        let sources: StringArray = self.seen.iter().map(|s| Some(s.1.as_str())).collect();
        let splits: UInt32Array = self.seen.iter().map(|s| s.2).collect();
        let offsets: UInt64Array = self.seen.iter().map(|s| s.3).collect();
        let schema = Self::seen_schema();
        let columns: Vec<Arc<dyn Array>> =
            vec![Arc::new(inputs), Arc::new(sources), Arc::new(splits), Arc::new(offsets)];
        let batch = RecordBatch::try_new(schema.clone(), columns)?;
        Ok(vec![StateTable { name: SEEN.into(), schema, batches: vec![batch], delta: None }])
    }
}
