//! `weir worker` joining `weir serve`: registration with the cluster secret, heartbeats, a
//! worker declared lost when killed, workers finding a restarted controller again, a worker
//! port that answers no one without the secret, and a Kafka -> GROUP BY -> Kafka pipeline
//! spread over three workers (its hash exchange over Arrow Flight between them) that stays
//! exactly-once while workers are SIGKILLed under it.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::service::Server;

const WEIR: &str = env!("CARGO_BIN_EXE_weir");
const SECRET: &str = "cluster-s3cret";

/// A `weir worker` process.
struct Worker {
    child: Child,
    /// Its Flight port's address.
    address: String,
}

impl Worker {
    fn start(controller: &str, id: &str, slots: u32) -> Self {
        Self::start_logged(controller, id, slots, None)
    }

    /// The same, its log (info and up) appended to `log`.
    fn start_logged(controller: &str, id: &str, slots: u32, log: Option<&std::path::Path>) -> Self {
        let stderr = match log {
            Some(log) => Stdio::from(std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap()),
            None => Stdio::null(),
        };
        let mut child = Command::new(WEIR)
            .args(["worker", "--controller", controller, "--listen", "127.0.0.1:0", "--id", id])
            .args(["--slots", &slots.to_string(), "--cluster-secret", SECRET])
            .env("RUST_LOG", if log.is_some() { "info" } else { "warn" })
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let address =
            line.trim().strip_prefix("weir worker listening on ").unwrap_or_else(|| panic!("{line}")).to_string();
        Self { child, address }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Worker id -> (status, slots, address), as `GET /api/v1/workers` lists them.
fn workers(server: &Server) -> Vec<(String, String, u64, String)> {
    let (status, list) = server.json("GET", "/api/v1/workers", None);
    assert_eq!(status, 200, "{list}");
    let field = |w: &Value, name: &str| w[name].as_str().unwrap_or_default().to_string();
    list.as_array()
        .unwrap()
        .iter()
        .map(|w| (field(w, "id"), field(w, "status"), w["slots"].as_u64().unwrap_or(0), field(w, "address")))
        .collect()
}

/// Waits until the listed workers' (id, status) are `wanted`.
fn wait_for_workers(server: &Server, wanted: &[(&str, &str)], within: Duration) {
    let started = Instant::now();
    loop {
        let seen: Vec<(String, String)> = workers(server).into_iter().map(|(id, status, ..)| (id, status)).collect();
        if seen.iter().map(|(i, s)| (i.as_str(), s.as_str())).eq(wanted.iter().copied()) {
            return;
        }
        assert!(started.elapsed() < within, "workers {seen:?}, not {wanted:?} after {within:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn workers_register_are_declared_lost_when_killed_and_find_a_restarted_controller() {
    let data = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let flags = ["--cluster-secret", SECRET, "--worker-timeout-ms", "1500"];
    let mut server = Server::start_at(&listen, data.path(), &flags);
    let controller = format!("http://{listen}");
    let a = Worker::start(&controller, "worker-a", 2);
    let mut b = Worker::start(&controller, "worker-b", 3);
    wait_for_workers(&server, &[("worker-a", "alive"), ("worker-b", "alive")], Duration::from_secs(20));
    let listed = workers(&server);
    assert_eq!((listed[0].2, listed[0].3.as_str()), (2, a.address.as_str()), "{listed:?}");
    assert_eq!((listed[1].2, listed[1].3.as_str()), (3, b.address.as_str()), "{listed:?}");
    // The same as a statement, for every client (weir sql, the web page, psql).
    let (status, results) = server.sql("SHOW WORKERS");
    assert_eq!(status, 200, "{results}");
    let rows = &results[0]["rows"];
    assert_eq!(rows[0].as_array().unwrap()[..4], ["worker-a", "alive", "2", a.address.as_str()], "{results}");
    assert_eq!(rows[1][0], "worker-b", "{results}");

    // Alive for longer than the timeout: the heartbeats keep it so.
    std::thread::sleep(Duration::from_millis(2500));
    wait_for_workers(&server, &[("worker-a", "alive"), ("worker-b", "alive")], Duration::from_secs(1));

    // SIGKILLed: declared lost once the timeout passes; the other stays.
    b.child.kill().unwrap();
    b.child.wait().unwrap();
    wait_for_workers(&server, &[("worker-a", "alive"), ("worker-b", "lost")], Duration::from_secs(10));

    // The controller killed and started again where the workers look for it: the one still
    // running finds it (its heartbeat is refused, it registers again).
    server.kill();
    drop(server);
    let server = Server::start_at(&listen, data.path(), &flags);
    wait_for_workers(&server, &[("worker-a", "alive")], Duration::from_secs(20));
}

#[test]
fn only_holders_of_the_cluster_secret_join_or_reach_a_worker() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &["--cluster-secret", SECRET]);
    let controller = format!("http://{}", server.address);

    // A worker with another secret: the controller refuses it, and it says so and stops.
    let refused = Command::new(WEIR)
        .args(["worker", "--controller", &controller, "--id", "intruder", "--cluster-secret", "guess"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && stderr.contains("refused this worker (401"), "{stderr}");
    // Without a secret it does not start: its port would answer anyone.
    let bare = Command::new(WEIR)
        .args(["worker", "--controller", &controller])
        .env_remove("WEIR_CLUSTER_SECRET")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&bare.stderr);
    assert!(!bare.status.success() && stderr.contains("needs the cluster secret"), "{stderr}");

    // The worker's port answers the secret only.
    let worker = Worker::start(&controller, "worker-a", 1);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let ping = |secret: &str| runtime.block_on(weir_server::worker::ping(&worker.address, secret));
    assert_eq!(ping(SECRET).unwrap(), "worker-a");
    for wrong in ["", "guess"] {
        let error = ping(wrong).unwrap_err();
        assert!(error.contains("cluster secret"), "{error}");
    }
    wait_for_workers(&server, &[("worker-a", "alive")], Duration::from_secs(20));

    // The cluster routes take the secret, not the API token, and a service without a secret
    // takes no workers.
    let (status, body) = server.call("POST", "/api/v1/cluster/heartbeat", Some(br#"{"id": "worker-a"}"#));
    assert_eq!(status, 401, "{body}");
    let other = tempfile::tempdir().unwrap();
    let closed = Server::start(other.path(), &[]);
    let (status, body) = closed.call("POST", "/api/v1/cluster/register", Some(b"{}"));
    assert!(status == 403 && body.contains("--cluster-secret"), "{status} {body}");
}

/// Three workers of two slots, a tumbling-window GROUP BY at parallelism 3 from Kafka to an
/// upsert Kafka topic: every task runs on a worker (the controller only coordinates), the
/// hash exchange crosses workers over Flight. A random worker is SIGKILLed five times while
/// the pipeline runs (and a new one started in its place, as a supervisor would); each time the
/// pipeline restarts from its last checkpoint on the workers alive. Then the controller is
/// SIGKILLed and started again: the workers find it, and it resumes the pipeline on them. The
/// output, read read_committed, holds every window exactly once with the right values.
#[test]
fn a_pipeline_on_three_workers_is_exactly_once_through_worker_and_controller_sigkills() {
    on_three_workers_through_sigkills(&[]);
}

/// The same with the checkpoints on the test S3 server: the workers write their state there
/// (the controller passes them the URL and options), the controller its manifests.
#[test]
fn a_pipeline_on_three_workers_with_checkpoints_on_s3_is_exactly_once_through_sigkills() {
    use weir_state::test_servers::TestS3;

    let s3 = TestS3::get().unwrap_or_else(|e| panic!("no S3 server for tests: {e}"));
    let mut flags = vec!["--checkpoint-url".to_string(), s3.fresh_url("workers")];
    for (key, value) in s3.options() {
        flags.extend(["--checkpoint-option".to_string(), format!("{key}={value}")]);
    }
    let data = on_three_workers_through_sigkills(&flags);
    assert!(!data.path().join("pipelines").join("1").exists(), "checkpoints went to the data directory");
}

/// Three workers of `slots` slots joined to the controller at `controller` (their logs appended
/// to `log`), once it lists them alive.
fn three_workers(server: &Server, controller: &str, slots: u32, log: &std::path::Path) -> Vec<Worker> {
    let workers = (0..3).map(|n| Worker::start_logged(controller, &format!("worker-{n}"), slots, Some(log))).collect();
    wait_for_workers(
        server,
        &[("worker-0", "alive"), ("worker-1", "alive"), ("worker-2", "alive")],
        Duration::from_secs(20),
    );
    workers
}

/// Submits the exactly-once tumbling-window pipeline (Kafka -> GROUP BY -> upsert Kafka) at
/// parallelism 3: its output topics and its id.
fn submit_window_upsert_at_3(server: &Server) -> (Vec<String>, i64) {
    use crate::exactly_once::{Pipeline, outputs};

    let outputs = outputs(Pipeline::WindowUpsert);
    let sql = Pipeline::WindowUpsert
        .sql(&outputs, "exactly_once")
        .replace("SET parallelism = '2';", "SET parallelism = '3';");
    let (status, results) = server.sql(&sql);
    assert_eq!(status, 200, "{results}");
    let id = results.as_array().unwrap().iter().find(|r| r["kind"] == "pipeline").unwrap()["id"].as_i64().unwrap();
    (outputs, id)
}

/// Runs the pipeline of the tests above on a controller with `extra` flags; returns its data
/// directory.
fn on_three_workers_through_sigkills(extra: &[String]) -> tempfile::TempDir {
    use rand::Rng;

    use crate::exactly_once::{Pipeline, assert_exactly_once};

    let _serial = crate::kafka_serial();
    let data = tempfile::tempdir().unwrap();
    let log = data.path().join("workers.log");
    let mut flags = vec!["--cluster-secret", SECRET, "--worker-timeout-ms", "1500"];
    flags.extend(extra.iter().map(String::as_str));
    let listen = format!("127.0.0.1:{}", free_port());
    let mut server = Server::start_at(&listen, data.path(), &flags);
    let controller = format!("http://{listen}");
    let mut workers = three_workers(&server, &controller, 2, &log);
    let pipeline = Pipeline::WindowUpsert;
    let (outputs, id) = submit_window_upsert_at_3(&server);
    let view = |server: &Server| server.json("GET", &format!("/api/v1/pipelines/{id}"), None).1;
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();

    // Placed over the three workers, a subtask of each chain on each.
    let started = Instant::now();
    let placement = loop {
        let placement = view(&server)["placement"].clone();
        if placement["workers"].as_array().is_some_and(|w| w.len() == 3) {
            break placement;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "not placed on the workers: {}\n{}",
            view(&server),
            log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    for chain in placement["tasks"].as_array().unwrap() {
        let on: Vec<u64> = chain.as_array().unwrap().iter().filter_map(Value::as_u64).collect();
        assert_eq!(on, [0, 1, 2], "{placement}");
    }
    // The workers' counters reach the controller: every subtask of the source is seen reading.
    let started = Instant::now();
    loop {
        let view = view(&server);
        let reading = view["operators"].as_array().map_or(0, |ops| {
            ops.iter().filter(|o| o["operator"] == "input" && o["records_out"].as_u64() > Some(0)).count()
        });
        if reading == 3 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "no counters from the workers: {view}\n{}", log_text());
        std::thread::sleep(Duration::from_millis(50));
    }

    let mut rng = rand::rng();
    let mut kills = 0;
    let mut next = 3;
    while kills < 5 {
        std::thread::sleep(Duration::from_millis(rng.random_range(800..2_000)));
        if server.status_of(id) == "finished" {
            break;
        }
        // A worker the current attempt runs on.
        let placed: Vec<String> = view(&server)["placement"]["workers"]
            .as_array()
            .map(|w| w.iter().filter_map(|a| a.as_str().map(str::to_string)).collect())
            .unwrap_or_default();
        let candidates: Vec<usize> = (0..workers.len()).filter(|i| placed.contains(&workers[*i].address)).collect();
        let Some(&victim) = candidates.get(rng.random_range(0..candidates.len().max(1))) else { continue };
        let mut killed = workers.remove(victim);
        killed.child.kill().unwrap();
        killed.child.wait().unwrap();
        kills += 1;
        workers.push(Worker::start_logged(&controller, &format!("worker-{next}"), 2, Some(&log)));
        next += 1;
    }
    assert_eq!(kills, 5, "the pipeline finished after {kills} kills: make the input larger");
    std::thread::sleep(Duration::from_millis(rng.random_range(300..1_000)));
    assert_ne!(server.status_of(id), "finished", "finished before the controller's kill: make the input larger");
    server.kill();
    drop(server);
    let server = Server::start_at(&listen, data.path(), &flags);
    server.wait_for_status(id, "finished", Duration::from_secs(300));
    let view = view(&server);
    // Placed over the workers that had found the new controller when it resumed the pipeline.
    assert!(view["placement"]["workers"].as_array().is_some_and(|w| !w.is_empty()), "resumed on workers: {view}");
    let errors: Vec<&str> = view["errors"].as_array().unwrap().iter().filter_map(|e| e["message"].as_str()).collect();
    eprintln!(
        "{kills} workers killed, then the controller; the attempts' errors: {errors:#?}; transitions {}",
        view["transitions"]
    );
    // Attempts failed as workers were killed (not always one per kill: a kill while the
    // attempt is failing already costs nothing more, and the errors are copied into the store
    // every 250 ms, so the last before the controller's kill may be missing).
    assert!(errors.len() >= 3, "{errors:#?}");
    assert_exactly_once(pipeline, &outputs, &format!("{view}\n{}", log_text()));
    data
}

/// Three workers of one slot under a pipeline of parallelism 3. One is SIGKILLed and not
/// replaced: the pipeline goes on at parallelism 2 on the two left (its window state re-split
/// from the checkpoint), not three subtasks crowded onto two slots. A worker joins again: once
/// the slots have stayed back for a few seconds the pipeline ends at a savepoint and goes on at
/// 3 (a rescale, not a failure). Then it is stopped with a savepoint and resumed. Read
/// read_committed, every window is there exactly once.
#[test]
fn a_pipeline_short_of_slots_runs_narrower_and_scales_back_up_when_they_return() {
    use crate::exactly_once::{Pipeline, assert_exactly_once};

    let _serial = crate::kafka_serial();
    let data = tempfile::tempdir().unwrap();
    let log = data.path().join("workers.log");
    let flags = ["--cluster-secret", SECRET, "--worker-timeout-ms", "1500"];
    let server = Server::start(data.path(), &flags);
    let controller = format!("http://{}", server.address);
    let mut workers = three_workers(&server, &controller, 1, &log);
    let pipeline = Pipeline::WindowUpsert;
    let (outputs, id) = submit_window_upsert_at_3(&server);
    let view = |server: &Server| server.json("GET", &format!("/api/v1/pipelines/{id}"), None).1;
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    // Waits for a placement `wanted` accepts; returns it.
    let placed = |wanted: &dyn Fn(&Value) -> bool, what: &str| {
        let started = Instant::now();
        loop {
            let view = view(&server);
            if wanted(&view["placement"]) {
                eprintln!("{what} after {:?}: {}", started.elapsed(), view["placement"]);
                return view["placement"].clone();
            }
            assert_ne!(view["status"], "finished", "finished before {what}: make the input larger\n{view}");
            assert!(started.elapsed() < Duration::from_secs(60), "not {what}: {view}\n{}", log_text());
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let widths = |placement: &Value| -> Vec<usize> {
        placement["tasks"]
            .as_array()
            .map(|c| c.iter().map(|t| t.as_array().map_or(0, Vec::len)).collect())
            .unwrap_or_default()
    };
    let at = |width: usize| move |p: &Value| !widths(p).is_empty() && widths(p).iter().all(|w| *w == width);

    let full =
        placed(&|p: &Value| at(3)(p) && p["workers"].as_array().is_some_and(|w| w.len() == 3), "on three workers");
    assert!(full["scaled_to"].is_null(), "{full}");
    // A checkpoint completes before the kill, so the narrower attempt restores one.
    let completed = || {
        let (_, list) = server.json("GET", &format!("/api/v1/pipelines/{id}/checkpoints"), None);
        list.as_array().map_or(0, |l| l.iter().filter(|c| c["status"]["status"] == "completed").count())
    };
    let started = Instant::now();
    while completed() == 0 {
        assert!(started.elapsed() < Duration::from_secs(30), "no checkpoint: {}", view(&server));
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut killed = workers.remove(2);
    killed.child.kill().unwrap();
    killed.child.wait().unwrap();

    let narrow = placed(&|p: &Value| at(2)(p) && p["scaled_to"] == 2, "at parallelism 2 on the two left");
    assert_eq!(narrow["workers"].as_array().map(Vec::len), Some(2), "{narrow}");
    let errors = |view: &Value| -> Vec<String> {
        view["errors"].as_array().unwrap().iter().filter_map(|e| e["message"].as_str().map(str::to_string)).collect()
    };
    std::thread::sleep(Duration::from_millis(300));
    let failed_at_the_kill = errors(&view(&server));
    workers.push(Worker::start_logged(&controller, "worker-3", 1, Some(&log)));
    placed(
        &|p: &Value| at(3)(p) && p["scaled_to"].is_null() && p["workers"].as_array().is_some_and(|w| w.len() == 3),
        "back at 3",
    );

    // Stopped with a savepoint on the workers (their tasks end without ending their channels),
    // then resumed.
    let (status, body) = server.call("POST", &format!("/api/v1/pipelines/{id}/stop"), None);
    assert_eq!(status, 202, "{body}");
    server.wait_for_status(id, "stopped", Duration::from_secs(30));
    let (status, body) = server.json("POST", &format!("/api/v1/pipelines/{id}/resume"), None);
    assert_eq!(status, 204, "{body}");

    server.wait_for_status(id, "finished", Duration::from_secs(300));
    let view = view(&server);
    // The kill failed attempts; scaling back up did not.
    assert!(!failed_at_the_kill.is_empty());
    assert_eq!(errors(&view), failed_at_the_kill, "{view}");
    assert_exactly_once(pipeline, &outputs, &format!("{view}\n{}", log_text()));
}
