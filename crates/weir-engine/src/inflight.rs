//! In-flight data: the records an unaligned barrier overtook (or an aligned one, once its
//! timeout switched it to unaligned). Owned here from end to end: the task captures them while
//! its checkpoint aligns ([`Capture`]), the snapshot stores them under names of their own (one
//! table per receiving input, one per sending channel), and a restore hands them back to the
//! subtasks that must process them first ([`Restorer::replay`]), re-split to the new
//! parallelism along the input's edge.

use std::collections::BTreeMap;

use datafusion::arrow::record_batch::RecordBatch;
use weir_state::StateFile;

use crate::error::Result;
use crate::graph::{Graph, NodeId, NodeKind};
use crate::message::Message;
use crate::operator::StateTable;
use crate::partition::{Partitioning, split_by_key};
use crate::restore::Restorer;

/// Every in-flight table's name starts with this; no operator's table may.
const PREFIX: &str = "_inflight";

/// The in-flight table a receiving subtask writes for its input `input`: what reached it on
/// that input after the snapshot and before the input's own barrier.
pub(crate) fn input_table(input: usize) -> String {
    format!("{PREFIX}_in_{input}")
}

/// The in-flight table a sending subtask writes for its channel to `receiver`'s subtask
/// `subtask`, input `input`: what was queued on the channel when the barrier overtook it.
pub(crate) fn output_table(receiver: &str, input: usize, subtask: usize) -> String {
    format!("{PREFIX}_to_{receiver}_{input}_{subtask}")
}

/// Whether `table` holds in-flight data rather than an operator's state.
pub(crate) fn is_inflight(table: &str) -> bool {
    table.starts_with(PREFIX)
}

/// A snapshot the chain took, with the in-flight data gathered for it until every barrier of
/// its checkpoint is in.
pub(crate) struct Capture {
    /// The task's snapshot number (see [`crate::chains`]).
    pub seq: u64,
    /// The chain's state tables, by operator.
    pub tables: Vec<(String, StateTable)>,
    /// Per input: data that arrived after the snapshot, before that input's barrier.
    pub inputs: BTreeMap<usize, Vec<RecordBatch>>,
    /// Per output channel (its in-flight table): the data the barrier overtook there.
    pub outputs: Vec<(String, Vec<RecordBatch>)>,
}

impl Capture {
    pub fn new(seq: u64, tables: Vec<(String, StateTable)>, outputs: Vec<(String, Vec<RecordBatch>)>) -> Self {
        Self { seq, tables, inputs: BTreeMap::new(), outputs }
    }

    /// Records `batches` as in-flight on `input`.
    pub fn input(&mut self, input: usize, batches: impl IntoIterator<Item = RecordBatch>) {
        let mut batches = batches.into_iter().peekable();
        if batches.peek().is_some() {
            self.inputs.entry(input).or_default().extend(batches);
        }
    }
}

/// The data among queued `messages` (what a barrier that goes ahead of them overtakes).
pub(crate) fn queued_data<'a>(messages: impl Iterator<Item = &'a Message>) -> Vec<RecordBatch> {
    messages
        .filter_map(|m| match m {
            Message::Data(batch) => Some(batch.clone()),
            _ => None,
        })
        .collect()
}

impl Restorer<'_> {
    /// The in-flight data for `node`'s subtask `subtask` of `parallelism`, as (input, batch) in
    /// the order it is to be processed.
    pub async fn replay(
        &mut self,
        graph: &Graph,
        node: NodeId,
        subtask: usize,
        parallelism: usize,
    ) -> Result<Vec<(usize, RecordBatch)>> {
        let Some(manifest) = self.manifest() else { return Ok(Vec::new()) };
        let name = graph.node(node).name.clone();
        let NodeKind::Operator { inputs, .. } = graph.node(node).kind else { return Ok(Vec::new()) };
        let Some(&old_parallelism) = manifest.parallelism.get(&name) else { return Ok(Vec::new()) };
        let mut replay = Vec::new();
        for input in 0..inputs {
            let Some(edge) = graph.input_edge(node, input) else { continue };
            for old in 0..old_parallelism {
                // Per channel: the receiver's captures came before the barrier, the sender's
                // after it.
                let receiver_table = input_table(input);
                let sender_table = output_table(&name, input, old);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_flight_tables_are_told_from_state_tables() {
        assert!(is_inflight(&input_table(1)));
        assert!(is_inflight(&output_table("join", 0, 3)));
        assert_eq!(output_table("join", 0, 3), "_inflight_to_join_0_3");
        assert!(!is_inflight("offsets"));
    }
}
