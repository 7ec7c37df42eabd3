//! Checkpoint configuration and the record kept of every checkpoint.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How a pipeline's checkpoints treat barriers, and so the guarantee they give
/// (ARCHITECTURE.md, "Barriers"). Each barrier carries its checkpoint's mode, so a task
/// handles every checkpoint as it was triggered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CheckpointMode {
    /// Exactly-once, aligned: an input that delivered the barrier is blocked until all have.
    Aligned,
    /// Aligned, switching to unaligned when alignment takes longer than the timeout.
    AlignedTimeout(Duration),
    /// Exactly-once, unaligned: the barrier overtakes queued data, which joins the snapshot.
    Unaligned,
    /// Never block; snapshot when the last input's barrier arrives: no record is lost, but a
    /// restore may replay some.
    AtLeastOnce,
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
    /// Keyed tables write what changed since the previous checkpoint on top of a chain of
    /// files, not all their rows each time (operators that keep a record of changes).
    pub incremental: bool,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        Self {
            interval: Some(Duration::from_secs(10)),
            mode: CheckpointMode::Aligned,
            max_concurrent: 1,
            timeout: Duration::from_secs(600),
            retained: 3,
            incremental: true,
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
    /// Bytes of state the checkpoint holds, with files it shares with older ones.
    pub state_bytes: u64,
    /// Bytes of state the checkpoint wrote (less than `state_bytes` when incremental).
    pub written_bytes: u64,
    /// Bytes of in-flight data (unaligned) in the snapshot.
    pub inflight_bytes: u64,
    pub inflight_rows: u64,
    pub status: CheckpointStatus,
    /// Per task: operator chain head, subtask, state bytes, in-flight bytes, alignment ms.
    pub tasks: Vec<TaskCheckpointReport>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskCheckpointReport {
    pub operators: Vec<String>,
    pub subtask: usize,
    pub state_bytes: u64,
    pub written_bytes: u64,
    pub inflight_bytes: u64,
    pub alignment_ms: u64,
    pub unaligned: bool,
}
