-- Kafka-to-Kafka ETL, step 1 of 2: writes 30,000 Nexmark events' bids to the Kafka topic
-- weir-example-bids as JSON, exactly once (a transaction per checkpoint, committed when the
-- checkpoint completes). Needs a broker on 127.0.0.1:9092: `bash tests/kafka/broker.sh start`.
-- Shows: a Kafka sink table, `delivery` (exactly_once is the default), `key.fields`, a topic
-- weir creates when it is missing (`sink.create-topic`, with its partition count).
CREATE TABLE nexmark WITH (connector = 'nexmark', events = '30000', as_fast_as_possible = 'true');
CREATE TABLE bids (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, date_time TIMESTAMP)
WITH (
    connector = 'kafka',
    "bootstrap.servers" = '127.0.0.1:9092',
    topic = 'weir-example-bids',
    "sink.create-topic" = 'true',
    "sink.create-topic.partitions" = '4',
    format = 'json',
    "key.fields" = 'auction',
    delivery = 'exactly_once'
);
INSERT INTO bids
SELECT bid.auction, bid.bidder, bid.price, bid.channel, date_time FROM nexmark WHERE event_type = 2;
-- What went out, as a check: the latest bids over 1,000,000.
SELECT bid.auction, bid.bidder, bid.price FROM nexmark WHERE event_type = 2 AND bid.price > 1000000;
