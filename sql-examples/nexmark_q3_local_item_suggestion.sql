-- Nexmark q3, local item suggestion: sellers in Oregon, Idaho or California and their auctions
-- in category 10. Shows: views over the one Nexmark table, a regular (updating) inner join
-- keyed on the seller, and state.ttl, which bounds how long a regular join keeps its rows.
CREATE TABLE nexmark WITH (connector = 'nexmark', events = '30000', as_fast_as_possible = 'true');
CREATE VIEW person AS
    SELECT person.id AS id, person.name AS name, person.city AS city, person.state AS state
    FROM nexmark WHERE event_type = 0;
CREATE VIEW auction AS
    SELECT auction.id AS id, auction.seller AS seller, auction.category AS category
    FROM nexmark WHERE event_type = 1;
SET parallelism = 2;
SET state.ttl = '1 hour';
SELECT p.name, p.city, p.state, a.id
FROM auction a JOIN person p ON a.seller = p.id
WHERE a.category = 10 AND p.state IN ('OR', 'ID', 'CA');
