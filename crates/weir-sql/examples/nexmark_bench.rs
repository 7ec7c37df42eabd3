//! Nexmark throughput: each Nexmark query of `sql-examples/` (the numbered ones, then the
//! other `nexmark_*` files) run over the same generated events
//! (read as fast as possible, parallelism 2, exactly-once checkpoints every 10 s, results into the
//! preview), printing events per second and per CPU-second, the Flink suite's "cores x
//! seconds" turned around. Prints numbers, asserts nothing.
//!
//! cargo run --profile bench-fast -p weir-sql --example nexmark_bench [events] [name filter]

// A benchmark stops at its first error, with the reason.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::PathBuf;
use std::time::Instant;

use weir_engine::testkit::cpu_seconds;
use weir_sql::{Output, Session};

/// The `weir` binary's allocator, so the numbers are the binary's.
#[global_allocator]
static ALLOCATOR: weir_engine::allocator::Allocator = weir_engine::allocator::Allocator;

/// `sql` with the value of its option `name = '...'` replaced by `value`.
fn with_option(sql: &str, name: &str, value: &str) -> String {
    let key = format!("{name} = '");
    let Some(found) = sql.find(&key) else { return sql.to_string() };
    let start = found + key.len();
    let end = start + sql[start..].find('\'').expect("a closing quote");
    format!("{}{value}{}", &sql[..start], &sql[end..])
}

/// The file's SQL with its Nexmark table generating `events` events as fast as possible and
/// the pipeline at parallelism 2 with 10 s checkpoints (the file's own SETs come after).
fn with_events(sql: &str, events: u64) -> String {
    let mut sql = with_option(sql, "events", &events.to_string());
    // A paced table (its rate spaces the event times) is read as fast as possible too.
    if !sql.contains("as_fast_as_possible")
        && let Some(at) = sql.find("rate = '")
    {
        sql.insert_str(at, "as_fast_as_possible = 'true', ");
    }
    format!("SET parallelism = 2; SET checkpoint.interval = '10 s';\n{sql}")
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    weir_engine::allocator::set_up();
    let mut args = std::env::args().skip(1);
    let events: u64 = args.next().map_or(2_000_000, |a| a.parse().expect("events: a number"));
    let filter = args.next().unwrap_or_default();
    let examples = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../sql-examples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&examples)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("nexmark_")))
        .filter(|p| p.to_string_lossy().contains(&filter))
        .collect();
    files.sort_by_key(|p| {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        // Nexmark's numbered queries in order, then the others by name.
        let number = name.strip_prefix("nexmark_q").and_then(|n| n.split('_').next()?.parse::<u32>().ok());
        (number.unwrap_or(u32::MAX), name)
    });
    println!("Nexmark, {events} events, parallelism 2, exactly-once checkpoints every 10 s:");
    for file in files {
        let sql = with_events(&std::fs::read_to_string(&file).unwrap(), events);
        let mut session = Session::new();
        session.preview_rows = 1_000;
        let pipeline = session
            .execute(&sql)
            .await
            .unwrap()
            .into_iter()
            .find_map(|o| match o {
                Output::Pipeline(p) => Some(*p),
                _ => None,
            })
            .expect("a pipeline");
        let dir = tempfile::tempdir().unwrap();
        let store = weir_state::StateStore::local(dir.path()).unwrap();
        let (started, cpu_before) = (Instant::now(), cpu_seconds());
        weir_engine::start(pipeline.graph, pipeline.config, store).unwrap().wait().await.unwrap();
        let (seconds, cpu) = (started.elapsed().as_secs_f64(), cpu_seconds() - cpu_before);
        let name = file.file_stem().unwrap().to_string_lossy().into_owned();
        println!(
            "  {name:<40} {:>10.0} events/s {:>10.0} events/cpu-s  ({seconds:.2} s, {cpu:.2} cpu-s)",
            events as f64 / seconds,
            events as f64 / cpu.max(0.01),
        );
    }
}
