//! The `filesystem` connector: Parquet, JSON-lines or CSV files in a directory, as a bounded source
//! (each subtask reads its share of the files, its position in each checkpointed) and as an
//! exactly-once sink (a two-phase commit by rename: rows of checkpoint n go to pending files,
//! renamed into place when n completes), both with Hive-style partition directories, and
//! Flink's partition commit (`_SUCCESS` files) for the sink.

mod connector;
mod format;
mod partition_commit;
mod partitions;
mod sink;
mod source;

pub use connector::FilesystemConnector;
pub use format::FileFormat;
pub use partition_commit::{PartitionCommit, Trigger};
pub use partitions::HivePartitions;
pub use sink::{FileSink, FileSinkConfig};
pub use source::FileSource;

/// Every file under `dir`, as paths relative to it with `/` between directories; with
/// `visible_only`, names starting with `.` or `_` (pending and in-progress files, marker files)
/// are skipped, directories included.
fn files_under(dir: &std::path::Path, visible_only: bool) -> crate::Result<Vec<String>> {
    let mut files = Vec::new();
    let mut directories = vec![String::new()];
    while let Some(relative) = directories.pop() {
        let directory = dir.join(&relative);
        let entries = std::fs::read_dir(&directory).map_err(crate::Error::file(&directory))?;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            if visible_only && (name.starts_with('.') || name.starts_with('_')) {
                continue;
            }
            let path = if relative.is_empty() { name } else { format!("{relative}/{name}") };
            match entry.file_type() {
                Ok(kind) if kind.is_dir() => directories.push(path),
                Ok(_) => files.push(path),
                Err(e) => return Err(crate::Error::file(&entry.path())(e)),
            }
        }
    }
    Ok(files)
}

/// Runs blocking file work off the async workers.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> crate::Result<T> + Send + 'static) -> crate::Result<T> {
    tokio::task::spawn_blocking(work).await?
}

/// An error of the subtask `info` (once opened) about a file.
fn subtask_error(info: Option<&weir_engine::SubtaskInfo>, error: impl std::fmt::Display) -> weir_engine::Error {
    match info {
        Some(info) => info.error(error),
        None => weir_engine::Error::Graph(error.to_string()),
    }
}
