//! The task runner: one subtask of one chain, on a tokio task. It reads its input channels,
//! drives its operators, queues their output, and carries out what barrier alignment
//! ([`crate::alignment`]) decides for every checkpoint mode: an aligned barrier follows the data
//! already queued on the outputs; an unaligned one is taken out of its input queue as soon as
//! it is queued and goes to the head of every output queue, the data it overtook (input and
//! output) and the data that still reaches the chain from inputs whose barrier has not arrived
//! being the snapshot's in-flight data ([`crate::inflight`]).
//!
//! Output is queued per channel in the task ("pending") when a channel is full; while anything
//! is pending the task reads no input. That is the back-pressure, and it keeps the task free to
//! take an overtaking barrier or a control message while it waits.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use datafusion::arrow::record_batch::RecordBatch;
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinSet;
use weir_state::{FileRole, FileTarget, StateFile, StateStore};

use crate::alignment::Alignments;
use crate::chains::{ChainLine, Written};
use crate::channel::{Receiver, Sender};
use crate::checkpoint::TaskCheckpointReport;
use crate::error::{Error, Result};
use crate::failure::{FailureInjector, Step};
use crate::inflight::{self, Capture};
use crate::message::{Barrier, Message};
use crate::metrics::OperatorMetrics;
use crate::operator::{Collector, Delta, Operator, RestoredState, Source, SourceEvent, StateTable, SubtaskInfo};
use crate::partition::Router;

/// A task: chain `chain`, subtask `subtask`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TaskId {
    pub chain: usize,
    pub subtask: usize,
}

/// From the coordinator to a task.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Control {
    /// Sources only: take a snapshot and emit this barrier.
    Trigger(Barrier),
    /// Sources only: every source is finished and there is no final checkpoint; end the output.
    EndOfInput,
    Complete(u64),
    Aborted(u64),
    Shutdown,
}

/// From a task to the coordinator.
#[derive(Debug)]
pub(crate) enum TaskEvent {
    Ack {
        task: TaskId,
        checkpoint_id: u64,
        files: Vec<StateFile>,
        report: TaskCheckpointReport,
    },
    Decline {
        task: TaskId,
        checkpoint_id: u64,
        reason: String,
    },
    /// A bounded source has nothing more to read.
    SourceFinished,
    /// The task's output has ended.
    Ended,
    /// The task failed off its main loop (writing a snapshot).
    Failed(Error),
}

/// One operator of the chain with its counters.
pub(crate) struct Member {
    pub info: SubtaskInfo,
    pub operator: Box<dyn Operator>,
    pub metrics: Arc<OperatorMetrics>,
    pub restored: RestoredState,
}

pub(crate) struct SourceHead {
    pub info: SubtaskInfo,
    pub source: Box<dyn Source>,
    pub metrics: Arc<OperatorMetrics>,
    pub restored: RestoredState,
}

pub(crate) struct InputChannel {
    pub receiver: Receiver,
    pub input: usize,
    pub ended: bool,
    pub watermark: i64,
}

impl InputChannel {
    pub fn new(receiver: Receiver, input: usize) -> Self {
        Self { receiver, input, ended: false, watermark: i64::MIN }
    }
}

pub(crate) struct OutputChannel {
    pub sender: Sender,
    /// The in-flight table this channel's overtaken data goes to.
    pub inflight_table: String,
    pub pending: VecDeque<Message>,
}

pub(crate) struct OutputEdge {
    pub router: Router,
    pub channels: Vec<OutputChannel>,
}

/// What a task shares with the rest of its pipeline attempt.
pub(crate) struct TaskContext {
    pub id: TaskId,
    pub store: StateStore,
    pub events: mpsc::UnboundedSender<TaskEvent>,
    pub control: mpsc::UnboundedReceiver<Control>,
    pub wakeup: Arc<Notify>,
    pub injector: Option<Arc<FailureInjector>>,
    /// Restored from a bounded run's final checkpoint: a source reads nothing more (as in
    /// Flink, a finished source stays finished), so the operators whose state that checkpoint
    /// left out never see input again.
    pub sources_finished: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Running,
    /// A bounded source is exhausted and waits for the final barrier or the end of input.
    SourceFinished,
    /// The output ended; waiting for the final "complete" and the shutdown.
    Ended,
}

pub(crate) struct Task {
    ctx: TaskContext,
    source: Option<SourceHead>,
    members: Vec<Member>,
    inputs: Vec<InputChannel>,
    outputs: Vec<OutputEdge>,
    /// In-flight data of the restored checkpoint, fed to the chain before any new input.
    replay: Vec<(usize, RecordBatch)>,
    alignments: Alignments,
    /// Snapshots taken ahead of their checkpoint's alignment (unaligned), gathering in-flight
    /// data until the checkpoint is aligned here.
    captures: BTreeMap<u64, Capture>,
    watermark: i64,
    next_input: usize,
    phase: Phase,
    /// The chain's operators were told all input is in (`finish`).
    finished: bool,
    /// The shortest tick interval of the chain's operators, and when the next tick is due.
    ticks: Option<(Duration, Instant)>,
    writes: JoinSet<()>,
    /// Each snapshot write waits for the previous one to send its acknowledgement (or
    /// decline) and hand over its chains of incremental state: a task acknowledges checkpoints
    /// in order, and a checkpoint can never complete after a later one (the final checkpoint
    /// would otherwise shut the pipeline down under an earlier one still being written).
    chain_line: ChainLine,
}

impl Task {
    pub fn new(
        ctx: TaskContext,
        source: Option<SourceHead>,
        members: Vec<Member>,
        inputs: Vec<InputChannel>,
        outputs: Vec<OutputEdge>,
        replay: Vec<(usize, RecordBatch)>,
        chain_line: ChainLine,
    ) -> Self {
        let interval = members.iter().filter_map(|m| m.operator.tick_interval()).min();
        let ticks = interval.map(|interval| (interval, Instant::now() + interval));
        Self {
            ctx,
            source,
            members,
            alignments: Alignments::new(inputs.len()),
            captures: BTreeMap::new(),
            inputs,
            outputs,
            replay,
            watermark: i64::MIN,
            next_input: 0,
            phase: Phase::Running,
            finished: false,
            ticks,
            writes: JoinSet::new(),
            chain_line,
        }
    }

    fn head_info(&self) -> &SubtaskInfo {
        match &self.source {
            Some(head) => &head.info,
            None => &self.members[0].info,
        }
    }

    /// The counters of the chain's last operator (the source if it is alone).
    fn tail_metrics(&self) -> Option<&Arc<OperatorMetrics>> {
        self.members.last().map(|m| &m.metrics).or(self.source.as_ref().map(|s| &s.metrics))
    }

    /// Runs the task until the coordinator shuts it down (Ok) or something fails (Err).
    pub async fn run(mut self) -> Result<()> {
        self.open().await?;
        let replay = std::mem::take(&mut self.replay);
        for (input, batch) in replay {
            self.process_input(input, batch).await?;
        }
        loop {
            while let Ok(control) = self.ctx.control.try_recv() {
                if self.on_control(control).await? {
                    return self.close().await;
                }
            }
            while self.writes.try_join_next().is_some() {}
            self.tick().await?;
            self.take_overtaking_barriers().await?;
            self.check_alignment_timeouts().await?;
            if !self.flush() {
                let started = Instant::now();
                let stop = self.wait().await?;
                self.record_backpressure(started.elapsed());
                if stop {
                    return self.close().await;
                }
                continue;
            }
            let worked = match self.source.is_some() {
                true => self.step_source().await?,
                false => self.step_inputs().await?,
            };
            if worked {
                tokio::task::consume_budget().await;
            } else if self.wait().await? {
                return self.close().await;
            }
        }
    }

    /// Opens (restores) the chain's operators in order. A fatal failure of one ends the
    /// pipeline for good, with no restart to finish the others' recovery: so the rest of the
    /// chain still opens (a sink's recovery commits what the restored checkpoint promised), and
    /// then closes (nothing it began stays open), before the first fatal error is returned.
    async fn open(&mut self) -> Result<()> {
        let mut fatal = None;
        let mut opened = Vec::new();
        if let Some(head) = &mut self.source {
            let restored = std::mem::take(&mut head.restored);
            match head.source.open(&head.info, restored).await {
                Ok(()) => opened.push(None),
                Err(error @ Error::Fatal { .. }) => fatal = Some(error),
                Err(error) => return Err(error),
            }
        }
        for (index, member) in self.members.iter_mut().enumerate() {
            let restored = std::mem::take(&mut member.restored);
            match member.operator.open(&member.info, restored).await {
                Ok(()) => opened.push(Some(index)),
                Err(error @ Error::Fatal { .. }) => {
                    fatal.get_or_insert(error);
                }
                Err(error) if fatal.is_none() => return Err(error),
                Err(error) => tracing::error!(%error, "opening after a fatal failure of the chain"),
            }
        }
        let Some(fatal) = fatal else { return Ok(()) };
        for index in opened {
            let closed = match index {
                None => match &mut self.source {
                    Some(head) => head.source.close().await,
                    None => Ok(()),
                },
                Some(index) => self.members[index].operator.close().await,
            };
            if let Err(error) = closed {
                tracing::error!(%error, "closing after a fatal failure of the chain");
            }
        }
        Err(fatal)
    }

    async fn close(mut self) -> Result<()> {
        if let Some(head) = &mut self.source {
            head.source.close().await?;
        }
        for member in &mut self.members {
            member.operator.close().await?;
        }
        // Snapshot writes still running finish (or are dropped with the task set).
        while self.writes.join_next().await.is_some() {}
        Ok(())
    }

    /// Waits for input, output space, a control message or an alignment timeout. Returns
    /// whether the task must stop.
    async fn wait(&mut self) -> Result<bool> {
        let tick = self.ticks.filter(|_| !self.finished).map(|(_, due)| due);
        let deadline = match (self.alignments.next_deadline(), tick) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let sleep = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = self.ctx.wakeup.notified() => Ok(false),
            control = self.ctx.control.recv() => match control {
                Some(control) => self.on_control(control).await,
                None => Err(Error::Stopped("the coordinator is gone".into())),
            },
            _ = sleep => Ok(false),
        }
    }

    fn record_backpressure(&self, waited: Duration) {
        let nanos = waited.as_nanos() as u64;
        if let Some(metrics) = self.tail_metrics() {
            metrics.backpressure_ns.fetch_add(nanos, Ordering::Relaxed);
        }
        for channel in self.outputs.iter().flat_map(|e| &e.channels) {
            if !channel.pending.is_empty() {
                channel.sender.metrics().blocked_ns.fetch_add(nanos, Ordering::Relaxed);
            }
        }
    }

    /// Handles a control message; returns whether the task must stop now.
    async fn on_control(&mut self, control: Control) -> Result<bool> {
        match control {
            Control::Trigger(barrier) => self.on_trigger(barrier).await?,
            Control::EndOfInput => self.end_output().await?,
            Control::Complete(id) => {
                if let Some(head) = &mut self.source {
                    head.source.checkpoint_complete(id).await?;
                }
                for member in &mut self.members {
                    member.operator.checkpoint_complete(id).await?;
                }
            }
            Control::Aborted(id) => {
                self.alignments.abort(id);
                self.captures.remove(&id);
                if let Some(head) = &mut self.source {
                    head.source.checkpoint_aborted(id).await?;
                }
                for member in &mut self.members {
                    member.operator.checkpoint_aborted(id).await?;
                }
            }
            Control::Shutdown => return Ok(true),
        }
        Ok(false)
    }

    // ----- sources -------------------------------------------------------------------------

    async fn step_source(&mut self) -> Result<bool> {
        if self.phase != Phase::Running {
            return Ok(false);
        }
        let Some(head) = &mut self.source else { return Ok(false) };
        let event = match self.ctx.sources_finished {
            true => SourceEvent::End,
            false => head.source.next().await?,
        };
        match event {
            SourceEvent::Batch(batch) => {
                head.metrics.records_out.fetch_add(batch.num_rows() as u64, Ordering::Relaxed);
                let out = Collector { batches: vec![batch], watermark: None };
                self.forward_through_chain(0, out).await?;
            }
            SourceEvent::Watermark(watermark) => {
                head.metrics.watermark.store(watermark, Ordering::Relaxed);
                let out = Collector { batches: Vec::new(), watermark: Some(watermark) };
                self.forward_through_chain(0, out).await?;
            }
            SourceEvent::Idle => {}
            SourceEvent::End => {
                self.phase = Phase::SourceFinished;
                self.send(TaskEvent::SourceFinished);
            }
        }
        Ok(true)
    }

    async fn on_trigger(&mut self, barrier: Barrier) -> Result<()> {
        if self.source.is_none() || self.phase == Phase::Ended {
            return Ok(());
        }
        if barrier.is_final {
            self.finish_chain().await?;
        }
        let (seq, tables) = self.snapshot_chain(barrier.checkpoint_id, barrier.is_final).await?;
        let outputs = self.forward_barrier(barrier, barrier.overtakes());
        self.write_snapshot(barrier, Capture::new(seq, tables, outputs), Duration::ZERO, barrier.overtakes());
        if barrier.is_final {
            self.end_output().await?;
        }
        Ok(())
    }

    // ----- operators with inputs ----------------------------------------------------------

    /// Reads one message from the next readable input; false if there was none.
    async fn step_inputs(&mut self) -> Result<bool> {
        if self.phase == Phase::Ended {
            return Ok(false);
        }
        let count = self.inputs.len();
        for k in 0..count {
            let c = (self.next_input + k) % count;
            let channel = &self.inputs[c];
            if channel.ended || self.alignments.is_blocked(c) {
                continue;
            }
            if let Some(message) = channel.receiver.pop() {
                self.next_input = c + 1;
                self.on_message(c, message).await?;
                return Ok(true);
            }
        }
        if self.inputs.iter().all(|c| c.ended) {
            self.end_output().await?;
            return Ok(true);
        }
        Ok(false)
    }

    async fn on_message(&mut self, c: usize, message: Message) -> Result<()> {
        let input = self.inputs[c].input;
        match message {
            Message::Data(batch) => {
                for id in self.alignments.capturing(c) {
                    if let Some(capture) = self.captures.get_mut(&id) {
                        capture.input(input, [batch.clone()]);
                    }
                }
                self.process_input(input, batch).await?;
            }
            Message::Watermark(watermark) => {
                let channel = &mut self.inputs[c];
                channel.watermark = channel.watermark.max(watermark);
                self.advance_watermark().await?;
            }
            Message::Barrier(barrier) => self.on_barrier(c, barrier, Vec::new()).await?,
            Message::End => {
                self.inputs[c].ended = true;
                let open = self.inputs.iter().any(|channel| channel.input == input && !channel.ended);
                if !open && self.inputs.iter().any(|channel| !channel.ended) {
                    let mut out = Collector::default();
                    self.members[0].operator.input_ended(input, &mut out).await?;
                    self.forward_through_chain(1, out).await?;
                }
                for id in self.alignments.input_ended(c) {
                    self.try_complete(id).await?;
                }
                self.advance_watermark().await?;
            }
        }
        Ok(())
    }

    async fn process_input(&mut self, input: usize, batch: RecordBatch) -> Result<()> {
        let info = &self.members[0].info;
        if let Some(injector) = &self.ctx.injector {
            injector.on_batch(&info.operator, info.subtask)?;
        }
        let member = &mut self.members[0];
        member.metrics.records_in.fetch_add(batch.num_rows() as u64, Ordering::Relaxed);
        member.metrics.batches_in.fetch_add(1, Ordering::Relaxed);
        let mut out = Collector::default();
        member.operator.process_batch(input, batch, &mut out).await?;
        self.forward_through_chain(1, out).await
    }

    /// Calls `process_tick` of the chain's operators that take ticks, when a tick is due
    /// (until the chain is finished), and forwards what they emit.
    async fn tick(&mut self) -> Result<()> {
        let Some((interval, due)) = self.ticks else { return Ok(()) };
        let now = Instant::now();
        if self.finished || now < due {
            return Ok(());
        }
        self.ticks = Some((interval, now + interval));
        for index in 0..self.members.len() {
            if self.members[index].operator.tick_interval().is_none() {
                continue;
            }
            let mut out = Collector::default();
            self.members[index].operator.process_tick(&mut out).await?;
            self.forward_through_chain(index + 1, out).await?;
        }
        Ok(())
    }

    /// The watermark of the task is the minimum over the inputs still open.
    async fn advance_watermark(&mut self) -> Result<()> {
        let open = self.inputs.iter().filter(|c| !c.ended);
        let watermark = open.map(|c| c.watermark).min().unwrap_or(i64::MAX);
        if watermark <= self.watermark || watermark == i64::MIN {
            return Ok(());
        }
        self.watermark = watermark;
        let member = &mut self.members[0];
        member.metrics.watermark.store(watermark, Ordering::Relaxed);
        let mut out = Collector::default();
        member.operator.process_watermark(watermark, &mut out).await?;
        self.forward_through_chain(1, out).await
    }

    /// Feeds what member `from - 1` emitted through members `from..`, then queues what the
    /// tail emitted on the outputs.
    async fn forward_through_chain(&mut self, from: usize, mut current: Collector) -> Result<()> {
        if let Some(previous) = from.checked_sub(1).and_then(|i| self.members.get(i)) {
            let rows: usize = current.batches.iter().map(RecordBatch::num_rows).sum();
            previous.metrics.records_out.fetch_add(rows as u64, Ordering::Relaxed);
        }
        for index in from..self.members.len() {
            let member = &mut self.members[index];
            let mut produced = Collector::default();
            for batch in current.batches {
                member.metrics.records_in.fetch_add(batch.num_rows() as u64, Ordering::Relaxed);
                member.operator.process_batch(0, batch, &mut produced).await?;
            }
            if let Some(watermark) = current.watermark {
                member.metrics.watermark.store(watermark, Ordering::Relaxed);
                member.operator.process_watermark(watermark, &mut produced).await?;
            }
            let rows: usize = produced.batches.iter().map(RecordBatch::num_rows).sum();
            member.metrics.records_out.fetch_add(rows as u64, Ordering::Relaxed);
            current = produced;
        }
        for batch in current.batches {
            self.emit(batch)?;
        }
        if let Some(watermark) = current.watermark {
            self.emit_control(Message::Watermark(watermark));
        }
        Ok(())
    }

    /// All input ended (or a source finished): let the chain emit what it holds, end the
    /// output, and tell the coordinator.
    async fn end_output(&mut self) -> Result<()> {
        if self.phase == Phase::Ended {
            return Ok(());
        }
        self.finish_chain().await?;
        self.emit_control(Message::End);
        self.phase = Phase::Ended;
        self.send(TaskEvent::Ended);
        Ok(())
    }

    /// Lets every operator of the chain emit what it still holds (all input is in), once.
    async fn finish_chain(&mut self) -> Result<()> {
        if self.finished {
            return Ok(());
        }
        self.finished = true;
        for index in 0..self.members.len() {
            let mut out = Collector::default();
            self.members[index].operator.finish(&mut out).await?;
            self.forward_through_chain(index + 1, out).await?;
        }
        Ok(())
    }

    // ----- barriers --------------------------------------------------------------------------

    /// Takes every overtaking (unaligned) barrier queued on any input.
    async fn take_overtaking_barriers(&mut self) -> Result<()> {
        for c in 0..self.inputs.len() {
            if self.inputs[c].ended {
                continue;
            }
            while let Some((barrier, overtaken)) = self.inputs[c].receiver.take_overtaking_barrier() {
                self.on_barrier(c, barrier, overtaken).await?;
            }
        }
        Ok(())
    }

    async fn on_barrier(&mut self, c: usize, barrier: Barrier, overtaken: Vec<RecordBatch>) -> Result<()> {
        let id = barrier.checkpoint_id;
        let ended: Vec<bool> = self.inputs.iter().map(|channel| channel.ended).collect();
        let arrival = self.alignments.on_barrier(c, barrier, &ended, Instant::now());
        for old in arrival.stale {
            self.captures.remove(&old);
            let reason = format!("barrier {id} arrived before barrier {old} on an input");
            self.send(TaskEvent::Decline { task: self.ctx.id, checkpoint_id: old, reason });
        }
        if arrival.snapshot_ahead {
            self.take_snapshot_ahead(id).await?;
        }
        self.alignments.arrive(id, c);
        if let Some(capture) = self.captures.get_mut(&id) {
            capture.input(self.inputs[c].input, overtaken);
        }
        self.try_complete(id).await
    }

    /// Unaligned: snapshot the chain now and send the barrier ahead of the queued output.
    async fn take_snapshot_ahead(&mut self, id: u64) -> Result<()> {
        let Some(barrier) = self.alignments.barrier(id) else { return Ok(()) };
        // Never the final checkpoint: its barrier is aligned.
        let (seq, tables) = self.snapshot_chain(id, false).await?;
        let outputs = self.forward_barrier(barrier, true);
        self.captures.insert(id, Capture::new(seq, tables, outputs));
        self.alignments.snapshotted(id);
        Ok(())
    }

    /// Completes checkpoint `id` here if every input delivered its barrier.
    async fn try_complete(&mut self, id: u64) -> Result<()> {
        let Some(aligned) = self.alignments.take_aligned(id, Instant::now()) else { return Ok(()) };
        let barrier = aligned.barrier;
        let capture = match self.captures.remove(&id) {
            Some(capture) if aligned.snapshotted => capture,
            _ => {
                // The final barrier follows every record: what the operators emit on finishing
                // belongs before it, in the final checkpoint's transactions.
                if barrier.is_final {
                    self.finish_chain().await?;
                }
                let (seq, tables) = self.snapshot_chain(id, barrier.is_final).await?;
                let outputs = self.forward_barrier(barrier, false);
                Capture::new(seq, tables, outputs)
            }
        };
        self.write_snapshot(barrier, capture, aligned.alignment, aligned.unaligned);
        Ok(())
    }

    /// Aligned checkpoints that aligned for longer than their timeout become unaligned: the
    /// chain snapshots now, the barrier overtakes the output, blocked inputs are released,
    /// and the barriers still queued on late inputs are taken with the data they overtake.
    async fn check_alignment_timeouts(&mut self) -> Result<()> {
        for id in self.alignments.time_out(Instant::now()) {
            self.take_snapshot_ahead(id).await?;
            for c in 0..self.inputs.len() {
                if self.alignments.has_arrived(id, c) {
                    continue;
                }
                if let Some((_, overtaken)) = self.inputs[c].receiver.take_barrier(id) {
                    self.alignments.arrive(id, c);
                    if let Some(capture) = self.captures.get_mut(&id) {
                        capture.input(self.inputs[c].input, overtaken);
                    }
                }
            }
            self.try_complete(id).await?;
        }
        Ok(())
    }

    /// The chain's snapshot, with its number: operators that keep a record of changes give
    /// only those when checkpoints are incremental and the previous snapshot is in the chain.
    /// A `last` snapshot (a bounded run's final checkpoint, after every operator finished)
    /// leaves out the operators' working state.
    async fn snapshot_chain(&mut self, id: u64, last: bool) -> Result<(u64, Vec<(String, StateTable)>)> {
        let (seq, may_be_delta) = self.chain_line.take_snapshot();
        let mut tables = Vec::new();
        if let Some(head) = &mut self.source {
            for table in head.source.snapshot(id).await? {
                tables.push((head.info.operator.clone(), table));
            }
        }
        for member in &mut self.members {
            if last && !member.operator.state_needed_after_finish() {
                continue;
            }
            let changes = match member.info.incremental && may_be_delta {
                true => member.operator.snapshot_changes(id).await?,
                false => None,
            };
            let snapshot = match changes {
                Some(changes) => changes,
                None => member.operator.snapshot(id).await?,
            };
            tables.extend(snapshot.into_iter().map(|table| (member.info.operator.clone(), table)));
        }
        Ok((seq, tables))
    }

    /// Sends `barrier` on every output channel: after the queued data, or `ahead` of it
    /// (unaligned). Returns the data overtaken, per in-flight table.
    fn forward_barrier(&mut self, barrier: Barrier, ahead: bool) -> Vec<(String, Vec<RecordBatch>)> {
        let mut overtaken = Vec::new();
        for channel in self.outputs.iter_mut().flat_map(|e| &mut e.channels) {
            if !ahead {
                channel.pending.push_back(Message::Barrier(barrier));
                continue;
            }
            let last_barrier = channel.pending.iter().rposition(|m| matches!(m, Message::Barrier(_)));
            let data = match last_barrier {
                // An earlier barrier is still pending here: go right behind it.
                Some(position) => {
                    let data = inflight::queued_data(channel.pending.iter().skip(position + 1));
                    channel.pending.insert(position + 1, Message::Barrier(barrier));
                    data
                }
                None => {
                    let mut data = channel.sender.push_barrier_ahead(barrier);
                    data.extend(inflight::queued_data(channel.pending.iter()));
                    data
                }
            };
            if !data.is_empty() {
                overtaken.push((channel.inflight_table.clone(), data));
            }
        }
        overtaken
    }

    /// Writes the snapshot off the task's loop and acknowledges (or declines) it.
    fn write_snapshot(&mut self, barrier: Barrier, capture: Capture, alignment: Duration, unaligned: bool) {
        let id = barrier.checkpoint_id;
        let task = self.ctx.id;
        let store = self.ctx.store.clone();
        let events = self.ctx.events.clone();
        let injector = self.ctx.injector.clone();
        let head = self.head_info().clone();
        let tail = self.members.last().map_or_else(|| head.clone(), |m| m.info.clone());
        let operators: Vec<String> = self
            .source
            .iter()
            .map(|s| s.info.operator.clone())
            .chain(self.members.iter().map(|m| m.info.operator.clone()))
            .collect();
        let alignment_ms = alignment.as_millis() as u64;
        let mut link = self.chain_line.link(capture.seq);
        self.writes.spawn(async move {
            let written = write_tables(&store, id, &head, &tail, capture, injector.as_deref()).await;
            let (tables, inflight_files) = match written {
                Ok((tables, inflight_files)) => (Ok(tables), inflight_files),
                Err(error) => (Err(error), Vec::new()),
            };
            // State only, as `state_bytes`: in-flight data is reported on its own.
            let written_bytes =
                tables.as_ref().map_or(0, |tables| tables.iter().flat_map(|t| &t.files).map(|f| f.bytes).sum());
            let (files, chains) = match link.join(tables).await {
                Ok(joined) => joined,
                Err(error) => {
                    let _ = events.send(TaskEvent::Decline { task, checkpoint_id: id, reason: error.to_string() });
                    return;
                }
            };
            fail::fail_point!("weir::after_snapshot_before_ack", |_| {
                eprintln!("failpoint weir::after_snapshot_before_ack: aborting the process at checkpoint {id}");
                std::process::abort()
            });
            if let Some(Err(error)) =
                injector.as_ref().map(|i| i.on_step(Step::AfterSnapshotBeforeAck, id, Some(&head.operator)))
            {
                let _ = events.send(TaskEvent::Failed(error));
                return;
            }
            let inflight_bytes = inflight_files.iter().map(|f| f.bytes).sum();
            let report = TaskCheckpointReport {
                operators,
                subtask: head.subtask,
                state_bytes: files.iter().map(|f| f.bytes).sum(),
                written_bytes,
                inflight_bytes,
                alignment_ms,
                unaligned,
            };
            let files = files.into_iter().chain(inflight_files).collect();
            let _ = events.send(TaskEvent::Ack { task, checkpoint_id: id, files, report });
            link.hand_over(chains, &store, id);
        });
    }

    // ----- output ---------------------------------------------------------------------------

    fn emit(&mut self, batch: RecordBatch) -> Result<()> {
        for edge in &mut self.outputs {
            for (channel, part) in edge.router.route(&batch)? {
                edge.channels[channel].pending.push_back(Message::Data(part));
            }
        }
        Ok(())
    }

    fn emit_control(&mut self, message: Message) {
        for channel in self.outputs.iter_mut().flat_map(|e| &mut e.channels) {
            channel.pending.push_back(message.clone());
        }
    }

    /// Moves pending output into the channels; true when nothing is left pending.
    fn flush(&mut self) -> bool {
        let mut all_sent = true;
        for channel in self.outputs.iter_mut().flat_map(|e| &mut e.channels) {
            while let Some(message) = channel.pending.pop_front() {
                if let Err(message) = channel.sender.try_push(message) {
                    channel.pending.push_front(message);
                    all_sent = false;
                    break;
                }
            }
        }
        all_sent
    }

    fn send(&self, event: TaskEvent) {
        // The coordinator gone means the attempt is over; the task learns it from its control
        // channel.
        let _ = self.ctx.events.send(event);
    }
}

/// Writes a snapshot's files: each table (whole, or its deletes and upserts) and the in-flight
/// data.
async fn write_tables(
    store: &StateStore,
    id: u64,
    head: &SubtaskInfo,
    tail: &SubtaskInfo,
    capture: Capture,
    injector: Option<&FailureInjector>,
) -> Result<(Vec<Written>, Vec<StateFile>)> {
    if let Some(injector) = injector {
        injector.on_step(Step::SnapshotWrite, id, Some(&head.operator))?;
    }
    let mut tables = Vec::new();
    for (operator, StateTable { name, schema, batches, delta }) in capture.tables {
        let is_delta = delta.is_some();
        let files = match delta {
            None => vec![store.write_table(id, &operator, head.subtask, &name, schema, batches).await?],
            Some(Delta { key, deleted }) => {
                let target = |role| FileTarget {
                    checkpoint_id: id,
                    operator: &operator,
                    subtask: head.subtask,
                    table: &name,
                    role,
                    key: &key,
                };
                let mut files = Vec::new();
                if deleted.num_rows() > 0 {
                    files.push(store.write_change(target(FileRole::Deletes), deleted.schema(), vec![deleted]).await?);
                }
                if batches.iter().any(|b| b.num_rows() > 0) {
                    files.push(store.write_change(target(FileRole::Upserts), schema, batches).await?);
                }
                files
            }
        };
        tables.push(Written { operator, table: name, files, delta: is_delta });
    }
    let mut inflight_files = Vec::new();
    let inflight = capture
        .inputs
        .into_iter()
        .map(|(input, batches)| (head, inflight::input_table(input), batches))
        .chain(capture.outputs.into_iter().map(|(table, batches)| (tail, table, batches)));
    for (writer, table, batches) in inflight {
        let Some(schema) = batches.first().map(RecordBatch::schema) else { continue };
        inflight_files.push(store.write_table(id, &writer.operator, writer.subtask, &table, schema, batches).await?);
    }
    Ok((tables, inflight_files))
}
