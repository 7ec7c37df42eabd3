//! One TCP connection to a Kafka broker speaking the binary protocol: size-prefixed request
//! header + body out, size-prefixed response header + body back. `kafka-protocol` encodes the
//! messages; the framing and correlation are ours.

use std::time::Duration;

use bytes::{Buf, BufMut, BytesMut};
use kafka_protocol::messages::{RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::error::{Error, Result};

/// The client id weir sends in request headers (visible in broker request logs).
const CLIENT_ID: &str = "weir";

/// Responses larger than this are refused: the requests sent here have small answers.
const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

pub(crate) struct Connection {
    stream: TcpStream,
    broker: String,
    next_correlation_id: i32,
    timeout: Duration,
}

impl Connection {
    pub(crate) async fn connect(broker: &str, timeout: Duration) -> Result<Self> {
        let io_err = |source| Error::Io { broker: broker.to_string(), source };
        let stream = tokio::time::timeout(timeout, TcpStream::connect(broker))
            .await
            .map_err(|_| io_err(timed_out("connect", timeout)))?
            .map_err(io_err)?;
        stream.set_nodelay(true).map_err(io_err)?;
        Ok(Self { stream, broker: broker.to_string(), next_correlation_id: 1, timeout })
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

fn timed_out(what: &str, after: Duration) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::TimedOut, format!("{what} timed out after {after:?}"))
}
