-- Nexmark q14, calculation: bids converted to euros between 1,000,000 and 50,000,000, labelled
-- by the hour of day they came in, with how often 'c' occurs in their extra field. Shows:
-- date_part, CASE and string functions in a stateless pipeline.
CREATE TABLE nexmark WITH (connector = 'nexmark', events = '30000', as_fast_as_possible = 'true');
SELECT bid.auction AS auction, bid.bidder AS bidder, 0.908 * bid.price AS price,
       CASE
           WHEN date_part('hour', date_time) BETWEEN 8 AND 18 THEN 'dayTime'
           WHEN date_part('hour', date_time) <= 6 OR date_part('hour', date_time) >= 20 THEN 'nightTime'
           ELSE 'otherTime'
       END AS bid_time_type,
       date_time,
       char_length(bid.extra) - char_length(replace(bid.extra, 'c', '')) AS c_counts
FROM nexmark
WHERE event_type = 2 AND 0.908 * bid.price > 1000000 AND 0.908 * bid.price < 50000000;
