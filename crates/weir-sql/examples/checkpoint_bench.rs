//! What a checkpoint costs against the state's size, full snapshots against incremental ones
//! (a benchmark, not a test: it prints its numbers).
//!
//! ```text
//! cargo build --profile bench-fast -p weir-sql --example checkpoint_bench
//! target/bench-fast/examples/checkpoint_bench [seconds per run] [fill events] [variant filter]
//! ```
//! 1. Throughput: the updating aggregate `GROUP BY bid.bidder, bid.auction` (count, max price)
//!    over the Nexmark generator at full speed, parallelism 2, for the given seconds: without
//!    checkpoints, with full checkpoints every second, with incremental ones every second.
//! 2. A large state with few changes: the same aggregate over `fill events` generated as fast
//!    as possible, together with the same events again (same seed, so each updates a key the
//!    fill made) at 1% of the filled state's keys per second. Once filled: the CPU the
//!    updates take without checkpoints, with full ones and with incremental ones every second;
//!    every checkpoint's duration, state and bytes written; then what a restore reads (the
//!    latest checkpoint's files), and how long the pipeline started again takes
//!    to restore and complete its first checkpoint.
//! 3. Throughput on a large state whose changes are 1% of its keys per checkpoint:
//!    `SELECT k, count(*), max(v) FROM t GROUP BY k` over `fill events` rows of distinct keys
//!    (datagen, as fast as possible), together with rows at full speed whose keys are drawn from
//!    the first 1% of them. Once filled, and the given seconds more (so that the chains have
//!    taken in the fill's changes: compactions of a whole gigabyte run for a minute after it):
//!    the hot rows per second for the given seconds without checkpoints, with full ones and
//!    with incremental ones every second, and the checkpoints' durations and bytes.
//!
//! With `CHECKPOINT_BENCH_DIR` set (and one variant named) only part 2 runs, its checkpoints
//! kept there; a run that finds a checkpoint in it only measures the restore again, no fill.
//! `CHECKPOINT_BENCH_PARTS` (say `3`) runs only the parts it names.
//!
//! Prints numbers, asserts nothing; a setup that fails stops it with a message.

#![allow(clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use weir_engine::testkit::cpu_seconds;
use weir_engine::{CheckpointReport, CheckpointStatus, PipelineHandle};
use weir_sql::{Output, Session};
use weir_state::StateStore;

#[global_allocator]
static ALLOCATOR: weir_engine::allocator::Allocator = weir_engine::allocator::Allocator;

const AGGREGATE: &str = "SELECT bid.bidder, bid.auction, count(*) AS bids, max(bid.price) AS top FROM nx \
     WHERE event_type = 2 GROUP BY bid.bidder, bid.auction";

/// Each part's runs: a name (what the variant filter matches) and the settings it adds.
const VARIANTS: [(&str, &str); 3] = [
    ("no checkpoints", "SET checkpoint.interval = 'off';"),
    ("full", "SET checkpoint.interval = '1 s'; SET checkpoint.incremental = 'false';"),
    ("incremental", "SET checkpoint.interval = '1 s'; SET checkpoint.incremental = 'true';"),
];

#[tokio::main]
async fn main() {
    weir_engine::allocator::set_up();
    let mut args = std::env::args().skip(1);
    let seconds: u64 = args.next().map_or(30, |a| a.parse().expect("seconds: a number"));
    let fill: u64 = args.next().map_or(20_000_000, |a| a.parse().expect("fill events: a number"));
    // Runs only the variants whose name holds this ("incremental", "full", "no checkpoints").
    let only = args.next().unwrap_or_default();
    let kept = std::env::var_os("CHECKPOINT_BENCH_DIR").map(PathBuf::from);
    let parts = std::env::var("CHECKPOINT_BENCH_PARTS").unwrap_or_else(|_| "123".into());
    if kept.is_none() && parts.contains('1') {
        throughput(seconds, &only).await;
    }
    if kept.is_some() || parts.contains('2') {
        large_state(seconds, fill, &only, kept.as_deref()).await;
    }
    if kept.is_none() && parts.contains('3') {
        hot_keys(seconds, fill, &only).await;
    }
}

async fn throughput(seconds: u64, only: &str) {
    println!("1. {AGGREGATE}");
    println!("   Nexmark at full speed, parallelism 2, {seconds} s each, checkpoints every second:");
    let table = "CREATE TABLE nx WITH (connector = 'nexmark', as_fast_as_possible = 'true', splits = '2');";
    for (name, options) in VARIANTS {
        if !name.contains(only) {
            continue;
        }
        let dir = tempfile::tempdir().expect("a temporary directory");
        let sql = format!("{table} SET parallelism = 2; {options} {AGGREGATE};");
        let handle = start(&sql, dir.path()).await;
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        let events = source_records(&handle, "nx");
        let checkpoints = completed(&handle);
        handle.kill().await;
        let rate = events as f64 / seconds as f64;
        println!("   {name:<16} {rate:>10.0} events/s{}", summary(&checkpoints.iter().collect::<Vec<_>>()));
    }
}

async fn large_state(seconds: u64, fill: u64, only: &str, kept: Option<&Path>) {
    println!("2. The same aggregate over {fill} events, then the same keys again at 1% of them per second");
    // About 0.7 groups per bid: the trickle's rate follows the fill's size.
    let keys = fill * 92 / 100 * 7 / 10;
    let rate = (keys / 100).max(1);
    for (name, checkpoints) in VARIANTS {
        if !name.contains(only) {
            continue;
        }
        let temporary = tempfile::tempdir().expect("a temporary directory");
        let dir = kept.unwrap_or(temporary.path());
        let sql = format!(
            "CREATE TABLE fill WITH (connector = 'nexmark', events = '{fill}', as_fast_as_possible = 'true', splits = '2');
             CREATE TABLE trickle WITH (connector = 'nexmark', rate = '{rate}', splits = '2');
             CREATE VIEW nx AS SELECT * FROM fill UNION ALL SELECT * FROM trickle;
             SET parallelism = 2; {checkpoints}
             {AGGREGATE};"
        );
        let store = StateStore::local(dir).expect("the checkpoint directory");
        if store.latest_manifest().await.expect("readable checkpoints").is_some() {
            println!("   {name}: the checkpoints kept in {}", dir.display());
            restore(&sql, dir).await;
            continue;
        }
        let handle = start(&sql, dir).await;
        let started = Instant::now();
        if !wait_for_fill(&handle, fill).await {
            return;
        }
        let filled_after = started.elapsed().as_secs_f64();
        // The trickle fell behind while the fill took both cores: measure once it has caught up
        // with its rate, so the updates are 1% of the keys per second, not its backlog.
        while (source_records(&handle, "trickle") as f64) < 0.99 * rate as f64 * started.elapsed().as_secs_f64() {
            if started.elapsed().as_secs_f64() > 3.0 * filled_after + 60.0 {
                println!("   the updates did not catch up with their rate; measuring anyway");
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let filled = completed(&handle).len();
        let (updates_before, cpu_before) = (source_records(&handle, "trickle"), cpu_seconds());
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        let (updates, cpu) = (source_records(&handle, "trickle") - updates_before, cpu_seconds() - cpu_before);
        let checkpoints = completed(&handle);
        handle.kill().await;
        println!(
            "   {name}: filled in {filled_after:.1} s; then {updates} updates in {seconds} s using {cpu:.1} cpu-s ({:.2} µs each)",
            cpu * 1e6 / updates.max(1) as f64
        );
        if checkpoints.is_empty() {
            continue;
        }
        let after: Vec<&CheckpointReport> = checkpoints.iter().skip(filled + 1).collect();
        for c in &after {
            println!(
                "     checkpoint {:>3}: {:>6} ms, state {:>10}, written {:>10} ({:.1}%)",
                c.id,
                c.duration_ms,
                mb(c.state_bytes),
                mb(c.written_bytes),
                100.0 * c.written_bytes as f64 / c.state_bytes.max(1) as f64
            );
        }
        restore(&sql, dir).await;
    }
}

async fn hot_keys(seconds: u64, fill: u64, only: &str) {
    let hot = (fill / 100).max(1);
    println!("3. SELECT k, count(*), max(v) FROM t GROUP BY k: {fill} keys, then rows of {hot} of them at full speed");
    for (name, checkpoints) in VARIANTS {
        if !name.contains(only) {
            continue;
        }
        let dir = tempfile::tempdir().expect("a temporary directory");
        let fast = "'rows-per-second' = '1000000000', splits = '2', 'fields.v.min' = '0', 'fields.v.max' = '1000000'";
        let sql = format!(
            "CREATE TABLE fill (k BIGINT, v BIGINT) WITH (connector = 'datagen', {fast},
                 'fields.k.kind' = 'sequence', 'fields.k.start' = '0', 'fields.k.end' = '{}');
             CREATE TABLE hot (k BIGINT, v BIGINT) WITH (connector = 'datagen', {fast},
                 'fields.k.min' = '0', 'fields.k.max' = '{}');
             CREATE VIEW t AS SELECT * FROM fill UNION ALL SELECT * FROM hot;
             SET parallelism = 2; {checkpoints}
             SELECT k, count(*) AS n, max(v) AS top FROM t GROUP BY k;",
            fill - 1,
            hot - 1
        );
        let handle = start(&sql, dir.path()).await;
        let started = Instant::now();
        if !wait_for_fill(&handle, fill).await {
            return;
        }
        let filled_after = started.elapsed().as_secs_f64();
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        let filled = completed(&handle).len();
        let (before, cpu_before) = (source_records(&handle, "hot"), cpu_seconds());
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        let (rows, cpu) = (source_records(&handle, "hot") - before, cpu_seconds() - cpu_before);
        let checkpoints = completed(&handle);
        handle.kill().await;
        let after: Vec<&CheckpointReport> = checkpoints.iter().skip(filled + 1).collect();
        println!(
            "   {name:<16} filled in {filled_after:>5.1} s; {seconds} s later {:>10.0} rows/s ({cpu:.1} cpu-s){}",
            rows as f64 / seconds as f64,
            summary(&after)
        );
    }
}

/// What a restore of the latest checkpoint in `dir` reads, and how long the pipeline of `sql`
/// started again on it takes to restore and complete its first checkpoint.
async fn restore(sql: &str, dir: &Path) {
    let store = StateStore::local(dir).expect("the checkpoint directory");
    let manifest = store.latest_manifest().await.expect("readable checkpoints").expect("a checkpoint");
    let chains = manifest.chains();
    let (base, deltas): (Vec<&weir_state::StateFile>, Vec<&weir_state::StateFile>) =
        chains.iter().flatten().partition(|f| f.role.is_full());
    println!(
        "     restore reads checkpoint {} ({} MB in {} files, of which {} MB in {} changes; {} rows in its bases)",
        manifest.checkpoint_id,
        base.iter().chain(&deltas).map(|f| f.bytes).sum::<u64>() / 1_000_000,
        base.len() + deltas.len(),
        deltas.iter().map(|f| f.bytes).sum::<u64>() / 1_000_000,
        deltas.len(),
        base.iter().map(|f| f.rows).sum::<u64>(),
    );
    // The whole restore: the pipeline started again on the same checkpoints, until its first
    // checkpoint after the restore completes (so every operator has its state back).
    let restart = Instant::now();
    let handle = start(sql, dir).await;
    let restored = loop {
        if let Some(first) = completed(&handle).into_iter().find(|c| c.id > manifest.checkpoint_id) {
            break first;
        }
        if handle.is_finished() || restart.elapsed() > Duration::from_secs(300) {
            println!("     the restored pipeline did not checkpoint: {:?}", handle.status().errors);
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    println!(
        "     restarted: restored and its first checkpoint ({} ms, written {}) completed {:.2} s after the start",
        restored.duration_ms,
        mb(restored.written_bytes),
        restart.elapsed().as_secs_f64()
    );
    handle.kill().await;
}

/// How many `checkpoints` completed, how long they took and what they wrote (empty for none).
fn summary(checkpoints: &[&CheckpointReport]) -> String {
    let Some(last) = checkpoints.last() else { return String::new() };
    let mean = checkpoints.iter().map(|c| c.duration_ms).sum::<u64>() / checkpoints.len() as u64;
    let longest = checkpoints.iter().map(|c| c.duration_ms).max().unwrap_or(0);
    let written = checkpoints.iter().map(|c| c.written_bytes).sum::<u64>() / checkpoints.len() as u64;
    format!(
        "; {} checkpoints, mean {mean} ms, longest {longest} ms, mean written {}, last state {}",
        checkpoints.len(),
        mb(written),
        mb(last.state_bytes)
    )
}

/// Plans `sql` (its last statement a query) and starts its pipeline with checkpoints in `dir`.
async fn start(sql: &str, dir: &Path) -> PipelineHandle {
    let mut session = Session::new();
    session.preview_rows = 1_000;
    let pipeline = session
        .execute(sql)
        .await
        .expect("the benchmark's SQL plans")
        .into_iter()
        .find_map(|o| match o {
            Output::Pipeline(p) => Some(*p),
            _ => None,
        })
        .expect("a pipeline");
    let store = StateStore::local(dir).expect("a checkpoint directory");
    weir_engine::start(pipeline.graph, pipeline.config, store).expect("the pipeline starts")
}

/// Waits until the source `fill` has emitted `fill` records; false (said) if the pipeline ended
/// first.
async fn wait_for_fill(handle: &PipelineHandle, fill: u64) -> bool {
    while source_records(handle, "fill") < fill {
        if handle.is_finished() {
            println!("   the pipeline ended while filling: {:?}", handle.status().errors);
            return false;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    true
}

/// Records the source of table `table` has emitted so far.
fn source_records(handle: &PipelineHandle, table: &str) -> u64 {
    let operators = handle.metrics().operators();
    operators.iter().filter(|o| o.operator == table).map(|o| o.records_out).sum()
}

fn completed(handle: &PipelineHandle) -> Vec<CheckpointReport> {
    handle.status().checkpoints.into_iter().filter(|c| c.status == CheckpointStatus::Completed).collect()
}

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}
