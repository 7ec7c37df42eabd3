//! Barrier alignment at one task, as a state machine without I/O: which checkpoints are in
//! progress here, which of the task's input channels delivered each one's barrier, which
//! inputs are blocked, when the chain must snapshot, and when a checkpoint is done here. The
//! task runner (`task.rs`) feeds it arrivals, ended inputs and the clock, and carries out what
//! it answers: snapshot the chain, capture in-flight data ([`crate::inflight`]), decline.
//!
//! Per barrier kind (ARCHITECTURE.md, "Barriers"):
//! - aligned: an input that delivered barrier n is blocked until every input has; then the
//!   chain snapshots;
//! - unaligned: the chain snapshots when the first barrier n arrives; data that still arrives
//!   on inputs whose barrier n has not is in-flight data of checkpoint n;
//! - aligned with a timeout: aligned, until the timeout passes; then as unaligned;
//! - at-least-once: no input is blocked; the chain snapshots when the last barrier arrives.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::checkpoint::CheckpointMode;
use crate::message::Barrier;

/// One checkpoint in progress at this task.
#[derive(Debug)]
struct InProgress {
    barrier: Barrier,
    started: Instant,
    /// Per input channel: its barrier arrived (or the channel ended).
    arrived: Vec<bool>,
    /// The chain has snapshotted for this checkpoint.
    snapshotted: bool,
    /// An aligned checkpoint that switched to unaligned on its timeout.
    timed_out: bool,
}

impl InProgress {
    /// Whether an input that delivered the barrier waits for the others.
    fn blocks(&self) -> bool {
        !self.snapshotted && matches!(self.barrier.kind, CheckpointMode::Aligned | CheckpointMode::AlignedTimeout(_))
    }
}

/// What the task must do after a barrier arrived.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Arrival {
    /// Older checkpoints that can no longer align here (this input delivered a newer barrier
    /// before theirs): given up, to be declined.
    pub stale: Vec<u64>,
    /// Snapshot the chain now, ahead of the data queued on the outputs (unaligned).
    pub snapshot_ahead: bool,
}

/// A checkpoint every input delivered the barrier of: done here.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Aligned {
    pub barrier: Barrier,
    /// From the first barrier to the last.
    pub alignment: Duration,
    /// The chain snapshotted already (ahead of the barrier); else it snapshots now.
    pub snapshotted: bool,
    /// Its barriers overtook data (unaligned, or aligned that timed out): the snapshot holds
    /// in-flight data.
    pub unaligned: bool,
}

/// The checkpoints in progress at one task with `inputs` input channels.
#[derive(Debug)]
pub(crate) struct Alignments {
    inputs: usize,
    in_progress: BTreeMap<u64, InProgress>,
}

impl Alignments {
    pub fn new(inputs: usize) -> Self {
        Self { inputs, in_progress: BTreeMap::new() }
    }

    /// Barrier `barrier` arrived on input `input`; `ended` tells which inputs have ended (they
    /// count as arrived).
    pub fn on_barrier(&mut self, input: usize, barrier: Barrier, ended: &[bool], now: Instant) -> Arrival {
        let id = barrier.checkpoint_id;
        let stale: Vec<u64> =
            self.in_progress.iter().filter(|(old, c)| **old < id && !c.arrived[input]).map(|(old, _)| *old).collect();
        for old in &stale {
            self.in_progress.remove(old);
        }
        let inputs = self.inputs;
        let checkpoint = self.in_progress.entry(id).or_insert_with(|| InProgress {
            barrier,
            started: now,
            arrived: (0..inputs).map(|i| ended.get(i).copied().unwrap_or(false)).collect(),
            snapshotted: false,
            timed_out: false,
        });
        let snapshot_ahead = !checkpoint.snapshotted && barrier.kind == CheckpointMode::Unaligned;
        Arrival { stale, snapshot_ahead }
    }

    /// The barrier of `id` is in on `input` (after the task snapshotted ahead, if told to).
    pub fn arrive(&mut self, id: u64, input: usize) {
        if let Some(checkpoint) = self.in_progress.get_mut(&id) {
            checkpoint.arrived[input] = true;
        }
    }

    /// The chain snapshotted for `id` ahead of its barrier's alignment.
    pub fn snapshotted(&mut self, id: u64) {
        if let Some(checkpoint) = self.in_progress.get_mut(&id) {
            checkpoint.snapshotted = true;
        }
    }

    /// Input `input` ended: it counts as arrived for every checkpoint in progress, whose ids
    /// are returned (each may be aligned now).
    pub fn input_ended(&mut self, input: usize) -> Vec<u64> {
        for checkpoint in self.in_progress.values_mut() {
            checkpoint.arrived[input] = true;
        }
        self.in_progress.keys().copied().collect()
    }

    /// `id`, removed, if every input delivered its barrier.
    pub fn take_aligned(&mut self, id: u64, now: Instant) -> Option<Aligned> {
        let checkpoint = self.in_progress.get(&id)?;
        if !checkpoint.arrived.iter().all(|a| *a) {
            return None;
        }
        let checkpoint = self.in_progress.remove(&id)?;
        Some(Aligned {
            barrier: checkpoint.barrier,
            alignment: now.saturating_duration_since(checkpoint.started),
            snapshotted: checkpoint.snapshotted,
            unaligned: checkpoint.barrier.kind == CheckpointMode::Unaligned || checkpoint.timed_out,
        })
    }

    /// The coordinator gave `id` up; whether it was in progress here.
    pub fn abort(&mut self, id: u64) -> bool {
        self.in_progress.remove(&id).is_some()
    }

    /// Whether input `input` must not be read: it delivered the barrier of an aligned
    /// checkpoint whose other barriers are still on their way.
    pub fn is_blocked(&self, input: usize) -> bool {
        self.in_progress.values().any(|c| c.blocks() && c.arrived[input])
    }

    /// The checkpoints that snapshotted ahead and still wait for `input`'s barrier: data that
    /// arrives on it now is their in-flight data.
    pub fn capturing(&self, input: usize) -> impl Iterator<Item = u64> + '_ {
        self.in_progress.iter().filter(move |(_, c)| c.snapshotted && !c.arrived[input]).map(|(id, _)| *id)
    }

    /// Whether the barrier of `id` arrived on `input` (true for a checkpoint not in progress).
    pub fn has_arrived(&self, id: u64, input: usize) -> bool {
        self.in_progress.get(&id).is_none_or(|c| c.arrived[input])
    }

    /// The barrier of `id`, while it is in progress here.
    pub fn barrier(&self, id: u64) -> Option<Barrier> {
        self.in_progress.get(&id).map(|c| c.barrier)
    }

    /// When the next aligned-with-timeout checkpoint times out.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.in_progress.values().filter_map(timeout_at).min()
    }

    /// Aligned-with-timeout checkpoints whose timeout passed by `now`, marked timed out: the
    /// task snapshots each ahead and takes the barriers still queued on late inputs.
    pub fn time_out(&mut self, now: Instant) -> Vec<u64> {
        let expired: Vec<u64> = self
            .in_progress
            .iter()
            .filter(|(_, c)| timeout_at(c).is_some_and(|at| now >= at))
            .map(|(id, _)| *id)
            .collect();
        for id in &expired {
            if let Some(checkpoint) = self.in_progress.get_mut(id) {
                checkpoint.timed_out = true;
            }
        }
        expired
    }
}

/// When an aligned-with-timeout checkpoint, not snapshotted yet, stops waiting.
fn timeout_at(checkpoint: &InProgress) -> Option<Instant> {
    match checkpoint.barrier.kind {
        CheckpointMode::AlignedTimeout(timeout) if !checkpoint.snapshotted && !checkpoint.timed_out => {
            Some(checkpoint.started + timeout)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn barrier(id: u64, kind: CheckpointMode) -> Barrier {
        Barrier { checkpoint_id: id, kind, is_final: false }
    }

    /// Runs the task's side of an arrival: snapshot ahead when told, then mark the arrival.
    fn arrive(alignments: &mut Alignments, input: usize, b: Barrier, now: Instant) -> Arrival {
        let arrival = alignments.on_barrier(input, b, &[false; 3], now);
        if arrival.snapshot_ahead {
            alignments.snapshotted(b.checkpoint_id);
        }
        alignments.arrive(b.checkpoint_id, input);
        arrival
    }

    #[test]
    fn aligned_blocks_each_input_until_the_last_barrier() {
        let now = Instant::now();
        let mut alignments = Alignments::new(3);
        let b = barrier(1, CheckpointMode::Aligned);
        assert_eq!(arrive(&mut alignments, 0, b, now), Arrival::default());
        assert!(alignments.is_blocked(0) && !alignments.is_blocked(1));
        assert_eq!(alignments.take_aligned(1, now), None);
        arrive(&mut alignments, 2, b, now);
        assert!(alignments.is_blocked(2));
        assert_eq!(alignments.capturing(1).count(), 0, "aligned: nothing is in flight");
        arrive(&mut alignments, 1, b, now + Duration::from_millis(7));
        let aligned = alignments.take_aligned(1, now + Duration::from_millis(7)).unwrap();
        assert_eq!(
            aligned,
            Aligned { barrier: b, alignment: Duration::from_millis(7), snapshotted: false, unaligned: false }
        );
        assert!(!alignments.is_blocked(0) && !alignments.is_blocked(2));
    }

    #[test]
    fn unaligned_snapshots_at_the_first_barrier_and_captures_the_late_inputs() {
        let now = Instant::now();
        let mut alignments = Alignments::new(3);
        let b = barrier(4, CheckpointMode::Unaligned);
        assert!(arrive(&mut alignments, 1, b, now).snapshot_ahead);
        assert!(!arrive(&mut alignments, 0, b, now).snapshot_ahead, "once");
        assert!((0..3).all(|i| !alignments.is_blocked(i)), "unaligned never blocks");
        assert_eq!(alignments.capturing(2).collect::<Vec<_>>(), vec![4]);
        assert_eq!(alignments.capturing(0).count(), 0);
        arrive(&mut alignments, 2, b, now);
        let aligned = alignments.take_aligned(4, now).unwrap();
        assert!(aligned.snapshotted && aligned.unaligned);
    }

    #[test]
    fn at_least_once_never_blocks_and_snapshots_at_the_last_barrier() {
        let now = Instant::now();
        let mut alignments = Alignments::new(2);
        let b = barrier(2, CheckpointMode::AtLeastOnce);
        assert!(!arrive(&mut alignments, 0, b, now).snapshot_ahead);
        assert!(!alignments.is_blocked(0));
        arrive(&mut alignments, 1, b, now);
        let aligned = alignments.take_aligned(2, now).unwrap();
        assert!(!aligned.snapshotted && !aligned.unaligned);
    }

    #[test]
    fn an_aligned_checkpoint_switches_to_unaligned_at_its_timeout() {
        let now = Instant::now();
        let timeout = Duration::from_millis(50);
        let mut alignments = Alignments::new(2);
        let b = barrier(3, CheckpointMode::AlignedTimeout(timeout));
        arrive(&mut alignments, 0, b, now);
        assert!(alignments.is_blocked(0));
        assert_eq!(alignments.next_deadline(), Some(now + timeout));
        assert!(alignments.time_out(now + Duration::from_millis(49)).is_empty());
        assert_eq!(alignments.time_out(now + timeout), vec![3]);
        alignments.snapshotted(3);
        assert!(!alignments.is_blocked(0), "released once it snapshotted ahead");
        assert_eq!(alignments.capturing(1).collect::<Vec<_>>(), vec![3]);
        assert_eq!(alignments.next_deadline(), None);
        alignments.arrive(3, 1);
        let aligned = alignments.take_aligned(3, now + timeout).unwrap();
        assert!(aligned.snapshotted && aligned.unaligned);
    }

    #[test]
    fn a_newer_barrier_first_makes_the_older_checkpoint_stale() {
        let now = Instant::now();
        let mut alignments = Alignments::new(2);
        arrive(&mut alignments, 0, barrier(5, CheckpointMode::Aligned), now);
        // Input 1 never delivered 5, and delivers 6: checkpoint 5 cannot align here.
        let arrival = arrive(&mut alignments, 1, barrier(6, CheckpointMode::Aligned), now);
        assert_eq!(arrival.stale, vec![5]);
        assert!(!alignments.is_blocked(0), "what 5 blocked is released");
        assert!(alignments.is_blocked(1));
    }

    #[test]
    fn an_ended_input_counts_as_arrived() {
        let now = Instant::now();
        let mut alignments = Alignments::new(2);
        let b = barrier(7, CheckpointMode::Aligned);
        arrive(&mut alignments, 0, b, now);
        assert_eq!(alignments.input_ended(1), vec![7]);
        assert!(alignments.take_aligned(7, now).is_some());
        // A barrier after an input ended: that input is arrived from the start.
        let b = barrier(8, CheckpointMode::Aligned);
        alignments.on_barrier(0, b, &[false, true], now);
        alignments.arrive(8, 0);
        assert!(alignments.take_aligned(8, now).is_some());
    }

    #[test]
    fn an_aborted_checkpoint_releases_its_inputs() {
        let now = Instant::now();
        let mut alignments = Alignments::new(2);
        arrive(&mut alignments, 0, barrier(9, CheckpointMode::Aligned), now);
        assert!(alignments.abort(9));
        assert!(!alignments.is_blocked(0) && !alignments.abort(9));
    }
}
