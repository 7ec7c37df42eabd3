//! `weir serve`: streaming SQL over HTTP. [`api`] holds the routes, [`manager`] the pipelines
//! and their lifecycle, [`store`] what survives a restart (SQLite in the data directory),
//! [`config`] the typed configuration, [`metrics`] the Prometheus page, [`rates`] the
//! per-operator rates, [`dataflow`] the graph as data for the web page, [`web`] the page,
//! [`pg`] the Postgres protocol, [`cluster`] the workers that joined this service,
//! [`placement`] pipelines run on them, [`exchange`] channels between them over Arrow Flight,
//! and [`worker`] the other side: `weir worker`.

pub mod api;
mod bearer;
pub mod cluster;
pub mod config;
pub mod dataflow;
pub mod error;
pub mod exchange;
mod flight_client;
pub mod manager;
pub mod metrics;
pub mod pg;
mod pg_auth;
mod pg_catalog;
mod pg_cursors;
mod pg_extended;
mod pg_results;
mod pg_rows;
pub mod placement;
pub mod rates;
pub mod store;
pub mod web;
pub mod worker;

use tokio::net::TcpListener;
use tracing::info;

pub use config::ServerConfig;

/// Opens the data directory (resuming what was running), binds, and serves until the process
/// ends. Calls `on_bound` with the bound HTTP address and the Postgres one if asked for
/// (useful with port 0).
pub async fn serve(
    config: ServerConfig,
    on_bound: impl FnOnce(std::net::SocketAddr, Option<std::net::SocketAddr>),
) -> std::io::Result<()> {
    config.check().map_err(std::io::Error::other)?;
    if config.token.is_none() && !config.listen.ip().is_loopback() {
        tracing::warn!(listen = %config.listen, "serving the API to the network without a token (--allow-unauthenticated)");
    }
    let manager = manager::Manager::open(config.clone()).await.map_err(|e| std::io::Error::other(e.body.message))?;
    let listener = TcpListener::bind(config.listen).await?;
    let bound = listener.local_addr()?;
    let pg_bound = match config.pg_listen {
        Some(address) => {
            let tls = match (&config.pg_tls_cert, &config.pg_tls_key) {
                (Some(certificate), Some(key)) => {
                    Some(pg_auth::Tls::load(certificate, key).map_err(std::io::Error::other)?)
                }
                _ => None,
            };
            let (pg_listener, pg_bound) = pg::bind(address).await?;
            tokio::spawn(pg::serve(pg_listener, manager.clone(), config.token.clone(), tls));
            Some(pg_bound)
        }
        None => None,
    };
    let checkpoints = manager.checkpoint_location();
    info!(%bound, data_dir = %config.data_dir.display(), %checkpoints, "weir is listening");
    on_bound(bound, pg_bound);
    let cluster = manager.cluster();
    cluster.clone().watch();
    let state = api::AppState { manager, token: config.token.clone(), cluster };
    axum::serve(listener, api::router(state, config.max_body_bytes)).await
}
