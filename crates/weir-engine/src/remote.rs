//! A pipeline attempt spread over worker processes.
//!
//! The controller keeps the coordinator and runs no task itself: it places every task on a
//! worker ([`Placement`]), opens the attempt on each worker that got some ([`Workers`]), and
//! talks to the tasks through [`ToTask`] and [`FromWorker`] messages, so the coordinator sees
//! the same control lines and events as for tasks in its own process. A worker builds its own
//! tasks from the same graph ([`run_on_worker`]); a channel whose two ends sit on different
//! workers is a local channel on each side with the network ([`Exchange`]) in between: the
//! sending side's queue is drained onto the network only while the receiver grants credit for
//! it (back-pressure crosses the network), and control messages go at once, in order with the
//! data. So alignment, the barrier that overtakes a sender's queue, and the in-flight data a
//! receiver captures all work as on one machine: what the network carries is bounded by the
//! credits, and a barrier behind it arrives once that has been handed over.

use std::collections::HashMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinSet;
use weir_state::{StateFile, StateStore};

use crate::channel::{Receiver, Sender};
use crate::checkpoint::TaskCheckpointReport;
use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::metrics::{MetricsRegistry, WorkerSamples};
use crate::pipeline::{self, PipelineConfig};
use crate::task::{Control, TaskEvent, TaskId};

/// How often a worker sends its tasks' counters to the controller.
pub const METRICS_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

/// Where an attempt's tasks run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// The workers' Flight addresses.
    pub workers: Vec<String>,
    /// Per chain, per subtask: an index into `workers`.
    pub tasks: Vec<Vec<usize>>,
    /// Set when fewer slots than the pipeline's parallelism were alive: no operator of the
    /// attempt runs more subtasks than this (its state re-split from the checkpoint), until
    /// slots return and the pipeline scales back up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaled_to: Option<usize>,
}

impl Placement {
    /// Spreads the tasks of chains of these parallelisms over workers with these slots, as
    /// Flink shares slots: subtask `s` of every chain goes to slot `s`, so a slot holds one
    /// subtask of each chain, and subtasks joined by a forward edge of equal parallelism stay
    /// together. Slots are taken from the workers in turn (the first slot of each, then the
    /// second, ...), so a pipeline spreads over as many workers as it can. A pipeline wider
    /// than all slots together shares them (slot `s` is slot `s` modulo their number).
    pub fn spread(parallelisms: &[usize], workers: &[(String, u32)]) -> Result<Self> {
        let mut slots = Vec::new();
        let most = workers.iter().map(|(_, n)| *n).max().unwrap_or(0);
        for round in 0..most {
            for (index, (_, n)) in workers.iter().enumerate() {
                if round < *n {
                    slots.push(index);
                }
            }
        }
        if slots.is_empty() {
            return Err(Error::Stopped("no worker with a free slot to run the pipeline on".into()));
        }
        let tasks = parallelisms.iter().map(|p| (0..*p).map(|s| slots[s % slots.len()]).collect()).collect();
        Ok(Self { workers: workers.iter().map(|(address, _)| address.clone()).collect(), tasks, scaled_to: None })
    }

    /// The worker task `(chain, subtask)` runs on.
    pub fn worker_of(&self, chain: usize, subtask: usize) -> usize {
        self.tasks[chain][subtask]
    }

    /// The workers that run at least one task.
    pub fn used(&self) -> Vec<usize> {
        let mut used: Vec<usize> = self.tasks.iter().flatten().copied().collect();
        used.sort_unstable();
        used.dedup();
        used
    }
}

/// One channel between subtasks on different workers, as both ends name it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ChannelKey {
    /// The attempt, so a channel of an attempt that is over is never taken for a new one's.
    pub attempt: String,
    /// The edge's index in the graph.
    pub edge: usize,
    pub sender: usize,
    pub receiver: usize,
    /// The operators at its two ends, to name it in errors and logs.
    pub from: String,
    pub to: String,
}

impl std::fmt::Display for ChannelKey {
    /// As `select[0] -> window[2]`: operator and subtask at each end.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}[{}] -> {}[{}]", self.from, self.sender, self.to, self.receiver)
    }
}

/// What the controller asks of one worker for one attempt.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AttemptRequest {
    /// Unique among every attempt of every pipeline.
    pub attempt: String,
    pub placement: Placement,
    /// This worker's index in the placement.
    pub worker: usize,
    /// The checkpoint to restore, if any.
    pub restore: Option<u64>,
}

/// From the controller to one task on a worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ToTask {
    pub task: TaskId,
    pub control: Control,
}

/// A task's failure, as it crosses the network.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RemoteError {
    /// A failure no restart can mend ([`Error::Fatal`]): the pipeline stops.
    pub fatal: bool,
    pub operator: String,
    pub subtask: usize,
    pub message: String,
}

impl From<&Error> for RemoteError {
    fn from(error: &Error) -> Self {
        match error {
            Error::Fatal { operator, subtask, message } => {
                Self { fatal: true, operator: operator.clone(), subtask: *subtask, message: message.clone() }
            }
            Error::Operator { operator, subtask, message } => {
                Self { fatal: false, operator: operator.clone(), subtask: *subtask, message: message.clone() }
            }
            Error::Stopped(message) => {
                Self { fatal: false, operator: String::new(), subtask: 0, message: message.clone() }
            }
            other => Self { fatal: false, operator: String::new(), subtask: 0, message: other.to_string() },
        }
    }
}

impl From<RemoteError> for Error {
    fn from(error: RemoteError) -> Self {
        let RemoteError { fatal, operator, subtask, message } = error;
        match (fatal, operator.is_empty()) {
            (true, _) => Error::Fatal { operator, subtask, message },
            (false, false) => Error::Operator { operator, subtask, message },
            (false, true) => Error::Stopped(message),
        }
    }
}

/// From a worker to the controller: its tasks' events, then how its part of the attempt ended.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum FromWorker {
    Ack {
        task: TaskId,
        checkpoint_id: u64,
        files: Vec<StateFile>,
        report: TaskCheckpointReport,
    },
    Decline {
        task: TaskId,
        checkpoint_id: u64,
        reason: String,
    },
    SourceFinished,
    Ended,
    Failed(RemoteError),
    /// The counters of its tasks now (sent every [`METRICS_EVERY`]).
    Metrics(WorkerSamples),
    /// Every task of the attempt on this worker ended (`None`), or the attempt failed there.
    Done(Option<RemoteError>),
}

impl From<TaskEvent> for FromWorker {
    fn from(event: TaskEvent) -> Self {
        match event {
            TaskEvent::Ack { task, checkpoint_id, files, report } => Self::Ack { task, checkpoint_id, files, report },
            TaskEvent::Decline { task, checkpoint_id, reason } => Self::Decline { task, checkpoint_id, reason },
            TaskEvent::SourceFinished => Self::SourceFinished,
            TaskEvent::Ended => Self::Ended,
            TaskEvent::Failed(error) => Self::Failed(RemoteError::from(&error)),
        }
    }
}

/// What the controller makes of a worker's message.
pub(crate) enum Heard {
    Event(TaskEvent),
    Metrics(WorkerSamples),
    /// The worker's part of the attempt ended: Ok, or how it failed.
    Done(Result<()>),
}

impl From<FromWorker> for Heard {
    fn from(message: FromWorker) -> Self {
        Self::Event(match message {
            FromWorker::Ack { task, checkpoint_id, files, report } => {
                TaskEvent::Ack { task, checkpoint_id, files, report }
            }
            FromWorker::Decline { task, checkpoint_id, reason } => TaskEvent::Decline { task, checkpoint_id, reason },
            FromWorker::SourceFinished => TaskEvent::SourceFinished,
            FromWorker::Ended => TaskEvent::Ended,
            FromWorker::Failed(error) => TaskEvent::Failed(error.into()),
            FromWorker::Metrics(samples) => return Self::Metrics(samples),
            FromWorker::Done(None) => return Self::Done(Ok(())),
            FromWorker::Done(Some(error)) => return Self::Done(Err(error.into())),
        })
    }
}

/// The network between workers, as the runtime needs it (Arrow Flight, in weir-server).
pub trait Exchange: Send + Sync + 'static {
    /// Carries what `from` yields (its queue signals `wakeup`) to the receiving end of `key` on
    /// the worker at `address`: data only while the receiver has granted credit for it, control
    /// messages at once. Ends once the channel's `End` is sent.
    fn send(
        &self,
        key: ChannelKey,
        address: String,
        from: Receiver,
        wakeup: Arc<Notify>,
    ) -> BoxFuture<'static, Result<()>>;

    /// Expects the sender of `key`: what it sends goes into `into`, granted `credits` batches
    /// at first and one more for each batch the task takes (its queue signals `wakeup`). A
    /// broken stream is reported through `failed`.
    fn receive(
        &self,
        key: ChannelKey,
        into: Sender,
        wakeup: Arc<Notify>,
        credits: usize,
        failed: Box<dyn FnOnce(String) + Send>,
    );

    /// The attempt is over here: channels of it still expected are not.
    fn forget(&self, attempt: &str);
}

/// The controller's way to its workers (weir-server's cluster).
#[async_trait::async_trait]
pub trait Workers: Send + Sync + 'static {
    /// The slots of the workers alive now, waiting a while when none is (an error if none
    /// came): an attempt runs no operator wider than that.
    async fn slots(&self) -> Result<usize>;

    /// The slots of the workers alive at this moment, without waiting: watched while an
    /// attempt runs narrower than its pipeline, to scale it back up when they return.
    fn slots_now(&self) -> usize;

    /// Where the tasks of chains of these parallelisms run now.
    async fn place(&self, parallelisms: &[usize]) -> Result<Placement>;

    /// The worker at `address` was lost during an attempt (its call ended without a word).
    fn lost(&self, address: &str, why: &str);

    /// Starts `request`'s part of the attempt on its worker: a line for its tasks' control
    /// messages, and the worker's events (ending with `Done`; a stream that ends without it is
    /// a worker lost).
    async fn open(
        &self,
        request: AttemptRequest,
    ) -> Result<(mpsc::UnboundedSender<ToTask>, mpsc::UnboundedReceiver<FromWorker>)>;
}

/// Runs a worker's part of an attempt: builds its tasks of `graph` (planned as the controller
/// planned it), forwards the controller's control messages to them and their events back,
/// until every task ended (Ok), one failed, or the controller went away (`control` closed:
/// the attempt is over, every task is dropped).
pub async fn run_on_worker(
    graph: &Graph,
    config: &PipelineConfig,
    store: &StateStore,
    request: &AttemptRequest,
    exchange: Arc<dyn Exchange>,
    mut control: mpsc::UnboundedReceiver<ToTask>,
    events: mpsc::UnboundedSender<FromWorker>,
) -> Result<()> {
    let graph = &*graph.capped(request.placement.scaled_to);
    let result = async {
        let chains = graph.chains(config.chaining);
        if request.placement.tasks.len() != chains.len()
            || chains.iter().zip(&request.placement.tasks).any(|(c, t)| c.parallelism != t.len())
        {
            return Err(Error::Graph(
                "the pipeline planned on this worker differs from the controller's (another version of weir?)".into(),
            ));
        }
        let manifest = match request.restore {
            Some(id) => Some(store.manifest(id).await?),
            None => None,
        };
        let registry = Arc::new(MetricsRegistry::default());
        let (events_tx, mut events_rx) = mpsc::unbounded_channel();
        let mut join = JoinSet::new();
        let here = pipeline::Here::Worker { request, exchange: &exchange };
        let lines = pipeline::build_tasks(
            graph,
            config,
            store,
            manifest.as_ref(),
            &registry,
            &events_tx,
            None,
            here,
            &mut join,
        )
        .await?;
        drop(events_tx);
        let lines: HashMap<TaskId, mpsc::UnboundedSender<Control>> =
            lines.into_iter().map(|(task, line)| (task, line.control)).collect();
        let mut metrics = tokio::time::interval(METRICS_EVERY);
        loop {
            tokio::select! {
                _ = metrics.tick() => {
                    let _ = events.send(FromWorker::Metrics(registry.samples()));
                }
                message = control.recv() => match message {
                    Some(ToTask { task, control }) => {
                        if let Some(line) = lines.get(&task) {
                            let _ = line.send(control);
                        }
                    }
                    None => return Err(Error::Stopped("the controller ended the attempt".into())),
                },
                Some(event) = events_rx.recv() => {
                    let _ = events.send(event.into());
                }
                joined = join.join_next() => match joined {
                    None => {
                        // Every task ended: its last events were sent before it returned.
                        while let Ok(event) = events_rx.try_recv() {
                            let _ = events.send(event.into());
                        }
                        let _ = events.send(FromWorker::Metrics(registry.samples()));
                        return Ok(());
                    }
                    Some(Ok(Ok(()))) => {}
                    Some(Ok(Err(error))) => return Err(error),
                    Some(Err(error)) => return Err(error.into()),
                },
            }
        }
    }
    .await;
    exchange.forget(&request.attempt);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workers(slots: &[u32]) -> Vec<(String, u32)> {
        slots.iter().enumerate().map(|(i, n)| (format!("w{i}"), *n)).collect()
    }

    #[test]
    fn a_slot_holds_one_subtask_of_each_chain_and_slots_are_taken_from_each_worker_in_turn() {
        let placement = Placement::spread(&[3, 3, 1], &workers(&[2, 2, 2])).unwrap();
        assert_eq!(placement.tasks, vec![vec![0, 1, 2], vec![0, 1, 2], vec![0]]);
        assert_eq!(placement.used(), vec![0, 1, 2]);
        // Uneven slots: the second round skips the worker with one.
        let placement = Placement::spread(&[4], &workers(&[1, 3])).unwrap();
        assert_eq!(placement.tasks, vec![vec![0, 1, 1, 1]]);
        // Wider than every slot together: the slots are shared.
        let placement = Placement::spread(&[3], &workers(&[1, 1])).unwrap();
        assert_eq!(placement.tasks, vec![vec![0, 1, 0]]);
        assert!(Placement::spread(&[1], &[]).is_err());
    }

    #[test]
    fn a_channel_is_named_by_its_operators_and_subtasks() {
        let key = ChannelKey {
            attempt: "a-1".into(),
            edge: 1,
            sender: 0,
            receiver: 2,
            from: "select".into(),
            to: "window".into(),
        };
        assert_eq!(key.to_string(), "select[0] -> window[2]");
    }
}
