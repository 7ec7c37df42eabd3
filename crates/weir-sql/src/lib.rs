//! weir's SQL front end: statements, the catalog and the options of tables and pipelines.
//! Parsing is sqlparser's (through DataFusion), column types are DataFusion's; planning queries
//! into the runtime's graph is the next step of the streaming SQL issue.

pub mod catalog;
pub mod error;
pub mod options;
pub mod session;

pub use error::{Error, Result};
pub use session::{Output, Session};
