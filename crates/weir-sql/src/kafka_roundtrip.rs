//! Kafka tables from SQL against the real broker, in-process: bad records under each
//! `bad_records` policy, updating results as upsert and Debezium records, the Kafka record
//! timestamp as a column, startup positions, and the checks that fail at planning.
//! (The crash tests, killing the process, are in the `weir` crate's tests.)

use std::collections::BTreeMap;
use std::time::Duration;

use weir_connectors::kafka::test_broker::TestBroker;

use crate::slt::final_rows;
use crate::{Output, Session};

fn broker() -> &'static TestBroker {
    TestBroker::get().unwrap_or_else(|e| panic!("no Kafka broker for tests: {e}"))
}

async fn topic(stem: &str, partitions: i32) -> String {
    broker().create_topic(stem, partitions).await.unwrap()
}

fn kafka(topic: &str, extra: &str) -> String {
    format!("connector = 'kafka', \"bootstrap.servers\" = '{}', topic = '{topic}'{extra}", broker().bootstrap())
}

async fn pipeline(session: &mut Session, sql: &str) -> crate::Result<crate::PlannedPipeline> {
    match session.execute(sql).await?.pop() {
        Some(Output::Pipeline(pipeline)) => Ok(*pipeline),
        other => panic!("{sql}: no pipeline: {other:?}"),
    }
}

/// The final rows of a bounded query, each as its values joined by spaces, sorted.
async fn result_lines(session: &mut Session, query: &str) -> Vec<String> {
    let planned = pipeline(session, query).await.unwrap();
    let preview = planned.preview.clone().unwrap().buffer;
    run(planned).await.1.unwrap();
    let mut rows: Vec<String> = final_rows(&preview.batches()).unwrap().into_iter().map(|r| r.join(" ")).collect();
    rows.sort();
    rows
}

/// Runs a planned pipeline to its end; the bad-record count of its operators and its result.
async fn run(planned: crate::PlannedPipeline) -> (u64, weir_engine::Result<()>) {
    let dir = tempfile::tempdir().unwrap();
    let store = weir_state::StateStore::local(dir.path()).unwrap();
    let handle = weir_engine::start(planned.graph, planned.config, store).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while !handle.is_finished() {
        assert!(tokio::time::Instant::now() < deadline, "the pipeline did not finish: {:?}", handle.status());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let bad = handle.metrics().operators().iter().map(|o| o.bad_records).sum();
    (bad, handle.wait().await)
}

fn values(topic: &str) -> Vec<String> {
    broker()
        .read_to_end(topic, "read_committed")
        .unwrap()
        .into_iter()
        .map(|r| r.value.map(|v| String::from_utf8(v).unwrap()).unwrap_or_else(|| "<tombstone>".into()))
        .collect()
}

/// Three good records around two bad ones, all in partition 0 (offsets 0..5).
async fn input_with_bad_records() -> String {
    let input = topic("bad-in", 1).await;
    let records = [r#"{"id":1,"name":"a"}"#, "not json", r#"{"id":2,"name":"b"}"#, r#"{"id":"three"}"#, r#"{"id":4}"#];
    broker().produce(&input, records.iter().map(|r| (0, None, r.as_bytes()))).unwrap();
    input
}

async fn session_reading(input: &str, policy: &str) -> Session {
    let mut session = Session::new();
    session
        .execute(&format!(
            "SET checkpoint.interval = '100 ms';
             CREATE TABLE input (id BIGINT NOT NULL, name VARCHAR)
               WITH ({}, format = 'json', \"scan.bounded.mode\" = 'latest'{policy})",
            kafka(input, "")
        ))
        .await
        .unwrap();
    session
}

#[tokio::test]
async fn a_bad_record_fails_the_pipeline_naming_topic_partition_and_offset() {
    let input = input_with_bad_records().await;
    let mut session = session_reading(&input, "").await;
    let planned = pipeline(&mut session, "SELECT id FROM input").await.unwrap();
    let (_, result) = run(planned).await;
    let error = result.unwrap_err().to_string();
    assert!(error.contains(&format!("topic {input} partition 0 offset 1")), "{error}");
    assert!(error.contains("bad_records"), "{error}");
}

#[tokio::test]
async fn bad_records_are_skipped_and_counted() {
    let input = input_with_bad_records().await;
    let mut session = session_reading(&input, ", bad_records = 'skip'").await;
    let planned = pipeline(&mut session, "SELECT id, name FROM input").await.unwrap();
    let preview = planned.preview.clone().unwrap().buffer;
    let (bad, result) = run(planned).await;
    result.unwrap();
    assert_eq!(bad, 2);
    let mut rows = final_rows(&preview.batches()).unwrap();
    rows.sort();
    assert_eq!(rows, vec![vec!["1", "a"], vec!["2", "b"], vec!["4", "NULL"]]);
}

#[tokio::test]
async fn bad_records_go_to_the_dead_letter_topic_with_the_good_ones_to_the_sink() {
    let input = input_with_bad_records().await;
    let (dead, out) = (topic("dead", 1).await, topic("good", 1).await);
    let mut session =
        session_reading(&input, &format!(", bad_records = 'dead_letter', \"dead_letter.topic\" = '{dead}'")).await;
    session
        .execute(&format!("CREATE TABLE good (id BIGINT, name VARCHAR) WITH ({}, format = 'json')", kafka(&out, "")))
        .await
        .unwrap();
    let planned = pipeline(&mut session, "INSERT INTO good SELECT id, name FROM input").await.unwrap();
    let (bad, result) = run(planned).await;
    result.unwrap();
    assert_eq!(bad, 2);
    assert_eq!(values(&dead), vec!["not json".to_string(), r#"{"id":"three"}"#.to_string()]);
    assert_eq!(
        values(&out),
        vec![r#"{"id":1,"name":"a"}"#.to_string(), r#"{"id":2,"name":"b"}"#.into(), r#"{"id":4,"name":null}"#.into()]
    );
}

/// Words counted by an updating aggregate: the upsert topic keeps the latest count per key (no
/// record for the `-U` halves), the Debezium topic has an envelope per change.
#[tokio::test]
async fn an_updating_result_is_written_as_upserts_and_as_debezium_changes() {
    let input = topic("words", 2).await;
    let words = ["a", "b", "a", "c", "a", "b"];
    let values_in: Vec<String> = words.iter().map(|w| format!(r#"{{"word":"{w}"}}"#)).collect();
    broker().produce(&input, values_in.iter().enumerate().map(|(i, v)| ((i % 2) as i32, None, v.as_bytes()))).unwrap();
    let (upserts, changes) = (topic("counts", 1).await, topic("changes", 1).await);
    let mut session = Session::new();
    session
        .execute(&format!(
            "SET checkpoint.interval = '100 ms';
             CREATE TABLE words (word VARCHAR) WITH ({}, format = 'json', \"scan.bounded.mode\" = 'latest');
             CREATE TABLE counts (word VARCHAR, n BIGINT) WITH ({}, format = 'upsert', \"key.fields\" = 'word');
             CREATE TABLE changes (word VARCHAR, n BIGINT) WITH ({}, format = 'debezium_json');",
            kafka(&input, ""),
            kafka(&upserts, ""),
            kafka(&changes, "")
        ))
        .await
        .unwrap();
    let planned = pipeline(
        &mut session,
        "INSERT INTO counts SELECT word, count(*) FROM words GROUP BY word;
         INSERT INTO changes SELECT word, count(*) FROM words GROUP BY word;",
    )
    .await
    .unwrap();
    run(planned).await.1.unwrap();

    let records = broker().read_to_end(&upserts, "read_committed").unwrap();
    let mut latest = BTreeMap::new();
    for record in &records {
        let key = String::from_utf8(record.key.clone().unwrap()).unwrap();
        latest.insert(key, String::from_utf8(record.value.clone().unwrap()).unwrap());
    }
    assert_eq!(
        latest.into_iter().collect::<Vec<_>>(),
        vec![
            (r#"{"word":"a"}"#.to_string(), r#"{"word":"a","n":3}"#.to_string()),
            (r#"{"word":"b"}"#.into(), r#"{"word":"b","n":2}"#.into()),
            (r#"{"word":"c"}"#.into(), r#"{"word":"c","n":1}"#.into()),
        ]
    );
    // Every upsert is a create; every create but the first of a word follows the delete of
    // the count it replaces (the -U half, which the upsert topic leaves out).
    let envelopes = values(&changes);
    assert_eq!(envelopes.len(), 2 * records.len() - 3, "{envelopes:?}");
    assert!(envelopes.iter().all(|e| !e.contains(r#""op":"c""#) || !e.contains(r#""before":{"#)), "{envelopes:?}");
    assert!(envelopes.contains(&r#"{"before":null,"after":{"word":"a","n":3},"op":"c"}"#.to_string()), "{envelopes:?}");
}

/// A JSON column reads any value of its field as JSON text, the JSON functions read into it, and
/// a JSON column written to Kafka embeds its document rather than quoting it.
#[tokio::test]
async fn json_columns_read_any_value_and_are_written_as_json() {
    let input = topic("docs", 1).await;
    let records = [
        r#"{"id":1,"doc":{"user":{"name":"ann"},"tags":["a","b"]}}"#,
        r#"{"id":2,"doc":[1,2]}"#,
        r#"{"id":3,"doc":"plain"}"#,
        r#"{"id":4}"#,
    ];
    broker().produce(&input, records.iter().map(|r| (0, None, r.as_bytes()))).unwrap();
    let out = topic("docs-out", 1).await;
    let mut session = Session::new();
    session
        .execute(&format!(
            "SET checkpoint.interval = '100 ms';
             CREATE TABLE docs (id BIGINT NOT NULL, doc JSON) WITH ({}, format = 'json', \"scan.bounded.mode\" = 'latest');
             CREATE TABLE out (id BIGINT, name VARCHAR, tags JSON, doc JSON) WITH ({}, format = 'json');",
            kafka(&input, ""),
            kafka(&out, "")
        ))
        .await
        .unwrap();
    let error = session.execute("INSERT INTO out SELECT id, 'x', doc->'tags', doc FROM docs").await.unwrap_err();
    assert!(error.to_string().contains("column 'tags' is JSON and takes text holding JSON"), "{error}");
    let planned = pipeline(
        &mut session,
        "INSERT INTO out SELECT id, doc->'user'->>'name', json_get_json(doc, 'tags'), doc FROM docs",
    )
    .await
    .unwrap();
    run(planned).await.1.unwrap();
    assert_eq!(
        values(&out),
        vec![
            r#"{"id":1,"name":"ann","tags":["a","b"],"doc":{"user":{"name":"ann"},"tags":["a","b"]}}"#.to_string(),
            r#"{"id":2,"name":null,"tags":null,"doc":[1,2]}"#.into(),
            r#"{"id":3,"name":null,"tags":null,"doc":"plain"}"#.into(),
            r#"{"id":4,"name":null,"tags":null,"doc":null}"#.into(),
        ]
    );
}

#[tokio::test]
async fn the_record_timestamp_fills_the_timestamp_column_and_latest_skips_what_is_there() {
    let input = topic("stamped", 1).await;
    broker().produce(&input, [(0, None, br#"{"id":1}"#.as_slice())]).unwrap();
    let mut session = Session::new();
    let table = |name: &str, extra: &str| {
        format!(
            "CREATE TABLE {name} (id BIGINT, at TIMESTAMP) WITH ({}, format = 'json', \"scan.bounded.mode\" = 'latest', timestamp_column = 'at'{extra});",
            kafka(&input, "")
        )
    };
    session
        .execute(&(table("from_start", "") + &table("from_end", ", \"scan.startup.mode\" = 'latest'")))
        .await
        .unwrap();
    let planned =
        pipeline(&mut session, "SELECT id, at > TIMESTAMP '2026-01-01 00:00:00' FROM from_start").await.unwrap();
    let preview = planned.preview.clone().unwrap().buffer;
    run(planned).await.1.unwrap();
    assert_eq!(final_rows(&preview.batches()).unwrap(), vec![vec!["1", "true"]]);

    let planned = pipeline(&mut session, "SELECT id FROM from_end").await.unwrap();
    let preview = planned.preview.clone().unwrap().buffer;
    run(planned).await.1.unwrap();
    assert!(final_rows(&preview.batches()).unwrap().is_empty());
}

async fn error(session: &mut Session, sql: String) -> String {
    pipeline(session, &sql).await.err().map(|e| e.to_string()).unwrap_or_default()
}

#[tokio::test]
async fn kafka_mistakes_fail_at_planning_with_what_to_do() {
    let mut session = Session::new();
    session
        .execute(&format!(
            "CREATE TABLE src (word VARCHAR) WITH ({}, format = 'json');
             CREATE TABLE plain (word VARCHAR, n BIGINT) WITH ({}, format = 'json');
             CREATE TABLE short (word VARCHAR) WITH ({}, format = 'json', \"transaction.timeout.ms\" = '30000');
             CREATE TABLE long (word VARCHAR) WITH ({}, format = 'json', \"transaction.timeout.ms\" = '3600000');
             CREATE TABLE keyless (word VARCHAR) WITH ({}, format = 'upsert');",
            kafka("t-in", ""),
            kafka("t-out", ""),
            kafka("t-out", ""),
            kafka("t-out", ""),
            kafka("t-out", "")
        ))
        .await
        .unwrap();
    let e = error(&mut session, "INSERT INTO plain SELECT word, count(*) FROM src GROUP BY word".into()).await;
    assert!(e.contains("format 'json' takes append-only rows") && e.contains("'upsert'"), "{e}");
    // The checkpoint timeout (10 min), the interval (10 s), the longest back-off (30 s), 60 s.
    let e = error(&mut session, "INSERT INTO short SELECT word FROM src".into()).await;
    assert!(e.contains("transaction.timeout.ms = 30000 is 670000 ms short"), "{e}");
    session.execute("SET checkpoint.timeout = '1 min'").await.unwrap();
    let e = error(&mut session, "INSERT INTO short SELECT word FROM src".into()).await;
    assert!(e.contains("transaction.timeout.ms = 30000 is 130000 ms short") && e.contains("checkpoint.timeout"), "{e}");
    // The librdkafka pass-through would override the checked value without a word.
    session
        .execute(&format!(
            "CREATE TABLE passed (word VARCHAR) WITH ({}, format = 'json', \"kafka.transaction.timeout.ms\" = '1000')",
            kafka("t-out", "")
        ))
        .await
        .unwrap();
    let e = error(&mut session, "INSERT INTO passed SELECT word FROM src".into()).await;
    assert!(e.contains("not as the librdkafka pass-through 'kafka.transaction.timeout.ms'"), "{e}");
    // Exactly-once recovery speaks to the brokers itself: security settings it cannot use are
    // refused by name (a writer without transactions, which librdkafka alone serves, takes them).
    let kerberos = "\"kafka.security.protocol\" = 'SASL_PLAINTEXT', \"kafka.sasl.mechanism\" = 'GSSAPI'";
    session
        .execute(&format!(
            "CREATE TABLE kerberos (word VARCHAR) WITH ({}, format = 'json', {kerberos});
             CREATE TABLE kerberos_loose (word VARCHAR) WITH ({}, format = 'json', delivery = 'at_least_once', {kerberos})",
            kafka("t-out", ""),
            kafka("t-out", "")
        ))
        .await
        .unwrap();
    let e = error(&mut session, "INSERT INTO kerberos SELECT word FROM src".into()).await;
    assert!(
        e.contains("table 'kerberos': exactly-once writing: kafka.sasl.mechanism 'GSSAPI' is not supported"),
        "{e}"
    );
    let e = error(&mut session, "INSERT INTO kerberos_loose SELECT word FROM src".into()).await;
    assert!(!e.contains("exactly-once writing"), "{e}");
    let e = error(&mut session, "INSERT INTO long SELECT word FROM src".into()).await;
    assert!(e.contains("exceeds the broker's transaction.max.timeout.ms = 900000 by 2700000 ms"), "{e}");
    let e = error(&mut session, "INSERT INTO keyless SELECT word FROM src".into()).await;
    assert!(e.contains("'upsert' needs the primary key: option 'key.fields'"), "{e}");
    // A changelog with event time may not be interval-joined: a row taken back could have
    // expired already.
    session
        .execute(&format!(
            "CREATE TABLE timed (word VARCHAR, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) WITH ({}, format = 'json');
             CREATE TABLE cdc (word VARCHAR, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) WITH ({}, format = 'debezium_json')",
            kafka("t-in", ""),
            kafka("t-in", "")
        ))
        .await
        .unwrap();
    let e = error(
        &mut session,
        "SELECT t.word FROM timed t JOIN cdc c ON t.word = c.word AND c.ts BETWEEN t.ts AND t.ts + INTERVAL '1' SECOND"
            .into(),
    )
    .await;
    assert!(e.contains("a window or interval join of an updating (changelog) input is not supported"), "{e}");
    // A source topic the brokers do not have fails once, naming it, rather than a source
    // that retries forever.
    let e = error(&mut session, "INSERT INTO plain SELECT word, 1 FROM src".into()).await;
    assert!(e.contains("table 'src': kafka topic 't-in' does not exist on 127.0.0.1:"), "{e}");
    // Two exactly-once writers of one pipeline with one transactional id prefix would fence
    // each other.
    session
        .execute(&format!(
            "CREATE TABLE gen WITH (connector = 'nexmark');
             CREATE TABLE fixed_a (word VARCHAR) WITH ({}, format = 'json', \"transactional_id.prefix\" = 'same');
             CREATE TABLE fixed_b (word VARCHAR) WITH ({}, format = 'json', \"transactional_id.prefix\" = 'same')",
            kafka("t-out", ""),
            kafka("t-out", "")
        ))
        .await
        .unwrap();
    let e = error(
        &mut session,
        "INSERT INTO fixed_a SELECT bid.channel FROM gen WHERE event_type = 2;
         INSERT INTO fixed_b SELECT person.name FROM gen WHERE event_type = 0"
            .into(),
    )
    .await;
    assert!(e.contains("table 'fixed_b': its transactional ids would start 'same' as table 'fixed_a''s do"), "{e}");
    session.execute("SET checkpoint.interval = 'off'").await.unwrap();
    let e = error(&mut session, "INSERT INTO plain SELECT word, 1 FROM src".into()).await;
    assert!(e.contains("checkpoint.interval is 'off'"), "{e}");
}

/// A sink topic the brokers do not have fails at planning, naming it and the option that would
/// let weir create it (the brokers' auto-creation is never asked for).
#[tokio::test]
async fn a_missing_sink_topic_fails_at_planning() {
    let mut session = Session::new();
    let input = topic("exists", 1).await;
    let missing = TestBroker::unique_name("missing-out");
    session
        .execute(&format!(
            "CREATE TABLE present (word VARCHAR) WITH ({}, format = 'json');
             CREATE TABLE absent (word VARCHAR) WITH ({}, format = 'json');
             CREATE TABLE half (word VARCHAR) WITH ({}, format = 'json', \"sink.create-topic.partitions\" = '3')",
            kafka(&input, ""),
            kafka(&missing, ""),
            kafka(&missing, "")
        ))
        .await
        .unwrap();
    let e = error(&mut session, "INSERT INTO absent SELECT word FROM present".into()).await;
    assert!(
        e.contains(&format!("table 'absent': kafka topic '{missing}' does not exist on 127.0.0.1:"))
            && e.contains("'sink.create-topic' = 'true'"),
        "{e}"
    );
    let e = error(&mut session, "INSERT INTO half SELECT word FROM present".into()).await;
    assert!(e.contains("need 'sink.create-topic' = 'true'"), "{e}");
}

/// `sink.create-topic` creates a missing sink topic with the partitions asked for (and the
/// dead-letter topic with `dead_letter.create-topic`), and the pipeline writes into it.
#[tokio::test]
async fn a_sink_topic_is_created_when_the_table_asks() {
    let input = input_with_bad_records().await;
    let (output, dead) = (TestBroker::unique_name("created-out"), TestBroker::unique_name("created-dead"));
    let mut session = Session::new();
    session
        .execute(&format!(
            "SET checkpoint.interval = '100 ms';
             CREATE TABLE created_in (id BIGINT, name VARCHAR) WITH ({}, format = 'json', \"scan.bounded.mode\" = 'latest',
               bad_records = 'dead_letter', \"dead_letter.topic\" = '{dead}', \"dead_letter.create-topic\" = 'true');
             CREATE TABLE created_out (id BIGINT) WITH ({}, format = 'json',
               \"sink.create-topic\" = 'true', \"sink.create-topic.partitions\" = '3')",
            kafka(&input, ""),
            kafka(&output, "")
        ))
        .await
        .unwrap();
    let planned = pipeline(&mut session, "INSERT INTO created_out SELECT id FROM created_in").await.unwrap();
    let partitions = |topic: &str| {
        use rdkafka::consumer::{BaseConsumer, Consumer};
        let consumer: BaseConsumer =
            rdkafka::ClientConfig::new().set("bootstrap.servers", broker().bootstrap()).create().unwrap();
        let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).unwrap();
        metadata.topics().first().map_or(0, |t| t.partitions().len())
    };
    assert_eq!(partitions(&output), 3, "created at planning, with the partitions asked for");
    assert!(partitions(&dead) >= 1, "the dead-letter topic too");
    run(planned).await.1.unwrap();
    let mut ids = values(&output);
    ids.sort();
    assert_eq!(ids, vec![r#"{"id":1}"#, r#"{"id":2}"#, r#"{"id":4}"#]);
    assert_eq!(values(&dead).len(), 2);
}

/// Deletes `topic` from the test broker.
async fn delete_topic(topic: &str) {
    use rdkafka::admin::{AdminClient, AdminOptions};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> =
        rdkafka::ClientConfig::new().set("bootstrap.servers", broker().bootstrap()).create().unwrap();
    let results = admin.delete_topics(&[topic], &AdminOptions::new()).await.unwrap();
    results.into_iter().for_each(|r| r.map(|_| ()).unwrap());
}

/// Starts `planned` unbounded, waits for `ready`, deletes `topic`, and returns the pipeline's
/// error: it must fail for good, naming the topic, after few restarts (not restart forever).
async fn fails_when_deleted(planned: crate::PlannedPipeline, topic: &str, ready: impl AsyncFn() -> bool) -> String {
    let dir = tempfile::tempdir().unwrap();
    let store = weir_state::StateStore::local(dir.path()).unwrap();
    let mut config = planned.config;
    config.restart.max_backoff = Duration::from_millis(500);
    let handle = weir_engine::start(planned.graph, config, store).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !ready().await {
        assert!(tokio::time::Instant::now() < deadline, "never ready: {:?}", handle.status());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    delete_topic(topic).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while !handle.is_finished() {
        assert!(tokio::time::Instant::now() < deadline, "still running after the delete: {:?}", handle.status());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let restarts = handle.status().attempts;
    let error = handle.wait().await.unwrap_err().to_string();
    assert!(restarts <= 5, "{restarts} attempts before failing: {error}");
    error
}

/// A source topic deleted while the pipeline reads it fails the pipeline for good, naming the
/// topic, instead of restarting forever with UNKNOWN_TOPIC_OR_PART.
#[tokio::test]
async fn a_source_topic_deleted_while_running_fails_the_pipeline() {
    let input = topic("deleted-in", 1).await;
    broker().produce(&input, [(0, None, br#"{"id":1}"#.as_slice())]).unwrap();
    let mut session = Session::new();
    session
        .execute(&format!(
            "SET checkpoint.interval = '100 ms';
             CREATE TABLE deleted_in (id BIGINT) WITH ({}, format = 'json', \"scan.partition_discovery.interval\" = '200 ms')",
            kafka(&input, "")
        ))
        .await
        .unwrap();
    let planned = pipeline(&mut session, "SELECT id FROM deleted_in").await.unwrap();
    let preview = planned.preview.clone().unwrap().buffer;
    let read = async || !final_rows(&preview.batches()).unwrap().is_empty();
    let error = fails_when_deleted(planned, &input, read).await;
    assert!(error.contains(&format!("kafka topic '{input}' does not exist on 127.0.0.1:")), "{error}");
}

/// A sink topic deleted while the pipeline writes it: the producers do not have the broker
/// recreate it; the pipeline fails for good, naming the topic.
#[tokio::test]
async fn a_sink_topic_deleted_while_running_fails_the_pipeline() {
    let output = topic("deleted-out", 1).await;
    let mut session = Session::new();
    session
        .execute(&format!(
            "SET checkpoint.interval = '100 ms';
             CREATE TABLE gen WITH (connector = 'nexmark', rate = '200');
             CREATE TABLE deleted_out (auction BIGINT) WITH ({}, format = 'json')",
            kafka(&output, "")
        ))
        .await
        .unwrap();
    let planned = pipeline(&mut session, "INSERT INTO deleted_out SELECT bid.auction FROM gen WHERE event_type = 2")
        .await
        .unwrap();
    let written = async || !values(&output).is_empty();
    let error = fails_when_deleted(planned, &output, written).await;
    assert!(error.contains(&format!("kafka topic '{output}' does not exist on 127.0.0.1:")), "{error}");
}

/// An unbounded read picks up a partition added while it runs (from its start), and the
/// offsets of completed checkpoints reach the consumer group.
#[tokio::test]
async fn new_partitions_are_read_and_offsets_reach_the_group() {
    use rdkafka::ClientConfig;
    use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions};
    use rdkafka::client::DefaultClientContext;
    use rdkafka::consumer::{BaseConsumer, Consumer};

    let input = topic("growing", 1).await;
    broker().produce(&input, [(0, None, br#"{"id":1}"#.as_slice())]).unwrap();
    let group = TestBroker::unique_name("monitor");
    let mut session = Session::new();
    session
        .execute(&format!(
            "SET checkpoint.interval = '100 ms';
             CREATE TABLE input (id BIGINT) WITH ({}, format = 'json', \"group.id\" = '{group}',
               \"scan.partition_discovery.interval\" = '200 ms')",
            kafka(&input, "")
        ))
        .await
        .unwrap();
    let planned = pipeline(&mut session, "SELECT id FROM input").await.unwrap();
    let preview = planned.preview.clone().unwrap().buffer;
    let dir = tempfile::tempdir().unwrap();
    let store = weir_state::StateStore::local(dir.path()).unwrap();
    let handle = weir_engine::start(planned.graph, planned.config, store).unwrap();
    let rows = |n: usize| {
        let preview = preview.clone();
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            while final_rows(&preview.batches()).unwrap().len() < n {
                assert!(tokio::time::Instant::now() < deadline, "only {:?}", final_rows(&preview.batches()));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    rows(1).await;
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", broker().bootstrap()).create().unwrap();
    let results = admin.create_partitions([&NewPartitions::new(&input, 2)], &AdminOptions::new()).await.unwrap();
    results.into_iter().for_each(|r| r.map(|_| ()).unwrap());
    broker().produce(&input, [(1, None, br#"{"id":2}"#.as_slice())]).unwrap();
    rows(2).await;
    // A checkpoint after both records: its offsets are committed to the group.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let committed = loop {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", broker().bootstrap())
            .set("group.id", &group)
            .create()
            .unwrap();
        let mut list = rdkafka::TopicPartitionList::new();
        list.add_partition(&input, 0);
        list.add_partition(&input, 1);
        let committed = consumer.committed_offsets(list, Duration::from_secs(10)).unwrap();
        let offsets: Vec<rdkafka::Offset> = committed.elements().iter().map(|e| e.offset()).collect();
        if offsets == vec![rdkafka::Offset::Offset(1), rdkafka::Offset::Offset(1)]
            || tokio::time::Instant::now() > deadline
        {
            break offsets;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    handle.kill().await;
    assert_eq!(committed, vec![rdkafka::Offset::Offset(1), rdkafka::Offset::Offset(1)]);
}

/// Processing-time windows close with the clock: a topic gets three records and then nothing,
/// and the window holding them is emitted while the unbounded source sits idle, whether the
/// table has the processing time (the source's clock) or a view adds it with PROCTIME() (the
/// stamping operator's ticks).
#[tokio::test]
async fn a_processing_time_window_closes_while_the_source_is_idle() {
    let input = topic("clock", 1).await;
    let records = [br#"{"id":1}"#.as_slice(), br#"{"id":2}"#, br#"{"id":3}"#];
    broker().produce(&input, records.iter().map(|r| (0, None, *r))).unwrap();
    let mut session = Session::new();
    session
        .execute(&format!(
            "SET checkpoint.interval = '100 ms';
             CREATE TABLE input (id BIGINT, pt AS PROCTIME()) WITH ({0}, format = 'json');
             CREATE TABLE plain (id BIGINT) WITH ({0}, format = 'json');
             CREATE VIEW stamped AS SELECT id, PROCTIME() AS pt FROM plain",
            kafka(&input, "")
        ))
        .await
        .unwrap();
    for table in ["input", "stamped"] {
        let query = format!("SELECT count(*), sum(id) FROM {table} GROUP BY tumble(pt, INTERVAL '200' MILLISECOND)");
        let planned = pipeline(&mut session, &query).await.unwrap();
        let preview = planned.preview.clone().unwrap().buffer;
        let dir = tempfile::tempdir().unwrap();
        let store = weir_state::StateStore::local(dir.path()).unwrap();
        let handle = weir_engine::start(planned.graph, planned.config, store).unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let total = |rows: &[Vec<String>], column: usize| {
            rows.iter().map(|r| r[column].parse::<i64>().unwrap_or(0)).sum::<i64>()
        };
        let rows = loop {
            let rows = final_rows(&preview.batches()).unwrap();
            if total(&rows, 0) >= 3 || tokio::time::Instant::now() > deadline {
                break rows;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        handle.kill().await;
        assert_eq!((total(&rows, 0), total(&rows, 1)), (3, 6), "{table}: {rows:?}");
    }
}

/// Debezium change events read as a changelog: the rows they leave, and an aggregate over them
/// that takes back what updates and deletes replace.
#[tokio::test]
async fn debezium_changes_are_read_as_a_changelog() {
    let input = topic("cdc", 1).await;
    let events = [
        r#"{"before":null,"after":{"id":1,"name":"a"},"op":"c"}"#,
        r#"{"before":null,"after":{"id":2,"name":"b"},"op":"r"}"#,
        r#"{"before":{"id":1,"name":"a"},"after":{"id":1,"name":"c"},"op":"u"}"#,
        r#"{"before":{"id":2,"name":"b"},"after":null,"op":"d"}"#,
        r#"{"before":null,"after":{"id":3,"name":"a"},"op":"c"}"#,
    ];
    broker().produce(&input, events.iter().map(|e| (0, None, e.as_bytes()))).unwrap();
    let mut session = Session::new();
    session
        .execute(&format!(
            "CREATE TABLE users (id BIGINT NOT NULL, name VARCHAR)
               WITH ({}, format = 'debezium_json', \"scan.bounded.mode\" = 'latest')",
            kafka(&input, "")
        ))
        .await
        .unwrap();
    // Orders enriched with their user's current name (a regular join of a changelog): user 1
    // was renamed, user 2 deleted.
    let orders = topic("orders", 1).await;
    let records = [r#"{"id":10,"user_id":1}"#, r#"{"id":11,"user_id":2}"#, r#"{"id":12,"user_id":3}"#];
    broker().produce(&orders, records.iter().map(|e| (0, None, e.as_bytes()))).unwrap();
    session
        .execute(&format!(
            "CREATE TABLE orders (id BIGINT, user_id BIGINT) WITH ({}, format = 'json', \"scan.bounded.mode\" = 'latest')",
            kafka(&orders, "")
        ))
        .await
        .unwrap();
    for (query, expected) in [
        ("SELECT id, name FROM users WHERE id > 0", vec![vec!["1", "c"], vec!["3", "a"]]),
        ("SELECT name, count(*) FROM users GROUP BY name", vec![vec!["a", "1"], vec!["c", "1"]]),
        ("SELECT o.id, u.name FROM orders o JOIN users u ON o.user_id = u.id", vec![vec!["10", "c"], vec!["12", "a"]]),
        (
            "SELECT o.id, u.name FROM orders o LEFT JOIN users u ON o.user_id = u.id",
            vec![vec!["10", "c"], vec!["11", "NULL"], vec!["12", "a"]],
        ),
    ] {
        let planned = pipeline(&mut session, query).await.unwrap();
        let preview = planned.preview.clone().unwrap().buffer;
        run(planned).await.1.unwrap();
        let mut rows = final_rows(&preview.batches()).unwrap();
        rows.sort();
        assert_eq!(rows, expected, "{query}");
    }
}

/// Kafka tables declared as Flink declares them: Flink's option names and values, CSV records
/// read and written, an upsert-kafka table keyed by its PRIMARY KEY, a statement set writing
/// both. What is read from the output topics with read_committed is exactly the input's.
#[tokio::test]
async fn flinks_kafka_declarations_run_as_written() {
    let input = topic("flink-csv-in", 2).await;
    let lines = [
        "1,apple,2023-11-14 22:13:20.000",
        "2,pear,2023-11-14 22:13:21.500",
        "not,a,row",
        "3,apple,2023-11-14 22:13:22.000",
    ];
    broker().produce(&input, lines.iter().enumerate().map(|(i, l)| ((i % 2) as i32, None, l.as_bytes()))).unwrap();
    let (copies, counts) = (topic("flink-csv-out", 1).await, topic("flink-upsert-out", 1).await);
    let bootstrap = broker().bootstrap();
    let mut session = Session::new();
    session
        .execute(&format!(
            "SET 'execution.checkpointing.interval' = '100ms';
             CREATE TABLE fruit (id BIGINT, name STRING, ts TIMESTAMP(3)) WITH (
               'connector' = 'kafka', 'topic' = '{input}', 'properties.bootstrap.servers' = '{bootstrap}',
               'properties.group.id' = 'flink-declared', 'scan.startup.mode' = 'earliest-offset',
               'scan.bounded.mode' = 'latest-offset', 'format' = 'csv', 'csv.ignore-parse-errors' = 'true');
             CREATE TABLE fruit_copy (id BIGINT, name STRING, ts TIMESTAMP(3)) WITH (
               'connector' = 'kafka', 'topic' = '{copies}', 'properties.bootstrap.servers' = '{bootstrap}',
               'value.format' = 'csv', 'csv.field-delimiter' = '|',
               'sink.delivery-guarantee' = 'exactly-once', 'sink.transactional-id-prefix' = 'flink-declared');
             CREATE TABLE fruit_counts (name STRING, n BIGINT, PRIMARY KEY (name) NOT ENFORCED) WITH (
               'connector' = 'upsert-kafka', 'topic' = '{counts}', 'properties.bootstrap.servers' = '{bootstrap}',
               'key.format' = 'json', 'value.format' = 'json');",
        ))
        .await
        .unwrap();
    let planned = pipeline(
        &mut session,
        "EXECUTE STATEMENT SET BEGIN
           INSERT INTO fruit_copy SELECT id, name, ts FROM fruit;
           INSERT INTO fruit_counts SELECT name, count(*) FROM fruit GROUP BY name;
         END;",
    )
    .await
    .unwrap();
    let (bad, result) = run(planned).await;
    result.unwrap();
    assert_eq!(bad, 1, "the line that is not a row is skipped and counted");
    let mut copied = values(&copies);
    copied.sort();
    assert_eq!(
        copied,
        ["1|apple|2023-11-14 22:13:20.000", "2|pear|2023-11-14 22:13:21.500", "3|apple|2023-11-14 22:13:22.000"]
    );
    let mut latest = BTreeMap::new();
    for record in broker().read_to_end(&counts, "read_committed").unwrap() {
        let key = String::from_utf8(record.key.unwrap()).unwrap();
        latest.insert(key, String::from_utf8(record.value.unwrap()).unwrap());
    }
    assert_eq!(
        latest.into_iter().collect::<Vec<_>>(),
        vec![
            (r#"{"name":"apple"}"#.to_string(), r#"{"name":"apple","n":2}"#.to_string()),
            (r#"{"name":"pear"}"#.into(), r#"{"name":"pear","n":1}"#.into()),
        ]
    );
    let error = session
        .execute(&format!(
            "CREATE TABLE keyless (name STRING, n BIGINT) WITH ('connector' = 'upsert-kafka', 'topic' = '{counts}', 'properties.bootstrap.servers' = '{bootstrap}', 'key.format' = 'json', 'value.format' = 'json')"
        ))
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("PRIMARY KEY (column, ...) NOT ENFORCED"), "{error}");
}

/// Flink's metadata columns: each row tells the topic, partition and offset of its record and
/// the record's timestamp; a table with them is refused as a sink, and an unknown key by name.
#[tokio::test]
async fn metadata_columns_read_where_each_record_is() {
    let input = topic("flink-metadata", 2).await;
    let records = [r#"{"id":1}"#, r#"{"id":2}"#, r#"{"id":3}"#];
    broker().produce(&input, records.iter().enumerate().map(|(i, r)| ((i % 2) as i32, None, r.as_bytes()))).unwrap();
    let mut session = Session::new();
    session
        .execute(&format!(
            "SET 'sql.dialect' = 'flink';
             CREATE TABLE located (
               id BIGINT,
               `timestamp` TIMESTAMP_LTZ(3) METADATA,
               part INT METADATA FROM 'partition' VIRTUAL,
               `offset` BIGINT METADATA VIRTUAL,
               src STRING METADATA FROM 'topic' VIRTUAL
             ) WITH ({}, 'format' = 'json', 'scan.bounded.mode' = 'latest-offset')",
            kafka(&input, "")
        ))
        .await
        .unwrap();
    let rows = result_lines(&mut session, "SELECT id, part, `offset`, src, `timestamp` IS NOT NULL FROM located").await;
    assert_eq!(rows, [format!("1 0 0 {input} true"), format!("2 1 0 {input} true"), format!("3 0 1 {input} true")]);
    for (column, expected) in [
        ("h STRING METADATA FROM 'headers'", "must be a MAP<STRING, BYTES> (or MAP<STRING, STRING>), not Utf8"),
        ("h BIGINT METADATA FROM 'leader-epoch'", "metadata key 'leader-epoch' is not supported"),
    ] {
        let sql = format!("CREATE TABLE headed (id BIGINT, {column}) WITH ({}, 'format' = 'json')", kafka(&input, ""));
        let error = session.execute(&sql).await.unwrap_err().to_string();
        assert!(error.contains(expected), "{error}");
    }
    // Written as Flink writes them: the timestamp and headers columns become the record's, the
    // VIRTUAL ones are left out of the INSERT, a read-only one that is not VIRTUAL is refused.
    let output = topic("flink-metadata-written", 1).await;
    session
        .execute(&format!(
            "CREATE TABLE stamped (
               id BIGINT,
               ts TIMESTAMP_LTZ(3) METADATA FROM 'timestamp',
               headers MAP<STRING, BYTES> METADATA,
               part INT METADATA FROM 'partition' VIRTUAL
             ) WITH ({}, 'format' = 'json', 'scan.bounded.mode' = 'latest-offset');
             CREATE TABLE placed (id BIGINT, part INT METADATA FROM 'partition') WITH ({}, 'format' = 'json')",
            kafka(&output, ""),
            kafka(&output, "")
        ))
        .await
        .unwrap();
    let insert = "INSERT INTO stamped SELECT id, TO_TIMESTAMP_LTZ(1700000000000 + id * 1000, 3), MAP['trace', ENCODE(CAST(id AS STRING), 'UTF-8')] FROM located";
    run(pipeline(&mut session, insert).await.unwrap()).await.1.unwrap();
    let values: Vec<String> = broker()
        .read_to_end(&output, "read_committed")
        .unwrap()
        .into_iter()
        .map(|r| String::from_utf8(r.value.unwrap_or_default()).unwrap())
        .collect();
    assert_eq!(values.len(), 3);
    assert!(
        values.iter().all(|v| v.starts_with(r#"{"id":"#) && !v.contains("trace") && !v.contains("ts")),
        "{values:?}"
    );
    let rows = result_lines(
        &mut session,
        "SELECT id, CAST(ts AS STRING), CAST(headers['trace'] AS STRING), part FROM stamped",
    )
    .await;
    assert_eq!(rows, ["1 2023-11-14T22:13:21 1 0", "2 2023-11-14T22:13:22 2 0", "3 2023-11-14T22:13:23 3 0"]);
    let error = session.execute("INSERT INTO placed SELECT id, 0 FROM located").await.unwrap_err().to_string();
    assert!(
        error.contains("metadata column 'part' (partition) is read-only: declare it METADATA ... VIRTUAL"),
        "{error}"
    );
}

/// An upsert-kafka table read as Flink reads it: each record is its key's latest row, a
/// tombstone removes the key, a record written again changes nothing. Queries over it see the
/// table as it stands (a changelog of it), and an upsert table written from it holds, by key,
/// exactly the input's latest rows.
#[tokio::test]
async fn an_upsert_table_reads_as_each_keys_latest_row() {
    let input = topic("flink-upsert-in", 2).await;
    let key = |item: &str| format!(r#"{{"item":"{item}"}}"#);
    let value = |item: &str, price: i64| Some(format!(r#"{{"item":"{item}","price":{price}}}"#));
    // A key stays on its partition, as Kafka's partitioner keeps it.
    let records: Vec<(i32, String, Option<String>)> = vec![
        (0, key("a"), value("a", 10)),
        (0, key("b"), value("b", 20)),
        (0, key("a"), value("a", 11)),
        (0, key("b"), None),
        (0, key("c"), value("c", 5)),
        (1, key("d"), value("d", 7)),
        (1, key("d"), value("d", 7)),
        (1, key("e"), value("e", 1)),
        (1, key("e"), None),
        (1, key("f"), None),
        (1, key("e"), value("e", 2)),
    ];
    let records = records.iter().map(|(p, k, v)| (*p, Some(k.as_bytes()), v.as_ref().map(String::as_bytes)));
    broker().produce_or_delete(&input, records).unwrap();
    let output = topic("flink-upsert-copy", 1).await;
    let bootstrap = broker().bootstrap();
    let mut session = Session::new();
    session
        .execute(&format!(
            "SET 'sql.dialect' = 'flink';
             SET 'execution.checkpointing.interval' = '100ms';
             CREATE TABLE prices (item STRING, price BIGINT NOT NULL, PRIMARY KEY (item) NOT ENFORCED) WITH (
               'connector' = 'upsert-kafka', 'topic' = '{input}', 'properties.bootstrap.servers' = '{bootstrap}',
               'key.format' = 'json', 'value.format' = 'json', 'scan.bounded.mode' = 'latest-offset');
             CREATE TABLE doubled (item STRING, price BIGINT, PRIMARY KEY (item) NOT ENFORCED) WITH (
               'connector' = 'upsert-kafka', 'topic' = '{output}', 'properties.bootstrap.servers' = '{bootstrap}',
               'key.format' = 'json', 'value.format' = 'json');"
        ))
        .await
        .unwrap();
    for (query, expected) in [
        ("SELECT item, price FROM prices", vec!["a 11", "c 5", "d 7", "e 2"]),
        ("SELECT count(*), sum(price) FROM prices", vec!["4 25"]),
        ("SELECT price > 6, count(*) FROM prices GROUP BY price > 6", vec!["false 2", "true 2"]),
    ] {
        assert_eq!(result_lines(&mut session, query).await, expected, "{query}");
    }
    let explained = session.execute("EXPLAIN SELECT item, price FROM prices").await.unwrap();
    let Some(crate::Output::Rows { rows, .. }) = explained.first() else { panic!("EXPLAIN gave no rows") };
    let lines: Vec<String> = rows.iter().map(|r| r.join(" ")).collect();
    assert!(lines.iter().any(|l| l.contains("upsert_normalize") && l.contains("each key's latest row")), "{lines:?}");
    assert!(lines.iter().any(|l| l.contains("-> upsert_normalize") && l.contains("hash")), "{lines:?}");
    let planned = pipeline(&mut session, "INSERT INTO doubled SELECT item, price * 2 FROM prices").await.unwrap();
    run(planned).await.1.unwrap();
    let mut latest = BTreeMap::new();
    for record in broker().read_to_end(&output, "read_committed").unwrap() {
        let key = String::from_utf8(record.key.unwrap()).unwrap();
        match record.value {
            Some(value) => latest.insert(key, String::from_utf8(value).unwrap()),
            None => latest.remove(&key),
        };
    }
    let expected: BTreeMap<String, String> = [("a", 22), ("c", 10), ("d", 14), ("e", 4)]
        .iter()
        .map(|(item, price)| (key(item), format!(r#"{{"item":"{item}","price":{price}}}"#)))
        .collect();
    assert_eq!(latest, expected);
}

/// Flink's `headers` metadata column: a map of each record's header keys to their values, read
/// as bytes or as text as the column declares; a record without headers has an empty map.
#[tokio::test]
async fn the_headers_column_maps_each_records_header_keys_to_their_values() {
    let input = topic("flink-headers", 1).await;
    let headers: [&[(&str, &[u8])]; 3] = [&[("trace", b"t-1"), ("origin", b"eu")], &[], &[("trace", b"t-3")]];
    let values: [&[u8]; 3] = [br#"{"id":1}"#, br#"{"id":2}"#, br#"{"id":3}"#];
    broker().produce_with_headers(&input, values.iter().zip(headers).map(|(v, h)| (0, None, Some(*v), h))).unwrap();
    let mut session = Session::new();
    session
        .execute(&format!(
            "SET 'sql.dialect' = 'flink';
             CREATE TABLE headed (id BIGINT, headers MAP<STRING, BYTES> METADATA)
               WITH ({0}, 'format' = 'json', 'scan.bounded.mode' = 'latest-offset');
             CREATE TABLE headed_text (id BIGINT, h MAP<STRING, STRING> METADATA FROM 'headers' VIRTUAL)
               WITH ({0}, 'format' = 'json', 'scan.bounded.mode' = 'latest-offset')",
            kafka(&input, "")
        ))
        .await
        .unwrap();
    for (query, expected) in [
        (
            "SELECT id, CAST(headers['trace'] AS STRING), CARDINALITY(headers) FROM headed",
            ["1 t-1 2", "2 NULL 0", "3 t-3 1"],
        ),
        (
            "SELECT id, h['trace'], MAP_KEYS(h) FROM headed_text",
            ["1 t-1 [trace, origin]", "2 NULL []", "3 t-3 [trace]"],
        ),
    ] {
        assert_eq!(result_lines(&mut session, query).await, expected, "{query}");
    }
}

/// An upsert table's normalizing state survives a kill: killed once its first records are
/// committed, updated (a key changed, one deleted, one written again unchanged, one new) and
/// restored at another parallelism, the pipeline writes exactly the changes the new records
/// make: the deleted key's tombstone (it knows the key), nothing for the unchanged one.
#[tokio::test]
async fn an_upsert_tables_latest_rows_survive_a_kill_and_a_rescale() {
    let input = topic("flink-upsert-killed-in", 2).await;
    let output = topic("flink-upsert-killed-out", 1).await;
    let produce = |records: &[(i32, &str, Option<i64>)]| {
        let records: Vec<(i32, String, Option<String>)> = records
            .iter()
            .map(|(p, item, price)| {
                let value = price.map(|price| format!(r#"{{"item":"{item}","price":{price}}}"#));
                (*p, format!(r#"{{"item":"{item}"}}"#), value)
            })
            .collect();
        let records = records.iter().map(|(p, k, v)| (*p, Some(k.as_bytes()), v.as_ref().map(String::as_bytes)));
        broker().produce_or_delete(&input, records).unwrap();
    };
    produce(&[(0, "a", Some(10)), (1, "b", Some(20)), (0, "c", Some(30))]);
    let bootstrap = broker().bootstrap();
    let mut session = Session::new();
    session
        .execute(&format!(
            "SET 'execution.checkpointing.interval' = '50ms';
             SET 'parallelism.default' = '2';
             CREATE TABLE prices (item STRING, price BIGINT, PRIMARY KEY (item) NOT ENFORCED) WITH (
               'connector' = 'upsert-kafka', 'topic' = '{input}', 'properties.bootstrap.servers' = '{bootstrap}',
               'key.format' = 'json', 'value.format' = 'json');
             CREATE TABLE doubled (item STRING, price BIGINT, PRIMARY KEY (item) NOT ENFORCED) WITH (
               'connector' = 'upsert-kafka', 'topic' = '{output}', 'properties.bootstrap.servers' = '{bootstrap}',
               'key.format' = 'json', 'value.format' = 'json', 'sink.transactional-id-prefix' = 'upsert-killed');"
        ))
        .await
        .unwrap();
    let planned = pipeline(&mut session, "INSERT INTO doubled SELECT item, price * 2 FROM prices").await.unwrap();
    let committed = || -> Vec<String> {
        let records = broker().read_to_end(&output, "read_committed").unwrap();
        let mut lines: Vec<String> = records
            .into_iter()
            .map(|r| {
                let key = String::from_utf8(r.key.unwrap_or_default()).unwrap();
                let value = r.value.map_or("tombstone".to_string(), |v| String::from_utf8(v).unwrap());
                format!("{key} {value}")
            })
            .collect();
        lines.sort();
        lines
    };
    let wait_for = |count: usize| async move {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while committed().len() < count {
            assert!(tokio::time::Instant::now() < deadline, "only {:?} committed", committed());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let store = weir_state::StateStore::local(dir.path()).unwrap();
    let first = weir_engine::start(planned.graph.clone(), planned.config.clone(), store.clone()).unwrap();
    wait_for(3).await;
    first.kill().await;
    produce(&[(0, "a", Some(11)), (1, "b", None), (0, "c", Some(30)), (1, "d", Some(40))]);
    let second = weir_engine::start(planned.graph.with_parallelism(3), planned.config, store).unwrap();
    wait_for(6).await;
    // A moment more, for anything written twice to show.
    tokio::time::sleep(Duration::from_millis(500)).await;
    second.kill().await;
    let line = |item: &str, price: Option<i64>| {
        let value = price.map_or("tombstone".to_string(), |p| format!(r#"{{"item":"{item}","price":{p}}}"#));
        format!(r#"{{"item":"{item}"}} {value}"#)
    };
    let mut expected = vec![
        line("a", Some(20)),
        line("b", Some(40)),
        line("c", Some(60)),
        line("a", Some(22)),
        line("b", None),
        line("d", Some(80)),
    ];
    expected.sort();
    assert_eq!(committed(), expected);
}
