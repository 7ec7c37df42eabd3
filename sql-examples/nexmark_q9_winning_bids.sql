-- Nexmark q9, winning bids: every auction with its winning bid, the highest one placed while
-- the auction was open (the earliest wins a tie). Shows: a regular join bounded by a column
-- (auction.expires), and top-1 per auction (ROW_NUMBER() with rn = 1) over it, an updating
-- result: when a higher bid arrives, the auction's row is updated (-U old, +U new).
CREATE TABLE nexmark WITH (connector = 'nexmark', events = '30000', as_fast_as_possible = 'true');
CREATE VIEW auction AS
    SELECT auction.id AS id, auction.item_name AS item_name, auction.seller AS seller,
           auction.category AS category, date_time, auction.expires AS expires
    FROM nexmark WHERE event_type = 1;
CREATE VIEW bid AS
    SELECT bid.auction AS auction, bid.bidder AS bidder, bid.price AS price, date_time
    FROM nexmark WHERE event_type = 2;
SET parallelism = 2;
SELECT id, item_name, seller, category, price, bidder, bid_time FROM (
    SELECT a.id, a.item_name, a.seller, a.category, b.price, b.bidder, b.date_time AS bid_time,
           ROW_NUMBER() OVER (PARTITION BY a.id ORDER BY b.price DESC, b.date_time) AS rn
    FROM auction a JOIN bid b ON a.id = b.auction
    WHERE b.date_time BETWEEN a.date_time AND a.expires
) WHERE rn = 1;
