//! The Nexmark generator: the standard person / auction / bid streams of the online-auction
//! benchmark (see shared/notes/nexmark.md), as weir's embedded default source.
//!
//! Event n is a function of (seed, n) alone: its kind from n mod 50 (1 person, 3 auctions, 46
//! bids in every 50), its ids from n, its random fields from a generator seeded by n, its event
//! time from n and the configured rate. So a checkpointed position is just "the next n" of each
//! split, and any replay produces the same events.

mod connector;
mod generator;

pub use connector::NexmarkConnector;
pub use generator::{NexmarkConfig, NexmarkGenerator, UnreadText, event_kind, nexmark_schema};
/// The Nexmark source: the generator's events, split, paced and checkpointed.
pub type NexmarkSource = crate::generated_source::GeneratedSource<NexmarkGenerator>;
