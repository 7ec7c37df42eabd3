-- Nexmark q18, last bid: the most recent bid of each bidder on each auction. Shows:
-- deduplication as top-1 (ROW_NUMBER() ... ORDER BY date_time DESC with rn = 1): a bidder's
-- newer bid replaces the older one in the changelog (-U old, +U new).
CREATE TABLE nexmark WITH (connector = 'nexmark', events = '30000', as_fast_as_possible = 'true');
CREATE VIEW bid AS
    SELECT bid.auction AS auction, bid.bidder AS bidder, bid.price AS price, bid.channel AS channel,
           bid.url AS url, date_time
    FROM nexmark WHERE event_type = 2;
SET parallelism = 2;
SELECT auction, bidder, price, channel, url, date_time FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY date_time DESC) AS rank_number
    FROM bid
) WHERE rank_number <= 1;
