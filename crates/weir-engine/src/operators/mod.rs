//! weir's streaming operators, one module each.

mod accumulators;
pub mod deduplicate;
mod distinct_family;
mod frame_rows;
mod group_accumulators;
pub mod join;
pub mod numbering;
pub mod over_aggregate;
mod row_segments;
mod seen_distinct;
mod shared_distinct;
pub mod sinks;
pub mod state_ttl;
pub mod stateless;
pub mod top_n;
mod unindexed_rows;
pub mod updating_aggregate;
pub mod upsert_normalize;
mod value_counts;
pub mod watermark;
pub mod window_aggregate;
pub mod window_rank;

pub use accumulators::AggregateCall;
pub use deduplicate::Deduplicate;
pub use join::{Expiry, JoinKind, JoinSide, LateRows, StreamingJoin, join_key_column};
pub use numbering::Numbering;
pub use over_aggregate::{Frame, OverAggregate};
pub use sinks::{Blackhole, PreviewBuffer, PreviewSink};
pub use stateless::{Stateless, Step};
pub use top_n::TopN;
pub use updating_aggregate::UpdatingAggregate;
pub use upsert_normalize::UpsertNormalize;
pub use watermark::WatermarkAssigner;
pub use window_aggregate::{ALL_IN_ONE, WindowAggregate, WindowKind, window_start};
pub use window_rank::WindowRank;
