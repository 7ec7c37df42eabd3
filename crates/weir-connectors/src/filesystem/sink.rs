//! The exactly-once file sink. Rows arriving before barrier n are written, at the barrier, to a
//! pending file `.pending/part-<subtask>-<n>` (synced), which the snapshot records; when n
//! completes, pending files up to n are renamed into the directory. A restore commits what the
//! checkpoint recorded (renaming again is harmless) and deletes pending files it did not
//! record: those of checkpoints that never completed, whose rows will be written again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, StringArray, UInt64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use weir_engine::{Collector, Operator, RestoredState, StateTable, SubtaskInfo};

use super::{FileFormat, blocking, subtask_error};

const PENDING: &str = "pending";
const PENDING_DIR: &str = ".pending";

#[derive(Debug, Clone)]
pub struct FileSink {
    dir: PathBuf,
    format: FileFormat,
    schema: SchemaRef,
    info: Option<SubtaskInfo>,
    buffer: Vec<RecordBatch>,
    /// Pending file names by checkpoint.
    pending: BTreeMap<u64, String>,
}

/// (subtask, checkpoint) of a file name `part-<subtask>-<checkpoint>.<ext>`.
fn parse_name(name: &str) -> Option<(u64, u64)> {
    let stem = name.strip_prefix("part-")?.split('.').next()?;
    let (subtask, checkpoint) = stem.split_once('-')?;
    Some((subtask.parse().ok()?, checkpoint.parse().ok()?))
}

/// Moves pending `name` into `dir`; done already is fine.
fn commit(dir: &Path, name: &str) -> Result<(), String> {
    let (from, to) = (dir.join(PENDING_DIR).join(name), dir.join(name));
    match std::fs::rename(&from, &to) {
        Ok(()) => Ok(()),
        Err(_) if to.exists() => Ok(()),
        Err(e) => Err(format!("committing {}: {e}", from.display())),
    }
}

impl FileSink {
    pub fn new(dir: PathBuf, format: FileFormat, schema: SchemaRef) -> Self {
        Self { dir, format, schema, info: None, buffer: Vec::new(), pending: BTreeMap::new() }
    }

    fn error(&self, message: String) -> weir_engine::Error {
        subtask_error(self.info.as_ref(), message)
    }

    fn state_schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("subtask", DataType::UInt64, false),
            Field::new("checkpoint", DataType::UInt64, false),
            Field::new("file", DataType::Utf8, false),
        ]))
    }
}

#[async_trait]
impl Operator for FileSink {
    async fn open(&mut self, info: &SubtaskInfo, restored: RestoredState) -> weir_engine::Result<()> {
        self.info = Some(info.clone());
        let (me, parallelism) = (info.subtask as u64, info.parallelism as u64);
        let mut recorded = Vec::new();
        for batch in restored.table(PENDING) {
            let (Some(subtasks), Some(files)) = (
                batch.column(0).as_any().downcast_ref::<UInt64Array>(),
                batch.column(2).as_any().downcast_ref::<StringArray>(),
            ) else {
                return Err(info.error("restored pending files have the wrong types"));
            };
            for row in 0..batch.num_rows() {
                if subtasks.value(row) % parallelism == me {
                    recorded.push(files.value(row).to_string());
                }
            }
        }
        let dir = self.dir.clone();
        blocking(move || {
            std::fs::create_dir_all(dir.join(PENDING_DIR)).map_err(|e| format!("{}: {e}", dir.display()))?;
            for name in &recorded {
                commit(&dir, name)?;
            }
            // Pending files of checkpoints that never completed: their rows come again.
            let entries = std::fs::read_dir(dir.join(PENDING_DIR)).map_err(|e| format!("{}: {e}", dir.display()))?;
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().to_string();
                if parse_name(&name).is_some_and(|(subtask, _)| subtask % parallelism == me) {
                    std::fs::remove_file(entry.path()).map_err(|e| format!("{}: {e}", entry.path().display()))?;
                }
            }
            Ok(())
        })
        .await
        .map_err(|e| self.error(e))
    }

    /// Buffers the rows as the table's columns (the query's names and types may differ).
    async fn process_batch(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        _out: &mut Collector,
    ) -> weir_engine::Result<()> {
        let columns = batch
            .columns()
            .iter()
            .zip(self.schema.fields())
            .map(|(c, f)| cast(c, f.data_type()))
            .collect::<Result<Vec<_>, _>>()?;
        self.buffer.push(RecordBatch::try_new(self.schema.clone(), columns)?);
        Ok(())
    }

    /// Pre-commit: this checkpoint's rows to a synced pending file, recorded in the snapshot.
    async fn snapshot(&mut self, checkpoint_id: u64) -> weir_engine::Result<Vec<StateTable>> {
        let subtask = self.info.as_ref().map_or(0, |i| i.subtask) as u64;
        if !self.buffer.is_empty() {
            let name = format!("part-{subtask:04}-{checkpoint_id:010}.{}", self.format.extension());
            let path = self.dir.join(PENDING_DIR).join(&name);
            let (format, schema, batches) = (self.format, self.schema.clone(), std::mem::take(&mut self.buffer));
            blocking(move || format.write(&path, &schema, &batches)).await.map_err(|e| self.error(e))?;
            self.pending.insert(checkpoint_id, name);
        }
        let schema = Self::state_schema();
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(UInt64Array::from(vec![subtask; self.pending.len()])),
                Arc::new(UInt64Array::from_iter_values(self.pending.keys().copied())),
                Arc::new(StringArray::from_iter_values(self.pending.values())),
            ],
        )?;
        Ok(vec![StateTable { name: PENDING.into(), schema, batches: vec![batch] }])
    }

    /// Commit: every pending file up to the completed checkpoint (an aborted checkpoint's rows
    /// are part of the next one that completes).
    async fn checkpoint_complete(&mut self, checkpoint_id: u64) -> weir_engine::Result<()> {
        let rest = self.pending.split_off(&(checkpoint_id + 1));
        let done: Vec<String> = std::mem::replace(&mut self.pending, rest).into_values().collect();
        let dir = self.dir.clone();
        blocking(move || done.iter().try_for_each(|name| commit(&dir, name))).await.map_err(|e| self.error(e))
    }
}
