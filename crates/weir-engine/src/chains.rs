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
//! A chain whose deltas weigh half its base (or grow many) is compacted off the processing path:
//! the files are merged into a new base, which a later write adopts in place of the files it
//! replaces when they are still the start of its chain.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;
use weir_state::{FileRole, StateFile, StateStore};

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
    /// Finished bases, with the paths of the chain files each stands for.
    done: HashMap<TableId, (Vec<String>, StateFile)>,
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
            if let Some((replaced, base)) = compactions.done.remove(&id) {
                let paths = chain.iter().map(|f| f.path.as_str());
                if replaced.len() <= chain.len() && paths.zip(&replaced).all(|(a, b)| a == b) {
                    chain.splice(..replaced.len(), [base]);
                }
            }
            chain.extend(files);
            chains.tables.insert(id, chain);
        }
        let named = chains.tables.values().flatten().cloned().collect();
        Ok((named, Arc::new(chains)))
    }

    /// Hands the chains to the next write (after this one's acknowledgement went out) and
    /// starts compacting the chains that are due, writing their bases in checkpoint
    /// `checkpoint_id`'s directory.
    pub fn hand_over(self, chains: Arc<Chains>, store: &StateStore, checkpoint_id: u64) {
        for (id, chain) in &chains.tables {
            if !compaction_due(chain) {
                continue;
            }
            let mut compactions = self.compactions.lock().unwrap_or_else(|p| p.into_inner());
            // Compacting, or compacted and not yet adopted: nothing to gain from another merge.
            if compactions.done.contains_key(id) || !compactions.running.insert(id.clone()) {
                continue;
            }
            let (id, chain, store, compactions_line) =
                (id.clone(), chain.clone(), store.clone(), self.compactions.clone());
            tokio::spawn(async move {
                let compacted = store.compact(&chain, checkpoint_id).await;
                let mut compactions = compactions_line.lock().unwrap_or_else(|p| p.into_inner());
                compactions.running.remove(&id);
                match compacted {
                    Ok(base) => {
                        fail::fail_point!("weir::mid_compaction", |_| {
                            eprintln!(
                                "failpoint weir::mid_compaction: aborting the process at checkpoint {checkpoint_id}"
                            );
                            std::process::abort()
                        });
                        tracing::debug!(operator = id.0, table = id.1, files = chain.len(), "state chain compacted");
                        let replaced = chain.into_iter().map(|f| f.path).collect();
                        compactions.done.insert(id, (replaced, base));
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

/// A chain is compacted when its deltas weigh half its base (a restore then holds at most a
/// third of the keys in its merge table), or are many files.
fn compaction_due(chain: &[StateFile]) -> bool {
    let deltas: Vec<&StateFile> = chain.iter().filter(|f| f.role != FileRole::Full).collect();
    let base: u64 = chain.iter().filter(|f| f.role == FileRole::Full).map(|f| f.bytes).sum();
    deltas.len() >= 2 && (2 * deltas.iter().map(|f| f.bytes).sum::<u64>() > base || deltas.len() > MAX_DELTA_FILES)
}
