//! Postgres clients' questions about the catalog (psql's `\d`, `\dt`, `\d NAME`, `\l`, `\dn`;
//! drivers' `SELECT version()`, SQLAlchemy's inspector): answered from weir's tables and views by a batch DataFusion
//! context with `datafusion-pg-catalog`'s `pg_catalog` tables and functions, its rewrites of
//! Postgres-only syntax applied first. Never by matching a client's query text: any query
//! over `pg_catalog` or `information_schema` runs here.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::{SchemaProvider, Session, TableProvider};
use datafusion::common::ScalarValue;
use datafusion::common::TableReference;
use datafusion::datasource::TableType;
use datafusion::logical_expr::{ColumnarValue, Expr, ScalarUDF, Volatility, create_udf};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::{
    CastKind, DataType as SqlDataType, Expr as SqlExpr, FunctionArg, FunctionArgExpr, FunctionArguments, Ident,
    ObjectName, Statement as SqlStatement, VisitMut, VisitorMut,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion_pg_catalog::pg_catalog::PG_CATALOG_TABLES;
use datafusion_pg_catalog::pg_catalog::context::EmptyContextProvider;
use datafusion_pg_catalog::setup_pg_catalog;
use datafusion_pg_catalog::sql::PostgresCompatibilityParser;
use datafusion_pg_catalog::sql::rules::{RewriteRegCastToSubquery, SqlStatementRewriteRule};

/// The database name clients see (`\l`, `current_database()`).
pub const DATABASE: &str = "weir";

/// Whether `query` asks about the catalog rather than about data: it names `pg_catalog`,
/// `information_schema` or one of pg_catalog's relations (which Postgres finds unqualified,
/// as it does here: before a table of weir's of the same name), or it only calls functions
/// about the session (`SELECT version()`).
pub fn asks_the_catalog(query: &str) -> bool {
    let lower = query.to_ascii_lowercase();
    let calls = ["version()", "current_database()", "current_schema()", "current_schemas(", "current_setting("];
    // Words outside string literals: `WHERE name = 'pg_class'` is a question about data.
    let mut quoted = false;
    let unquoted: String = lower
        .chars()
        .map(|c| {
            if c == '\'' {
                quoted = !quoted;
            }
            if quoted || c == '\'' { ' ' } else { c }
        })
        .collect();
    let names_the_catalog = unquoted
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .any(|word| matches!(word, "pg_catalog" | "information_schema") || PG_CATALOG_TABLES.contains(&word));
    names_the_catalog
        || (lower.trim_start().starts_with("select")
            && calls.iter().any(|c| lower.contains(c))
            && !lower.contains(" from "))
}

/// A table or view of weir's catalog, as the catalog context shows it: its columns and kind.
#[derive(Debug)]
pub struct Relation {
    pub name: String,
    pub schema: SchemaRef,
    pub view: bool,
}

#[async_trait]
impl TableProvider for Relation {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        if self.view { TableType::View } else { TableType::Base }
    }

    /// The catalog shows columns, never rows: a table's rows are a stream.
    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        let schema = match projection {
            Some(columns) => Arc::new(self.schema.project(columns)?),
            None => self.schema.clone(),
        };
        Ok(Arc::new(EmptyExec::new(schema)))
    }
}

/// The batch context catalog queries run in: one for the server, so that a relation keeps its
/// OID from one query to the next (psql asks for a table's OID, then for the columns of that
/// OID), with weir's relations registered again before each query.
pub struct CatalogContext {
    context: tokio::sync::Mutex<Option<SessionContext>>,
}

impl CatalogContext {
    pub fn new() -> Self {
        Self { context: tokio::sync::Mutex::new(None) }
    }

    /// Each statement's result (its schema and rows) of the catalog query `query` over
    /// `relations`; with `run` false, its schema only (planned, not run: `$n` parameters may be
    /// left in it).
    pub async fn answer(
        &self,
        relations: Vec<Relation>,
        query: &str,
        run: bool,
    ) -> Result<Vec<(SchemaRef, Vec<RecordBatch>)>, String> {
        let mut context = self.context.lock().await;
        let context = match &mut *context {
            Some(context) => context,
            empty => {
                let context = Self::open().map_err(|e| e.to_string())?;
                Self::with_postgres_shapes(&context).await.map_err(|e| e.to_string())?;
                empty.insert(context)
            }
        };
        let public = context.catalog(DATABASE).and_then(|c| c.schema("public"));
        for name in public.map(|schema| schema.table_names()).unwrap_or_default() {
            context.deregister_table(TableReference::bare(name)).map_err(|e| e.to_string())?;
        }
        for relation in relations {
            let name = TableReference::bare(relation.name.clone());
            context.register_table(name, Arc::new(relation)).map_err(|e| e.to_string())?;
        }
        let statements = PostgresCompatibilityParser::new().parse(query).map_err(|e| e.to_string())?;
        let reg_casts = RewriteRegCastToSubquery::new();
        let statements = statements.into_iter().map(|statement| reg_casts.rewrite(as_datafusion_functions(statement)));
        let mut results = Vec::new();
        for statement in statements {
            let state = context.state();
            let statement = DFStatement::Statement(Box::new(statement));
            let plan = state.statement_to_plan(statement).await.map_err(|e| e.to_string())?;
            let schema = Arc::new(plan.schema().as_arrow().clone());
            if !run {
                results.push((schema, Vec::new()));
                continue;
            }
            let frame = context.execute_logical_plan(plan).await.map_err(|e| e.to_string())?;
            let batches = frame.collect().await.map_err(|e| e.to_string())?;
            results.push((schema, batches));
        }
        Ok(results)
    }

    fn open() -> Result<SessionContext, Box<datafusion::error::DataFusionError>> {
        let config = SessionConfig::new().with_default_catalog_and_schema(DATABASE, "public");
        let context = SessionContext::new_with_config(config);
        setup_pg_catalog(&context, DATABASE, EmptyContextProvider)?;
        context.register_udf(version_function());
        for function in visibility_and_definition_functions() {
            context.register_udf(function);
        }
        Ok(context)
    }

    /// Replaces two of `datafusion-pg-catalog`'s `pg_catalog` tables with views that are
    /// closer to Postgres's, for SQLAlchemy's inspector: `pg_index`'s `int2vector` and
    /// `oidvector` columns (`indkey`, `indoption`, `indclass`, `indcollation`) as arrays (they
    /// are kept as their text; the inspector unnests and subscripts them), and `pg_class` with
    /// its `reloptions` (NULL: weir's relations have no storage options).
    async fn with_postgres_shapes(context: &SessionContext) -> datafusion::error::Result<()> {
        let Some(catalog) = context.catalog(DATABASE) else { return Ok(()) };
        let Some(inner) = catalog.schema("pg_catalog") else { return Ok(()) };
        let mut views = HashMap::new();
        if let Some(pg_index) = inner.table("pg_index").await? {
            let columns: Vec<String> = pg_index
                .schema()
                .fields()
                .iter()
                .map(|field| match field.name().as_str() {
                    name @ ("indkey" | "indoption") => {
                        format!("arrow_cast(string_to_array({name}, ' '), 'List(Int16)') AS {name}")
                    }
                    name @ ("indclass" | "indcollation") => {
                        format!("arrow_cast(string_to_array({name}, ' '), 'List(Int32)') AS {name}")
                    }
                    name => format!("\"{name}\""),
                })
                .collect();
            let sql = format!("SELECT {} FROM pg_catalog.pg_index", columns.join(", "));
            views.insert("pg_index", context.sql(&sql).await?.into_view());
        }
        if inner
            .table("pg_class")
            .await?
            .is_some_and(|pg_class| pg_class.schema().field_with_name("reloptions").is_err())
        {
            let sql = "SELECT *, arrow_cast(NULL, 'List(Utf8)') AS reloptions FROM pg_catalog.pg_class";
            views.insert("pg_class", context.sql(sql).await?.into_view());
        }
        catalog.register_schema("pg_catalog", Arc::new(PgCatalogOverlay { inner, views }))?;
        Ok(())
    }
}

/// `datafusion-pg-catalog`'s `pg_catalog` schema with some tables replaced by views.
#[derive(Debug)]
struct PgCatalogOverlay {
    inner: Arc<dyn SchemaProvider>,
    views: HashMap<&'static str, Arc<dyn TableProvider>>,
}

#[async_trait]
impl SchemaProvider for PgCatalogOverlay {
    fn table_names(&self) -> Vec<String> {
        self.inner.table_names()
    }

    async fn table(&self, name: &str) -> datafusion::error::Result<Option<Arc<dyn TableProvider>>> {
        match self.views.get(name) {
            Some(view) => Ok(Some(view.clone())),
            None => self.inner.table(name).await,
        }
    }

    fn table_exist(&self, name: &str) -> bool {
        self.inner.table_exist(name)
    }
}

/// `statement` with Postgres functions `datafusion-pg-catalog` lacks written as what it has:
/// each `to_regtype(x)` (also `to_regclass`, `to_regnamespace`, `to_regproc`) as `CAST(x AS
/// regtype)`, which it looks up in the catalog (a name not found is NULL, as `to_regtype`
/// gives; psycopg asks so for a type it may adapt); `generate_subscripts(a, 1)` as an unnest
/// of 1..cardinality(a) (SQLAlchemy's inspector zips it with `unnest(a)`).
fn as_datafusion_functions(mut statement: SqlStatement) -> SqlStatement {
    struct Casts;
    impl VisitorMut for Casts {
        type Break = ();
        fn post_visit_expr(&mut self, expr: &mut SqlExpr) -> ControlFlow<()> {
            let SqlExpr::Function(function) = expr else { return ControlFlow::Continue(()) };
            let name = function.name.to_string().to_ascii_lowercase();
            let name = name.trim_start_matches("pg_catalog.");
            let FunctionArguments::List(arguments) = &function.args else { return ControlFlow::Continue(()) };
            let arguments: Vec<&SqlExpr> = arguments
                .args
                .iter()
                .filter_map(|argument| match argument {
                    FunctionArg::Unnamed(FunctionArgExpr::Expr(argument)) => Some(argument),
                    _ => None,
                })
                .collect();
            if let ("generate_subscripts", [array, _]) = (name, arguments.as_slice()) {
                // Postgres's set-returning subscripts of an array, zipped with an unnest of it
                // in the same select list, as DataFusion's unnests zip.
                let text = format!("unnest(generate_series(1, cardinality({array})))");
                if let Ok(subscripts) =
                    Parser::new(&PostgreSqlDialect {}).try_with_sql(&text).and_then(|mut p| p.parse_expr())
                {
                    *expr = subscripts;
                }
                return ControlFlow::Continue(());
            }
            let (Some(kind), [argument]) = (name.strip_prefix("to_"), arguments.as_slice()) else {
                return ControlFlow::Continue(());
            };
            if matches!(kind, "regtype" | "regclass" | "regnamespace" | "regproc") {
                *expr = SqlExpr::Cast {
                    kind: CastKind::DoubleColon,
                    expr: Box::new((*argument).clone()),
                    data_type: SqlDataType::Custom(ObjectName::from(vec![Ident::new(kind)]), Vec::new()),
                    array: false,
                    format: None,
                };
            }
            ControlFlow::Continue(())
        }
    }
    let _ = statement.visit(&mut Casts);
    statement
}

/// What `version()` says: Postgres's form first, which tools parse for the protocol level
/// they may use (SQLAlchemy refuses a server whose version does not start so), then weir's.
fn version_text() -> String {
    format!(
        "PostgreSQL {POSTGRES_VERSION} (weir {}, on Apache DataFusion {})",
        env!("CARGO_PKG_VERSION"),
        datafusion::DATAFUSION_VERSION
    )
}

/// Functions SQLAlchemy's inspector calls that `datafusion-pg-catalog` lacks:
/// `pg_type_is_visible(oid)` (every type is: weir has one schema), and
/// `pg_get_constraintdef(oid [, pretty])` and `pg_get_indexdef(oid, column, pretty)` (NULL:
/// weir's tables have no constraints nor indexes).
fn visibility_and_definition_functions() -> Vec<ScalarUDF> {
    let visible = create_udf(
        "pg_type_is_visible",
        vec![DataType::Int32],
        DataType::Boolean,
        Volatility::Immutable,
        Arc::new(|_| Ok(ColumnarValue::Scalar(ScalarValue::Boolean(Some(true))))),
    );
    let definition = |arguments| {
        create_udf(
            "pg_get_constraintdef",
            arguments,
            DataType::Utf8,
            Volatility::Immutable,
            Arc::new(|_| Ok(ColumnarValue::Scalar(ScalarValue::Utf8(None)))),
        )
    };
    let index_definition = create_udf(
        "pg_get_indexdef",
        vec![DataType::Int32, DataType::Int64, DataType::Boolean],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(|_| Ok(ColumnarValue::Scalar(ScalarValue::Utf8(None)))),
    );
    vec![
        visible,
        definition(vec![DataType::Int32]),
        definition(vec![DataType::Int32, DataType::Boolean]),
        index_definition,
    ]
}

/// The Postgres version weir's protocol and catalog answer as (pgwire's `server_version`).
const POSTGRES_VERSION: &str = "16.6";

fn version_function() -> ScalarUDF {
    let text = version_text();
    create_udf(
        "version",
        Vec::new(),
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(move |_| Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(text.clone()))))),
    )
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::util::pretty::pretty_format_batches;

    use super::*;

    async fn answer(query: &str) -> String {
        assert!(asks_the_catalog(query), "{query}");
        let answers = CatalogContext::new().answer(Vec::new(), query, true).await.unwrap_or_else(|e| panic!("{e}"));
        let (_, batches) = answers.into_iter().last().unwrap();
        pretty_format_batches(&batches).unwrap().to_string()
    }

    #[tokio::test]
    async fn clients_catalog_questions_are_answered_as_postgres_would() {
        // An unqualified pg_catalog relation, and to_regtype's NULL for an unknown type.
        let types =
            answer("SELECT typname FROM pg_type t WHERE t.oid = to_regtype('int4') OR t.oid = to_regtype('nope')")
                .await;
        assert!(types.contains("| int4 "), "{types}");
        assert_eq!(types.lines().count(), 5, "{types}");
        // Tools parse the version for Postgres's.
        assert!(answer("SELECT version()").await.contains("| PostgreSQL 16.6 (weir "));
        // An index's key columns are an array whose subscripts zip with its unnest.
        let keys = answer(
            "SELECT unnest(indkey) AS attnum, generate_subscripts(indkey, 1) AS ord FROM pg_catalog.pg_index \
             WHERE indexrelid = 2837",
        )
        .await;
        let rows: Vec<&str> = keys.lines().filter(|l| l.starts_with("| ") && !l.contains("attnum")).collect();
        assert_eq!(rows, ["| 1      | 1   |", "| 2      | 2   |"], "{keys}");
    }

    #[test]
    fn a_query_of_weirs_tables_is_not_a_catalog_query() {
        assert!(!asks_the_catalog("SELECT pg_typed FROM types"));
        assert!(!asks_the_catalog("SELECT name FROM tables WHERE name = 'pg_class' OR kind = 'it''s pg_type'"));
        assert!(asks_the_catalog("select n.nspname from pg_namespace n"));
    }
}
