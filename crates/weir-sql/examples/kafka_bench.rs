//! Kafka -> filter/projection -> Kafka throughput, per delivery mode, against the ceiling:
//! plain rdkafka consume + produce of the same bytes, no processing. Prints numbers, asserts
//! nothing. Needs the broker of tests/kafka/broker.sh (started if not running) or
//! WEIR_KAFKA_BOOTSTRAP.
//!
//! cargo run --profile bench-fast -p weir-sql --example kafka_bench [records]

// A benchmark stops at its first error, with the reason.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::DefaultProducerContext;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use weir_connectors::kafka::test_broker::TestBroker;
use weir_sql::{Output, Session};

const PARTITIONS: i32 = 4;

fn record(id: u64) -> String {
    let ms = id % 3_600_000;
    format!(
        r#"{{"id":{id},"user_id":{},"amount":{},"ts":"2024-01-01T00:{:02}:{:02}.{:03}","note":"a few more bytes of text"}}"#,
        id % 1000,
        (id * 7919) % 1000,
        ms / 60_000,
        (ms / 1000) % 60,
        ms % 1000
    )
}

/// The ceiling: plain rdkafka at the same parallelism as weir (2 threads, each a consumer of
/// half the partitions and a producer), writing every record's bytes unchanged.
fn ceiling(broker: &'static TestBroker, input: &str, output: &str, records: u64) -> Duration {
    let started = Instant::now();
    let threads: Vec<_> = (0..2)
        .map(|thread| {
            let (input, output) = (input.to_string(), output.to_string());
            std::thread::spawn(move || copy(broker, &input, &output, thread))
        })
        .collect();
    let copied: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(copied, records);
    started.elapsed()
}

/// Copies partitions `thread`, `thread + 2`, ... to the end they have now.
fn copy(broker: &TestBroker, input: &str, output: &str, thread: i32) -> u64 {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("group.id", TestBroker::unique_name("ceiling"))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("linger.ms", "5")
        .set("enable.idempotence", "true")
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    let mine: Vec<i32> = (0..PARTITIONS).filter(|p| p % 2 == thread).collect();
    for p in &mine {
        assignment.add_partition_offset(input, *p, Offset::Beginning).unwrap();
    }
    consumer.assign(&assignment).unwrap();
    let (mut copied, mut ended) = (0, 0);
    while ended < mine.len() {
        let message = match consumer.poll(Duration::from_secs(10)) {
            None => panic!("the input ran dry at {copied}"),
            Some(Err(KafkaError::PartitionEOF(_))) => {
                ended += 1;
                continue;
            }
            Some(message) => message.unwrap(),
        };
        let mut out = BaseRecord::<(), [u8]>::to(output).payload(message.payload().unwrap_or_default());
        loop {
            match producer.send(out) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull), back)) => {
                    out = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err((e, _)) => panic!("{e}"),
            }
        }
        copied += 1;
    }
    producer.flush(Duration::from_secs(60)).unwrap();
    copied
}

async fn weir(broker: &TestBroker, input: &str, output: &str, delivery: &str) -> (Duration, u64) {
    let mut session = Session::new();
    let kafka = |topic: &str| {
        format!(
            "connector = 'kafka', \"bootstrap.servers\" = '{}', topic = '{topic}', format = 'json'",
            broker.bootstrap()
        )
    };
    let sql = format!(
        "SET parallelism = '2';
         SET checkpoint.interval = '1 s';
         CREATE TABLE input (id BIGINT, user_id BIGINT, amount BIGINT, ts TIMESTAMP, note VARCHAR)
           WITH ({}, \"scan.bounded.mode\" = 'latest');
         CREATE TABLE out (id BIGINT, user_id BIGINT, amount BIGINT, ts TIMESTAMP, note VARCHAR)
           WITH ({}, delivery = '{delivery}');
         INSERT INTO out SELECT id, user_id, amount, ts, note FROM input WHERE amount >= 0;",
        kafka(input),
        kafka(output)
    );
    let Some(Output::Pipeline(planned)) = session.execute(&sql).await.unwrap().pop() else { panic!("no pipeline") };
    let dir = tempfile::tempdir().unwrap();
    let store = weir_state::StateStore::local(dir.path()).unwrap();
    let started = Instant::now();
    let handle = weir_engine::start(planned.graph, planned.config, store).unwrap();
    while !handle.is_finished() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = started.elapsed();
    let checkpoints = handle.status().checkpoints.len() as u64;
    handle.wait().await.unwrap();
    (elapsed, checkpoints)
}

#[tokio::main]
async fn main() {
    let records: u64 = std::env::args().nth(1).and_then(|n| n.parse().ok()).unwrap_or(1_000_000);
    let broker = TestBroker::get().unwrap();
    let input = broker.create_topic("bench-in", PARTITIONS).await.unwrap();
    let values: Vec<String> = (0..records).map(record).collect();
    let bytes: usize = values.iter().map(String::len).sum();
    broker
        .produce(&input, values.iter().enumerate().map(|(i, v)| ((i as i32) % PARTITIONS, None, v.as_bytes())))
        .unwrap();
    println!(
        "{records} JSON records of {} bytes on average in {PARTITIONS} partitions; weir at parallelism 2, checkpoints every 1 s",
        bytes as u64 / records
    );
    println!();
    println!("{:<44} {:>8} {:>12} {:>8}", "run", "seconds", "records/s", "MB/s");
    let line = |name: &str, elapsed: Duration| {
        let seconds = elapsed.as_secs_f64();
        println!("{name:<44} {seconds:>8.2} {:>12.0} {:>8.1}", records as f64 / seconds, bytes as f64 / seconds / 1e6);
        records as f64 / seconds
    };
    let output = broker.create_topic("bench-ceiling", PARTITIONS).await.unwrap();
    let (broker_ref, input_ref) = (broker, input.clone());
    let elapsed = tokio::task::spawn_blocking(move || ceiling(broker_ref, &input_ref, &output, records)).await.unwrap();
    let ceiling_rate = line("ceiling: rdkafka consume + produce, 2 threads", elapsed);
    let mut rates = Vec::new();
    for delivery in ["none", "at_least_once", "exactly_once"] {
        let output = broker.create_topic("bench-out", PARTITIONS).await.unwrap();
        let (elapsed, checkpoints) = weir(broker, &input, &output, delivery).await;
        rates.push(line(&format!("weir, delivery {delivery} ({checkpoints} ckpts)"), elapsed));
    }
    println!();
    println!("at_least_once / ceiling:       {:.0}% (goal: at least 70%)", 100.0 * rates[1] / ceiling_rate);
    println!("exactly_once / at_least_once:  {:.0}% (goal: at least 80%)", 100.0 * rates[2] / rates[1]);
    println!("exactly_once / ceiling:        {:.0}%", 100.0 * rates[2] / ceiling_rate);
}
