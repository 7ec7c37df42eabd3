-- Each bid next to the recent prices of its auction: OVER aggregates over event time, as
-- Flink's over aggregation. Shows: a ROWS frame (this bid and the 10 before it in event
-- time); each row comes out once, when the watermark passes its time. (As in Flink, the
-- aggregates of one SELECT share one frame; RANGE frames over an interval work the same way.)
CREATE TABLE nexmark (
    WATERMARK FOR date_time AS date_time - INTERVAL '200' MILLISECOND
) WITH (connector = 'nexmark', events = '30000', as_fast_as_possible = 'true');
SET parallelism = 2;
SELECT bid.auction, bid.price,
       max(bid.price) OVER recent AS recent_max,
       avg(bid.price) OVER recent AS recent_avg,
       count(*) OVER recent AS recent_bids
FROM nexmark WHERE event_type = 2
WINDOW recent AS (PARTITION BY bid.auction ORDER BY date_time ROWS BETWEEN 10 PRECEDING AND CURRENT ROW);
