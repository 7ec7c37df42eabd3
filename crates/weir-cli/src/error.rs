//! The client's errors, each one line a person can act on.

/// Every way a client command can fail.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No server answered: the one line names the URL and how to start one.
    #[error(
        "could not connect to the weir server at {url} ({reason}); start one with `weir serve`, or name another with --url or WEIR_URL"
    )]
    Unreachable { url: String, reason: String },
    #[error("the weir server at {url} {}", if *token_given {
        "refused the token: it is wrong (give the server's token with --token or WEIR_TOKEN)"
    } else {
        "needs a token: give it with --token or WEIR_TOKEN"
    })]
    Unauthorized { url: String, token_given: bool },
    /// The server refused a statement or request; SQL errors name the line and column.
    #[error("{message}")]
    Server { code: String, message: String, line: Option<u64>, column: Option<u64> },
    /// The server's answer was not what its API says.
    #[error("unexpected answer from the server: {0}")]
    Protocol(String),
    /// A meta-command or option given wrongly.
    #[error("{0}")]
    Usage(String),
    #[error("{path}: {error}")]
    File { path: String, error: std::io::Error },
    #[error("writing the output: {0}")]
    Output(#[from] std::io::Error),
}

impl Error {
    /// Whether the server is gone (or refuses us): nothing more can be done with it.
    pub fn is_connection(&self) -> bool {
        matches!(self, Error::Unreachable { .. } | Error::Unauthorized { .. })
    }
}

/// The client's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
