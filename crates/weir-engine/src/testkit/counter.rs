//! Counts records per key over any number of inputs, emitting (key, count) for every record:
//! each count of each key appears exactly once in a correct output, so a lost record shows as
//! a missing row and a duplicate as a repeated one. With incremental checkpoints it writes
//! only the counts that changed, so every runtime test exercises chains of state files.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, Int64Array, StringArray, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use weir_state::{KEY_HASH_COLUMN, keyed_schema};

use crate::error::Result;
use crate::operator::{Collector, Delta, Operator, RestoredState, StateTable, SubtaskInfo, state_column};
use crate::partition::key_hashes;

const COUNTS: &str = "counts";

pub struct KeyedCounter {
    key: String,
    counts: HashMap<String, (u64, i64)>,
    info: Option<SubtaskInfo>,
    /// Keys counted since the last snapshot, with incremental checkpoints.
    changed: Option<HashSet<String>>,
}

impl KeyedCounter {
    pub fn new(key: &str) -> Self {
        Self { key: key.to_string(), counts: HashMap::new(), info: None, changed: None }
    }

    pub fn output_schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("key", DataType::Utf8, false),
            Field::new("count", DataType::Int64, false),
        ]))
    }

    fn state_schema() -> SchemaRef {
        keyed_schema([Field::new("key", DataType::Utf8, false), Field::new("count", DataType::Int64, false)])
    }

    fn error(&self, message: &str) -> crate::Error {
        match &self.info {
            Some(info) => info.error(message),
            None => crate::Error::Graph(message.to_string()),
        }
    }
}

#[async_trait]
impl Operator for KeyedCounter {
    async fn open(&mut self, info: &SubtaskInfo, restored: RestoredState) -> Result<()> {
        self.info = Some(info.clone());
        self.changed = info.incremental.then(HashSet::new);
        for batch in restored.table(COUNTS) {
            let (Ok(hashes), Ok(keys), Ok(counts)) = (
                state_column::<UInt64Array>(batch, KEY_HASH_COLUMN, info),
                state_column::<StringArray>(batch, "key", info),
                state_column::<Int64Array>(batch, "count", info),
            ) else {
                return Err(info.error("restored counts have the wrong types"));
            };
            for row in 0..batch.num_rows() {
                self.counts.insert(keys.value(row).to_string(), (hashes.value(row), counts.value(row)));
            }
        }
        Ok(())
    }

    async fn process_batch(&mut self, _input: usize, batch: RecordBatch, out: &mut Collector) -> Result<()> {
        let hashes = key_hashes(&batch, std::slice::from_ref(&self.key))?;
        let keys = batch
            .column_by_name(&self.key)
            .and_then(|c| c.as_any().downcast_ref::<StringArray>())
            .ok_or_else(|| self.error("the key column is not a string column"))?;
        let mut out_keys = Vec::with_capacity(batch.num_rows());
        let mut out_counts = Vec::with_capacity(batch.num_rows());
        for row in 0..batch.num_rows() {
            let key = keys.value(row);
            let count = match self.counts.get_mut(key) {
                Some(entry) => {
                    entry.1 += 1;
                    entry.1
                }
                None => {
                    self.counts.insert(key.to_string(), (hashes.value(row), 1));
                    1
                }
            };
            if let Some(changed) = &mut self.changed {
                changed.insert(key.to_string());
            }
            out_keys.push(key);
            out_counts.push(count);
        }
        let columns: Vec<Arc<dyn Array>> =
            vec![Arc::new(StringArray::from(out_keys)), Arc::new(Int64Array::from(out_counts))];
        out.emit(RecordBatch::try_new(Self::output_schema(), columns)?);
        Ok(())
    }

    async fn snapshot(&mut self, _checkpoint_id: u64) -> Result<Vec<StateTable>> {
        if let Some(changed) = &mut self.changed {
            changed.clear();
        }
        let keys: Vec<&String> = self.counts.keys().collect();
        Ok(vec![self.table(&keys, None)?])
    }

    async fn snapshot_changes(&mut self, _checkpoint_id: u64) -> Result<Option<Vec<StateTable>>> {
        let Some(changed) = self.changed.take() else { return Ok(None) };
        let keys: Vec<&String> = changed.iter().collect();
        let deleted = RecordBatch::new_empty(keyed_schema([Field::new("key", DataType::Utf8, false)]));
        let table = self.table(&keys, Some(Delta { key: vec!["key".into()], deleted }))?;
        self.changed = Some(HashSet::new());
        Ok(Some(vec![table]))
    }
}

impl KeyedCounter {
    /// The state table of the counts of `keys`.
    fn table(&self, keys: &[&String], delta: Option<Delta>) -> Result<StateTable> {
        let entries: Vec<(&String, &(u64, i64))> =
            keys.iter().filter_map(|k| Some((*k, self.counts.get(*k)?))).collect();
        let hashes: UInt64Array = entries.iter().map(|(_, (h, _))| *h).collect();
        let names: StringArray = entries.iter().map(|(k, _)| Some(k.as_str())).collect();
        let counts: Int64Array = entries.iter().map(|(_, (_, c))| *c).collect();
        let schema = Self::state_schema();
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(hashes), Arc::new(names), Arc::new(counts)])?;
        Ok(StateTable { name: COUNTS.into(), schema, batches: vec![batch], delta })
    }
}
