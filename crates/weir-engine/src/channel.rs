//! A bounded channel between one sender subtask and one receiver subtask.
//!
//! Bounded in batches *and* bytes, so back-pressure is real: a sender whose channel is full
//! keeps its output pending and stops reading input. Control messages (watermarks, barriers,
//! end) never count against the bounds: a barrier is never held back by a full queue.
//!
//! Unaligned checkpoints need two moves a plain queue lacks: the receiver may take the first
//! overtaking barrier out of the middle of its queue ([`Receiver::take_overtaking_barrier`]),
//! and the sender may put a barrier at the head of the queue, behind any earlier barrier
//! ([`Sender::push_barrier_ahead`]). Both return copies of the data they overtook (batches are
//! reference-counted, so a copy is cheap); that data stays queued and is processed as usual.
//!
//! Each task owns one [`Notify`] that every channel touching it signals: a receiver's when data
//! arrives, a sender's when space frees up. A task therefore waits on one thing.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use datafusion::arrow::record_batch::RecordBatch;
use tokio::sync::Notify;

use crate::message::{Barrier, Message};

/// How much a channel may hold before its sender must wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelBounds {
    pub max_batches: usize,
    pub max_bytes: usize,
}

impl Default for ChannelBounds {
    fn default() -> Self {
        Self { max_batches: 16, max_bytes: 16 << 20 }
    }
}

/// Counters of one channel, shared by both ends and read by metrics.
#[derive(Debug, Default)]
pub struct ChannelMetrics {
    pub records_in: AtomicU64,
    pub bytes_in: AtomicU64,
    pub records_out: AtomicU64,
    pub bytes_out: AtomicU64,
    /// Nanoseconds the sender had output it could not queue because the channel was full.
    pub blocked_ns: AtomicU64,
    /// Batches queued now.
    pub queued_batches: AtomicU64,
}

#[derive(Debug, Default)]
struct Queue {
    items: VecDeque<Message>,
    batches: usize,
    bytes: usize,
    /// Overtaking barriers queued, so receivers need not scan when there are none.
    overtaking_barriers: usize,
}

#[derive(Debug)]
struct Shared {
    queue: Mutex<Queue>,
    bounds: ChannelBounds,
    metrics: Arc<ChannelMetrics>,
    receiver_wakeup: Arc<Notify>,
    sender_wakeup: Arc<Notify>,
    /// The sending end was dropped (after everything it queued).
    sender_dropped: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // A poisoned lock means a panic while holding it; the queue itself is still consistent
        // (every update is a single push or pop), so go on with it.
        self.queue.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The sending end.
#[derive(Debug)]
pub struct Sender {
    shared: Arc<Shared>,
}

/// The receiving end.
#[derive(Debug)]
pub struct Receiver {
    shared: Arc<Shared>,
}

/// A channel whose ends signal `receiver_wakeup` and `sender_wakeup`.
pub fn channel(bounds: ChannelBounds, receiver_wakeup: Arc<Notify>, sender_wakeup: Arc<Notify>) -> (Sender, Receiver) {
    let shared = Arc::new(Shared {
        queue: Mutex::new(Queue::default()),
        bounds,
        metrics: Arc::new(ChannelMetrics::default()),
        receiver_wakeup,
        sender_wakeup,
        sender_dropped: AtomicBool::new(false),
    });
    (Sender { shared: shared.clone() }, Receiver { shared })
}

fn data_of(items: impl Iterator<Item = Message>) -> Vec<RecordBatch> {
    items
        .filter_map(|m| match m {
            Message::Data(batch) => Some(batch),
            _ => None,
        })
        .collect()
}

impl Sender {
    /// Queues `message` unless it is data and the channel is full; then it is handed back.
    /// An empty channel takes any batch, however large, so a big batch cannot wedge it.
    pub fn try_push(&self, message: Message) -> Result<(), Message> {
        self.push(message, true)
    }

    /// Queues `message` whatever the bounds: the receiving end of a channel between processes,
    /// whose sender holds data until the receiver grants it credit, so the queue stays within
    /// its bounds in batches (a batch in flight when the byte bound filled may pass it).
    pub fn push_granted(&self, message: Message) {
        // Without the bounds nothing is handed back.
        let _ = self.push(message, false);
    }

    fn push(&self, message: Message, bounded: bool) -> Result<(), Message> {
        let mut queue = self.shared.lock();
        if let Message::Data(batch) = &message {
            let bounds = self.shared.bounds;
            let full = queue.batches >= bounds.max_batches || queue.bytes >= bounds.max_bytes;
            if bounded && full && queue.batches > 0 {
                return Err(message);
            }
            let bytes = message.bytes();
            queue.batches += 1;
            queue.bytes += bytes;
            let metrics = &self.shared.metrics;
            metrics.records_in.fetch_add(batch.num_rows() as u64, Ordering::Relaxed);
            metrics.bytes_in.fetch_add(bytes as u64, Ordering::Relaxed);
            metrics.queued_batches.store(queue.batches as u64, Ordering::Relaxed);
        }
        if let Message::Barrier(barrier) = &message
            && barrier.overtakes()
        {
            queue.overtaking_barriers += 1;
        }
        queue.items.push_back(message);
        drop(queue);
        self.shared.receiver_wakeup.notify_one();
        Ok(())
    }

    /// Puts `barrier` ahead of the queued data, but behind any barrier already queued (barriers
    /// keep their order), and returns copies of the batches it overtook.
    pub fn push_barrier_ahead(&self, barrier: Barrier) -> Vec<RecordBatch> {
        let mut queue = self.shared.lock();
        let position = queue.items.iter().rposition(|m| matches!(m, Message::Barrier(_))).map_or(0, |i| i + 1);
        let overtaken = data_of(queue.items.iter().skip(position).cloned());
        if barrier.overtakes() {
            queue.overtaking_barriers += 1;
        }
        queue.items.insert(position, Message::Barrier(barrier));
        drop(queue);
        self.shared.receiver_wakeup.notify_one();
        overtaken
    }

    pub fn metrics(&self) -> &Arc<ChannelMetrics> {
        &self.shared.metrics
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        self.shared.sender_dropped.store(true, Ordering::Release);
        self.shared.receiver_wakeup.notify_one();
    }
}

impl Receiver {
    /// The sending task is gone without ending the channel (it stopped at a shutdown, or
    /// failed): nothing more will come, and nothing queued is owed to anyone. The sending end
    /// of a channel between processes stops then, instead of waiting for an end that will not
    /// come.
    pub fn abandoned(&self) -> bool {
        self.shared.sender_dropped.load(Ordering::Acquire)
            && !self.shared.lock().items.iter().any(|m| matches!(m, Message::End))
    }

    /// The message at the head of the queue, if any.
    pub fn pop(&self) -> Option<Message> {
        let mut queue = self.shared.lock();
        let message = queue.items.pop_front()?;
        match &message {
            Message::Data(batch) => {
                let bytes = message.bytes();
                queue.batches -= 1;
                queue.bytes -= bytes;
                let metrics = &self.shared.metrics;
                metrics.records_out.fetch_add(batch.num_rows() as u64, Ordering::Relaxed);
                metrics.bytes_out.fetch_add(bytes as u64, Ordering::Relaxed);
                metrics.queued_batches.store(queue.batches as u64, Ordering::Relaxed);
                drop(queue);
                self.shared.sender_wakeup.notify_one();
            }
            Message::Barrier(barrier) if barrier.overtakes() => queue.overtaking_barriers -= 1,
            _ => {}
        }
        Some(message)
    }

    /// The message at the head of the queue, unless it is data and `credit` is false: the
    /// sending end of a channel between processes, which sends data only while the receiver
    /// has room for it, and control messages (barriers first of all) at once.
    pub fn pop_sendable(&self, credit: bool) -> Option<Message> {
        if !credit && matches!(self.shared.lock().items.front(), Some(Message::Data(_))) {
            return None;
        }
        self.pop()
    }

    /// Takes the first overtaking barrier out of the queue, wherever it is, with copies of the
    /// batches queued ahead of it (which stay queued).
    pub fn take_overtaking_barrier(&self) -> Option<(Barrier, Vec<RecordBatch>)> {
        let mut queue = self.shared.lock();
        if queue.overtaking_barriers == 0 {
            return None;
        }
        let position = queue.items.iter().position(|m| matches!(m, Message::Barrier(b) if b.overtakes()))?;
        let Some(Message::Barrier(barrier)) = queue.items.remove(position) else {
            return None;
        };
        queue.overtaking_barriers -= 1;
        Some((barrier, data_of(queue.items.iter().take(position).cloned())))
    }

    /// Takes barrier `checkpoint_id` out of the queue wherever it is (an aligned checkpoint that
    /// timed out into unaligned), with copies of the batches ahead of it.
    pub fn take_barrier(&self, checkpoint_id: u64) -> Option<(Barrier, Vec<RecordBatch>)> {
        let mut queue = self.shared.lock();
        let position =
            queue.items.iter().position(|m| matches!(m, Message::Barrier(b) if b.checkpoint_id == checkpoint_id))?;
        let Some(Message::Barrier(barrier)) = queue.items.remove(position) else {
            return None;
        };
        if barrier.overtakes() {
            queue.overtaking_barriers -= 1;
        }
        Some((barrier, data_of(queue.items.iter().take(position).cloned())))
    }

    pub fn metrics(&self) -> &Arc<ChannelMetrics> {
        &self.shared.metrics
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    use super::*;
    use crate::checkpoint::CheckpointMode;

    fn batch(values: &[i64]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(values.to_vec()))]).unwrap()
    }

    fn first_value(message: &Message) -> i64 {
        match message {
            Message::Data(b) => b.column(0).as_any().downcast_ref::<Int64Array>().unwrap().value(0),
            other => panic!("not data: {other:?}"),
        }
    }

    fn barrier(id: u64, kind: CheckpointMode) -> Barrier {
        Barrier { checkpoint_id: id, kind, is_final: false }
    }

    fn pair(max_batches: usize) -> (Sender, Receiver) {
        channel(ChannelBounds { max_batches, max_bytes: usize::MAX }, Arc::new(Notify::new()), Arc::new(Notify::new()))
    }

    #[test]
    fn a_full_channel_hands_data_back_but_takes_control_messages() {
        let (tx, rx) = pair(2);
        tx.try_push(Message::Data(batch(&[1]))).unwrap();
        tx.try_push(Message::Data(batch(&[2, 3]))).unwrap();
        assert!(tx.try_push(Message::Data(batch(&[4]))).is_err());
        tx.try_push(Message::Barrier(barrier(1, CheckpointMode::Aligned))).unwrap();
        tx.try_push(Message::Watermark(5)).unwrap();
        assert_eq!(tx.metrics().records_in.load(Ordering::Relaxed), 3);
        assert_eq!(tx.metrics().queued_batches.load(Ordering::Relaxed), 2);
        assert_eq!(first_value(&rx.pop().unwrap()), 1);
        assert_eq!(rx.metrics().records_out.load(Ordering::Relaxed), 1);
        tx.try_push(Message::Data(batch(&[4]))).unwrap();
    }

    #[test]
    fn a_byte_bound_limits_a_channel_too() {
        let one = batch(&[1; 1000]);
        let bytes = one.get_array_memory_size();
        let bounds = ChannelBounds { max_batches: 100, max_bytes: bytes * 2 };
        let (tx, _rx) = channel(bounds, Arc::new(Notify::new()), Arc::new(Notify::new()));
        tx.try_push(Message::Data(one.clone())).unwrap();
        tx.try_push(Message::Data(one.clone())).unwrap();
        assert!(tx.try_push(Message::Data(one)).is_err());
    }

    #[test]
    fn an_overtaking_barrier_is_taken_from_the_middle_with_the_data_it_overtook() {
        let (tx, rx) = pair(10);
        tx.try_push(Message::Data(batch(&[1]))).unwrap();
        tx.try_push(Message::Data(batch(&[2]))).unwrap();
        tx.try_push(Message::Barrier(barrier(7, CheckpointMode::Unaligned))).unwrap();
        tx.try_push(Message::Data(batch(&[3]))).unwrap();
        let (taken, overtaken) = rx.take_overtaking_barrier().unwrap();
        assert_eq!(taken.checkpoint_id, 7);
        assert_eq!(overtaken.len(), 2);
        assert!(rx.take_overtaking_barrier().is_none());
        // The overtaken data is still delivered, in order, and the barrier is gone.
        let rest: Vec<i64> = std::iter::from_fn(|| rx.pop()).map(|m| first_value(&m)).collect();
        assert_eq!(rest, vec![1, 2, 3]);
    }

    #[test]
    fn a_barrier_pushed_ahead_passes_data_but_not_an_earlier_barrier() {
        let (tx, rx) = pair(10);
        tx.try_push(Message::Data(batch(&[1]))).unwrap();
        tx.try_push(Message::Barrier(barrier(1, CheckpointMode::Unaligned))).unwrap();
        tx.try_push(Message::Data(batch(&[2]))).unwrap();
        tx.try_push(Message::Data(batch(&[3]))).unwrap();
        let overtaken = tx.push_barrier_ahead(barrier(2, CheckpointMode::Unaligned));
        assert_eq!(overtaken.len(), 2);
        let order: Vec<String> = std::iter::from_fn(|| rx.pop())
            .map(|m| match m {
                Message::Barrier(b) => format!("b{}", b.checkpoint_id),
                data => first_value(&data).to_string(),
            })
            .collect();
        assert_eq!(order, vec!["1", "b1", "b2", "2", "3"]);
    }

    #[test]
    fn without_credit_data_stays_queued_but_control_messages_go_and_a_granted_push_ignores_the_bounds() {
        let (tx, rx) = pair(1);
        tx.try_push(Message::Data(batch(&[1]))).unwrap();
        assert!(rx.pop_sendable(false).is_none(), "data at the head needs credit");
        // An unaligned barrier put ahead goes out without credit; the data waits behind it.
        tx.push_barrier_ahead(barrier(1, CheckpointMode::Unaligned));
        assert!(matches!(rx.pop_sendable(false), Some(Message::Barrier(b)) if b.checkpoint_id == 1));
        assert!(rx.pop_sendable(false).is_none());
        assert_eq!(first_value(&rx.pop_sendable(true).unwrap()), 1);

        // The receiving side of a remote channel: the sender's credits bound it, not try_push.
        let (tx, rx) = pair(1);
        tx.push_granted(Message::Data(batch(&[1])));
        tx.push_granted(Message::Data(batch(&[2])));
        assert_eq!(rx.metrics().queued_batches.load(Ordering::Relaxed), 2);
        assert!(tx.try_push(Message::Data(batch(&[3]))).is_err());
    }

    #[test]
    fn a_sender_dropped_without_an_end_abandons_the_channel_and_one_that_queued_its_end_does_not() {
        let (tx, rx) = pair(4);
        tx.try_push(Message::Data(batch(&[1]))).unwrap();
        assert!(!rx.abandoned(), "the sender is still there");
        drop(tx);
        assert!(rx.abandoned(), "stopped without an end: the queued batch is owed to no one");

        let (tx, rx) = pair(4);
        tx.try_push(Message::Data(batch(&[1]))).unwrap();
        tx.try_push(Message::End).unwrap();
        drop(tx);
        assert!(!rx.abandoned(), "its end is queued: everything before it must still go");
        rx.pop();
        rx.pop();
        assert!(rx.abandoned());
    }
}
