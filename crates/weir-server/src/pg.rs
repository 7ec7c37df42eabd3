//! The Postgres wire protocol (`weir serve --pg-listen ADDR`), so that `psql`, drivers and BI
//! tools talk to weir: the protocol is the `pgwire` crate's, the statements are the service's
//! own ([`Manager::statements`], as REST and `weir sql` run them), and [`pg_results`] renders
//! what they give as Postgres results.
//!
//! Authentication: without a token, any user is let in (the listener is loopback only unless
//! a token is set, as for the HTTP API); with a token, the password must be the token (sent in
//! clear text: there is no TLS on this port yet). A CancelRequest (Ctrl-C in psql) reaches the
//! statement through pgwire's connection manager and stops the pipeline it started.

use std::fmt::Debug;
use std::net::SocketAddr;
use std::sync::Arc;

use async_trait::async_trait;
use futures::Sink;
use pgwire::api::auth::cleartext::CleartextPasswordAuthStartupHandler;
use pgwire::api::auth::noop::NoopStartupHandler;
use pgwire::api::auth::{AuthSource, DefaultServerParameterProvider, LoginInfo, Password, StartupHandler};
use pgwire::api::cancel::DefaultCancelHandler;
use pgwire::api::query::SimpleQueryHandler;
use pgwire::api::results::Response;
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, ConnectionManager, PgWireServerHandlers};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use tokio::net::TcpListener;
use tracing::{debug, info};

use crate::manager::Manager;
use crate::pg_results;

/// Accepts Postgres connections on `listener` until the process ends.
pub async fn serve(listener: TcpListener, manager: Arc<Manager>, token: Option<String>) {
    let connections = Arc::new(ConnectionManager::new());
    let handlers = Arc::new(Handlers {
        queries: Arc::new(Queries { manager, catalog: crate::pg_catalog::CatalogContext::new() }),
        startup: Arc::new(match token {
            Some(token) => Startup::Token(Box::new(
                CleartextPasswordAuthStartupHandler::new(
                    TokenSource { token },
                    DefaultServerParameterProvider::default(),
                )
                .with_connection_manager(connections.clone()),
            )),
            None => Startup::Trust(Trust { connections: connections.clone() }),
        }),
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
        let handlers = handlers.clone();
        tokio::spawn(async move {
            // A client that sends garbage or goes away ends its own connection only.
            if let Err(error) = pgwire::tokio::process_socket(socket, None, handlers).await {
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
    startup: Arc<Startup>,
    cancel: Arc<DefaultCancelHandler>,
}

impl PgWireServerHandlers for Handlers {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        self.queries.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl pgwire::api::query::ExtendedQueryHandler> {
        self.queries.clone()
    }

    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        self.startup.clone()
    }

    fn cancel_handler(&self) -> Arc<impl pgwire::api::cancel::CancelHandler> {
        self.cancel.clone()
    }
}

/// How a connection is let in: freely (no token) or with the token as its password.
enum Startup {
    Trust(Trust),
    Token(Box<CleartextPasswordAuthStartupHandler<TokenSource, DefaultServerParameterProvider>>),
}

#[async_trait]
impl StartupHandler for Startup {
    async fn on_startup<C>(&self, client: &mut C, message: PgWireFrontendMessage) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        match self {
            Startup::Trust(trust) => trust.on_startup(client, message).await,
            Startup::Token(token) => token.on_startup(client, message).await,
        }
    }
}

/// No password asked; the connection is registered for cancel requests.
struct Trust {
    connections: Arc<ConnectionManager>,
}

impl NoopStartupHandler for Trust {
    fn connection_manager(&self) -> Option<Arc<ConnectionManager>> {
        Some(self.connections.clone())
    }
}

/// The service's token, the one password any user may give.
#[derive(Debug)]
struct TokenSource {
    token: String,
}

#[async_trait]
impl AuthSource for TokenSource {
    async fn get_password(&self, _login: &LoginInfo) -> PgWireResult<Password> {
        Ok(Password::new(None, self.token.as_bytes().to_vec()))
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
        pg_results::run(&self.manager, &self.catalog, client, query).await
    }
}
