//! weir's SQL front end: statements, the catalog, the options of tables and pipelines, and the
//! planning of queries into the runtime's graph. Parsing is sqlparser's (through DataFusion);
//! name resolution, types, optimisation and expressions are DataFusion's; the streaming
//! operators are weir-engine's.

#[cfg(test)]
mod batch_equivalence;
pub mod catalog;
pub mod error;
#[cfg(test)]
mod filesystem_roundtrip;
#[cfg(test)]
mod kafka_roundtrip;
pub mod kafka_tables;
mod lag;
pub mod options;
pub mod pipeline_statements;
pub mod plan_options;
pub mod planner;
pub mod session;
#[cfg(test)]
mod slt;
pub mod time_clauses;
pub mod window_functions;
pub mod window_table_functions;

pub use error::{Error, Result};
pub use pipeline_statements::PipelineCommand;
pub use session::{FileRoots, Output, PlannedPipeline, Preview, Session};
