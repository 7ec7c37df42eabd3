-- Nexmark q20, expand bid with auction: every bid on an auction of category 10, with that
-- auction's fields. Shows: a regular inner join of two views of one source (append-only
-- output, state kept for state.ttl).
CREATE TABLE nexmark WITH (connector = 'nexmark', events = '30000', as_fast_as_possible = 'true');
CREATE VIEW auction AS
    SELECT auction.id AS id, auction.item_name AS item_name, auction.description AS description,
           auction.initial_bid AS initial_bid, auction.reserve AS reserve, date_time,
           auction.expires AS expires, auction.seller AS seller, auction.category AS category
    FROM nexmark WHERE event_type = 1;
CREATE VIEW bid AS
    SELECT bid.auction AS auction, bid.bidder AS bidder, bid.price AS price, bid.channel AS channel,
           bid.url AS url, date_time
    FROM nexmark WHERE event_type = 2;
SET parallelism = 2;
SET state.ttl = '1 hour';
SELECT b.auction, b.bidder, b.price, b.channel, b.url, b.date_time AS bid_time,
       a.item_name, a.description, a.initial_bid, a.reserve, a.date_time AS auction_time,
       a.expires, a.seller, a.category
FROM bid b JOIN auction a ON b.auction = a.id
WHERE a.category = 10;
