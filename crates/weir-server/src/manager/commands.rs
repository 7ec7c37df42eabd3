//! The pipeline statements carried out (`SHOW PIPELINES`, `SHOW CHECKPOINTS FOR PIPELINE n`,
//! `STOP PIPELINE n [NOW]`, `RESUME PIPELINE n [FROM CHECKPOINT k]`, `DROP PIPELINE n`, `SHOW
//! WORKERS`): the same lifecycle the REST routes drive, answered as rows and messages any
//! client prints.

use std::sync::Arc;

use serde_json::Value;
use weir_engine::PipelineState;
use weir_sql::PipelineCommand;

use super::{Manager, StatementResult};
use crate::dataflow::NodeRole;
use crate::error::ApiResult;
use crate::rates::OperatorView;
use crate::store::{PipelineRecord, now_ms};

/// A pipeline as its list shows it: the stored record and how it is doing now.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct PipelineSummary {
    #[serde(flatten)]
    pub record: PipelineRecord,
    /// Set while it runs (or recovers).
    pub uptime_ms: Option<u64>,
    /// Rows its sources read and its sinks received per second, over the last seconds.
    pub records_in_per_second: Option<f64>,
    pub records_out_per_second: Option<f64>,
    pub last_checkpoint: Option<u64>,
    /// When that checkpoint completed (ms since the epoch).
    pub last_checkpoint_at_ms: Option<i64>,
    pub restarts: Option<u32>,
    pub last_error: Option<String>,
}

/// The columns of `SHOW PIPELINES`.
const PIPELINE_COLUMNS: [&str; 10] = [
    "id",
    "name",
    "status",
    "uptime",
    "rows/s in",
    "rows/s out",
    "last checkpoint",
    "checkpoint age",
    "restarts",
    "last error",
];

/// The columns of `SHOW WORKERS`.
const WORKER_COLUMNS: [&str; 5] = ["id", "status", "slots", "address", "last heartbeat"];

/// The columns of `SHOW CHECKPOINTS FOR PIPELINE n`.
const CHECKPOINT_COLUMNS: [&str; 9] =
    ["id", "kind", "status", "started", "duration", "state", "written", "alignment", "in-flight"];

impl Manager {
    /// Carries out one pipeline statement.
    pub(super) async fn command(self: &Arc<Self>, command: PipelineCommand) -> ApiResult<StatementResult> {
        let done = |message: String| Ok(StatementResult::Done { message });
        match command {
            PipelineCommand::Show => self.show_pipelines().await,
            PipelineCommand::ShowCheckpoints { pipeline } => self.show_checkpoints(pipeline).await,
            PipelineCommand::Stop { pipeline, now: true } => {
                self.stop(pipeline, true).await?;
                done(format!("pipeline {pipeline} stopped at once, without a savepoint"))
            }
            PipelineCommand::Stop { pipeline, now: false } => {
                self.stop(pipeline, false).await?;
                done(format!("pipeline {pipeline} is stopping with a savepoint"))
            }
            PipelineCommand::Resume { pipeline, checkpoint } => {
                self.clone().resume(pipeline, None, checkpoint).await?;
                let from = match checkpoint {
                    Some(checkpoint) => format!("checkpoint {checkpoint}"),
                    None => "its latest checkpoint".into(),
                };
                done(format!("pipeline {pipeline} is running again from {from}"))
            }
            PipelineCommand::Drop { pipeline } => {
                self.delete(pipeline).await?;
                done(format!("dropped pipeline {pipeline} and its checkpoints"))
            }
            PipelineCommand::ShowWorkers => {
                let rows = self
                    .cluster
                    .workers()
                    .into_iter()
                    .map(|w| {
                        let age = format!("{:.1} s ago", w.heartbeat_age_ms as f64 / 1000.0);
                        vec![w.id, w.status, w.slots.to_string(), w.address, age]
                    })
                    .collect();
                Ok(StatementResult::Rows { columns: WORKER_COLUMNS.iter().map(|c| c.to_string()).collect(), rows })
            }
        }
    }

    async fn show_pipelines(&self) -> ApiResult<StatementResult> {
        let rows = self.summaries().await?.into_iter().map(pipeline_row).collect();
        Ok(StatementResult::Rows { columns: PIPELINE_COLUMNS.iter().map(|c| c.to_string()).collect(), rows })
    }

    /// Every pipeline with what its list shows (`GET /pipelines`, `SHOW PIPELINES`).
    pub async fn summaries(&self) -> ApiResult<Vec<PipelineSummary>> {
        let mut summaries = Vec::new();
        for record in self.list().await? {
            summaries.push(self.summary(record).await?);
        }
        Ok(summaries)
    }

    async fn summary(&self, record: PipelineRecord) -> ApiResult<PipelineSummary> {
        let id = record.id;
        let checkpoints = self.checkpoints(id).await?;
        let last = checkpoints.iter().rev().find(|c| c["status"]["status"] == "completed");
        let last_checkpoint = last.and_then(|c| {
            let done_at = c["started_at_ms"].as_i64()? + c["duration_ms"].as_i64()?;
            Some((c["id"].as_u64()?, done_at))
        });
        let last_error = self.store.errors(id).await?.pop().map(|(_, message)| message);
        let running = self.lock();
        let live = running.get(&id);
        // Uptime and rates belong to a pipeline running now, not to one that has ended.
        let running_now = live.filter(|r| {
            r.handle
                .as_ref()
                .is_some_and(|h| matches!(h.status().state, PipelineState::Running | PipelineState::Recovering))
        });
        let rates = running_now.map(|r| {
            let views = r.rates.views();
            let sum = |kind: NodeRole, rate: &dyn Fn(&OperatorView) -> f64| {
                let names = r.dataflow.names(kind);
                views.iter().filter(|v| names.contains(&v.counters.operator.as_str())).map(rate).sum::<f64>()
            };
            (sum(NodeRole::Source, &|v| v.records_out_per_second), sum(NodeRole::Sink, &|v| v.records_in_per_second))
        });
        Ok(PipelineSummary {
            uptime_ms: running_now.map(|r| r.started.elapsed().as_millis() as u64),
            records_in_per_second: rates.map(|r| r.0),
            records_out_per_second: rates.map(|r| r.1),
            last_checkpoint: last_checkpoint.map(|c| c.0),
            last_checkpoint_at_ms: last_checkpoint.map(|c| c.1),
            restarts: live.and_then(super::Running::status).map(|s| s.restarts),
            last_error,
            record,
        })
    }

    async fn show_checkpoints(&self, id: i64) -> ApiResult<StatementResult> {
        let checkpoints = self.checkpoints(id).await?;
        let restored_from = {
            let running = self.lock();
            let live = running.get(&id);
            live.and_then(super::Running::status).and_then(|s| s.restored_from)
        };
        let rows = checkpoints.iter().map(|c| checkpoint_row(c, restored_from)).collect();
        Ok(StatementResult::Rows { columns: CHECKPOINT_COLUMNS.iter().map(|c| c.to_string()).collect(), rows })
    }
}

/// One pipeline as `SHOW PIPELINES` shows it.
fn pipeline_row(summary: PipelineSummary) -> Vec<String> {
    let rate = |r: Option<f64>| r.map(|r| format!("{r:.0}")).unwrap_or_default();
    let age = summary.last_checkpoint_at_ms.map(|at| format!("{} ago", duration_text((now_ms() - at).max(0) as u64)));
    vec![
        summary.record.id.to_string(),
        summary.record.name,
        summary.record.status,
        summary.uptime_ms.map(duration_text).unwrap_or_default(),
        rate(summary.records_in_per_second),
        rate(summary.records_out_per_second),
        summary.last_checkpoint.map(|c| c.to_string()).unwrap_or_default(),
        age.unwrap_or_default(),
        summary.restarts.map(|r| r.to_string()).unwrap_or_default(),
        summary.last_error.unwrap_or_default(),
    ]
}

/// One checkpoint report (as the engine serialises it) as a row of `SHOW CHECKPOINTS`.
fn checkpoint_row(c: &Value, restored_from: Option<u64>) -> Vec<String> {
    let kind = match &c["kind"] {
        Value::String(kind) => kind.replace('_', " "),
        Value::Object(object) if object.contains_key("aligned_timeout") => {
            match object["aligned_timeout"]["timed_out"].as_bool() {
                Some(true) => "aligned, timed out into unaligned".to_string(),
                _ => "aligned (with timeout)".to_string(),
            }
        }
        other => other.to_string(),
    };
    let mut status = c["status"]["status"].as_str().unwrap_or_default().replace('_', " ");
    if let Some(reason) = c["status"]["reason"].as_str() {
        status = format!("{status}: {reason}");
    }
    let id = c["id"].as_u64().unwrap_or_default();
    let id = match restored_from == Some(id) {
        true => format!("{id} (restored from)"),
        false => id.to_string(),
    };
    let started = c["started_at_ms"].as_i64().map(clock_text).unwrap_or_default();
    let ms = |name: &str| format!("{} ms", c[name].as_u64().unwrap_or_default());
    let bytes = |name: &str| bytes_text(c[name].as_u64().unwrap_or_default());
    vec![
        id,
        kind,
        status,
        started,
        ms("duration_ms"),
        bytes("state_bytes"),
        bytes("written_bytes"),
        ms("alignment_ms"),
        bytes("inflight_bytes"),
    ]
}

/// "2h 03m", "4m 05s", "12.3 s", "450 ms".
fn duration_text(ms: u64) -> String {
    let seconds = ms / 1000;
    match seconds {
        0 => format!("{ms} ms"),
        1..60 => format!("{:.1} s", ms as f64 / 1000.0),
        60..3600 => format!("{}m {:02}s", seconds / 60, seconds % 60),
        _ => format!("{}h {:02}m", seconds / 3600, seconds % 3600 / 60),
    }
}

/// "820 B", "1.5 kB", "76.0 MB".
fn bytes_text(bytes: u64) -> String {
    match bytes {
        0..1000 => format!("{bytes} B"),
        1000..1_000_000 => format!("{:.1} kB", bytes as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} MB", bytes as f64 / 1e6),
        _ => format!("{:.1} GB", bytes as f64 / 1e9),
    }
}

/// The UTC time of day of a Unix time in milliseconds, "14:03:27.120".
fn clock_text(ms: i64) -> String {
    let day_ms = ms.rem_euclid(86_400_000);
    let (h, m, s, milli) = (day_ms / 3_600_000, day_ms / 60_000 % 60, day_ms / 1000 % 60, day_ms % 1000);
    format!("{h:02}:{m:02}:{s:02}.{milli:03} UTC")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_checkpoint_report_reads_as_a_row() {
        let report = json!({"id": 4, "kind": {"aligned_timeout": {"timed_out": true}}, "started_at_ms": 1_700_000_000_120i64,
            "duration_ms": 130, "alignment_ms": 7, "state_bytes": 1_500, "written_bytes": 300, "inflight_bytes": 0,
            "status": {"status": "aborted", "reason": "timed out"}});
        assert_eq!(
            checkpoint_row(&report, Some(4)),
            vec![
                "4 (restored from)",
                "aligned, timed out into unaligned",
                "aborted: timed out",
                "22:13:20.120 UTC",
                "130 ms",
                "1.5 kB",
                "300 B",
                "7 ms",
                "0 B"
            ]
        );
        let plain = json!({"id": 5, "kind": "at_least_once", "status": {"status": "completed"}});
        assert_eq!(checkpoint_row(&plain, Some(4))[..3], ["5", "at least once", "completed"]);
    }

    #[test]
    fn durations_read_at_their_scale() {
        assert_eq!(duration_text(450), "450 ms");
        assert_eq!(duration_text(12_340), "12.3 s");
        assert_eq!(duration_text(245_000), "4m 05s");
        assert_eq!(duration_text(7_380_000), "2h 03m");
    }
}
