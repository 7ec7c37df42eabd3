//! Pipelines on workers: the controller places each attempt's tasks over the workers that are
//! alive now and opens the attempt on each of them over Flight; a worker plans the pipeline
//! again from what the controller sends ([`PipelineSpec`]: its SQL, the catalog, its options
//! and name, where its checkpoints are), so that both hold the same graph, and runs its part.
//!
//! One `do_exchange` call per worker and attempt carries the checkpoint protocol: the
//! controller's messages to tasks (trigger, complete, abort, shutdown) one way, the tasks'
//! events (acknowledgements with their state files, declines, ends, failures) the other, as
//! JSON in `app_metadata`. The call's end is the attempt's end: a controller that drops it
//! stops the tasks there; a worker whose call breaks is lost, and the attempt restarts from the
//! last completed checkpoint on the workers alive then.

use std::path::PathBuf;
use std::sync::Arc;

use arrow_flight::FlightData;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use weir_engine::remote::{AttemptRequest, FromWorker, Placement, ToTask, Workers};
use weir_engine::{Graph, PipelineConfig};
use weir_sql::{FileRoots, Output, PipelineOptions, Session};

use crate::cluster::Cluster;
use crate::exchange::Command;
use crate::flight_client::{FlightClients, first_command, message_of, read_message, stream_of};

/// How long an attempt waits for a worker when none is alive.
const WAIT_FOR_WORKERS: std::time::Duration = std::time::Duration::from_secs(10);

/// Everything a worker needs to plan a pipeline as the controller did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PipelineSpec {
    pub name: String,
    pub sql: String,
    /// The session options it was created with (JSON, as stored).
    pub options: String,
    /// The catalog's statements, in order.
    pub catalog: Vec<String>,
    /// Set when the pipeline was resumed at another parallelism.
    pub parallelism: Option<usize>,
    /// Where filesystem tables' relative paths go, and the other directories they may use.
    pub files_root: PathBuf,
    pub files_allowed: Vec<PathBuf>,
    /// Where its checkpoints are: the service's checkpoint URL (or directory) and options,
    /// and the pipeline's place under it.
    pub checkpoint_url: String,
    pub checkpoint_options: Vec<(String, String)>,
    pub checkpoint_path: String,
}

impl PipelineSpec {
    /// Plans the pipeline.
    pub async fn plan(&self) -> Result<(Graph, PipelineConfig), String> {
        let mut session = Session::new();
        session.files = Some(FileRoots { root: self.files_root.clone(), allowed: self.files_allowed.clone() });
        for sql in &self.catalog {
            session.execute(sql).await.map_err(|e| format!("replaying the catalog ({sql}): {e}"))?;
        }
        session.options = PipelineOptions::from_json(&self.options).map_err(|e| format!("the options: {e}"))?;
        let outputs = session.execute_named(&self.sql, &self.name).await.map_err(|e| e.to_string())?;
        let Some(Output::Pipeline(planned)) = outputs.into_iter().next_back() else {
            return Err("the SQL does not plan a pipeline".into());
        };
        let graph = match self.parallelism {
            Some(parallelism) => planned.graph.with_parallelism(parallelism),
            None => planned.graph,
        };
        Ok((graph, planned.config))
    }

    /// Its checkpoint store.
    pub fn store(&self) -> Result<weir_state::StateStore, String> {
        weir_state::CheckpointStorage::open(&self.checkpoint_url, &self.checkpoint_options)
            .and_then(|storage| storage.store(&self.checkpoint_path))
            .map_err(|e| format!("the checkpoints at {}: {e}", self.checkpoint_url))
    }
}

/// The first message of an attempt's call.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AttemptOpen {
    pub request: AttemptRequest,
    pub spec: PipelineSpec,
}

/// One pipeline's way to the service's workers.
pub struct ClusterWorkers {
    pub cluster: Arc<Cluster>,
    pub clients: FlightClients,
    pub spec: PipelineSpec,
}

#[async_trait::async_trait]
impl Workers for ClusterWorkers {
    /// Of the workers alive now. With none, the attempt fails (and is retried with the
    /// restart back-off): a service that takes workers runs its pipelines on them only, so
    /// that a controller restarted before its workers found it again does not run them itself.
    async fn slots(&self) -> weir_engine::Result<usize> {
        let alive = self.cluster.alive_within(WAIT_FOR_WORKERS).await;
        if alive.is_empty() {
            return Err(weir_engine::Error::Stopped(format!(
                "no worker is alive to run the pipeline on (waited {WAIT_FOR_WORKERS:?}): start one with weir worker --controller URL --cluster-secret S"
            )));
        }
        Ok(alive.iter().map(|(_, slots)| *slots as usize).sum())
    }

    fn slots_now(&self) -> usize {
        self.cluster.alive().iter().map(|(_, slots)| *slots as usize).sum()
    }

    /// Over the workers alive now.
    async fn place(&self, parallelisms: &[usize]) -> weir_engine::Result<Placement> {
        Placement::spread(parallelisms, &self.cluster.alive())
    }

    fn lost(&self, address: &str, why: &str) {
        self.cluster.unreachable(address, why);
    }

    async fn open(
        &self,
        request: AttemptRequest,
    ) -> weir_engine::Result<(mpsc::UnboundedSender<ToTask>, mpsc::UnboundedReceiver<FromWorker>)> {
        let address = request.placement.workers[request.worker].clone();
        let failed =
            |why: String| weir_engine::Error::Stopped(format!("opening the attempt on the worker at {address}: {why}"));
        let mut client = match self.clients.connect(&address).await {
            Ok(client) => client,
            Err(why) => {
                self.cluster.unreachable(&address, &why);
                return Err(failed(why));
            }
        };
        let open = Command::Attempt(Box::new(AttemptOpen { request, spec: self.spec.clone() }));
        let descriptor = open.descriptor().map_err(|s| failed(s.message().to_string()))?;
        let (out, out_rx) = mpsc::channel::<FlightData>(64);
        out.send(first_command(descriptor)).await.map_err(|_| failed("the call closed".into()))?;
        let mut answers =
            client.do_exchange(stream_of(out_rx)).await.map_err(|s| failed(s.message().to_string()))?.into_inner();
        let (to_tasks, mut to_tasks_rx) = mpsc::unbounded_channel::<ToTask>();
        let (events, events_rx) = mpsc::unbounded_channel::<FromWorker>();
        // Ends with the attempt: when the coordinator drops every line (the call ends, and the
        // worker stops its tasks), or when the worker's answers end.
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    control = to_tasks_rx.recv() => {
                        let Some(control) = control else { return };
                        let Ok(message) = message_of(&control) else { return };
                        if out.send(message).await.is_err() {
                            return;
                        }
                    }
                    answer = answers.message() => {
                        let Ok(Some(answer)) = answer else { return };
                        match read_message::<FromWorker>(&answer) {
                            Ok(event) => {
                                let _ = events.send(event);
                            }
                            Err(why) => {
                                tracing::warn!(%address, "a worker's message: {why}");
                                return;
                            }
                        }
                    }
                }
            }
        });
        Ok((to_tasks, events_rx))
    }
}
