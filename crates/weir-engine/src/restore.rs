//! What each subtask gets back from a completed checkpoint: its operators' tables (keyed ones
//! re-split by key range, the others as the union of all subtasks' rows) and the in-flight data
//! of its inputs, re-distributed to the new parallelism along the input's edge.

use std::collections::HashMap;

use datafusion::arrow::record_batch::RecordBatch;
use weir_state::key_range::owned_rows;
use weir_state::{KEY_HASH_COLUMN, Manifest, StateFile, StateStore};

use crate::error::Result;
use crate::graph::{Graph, NodeId, NodeKind};
use crate::operator::RestoredState;
use crate::partition::{Partitioning, split_by_key};
use crate::task::{inflight_in_table, inflight_to_table};

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

    async fn read(&mut self, file: &StateFile) -> Result<Vec<RecordBatch>> {
        if let Some(batches) = self.cache.get(&file.path) {
            return Ok(batches.clone());
        }
        let batches = self.store.read_file(file).await?;
        self.cache.insert(file.path.clone(), batches.clone());
        Ok(batches)
    }

    /// The state of `operator`'s subtask `subtask` of `parallelism`.
    pub async fn operator_state(
        &mut self,
        operator: &str,
        subtask: usize,
        parallelism: usize,
    ) -> Result<RestoredState> {
        let Some(manifest) = self.manifest else { return Ok(RestoredState::default()) };
        let files: Vec<StateFile> = manifest
            .files
            .iter()
            .filter(|f| f.operator == operator && !f.table.starts_with("_inflight"))
            .cloned()
            .collect();
        let mut tables: HashMap<String, Vec<RecordBatch>> = HashMap::new();
        for file in &files {
            let rows = tables.entry(file.table.clone()).or_default();
            for batch in self.read(file).await? {
                if batch.schema().column_with_name(KEY_HASH_COLUMN).is_some() {
                    let mine = owned_rows(&batch, subtask, parallelism)?;
                    if mine.num_rows() > 0 {
                        rows.push(mine);
                    }
                } else {
                    rows.push(batch);
                }
            }
        }
        Ok(RestoredState { checkpoint_id: Some(manifest.checkpoint_id), tables })
    }

    /// The in-flight data for `node`'s subtask `subtask` of `parallelism`, as (input, batch) in
    /// the order it is to be processed.
    pub async fn replay(
        &mut self,
        graph: &Graph,
        node: NodeId,
        subtask: usize,
        parallelism: usize,
    ) -> Result<Vec<(usize, RecordBatch)>> {
        let Some(manifest) = self.manifest else { return Ok(Vec::new()) };
        let name = graph.node(node).name.clone();
        let NodeKind::Operator { inputs, .. } = graph.node(node).kind else { return Ok(Vec::new()) };
        let Some(&old_parallelism) = manifest.parallelism.get(&name) else { return Ok(Vec::new()) };
        let mut replay = Vec::new();
        for input in 0..inputs {
            let Some(edge) = graph.input_edge(node, input) else { continue };
            for old in 0..old_parallelism {
                // Per channel: the receiver's captures came before the barrier, the sender's
                // after it.
                let receiver_table = inflight_in_table(input);
                let sender_table = inflight_to_table(&name, input, old);
                let files: Vec<StateFile> = manifest
                    .files
                    .iter()
                    .filter(|f| f.operator == name && f.subtask == old && f.table == receiver_table)
                    .chain(manifest.files.iter().filter(|f| f.table == sender_table))
                    .cloned()
                    .collect();
                for file in &files {
                    for batch in self.read(file).await? {
                        let mine = match (&edge.partitioning, old_parallelism == parallelism) {
                            (_, true) => (old == subtask).then_some(batch),
                            (Partitioning::Hash(keys), false) => split_by_key(&batch, keys, parallelism)?
                                .into_iter()
                                .find(|(owner, _)| *owner == subtask)
                                .map(|(_, part)| part),
                            (Partitioning::Broadcast, false) => (old == subtask % old_parallelism).then_some(batch),
                            (Partitioning::Forward | Partitioning::RoundRobin, false) => {
                                (old % parallelism == subtask).then_some(batch)
                            }
                        };
                        replay.extend(mine.map(|batch| (input, batch)));
                    }
                }
            }
        }
        Ok(replay)
    }
}
