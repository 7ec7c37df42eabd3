//! Who may connect to the Postgres port, and over what (for [`crate::pg`]).
//!
//! - Without a token, anyone is let in: the listener is then loopback only (as for the HTTP
//!   API, [`crate::config::ServerConfig::check`]).
//! - With a token, the token is every user's password, proven by SCRAM-SHA-256 (what Postgres
//!   itself asks by default, and every current driver speaks): the token never crosses the
//!   network, and a proof is bound to the server's one-time nonce, so it cannot be replayed.
//! - With a certificate and key (`--pg-tls-cert`, `--pg-tls-key`), a client's SSLRequest is
//!   answered with TLS (and TLS first, Postgres 17's direct negotiation, too), and SCRAM is also
//!   offered bound to the certificate (SCRAM-SHA-256-PLUS, psql's `channel_binding=require`).
//!   Without them, an SSLRequest is answered "no" and the client goes on in clear or gives up,
//!   as its `sslmode` says.

use std::fmt::Debug;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use futures::Sink;
use pgwire::api::auth::noop::NoopStartupHandler;
use pgwire::api::auth::sasl::SASLAuthStartupHandler;
use pgwire::api::auth::sasl::scram::{SCRAM_ITERATIONS, ScramAuth, ScramServerAuth, gen_salted_password};
use pgwire::api::auth::{AuthSource, DefaultServerParameterProvider, LoginInfo, Password, StartupHandler};
use pgwire::api::{ClientInfo, ConnectionManager};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;
use tracing::warn;

/// The port's TLS: the acceptor, and the certificate SCRAM binds to.
#[derive(Clone)]
pub struct Tls {
    acceptor: TlsAcceptor,
    certificate_pem: Arc<Vec<u8>>,
    /// Whether SCRAM can bind to the certificate (its signature algorithm is one channel
    /// binding knows).
    channel_binding: bool,
}

impl Tls {
    /// TLS with the PEM certificate chain at `certificate` and the PEM private key at `key`.
    pub fn load(certificate: &Path, key: &Path) -> Result<Self, String> {
        let certificate_pem = std::fs::read(certificate)
            .map_err(|e| format!("the Postgres TLS certificate {}: {e}", certificate.display()))?;
        let chain = CertificateDer::pem_slice_iter(&certificate_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("the Postgres TLS certificate {}: {e}", certificate.display()))?;
        if chain.is_empty() {
            return Err(format!("the Postgres TLS certificate {} holds no certificate", certificate.display()));
        }
        let private_key =
            PrivateKeyDer::from_pem_file(key).map_err(|e| format!("the Postgres TLS key {}: {e}", key.display()))?;
        // ring, as the Kafka connector's TLS (rustls deprecates it for lacking post-quantum key
        // exchange, which Postgres clients do not ask for).
        #[allow(deprecated)]
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .with_no_client_auth()
            .with_single_cert(chain, private_key)
            .map_err(|e| format!("the Postgres TLS certificate and key: {e}"))?;
        // Postgres 17's direct TLS negotiation names the protocol by ALPN.
        config.alpn_protocols = vec![b"postgresql".to_vec()];
        let channel_binding = match ScramServerAuth::new().configure_certificate(&certificate_pem) {
            Ok(()) => true,
            Err(error) => {
                warn!(%error, "SCRAM-SHA-256-PLUS (channel binding) is off for this certificate");
                false
            }
        };
        Ok(Self {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            certificate_pem: Arc::new(certificate_pem),
            channel_binding,
        })
    }
}

/// How connections are let in: the token, if any, and TLS, if configured.
pub struct Auth {
    token: Option<Arc<TokenSource>>,
    tls: Option<Tls>,
    connections: Arc<ConnectionManager>,
}

impl Auth {
    pub fn new(token: Option<String>, tls: Option<Tls>, connections: Arc<ConnectionManager>) -> Self {
        let token = token.map(|token| {
            // One salt per server run: SCRAM needs one, and the token is not stored anywhere.
            let salt = uuid::Uuid::new_v4().into_bytes().to_vec();
            let salted = gen_salted_password(&token, &salt, SCRAM_ITERATIONS);
            Arc::new(TokenSource { salt, salted })
        });
        Self { token, tls, connections }
    }

    pub fn tls(&self) -> Option<TlsAcceptor> {
        self.tls.as_ref().map(|tls| tls.acceptor.clone())
    }

    /// A new connection's startup handler (SCRAM keeps its exchange's state in it).
    pub fn startup(&self) -> Startup {
        let Some(token) = &self.token else { return Startup::Trust(Trust { connections: self.connections.clone() }) };
        let scram = |certificate: Option<&[u8]>| {
            let mut scram = ScramAuth::new(token.clone());
            scram.set_iterations(SCRAM_ITERATIONS);
            if let Some(certificate) = certificate {
                // It succeeded when the certificate was loaded; failing, SCRAM goes on unbound.
                let _ = scram.configure_certificate(certificate);
            }
            Box::new(
                SASLAuthStartupHandler::new(Arc::new(DefaultServerParameterProvider::default()))
                    .with_scram(scram)
                    .with_connection_manager(self.connections.clone()),
            )
        };
        let bound = self.tls.as_ref().filter(|tls| tls.channel_binding).map(|tls| scram(Some(&tls.certificate_pem)));
        Startup::Token { plain: scram(None), bound }
    }
}

/// A connection's startup: let in freely (no token) or by the token through SCRAM.
pub enum Startup {
    Trust(Trust),
    /// SCRAM offered as SCRAM-SHA-256 on a plain connection, and also bound to the
    /// certificate (SCRAM-SHA-256-PLUS) on a TLS one: a client refuses a server that offers
    /// channel binding where there is no channel to bind to.
    Token {
        plain: Box<SASLAuthStartupHandler<DefaultServerParameterProvider>>,
        bound: Option<Box<SASLAuthStartupHandler<DefaultServerParameterProvider>>>,
    },
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
            Startup::Token { bound: Some(bound), .. } if client.is_secure() => bound.on_startup(client, message).await,
            Startup::Token { plain, .. } => plain.on_startup(client, message).await,
        }
    }
}

/// No password asked; the connection is registered for cancel requests.
pub struct Trust {
    connections: Arc<ConnectionManager>,
}

impl NoopStartupHandler for Trust {
    fn connection_manager(&self) -> Option<Arc<ConnectionManager>> {
        Some(self.connections.clone())
    }
}

/// The token as SCRAM's stored password: salted and hashed, for any user name.
#[derive(Debug)]
struct TokenSource {
    salt: Vec<u8>,
    salted: Vec<u8>,
}

#[async_trait]
impl AuthSource for TokenSource {
    async fn get_password(&self, _login: &LoginInfo) -> PgWireResult<Password> {
        Ok(Password::new(Some(self.salt.clone()), self.salted.clone()))
    }
}
