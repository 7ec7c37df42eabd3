-- Nexmark q22, url directories: the 3rd, 4th and 5th parts of each bid's url.
-- Shows: DataFusion string functions (split_part) in a streaming projection.
CREATE TABLE nexmark WITH (
    connector = 'nexmark',
    events = '50000',
    as_fast_as_possible = 'true'
);
SELECT bid.auction, bid.bidder, bid.price, bid.channel,
       split_part(bid.url, '/', 4) AS dir1,
       split_part(bid.url, '/', 5) AS dir2,
       split_part(bid.url, '/', 6) AS dir3
FROM nexmark
WHERE event_type = 2;
