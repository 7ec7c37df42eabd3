//! weir's streaming operators (one module each). So far the stateless ones, watermark
//! assignment and the simple sinks; windows, aggregates and joins follow.

pub mod sinks;
pub mod stateless;
pub mod tumbling_window;
pub mod watermark;

pub use sinks::{Blackhole, PreviewBuffer, PreviewSink};
pub use stateless::{Stateless, Step};
pub use tumbling_window::TumblingWindow;
pub use watermark::WatermarkAssigner;
