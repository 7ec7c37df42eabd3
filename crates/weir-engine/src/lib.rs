//! weir's dataflow runtime: the messages that flow between operators, and (as it grows) tasks,
//! channels, barrier alignment, the checkpoint coordinator and the streaming operators.

pub mod message;

pub use message::{Barrier, Message};
