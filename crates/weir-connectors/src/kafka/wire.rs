//! One connection to a Kafka broker speaking the binary protocol: a size-prefixed request header
//! and body out, a size-prefixed response header and body back. `kafka-protocol` encodes the
//! messages; the framing and correlation are ours. The connection is TCP, wrapped in TLS and
//! authenticated with SASL as the table's `security.protocol` says.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, BytesMut};
use kafka_protocol::messages::{RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::sasl;
use super::security::SaslSettings;
use crate::error::{Error, Result};

/// The client id weir sends in request headers (visible in broker request logs).
const CLIENT_ID: &str = "weir";

/// Responses larger than this are refused: the requests sent here have small answers.
const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// A byte stream to a broker: plain TCP or TLS over it.
trait BrokerStream: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> BrokerStream for T {}

pub(crate) struct Connection {
    stream: Box<dyn BrokerStream>,
    broker: String,
    next_correlation_id: i32,
    timeout: Duration,
}

impl Connection {
    /// Connects to `broker` (`host:port`): TLS with `tls` when given, then SASL with `sasl`
    /// when given.
    pub(crate) async fn connect(
        broker: &str,
        timeout: Duration,
        tls: Option<Arc<ClientConfig>>,
        sasl: Option<&SaslSettings>,
    ) -> Result<Self> {
        let io_err = |source| Error::Io { broker: broker.to_string(), source };
        let tcp = tokio::time::timeout(timeout, TcpStream::connect(broker))
            .await
            .map_err(|_| io_err(timed_out("connect", timeout)))?
            .map_err(io_err)?;
        tcp.set_nodelay(true).map_err(io_err)?;
        let stream: Box<dyn BrokerStream> = match tls {
            None => Box::new(tcp),
            Some(config) => {
                let host = broker.rsplit_once(':').map_or(broker, |(host, _)| host);
                let host = host.trim_start_matches('[').trim_end_matches(']');
                let name = ServerName::try_from(host.to_string())
                    .map_err(|e| Error::Security(format!("broker host '{host}' is not a TLS server name: {e}")))?;
                let handshake = TlsConnector::from(config).connect(name, tcp);
                let tls = tokio::time::timeout(timeout, handshake)
                    .await
                    .map_err(|_| io_err(timed_out("TLS handshake", timeout)))?
                    .map_err(|e| tls_error(broker, e))?;
                Box::new(tls)
            }
        };
        let mut connection = Self { stream, broker: broker.to_string(), next_correlation_id: 1, timeout };
        if let Some(settings) = sasl {
            sasl::authenticate(&mut connection, settings).await?;
        }
        Ok(connection)
    }

    /// Sends `request` at `version` and waits for its response.
    pub(crate) async fn send<R: Request>(&mut self, request: &R, version: i16) -> Result<R::Response> {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        let frame = encode_frame(request, version, correlation_id)?;
        let timeout = self.timeout;
        let mut body = tokio::time::timeout(timeout, self.round_trip(&frame))
            .await
            .map_err(|_| self.io_error(timed_out("request", timeout)))??;
        let header = ResponseHeader::decode(&mut body, R::Response::header_version(version))
            .map_err(|e| Error::Protocol(format!("response header from {}: {e}", self.broker)))?;
        if header.correlation_id != correlation_id {
            return Err(Error::Protocol(format!(
                "{} answered correlation id {} to request {}",
                self.broker, header.correlation_id, correlation_id
            )));
        }
        R::Response::decode(&mut body, version)
            .map_err(|e| Error::Protocol(format!("response (api key {}) from {}: {e}", R::KEY, self.broker)))
    }

    async fn round_trip(&mut self, frame: &[u8]) -> Result<BytesMut> {
        self.stream.write_all(frame).await.map_err(|e| self.io_error(e))?;
        let size = self.stream.read_i32().await.map_err(|e| self.io_error(e))?;
        let size = usize::try_from(size)
            .ok()
            .filter(|s| *s <= MAX_RESPONSE_BYTES)
            .ok_or_else(|| Error::Protocol(format!("{} sent a response of size {size}", self.broker)))?;
        let mut body = BytesMut::zeroed(size);
        self.stream.read_exact(&mut body).await.map_err(|e| self.io_error(e))?;
        Ok(body)
    }

    /// The broker's `host:port`.
    pub(crate) fn broker(&self) -> &str {
        &self.broker
    }

    /// The broker (or our check of it) refused the SASL exchange: not worth retrying.
    pub(crate) fn authentication_error(&self, message: String) -> Error {
        Error::Authentication { broker: self.broker.clone(), message }
    }

    fn io_error(&self, source: std::io::Error) -> Error {
        Error::Io { broker: self.broker.clone(), source }
    }
}

fn encode_frame<R: Request>(request: &R, version: i16, correlation_id: i32) -> Result<BytesMut> {
    let header = RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str(CLIENT_ID)));
    let mut payload = BytesMut::new();
    header.encode(&mut payload, R::header_version(version)).map_err(|e| encode_error(R::KEY, e))?;
    request.encode(&mut payload, version).map_err(|e| encode_error(R::KEY, e))?;
    let size = i32::try_from(payload.len())
        .map_err(|_| Error::Protocol(format!("request of {} bytes is too large", payload.len())))?;
    let mut frame = BytesMut::with_capacity(payload.len() + 4);
    frame.put_i32(size);
    frame.put_slice(payload.chunk());
    Ok(frame)
}

fn encode_error(api_key: i16, e: impl std::fmt::Display) -> Error {
    Error::Protocol(format!("encoding a request with api key {api_key}: {e}"))
}

/// A refused certificate is a setting to fix, not a broker to wait for; anything else in the
/// handshake (a reset, an early close) is a connection failure like any other.
fn tls_error(broker: &str, error: std::io::Error) -> Error {
    match error.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()) {
        Some(rustls_error) => Error::Tls { broker: broker.to_string(), message: rustls_error.to_string() },
        None => Error::Io { broker: broker.to_string(), source: error },
    }
}

fn timed_out(what: &str, after: Duration) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::TimedOut, format!("{what} timed out after {after:?}"))
}
