//! Unaligned checkpoints under back-pressure: the barrier overtakes full queues, so the
//! checkpoint completes in a fraction of the time the queues take to drain, and the queued data
//! is in the snapshot; restored, that data is processed exactly once.

use std::sync::Arc;
use std::time::Duration;

use weir_engine::testkit::{TxnLog, rows};
use weir_engine::{
    CheckpointMode, CheckpointReport, CheckpointStatus, FailureInjector, FailurePoint, Graph, Step, start,
    start_with_failures,
};
use weir_state::StateStore;

use crate::harness::{config, finish, source_rows, spec, throttled_graph};

const PER_BATCH: Duration = Duration::from_millis(8);
const QUEUE: usize = 50;

/// source -> (round-robin) throttle, 8 ms a batch -> sink: the queue in front of the throttle
/// holds QUEUE batches, about 400 ms of work.
fn back_pressured(log: &TxnLog) -> (Graph, weir_engine::testkit::SourceSpec) {
    let source = spec("source", 5, 1, 2_000, 10);
    (throttled_graph(&source, PER_BATCH, log), source)
}

fn completed(checkpoints: &[CheckpointReport]) -> Vec<&CheckpointReport> {
    checkpoints.iter().filter(|c| c.status == CheckpointStatus::Completed).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unaligned_checkpoint_overtakes_full_queues_and_its_data_is_replayed_once() {
    let log = TxnLog::new();
    let (graph, source) = back_pressured(&log);
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::local(dir.path()).unwrap();
    let mut config = config(CheckpointMode::Unaligned, 100);
    config.channel.max_batches = QUEUE;
    // After checkpoint 3 is committed and before anyone hears of it: the restore must replay
    // its in-flight data, and the sink must commit what 3 recorded.
    let injector = Arc::new(FailureInjector::new([FailurePoint::Step {
        step: Step::AfterManifestBeforeNotify,
        checkpoint: Some(3),
        operator: None,
    }]));
    let handle = start_with_failures(graph, config, store.clone(), injector.clone()).unwrap();
    let status = finish(handle).await;
    assert!(injector.all_fired());

    let drain_ms = (QUEUE as u64) * PER_BATCH.as_millis() as u64;
    let checkpoints = completed(&status.checkpoints);
    assert!(checkpoints.len() >= 3, "{status:?}");
    let third = checkpoints.iter().find(|c| c.id == 3).expect("checkpoint 3 completed");
    assert!(third.inflight_rows > 0, "the snapshot holds the queued data: {third:?}");
    // The median, so one checkpoint slowed by a busy machine does not decide.
    let mut durations: Vec<u64> = checkpoints.iter().filter(|c| c.inflight_rows > 0).map(|c| c.duration_ms).collect();
    durations.sort_unstable();
    let median = durations[durations.len() / 2];
    assert!(
        median * 4 < drain_ms,
        "unaligned checkpoints took {durations:?} ms; the queues take {drain_ms} ms to drain"
    );
    assert_eq!(status.restored_from, Some(3));
    let committed = rows(&log.committed());
    let expected = source_rows(&source);
    let missing: Vec<&String> = expected.iter().filter(|r| committed.binary_search(r).is_err()).take(5).collect();
    let mut duplicates = committed.clone();
    duplicates.dedup();
    assert_eq!(
        committed,
        expected,
        "every record exactly once: {} committed, {} expected, {} distinct, missing e.g. {missing:?}; {:?}",
        committed.len(),
        expected.len(),
        duplicates.len(),
        status.checkpoints
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_back_pressure_an_aligned_checkpoint_waits_for_the_queues() {
    let log = TxnLog::new();
    let (graph, source) = back_pressured(&log);
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(CheckpointMode::Aligned, 100);
    config.channel.max_batches = QUEUE;
    let status = finish(start(graph, config, StateStore::local(dir.path()).unwrap()).unwrap()).await;
    let drain_ms = (QUEUE as u64) * PER_BATCH.as_millis() as u64;
    let checkpoints = completed(&status.checkpoints);
    let first = checkpoints.first().expect("a checkpoint completed");
    assert!(first.duration_ms * 2 >= drain_ms, "an aligned barrier waits behind the queue: {first:?}");
    assert!(checkpoints.iter().all(|c| c.inflight_rows == 0));
    assert_eq!(rows(&log.committed()), source_rows(&source));
}
