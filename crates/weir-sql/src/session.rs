//! A SQL session: runs statements against its catalog and keeps the options (`SET`) that apply
//! to the next pipeline.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::compute::can_cast_types;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::catalog::view::ViewTable;
use datafusion::common::{DFSchema, TableReference};
use datafusion::datasource::empty::EmptyTable;
use datafusion::logical_expr::{DdlStatement, ExprSchemable, LogicalPlan};
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::{
    ColumnOption, CreateTable, CreateTableOptions, DataType as SqlType, Expr, HiveDistributionStyle, Ident, Insert,
    ObjectName, ObjectType, PrimaryKeyConstraint, SelectItem, Set, SetExpr, Spanned, SqlOption, Statement,
    TableConstraint, TableObject, Value, ValueWithSpan,
};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use weir_connectors::json_type::{is_json, json_field};
use weir_connectors::options::{ConnectorOptions, Kind};
use weir_connectors::{Connector, Registry};
use weir_engine::operators::PreviewBuffer;
use weir_engine::{Graph, PipelineConfig};

use crate::catalog::{Catalog, TableDef, ViewDef};
use crate::error::{Error, Result, located};
use crate::identifiers::IdentifierCase;
use crate::map_types;
use crate::pipeline_options::PipelineOptions;
use crate::pipeline_statements::{self, PipelineCommand, PlacedCommand};
use crate::plan_err;
use crate::planner::{Planned, SinkTarget, build_graph};
use crate::time_clauses::{self, ClauseKind, TimeClause};
use crate::window_table_functions;

/// What a statement returns.
#[derive(Debug, Clone)]
pub enum Output {
    /// Done; a line saying what happened.
    Done(String),
    /// A result table.
    Rows { columns: Vec<String>, rows: Vec<Vec<String>> },
    /// A pipeline to start (INSERT INTO ... SELECT, or a bare SELECT into a preview).
    Pipeline(Box<PlannedPipeline>),
    /// A statement about pipelines (`SHOW PIPELINES`, `STOP PIPELINE n`, ...), for the service
    /// that runs them to carry out.
    Command(PipelineCommand),
}

/// A query planned into a graph, with the options it runs with.
#[derive(Debug, Clone)]
pub struct PlannedPipeline {
    /// Names its Kafka transactional ids: planning the same SQL under the same name again
    /// (after a restart) gives the same ids, so recovery finds the earlier transactions.
    pub name: String,
    pub sql: String,
    pub graph: Graph,
    pub config: PipelineConfig,
    /// For a bare SELECT: where its rows appear, and what a reader is told before them.
    pub preview: Option<Preview>,
    /// Its exactly-once Kafka writers' transactional id prefixes: a service refuses to run two
    /// pipelines sharing one.
    pub transactional_prefixes: Vec<String>,
}

/// The directories filesystem tables may use: a root that relative paths are taken under, and
/// the others listed. Paths are compared as written, made absolute (no `..`); links are not
/// followed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRoots {
    pub root: PathBuf,
    pub allowed: Vec<PathBuf>,
}

impl FileRoots {
    /// `root` and `allowed`, made absolute.
    pub fn new(root: &Path, allowed: &[PathBuf]) -> std::io::Result<Self> {
        let allowed = allowed.iter().map(std::path::absolute).collect::<std::io::Result<_>>()?;
        Ok(Self { root: std::path::absolute(root)?, allowed })
    }

    /// `path` (relative ones under the root), if it is inside the root or an allowed directory.
    pub fn confine(&self, path: &str) -> Result<String, String> {
        let given = Path::new(path);
        if given.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
            return Err(format!("path '{path}' goes up with '..': name a directory inside {}", self.roots()));
        }
        let resolved = if given.is_absolute() { given.to_path_buf() } else { self.root.join(given) };
        if resolved.starts_with(&self.root) || self.allowed.iter().any(|dir| resolved.starts_with(dir)) {
            return Ok(resolved.display().to_string());
        }
        Err(format!(
            "path '{path}' is outside the directories filesystem tables may use ({}); a relative path is taken under {}",
            self.roots(),
            self.root.display()
        ))
    }

    fn roots(&self) -> String {
        let all = std::iter::once(&self.root).chain(&self.allowed);
        all.map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
    }
}

/// A bare SELECT's output: the buffer its rows go to, and what a reader needs before the first
/// row arrives (the header, whether rows are changes, where reading starts).
#[derive(Debug, Clone)]
pub struct Preview {
    pub buffer: PreviewBuffer,
    /// (name, type) of each column, in order (without the change column).
    pub columns: Vec<(String, String)>,
    /// Whether rows are changes (a `_change` column of `+I`, `-U`, `+U`, `-D`).
    pub updating: bool,
    /// Per source table, where its reading starts ("kafka topic 'bids' from the earliest offset").
    pub reading: Vec<String>,
    /// Whether every table it reads comes to an end, and so the query too.
    pub bounded: bool,
}

/// What a SELECT gives, known before it runs ([`Session::describe_select`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SelectShape {
    /// (name, type) of each column, as [`Preview::columns`] names them.
    pub columns: Vec<(String, String)>,
    /// The type of each `$n` parameter, `$1` first; None where the query does not say.
    pub parameters: Vec<Option<DataType>>,
}

/// Rows a bare SELECT's preview keeps, unless the session says otherwise.
const PREVIEW_ROWS: usize = 10_000;

/// One user's statements and their effects.
pub struct Session {
    pub catalog: Catalog,
    /// What `SET` gave the next pipelines.
    pub options: PipelineOptions,
    /// Rows a bare SELECT's preview keeps (the latest ones).
    pub preview_rows: usize,
    /// Pipelines planned so far: the n-th is named `<pipeline.name>-<n>`.
    pipelines: usize,
    /// Every statement that changed the catalog, in order, as SQL that recreates it when run
    /// again (WATERMARK FOR already turned into options): what a service persists.
    pub catalog_log: Vec<String>,
    /// A name every pipeline planned now takes instead (see [`Session::execute_named`]).
    fixed_name: Option<String>,
    /// Where filesystem tables may read and write (a service's confinement); anywhere if none.
    pub files: Option<FileRoots>,
    context: SessionContext,
}

impl Default for Session {
    fn default() -> Self {
        Self::new()
    }
}

/// "sql parser error: Expected: ..., found: x at Line: 1, Column: 8" -> (message, line, column).
fn syntax_error(error: ParserError) -> Error {
    let text = match error {
        ParserError::ParserError(text) | ParserError::TokenizerError(text) => text,
        ParserError::RecursionLimitExceeded => "the statement is nested too deeply".to_string(),
    };
    let (message, position) = match text.rsplit_once(" at Line: ") {
        Some((message, position)) => (message.to_string(), position.to_string()),
        None => (text, String::new()),
    };
    let mut numbers = position.split(", Column: ").map(|n| n.trim().parse::<u64>().unwrap_or(0));
    let (line, column) = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
    Error::Syntax { message, line, column }
}

/// An option value as text: quoted strings, numbers and booleans.
fn option_value(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Value(ValueWithSpan { value, .. }) => match value {
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => Some(s.clone()),
            Value::Number(n, _) => Some(n.to_string()),
            Value::Boolean(b) => Some(b.to_string()),
            _ => None,
        },
        Expr::Identifier(ident) => Some(ident.value.clone()),
        _ => None,
    }
}

fn table_options(table: &str, options: &CreateTableOptions) -> Result<BTreeMap<String, String>> {
    let list = match options {
        CreateTableOptions::None => return Ok(BTreeMap::new()),
        CreateTableOptions::With(list) => list,
        _ => return plan_err!("table '{table}': give its options as WITH (name = 'value', ...)"),
    };
    let mut map = BTreeMap::new();
    for option in list {
        let SqlOption::KeyValue { key, value } = option else {
            return plan_err!("table '{table}': option {option} is not of the form name = 'value'");
        };
        let Some(value) = option_value(value) else {
            return plan_err!(
                "table '{table}': option '{}' needs a quoted value, as in {} = 'value'",
                key.value,
                key.value
            );
        };
        map.insert(key.value.clone(), value);
    }
    Ok(map)
}

impl Session {
    pub fn new() -> Self {
        // VARCHAR as Utf8, not Utf8View: what the JSON decoder, Parquet files and the Nexmark
        // generator produce, so declared and produced schemas agree.
        // Spans, so that planning errors say where in the statement they are.
        let config = SessionConfig::new()
            .set_bool("datafusion.sql_parser.map_string_types_to_utf8view", false)
            .set_bool("datafusion.sql_parser.collect_spans", true);
        let mut context = SessionContext::new_with_config(config);
        // JSON access on text columns: json_get_str(doc, 'key'), doc->'key', doc->>'key'...
        // (registering only adds functions to a fresh context; it cannot fail in practice).
        if let Err(error) = datafusion_functions_json::register_all(&mut context) {
            tracing::warn!("JSON functions unavailable: {error}");
        }
        for function in crate::window_functions::window_functions() {
            context.register_udf(function);
        }
        for function in crate::window_functions::window_end_functions() {
            context.register_udaf(function);
        }
        for function in crate::flink_udfs::flink_udfs() {
            context.register_udf(function);
        }
        for function in crate::proctime_function::proctime_functions() {
            context.register_udf(function);
        }
        context.register_udf(crate::timestamp_format::to_char());
        Self {
            catalog: Catalog::default(),
            options: PipelineOptions::default(),
            preview_rows: PREVIEW_ROWS,
            pipelines: 0,
            catalog_log: Vec::new(),
            fixed_name: None,
            files: None,
            context,
        }
    }

    /// `sql` read into statements (Flink's spellings rewritten on the tokens), each with its
    /// time clauses, and the pipeline commands and statement sets taken out (`Taken`, its
    /// tokens spent).
    fn parse(&mut self, sql: &str) -> Result<(Vec<Statement>, Vec<Vec<TimeClause>>, pipeline_statements::Taken)> {
        self.read_names_by_the_options();
        let (text, mut clauses) = time_clauses::extract(sql)?;
        let tokens = crate::flink_types::rewrite(window_table_functions::tokens(&text)?)?;
        let tokens = crate::flink_functions::is_json_predicates(crate::flink_functions::map_constructors(tokens));
        let tokens = crate::json_functions::clauses_as_arguments(tokens)?;
        crate::flink_refusals::check(&tokens)?;
        let (tokens, computed) = crate::computed_columns::extract(tokens);
        clauses.extend(computed);
        let (tokens, metadata) = crate::metadata_columns::extract(tokens)?;
        clauses.extend(metadata);
        let mut taken = pipeline_statements::take_commands(tokens)?;
        let statements = Parser::new(&GenericDialect {})
            .with_tokens_with_locations(std::mem::take(&mut taken.tokens))
            .parse_statements()
            .map_err(syntax_error)?;
        let clauses = clauses_by_statement(&statements, clauses)?;
        Ok((statements, clauses, taken))
    }

    /// What `sql`, if it is one SELECT, gives when run: its columns (name and type, as a
    /// preview names them) and the types of its `$n` parameters (by number, 1 first; None where
    /// nothing says), planned but not run. For a client that asks before it runs a query.
    pub async fn describe_select(&mut self, sql: &str) -> Result<Option<SelectShape>> {
        let (statements, mut clauses, taken) = self.parse(sql)?;
        if statements.len() != 1 || !taken.commands.is_empty() || !matches!(statements[0], Statement::Query(_)) {
            return Ok(None);
        }
        let Some(mut statement) = statements.into_iter().next() else { return Ok(None) };
        crate::field_names::name_fields(&mut statement);
        crate::flink_functions::rewrite(&mut statement, self.options.dialect.unwrap_or_default())?;
        self.cast_to_maps(&mut statement).await?;
        attach_time_clauses(&mut statement, std::mem::take(&mut clauses[0]), self.names())?;
        Box::pin(self.register_catalog()).await?;
        let state = self.context.state();
        let plan = state.statement_to_plan(DFStatement::Statement(Box::new(statement))).await.map_err(located)?;
        let types = plan.get_parameter_types()?;
        let count =
            types.keys().filter_map(|name| name.trim_start_matches('$').parse::<usize>().ok()).max().unwrap_or(0);
        let parameters = (1..=count).map(|n| types.get(&format!("${n}")).cloned().flatten()).collect();
        let columns = plan
            .schema()
            .fields()
            .iter()
            .map(|f| (f.name().clone(), if is_json(f) { "JSON".into() } else { f.data_type().to_string() }))
            .collect();
        Ok(Some(SelectShape { columns, parameters }))
    }

    /// Parses `sql` (one or more statements) and runs each in turn; stops at the first error.
    pub async fn execute(&mut self, sql: &str) -> Result<Vec<Output>> {
        let (statements, mut clauses, taken) = self.parse(sql)?;
        let mut commands = taken.commands;
        commands.reverse();
        let mut outputs = Vec::new();
        // Consecutive INSERTs make one pipeline, sharing the sources they read.
        let mut inserts: Vec<Insert> = Vec::new();
        // A statement set holds INSERTs only, and is a pipeline of its own.
        let in_set = |index: usize| taken.set_bounds.chunks(2).any(|set| set[0] <= index && set.get(1) > Some(&index));
        if let Some(other) =
            statements.iter().enumerate().find(|(i, s)| in_set(*i) && !matches!(s, Statement::Insert(_)))
        {
            let start = other.1.span().start;
            let message = "a statement set holds INSERT statements only".into();
            return Err(Error::Syntax { message, line: start.line, column: start.column });
        }
        for (index, mut statement) in statements.into_iter().enumerate() {
            self.take_commands_before(index, &mut commands, &mut inserts, &mut outputs).await?;
            if taken.set_bounds.contains(&index) && !inserts.is_empty() {
                outputs.push(self.insert_pipeline(std::mem::take(&mut inserts)).await?);
            }
            // Read by the dialect and the rule for names in force now (a SET before may have
            // changed them).
            crate::field_names::name_fields(&mut statement);
            crate::flink_functions::rewrite(&mut statement, self.options.dialect.unwrap_or_default())?;
            self.cast_to_maps(&mut statement).await?;
            attach_time_clauses(&mut statement, std::mem::take(&mut clauses[index]), self.names())?;
            match statement {
                Statement::Insert(insert) => inserts.push(insert),
                other => {
                    if !inserts.is_empty() {
                        outputs.push(self.insert_pipeline(std::mem::take(&mut inserts)).await?);
                    }
                    // What changes the catalog, or how its names are read, is logged.
                    let logged = match &other {
                        Statement::CreateTable(_) | Statement::CreateView(_) | Statement::Drop { .. } => true,
                        Statement::Set(Set::SingleAssignment { variable, .. }) => {
                            let name = variable.to_string();
                            ["sql.dialect", "sql.identifiers"].iter().any(|option| name.trim_matches('\'') == *option)
                        }
                        _ => false,
                    };
                    let text = logged.then(|| other.to_string());
                    // Boxed: a statement's planning is a deep future, kept off the caller's stack.
                    outputs.push(Box::pin(self.run(other)).await?);
                    self.catalog_log.extend(text);
                }
            }
        }
        self.take_commands_before(usize::MAX, &mut commands, &mut inserts, &mut outputs).await?;
        if !inserts.is_empty() {
            outputs.push(self.insert_pipeline(inserts).await?);
        }
        Ok(outputs)
    }

    /// The session's rule for unquoted names.
    fn names(&self) -> IdentifierCase {
        self.options.identifier_case()
    }

    /// Has DataFusion read names in queries by the session's rule.
    fn read_names_by_the_options(&self) {
        let lowercase = self.names().lowercases();
        self.context.state_ref().write().config_mut().options_mut().sql_parser.enable_ident_normalization = lowercase;
    }

    /// Outputs the pipeline commands written before ordinary statement `index` (`commands` is
    /// in reverse order), after the INSERTs gathered so far.
    async fn take_commands_before(
        &mut self,
        index: usize,
        commands: &mut Vec<PlacedCommand>,
        inserts: &mut Vec<Insert>,
        outputs: &mut Vec<Output>,
    ) -> Result<()> {
        while commands.last().is_some_and(|(before, _)| *before <= index) {
            if !inserts.is_empty() {
                outputs.push(self.insert_pipeline(std::mem::take(inserts)).await?);
            }
            if let Some((_, command)) = commands.pop() {
                outputs.push(Output::Command(command));
            }
        }
        Ok(())
    }

    /// Runs `sql` with every pipeline it plans named `name`: how a service plans a pipeline it
    /// runs again after a restart, under the name it had.
    pub async fn execute_named(&mut self, sql: &str, name: &str) -> Result<Vec<Output>> {
        self.fixed_name = Some(name.to_string());
        let outputs = self.execute(sql).await;
        self.fixed_name = None;
        outputs
    }

    /// One pipeline for `inserts`.
    async fn insert_pipeline(&mut self, inserts: Vec<Insert>) -> Result<Output> {
        let sql = inserts.iter().map(|i| format!("{i};")).collect::<Vec<_>>().join("\n");
        let mut queries = Vec::new();
        for insert in inserts {
            queries.push(self.insert_query(insert).await?);
        }
        let (name, planned, config) = self.plan_pipeline(queries).await?;
        Ok(Output::Pipeline(Box::new(PlannedPipeline {
            name,
            sql,
            graph: planned.graph,
            config,
            preview: None,
            transactional_prefixes: planned.transactional_prefixes,
        })))
    }

    async fn run(&mut self, statement: Statement) -> Result<Output> {
        match statement {
            Statement::CreateTable(create) => self.create_table(create).await,
            Statement::CreateView(view) => {
                let name = self.names().object_name(&view.name);
                if self.catalog.contains(&name) && !view.or_replace {
                    return plan_err!("'{name}' exists already; use CREATE OR REPLACE VIEW to replace a view");
                }
                let query = view.query.to_string();
                let view = ViewDef { name: name.clone(), query, identifiers: self.names() };
                self.catalog.views.insert(name.clone(), view);
                Ok(Output::Done(format!("created view {name}")))
            }
            Statement::Drop { object_type, if_exists, names, .. } => {
                let mut dropped = Vec::new();
                let rule = self.names();
                for name in names.iter().map(|name| rule.object_name(name)) {
                    let removed = match object_type {
                        ObjectType::Table => self.catalog.tables.remove(&name).is_some(),
                        ObjectType::View => self.catalog.views.remove(&name).is_some(),
                        other => return plan_err!("DROP {other} is not supported: weir drops tables and views"),
                    };
                    if !removed && !if_exists {
                        return plan_err!("there is no {} named '{name}'", object_type.to_string().to_lowercase());
                    }
                    dropped.push(name);
                }
                Ok(Output::Done(format!("dropped {}", dropped.join(", "))))
            }
            Statement::ShowTables { .. } => {
                let tables = self
                    .catalog
                    .tables
                    .values()
                    .map(|t| vec![t.name.clone(), "table".into(), t.connector.connector.clone()]);
                let views = self.catalog.views.values().map(|v| vec![v.name.clone(), "view".into(), String::new()]);
                let rows = tables.chain(views).collect();
                Ok(Output::Rows { columns: vec!["name".into(), "kind".into(), "connector".into()], rows })
            }
            Statement::ExplainTable { table_name, .. } => {
                let name = self.names().object_name(&table_name);
                self.describe(&name).await
            }
            Statement::Set(Set::SingleAssignment { variable, values, .. }) => {
                // Flink quotes the name: SET 'parallelism.default' = '2'.
                let name = variable.to_string().trim_matches('\'').to_string();
                let value = match values.as_slice() {
                    [value] => option_value(value),
                    _ => None,
                };
                let Some(value) = value else {
                    return plan_err!("SET {name} needs one value, as in SET {name} = 'value'");
                };
                self.options.set(&name, &value).map_err(Error::Plan)?;
                self.read_names_by_the_options();
                Ok(Output::Done(format!("{name} = '{value}' for the next pipeline")))
            }
            Statement::Query(query) => {
                let sql = query.to_string();
                let buffer = PreviewBuffer::new(self.preview_rows);
                let query = self.query(Statement::Query(query), SinkTarget::Preview(buffer.clone())).await?;
                let columns = query
                    .0
                    .schema()
                    .fields()
                    .iter()
                    .map(|f| (f.name().clone(), if is_json(f) { "JSON".into() } else { f.data_type().to_string() }))
                    .collect();
                let (name, planned, config) = self.plan_pipeline(vec![query]).await?;
                let mut sources = planned.sources;
                sources.sort();
                let tables: Vec<&TableDef> = sources.iter().filter_map(|t| self.catalog.tables.get(t)).collect();
                let reading = tables.iter().map(|t| reading_of(t)).collect::<Result<_>>()?;
                let bounded = tables.iter().map(|t| bounded(t)).collect::<Result<Vec<bool>>>()?.iter().all(|b| *b);
                let updating = planned.updating.first().copied().unwrap_or(false);
                let preview = Preview { buffer, columns, updating, reading, bounded };
                Ok(Output::Pipeline(Box::new(PlannedPipeline {
                    name,
                    sql,
                    graph: planned.graph,
                    config,
                    preview: Some(preview),
                    transactional_prefixes: planned.transactional_prefixes,
                })))
            }
            Statement::Insert(insert) => self.insert_pipeline(vec![insert]).await,
            Statement::Explain { statement, .. } => {
                let query = match *statement {
                    Statement::Insert(insert) => self.insert_query(insert).await?,
                    Statement::Query(query) => {
                        self.query(Statement::Query(query), SinkTarget::Preview(PreviewBuffer::new(1))).await?
                    }
                    other => return plan_err!("EXPLAIN shows the dataflow of a SELECT or an INSERT, not of '{other}'"),
                };
                let (planned, config) = self.plan_queries(vec![query], "explain")?;
                let rows = planned.graph.describe(config.chaining).lines().map(|line| vec![line.to_string()]).collect();
                Ok(Output::Rows { columns: vec!["dataflow".into()], rows })
            }
            other => {
                let kind = other.to_string().split_whitespace().take(2).collect::<Vec<_>>().join(" ");
                plan_err!(
                    "'{kind} ...' is not supported: weir runs CREATE TABLE, CREATE VIEW, DROP, SHOW TABLES, DESCRIBE, SET, INSERT INTO ... SELECT, SELECT and EXPLAIN"
                )
            }
        }
    }

    /// `statement` with its casts to a type with a map in it (`CAST(x AS MAP<K, V>)`) made
    /// casts to the Arrow type each plans as (see `map_types`).
    async fn cast_to_maps(&self, statement: &mut Statement) -> Result<()> {
        let mut planned = Vec::new();
        for target in map_types::map_cast_targets(statement) {
            let mut stand_in = target.clone();
            map_types::stand_in_for_maps(&mut stand_in);
            let sql = format!("CREATE TABLE weir_cast_types (c {stand_in})");
            let parsed = Parser::new(&GenericDialect {}).try_with_sql(&sql).and_then(|mut p| p.parse_statement());
            let parsed = parsed.map_err(|e| Error::Plan(format!("CAST to {target}: {e}")))?;
            let plan = self.context.state().statement_to_plan(DFStatement::Statement(Box::new(parsed))).await?;
            let LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(table)) = plan else {
                return plan_err!("CAST to {target}: could not read its type");
            };
            let arrow = map_types::maps_from_stand_ins(table.input.schema().field(0).data_type());
            planned.push((target, arrow));
        }
        if !planned.is_empty() {
            map_types::cast_to_planned_maps(statement, &planned);
        }
        Ok(())
    }

    async fn create_table(&mut self, mut create: CreateTable) -> Result<Output> {
        let name = self.names().object_name(&create.name);
        if self.catalog.contains(&name) && !create.or_replace {
            if create.if_not_exists {
                return Ok(Output::Done(format!("table {name} exists already")));
            }
            return plan_err!("'{name}' exists already; use CREATE OR REPLACE TABLE to replace it");
        }
        let mut options = table_options(&name, &create.table_options)?;
        // PRIMARY KEY (...) NOT ENFORCED, as Flink declares it: what an upsert sink keys by.
        let key = primary_key(&create, self.names());
        if !key.is_empty() && options.insert("primary_key".into(), key.join(",")).is_some() {
            return plan_err!("table '{name}': give its primary key once, as PRIMARY KEY (...) or 'primary_key'");
        }
        // Flink's PARTITIONED BY (a, b) is the option partition.fields = 'a,b'.
        if let HiveDistributionStyle::PARTITIONED { columns } = &create.hive_distribution {
            let registry = Registry::built_in();
            let partitioned = |c: &dyn Connector| c.options().iter().any(|o| o.name == PARTITION_FIELDS);
            let connector = options.get("connector").map(|c| registry.connector(c)).transpose()?;
            if let Some(connector) = connector.filter(|c| !partitioned(*c)) {
                let kinds: Vec<&str> = registry.all().filter(|c| partitioned(*c)).map(|c| c.name()).collect();
                return plan_err!(
                    "table '{name}': only a {} table is partitioned (PARTITIONED BY), not a '{}' one",
                    kinds.join(" or "),
                    connector.name()
                );
            }
            if options.contains_key(PARTITION_FIELDS) {
                return plan_err!(
                    "table '{name}': give its partition columns once, with PARTITIONED BY or 'partition.fields'"
                );
            }
            let names: Vec<String> = columns.iter().map(|c| self.names().name(&c.name)).collect();
            options.insert(PARTITION_FIELDS.into(), names.join(","));
            create.hive_distribution = HiveDistributionStyle::NONE;
        }
        let registry = Registry::built_in();
        let options_error = |e: weir_connectors::Error| Error::Options { table: name.clone(), message: e.to_string() };
        let mut connector = registry.validate(options).map_err(options_error)?;
        let kind = registry.connector(&connector.connector)?;
        if let Some(files) = &self.files {
            for spec in kind.options().iter().filter(|spec| spec.kind == Kind::Path) {
                if let Some(path) = connector.values.get_mut(spec.name) {
                    *path = files.confine(path).map_err(|message| Error::Options { table: name.clone(), message })?;
                }
            }
        }
        let fixed = kind.fixed_schema();
        let schema = if let Some(schema) = fixed.clone().filter(|_| create.columns.is_empty()) {
            schema
        } else if fixed.is_some() && !kind.takes_declared_columns() {
            return plan_err!(
                "table '{name}': the {} connector has a fixed schema; leave out the column list",
                kind.name()
            );
        } else {
            if create.columns.is_empty() {
                return plan_err!(
                    "table '{name}': list its columns, as in CREATE TABLE {name} (id BIGINT, ts TIMESTAMP) WITH (...)"
                );
            }
            // DataFusion's own CREATE TABLE planning turns the SQL types into Arrow types; it has
            // no JSON type, so JSON columns go through it as text and are marked JSON after.
            let mut json_columns = Vec::new();
            // Nor a map type: maps go through as stand-in structs, made maps after.
            for column in &mut create.columns {
                if matches!(column.data_type, SqlType::JSON | SqlType::JSONB) {
                    column.data_type = SqlType::Text;
                    json_columns.push(self.names().name(&column.name));
                }
                map_types::stand_in_for_maps(&mut column.data_type);
            }
            create.table_options = CreateTableOptions::None;
            create.name = ObjectName::from(vec![datafusion::sql::sqlparser::ast::Ident::new("weir_column_types")]);
            let plan = self
                .context
                .state()
                .statement_to_plan(DFStatement::Statement(Box::new(Statement::CreateTable(create))))
                .await?;
            let schema = match plan {
                LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(table)) => table.input.schema().as_arrow().clone(),
                other => return plan_err!("table '{name}': could not read its columns ({})", other.display()),
            };
            let fields: Vec<Field> = schema
                .fields()
                .iter()
                .map(|f| match json_columns.contains(f.name()) {
                    true => json_field(f.name(), f.is_nullable()),
                    false => f.as_ref().clone().with_data_type(map_types::maps_from_stand_ins(f.data_type())),
                })
                .collect();
            Arc::new(Schema::new(fields))
        };
        // Columns declared over a fixed schema must be some of its own, by name.
        if let Some(fixed) = &fixed {
            weir_connectors::declared_schema::conform(&name, fixed, &schema)?;
        }
        let checked = weir_connectors::ConnectorTable {
            name: name.clone(),
            schema: schema.clone(),
            options: connector.clone(),
            event_time: None,
        };
        kind.check(&checked)?;
        let computed = match connector.get(crate::computed_columns::OPTION) {
            Some(columns) => self.computed_columns(&name, columns, &schema)?,
            None => Vec::new(),
        };
        let computed_fields: Vec<Arc<Field>> = computed.iter().map(|(_, _, field)| Arc::new(field.clone())).collect();
        let with_computed = |schema: &Schema| Schema::new([schema.fields().to_vec(), computed_fields.clone()].concat());
        let event_time = event_time_of(&name, &with_computed(&schema), &connector)?;
        let proctime = connector.get("proctime").map(str::to_string);
        let schema = match &proctime {
            Some(column) => {
                if event_time.is_some() {
                    return plan_err!(
                        "table '{name}': give it an event time (WATERMARK FOR) or a processing time ({column} AS PROCTIME()), not both"
                    );
                }
                if schema.field_with_name(column).is_ok() {
                    return plan_err!(
                        "table '{name}': its processing-time column '{column}' is one of its columns already"
                    );
                }
                let mut fields = schema.fields().to_vec();
                fields.push(Arc::new(Field::new(column, DataType::Timestamp(TimeUnit::Millisecond, None), false)));
                Arc::new(Schema::new(fields))
            }
            None => schema,
        };
        // Computed columns come last, after the processing time stamped on what is read.
        let schema = Arc::new(with_computed(&schema));
        let computed = computed.into_iter().map(|(name, sql, _)| (name, sql)).collect();
        let table = TableDef { name: name.clone(), schema, connector, event_time, proctime, computed };
        self.catalog.tables.insert(name.clone(), table);
        Ok(Output::Done(format!("created table {name}")))
    }

    /// The computed columns `columns` (`expression AS name, ...`) of table `table` over its
    /// columns `schema`: each one's name, expression and field.
    fn computed_columns(&self, table: &str, columns: &str, schema: &Schema) -> Result<Vec<(String, String, Field)>> {
        let mut parser =
            Parser::new(&GenericDialect {}).try_with_sql(&format!("SELECT {columns}")).map_err(syntax_error)?;
        let Statement::Query(query) = parser.parse_statement().map_err(syntax_error)? else {
            return plan_err!("table '{table}': its computed columns do not parse: {columns}");
        };
        let SetExpr::Select(select) = *query.body else {
            return plan_err!("table '{table}': its computed columns do not parse: {columns}");
        };
        let input = DFSchema::try_from(schema.clone())?;
        let state = self.context.state();
        let mut computed = Vec::new();
        for item in select.projection {
            let SelectItem::ExprWithAlias { expr, alias } = item else {
                return plan_err!("table '{table}': a computed column is written name AS expression, not {item}");
            };
            let name = self.names().name(&alias);
            let sql = crate::identifiers::fixed_names(expr, self.names()).to_string();
            let planned = state
                .create_logical_expr(&sql, &input)
                .map_err(|e| Error::Plan(format!("table '{table}': computed column '{name}' ({sql}): {e}")))?;
            let data_type = planned.get_type(&input)?;
            computed.push((name.clone(), sql, Field::new(name, data_type, true)));
        }
        Ok(computed)
    }

    /// Every table and view with its columns (a view's as its query gives them), and whether
    /// it is a view.
    pub async fn relations(&mut self) -> Result<Vec<(String, SchemaRef, bool)>> {
        let mut relations: Vec<(String, SchemaRef, bool)> =
            self.catalog.tables.values().map(|t| (t.name.clone(), t.schema.clone(), false)).collect();
        if self.catalog.views.is_empty() {
            return Ok(relations);
        }
        Box::pin(self.register_catalog()).await?;
        for name in self.catalog.views.keys() {
            let view = self.context.table(TableReference::bare(name.as_str())).await?;
            relations.push((name.clone(), Arc::new(view.schema().as_arrow().clone()), true));
        }
        Ok(relations)
    }

    async fn describe(&mut self, name: &str) -> Result<Output> {
        let columns = vec!["column".into(), "type".into(), "nullable".into(), "note".into()];
        let Some(table) = self.catalog.tables.get(name) else {
            if !self.catalog.views.contains_key(name) {
                return plan_err!("there is no table or view named '{name}'");
            }
            // A view's columns are those its query gives.
            Box::pin(self.register_catalog()).await?;
            let view = self.context.table(TableReference::bare(name)).await?;
            let rows = view
                .schema()
                .fields()
                .iter()
                .map(|field| {
                    let data_type = if is_json(field) { "JSON".to_string() } else { field.data_type().to_string() };
                    let nullable = if field.is_nullable() { "YES" } else { "NO" };
                    vec![field.name().clone(), data_type, nullable.to_string(), "view column".to_string()]
                })
                .collect();
            return Ok(Output::Rows { columns, rows });
        };
        let rows = table
            .schema
            .fields()
            .iter()
            .map(|field| {
                let event_time = table.event_time.as_ref().filter(|(column, _)| column == field.name());
                let computed = table.computed.iter().find(|(column, _)| column == field.name());
                let mut note = match event_time {
                    Some((_, delay)) => format!("event time, watermark delay {delay:?}"),
                    None if table.proctime.as_ref() == Some(field.name()) => "processing time".to_string(),
                    None => String::new(),
                };
                if let Some((_, sql)) = computed {
                    let computed = format!("computed as {sql}");
                    note = if note.is_empty() { computed } else { format!("{computed}; {note}") };
                }
                let data_type = if is_json(field) { "JSON".to_string() } else { field.data_type().to_string() };
                vec![field.name().clone(), data_type, if field.is_nullable() { "YES" } else { "NO" }.to_string(), note]
            })
            .collect();
        Ok(Output::Rows { columns, rows })
    }

    /// The optimised logical plan of `query` (a SELECT) writing to `sink`.
    async fn query(&mut self, query: Statement, sink: SinkTarget) -> Result<(LogicalPlan, SinkTarget)> {
        Box::pin(self.register_catalog()).await?;
        let state = self.context.state();
        let plan = state.statement_to_plan(DFStatement::Statement(Box::new(query))).await.map_err(located)?;
        let plan = state.optimize(&plan)?;
        if let SinkTarget::Table(target) = &sink {
            let produced = plan.schema().fields().len();
            let expected = target.schema.fields().len();
            if produced != expected {
                return plan_err!(
                    "INSERT INTO {}: the query gives {produced} columns, the table has {expected}",
                    target.name
                );
            }
            // Rows are cast to the table's columns as they are written: what cannot be cast
            // fails now, not at run time.
            for (field, column) in plan.schema().fields().iter().zip(target.schema.fields()) {
                let text = matches!(field.data_type(), DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View);
                if is_json(column) && !text {
                    let given = match field.data_type() {
                        DataType::Union(..) => "a union of JSON's types".to_string(),
                        other => other.to_string(),
                    };
                    return plan_err!(
                        "INSERT INTO {}: column '{}' is JSON and takes text holding JSON, not {given}: take a JSON value out with json_get_json(doc, 'key', ...) (the -> operator gives a union of JSON's types)",
                        target.name,
                        column.name(),
                    );
                }
                if !can_cast_types(field.data_type(), column.data_type()) {
                    return plan_err!(
                        "INSERT INTO {}: column '{}' is {}, and the query gives {} ('{}'), which does not cast to it",
                        target.name,
                        column.name(),
                        column.data_type(),
                        field.data_type(),
                        field.name()
                    );
                }
            }
        }
        Ok((plan, sink))
    }

    async fn insert_query(&mut self, insert: Insert) -> Result<(LogicalPlan, SinkTarget)> {
        let target = match &insert.table {
            TableObject::TableName(name) => self.names().object_name(name),
            other => other.to_string(),
        };
        let Some(table) = self.catalog.tables.get(&target).cloned() else {
            return plan_err!("INSERT INTO {target}: there is no table named '{target}'");
        };
        // Its computed and processing-time columns are made as it is read, its VIRTUAL metadata
        // columns only read: an INSERT gives the others, as in Flink.
        let written = table.sink_view();
        let table = TableDef {
            schema: written.schema,
            event_time: written.event_time,
            proctime: None,
            computed: Vec::new(),
            ..table
        };
        let Some(source) = insert.source else {
            return plan_err!("INSERT INTO {target} needs a SELECT, as in INSERT INTO {target} SELECT ...");
        };
        self.query(Statement::Query(source), SinkTarget::Table(table)).await
    }

    /// A pipeline to run: planned, numbered, and checked against the Kafka brokers it writes
    /// to transactionally.
    async fn plan_pipeline(
        &mut self,
        queries: Vec<(LogicalPlan, SinkTarget)>,
    ) -> Result<(String, Planned, PipelineConfig)> {
        self.pipelines += 1;
        let name = match &self.fixed_name {
            Some(name) => name.clone(),
            None => format!("{}-{}", self.options.pipeline_name.as_deref().unwrap_or("weir"), self.pipelines),
        };
        let (planned, config) = self.plan_queries(queries, &name)?;
        let mut checks: Vec<_> = planned.preflight.iter().collect();
        checks.sort_by_key(|check| check.phase());
        for check in checks {
            check.check().await?;
        }
        Ok((name, planned, config))
    }

    /// One graph for `queries`, with the session's pipeline options.
    fn plan_queries(&self, queries: Vec<(LogicalPlan, SinkTarget)>, name: &str) -> Result<(Planned, PipelineConfig)> {
        let config = self.options.config();
        let options = self.options.plan_options(name, &config);
        let state = self.context.state();
        let planned = build_graph(&queries, &state, &|name| self.catalog.tables.get(name).cloned(), &options)?;
        Ok((planned, config))
    }

    /// Makes every table and view known to DataFusion, so it can resolve names and types.
    async fn register_catalog(&mut self) -> Result<()> {
        // Names as they are (not parsed, which would lowercase them), and none left over from
        // a table or view dropped since.
        let registered = self.context.catalog("datafusion").and_then(|c| c.schema("public"));
        for name in registered.map(|schema| schema.table_names()).unwrap_or_default() {
            self.context.deregister_table(TableReference::bare(name))?;
        }
        for table in self.catalog.tables.values() {
            let empty = EmptyTable::new(table.schema.clone());
            self.context.register_table(TableReference::bare(table.name.as_str()), Arc::new(empty))?;
        }
        // A view may read views: each is planned once those it reads are (in rounds, until a
        // round makes no progress; then the first failure is the error).
        let mut pending: Vec<&ViewDef> = self.catalog.views.values().collect();
        while !pending.is_empty() {
            let round = pending.len();
            let mut failed = Vec::new();
            let mut first_error = None;
            for view in pending {
                match self.plan_view(view).await {
                    Ok(plan) => {
                        let table = ViewTable::new(plan, Some(view.query.clone()));
                        self.context.register_table(TableReference::bare(view.name.as_str()), Arc::new(table))?;
                    }
                    Err(error) => {
                        first_error.get_or_insert(error);
                        failed.push(view);
                    }
                }
            }
            if let Some(error) = first_error.filter(|_| failed.len() == round) {
                return Err(error);
            }
            pending = failed;
        }
        Ok(())
    }

    /// The plan of a view's query, its names read as when it was created.
    async fn plan_view(&self, view: &ViewDef) -> Result<LogicalPlan> {
        let statements = Parser::parse_sql(&GenericDialect {}, &view.query).map_err(syntax_error)?;
        let Some(query) = statements.into_iter().next() else {
            return plan_err!("view '{}' has no query", view.name);
        };
        let mut state = self.context.state();
        state.config_mut().options_mut().sql_parser.enable_ident_normalization = view.identifiers.lowercases();
        Ok(state.statement_to_plan(DFStatement::Statement(Box::new(query))).await?)
    }

    /// Numbers the next pipelines after `n` (their names are `<pipeline.name>-<number>`): a
    /// service that restarts continues after the pipelines it has, so a name set again does
    /// not give a new pipeline an earlier one's Kafka transactional ids.
    pub fn number_pipelines_after(&mut self, n: usize) {
        self.pipelines = self.pipelines.max(n);
    }
}

/// Where reading `table` starts, in words: what a reader of a preview is told, so that an empty
/// result is never a mystery.
fn reading_of(table: &TableDef) -> Result<String> {
    let connector = Registry::built_in().connector(&table.connector.connector)?;
    Ok(connector.reading(&table.connector_view()))
}

/// Whether reading `table` comes to an end.
fn bounded(table: &TableDef) -> Result<bool> {
    let connector = Registry::built_in().connector(&table.connector.connector)?;
    Ok(connector.bounded(&table.connector_view()))
}

/// The option a connector whose tables are partitioned takes its partition columns in, also
/// written `PARTITIONED BY (...)`.
const PARTITION_FIELDS: &str = "partition.fields";

/// The columns of a CREATE TABLE's primary key, as a constraint or a column's option.
fn primary_key(create: &CreateTable, names: IdentifierCase) -> Vec<String> {
    let of_constraint = |key: &PrimaryKeyConstraint| -> Vec<String> {
        key.columns
            .iter()
            .map(|c| match &c.column.expr {
                Expr::Identifier(ident) => names.name(ident),
                other => other.to_string(),
            })
            .collect()
    };
    let constraint = create.constraints.iter().find_map(|c| match c {
        TableConstraint::PrimaryKey(key) => Some(of_constraint(key)),
        _ => None,
    });
    let columns = create
        .columns
        .iter()
        .filter(|c| c.options.iter().any(|o| matches!(o.option, ColumnOption::PrimaryKey(_))))
        .map(|c| names.name(&c.name));
    constraint.unwrap_or_else(|| columns.collect())
}

/// The clauses of each statement: each time clause belongs to the CREATE TABLE it was written
/// in (the last statement starting before it).
fn clauses_by_statement(statements: &[Statement], clauses: Vec<TimeClause>) -> Result<Vec<Vec<TimeClause>>> {
    let mut by_statement = vec![Vec::new(); statements.len()];
    for clause in clauses {
        let at = (clause.line, clause.col);
        // Statements without a known position (sqlparser leaves some spans empty) cannot own it.
        let owner = statements
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                let start = s.span().start;
                start.line > 0 && (start.line, start.column) <= at
            })
            .max_by_key(|(_, s)| {
                let start = s.span().start;
                (start.line, start.column)
            });
        let Some((index, Statement::CreateTable(_))) = owner else {
            return Err(Error::Syntax {
                message: "WATERMARK FOR and PROCTIME() columns belong in the column list of a CREATE TABLE".into(),
                line: clause.line,
                column: clause.col,
            });
        };
        by_statement[index].push(clause);
    }
    Ok(by_statement)
}

/// Gives a CREATE TABLE its time clauses: WATERMARK FOR as `event_time` and
/// `watermark_delay` options, `pt AS PROCTIME()` as the `proctime` option, computed columns as
/// `computed_columns`; the columns named by the rule `names`.
fn attach_time_clauses(statement: &mut Statement, clauses: Vec<TimeClause>, names: IdentifierCase) -> Result<()> {
    let Statement::CreateTable(create) = statement else { return Ok(()) };
    for clause in clauses {
        let options = match clause.kind {
            ClauseKind::Watermark { column, delay } => {
                vec![("event_time", names.name(&column)), ("watermark_delay", format!("{} ms", delay.as_millis()))]
            }
            ClauseKind::ProcessingTime { column } => vec![("proctime", names.name(&column))],
            ClauseKind::Computed { columns } => vec![(crate::computed_columns::OPTION, columns)],
            ClauseKind::Metadata { columns } => {
                let pairs: Vec<String> =
                    columns.iter().map(|c| format!("{}={}", names.written(&c.name), c.key)).collect();
                let virtuals: Vec<String> =
                    columns.iter().filter(|c| c.virtual_).map(|c| names.written(&c.name)).collect();
                let mut options = vec![(crate::metadata_columns::OPTION, pairs.join(","))];
                if !virtuals.is_empty() {
                    options.push((crate::metadata_columns::VIRTUAL_OPTION, virtuals.join(",")));
                }
                options
            }
        };
        let names: Vec<&str> = options.iter().map(|(key, _)| *key).collect();
        let new: Vec<SqlOption> = options
            .into_iter()
            .map(|(key, value)| SqlOption::KeyValue {
                key: Ident::new(key),
                value: Expr::Value(Value::SingleQuotedString(value).into()),
            })
            .collect();
        match &mut create.table_options {
            CreateTableOptions::None => create.table_options = CreateTableOptions::With(new),
            CreateTableOptions::With(list) => {
                let given =
                    |name: &str| list.iter().any(|o| matches!(o, SqlOption::KeyValue { key, .. } if key.value == name));
                if names.iter().any(|name| given(name)) {
                    return plan_err!(
                        "table '{}': give its time as a clause (WATERMARK FOR, AS PROCTIME()) or as options, not both",
                        create.name
                    );
                }
                list.extend(new);
            }
            _ => return plan_err!("table '{}': give its options as WITH (name = 'value', ...)", create.name),
        }
    }
    Ok(())
}

/// The event time of a table: the `event_time` option's column (a timestamp) with the
/// `watermark_delay` (zero if not given).
fn event_time_of(table: &str, schema: &Schema, connector: &ConnectorOptions) -> Result<Option<(String, Duration)>> {
    let delay = connector.duration("watermark_delay");
    let Some(column) = connector.get("event_time") else {
        if delay.is_some() {
            return plan_err!("table '{table}': 'watermark_delay' needs 'event_time', the column it applies to");
        }
        return Ok(None);
    };
    let Ok(field) = schema.field_with_name(column) else {
        return plan_err!("table '{table}': event_time column '{column}' is not one of its columns");
    };
    if !matches!(field.data_type(), DataType::Timestamp(_, _)) {
        return plan_err!("table '{table}': event_time column '{column}' is {}, not a TIMESTAMP", field.data_type());
    }
    Ok(Some((column.to_string(), delay.unwrap_or_default())))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn run(session: &mut Session, sql: &str) -> Vec<Output> {
        session.execute(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    async fn error(session: &mut Session, sql: &str) -> String {
        session.execute(sql).await.map(|o| panic!("{sql} succeeded: {o:?}")).unwrap_err().to_string()
    }

    fn rows(output: &Output) -> Vec<Vec<String>> {
        match output {
            Output::Rows { rows, .. } => rows.clone(),
            other => panic!("not rows: {other:?}"),
        }
    }

    /// What a service persists (the catalog as SQL, a pipeline's SQL) plans again in a fresh
    /// session, for the forms this parser rewrites or takes apart too: JSON columns,
    /// PARTITIONED BY, a window table function in a view and in a query.
    #[tokio::test]
    async fn the_catalog_log_and_a_pipelines_sql_plan_again_in_a_new_session() {
        let mut session = Session::new();
        run(
            &mut session,
            "CREATE TABLE docs (id BIGINT, doc JSON, dt VARCHAR) PARTITIONED BY (dt) WITH (connector = 'filesystem', path = '/tmp/weir-docs', format = 'json');
             CREATE TABLE nexmark (WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND) WITH (connector = 'nexmark', events = '10');
             CREATE VIEW per_second AS SELECT window_start, count(*) AS n FROM TABLE(TUMBLE(TABLE nexmark, DESCRIPTOR(date_time), INTERVAL '1' SECOND)) GROUP BY window_start, window_end",
        )
        .await;
        let outputs = run(&mut session, "SELECT window_start, window_end FROM TABLE(HOP(TABLE nexmark, DESCRIPTOR(date_time), INTERVAL '1' SECOND, INTERVAL '2' SECOND))").await;
        let Some(Output::Pipeline(pipeline)) = outputs.last() else { panic!("{outputs:?}") };
        let mut again = Session::new();
        for sql in &session.catalog_log {
            again.execute(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
        let described = rows(&run(&mut again, "DESCRIBE docs").await[0]);
        assert_eq!(described[1][1], "JSON");
        assert_eq!(again.catalog.tables["docs"].connector.get("partition.fields"), Some("dt"));
        again.execute(&pipeline.sql).await.unwrap_or_else(|e| panic!("{}: {e}", pipeline.sql));
        again.execute("SELECT * FROM per_second").await.unwrap();
    }

    /// A confined session takes relative paths under its root and refuses paths elsewhere.
    #[tokio::test]
    async fn filesystem_tables_stay_inside_the_allowed_directories() {
        let mut session = Session::new();
        let files = FileRoots::new(Path::new("/srv/weir/files"), &[PathBuf::from("/data/in")]).unwrap();
        session.files = Some(files);
        let table = |name: &str, path: &str| {
            format!("CREATE TABLE {name} (a BIGINT) WITH (connector = 'filesystem', path = '{path}', format = 'json')")
        };
        run(&mut session, &(table("here", "out/a") + ";" + &table("listed", "/data/in/x"))).await;
        assert_eq!(session.catalog.tables["here"].connector.get("path"), Some("/srv/weir/files/out/a"));
        assert_eq!(session.catalog.tables["listed"].connector.get("path"), Some("/data/in/x"));
        let refused = error(&mut session, &table("etc", "/etc")).await;
        assert!(refused.contains("'/etc' is outside") && refused.contains("/srv/weir/files, /data/in"), "{refused}");
        let up = error(&mut session, &table("up", "out/../../x")).await;
        assert!(up.contains("'..'"), "{up}");
    }

    /// Pipeline statements come back in their place among the others; a bare SELECT's preview
    /// says what its reader needs before the first row.
    #[tokio::test]
    async fn pipeline_statements_keep_their_place_and_a_preview_describes_itself() {
        let mut session = Session::new();
        let outputs = run(
            &mut session,
            "SHOW PIPELINES; CREATE TABLE nx WITH (connector = 'nexmark', events = '10', rate = '50');
             STOP PIPELINE 4 NOW; SELECT bid.auction AS auction, count(*) AS n FROM nx GROUP BY bid.auction; DROP PIPELINE 4",
        )
        .await;
        let kinds: Vec<String> = outputs
            .iter()
            .map(|o| match o {
                Output::Command(command) => format!("{command:?}"),
                Output::Done(_) => "done".into(),
                Output::Rows { .. } => "rows".into(),
                Output::Pipeline(_) => "pipeline".into(),
            })
            .collect();
        assert_eq!(kinds, ["Show", "done", "Stop { pipeline: 4, now: true }", "pipeline", "Drop { pipeline: 4 }"]);
        let Output::Pipeline(pipeline) = &outputs[3] else { unreachable!() };
        let preview = pipeline.preview.as_ref().unwrap();
        assert_eq!(preview.columns, [("auction".to_string(), "Int64".to_string()), ("n".into(), "Int64".into())]);
        assert!(preview.updating);
        assert_eq!(preview.reading, ["nx: the nexmark generator, 10 events at 50 events/s, from its first event"]);
    }

    #[tokio::test]
    async fn tables_and_views_are_created_shown_described_and_dropped() {
        let mut session = Session::new();
        run(&mut session, "CREATE TABLE bids WITH (connector = 'nexmark', events = '1000', as_fast_as_possible = 'true', event_time = 'date_time', watermark_delay = '5 seconds')").await;
        run(
            &mut session,
            "CREATE TABLE clicks (user_id BIGINT NOT NULL, url VARCHAR, ts TIMESTAMP) WITH (connector = 'kafka', \"bootstrap.servers\" = '127.0.0.1:9092', topic = 'clicks', format = 'json', event_time = 'ts');
             CREATE TABLE out (user_id BIGINT, n BIGINT) WITH (connector = 'blackhole');
             CREATE VIEW recent AS SELECT user_id FROM clicks WHERE user_id > 10",
        )
        .await;
        let shown = run(&mut session, "SHOW TABLES").await;
        assert_eq!(
            rows(&shown[0]),
            vec![
                vec!["bids".to_string(), "table".into(), "nexmark".into()],
                vec!["clicks".into(), "table".into(), "kafka".into()],
                vec!["out".into(), "table".into(), "blackhole".into()],
                vec!["recent".into(), "view".into(), String::new()],
            ]
        );
        let described = rows(&run(&mut session, "DESCRIBE clicks").await[0]);
        assert_eq!(described[0], vec!["user_id", "Int64", "NO", ""]);
        assert_eq!(described[1][1], "Utf8");
        assert!(described[2][1].starts_with("Timestamp(ns"), "{described:?}");
        assert_eq!(described[2][3], "event time, watermark delay 0ns");
        let nexmark = rows(&run(&mut session, "DESCRIBE bids").await[0]);
        assert_eq!(
            nexmark.iter().map(|r| r[0].as_str()).collect::<Vec<_>>(),
            vec!["event_type", "person", "auction", "bid", "date_time"]
        );
        assert_eq!(nexmark[4][3], "event time, watermark delay 5s");
        run(&mut session, "DROP VIEW recent; DROP TABLE out").await;
        assert_eq!(rows(&run(&mut session, "SHOW TABLES").await[0]).len(), 2);
        run(&mut session, "DROP TABLE IF EXISTS out").await;
    }

    #[tokio::test]
    async fn bad_statements_say_what_is_wrong_and_where() {
        let mut session = Session::new();
        assert_eq!(
            error(&mut session, "CREATE TABLE t (a BIGINT) WITH (connector = 'blackhole');\nSELEC 1").await,
            "SQL syntax error at line 2, column 1: Expected: an SQL statement, found: SELEC"
        );
        assert_eq!(
            error(&mut session, "CREATE TABLE t (a BIGINT) WITH (connector = 'nexmark', rate = '0')").await,
            "table 't': option 'rate' = '0' is invalid: expected an integer of at least 1"
        );
        assert_eq!(
            error(&mut session, "CREATE TABLE t (a BIGINT) WITH (connector = 'blackhole', event_time = 'a')").await,
            "table 't': event_time column 'a' is Int64, not a TIMESTAMP"
        );
        assert!(
            error(&mut session, "CREATE TABLE n (a BIGINT) WITH (connector = 'nexmark')")
                .await
                .contains("fixed schema")
        );
        assert!(
            error(&mut session, "CREATE TABLE t WITH (connector = 'blackhole')").await.contains("list its columns")
        );
        assert!(error(&mut session, "DESCRIBE nothing").await.contains("there is no table or view named 'nothing'"));
        assert!(error(&mut session, "DROP TABLE nothing").await.contains("there is no table named 'nothing'"));
        run(&mut session, "CREATE TABLE t (a BIGINT) WITH (connector = 'blackhole')").await;
        assert!(
            error(&mut session, "CREATE TABLE t (a BIGINT) WITH (connector = 'blackhole')")
                .await
                .contains("exists already")
        );
        assert!(error(&mut session, "UPDATE t SET a = 1").await.contains("is not supported"));
    }

    #[tokio::test]
    async fn set_takes_known_pipeline_options_only() {
        let mut session = Session::new();
        run(
            &mut session,
            "SET checkpoint.mode = 'at_least_once'; SET parallelism = 3; SET checkpoint.interval = '200 ms'",
        )
        .await;
        assert_eq!(session.options.exactly_once, Some(false));
        assert_eq!(session.options.parallelism, Some(3));
        assert_eq!(
            error(&mut session, "SET checkpoint.mode = 'sometimes'").await,
            "'checkpoint.mode' = 'sometimes' is invalid: expected 'exactly_once' or 'at_least_once'"
        );
        assert!(error(&mut session, "SET paralelism = 2").await.starts_with("'paralelism' is not a pipeline option"));
    }

    async fn pipeline_of(session: &mut Session, sql: &str) -> PlannedPipeline {
        match run(session, sql).await.pop() {
            Some(Output::Pipeline(pipeline)) => *pipeline,
            other => panic!("{sql}: no pipeline: {other:?}"),
        }
    }

    /// Consecutive INSERTs in one submission are one pipeline reading the source once.
    #[tokio::test]
    async fn several_inserts_make_one_pipeline_sharing_the_source() {
        let mut session = Session::new();
        run(
            &mut session,
            "CREATE TABLE nexmark WITH (connector = 'nexmark', events = '100');
             CREATE TABLE bids (price BIGINT) WITH (connector = 'blackhole');
             CREATE TABLE persons (id BIGINT) WITH (connector = 'blackhole')",
        )
        .await;
        let outputs = run(
            &mut session,
            "INSERT INTO bids SELECT bid.price FROM nexmark WHERE event_type = 2;
             INSERT INTO persons SELECT person.id FROM nexmark WHERE event_type = 0",
        )
        .await;
        let [Output::Pipeline(pipeline)] = outputs.as_slice() else { panic!("{outputs:?}") };
        let description = pipeline.graph.describe(true);
        assert_eq!(description.matches("task [nexmark]").count(), 1, "{description}");
        assert!(description.contains("-> bids]") && description.contains("-> persons]"), "{description}");
        // A statement set is a pipeline of its own, even between other INSERTs.
        let outputs = run(
            &mut session,
            "INSERT INTO bids SELECT bid.price FROM nexmark WHERE event_type = 2;
             EXECUTE STATEMENT SET BEGIN
               INSERT INTO bids SELECT bid.price FROM nexmark WHERE event_type = 2;
               INSERT INTO persons SELECT person.id FROM nexmark WHERE event_type = 0;
             END;
             INSERT INTO persons SELECT person.id FROM nexmark WHERE event_type = 0",
        )
        .await;
        let inserts: Vec<usize> = outputs
            .iter()
            .map(|o| match o {
                Output::Pipeline(p) => p.sql.matches("INSERT").count(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(inserts, vec![1, 2, 1]);
    }

    /// Flink's rule for names survives a replay of the catalog log: the SET that chose it is
    /// logged, views keep the rule they were made under, computed columns read alike under both.
    #[tokio::test]
    async fn names_read_by_flinks_rule_plan_again_in_a_new_session() {
        let mut session = Session::new();
        run(
            &mut session,
            "SET 'sql.dialect' = 'flink';
             CREATE TABLE Events (bid ROW<auction BIGINT, dateTime TIMESTAMP(3)>, `dateTime` AS bid.dateTime, WATERMARK FOR dateTime AS dateTime) WITH ('connector' = 'nexmark', 'events' = '10');
             CREATE VIEW Bids AS SELECT bid.auction, dateTime FROM Events;
             SET 'sql.identifiers' = 'lowercase';
             CREATE VIEW bids_again AS SELECT * FROM \"Bids\"",
        )
        .await;
        assert_eq!(
            session.catalog_log.iter().filter(|sql| sql.starts_with("SET")).count(),
            2,
            "{:?}",
            session.catalog_log
        );
        let mut again = Session::new();
        for sql in &session.catalog_log {
            again.execute(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
        assert_eq!(again.options.identifier_case(), IdentifierCase::Lowercase);
        assert_eq!(again.catalog.tables["Events"].event_time.as_ref().map(|(c, _)| c.as_str()), Some("dateTime"));
        run(&mut again, "SELECT auction, \"dateTime\" FROM bids_again").await;
        let error = again.execute("SELECT dateTime FROM bids_again").await.unwrap_err().to_string();
        assert!(error.contains("datetime"), "{error}");
    }

    #[tokio::test]
    async fn explain_shows_the_dataflow_and_unsupported_queries_fail_at_planning() {
        let mut session = Session::new();
        run(
            &mut session,
            "CREATE TABLE nexmark WITH (connector = 'nexmark'); CREATE TABLE out (auction BIGINT, price BIGINT) WITH (connector = 'blackhole'); SET parallelism = 2",
        )
        .await;
        let explained = run(
            &mut session,
            "EXPLAIN INSERT INTO out SELECT bid.auction, bid.price FROM nexmark WHERE event_type = 2",
        )
        .await;
        assert_eq!(
            rows(&explained[0]),
            vec![
                vec!["task [nexmark -> select -> out] x2".to_string()],
                vec!["edge nexmark -> select (input 0): forward".to_string()],
                vec!["edge select -> out (input 0): forward".to_string()],
                vec!["state nexmark: the next event number of each split".to_string()],
            ]
        );
        let unsupported = error(&mut session, "SELECT bid.price FROM nexmark ORDER BY bid.price").await;
        assert!(unsupported.contains("ORDER BY and LIMIT over an unbounded stream are not supported"), "{unsupported}");
        let mismatch = error(&mut session, "INSERT INTO out SELECT bid.auction FROM nexmark").await;
        assert!(mismatch.contains("the query gives 1 columns, the table has 2"), "{mismatch}");
    }

    /// The watermark follows the event-time column: the largest event time less the delay.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_table_with_event_time_gets_watermarks() {
        let mut session = Session::new();
        run(
            &mut session,
            "CREATE TABLE nexmark (WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND) WITH (connector = 'nexmark', events = '1000', as_fast_as_possible = 'true', splits = '1')",
        )
        .await;
        let pipeline = pipeline_of(&mut session, "SELECT bid.price FROM nexmark WHERE event_type = 2").await;
        let dir = tempfile::tempdir().unwrap();
        let handle =
            weir_engine::start(pipeline.graph, pipeline.config, weir_state::StateStore::local(dir.path()).unwrap())
                .unwrap();
        while !handle.is_finished() {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let operators = handle.metrics().operators();
        handle.wait().await.unwrap();
        let select = operators.iter().find(|o| o.operator == "select").unwrap();
        // Event 999 is the last: 99.9 ms after the base time at 10,000 events/s.
        assert_eq!(select.watermark, Some(1_700_000_000_000 + 99 - 1000), "{operators:?}");
    }
}
