//! The sqllogictest runner: every `.slt` file under the repository's `tests/sql/` runs through
//! a [`Session`], in process. A query runs as a real pipeline (bounded sources, checkpoints
//! on) to its end, and its preview rows are the result; an INSERT runs to its end too. Every
//! query also runs "the hard way" (parallelism 2, killed after its third checkpoint, restored at 3,
//! into an exactly-once sink) and must give the same rows.

use std::path::PathBuf;
use std::time::Duration;

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::Array;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::util::display::array_value_to_string;
use sqllogictest::{DBOutput, DefaultColumnType};
use weir_engine::changelog::{changes, is_changelog};
use weir_engine::testkit::{Delivery, TxnLog};
use weir_engine::{CheckpointStatus, Graph, PipelineConfig};
use weir_state::StateStore;

use crate::{Output, Session};

/// An error as sqllogictest sees it: our message, matched by `statement error <regex>`.
#[derive(Debug)]
struct SltError(String);

impl std::fmt::Display for SltError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SltError {}

struct SltSession {
    session: Session,
    data: tempfile::TempDir,
    pipelines: usize,
}

#[async_trait]
impl sqllogictest::AsyncDB for SltSession {
    type Error = SltError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, SltError> {
        let outputs = self.session.execute(sql).await.map_err(|e| SltError(e.to_string()))?;
        let mut result = DBOutput::StatementComplete(0);
        for output in outputs {
            result = match output {
                Output::Done(_) => DBOutput::StatementComplete(0),
                Output::Rows { columns, rows } => {
                    let rows = rows.into_iter().map(|row| row.into_iter().map(cell).collect()).collect();
                    DBOutput::Rows { types: vec![DefaultColumnType::Text; columns.len()], rows }
                }
                Output::Command(command) => {
                    return Err(SltError(format!("{command:?}: pipeline statements need the service")));
                }
                Output::Pipeline(pipeline) => {
                    self.pipelines += 1;
                    let store = weir_state::StateStore::local(&self.data.path().join(self.pipelines.to_string()))
                        .map_err(|e| SltError(e.to_string()))?;
                    let handle = weir_engine::start(pipeline.graph.clone(), pipeline.config, store)
                        .map_err(|e| SltError(e.to_string()))?;
                    tokio::time::timeout(Duration::from_secs(120), handle.wait())
                        .await
                        .map_err(|_| SltError("the pipeline did not finish within 120 s".into()))?
                        .map_err(|e| SltError(e.to_string()))?;
                    match pipeline.preview.map(|p| p.buffer) {
                        Some(preview) => {
                            if preview.dropped() > 0 {
                                return Err(SltError(format!(
                                    "the query gave more rows than the preview keeps ({} dropped): make its input smaller",
                                    preview.dropped()
                                )));
                            }
                            let batches = preview.batches();
                            self.the_hard_way(&pipeline.graph, &pipeline.sql, &batches).await?;
                            let rows = final_rows(&batches).map_err(SltError)?;
                            let columns = rows.first().map_or(0, Vec::len);
                            DBOutput::Rows { types: vec![DefaultColumnType::Any; columns], rows }
                        }
                        None => DBOutput::StatementComplete(0),
                    }
                }
            };
        }
        Ok(result)
    }

    /// Every pipeline ran to its end inside `run`: nothing is left to stop.
    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "weir"
    }
}

/// The rows `batches` leave: as they are, or for a changelog (an updating query) the rows its
/// changes leave in place, each retraction taking back one equal row added before (an error if
/// there is none: a changelog that takes back what it never gave is wrong).
pub(crate) fn final_rows(batches: &[RecordBatch]) -> Result<Vec<Vec<String>>, String> {
    let mut rows: Vec<Vec<String>> = Vec::new();
    for batch in batches {
        let kinds = changes(batch).map_err(|e| e.to_string())?;
        let width = batch.num_columns() - usize::from(is_changelog(&batch.schema()));
        for (row, kind) in kinds.iter().enumerate() {
            let cells: Vec<String> = batch.columns()[..width]
                .iter()
                .map(|c| match c.is_null(row) {
                    true => "NULL".to_string(),
                    false => cell(array_value_to_string(c, row).unwrap_or_else(|e| format!("<{e}>"))),
                })
                .collect();
            if kind.is_retraction() {
                let Some(at) = rows.iter().position(|r| *r == cells) else {
                    return Err(format!("the changelog takes back {cells:?} ({}), which it never added", kind.code()));
                };
                rows.swap_remove(at);
            } else {
                rows.push(cells);
            }
        }
    }
    Ok(rows)
}

/// An empty string shows as "(empty)" (as in DataFusion's .slt files): sqllogictest cannot tell
/// an empty cell from a missing one.
fn cell(text: String) -> String {
    if text.is_empty() { "(empty)".to_string() } else { text }
}

impl SltSession {
    /// Runs a query again "the hard way" and requires the same rows: at parallelism 2 with
    /// frequent incremental checkpoints into an exactly-once sink, killed after its third
    /// checkpoint (so keyed state that changed comes back from a base and its changes),
    /// restored at parallelism 3 and run to the end.
    async fn the_hard_way(&mut self, graph: &Graph, sql: &str, straight: &[RecordBatch]) -> Result<(), SltError> {
        let fail = |what: &str, e: &dyn std::fmt::Display| SltError(format!("the hard way, {what}: {e}"));
        let log = TxnLog::new();
        let mut graph = graph.clone();
        let sink_log = log.clone();
        graph.replace_operator("preview", Arc::new(move |_| Ok(Box::new(sink_log.sink(Delivery::ExactlyOnce)))));
        let mut config = PipelineConfig::default();
        config.checkpoint.interval = Some(Duration::from_millis(5));
        self.pipelines += 1;
        let store =
            StateStore::local(&self.data.path().join(self.pipelines.to_string())).map_err(|e| fail("store", &e))?;
        let first = weir_engine::start(graph.with_parallelism(2), config.clone(), store.clone())
            .map_err(|e| fail("start at 2", &e))?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while !first.is_finished()
            && first.status().checkpoints.iter().filter(|c| c.status == CheckpointStatus::Completed).count() < 3
        {
            if tokio::time::Instant::now() > deadline {
                return Err(SltError("the hard way: no checkpoint within 60 s".into()));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        first.kill().await;
        let second =
            weir_engine::start(graph.with_parallelism(3), config, store).map_err(|e| fail("start at 3", &e))?;
        tokio::time::timeout(Duration::from_secs(120), second.wait())
            .await
            .map_err(|_| SltError("the hard way: the restored pipeline did not finish within 120 s".into()))?
            .map_err(|e| fail("restored at 3", &e))?;
        let final_of = |batches: &[RecordBatch]| -> Result<Vec<String>, SltError> {
            let mut rows: Vec<String> = final_rows(batches).map_err(SltError)?.iter().map(|r| r.join(" ")).collect();
            rows.sort();
            Ok(rows)
        };
        let (expected, got) = (final_of(straight)?, final_of(&log.committed())?);
        if expected != got {
            return Err(SltError(format!(
                "the hard way (parallelism 2, killed after its third checkpoint, restored at 3) gave {} rows, the straight run {}: {sql}\nhard way: {got:?}\nstraight: {expected:?}",
                got.len(),
                expected.len()
            )));
        }
        Ok(())
    }
}

fn slt_files() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/sql");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        // WEIR_SLT_ONLY=flink runs only the files whose name holds "flink" (while working on them).
        .filter(|p| std::env::var("WEIR_SLT_ONLY").map_or(true, |only| p.to_string_lossy().contains(&only)))
        .collect();
    files.sort();
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_slt_file_passes() {
    let files = slt_files();
    assert!(!files.is_empty(), "no .slt files under tests/sql");
    let mut failures = Vec::new();
    for file in &files {
        let mut runner = sqllogictest::Runner::new(|| async {
            Ok(SltSession {
                session: Session::new(),
                data: tempfile::tempdir().map_err(|e| SltError(e.to_string()))?,
                pipelines: 0,
            })
        });
        // WEIR_SLT_COMPLETE=1 writes the results into the files instead of checking them
        // (review the diff before committing it).
        if std::env::var_os("WEIR_SLT_COMPLETE").is_some() {
            let (validator, normalizer, columns) = (
                sqllogictest::default_validator,
                sqllogictest::default_normalizer,
                sqllogictest::default_column_validator::<DefaultColumnType>,
            );
            if let Err(error) = runner.update_test_file(file, " ", validator, normalizer, columns).await {
                failures.push(format!("{}: {error}", file.display()));
            }
        } else if let Err(error) = runner.run_file_async(file).await {
            failures.push(format!("{}: {error}", file.display()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
