-- Nexmark q4, average price per category: the closing price of each auction (its highest bid
-- before it expires), averaged per category. Shows: a join whose time bound is a column
-- (auction.expires), so a regular join; an updating aggregate (max per auction) feeding
-- another (avg per category), which takes back an auction's old maximum when it rises. The
-- output is a changelog: the _change column says +I, -U, +U or -D.
CREATE TABLE nexmark WITH (connector = 'nexmark', events = '30000', as_fast_as_possible = 'true');
CREATE VIEW auction AS
    SELECT auction.id AS id, auction.category AS category, date_time, auction.expires AS expires
    FROM nexmark WHERE event_type = 1;
CREATE VIEW bid AS
    SELECT bid.auction AS auction, bid.price AS price, date_time
    FROM nexmark WHERE event_type = 2;
SET parallelism = 2;
SELECT category, avg(final) AS average_price
FROM (
    SELECT a.id, a.category, max(b.price) AS final
    FROM auction a JOIN bid b ON a.id = b.auction
    WHERE b.date_time BETWEEN a.date_time AND a.expires
    GROUP BY a.id, a.category
) GROUP BY category;
