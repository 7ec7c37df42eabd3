-- Click-stream sessions: each bidder's activity split into sessions that end after 50 ms
-- without a bid (read "30 minutes without a click" on a real site), with the session's length,
-- bid count and spend. Shows: session(...) windows per key, merged as late bids bridge them;
-- session_end(...), the session's last click plus the gap.
CREATE TABLE nexmark (
    WATERMARK FOR date_time AS date_time - INTERVAL '200' MILLISECOND
) WITH (connector = 'nexmark', events = '30000', as_fast_as_possible = 'true');
SET parallelism = 2;
SELECT bid.bidder AS user_id,
       session(date_time, INTERVAL '50' MILLISECOND) AS session_start,
       session_end(date_time, INTERVAL '50' MILLISECOND) AS session_end,
       count(*) AS clicks,
       sum(bid.price) AS spend
FROM nexmark WHERE event_type = 2
GROUP BY bid.bidder, session(date_time, INTERVAL '50' MILLISECOND);
