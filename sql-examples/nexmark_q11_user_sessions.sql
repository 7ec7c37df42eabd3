-- Nexmark q11, user sessions: bids per bidder per session, a session ending after 10 ms
-- without a bid from that bidder (read 10 s on the reference's clock). Shows: session(...)
-- windows per key with session_end(...), the session's last bid plus the gap.
CREATE TABLE nexmark (
    WATERMARK FOR date_time AS date_time - INTERVAL '200' MILLISECOND
) WITH (connector = 'nexmark', events = '30000', as_fast_as_possible = 'true');
SET parallelism = 2;
SELECT bid.bidder AS bidder, count(*) AS bid_count,
       session(date_time, INTERVAL '10' MILLISECOND) AS starttime,
       session_end(date_time, INTERVAL '10' MILLISECOND) AS endtime
FROM nexmark WHERE event_type = 2
GROUP BY bid.bidder, session(date_time, INTERVAL '10' MILLISECOND);
