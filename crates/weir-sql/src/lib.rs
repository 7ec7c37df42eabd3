//! weir's SQL front end: statements, the catalog, the options of tables and pipelines, and the
//! planning of queries into the runtime's graph. Parsing is sqlparser's (through DataFusion);
//! name resolution, types, optimisation and expressions are DataFusion's; the streaming
//! operators are weir-engine's.

#[cfg(test)]
mod batch_equivalence;
pub mod catalog;
mod computed_columns;
pub mod error;
mod field_names;
#[cfg(test)]
mod filesystem_roundtrip;
mod flink_functions;
mod flink_refusals;
mod flink_types;
mod flink_udfs;
pub mod identifiers;
mod json_functions;
#[cfg(test)]
mod kafka_roundtrip;
mod lag;
mod map_types;
mod metadata_columns;
pub mod pipeline_options;
pub mod pipeline_statements;
pub mod planner;
mod proctime_function;
pub mod session;
#[cfg(test)]
mod slt;
mod struct_fields_read;
pub mod time_clauses;
mod timestamp_format;
pub mod window_functions;
mod window_table_aggregate;
pub mod window_table_functions;

pub use error::{Error, Result};
pub use pipeline_options::{PIPELINE_OPTIONS, PipelineOptions};
pub use pipeline_statements::PipelineCommand;
pub use session::{FileRoots, Output, PlannedPipeline, Preview, SelectShape, Session};
