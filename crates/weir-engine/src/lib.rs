//! weir's dataflow runtime.
//!
//! A pipeline is a [`Graph`] of operators, each run as `parallelism` subtasks; forward-connected
//! operators of equal parallelism are fused into one task ([`graph::Chain`]). Tasks exchange
//! [`Message`]s over bounded [`channel`]s; the [`task`] runner handles barriers for every
//! checkpoint mode; the [`coordinator`] triggers checkpoints, commits their manifests through
//! `weir-state` and tells the tasks (and so the sinks) when a checkpoint is complete; the
//! [`pipeline`] supervisor restores the last completed checkpoint after any failure.

mod alignment;
pub mod allocator;
mod cache_hint;
mod chains;
pub mod changelog;
pub mod channel;
pub mod checkpoint;
mod coordinator;
pub mod error;
pub mod failure;
pub mod graph;
mod group_keys;
mod inflight;
mod key_bytes;
pub mod message;
pub mod metrics;
pub mod operator;
pub mod operators;
pub mod partition;
pub mod pipeline;
pub mod processing_time;
pub mod remote;
mod restore;
pub mod state_table;
mod status;
mod task;
pub use task::{Control, TaskId};
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod two_phase_commit;

pub use checkpoint::{CheckpointConfig, CheckpointKind, CheckpointMode, CheckpointReport, CheckpointStatus};
pub use error::{Error, Result};
pub use failure::{FailureInjector, FailurePoint, Step};
pub use graph::{Graph, NodeId, OperatorFactory};
pub use message::{Barrier, Message};
pub use operator::{
    Collector, Delta, Operator, RestoredState, Source, SourceEvent, StateTable, SubtaskInfo, state_column,
};
pub use partition::Partitioning;
#[cfg(feature = "testkit")]
pub use pipeline::start_with_failures;
pub use pipeline::{
    PipelineConfig, PipelineHandle, PipelineState, PipelineStatus, RestartPolicy, start, start_on_workers,
};
pub use processing_time::{ProcessingTime, ProcessingTimeStamp};
pub use restore::RestoredChain;
