//! The two Kafka primitives weir's exactly-once sink rests on, proven against the real broker:
//! 1. one transaction spans several topics, and read_committed consumers see all of it after
//!    commit and none of it after abort (read_uncommitted ones see the aborted records);
//! 2. "resume-commit": a transaction whose producer process was killed after flushing is
//!    committed by other code from only (transactional id, producer id, epoch), with Kafka's
//!    FindCoordinator + EndTxn; and the broker's answers for already committed, already
//!    aborted, fenced and timed-out transactions are told apart.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafka_protocol::ResponseError;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::statistics::Statistics;
use rdkafka::{ClientContext, Message, Offset, TopicPartitionList};
use weir_connectors::kafka::test_broker::TestBroker;
use weir_connectors::kafka::{
    EndTxnOutcome, PendingTransaction, TransactionResult, TransactionState, TransactionsClient,
};

const TIMEOUT: Duration = Duration::from_secs(30);

fn broker() -> &'static TestBroker {
    TestBroker::get().unwrap_or_else(|e| panic!("no Kafka broker for tests: {e}"))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// Keeps the latest statistics' view of the producer id and epoch (librdkafka's only way of
/// exposing them).
#[derive(Default, Clone)]
struct StatsContext {
    producer_identity: Arc<Mutex<Option<(i64, i64)>>>,
}

impl ClientContext for StatsContext {
    fn stats(&self, statistics: Statistics) {
        if let Some(eos) = statistics.eos {
            *self.producer_identity.lock().unwrap() = Some((eos.producer_id, eos.producer_epoch));
        }
    }
}

impl ProducerContext for StatsContext {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &rdkafka::message::DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            panic!("delivery failed: {e}");
        }
    }
}

fn transactional_producer(transactional_id: &str, timeout_ms: u32) -> BaseProducer<StatsContext> {
    let producer: BaseProducer<StatsContext> = ClientConfig::new()
        .set("bootstrap.servers", broker().bootstrap())
        .set("transactional.id", transactional_id)
        .set("transaction.timeout.ms", timeout_ms.to_string())
        .set("statistics.interval.ms", "100")
        .create_with_context(StatsContext::default())
        .unwrap();
    producer.init_transactions(TIMEOUT).unwrap();
    producer
}

fn produce(producer: &BaseProducer<StatsContext>, topic: &str, payloads: &[String]) {
    for payload in payloads {
        producer.send(BaseRecord::<(), _>::to(topic).payload(payload)).unwrap();
    }
    producer.flush(TIMEOUT).unwrap();
}

fn payloads(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// Reads every partition of `topic` from the beginning with the given isolation level up to
/// its end, and returns the payloads seen. "The end" is where the broker reports partition EOF:
/// the high watermark for read_uncommitted, the last stable offset for read_committed (an open
/// transaction stops a read_committed reader there). Offsets are no guide: commit and abort
/// markers take offsets but are never delivered.
fn read_to_end(topic: &str, isolation: &str) -> Vec<String> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker().bootstrap())
        .set("group.id", TestBroker::unique_name("reader"))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", isolation)
        .create()
        .unwrap();
    let metadata = consumer.fetch_metadata(Some(topic), TIMEOUT).unwrap();
    let mut assignment = TopicPartitionList::new();
    let mut partitions_left = BTreeSet::new();
    for partition in metadata.topics()[0].partitions() {
        assignment.add_partition_offset(topic, partition.id(), Offset::Beginning).unwrap();
        partitions_left.insert(partition.id());
    }
    consumer.assign(&assignment).unwrap();
    let deadline = Instant::now() + TIMEOUT;
    let mut seen = Vec::new();
    while !partitions_left.is_empty() {
        assert!(Instant::now() < deadline, "{topic}: partitions {partitions_left:?} never reached their end");
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(message)) => seen.push(String::from_utf8(message.payload().unwrap_or_default().to_vec()).unwrap()),
            Some(Err(KafkaError::PartitionEOF(partition))) => {
                partitions_left.remove(&partition);
            }
            Some(Err(e)) => panic!("reading {topic}: {e}"),
            None => {}
        }
    }
    seen
}

/// Waits until the coordinator has written the commit or abort markers of `transactional_id`'s
/// last transaction. EndTxn (and librdkafka's commit/abort, which wait for it) is answered once
/// the coordinator has logged its decision; the markers reach the partitions after that, and
/// until they do a read_committed reader stops at the transaction's first offset.
fn settle(transactional_id: &str) {
    let rt = runtime();
    let client = TransactionsClient::new(broker().bootstrap());
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let description = rt.block_on(client.describe(transactional_id)).unwrap();
        let state = description.as_ref().map(|d| &d.state);
        if matches!(
            state,
            None | Some(TransactionState::CompleteCommit | TransactionState::CompleteAbort | TransactionState::Empty)
        ) {
            return;
        }
        assert!(Instant::now() < deadline, "{transactional_id} never settled: {description:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[test]
fn a_transaction_over_two_topics_is_all_or_nothing() {
    let rt = runtime();
    let topic_a = rt.block_on(broker().create_topic("two-a", 3)).unwrap();
    let topic_b = rt.block_on(broker().create_topic("two-b", 2)).unwrap();
    let transactional_id = TestBroker::unique_name("two-topics");
    let producer = transactional_producer(&transactional_id, 60_000);

    producer.begin_transaction().unwrap();
    produce(&producer, &topic_a, &payloads("committed-a", 50));
    produce(&producer, &topic_b, &payloads("committed-b", 50));
    producer.commit_transaction(TIMEOUT).unwrap();

    producer.begin_transaction().unwrap();
    produce(&producer, &topic_a, &payloads("aborted-a", 30));
    produce(&producer, &topic_b, &payloads("aborted-b", 30));
    producer.abort_transaction(TIMEOUT).unwrap();
    settle(&transactional_id);

    let read_both = |isolation| [read_to_end(&topic_a, isolation), read_to_end(&topic_b, isolation)].concat();
    let mut expected = [payloads("committed-a", 50), payloads("committed-b", 50)].concat();
    assert_eq!(
        sorted(read_both("read_committed")),
        sorted(expected.clone()),
        "read_committed: the committed records only"
    );
    expected.extend([payloads("aborted-a", 30), payloads("aborted-b", 30)].concat());
    assert_eq!(sorted(read_both("read_uncommitted")), sorted(expected), "read_uncommitted: the aborted ones too");
}

/// The child process of the resume-commit tests: begins a transaction, produces and flushes,
/// prints what a checkpoint would record, then waits to be killed with SIGKILL.
#[test]
#[ignore = "run by the resume-commit tests as a child process to be killed"]
fn child_producer_left_pending() {
    let (Ok(transactional_id), Ok(topic), Ok(timeout_ms)) = (
        std::env::var("WEIR_CHILD_TXN_ID"),
        std::env::var("WEIR_CHILD_TOPIC"),
        std::env::var("WEIR_CHILD_TXN_TIMEOUT_MS"),
    ) else {
        return;
    };
    let producer = transactional_producer(&transactional_id, timeout_ms.parse().unwrap());
    producer.begin_transaction().unwrap();
    // Over every partition, so the open transaction pins each one's last stable offset (left
    // to itself, librdkafka's sticky partitioner may put all 100 in one partition).
    let metadata = producer.client().fetch_metadata(Some(&topic), TIMEOUT).unwrap();
    let partitions = metadata.topics()[0].partitions().len() as i32;
    for (i, payload) in payloads("pending", 100).iter().enumerate() {
        producer.send(BaseRecord::<(), _>::to(&topic).payload(payload).partition(i as i32 % partitions)).unwrap();
    }
    producer.flush(TIMEOUT).unwrap();
    let pending = record_pending(&transactional_id, &producer);
    println!("PENDING {} {} {}", pending.transactional_id, pending.producer_id, pending.producer_epoch);
    std::thread::sleep(Duration::from_secs(600));
}

/// What the sink records at pre-commit: the coordinator's view (DescribeTransactions), checked
/// against librdkafka's statistics.
fn record_pending(transactional_id: &str, producer: &BaseProducer<StatsContext>) -> PendingTransaction {
    let client = TransactionsClient::new(broker().bootstrap());
    let description = runtime().block_on(client.describe(transactional_id)).unwrap().unwrap();
    assert_eq!(description.state, TransactionState::Ongoing);
    assert!(!description.partitions.is_empty(), "the flushed partitions are in the transaction");
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let from_stats = *producer.context().producer_identity.lock().unwrap();
        if from_stats == Some((description.producer_id, i64::from(description.producer_epoch))) {
            break;
        }
        assert!(Instant::now() < deadline, "statistics {from_stats:?} never agreed with {description:?}");
        producer.poll(Duration::from_millis(50));
    }
    PendingTransaction {
        transactional_id: transactional_id.to_string(),
        producer_id: description.producer_id,
        producer_epoch: description.producer_epoch,
    }
}

/// Runs `child_producer_left_pending` in a child process, waits for its record, kills it.
fn pending_transaction_of_killed_process(topic: &str, timeout_ms: u32) -> PendingTransaction {
    let transactional_id = TestBroker::unique_name("killed");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "transactions::child_producer_left_pending", "--ignored", "--nocapture", "--test-threads=1"])
        .env("WEIR_CHILD_TXN_ID", &transactional_id)
        .env("WEIR_CHILD_TOPIC", topic)
        .env("WEIR_CHILD_TXN_TIMEOUT_MS", timeout_ms.to_string())
        .env("WEIR_KAFKA_BOOTSTRAP", broker().bootstrap())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    // libtest prints "test NAME ... " without a newline before the test's own output.
    let line = stdout
        .lines()
        .map(Result::unwrap)
        .find_map(|l| l.split_once("PENDING ").map(|(_, record)| record.to_string()))
        .expect("the child printed its pending transaction");
    child.kill().unwrap(); // SIGKILL: no destructor, no abort, nothing flushed on the way out.
    child.wait().unwrap();
    let fields: Vec<&str> = line.split_whitespace().collect();
    PendingTransaction {
        transactional_id: fields[0].to_string(),
        producer_id: fields[1].parse().unwrap(),
        producer_epoch: fields[2].parse().unwrap(),
    }
}

/// A committed marker from another producer, so a reader knows when it has read far enough.
fn write_marker(topic: &str, marker: &str) {
    let transactional_id = TestBroker::unique_name("marker");
    let producer = transactional_producer(&transactional_id, 60_000);
    producer.begin_transaction().unwrap();
    produce(&producer, topic, &[marker.to_string()]);
    producer.commit_transaction(TIMEOUT).unwrap();
    settle(&transactional_id);
}

#[test]
fn resume_commit_of_a_killed_producers_transaction() {
    let rt = runtime();
    let topic = rt.block_on(broker().create_topic("resume", 3)).unwrap();
    let pending = pending_transaction_of_killed_process(&topic, 60_000);
    let client = TransactionsClient::new(broker().bootstrap());

    // Before the commit, the open transaction pins the last stable offset: a read_committed
    // reader sees neither its records nor a record committed after them.
    write_marker(&topic, "before");
    assert_eq!(read_to_end(&topic, "read_committed"), Vec::<String>::new());
    let uncommitted = read_to_end(&topic, "read_uncommitted");
    assert_eq!(sorted(uncommitted), sorted([payloads("pending", 100), vec!["before".to_string()]].concat()));

    let outcome = rt.block_on(client.end_transaction(&pending, TransactionResult::Commit)).unwrap();
    assert_eq!(outcome, EndTxnOutcome::Completed);
    settle(&pending.transactional_id);
    let after = read_to_end(&topic, "read_committed");
    assert_eq!(sorted(after), sorted([payloads("pending", 100), vec!["before".to_string()]].concat()));
    let description = rt.block_on(client.describe(&pending.transactional_id)).unwrap().unwrap();
    assert_eq!(description.state, TransactionState::CompleteCommit);

    // Already committed: committing again is answered "no error", so recovery may repeat it.
    let again = rt.block_on(client.end_transaction(&pending, TransactionResult::Commit)).unwrap();
    assert_eq!(again, EndTxnOutcome::Completed);
    // But aborting a committed transaction is refused.
    let abort = rt.block_on(client.end_transaction(&pending, TransactionResult::Abort)).unwrap();
    assert_eq!(abort, EndTxnOutcome::Rejected(ResponseError::InvalidTxnState));
}

#[test]
fn commit_of_an_aborted_transaction_is_invalid_txn_state() {
    let rt = runtime();
    let topic = rt.block_on(broker().create_topic("aborted", 1)).unwrap();
    let transactional_id = TestBroker::unique_name("aborted");
    let producer = transactional_producer(&transactional_id, 60_000);
    producer.begin_transaction().unwrap();
    produce(&producer, &topic, &payloads("aborted", 10));
    let pending = record_pending(&transactional_id, &producer);
    producer.abort_transaction(TIMEOUT).unwrap();

    let client = TransactionsClient::new(broker().bootstrap());
    let outcome = rt.block_on(client.end_transaction(&pending, TransactionResult::Commit)).unwrap();
    assert_eq!(outcome, EndTxnOutcome::Rejected(ResponseError::InvalidTxnState));
    // Aborting again is idempotent.
    let abort = rt.block_on(client.end_transaction(&pending, TransactionResult::Abort)).unwrap();
    assert_eq!(abort, EndTxnOutcome::Completed);
    settle(&pending.transactional_id);
    write_marker(&topic, "marker");
    assert_eq!(read_to_end(&topic, "read_committed"), vec!["marker".to_string()]);
}

#[test]
fn commit_after_a_new_producer_fenced_the_id_is_invalid_producer_epoch() {
    let rt = runtime();
    let topic = rt.block_on(broker().create_topic("fenced", 1)).unwrap();
    let pending = pending_transaction_of_killed_process(&topic, 60_000);
    // A new producer with the same transactional id: init_transactions bumps the epoch and
    // aborts the open transaction. This is what recovery does to ids it does not commit.
    let fencer = transactional_producer(&pending.transactional_id, 60_000);
    drop(fencer);

    let client = TransactionsClient::new(broker().bootstrap());
    let description = rt.block_on(client.describe(&pending.transactional_id)).unwrap().unwrap();
    assert_eq!(description.producer_id, pending.producer_id, "same producer id, ...");
    assert!(description.producer_epoch > pending.producer_epoch, "... a newer epoch: {description:?}");
    let outcome = rt.block_on(client.end_transaction(&pending, TransactionResult::Commit)).unwrap();
    assert_eq!(outcome, EndTxnOutcome::Rejected(ResponseError::InvalidProducerEpoch));
    settle(&pending.transactional_id);
    write_marker(&topic, "marker");
    assert_eq!(read_to_end(&topic, "read_committed"), vec!["marker".to_string()]);
}

#[test]
fn commit_after_the_transaction_timed_out_is_invalid_producer_epoch() {
    let rt = runtime();
    let topic = rt.block_on(broker().create_topic("timed-out", 1)).unwrap();
    let pending = pending_transaction_of_killed_process(&topic, 2_000);
    let client = TransactionsClient::new(broker().bootstrap());
    // The broker aborts a transaction older than its timeout, bumping the epoch.
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let description = rt.block_on(client.describe(&pending.transactional_id)).unwrap().unwrap();
        if description.state == TransactionState::CompleteAbort {
            break;
        }
        assert!(Instant::now() < deadline, "never aborted on timeout: {description:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let outcome = rt.block_on(client.end_transaction(&pending, TransactionResult::Commit)).unwrap();
    assert_eq!(outcome, EndTxnOutcome::Rejected(ResponseError::InvalidProducerEpoch));
    settle(&pending.transactional_id);
    write_marker(&topic, "marker");
    assert_eq!(read_to_end(&topic, "read_committed"), vec!["marker".to_string()]);
}

#[test]
fn unknown_transactional_id_is_described_as_none_and_cannot_be_committed() {
    let rt = runtime();
    let client = TransactionsClient::new(broker().bootstrap());
    let never_used = TestBroker::unique_name("never-used");
    assert_eq!(rt.block_on(client.describe(&never_used)).unwrap(), None);
    let pending = PendingTransaction { transactional_id: never_used, producer_id: 12345, producer_epoch: 0 };
    let outcome = rt.block_on(client.end_transaction(&pending, TransactionResult::Commit)).unwrap();
    assert_eq!(outcome, EndTxnOutcome::Rejected(ResponseError::InvalidProducerIdMapping));
}
