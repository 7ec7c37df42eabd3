//! Injected failures at exact points, for tests: a task failing at its k-th batch, or the
//! pipeline failing at a named step of the checkpoint protocol. Each rule fires once, so the
//! recovery that follows runs clean. Rules belong to one pipeline, so tests in one process do
//! not disturb each other.

use std::sync::Mutex;

use crate::error::{Error, Result};

/// The named dangerous steps of a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// A task wrote its snapshot files but has not acknowledged.
    AfterSnapshotBeforeAck,
    /// The manifest is committed; no task has heard "complete".
    AfterManifestBeforeNotify,
    /// Half the tasks heard "complete", the others not.
    MidNotify,
    /// A task's snapshot write fails (the checkpoint is declined, the pipeline goes on).
    SnapshotWrite,
}

/// Where a failure fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailurePoint {
    /// When `operator`'s subtask `subtask` is handed its `nth` batch (1-based), in any attempt
    /// after the rule was armed.
    Batch { operator: String, subtask: usize, nth: u64 },
    /// At `step` of checkpoint `checkpoint` (any checkpoint if `None`); for task steps, in
    /// the task whose chain starts with `operator` (any if `None`).
    Step { step: Step, checkpoint: Option<u64>, operator: Option<String> },
}

#[derive(Debug, Default)]
pub struct FailureInjector {
    rules: Mutex<Vec<(FailurePoint, bool)>>,
    batches: Mutex<std::collections::HashMap<(String, usize), u64>>,
}

impl FailureInjector {
    pub fn new(points: impl IntoIterator<Item = FailurePoint>) -> Self {
        Self { rules: Mutex::new(points.into_iter().map(|p| (p, false)).collect()), ..Self::default() }
    }

    /// Whether every rule has fired.
    pub fn all_fired(&self) -> bool {
        self.lock_rules().iter().all(|(_, fired)| *fired)
    }

    fn lock_rules(&self) -> std::sync::MutexGuard<'_, Vec<(FailurePoint, bool)>> {
        self.rules.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn fire(&self, matches: impl Fn(&FailurePoint) -> bool, what: impl FnOnce() -> String) -> Result<()> {
        let mut rules = self.lock_rules();
        for (point, fired) in rules.iter_mut() {
            if !*fired && matches(point) {
                *fired = true;
                return Err(Error::Injected(what()));
            }
        }
        Ok(())
    }

    /// Counts a batch handed to `operator`'s subtask and fails if a rule says so.
    pub fn on_batch(&self, operator: &str, subtask: usize) -> Result<()> {
        let nth = {
            let mut batches = self.batches.lock().unwrap_or_else(|p| p.into_inner());
            let count = batches.entry((operator.to_string(), subtask)).or_default();
            *count += 1;
            *count
        };
        self.fire(
            |p| matches!(p, FailurePoint::Batch { operator: o, subtask: s, nth: n } if o == operator && *s == subtask && *n <= nth),
            || format!("{operator}[{subtask}] at batch {nth}"),
        )
    }

    /// Fails if a rule names `step` of `checkpoint` (in the task headed by `operator`).
    pub fn on_step(&self, step: Step, checkpoint: u64, operator: Option<&str>) -> Result<()> {
        self.fire(
            |p| match p {
                FailurePoint::Step { step: s, checkpoint: c, operator: o } => {
                    *s == step && c.is_none_or(|c| c == checkpoint) && o.as_deref().is_none_or(|o| Some(o) == operator)
                }
                FailurePoint::Batch { .. } => false,
            },
            || format!("{step:?} of checkpoint {checkpoint}"),
        )
    }
}
