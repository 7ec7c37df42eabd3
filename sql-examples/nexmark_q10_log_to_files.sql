-- Nexmark q10, log to file system: every bid written to Parquet files partitioned by date and
-- hour, exactly once. Shows: PARTITIONED BY (Hive-style directories dt=.../hr=..., the files
-- holding the other columns), a rolling size (a partition's rows go to a new file once they
-- take 256 kB in memory; files are committed at checkpoints), and to_char on the event time.
-- The files land under weir-data/nexmark_q10/ (run from the repository root); a filesystem
-- table over the same path reads them back, partition columns included.
CREATE TABLE nexmark (
    WATERMARK FOR date_time AS date_time - INTERVAL '200' MILLISECOND
) WITH (connector = 'nexmark', events = '30000', as_fast_as_possible = 'true');
CREATE TABLE bids_log (
    auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP, extra VARCHAR, dt VARCHAR, hr VARCHAR
) PARTITIONED BY (dt, hr) WITH (
    connector = 'filesystem',
    path = 'weir-data/nexmark_q10',
    format = 'parquet',
    "sink.rolling-policy.file-size" = '256 kb'
);
SET parallelism = 2;
INSERT INTO bids_log
SELECT bid.auction, bid.bidder, bid.price, date_time, bid.extra,
       to_char(date_time, '%Y-%m-%d'), to_char(date_time, '%H')
FROM nexmark WHERE event_type = 2;
