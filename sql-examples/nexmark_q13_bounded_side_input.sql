-- Nexmark q13, bounded side input: every bid joined with a small static table (a JSON-lines file
-- under sql-examples/data/; run from the repository root) on a function of its auction. Shows: a
-- filesystem table as a side input, and a regular join that keeps the stream's rows only until
-- the side input has been read to its end (after that a bid meets the stored side rows and is
-- not kept).
CREATE TABLE nexmark (
    WATERMARK FOR date_time AS date_time - INTERVAL '200' MILLISECOND
) WITH (connector = 'nexmark', events = '30000', as_fast_as_possible = 'true');
CREATE TABLE side_input (id BIGINT, label VARCHAR)
    WITH (connector = 'filesystem', path = 'sql-examples/data/side_input', format = 'json');
SET parallelism = 2;
SELECT bid.auction, bid.bidder, bid.price, bid.date_time, s.label
FROM nexmark JOIN side_input s ON bid.auction % 100 = s.id
WHERE event_type = 2;
