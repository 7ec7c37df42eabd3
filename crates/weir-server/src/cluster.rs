//! The controller's side of a cluster: the workers (`weir worker`) that joined this service,
//! watched by their heartbeats.
//!
//! A worker registers with its id, the address of its Arrow Flight port and its slots; the
//! controller first calls that port back (a `ping` action with the cluster secret), so a
//! worker is listed only once the controller can reach it and both hold the same secret. It then
//! heartbeats; one silent for longer than the timeout is declared lost (logged once), and its
//! next heartbeat is refused, so it registers again, as a Flink TaskManager whose heartbeat timed
//! out must. Placement ([`crate::placement`]) draws on the workers alive at each attempt.
//!
//! The cluster routes (`/api/v1/cluster/...`) take the cluster secret, never the API token: a
//! user's token does not make anyone a worker. A service started without a secret takes no
//! workers.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use crate::error::{ApiError, ApiResult};
use crate::flight_client::FlightClients;
use crate::store::now_ms;

/// `POST /api/v1/cluster/register`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Registration {
    pub id: String,
    /// Where the worker's Arrow Flight port is reached (`host:port`).
    pub address: String,
    pub slots: u32,
}

/// The answer to a registration: how often to heartbeat.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Registered {
    pub heartbeat_interval_ms: u64,
    pub timeout_ms: u64,
}

/// `POST /api/v1/cluster/heartbeat`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Heartbeat {
    pub id: String,
}

/// A worker as `GET /api/v1/workers` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct WorkerView {
    pub id: String,
    pub address: String,
    pub slots: u32,
    /// `alive`, or `lost` (no heartbeat within the timeout).
    pub status: String,
    pub registered_at_ms: i64,
    pub last_heartbeat_ms: i64,
    /// How long ago its last heartbeat came.
    pub heartbeat_age_ms: u64,
}

struct Worker {
    address: String,
    slots: u32,
    registered_at_ms: i64,
    last_heartbeat_ms: i64,
    last_heartbeat: Instant,
    lost: bool,
}

/// The registry of workers.
pub struct Cluster {
    secret: Option<String>,
    timeout: Duration,
    workers: Mutex<BTreeMap<String, Worker>>,
}

impl Cluster {
    pub fn new(secret: Option<String>, timeout: Duration) -> Arc<Self> {
        Arc::new(Self { secret, timeout, workers: Mutex::default() })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Worker>> {
        self.workers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every worker that registered, lost ones too, by id.
    pub fn workers(&self) -> Vec<WorkerView> {
        self.sweep();
        self.lock()
            .iter()
            .map(|(id, w)| WorkerView {
                id: id.clone(),
                address: w.address.clone(),
                slots: w.slots,
                status: if w.lost { "lost" } else { "alive" }.into(),
                registered_at_ms: w.registered_at_ms,
                last_heartbeat_ms: w.last_heartbeat_ms,
                heartbeat_age_ms: w.last_heartbeat.elapsed().as_millis() as u64,
            })
            .collect()
    }

    /// Calls to workers with the cluster secret; none when this service takes no workers.
    pub fn clients(&self) -> Option<FlightClients> {
        self.secret.as_deref().and_then(|secret| FlightClients::new(secret).ok())
    }

    /// The workers alive now, as placement takes them: Flight address and slots, by id.
    pub fn alive(&self) -> Vec<(String, u32)> {
        self.sweep();
        self.lock().values().filter(|w| !w.lost).map(|w| (w.address.clone(), w.slots)).collect()
    }

    /// The workers alive now, waiting up to `within` for one when there is none (a controller
    /// just started, before its workers found it again).
    pub async fn alive_within(&self, within: Duration) -> Vec<(String, u32)> {
        let deadline = Instant::now() + within;
        loop {
            let alive = self.alive();
            if !alive.is_empty() || Instant::now() >= deadline {
                return alive;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The worker at `address` could not be reached or its attempt's call broke: it is
    /// declared lost now rather than at its heartbeat timeout, so the next attempt is not
    /// placed on it. A worker still running registers again at its next heartbeat (and is
    /// called back first).
    pub fn unreachable(&self, address: &str, why: &str) {
        for (id, worker) in self.lock().iter_mut() {
            if worker.address == address && !worker.lost {
                worker.lost = true;
                tracing::warn!(worker = %id, %address, "worker lost: {why}");
            }
        }
    }

    /// Declares lost every worker silent for longer than the timeout.
    fn sweep(&self) {
        for (id, worker) in self.lock().iter_mut() {
            let silent = worker.last_heartbeat.elapsed();
            if !worker.lost && silent > self.timeout {
                worker.lost = true;
                tracing::warn!(worker = %id, address = %worker.address, "worker lost: no heartbeat for {silent:?}");
            }
        }
    }

    /// Sweeps every quarter of the timeout, for as long as the service runs, so a loss is
    /// logged when it happens rather than when someone looks.
    pub fn watch(self: Arc<Self>) {
        let every = (self.timeout / 4).max(Duration::from_millis(50));
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            loop {
                ticks.tick().await;
                self.sweep();
            }
        });
    }

    async fn register(&self, registration: Registration) -> ApiResult<Registered> {
        let Registration { id, address, slots } = registration;
        if id.is_empty() || slots == 0 {
            return Err(ApiError::bad_request("a worker needs an id and at least one slot"));
        }
        let secret = self.secret.clone().unwrap_or_default();
        let answered = crate::worker::ping(&address, &secret)
            .await
            .map_err(|e| ApiError::bad_request(format!("worker '{id}' at {address} did not answer: {e}")))?;
        if answered != id {
            return Err(ApiError::bad_request(format!("the worker at {address} is '{answered}', not '{id}'")));
        }
        let now = now_ms();
        let worker = Worker {
            address,
            slots,
            registered_at_ms: now,
            last_heartbeat_ms: now,
            last_heartbeat: Instant::now(),
            lost: false,
        };
        tracing::info!(worker = %id, address = %worker.address, slots, "worker registered");
        self.lock().insert(id, worker);
        let timeout_ms = self.timeout.as_millis() as u64;
        Ok(Registered { heartbeat_interval_ms: (timeout_ms / 5).max(20), timeout_ms })
    }

    /// A known, live worker's heartbeat; anyone else must register (again).
    fn heartbeat(&self, id: &str) -> ApiResult<()> {
        self.sweep();
        match self.lock().get_mut(id) {
            Some(worker) if !worker.lost => {
                worker.last_heartbeat = Instant::now();
                worker.last_heartbeat_ms = now_ms();
                Ok(())
            }
            Some(_) => Err(ApiError::not_found(format!("worker '{id}' was declared lost: register again"))),
            None => Err(ApiError::not_found(format!("no worker '{id}': register first"))),
        }
    }
}

/// The routes workers use, under `/api/v1/cluster`, each needing the cluster secret.
pub fn routes(cluster: Arc<Cluster>) -> Router {
    Router::new()
        .route("/register", post(register))
        .route("/heartbeat", post(heartbeat))
        .route_layer(middleware::from_fn_with_state(cluster.clone(), authorize))
        .with_state(cluster)
}

async fn authorize(State(cluster): State<Arc<Cluster>>, request: Request, next: Next) -> Response {
    let Some(secret) = &cluster.secret else {
        return ApiError::forbidden("this service takes no workers: start it with --cluster-secret").into_response();
    };
    let given = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    if !crate::bearer::matches(given, secret) {
        return ApiError::unauthorized().into_response();
    }
    next.run(request).await
}

async fn register(
    State(cluster): State<Arc<Cluster>>,
    bytes: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<Registered>> {
    Ok(Json(cluster.register(crate::api::body(bytes)?).await?))
}

async fn heartbeat(State(cluster): State<Arc<Cluster>>, bytes: Result<Bytes, BytesRejection>) -> ApiResult<StatusCode> {
    let Heartbeat { id } = crate::api::body(bytes)?;
    cluster.heartbeat(&id)?;
    Ok(StatusCode::NO_CONTENT)
}
