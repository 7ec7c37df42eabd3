//! What the service's statements give, as Postgres results (for [`crate::pg`]):
//!
//! - a done statement (CREATE TABLE, SET, ...) is its command tag, weir's message;
//! - rows (SHOW, DESCRIBE, EXPLAIN, SHOW PIPELINES) are a result of text columns;
//! - an INSERT starts a pipeline, and its tag names it;
//! - a SELECT over input that ends is a result of its rows, typed, once the query has run
//!   (psql prints a result only whole); of an updating query, its final rows;
//! - a SELECT over a stream has no end: it is refused, naming `COPY (SELECT ...) TO STDOUT`,
//!   which delivers any query's rows as they come, in COPY's text format (an updating query's
//!   changes with their kind first: `+I`, `-U`, `+U`, `-D`), until the query ends or a cancel
//!   request (Ctrl-C) stops it;
//! - BEGIN / COMMIT / ROLLBACK, which drivers send, are accepted and do nothing: weir has no
//!   transactions to offer, and every statement takes effect at once.
//!
//! Errors carry an SQLSTATE and, for SQL errors, the position psql puts its caret under.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::Array;
use datafusion::arrow::compute::{concat_batches, interleave};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use futures::{Sink, SinkExt, Stream, StreamExt, stream};
use pgwire::api::ClientInfo;
use pgwire::api::portal::Format;
use pgwire::api::results::{Response, Tag};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::copy::{CopyData, CopyDone, CopyOutResponse};
use weir_sql::Preview;

use crate::error::ApiError;
use crate::manager::{Manager, StatementResult};
use crate::pg_catalog;
use crate::pg_cursors::{self, Cursor, CursorStatement, Cursors};
use crate::pg_rows;

/// How often a streamed result looks for new rows.
const POLL: Duration = Duration::from_millis(100);

/// Runs `query` (one or more statements) and renders what it gives, rows in `format` (the
/// simple protocol's is text); a COPY is sent to `client` as it runs.
pub async fn run<C>(
    manager: &Arc<Manager>,
    catalog: &pg_catalog::CatalogContext,
    client: &mut C,
    query: &str,
    format: &Format,
) -> PgWireResult<Vec<Response>>
where
    C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    if let Some(response) = transaction_statement(query) {
        return Ok(vec![response]);
    }
    if let Some(response) = session_setting(query, format) {
        return Ok(vec![response?]);
    }
    if let Some(select) = copy_to_stdout(query).map_err(|message| user_error("42601", message, None))? {
        copy(manager, client, &select).await?;
        return Ok(Vec::new());
    }
    if let Some(statement) = pg_cursors::parse(query) {
        let statement = statement.map_err(|usage| user_error("42601", format!("weir reads {usage}"), None))?;
        let cursors = client.session_extensions().get_or_insert_with(Cursors::default);
        return cursor(manager, &cursors, statement, format).await.map(|response| vec![response]);
    }
    if pg_catalog::asks_the_catalog(query) {
        let relations = manager.relations().await.map_err(|e| api_error(e, query))?;
        let answers =
            catalog.answer(relations, query, true).await.map_err(|message| user_error("42000", message, None))?;
        return answers.into_iter().map(|(schema, batches)| typed_rows(&schema, &batches, format)).collect();
    }
    let results = manager.statements(query).await.map_err(|e| api_error(e, query))?;
    let mut responses = Vec::with_capacity(results.len());
    for result in results {
        responses.push(match result {
            StatementResult::Done { message } => Response::Execution(Tag::new(&message)),
            StatementResult::Rows { columns, rows } => Response::Query(pg_rows::text_response(&columns, rows, format)?),
            StatementResult::Pipeline { id, name, preview: false } => {
                Response::Execution(Tag::new(&format!("INSERT started pipeline {id} ({name})")))
            }
            StatementResult::Pipeline { id, preview: true, .. } => select(manager, id, format).await?,
        });
    }
    Ok(responses)
}

/// `BEGIN` / `START TRANSACTION` (with any modes: ISOLATION LEVEL, READ ONLY, ...), `COMMIT`,
/// `END`, `ROLLBACK`, `ABORT`, and savepoints (`SAVEPOINT s`, `RELEASE s`, `ROLLBACK TO s`),
/// which drivers and SQLAlchemy send: accepted, and nothing is done.
fn transaction_statement(query: &str) -> Option<Response> {
    let words: Vec<String> =
        query.trim().trim_end_matches(';').split_whitespace().map(|w| w.to_ascii_uppercase()).collect();
    match words.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["BEGIN", ..] | ["START", "TRANSACTION", ..] => Some(Response::TransactionStart(Tag::new("BEGIN"))),
        ["COMMIT" | "END"] | ["COMMIT" | "END", "TRANSACTION" | "WORK"] => {
            Some(Response::TransactionEnd(Tag::new("COMMIT")))
        }
        ["ROLLBACK" | "ABORT"] | ["ROLLBACK" | "ABORT", "TRANSACTION" | "WORK"] => {
            Some(Response::TransactionEnd(Tag::new("ROLLBACK")))
        }
        ["SAVEPOINT", _] => Some(Response::Execution(Tag::new("SAVEPOINT"))),
        ["RELEASE", _] | ["RELEASE", "SAVEPOINT", _] => Some(Response::Execution(Tag::new("RELEASE"))),
        ["ROLLBACK", "TO", _] | ["ROLLBACK", "TO", "SAVEPOINT", _] => Some(Response::Execution(Tag::new("ROLLBACK"))),
        _ => None,
    }
}

/// Postgres's own session settings, which drivers and tools set and read: a SET of one is
/// accepted and changes nothing (weir keeps no such setting), a SHOW gives Postgres's value.
/// `SET` and `SHOW` of anything else are weir's.
const POSTGRES_SETTINGS: [(&str, &str); 15] = [
    ("application_name", ""),
    ("bytea_output", "hex"),
    ("client_encoding", "UTF8"),
    ("client_min_messages", "notice"),
    ("datestyle", "ISO, MDY"),
    ("default_transaction_isolation", "read committed"),
    ("extra_float_digits", "1"),
    ("intervalstyle", "postgres"),
    ("lock_timeout", "0"),
    ("search_path", "public"),
    ("server_encoding", "UTF8"),
    ("standard_conforming_strings", "on"),
    ("statement_timeout", "0"),
    ("timezone", "UTC"),
    ("transaction_isolation", "read committed"),
];

/// `SET name ...` / `SHOW name` of one of [`POSTGRES_SETTINGS`] (also `SET SESSION ...`,
/// `SET TIME ZONE ...`, `SET SESSION CHARACTERISTICS AS TRANSACTION ...`, `SHOW TRANSACTION
/// ISOLATION LEVEL`).
fn session_setting(query: &str, format: &Format) -> Option<PgWireResult<Response>> {
    let text = query.trim().trim_end_matches(';').trim_end();
    let words: Vec<String> = text.split_whitespace().map(|w| w.trim_matches('"').to_ascii_lowercase()).collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let known = |name: &str| {
        let name = name.split(['=', ' ']).next().unwrap_or(name);
        POSTGRES_SETTINGS.iter().find(|(n, _)| *n == name)
    };
    match words.as_slice() {
        ["set", "session", "characteristics", ..] | ["set", "time", "zone", ..] => {
            Some(Ok(Response::Execution(Tag::new("SET"))))
        }
        ["set", "session" | "local", name, ..] | ["set", name, ..] if known(name).is_some() => {
            Some(Ok(Response::Execution(Tag::new("SET"))))
        }
        ["show", "transaction", "isolation", "level"] => Some(
            pg_rows::text_response(&["transaction_isolation".into()], vec![vec!["read committed".into()]], format)
                .map(Response::Query),
        ),
        ["show", name] => known(name).map(|(name, value)| {
            pg_rows::text_response(&[(*name).to_string()], vec![vec![(*value).to_string()]], format)
                .map(Response::Query)
        }),
        _ => None,
    }
}

/// The query of `COPY (query) TO STDOUT [WITH (FORMAT text)]`, if `sql` is one; an error for
/// another COPY.
fn copy_to_stdout(sql: &str) -> Result<Option<String>, String> {
    let text = sql.trim().trim_end_matches(';').trim_end();
    let Some(rest) = text.get(..4).filter(|w| w.eq_ignore_ascii_case("COPY")).map(|_| text[4..].trim_start()) else {
        return Ok(None);
    };
    let usage = "weir runs COPY (SELECT ...) TO STDOUT: a query's rows, as they come, in COPY's text format";
    let Some(inner) = rest.strip_prefix('(') else { return Err(usage.into()) };
    // The query's closing bracket: outside quotes, at depth 0.
    let (mut depth, mut quote, mut end) = (1usize, None::<char>, None);
    for (i, c) in inner.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '(') => depth += 1,
            (None, ')') => {
                depth -= 1;
                if depth == 0 {
                    end = Some(i);
                    break;
                }
            }
            _ => {}
        }
    }
    let Some(end) = end else { return Err(usage.into()) };
    let after: Vec<String> = inner[end + 1..].split_whitespace().map(|w| w.to_ascii_uppercase()).collect();
    let after: Vec<&str> = after.iter().map(String::as_str).collect();
    match after.as_slice() {
        ["TO", "STDOUT"] | ["TO", "STDOUT", "WITH", "(FORMAT", "TEXT)"] | ["TO", "STDOUT", "(FORMAT", "TEXT)"] => {
            Ok(Some(inner[..end].to_string()))
        }
        _ => Err(usage.into()),
    }
}

/// A cursor statement on this connection's `cursors`.
async fn cursor(
    manager: &Arc<Manager>,
    cursors: &Cursors,
    statement: CursorStatement,
    format: &Format,
) -> PgWireResult<Response> {
    let mut open = cursors.open.lock().await;
    match statement {
        CursorStatement::Declare { name, query } => {
            if open.contains_key(&name) {
                return Err(user_error("42P03", format!("cursor \"{name}\" already exists"), None));
            }
            let results = manager.statements(&query).await.map_err(|e| api_error(e, &query))?;
            let [StatementResult::Pipeline { id, preview: true, .. }] = results.as_slice() else {
                return Err(user_error("42601", "a cursor is declared FOR one SELECT".into(), None));
            };
            let preview = manager.preview(*id).map_err(|e| api_error(e, &query))?;
            let schema = pg_rows::prepared_schema(&pg_rows::preview_schema(&preview.columns, preview.updating));
            let batches = Box::pin(rows_as_they_come(manager.clone(), *id, preview));
            open.insert(name, Cursor::new(batches, schema));
            Ok(pg_cursors::done("DECLARE CURSOR"))
        }
        CursorStatement::Fetch { name, count } => match open.get_mut(&name) {
            Some(cursor) => cursor.fetch(count, format).await,
            None => Err(user_error("34000", format!("cursor \"{name}\" does not exist"), None)),
        },
        CursorStatement::Close { name: None } => {
            open.clear();
            Ok(pg_cursors::done("CLOSE CURSOR ALL"))
        }
        // Dropping the cursor stops its query.
        CursorStatement::Close { name: Some(name) } => match open.remove(&name) {
            Some(_) => Ok(pg_cursors::done("CLOSE CURSOR")),
            None => Err(user_error("34000", format!("cursor \"{name}\" does not exist"), None)),
        },
    }
}

/// `COPY (select) TO STDOUT`: the query's rows sent to `client` as they come, each batch's
/// flushed at once (pgwire's own COPY only buffers, and a slow stream's rows would sit in the
/// buffer). Runs while the statement does, so a cancel request drops it, which stops the
/// pipeline.
async fn copy<C>(manager: &Arc<Manager>, client: &mut C, select: &str) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let results = manager.statements(select).await.map_err(|e| api_error(e, select))?;
    let [StatementResult::Pipeline { id, preview: true, .. }] = results.as_slice() else {
        return Err(user_error("42601", "COPY (...) TO STDOUT takes one SELECT".into(), None));
    };
    let preview = manager.preview(*id).map_err(|e| api_error(e, select))?;
    let columns = preview.columns.len() + usize::from(preview.updating);
    let text = vec![0; columns];
    let start = CopyOutResponse::new(0, i16::try_from(columns).unwrap_or(i16::MAX), text);
    client.send(PgWireBackendMessage::CopyOutResponse(start)).await?;
    let mut batches = std::pin::pin!(rows_as_they_come(manager.clone(), *id, preview));
    let mut rows = 0;
    while let Some(batch) = batches.next().await {
        for line in copy_lines(&pg_rows::prepared(&batch?)?)? {
            client.feed(PgWireBackendMessage::CopyData(CopyData::new(line.into()))).await?;
            rows += 1;
        }
        client.flush().await?;
    }
    client.send(PgWireBackendMessage::CopyDone(CopyDone::new())).await?;
    client.send(PgWireBackendMessage::CommandComplete(Tag::new("COPY").with_rows(rows).into())).await?;
    Ok(())
}

/// A bare SELECT's result: its rows once it has run, if its input ends; an updating query's
/// final rows (its changes applied in order), as a table in Postgres would have them. Waits
/// while the statement runs, so a cancel request drops it, which stops the pipeline.
async fn select(manager: &Arc<Manager>, id: i64, format: &Format) -> PgWireResult<Response> {
    let preview = manager.preview(id).map_err(|e| api_error(e, ""))?;
    let batch = final_rows(manager, id, preview).await?;
    pg_rows::batch_response(&batch, format).map(Response::Query)
}

/// The rows of pipeline `id`, a bare SELECT over input that ends, once it has ended: an
/// updating query's changes applied in order (each retraction takes back an equal row), in
/// one batch without the change column. A SELECT over a stream is refused, and dropped.
async fn final_rows(manager: &Arc<Manager>, id: i64, preview: Preview) -> PgWireResult<RecordBatch> {
    if !preview.bounded {
        // It would never end, and psql prints a result only when it does.
        let _ = manager.stop(id, true).await;
        let _ = manager.delete(id).await;
        let mut error = ErrorInfo::new(
            "ERROR".into(),
            "0A000".into(),
            format!("this SELECT reads a stream ({}): it has no last row to wait for", preview.reading.join("; ")),
        );
        error.hint = Some("read its rows as they come with COPY (SELECT ...) TO STDOUT".into());
        return Err(PgWireError::UserError(Box::new(error)));
    }
    let schema = Arc::new(pg_rows::preview_schema(&preview.columns, false));
    let updating = preview.updating;
    let mut stream = std::pin::pin!(rows_as_they_come(manager.clone(), id, preview));
    let mut batches = Vec::new();
    while let Some(batch) = stream.next().await {
        batches.push(batch?);
    }
    let internal = |e: datafusion::arrow::error::ArrowError| user_error("XX000", e.to_string(), None);
    let Some(first) = batches.first() else { return Ok(RecordBatch::new_empty(schema)) };
    if !updating {
        return concat_batches(&first.schema(), &batches).map_err(internal);
    }
    // Each live row as (batch, row); a retraction removes the first live row equal to it.
    let mut live: Vec<(usize, usize)> = Vec::new();
    let mut keys: Vec<Vec<Option<Vec<u8>>>> = Vec::new();
    for (b, batch) in batches.iter().enumerate() {
        for (r, mut row) in pg_rows::text_cells(&pg_rows::prepared(batch)?)?.into_iter().enumerate() {
            let op = row.remove(0);
            if matches!(op.as_deref(), Some(b"+I" | b"+U")) {
                live.push((b, r));
                keys.push(row);
            } else if let Some(at) = keys.iter().position(|k| *k == row) {
                live.remove(at);
                keys.remove(at);
            }
        }
    }
    let data = first.num_columns() - 1;
    let columns = (0..data)
        .map(|c| {
            let arrays: Vec<&dyn Array> = batches.iter().map(|b| b.column(c).as_ref()).collect();
            interleave(&arrays, &live).map_err(internal)
        })
        .collect::<PgWireResult<Vec<_>>>()?;
    let fields: Vec<Arc<Field>> = first.schema().fields()[..data].to_vec();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).map_err(internal)
}

/// The batches of pipeline `id`'s preview as they come, until it ends. Dropping the stream
/// before that (the statement canceled, the client gone) stops the pipeline.
fn rows_as_they_come(
    manager: Arc<Manager>,
    id: i64,
    preview: Preview,
) -> impl Stream<Item = PgWireResult<RecordBatch>> + Send + 'static {
    struct Reading {
        position: usize,
        running: StopOnDrop,
    }
    let reading = Reading { position: 0, running: StopOnDrop { manager, id, ended: false } };
    stream::unfold(Some(reading), move |reading| {
        let buffer = preview.buffer.clone();
        async move {
            let mut reading = reading?;
            loop {
                let ended = reading.running.manager.ended(reading.running.id);
                let (batches, next, skipped) = buffer.since(reading.position);
                if skipped > 0 {
                    let message = format!(
                        "the client fell {skipped} rows behind the rows weir keeps for it; the result is not whole"
                    );
                    return Some((vec![Err(user_error("53000", message, None))], None));
                }
                if next > reading.position {
                    reading.position = next;
                    return Some((batches.into_iter().map(Ok).collect(), Some(reading)));
                }
                if ended.is_some() {
                    reading.running.ended = true;
                    return None;
                }
                tokio::time::sleep(POLL).await;
            }
        }
    })
    .flat_map(stream::iter)
}

/// Stops a pipeline whose rows nobody reads any more (canceled, or the client gone).
struct StopOnDrop {
    manager: Arc<Manager>,
    id: i64,
    ended: bool,
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        let (manager, id) = (self.manager.clone(), self.id);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(error) = manager.stop(id, true).await {
                    tracing::debug!(id, error = %error.body.message, "a canceled query's pipeline did not stop");
                }
            });
        }
    }
}

/// A batch query's result (the catalog's), in `format`.
fn typed_rows(schema: &SchemaRef, batches: &[RecordBatch], format: &Format) -> PgWireResult<Response> {
    let prepared = batches.iter().map(pg_rows::prepared).collect::<PgWireResult<Vec<_>>>()?;
    pg_rows::response(&pg_rows::prepared_schema(schema), prepared, format).map(Response::Query)
}

/// A prepared `batch`'s rows in COPY's text format: tab between columns, `\N` for NULL, a
/// line each.
fn copy_lines(batch: &RecordBatch) -> PgWireResult<Vec<Vec<u8>>> {
    let rows = pg_rows::text_cells(batch)?;
    let mut lines = Vec::with_capacity(rows.len());
    for row in rows {
        let mut out = Vec::new();
        for (i, cell) in row.iter().enumerate() {
            if i > 0 {
                out.push(b'\t');
            }
            match cell {
                None => out.extend_from_slice(b"\\N"),
                Some(text) => {
                    for &byte in text {
                        match byte {
                            b'\\' => out.extend_from_slice(b"\\\\"),
                            b'\t' => out.extend_from_slice(b"\\t"),
                            b'\n' => out.extend_from_slice(b"\\n"),
                            b'\r' => out.extend_from_slice(b"\\r"),
                            byte => out.push(byte),
                        }
                    }
                }
            }
        }
        out.push(b'\n');
        lines.push(out);
    }
    Ok(lines)
}

fn user_error(code: &str, message: String, position: Option<usize>) -> PgWireError {
    let mut info = ErrorInfo::new("ERROR".into(), code.into(), message);
    info.position = position.map(|p| p.to_string());
    PgWireError::UserError(Box::new(info))
}

/// The service's error as Postgres's: an SQLSTATE for its kind and, where it names a line
/// and column of `query`, the position (1-based, in characters) psql points at.
pub(crate) fn api_error(error: ApiError, query: &str) -> PgWireError {
    let body = error.body;
    let code = match body.code {
        "sql_syntax" => "42601",
        "sql_invalid" if body.message.contains("there is no table") => "42P01",
        "sql_invalid" if body.message.contains("No field named") => "42703",
        "sql_invalid" if body.message.contains("not supported") => "0A000",
        "sql_invalid" => "42000",
        "not_found" => "42704",
        "conflict" => "55000",
        "bad_request" => "22023",
        _ => "XX000",
    };
    let position = match (body.line, body.column) {
        (Some(line), Some(column)) => position(query, line, column),
        _ => None,
    };
    user_error(code, body.message, position)
}

/// The 1-based character position of (line, column), both 1-based, in `query`.
fn position(query: &str, line: u64, column: u64) -> Option<usize> {
    let line = usize::try_from(line).ok()?.checked_sub(1)?;
    let column = usize::try_from(column).ok()?;
    let before: usize = query.split('\n').take(line).map(|l| l.chars().count() + 1).sum();
    Some(before + column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_to_stdout_gives_its_query_and_refuses_other_copies() {
        assert_eq!(copy_to_stdout("copy (SELECT ')' FROM t) to stdout;"), Ok(Some("SELECT ')' FROM t".into())));
        assert_eq!(
            copy_to_stdout("COPY (SELECT (a) FROM t) TO STDOUT WITH (FORMAT text)"),
            Ok(Some("SELECT (a) FROM t".into()))
        );
        assert_eq!(copy_to_stdout("SELECT 1"), Ok(None));
        assert!(copy_to_stdout("COPY t FROM STDIN").is_err());
        assert!(copy_to_stdout("COPY (SELECT 1) TO '/tmp/x'").is_err());
    }

    #[test]
    fn transactions_and_savepoints_are_accepted() {
        for statement in ["BEGIN ISOLATION LEVEL READ COMMITTED", "start transaction read only", "SAVEPOINT \"_pg3_1\""]
        {
            assert!(transaction_statement(statement).is_some(), "{statement}");
        }
        for statement in ["RELEASE _pg3_1", "ROLLBACK TO SAVEPOINT s", "commit;"] {
            assert!(transaction_statement(statement).is_some(), "{statement}");
        }
        assert!(transaction_statement("BEGINNING").is_none());
    }

    #[test]
    fn postgres_session_settings_are_accepted_and_weirs_are_left_to_weir() {
        for set in [
            "SET DateStyle = 'ISO'",
            "set extra_float_digits = 3;",
            "SET SESSION search_path TO public",
            "SET TIME ZONE 'UTC'",
            "SET application_name='x'",
        ] {
            assert!(matches!(session_setting(set, &Format::UnifiedText), Some(Ok(Response::Execution(_)))), "{set}");
        }
        for show in ["SHOW TimeZone", "show transaction isolation level"] {
            assert!(matches!(session_setting(show, &Format::UnifiedText), Some(Ok(Response::Query(_)))), "{show}");
        }
        assert!(session_setting("SET parallelism = '2'", &Format::UnifiedText).is_none());
        assert!(session_setting("SHOW TABLES", &Format::UnifiedText).is_none());
    }

    #[test]
    fn a_line_and_column_is_a_character_position() {
        assert_eq!(position("SELECT x", 1, 8), Some(8));
        assert_eq!(position("SELECT\n  é, x", 2, 6), Some(13));
    }
}
