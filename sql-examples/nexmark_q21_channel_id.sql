-- Nexmark q21, add channel id: the four known channels map to fixed ids, any other channel's id
-- is taken from the url's channel_id parameter.
-- Shows: CASE and regular expressions in a streaming projection, event time from WATERMARK FOR.
CREATE TABLE nexmark (
    WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
) WITH (
    connector = 'nexmark',
    events = '50000',
    as_fast_as_possible = 'true'
);
SELECT bid.auction, bid.bidder, bid.price, bid.channel,
       CASE lower(bid.channel)
           WHEN 'apple' THEN '0'
           WHEN 'google' THEN '1'
           WHEN 'facebook' THEN '2'
           WHEN 'baidu' THEN '3'
           ELSE (regexp_match(bid.url, '(&|^)channel_id=([^&]*)'))[2]
       END AS channel_id
FROM nexmark
WHERE event_type = 2;
