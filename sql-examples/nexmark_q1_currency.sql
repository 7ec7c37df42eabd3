-- Nexmark q1, currency conversion: q0 with the price in euros (x 0.908).
-- Shows: arithmetic and casts from DataFusion, parallelism 2 over the generator's splits.
CREATE TABLE nexmark WITH (
    connector = 'nexmark',
    events = '100000',
    as_fast_as_possible = 'true'
);
SET parallelism = 2;
SELECT bid.auction, bid.bidder, CAST(bid.price * 0.908 AS BIGINT) AS price_eur, bid.date_time
FROM nexmark
WHERE event_type = 2;
