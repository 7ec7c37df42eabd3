//! The Postgres wire protocol (`weir serve --pg-listen ADDR`), so that `psql`, drivers and BI
//! tools talk to weir: the protocol is the `pgwire` crate's, the statements are the service's
//! own ([`Manager::statements`], as REST and `weir sql` run them), and [`pg_results`] renders
//! what they give as Postgres results.
//!
//! Who may connect, and TLS: [`crate::pg_auth`]. A CancelRequest (Ctrl-C in psql) reaches
//! the statement through pgwire's connection manager and stops the pipeline it started.

use std::fmt::Debug;
use std::net::SocketAddr;
use std::sync::Arc;

use async_trait::async_trait;
use futures::Sink;
use pgwire::api::auth::StartupHandler;
use pgwire::api::cancel::DefaultCancelHandler;
use pgwire::api::portal::Format;
use pgwire::api::query::SimpleQueryHandler;
use pgwire::api::results::Response;
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, ConnectionManager, PgWireServerHandlers};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use tokio::net::TcpListener;
use tracing::{debug, info};

use crate::manager::Manager;
use crate::pg_auth::{Auth, Tls};
use crate::pg_results;

/// Accepts Postgres connections on `listener` until the process ends: with `token`, the
/// token is the password; with `tls`, clients may (or must, by their `sslmode`) use TLS.
pub async fn serve(listener: TcpListener, manager: Arc<Manager>, token: Option<String>, tls: Option<Tls>) {
    let connections = Arc::new(ConnectionManager::new());
    let auth = Auth::new(token, tls, connections.clone());
    let tls = auth.tls();
    let handlers = Arc::new(Handlers {
        queries: Arc::new(Queries { manager, catalog: crate::pg_catalog::CatalogContext::new() }),
        auth,
        cancel: Arc::new(DefaultCancelHandler::new(connections)),
    });
    loop {
        let (socket, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                debug!(%error, "a Postgres connection could not be accepted");
                continue;
            }
        };
        let (handlers, tls) = (handlers.clone(), tls.clone());
        tokio::spawn(async move {
            // A client that sends garbage or goes away ends its own connection only.
            if let Err(error) = pgwire::tokio::process_socket(socket, tls, handlers).await {
                debug!(%peer, %error, "a Postgres connection ended with an error");
            }
        });
    }
}

/// Binds `address` for [`serve`]; the address it got (port 0 picks one).
pub async fn bind(address: SocketAddr) -> std::io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(address).await?;
    let bound = listener.local_addr()?;
    info!(%bound, "weir speaks the Postgres protocol");
    Ok((listener, bound))
}

struct Handlers {
    queries: Arc<Queries>,
    auth: Auth,
    cancel: Arc<DefaultCancelHandler>,
}

impl PgWireServerHandlers for Handlers {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        self.queries.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl pgwire::api::query::ExtendedQueryHandler> {
        self.queries.clone()
    }

    /// Called once per connection.
    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        Arc::new(self.auth.startup())
    }

    fn cancel_handler(&self) -> Arc<impl pgwire::api::cancel::CancelHandler> {
        self.cancel.clone()
    }
}

/// The simple query protocol (here) and the extended one (`pg_extended.rs`): each message's
/// statements run as the service runs them.
pub(crate) struct Queries {
    pub(crate) manager: Arc<Manager>,
    pub(crate) catalog: crate::pg_catalog::CatalogContext,
}

#[async_trait]
impl SimpleQueryHandler for Queries {
    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        // Results are whole when this returns (COPY's are sent from here): a cancel request
        // drops this future, and with it the pipeline.
        pg_results::run(&self.manager, &self.catalog, client, query, &Format::UnifiedText).await
    }
}
