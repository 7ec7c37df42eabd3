-- Nexmark q15, bidding statistics per day: bids, bidders and auctions, in all and in three
-- price ranks. Shows: aggregates with FILTER (WHERE ...), DISTINCT counts, and an updating
-- aggregate grouped by a computed day (its changelog updates the day's row as bids arrive).
CREATE TABLE nexmark WITH (connector = 'nexmark', events = '30000', as_fast_as_possible = 'true');
SELECT to_char(date_time, '%Y-%m-%d') AS day,
       count(*) AS total_bids,
       count(*) FILTER (WHERE bid.price < 10000) AS rank1_bids,
       count(*) FILTER (WHERE bid.price >= 10000 AND bid.price < 1000000) AS rank2_bids,
       count(*) FILTER (WHERE bid.price >= 1000000) AS rank3_bids,
       count(DISTINCT bid.bidder) AS total_bidders,
       count(DISTINCT bid.bidder) FILTER (WHERE bid.price < 10000) AS rank1_bidders,
       count(DISTINCT bid.bidder) FILTER (WHERE bid.price >= 10000 AND bid.price < 1000000) AS rank2_bidders,
       count(DISTINCT bid.bidder) FILTER (WHERE bid.price >= 1000000) AS rank3_bidders,
       count(DISTINCT bid.auction) AS total_auctions,
       count(DISTINCT bid.auction) FILTER (WHERE bid.price < 10000) AS rank1_auctions,
       count(DISTINCT bid.auction) FILTER (WHERE bid.price >= 10000 AND bid.price < 1000000) AS rank2_auctions,
       count(DISTINCT bid.auction) FILTER (WHERE bid.price >= 1000000) AS rank3_auctions
FROM nexmark WHERE event_type = 2
GROUP BY to_char(date_time, '%Y-%m-%d');
