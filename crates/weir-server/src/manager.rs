//! The pipeline manager: one SQL session for the service's catalog and options, the running
//! pipelines, and their lifecycle, recorded in the [`Store`] as it happens.
//!
//! Statuses: created -> running -> (recovering -> running)* -> stopping -> stopped, or
//! finished (a bounded run), or failed (with the error). A watcher per running pipeline copies
//! the engine's state, errors and checkpoints into the store. When the service starts, every
//! pipeline that was running (or recovering, or stopping) is planned again from its stored
//! SQL, options and name (so its Kafka transactional ids are the same) and resumes from its
//! last completed checkpoint: its sinks' recovery commits what that checkpoint left pending.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use weir_engine::{PipelineHandle, PipelineState, PipelineStatus};
use weir_sql::{FileRoots, Output, PipelineOptions, PlannedPipeline, Preview, Session};
use weir_state::{CheckpointStorage, StateStore};

mod commands;

pub use commands::PipelineSummary;

use crate::cluster::Cluster;
use crate::config::ServerConfig;
use crate::dataflow::Dataflow;
use crate::error::{ApiError, ApiResult};
use crate::metrics::LivePipeline;
use crate::placement::{ClusterWorkers, PipelineSpec};
use crate::rates::{OperatorView, RateWindow};
use crate::store::{PipelineRecord, Store, now_ms};

/// How often a running pipeline's engine status is copied into the store.
const WATCH_EVERY: Duration = Duration::from_millis(250);

/// What `POST /statements` answers for one statement.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StatementResult {
    Done { message: String },
    Rows { columns: Vec<String>, rows: Vec<Vec<String>> },
    Pipeline { id: i64, name: String, preview: bool },
}

struct Running {
    handle: Option<PipelineHandle>,
    preview: Option<Preview>,
    graph: String,
    dataflow: Dataflow,
    /// Its exactly-once Kafka writers' transactional id prefixes.
    prefixes: Vec<String>,
    started: Instant,
    /// The engine's last status, kept after the handle is gone.
    last: Option<PipelineStatus>,
    /// Recent operator counters, for rates.
    rates: RateWindow,
}

impl Running {
    /// The engine's status now, or the last one seen once the handle is gone.
    fn status(&self) -> Option<PipelineStatus> {
        self.handle.as_ref().map(PipelineHandle::status).or_else(|| self.last.clone())
    }
}

pub struct Manager {
    /// This process's claim on the data directory, for as long as the manager lives.
    _lock: weir_state::DataDirLock,
    config: ServerConfig,
    /// Where each pipeline keeps its checkpoints, under its id.
    checkpoints: CheckpointStorage,
    /// The workers that joined this service.
    cluster: Arc<Cluster>,
    store: Store,
    session: tokio::sync::Mutex<Session>,
    running: Mutex<HashMap<i64, Running>>,
}

/// A pipeline's status with everything a client wants to see of it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct PipelineView {
    #[serde(flatten)]
    pub record: PipelineRecord,
    pub uptime_ms: Option<u64>,
    /// The dataflow graph, as EXPLAIN shows it.
    pub graph: Vec<String>,
    /// The same graph as data, to draw (empty once the service restarted without resuming it).
    pub dataflow: Dataflow,
    pub restarts: Option<u32>,
    pub restored_from: Option<u64>,
    /// Where the current attempt's tasks run when on workers: the workers' Flight addresses,
    /// per task (chain, then subtask) an index into them, and `scaled_to` when fewer slots
    /// than the pipeline's parallelism were alive (it runs that narrow until they return).
    #[schema(value_type = Option<Object>)]
    pub placement: Option<weir_engine::remote::Placement>,
    /// Per operator subtask: records in and out and their rates over the last seconds,
    /// back-pressure (total and ratio), watermark and its lag behind the wall clock, bad and
    /// late records, and for a transactional writer its transactions (open, pre-committed
    /// waiting for a checkpoint, committed, aborted, when the oldest not committed began, and
    /// the transaction timeout).
    #[schema(value_type = Vec<Object>)]
    pub operators: Vec<OperatorView>,
    pub errors: Vec<ErrorView>,
    pub transitions: Vec<crate::store::Transition>,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ErrorView {
    pub at_ms: i64,
    pub message: String,
}

fn status_name(state: PipelineState) -> &'static str {
    match state {
        PipelineState::Running => "running",
        PipelineState::Recovering => "recovering",
        PipelineState::Finished => "finished",
        PipelineState::Stopped => "stopped",
        PipelineState::Failed => "failed",
    }
}

impl Manager {
    /// Opens the data directory, rebuilds the catalog and resumes what was running.
    pub async fn open(config: ServerConfig) -> ApiResult<Arc<Self>> {
        let lock = weir_state::DataDirLock::acquire(&config.data_dir, "weir serve").map_err(ApiError::internal)?;
        let files = config.files_dir();
        std::fs::create_dir_all(&files).map_err(|e| ApiError::internal(format!("{}: {e}", files.display())))?;
        let store = Store::open(&config.data_dir.join("weir.sqlite"))?;
        let checkpoints = config.checkpoint_storage().map_err(ApiError::internal)?;
        checkpoints.claim("", &store.identity().await?).await.map_err(|e| ApiError::internal(e.to_string()))?;
        let mut session = new_session(&config)?;
        for sql in store.catalog().await? {
            session
                .execute(&sql)
                .await
                .map_err(|e| ApiError::internal(format!("replaying the catalog ({sql}): {e}")))?;
        }
        session.catalog_log.clear();
        session.number_pipelines_after(usize::try_from(store.next_pipeline_id().await? - 1).unwrap_or(0));
        let manager = Arc::new(Self {
            _lock: lock,
            cluster: Cluster::new(config.cluster_secret.clone(), config.worker_timeout),
            config,
            checkpoints,
            store,
            session: tokio::sync::Mutex::new(session),
            running: Mutex::new(HashMap::new()),
        });
        for record in manager.store.pipelines().await? {
            if matches!(record.status.as_str(), "created" | "running" | "recovering" | "stopping") {
                let id = record.id;
                if let Err(error) = manager.clone().resume(id, None, None).await {
                    manager.store.set_status(id, "failed", Some(error.body.message.clone())).await?;
                }
            }
        }
        Ok(manager)
    }

    /// The workers that joined this service.
    pub fn cluster(&self) -> Arc<Cluster> {
        self.cluster.clone()
    }

    /// Where pipelines' checkpoints go, for people: a directory or a URL.
    pub fn checkpoint_location(&self) -> String {
        self.checkpoints.describe("")
    }

    /// Pipeline `id`'s checkpoints.
    fn checkpoint_store(&self, id: i64) -> ApiResult<StateStore> {
        let relative = id.to_string();
        self.checkpoints
            .store(&relative)
            .map_err(|e| ApiError::internal(format!("{}: {e}", self.checkpoints.describe(&relative))))
    }

    /// Runs `sql`: DDL changes the catalog (persisted), SET the session, queries start
    /// pipelines.
    pub async fn statements(self: &Arc<Self>, sql: &str) -> ApiResult<Vec<StatementResult>> {
        let mut session = self.session.lock().await;
        // Pipelines of this request get names no earlier or later request can have.
        let request = uuid::Uuid::new_v4().simple().to_string();
        let generated = format!("w{}", &request[..12]);
        if session.options.pipeline_name.is_none() {
            session.options.pipeline_name = Some(generated.clone());
        }
        let outputs = session.execute(sql).await;
        // The generated name goes again; a `SET pipeline.name` of this request stays.
        if session.options.pipeline_name.as_ref() == Some(&generated) {
            session.options.pipeline_name = None;
        }
        let logged = std::mem::take(&mut session.catalog_log);
        self.store.append_catalog(logged).await?;
        let options = session.options.to_json();
        drop(session);
        let mut results = Vec::new();
        for output in outputs? {
            results.push(match output {
                Output::Done(message) => StatementResult::Done { message },
                Output::Rows { columns, rows } => StatementResult::Rows { columns, rows },
                Output::Pipeline(planned) => {
                    let (id, name, preview) = self.create(*planned, &options).await?;
                    StatementResult::Pipeline { id, name, preview }
                }
                Output::Command(command) => self.command(command).await?,
            });
        }
        Ok(results)
    }

    async fn create(self: &Arc<Self>, planned: PlannedPipeline, options: &str) -> ApiResult<(i64, String, bool)> {
        let name = planned.name.clone();
        // The name makes the Kafka transactional ids: a second pipeline of one name (a
        // `SET pipeline.name` used twice) would fence the first's transactions.
        if let Some(other) = self.store.pipelines().await?.into_iter().find(|p| p.name == name) {
            return Err(ApiError::conflict(format!(
                "pipeline {} is named '{name}' already, and a pipeline's name makes its Kafka transactional ids: SET pipeline.name to another name (or DROP PIPELINE {})",
                other.id, other.id
            )));
        }
        let id = self.store.next_pipeline_id().await?;
        self.check_prefixes(id, &planned.transactional_prefixes)?;
        let preview = planned.preview.is_some();
        let parallelism = planned.graph.nodes().iter().map(|n| n.parallelism).max().unwrap_or(1) as i64;
        let record = PipelineRecord {
            id,
            name: name.clone(),
            sql: planned.sql.clone(),
            options: options.to_string(),
            parallelism,
            status: "created".into(),
            preview,
            created_at_ms: now_ms(),
        };
        self.store.insert_pipeline(record).await?;
        self.start(id, planned, None).await?;
        Ok((id, name, preview))
    }

    /// Starts a planned pipeline (`parallelism`: the one it was resumed at, if another). In a
    /// service that takes workers, each attempt runs on the workers alive then, in this
    /// process when there are none; a preview (whose rows land here) always runs here.
    async fn start(self: &Arc<Self>, id: i64, planned: PlannedPipeline, parallelism: Option<usize>) -> ApiResult<()> {
        let store = self.checkpoint_store(id)?;
        let graph = planned.graph.describe(planned.config.chaining);
        let dataflow = Dataflow::of(&planned.graph, planned.config.chaining);
        let prefixes = planned.transactional_prefixes.clone();
        let started = match (self.cluster.clients(), &planned.preview) {
            (Some(clients), None) => {
                let spec = self.spec(id, &planned, parallelism).await?;
                let workers = Arc::new(ClusterWorkers { cluster: self.cluster.clone(), clients, spec });
                weir_engine::start_on_workers(planned.graph, planned.config, store, workers)
            }
            _ => weir_engine::start(planned.graph, planned.config, store),
        };
        let handle = started.map_err(|e| ApiError::bad_request(format!("starting the pipeline: {e}")))?;
        self.lock().insert(
            id,
            Running {
                handle: Some(handle),
                preview: planned.preview,
                graph,
                dataflow,
                prefixes,
                started: Instant::now(),
                last: None,
                rates: RateWindow::default(),
            },
        );
        self.store.set_status(id, "running", None).await?;
        tokio::spawn(self.clone().watch(id));
        Ok(())
    }

    /// What a worker needs to plan pipeline `id` as this service did.
    async fn spec(&self, id: i64, planned: &PlannedPipeline, parallelism: Option<usize>) -> ApiResult<PipelineSpec> {
        let record = self.store.pipeline(id).await?.ok_or_else(|| ApiError::not_found(format!("no pipeline {id}")))?;
        let session = new_session(&self.config)?;
        let files = session.files.unwrap_or_else(|| FileRoots { root: self.config.files_dir(), allowed: Vec::new() });
        Ok(PipelineSpec {
            name: planned.name.clone(),
            sql: planned.sql.clone(),
            options: record.options,
            catalog: self.store.catalog().await?,
            parallelism,
            files_root: files.root,
            files_allowed: files.allowed,
            checkpoint_url: self.checkpoints.url(),
            checkpoint_options: self.config.checkpoint_options.clone(),
            checkpoint_path: id.to_string(),
        })
    }

    /// Refuses transactional id prefixes that a running pipeline other than `id` writes with.
    fn check_prefixes(&self, id: i64, prefixes: &[String]) -> ApiResult<()> {
        let running = self.lock();
        let clash = running
            .iter()
            .filter(|(other, r)| **other != id && r.handle.is_some())
            .find_map(|(other, r)| r.prefixes.iter().find(|p| prefixes.contains(p)).map(|p| (*other, p.clone())));
        match clash {
            Some((other, prefix)) => Err(ApiError::conflict(format!(
                "pipeline {other} writes Kafka transactions with ids starting '{prefix}' already: two writers with one prefix fence each other (set another 'transactional_id.prefix', or stop pipeline {other})"
            ))),
            None => Ok(()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Running>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Copies the engine's status of pipeline `id` into the store until its handle is gone.
    async fn watch(self: Arc<Self>, id: i64) {
        let mut errors_seen = 0;
        let mut checkpoints_stored = 0;
        loop {
            let status = {
                let mut running = self.lock();
                let Some(running) = running.get_mut(&id) else { return };
                let Some(handle) = running.handle.as_ref() else { return };
                let status = handle.status();
                running.rates.push(Instant::now(), handle.metrics().operators());
                status
            };
            let new_errors = status.errors.len() > errors_seen;
            for error in status.errors.iter().skip(errors_seen) {
                let _ = self.store.add_error(id, error.at_ms as i64, error.message.clone()).await;
            }
            errors_seen = status.errors.len();
            if new_errors && status.state == PipelineState::Recovering {
                let detail = status.errors.last().map(|e| e.message.clone());
                let _ = self.store.set_status(id, "failing", detail).await;
            }
            checkpoints_stored = self.record_checkpoints(id, &status, checkpoints_stored).await;
            let detail = status.errors.last().map(|e| e.message.clone());
            let state = status.state;
            let _ = self
                .store
                .set_engine_status(id, status_name(state), detail.filter(|_| state != PipelineState::Running))
                .await;
            if let Some(running) = self.lock().get_mut(&id) {
                running.last = Some(status);
            }
            if matches!(state, PipelineState::Finished | PipelineState::Failed | PipelineState::Stopped) {
                return;
            }
            tokio::time::sleep(WATCH_EVERY).await;
        }
    }

    /// Stores the finished checkpoints of `status` newer than `after`; returns the newest id
    /// stored (or `after`).
    async fn record_checkpoints(&self, id: i64, status: &PipelineStatus, after: u64) -> u64 {
        let finished: Vec<(u64, String)> = status
            .checkpoints
            .iter()
            .filter(|c| c.status != weir_engine::CheckpointStatus::InProgress && c.id > after)
            .filter_map(|c| serde_json::to_string(c).ok().map(|json| (c.id, json)))
            .collect();
        let newest = finished.last().map_or(after, |(last, _)| *last);
        if !finished.is_empty() && self.store.put_checkpoints(id, finished).await.is_err() {
            return after;
        }
        newest
    }

    pub async fn list(&self) -> ApiResult<Vec<PipelineRecord>> {
        self.store.pipelines().await
    }

    pub async fn get(&self, id: i64) -> ApiResult<PipelineView> {
        let record = self.store.pipeline(id).await?.ok_or_else(|| ApiError::not_found(format!("no pipeline {id}")))?;
        let errors =
            self.store.errors(id).await?.into_iter().map(|(at_ms, message)| ErrorView { at_ms, message }).collect();
        let transitions = self.store.transitions(id).await?;
        let running = self.lock();
        let live = running.get(&id);
        let status = live.and_then(Running::status);
        let operators = live.filter(|r| r.handle.is_some()).map(|r| r.rates.views()).unwrap_or_default();
        Ok(PipelineView {
            uptime_ms: live.filter(|r| r.handle.is_some()).map(|r| r.started.elapsed().as_millis() as u64),
            graph: live.map(|r| r.graph.lines().map(str::to_string).collect()).unwrap_or_default(),
            dataflow: live.map(|r| r.dataflow.clone()).unwrap_or_default(),
            restarts: status.as_ref().map(|s| s.restarts),
            restored_from: status.as_ref().and_then(|s| s.restored_from),
            placement: status.as_ref().and_then(|s| s.placement.clone()),
            operators,
            errors,
            transitions,
            record,
        })
    }

    /// Pipeline `id`'s checkpoints, oldest first: those stored (earlier runs of the service
    /// included) and the live ones.
    pub async fn checkpoints(&self, id: i64) -> ApiResult<Vec<serde_json::Value>> {
        self.store.pipeline(id).await?.ok_or_else(|| ApiError::not_found(format!("no pipeline {id}")))?;
        let mut all: BTreeMap<u64, serde_json::Value> = BTreeMap::new();
        for (checkpoint, report) in self.store.checkpoints(id).await? {
            if let Ok(value) = serde_json::from_str(&report) {
                all.insert(checkpoint, value);
            }
        }
        let live = {
            let running = self.lock();
            running.get(&id).and_then(Running::status)
        };
        for report in live.map(|s| s.checkpoints).unwrap_or_default() {
            if let Ok(value) = serde_json::to_value(&report) {
                all.insert(report.id, value);
            }
        }
        Ok(all.into_values().collect())
    }

    /// Stops pipeline `id`: with a savepoint, or `now` (as a crash would, nothing committed).
    pub async fn stop(self: &Arc<Self>, id: i64, now: bool) -> ApiResult<()> {
        let handle = {
            let mut running = self.lock();
            running.get_mut(&id).and_then(|r| {
                r.last = r.handle.as_ref().map(PipelineHandle::status);
                r.handle.take()
            })
        };
        let Some(handle) = handle else {
            self.store.pipeline(id).await?.ok_or_else(|| ApiError::not_found(format!("no pipeline {id}")))?;
            return Err(ApiError::conflict(format!("pipeline {id} is not running")));
        };
        // The watcher stops with the handle gone: the history so far is stored here.
        self.record_checkpoints(id, &handle.status(), 0).await;
        if now {
            handle.kill().await;
            self.store.set_status(id, "stopped", Some("stopped at once, without a savepoint".into())).await?;
            return Ok(());
        }
        self.store.set_status(id, "stopping", None).await?;
        let manager = self.clone();
        tokio::spawn(async move {
            handle.request_stop();
            while !handle.is_finished() {
                tokio::time::sleep(WATCH_EVERY).await;
            }
            // The savepoint's report too, and what the client sees of the stopped pipeline.
            let last = handle.status();
            manager.record_checkpoints(id, &last, 0).await;
            if let Some(running) = manager.lock().get_mut(&id) {
                running.last = Some(last);
            }
            let (status, detail) = match handle.wait().await {
                Ok(()) => ("stopped", Some("stopped with a savepoint".to_string())),
                Err(error) => ("failed", Some(format!("stopping: {error}"))),
            };
            let _ = manager.store.set_status(id, status, detail).await;
        });
        Ok(())
    }

    /// Starts pipeline `id` again from its latest completed checkpoint (or `checkpoint`, one
    /// still kept), optionally at another parallelism.
    pub async fn resume(
        self: Arc<Self>,
        id: i64,
        parallelism: Option<usize>,
        checkpoint: Option<u64>,
    ) -> ApiResult<()> {
        let record = self.store.pipeline(id).await?.ok_or_else(|| ApiError::not_found(format!("no pipeline {id}")))?;
        if self.lock().get(&id).is_some_and(|r| r.handle.is_some()) {
            return Err(ApiError::conflict(format!("pipeline {id} is running already")));
        }
        // Planned as it was: the catalog as persisted, the options it was created with, its name.
        let mut session = new_session(&self.config)?;
        for sql in self.store.catalog().await? {
            session.execute(&sql).await.map_err(ApiError::from)?;
        }
        session.options = PipelineOptions::from_json(&record.options)
            .map_err(|e| ApiError::internal(format!("pipeline {id}'s stored options: {e}")))?;
        let outputs = session.execute_named(&record.sql, &record.name).await.map_err(ApiError::from)?;
        let Some(Output::Pipeline(mut planned)) = outputs.into_iter().next_back() else {
            return Err(ApiError::internal(format!("pipeline {id}'s SQL no longer plans a pipeline")));
        };
        if let Some(wanted) = checkpoint {
            let store = self.checkpoint_store(id)?;
            let kept = store.completed_checkpoints().await.map_err(|e| ApiError::internal(e.to_string()))?;
            if !kept.contains(&wanted) {
                return Err(ApiError::not_found(format!(
                    "pipeline {id} keeps no checkpoint {wanted} (kept: {kept:?})"
                )));
            }
            planned.config.restore_from = Some(wanted);
        }
        if let Some(parallelism) = parallelism {
            planned.graph = planned.graph.with_parallelism(parallelism);
            self.store.set_parallelism(id, parallelism as i64).await?;
        }
        self.check_prefixes(id, &planned.transactional_prefixes)?;
        // A preview keeps the buffer the client is reading, if it is still here.
        if let Some(kept) = self.lock().get(&id).and_then(|r| r.preview.clone())
            && let Some(preview) = planned.preview.as_mut()
        {
            preview.buffer = kept.buffer;
        }
        self.start(id, *planned, parallelism).await
    }

    pub async fn delete(self: &Arc<Self>, id: i64) -> ApiResult<()> {
        self.store.pipeline(id).await?.ok_or_else(|| ApiError::not_found(format!("no pipeline {id}")))?;
        let handle = self.lock().remove(&id).and_then(|r| r.handle);
        if let Some(handle) = handle {
            handle.kill().await;
        }
        self.store.delete_pipeline(id).await?;
        let relative = id.to_string();
        self.checkpoints
            .clear(&relative)
            .await
            .map_err(|e| ApiError::internal(format!("{}: {e}", self.checkpoints.describe(&relative))))
    }

    /// The preview of pipeline `id` (a bare SELECT).
    pub fn preview(&self, id: i64) -> ApiResult<Preview> {
        self.lock().get(&id).and_then(|r| r.preview.clone()).ok_or_else(|| {
            ApiError::not_found(format!(
                "pipeline {id} has no preview output here (only a running or stopped SELECT has)"
            ))
        })
    }

    /// Whether pipeline `id` has ended (finished, failed, stopped or dropped), and how: after
    /// that its preview gets no more rows.
    pub fn ended(&self, id: i64) -> Option<&'static str> {
        let running = self.lock();
        let Some(live) = running.get(&id) else { return Some("dropped") };
        let Some(handle) = live.handle.as_ref() else { return Some("stopped") };
        // Asked every 200 ms per reader: the full status (with its checkpoint history) only
        // once the run is over.
        handle.is_finished().then(|| status_name(handle.status().state))
    }

    /// What `sql` gives if it is one SELECT, planned but not run (see
    /// `Session::describe_select`).
    pub async fn describe_select(&self, sql: &str) -> ApiResult<Option<weir_sql::SelectShape>> {
        Ok(self.session.lock().await.describe_select(sql).await?)
    }

    /// Tables and views with their columns, as a Postgres client's catalog shows them.
    pub async fn relations(&self) -> ApiResult<Vec<crate::pg_catalog::Relation>> {
        let mut session = self.session.lock().await;
        let relations = session.relations().await?;
        Ok(relations
            .into_iter()
            .map(|(name, schema, view)| crate::pg_catalog::Relation { name, schema, view })
            .collect())
    }

    /// Tables and views with their schemas and options (secrets redacted).
    pub async fn tables(&self) -> Vec<TableView> {
        let session = self.session.lock().await;
        let tables = session.catalog.tables.values().map(|t| TableView {
            name: t.name.clone(),
            kind: "table",
            connector: Some(t.connector.connector.clone()),
            columns: t.schema.fields().iter().map(|f| [f.name().clone(), f.data_type().to_string()]).collect(),
            options: t.connector.values.iter().map(|(k, v)| (k.clone(), redact(k, v))).collect(),
            query: None,
        });
        let views = session.catalog.views.values().map(|v| TableView {
            name: v.name.clone(),
            kind: "view",
            connector: None,
            columns: Vec::new(),
            options: BTreeMap::new(),
            query: Some(v.query.clone()),
        });
        tables.chain(views).collect()
    }

    /// Every live pipeline's status and counters, for the metrics page.
    pub fn live(&self) -> Vec<LivePipeline> {
        self.lock()
            .iter()
            .filter_map(|(id, r)| {
                r.handle.as_ref().map(|h| {
                    let metrics = h.metrics();
                    LivePipeline {
                        id: *id,
                        status: h.status(),
                        operators: metrics.operators(),
                        channels: metrics.channels(),
                    }
                })
            })
            .collect()
    }
}

/// A session of the service: its filesystem tables confined to the data directory's `files`
/// (where relative paths go) and the directories the configuration lists.
fn new_session(config: &ServerConfig) -> ApiResult<Session> {
    let files = config.filesystem_dirs.as_deref().unwrap_or_default();
    let roots = FileRoots::new(&config.files_dir(), files)
        .map_err(|e| ApiError::internal(format!("the filesystem directories: {e}")))?;
    let mut session = Session::new();
    session.files = Some(roots);
    Ok(session)
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct TableView {
    pub name: String,
    pub kind: &'static str,
    pub connector: Option<String>,
    /// (name, type), in the table's order.
    pub columns: Vec<[String; 2]>,
    pub options: BTreeMap<String, String>,
    pub query: Option<String>,
}

/// Option values that look like secrets are not shown.
fn redact(key: &str, value: &str) -> String {
    let key = key.to_ascii_lowercase();
    if ["password", "secret", "token", "sasl", "key"].iter().any(|s| key.contains(s)) && key != "key.fields" {
        "<redacted>".into()
    } else {
        value.to_string()
    }
}
