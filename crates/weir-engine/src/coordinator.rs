//! The checkpoint coordinator of one pipeline attempt: triggers checkpoints at the sources,
//! collects every task's acknowledgement with its state files, commits the manifest (the
//! commit decision), then tells every task "complete"; aborts a checkpoint a task declined or
//! that timed out; ends a bounded run with a final checkpoint; and fails the attempt when a
//! task fails.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use weir_state::{Manifest, StateFile, StateStore, now_ms};

use crate::checkpoint::{
    CheckpointConfig, CheckpointKind, CheckpointMode, CheckpointReport, CheckpointStatus, TaskCheckpointReport,
};
use crate::error::{Error, Result};
use crate::failure::{FailureInjector, Step};
use crate::message::Barrier;
use crate::status::SharedStatus;
use crate::task::{Control, TaskEvent, TaskId};

/// How long tasks get to finish their recovery and close after another task failed for good
/// (a recovery request alone may retry for a minute while a coordinator moves).
const STOP_AFTER_FATAL_WITHIN: Duration = Duration::from_secs(180);

/// The coordinator's line to one task.
pub(crate) struct TaskLine {
    pub control: mpsc::UnboundedSender<Control>,
    pub is_source: bool,
}

struct InFlight {
    barrier: Barrier,
    started: Instant,
    started_at_ms: u64,
    acks: BTreeMap<TaskId, (Vec<StateFile>, TaskCheckpointReport)>,
}

pub(crate) struct Coordinator {
    pub config: CheckpointConfig,
    pub store: StateStore,
    pub tasks: Vec<TaskLine>,
    pub events: mpsc::UnboundedReceiver<TaskEvent>,
    pub join: JoinSet<Result<()>>,
    pub parallelism: BTreeMap<String, usize>,
    /// Shared with the supervisor, so no id is used twice across attempts.
    pub next_id: Arc<AtomicU64>,
    pub status: Arc<SharedStatus>,
    pub injector: Option<Arc<FailureInjector>>,
    /// The running retention pass: one at a time, the last one awaited at shutdown.
    pub retention: Option<tokio::task::JoinHandle<()>>,
    /// Set when the attempt should end at a savepoint to start again at another parallelism
    /// (slots returned): handled as a stop with a savepoint.
    pub rescale: tokio::sync::watch::Receiver<bool>,
}

/// How an attempt that did not fail ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Its input ended and the final checkpoint (if any) committed, or a stop without
    /// checkpoints.
    Finished,
    /// At the savepoint a stop or a rescale asked for.
    AtSavepoint,
}

impl Coordinator {
    /// Runs the attempt to its end: Ok when a bounded run finished, Err when anything failed.
    /// A failed attempt's tasks are aborted and awaited before it returns: a task that was in
    /// the middle of a step on another thread finishes that step first, and must not do it
    /// after the next attempt's recovery (a sink beginning a transaction that recovery had
    /// already swept would leave it open).
    pub async fn run(mut self) -> Result<Ended> {
        let ended = self.run_to_end().await;
        if ended.is_err() {
            self.join.shutdown().await;
        }
        ended
    }

    async fn run_to_end(&mut self) -> Result<Ended> {
        let mut in_flight: BTreeMap<u64, InFlight> = BTreeMap::new();
        let sources = self.tasks.iter().filter(|t| t.is_source).count();
        let (mut sources_finished, mut ended) = (0, 0);
        let mut final_id: Option<u64> = None;
        let mut final_done = false;
        // A stop (or a rescale) with a savepoint: the checkpoint taken for it, once triggered.
        let mut stop = self.status.stop_requested();
        let mut rescale = self.rescale.clone();
        let mut savepoint: Option<u64> = None;
        let mut ticker = self.config.interval.map(|every| {
            let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticker
        });
        loop {
            let checkpointing = self.config.interval.is_some();
            if ended == self.tasks.len() && (!checkpointing || final_done) {
                return self.shut_down().await.map(|()| Ended::Finished);
            }
            let stopping = *stop.borrow() || *rescale.borrow();
            if stopping && final_id.is_none() && savepoint.is_none() {
                if !checkpointing {
                    return self.shut_down().await.map(|()| Ended::Finished);
                }
                if in_flight.len() < self.config.max_concurrent {
                    let id = self.trigger(&mut in_flight, false);
                    tracing::info!(checkpoint = id, "savepoint triggered to stop the pipeline");
                    savepoint = Some(id);
                }
            }
            let can_trigger = final_id.is_none() && savepoint.is_none() && in_flight.len() < self.config.max_concurrent;
            let timeout_at = in_flight.values().map(|c| c.started + self.config.timeout).min();
            let tick = async {
                match &mut ticker {
                    Some(ticker) if can_trigger => {
                        ticker.tick().await;
                    }
                    _ => std::future::pending().await,
                }
            };
            let expiry = async {
                match timeout_at {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            let stop_asked = async {
                if stopping {
                    std::future::pending::<()>().await;
                }
                // A closed sender never changes: that branch is off, the other still counts.
                tokio::select! {
                    Ok(()) = stop.changed() => {}
                    Ok(()) = rescale.changed() => {}
                    else => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = stop_asked => {}
                _ = tick => {
                    let id = self.trigger(&mut in_flight, false);
                    tracing::debug!(checkpoint = id, "checkpoint triggered");
                }
                event = self.events.recv() => {
                    let Some(event) = event else { return Err(self.why_every_task_is_gone().await) };
                    match event {
                        TaskEvent::Ack { task, checkpoint_id, files, report } => {
                            let Some(checkpoint) = in_flight.get_mut(&checkpoint_id) else { continue };
                            checkpoint.acks.insert(task, (files, report));
                            if checkpoint.acks.len() == self.tasks.len()
                                && let Some(checkpoint) = in_flight.remove(&checkpoint_id) {
                                    let completed = self.complete(checkpoint).await?;
                                    final_done |= completed && Some(checkpoint_id) == final_id;
                                    if Some(checkpoint_id) == savepoint {
                                        if completed {
                                            // Tasks take "complete" (sinks commit) before the shutdown.
                                            return self.shut_down().await.map(|()| Ended::AtSavepoint);
                                        }
                                        savepoint = None;
                                    }
                                    if !completed && Some(checkpoint_id) == final_id {
                                        return Err(Error::Stopped(format!("the final checkpoint {checkpoint_id} could not be committed")));
                                    }
                                }
                        }
                        TaskEvent::Decline { task, checkpoint_id, reason } => {
                            if let Some(checkpoint) = in_flight.remove(&checkpoint_id) {
                                let reason = format!("task {}[{}] declined: {reason}", task.chain, task.subtask);
                                self.abort(checkpoint, reason.clone());
                                if Some(checkpoint_id) == savepoint {
                                    savepoint = None;
                                }
                                if Some(checkpoint_id) == final_id {
                                    return Err(Error::Stopped(format!("the final checkpoint {checkpoint_id} failed: {reason}")));
                                }
                            }
                        }
                        TaskEvent::SourceFinished => {
                            sources_finished += 1;
                            if sources_finished == sources {
                                if checkpointing && savepoint.is_some() {
                                    // Stopping already: the savepoint ends the run (a finished
                                    // source still takes its barrier, and another one if it
                                    // fails). A final checkpoint beside it would leave its
                                    // pre-committed transactions open at the shutdown.
                                } else if checkpointing {
                                    final_id = Some(self.trigger(&mut in_flight, true));
                                } else {
                                    self.broadcast(Control::EndOfInput, |t| t.is_source);
                                }
                            }
                        }
                        TaskEvent::Ended => ended += 1,
                        TaskEvent::Failed(error) => return Err(error),
                    }
                }
                joined = self.join.join_next(), if !self.join.is_empty() => match joined {
                    Some(Ok(Ok(()))) | None => {}
                    Some(Ok(Err(error @ Error::Fatal { .. }))) => return Err(self.stop_after_fatal(error).await),
                    Some(Ok(Err(error))) => return Err(error),
                    Some(Err(error)) => return Err(error.into()),
                },
                _ = expiry => {
                    let now = Instant::now();
                    let expired: Vec<u64> = in_flight
                        .iter()
                        .filter(|(_, c)| c.started + self.config.timeout <= now)
                        .map(|(id, _)| *id)
                        .collect();
                    for id in expired {
                        if let Some(checkpoint) = in_flight.remove(&id) {
                            self.abort(checkpoint, format!("not complete within {:?}", self.config.timeout));
                            if Some(id) == savepoint {
                                savepoint = None;
                            }
                            if Some(id) == final_id {
                                return Err(Error::Stopped(format!("the final checkpoint {id} timed out")));
                            }
                        }
                    }
                }
            }
        }
    }

    fn trigger(&mut self, in_flight: &mut BTreeMap<u64, InFlight>, is_final: bool) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        // The final barrier follows all data: a final unaligned checkpoint would leave the data
        // it overtook to transactions no checkpoint commits.
        let kind = match self.config.mode {
            CheckpointMode::Unaligned | CheckpointMode::AlignedTimeout(_) if is_final => CheckpointMode::Aligned,
            kind => kind,
        };
        let barrier = Barrier { checkpoint_id: id, kind, is_final };
        let checkpoint = InFlight { barrier, started: Instant::now(), started_at_ms: now_ms(), acks: BTreeMap::new() };
        self.status.checkpoint(report(&checkpoint, CheckpointStatus::InProgress));
        in_flight.insert(id, checkpoint);
        self.broadcast(Control::Trigger(barrier), |t| t.is_source);
        id
    }

    /// Commits the manifest and notifies every task. False if the manifest could not be
    /// written (the checkpoint is aborted instead).
    async fn complete(&mut self, checkpoint: InFlight) -> Result<bool> {
        let id = checkpoint.barrier.checkpoint_id;
        let files = checkpoint.acks.values().flat_map(|(files, _)| files.iter().cloned()).collect();
        let manifest = Manifest {
            checkpoint_id: id,
            completed_at_ms: now_ms(),
            parallelism: self.parallelism.clone(),
            files,
            finished: checkpoint.barrier.is_final,
        };
        if let Err(error) = self.store.commit_manifest(&manifest).await {
            self.abort(checkpoint, format!("the manifest could not be written: {error}"));
            return Ok(false);
        }
        self.status.checkpoint(report(&checkpoint, CheckpointStatus::Completed));
        fail::fail_point!("weir::after_manifest_before_notify", |_| crash("after_manifest_before_notify", id));
        self.step(Step::AfterManifestBeforeNotify, id)?;
        let half = self.tasks.len() / 2;
        for (index, task) in self.tasks.iter().enumerate() {
            if index == half {
                fail::fail_point!("weir::mid_notify", |_| crash("mid_notify", id));
                self.step(Step::MidNotify, id)?;
            }
            let _ = task.control.send(Control::Complete(id));
        }
        if self.retention.as_ref().is_none_or(|r| r.is_finished()) {
            let (store, retained) = (self.store.clone(), self.config.retained);
            self.retention = Some(tokio::spawn(retain(store, retained)));
        }
        Ok(true)
    }

    fn abort(&self, checkpoint: InFlight, reason: String) {
        let id = checkpoint.barrier.checkpoint_id;
        tracing::warn!(checkpoint = id, %reason, "checkpoint aborted");
        self.status.checkpoint(report(&checkpoint, CheckpointStatus::Aborted(reason)));
        self.broadcast(Control::Aborted(id), |_| true);
    }

    fn step(&self, step: Step, checkpoint: u64) -> Result<()> {
        match &self.injector {
            Some(injector) => injector.on_step(step, checkpoint, None),
            None => Ok(()),
        }
    }

    fn broadcast(&self, control: Control, to: impl Fn(&TaskLine) -> bool) {
        for task in self.tasks.iter().filter(|t| to(t)) {
            let _ = task.control.send(control.clone());
        }
    }

    /// A task failed for good: no restart will come to finish what the other tasks were doing.
    /// They are told to shut down and given time to get there: one still restoring finishes its
    /// recovery first (its sinks commit what the checkpoint promised), and closing aborts the
    /// transactions they had begun. Then `fatal` is the pipeline's error.
    async fn stop_after_fatal(&mut self, fatal: Error) -> Error {
        tracing::error!(error = %fatal, "stopping every task after a fatal failure");
        self.broadcast(Control::Shutdown, |_| true);
        let drained = tokio::time::timeout(STOP_AFTER_FATAL_WITHIN, async {
            while let Some(joined) = self.join.join_next().await {
                if let Ok(Err(error)) = joined {
                    tracing::error!(%error, "a task failed while stopping after a fatal failure");
                }
            }
        });
        if drained.await.is_err() {
            tracing::error!(within = ?STOP_AFTER_FATAL_WITHIN, "tasks still stopping after a fatal failure are abandoned");
        }
        fatal
    }

    /// The error that ended the tasks, once their event lines have all closed. A failing task
    /// drops its line as it returns, so the closed channel can be seen before the task's own
    /// error is in the join set; that error (a `Fatal` one must stop the restarts) is the one to
    /// report, not the closed channel.
    async fn why_every_task_is_gone(&mut self) -> Error {
        while let Some(joined) = self.join.join_next().await {
            match joined {
                Ok(Ok(())) => {}
                Ok(Err(error)) => return error,
                Err(error) => return error.into(),
            }
        }
        Error::Stopped("every task is gone".into())
    }

    /// Every task ended and the final checkpoint (if any) is committed: stop the tasks.
    async fn shut_down(&mut self) -> Result<()> {
        self.broadcast(Control::Shutdown, |_| true);
        while let Some(joined) = self.join.join_next().await {
            joined??;
        }
        if let Some(running) = self.retention.take() {
            let _ = running.await;
        }
        retain(self.store.clone(), self.config.retained).await;
        Ok(())
    }
}

/// Keeps the last `retained` checkpoints. A failure is logged: the next pass tries again.
async fn retain(store: StateStore, retained: usize) {
    if let Err(error) = store.retain_last(retained).await {
        tracing::warn!(%error, "removing old checkpoints failed; the next checkpoint tries again");
    }
}

/// A failpoint's "return": the process dies on the spot, as with SIGKILL (no unwinding, no
/// destructors, nothing flushed).
#[cfg_attr(not(feature = "failpoints"), allow(dead_code))]
fn crash(step: &str, checkpoint: u64) -> ! {
    eprintln!("failpoint weir::{step}: aborting the process at checkpoint {checkpoint}");
    std::process::abort()
}

fn report(checkpoint: &InFlight, status: CheckpointStatus) -> CheckpointReport {
    let tasks: Vec<TaskCheckpointReport> = checkpoint.acks.values().map(|(_, r)| r.clone()).collect();
    let kind = match checkpoint.barrier.kind {
        CheckpointMode::Aligned => CheckpointKind::Aligned,
        CheckpointMode::AlignedTimeout(_) => {
            CheckpointKind::AlignedTimeout { timed_out: tasks.iter().any(|t| t.unaligned) }
        }
        CheckpointMode::Unaligned => CheckpointKind::Unaligned,
        CheckpointMode::AtLeastOnce => CheckpointKind::AtLeastOnce,
    };
    let inflight_rows = checkpoint
        .acks
        .values()
        .flat_map(|(files, _)| files)
        .filter(|f| crate::inflight::is_inflight(&f.table))
        .map(|f| f.rows)
        .sum();
    CheckpointReport {
        id: checkpoint.barrier.checkpoint_id,
        kind,
        started_at_ms: checkpoint.started_at_ms,
        duration_ms: checkpoint.started.elapsed().as_millis() as u64,
        alignment_ms: tasks.iter().map(|t| t.alignment_ms).max().unwrap_or(0),
        state_bytes: tasks.iter().map(|t| t.state_bytes).sum(),
        written_bytes: tasks.iter().map(|t| t.written_bytes).sum(),
        inflight_bytes: tasks.iter().map(|t| t.inflight_bytes).sum(),
        inflight_rows,
        status,
        tasks,
    }
}
