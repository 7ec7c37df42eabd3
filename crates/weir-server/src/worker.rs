//! `weir worker`: a process that joins a controller (`weir serve`) and offers it slots.
//!
//! It serves Arrow Flight (gRPC) on its own port, where the controller and other workers reach
//! it; every call there must carry the cluster secret, so the port never answers anonymous
//! traffic. The port answers `ping` (the worker's id), which the controller calls back before
//! it lists a worker, and two kinds of `do_exchange` call: an attempt's part, opened by the
//! controller ([`crate::placement`]), and a channel's data, opened by the worker running its
//! sending subtask ([`crate::exchange`]). Then the worker registers with
//! the controller over its HTTP API and heartbeats at the interval it was told, registering
//! again when the controller does not know it (a controller restarted, or one that declared it
//! lost), and retrying while the controller cannot be reached.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use arrow_flight::flight_service_server::{FlightService, FlightServiceServer};
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo, HandshakeRequest, HandshakeResponse,
    PollInfo, PutResult, SchemaResult, Ticket,
};
use futures::Stream;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tonic::{Request, Response, Status, Streaming};
use weir_engine::remote::{Exchange, FromWorker, RemoteError, ToTask, run_on_worker};

use crate::cluster::{Heartbeat, Registered, Registration};
use crate::exchange::{Command, FlightExchange};
use crate::flight_client::{FlightClients, message_of, read_message, stream_of};
use crate::placement::AttemptOpen;

/// The action that answers with the worker's id.
const PING: &str = "ping";
/// How long a call to a worker's port may take before it counts as unanswered.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// Between attempts to reach an unreachable controller.
const RETRY_EVERY: Duration = Duration::from_secs(1);

/// How a worker runs.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The controller's HTTP address, e.g. `http://127.0.0.1:8080`.
    pub controller: String,
    /// Where its Flight port listens.
    pub listen: SocketAddr,
    /// Where the controller and other workers reach that port (default: the bound address,
    /// which must then not be a wildcard like 0.0.0.0).
    pub advertise: Option<String>,
    pub slots: u32,
    /// Shared by the controller and every worker.
    pub secret: String,
    pub id: String,
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// The worker's Flight service.
struct WorkerFlight {
    id: String,
    exchange: Arc<FlightExchange>,
}

fn not_offered(what: &str) -> Status {
    Status::unimplemented(format!("{what}: a worker takes only do_exchange calls and the ping action"))
}

impl WorkerFlight {
    /// Runs a part of a pipeline attempt: plans the pipeline, builds and runs its tasks here,
    /// takes the controller's messages to them off the call and answers with their events,
    /// last with how the part ended. The controller closing the call ends the attempt here.
    fn run_attempt(&self, open: AttemptOpen, mut incoming: Streaming<FlightData>) -> BoxStream<FlightData> {
        let (control, control_rx) = mpsc::unbounded_channel::<ToTask>();
        let (events, mut events_rx) = mpsc::unbounded_channel::<FromWorker>();
        let (answers, answers_rx) = mpsc::channel::<Result<FlightData, Status>>(64);
        tokio::spawn(async move {
            while let Ok(Some(message)) = incoming.message().await {
                match read_message::<ToTask>(&message) {
                    Ok(to_task) => {
                        let _ = control.send(to_task);
                    }
                    Err(why) => {
                        tracing::warn!("a message from the controller: {why}");
                        return;
                    }
                }
            }
        });
        tokio::spawn(async move {
            while let Some(event) = events_rx.recv().await {
                let answer = message_of(&event).map_err(Status::internal);
                if answers.send(answer).await.is_err() {
                    return;
                }
            }
        });
        let (exchange, id) = (self.exchange.clone() as Arc<dyn Exchange>, self.id.clone());
        tokio::spawn(async move {
            let AttemptOpen { request, spec } = open;
            let tasks = request.placement.tasks.iter().flatten().filter(|w| **w == request.worker).count();
            tracing::info!(worker = %id, attempt = %request.attempt, pipeline = %spec.name, tasks, restore = ?request.restore, "running a part of a pipeline attempt");
            let ran = async {
                let refused = |message| RemoteError { fatal: false, operator: String::new(), subtask: 0, message };
                let (graph, config) = spec.plan().await.map_err(refused)?;
                let store = spec.store().map_err(refused)?;
                run_on_worker(&graph, &config, &store, &request, exchange, control_rx, events.clone())
                    .await
                    .map_err(|e| RemoteError::from(&e))
            };
            let ended = ran.await.err();
            match &ended {
                None => tracing::info!(attempt = %request.attempt, "its part of the attempt ended"),
                Some(why) => {
                    tracing::warn!(attempt = %request.attempt, "its part of the attempt failed: {}", why.message)
                }
            }
            let _ = events.send(FromWorker::Done(ended));
        });
        Box::pin(stream_of(answers_rx))
    }
}

#[tonic::async_trait]
impl FlightService for WorkerFlight {
    type HandshakeStream = BoxStream<HandshakeResponse>;
    type ListFlightsStream = BoxStream<FlightInfo>;
    type DoGetStream = BoxStream<FlightData>;
    type DoPutStream = BoxStream<PutResult>;
    type DoExchangeStream = BoxStream<FlightData>;
    type DoActionStream = BoxStream<arrow_flight::Result>;
    type ListActionsStream = BoxStream<ActionType>;

    async fn handshake(
        &self,
        _request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        Err(Status::unimplemented("no handshake: every call carries the cluster secret"))
    }

    async fn list_flights(&self, _request: Request<Criteria>) -> Result<Response<Self::ListFlightsStream>, Status> {
        Err(not_offered("list_flights"))
    }

    async fn get_flight_info(&self, _request: Request<FlightDescriptor>) -> Result<Response<FlightInfo>, Status> {
        Err(not_offered("get_flight_info"))
    }

    async fn poll_flight_info(&self, _request: Request<FlightDescriptor>) -> Result<Response<PollInfo>, Status> {
        Err(not_offered("poll_flight_info"))
    }

    async fn get_schema(&self, _request: Request<FlightDescriptor>) -> Result<Response<SchemaResult>, Status> {
        Err(not_offered("get_schema"))
    }

    async fn do_get(&self, _request: Request<Ticket>) -> Result<Response<Self::DoGetStream>, Status> {
        Err(not_offered("do_get"))
    }

    async fn do_put(&self, _request: Request<Streaming<FlightData>>) -> Result<Response<Self::DoPutStream>, Status> {
        Err(not_offered("do_put"))
    }

    async fn do_exchange(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        let mut incoming = request.into_inner();
        let first = incoming.message().await?.ok_or_else(|| Status::invalid_argument("an empty call"))?;
        let command = first
            .flight_descriptor
            .map(|d| d.cmd)
            .ok_or_else(|| Status::invalid_argument("the first message must say what the call is for"))?;
        let command: Command = serde_json::from_slice(&command)
            .map_err(|e| Status::invalid_argument(format!("the call's command: {e}")))?;
        match command {
            Command::Channel(key) => Ok(Response::new(Box::pin(self.exchange.clone().accept(key, incoming).await?))),
            Command::Attempt(open) => Ok(Response::new(self.run_attempt(*open, incoming))),
        }
    }

    async fn do_action(&self, request: Request<Action>) -> Result<Response<Self::DoActionStream>, Status> {
        let action = request.into_inner();
        if action.r#type != PING {
            return Err(Status::invalid_argument(format!("unknown action '{}'", action.r#type)));
        }
        let answer = arrow_flight::Result { body: self.id.clone().into_bytes().into() };
        Ok(Response::new(Box::pin(futures::stream::iter([Ok(answer)]))))
    }

    async fn list_actions(&self, _request: Request<Empty>) -> Result<Response<Self::ListActionsStream>, Status> {
        let ping = ActionType { r#type: PING.into(), description: "the worker's id".into() };
        Ok(Response::new(Box::pin(futures::stream::iter([Ok(ping)]))))
    }
}

/// Refuses every call that does not carry `secret` as its bearer token.
fn require_secret(secret: String) -> impl FnMut(Request<()>) -> Result<Request<()>, Status> + Clone {
    move |request: Request<()>| {
        let given = request.metadata().get("authorization").and_then(|v| v.to_str().ok());
        if crate::bearer::matches(given, &secret) {
            Ok(request)
        } else {
            Err(Status::unauthenticated("this port answers only the controller and workers holding the cluster secret"))
        }
    }
}

/// Serves a worker's Flight port on `listener`, answering only calls with `secret`.
pub(crate) fn serve_flight(
    listener: TcpListener,
    id: String,
    exchange: Arc<FlightExchange>,
    secret: &str,
) -> tokio::task::JoinHandle<Result<(), tonic::transport::Error>> {
    let service =
        FlightServiceServer::with_interceptor(WorkerFlight { id, exchange }, require_secret(secret.to_string()));
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tokio::spawn(tonic::transport::Server::builder().add_service(service).serve_with_incoming(incoming))
}

/// Calls the worker at `address` with `ping`, carrying `secret`: its id.
pub async fn ping(address: &str, secret: &str) -> Result<String, String> {
    let mut client = FlightClients::new(secret)?.connect_with(address, Some(CALL_TIMEOUT)).await?;
    let action = Action { r#type: PING.into(), body: Default::default() };
    let mut answers = client.do_action(action).await.map_err(|e| e.message().to_string())?.into_inner();
    match answers.message().await {
        Ok(Some(answer)) => Ok(String::from_utf8_lossy(&answer.body).into_owned()),
        Ok(None) => Err("no answer".into()),
        Err(e) => Err(e.message().to_string()),
    }
}

/// Runs the worker until the process ends: its Flight port, then registration and heartbeats.
/// Calls `on_bound` with the bound address of the Flight port.
pub async fn run(config: WorkerConfig, on_bound: impl FnOnce(SocketAddr)) -> Result<(), String> {
    if config.secret.is_empty() {
        return Err("a worker needs the cluster secret (--cluster-secret or WEIR_CLUSTER_SECRET), the same as the controller's: its port must not answer anyone else".into());
    }
    if config.slots == 0 {
        return Err("a worker needs at least one slot".into());
    }
    let listener =
        TcpListener::bind(config.listen).await.map_err(|e| format!("listening on {}: {e}", config.listen))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    let advertise = match &config.advertise {
        Some(address) => address.clone(),
        None if bound.ip().is_unspecified() => {
            return Err(format!(
                "listening on {bound}: say with --advertise HOST:PORT where the controller reaches this worker"
            ));
        }
        None => bound.to_string(),
    };
    let exchange = FlightExchange::new(FlightClients::new(&config.secret)?);
    let server = serve_flight(listener, config.id.clone(), exchange, &config.secret);
    tracing::info!(id = %config.id, %bound, %advertise, controller = %config.controller, "weir worker is listening");
    on_bound(bound);
    let registration = Registration { id: config.id.clone(), address: advertise, slots: config.slots };
    tokio::select! {
        served = server => match served {
            Ok(Ok(())) => Err("the worker's Flight port closed".into()),
            Ok(Err(e)) => Err(format!("the worker's Flight port failed: {e}")),
            Err(e) => Err(format!("the worker's Flight port failed: {e}")),
        },
        never = keep_registered(&config, &registration) => never,
    }
}

/// Registers, then heartbeats; registers again whenever the controller does not know this
/// worker. Ends only with an error no retry can mend (a refused secret).
async fn keep_registered(config: &WorkerConfig, registration: &Registration) -> Result<(), String> {
    let http = reqwest::Client::builder().timeout(CALL_TIMEOUT).build().map_err(|e| e.to_string())?;
    let base = config.controller.trim_end_matches('/');
    let (register_url, heartbeat_url) =
        (format!("{base}/api/v1/cluster/register"), format!("{base}/api/v1/cluster/heartbeat"));
    let heartbeat = serde_json::to_vec(&Heartbeat { id: config.id.clone() }).map_err(|e| e.to_string())?;
    let registration = serde_json::to_vec(registration).map_err(|e| e.to_string())?;
    loop {
        let answer = http.post(&register_url).bearer_auth(&config.secret).body(registration.clone()).send().await;
        let interval = match answer {
            Ok(answer) if answer.status().is_success() => {
                let body = answer.bytes().await.map_err(|e| e.to_string())?;
                let registered: Registered = serde_json::from_slice(&body)
                    .map_err(|e| format!("the controller's answer to the registration: {e}"))?;
                Duration::from_millis(registered.heartbeat_interval_ms)
            }
            Ok(answer) if matches!(answer.status().as_u16(), 401 | 403) => {
                let status = answer.status();
                let message = answer.text().await.unwrap_or_default();
                return Err(format!("the controller refused this worker ({status}): {message}"));
            }
            Ok(answer) => {
                let status = answer.status();
                tracing::warn!("registering with the controller: {status} {}", answer.text().await.unwrap_or_default());
                tokio::time::sleep(RETRY_EVERY).await;
                continue;
            }
            Err(e) => {
                tracing::warn!("the controller at {base} cannot be reached: {e}; trying again");
                tokio::time::sleep(RETRY_EVERY).await;
                continue;
            }
        };
        tracing::info!(id = %config.id, "registered with the controller at {base}");
        loop {
            tokio::time::sleep(interval).await;
            match http.post(&heartbeat_url).bearer_auth(&config.secret).body(heartbeat.clone()).send().await {
                Ok(answer) if answer.status().is_success() => {}
                Ok(answer) if answer.status().as_u16() == 404 => {
                    tracing::warn!(
                        "the controller does not know this worker (restarted, or declared it lost): registering again"
                    );
                    break;
                }
                Ok(answer) => tracing::warn!("heartbeat: {}", answer.status()),
                Err(e) => tracing::warn!("heartbeat: {e}"),
            }
        }
    }
}
