//! Kafka: the protocol-level pieces of the exactly-once sink.

pub mod transactions;
mod wire;

#[cfg(feature = "testing")]
pub mod test_broker;

pub use transactions::{
    EndTxnOutcome, PendingTransaction, TransactionDescription, TransactionResult, TransactionsClient,
};
