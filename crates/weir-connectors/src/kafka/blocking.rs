//! librdkafka's calls block (flush, commit, metadata, and destroying a client, which waits for
//! its threads): they run on tokio's blocking threads, never on an async worker.

/// Runs a blocking librdkafka call off the async workers.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(work).await.map_err(|e| format!("Kafka client task failed: {e}"))?
}
