//! The runtime's benchmark: prints numbers, asserts nothing.
//!
//! 1. Throughput (records/s) of source -> hash(key) -> keyed count -> sink at parallelism 2, with
//!    checkpoints off and every second in each mode.
//! 2. Under back-pressure (a slow stage behind a full queue), the median duration of 20
//!    checkpoints, aligned against unaligned.
//!
//! cargo run --profile bench-fast -p weir-engine --features testkit --example runtime_bench [records]

// A benchmark stops at its first error, with the reason.
#![allow(clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use weir_engine::operators::Blackhole;
use weir_engine::testkit::{KeyedCounter, ReplayableSource, SourceSpec, Throttle, cpu_seconds};
use weir_engine::{CheckpointConfig, CheckpointMode, CheckpointStatus, Graph, Partitioning, PipelineConfig, start};
use weir_state::StateStore;

fn spec(records: u64, batch_size: usize) -> SourceSpec {
    SourceSpec {
        seed: 42,
        name: "source".into(),
        splits: 4,
        records_per_split: records / 4,
        batch_size,
        keys: 10_000,
        delay_per_batch: Vec::new(),
    }
}

fn keyed_count(spec: &SourceSpec) -> Graph {
    let mut graph = Graph::new();
    let spec = spec.clone();
    let source = graph.add_source("source", 2, Arc::new(move |_| Ok(Box::new(ReplayableSource::new(spec.clone())))));
    let count = graph.add_operator("count", 2, 1, Arc::new(|_| Ok(Box::new(KeyedCounter::new("key")))));
    graph.connect(source, count, 0, Partitioning::Hash(vec!["key".into()]));
    let sink = graph.add_operator("sink", 2, 1, Arc::new(|_| Ok(Box::new(Blackhole))));
    graph.connect(count, sink, 0, Partitioning::Forward);
    graph
}

fn config(interval: Option<Duration>, mode: CheckpointMode) -> PipelineConfig {
    PipelineConfig {
        checkpoint: CheckpointConfig { interval, mode, ..CheckpointConfig::default() },
        ..PipelineConfig::default()
    }
}

/// Records/s of wall-clock time and records per CPU-second of one run.
async fn one_run(records: u64, label: &str, interval: Option<Duration>, mode: CheckpointMode) -> (f64, f64) {
    let cpu_before = cpu_seconds();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = StateStore::local(dir.path()).expect("a state store");
    let started = Instant::now();
    let handle = start(keyed_count(&spec(records, 1000)), config(interval, mode), store).expect("a valid graph");
    let status = {
        while !handle.is_finished() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        handle.status()
    };
    handle.wait().await.expect("the run succeeds");
    let seconds = started.elapsed().as_secs_f64();
    let completed = status.checkpoints.iter().filter(|c| c.status == CheckpointStatus::Completed).count();
    let rate = records as f64 / seconds;
    let cpu = cpu_seconds() - cpu_before;
    let per_cpu = records as f64 / cpu.max(0.01);
    println!(
        "  {label:<26} {rate:>12.0} records/s  {per_cpu:>12.0} records/cpu-s  ({records} records in {seconds:.2} s, {cpu:.2} cpu-s, {completed} checkpoints)"
    );
    (rate, per_cpu)
}

async fn back_pressured_checkpoints(label: &str, mode: CheckpointMode) -> u64 {
    let spec = spec(1_000_000, 100);
    let mut graph = Graph::new();
    let source = graph.add_source("source", 1, Arc::new(move |_| Ok(Box::new(ReplayableSource::new(spec.clone())))));
    let throttle = graph.add_operator("throttle", 1, 1, Arc::new(|_| Ok(Box::new(Throttle(Duration::from_millis(2))))));
    graph.connect(source, throttle, 0, Partitioning::RoundRobin);
    let sink = graph.add_operator("sink", 1, 1, Arc::new(|_| Ok(Box::new(Blackhole))));
    graph.connect(throttle, sink, 0, Partitioning::Forward);
    let mut config = config(Some(Duration::from_millis(300)), mode);
    config.channel.max_batches = 64;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let handle = start(graph, config, StateStore::local(dir.path()).expect("a state store")).expect("a valid graph");
    let mut durations = loop {
        let status = handle.status();
        let durations: Vec<u64> = status
            .checkpoints
            .iter()
            .filter(|c| c.status == CheckpointStatus::Completed)
            .map(|c| c.duration_ms)
            .collect();
        if durations.len() >= 20 {
            break durations;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    handle.kill().await;
    durations.truncate(20);
    durations.sort_unstable();
    let median = durations[durations.len() / 2];
    println!(
        "{label:<28} median {median:>5} ms over 20 checkpoints (min {}, max {}); queue: 64 batches x 2 ms",
        durations[0], durations[19]
    );
    median
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let records: u64 = std::env::args().nth(1).and_then(|n| n.parse().ok()).unwrap_or(60_000_000);
    println!("source -> hash(key) -> keyed count -> sink, parallelism 2, batches of 1000, 10000 keys");
    let every = Some(Duration::from_secs(1));
    let modes: [(&str, Option<Duration>, CheckpointMode); 5] = [
        ("checkpoints off", None, CheckpointMode::Aligned),
        ("aligned, every 1 s", every, CheckpointMode::Aligned),
        ("unaligned, every 1 s", every, CheckpointMode::Unaligned),
        ("aligned_timeout 100ms, 1 s", every, CheckpointMode::AlignedTimeout(Duration::from_millis(100))),
        ("at-least-once, every 1 s", every, CheckpointMode::AtLeastOnce),
    ];
    // Rounds of every mode in turn, so a machine that slows down over time slows all alike.
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    let mut per_cpu: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    for _ in 0..3 {
        for (index, (label, interval, mode)) in modes.iter().enumerate() {
            let (rate, efficiency) = one_run(records, label, *interval, *mode).await;
            rates[index].push(rate);
            per_cpu[index].push(efficiency);
        }
    }
    println!();
    let median = |values: &mut Vec<f64>| {
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    let medians: Vec<f64> = rates.iter_mut().map(median).collect();
    let cpu_medians: Vec<f64> = per_cpu.iter_mut().map(median).collect();
    println!("medians of 3 (change against checkpoints off):");
    for (((label, _, _), rate), cpu) in modes.iter().zip(&medians).zip(&cpu_medians) {
        println!(
            "{label:<28} {rate:>12.0} records/s ({:>+6.1} %)  {cpu:>12.0} records/cpu-s ({:>+6.1} %)",
            (rate / medians[0] - 1.0) * 100.0,
            (cpu / cpu_medians[0] - 1.0) * 100.0
        );
    }
    println!();
    println!("under back-pressure: source -> throttle (2 ms a batch, 64-batch queue) -> sink, checkpoint every 300 ms");
    let aligned = back_pressured_checkpoints("aligned", CheckpointMode::Aligned).await;
    let unaligned = back_pressured_checkpoints("unaligned", CheckpointMode::Unaligned).await;
    println!("unaligned / aligned: {:.3}", unaligned as f64 / aligned.max(1) as f64);
}
