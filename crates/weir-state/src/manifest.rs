//! A completed checkpoint's manifest: the list of its state files. Written once, atomically,
//! by the coordinator after every task acknowledged; never changed after.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One Parquet file of a snapshot: one table of one subtask of one operator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateFile {
    pub operator: String,
    pub subtask: usize,
    pub table: String,
    /// Object path, relative to the store's root.
    pub path: String,
    pub bytes: u64,
    pub rows: u64,
}

/// The commit record of one checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub checkpoint_id: u64,
    /// Wall-clock completion time, milliseconds since the epoch.
    pub completed_at_ms: u64,
    /// Each operator's parallelism when the snapshot was taken.
    pub parallelism: BTreeMap<String, usize>,
    pub files: Vec<StateFile>,
}

impl Manifest {
    /// The files of one table of one operator, all subtasks.
    pub fn files_of<'a>(&'a self, operator: &'a str, table: &'a str) -> impl Iterator<Item = &'a StateFile> {
        self.files.iter().filter(move |f| f.operator == operator && f.table == table)
    }

    /// Total bytes of state the checkpoint holds.
    pub fn state_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.bytes).sum()
    }
}
