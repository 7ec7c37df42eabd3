//! librdkafka's calls block (flush, commit, metadata, and destroying a client, which waits for
//! its threads): they run on tokio's blocking threads, never on an async worker.

use crate::Result;

/// Runs a blocking librdkafka call off the async workers.
pub(crate) async fn blocking<T: Send + 'static>(work: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(work).await?
}
