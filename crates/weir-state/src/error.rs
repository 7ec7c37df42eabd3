//! Errors of the state crate.

/// Every way reading or writing snapshots can fail.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("state storage: {0}")]
    ObjectStore(#[from] object_store::Error),
    #[error("state file encoding: {0}")]
    Parquet(#[from] datafusion::parquet::errors::ParquetError),
    #[error("state batches: {0}")]
    Arrow(#[from] datafusion::arrow::error::ArrowError),
    #[error("manifest of checkpoint {checkpoint_id}: {source}")]
    Manifest {
        checkpoint_id: u64,
        #[source]
        source: serde_json::Error,
    },
    #[error("checkpoint {0} already has a manifest: it was committed before")]
    ManifestExists(u64),
    #[error("keyed state table has no '{column}' UInt64 column", column = crate::KEY_HASH_COLUMN)]
    MissingKeyHash,
    #[error("incremental state file has no key column '{0}' to merge by")]
    MissingKeyColumn(String),
    #[error("hashing the keys of an incremental table: {0}")]
    KeyHashing(String),
    #[error("an incremental table's chain has no files")]
    EmptyChain,
    #[error("an incremental table's chain: {0}")]
    Chain(String),
    #[error("state directory {path}: {source}")]
    Directory {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("syncing {path} to disk: {source}")]
    Sync {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("checkpoint storage: {0}")]
    Location(String),
    #[error("checkpoints at {location} belong to {owner}: give this one a location of its own")]
    Claimed { location: String, owner: String },
    #[error("state encoding task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// The state crate's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
