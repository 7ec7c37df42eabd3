-- Flink's windowing table functions, as a Flink SQL user writes them: TABLE(TUMBLE|HOP|CUMULATE(
-- TABLE t, DESCRIPTOR(time column), ...)) gives each row once per window holding it, with
-- window_start, window_end and window_time. Shows: a cumulating window (running totals of each
-- 2-second period, updated every 500 ms), emitted as the watermark passes each window's end;
-- and a window top-N (the 3 highest bids of each 1-second tumbling window).
CREATE TABLE nexmark (
    WATERMARK FOR date_time AS date_time - INTERVAL '200' MILLISECOND
) WITH (connector = 'nexmark', events = '30000', as_fast_as_possible = 'true');
CREATE VIEW bids AS
    SELECT bid.auction AS auction, bid.bidder AS bidder, bid.price AS price, bid.channel AS channel, date_time
    FROM nexmark WHERE event_type = 2;
SET parallelism = 2;
SELECT window_start, window_end, channel, count(*) AS bids, sum(price) AS spend
FROM TABLE(CUMULATE(TABLE bids, DESCRIPTOR(date_time), INTERVAL '500' MILLISECOND, INTERVAL '2' SECOND))
GROUP BY window_start, window_end, channel;
SELECT window_start, window_end, auction, bidder, price, rn FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY price DESC) AS rn
    FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(date_time), INTERVAL '1' SECOND)))
WHERE rn <= 3;
