//! Ending a Kafka transaction that another producer instance began.
//!
//! librdkafka can only commit the transaction its own producer instance has open. After a crash
//! between "checkpoint n complete" and the commit, the transaction of checkpoint n is still open
//! on the broker, and the process that began it is gone. What remains is what the checkpoint
//! recorded: the transactional id, the producer id and the producer epoch. With those, Kafka's
//! own requests finish the job: FindCoordinator (key type "transaction") locates the transaction
//! coordinator, and EndTxn(commit) with that id and epoch commits it, exactly as the original
//! producer would have. DescribeTransactions tells the coordinator's view of an id: its state,
//! its current producer id and epoch, and the partitions in the open transaction.
//!
//! The answers to EndTxn must be told apart by the sink (see ARCHITECTURE.md): "no error" means
//! committed now or already before (idempotent); INVALID_TXN_STATE means the transaction was
//! aborted; PRODUCER_FENCED / INVALID_PRODUCER_EPOCH mean the epoch moved on (the broker
//! aborted it on timeout, or a newer producer of the id fenced it); INVALID_PRODUCER_ID_MAPPING
//! means the broker no longer maps this producer id to the transactional id.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use kafka_protocol::ResponseError;
use kafka_protocol::messages::{
    DescribeTransactionsRequest, EndTxnRequest, FindCoordinatorRequest, InitProducerIdRequest, ProducerId,
    TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use tracing::debug;

use super::security::ClientSecurity;
use super::wire::Connection;
use crate::error::{Error, Result};

/// FindCoordinator v2: the last version with a single key, the one librdkafka sends.
const FIND_COORDINATOR_VERSION: i16 = 2;
/// EndTxn v1: the version librdkafka's own commit sends, so a transaction begun by librdkafka
/// (the pre-KIP-890 protocol, no epoch bump on commit) is ended on the terms it was begun with.
const END_TXN_VERSION: i16 = 1;
const DESCRIBE_TRANSACTIONS_VERSION: i16 = 0;
/// InitProducerId v4: the version librdkafka's `init_transactions` sends.
const INIT_PRODUCER_ID_VERSION: i16 = 4;
/// FindCoordinator's key type for transaction coordinators (0 is consumer groups).
const COORDINATOR_KEY_TYPE_TRANSACTION: i8 = 1;

/// A transaction left open ("pre-committed") by a sink, as a checkpoint records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingTransaction {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
}

/// How to end a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransactionResult {
    Commit,
    Abort,
}

/// The coordinator's final answer to EndTxn, once retriable answers are retried away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndTxnOutcome {
    /// Ended as asked, now or already before (EndTxn is idempotent for the same result).
    Completed,
    /// The coordinator refused: the transaction cannot be ended this way any more. The code
    /// says why (see the module documentation).
    Rejected(ResponseError),
}

/// Where a transactional id's transaction is, as its coordinator says (Kafka's
/// `TransactionState`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransactionState {
    /// No transaction since the last one ended (or since the id was initialised).
    Empty,
    /// A transaction is open: records may be in it, and it holds back read_committed readers.
    Ongoing,
    /// Committing: decided, the markers not all written yet.
    PrepareCommit,
    /// Aborting: decided, the markers not all written yet.
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
    /// Being fenced: the epoch moves on and the open transaction is aborted.
    PrepareEpochFence,
    Dead,
    /// A state this client does not know (a newer broker's).
    Other(String),
}

impl TransactionState {
    fn from_name(name: &str) -> Self {
        match name {
            "Empty" => Self::Empty,
            "Ongoing" => Self::Ongoing,
            "PrepareCommit" => Self::PrepareCommit,
            "PrepareAbort" => Self::PrepareAbort,
            "CompleteCommit" => Self::CompleteCommit,
            "CompleteAbort" => Self::CompleteAbort,
            "PrepareEpochFence" => Self::PrepareEpochFence,
            "Dead" => Self::Dead,
            other => Self::Other(other.to_string()),
        }
    }

    /// Whether a transaction is open or being ended: it still holds back read_committed readers.
    pub fn is_unresolved(&self) -> bool {
        matches!(self, Self::Ongoing | Self::PrepareCommit | Self::PrepareAbort | Self::PrepareEpochFence)
    }
}

/// The transaction coordinator's view of a transactional id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionDescription {
    pub state: TransactionState,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub timeout_ms: i32,
    /// (topic, partition) pairs in the current transaction.
    pub partitions: Vec<(String, i32)>,
}

/// Talks to transaction coordinators with plain Kafka protocol requests.
#[derive(Debug, Clone)]
pub struct TransactionsClient {
    bootstrap: Vec<String>,
    security: ClientSecurity,
    request_timeout: Duration,
    retry_for: Duration,
    /// Shared by the client's clones.
    cache: Arc<ClientCache>,
}

/// What a client keeps between requests: recovery, every pre-commit and every close ask the
/// coordinator, and a new connection each time costs a TCP connect, a TLS handshake and a
/// SCRAM exchange (its PBKDF2 included).
#[derive(Default)]
struct ClientCache {
    /// The TLS configuration, read once (CA, certificate and key files).
    tls: OnceLock<Arc<rustls::ClientConfig>>,
    /// An idle connection per broker (`host:port`): taken for a request, put back after a
    /// good answer; one that failed is dropped.
    idle: Mutex<HashMap<String, Connection>>,
    /// The coordinator of each transactional id asked about, forgotten when a request to it
    /// fails in a way worth retrying (it may have moved).
    coordinators: Mutex<HashMap<String, String>>,
    /// Connections opened, for tests and diagnostics.
    opened: AtomicU64,
}

impl std::fmt::Debug for ClientCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCache").field("opened", &self.opened.load(Ordering::Relaxed)).finish_non_exhaustive()
    }
}

impl TransactionsClient {
    /// `bootstrap` is a comma-separated list of `host:port`, as in `bootstrap.servers`.
    pub fn new(bootstrap: &str) -> Self {
        Self {
            bootstrap: bootstrap.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect(),
            security: ClientSecurity::default(),
            request_timeout: Duration::from_secs(10),
            retry_for: Duration::from_secs(60),
            cache: Arc::default(),
        }
    }

    /// How many broker connections this client (and its clones) opened so far.
    pub fn connections_opened(&self) -> u64 {
        self.cache.opened.load(Ordering::Relaxed)
    }

    /// Connects with TLS and SASL as `security` says (plain TCP without it).
    pub fn with_security(mut self, security: ClientSecurity) -> Self {
        self.security = security;
        self.cache = Arc::default();
        self
    }

    /// How long retriable answers (coordinator loading or moving, a concurrent end in
    /// progress, a broker that is away) are retried before giving up.
    pub fn with_retry_for(mut self, retry_for: Duration) -> Self {
        self.retry_for = retry_for;
        self
    }

    /// The `host:port` of the transaction coordinator for `transactional_id`.
    pub async fn find_coordinator(&self, transactional_id: &str) -> Result<String> {
        self.retrying("FindCoordinator", transactional_id, || self.find_coordinator_once(transactional_id)).await
    }

    /// The coordinator's view of `transactional_id`; `None` if it has never seen the id (or
    /// the id expired).
    pub async fn describe(&self, transactional_id: &str) -> Result<Option<TransactionDescription>> {
        self.retrying("DescribeTransactions", transactional_id, || async {
            let mut conn = self.coordinator_connection(transactional_id).await?;
            let request = DescribeTransactionsRequest::default()
                .with_transactional_ids(vec![TransactionalId(StrBytes::from_string(transactional_id.to_string()))]);
            let response = conn.send(&request, DESCRIBE_TRANSACTIONS_VERSION).await?;
            self.release(conn);
            let state = response.transaction_states.into_iter().next().ok_or_else(|| {
                Error::Protocol(format!("DescribeTransactions for '{transactional_id}' returned no state"))
            })?;
            match ResponseError::try_from_code(state.error_code) {
                None => Ok(Some(TransactionDescription {
                    state: TransactionState::from_name(state.transaction_state.as_str()),
                    producer_id: state.producer_id.0,
                    producer_epoch: state.producer_epoch,
                    timeout_ms: state.transaction_timeout_ms,
                    partitions: state
                        .topics
                        .into_iter()
                        .flat_map(|t| {
                            let topic = t.topic.0.as_str().to_string();
                            t.partitions.into_iter().map(move |p| (topic.clone(), p))
                        })
                        .collect(),
                })),
                Some(ResponseError::TransactionalIdNotFound) => Ok(None),
                Some(code) => Err(broker_error("DescribeTransactions", transactional_id, code)),
            }
        })
        .await
    }

    /// Ends `pending` with `result` (EndTxn), as the producer that began it would have.
    pub async fn end_transaction(
        &self,
        pending: &PendingTransaction,
        result: TransactionResult,
    ) -> Result<EndTxnOutcome> {
        let id = pending.transactional_id.as_str();
        self.retrying("EndTxn", id, || async {
            let mut conn = self.coordinator_connection(id).await?;
            let request = EndTxnRequest::default()
                .with_transactional_id(TransactionalId(StrBytes::from_string(id.to_string())))
                .with_producer_id(ProducerId(pending.producer_id))
                .with_producer_epoch(pending.producer_epoch)
                .with_committed(result == TransactionResult::Commit);
            let response = conn.send(&request, END_TXN_VERSION).await?;
            self.release(conn);
            match ResponseError::try_from_code(response.error_code) {
                None => Ok(EndTxnOutcome::Completed),
                Some(
                    code @ (ResponseError::InvalidTxnState
                    | ResponseError::ProducerFenced
                    | ResponseError::InvalidProducerEpoch
                    | ResponseError::InvalidProducerIdMapping),
                ) => Ok(EndTxnOutcome::Rejected(code)),
                Some(code) => Err(broker_error("EndTxn", id, code)),
            }
        })
        .await
    }

    /// Fences `transactional_id` and aborts its open transaction, if any, as a new producer's
    /// `init_transactions` would (InitProducerId bumps the epoch; the coordinator aborts what
    /// the old epoch left open). `timeout_ms` becomes the id's transaction timeout.
    pub async fn fence(&self, transactional_id: &str, timeout_ms: i32) -> Result<()> {
        self.retrying("InitProducerId", transactional_id, || async {
            let mut conn = self.coordinator_connection(transactional_id).await?;
            let request = InitProducerIdRequest::default()
                .with_transactional_id(Some(TransactionalId(StrBytes::from_string(transactional_id.to_string()))))
                .with_transaction_timeout_ms(timeout_ms);
            let response = conn.send(&request, INIT_PRODUCER_ID_VERSION).await?;
            self.release(conn);
            match ResponseError::try_from_code(response.error_code) {
                None => Ok(()),
                Some(code) => Err(broker_error("InitProducerId", transactional_id, code)),
            }
        })
        .await
    }

    async fn find_coordinator_once(&self, transactional_id: &str) -> Result<String> {
        let mut last_error = None;
        for broker in &self.bootstrap {
            let answer = async {
                let mut conn = self.connection(broker).await?;
                let request = FindCoordinatorRequest::default()
                    .with_key(StrBytes::from_string(transactional_id.to_string()))
                    .with_key_type(COORDINATOR_KEY_TYPE_TRANSACTION);
                let response = conn.send(&request, FIND_COORDINATOR_VERSION).await?;
                self.release(conn);
                match ResponseError::try_from_code(response.error_code) {
                    None => Ok(format!("{}:{}", response.host.as_str(), response.port)),
                    Some(code) => Err(broker_error("FindCoordinator", transactional_id, code)),
                }
            }
            .await;
            match answer {
                Ok(coordinator) => return Ok(coordinator),
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.unwrap_or_else(|| Error::Protocol("no bootstrap servers given".to_string())))
    }

    /// A connection to `transactional_id`'s coordinator (remembered, or found).
    async fn coordinator_connection(&self, transactional_id: &str) -> Result<Connection> {
        let known = lock(&self.cache.coordinators).get(transactional_id).cloned();
        let coordinator = match known {
            Some(coordinator) => coordinator,
            None => {
                let found = self.find_coordinator_once(transactional_id).await?;
                lock(&self.cache.coordinators).insert(transactional_id.to_string(), found.clone());
                found
            }
        };
        self.connection(&coordinator).await
    }

    /// An idle connection to `broker`, or a new one.
    async fn connection(&self, broker: &str) -> Result<Connection> {
        if let Some(idle) = lock(&self.cache.idle).remove(broker) {
            return Ok(idle);
        }
        let tls = match &self.security.tls {
            None => None,
            Some(settings) => Some(match self.cache.tls.get() {
                Some(config) => config.clone(),
                None => {
                    let config = ClientSecurity::tls_config(settings)?;
                    self.cache.tls.get_or_init(|| config).clone()
                }
            }),
        };
        let connection = Connection::connect(broker, self.request_timeout, tls, self.security.sasl.as_ref()).await?;
        self.cache.opened.fetch_add(1, Ordering::Relaxed);
        Ok(connection)
    }

    /// Keeps `connection` for the next request to its broker.
    fn release(&self, connection: Connection) {
        lock(&self.cache.idle).insert(connection.broker().to_string(), connection);
    }

    /// Runs `attempt` until it succeeds, fails for good, or retriable failures outlast
    /// `retry_for`; back-off doubles from 50 ms to 1 s.
    async fn retrying<T, F, Fut>(&self, request: &'static str, transactional_id: &str, mut attempt: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let started = Instant::now();
        let mut backoff = Duration::from_millis(50);
        loop {
            match attempt().await {
                Err(e) if is_retriable(&e) => {
                    if started.elapsed() >= self.retry_for {
                        return Err(Error::RetriesExhausted {
                            request,
                            transactional_id: transactional_id.to_string(),
                            waited: started.elapsed(),
                            last: e.to_string(),
                        });
                    }
                    debug!(request, transactional_id, error = %e, "retrying");
                    lock(&self.cache.coordinators).remove(transactional_id);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
                other => return other,
            }
        }
    }
}

/// The cache's maps hold no invariant a panic could break half-way: a poisoned lock is used as is.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn broker_error(request: &'static str, transactional_id: &str, code: ResponseError) -> Error {
    Error::Broker { request, transactional_id: transactional_id.to_string(), code }
}

/// Connection failures, and the coordinator answers that mean "ask again (maybe elsewhere)".
fn is_retriable(error: &Error) -> bool {
    match error {
        Error::Io { .. } => true,
        Error::Broker { code, .. } => matches!(
            code,
            ResponseError::CoordinatorLoadInProgress
                | ResponseError::CoordinatorNotAvailable
                | ResponseError::NotCoordinator
                | ResponseError::ConcurrentTransactions
        ),
        _ => false,
    }
}
