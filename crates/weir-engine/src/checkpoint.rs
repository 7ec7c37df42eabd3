//! Checkpoint configuration and the record kept of every checkpoint.

use std::time::Duration;

use serde::Serialize;

use crate::message::BarrierKind;

/// The delivery guarantee a pipeline's checkpoints give (ARCHITECTURE.md, "Barriers").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointMode {
    /// Aligned by default; `unaligned` lets barriers overtake queued data; `aligned_timeout`
    /// starts aligned and switches a checkpoint to unaligned after that long.
    ExactlyOnce {
        unaligned: bool,
        aligned_timeout: Option<Duration>,
    },
    AtLeastOnce,
}

impl CheckpointMode {
    pub fn aligned() -> Self {
        CheckpointMode::ExactlyOnce { unaligned: false, aligned_timeout: None }
    }

    pub fn unaligned() -> Self {
        CheckpointMode::ExactlyOnce { unaligned: true, aligned_timeout: None }
    }

    pub fn aligned_timeout(timeout: Duration) -> Self {
        CheckpointMode::ExactlyOnce { unaligned: false, aligned_timeout: Some(timeout) }
    }

    pub fn barrier_kind(&self) -> BarrierKind {
        match *self {
            CheckpointMode::AtLeastOnce => BarrierKind::AtLeastOnce,
            CheckpointMode::ExactlyOnce { unaligned: true, .. } => BarrierKind::Unaligned,
            CheckpointMode::ExactlyOnce { aligned_timeout: Some(timeout), .. } => BarrierKind::AlignedTimeout(timeout),
            CheckpointMode::ExactlyOnce { .. } => BarrierKind::Aligned,
        }
    }
}

/// When and how a pipeline checkpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointConfig {
    /// `None`: no checkpoints (and no recovery beyond a restart from scratch).
    pub interval: Option<Duration>,
    pub mode: CheckpointMode,
    /// Checkpoints in flight at once.
    pub max_concurrent: usize,
    /// A checkpoint not complete after this long is aborted.
    pub timeout: Duration,
    /// Completed checkpoints kept; older ones' files are deleted.
    pub retained: usize,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        Self {
            interval: Some(Duration::from_secs(10)),
            mode: CheckpointMode::aligned(),
            max_concurrent: 1,
            timeout: Duration::from_secs(600),
            retained: 3,
        }
    }
}

/// How a checkpoint's barriers were handled, as reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointKind {
    Aligned,
    /// Aligned with a timeout; `timed_out` if some task switched to unaligned.
    AlignedTimeout {
        timed_out: bool,
    },
    Unaligned,
    AtLeastOnce,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "status", content = "reason")]
pub enum CheckpointStatus {
    InProgress,
    Completed,
    Aborted(String),
}

/// One checkpoint's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckpointReport {
    pub id: u64,
    pub kind: CheckpointKind,
    pub started_at_ms: u64,
    /// From trigger to manifest (or abort).
    pub duration_ms: u64,
    /// The longest any task spent between its first and last barrier.
    pub alignment_ms: u64,
    pub state_bytes: u64,
    /// Bytes of in-flight data (unaligned) in the snapshot.
    pub inflight_bytes: u64,
    pub inflight_rows: u64,
    pub status: CheckpointStatus,
    /// Per task: operator chain head, subtask, state bytes, in-flight bytes, alignment ms.
    pub tasks: Vec<TaskCheckpointReport>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TaskCheckpointReport {
    pub operators: Vec<String>,
    pub subtask: usize,
    pub state_bytes: u64,
    pub inflight_bytes: u64,
    pub alignment_ms: u64,
    pub unaligned: bool,
}
