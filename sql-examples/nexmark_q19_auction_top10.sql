-- Nexmark q19, auction top-10: the ten highest bids of each auction, with their rank. Shows:
-- top-N without a window (ROW_NUMBER() with rn <= 10): when a bid enters an auction's top ten,
-- every rank below it moves down one (-U/+U) and the eleventh leaves.
CREATE TABLE nexmark WITH (connector = 'nexmark', events = '30000', as_fast_as_possible = 'true');
CREATE VIEW bid AS
    SELECT bid.auction AS auction, bid.bidder AS bidder, bid.price AS price, date_time
    FROM nexmark WHERE event_type = 2;
SET parallelism = 2;
SELECT * FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rank_number
    FROM bid
) WHERE rank_number <= 10;
