-- Nexmark q7, highest bid: the bids at the highest price of each 500 ms window. Shows: an
-- interval join of the bids with their window's maximum, which comes out when the window
-- closes; the join keeps each bid until its window's maximum can no longer arrive.
CREATE TABLE nexmark (
    WATERMARK FOR date_time AS date_time - INTERVAL '200' MILLISECOND
) WITH (connector = 'nexmark', events = '30000', as_fast_as_possible = 'true');
CREATE VIEW bid AS
    SELECT bid.auction AS auction, bid.bidder AS bidder, bid.price AS price, date_time
    FROM nexmark WHERE event_type = 2;
SET parallelism = 2;
SELECT b.auction, b.price, b.bidder, b.date_time
FROM bid b
JOIN (SELECT max(price) AS top, tumble(date_time, INTERVAL '500' MILLISECOND) AS window_start
      FROM bid GROUP BY tumble(date_time, INTERVAL '500' MILLISECOND)) m
  ON b.price = m.top
 AND b.date_time BETWEEN m.window_start AND m.window_start + INTERVAL '499' MILLISECOND;
