//! What each subtask gets back from a completed checkpoint: its operators' tables (keyed ones
//! re-split by key range, the others as the union of all subtasks' rows). An incremental table
//! is first read back from each old subtask's chain of files, latest wins
//! (`weir_state::chain`), then re-split like any other. The in-flight data of its inputs comes
//! back through [`crate::inflight`], from the same reader.

use std::collections::HashMap;

use datafusion::arrow::record_batch::RecordBatch;
use weir_state::key_range::{owned_rows, owns_any_of, spanning};
use weir_state::{FileRole, KEY_HASH_COLUMN, Manifest, StateFile, StateStore};

use crate::chains::TableId;
use crate::error::Result;
use crate::inflight;
use crate::operator::RestoredState;

/// Reads one manifest's files once each, however many subtasks need them.
pub(crate) struct Restorer<'a> {
    store: &'a StateStore,
    manifest: Option<&'a Manifest>,
    cache: HashMap<String, Vec<RecordBatch>>,
}

impl<'a> Restorer<'a> {
    pub fn new(store: &'a StateStore, manifest: Option<&'a Manifest>) -> Self {
        Self { store, manifest, cache: HashMap::new() }
    }

    pub(crate) fn manifest(&self) -> Option<&'a Manifest> {
        self.manifest
    }

    /// One file's batches (in-flight data), read once.
    pub(crate) async fn read(&mut self, file: &StateFile) -> Result<Vec<RecordBatch>> {
        self.read_chain(std::slice::from_ref(file)).await
    }

    /// The state of `operator`'s subtask `subtask` of `parallelism`; the tables named in
    /// `replayed` as chains of files, the others merged.
    pub async fn operator_state(
        &mut self,
        operator: &str,
        subtask: usize,
        parallelism: usize,
        replayed: &[&str],
    ) -> Result<RestoredState> {
        let Some(manifest) = self.manifest else { return Ok(RestoredState::default()) };
        let mut tables: HashMap<String, Vec<RecordBatch>> = HashMap::new();
        let mut replays: HashMap<String, Vec<RestoredChain>> = HashMap::new();
        for chain in chains(manifest, |f| f.operator == operator) {
            let table = chain[0].table.clone();
            if replayed.contains(&table.as_str()) {
                let chains = replays.entry(table).or_default();
                if may_hold_rows_of(&chain, subtask, parallelism) {
                    chains.push(RestoredChain {
                        store: self.store.clone(),
                        files: chain,
                        owner: (subtask, parallelism),
                    });
                }
                continue;
            }
            let rows = tables.entry(table).or_default();
            if may_hold_rows_of(&chain, subtask, parallelism) {
                rows.extend(mine(self.read_chain(&chain).await?, subtask, parallelism)?);
            }
        }
        Ok(RestoredState { checkpoint_id: Some(manifest.checkpoint_id), tables, chains: replays })
    }

    /// The chains subtask `subtask` of a task whose operators are `operators` (name and
    /// parallelism) goes on from: each operator table's chain of that subtask, when every one
    /// of the operators had the same parallelism at the checkpoint, so the subtask's restored
    /// state is its own chains' and nothing else. `None` without a checkpoint or after a
    /// rescale: the first snapshot is full.
    pub fn continued_chains(
        &self,
        operators: &[(&str, usize)],
        subtask: usize,
    ) -> Option<HashMap<TableId, Vec<StateFile>>> {
        let manifest = self.manifest?;
        if !operators.iter().all(|(name, parallelism)| manifest.parallelism.get(*name) == Some(parallelism)) {
            return None;
        }
        let mine = |f: &StateFile| f.subtask == subtask && operators.iter().any(|(name, _)| f.operator == *name);
        let tables = chains(manifest, mine)
            .into_iter()
            .map(|chain| ((chain[0].operator.clone(), chain[0].table.clone()), chain));
        Some(tables.collect())
    }

    /// Reads the operator tables of the checkpoint that `wanted` keeps (a chain of an old
    /// subtask's files of one table) at once (each file decoded, each chain merged, off the
    /// async workers), so a restore of many subtasks takes about as long as its largest table
    /// rather than the sum of all. The chains `replayed` names are left to the operators that
    /// replay them (see [`Self::operator_state`]). Returns the bytes of the files read.
    pub async fn prefetch(
        &mut self,
        wanted: impl Fn(&[StateFile]) -> bool,
        replayed: impl Fn(&StateFile) -> bool,
    ) -> Result<u64> {
        let Some(manifest) = self.manifest else { return Ok(0) };
        let chains: Vec<Vec<StateFile>> =
            chains(manifest, |_| true).into_iter().filter(|c| wanted(c) && !replayed(&c[0])).collect();
        let bytes = chains.iter().flatten().map(|f| f.bytes).sum();
        let store = self.store;
        let reads = chains.iter().map(|chain| async move { store.read_chain(chain).await });
        let read = futures::future::try_join_all(reads).await?;
        for (chain, batches) in chains.iter().zip(read) {
            self.cache.insert(chain_id(chain), batches);
        }
        Ok(bytes)
    }

    /// One table of one old subtask: its file, or its chain merged (once, however many new
    /// subtasks need it).
    async fn read_chain(&mut self, chain: &[StateFile]) -> Result<Vec<RecordBatch>> {
        let id = chain_id(chain);
        if let Some(batches) = self.cache.get(&id) {
            return Ok(batches.clone());
        }
        let batches = self.store.read_chain(chain).await?;
        self.cache.insert(id, batches.clone());
        Ok(batches)
    }
}

/// One old subtask's chain of one table, for the operator that replays it
/// ([`crate::Operator::replayed_tables`]): its files oldest first (a base, then each later
/// checkpoint's removed keys and changed rows), each read as the operator applies it, so that a
/// restore holds one file's bytes and one decoded batch at a time rather than the whole state.
#[derive(Debug, Clone)]
pub struct RestoredChain {
    store: StateStore,
    files: Vec<StateFile>,
    /// The subtask and parallelism whose key range is kept.
    owner: (usize, usize),
}

impl RestoredChain {
    /// The chain of `files` in `store`, cut to subtask `subtask` of `parallelism`'s key range.
    pub fn new(store: StateStore, files: Vec<StateFile>, subtask: usize, parallelism: usize) -> Self {
        Self { store, files, owner: (subtask, parallelism) }
    }

    pub fn files(&self) -> &[StateFile] {
        &self.files
    }

    /// The rows of `file` (one of [`Self::files`]) the subtask owns, batch by batch, each
    /// decoded as it is taken.
    pub async fn read(&self, file: &StateFile) -> Result<impl Iterator<Item = Result<RecordBatch>> + Send + use<>> {
        let (subtask, parallelism) = self.owner;
        let batches = self.store.file_batches(file).await?;
        Ok(batches.filter_map(move |batch| match batch {
            Ok(batch) => match mine(vec![batch], subtask, parallelism) {
                Ok(mut kept) => kept.pop().map(Ok),
                Err(e) => Some(Err(e)),
            },
            Err(e) => Some(Err(e.into())),
        }))
    }
}

/// The rows of `batches` subtask `subtask` of `parallelism` owns (all of a table not keyed).
fn mine(batches: Vec<RecordBatch>, subtask: usize, parallelism: usize) -> Result<Vec<RecordBatch>> {
    let mut rows = Vec::with_capacity(batches.len());
    for batch in batches {
        if batch.schema().column_with_name(KEY_HASH_COLUMN).is_none() {
            rows.push(batch);
            continue;
        }
        let mine = owned_rows(&batch, subtask, parallelism)?;
        if mine.num_rows() > 0 {
            rows.push(mine);
        }
    }
    Ok(rows)
}

/// The operator tables of `manifest` (no in-flight data) that `wanted` keeps, as each old
/// subtask's chain of files of each table.
fn chains(manifest: &Manifest, wanted: impl Fn(&StateFile) -> bool) -> Vec<Vec<StateFile>> {
    manifest.chains().into_iter().filter(|chain| !inflight::is_inflight(&chain[0].table) && wanted(&chain[0])).collect()
}

/// Whether the chain `chain` (one old subtask's files of one table) may hold rows subtask
/// `subtask` of `parallelism` gets back: not when it is keyed and every hash it holds belongs
/// to other subtasks. The merged chain's rows are among its full and upsert files' rows, so
/// their ranges bound it; a file without a range (not keyed, or older) must be read.
pub(crate) fn may_hold_rows_of(chain: &[StateFile], subtask: usize, parallelism: usize) -> bool {
    let mut range = None;
    for file in chain.iter().filter(|f| f.role != FileRole::Deletes) {
        let Some((least, greatest)) = file.key_hashes else { return true };
        range = Some(spanning(range, least, greatest));
    }
    range.is_none_or(|(least, greatest)| owns_any_of(least, greatest, subtask, parallelism))
}

/// A chain's name in the cache: its files' paths (one file: its path, as in-flight reads).
fn chain_id(chain: &[StateFile]) -> String {
    chain.iter().map(|f| f.path.as_str()).collect::<Vec<_>>().join("+")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use datafusion::arrow::array::{Int64Array, UInt64Array};
    use datafusion::arrow::datatypes::{DataType, Field};
    use weir_state::key_range::keyed_schema;

    use super::*;

    /// Two old subtasks' keyed files, each within its own key range: subtask 0 of 2 reads only
    /// its own (the other's file may be gone), subtask 0 of 1 (a rescale) needs both.
    #[tokio::test]
    async fn a_subtask_reads_only_the_files_whose_key_hashes_it_may_own() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::local(dir.path()).unwrap();
        let schema = keyed_schema([Field::new("count", DataType::Int64, false)]);
        let half = u64::MAX / 2;
        let mut files = Vec::new();
        for (subtask, hashes) in [(0, vec![1, half - 1]), (1, vec![half + 1, u64::MAX])] {
            let counts = Arc::new(Int64Array::from(vec![subtask as i64; 2]));
            let batch =
                RecordBatch::try_new(schema.clone(), vec![Arc::new(UInt64Array::from(hashes)), counts]).unwrap();
            files.push(store.write_table(1, "agg", subtask, "groups", schema.clone(), vec![batch]).await.unwrap());
        }
        assert_eq!(files[1].key_hashes, Some((half + 1, u64::MAX)));
        let manifest = Manifest {
            checkpoint_id: 1,
            completed_at_ms: 0,
            parallelism: BTreeMap::from([("agg".to_string(), 2)]),
            files: files.clone(),
            finished: false,
        };
        store.commit_manifest(&manifest).await.unwrap();

        let mut restorer = Restorer::new(&store, Some(&manifest));
        let read = restorer.prefetch(|chain| may_hold_rows_of(chain, 0, 2), |_| false).await.unwrap();
        assert_eq!(read, files[0].bytes);

        std::fs::remove_file(dir.path().join(&files[1].path)).unwrap();
        let mut restorer = Restorer::new(&store, Some(&manifest));
        let state = restorer.operator_state("agg", 0, 2, &[]).await.unwrap();
        assert_eq!(state.tables["groups"].iter().map(RecordBatch::num_rows).sum::<usize>(), 2);
        // At parallelism 1 the only subtask owns every hash: the missing file is needed.
        assert!(Restorer::new(&store, Some(&manifest)).operator_state("agg", 0, 1, &[]).await.is_err());
    }
}
