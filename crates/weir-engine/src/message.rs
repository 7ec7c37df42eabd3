//! What flows on a channel between two operator subtasks.

use datafusion::arrow::record_batch::RecordBatch;

use serde::{Deserialize, Serialize};

use crate::checkpoint::CheckpointMode;

/// A checkpoint barrier: everything before it on a channel belongs to checkpoint
/// `checkpoint_id`'s snapshot, everything after it to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Barrier {
    pub checkpoint_id: u64,
    pub kind: CheckpointMode,
    /// The last checkpoint of a bounded run: sources end their output after it.
    pub is_final: bool,
}

impl Barrier {
    /// Whether the barrier overtakes queued data on a channel as soon as it is queued.
    pub fn overtakes(&self) -> bool {
        self.kind == CheckpointMode::Unaligned
    }
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

impl Message {
    /// Bytes the message holds in memory (data only; control messages count as zero).
    pub fn bytes(&self) -> usize {
        match self {
            Message::Data(batch) => batch.get_array_memory_size(),
            _ => 0,
        }
    }
}
