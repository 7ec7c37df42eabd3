//! Errors of the runtime.

use datafusion::arrow::error::ArrowError;

/// Every way building or running a pipeline can fail.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The graph handed to the runtime is not one it can run.
    #[error("invalid pipeline graph: {0}")]
    Graph(String),
    #[error("arrow: {0}")]
    Arrow(#[from] ArrowError),
    /// Evaluating a DataFusion expression failed.
    #[error("{0}")]
    DataFusion(#[from] datafusion::error::DataFusionError),
    #[error("state: {0}")]
    State(#[from] weir_state::Error),
    /// An operator (or source or sink) failed; the message says which and why.
    #[error("{operator}[{subtask}]: {message}")]
    Operator { operator: String, subtask: usize, message: String },
    /// An operator failed in a way a restart cannot mend (a record that must not be skipped,
    /// a pending transaction that can no longer commit): the pipeline fails at once instead of
    /// restoring and meeting the same failure forever.
    #[error("{operator}[{subtask}]: {message}")]
    Fatal { operator: String, subtask: usize, message: String },
    /// A failure the test kit's failure injector asked for.
    #[error("injected failure: {0}")]
    Injected(String),
    /// The coordinator or a task went away: the pipeline attempt is over.
    #[error("pipeline stopped: {0}")]
    Stopped(String),
    #[error("task panicked or was cancelled: {0}")]
    Join(#[from] tokio::task::JoinError),
}

/// The runtime's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `Err` of an [`Error::Graph`] built like `format!` (an expression: `return graph_err!(...)`).
#[macro_export]
macro_rules! graph_err {
    ($($arg:tt)*) => {
        Err($crate::error::Error::Graph(format!($($arg)*)))
    };
}
