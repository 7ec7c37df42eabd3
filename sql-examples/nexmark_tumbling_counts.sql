-- Bids per auction in 1-second tumbling windows of event time (the counting half of Nexmark q5).
-- Shows: WATERMARK FOR, tumble(...) in GROUP BY, DataFusion aggregates (count, max) in a
-- keyed window operator, emitted as the watermark passes each window's end.
CREATE TABLE nexmark (
    WATERMARK FOR date_time AS date_time - INTERVAL '100' MILLISECOND
) WITH (
    connector = 'nexmark',
    events = '30000',
    as_fast_as_possible = 'true'
);
SET parallelism = 2;
SELECT tumble(date_time, INTERVAL '1' SECOND) AS window_start,
       bid.auction AS auction,
       count(*) AS bids,
       max(bid.price) AS top_price
FROM nexmark
WHERE event_type = 2
GROUP BY tumble(date_time, INTERVAL '1' SECOND), bid.auction;
