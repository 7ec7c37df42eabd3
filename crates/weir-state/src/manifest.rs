//! A completed checkpoint's manifest: the list of its state files. Written once, atomically,
//! by the coordinator after every task acknowledged; never changed after.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What a state file holds of its table. An incremental table is a *chain*: a `Full` file (the
/// base), then per checkpoint since, the keys it removed (`Deletes`) and the rows whose key it
/// changed (`Upserts`), in that order (see [`crate::chain`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileRole {
    /// Every row of the table: a full snapshot, or the base of a chain.
    #[default]
    Full,
    /// Rows that replace those of the same key in the files before (or are new).
    Upserts,
    /// Keys (the key hash and key columns only) whose rows are gone.
    Deletes,
}

impl FileRole {
    pub fn is_full(&self) -> bool {
        *self == FileRole::Full
    }
}

/// One Parquet file of a snapshot: one table of one subtask of one operator. With incremental
/// checkpoints a file is shared by every checkpoint whose chain holds it, so its path names
/// the checkpoint that wrote it, not necessarily the manifest's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateFile {
    pub operator: String,
    pub subtask: usize,
    pub table: String,
    /// Object path, relative to the store's root.
    pub path: String,
    pub bytes: u64,
    pub rows: u64,
    #[serde(default, skip_serializing_if = "FileRole::is_full")]
    pub role: FileRole,
    /// The columns that identify a row, for a chain's latest-wins merge (empty for a table
    /// that is always written in full).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key: Vec<String>,
    /// The least and greatest key hash of its rows, for a keyed table: a restore skips the
    /// file for a subtask that owns none of that range (`None`: not keyed, no rows, or written
    /// before this was recorded, so it is read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_hashes: Option<(u64, u64)>,
}

impl StateFile {
    /// The checkpoint whose snapshot wrote the file (from its path).
    pub fn written_by(&self) -> Option<u64> {
        crate::store::checkpoint_of_path(&self.path)
    }
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
    /// The final checkpoint of a bounded run: every source had ended and every operator had
    /// finished, so the operators' working state is left out (only what a restore still needs,
    /// such as a sink's pending transactions, is in it), as Flink's final checkpoint leaves out
    /// finished tasks' state (FLIP-147). A pipeline restored from it ends its sources at once.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub finished: bool,
}

impl Manifest {
    /// The files of one table of one operator, all subtasks.
    pub fn files_of<'a>(&'a self, operator: &'a str, table: &'a str) -> impl Iterator<Item = &'a StateFile> {
        self.files.iter().filter(move |f| f.operator == operator && f.table == table)
    }

    /// Each table's files per (operator, subtask, table), in the manifest's order: a chain,
    /// oldest first, or one full file.
    pub fn chains(&self) -> Vec<Vec<StateFile>> {
        let mut chains: Vec<Vec<StateFile>> = Vec::new();
        for file in &self.files {
            let same = |chain: &&mut Vec<StateFile>| {
                (&chain[0].operator, chain[0].subtask, &chain[0].table) == (&file.operator, file.subtask, &file.table)
            };
            match chains.iter_mut().find(|chain| same(chain)) {
                Some(chain) => chain.push(file.clone()),
                None => chains.push(vec![file.clone()]),
            }
        }
        chains
    }

    /// Total bytes of state the checkpoint holds (files shared with older checkpoints too).
    pub fn state_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.bytes).sum()
    }

    /// Bytes this checkpoint wrote itself: its files that no older checkpoint holds.
    pub fn written_bytes(&self) -> u64 {
        self.files.iter().filter(|f| f.written_by() == Some(self.checkpoint_id)).map(|f| f.bytes).sum()
    }
}
