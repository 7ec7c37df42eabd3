//! The filesystem connector end to end: Nexmark bids written to a JSON-lines (and a Parquet)
//! table by a pipeline that is killed after a checkpoint and restored at another parallelism,
//! then read back by a query over the same table: exactly the bids, once each.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use weir_engine::{CheckpointStatus, FailureInjector, FailurePoint, PipelineConfig, Step};

use crate::slt::final_rows;
use crate::{Output, Session};

async fn pipeline(session: &mut Session, sql: &str) -> crate::PlannedPipeline {
    match session.execute(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}")).pop() {
        Some(Output::Pipeline(pipeline)) => *pipeline,
        other => panic!("{sql}: no pipeline: {other:?}"),
    }
}

async fn rows_of(session: &mut Session, query: &str) -> Vec<String> {
    let planned = pipeline(session, query).await;
    let preview = planned.preview.clone().unwrap().buffer;
    let dir = tempfile::tempdir().unwrap();
    let store = weir_state::StateStore::local(dir.path()).unwrap();
    weir_engine::start(planned.graph, planned.config, store).unwrap().wait().await.unwrap();
    let mut rows: Vec<String> = final_rows(&preview.batches()).unwrap().into_iter().map(|r| r.join(" ")).collect();
    rows.sort();
    rows
}

fn setup(out: &Path, format: &str) -> String {
    format!(
        "CREATE TABLE nexmark WITH (connector = 'nexmark', events = '20000', rate = '100000', splits = '4', batch_size = '50');
         CREATE TABLE bids (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR)
           WITH (connector = 'filesystem', path = '{}', format = '{format}');
         SET parallelism = 2",
        out.display()
    )
}

const INSERT: &str =
    "INSERT INTO bids SELECT bid.auction, bid.bidder, bid.price, bid.channel FROM nexmark WHERE event_type = 2";

/// The table's files hold exactly the bids, and no pending file is left.
async fn check_written(session: &mut Session, out: &Path) {
    let expected =
        rows_of(session, "SELECT bid.auction, bid.bidder, bid.price, bid.channel FROM nexmark WHERE event_type = 2")
            .await;
    assert_eq!(expected.len(), 18_400);
    let written = rows_of(session, "SELECT auction, bidder, price, channel FROM bids").await;
    assert_eq!(written.len(), expected.len(), "every bid once");
    assert_eq!(written, expected);
    let pending = std::fs::read_dir(out.join(".pending")).unwrap().count();
    assert_eq!(pending, 0, "no pending file is left");
}

async fn round_trip(format: &str) {
    let out = tempfile::tempdir().unwrap();
    let mut session = Session::new();
    session.preview_rows = 1_000_000;
    session.execute(&setup(out.path(), format)).await.unwrap();
    let planned = pipeline(&mut session, INSERT).await;
    killed_and_restored_at_three(planned).await;
    check_written(&mut session, out.path()).await;
}

/// Runs `planned` at parallelism 2 with 10 ms checkpoints, kills it after its first completed
/// checkpoint, and runs it to its end restored at parallelism 3.
async fn killed_and_restored_at_three(planned: crate::PlannedPipeline) {
    let mut config = PipelineConfig { ..planned.config.clone() };
    config.checkpoint.interval = Some(Duration::from_millis(10));
    let state = tempfile::tempdir().unwrap();
    let store = weir_state::StateStore::local(state.path()).unwrap();
    let first = weir_engine::start(planned.graph.with_parallelism(2), config.clone(), store.clone()).unwrap();
    while !first.status().checkpoints.iter().any(|c| c.status == CheckpointStatus::Completed) {
        assert!(!first.is_finished(), "finished before its first checkpoint: make it slower");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    first.kill().await;
    weir_engine::start(planned.graph.with_parallelism(3), config, store).unwrap().wait().await.unwrap();
}

/// Runs `insert` killed after a checkpoint and restored at parallelism 3, then checks that
/// `written` (a query over the table it wrote) gives exactly the rows of `expected`; how many.
async fn every_row_once(session: &mut Session, insert: &str, expected: &str, written: &str) -> usize {
    let planned = pipeline(session, insert).await;
    killed_and_restored_at_three(planned).await;
    let expected = rows_of(session, expected).await;
    let written = rows_of(session, written).await;
    assert_eq!(written.len(), expected.len(), "{insert}: every row once");
    assert_eq!(written, expected, "{insert}");
    written.len()
}

/// Nexmark q13's shape: bids joined with a bounded side input read from a file (whose end lets
/// the join stop keeping bids), written to files, killed after a checkpoint and restored at
/// parallelism 3: every joined bid once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_joined_with_a_bounded_side_input_survives_a_kill_and_a_rescale() {
    let (side, out) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let lines: String = (0..50).map(|id| format!("{{\"id\": {id}, \"label\": \"l{id}\"}}\n")).collect();
    std::fs::write(side.path().join("labels.json"), lines).unwrap();
    let mut session = Session::new();
    session.preview_rows = 1_000_000;
    session.execute(&setup(out.path(), "json")).await.unwrap();
    session
        .execute(&format!(
            "CREATE TABLE side_input (id BIGINT, label VARCHAR) WITH (connector = 'filesystem', path = '{}', format = 'json');
             CREATE TABLE labelled (auction BIGINT, price BIGINT, label VARCHAR) WITH (connector = 'filesystem', path = '{}/labelled', format = 'json')",
            side.path().display(),
            out.path().display()
        ))
        .await
        .unwrap();
    let rows = every_row_once(
        &mut session,
        "INSERT INTO labelled SELECT bid.auction, bid.price, s.label FROM nexmark JOIN side_input s ON bid.auction % 100 = s.id WHERE event_type = 2",
        "SELECT bid.auction, bid.price, 'l' || CAST(bid.auction % 100 AS VARCHAR) FROM nexmark WHERE event_type = 2 AND bid.auction % 100 < 50",
        "SELECT auction, price, label FROM labelled",
    )
    .await;
    assert!(rows > 1000, "{rows}");
}

/// A failure at each dangerous step of a checkpoint (pending file written but not
/// acknowledged; manifest committed, no sink told; half the sinks told), restarted by the
/// supervisor: every row once, no pending file left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_get_every_row_once_across_a_failure_at_every_dangerous_step() {
    for step in [Step::AfterSnapshotBeforeAck, Step::AfterManifestBeforeNotify, Step::MidNotify] {
        let out = tempfile::tempdir().unwrap();
        let mut session = Session::new();
        session.preview_rows = 1_000_000;
        session.execute(&setup(out.path(), "json")).await.unwrap();
        let planned = pipeline(&mut session, INSERT).await;
        let mut config = planned.config.clone();
        config.checkpoint.interval = Some(Duration::from_millis(10));
        config.restart.initial_backoff = Duration::from_millis(1);
        // Checkpoint 1: the only one sure to happen before a loaded machine finishes the
        // 200 ms input (the final checkpoint is numbered 1 if no other came first).
        let injector =
            Arc::new(FailureInjector::new([FailurePoint::Step { step, checkpoint: Some(1), operator: None }]));
        let state = tempfile::tempdir().unwrap();
        let store = weir_state::StateStore::local(state.path()).unwrap();
        let handle = weir_engine::start_with_failures(planned.graph, config, store, injector.clone()).unwrap();
        while !handle.is_finished() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let status = handle.status();
        handle.wait().await.unwrap();
        assert!(injector.all_fired(), "{step:?} did not fire: {:?}", status.checkpoints);
        check_written(&mut session, out.path()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_files_get_every_row_once_across_a_kill_and_a_rescale() {
    round_trip("json").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parquet_files_get_every_row_once_across_a_kill_and_a_rescale() {
    round_trip("parquet").await;
}

#[tokio::test]
async fn an_updating_result_cannot_go_to_a_file() {
    let mut session = Session::new();
    session
        .execute(
            "CREATE TABLE nexmark WITH (connector = 'nexmark', events = '10');
             CREATE TABLE counts (t INT, n BIGINT) WITH (connector = 'filesystem', path = '/nonexistent', format = 'json')",
        )
        .await
        .unwrap();
    let error = session
        .execute("INSERT INTO counts SELECT event_type, count(*) FROM nexmark GROUP BY event_type")
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("a filesystem table takes append-only rows"), "{error}");
}

/// JSON columns in JSON-lines files: read as any JSON value's text, written embedded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_columns_round_trip_through_json_lines_files() {
    let (input, out) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    std::fs::write(
        input.path().join("docs.json"),
        "{\"id\": 1, \"doc\": {\"user\": {\"name\": \"ann\"}, \"n\": [1, 2]}}\n\n{\"id\": 2, \"doc\": 7, \"other\": true}\n{\"id\": 3}\n",
    )
    .unwrap();
    let mut session = Session::new();
    session
        .execute(&format!(
            "CREATE TABLE docs (id BIGINT, doc JSON) WITH (connector = 'filesystem', path = '{}', format = 'json');
             CREATE TABLE out (id BIGINT, name VARCHAR, doc JSON) WITH (connector = 'filesystem', path = '{}', format = 'json')",
            input.path().display(),
            out.path().display()
        ))
        .await
        .unwrap();
    let planned = pipeline(&mut session, "INSERT INTO out SELECT id, doc->'user'->>'name', doc FROM docs").await;
    let dir = tempfile::tempdir().unwrap();
    let store = weir_state::StateStore::local(dir.path()).unwrap();
    weir_engine::start(planned.graph, planned.config, store).unwrap().wait().await.unwrap();
    let mut lines: Vec<String> = std::fs::read_dir(out.path())
        .unwrap()
        .filter_map(|e| e.ok().filter(|e| e.path().is_file()))
        .flat_map(|e| std::fs::read_to_string(e.path()).unwrap().lines().map(str::to_string).collect::<Vec<_>>())
        .collect();
    lines.sort();
    assert_eq!(
        lines,
        vec![
            r#"{"id":1,"name":"ann","doc":{"user": {"name": "ann"}, "n": [1, 2]}}"#,
            r#"{"id":2,"doc":7}"#,
            r#"{"id":3}"#,
        ]
    );
    let rows = rows_of(&mut session, "SELECT id, json_get_int(doc, 'n', 1) FROM out").await;
    assert_eq!(rows, vec!["1 2", "2 NULL", "3 NULL"]);
}

/// A partitioned table (PARTITIONED BY, Hive-style directories) with a small rolling size, so
/// that a partition gets several files between checkpoints: killed after a checkpoint and
/// restored at parallelism 3, then read back through the same table, partition column filled
/// in from the directories: every bid once, in its partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_table_with_rolling_files_gets_every_row_once_across_a_kill_and_a_rescale() {
    for format in ["json", "parquet"] {
        let out = tempfile::tempdir().unwrap();
        let mut session = Session::new();
        session.preview_rows = 1_000_000;
        session.execute(&setup(out.path(), format)).await.unwrap();
        session
            .execute(&format!(
                "CREATE TABLE bucketed (auction BIGINT, price BIGINT, bucket BIGINT, channel VARCHAR) PARTITIONED BY (bucket, channel)
                   WITH (connector = 'filesystem', path = '{}/bucketed', format = '{format}', \"sink.rolling-policy.file-size\" = '4 kb')",
                out.path().display()
            ))
            .await
            .unwrap();
        let query = "SELECT bid.auction, bid.price, bid.auction % 7, CASE WHEN bid.auction % 2 = 0 THEN 'even/x' END FROM nexmark WHERE event_type = 2";
        every_row_once(
            &mut session,
            &format!("INSERT INTO bucketed {query}"),
            query,
            "SELECT auction, price, bucket, channel FROM bucketed",
        )
        .await;
        let directories = std::fs::read_dir(out.path().join("bucketed")).unwrap().count();
        assert_eq!(directories, 7 + 1, "{format}: a directory per bucket, and .pending");
        let files =
            std::fs::read_dir(out.path().join("bucketed/bucket=3/channel=__DEFAULT_PARTITION__")).unwrap().count();
        assert!(files > 3, "{format}: rolled into several files, {files}");
        assert!(out.path().join("bucketed/bucket=2/channel=even%2Fx").is_dir());
    }
}

/// A directory is read whole, whatever its files are called; a path that is not there is an
/// error at planning, naming it; a file not in the format fails the run, naming the file.
#[tokio::test]
async fn every_file_of_a_directory_is_read_and_a_missing_path_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    std::fs::create_dir_all(input.join("day=2")).unwrap();
    std::fs::write(input.join("events.jsonl"), "{\"id\": 1}\n{\"id\": 2}\n").unwrap();
    std::fs::write(input.join("more.ndjson"), "{\"id\": 3}\n").unwrap();
    std::fs::write(input.join("day=2").join("part-0"), "{\"id\": 4}\n").unwrap();
    std::fs::write(input.join(".hidden.json"), "{\"id\": 99}\n").unwrap();
    let mut session = Session::new();
    let create = |name: &str, path: &Path| {
        format!(
            "CREATE TABLE {name} (id BIGINT) WITH (connector = 'filesystem', path = '{}', format = 'json')",
            path.display()
        )
    };
    session.execute(&create("ev", &input)).await.unwrap();
    assert_eq!(rows_of(&mut session, "SELECT id FROM ev").await, ["1", "2", "3", "4"]);

    let missing = dir.path().join("not-there");
    session.execute(&create("gone", &missing)).await.unwrap();
    let error = session.execute("SELECT id FROM gone").await.unwrap_err().to_string();
    assert!(error.contains("not-there") && error.contains("does not exist"), "{error}");

    std::fs::write(input.join("notes.txt"), "these are not JSON lines\n").unwrap();
    let planned = pipeline(&mut session, "SELECT id FROM ev").await;
    let state = tempfile::tempdir().unwrap();
    let store = weir_state::StateStore::local(state.path()).unwrap();
    let mut config = planned.config;
    config.restart.max_restarts = Some(0);
    let error = weir_engine::start(planned.graph, config, store).unwrap().wait().await.unwrap_err().to_string();
    assert!(error.contains("notes.txt"), "{error}");
}

/// Nexmark q10 as nexmark-flink writes it: bids into CSV files partitioned by day and second,
/// Flink's path URL and partition commit (`success-file` when the watermark passes the
/// partition's time). Sampled at every completed checkpoint, a partition with its success file
/// already holds all its rows; at the end every partition has one; read back through the same
/// table, every bid once; and what the files hold is Flink's CSV.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_get_their_success_file_once_the_watermark_passes_them() {
    let out = tempfile::tempdir().unwrap();
    let mut session = Session::new();
    session.preview_rows = 1_000_000;
    session
        .execute(&format!(
            "CREATE TABLE nexmark (WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND)
               WITH (connector = 'nexmark', events = '20000', rate = '2000', as_fast_as_possible = 'true', splits = '4', batch_size = '50');
             CREATE TABLE q10 (auction BIGINT, bidder BIGINT, price BIGINT, `dateTime` TIMESTAMP(3), extra VARCHAR, dt STRING, hms STRING)
               PARTITIONED BY (dt, hms) WITH (
                 'connector' = 'filesystem', 'path' = 'file://{}/q10', 'format' = 'csv',
                 'sink.partition-commit.trigger' = 'partition-time', 'sink.partition-commit.delay' = '1 s',
                 'sink.partition-commit.policy.kind' = 'success-file',
                 'partition.time-extractor.timestamp-pattern' = '$dt $hms',
                 'sink.rolling-policy.rollover-interval' = '1min', 'sink.rolling-policy.check-interval' = '1min');
             SET parallelism = 2",
            out.path().display()
        ))
        .await
        .unwrap();
    let query = "SELECT bid.auction, bid.bidder, bid.price, date_time, bid.extra, DATE_FORMAT(date_time, 'yyyy-MM-dd'), DATE_FORMAT(date_time, 'HH:mm:ss') FROM nexmark WHERE event_type = 2";
    let expected = rows_of(&mut session, query).await;
    let per_partition = |rows: &[String]| {
        let mut counts = std::collections::BTreeMap::<String, usize>::new();
        for row in rows {
            let fields: Vec<&str> = row.rsplitn(3, ' ').collect();
            *counts.entry(format!("dt={}/hms={}", fields[1], fields[0].replace(':', "%3A"))).or_default() += 1;
        }
        counts
    };
    let expected_counts = per_partition(&expected);
    assert!(expected_counts.len() >= 10, "bids over at least 10 seconds: {}", expected_counts.len());

    let planned = pipeline(&mut session, &format!("INSERT INTO q10 {query}")).await;
    let mut config = planned.config.clone();
    config.checkpoint.interval = Some(Duration::from_millis(20));
    let state = tempfile::tempdir().unwrap();
    let store = weir_state::StateStore::local(state.path()).unwrap();
    let handle = weir_engine::start(planned.graph, config, store).unwrap();
    let table = out.path().join("q10");
    let lines_in = |partition: &Path| -> usize {
        std::fs::read_dir(partition)
            .unwrap()
            .flatten()
            .filter(|f| f.file_name().to_string_lossy().ends_with(".csv"))
            .map(|f| std::fs::read_to_string(f.path()).unwrap().lines().count())
            .sum()
    };
    let mut marked_early = 0;
    while !handle.is_finished() {
        for (partition, rows) in &expected_counts {
            let dir = table.join(partition);
            if dir.join("_SUCCESS").exists() && !handle.is_finished() {
                assert_eq!(lines_in(&dir), *rows, "{partition} was marked complete before all its rows were in");
                marked_early += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    handle.wait().await.unwrap();
    assert!(marked_early > 0, "no partition was marked before the end");
    for partition in expected_counts.keys() {
        assert!(table.join(partition).join("_SUCCESS").exists(), "{partition} has no success file at the end");
    }
    let written = rows_of(&mut session, "SELECT auction, bidder, price, `dateTime`, extra, dt, hms FROM q10").await;
    assert_eq!(written, expected, "every bid once");
    let first = expected_counts.keys().next().unwrap();
    let file = std::fs::read_dir(table.join(first))
        .unwrap()
        .flatten()
        .find(|f| f.file_name().to_string_lossy().ends_with(".csv"))
        .unwrap();
    let line = std::fs::read_to_string(file.path()).unwrap().lines().next().unwrap().to_string();
    assert!(line.contains(",2023-11-14 22:13:") && !line.contains("dt="), "Flink's CSV, no partition values: {line}");
}

/// A bounded run's final checkpoint leaves out the join's rows (working state nothing can reach
/// again) but keeps the sources' positions; restored from it, the pipeline reads nothing more:
/// files added to both inputs since, which would join, do not reach the output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_final_checkpoint_leaves_out_working_state_and_a_restore_of_it_reads_nothing_more() {
    let dir = tempfile::tempdir().unwrap();
    let (left, right, out) = (dir.path().join("left"), dir.path().join("right"), dir.path().join("out"));
    for side in [&left, &right] {
        std::fs::create_dir_all(side).unwrap();
        let lines: String = (0..100).map(|k| format!("{{\"k\": {k}, \"v\": {}}}\n", k * 10)).collect();
        std::fs::write(side.join("first.json"), lines).unwrap();
    }
    let mut session = Session::new();
    session.preview_rows = 1_000_000;
    let create = |name: &str, path: &Path| {
        format!(
            "CREATE TABLE {name} (k BIGINT, v BIGINT) WITH (connector = 'filesystem', path = '{}', format = 'json')",
            path.display()
        )
    };
    for (name, path) in [("l", &left), ("r", &right), ("joined", &out)] {
        session.execute(&create(name, path)).await.unwrap();
    }
    let planned = pipeline(&mut session, "INSERT INTO joined SELECT l.k, l.v + r.v FROM l JOIN r ON l.k = r.k").await;
    let mut config = planned.config.clone();
    config.checkpoint.interval = Some(Duration::from_millis(10));
    let state = tempfile::tempdir().unwrap();
    let store = weir_state::StateStore::local(state.path()).unwrap();
    weir_engine::start(planned.graph.clone(), config.clone(), store.clone()).unwrap().wait().await.unwrap();
    let expected: Vec<String> =
        (0..100).map(|k| format!("{k} {}", k * 20)).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
    assert_eq!(rows_of(&mut session, "SELECT k, v FROM joined").await, expected);

    let last = store.latest_manifest().await.unwrap().unwrap();
    assert!(last.finished, "the last checkpoint is the final one: {last:?}");
    let tables: Vec<&str> = last.files.iter().map(|f| f.table.as_str()).collect();
    assert!(!tables.iter().any(|t| t.starts_with("side_")), "the join's rows are left out: {tables:?}");
    assert!(!tables.is_empty(), "the sources' positions (and the sink's) are kept");

    for side in [&left, &right] {
        std::fs::write(side.join("later.json"), "{\"k\": 1000, \"v\": 1}\n").unwrap();
    }
    weir_engine::start(planned.graph, config, store.clone()).unwrap().wait().await.unwrap();
    assert_eq!(rows_of(&mut session, "SELECT k, v FROM joined").await, expected, "nothing read after the end");
    assert!(store.latest_manifest().await.unwrap().unwrap().checkpoint_id > last.checkpoint_id);
}
