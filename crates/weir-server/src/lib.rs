//! `weir serve`: the HTTP service. So far it answers health checks; the REST API, pipeline
//! manager and catalog store arrive with the service issue.

use std::net::SocketAddr;

use axum::Router;
use axum::routing::get;
use tokio::net::TcpListener;
use tracing::info;

/// The service's routes.
pub fn router() -> Router {
    Router::new().route("/healthz", get(|| async { "ok" }))
}

/// Binds `listen` and serves until the process ends. Calls `on_bound` with the bound address
/// (useful with port 0).
pub async fn serve(listen: SocketAddr, on_bound: impl FnOnce(SocketAddr)) -> std::io::Result<()> {
    let listener = TcpListener::bind(listen).await?;
    let bound = listener.local_addr()?;
    info!(%bound, "weir is listening");
    on_bound(bound);
    axum::serve(listener, router()).await
}
