//! Postgres clients' questions about the catalog (psql's `\d`, `\dt`, `\d NAME`, `\l`, `\dn`;
//! drivers' `SELECT version()`): answered from weir's tables and views by a batch DataFusion
//! context with `datafusion-pg-catalog`'s `pg_catalog` tables and functions, its rewrites of
//! Postgres-only syntax applied first. Never by matching a client's query text: any query
//! over `pg_catalog` or `information_schema` runs here.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::TableReference;
use datafusion::datasource::TableType;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::parser::Statement as DFStatement;
use datafusion_pg_catalog::pg_catalog::context::EmptyContextProvider;
use datafusion_pg_catalog::setup_pg_catalog;
use datafusion_pg_catalog::sql::PostgresCompatibilityParser;

/// The database name clients see (`\l`, `current_database()`).
pub const DATABASE: &str = "weir";

/// Whether `query` asks about the catalog rather than about data.
pub fn asks_the_catalog(query: &str) -> bool {
    let lower = query.to_ascii_lowercase();
    let calls = ["version()", "current_database()", "current_schema()", "current_schemas(", "current_setting("];
    lower.contains("pg_catalog")
        || lower.contains("information_schema")
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
            empty => empty.insert(Self::open().map_err(|e| e.to_string())?),
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
        let mut results = Vec::with_capacity(statements.len());
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
        Ok(context)
    }
}
