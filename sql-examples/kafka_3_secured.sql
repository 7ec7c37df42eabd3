-- Kafka over an authenticated listener: reads the big bids kafka_2_etl.sql wrote, through the
-- test broker's SASL_PLAINTEXT listener (127.0.0.1:9094) as user 'weir' with SCRAM-SHA-512,
-- and writes the ones in euros above 5 million exactly once to weir-example-huge-bids there.
-- The `kafka.*` options are librdkafka's; weir's own recovery client (which commits what a
-- crashed run left pending) reaches the broker with the same ones. For TLS, add
-- "kafka.security.protocol" = 'SASL_SSL' (or 'SSL') and "kafka.ssl.ca.location" = '<ca.pem>';
-- the test broker's CA is ~/.cache/weir/broker-9092/security/ca.pem, its SSL port 9095.
-- Needs the broker: `bash tests/kafka/broker.sh start`, and kafka_1 and kafka_2 run before.
CREATE TABLE big_bids (auction BIGINT, bidder BIGINT, price_eur DOUBLE, channel VARCHAR, date_time TIMESTAMP)
WITH (
    connector = 'kafka',
    "bootstrap.servers" = '127.0.0.1:9094',
    "kafka.security.protocol" = 'SASL_PLAINTEXT',
    "kafka.sasl.mechanism" = 'SCRAM-SHA-512',
    "kafka.sasl.username" = 'weir',
    "kafka.sasl.password" = 'weir-secret',
    topic = 'weir-example-big-bids',
    format = 'json',
    "scan.startup.mode" = 'earliest',
    "scan.bounded.mode" = 'latest'
);
CREATE TABLE huge_bids (auction BIGINT, price_eur DOUBLE, channel VARCHAR)
WITH (
    connector = 'kafka',
    "bootstrap.servers" = '127.0.0.1:9094',
    "kafka.security.protocol" = 'SASL_PLAINTEXT',
    "kafka.sasl.mechanism" = 'SCRAM-SHA-512',
    "kafka.sasl.username" = 'weir',
    "kafka.sasl.password" = 'weir-secret',
    topic = 'weir-example-huge-bids',
    "sink.create-topic" = 'true',
    format = 'json'
);
INSERT INTO huge_bids SELECT auction, price_eur, channel FROM big_bids WHERE price_eur > 5000000;
SELECT channel, count(*) AS bids FROM big_bids GROUP BY channel;
