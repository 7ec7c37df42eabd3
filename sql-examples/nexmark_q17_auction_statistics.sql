-- Nexmark q17, auction statistics per day: per auction and day, its bids in all and by price
-- rank, and the lowest, highest, average and total price. Shows: an updating aggregate keyed
-- by two columns with FILTER counts and min/max/avg/sum.
CREATE TABLE nexmark WITH (connector = 'nexmark', events = '30000', as_fast_as_possible = 'true');
SET parallelism = 2;
SELECT bid.auction AS auction,
       to_char(date_time, '%Y-%m-%d') AS day,
       count(*) AS total_bids,
       count(*) FILTER (WHERE bid.price < 10000) AS rank1_bids,
       count(*) FILTER (WHERE bid.price >= 10000 AND bid.price < 1000000) AS rank2_bids,
       count(*) FILTER (WHERE bid.price >= 1000000) AS rank3_bids,
       min(bid.price) AS min_price,
       max(bid.price) AS max_price,
       avg(bid.price) AS avg_price,
       sum(bid.price) AS sum_price
FROM nexmark WHERE event_type = 2
GROUP BY bid.auction, to_char(date_time, '%Y-%m-%d');
