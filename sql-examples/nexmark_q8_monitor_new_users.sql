-- Nexmark q8, monitor new users: people who opened an account and created an auction in the
-- same 500 ms window. Shows: a window join (both sides grouped into the same tumbling
-- windows, keyed on person and window; state dropped when the window closes). DataFusion
-- plans it as a semi join, since only the person's columns are selected.
CREATE TABLE nexmark (
    WATERMARK FOR date_time AS date_time - INTERVAL '200' MILLISECOND
) WITH (connector = 'nexmark', events = '30000', as_fast_as_possible = 'true');
SET parallelism = 2;
SELECT p.id, p.name, p.window_start
FROM (SELECT person.id AS id, person.name AS name, tumble(date_time, INTERVAL '500' MILLISECOND) AS window_start
      FROM nexmark WHERE event_type = 0
      GROUP BY person.id, person.name, tumble(date_time, INTERVAL '500' MILLISECOND)) p
JOIN (SELECT auction.seller AS seller, tumble(date_time, INTERVAL '500' MILLISECOND) AS window_start
      FROM nexmark WHERE event_type = 1
      GROUP BY auction.seller, tumble(date_time, INTERVAL '500' MILLISECOND)) a
  ON p.id = a.seller AND p.window_start = a.window_start;
