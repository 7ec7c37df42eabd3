-- Kafka-to-Kafka ETL, step 2 of 2: reads the bids kafka_1_load_bids.sql wrote (up to where the
-- topic ends when it starts), converts and filters them into weir-example-big-bids exactly
-- once, and prints bids per channel in 10-second windows of event time. Records that are not
-- JSON of the table's shape go to weir-example-bad-bids with the reason in their headers.
-- Needs a broker on 127.0.0.1:9092: `bash tests/kafka/broker.sh start`.
-- Shows: a Kafka source with WATERMARK FOR (per-partition watermarks), a bounded read
-- (`scan.bounded.mode`), a dead-letter topic, Kafka to Kafka, a window over a Kafka source.
CREATE TABLE bids (
    auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, date_time TIMESTAMP,
    WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND
) WITH (
    connector = 'kafka',
    "bootstrap.servers" = '127.0.0.1:9092',
    topic = 'weir-example-bids',
    format = 'json',
    "scan.startup.mode" = 'earliest',
    "scan.bounded.mode" = 'latest',
    bad_records = 'dead_letter',
    "dead_letter.topic" = 'weir-example-bad-bids',
    "dead_letter.create-topic" = 'true'
);
CREATE TABLE big_bids (auction BIGINT, bidder BIGINT, price_eur DOUBLE, channel VARCHAR, date_time TIMESTAMP)
WITH (
    connector = 'kafka',
    "bootstrap.servers" = '127.0.0.1:9092',
    topic = 'weir-example-big-bids',
    "sink.create-topic" = 'true',
    format = 'json',
    "key.fields" = 'auction'
);
SET parallelism = 2;
INSERT INTO big_bids
SELECT auction, bidder, price * 0.908, upper(channel), date_time FROM bids WHERE price > 1000000;
SELECT tumble(date_time, INTERVAL '10' SECOND) AS window_start,
       channel,
       count(*) AS bids,
       max(price) AS top_price
FROM bids
GROUP BY tumble(date_time, INTERVAL '10' SECOND), channel;
