//! Streaming answers against batch answers: a query run as a pipeline over a bounded Nexmark
//! input (parallelism 2, checkpoints on) must leave exactly the rows DataFusion computes as a
//! batch query over the same events. For an updating query, the rows its changelog leaves;
//! for hopping and session windows, which have no batch form, the batch query spells the
//! windows out.

use std::sync::Arc;

use datafusion::datasource::MemTable;
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;
use weir_connectors::nexmark::{NexmarkConfig, NexmarkGenerator};

use crate::slt::final_rows;
use crate::{Output, Session};

const EVENTS: u64 = 20_000;

/// A Nexmark table of [`EVENTS`] events with a watermark delay that covers the generator's
/// disorder (a subtask reads its splits a batch at a time, 10 ms of event time per batch), so
/// no row is late.
const SETUP: &str = "CREATE TABLE nexmark (WATERMARK FOR date_time AS date_time - INTERVAL '100' MILLISECOND) \
     WITH (connector = 'nexmark', events = '20000', as_fast_as_possible = 'true', splits = '4', batch_size = '100');
     SET parallelism = 2; SET checkpoint.interval = '20 ms'";

fn sorted(rows: Vec<Vec<String>>) -> Vec<String> {
    let mut rows: Vec<String> = rows.into_iter().map(|r| r.join(" | ")).collect();
    rows.sort();
    rows
}

/// The rows `query` leaves run as a pipeline, the graph's description, and the rows of
/// `batch_query` run by DataFusion over the same events.
async fn streamed_and_batch(query: &str, batch_query: &str) -> (Vec<String>, String, Vec<String>) {
    streamed_and_batch_at(NexmarkConfig::default().rate, query, batch_query).await
}

/// [`streamed_and_batch`] over events generated at `rate` events per second of event time.
async fn streamed_and_batch_at(rate: u64, query: &str, batch_query: &str) -> (Vec<String>, String, Vec<String>) {
    let mut session = Session::new();
    session.preview_rows = 10_000_000;
    // The disorder a batch of 100 events per split brings grows as the rate falls: so does the
    // watermark delay that covers it.
    let delay_ms = 100 * NexmarkConfig::default().rate / rate.max(1);
    let setup = SETUP
        .replace("events = '20000'", &format!("events = '20000', rate = '{rate}'"))
        .replace("INTERVAL '100' MILLISECOND", &format!("INTERVAL '{delay_ms}' MILLISECOND"));
    session.execute(&setup).await.unwrap();
    let pipeline = match session.execute(query).await.unwrap_or_else(|e| panic!("{query}: {e}")).pop() {
        Some(Output::Pipeline(pipeline)) => *pipeline,
        other => panic!("{query}: no pipeline: {other:?}"),
    };
    let description = pipeline.graph.describe(true);
    let preview = pipeline.preview.clone().unwrap().buffer;
    let dir = tempfile::tempdir().unwrap();
    let store = weir_state::StateStore::local(dir.path()).unwrap();
    weir_engine::start(pipeline.graph, pipeline.config, store).unwrap().wait().await.unwrap();
    let streamed = sorted(final_rows(&preview.batches()).unwrap());

    let events = NexmarkGenerator::new(NexmarkConfig { events: Some(EVENTS), rate, ..NexmarkConfig::default() })
        .batch(&(0..EVENTS).collect::<Vec<_>>())
        .unwrap();
    let context = SessionContext::new();
    for function in crate::window_functions::window_functions() {
        context.register_udf(function);
    }
    context
        .register_table("nexmark", Arc::new(MemTable::try_new(events.schema(), vec![vec![events]]).unwrap()))
        .unwrap();
    // Through the same parser as the session's, so Flink's window table functions run too.
    let tokens = crate::window_table_functions::tokens(batch_query).unwrap();
    let statement = Parser::new(&GenericDialect {}).with_tokens_with_locations(tokens).parse_statement().unwrap();
    let plan = context.state().statement_to_plan(DFStatement::Statement(Box::new(statement))).await.unwrap();
    let batches = context.execute_logical_plan(plan).await.unwrap().collect().await.unwrap();
    (streamed, description, sorted(final_rows(&batches).unwrap()))
}

async fn same_as_batch(query: &str) -> (Vec<String>, String) {
    let (streamed, description, batch) = streamed_and_batch(query, query).await;
    if streamed != batch {
        // The rows either side has that the other lacks, a few of each.
        let only =
            |a: &[String], b: &[String]| a.iter().filter(|r| !b.contains(r)).take(3).cloned().collect::<Vec<_>>();
        panic!(
            "{query}\n{description}\n{} rows streamed, {} in batch; only streamed: {:#?}\nonly in batch: {:#?}",
            streamed.len(),
            batch.len(),
            only(&streamed, &batch),
            only(&batch, &streamed)
        );
    }
    (batch, description)
}

const PERSONS: &str =
    "(SELECT person.id AS id, person.name AS name, person.state AS state, date_time FROM nexmark WHERE event_type = 0)";
const AUCTIONS: &str = "(SELECT auction.id AS id, auction.seller AS seller, auction.category AS category, date_time FROM nexmark WHERE event_type = 1)";
const BIDS: &str = "(SELECT bid.auction AS auction, bid.bidder AS bidder, bid.price AS price, date_time FROM nexmark WHERE event_type = 2)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_query_streams_the_batch_answer() {
    let (rows, _) = same_as_batch(
        "SELECT bid.auction AS auction, bid.price * 908 / 1000 AS price, upper(bid.channel) AS channel \
         FROM nexmark WHERE event_type = 2 AND bid.auction % 7 = 0",
    )
    .await;
    assert!(!rows.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tumbling_windows_equal_the_batch_answer() {
    let (rows, _) = same_as_batch(
        "SELECT tumble(date_time, INTERVAL '100' MILLISECOND) AS window_start, auction.category AS category, \
         count(*) AS auctions, sum(auction.initial_bid) AS initial, avg(auction.reserve) AS reserve, \
         max(auction.seller) AS seller, count(DISTINCT auction.seller) AS sellers, \
         count(*) FILTER (WHERE auction.reserve > 10000) AS dear, sum(auction.initial_bid) FILTER (WHERE auction.seller % 2 = 0) AS even \
         FROM nexmark WHERE event_type = 1 \
         GROUP BY tumble(date_time, INTERVAL '100' MILLISECOND), auction.category",
    )
    .await;
    assert_eq!(rows.len(), 20 * 5, "20 windows of 100 ms, 5 categories");
}

/// The keys may come before the window in GROUP BY.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_after_the_keys_in_group_by_equals_the_batch_answer() {
    let (rows, _) = same_as_batch(
        "SELECT auction.category, tumble(date_time, INTERVAL '200' MILLISECOND) AS w, count(*) \
         FROM nexmark WHERE event_type = 1 GROUP BY auction.category, tumble(date_time, INTERVAL '200' MILLISECOND)",
    )
    .await;
    assert_eq!(rows.len(), 10 * 5);
}

/// A row is in size/slide hopping windows: the batch query puts each row in the windows
/// starting at its 50 ms slot and the three before. `hop_end` is each window's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hopping_windows_equal_the_batch_answer() {
    let query = "SELECT hop(date_time, INTERVAL '50' MILLISECOND, INTERVAL '200' MILLISECOND) AS w, auction.category AS category, \
                 count(*) AS auctions, max(auction.reserve) AS reserve, \
                 hop_end(date_time, INTERVAL '50' MILLISECOND, INTERVAL '200' MILLISECOND) AS w_end \
                 FROM nexmark WHERE event_type = 1 \
                 GROUP BY hop(date_time, INTERVAL '50' MILLISECOND, INTERVAL '200' MILLISECOND), auction.category";
    let batch = "SELECT w, category, count(*), max(reserve), w + INTERVAL '200' MILLISECOND FROM ( \
                   SELECT to_timestamp_millis(CAST(tumble(date_time, INTERVAL '50' MILLISECOND) AS BIGINT) - k * 50) AS w, \
                          auction.category AS category, auction.reserve AS reserve \
                   FROM nexmark CROSS JOIN (VALUES (0), (1), (2), (3)) AS slots(k) WHERE event_type = 1) \
                 GROUP BY w, category";
    let (streamed, _, batch) = streamed_and_batch(query, batch).await;
    assert_eq!(streamed.len(), (40 + 3) * 5, "windows every 50 ms over 2 s, and 3 more reaching back before it");
    assert_eq!(streamed, batch);
}

/// A session of a bidder ends 20 ms after its last bid (`session_end`); the batch query
/// numbers sessions with LAG and a running sum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_windows_equal_the_batch_answer() {
    let query = "SELECT session(date_time, INTERVAL '20' MILLISECOND) AS s, bid.bidder AS bidder, count(*) AS bids, \
                 max(date_time) AS last, session_end(date_time, INTERVAL '20' MILLISECOND) AS s_end \
                 FROM nexmark WHERE event_type = 2 \
                 GROUP BY session(date_time, INTERVAL '20' MILLISECOND), bid.bidder";
    let batch = "WITH marked AS ( \
                   SELECT bid.bidder AS bidder, date_time, \
                          CASE WHEN lag(date_time) OVER (PARTITION BY bid.bidder ORDER BY date_time) IS NULL \
                                 OR date_time - lag(date_time) OVER (PARTITION BY bid.bidder ORDER BY date_time) >= INTERVAL '20' MILLISECOND \
                               THEN 1 ELSE 0 END AS new_session \
                   FROM nexmark WHERE event_type = 2), \
                 numbered AS ( \
                   SELECT bidder, date_time, sum(new_session) OVER (PARTITION BY bidder ORDER BY date_time ROWS UNBOUNDED PRECEDING) AS session \
                   FROM marked) \
                 SELECT CAST(min(date_time) AS TIMESTAMP(3)), bidder, count(*), max(date_time), \
                        CAST(max(date_time) + INTERVAL '20' MILLISECOND AS TIMESTAMP(3)) \
                 FROM numbered GROUP BY bidder, session";
    let (streamed, _, batch) = streamed_and_batch(query, batch).await;
    assert!(batch.len() > 100, "{}", batch.len());
    assert_eq!(streamed, batch);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updating_aggregates_leave_the_batch_answer() {
    let (rows, description) = same_as_batch(
        "SELECT bid.auction, count(*) AS bids, max(bid.price) AS top, sum(bid.price) AS total \
         FROM nexmark WHERE event_type = 2 GROUP BY bid.auction",
    )
    .await;
    assert!(rows.len() > 100, "{}", rows.len());
    assert!(description.contains("aggregate"), "{description}");
    let (rows, _) = same_as_batch("SELECT DISTINCT bid.bidder FROM nexmark WHERE event_type = 2").await;
    assert!(rows.len() > 100);
    // An aggregate over an updating aggregate: its accumulators take rows back (a variance
    // taken back differs from the batch one in the last float digits: rounded).
    let (rows, _) = same_as_batch(&format!(
        "SELECT bids, count(*) AS auctions, sum(top), avg(top), round(stddev(top)), count(DISTINCT bidders) \
         FROM (SELECT auction, count(*) AS bids, max(price) AS top, count(DISTINCT bidder) AS bidders \
               FROM {BIDS} GROUP BY auction) GROUP BY bids"
    ))
    .await;
    assert!(rows.len() > 3, "{rows:?}");
    // FILTER (WHERE ...), on append-only rows and on a changelog (Nexmark q15's rank counts).
    let (rows, _) = same_as_batch(&format!(
        "SELECT bidder, count(*) FILTER (WHERE price < 10000) AS low, count(DISTINCT auction) FILTER (WHERE price >= 1000000) AS high, \
                max(price) FILTER (WHERE auction % 2 = 0) AS top_even FROM {BIDS} GROUP BY bidder"
    ))
    .await;
    assert!(rows.len() > 100, "{}", rows.len());
    same_as_batch(&format!(
        "SELECT count(*) FILTER (WHERE bids > 10), sum(top) FILTER (WHERE bids <= 10), min(top) FILTER (WHERE bids > 2) \
         FROM (SELECT auction, count(*) AS bids, max(price) AS top FROM {BIDS} GROUP BY auction)"
    ))
    .await;
    // min and max over a changelog: any earlier value may be taken back (the top price of an
    // auction rises; its old value leaves the group of its old bid count).
    let (rows, _) = same_as_batch(&format!(
        "SELECT bids, max(top), min(top), max(auction), min(auction) \
         FROM (SELECT auction, count(*) AS bids, max(price) AS top FROM {BIDS} GROUP BY auction) GROUP BY bids"
    ))
    .await;
    assert!(rows.len() > 3, "{rows:?}");
    same_as_batch("SELECT count(*), sum(bid.price) FROM nexmark WHERE event_type = 2").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regular_joins_leave_the_batch_answer() {
    let (rows, description) =
        same_as_batch(&format!("SELECT p.id, p.name, a.id FROM {PERSONS} p JOIN {AUCTIONS} a ON p.id = a.seller"))
            .await;
    assert!(rows.len() > 100, "{}", rows.len());
    assert!(description.contains("join"), "{description}");
    let (rows, _) = same_as_batch(&format!(
        "SELECT p.id, p.state, a.id, a.category FROM {PERSONS} p LEFT JOIN {AUCTIONS} a ON p.id = a.seller AND a.category = 10"
    ))
    .await;
    assert!(rows.iter().any(|r| r.ends_with("NULL | NULL")), "some persons have no auction in category 10");
}

/// Joins of changelogs: each pair a changed row was in is taken back with it, and an outer
/// row left without a match is padded again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joins_of_updating_inputs_leave_the_batch_answer() {
    let sellers =
        format!("(SELECT seller, count(*) AS auctions, max(category) AS top FROM {AUCTIONS} GROUP BY seller)");
    let bidders = format!("(SELECT bidder, count(*) AS bids, min(price) AS low FROM {BIDS} GROUP BY bidder)");
    let (rows, description) = same_as_batch(&format!(
        "SELECT p.id, p.name, s.auctions, s.top FROM {PERSONS} p JOIN {sellers} s ON p.id = s.seller"
    ))
    .await;
    assert!(rows.len() > 50, "{}", rows.len());
    assert!(description.contains("join"), "{description}");
    // Both sides updating, outer: the other side's rows come and go.
    let (rows, _) = same_as_batch(&format!(
        "SELECT b.bidder, b.bids, b.low, s.auctions FROM {bidders} b FULL JOIN {sellers} s ON b.bidder = s.seller AND s.auctions < b.bids"
    ))
    .await;
    assert!(rows.iter().any(|r| r.ends_with("NULL")) && rows.iter().any(|r| r.starts_with("NULL")), "{rows:?}");
    // An aggregate over a join of changelogs, and an anti join of one.
    same_as_batch(&format!(
        "SELECT s.top, count(*), sum(b.bids) FROM {bidders} b JOIN {sellers} s ON b.bidder = s.seller GROUP BY s.top"
    ))
    .await;
    let (rows, _) = same_as_batch(&format!(
        "SELECT seller, auctions FROM {sellers} s WHERE NOT EXISTS (SELECT 1 FROM {bidders} b WHERE b.bidder = s.seller AND b.bids > s.auctions)"
    ))
    .await;
    assert!(!rows.is_empty());
}

/// RIGHT and FULL regular joins: rows of an outer side are emitted padded, then taken back
/// when their first match arrives, on either side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn right_and_full_joins_leave_the_batch_answer() {
    let (rows, _) = same_as_batch(&format!(
        "SELECT a.id, a.category, p.id, p.state FROM {PERSONS} p RIGHT JOIN {AUCTIONS} a ON p.id = a.seller AND p.state = 'OR'"
    ))
    .await;
    assert!(rows.iter().any(|r| r.ends_with("NULL | NULL")), "some auctions have no seller in Oregon");
    assert!(rows.iter().any(|r| r.ends_with("OR")), "some have");
    let (rows, description) = same_as_batch(&format!(
        "SELECT p.id, p.state, a.id, a.category FROM {PERSONS} p FULL JOIN {AUCTIONS} a ON p.id = a.seller AND a.category = 10 AND p.state = 'OR'"
    ))
    .await;
    assert!(rows.iter().any(|r| r.starts_with("NULL | NULL")), "unmatched auctions");
    assert!(rows.iter().any(|r| r.ends_with("NULL | NULL")), "unmatched persons");
    assert!(rows.iter().any(|r| !r.contains("NULL")), "matched pairs");
    assert!(description.contains("join"), "{description}");
}

/// Interval and window joins, full outer: unmatched rows of both sides when they expire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_interval_joins_equal_the_batch_answer() {
    let (rows, description) = same_as_batch(&format!(
        "SELECT a.id, b.price FROM {AUCTIONS} a FULL JOIN {BIDS} b ON a.id = b.auction \
         AND b.date_time BETWEEN a.date_time - INTERVAL '5' MILLISECOND AND a.date_time + INTERVAL '10' MILLISECOND"
    ))
    .await;
    assert!(rows.iter().any(|r| r.starts_with("NULL")), "bids without an auction in the interval");
    assert!(rows.iter().any(|r| r.ends_with("NULL")), "auctions without a bid in the interval");
    assert!(description.contains("interval_join"), "{description}");
}

/// UNION ALL of two streams, UNION (an updating DISTINCT over them), and a window over a
/// UNION ALL (the event time survives; the watermark is the least of the inputs').
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unions_equal_the_batch_answer() {
    let (rows, description) = same_as_batch(
        "SELECT bid.auction AS id, date_time FROM nexmark WHERE event_type = 2 AND bid.price > 5000000 \
         UNION ALL SELECT auction.id, date_time FROM nexmark WHERE event_type = 1",
    )
    .await;
    assert!(rows.len() > 1000, "{}", rows.len());
    assert!(description.contains("union"), "{description}");
    let (rows, _) = same_as_batch(
        "SELECT person.state AS state FROM nexmark WHERE event_type = 0 \
         UNION SELECT person.state FROM nexmark WHERE event_type = 0 AND person.city = 'Phoenix'",
    )
    .await;
    assert!(rows.len() > 3, "{rows:?}");
    let (rows, _) = same_as_batch(
        "SELECT tumble(date_time, INTERVAL '100' MILLISECOND) AS w, count(*) AS n FROM \
         (SELECT date_time FROM nexmark WHERE event_type = 0 UNION ALL SELECT date_time FROM nexmark WHERE event_type = 1) \
         GROUP BY tumble(date_time, INTERVAL '100' MILLISECOND)",
    )
    .await;
    assert_eq!(rows.len(), 20, "{rows:?}");
    // A union of an updating and an append-only input is updating.
    same_as_batch(
        "SELECT auction.category AS c, count(*) AS n FROM nexmark WHERE event_type = 1 GROUP BY auction.category \
         UNION ALL SELECT auction.category, auction.id FROM nexmark WHERE event_type = 1 AND auction.id % 100 = 0",
    )
    .await;
}

/// The interval is wider than the watermark delay, so state dropped too early (a bound of the
/// wrong side, say) loses rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interval_joins_equal_the_batch_answer() {
    let query = format!(
        "SELECT a.id, a.seller, b.bidder, b.price FROM {AUCTIONS} a JOIN {BIDS} b ON a.id = b.auction \
         AND b.date_time BETWEEN a.date_time AND a.date_time + INTERVAL '500' MILLISECOND"
    );
    let (rows, description) = same_as_batch(&query).await;
    assert!(rows.len() > 100, "{}", rows.len());
    assert!(description.contains("interval_join"), "{description}");
    let left = format!(
        "SELECT a.id, b.price FROM {AUCTIONS} a LEFT JOIN {BIDS} b ON a.id = b.auction \
         AND b.date_time BETWEEN a.date_time - INTERVAL '5' MILLISECOND AND a.date_time + INTERVAL '10' MILLISECOND"
    );
    let (rows, description) = same_as_batch(&left).await;
    assert!(rows.iter().any(|r| r.ends_with("NULL")), "some auctions get no bid within 10 ms");
    assert!(description.contains("interval_join"), "{description}");
}

/// Nexmark q8's shape: persons and the sellers of auctions in the same tumbling window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn window_joins_equal_the_batch_answer() {
    let query = "SELECT p.id, p.name, p.w FROM \
          (SELECT person.id AS id, person.name AS name, tumble(date_time, INTERVAL '100' MILLISECOND) AS w \
           FROM nexmark WHERE event_type = 0 GROUP BY person.id, person.name, tumble(date_time, INTERVAL '100' MILLISECOND)) p \
        JOIN \
          (SELECT auction.seller AS seller, tumble(date_time, INTERVAL '100' MILLISECOND) AS w \
           FROM nexmark WHERE event_type = 1 GROUP BY auction.seller, tumble(date_time, INTERVAL '100' MILLISECOND)) a \
        ON p.id = a.seller AND p.w = a.w";
    let (rows, description) = same_as_batch(query).await;
    assert!(rows.len() > 10, "{}", rows.len());
    assert!(description.contains("window_join"), "{description}");
}

/// Nexmark q5's shape: the auctions with the most bids per window, joining counts per window
/// with their maximum per window (an aggregate grouped by an upstream window's start is that
/// window again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hottest_items_per_window_equal_the_batch_answer() {
    let counts = "SELECT bid.auction AS auction, count(*) AS num, tumble(date_time, INTERVAL '100' MILLISECOND) AS w \
                  FROM nexmark WHERE event_type = 2 GROUP BY bid.auction, tumble(date_time, INTERVAL '100' MILLISECOND)";
    let query = format!(
        "SELECT ab.auction, ab.num, ab.w FROM ({counts}) ab \
         JOIN (SELECT max(num) AS top, w FROM ({counts}) GROUP BY w) mb ON ab.w = mb.w AND ab.num >= mb.top"
    );
    let (rows, description) = same_as_batch(&query).await;
    assert!(rows.len() >= 20, "{}", rows.len());
    assert!(description.contains("window_join"), "{description}");
    assert!(!description.contains("aggregate"), "no updating aggregate: {description}");
}

/// Nexmark q5 as Flink's suite writes it, with HOP: counts per auction in each hopping window
/// (planned as the native window), their maximum per window (a window again, by the start the
/// first window gives), joined back on the window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hottest_items_per_hopping_window_equal_the_batch_answer() {
    let counts = "SELECT bid.auction AS auction, count(*) AS num, window_start, window_end                   FROM TABLE(HOP(TABLE nexmark, DESCRIPTOR(date_time), INTERVAL '50' MILLISECOND, INTERVAL '200' MILLISECOND))                   WHERE event_type = 2 GROUP BY bid.auction, window_start, window_end";
    let query = format!(
        "SELECT ab.auction, ab.num, ab.window_start, ab.window_end FROM ({counts}) ab          JOIN (SELECT max(num) AS top, window_start, window_end FROM ({counts}) GROUP BY window_start, window_end) mb          ON ab.window_start = mb.window_start AND ab.window_end = mb.window_end AND ab.num >= mb.top"
    );
    let (rows, description) = same_as_batch(&query).await;
    assert!(rows.len() >= 40, "{}", rows.len());
    assert!(description.contains("open hopping window"), "{description}");
    assert!(description.contains("window_join"), "{description}");
    assert!(!description.contains("aggregate"), "no updating aggregate: {description}");
}

/// Nexmark q7's shape: the bids at the highest price of their window, an interval join of bids
/// with each window's maximum (which arrives a window late: the join keeps bids that long).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_highest_bids_per_window_equal_the_batch_answer() {
    let query = format!(
        "SELECT b.auction, b.price, b.bidder, b.date_time FROM {BIDS} b JOIN \
           (SELECT max(bid.price) AS top, tumble(date_time, INTERVAL '100' MILLISECOND) AS w FROM nexmark \
            WHERE event_type = 2 GROUP BY tumble(date_time, INTERVAL '100' MILLISECOND)) m \
         ON b.price = m.top AND b.date_time BETWEEN m.w AND m.w + INTERVAL '99' MILLISECOND"
    );
    let (rows, description) = same_as_batch(&query).await;
    assert!(rows.len() >= 20, "{}", rows.len());
    assert!(description.contains("interval_join"), "{description}");
}

/// Top-N per window: the three auctions with the most bids in each window (ties broken by
/// auction id, so the batch answer is unique).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_n_per_window_equals_the_batch_answer() {
    let query = "SELECT auction, num, w, rn FROM ( \
           SELECT auction, num, w, ROW_NUMBER() OVER (PARTITION BY w ORDER BY num DESC, auction) AS rn FROM ( \
             SELECT bid.auction AS auction, count(*) AS num, tumble(date_time, INTERVAL '100' MILLISECOND) AS w \
             FROM nexmark WHERE event_type = 2 GROUP BY bid.auction, tumble(date_time, INTERVAL '100' MILLISECOND))) \
         WHERE rn <= 3";
    let (rows, description) = same_as_batch(query).await;
    assert_eq!(rows.len(), 20 * 3, "3 for each of 20 windows");
    assert!(description.contains("rank"), "{description}");
    // RANK and DENSE_RANK per window: ties share a number, so no tie-break is needed.
    same_as_batch(
        "SELECT auction, num, w, r, d FROM ( \
           SELECT auction, num, w, RANK() OVER (PARTITION BY w ORDER BY num DESC) AS r, \
                  DENSE_RANK() OVER (PARTITION BY w ORDER BY num DESC) AS d FROM ( \
             SELECT bid.auction AS auction, count(*) AS num, tumble(date_time, INTERVAL '100' MILLISECOND) AS w \
             FROM nexmark WHERE event_type = 2 GROUP BY bid.auction, tumble(date_time, INTERVAL '100' MILLISECOND))) \
         WHERE d <= 3",
    )
    .await;
}

/// Top-N without a window (`WHERE rn <= N`): Nexmark q19's highest bids per auction and q18's
/// latest bid per bidder and auction, then the bidders with the fewest bids over a changelog
/// (a count that grows leaves the top, and the next one must come up). The
/// ORDER BY covers every column, so ties are identical rows and the batch answer is unique.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_n_without_a_window_leaves_the_batch_answer() {
    let (rows, description) = same_as_batch(&format!(
        "SELECT auction, bidder, price, date_time, rn FROM ( \
           SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC, bidder, date_time) AS rn FROM {BIDS}) \
         WHERE rn <= 3"
    ))
    .await;
    assert!(rows.len() > 300, "{}", rows.len());
    assert!(description.contains("top_n"), "{description}");
    // rn = 1 over an append-only stream: the deduplication, with ties (same time and price)
    // broken by the whole row as the batch answer's ORDER BY does.
    let (rows, description) = same_as_batch(&format!(
        "SELECT bidder, auction, price, date_time FROM ( \
           SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY date_time DESC, price) AS rn FROM {BIDS}) \
         WHERE rn = 1"
    ))
    .await;
    assert!(rows.len() > 300, "{}", rows.len());
    assert!(description.contains("deduplicate"), "{description}");
    same_as_batch(&format!(
        "SELECT auction, price FROM ( \
           SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rn FROM {BIDS}) \
         WHERE rn = 1"
    ))
    .await;
    let (rows, _) = same_as_batch(&format!(
        "SELECT bidder, bids, rn FROM ( \
           SELECT bidder, bids, ROW_NUMBER() OVER (ORDER BY bids, bidder) AS rn FROM \
             (SELECT bidder, count(*) AS bids FROM {BIDS} GROUP BY bidder)) \
         WHERE rn < 6"
    ))
    .await;
    assert_eq!(rows.len(), 5, "{rows:?}");
    // RANK and DENSE_RANK keep every row numbered N or less, ties included: unique without a
    // tie-break (bid counts tie a lot).
    let (rows, _) = same_as_batch(&format!(
        "SELECT bidder, bids, d FROM ( \
           SELECT bidder, bids, DENSE_RANK() OVER (ORDER BY bids) AS d FROM \
             (SELECT bidder, count(*) AS bids FROM {BIDS} GROUP BY bidder)) \
         WHERE d <= 3"
    ))
    .await;
    assert!(rows.len() > 3, "ties: {rows:?}");
    same_as_batch(&format!(
        "SELECT auction, price, r FROM ( \
           SELECT auction, price, RANK() OVER (PARTITION BY auction ORDER BY price DESC) AS r FROM {BIDS}) \
         WHERE r <= 3"
    ))
    .await;
}

/// OVER aggregates over event time: every row with the aggregates of its frame. ROWS frames
/// over persons (whose times are unique within a state, so the batch order is the stream's),
/// RANGE frames over bids (rows of equal time are peers either way), bounded and unbounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_aggregates_equal_the_batch_answer() {
    let (rows, description) = same_as_batch(&format!(
        "SELECT id, state, date_time, \
                count(*) OVER (PARTITION BY state ORDER BY date_time ROWS BETWEEN 2 PRECEDING AND CURRENT ROW), \
                sum(id) OVER (PARTITION BY state ORDER BY date_time ROWS BETWEEN 2 PRECEDING AND CURRENT ROW), \
                max(name) OVER (PARTITION BY state ORDER BY date_time ROWS BETWEEN 2 PRECEDING AND CURRENT ROW), \
                min(id) OVER (PARTITION BY state ORDER BY date_time ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) \
         FROM {PERSONS}"
    ))
    .await;
    assert_eq!(rows.len(), 400, "every person once");
    assert!(description.contains("over"), "{description}");
    let (rows, _) = same_as_batch(&format!(
        "SELECT auction, bidder, price, date_time, \
                avg(price) OVER (PARTITION BY auction ORDER BY date_time RANGE BETWEEN INTERVAL '50' MILLISECOND PRECEDING AND CURRENT ROW), \
                max(price) OVER (PARTITION BY auction ORDER BY date_time RANGE BETWEEN INTERVAL '50' MILLISECOND PRECEDING AND CURRENT ROW), \
                count(DISTINCT bidder) OVER (PARTITION BY auction ORDER BY date_time RANGE BETWEEN INTERVAL '50' MILLISECOND PRECEDING AND CURRENT ROW) \
         FROM {BIDS}"
    ))
    .await;
    assert_eq!(rows.len(), 18_400, "every bid once");
    same_as_batch(&format!(
        "SELECT bidder, price, date_time, sum(price) OVER (PARTITION BY bidder ORDER BY date_time), \
                count(*) FILTER (WHERE price > 1000000) OVER (PARTITION BY bidder ORDER BY date_time) \
         FROM {BIDS}"
    ))
    .await;
    same_as_batch(&format!(
        "SELECT id, count(*) OVER (ORDER BY date_time ROWS UNBOUNDED PRECEDING), \
                max(id) OVER (ORDER BY date_time ROWS UNBOUNDED PRECEDING) FROM {PERSONS}"
    ))
    .await;
}

/// UNNEST of lists built per row (a NULL list where the row is not a bid), and of structs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unnest_equals_the_batch_answer() {
    let (rows, _) = same_as_batch(
        "SELECT event_type, unnest(CASE WHEN event_type = 2 THEN make_array(bid.price, bid.bidder) END) AS v, date_time \
         FROM nexmark WHERE event_type <> 1",
    )
    .await;
    assert!(rows.len() > 30_000, "{}", rows.len());
    // Several lists (the shorter padded with NULL), a struct into its fields, two levels deep.
    let (rows, _) = same_as_batch(
        "SELECT unnest(make_array(bid.price, bid.bidder, bid.auction)), unnest(string_to_array(bid.channel, 'a')), \
                unnest(named_struct('auction', bid.auction, 'url', bid.url)), \
                unnest(unnest(make_array(make_array(bid.price), CASE WHEN bid.price % 2 = 0 THEN make_array(bid.bidder) END))) AS flat \
         FROM nexmark WHERE event_type = 2",
    )
    .await;
    assert!(rows.len() > 30_000, "{}", rows.len());
}

/// Flink's window table functions: TUMBLE, HOP and CUMULATE with GROUP BY window_start,
/// window_end stream what the same SQL gives as a batch query, and TUMBLE and HOP what weir's
/// own GROUP BY windows give.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn window_table_functions_equal_the_batch_answer() {
    let tumble = "SELECT window_start, window_end, auction.category, count(*), max(auction.reserve) \
                  FROM TABLE(TUMBLE(TABLE nexmark, DESCRIPTOR(date_time), INTERVAL '100' MILLISECOND)) \
                  WHERE event_type = 1 GROUP BY window_start, window_end, auction.category";
    let (rows, description) = same_as_batch(tumble).await;
    assert_eq!(rows.len(), 20 * 5, "20 windows of 100 ms, 5 categories");
    assert!(description.contains("window"), "{description}");
    assert!(!description.contains("aggregate"), "a window, not an updating aggregate: {description}");
    let native = "SELECT tumble(date_time, INTERVAL '100' MILLISECOND), tumble_end(date_time, INTERVAL '100' MILLISECOND), \
                  auction.category, count(*), max(auction.reserve) FROM nexmark WHERE event_type = 1 \
                  GROUP BY tumble(date_time, INTERVAL '100' MILLISECOND), auction.category";
    let (native_rows, _, _) = streamed_and_batch(native, tumble).await;
    assert_eq!(native_rows, rows);

    let hop = "SELECT window_start, window_end, auction.category, count(*), max(auction.reserve) \
               FROM TABLE(HOP(TABLE nexmark, DESCRIPTOR(date_time), INTERVAL '50' MILLISECOND, INTERVAL '200' MILLISECOND)) \
               WHERE event_type = 1 GROUP BY window_start, window_end, auction.category";
    let (rows, description) = same_as_batch(hop).await;
    assert!(!description.contains("aggregate"), "{description}");
    assert!(description.contains("open hopping window"), "each row sent once, its windows found there: {description}");
    let native = "SELECT hop(date_time, INTERVAL '50' MILLISECOND, INTERVAL '200' MILLISECOND), \
                  hop_end(date_time, INTERVAL '50' MILLISECOND, INTERVAL '200' MILLISECOND), \
                  auction.category, count(*), max(auction.reserve) FROM nexmark WHERE event_type = 1 \
                  GROUP BY hop(date_time, INTERVAL '50' MILLISECOND, INTERVAL '200' MILLISECOND), auction.category";
    let (native_rows, _, _) = streamed_and_batch(native, hop).await;
    assert_eq!(native_rows, rows);

    // Cumulating windows: every 50 ms of a 200 ms period, each counting from the period's start.
    let (rows, description) = same_as_batch(
        "SELECT window_start, window_end, count(*), sum(bid.price) \
         FROM TABLE(CUMULATE(TABLE nexmark, DESCRIPTOR(date_time), INTERVAL '50' MILLISECOND, INTERVAL '200' MILLISECOND)) \
         WHERE event_type = 2 GROUP BY window_start, window_end",
    )
    .await;
    assert_eq!(rows.len(), 10 * 4, "10 periods of 200 ms, 4 windows each");
    assert!(!description.contains("aggregate"), "{description}");
    assert!(description.contains("open cumulating window"), "{description}");

    // Offsets, window_time (the end less 1 ms) in GROUP BY, and a window column read by an
    // aggregate, which keeps the row per window.
    let (rows, description) = same_as_batch(
        "SELECT window_start, window_end, window_time, auction.category, count(*)          FROM TABLE(HOP(TABLE nexmark, DESCRIPTOR(date_time), INTERVAL '50' MILLISECOND, INTERVAL '150' MILLISECOND, INTERVAL '20' MILLISECOND))          WHERE event_type = 1 GROUP BY window_start, window_end, window_time, auction.category",
    )
    .await;
    assert!(description.contains("open hopping window"), "{description}");
    let on_the_offset_grid = |r: &String| r.split(" | ").next().is_some_and(|s| s.ends_with("20") || s.ends_with("70"));
    assert!(rows.iter().all(on_the_offset_grid), "{rows:?}");
    let (_, description) = same_as_batch(
        "SELECT window_end, window_time, count(*), sum(bid.price)          FROM TABLE(CUMULATE(TABLE nexmark, DESCRIPTOR(date_time), INTERVAL '50' MILLISECOND, INTERVAL '200' MILLISECOND, INTERVAL '-30' MILLISECOND))          WHERE event_type = 2 GROUP BY window_start, window_end, window_time",
    )
    .await;
    assert!(description.contains("open cumulating window"), "{description}");
    let (_, description) = same_as_batch(
        "SELECT window_start, count(*), max(window_end)          FROM TABLE(HOP(TABLE nexmark, DESCRIPTOR(date_time), INTERVAL '50' MILLISECOND, INTERVAL '100' MILLISECOND))          WHERE event_type = 2 GROUP BY window_start",
    )
    .await;
    assert!(description.contains("open tumbling window"), "{description}");
}

/// Flink's window top-N and window join over window table functions: ROW_NUMBER() partitioned
/// by window_start, window_end numbers each window's rows once it is complete, and a join on
/// them is a window join.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_n_and_joins_over_window_table_functions_equal_the_batch_answer() {
    let (rows, description) = same_as_batch(
        "SELECT window_start, window_end, auction, price, rn FROM ( \
           SELECT window_start, window_end, bid.auction AS auction, bid.price AS price, \
                  ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY bid.price DESC, bid.auction, bid.bidder) AS rn \
           FROM TABLE(CUMULATE(TABLE nexmark, DESCRIPTOR(date_time), INTERVAL '100' MILLISECOND, INTERVAL '200' MILLISECOND)) \
           WHERE event_type = 2) WHERE rn <= 2",
    )
    .await;
    assert_eq!(rows.len(), 20 * 2, "2 for each of 20 windows");
    assert!(description.contains("rank"), "{description}");
    let (rows, description) = same_as_batch(
        "SELECT p.window_start, p.id, a.id FROM \
           (SELECT window_start, window_end, person.id AS id FROM TABLE(TUMBLE(TABLE nexmark, DESCRIPTOR(date_time), INTERVAL '100' MILLISECOND)) WHERE event_type = 0) p \
         JOIN \
           (SELECT window_start, window_end, auction.seller AS seller, auction.id AS id FROM TABLE(TUMBLE(TABLE nexmark, DESCRIPTOR(date_time), INTERVAL '100' MILLISECOND)) WHERE event_type = 1) a \
         ON p.id = a.seller AND p.window_start = a.window_start AND p.window_end = a.window_end",
    )
    .await;
    assert!(rows.len() > 10, "{}", rows.len());
    assert!(description.contains("window_join"), "{description}");
}

/// More of DataFusion's aggregates in windows and updating aggregates: exact and approximate
/// statistics, and order-sensitive ones (`array_agg`, `string_agg`, `first_value`,
/// `last_value` with ORDER BY), which take their ORDER BY columns as DataFusion feeds them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statistical_and_ordered_aggregates_equal_the_batch_answer() {
    let (rows, _) = same_as_batch(
        "SELECT tumble(date_time, INTERVAL '100' MILLISECOND) AS w, auction.category, \
         median(auction.reserve), approx_distinct(auction.seller), \
         approx_percentile_cont(0.5) WITHIN GROUP (ORDER BY auction.initial_bid), \
         array_agg(auction.id ORDER BY auction.id DESC), string_agg(auction.item_name, ',' ORDER BY auction.id), \
         first_value(auction.seller ORDER BY auction.id), last_value(auction.seller ORDER BY auction.id), \
         bool_and(auction.reserve > auction.initial_bid), bit_or(auction.category) \
         FROM nexmark WHERE event_type = 1 \
         GROUP BY tumble(date_time, INTERVAL '100' MILLISECOND), auction.category",
    )
    .await;
    assert_eq!(rows.len(), 20 * 5);
    let (rows, _) = same_as_batch(
        "SELECT bid.bidder, count(*), last_value(bid.price ORDER BY date_time, bid.price), \
         array_agg(DISTINCT bid.auction ORDER BY bid.auction) \
         FROM nexmark WHERE event_type = 2 AND bid.bidder < 1010 GROUP BY bid.bidder",
    )
    .await;
    assert_eq!(rows.len(), 10);
}

/// LAG over event time: the value some rows back in each partition's time order. At 1,000
/// events per second every event has a time of its own, so the order is the batch's too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lag_equals_the_batch_answer() {
    let query = "SELECT bid.bidder, date_time, bid.price, \
                 lag(bid.price) OVER (PARTITION BY bid.bidder ORDER BY date_time) AS previous, \
                 lag(bid.auction, 2, -1) OVER (PARTITION BY bid.bidder ORDER BY date_time) AS before_that \
                 FROM nexmark WHERE event_type = 2";
    let (streamed, description, batch) = streamed_and_batch_at(1000, query, query).await;
    assert_eq!(streamed.len(), 18_400);
    assert_eq!(streamed, batch, "{description}");
    assert!(description.contains("over"), "{description}");
    assert!(streamed.iter().any(|r| r.ends_with("| -1")) && streamed.iter().any(|r| !r.ends_with("| -1")));
}
