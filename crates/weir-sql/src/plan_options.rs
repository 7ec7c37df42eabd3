//! What a pipeline's session options say about how to plan it (parallelism, checkpoints, the
//! pipeline's name), in one value the planner and the connector planners read.

use std::time::Duration;

/// Options that shape operators.
#[derive(Debug, Clone, Default)]
pub struct PlanOptions {
    pub parallelism: usize,
    /// Names the pipeline's transactional ids (`<name>-<sink node>-...`): stable across
    /// restarts of the same pipeline, different between pipelines.
    pub pipeline_name: String,
    /// `None`: checkpoints are off.
    pub checkpoint_interval: Option<Duration>,
    /// Checkpoints align barriers (exactly-once), rather than at-least-once.
    pub exactly_once_checkpoints: bool,
    /// Checkpoints in flight at once: sizes the Kafka writers' pools of transactional ids.
    pub max_concurrent_checkpoints: usize,
    /// How long a checkpoint may take, and the longest wait before a restart: with the
    /// interval, how long a pre-committed transaction may have to stay open.
    pub checkpoint_timeout: Duration,
    pub max_restart_backoff: Duration,
    /// Time-to-live of the state of updating aggregates and regular joins.
    pub state_ttl: Option<Duration>,
}
