//! What flows on a channel between two operator subtasks.

use datafusion::arrow::record_batch::RecordBatch;

/// A checkpoint barrier: everything before it on a channel belongs to checkpoint
/// `checkpoint_id`'s snapshot, everything after it to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Barrier {
    pub checkpoint_id: u64,
}

/// One item on a channel.
#[derive(Debug, Clone)]
pub enum Message {
    /// Records, as one Arrow batch.
    Data(RecordBatch),
    /// No record with an event time (milliseconds since the epoch) at or below this will follow.
    Watermark(i64),
    Barrier(Barrier),
    /// The upstream subtask has finished: nothing follows.
    End,
}
