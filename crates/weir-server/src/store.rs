//! What the service remembers across restarts, in one SQLite database in the data directory:
//! the catalog (the statements that built it), the pipelines with their SQL, options and
//! status, every status transition with its time, their errors, and the reports of their
//! finished checkpoints. The checkpoints' state files live in each pipeline's directory.
//!
//! rusqlite is synchronous: every call runs on a blocking thread.

use std::path::Path;
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use crate::error::{ApiError, ApiResult};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS catalog (seq INTEGER PRIMARY KEY AUTOINCREMENT, sql TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS pipelines (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    sql TEXT NOT NULL,
    options TEXT NOT NULL,
    parallelism INTEGER NOT NULL,
    status TEXT NOT NULL,
    preview INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS transitions (
    pipeline_id INTEGER NOT NULL,
    status TEXT NOT NULL,
    at_ms INTEGER NOT NULL,
    detail TEXT
);
CREATE TABLE IF NOT EXISTS errors (pipeline_id INTEGER NOT NULL, at_ms INTEGER NOT NULL, message TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS checkpoints (
    pipeline_id INTEGER NOT NULL,
    id INTEGER NOT NULL,
    report TEXT NOT NULL,
    PRIMARY KEY (pipeline_id, id)
);
CREATE TABLE IF NOT EXISTS service (key TEXT PRIMARY KEY, value TEXT NOT NULL);
";

/// A pipeline as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct PipelineRecord {
    pub id: i64,
    /// Names its Kafka transactional ids.
    pub name: String,
    pub sql: String,
    /// The session's `SET` options when it was created: stored as JSON
    /// ([`weir_sql::PipelineOptions`]), shown as the `SET` statements that give them.
    #[serde(serialize_with = "options_as_sql")]
    pub options: String,
    pub parallelism: i64,
    pub status: String,
    /// A bare SELECT whose rows are kept for the client.
    pub preview: bool,
    pub created_at_ms: i64,
}

/// Stored options shown as `SET` statements (as stored when they do not read as options).
fn options_as_sql<S: serde::Serializer>(options: &str, serializer: S) -> Result<S::Ok, S::Error> {
    match weir_sql::PipelineOptions::from_json(options) {
        Ok(options) => serializer.serialize_str(&options.to_sql()),
        Err(_) => serializer.serialize_str(options),
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Transition {
    pub status: String,
    pub at_ms: i64,
    pub detail: Option<String>,
}

#[derive(Clone)]
pub struct Store {
    db: Arc<Mutex<Connection>>,
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::internal(format!("database: {e}"))
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

impl Store {
    pub fn open(path: &Path) -> ApiResult<Self> {
        let db = Connection::open(path).map_err(internal)?;
        db.execute_batch(SCHEMA).map_err(internal)?;
        Ok(Self { db: Arc::new(Mutex::new(db)) })
    }

    async fn with<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> ApiResult<T> {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || {
            let db = db.lock().unwrap_or_else(|p| p.into_inner());
            work(&db)
        })
        .await
        .map_err(internal)?
        .map_err(internal)
    }

    /// This service's identity, made at its first start and kept by every later one: what it
    /// claims its checkpoint location with.
    pub async fn identity(&self) -> ApiResult<String> {
        let made = format!("weir-service-{}", uuid::Uuid::new_v4().simple());
        self.with(move |db| {
            db.execute("INSERT OR IGNORE INTO service (key, value) VALUES ('identity', ?1)", params![made])?;
            db.query_row("SELECT value FROM service WHERE key = 'identity'", [], |row| row.get(0))
        })
        .await
    }

    pub async fn append_catalog(&self, statements: Vec<String>) -> ApiResult<()> {
        self.with(move |db| {
            for sql in &statements {
                db.execute("INSERT INTO catalog (sql) VALUES (?1)", params![sql])?;
            }
            Ok(())
        })
        .await
    }

    pub async fn catalog(&self) -> ApiResult<Vec<String>> {
        self.with(|db| {
            let mut statement = db.prepare("SELECT sql FROM catalog ORDER BY seq")?;
            let rows = statement.query_map([], |row| row.get(0))?;
            rows.collect()
        })
        .await
    }

    pub async fn insert_pipeline(&self, record: PipelineRecord) -> ApiResult<()> {
        self.with(move |db| {
            db.execute(
                "INSERT INTO pipelines (id, name, sql, options, parallelism, status, preview, created_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    record.id,
                    record.name,
                    record.sql,
                    record.options,
                    record.parallelism,
                    record.status,
                    record.preview,
                    record.created_at_ms
                ],
            )?;
            db.execute(
                "INSERT INTO transitions (pipeline_id, status, at_ms) VALUES (?1, ?2, ?3)",
                params![record.id, record.status, record.created_at_ms],
            )?;
            Ok(())
        })
        .await
    }

    /// The next pipeline id (ids are never reused, even after a delete).
    pub async fn next_pipeline_id(&self) -> ApiResult<i64> {
        self.with(|db| {
            let max: Option<i64> = db.query_row("SELECT max(pipeline_id) FROM transitions", [], |row| row.get(0))?;
            Ok(max.unwrap_or(0) + 1)
        })
        .await
    }

    /// Records a status change (a no-op if the status is already `status`).
    pub async fn set_status(&self, id: i64, status: &str, detail: Option<String>) -> ApiResult<()> {
        self.change_status(id, status, detail, false).await
    }

    /// The engine's state as the watcher sees it, except that a pipeline being stopped (or
    /// stopped) is not made `running` again by a state read before the stop. Checked in the
    /// same call as the update: a check before it raced the stop request and stored
    /// stopping -> running.
    pub async fn set_engine_status(&self, id: i64, status: &str, detail: Option<String>) -> ApiResult<()> {
        self.change_status(id, status, detail, true).await
    }

    async fn change_status(&self, id: i64, status: &str, detail: Option<String>, keep_stopping: bool) -> ApiResult<()> {
        let status = status.to_string();
        self.with(move |db| {
            let current: Option<String> =
                db.query_row("SELECT status FROM pipelines WHERE id = ?1", params![id], |row| row.get(0)).optional()?;
            if current.as_deref() == Some(status.as_str())
                || (keep_stopping && matches!(current.as_deref(), Some("stopping" | "stopped")) && status == "running")
            {
                return Ok(());
            }
            db.execute("UPDATE pipelines SET status = ?2 WHERE id = ?1", params![id, status])?;
            db.execute(
                "INSERT INTO transitions (pipeline_id, status, at_ms, detail) VALUES (?1, ?2, ?3, ?4)",
                params![id, status, now_ms(), detail],
            )?;
            Ok(())
        })
        .await
    }

    pub async fn set_parallelism(&self, id: i64, parallelism: i64) -> ApiResult<()> {
        self.with(move |db| {
            db.execute("UPDATE pipelines SET parallelism = ?2 WHERE id = ?1", params![id, parallelism]).map(|_| ())
        })
        .await
    }

    pub async fn add_error(&self, id: i64, at_ms: i64, message: String) -> ApiResult<()> {
        self.with(move |db| {
            db.execute(
                "INSERT INTO errors (pipeline_id, at_ms, message) VALUES (?1, ?2, ?3)",
                params![id, at_ms, message],
            )
            .map(|_| ())
        })
        .await
    }

    pub async fn errors(&self, id: i64) -> ApiResult<Vec<(i64, String)>> {
        self.with(move |db| {
            let mut statement =
                db.prepare("SELECT at_ms, message FROM errors WHERE pipeline_id = ?1 ORDER BY at_ms DESC LIMIT 20")?;
            let rows = statement.query_map(params![id], |row| Ok((row.get(0)?, row.get(1)?)))?;
            rows.collect()
        })
        .await
    }

    /// Stores (or replaces) finished checkpoints' reports, as JSON.
    pub async fn put_checkpoints(&self, id: i64, reports: Vec<(u64, String)>) -> ApiResult<()> {
        self.with(move |db| {
            for (checkpoint, report) in &reports {
                db.execute(
                    "INSERT OR REPLACE INTO checkpoints (pipeline_id, id, report) VALUES (?1, ?2, ?3)",
                    params![id, *checkpoint as i64, report],
                )?;
            }
            Ok(())
        })
        .await
    }

    /// Stored checkpoint reports of pipeline `id`, oldest first.
    pub async fn checkpoints(&self, id: i64) -> ApiResult<Vec<(u64, String)>> {
        self.with(move |db| {
            let mut statement = db.prepare("SELECT id, report FROM checkpoints WHERE pipeline_id = ?1 ORDER BY id")?;
            let rows = statement.query_map(params![id], |row| Ok((row.get::<_, i64>(0)? as u64, row.get(1)?)))?;
            rows.collect()
        })
        .await
    }

    pub async fn pipelines(&self) -> ApiResult<Vec<PipelineRecord>> {
        self.with(|db| {
            let mut statement = db.prepare(
                "SELECT id, name, sql, options, parallelism, status, preview, created_at_ms FROM pipelines ORDER BY id",
            )?;
            let rows = statement.query_map([], |row| {
                Ok(PipelineRecord {
                    id: row.get(0)?,
                    name: row.get(1)?,
                    sql: row.get(2)?,
                    options: row.get(3)?,
                    parallelism: row.get(4)?,
                    status: row.get(5)?,
                    preview: row.get(6)?,
                    created_at_ms: row.get(7)?,
                })
            })?;
            rows.collect()
        })
        .await
    }

    pub async fn pipeline(&self, id: i64) -> ApiResult<Option<PipelineRecord>> {
        Ok(self.pipelines().await?.into_iter().find(|p| p.id == id))
    }

    pub async fn transitions(&self, id: i64) -> ApiResult<Vec<Transition>> {
        self.with(move |db| {
            let mut statement =
                db.prepare("SELECT status, at_ms, detail FROM transitions WHERE pipeline_id = ?1 ORDER BY rowid")?;
            let rows = statement.query_map(params![id], |row| {
                Ok(Transition { status: row.get(0)?, at_ms: row.get(1)?, detail: row.get(2)? })
            })?;
            rows.collect()
        })
        .await
    }

    pub async fn delete_pipeline(&self, id: i64) -> ApiResult<()> {
        self.with(move |db| {
            db.execute("DELETE FROM pipelines WHERE id = ?1", params![id])?;
            db.execute("DELETE FROM checkpoints WHERE pipeline_id = ?1", params![id])?;
            db.execute("DELETE FROM errors WHERE pipeline_id = ?1", params![id])?;
            db.execute(
                "INSERT INTO transitions (pipeline_id, status, at_ms) VALUES (?1, 'deleted', ?2)",
                params![id, now_ms()],
            )?;
            Ok(())
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The watcher's view of the engine never takes a stopping or stopped pipeline back to
    /// running (a state it read before the stop request came would have).
    #[tokio::test]
    async fn an_engine_state_read_before_a_stop_does_not_undo_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("weir.sqlite")).unwrap();
        let record = PipelineRecord {
            id: 1,
            name: "p".into(),
            sql: "SELECT 1".into(),
            options: String::new(),
            parallelism: 1,
            status: "running".into(),
            preview: true,
            created_at_ms: 0,
        };
        store.insert_pipeline(record).await.unwrap();
        store.set_status(1, "stopping", None).await.unwrap();
        store.set_engine_status(1, "running", None).await.unwrap();
        store.set_engine_status(1, "stopped", None).await.unwrap();
        store.set_engine_status(1, "running", None).await.unwrap();
        let statuses: Vec<String> = store.transitions(1).await.unwrap().into_iter().map(|t| t.status).collect();
        assert_eq!(statuses, ["running", "stopping", "stopped"]);
        store.set_status(1, "running", None).await.unwrap();
        assert_eq!(store.pipeline(1).await.unwrap().unwrap().status, "running", "a resume may");
    }
}
