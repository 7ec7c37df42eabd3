//! `weir worker` joining `weir serve`: registration with the cluster secret, heartbeats, a
//! worker declared lost when killed, workers finding a restarted controller again, and a
//! worker port that answers no one without the secret.

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
        let mut child = Command::new(WEIR)
            .args(["worker", "--controller", controller, "--listen", "127.0.0.1:0", "--id", id])
            .args(["--slots", &slots.to_string(), "--cluster-secret", SECRET])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
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
