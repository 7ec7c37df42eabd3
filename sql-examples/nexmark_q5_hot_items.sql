-- Nexmark q5, hot items: the auctions with the most bids in each 2-second window, sliding every
-- 500 ms. Shows: hop(...) windows; an aggregate grouped by a window start computed upstream,
-- which is that window again (append-only, dropped when the window closes); and a window join
-- of the counts with their maximum per window.
CREATE TABLE nexmark (
    WATERMARK FOR date_time AS date_time - INTERVAL '200' MILLISECOND
) WITH (connector = 'nexmark', events = '30000', as_fast_as_possible = 'true');
CREATE VIEW auction_bids AS
    SELECT bid.auction AS auction, count(*) AS num,
           hop(date_time, INTERVAL '500' MILLISECOND, INTERVAL '2' SECOND) AS window_start
    FROM nexmark WHERE event_type = 2
    GROUP BY bid.auction, hop(date_time, INTERVAL '500' MILLISECOND, INTERVAL '2' SECOND);
SET parallelism = 2;
SELECT ab.auction, ab.num, ab.window_start
FROM auction_bids ab
JOIN (SELECT max(num) AS top, window_start FROM auction_bids GROUP BY window_start) mb
  ON ab.window_start = mb.window_start AND ab.num >= mb.top;
