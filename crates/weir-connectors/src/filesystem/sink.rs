//! The exactly-once file sink, a two-phase commit by rename (a committer of
//! `weir_engine::two_phase_commit`, which keeps the pending files by checkpoint, records them in
//! the snapshot and says when they are due). Rows are buffered per partition
//! directory (one, the table's root, when it is not partitioned); a buffer that reaches the
//! rolling size is written at once to an in-progress file under `.pending/`, and at barrier n
//! every buffer is, and the epoch's in-progress files are renamed to
//! `.pending/<partition>/part-<subtask>-<n>-<k>.<ext>` and recorded in the snapshot
//! (pre-commit). When n completes, pending files up to n are renamed into the table's
//! directory. A restore commits what the checkpoint recorded (renaming again is harmless) and
//! deletes this subtask's other pending and in-progress files: those of checkpoints that never
//! completed, whose rows will be written again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use weir_engine::state_column as column;
use weir_engine::two_phase_commit::{BatchWriter, Committable, TwoPhaseCommitter};
use weir_engine::{RestoredState, SubtaskInfo};

use super::partition_commit::{PartitionCommit, Trigger};
use super::partitions::HivePartitions;
use super::{FileFormat, blocking, files_under, subtask_error};
use crate::Error;

pub(super) const PENDING_DIR: &str = ".pending";
const IN_PROGRESS: &str = ".inprogress-";

/// Where and how a sink writes.
#[derive(Debug, Clone)]
pub struct FileSinkConfig {
    pub dir: PathBuf,
    pub format: FileFormat,
    /// The table's columns.
    pub schema: SchemaRef,
    pub partitioning: Option<HivePartitions>,
    /// A partition's buffered rows are written out once they take this many bytes in memory.
    pub rolling_bytes: usize,
    /// Success files into complete partitions (`partition_commit.rs`).
    pub commit: Option<PartitionCommit>,
}

/// Rows waiting for their file.
#[derive(Debug, Clone, Default)]
struct Buffer {
    batches: Vec<RecordBatch>,
    bytes: usize,
}

#[derive(Debug, Clone)]
pub struct FileSink {
    config: FileSinkConfig,
    info: Option<SubtaskInfo>,
    /// Rows by partition directory ("" for the root).
    buffers: BTreeMap<String, Buffer>,
    /// In-progress files written since the last barrier, relative to `.pending/`.
    in_progress: Vec<String>,
    /// Numbers in-progress files within this run of the subtask.
    written: u64,
    /// The latest watermark, and the one at each checkpoint's barrier (partition commit).
    watermark: i64,
    watermarks: BTreeMap<u64, i64>,
    /// Partitions whose files this subtask committed, with when it first did (partition
    /// commit by processing time).
    committed_at: BTreeMap<String, i64>,
}

/// A pre-committed file: its path relative to `.pending/` (and to the table's directory once
/// committed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingFile(String);

impl Committable for PendingFile {
    const TABLE: &'static str = "pending";

    fn fields() -> Vec<Field> {
        vec![Field::new("file", DataType::Utf8, false)]
    }

    fn to_columns(items: &[&Self]) -> weir_engine::Result<Vec<ArrayRef>> {
        Ok(vec![Arc::new(StringArray::from_iter_values(items.iter().map(|f| f.0.as_str())))])
    }

    fn from_batch(batch: &RecordBatch, info: &SubtaskInfo) -> weir_engine::Result<Vec<Self>> {
        let files = column::<StringArray>(batch, "file", info)?;
        Ok(files.iter().flatten().map(|f| PendingFile(f.to_string())).collect())
    }
}

/// The subtask of a file the sink wrote: `part-<subtask>-...` or `.inprogress-<subtask>-...`.
fn subtask_of(name: &str) -> Option<u64> {
    let rest = name.strip_prefix("part-").or_else(|| name.strip_prefix(IN_PROGRESS))?;
    rest.split(['-', '.']).next()?.parse().ok()
}

/// Moves pending `file` into `dir`; done already is fine.
fn commit(dir: &Path, file: &str) -> crate::Result<()> {
    let (from, to) = (dir.join(PENDING_DIR).join(file), dir.join(file));
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent).map_err(Error::file(parent))?;
    }
    match std::fs::rename(&from, &to) {
        Ok(()) => Ok(()),
        Err(_) if to.exists() => Ok(()),
        Err(e) => Err(Error::file(&from)(e)),
    }
}

impl FileSink {
    pub fn new(config: FileSinkConfig) -> Self {
        Self {
            config,
            info: None,
            buffers: BTreeMap::new(),
            in_progress: Vec::new(),
            written: 0,
            watermark: i64::MIN,
            watermarks: BTreeMap::new(),
            committed_at: BTreeMap::new(),
        }
    }

    /// Writes success files into the partitions complete once checkpoint `checkpoint`'s files
    /// (`due`) are in place.
    async fn commit_partitions(&mut self, checkpoint: u64, due: &[PendingFile]) -> weir_engine::Result<()> {
        let (Some(commit), Some(partitioning)) = (self.config.commit.clone(), self.config.partitioning.clone()) else {
            return Ok(());
        };
        // The watermark at this checkpoint's barrier (an aborted one's files come with this one).
        let watermark = self.watermarks.range(..=checkpoint).next_back().map_or(i64::MIN, |(_, w)| *w);
        self.watermarks = self.watermarks.split_off(&(checkpoint + 1));
        let dir = self.config.dir.clone();
        let (subtask, parallelism) = self.info.as_ref().map_or((0, 1), |i| (i.subtask, i.parallelism));
        let marked = match commit.trigger {
            Trigger::PartitionTime => {
                blocking(move || {
                    let Some(least) = PartitionCommit::shared_watermark(&dir, subtask, parallelism, watermark)? else {
                        return Ok(());
                    };
                    for directory in commit.uncommitted(&dir)? {
                        let time = commit.partition_time(&partitioning.values(&directory)?);
                        // A partition whose time cannot be read is committed at the end only.
                        let due = time.map_or(least == i64::MAX, |t| t.saturating_add(commit.delay_ms) <= least);
                        if due {
                            commit.mark(&dir, &directory)?;
                        }
                    }
                    Ok(())
                })
                .await
            }
            Trigger::ProcessTime => {
                let now = weir_engine::operators::state_ttl::now_ms();
                for PendingFile(file) in due {
                    if let Some((directory, _)) = file.rsplit_once('/') {
                        self.committed_at.entry(directory.to_string()).or_insert(now);
                    }
                }
                let ended = watermark == i64::MAX;
                let ready: Vec<String> = self
                    .committed_at
                    .iter()
                    .filter(|(_, at)| ended || at.saturating_add(commit.delay_ms) <= now)
                    .map(|(directory, _)| directory.clone())
                    .collect();
                self.committed_at.retain(|directory, _| !ready.contains(directory));
                blocking(move || ready.iter().try_for_each(|directory| commit.mark(&dir, directory))).await
            }
        };
        marked.map_err(|e| self.error(e))
    }

    fn error(&self, error: impl std::fmt::Display) -> weir_engine::Error {
        subtask_error(self.info.as_ref(), error)
    }

    fn subtask(&self) -> u64 {
        self.info.as_ref().map_or(0, |i| i.subtask) as u64
    }

    /// Writes the rows buffered for `directory` to a new in-progress file.
    async fn roll(&mut self, directory: String) -> weir_engine::Result<()> {
        let Some(buffer) = self.buffers.remove(&directory) else { return Ok(()) };
        let name = format!("{IN_PROGRESS}{:04}-{:06}", self.subtask(), self.written);
        self.written += 1;
        let file = if directory.is_empty() { name } else { format!("{directory}/{name}") };
        let path = self.config.dir.join(PENDING_DIR).join(&file);
        let schema = match &self.config.partitioning {
            Some(partitioning) => partitioning.file_schema().clone(),
            None => self.config.schema.clone(),
        };
        let format = self.config.format.clone();
        blocking(move || {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(Error::file(parent))?;
            }
            format.write(&path, &schema, &buffer.batches)
        })
        .await
        .map_err(|e| self.error(e))?;
        self.in_progress.push(file);
        Ok(())
    }
}

#[async_trait]
impl TwoPhaseCommitter for FileSink {
    type Committable = PendingFile;

    /// Commits the files the checkpoint recorded (renaming again is harmless) and deletes the
    /// other pending and in-progress files of the subtasks this one takes over.
    async fn recover(
        &mut self,
        info: &SubtaskInfo,
        recorded: Vec<PendingFile>,
        _restored: &RestoredState,
    ) -> weir_engine::Result<()> {
        self.info = Some(info.clone());
        let (me, parallelism) = (info.subtask as u64, info.parallelism as u64);
        let dir = self.config.dir.clone();
        blocking(move || {
            let pending = dir.join(PENDING_DIR);
            std::fs::create_dir_all(&pending).map_err(Error::file(&pending))?;
            for PendingFile(file) in &recorded {
                commit(&dir, file)?;
            }
            // Pending and in-progress files of checkpoints that never completed: their rows come
            // again.
            for file in files_under(&pending, false)? {
                let name = file.rsplit('/').next().unwrap_or_default();
                if subtask_of(name).is_some_and(|subtask| subtask % parallelism == me) {
                    let path = pending.join(&file);
                    std::fs::remove_file(&path).map_err(Error::file(&path))?;
                }
            }
            Ok(())
        })
        .await
        .map_err(|e| self.error(e))
    }

    /// Pre-commit: every buffer to a file, this epoch's files named for the checkpoint (and
    /// recorded in the snapshot by the protocol).
    async fn pre_commit(&mut self, checkpoint_id: u64) -> weir_engine::Result<Vec<PendingFile>> {
        if self.config.commit.is_some() {
            self.watermarks.insert(checkpoint_id, self.watermark);
        }
        let directories: Vec<String> = self.buffers.keys().cloned().collect();
        for directory in directories {
            self.roll(directory).await?;
        }
        let subtask = self.subtask();
        let extension = self.config.format.extension();
        let renames: Vec<(String, String)> = std::mem::take(&mut self.in_progress)
            .into_iter()
            .enumerate()
            .map(|(k, file)| {
                let name = format!("part-{subtask:04}-{checkpoint_id:010}-{k:04}.{extension}");
                let named = match file.rsplit_once('/') {
                    Some((directory, _)) => format!("{directory}/{name}"),
                    None => name,
                };
                (file, named)
            })
            .collect();
        if !renames.is_empty() {
            let pending = self.config.dir.join(PENDING_DIR);
            let moves = renames.clone();
            blocking(move || {
                for (from, to) in &moves {
                    std::fs::rename(pending.join(from), pending.join(to)).map_err(Error::file(&pending.join(from)))?;
                }
                Ok(())
            })
            .await
            .map_err(|e| self.error(e))?;
        }
        Ok(renames.into_iter().map(|(_, named)| PendingFile(named)).collect())
    }

    /// Commit: every file due (pending up to the completed checkpoint: an aborted checkpoint's
    /// rows are part of the next one that completes) renamed into the table's directory.
    async fn commit(&mut self, checkpoint_id: u64, due: Vec<PendingFile>) -> weir_engine::Result<()> {
        let dir = self.config.dir.clone();
        let files = due.clone();
        let committed = blocking(move || files.iter().try_for_each(|PendingFile(file)| commit(&dir, file))).await;
        committed.map_err(|e| self.error(e))?;
        self.commit_partitions(checkpoint_id, &due).await
    }

    /// Nothing to abort: files not yet pre-committed are deleted by the next recovery.
    async fn close(&mut self) -> weir_engine::Result<()> {
        Ok(())
    }
}

#[async_trait]
impl BatchWriter for FileSink {
    /// Buffers the rows as the table's columns (the query's names and types may differ), by
    /// partition; a buffer that reaches the rolling size goes to a file.
    async fn write(&mut self, batch: RecordBatch) -> weir_engine::Result<()> {
        let schema = &self.config.schema;
        let columns = batch
            .columns()
            .iter()
            .zip(schema.fields())
            .map(|(c, f)| cast(c, f.data_type()))
            .collect::<Result<Vec<_>, _>>()?;
        let rows = RecordBatch::try_new(schema.clone(), columns)?;
        let parts = match &self.config.partitioning {
            Some(partitioning) => partitioning.split(&rows).map_err(|e| self.error(e))?,
            None => vec![(String::new(), rows)],
        };
        for (directory, part) in parts {
            let buffer = self.buffers.entry(directory.clone()).or_default();
            buffer.bytes += part.get_array_memory_size();
            buffer.batches.push(part);
            if buffer.bytes >= self.config.rolling_bytes {
                self.roll(directory).await?;
            }
        }
        Ok(())
    }

    async fn watermark(&mut self, watermark: i64) -> weir_engine::Result<()> {
        self.watermark = self.watermark.max(watermark);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_subtask_is_read_from_either_kind_of_name() {
        assert_eq!(subtask_of("part-0003-0000000012-0001.json"), Some(3));
        assert_eq!(subtask_of("part-0002-0000000012.parquet"), Some(2));
        assert_eq!(subtask_of(".inprogress-0001-000004"), Some(1));
        assert_eq!(subtask_of("other.json"), None);
    }
}
