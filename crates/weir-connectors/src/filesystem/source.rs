//! The bounded file source. Every file under the directory, in its partition directories too,
//! whatever its extension (sorted by path; names starting with `.` or `_` are skipped, so a
//! sink's pending files are not read), are shared among subtasks by index; a partitioned table's partition columns are
//! filled in from each file's directory. The snapshot holds how many rows of each file were
//! read, and is restored as a union so that any parallelism takes over the files it now owns
//! where they were left.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{StringArray, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use weir_engine::{RestoredState, Source, SourceEvent, StateTable, SubtaskInfo, state_column};

use super::partitions::HivePartitions;
use super::{FileFormat, blocking, files_under, subtask_error};

const POSITIONS: &str = "positions";

#[derive(Debug, Clone)]
pub struct FileSource {
    path: PathBuf,
    format: FileFormat,
    schema: SchemaRef,
    partitioning: Option<HivePartitions>,
    batch_size: usize,
    info: Option<SubtaskInfo>,
    /// This subtask's files, with the rows read from each.
    files: Vec<(String, u64)>,
    next_file: usize,
    /// The rest of the file being read.
    current: VecDeque<RecordBatch>,
}

impl FileSource {
    pub fn new(
        path: PathBuf,
        format: FileFormat,
        schema: SchemaRef,
        partitioning: Option<HivePartitions>,
        batch_size: usize,
    ) -> Self {
        Self {
            path,
            format,
            schema,
            partitioning,
            batch_size,
            info: None,
            files: Vec::new(),
            next_file: 0,
            current: VecDeque::new(),
        }
    }

    fn error(&self, error: impl std::fmt::Display) -> weir_engine::Error {
        subtask_error(self.info.as_ref(), error)
    }
}

#[async_trait]
impl Source for FileSource {
    async fn open(&mut self, info: &SubtaskInfo, restored: RestoredState) -> weir_engine::Result<()> {
        self.info = Some(info.clone());
        let path = self.path.clone();
        let names = blocking(move || {
            if path.is_file() {
                return Ok(vec![String::new()]);
            }
            // Every visible file, whatever its name (as Flink reads a directory): `events.jsonl`
            // holds JSON as much as `events.json` does, and one that is not in the format fails
            // by name rather than being passed over in silence.
            let mut names = files_under(&path, true)?;
            names.sort();
            Ok(names)
        })
        .await
        .map_err(|e| self.error(e))?;
        let mut read: HashMap<String, u64> = HashMap::new();
        for batch in restored.table(POSITIONS) {
            let files = state_column::<StringArray>(batch, "file", info)?;
            let rows = state_column::<UInt64Array>(batch, "rows", info)?;
            for row in 0..batch.num_rows() {
                read.insert(files.value(row).to_string(), rows.value(row));
            }
        }
        self.files = names
            .into_iter()
            .enumerate()
            .filter(|(i, _)| i % info.parallelism == info.subtask)
            .map(|(_, name)| {
                let rows = read.get(&name).copied().unwrap_or(0);
                (name, rows)
            })
            .collect();
        Ok(())
    }

    async fn next(&mut self) -> weir_engine::Result<SourceEvent> {
        loop {
            if let Some(batch) = self.current.pop_front() {
                if let Some((_, rows)) = self.files.get_mut(self.next_file - 1) {
                    *rows += batch.num_rows() as u64;
                }
                return Ok(SourceEvent::Batch(batch));
            }
            let Some((name, skip)) = self.files.get(self.next_file).cloned() else { return Ok(SourceEvent::End) };
            self.next_file += 1;
            let path = if name.is_empty() { self.path.clone() } else { self.path.join(&name) };
            let (format, batch_size, partitioning) = (self.format.clone(), self.batch_size, self.partitioning.clone());
            let schema = partitioning.as_ref().map_or_else(|| self.schema.clone(), |p| p.file_schema().clone());
            let directory = name.rsplit_once('/').map_or(String::new(), |(directory, _)| directory.to_string());
            let batches = blocking(move || {
                let batches = format.read(&path, &schema, batch_size)?;
                match partitioning {
                    Some(partitioning) => batches.into_iter().map(|b| partitioning.complete(&directory, b)).collect(),
                    None => Ok(batches),
                }
            })
            .await
            .map_err(|e| self.error(e))?;
            // Skip the rows read before the checkpoint restored from.
            let mut skip = skip as usize;
            for batch in batches {
                if skip >= batch.num_rows() {
                    skip -= batch.num_rows();
                    continue;
                }
                self.current.push_back(batch.slice(skip, batch.num_rows() - skip));
                skip = 0;
            }
        }
    }

    async fn snapshot(&mut self, _checkpoint_id: u64) -> weir_engine::Result<Vec<StateTable>> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("file", DataType::Utf8, false),
            Field::new("rows", DataType::UInt64, false),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from_iter_values(self.files.iter().map(|f| f.0.as_str()))),
                Arc::new(UInt64Array::from_iter_values(self.files.iter().map(|f| f.1))),
            ],
        )?;
        Ok(vec![StateTable { name: POSITIONS.into(), schema, batches: vec![batch], delta: None }])
    }
}
