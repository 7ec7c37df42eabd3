-- Fraud-like bursts: bidders who place more than 10 bids, or more than 50,000,000 in total, in
-- any 1-second window sliding every 100 ms, with the card on file for them. Shows: hop(...)
-- windows (start, and end by hop_end) with a HAVING filter, then an interval join with the
-- person stream to attach the card (people who opened their account up to a minute before
-- the burst).
CREATE TABLE nexmark (
    WATERMARK FOR date_time AS date_time - INTERVAL '200' MILLISECOND
) WITH (connector = 'nexmark', events = '30000', as_fast_as_possible = 'true');
CREATE VIEW bursts AS
    SELECT bid.bidder AS bidder, hop(date_time, INTERVAL '100' MILLISECOND, INTERVAL '1' SECOND) AS window_start,
           hop_end(date_time, INTERVAL '100' MILLISECOND, INTERVAL '1' SECOND) AS window_end, count(*) AS bids, sum(bid.price) AS total
    FROM nexmark WHERE event_type = 2
    GROUP BY bid.bidder, hop(date_time, INTERVAL '100' MILLISECOND, INTERVAL '1' SECOND)
    HAVING count(*) > 10 OR sum(bid.price) > 50000000;
CREATE VIEW person AS
    SELECT person.id AS id, person.credit_card AS card, date_time FROM nexmark WHERE event_type = 0;
SET parallelism = 2;
SELECT b.bidder, p.card, b.window_start, b.window_end, b.bids, b.total
FROM bursts b JOIN person p
  ON b.bidder = p.id
 AND p.date_time BETWEEN b.window_start - INTERVAL '1' MINUTE AND b.window_start + INTERVAL '1' SECOND;
