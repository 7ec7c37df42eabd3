-- Nexmark q0, pass-through: every bid's auction, bidder, price, time and extra.
-- Shows: the embedded Nexmark generator (no Kafka needed), struct field access, a filter on
-- the event kind, checkpoints every second. Bounded to 100,000 events so it finishes.
CREATE TABLE nexmark WITH (
    connector = 'nexmark',
    events = '100000',
    as_fast_as_possible = 'true'
);
SET checkpoint.interval = '1 s';
SELECT bid.auction, bid.bidder, bid.price, bid.date_time, bid.extra
FROM nexmark
WHERE event_type = 2;
