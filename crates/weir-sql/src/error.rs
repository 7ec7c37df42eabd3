//! Errors of the SQL front end. A parse error carries the line and column the parser stopped
//! at, so clients can point at it.

/// Every way a statement can be refused.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("SQL syntax error at line {line}, column {column}: {message}")]
    Syntax { message: String, line: u64, column: u64 },
    /// The statement parsed but cannot be planned (unknown table, unsupported feature...).
    #[error("{0}")]
    Plan(String),
    /// DataFusion could not plan the statement, and knows where in it: an unknown column or
    /// table, a type mismatch...
    #[error("at line {line}, column {column}: {message}")]
    Located { message: String, line: u64, column: u64 },
    /// A connector option is unknown or has a value outside the accepted ones.
    #[error("table '{table}': {message}")]
    Options { table: String, message: String },
    #[error(transparent)]
    DataFusion(#[from] datafusion::error::DataFusionError),
    #[error(transparent)]
    Engine(#[from] weir_engine::Error),
    #[error(transparent)]
    Connector(weir_connectors::Error),
}

impl From<weir_connectors::Error> for Error {
    /// A connector's planning refusal is a planning error like any other; the rest keep their
    /// source.
    fn from(error: weir_connectors::Error) -> Self {
        match error {
            weir_connectors::Error::Plan(message) => Error::Plan(message),
            other => Error::Connector(other),
        }
    }
}

/// The SQL crate's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `Err` of an [`Error::Plan`] built like `format!`, as DataFusion's `plan_err!` (an expression:
/// `return plan_err!(...)` returns it).
#[macro_export]
macro_rules! plan_err {
    ($($arg:tt)*) => {
        Err($crate::error::Error::Plan(format!($($arg)*)))
    };
}

/// A DataFusion planning error, with the position its diagnostic names when there is one (the
/// session collects spans for that).
pub fn located(error: datafusion::error::DataFusionError) -> Error {
    let span = error.diagnostic().and_then(|diagnostic| diagnostic.span);
    match span {
        Some(span) if span.start.line > 0 => Error::Located {
            message: error.strip_backtrace().trim().to_string(),
            line: span.start.line,
            column: span.start.column,
        },
        _ => Error::DataFusion(error),
    }
}
