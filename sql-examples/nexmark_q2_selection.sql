-- Nexmark q2, selection: auction and price of the bids whose auction id is divisible by 123.
-- Shows: a filter over struct fields, unaligned checkpoints every half second.
CREATE TABLE nexmark WITH (
    connector = 'nexmark',
    events = '200000',
    as_fast_as_possible = 'true'
);
SET checkpoint.unaligned = 'true';
SET checkpoint.interval = '500 ms';
SELECT bid.auction, bid.price
FROM nexmark
WHERE event_type = 2 AND bid.auction % 123 = 0;
