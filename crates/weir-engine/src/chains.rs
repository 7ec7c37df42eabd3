//! What a task's snapshots stand on when checkpoints are incremental. A table an operator
//! writes as changes ([`crate::operator::Delta`]) is a chain of files (`weir_state::chain`): a
//! base, then each checkpoint's deletes and upserts. A checkpoint's manifest names every file
//! of every chain, so a file is shared by all the checkpoints whose chain holds it.
//!
//! Each snapshot write hands its chains to the next write of the task, in snapshot order (the
//! hand-over also orders the acknowledgements). The chains are whole only if every snapshot was
//! written: a write that fails, or a snapshot taken and never written (its checkpoint aborted
//! before the task wrote it), leaves the changes it held out of every later delta. So a delta
//! whose predecessor is not the snapshot just before it is declined, and the task's next
//! snapshot is full ([`ChainLine::rebase`]). After a (re)start at the parallelism of the
//! checkpoint restored, each subtask's restored state is exactly its own chains merged (its key
//! range is the same), so its first snapshot goes on from them ([`ChainLine::continuing`]);
//! after a rescale the state was re-split and the first snapshot is full.
//!
//! Chains are compacted off the processing path, and a later write adopts what a compaction
//! wrote in place of the files it replaces when they are still in its chain. Once a chain's
//! deltas weigh an eighth of its base, they are merged into one change (each key's latest
//! rows, or its removal): when they change the same keys again and again, the chain shrinks
//! back to its base and about one delta, the base neither read nor written. When that does not
//! pay (the merged deltas hold more than half their rows, as when each delta changes other
//! keys, or weigh a quarter of the base), deltas are not merged alone again until the chain,
//! its deltas grown to half its base (or many files), has been merged whole into a new base.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;
use weir_state::{StateFile, StateStore};

use crate::error::{Error, Result};

/// Delta files a chain may hold before it is compacted, whatever their size.
const MAX_DELTA_FILES: usize = 200;

/// (operator, table)
pub(crate) type TableId = (String, String);

/// The files of every table one snapshot write left, with the snapshot's number.
#[derive(Debug, Default)]
pub(crate) struct Chains {
    seq: u64,
    tables: HashMap<TableId, Vec<StateFile>>,
}

/// One table's files as a snapshot wrote them: the whole table, or a change on top of the
/// previous snapshot's chain.
pub(crate) struct Written {
    pub operator: String,
    pub table: String,
    pub files: Vec<StateFile>,
    pub delta: bool,
}

/// A task's side of the chains: whether the next snapshot must be full, the number of
/// snapshots taken, the hand-over from the last write, and the compactions.
pub(crate) struct ChainLine {
    rebase: Arc<AtomicBool>,
    taken: u64,
    last: Option<oneshot::Receiver<Arc<Chains>>>,
    compactions: Arc<Mutex<Compactions>>,
}

/// What one snapshot write needs of the line.
pub(crate) struct WriteLink {
    seq: u64,
    previous: Option<oneshot::Receiver<Arc<Chains>>>,
    next: oneshot::Sender<Arc<Chains>>,
    rebase: Arc<AtomicBool>,
    compactions: Arc<Mutex<Compactions>>,
}

#[derive(Debug, Default)]
struct Compactions {
    running: HashSet<TableId>,
    /// Finished compactions: the paths of the run of chain files each replaces, and its files.
    done: HashMap<TableId, (Vec<String>, Vec<StateFile>)>,
    /// Tables whose merged deltas did not pay since their last whole merge.
    whole: HashSet<TableId>,
}

impl Compactions {
    /// Whether table `id`'s deltas may be merged alone.
    fn deltas_alone(&self, id: &TableId) -> bool {
        !self.whole.contains(id)
    }

    /// A `merge` of table `id`'s chain finished; a merge of its deltas alone `paid` or not.
    fn merged(&mut self, id: &TableId, merge: Merge, paid: bool) {
        match (merge, paid) {
            (Merge::Whole, _) => {
                self.whole.remove(id);
            }
            (Merge::Changes, false) => {
                self.whole.insert(id.clone());
            }
            (Merge::Changes, true) => {}
        }
    }
}

/// What a compaction merges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Merge {
    /// The whole chain, into a new base.
    Whole,
    /// The deltas after the base, into one change.
    Changes,
}

impl Default for ChainLine {
    fn default() -> Self {
        Self { rebase: Arc::new(AtomicBool::new(true)), taken: 0, last: None, compactions: Arc::default() }
    }
}

impl ChainLine {
    /// A line that goes on from restored `tables` (each table's chain as the checkpoint
    /// restored names it): the operators' first changes are on top of them.
    pub fn continuing(tables: HashMap<TableId, Vec<StateFile>>) -> Self {
        let (sender, receiver) = oneshot::channel();
        // The receiver is held here: the send cannot fail.
        let _ = sender.send(Arc::new(Chains { seq: 0, tables }));
        Self { rebase: Arc::new(AtomicBool::new(false)), taken: 0, last: Some(receiver), compactions: Arc::default() }
    }

    /// A snapshot is being taken: its number, and whether it may be a delta (which clears the
    /// request for a full one).
    pub fn take_snapshot(&mut self) -> (u64, bool) {
        self.taken += 1;
        (self.taken, !self.rebase.swap(false, Ordering::SeqCst))
    }

    /// The link for the write of snapshot `seq`. Writes are started in snapshot order.
    pub fn link(&mut self, seq: u64) -> WriteLink {
        let (next, receiver) = oneshot::channel();
        WriteLink {
            seq,
            previous: self.last.replace(receiver),
            next,
            rebase: self.rebase.clone(),
            compactions: self.compactions.clone(),
        }
    }
}

impl WriteLink {
    /// Waits for the previous write and joins what this one `written` to its chains. The
    /// files to name in the manifest come back; on an error (this write's or the join's) the
    /// next snapshot will be full.
    pub async fn join(&mut self, written: Result<Vec<Written>>) -> Result<(Vec<StateFile>, Arc<Chains>)> {
        let before = match self.previous.take() {
            Some(previous) => previous.await.ok(),
            None => Some(Arc::new(Chains::default())),
        };
        let joined = written.and_then(|written| self.compose(before.as_deref(), written));
        if joined.is_err() {
            self.rebase.store(true, Ordering::SeqCst);
        }
        joined
    }

    fn compose(&self, before: Option<&Chains>, written: Vec<Written>) -> Result<(Vec<StateFile>, Arc<Chains>)> {
        let mut chains = Chains { seq: self.seq, tables: HashMap::new() };
        let mut compactions = self.compactions.lock().unwrap_or_else(|p| p.into_inner());
        for Written { operator, table, files, delta } in written {
            let id = (operator, table);
            let mut chain = if delta {
                let previous = before
                    .filter(|b| b.seq + 1 == self.seq)
                    .and_then(|b| b.tables.get(&id))
                    .ok_or_else(|| Error::Graph(format!(
                        "the snapshot of {}'s table {} before this one was not written, so its changes have nothing to go on; the next snapshot is full",
                        id.0, id.1
                    )))?;
                previous.clone()
            } else {
                Vec::new()
            };
            if let Some((replaced, compacted)) = compactions.done.remove(&id)
                && let Some(at) = run_at(&chain, &replaced)
            {
                chain.splice(at..at + replaced.len(), compacted);
            }
            chain.extend(files);
            chains.tables.insert(id, chain);
        }
        let named = chains.tables.values().flatten().cloned().collect();
        Ok((named, Arc::new(chains)))
    }

    /// Hands the chains to the next write (after this one's acknowledgement went out) and
    /// starts compacting the chains that are due, writing what they merge to in checkpoint
    /// `checkpoint_id`'s directory.
    pub fn hand_over(self, chains: Arc<Chains>, store: &StateStore, checkpoint_id: u64) {
        for (id, chain) in &chains.tables {
            let mut compactions = self.compactions.lock().unwrap_or_else(|p| p.into_inner());
            let Some((merge, run)) = compaction_due(chain, compactions.deltas_alone(id)) else { continue };
            // Compacting, or compacted and not yet adopted: nothing to gain from another merge.
            if compactions.done.contains_key(id) || !compactions.running.insert(id.clone()) {
                continue;
            }
            let base: u64 = chain.iter().filter(|f| f.role.is_full()).map(|f| f.bytes).sum();
            let (id, run, store, compactions_line) =
                (id.clone(), run.to_vec(), store.clone(), self.compactions.clone());
            tokio::spawn(async move {
                let compacted = match merge {
                    Merge::Whole => store.compact(&run, checkpoint_id).await.map(|base| vec![base]),
                    Merge::Changes => store.compact_changes(&run, checkpoint_id).await,
                };
                let mut compactions = compactions_line.lock().unwrap_or_else(|p| p.into_inner());
                compactions.running.remove(&id);
                match compacted {
                    Ok(files) => {
                        fail::fail_point!("weir::mid_compaction", |_| {
                            eprintln!(
                                "failpoint weir::mid_compaction: aborting the process at checkpoint {checkpoint_id}"
                            );
                            std::process::abort()
                        });
                        tracing::debug!(
                            operator = id.0,
                            table = id.1,
                            files = run.len(),
                            ?merge,
                            "state chain compacted"
                        );
                        let paid = merge == Merge::Whole || changes_merge_paid(&run, &files, base);
                        compactions.merged(&id, merge, paid);
                        let replaced = run.into_iter().map(|f| f.path).collect();
                        compactions.done.insert(id, (replaced, files));
                    }
                    Err(error) => {
                        tracing::warn!(operator = id.0, table = id.1, %error, "compacting a state chain failed; it stays as it is and is tried again later");
                    }
                }
            });
        }
        // The next write may be gone (the task is closing): nothing waits for these chains.
        let _ = self.next.send(chains);
    }
}

/// Where the run of files `replaced` starts in `chain`, if it is there whole.
fn run_at(chain: &[StateFile], replaced: &[String]) -> Option<usize> {
    let at = chain.iter().position(|f| Some(&f.path) == replaced.first())?;
    let run = chain.get(at..at + replaced.len())?;
    run.iter().zip(replaced).all(|(file, path)| &file.path == path).then_some(at)
}

/// Whether merging a chain's deltas `run` into `merged` was worth it: they shrank to at most
/// half their rows, and to less than a quarter of the base's `base` bytes (else the next
/// merge of deltas would read most of what merging the whole chain reads, for less).
fn changes_merge_paid(run: &[StateFile], merged: &[StateFile], base: u64) -> bool {
    let rows = |files: &[StateFile]| files.iter().map(|f| f.rows).sum::<u64>();
    2 * rows(merged) <= rows(run) && 4 * merged.iter().map(|f| f.bytes).sum::<u64>() < base
}

/// Whether `chain` is due for compaction, and if so what is merged. Its deltas, when they
/// weigh an eighth of its base (or are many files), unless `deltas_alone` is false (merging
/// them did not pay since the last whole merge) or it has no base; all of it, when its deltas
/// weigh half its base (a restore then holds at most a third of the keys in its merge table),
/// or are many files.
fn compaction_due(chain: &[StateFile], deltas_alone: bool) -> Option<(Merge, &[StateFile])> {
    let bases = chain.iter().take_while(|f| f.role.is_full()).count();
    let (base, deltas) = chain.split_at(bases);
    let (base, weight) = (base.iter().map(|f| f.bytes).sum::<u64>(), deltas.iter().map(|f| f.bytes).sum::<u64>());
    let many = deltas.len() > MAX_DELTA_FILES;
    if deltas.len() < 2 {
        None
    } else if deltas_alone && bases > 0 && (8 * weight > base || many) {
        Some((Merge::Changes, deltas))
    } else if 2 * weight > base || many {
        Some((Merge::Whole, chain))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::arrow::record_batch::RecordBatch;
    use weir_state::{FileRole, FileTarget};

    use super::*;

    fn file(path: &str, role: FileRole, bytes: u64, rows: u64) -> StateFile {
        StateFile {
            operator: "count".into(),
            subtask: 0,
            table: "groups".into(),
            path: path.into(),
            bytes,
            rows,
            role,
            key: vec!["k".into()],
            key_hashes: None,
        }
    }

    /// A base of 100 bytes and `deltas` deltas of `each` bytes.
    fn chain(deltas: usize, each: u64) -> Vec<StateFile> {
        let mut chain = vec![file("base", FileRole::Full, 100, 10)];
        chain.extend((0..deltas).map(|i| file(&format!("d{i}"), FileRole::Upserts, each, 1)));
        chain
    }

    #[test]
    fn deltas_are_merged_alone_first_and_the_whole_chain_once_that_does_not_pay() {
        assert!(compaction_due(&chain(2, 6), true).is_none(), "an eighth of the base: not due yet");
        assert!(compaction_due(&chain(1, 80), true).is_none(), "one delta: nothing to merge");
        let some = chain(2, 7);
        let (merge, run) = compaction_due(&some, true).unwrap();
        assert_eq!((merge, run.first().map(|f| f.path.as_str()), run.len()), (Merge::Changes, Some("d0"), 2));
        assert!(compaction_due(&some, false).is_none(), "merging deltas did not pay: wait for half the base");
        let half = chain(3, 17);
        let (merge, run) = compaction_due(&half, false).unwrap();
        assert_eq!((merge, run.len()), (Merge::Whole, 4));
        let no_base = &some[1..];
        assert_eq!(compaction_due(no_base, true).map(|(merge, run)| (merge, run.len())), Some((Merge::Whole, 2)));
        let many = chain(MAX_DELTA_FILES + 1, 0);
        assert_eq!(compaction_due(&many, true).map(|(merge, _)| merge), Some(Merge::Changes));
        assert_eq!(compaction_due(&many, false).map(|(merge, _)| merge), Some(Merge::Whole));

        // Ten rows of changes merged into two: it paid; into six, or into a quarter of the
        // base's bytes, it did not.
        let run: Vec<StateFile> = (0..10).map(|i| file(&format!("d{i}"), FileRole::Upserts, 10, 1)).collect();
        assert!(changes_merge_paid(&run, &[file("m", FileRole::Upserts, 10, 2)], 100));
        assert!(!changes_merge_paid(&run, &[file("m", FileRole::Upserts, 10, 6)], 100));
        assert!(!changes_merge_paid(&run, &[file("m", FileRole::Upserts, 25, 2)], 100));
    }

    /// Merged deltas that did not pay: the deltas wait for a whole merge, after which they are
    /// merged alone again.
    #[test]
    fn deltas_are_merged_alone_again_after_a_whole_merge() {
        let mut compactions = Compactions::default();
        let id: TableId = ("count".into(), "groups".into());
        compactions.merged(&id, Merge::Changes, true);
        assert!(compactions.deltas_alone(&id));
        compactions.merged(&id, Merge::Changes, false);
        assert!(!compactions.deltas_alone(&id));
        compactions.merged(&id, Merge::Whole, true);
        assert!(compactions.deltas_alone(&id));
    }

    #[test]
    fn a_compaction_replaces_its_run_wherever_it_is_in_the_chain() {
        let long = chain(3, 20);
        let paths = |files: &[StateFile]| files.iter().map(|f| f.path.clone()).collect::<Vec<_>>();
        assert_eq!(run_at(&long, &paths(&long[1..3])), Some(1));
        assert_eq!(run_at(&long, &paths(&long)), Some(0));
        assert_eq!(run_at(&long[1..], &paths(&long[..2])), None, "its start is gone");
        assert_eq!(run_at(&long, &["d0".into(), "d2".into()]), None, "not a run of the chain");
        assert_eq!(run_at(&long[..3], &paths(&long[1..])), None, "runs past the chain's end");
    }

    /// Rows `k<i>` = `value` for `i` in `keys`.
    fn rows(keys: std::ops::Range<usize>, value: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, false),
            Field::new("v", DataType::Int64, false),
        ]));
        let names = StringArray::from_iter_values(keys.clone().map(|i| format!("k{i}")));
        let values = Int64Array::from_iter_values(keys.map(|_| value));
        RecordBatch::try_new(schema, vec![Arc::new(names), Arc::new(values)]).unwrap()
    }

    /// A table whose checkpoints change the same five keys of 20,000: its deltas are merged
    /// alone (the base is never rewritten), each merge adopted in the middle of the chain, and
    /// the chain stays short and stands for the rows every checkpoint left.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn merged_deltas_are_adopted_after_the_base_and_stand_for_the_same_rows() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::local(dir.path()).unwrap();
        let mut line = ChainLine::default();
        let key = vec!["k".to_string()];
        let mut chain = Vec::new();
        for checkpoint in 1..=60_u64 {
            let (seq, delta) = line.take_snapshot();
            assert_eq!(delta, checkpoint > 1, "the first snapshot is full, the others changes");
            let (role, batch) = match delta {
                false => (FileRole::Full, rows(0..20_000, 0)),
                true => (FileRole::Upserts, rows(0..5, checkpoint as i64)),
            };
            let target = FileTarget {
                checkpoint_id: checkpoint,
                operator: "count",
                subtask: 0,
                table: "groups",
                role,
                key: &key,
            };
            let file = store.write_change(target, batch.schema(), vec![batch]).await.unwrap();
            let written = Written { operator: "count".into(), table: "groups".into(), files: vec![file], delta };
            let mut link = line.link(seq);
            let (named, chains) = link.join(Ok(vec![written])).await.unwrap();
            chain = named;
            link.hand_over(chains, &store, checkpoint);
            // Each compaction finishes before the next checkpoint, which adopts it.
            for _ in 0..500 {
                if line.compactions.lock().unwrap().running.is_empty() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        let paths: Vec<&str> = chain.iter().map(|f| f.path.as_str()).collect();
        assert!(chain.len() < 40, "the chain was not compacted: {paths:?}");
        assert!(paths[0].ends_with("00000000000000000001/count/0/groups.parquet"), "{paths:?}");
        assert!(paths[1].ends_with("groups.changes.parquet"), "merged deltas follow the base: {paths:?}");
        assert!(!paths.iter().any(|p| p.ends_with(".base.parquet")), "the base was rewritten: {paths:?}");
        let pairs = |batches: &[RecordBatch]| {
            let mut pairs: Vec<(String, i64)> = Vec::new();
            for batch in batches {
                let names = batch.column(0).as_any().downcast_ref::<StringArray>().unwrap();
                let values = batch.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
                pairs.extend((0..batch.num_rows()).map(|i| (names.value(i).to_string(), values.value(i))));
            }
            pairs.sort();
            pairs
        };
        let merged = store.read_chain(&chain).await.unwrap();
        assert_eq!(pairs(&merged), pairs(&[rows(0..5, 60), rows(5..20_000, 0)]));
    }
}
