//! Exactly-once under failure: a keyed count over two sources at parallelism 2, failures at
//! random batches and at every named step of the checkpoint protocol, over many seeded runs.
//! The committed output must equal the failure-free output record for record.

use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use weir_engine::testkit::{TxnLog, rows};
use weir_engine::{CheckpointMode, FailureInjector, FailurePoint, Step, start_with_failures};
use weir_state::StateStore;

use crate::harness::{config, expected_counts, keyed_count_graph, spec};

const RUNS: u64 = 50;

fn random_failure(rng: &mut StdRng) -> FailurePoint {
    let checkpoint = Some(rng.random_range(1..=3));
    match rng.random_range(0..5) {
        0 => FailurePoint::Step { step: Step::AfterSnapshotBeforeAck, checkpoint, operator: None },
        1 => FailurePoint::Step { step: Step::AfterManifestBeforeNotify, checkpoint, operator: None },
        2 => FailurePoint::Step { step: Step::MidNotify, checkpoint, operator: None },
        _ => FailurePoint::Batch {
            operator: "count".into(),
            subtask: rng.random_range(0..2),
            nth: rng.random_range(1..80),
        },
    }
}

/// Runs to the end and checks the output; returns whether every injected failure fired.
async fn one_run(mode: CheckpointMode, seed: u64, failures: Vec<FailurePoint>) -> bool {
    let mut a = spec("a", seed, 4, 250, 25);
    let b = spec("b", seed + 1000, 3, 300, 30);
    // One slow subtask: barriers of its channels arrive late, so alignment matters. Its 20
    // batches take 80 ms, five checkpoint intervals, so the failures set for checkpoints 1 to
    // 3 meet them even on a loaded machine (at 1.5 ms a batch the run could end before
    // checkpoint 2).
    a.delay_per_batch = vec![Duration::ZERO, Duration::from_millis(4)];
    let log = TxnLog::new();
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::local(dir.path()).unwrap();
    let injector = Arc::new(FailureInjector::new(failures.clone()));
    let mut config = config(mode, 15);
    config.channel.max_batches = 4;
    let handle = start_with_failures(keyed_count_graph(&a, &b, 2, &log), config, store, injector.clone()).unwrap();
    tokio::time::timeout(Duration::from_secs(60), handle.wait())
        .await
        .unwrap_or_else(|_| panic!("seed {seed} {mode:?} {failures:?}: did not finish"))
        .unwrap_or_else(|e| panic!("seed {seed} {mode:?} {failures:?}: {e}"));
    let committed = rows(&log.committed());
    let expected = expected_counts(&[&a, &b]);
    if committed != expected {
        let missing = expected.iter().filter(|r| !committed.contains(r)).count();
        panic!(
            "seed {seed} {mode:?} {failures:?} (fired: {}): {} rows committed, {} expected, {missing} missing",
            injector.all_fired(),
            committed.len(),
            expected.len()
        );
    }
    assert_eq!(log.unresolved(), 0, "seed {seed}: every transaction resolved at the end");
    injector.all_fired()
}

async fn seeded_runs(mode: CheckpointMode, salt: u64) {
    let mut fired = 0;
    for seed in 0..RUNS {
        let mut rng = StdRng::seed_from_u64(seed * 7919 + salt);
        let mut failures = vec![random_failure(&mut rng)];
        if rng.random_bool(0.3) {
            failures.push(random_failure(&mut rng));
        }
        fired += usize::from(one_run(mode, seed, failures).await);
    }
    // A failure set for a checkpoint the run never reached does not fire; most must.
    assert!(fired as u64 >= RUNS * 3 / 4, "only {fired} of {RUNS} runs saw their failures");
}

/// Every named step at least once, deterministically, plus a batch failure in each subtask.
async fn each_named_step(mode: CheckpointMode) {
    let steps = [Step::AfterSnapshotBeforeAck, Step::AfterManifestBeforeNotify, Step::MidNotify];
    for (index, step) in steps.into_iter().enumerate() {
        let failure = FailurePoint::Step { step, checkpoint: Some(2), operator: None };
        assert!(one_run(mode, 100 + index as u64, vec![failure]).await, "{step:?} fired");
    }
    for subtask in 0..2 {
        let failure = FailurePoint::Batch { operator: "count".into(), subtask, nth: 30 };
        assert!(one_run(mode, 200 + subtask as u64, vec![failure]).await, "batch failure fired");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aligned_is_exactly_once_under_failures() {
    each_named_step(CheckpointMode::Aligned).await;
    seeded_runs(CheckpointMode::Aligned, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unaligned_is_exactly_once_under_failures() {
    each_named_step(CheckpointMode::Unaligned).await;
    seeded_runs(CheckpointMode::Unaligned, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aligned_timeout_is_exactly_once_under_failures() {
    let mode = CheckpointMode::AlignedTimeout(Duration::from_millis(2));
    each_named_step(mode).await;
    seeded_runs(mode, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_failures_the_output_is_the_expected_one_in_every_mode() {
    for mode in
        [CheckpointMode::Aligned, CheckpointMode::Unaligned, CheckpointMode::AlignedTimeout(Duration::from_millis(2))]
    {
        assert!(one_run(mode, 7, Vec::new()).await);
    }
}
