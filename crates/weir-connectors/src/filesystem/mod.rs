//! The `filesystem` connector: Parquet or JSON-lines files in a directory, as a bounded source
//! (each subtask reads its share of the files, its position in each checkpointed) and as an
//! exactly-once sink (a two-phase commit by rename: rows of checkpoint n go to pending files,
//! renamed into place when n completes), both with Hive-style partition directories.

mod format;
mod partitions;
mod sink;
mod source;

pub use format::FileFormat;
pub use partitions::HivePartitions;
pub use sink::{FileSink, FileSinkConfig};
pub use source::FileSource;

/// Runs blocking file work off the async workers.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> Result<T, String> + Send + 'static) -> Result<T, String> {
    tokio::task::spawn_blocking(work).await.map_err(|e| format!("file task failed: {e}"))?
}

/// An error of the subtask `info` (once opened) about a file.
fn subtask_error(info: Option<&weir_engine::SubtaskInfo>, message: String) -> weir_engine::Error {
    match info {
        Some(info) => info.error(message),
        None => weir_engine::Error::Graph(message),
    }
}
