//! weir's streaming operators (one module each). So far the stateless ones and the simple
//! sinks; windows, aggregates and joins follow.

pub mod sinks;
pub mod stateless;

pub use sinks::{Blackhole, PreviewBuffer, PreviewSink};
pub use stateless::{Stateless, Step};
