-- Nexmark q16, channel statistics per day: q15's figures per channel and day, with the latest
-- minute seen. Shows: an updating aggregate keyed by two columns, FILTER and DISTINCT counts,
-- max over text.
CREATE TABLE nexmark WITH (connector = 'nexmark', events = '30000', as_fast_as_possible = 'true');
SET parallelism = 2;
SELECT bid.channel AS channel,
       to_char(date_time, '%Y-%m-%d') AS day,
       max(to_char(date_time, '%H:%M')) AS minute,
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
GROUP BY bid.channel, to_char(date_time, '%Y-%m-%d');
