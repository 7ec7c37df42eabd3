-- Nexmark q12, processing-time windows: bids per bidder in tumbling windows of the time the
-- bids were read (10 ms here, 10 s on the reference's clock), not the time they were placed.
-- Shows: a processing-time column (pt AS PROCTIME()), whose watermark follows the wall clock,
-- so the windows close on time even while no bids arrive. Which bids share a window depends
-- on the clock, so the rows differ from run to run.
CREATE TABLE nexmark (pt AS PROCTIME()) WITH (connector = 'nexmark', events = '30000', rate = '20000');
SET parallelism = 2;
SELECT bid.bidder AS bidder, count(*) AS bid_count,
       tumble(pt, INTERVAL '10' MILLISECOND) AS starttime,
       tumble_end(pt, INTERVAL '10' MILLISECOND) AS endtime
FROM nexmark WHERE event_type = 2
GROUP BY bid.bidder, tumble(pt, INTERVAL '10' MILLISECOND);
