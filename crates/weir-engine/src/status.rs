//! What a pipeline reports about itself, and the status its supervisor, its coordinator and
//! its readers share while it runs.

use std::sync::{Arc, Mutex};

use serde::Serialize;
use weir_state::now_ms;

use crate::checkpoint::{CheckpointReport, CheckpointStatus};
use crate::metrics::MetricsRegistry;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PipelineState {
    Running,
    /// An attempt failed; waiting out the back-off before restoring.
    Recovering,
    /// A bounded run ended and its final checkpoint committed.
    Finished,
    /// Stopped on request: with a savepoint (a last completed checkpoint) if checkpoints are
    /// on, to be resumed from it.
    Stopped,
    /// Restarts were exhausted.
    Failed,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErrorRecord {
    pub at_ms: u64,
    pub message: String,
}

/// What a pipeline reports about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PipelineStatus {
    pub state: PipelineState,
    pub attempts: u32,
    pub restarts: u32,
    /// The checkpoint the current attempt restored, if any.
    pub restored_from: Option<u64>,
    /// Where the current attempt's tasks run, when on workers.
    pub placement: Option<crate::remote::Placement>,
    /// Failures, oldest first (the last 100).
    pub errors: Vec<ErrorRecord>,
    /// Checkpoints, oldest first (the last 1000).
    pub checkpoints: Vec<CheckpointReport>,
}

const KEPT_ERRORS: usize = 100;
const KEPT_CHECKPOINTS: usize = 1000;

/// The status and live counters, shared by the supervisor, the coordinator and readers.
#[derive(Debug)]
pub struct SharedStatus {
    pub(crate) status: Mutex<PipelineStatus>,
    pub(crate) metrics: Mutex<Arc<MetricsRegistry>>,
    /// Set when a stop with a savepoint is asked for; the coordinator watches it.
    pub(crate) stop: tokio::sync::watch::Sender<bool>,
}

impl SharedStatus {
    pub(crate) fn update(&self, f: impl FnOnce(&mut PipelineStatus)) {
        f(&mut self.status.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// Records a checkpoint's report, replacing an earlier one of the same id.
    pub(crate) fn checkpoint(&self, report: CheckpointReport) {
        self.update(|status| {
            match status.checkpoints.iter_mut().rev().find(|c| c.id == report.id) {
                Some(existing) => *existing = report,
                None => status.checkpoints.push(report),
            }
            let excess = status.checkpoints.len().saturating_sub(KEPT_CHECKPOINTS);
            status.checkpoints.drain(..excess);
        });
    }

    /// Records an attempt's failure, and the state it leaves the pipeline in.
    pub(crate) fn failed(&self, error: &crate::Error, state: PipelineState) {
        self.update(|s| {
            s.errors.push(ErrorRecord { at_ms: now_ms(), message: error.to_string() });
            let excess = s.errors.len().saturating_sub(KEPT_ERRORS);
            s.errors.drain(..excess);
            s.state = state;
        });
    }

    pub(crate) fn stop_requested(&self) -> tokio::sync::watch::Receiver<bool> {
        self.stop.subscribe()
    }

    pub(crate) fn completed_checkpoints(&self) -> usize {
        let status = self.status.lock().unwrap_or_else(|p| p.into_inner());
        status.checkpoints.iter().filter(|c| c.status == CheckpointStatus::Completed).count()
    }
}
