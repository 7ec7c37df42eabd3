//! Concurrent checkpoints, a failing snapshot write, rescaling on restore, retention.

use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::Int64Type;
use datafusion::arrow::record_batch::RecordBatch;

use weir_engine::testkit::{TxnLog, rows};
use weir_engine::{
    CheckpointMode, CheckpointStatus, FailureInjector, FailurePoint, Graph, Partitioning, PipelineState, Step, start,
    start_with_failures,
};
use weir_state::{FileRole, StateFile, StateStore};

use crate::harness::{
    await_completed, config, expected_counts, finish, keyed_count_graph, source_node, source_rows, spec,
    throttled_graph,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_checkpoints_in_flight_at_once_both_complete() {
    let source = spec("source", 9, 1, 3_000, 10);
    let log = TxnLog::new();
    let graph = throttled_graph(&source, Duration::from_millis(2), &log);
    let dir = tempfile::tempdir().unwrap();
    // Aligned barriers wait behind ~40 ms of queue; one is triggered every 15 ms.
    let mut config = config(CheckpointMode::Aligned, 15);
    config.checkpoint.max_concurrent = 2;
    config.channel.max_batches = 20;
    let status = finish(start(graph, config, StateStore::local(dir.path()).unwrap()).unwrap()).await;
    let completed: Vec<_> = status.checkpoints.iter().filter(|c| c.status == CheckpointStatus::Completed).collect();
    let overlapping = completed.windows(2).any(|pair| {
        let (a, b) = (pair[0], pair[1]);
        b.started_at_ms < a.started_at_ms + a.duration_ms
    });
    assert!(overlapping, "no two completed checkpoints were in flight together: {completed:?}");
    assert!(status.checkpoints.iter().all(|c| c.status == CheckpointStatus::Completed), "{:?}", status.checkpoints);
    assert_eq!(rows(&log.committed()), source_rows(&source));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_snapshot_write_aborts_that_checkpoint_and_the_pipeline_goes_on() {
    let a = spec("a", 11, 2, 400, 20);
    let mut b = spec("b", 12, 2, 400, 20);
    b.delay_per_batch = vec![Duration::from_millis(1); 2];
    let log = TxnLog::new();
    let dir = tempfile::tempdir().unwrap();
    let injector = Arc::new(FailureInjector::new([FailurePoint::Step {
        step: Step::SnapshotWrite,
        checkpoint: Some(2),
        operator: Some("count".into()),
    }]));
    let store = StateStore::local(dir.path()).unwrap();
    let mut config = config(CheckpointMode::Aligned, 10);
    config.checkpoint.retained = 1000;
    let handle =
        start_with_failures(keyed_count_graph(&a, &b, 2, &log), config, store.clone(), injector.clone()).unwrap();
    let status = finish(handle).await;
    assert!(injector.all_fired());
    assert_eq!(status.restarts, 0, "a declined checkpoint is not a failure");
    let second = status.checkpoints.iter().find(|c| c.id == 2).unwrap();
    assert!(matches!(&second.status, CheckpointStatus::Aborted(reason) if reason.contains("injected")), "{second:?}");
    assert!(status.checkpoints.iter().any(|c| c.id > 2 && c.status == CheckpointStatus::Completed));
    assert_eq!(
        rows(&log.committed()),
        expected_counts(&[&a, &b]),
        "the aborted checkpoint's records are committed by the next"
    );
    // Incremental: the changes checkpoint 2 held were never written, so the subtask that
    // failed wrote its whole table again after it, and each later chain starts there; the
    // final checkpoint's chains merge to the final counts.
    let completed = store.completed_checkpoints().await.unwrap();
    let after: Vec<u64> = completed.iter().copied().filter(|&id| id > 2).collect();
    let rebased = store.manifest(after[0]).await.unwrap();
    let chains: Vec<Vec<StateFile>> = (0..2)
        .map(|subtask| {
            rebased.files.iter().filter(|f| f.operator == "count" && f.subtask == subtask).cloned().collect()
        })
        .collect();
    assert!(
        chains.iter().any(|chain| chain[0].role == FileRole::Full && chain[0].written_by() > Some(2)),
        "no chain was rebased after the failed write: {chains:?}"
    );
    let last = store.manifest(*completed.last().unwrap()).await.unwrap();
    assert!(last.files.iter().any(|f| f.role == FileRole::Upserts), "the final checkpoint has no changes: {last:?}");
    let mut finals = std::collections::BTreeMap::new();
    for line in expected_counts(&[&a, &b]) {
        let (key, count) = line.split_once(", count=").unwrap();
        let (key, count) = (key.trim_start_matches("key="), count.parse::<i64>().unwrap());
        let entry = finals.entry(key.to_string()).or_insert(0);
        *entry = count.max(*entry);
    }
    let mut merged = std::collections::BTreeMap::new();
    for subtask in 0..2 {
        let chain: Vec<StateFile> =
            last.files.iter().filter(|f| f.operator == "count" && f.subtask == subtask).cloned().collect();
        for batch in store.read_chain(&chain).await.unwrap() {
            let keys = batch.column_by_name("key").unwrap().as_string::<i32>().clone();
            let counts = batch.column_by_name("count").unwrap().as_primitive::<Int64Type>().clone();
            for row in 0..batch.num_rows() {
                assert!(merged.insert(keys.value(row).to_string(), counts.value(row)).is_none(), "a key twice");
            }
        }
    }
    assert_eq!(merged, finals);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_at_parallelism_three_from_a_checkpoint_at_two_gives_the_same_output() {
    let mut a = spec("a", 21, 6, 400, 20);
    let mut b = spec("b", 22, 6, 400, 20);
    a.delay_per_batch = vec![Duration::from_millis(1); 3];
    b.delay_per_batch = vec![Duration::from_millis(1); 3];
    let log = TxnLog::new();
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::local(dir.path()).unwrap();
    let graph = keyed_count_graph(&a, &b, 2, &log);
    let mode = CheckpointMode::Unaligned;
    let first = start(graph.clone(), config(mode, 10), store.clone()).unwrap();
    await_completed(&first, 3, Duration::from_secs(20)).await;
    first.kill().await;
    let taken_at_two = store.latest_manifest().await.unwrap().unwrap();
    assert_eq!(taken_at_two.parallelism.get("count"), Some(&2));

    let second = start(graph.with_parallelism(3), config(mode, 10), store.clone()).unwrap();
    let status = finish(second).await;
    assert_eq!(status.restored_from, Some(taken_at_two.checkpoint_id));
    assert_eq!(status.state, PipelineState::Finished);
    assert_eq!(rows(&log.committed()), expected_counts(&[&a, &b]));
    assert_eq!(log.unresolved(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_last_k_checkpoints_are_kept() {
    let a = spec("a", 31, 2, 500, 10);
    let mut b = spec("b", 32, 2, 500, 10);
    b.delay_per_batch = vec![Duration::from_millis(1); 2];
    let log = TxnLog::new();
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::local(dir.path()).unwrap();
    let mut config = config(CheckpointMode::Aligned, 10);
    config.checkpoint.retained = 2;
    let status = finish(start(keyed_count_graph(&a, &b, 2, &log), config, store.clone()).unwrap()).await;
    let completed: Vec<u64> =
        status.checkpoints.iter().filter(|c| c.status == CheckpointStatus::Completed).map(|c| c.id).collect();
    assert!(completed.len() > 4, "{completed:?}");
    let kept = store.completed_checkpoints().await.unwrap();
    assert_eq!(kept, completed[completed.len() - 2..].to_vec());
    // Incremental checkpoints: a kept checkpoint's chains reach back into older checkpoints'
    // directories, and exactly the files the kept manifests name are left (besides compacted
    // files a later checkpoint may still adopt).
    let mut named = std::collections::BTreeSet::new();
    let mut shared = 0;
    for &id in &kept {
        let manifest = store.manifest(id).await.unwrap();
        shared += manifest.files.iter().filter(|f| f.written_by() < Some(id)).count();
        named.extend(manifest.files.into_iter().map(|f| f.path));
    }
    assert!(shared > 0, "no kept checkpoint shares a file with an older one");
    let mut left = Vec::new();
    list_files(&dir.path().join("checkpoints"), "checkpoints", &mut left);
    let unnamed: Vec<&String> = left.iter().filter(|f| !named.contains(*f) && !compacted(f)).collect();
    assert!(unnamed.is_empty(), "files no kept checkpoint names: {unnamed:?}");
    assert!(named.iter().all(|f| left.contains(f)), "a named file is gone: {named:?} {left:?}");
}

/// Whether a state file is a compaction's: a chain's new base, or its changes merged.
fn compacted(path: &str) -> bool {
    [".base.parquet", ".changes.parquet", ".changes.deletes.parquet"].iter().any(|suffix| path.ends_with(suffix))
}

/// The counts a checkpoint's chains of the counter hold, by key (every file read and merged
/// as a restore reads them).
async fn counts_at(store: &StateStore, checkpoint: u64) -> std::collections::BTreeMap<String, i64> {
    let manifest = store.manifest(checkpoint).await.unwrap();
    let mut counts = std::collections::BTreeMap::new();
    for subtask in 0..manifest.parallelism["count"] {
        let chain: Vec<StateFile> =
            manifest.files.iter().filter(|f| f.operator == "count" && f.subtask == subtask).cloned().collect();
        for batch in store.read_chain(&chain).await.unwrap() {
            let keys = batch.column_by_name("key").unwrap().as_string::<i32>().clone();
            let values = batch.column_by_name("count").unwrap().as_primitive::<Int64Type>().clone();
            for row in 0..batch.num_rows() {
                assert!(counts.insert(keys.value(row).to_string(), values.value(row)).is_none(), "a key twice");
            }
        }
    }
    counts
}

/// Incremental checkpoints over a long run: chains are compacted many times (their changes
/// merged: the counter changes the same keys again and again) and retention
/// deletes what the expired checkpoints alone named, yet every retained checkpoint reads back
/// whole (its counts never behind an older one's), and a restore from the oldest retained one
/// goes on exactly from the counts it holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_retained_checkpoint_restores_after_many_compactions() {
    let a = spec("a", 41, 2, 1500, 10);
    let mut b = spec("b", 42, 2, 1500, 10);
    b.delay_per_batch = vec![Duration::from_millis(2); 2];
    let log = TxnLog::new();
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::local(dir.path()).unwrap();
    let mut config = config(CheckpointMode::Aligned, 5);
    config.checkpoint.retained = 4;
    let graph = keyed_count_graph(&a, &b, 2, &log);
    let status = finish(start(graph.clone(), config.clone(), store.clone()).unwrap()).await;
    let completed = status.checkpoints.iter().filter(|c| c.status == CheckpointStatus::Completed).count();
    assert!(completed > 15, "only {completed} checkpoints");
    let kept = store.completed_checkpoints().await.unwrap();
    assert_eq!(kept.len(), 4);
    let mut bases = std::collections::BTreeSet::new();
    let mut previous: Option<std::collections::BTreeMap<String, i64>> = None;
    for &id in &kept {
        let manifest = store.manifest(id).await.unwrap();
        bases.extend(manifest.files.iter().filter(|f| compacted(&f.path)).map(|f| f.path.clone()));
        let counts = counts_at(&store, id).await;
        if let Some(previous) = &previous {
            assert!(
                previous.iter().all(|(key, n)| counts.get(key).is_some_and(|m| m >= n)),
                "checkpoint {id} is behind"
            );
        }
        previous = Some(counts);
    }
    assert!(!bases.is_empty(), "no retained checkpoint stands on a compaction");
    let mut left = Vec::new();
    list_files(&dir.path().join("checkpoints"), "checkpoints", &mut left);
    let compacted_left = left.iter().filter(|f| compacted(f)).count();
    assert!(compacted_left < 20, "{compacted_left} compacted files left: old ones are not deleted");

    // Restored from the oldest retained checkpoint, the run commits each key's counts after
    // the one that checkpoint holds, and nothing else.
    let oldest = kept[0];
    let restored_counts = counts_at(&store, oldest).await;
    let before = log.committed().len();
    let mut restore = config;
    restore.restore_from = Some(oldest);
    let status = finish(start(graph, restore, store.clone()).unwrap()).await;
    assert_eq!(status.restored_from, Some(oldest));
    let mut again: Vec<String> = rows(&log.committed()[before..]);
    again.sort();
    let mut expected: Vec<String> = expected_counts(&[&a, &b])
        .into_iter()
        .filter(|line| {
            let (key, count) = line.split_once(", count=").unwrap();
            let had = restored_counts.get(key.trim_start_matches("key=")).copied().unwrap_or(0);
            count.parse::<i64>().unwrap() > had
        })
        .collect();
    expected.sort();
    assert!(!expected.is_empty(), "the oldest retained checkpoint is the end of the input: make the run longer");
    assert_eq!(again, expected);
}

/// Restarted at the parallelism of its checkpoint, each subtask's state is exactly its own
/// chains', so its first checkpoint writes changes on top of them rather than the whole state
/// again (what a large state would pay after every crash); restarted at another parallelism
/// the state was re-split, and the first checkpoint is full. Both give the exact output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_at_the_same_parallelism_goes_on_from_its_chains() {
    let mut a = spec("a", 61, 2, 1200, 10);
    let mut b = spec("b", 62, 2, 1200, 10);
    a.delay_per_batch = vec![Duration::from_millis(1); 2];
    b.delay_per_batch = vec![Duration::from_millis(1); 2];
    let log = TxnLog::new();
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::local(dir.path()).unwrap();
    let graph = keyed_count_graph(&a, &b, 2, &log);
    let first_completed = |handle: &weir_engine::PipelineHandle, after: u64| {
        let status = handle.status();
        status.checkpoints.into_iter().find(|c| c.status == CheckpointStatus::Completed && c.id > after)
    };
    for parallelism in [2, 2, 3] {
        let handle =
            start(graph.with_parallelism(parallelism), config(CheckpointMode::Aligned, 10), store.clone()).unwrap();
        let restored = store.latest_manifest().await.unwrap().map_or(0, |m| m.checkpoint_id);
        await_completed(&handle, 3, Duration::from_secs(20)).await;
        let first = first_completed(&handle, restored).unwrap();
        let manifest = store.manifest(first.id).await.unwrap();
        let counts: Vec<&StateFile> = manifest.files.iter().filter(|f| f.operator == "count").collect();
        let inherited = counts.iter().filter(|f| f.written_by().is_some_and(|by| by <= restored)).count();
        match (restored, parallelism) {
            (0, _) | (_, 3) => assert_eq!(inherited, 0, "a full first snapshot: {counts:?}"),
            _ => {
                assert!(inherited >= 2, "each subtask's chain goes on: {counts:?}");
                assert!(counts.iter().any(|f| f.role == FileRole::Upserts && f.written_by() == Some(first.id)));
                assert!(first.written_bytes < first.state_bytes, "{first:?}");
            }
        }
        if parallelism == 3 {
            finish(handle).await;
        } else {
            handle.kill().await;
        }
    }
    assert_eq!(rows(&log.committed()), expected_counts(&[&a, &b]));
    assert_eq!(log.unresolved(), 0);
}

/// The paths (relative to the store, as manifests name them) of the files under `dir`.
fn list_files(dir: &std::path::Path, relative: &str, into: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let path = format!("{relative}/{}", entry.file_name().to_string_lossy());
        if entry.file_type().unwrap().is_dir() {
            list_files(&entry.path(), &path, into);
        } else {
            into.push(path);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_records_and_back_pressure() {
    let source = spec("source", 41, 1, 1_000, 10);
    let log = TxnLog::new();
    let graph = throttled_graph(&source, Duration::from_millis(2), &log);
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(CheckpointMode::Aligned, 50);
    config.channel.max_batches = 4;
    let handle = start(graph, config, StateStore::local(dir.path()).unwrap()).unwrap();
    while !handle.is_finished() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let metrics = handle.metrics();
    handle.wait().await.unwrap();
    let operators = metrics.operators();
    let of = |name: &str| operators.iter().find(|o| o.operator == name).unwrap().clone();
    assert_eq!(of("source").records_out, 1_000);
    assert_eq!(of("throttle").records_in, 1_000);
    assert_eq!(of("throttle").records_out, 1_000);
    assert_eq!(of("sink").records_in, 1_000);
    assert!(of("source").backpressure_ms > 0, "the source waited on the throttle: {operators:?}");
    let channels = metrics.channels();
    assert_eq!(channels.len(), 1, "throttle -> sink is fused: {channels:?}");
    assert_eq!((channels[0].from.as_str(), channels[0].to.as_str()), ("source", "throttle"));
    assert_eq!(channels[0].records, 1_000);
    assert!(channels[0].bytes > 0 && channels[0].blocked_ms > 0, "{channels:?}");
    assert_eq!(channels[0].queued_batches, 0, "drained at the end");
}

/// A stop with a savepoint: one more checkpoint completes and is committed, the pipeline ends
/// as Stopped with nothing left open, and a later start resumes from that savepoint to an
/// output that has every record exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_with_a_savepoint_commits_it_and_a_restart_resumes_from_it() {
    let mut a = spec("a", 41, 2, 600, 20);
    let mut b = spec("b", 42, 2, 600, 20);
    a.delay_per_batch = vec![Duration::from_millis(2); 2];
    b.delay_per_batch = vec![Duration::from_millis(2); 2];
    let log = TxnLog::new();
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::local(dir.path()).unwrap();
    let graph = keyed_count_graph(&a, &b, 2, &log);
    let first = start(graph.clone(), config(CheckpointMode::Aligned, 20), store.clone()).unwrap();
    await_completed(&first, 2, Duration::from_secs(20)).await;
    let before = first.status().checkpoints.iter().filter(|c| c.status == CheckpointStatus::Completed).count();
    assert_eq!(first.status().state, PipelineState::Running);
    tokio::time::timeout(Duration::from_secs(20), first.stop()).await.expect("the stop finished").unwrap();
    let savepoint = store.latest_manifest().await.unwrap().unwrap();
    assert!(savepoint.checkpoint_id as usize >= before, "a savepoint was taken");
    assert_eq!(log.unresolved(), 0, "the savepoint is committed and nothing is left open");
    assert!(!log.committed().is_empty());

    let second = start(graph, config(CheckpointMode::Aligned, 20), store.clone()).unwrap();
    let status = finish(second).await;
    assert_eq!(status.restored_from, Some(savepoint.checkpoint_id));
    assert_eq!(rows(&log.committed()), expected_counts(&[&a, &b]));
}

/// Fails for good at its first batch, as a Kafka source does at a bad record under
/// `bad_records = 'fail'`.
#[derive(Default)]
struct FailsForGood(Option<weir_engine::SubtaskInfo>);

#[async_trait::async_trait]
impl weir_engine::Operator for FailsForGood {
    async fn open(
        &mut self,
        info: &weir_engine::SubtaskInfo,
        _: weir_engine::RestoredState,
    ) -> weir_engine::Result<()> {
        self.0 = Some(info.clone());
        Ok(())
    }

    async fn process_batch(
        &mut self,
        _: usize,
        _: RecordBatch,
        _: &mut weir_engine::Collector,
    ) -> weir_engine::Result<()> {
        let info = self.0.as_ref().expect("opened");
        Err(info.fatal("this record can never be read"))
    }
}

/// A fatal error ends the pipeline at once, reported as itself. A failing task closes its event
/// line as it returns, before its error is joined; the coordinator once reported that as
/// "every task is gone", an ordinary failure, and restarted into the same error forever. On
/// one thread the two are seen together, so a few runs catch the old race.
#[tokio::test(flavor = "current_thread")]
async fn a_fatal_error_fails_the_pipeline_without_restarts() {
    for seed in 0..8 {
        let mut graph = Graph::new();
        let source = source_node(&mut graph, &spec("source", seed, 1, 100, 10), 1);
        let fails = graph.add_operator("fails", 1, 1, Arc::new(|_| Ok(Box::new(FailsForGood::default()))));
        graph.connect(source, fails, 0, Partitioning::Forward);
        let dir = tempfile::tempdir().unwrap();
        let handle = start(graph, config(CheckpointMode::Aligned, 10), StateStore::local(dir.path()).unwrap()).unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !handle.is_finished() {
            assert!(tokio::time::Instant::now() < deadline, "still running after a fatal error: {:?}", handle.status());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let status = handle.status();
        let error = handle.wait().await.unwrap_err();
        assert!(error.to_string().contains("this record can never be read"), "{error}");
        assert_eq!((status.state, status.restarts), (PipelineState::Failed, 0), "{status:?}");
    }
}

/// A newest manifest that is garbage (a torn write, a disk that lied) fails the restore for good,
/// naming the file and what the user can do, rather than restoring an older checkpoint behind
/// their back (its sinks may have committed the newest one's transactions already); an explicit
/// restore of the older one then runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_newest_manifest_is_reported_not_skipped() {
    let mut a = spec("a", 51, 2, 400, 20);
    a.delay_per_batch = vec![Duration::from_millis(2); 2];
    let b = spec("b", 52, 2, 10, 10);
    let log = TxnLog::new();
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::local(dir.path()).unwrap();
    let graph = keyed_count_graph(&a, &b, 2, &log);
    let first = start(graph.clone(), config(CheckpointMode::Aligned, 20), store.clone()).unwrap();
    await_completed(&first, 2, Duration::from_secs(20)).await;
    first.kill().await;
    // A manifest the killed run was writing lands first: corrupting the one before it would
    // leave a newer, good one to restore (seen once on a loaded machine).
    store.settled().await;
    let completed = store.completed_checkpoints().await.unwrap();
    let (newest, previous) = (completed[completed.len() - 1], completed[completed.len() - 2]);
    let location = store.manifest_location(newest);
    let json = std::fs::read_to_string(&location).unwrap();
    std::fs::write(&location, &json[..json.len() / 2]).unwrap();

    let second = start(graph.clone(), config(CheckpointMode::Aligned, 20), store.clone()).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !second.is_finished() {
        assert!(tokio::time::Instant::now() < deadline, "still running: {:?}", second.status());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let status = second.status();
    let error = second.wait().await.unwrap_err().to_string();
    assert_eq!((status.state, status.restarts), (PipelineState::Failed, 0), "{status:?}");
    assert!(error.contains(&format!("manifest {location} cannot be read")), "{error}");
    assert!(error.contains(&format!("RESUME PIPELINE n FROM CHECKPOINT {previous}")), "{error}");

    let mut explicit = config(CheckpointMode::Aligned, 20);
    explicit.restore_from = Some(previous);
    let status = finish(start(graph, explicit, store.clone()).unwrap()).await;
    assert_eq!(status.restored_from, Some(previous));
}

/// Counts opens and closes of a [`Probe`]; `open_delay` stands for a slow recovery.
#[derive(Default)]
struct ProbeCounts {
    opened: std::sync::atomic::AtomicUsize,
    closed: std::sync::atomic::AtomicUsize,
}

struct Probe {
    counts: Arc<ProbeCounts>,
    open_delay: Duration,
}

#[async_trait::async_trait]
impl weir_engine::Operator for Probe {
    async fn open(&mut self, _: &weir_engine::SubtaskInfo, _: weir_engine::RestoredState) -> weir_engine::Result<()> {
        tokio::time::sleep(self.open_delay).await;
        self.counts.opened.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    async fn process_batch(
        &mut self,
        _: usize,
        batch: RecordBatch,
        out: &mut weir_engine::Collector,
    ) -> weir_engine::Result<()> {
        out.emit(batch);
        Ok(())
    }

    async fn close(&mut self) -> weir_engine::Result<()> {
        self.counts.closed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

/// Fails for good when opened, as a sink whose pending transaction cannot be committed does.
struct FatalAtOpen;

#[async_trait::async_trait]
impl weir_engine::Operator for FatalAtOpen {
    async fn open(
        &mut self,
        info: &weir_engine::SubtaskInfo,
        _: weir_engine::RestoredState,
    ) -> weir_engine::Result<()> {
        Err(info.fatal("the pending transaction cannot be committed"))
    }

    async fn process_batch(
        &mut self,
        _: usize,
        _: RecordBatch,
        _: &mut weir_engine::Collector,
    ) -> weir_engine::Result<()> {
        Ok(())
    }
}

/// One operator failing for good at open does not cut the others' recovery short: the operator
/// chained after it still opens (and closes), and a slow-to-open operator of another task
/// finishes opening and closes before the pipeline reports the fatal error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fatal_open_lets_every_other_operator_finish_opening_and_close() {
    let source = spec("source", 21, 2, 100, 10);
    let (chained, other_task) = (Arc::new(ProbeCounts::default()), Arc::new(ProbeCounts::default()));
    let mut graph = Graph::new();
    let source_id = source_node(&mut graph, &source, 2);
    let fatal = graph.add_operator("fatal", 2, 1, Arc::new(|_| Ok(Box::new(FatalAtOpen))));
    graph.connect(source_id, fatal, 0, Partitioning::Forward);
    let counts = chained.clone();
    let after = graph.add_operator(
        "after_fatal",
        2,
        1,
        Arc::new(move |_| Ok(Box::new(Probe { counts: counts.clone(), open_delay: Duration::ZERO }))),
    );
    graph.connect(fatal, after, 0, Partitioning::Forward);
    let counts = other_task.clone();
    let slow = graph.add_operator(
        "slow_recovery",
        1,
        1,
        Arc::new(move |_| Ok(Box::new(Probe { counts: counts.clone(), open_delay: Duration::from_millis(500) }))),
    );
    graph.connect(after, slow, 0, Partitioning::RoundRobin);
    let dir = tempfile::tempdir().unwrap();
    let handle = start(graph, config(CheckpointMode::Aligned, 10), StateStore::local(dir.path()).unwrap()).unwrap();
    let error = tokio::time::timeout(Duration::from_secs(30), handle.wait()).await.unwrap().unwrap_err();
    assert!(error.to_string().contains("cannot be committed"), "{error}");
    let load = |c: &std::sync::atomic::AtomicUsize| c.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!((load(&chained.opened), load(&chained.closed)), (2, 2), "the operators chained after the failed one");
    assert_eq!((load(&other_task.opened), load(&other_task.closed)), (1, 1), "the slow operator of another task");
}
