//! Running a pipeline: builds the tasks and channels of an attempt from the graph and the last
//! completed checkpoint, runs it under the coordinator, and on any failure tears everything
//! down and starts a new attempt from the last completed checkpoint, with exponential back-off
//! up to a cap. A pipeline started on a store that already holds checkpoints resumes from the
//! newest, so a process that crashed picks up where it committed.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, mpsc};
use tokio::task::JoinSet;
use weir_state::{Manifest, StateStore};

use crate::chains::ChainLine;
use crate::channel::{ChannelBounds, channel};
use crate::checkpoint::CheckpointConfig;
use crate::coordinator::{Coordinator, Ended, TaskLine};
use crate::error::{Error, Result};
use crate::failure::FailureInjector;
use crate::graph::{Graph, Node, NodeKind};
use crate::inflight;
use crate::metrics::MetricsRegistry;
use crate::operator::{Operator, SubtaskInfo};
use crate::partition::Router;
use crate::remote::{AttemptRequest, ChannelKey, Exchange, Heard, Placement, ToTask, Workers};
use crate::restore::{self, Restorer};
use crate::status::SharedStatus;
pub use crate::status::{ErrorRecord, PipelineState, PipelineStatus};
use crate::task::{InputChannel, Member, OutputChannel, OutputEdge, SourceHead, Task, TaskContext, TaskEvent, TaskId};

/// How failed attempts are retried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestartPolicy {
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// Give up (status failed) after this many restarts in a row without a completed
    /// checkpoint; `None`: never.
    pub max_restarts: Option<u32>,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        Self { initial_backoff: Duration::from_millis(100), max_backoff: Duration::from_secs(30), max_restarts: None }
    }
}

/// Everything about how a pipeline runs, apart from its graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelineConfig {
    pub checkpoint: CheckpointConfig,
    pub channel: ChannelBounds,
    /// Fuse forward-connected operators of equal parallelism into one task.
    pub chaining: bool,
    pub restart: RestartPolicy,
    /// Restore this checkpoint rather than the newest (until this run completes one of its
    /// own; later failures restore the newest as usual). Its sinks' pending transactions must
    /// still be committable: resuming an older checkpoint after a newer one reused its Kafka
    /// transactional ids fails loudly.
    pub restore_from: Option<u64>,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        Self {
            checkpoint: CheckpointConfig::default(),
            channel: ChannelBounds::default(),
            chaining: true,
            restart: RestartPolicy::default(),
            restore_from: None,
        }
    }
}

/// A running pipeline.
#[derive(Debug)]
pub struct PipelineHandle {
    shared: Arc<SharedStatus>,
    supervisor: tokio::task::JoinHandle<Result<()>>,
}

impl PipelineHandle {
    pub fn status(&self) -> PipelineStatus {
        self.shared.status.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The counters of the current attempt.
    pub fn metrics(&self) -> Arc<MetricsRegistry> {
        self.shared.metrics.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Waits for a bounded pipeline to finish, or for it to fail for good.
    pub async fn wait(self) -> Result<()> {
        self.supervisor.await?
    }

    /// Stops the pipeline with a savepoint: one more checkpoint is taken and committed (sinks
    /// commit it), then every task closes (a Kafka sink aborts what it wrote after the
    /// savepoint's barrier; a restore replays it). Without checkpoints it just stops.
    pub async fn stop(self) -> Result<()> {
        self.shared.stop.send_replace(true);
        self.wait().await
    }

    /// Asks for a stop with a savepoint without waiting for it.
    pub fn request_stop(&self) {
        self.shared.stop.send_replace(true);
    }

    /// Stops everything at once, as a crash would: no final checkpoint, no close, nothing
    /// committed that was not already.
    pub async fn kill(self) {
        self.supervisor.abort();
        let _ = self.supervisor.await;
    }

    pub fn is_finished(&self) -> bool {
        self.supervisor.is_finished()
    }
}

/// Starts `graph` on the tokio runtime it is called from, resuming from the newest checkpoint
/// in `store`.
pub fn start(graph: Graph, config: PipelineConfig, store: StateStore) -> Result<PipelineHandle> {
    launch(graph, config, store, None, None)
}

/// [`start`], with the tasks of each attempt placed on `workers` when it has any (and in this
/// process when it has none): the coordinator stays here, every store is shared.
pub fn start_on_workers(
    graph: Graph,
    config: PipelineConfig,
    store: StateStore,
    workers: Arc<dyn Workers>,
) -> Result<PipelineHandle> {
    launch(graph, config, store, None, Some(workers))
}

/// [`start`], with the test kit's failure injector armed (tests only: fault injection is not
/// part of the runtime's public interface).
#[cfg(feature = "testkit")]
pub fn start_with_failures(
    graph: Graph,
    config: PipelineConfig,
    store: StateStore,
    injector: Arc<FailureInjector>,
) -> Result<PipelineHandle> {
    launch(graph, config, store, Some(injector), None)
}

fn launch(
    graph: Graph,
    config: PipelineConfig,
    store: StateStore,
    injector: Option<Arc<FailureInjector>>,
    workers: Option<Arc<dyn Workers>>,
) -> Result<PipelineHandle> {
    graph.validate()?;
    let shared = Arc::new(SharedStatus {
        status: Mutex::new(PipelineStatus {
            state: PipelineState::Running,
            attempts: 0,
            restarts: 0,
            restored_from: None,
            placement: None,
            errors: Vec::new(),
            checkpoints: Vec::new(),
        }),
        metrics: Mutex::new(Arc::new(MetricsRegistry::default())),
        stop: tokio::sync::watch::Sender::new(false),
    });
    let supervisor = tokio::spawn(supervise(graph, config, store, injector, workers, shared.clone()));
    Ok(PipelineHandle { shared, supervisor })
}

async fn supervise(
    graph: Graph,
    config: PipelineConfig,
    store: StateStore,
    injector: Option<Arc<FailureInjector>>,
    workers: Option<Arc<dyn Workers>>,
    shared: Arc<SharedStatus>,
) -> Result<()> {
    let next_id = Arc::new(AtomicU64::new(1));
    let attempts = AttemptNames::default();
    let mut backoff = config.restart.initial_backoff;
    let mut failures_in_a_row = 0;
    loop {
        let completed_before = shared.completed_checkpoints();
        let stopping = *shared.stop.borrow();
        let result = if stopping {
            Ok(Ended::Finished)
        } else {
            let on = Launch { injector: injector.clone(), workers: workers.as_ref(), attempts: &attempts };
            run_attempt(&graph, &config, &store, on, &shared, &next_id).await
        };
        let error = match result {
            // Ended at a savepoint nobody asked to stop at: to start again wider, at once.
            Ok(Ended::AtSavepoint) if !*shared.stop.borrow() => continue,
            Ok(_) => {
                let state = if *shared.stop.borrow() { PipelineState::Stopped } else { PipelineState::Finished };
                shared.update(|s| s.state = state);
                return Ok(());
            }
            Err(error) => error,
        };
        if shared.completed_checkpoints() > completed_before {
            failures_in_a_row = 0;
            backoff = config.restart.initial_backoff;
        }
        failures_in_a_row += 1;
        tracing::warn!(%error, "pipeline attempt failed");
        let give_up = matches!(error, Error::Fatal { .. })
            || config.restart.max_restarts.is_some_and(|max| failures_in_a_row > max);
        shared.failed(&error, if give_up { PipelineState::Failed } else { PipelineState::Recovering });
        if give_up {
            return Err(error);
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(config.restart.max_backoff);
        shared.update(|s| s.restarts += 1);
    }
}

/// The newest completed checkpoint's manifest could not be read. A manifest that does not parse
/// will not parse on a retry: a fatal error, naming it. Restoring an older checkpoint instead
/// is not done silently: the newest was complete, so its sinks may have committed its
/// transactions, and replaying from an older one would write those records again. The user
/// may choose to (an explicit restore of an older checkpoint).
fn unreadable(store: &StateStore, newest: u64, completed: &[u64], error: weir_state::Error) -> Error {
    if !matches!(error, weir_state::Error::Manifest { .. }) {
        return error.into();
    }
    let older: Vec<u64> = completed.iter().copied().filter(|id| *id < newest).collect();
    let choice = match older.last() {
        Some(previous) => format!(
            "restoring an older checkpoint could write again what checkpoint {newest} committed; to accept that, resume from one explicitly (kept: {older:?}; RESUME PIPELINE n FROM CHECKPOINT {previous})"
        ),
        None => "no older checkpoint is kept: start the pipeline over (DROP PIPELINE and run it again)".to_string(),
    };
    Error::Fatal {
        operator: "pipeline".into(),
        subtask: 0,
        message: format!(
            "the newest checkpoint's manifest {} cannot be read ({error}), so the pipeline cannot be restored from it; {choice}",
            store.manifest_location(newest)
        ),
    }
}

/// Names attempts uniquely across processes and restarts (the channels between workers are
/// named by their attempt).
struct AttemptNames {
    name: String,
    next: AtomicU64,
}

impl Default for AttemptNames {
    fn default() -> Self {
        static LAUNCHED: AtomicU64 = AtomicU64::new(0);
        let launched = LAUNCHED.fetch_add(1, Ordering::Relaxed);
        let name = format!("{}-{}-{launched}", std::process::id(), weir_state::now_ms());
        Self { name, next: AtomicU64::new(1) }
    }
}

/// What an attempt runs with besides its graph and store.
struct Launch<'a> {
    injector: Option<Arc<FailureInjector>>,
    workers: Option<&'a Arc<dyn Workers>>,
    attempts: &'a AttemptNames,
}

/// How long the slots alive must stay more than an attempt scaled down uses, and unchanged,
/// before it ends at a savepoint to start again wider: workers that come back together make
/// one rescale, not one each.
const SCALE_UP_AFTER: Duration = Duration::from_secs(3);

/// One attempt: restore, build, run until finished or failed. Dropping it (a kill, or the
/// supervisor moving on) aborts every task of the attempt.
async fn run_attempt(
    graph: &Graph,
    config: &PipelineConfig,
    store: &StateStore,
    on: Launch<'_>,
    shared: &Arc<SharedStatus>,
    next_id: &Arc<AtomicU64>,
) -> Result<Ended> {
    let Launch { injector, workers, attempts } = on;
    // A manifest the attempt before was committing when it died lands first.
    store.settled().await;
    let completed = store.completed_checkpoints().await?;
    if let Some(&newest) = completed.last() {
        // New checkpoints are numbered after every existing one, even when an older one is
        // restored.
        next_id.fetch_max(newest + 1, Ordering::SeqCst);
    }
    let manifest = match (config.restore_from, completed.last()) {
        (Some(id), _) if shared.completed_checkpoints() == 0 => {
            Some(store.manifest(id).await.map_err(|e| Error::Fatal {
                operator: "pipeline".into(),
                subtask: 0,
                message: format!("checkpoint {id} cannot be restored: {e}"),
            })?)
        }
        (_, Some(&newest)) => Some(store.manifest(newest).await.map_err(|e| unreadable(store, newest, &completed, e))?),
        (_, None) => None,
    };
    let registry = Arc::new(MetricsRegistry::default());
    *shared.metrics.lock().unwrap_or_else(|p| p.into_inner()) = registry.clone();
    shared.update(|s| {
        s.state = PipelineState::Running;
        s.attempts += 1;
        s.restored_from = manifest.as_ref().map(|m| m.checkpoint_id);
    });

    let (events_tx, events_rx) = mpsc::unbounded_channel();
    let mut join = JoinSet::new();
    // On workers, no wider than the slots alive: a pipeline that lost a worker goes on at a
    // lower parallelism (its state re-split from the checkpoint) rather than crowd the rest.
    let scaled_to = match workers {
        Some(workers) => Some(workers.slots().await?).filter(|slots| *slots < graph.widest()),
        None => None,
    };
    if let Some(slots) = scaled_to {
        let parallelism = graph.widest();
        tracing::warn!(
            parallelism,
            slots,
            "fewer slots alive than the pipeline's parallelism: running narrower until they return"
        );
    }
    let graph = &*graph.capped(scaled_to);
    let chains = graph.chains(config.chaining);
    let parallelisms: Vec<usize> = chains.iter().map(|c| c.parallelism).collect();
    let placement = match workers {
        Some(workers) => Some(Placement { scaled_to, ..workers.place(&parallelisms).await? }),
        None => None,
    };
    shared.update(|s| s.placement = placement.clone());
    let lines = match (placement, workers) {
        (Some(placement), Some(workers)) => {
            let attempt = format!("{}-{}", attempts.name, attempts.next.fetch_add(1, Ordering::Relaxed));
            let restore = manifest.as_ref().map(|m| m.checkpoint_id);
            let sources: Vec<bool> =
                chains.iter().map(|c| matches!(graph.node(c.head()).kind, NodeKind::Source(_))).collect();
            let opening = Opening { attempt, restore, registry: &registry, events: &events_tx };
            open_on_workers(&sources, placement, opening, workers, &mut join).await?
        }
        _ => {
            let here = Here::All;
            build_tasks(
                graph,
                config,
                store,
                manifest.as_ref(),
                &registry,
                &events_tx,
                injector.clone(),
                here,
                &mut join,
            )
            .await?
        }
    };
    let lines = lines.into_iter().map(|(_, line)| line).collect();
    drop(events_tx);
    let parallelism: BTreeMap<String, usize> = graph.nodes().iter().map(|n| (n.name.clone(), n.parallelism)).collect();
    let (rescale, rescale_rx) = tokio::sync::watch::channel(false);
    let coordinator = Coordinator {
        config: config.checkpoint.clone(),
        store: store.clone(),
        tasks: lines,
        events: events_rx,
        join,
        parallelism,
        next_id: next_id.clone(),
        status: shared.clone(),
        injector,
        retention: None,
        rescale: rescale_rx,
    };
    let scale_up = async {
        match (scaled_to, workers) {
            // Without checkpoints there is no savepoint to start again from.
            (Some(running), Some(workers)) if config.checkpoint.interval.is_some() => {
                let slots = slots_returned(workers.as_ref(), running).await;
                tracing::info!(slots, "slots returned: the pipeline scales up at its next checkpoint");
                rescale.send_replace(true);
            }
            _ => {}
        }
        std::future::pending::<std::convert::Infallible>().await
    };
    tokio::select! {
        ended = coordinator.run() => ended,
        never = scale_up => match never {},
    }
}

/// Waits until more slots than `running` have been alive, in the same number, for
/// [`SCALE_UP_AFTER`]; returns how many.
async fn slots_returned(workers: &dyn Workers, running: usize) -> usize {
    const EVERY: Duration = Duration::from_millis(250);
    let mut seen = (0, tokio::time::Instant::now());
    loop {
        tokio::time::sleep(EVERY).await;
        let slots = workers.slots_now();
        if slots != seen.0 {
            seen = (slots, tokio::time::Instant::now());
        }
        if slots > running && seen.1.elapsed() >= SCALE_UP_AFTER {
            return slots;
        }
    }
}

/// Which of an attempt's tasks a process runs.
pub(crate) enum Here<'a> {
    /// Every one (no workers).
    All,
    /// A worker's, as placed; channels to the others go over `exchange`.
    Worker { request: &'a AttemptRequest, exchange: &'a Arc<dyn Exchange> },
}

impl Here<'_> {
    fn runs(&self, chain: usize, subtask: usize) -> bool {
        match self {
            Here::All => true,
            Here::Worker { request, .. } => request.placement.worker_of(chain, subtask) == request.worker,
        }
    }
}

/// Builds the tasks of the attempt that run here, with their channels (and the exchanges
/// with other workers' tasks, spawned into `join` beside the tasks), restored from `manifest`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn build_tasks(
    graph: &Graph,
    config: &PipelineConfig,
    store: &StateStore,
    manifest: Option<&Manifest>,
    registry: &Arc<MetricsRegistry>,
    events_tx: &mpsc::UnboundedSender<TaskEvent>,
    injector: Option<Arc<FailureInjector>>,
    here: Here<'_>,
    join: &mut JoinSet<Result<()>>,
) -> Result<Vec<(TaskId, TaskLine)>> {
    let chains = graph.chains(config.chaining);
    let mut chain_of = vec![0; graph.nodes().len()];
    for (index, chain) in chains.iter().enumerate() {
        for node in &chain.nodes {
            chain_of[node.0] = index;
        }
    }
    let wakeups: Vec<Vec<Arc<Notify>>> =
        chains.iter().map(|c| (0..c.parallelism).map(|_| Arc::new(Notify::new())).collect()).collect();
    let mut inputs: Vec<Vec<Vec<InputChannel>>> =
        chains.iter().map(|c| (0..c.parallelism).map(|_| Vec::new()).collect()).collect();
    let mut outputs: Vec<Vec<Vec<OutputEdge>>> =
        chains.iter().map(|c| (0..c.parallelism).map(|_| Vec::new()).collect()).collect();
    for (edge_index, edge) in graph.edges().iter().enumerate() {
        let (from, to) = (chain_of[edge.from.0], chain_of[edge.to.0]);
        if from == to {
            continue; // fused: no channel
        }
        let (from_node, to_node) = (graph.node(edge.from), graph.node(edge.to));
        for sender in 0..from_node.parallelism {
            let receivers = Router::receivers_of(&edge.partitioning, sender, to_node.parallelism);
            let mut channels = Vec::new();
            for &receiver in &receivers {
                let (sends, receives) = (here.runs(from, sender), here.runs(to, receiver));
                if !sends && !receives {
                    continue;
                }
                // A channel with one end on another worker has the exchange at that end.
                let remote = Arc::new(Notify::new());
                let receiver_wakeup = if receives { wakeups[to][receiver].clone() } else { remote.clone() };
                let sender_wakeup = if sends { wakeups[from][sender].clone() } else { remote.clone() };
                let (tx, rx) = channel(config.channel, receiver_wakeup, sender_wakeup);
                // A channel between workers counts once, at its sending end.
                if sends {
                    registry.channel((&from_node.name, sender), (&to_node.name, receiver), tx.metrics().clone());
                }
                if let Here::Worker { request, exchange } = &here
                    && sends != receives
                {
                    let key = ChannelKey {
                        attempt: request.attempt.clone(),
                        edge: edge_index,
                        sender,
                        receiver,
                        from: from_node.name.clone(),
                        to: to_node.name.clone(),
                    };
                    if sends {
                        let address = request.placement.workers[request.placement.worker_of(to, receiver)].clone();
                        join.spawn(exchange.send(key, address, rx, remote));
                        channels.push(OutputChannel {
                            sender: tx,
                            inflight_table: inflight::output_table(&to_node.name, edge.input, receiver),
                            pending: Default::default(),
                        });
                    } else {
                        let events = events_tx.clone();
                        let failed = Box::new(move |message: String| {
                            let _ = events.send(TaskEvent::Failed(Error::Stopped(message)));
                        });
                        exchange.receive(key, tx, remote, config.channel.max_batches, failed);
                        inputs[to][receiver].push(InputChannel::new(rx, edge.input));
                    }
                    continue;
                }
                inputs[to][receiver].push(InputChannel::new(rx, edge.input));
                channels.push(OutputChannel {
                    sender: tx,
                    inflight_table: inflight::output_table(&to_node.name, edge.input, receiver),
                    pending: Default::default(),
                });
            }
            if here.runs(from, sender) {
                let router = Router::new(edge.partitioning.clone(), receivers, to_node.parallelism);
                outputs[from][sender].push(OutputEdge { router, channels });
            }
        }
    }

    let subtask_info = |node: &Node, subtask: usize| SubtaskInfo {
        operator: node.name.clone(),
        subtask,
        parallelism: node.parallelism,
        metrics: registry.operator(&node.name, subtask),
        incremental: config.checkpoint.interval.is_some() && config.checkpoint.incremental,
    };
    // The operators here are made before their state is read: each names the tables it takes
    // back as chains of files (`Operator::replayed_tables`).
    let mut made: HashMap<(usize, usize), (SubtaskInfo, Box<dyn Operator>)> = HashMap::new();
    let mut replayed: HashMap<String, Vec<&'static str>> = HashMap::new();
    for (index, chain) in chains.iter().enumerate() {
        for subtask in (0..chain.parallelism).filter(|s| here.runs(index, *s)) {
            for node_id in &chain.nodes {
                let node = graph.node(*node_id);
                if let NodeKind::Operator { factory, .. } = &node.kind {
                    let info = subtask_info(node, subtask);
                    let operator = factory(&info)?;
                    replayed.insert(node.name.clone(), operator.replayed_tables());
                    made.insert((node_id.0, subtask), (info, operator));
                }
            }
        }
    }
    let mut restorer = Restorer::new(store, manifest);
    if let Some(manifest) = manifest {
        // Only what the subtasks here get back: on a worker, its own key ranges.
        let here_operators: Vec<(&str, usize, usize)> = chains
            .iter()
            .enumerate()
            .flat_map(|(index, chain)| {
                let here = &here;
                (0..chain.parallelism).filter(move |s| here.runs(index, *s)).flat_map(move |subtask| {
                    chain
                        .nodes
                        .iter()
                        .map(move |id| (graph.node(*id).name.as_str(), subtask, graph.node(*id).parallelism))
                })
            })
            .collect();
        let wanted = |chain: &[weir_state::StateFile]| {
            here_operators.iter().any(|(operator, subtask, parallelism)| {
                chain[0].operator == *operator && restore::may_hold_rows_of(chain, *subtask, *parallelism)
            })
        };
        let started = std::time::Instant::now();
        let replays = |file: &weir_state::StateFile| {
            replayed.get(&file.operator).is_some_and(|tables| tables.contains(&file.table.as_str()))
        };
        let bytes = restorer.prefetch(wanted, replays).await?;
        let ms = started.elapsed().as_millis() as u64;
        tracing::info!(
            checkpoint = manifest.checkpoint_id,
            ms,
            bytes,
            of = manifest.state_bytes(),
            "checkpoint state read"
        );
    }
    let mut lines = Vec::new();
    let mut inputs = inputs.into_iter();
    let mut outputs = outputs.into_iter();
    for (index, chain) in chains.iter().enumerate() {
        let (mut chain_inputs, mut chain_outputs) =
            (inputs.next().unwrap_or_default().into_iter(), outputs.next().unwrap_or_default().into_iter());
        for (subtask, wakeup) in wakeups[index].iter().enumerate() {
            let (task_inputs, task_outputs) =
                (chain_inputs.next().unwrap_or_default(), chain_outputs.next().unwrap_or_default());
            if !here.runs(index, subtask) {
                continue;
            }
            let id = TaskId { chain: index, subtask };
            let mut source = None;
            let mut members = Vec::new();
            for node_id in &chain.nodes {
                let node = graph.node(*node_id);
                match &node.kind {
                    NodeKind::Source(factory) => {
                        let info = subtask_info(node, subtask);
                        let metrics = info.metrics.clone();
                        let restored = restorer.operator_state(&node.name, subtask, node.parallelism, &[]).await?;
                        source = Some(SourceHead { source: factory(&info)?, info, metrics, restored });
                    }
                    NodeKind::Operator { .. } => {
                        let (info, operator) = made
                            .remove(&(node_id.0, subtask))
                            .ok_or_else(|| Error::Graph(format!("operator {} was not made", node.name)))?;
                        let replayed = operator.replayed_tables();
                        let restored =
                            restorer.operator_state(&node.name, subtask, node.parallelism, &replayed).await?;
                        let metrics = info.metrics.clone();
                        members.push(Member { operator, info, metrics, restored });
                    }
                }
            }
            let replay = restorer.replay(graph, chain.head(), subtask, chain.parallelism).await?;
            let operators: Vec<(&str, usize)> =
                chain.nodes.iter().map(|id| graph.node(*id)).map(|n| (n.name.as_str(), n.parallelism)).collect();
            let chain_line =
                restorer.continued_chains(&operators, subtask).map(ChainLine::continuing).unwrap_or_default();
            let (control_tx, control_rx) = mpsc::unbounded_channel();
            lines.push((id, TaskLine { control: control_tx, is_source: source.is_some() }));
            let ctx = TaskContext {
                id,
                store: store.clone(),
                events: events_tx.clone(),
                control: control_rx,
                wakeup: wakeup.clone(),
                injector: injector.clone(),
                sources_finished: manifest.is_some_and(|m| m.finished),
            };
            let task = Task::new(ctx, source, members, task_inputs, task_outputs, replay, chain_line);
            join.spawn(task.run());
        }
    }
    Ok(lines)
}

/// What the controller's side of an attempt on workers shares with each worker's line.
struct Opening<'a> {
    attempt: String,
    restore: Option<u64>,
    /// Where the workers' counters land.
    registry: &'a Arc<MetricsRegistry>,
    events: &'a mpsc::UnboundedSender<TaskEvent>,
}

/// Opens the attempt on every worker `placement` uses, and gives the coordinator a line to
/// each of their tasks. What a worker sends comes back as its tasks' events; each worker's
/// stream is watched in `join`, where it ends Ok once the worker's tasks all ended, and fails
/// the attempt when the worker failed or was lost (its stream ended without a word).
async fn open_on_workers(
    sources: &[bool],
    placement: Placement,
    opening: Opening<'_>,
    workers: &Arc<dyn Workers>,
    join: &mut JoinSet<Result<()>>,
) -> Result<Vec<(TaskId, TaskLine)>> {
    let Opening { attempt, restore, registry, events: events_tx } = opening;
    let mut lines = Vec::new();
    for worker in placement.used() {
        let address = placement.workers[worker].clone();
        let request = AttemptRequest { attempt: attempt.clone(), placement: placement.clone(), worker, restore };
        let (to_worker, mut from_worker) = workers.open(request).await?;
        for (chain, subtasks) in placement.tasks.iter().enumerate() {
            for (subtask, _) in subtasks.iter().enumerate().filter(|(_, w)| **w == worker) {
                let task = TaskId { chain, subtask };
                let (control_tx, mut control_rx) = mpsc::unbounded_channel();
                let to_worker = to_worker.clone();
                // Ends when the coordinator drops the line (the attempt is over).
                tokio::spawn(async move {
                    while let Some(control) = control_rx.recv().await {
                        if to_worker.send(ToTask { task, control }).is_err() {
                            return;
                        }
                    }
                });
                lines.push((task, TaskLine { control: control_tx, is_source: sources[chain] }));
            }
        }
        let (events, workers, registry) = (events_tx.clone(), workers.clone(), registry.clone());
        join.spawn(async move {
            while let Some(message) = from_worker.recv().await {
                match Heard::from(message) {
                    Heard::Event(event) => {
                        let _ = events.send(event);
                    }
                    Heard::Metrics(samples) => registry.set_remote(worker, samples),
                    Heard::Done(ended) => return ended,
                }
            }
            workers.lost(&address, "its attempt's call broke");
            Err(Error::Stopped(format!("the worker at {address} was lost")))
        });
    }
    Ok(lines)
}
