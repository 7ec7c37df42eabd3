//! Cursors, the other way a Postgres client reads a stream's rows as they come:
//! `DECLARE c CURSOR FOR SELECT ...` starts the query; `FETCH 100 FROM c` gives the next rows,
//! waiting for the first of them as long as it takes (a cancel request ends the wait) and then
//! up to [`MORE_WITHIN`] for the rest; `CLOSE c` (or the connection's end) stops the query. An
//! updating query's rows are its changes, the kind first (`op`: `+I`, `-U`, `+U`, `-D`). A
//! connection's cursors live in its session extensions, so they end with it.

use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::time::Duration;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use futures::{Stream, StreamExt};
use pgwire::api::portal::Format;
use pgwire::api::results::{FieldInfo, Response, Tag};
use pgwire::error::PgWireResult;

use crate::pg_rows;

/// After a FETCH's first row, how long it waits for the rest of its count.
pub const MORE_WITHIN: Duration = Duration::from_secs(1);

/// A cursor statement.
#[derive(Debug, PartialEq, Eq)]
pub enum CursorStatement {
    Declare {
        name: String,
        query: String,
    },
    /// `count` None: ALL.
    Fetch {
        name: String,
        count: Option<usize>,
    },
    /// `name` None: ALL.
    Close {
        name: Option<String>,
    },
}

/// The cursor statement `sql` is, if it is one.
pub fn parse(sql: &str) -> Option<Result<CursorStatement, String>> {
    let text = sql.trim().trim_end_matches(';').trim_end();
    let words: Vec<&str> = text.split_whitespace().collect();
    let first = words.first()?.to_ascii_uppercase();
    let is = |i: usize, w: &str| words.get(i).is_some_and(|x| x.eq_ignore_ascii_case(w));
    let name = |w: &str| w.trim_matches('"').to_string();
    Some(match first.as_str() {
        "DECLARE" => {
            let Some(cursor) = words.iter().position(|w| w.eq_ignore_ascii_case("CURSOR")) else {
                return Some(Err("DECLARE name CURSOR FOR SELECT ...".into()));
            };
            let mut at = cursor + 1;
            if is(at, "WITH") || is(at, "WITHOUT") {
                at += 2;
            }
            if !is(at, "FOR") || words.len() < 2 {
                return Some(Err("DECLARE name CURSOR FOR SELECT ...".into()));
            }
            // The query: the text after that FOR.
            let mut rest = text;
            for word in &words[..=at] {
                rest = rest.trim_start().strip_prefix(word).unwrap_or(rest);
            }
            Ok(CursorStatement::Declare { name: name(words[1]), query: rest.trim().to_string() })
        }
        "FETCH" => {
            let mut at = 1;
            if is(at, "FORWARD") || is(at, "NEXT") {
                at += 1;
            }
            let count = match words.get(at) {
                Some(w) if w.eq_ignore_ascii_case("ALL") => {
                    at += 1;
                    None
                }
                Some(w) if w.parse::<usize>().is_ok() => {
                    at += 1;
                    w.parse().ok()
                }
                _ => Some(1),
            };
            if is(at, "FROM") || is(at, "IN") {
                at += 1;
            }
            match (words.get(at), words.len() == at + 1) {
                (Some(cursor), true) => Ok(CursorStatement::Fetch { name: name(cursor), count }),
                _ => Err("FETCH [FORWARD] [n | ALL] [FROM] name".into()),
            }
        }
        "CLOSE" => match words.as_slice() {
            [_, all] if all.eq_ignore_ascii_case("ALL") => Ok(CursorStatement::Close { name: None }),
            [_, cursor] => Ok(CursorStatement::Close { name: Some(name(cursor)) }),
            _ => Err("CLOSE name | ALL".into()),
        },
        _ => return None,
    })
}

type Batches = Pin<Box<dyn Stream<Item = PgWireResult<RecordBatch>> + Send>>;

/// An open cursor: its query's batches (dropping them stops the query) and the rows read
/// ahead, prepared for Postgres ([`pg_rows::prepared`]).
pub struct Cursor {
    batches: Batches,
    schema: SchemaRef,
    ahead: VecDeque<RecordBatch>,
    ended: bool,
}

impl Cursor {
    /// A cursor over `batches`, whose rows are of the prepared `schema`.
    pub fn new(batches: Batches, schema: SchemaRef) -> Self {
        Self { batches, schema, ahead: VecDeque::new(), ended: false }
    }

    /// The columns a FETCH gives, in `format`.
    pub fn fields(&self, format: &Format) -> PgWireResult<Vec<FieldInfo>> {
        pg_rows::fields(&self.schema, format)
    }

    /// The next `count` rows (all that come, for None) in `format`: waits for the first as
    /// long as it takes, then up to [`MORE_WITHIN`] for the rest; fewer once the query has
    /// ended.
    pub async fn fetch(&mut self, count: Option<usize>, format: &Format) -> PgWireResult<Response> {
        let wanted = count.unwrap_or(usize::MAX);
        let mut have: usize = self.ahead.iter().map(RecordBatch::num_rows).sum();
        while have < wanted && !self.ended {
            let next = match have {
                0 => self.batches.next().await,
                _ => match tokio::time::timeout(MORE_WITHIN, self.batches.next()).await {
                    Ok(next) => next,
                    Err(_) => break,
                },
            };
            match next {
                Some(batch) => {
                    let batch = pg_rows::prepared(&batch?)?;
                    have += batch.num_rows();
                    self.ahead.push_back(batch);
                }
                None => self.ended = true,
            }
        }
        let mut taken = Vec::new();
        let mut left = wanted.min(have);
        while left > 0 {
            let Some(batch) = self.ahead.pop_front() else { break };
            if batch.num_rows() > left {
                self.ahead.push_front(batch.slice(left, batch.num_rows() - left));
                taken.push(batch.slice(0, left));
                break;
            }
            left -= batch.num_rows();
            taken.push(batch);
        }
        let mut response = pg_rows::response(&self.schema, taken, format)?;
        response.set_command_tag("FETCH");
        Ok(Response::Query(response))
    }
}

/// A connection's open cursors, by name.
#[derive(Default)]
pub struct Cursors {
    pub open: tokio::sync::Mutex<HashMap<String, Cursor>>,
}

/// The tag of a statement that returns no rows.
pub fn done(tag: &str) -> Response {
    Response::Execution(Tag::new(tag))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_statements_are_read_as_postgres_writes_them() {
        let declare = parse("DECLARE c CURSOR FOR SELECT a FROM t;").unwrap().unwrap();
        assert_eq!(declare, CursorStatement::Declare { name: "c".into(), query: "SELECT a FROM t".into() });
        let declare = parse("declare \"Big\" no scroll cursor with hold for select 1").unwrap().unwrap();
        assert_eq!(declare, CursorStatement::Declare { name: "Big".into(), query: "select 1".into() });
        assert_eq!(
            parse("FETCH 100 FROM c").unwrap().unwrap(),
            CursorStatement::Fetch { name: "c".into(), count: Some(100) }
        );
        assert_eq!(parse("fetch all in c").unwrap().unwrap(), CursorStatement::Fetch { name: "c".into(), count: None });
        assert_eq!(parse("FETCH c").unwrap().unwrap(), CursorStatement::Fetch { name: "c".into(), count: Some(1) });
        assert_eq!(parse("CLOSE ALL").unwrap().unwrap(), CursorStatement::Close { name: None });
        assert!(parse("FETCH 10 FROM").unwrap().is_err());
        assert!(parse("SELECT 1").is_none());
    }
}
