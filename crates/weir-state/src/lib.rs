//! Operator snapshots for weir's checkpoints.
//!
//! An operator's state is a set of named tables of Arrow record batches. At a checkpoint each
//! (checkpoint, operator, subtask, table) becomes one Parquet file on object storage (a local
//! directory by default); when every task has acknowledged, the coordinator commits a manifest
//! naming the files: the manifest's existence *is* the checkpoint's completion. Restores read
//! the files back, re-splitting keyed state by key range when the parallelism changed, and
//! retention keeps the last k completed checkpoints, deleting every file no retained manifest
//! names. With incremental checkpoints a table is a chain of files shared by several
//! checkpoints ([`chain`]): a base and the changes after it, compacted into a new base off the
//! processing path.

pub mod chain;
pub mod checkpoint_storage;
pub mod dir_lock;
pub mod error;
mod keep_rows;
pub mod key_range;
pub mod manifest;
mod parquet_codec;
pub mod store;
#[cfg(feature = "testing")]
pub mod test_servers;

pub use checkpoint_storage::CheckpointStorage;
pub use dir_lock::DataDirLock;
pub use error::{Error, Result};
pub use key_range::{KEY_HASH_COLUMN, keyed_schema, owner_of};
pub use manifest::{FileRole, Manifest, StateFile};
pub use parquet_codec::FileBatches;
pub use store::{FileTarget, RetentionReport, StateStore, now_ms};
