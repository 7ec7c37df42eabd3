//! The extended query protocol (Parse, Bind, Describe, Execute), which drivers use: psycopg,
//! tokio-postgres, JDBC. A statement is its SQL text. Describing a SELECT plans it without
//! running it ([`Manager::describe_select`]): its columns, and the types of its `$n` parameters
//! as DataFusion infers them (the client's own types win). Binding turns each parameter into an
//! SQL literal in the text (`arrow-pg` decodes the client's text or binary value by its type),
//! so the statement then runs exactly as the simple protocol runs it; a SELECT's rows are
//! encoded by `arrow-pg` in the formats the client asked for (binary too). A catalog query
//! (`pg_catalog.rs`) is described by planning it in the catalog context, and its rows are
//! encoded the same way.

use std::fmt::Debug;
use std::sync::Arc;

use arrow_pg::datatypes::into_pg_type;
use async_trait::async_trait;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::ParamValues;
use datafusion::logical_expr::lit;
use futures::Sink;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::ExtendedQueryHandler;
use pgwire::api::results::{DescribePortalResponse, DescribeResponse, DescribeStatementResponse, FieldInfo, Response};
use pgwire::api::stmt::{QueryParser, StoredStatement};
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, Type};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use weir_sql::SelectShape;

use crate::pg::Queries;
use crate::pg_cursors::{self, CursorStatement, Cursors};
use crate::pg_results;
use crate::pg_rows;

/// Parsing keeps the text: weir parses it when it runs, with the parameters in it.
#[derive(Debug, Default)]
pub struct SqlText;

#[async_trait]
impl QueryParser for SqlText {
    type Statement = String;

    async fn parse_sql<C>(&self, _client: &C, sql: &str, _types: &[Option<Type>]) -> PgWireResult<Option<String>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        Ok(Some(sql.to_string()))
    }

    fn get_parameter_types(&self, _statement: &String) -> PgWireResult<Vec<Type>> {
        Ok(Vec::new())
    }

    fn get_result_schema(
        &self,
        _statement: &String,
        _format: Option<&pgwire::api::portal::Format>,
    ) -> PgWireResult<Vec<pgwire::api::results::FieldInfo>> {
        Ok(Vec::new())
    }
}

#[async_trait]
impl ExtendedQueryHandler for Queries {
    type Statement = String;
    type QueryParser = SqlText;

    fn query_parser(&self) -> Arc<SqlText> {
        Arc::new(SqlText)
    }

    async fn do_describe_statement<C>(
        &self,
        client: &mut C,
        target: &StoredStatement<String>,
    ) -> PgWireResult<DescribeStatementResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = String>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let given = &target.parameter_types;
        let (shape, fields) = self.result_fields(client, &target.statement, &Format::UnifiedText).await?;
        let parameters = match shape {
            Some(shape) => parameter_types(given, &shape)?,
            None => given.iter().map(|t| t.clone().unwrap_or(Type::TEXT)).collect(),
        };
        Ok(DescribeStatementResponse::new(parameters, fields.unwrap_or_default()))
    }

    async fn do_describe_portal<C>(
        &self,
        client: &mut C,
        portal: &Portal<String>,
    ) -> PgWireResult<DescribePortalResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = String>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let sql = self.bound(portal).await?;
        match self.result_fields(client, &sql, &portal.result_column_format).await?.1 {
            Some(fields) => Ok(DescribePortalResponse::new(fields)),
            None => Ok(DescribePortalResponse::no_data()),
        }
    }

    async fn do_query<C>(&self, client: &mut C, portal: &Portal<String>, _max_rows: usize) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = String>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let sql = self.bound(portal).await?;
        let mut responses =
            pg_results::run(&self.manager, &self.catalog, client, &sql, &portal.result_column_format).await?;
        match responses.len() {
            0 => Ok(Response::EmptyQuery),
            1 => Ok(responses.remove(0)),
            _ => Err(user_error("a prepared statement is one statement".into())),
        }
    }
}

impl Queries {
    /// The columns `sql` gives, in `format`, without running it where it has effects or no
    /// end: a catalog query's and a SELECT's from their plans (with the SELECT's shape, for
    /// its parameters); a FETCH's from its cursor; a statement that only reads weir's state
    /// (SHOW, DESCRIBE, EXPLAIN) by running it, as Execute will again. None: no rows.
    async fn result_fields<C>(
        &self,
        client: &mut C,
        sql: &str,
        format: &Format,
    ) -> PgWireResult<(Option<SelectShape>, Option<Vec<FieldInfo>>)>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if crate::pg_catalog::asks_the_catalog(sql) {
            let relations = self.manager.relations().await.map_err(|e| pg_results::api_error(e, sql))?;
            let answers = self.catalog.answer(relations, sql, false).await.map_err(user_error)?;
            let Some((schema, _)) = answers.into_iter().last() else { return Ok((None, None)) };
            return Ok((None, Some(pg_rows::fields(&pg_rows::prepared_schema(&schema), format)?)));
        }
        if let Some(Ok(CursorStatement::Fetch { name, .. })) = pg_cursors::parse(sql) {
            let cursors = client.session_extensions().get_or_insert_with(Cursors::default);
            let open = cursors.open.lock().await;
            return Ok((None, open.get(&name).map(|cursor| cursor.fields(format)).transpose()?));
        }
        if reads_only(sql) {
            let mut responses = pg_results::run(&self.manager, &self.catalog, client, sql, format).await?;
            return Ok((
                None,
                match responses.pop() {
                    Some(Response::Query(rows)) => Some(rows.row_schema().to_vec()),
                    _ => None,
                },
            ));
        }
        let shape = self.manager.describe_select(sql).await.map_err(|e| pg_results::api_error(e, sql))?;
        let fields = match &shape {
            Some(shape) => {
                let schema = pg_rows::preview_schema(&shape.columns, false);
                Some(pg_rows::fields(&pg_rows::prepared_schema(&schema), format)?)
            }
            None => None,
        };
        Ok((shape, fields))
    }

    /// The portal's statement with its parameters written in as literals.
    async fn bound(&self, portal: &Portal<String>) -> PgWireResult<String> {
        let sql = &portal.statement.statement;
        if portal.parameters.is_empty() {
            return Ok(sql.clone());
        }
        // The types DataFusion infers decode what the client left untyped.
        let shape = match crate::pg_catalog::asks_the_catalog(sql) {
            true => None,
            false => self.manager.describe_select(sql).await.map_err(|e| pg_results::api_error(e, sql))?,
        };
        let inferred: Vec<Option<DataType>> = shape.map(|s| s.parameters).unwrap_or_default();
        let inferred: Vec<Option<&DataType>> = inferred.iter().map(Option::as_ref).collect();
        let values = arrow_pg::datatypes::df::deserialize_parameters(portal, &inferred)?;
        let ParamValues::List(values) = values else { return Err(user_error("parameters are $1, $2, ...".into())) };
        let literals = values
            .into_iter()
            .map(|value| {
                datafusion::sql::unparser::expr_to_sql(&lit(value.value))
                    .map(|expr| expr.to_string())
                    .map_err(|e| user_error(format!("a parameter: {e}")))
            })
            .collect::<PgWireResult<Vec<String>>>()?;
        Ok(with_parameters(sql, &literals))
    }
}

/// Whether `sql` is one statement that only reads weir's state and gives rows: SHOW,
/// DESCRIBE, EXPLAIN.
fn reads_only(sql: &str) -> bool {
    let text = sql.trim().trim_end_matches(';');
    let first = text.split_whitespace().next().unwrap_or("").to_ascii_uppercase();
    matches!(first.as_str(), "SHOW" | "DESCRIBE" | "DESC" | "EXPLAIN") && !text.contains(';')
}

/// `sql` with each `$n` outside quotes replaced by `literals[n - 1]`.
fn with_parameters(sql: &str, literals: &[String]) -> String {
    let chars: Vec<char> = sql.chars().collect();
    let (mut out, mut quote, mut i) = (String::with_capacity(sql.len()), None::<char>, 0);
    while i < chars.len() {
        let c = chars[i];
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '$') => {
                let digits: String = chars[i + 1..].iter().take_while(|d| d.is_ascii_digit()).collect();
                let literal = digits.parse::<usize>().ok().and_then(|n| n.checked_sub(1)).and_then(|n| literals.get(n));
                if let Some(literal) = literal {
                    out.push_str(literal);
                    i += 1 + digits.len();
                    continue;
                }
            }
            _ => {}
        }
        out.push(c);
        i += 1;
    }
    out
}

/// The parameters' types: the client's, else DataFusion's inference, else text.
fn parameter_types(given: &[Option<Type>], shape: &SelectShape) -> PgWireResult<Vec<Type>> {
    let count = given.len().max(shape.parameters.len());
    (0..count)
        .map(|i| match (given.get(i).cloned().flatten(), shape.parameters.get(i).cloned().flatten()) {
            (Some(given), _) => Ok(given),
            (None, Some(inferred)) => into_pg_type(&inferred),
            (None, None) => Ok(Type::TEXT),
        })
        .collect()
}

fn user_error(message: String) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new("ERROR".into(), "42000".into(), message)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_written_in_outside_quotes() {
        let literals = ["5".to_string(), "'it''s'".to_string()];
        assert_eq!(
            with_parameters("SELECT '$1', \"$2\" FROM t WHERE a > $1 AND b = $2 AND c = $3", &literals),
            "SELECT '$1', \"$2\" FROM t WHERE a > 5 AND b = 'it''s' AND c = $3"
        );
    }
}
