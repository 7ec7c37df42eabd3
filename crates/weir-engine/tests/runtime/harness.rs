//! Graphs and helpers the runtime tests share.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::{Array, StringArray};
use weir_engine::testkit::{Delivery, KeyedCounter, ReplayableSource, SourceSpec, Throttle, TxnLog};
use weir_engine::{
    CheckpointConfig, CheckpointMode, Graph, Partitioning, PipelineConfig, PipelineHandle, RestartPolicy,
};

pub fn spec(name: &str, seed: u64, splits: u32, records_per_split: u64, batch_size: usize) -> SourceSpec {
    SourceSpec {
        seed,
        name: name.to_string(),
        splits,
        records_per_split,
        batch_size,
        keys: 37,
        delay_per_batch: Vec::new(),
    }
}

pub fn config(mode: CheckpointMode, interval_ms: u64) -> PipelineConfig {
    PipelineConfig {
        checkpoint: CheckpointConfig {
            interval: Some(Duration::from_millis(interval_ms)),
            mode,
            max_concurrent: 1,
            timeout: Duration::from_secs(30),
            retained: 3,
            incremental: true,
        },
        restart: RestartPolicy {
            initial_backoff: Duration::from_millis(5),
            max_backoff: Duration::from_millis(50),
            max_restarts: Some(20),
        },
        ..PipelineConfig::default()
    }
}

pub fn source_node(graph: &mut Graph, spec: &SourceSpec, parallelism: usize) -> weir_engine::NodeId {
    let spec = spec.clone();
    graph.add_source(
        &spec.name.clone(),
        parallelism,
        Arc::new(move |_| Ok(Box::new(ReplayableSource::new(spec.clone())))),
    )
}

pub fn sink_node(
    graph: &mut Graph,
    name: &str,
    parallelism: usize,
    log: &TxnLog,
    delivery: Delivery,
) -> weir_engine::NodeId {
    let log = log.clone();
    graph.add_operator(name, parallelism, 1, Arc::new(move |_| Ok(Box::new(log.sink(delivery)))))
}

/// sources a and b -> hash(key) -> keyed count (two inputs) -> forward -> transactional sink.
pub fn keyed_count_graph(a: &SourceSpec, b: &SourceSpec, parallelism: usize, log: &TxnLog) -> Graph {
    let mut graph = Graph::new();
    let a = source_node(&mut graph, a, parallelism);
    let b = source_node(&mut graph, b, parallelism);
    let count = graph.add_operator("count", parallelism, 2, Arc::new(|_| Ok(Box::new(KeyedCounter::new("key")))));
    graph.connect(a, count, 0, Partitioning::Hash(vec!["key".into()]));
    graph.connect(b, count, 1, Partitioning::Hash(vec!["key".into()]));
    let sink = sink_node(&mut graph, "sink", parallelism, log, Delivery::ExactlyOnce);
    graph.connect(count, sink, 0, Partitioning::Forward);
    graph
}

/// What the keyed count emits without failures: for each key, one row per count 1..=n.
pub fn expected_counts(specs: &[&SourceSpec]) -> Vec<String> {
    let mut per_key: HashMap<String, i64> = HashMap::new();
    for spec in specs {
        let records = spec.all_records().unwrap();
        let keys = records.column_by_name("key").unwrap().as_any().downcast_ref::<StringArray>().unwrap();
        for key in keys.iter().flatten() {
            *per_key.entry(key.to_string()).or_default() += 1;
        }
    }
    let mut rows: Vec<String> =
        per_key.iter().flat_map(|(key, n)| (1..=*n).map(move |c| format!("key={key}, count={c}"))).collect();
    rows.sort();
    rows
}

/// Waits until the pipeline has completed `n` checkpoints in its current life.
pub async fn await_completed(handle: &PipelineHandle, n: usize, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let completed =
            handle.status().checkpoints.iter().filter(|c| c.status == weir_engine::CheckpointStatus::Completed).count();
        if completed >= n {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{n} checkpoints not completed in time: {:?}", handle.status());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// source -> (round-robin) throttle, `per_batch` a batch -> exactly-once sink into `log`.
pub fn throttled_graph(source: &SourceSpec, per_batch: Duration, log: &TxnLog) -> Graph {
    let mut graph = Graph::new();
    let source_id = source_node(&mut graph, source, 1);
    let throttle = graph.add_operator("throttle", 1, 1, Arc::new(move |_| Ok(Box::new(Throttle(per_batch)))));
    graph.connect(source_id, throttle, 0, Partitioning::RoundRobin);
    let sink = sink_node(&mut graph, "sink", 1, log, Delivery::ExactlyOnce);
    graph.connect(throttle, sink, 0, Partitioning::Forward);
    graph
}

/// The rows of the records `spec` produces, as the sink shows them.
pub fn source_rows(spec: &SourceSpec) -> Vec<String> {
    weir_engine::testkit::rows(&[spec.all_records().unwrap()])
}

/// Waits for a bounded pipeline to finish successfully and returns its final status.
pub async fn finish(handle: PipelineHandle) -> weir_engine::PipelineStatus {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !handle.is_finished() {
        assert!(tokio::time::Instant::now() < deadline, "did not finish: {:?}", handle.status());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let status = handle.status();
    handle.wait().await.unwrap_or_else(|e| panic!("failed: {e}; {status:?}"));
    status
}
