//! At-least-once: no input is ever blocked, so a snapshot may include records after the
//! barrier of a fast input; after a failure those are processed again: duplicates, no loss.

use std::collections::HashMap;
use std::sync::Arc;

use weir_engine::testkit::{Delivery, TxnLog, rows};
use weir_engine::{CheckpointMode, CheckpointStatus, FailureInjector, FailurePoint, start_with_failures};
use weir_state::StateStore;

use crate::aligned::{fast_and_slow, position, seen};
use crate::harness::{config, finish};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_once_never_blocks_and_recovers_with_duplicates_but_no_loss() {
    let log = TxnLog::new();
    let (graph, fast, slow) = fast_and_slow(&log, Delivery::AtLeastOnce);

    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::local(dir.path()).unwrap();
    let mut config = config(CheckpointMode::AtLeastOnce, 20);
    config.checkpoint.retained = 100;
    // Fails once, well after the first checkpoints.
    let injector =
        Arc::new(FailureInjector::new([FailurePoint::Batch { operator: "recorder".into(), subtask: 0, nth: 150 }]));
    let handle = start_with_failures(graph, config, store.clone(), injector.clone()).unwrap();
    let status = finish(handle).await;
    assert!(injector.all_fired());
    assert_eq!(status.restarts, 1);
    assert_eq!(status.attempts, 2);
    assert_eq!(status.errors.len(), 1);
    assert!(status.errors[0].message.contains("injected failure: recorder[0] at batch 150"), "{:?}", status.errors);
    assert!(status.restored_from.is_some(), "the second attempt restored a checkpoint");

    // Never blocked: some snapshot holds records the fast input sent after its barrier.
    let mut ahead = 0;
    for checkpoint in status.checkpoints.iter().filter(|c| c.status == CheckpointStatus::Completed) {
        let manifest = store.manifest(checkpoint.id).await.unwrap();
        let fast_position = position(&store, &manifest, "fast").await;
        let seen = seen(&store.read_table(&manifest, "recorder", "seen").await.unwrap());
        ahead += seen.iter().filter(|(source, offset)| source == "fast" && *offset >= fast_position).count();
    }
    assert!(ahead > 0, "no snapshot included a record after the fast input's barrier");

    // Every record at least once, some more than once.
    let committed = rows(&log.committed());
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for row in &committed {
        *counts.entry(row.as_str()).or_default() += 1;
    }
    let expected: Vec<String> = [crate::harness::source_rows(&fast), crate::harness::source_rows(&slow)].concat();
    for row in &expected {
        assert!(counts.contains_key(row.as_str()), "lost: {row}");
    }
    assert_eq!(counts.len(), expected.len(), "nothing but the expected records");
    assert!(committed.len() > expected.len(), "the replay after the failure produced duplicates");
}
