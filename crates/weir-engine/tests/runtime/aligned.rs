//! Aligned checkpoints: with a fast and a slow input, snapshot n of the two-input operator
//! holds exactly the records before barrier n on each input, nothing after it.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::{Array, StringArray, UInt32Array, UInt64Array};
use datafusion::arrow::record_batch::RecordBatch;
use weir_engine::testkit::{Delivery, Recorder, SourceSpec, TxnLog};
use weir_engine::{CheckpointMode, CheckpointStatus, Graph, Partitioning, start};
use weir_state::{Manifest, StateStore};

use crate::harness::{config, sink_node, source_node, spec};

/// (source, offset) pairs in the recorder's "seen" table.
pub fn seen(batches: &[RecordBatch]) -> BTreeSet<(String, u64)> {
    let mut seen = BTreeSet::new();
    for batch in batches {
        let sources = batch.column(1).as_any().downcast_ref::<StringArray>().unwrap();
        let offsets = batch.column(3).as_any().downcast_ref::<UInt64Array>().unwrap();
        for row in 0..batch.num_rows() {
            seen.insert((sources.value(row).to_string(), offsets.value(row)));
        }
    }
    seen
}

/// The single split's next offset in a source's snapshot.
pub async fn position(store: &StateStore, manifest: &Manifest, source: &str) -> u64 {
    let batches = store.read_table(manifest, source, "positions").await.unwrap();
    let splits = batches[0].column(0).as_any().downcast_ref::<UInt32Array>().unwrap();
    assert_eq!(splits.value(0), 0);
    batches[0].column(1).as_any().downcast_ref::<UInt64Array>().unwrap().value(0)
}

/// fast (1 ms a batch) and slow (8 ms a batch) -> recorder (two inputs) -> sink.
pub fn fast_and_slow(log: &TxnLog, delivery: Delivery) -> (Graph, SourceSpec, SourceSpec) {
    let mut fast = spec("fast", 1, 1, 2_000, 10);
    fast.delay_per_batch = vec![Duration::from_millis(1)];
    let mut slow = spec("slow", 2, 1, 300, 10);
    slow.delay_per_batch = vec![Duration::from_millis(8)];
    let mut graph = Graph::new();
    let fast_node = source_node(&mut graph, &fast, 1);
    let slow_node = source_node(&mut graph, &slow, 1);
    let recorder = graph.add_operator("recorder", 1, 2, Arc::new(|_| Ok(Box::new(Recorder::new()))));
    graph.connect(fast_node, recorder, 0, Partitioning::Forward);
    graph.connect(slow_node, recorder, 1, Partitioning::Forward);
    let sink = sink_node(&mut graph, "sink", 1, log, delivery);
    graph.connect(recorder, sink, 0, Partitioning::Forward);
    (graph, fast, slow)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aligned_snapshot_holds_nothing_after_the_barrier_of_the_fast_input() {
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::local(dir.path()).unwrap();
    let mut config = config(CheckpointMode::Aligned, 20);
    config.checkpoint.retained = 100;
    let log = TxnLog::new();
    let (graph, _, _) = fast_and_slow(&log, Delivery::ExactlyOnce);
    let handle = start(graph, config, store.clone()).unwrap();
    let status = crate::harness::finish(handle).await;
    let completed: Vec<_> = status.checkpoints.iter().filter(|c| c.status == CheckpointStatus::Completed).collect();
    assert!(completed.len() >= 3, "{status:?}");
    let mut partial = 0;
    for checkpoint in completed {
        let manifest = store.manifest(checkpoint.id).await.unwrap();
        let fast_position = position(&store, &manifest, "fast").await;
        let slow_position = position(&store, &manifest, "slow").await;
        let seen = seen(&store.read_table(&manifest, "recorder", "seen").await.unwrap());
        let expected: BTreeSet<(String, u64)> = (0..fast_position)
            .map(|o| ("fast".to_string(), o))
            .chain((0..slow_position).map(|o| ("slow".to_string(), o)))
            .collect();
        assert_eq!(
            seen.len(),
            expected.len(),
            "checkpoint {}: fast at {fast_position}, slow at {slow_position}",
            checkpoint.id
        );
        assert_eq!(seen, expected, "checkpoint {}: exactly the records before the barriers", checkpoint.id);
        partial += usize::from(fast_position < 2_000 && slow_position < 300);
    }
    assert!(partial >= 1, "some checkpoint was taken mid-stream on both inputs");
}
