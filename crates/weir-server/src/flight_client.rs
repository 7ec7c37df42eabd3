//! Calls to a worker's Flight port, from the controller or another worker: every call carries
//! the cluster secret, and long calls (a channel, an attempt) are kept alive by HTTP/2 pings,
//! so a peer that vanished without closing its connection (a machine gone) is noticed.

use std::time::Duration;

use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::{FlightData, FlightDescriptor};
use futures::Stream;
use tokio::sync::mpsc;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Request, Status};

/// How long connecting to a worker may take.
const CONNECT_WITHIN: Duration = Duration::from_secs(5);
/// HTTP/2 pings on an open call, and how long one may go unanswered before the call fails.
const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(2);
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(6);

/// Puts the cluster secret on every call.
#[derive(Clone)]
pub struct Bearer(MetadataValue<Ascii>);

impl Interceptor for Bearer {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        request.metadata_mut().insert("authorization", self.0.clone());
        Ok(request)
    }
}

pub type WorkerClient = FlightServiceClient<InterceptedService<Channel, Bearer>>;

/// Opens calls to workers with the cluster secret.
#[derive(Clone)]
pub struct FlightClients {
    bearer: Bearer,
}

impl FlightClients {
    pub fn new(secret: &str) -> Result<Self, String> {
        let bearer = format!("Bearer {secret}")
            .parse()
            .map_err(|_| "the cluster secret is not a valid header value".to_string())?;
        Ok(Self { bearer: Bearer(bearer) })
    }

    /// A client of the worker at `address` (`host:port`); `timeout` bounds each call (none for
    /// calls that stream as long as an attempt runs).
    pub async fn connect_with(&self, address: &str, timeout: Option<Duration>) -> Result<WorkerClient, String> {
        let mut endpoint = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
            .map_err(|e| format!("'{address}' is not an address: {e}"))?
            .connect_timeout(CONNECT_WITHIN)
            .http2_keep_alive_interval(KEEP_ALIVE_EVERY)
            .keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
            .keep_alive_while_idle(true);
        if let Some(timeout) = timeout {
            endpoint = endpoint.timeout(timeout);
        }
        let channel = endpoint.connect().await.map_err(|e| format!("connecting to {address}: {e}"))?;
        Ok(FlightServiceClient::with_interceptor(channel, self.bearer.clone()))
    }

    /// A client for streaming calls.
    pub async fn connect(&self, address: &str) -> Result<WorkerClient, String> {
        self.connect_with(address, None).await
    }
}

/// The first message of a `do_exchange` call: what it is for.
pub fn first_command(descriptor: FlightDescriptor) -> FlightData {
    FlightData { flight_descriptor: Some(descriptor), ..Default::default() }
}

/// `value` as JSON in a message's `app_metadata` (a message with no body).
pub fn message_of<T: serde::Serialize>(value: &T) -> Result<FlightData, String> {
    let json = serde_json::to_vec(value).map_err(|e| e.to_string())?;
    Ok(FlightData { app_metadata: json.into(), ..Default::default() })
}

/// What [`message_of`] put in `data`'s `app_metadata`.
pub fn read_message<T: for<'de> serde::Deserialize<'de>>(data: &FlightData) -> Result<T, String> {
    serde_json::from_slice(&data.app_metadata).map_err(|e| e.to_string())
}

/// The items of `receiver` as a stream (a call's requests or answers).
pub fn stream_of<T: Send + 'static>(receiver: mpsc::Receiver<T>) -> impl Stream<Item = T> + Send + 'static {
    futures::stream::unfold(receiver, |mut receiver| async move { receiver.recv().await.map(|item| (item, receiver)) })
}
