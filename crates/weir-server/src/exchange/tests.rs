//! Channels between workers under back-pressure, over real Flight calls between two worker
//! ports in this process: source on one worker, a throttled operator and an exactly-once sink
//! on the other, the channel between them crossing the network. An unaligned barrier overtakes
//! what is queued on the sender and is taken out of the receiver's queue at once, so the
//! checkpoint completes in a fraction of the time an aligned one takes to wait for those
//! queues to drain; either way every record is committed once, also when the receiving worker
//! is lost after an unaligned checkpoint and its in-flight data is replayed.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::mpsc;
use weir_engine::remote::{AttemptRequest, FromWorker, Placement, RemoteError, ToTask, Workers, run_on_worker};
use weir_engine::testkit::{Delivery, ReplayableSource, SourceSpec, Throttle, TxnLog, rows};
use weir_engine::{
    CheckpointConfig, CheckpointMode, CheckpointStatus, Graph, Partitioning, PipelineConfig, RestartPolicy,
    start_on_workers,
};
use weir_state::StateStore;

use super::FlightExchange;
use crate::flight_client::FlightClients;

const SECRET: &str = "test-secret";
const PER_BATCH: Duration = Duration::from_millis(8);
const QUEUE: usize = 50;

fn source_spec() -> SourceSpec {
    SourceSpec {
        seed: 5,
        name: "source".into(),
        splits: 1,
        records_per_split: 2_000,
        batch_size: 10,
        keys: 37,
        delay_per_batch: Vec::new(),
    }
}

/// source -> (round-robin) throttle, PER_BATCH a batch -> exactly-once sink into `log`.
fn graph(log: &TxnLog) -> Graph {
    let spec = source_spec();
    let mut graph = Graph::new();
    let source = graph.add_source("source", 1, Arc::new(move |_| Ok(Box::new(ReplayableSource::new(spec.clone())))));
    let throttle = graph.add_operator("throttle", 1, 1, Arc::new(|_| Ok(Box::new(Throttle(PER_BATCH)))));
    graph.connect(source, throttle, 0, Partitioning::RoundRobin);
    let log = log.clone();
    let sink = graph.add_operator("sink", 1, 1, Arc::new(move |_| Ok(Box::new(log.sink(Delivery::ExactlyOnce)))));
    graph.connect(throttle, sink, 0, Partitioning::Forward);
    graph
}

fn config(mode: CheckpointMode) -> PipelineConfig {
    let mut config = PipelineConfig {
        checkpoint: CheckpointConfig {
            interval: Some(Duration::from_millis(100)),
            mode,
            max_concurrent: 1,
            timeout: Duration::from_secs(30),
            retained: 3,
            incremental: true,
        },
        restart: RestartPolicy { max_restarts: Some(2), ..RestartPolicy::default() },
        ..PipelineConfig::default()
    };
    config.channel.max_batches = QUEUE;
    config
}

/// Two workers' Flight ports in this process; an attempt's part runs on the worker it is
/// placed on, built from the same graph, with that worker's exchange.
struct TwoWorkers {
    addresses: Vec<String>,
    exchanges: Vec<Arc<FlightExchange>>,
    log: TxnLog,
    config: PipelineConfig,
    store: StateStore,
    /// Lose the second worker's part of the first attempt once it acknowledged this
    /// checkpoint (its events end without a word, as when its process dies).
    lose_after: Option<u64>,
    opened: std::sync::atomic::AtomicUsize,
}

impl TwoWorkers {
    async fn start(log: &TxnLog, config: &PipelineConfig, store: &StateStore, lose_after: Option<u64>) -> Arc<Self> {
        let (mut addresses, mut exchanges) = (Vec::new(), Vec::new());
        for id in ["w0", "w1"] {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            addresses.push(listener.local_addr().unwrap().to_string());
            let exchange = FlightExchange::new(FlightClients::new(SECRET).unwrap());
            crate::worker::serve_flight(listener, id.into(), exchange.clone(), SECRET);
            exchanges.push(exchange);
        }
        let (log, config, store, opened) = (log.clone(), config.clone(), store.clone(), Default::default());
        Arc::new(Self { addresses, exchanges, log, config, store, lose_after, opened })
    }
}

#[async_trait::async_trait]
impl Workers for TwoWorkers {
    async fn slots(&self) -> weir_engine::Result<usize> {
        Ok(self.slots_now())
    }

    fn slots_now(&self) -> usize {
        self.addresses.len()
    }

    /// The source's chain on the first worker, the throttle's on the second.
    async fn place(&self, parallelisms: &[usize]) -> weir_engine::Result<Placement> {
        assert_eq!(parallelisms, [1, 1]);
        Ok(Placement { workers: self.addresses.clone(), tasks: vec![vec![0], vec![1]], scaled_to: None })
    }

    fn lost(&self, _address: &str, _why: &str) {}

    async fn open(
        &self,
        request: AttemptRequest,
    ) -> weir_engine::Result<(mpsc::UnboundedSender<ToTask>, mpsc::UnboundedReceiver<FromWorker>)> {
        let (control, control_rx) = mpsc::unbounded_channel();
        let (events, events_rx) = mpsc::unbounded_channel();
        let (graph, config, store) = (graph(&self.log), self.config.clone(), self.store.clone());
        let exchange = self.exchanges[request.worker].clone();
        let first = self.opened.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < 2;
        let lose_after = self.lose_after.filter(|_| first && request.worker == 1);
        let (task_events, mut task_events_rx) = mpsc::unbounded_channel();
        let part = tokio::spawn(async move {
            let ran = run_on_worker(&graph, &config, &store, &request, exchange, control_rx, task_events.clone()).await;
            let _ = task_events.send(FromWorker::Done(ran.err().map(|e| RemoteError::from(&e))));
        });
        tokio::spawn(async move {
            while let Some(event) = task_events_rx.recv().await {
                let acked =
                    matches!(&event, FromWorker::Ack { checkpoint_id, .. } if Some(*checkpoint_id) >= lose_after);
                let _ = events.send(event);
                if acked && lose_after.is_some() {
                    // Long enough for the checkpoint to complete, then the part is gone.
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    part.abort();
                    return;
                }
            }
        });
        Ok((control, events_rx))
    }
}

/// Runs the pipeline over the two workers in `mode`: the completed checkpoints' durations and
/// in-flight rows, and the checkpoint a restart restored.
async fn run(mode: CheckpointMode, lose_after: Option<u64>) -> (Vec<(u64, u64)>, Option<u64>) {
    let log = TxnLog::new();
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::local(dir.path()).unwrap();
    let config = config(mode);
    let workers = TwoWorkers::start(&log, &config, &store, lose_after).await;
    let handle = start_on_workers(graph(&log), config, store, workers).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !handle.is_finished() {
        assert!(tokio::time::Instant::now() < deadline, "did not finish: {:?}", handle.status());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let status = handle.status();
    handle.wait().await.unwrap_or_else(|e| panic!("failed: {e}; {status:?}"));
    assert!(status.placement.is_some(), "ran on the workers");
    let expected = rows(&[source_spec().all_records().unwrap()]);
    assert_eq!(rows(&log.committed()), expected, "every record committed once ({mode:?})");
    let checkpoints = status
        .checkpoints
        .iter()
        .filter(|c| c.status == CheckpointStatus::Completed)
        .map(|c| (c.duration_ms, c.inflight_rows))
        .collect();
    (checkpoints, status.restored_from)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unaligned_checkpoints_overtake_a_back_pressured_channel_between_workers() {
    let (unaligned, _) = run(CheckpointMode::Unaligned, None).await;
    let (aligned, _) = run(CheckpointMode::Aligned, None).await;
    // The median of those that met a queue, so one slowed by a busy machine does not decide.
    let median = |checkpoints: &[(u64, u64)], inflight: bool| {
        let mut durations: Vec<u64> =
            checkpoints.iter().filter(|(_, rows)| !inflight || *rows > 0).map(|(ms, _)| *ms).collect();
        durations.sort_unstable();
        durations.get(durations.len() / 2).copied()
    };
    let unaligned_ms = median(&unaligned, true).unwrap_or_else(|| panic!("no in-flight data captured: {unaligned:?}"));
    let aligned_ms = median(&aligned, false).unwrap_or_else(|| panic!("no aligned checkpoint: {aligned:?}"));
    assert!(aligned.iter().all(|(_, rows)| *rows == 0), "{aligned:?}");
    eprintln!("checkpoint durations (ms, in-flight rows): unaligned {unaligned:?}, aligned {aligned:?}");
    let drain_ms = (QUEUE as u64) * PER_BATCH.as_millis() as u64;
    assert!(aligned_ms * 2 >= drain_ms, "an aligned barrier waits behind the queues: {aligned:?}");
    assert!(unaligned_ms * 4 < aligned_ms, "unaligned {unaligned:?} against aligned {aligned:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_worker_restores_the_in_flight_data_of_an_unaligned_checkpoint_once() {
    let (checkpoints, restored) = run(CheckpointMode::Unaligned, Some(3)).await;
    let restored = restored.unwrap_or_else(|| panic!("no restart: {checkpoints:?}"));
    assert!(restored >= 2, "restored checkpoint {restored}");
    // Every unaligned checkpoint under this back-pressure holds in-flight data, the restored one too.
    assert!(checkpoints.iter().filter(|(_, rows)| *rows > 0).count() >= 2, "{checkpoints:?}");
}
