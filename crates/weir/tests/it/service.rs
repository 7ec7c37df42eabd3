//! `weir serve` over real HTTP: every route, its error cases, malformed input thrown at it, and
//! a Kafka pipeline that survives the server being killed with SIGKILL, exactly once.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rand::Rng;
use serde_json::{Value, json};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

/// A `weir serve` process on a free port with its own data directory.
pub(crate) struct Server {
    child: Child,
    pub(crate) address: String,
    /// The Postgres port's address, when started with `--pg-listen`.
    pub(crate) pg_address: Option<String>,
    token: Option<String>,
}

impl Server {
    pub(crate) fn start(data: &std::path::Path, extra: &[&str]) -> Self {
        Self::start_at("127.0.0.1:0", data, extra)
    }

    /// The same on `listen` (to start a server again where its clients look for it).
    pub(crate) fn start_at(listen: &str, data: &std::path::Path, extra: &[&str]) -> Self {
        let mut command = Command::new(WEIR);
        command.args(["serve", "--listen", listen, "--data-dir"]).arg(data).args(extra);
        command.env_remove("WEIR_TOKEN").env("RUST_LOG", "warn").stdout(Stdio::piped()).stderr(Stdio::null());
        let mut child = command.spawn().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let address =
            line.trim().strip_prefix("weir listening on http://").unwrap_or_else(|| panic!("{line}")).to_string();
        let pg_address = extra.contains(&"--pg-listen").then(|| {
            let mut line = String::new();
            stdout.read_line(&mut line).unwrap();
            let rest = line.trim().strip_prefix("weir speaks Postgres on ").unwrap_or_else(|| panic!("{line}"));
            rest.split_whitespace().next().unwrap().to_string()
        });
        let token = extra.iter().position(|a| *a == "--token").map(|i| extra[i + 1].to_string());
        Self { child, address, pg_address, token }
    }

    /// (status, body) of one request.
    pub(crate) fn call(&self, method: &str, path: &str, body: Option<&[u8]>) -> (u16, String) {
        let mut stream = TcpStream::connect(&self.address).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let auth = self.token.as_ref().map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
        let body = body.unwrap_or_default();
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            self.address,
            body.len()
        )
        .unwrap();
        stream.write_all(body).unwrap();
        let mut response = Vec::new();
        let _ = stream.read_to_end(&mut response);
        let response = String::from_utf8_lossy(&response).to_string();
        let status = response.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
        let (head, rest) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
        let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
            unchunk(rest)
        } else {
            rest.to_string()
        };
        (status, body)
    }

    pub(crate) fn json(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let bytes = body.map(|b| b.to_string().into_bytes());
        let (status, text) = self.call(method, path, bytes.as_deref());
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    pub(crate) fn sql(&self, sql: &str) -> (u16, Value) {
        self.json("POST", "/api/v1/statements", Some(json!({ "sql": sql })))
    }

    pub(crate) fn status_of(&self, id: i64) -> String {
        self.json("GET", &format!("/api/v1/pipelines/{id}"), None).1["status"].as_str().unwrap_or_default().to_string()
    }

    pub(crate) fn wait_for_status(&self, id: i64, wanted: &str, within: Duration) {
        let started = Instant::now();
        while self.status_of(id) != wanted {
            assert!(
                started.elapsed() < within,
                "pipeline {id} is {} after {within:?}, not {wanted}",
                self.status_of(id)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The first `n` data events of a pipeline's SSE output.
    pub(crate) fn output_rows(&self, id: i64, n: usize) -> Vec<Value> {
        let mut stream = TcpStream::connect(&self.address).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let auth = self.token.as_ref().map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
        write!(stream, "GET /api/v1/pipelines/{id}/output HTTP/1.1\r\nHost: x\r\n{auth}\r\n").unwrap();
        let mut rows = Vec::new();
        // Named events (the schema first, skipped counts, the end) are not rows.
        let mut named = false;
        for line in BufReader::new(stream).lines() {
            let line = line.unwrap();
            if line.starts_with("event: ") {
                named = true;
            } else if line.is_empty() {
                named = false;
            } else if let Some(data) = line.strip_prefix("data: ")
                && !named
                && let Ok(row) = serde_json::from_str::<Value>(data)
                && row.is_object()
            {
                rows.push(row);
                if rows.len() == n {
                    break;
                }
            }
        }
        rows
    }
}

impl Server {
    /// SIGKILL, as a crash would.
    pub(crate) fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn unchunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else { break };
        if size == 0 || tail.len() < size {
            break;
        }
        out.push_str(&tail[..size]);
        rest = tail[size..].trim_start_matches("\r\n");
    }
    out
}

const NEXMARK: &str =
    "CREATE TABLE nexmark WITH (connector = 'nexmark', rate = '2000'); SET checkpoint.interval = '200 ms';";

#[test]
fn every_route_works_over_http() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &[]);
    assert_eq!(server.call("GET", "/healthz", None), (200, "ok".to_string()));

    let (status, results) = server.sql(&format!(
        "{NEXMARK} SHOW TABLES; DESCRIBE nexmark; EXPLAIN SELECT bid.price FROM nexmark WHERE event_type = 2"
    ));
    assert_eq!(status, 200, "{results}");
    assert_eq!(results[0]["kind"], "done");
    assert_eq!(results[2]["kind"], "rows");
    assert_eq!(results[2]["rows"][0][0], "nexmark");
    assert!(results[4]["rows"].to_string().contains("nexmark"), "{results}");

    let (status, results) = server.sql("SELECT bid.auction, bid.price FROM nexmark WHERE event_type = 2");
    assert_eq!(status, 200, "{results}");
    assert_eq!(results[0]["kind"], "pipeline");
    let id = results[0]["id"].as_i64().unwrap();
    server.wait_for_status(id, "running", Duration::from_secs(10));

    let rows = server.output_rows(id, 5);
    assert_eq!(rows.len(), 5);
    assert!(
        rows[0].get("price").is_some() && rows[0].get("auction").is_some(),
        "a field is named after itself: {:?}",
        rows[0]
    );

    let (status, list) = server.json("GET", "/api/v1/pipelines", None);
    assert_eq!(status, 200);
    assert_eq!(list[0]["id"], id);
    let started = Instant::now();
    let checkpoints = loop {
        let (_, checkpoints) = server.json("GET", &format!("/api/v1/pipelines/{id}/checkpoints"), None);
        if checkpoints.as_array().is_some_and(|c| c.iter().any(|c| c["status"]["status"] == "completed")) {
            break checkpoints;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "no checkpoint completed: {checkpoints}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let first = checkpoints[0]["id"].as_u64().unwrap();
    let (status, one) = server.json("GET", &format!("/api/v1/pipelines/{id}/checkpoints/{first}"), None);
    assert_eq!(status, 200);
    assert!(one["tasks"].is_array(), "{one}");
    // Operator counters are sampled every 250 ms from the pipeline's start: the first sample
    // may predate the tasks' counters (a checkpoint can complete within 200 ms).
    let view = loop {
        let (_, view) = server.json("GET", &format!("/api/v1/pipelines/{id}"), None);
        if view["operators"].as_array().is_some_and(|o| !o.is_empty()) {
            break view;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "no operator counters: {view}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(view["graph"][0].as_str().unwrap().contains("nexmark"), "{view}");
    assert!(view["uptime_ms"].is_u64());
    // The graph as data for the web page: operators with their role, edges with partitioning.
    let nodes = view["dataflow"]["nodes"].as_array().unwrap();
    assert_eq!(nodes[0]["role"], "source", "{view}");
    assert_eq!(nodes.last().unwrap()["role"], "sink", "{view}");
    assert_eq!(view["dataflow"]["edges"].as_array().unwrap().len(), nodes.len() - 1, "a chain: {view}");
    assert!(view["operators"].as_array().unwrap().iter().all(|o| o.get("watermark_lag_ms").is_some()), "{view}");
    // The list's summary: rates while running, the last checkpoint.
    let (_, list) = server.json("GET", "/api/v1/pipelines", None);
    assert!(list[0]["records_in_per_second"].is_f64(), "{list}");
    assert!(list[0]["last_checkpoint"].is_u64(), "{list}");

    let (status, metrics) = server.call("GET", "/metrics", None);
    assert_eq!(status, 200);
    assert!(metrics.contains(&format!("weir_records_out_total{{pipeline=\"{id}\",operator=\"nexmark\"")), "{metrics}");
    let (_, tables) = server.json("GET", "/api/v1/tables", None);
    assert_eq!(tables[0]["name"], "nexmark");
    let (_, openapi) = server.json("GET", "/api/v1/openapi.json", None);
    for path in ["/api/v1/statements", "/api/v1/pipelines/{id}/resume", "/api/v1/pipelines/{id}/output"] {
        assert!(openapi["paths"].get(path).is_some(), "{path} missing from the OpenAPI document");
    }
    // Every operation declares its path parameters, so generated clients can call it.
    for (path, item) in openapi["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            for name in ["id", "checkpoint"].into_iter().filter(|n| path.contains(&format!("{{{n}}}"))) {
                let declared = operation["parameters"]
                    .as_array()
                    .is_some_and(|p| p.iter().any(|p| p["name"] == name && p["in"] == "path"));
                assert!(declared, "{method} {path} does not declare its path parameter '{name}'");
            }
        }
    }
    // The view's own fields follow the record's (flattened): allOf [record, fields].
    let operators = &openapi["components"]["schemas"]["PipelineView"]["allOf"][1]["properties"]["operators"];
    assert_eq!(operators["type"], "array", "{operators}");
    let dataflow = &openapi["components"]["schemas"]["PipelineView"]["allOf"][1]["properties"]["dataflow"];
    assert!(dataflow.to_string().contains("Dataflow"), "{dataflow}");
    let summary = &openapi["components"]["schemas"]["PipelineSummary"]["allOf"][1]["properties"];
    assert!(summary.get("records_out_per_second").is_some(), "{summary}");
    let parallelism = &openapi["components"]["schemas"]["ResumeRequest"]["properties"]["parallelism"];
    assert_eq!(
        (parallelism["minimum"].as_u64(), parallelism["maximum"].as_u64()),
        (Some(1), Some(256)),
        "{parallelism}"
    );

    // Stop with a savepoint, resume at another parallelism, stop now, delete.
    assert_eq!(server.call("POST", &format!("/api/v1/pipelines/{id}/stop"), None).0, 202);
    server.wait_for_status(id, "stopped", Duration::from_secs(20));
    let (status, body) =
        server.json("POST", &format!("/api/v1/pipelines/{id}/resume"), Some(json!({"parallelism": 2})));
    assert_eq!(status, 204, "{body}");
    server.wait_for_status(id, "running", Duration::from_secs(10));
    // A pipeline is "running" from its start, and knows the checkpoint it restored once its
    // first attempt has read it (milliseconds later: a fresh-clone run once saw it unset).
    let started = std::time::Instant::now();
    let view = loop {
        let (_, view) = server.json("GET", &format!("/api/v1/pipelines/{id}"), None);
        if view["restored_from"].is_u64() || started.elapsed() > Duration::from_secs(10) {
            break view;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(view["restored_from"].is_u64(), "resumed from its savepoint: {view}");
    assert_eq!(view["parallelism"], 2);
    let statuses: Vec<&str> =
        view["transitions"].as_array().unwrap().iter().filter_map(|t| t["status"].as_str()).collect();
    assert_eq!(statuses, vec!["created", "running", "stopping", "stopped", "running"]);
    assert_eq!(server.call("POST", &format!("/api/v1/pipelines/{id}/stop-now"), None).0, 204);
    assert_eq!(server.status_of(id), "stopped");
    // Resume from a named checkpoint: the oldest one still kept.
    let (_, kept) = server.json("GET", &format!("/api/v1/pipelines/{id}/checkpoints"), None);
    let completed: Vec<u64> = kept
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"]["status"] == "completed")
        .filter_map(|c| c["id"].as_u64())
        .collect();
    assert!(!completed.is_empty(), "{kept}");
    let named = completed[completed.len().saturating_sub(3)];
    let (status, body) =
        server.json("POST", &format!("/api/v1/pipelines/{id}/resume"), Some(json!({"checkpoint": named})));
    assert_eq!(status, 204, "{body}");
    server.wait_for_status(id, "running", Duration::from_secs(10));
    let (_, view) = server.json("GET", &format!("/api/v1/pipelines/{id}"), None);
    assert_eq!(view["restored_from"].as_u64(), Some(named), "{view}");
    assert_eq!(server.call("POST", &format!("/api/v1/pipelines/{id}/stop-now"), None).0, 204);
    assert_eq!(server.call("DELETE", &format!("/api/v1/pipelines/{id}"), None).0, 204);
    assert_eq!(server.json("GET", &format!("/api/v1/pipelines/{id}"), None).0, 404);
}

#[test]
fn errors_are_json_4xx_with_a_stable_code() {
    let data = tempfile::tempdir().unwrap();
    let allowed = tempfile::tempdir().unwrap();
    let dir = allowed.path().to_str().unwrap();
    let server = Server::start(data.path(), &["--max-body-bytes", "2000", "--filesystem-dir", dir]);
    let expect = |(status, body): (u16, Value), wanted: u16, code: &str| {
        assert_eq!(status, wanted, "{body}");
        assert_eq!(body["code"], code, "{body}");
        assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
        body
    };
    let syntax = expect(server.sql("CREATE TABLE t (a BIGINT);\nSELEC a FROM t"), 400, "sql_syntax");
    assert_eq!((syntax["line"].as_u64(), syntax["column"].as_u64()), (Some(2), Some(1)));
    expect(server.sql("SELECT * FROM missing"), 400, "sql_invalid");
    expect(server.sql("CREATE TABLE k (a BIGINT) WITH (connector = 'kafak')"), 400, "sql_invalid");
    let (status, text) = server.call("POST", "/api/v1/statements", Some(b"{not json"));
    assert_eq!(status, 400, "{text}");
    expect(server.json("POST", "/api/v1/statements", Some(json!({"query": "x"}))), 400, "bad_request");
    expect(server.json("GET", "/api/v1/pipelines/42", None), 404, "not_found");
    expect(server.json("GET", "/api/v1/pipelines/abc", None), 404, "not_found");
    expect(server.json("POST", "/api/v1/pipelines/42/stop", None), 404, "not_found");
    expect(server.json("GET", "/api/v1/nothing-here", None), 404, "not_found");
    let big = json!({ "sql": "x".repeat(5000) }).to_string();
    let (status, text) = server.call("POST", "/api/v1/statements", Some(big.as_bytes()));
    assert_eq!(status, 413, "{text}");
    // Filesystem tables: inside <data dir>/files (relative paths go there) or a listed directory.
    let (status, refused) =
        server.sql("CREATE TABLE f (a BIGINT) WITH (connector = 'filesystem', path = '/etc', format = 'json')");
    assert_eq!((status, refused["code"].as_str()), (400, Some("sql_invalid")), "{refused}");
    let files = data.path().join("files");
    let message = refused["message"].as_str().unwrap();
    assert!(message.contains(&files.display().to_string()) && message.contains(dir), "names the roots: {message}");
    expect(
        server.sql(&format!(
            "CREATE TABLE f (a BIGINT) WITH (connector = 'filesystem', path = '{dir}/../x', format = 'json')"
        )),
        400,
        "sql_invalid",
    );
    let (status, body) = server.sql(&format!(
        "CREATE TABLE f (a BIGINT) WITH (connector = 'filesystem', path = '{dir}/out', format = 'json');
         CREATE TABLE g (a BIGINT) WITH (connector = 'filesystem', path = 'g', format = 'json')"
    ));
    assert_eq!(status, 200, "{body}");
    let (_, tables) = server.json("GET", "/api/v1/tables", None);
    let g = tables.as_array().unwrap().iter().find(|t| t["name"] == "g").unwrap();
    assert_eq!(g["options"]["path"], files.join("g").display().to_string(), "{g}");

    // A running pipeline cannot be resumed; a stopped one cannot be stopped.
    let (_, created) = server.sql(&format!("{NEXMARK} SELECT bid.price FROM nexmark WHERE event_type = 2"));
    let id = created[2]["id"].as_i64().unwrap();
    expect(server.json("POST", &format!("/api/v1/pipelines/{id}/resume"), None), 409, "conflict");
    assert_eq!(server.call("POST", &format!("/api/v1/pipelines/{id}/stop-now"), None).0, 204);
    expect(
        server.json("POST", &format!("/api/v1/pipelines/{id}/resume"), Some(json!({"checkpoint": 999}))),
        404,
        "not_found",
    );
    expect(server.json("POST", &format!("/api/v1/pipelines/{id}/stop"), None), 409, "conflict");
    expect(
        server.json("POST", &format!("/api/v1/pipelines/{id}/resume"), Some(json!({"parallelism": 0}))),
        400,
        "bad_request",
    );
}

#[test]
fn a_token_guards_every_api_route() {
    let data = tempfile::tempdir().unwrap();
    let mut server = Server::start(data.path(), &["--token", "s3cret"]);
    assert_eq!(server.json("GET", "/api/v1/pipelines", None).0, 200);
    server.token = None;
    for (method, path) in [("GET", "/api/v1/pipelines"), ("POST", "/api/v1/statements"), ("GET", "/metrics")] {
        let (status, body) = server.json(method, path, None);
        assert_eq!((status, &body["code"]), (401, &json!("unauthorized")), "{method} {path}");
    }
    assert_eq!(server.call("GET", "/healthz", None).0, 200, "health checks stay open");
    // The page holds no data (it asks for the token and sends it): it loads without one.
    let (status, page) = server.call("GET", "/", None);
    assert_eq!(status, 200);
    assert!(page.contains("<title>weir</title>") && page.contains("/ui/app.js"), "{page}");
    assert_eq!(server.call("GET", "/ui/app.js", None).0, 200);
    assert_eq!(server.call("GET", "/ui/elsewhere.js", None).0, 404);
    server.token = Some("wrong".into());
    assert_eq!(server.json("GET", "/api/v1/tables", None).0, 401);
}

/// Malformed JSON and random SQL: every answer is a 2xx or a 4xx with a JSON error, never a
/// 5xx, and the server stays up.
#[test]
fn malformed_requests_get_well_formed_answers() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &[]);
    server.sql("CREATE TABLE t (a BIGINT, b VARCHAR) WITH (connector = 'blackhole')");
    let mut rng = rand::rng();
    let fragments = [
        "SELECT",
        "a",
        "b",
        "*",
        "FROM",
        "t",
        "WHERE",
        "GROUP BY",
        "(",
        ")",
        ",",
        "'x'",
        "1",
        "=",
        "JOIN",
        "ON",
        "CREATE",
        "TABLE",
        "VIEW",
        "AS",
        "WITH",
        "connector",
        "DROP",
        "SET",
        "INSERT INTO",
        "VALUES",
        ";",
        "--",
        "tumble(",
        "INTERVAL '1' SECOND",
        "\u{0}",
        "é",
        "\"",
        "`",
        "count(*)",
        "NULL",
        "EXPLAIN",
        "DESCRIBE",
    ];
    for round in 0..300 {
        let body: Vec<u8> = match round % 3 {
            0 => {
                let words: Vec<&str> =
                    (0..rng.random_range(1..12)).map(|_| fragments[rng.random_range(0..fragments.len())]).collect();
                json!({ "sql": words.join(" ") }).to_string().into_bytes()
            }
            1 => (0..rng.random_range(0..64)).map(|_| rng.random::<u8>()).collect(),
            _ => {
                let mut text = json!({ "sql": "SELECT a FROM t" }).to_string().into_bytes();
                let cut = rng.random_range(0..text.len());
                text.truncate(cut);
                text
            }
        };
        let (status, text) = server.call("POST", "/api/v1/statements", Some(&body));
        assert!(
            (200..300).contains(&status) || (400..500).contains(&status),
            "{status} for {:?}: {text}",
            String::from_utf8_lossy(&body)
        );
        if status >= 400 {
            let error: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"));
            assert!(error["code"].is_string() && error["message"].is_string(), "{text}");
        }
    }
    assert_eq!(server.call("GET", "/healthz", None).0, 200);
}

/// The server is killed with SIGKILL while a Kafka pipeline runs; started again, it resumes
/// the pipeline from its last checkpoint, and the output read with read_committed holds every
/// record exactly once.
#[test]
fn a_killed_server_resumes_its_kafka_pipeline_exactly_once() {
    let data = tempfile::tempdir().unwrap();
    killed_server_resumes_exactly_once(data.path(), &[]);
}

/// The same with checkpoints on S3 (the test SeaweedFS server, reached through
/// `--checkpoint-option`s): they land there and nowhere in the data directory, the restarted
/// server resumes from them, dropping the pipeline deletes them, and a second service (another
/// data directory) given the same URL refuses to start rather than mix its pipelines' checkpoints
/// with the first one's.
#[test]
fn a_killed_server_with_checkpoints_on_s3_resumes_from_them_exactly_once() {
    use weir_state::CheckpointStorage;
    use weir_state::test_servers::TestS3;

    let s3 = TestS3::get().unwrap_or_else(|e| panic!("no S3 server for tests: {e}"));
    let url = s3.fresh_url("service");
    let mut flags = vec!["--checkpoint-url".to_string(), url.clone()];
    for (key, value) in s3.options() {
        flags.extend(["--checkpoint-option".to_string(), format!("{key}={value}")]);
    }
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let data = tempfile::tempdir().unwrap();
    let (server, id) = killed_server_resumes_exactly_once(data.path(), &flags);

    assert!(!data.path().join("pipelines").join(id.to_string()).exists(), "checkpoints went to the data directory");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let store = CheckpointStorage::open(&url, &s3.options()).unwrap().store(&id.to_string()).unwrap();
    let kept = runtime.block_on(store.completed_checkpoints()).unwrap();
    assert!(!kept.is_empty(), "no checkpoint of pipeline {id} on S3");

    let other = tempfile::tempdir().unwrap();
    let refused = Command::new(WEIR)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(other.path())
        .args(&flags)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && stderr.contains("belong to weir-service-"), "{stderr}");

    let (status, body) = server.call("DELETE", &format!("/api/v1/pipelines/{id}"), None);
    assert!(status == 204 || status == 200, "{status} {body}");
    assert_eq!(runtime.block_on(store.completed_checkpoints()).unwrap(), Vec::<u64>::new(), "dropped, yet kept on S3");
}

/// Starts a Kafka pipeline on a server with `flags`, kills the server after some checkpoints,
/// starts it again and checks that the pipeline resumed and finished exactly once. Returns the
/// running server and the pipeline's id.
fn killed_server_resumes_exactly_once(data: &std::path::Path, flags: &[&str]) -> (Server, i64) {
    use crate::exactly_once::{Pipeline, assert_exactly_once, outputs};

    let _serial = crate::kafka_serial();
    let pipeline = Pipeline::FilterProject;
    let outputs = outputs(pipeline);
    let mut server = Server::start(data, flags);
    let (status, results) = server.sql(&pipeline.sql(&outputs, "exactly_once"));
    assert_eq!(status, 200, "{results}");
    let id = results.as_array().unwrap().iter().find(|r| r["kind"] == "pipeline").unwrap()["id"].as_i64().unwrap();
    // Killed after some checkpoints completed.
    let started = Instant::now();
    loop {
        let (_, checkpoints) = server.json("GET", &format!("/api/v1/pipelines/{id}/checkpoints"), None);
        let completed =
            checkpoints.as_array().map_or(0, |c| c.iter().filter(|c| c["status"]["status"] == "completed").count());
        if completed >= 3 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "no checkpoints: {checkpoints}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_ne!(server.status_of(id), "finished", "finished before the kill: make the input larger");
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    drop(server);

    let server = Server::start(data, flags);
    server.wait_for_status(id, "finished", Duration::from_secs(300));
    let (_, view) = server.json("GET", &format!("/api/v1/pipelines/{id}"), None);
    let restored = view["restored_from"].as_u64().unwrap_or_else(|| panic!("resumed from a checkpoint: {view}"));
    let (_, checkpoints) = server.json("GET", &format!("/api/v1/pipelines/{id}/checkpoints"), None);
    let ids: Vec<u64> = checkpoints.as_array().unwrap().iter().filter_map(|c| c["id"].as_u64()).collect();
    // The history is copied into the store every 250 ms, so the very last checkpoint before
    // the kill may be missing from it; earlier ones are there.
    assert!(ids.iter().any(|i| *i < restored), "the checkpoint history from before the kill is kept: {ids:?}");
    assert_exactly_once(pipeline, &outputs, &view.to_string());
    // The sink's transactions are counted, in the view and on the metrics page.
    let committed: u64 =
        view["operators"].as_array().unwrap().iter().filter_map(|o| o["transactions_committed"].as_u64()).sum();
    assert!(committed > 0, "{view}");
    let (_, metrics) = server.call("GET", "/metrics", None);
    assert!(metrics.contains(&format!("weir_transactions_committed_total{{pipeline=\"{id}\"")), "{metrics}");
    (server, id)
}

/// One server, two pipelines: one fails over and over (its input file is not JSON), the other
/// runs on undisturbed.
#[test]
fn a_failing_pipeline_does_not_disturb_another() {
    let data = tempfile::tempdir().unwrap();
    let input = data.path().join("files").join("in");
    std::fs::create_dir_all(&input).unwrap();
    std::fs::write(input.join("broken.json"), "this is not JSON\n").unwrap();
    let server = Server::start(data.path(), &[]);
    let (status, body) = server.sql(&format!(
        "{NEXMARK} CREATE TABLE broken (a BIGINT) WITH (connector = 'filesystem', path = 'in', format = 'json');"
    ));
    assert_eq!(status, 200, "{body}");
    let (_, bad) = server.sql("SELECT a FROM broken");
    let (_, good) = server.sql("SELECT bid.price FROM nexmark WHERE event_type = 2");
    let (bad, good) = (bad[0]["id"].as_i64().unwrap(), good[0]["id"].as_i64().unwrap());
    let records = |id: i64| {
        let (_, view) = server.json("GET", &format!("/api/v1/pipelines/{id}"), None);
        view["operators"].as_array().map_or(0, |ops| ops.iter().filter_map(|o| o["records_out"].as_u64()).sum::<u64>())
    };
    let started = Instant::now();
    loop {
        let (_, view) = server.json("GET", &format!("/api/v1/pipelines/{bad}"), None);
        let statuses: Vec<&str> =
            view["transitions"].as_array().unwrap().iter().filter_map(|t| t["status"].as_str()).collect();
        if statuses.contains(&"failing")
            && statuses.contains(&"recovering")
            && !view["errors"].as_array().unwrap().is_empty()
        {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "never failed: {view}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let before = records(good);
    std::thread::sleep(Duration::from_millis(1_000));
    assert!(records(good) > before, "the healthy pipeline stalled");
    assert_eq!(server.status_of(good), "running");
    // Its view has rates over the last seconds, not just totals (the watcher needs two
    // samples of a running attempt, which a loaded machine may take a few seconds to give).
    let started = Instant::now();
    loop {
        let (_, view) = server.json("GET", &format!("/api/v1/pipelines/{good}"), None);
        let operators = view["operators"].as_array().unwrap();
        assert!(operators.iter().all(|o| o["backpressure_ratio"].as_f64().is_some_and(|r| (0.0..=1.0).contains(&r))));
        if operators.iter().any(|o| o["records_out_per_second"].as_f64() > Some(0.0)) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(15), "no rates: {view}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Nothing lets two pipelines write with one set of Kafka transactional ids: a second process
/// on the data directory is refused (naming the first), a pipeline name set again after a
/// restart still names a new pipeline (the name makes the ids), and an explicit prefix a
/// running pipeline uses is refused.
#[test]
fn pipelines_never_share_kafka_transactional_ids() {
    use weir_connectors::kafka::test_broker::TestBroker;

    let _serial = crate::kafka_serial();
    let broker = TestBroker::get().unwrap_or_else(|e| panic!("no Kafka broker for tests: {e}"));
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &[]);
    let second = Command::new(WEIR)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data.path())
        .env_remove("WEIR_TOKEN")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "a second server on one data directory started");
    assert!(stderr.contains("is in use by weir serve (pid "), "{stderr}");

    // A name set again after a restart still names a new pipeline, not the earlier one.
    let (status, body) = server.sql(
        "CREATE TABLE gen WITH (connector = 'nexmark', rate = '200'); SET pipeline.name = 'mine';
         SELECT bid.auction FROM gen WHERE event_type = 2",
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body[2]["name"], "mine-1", "{body}");
    drop(server);
    let server = Server::start(data.path(), &[]);
    let (status, body) = server.sql("SET pipeline.name = 'mine'; SELECT bid.price FROM gen WHERE event_type = 2");
    assert_eq!(status, 200, "{body}");
    assert_ne!(body[1]["name"], "mine-1", "{body}");

    let prefix = TestBroker::unique_name("shared");
    let (status, body) = server.sql(&format!(
        "CREATE TABLE out (auction BIGINT) WITH (connector = 'kafka', \"bootstrap.servers\" = '{}',
           topic = '{prefix}', format = 'json', \"transactional_id.prefix\" = '{prefix}',
           \"sink.create-topic\" = 'true')",
        broker.bootstrap()
    ));
    assert_eq!(status, 200, "{body}");
    let insert = "INSERT INTO out SELECT bid.auction FROM gen WHERE event_type = 2";
    let (status, body) = server.sql(&format!("SET pipeline.name = 'first'; {insert}"));
    assert_eq!(status, 200, "{body}");
    let first = body[1]["id"].as_i64().unwrap();
    let (status, body) = server.sql(&format!("SET pipeline.name = 'second'; {insert}"));
    assert_eq!(status, 409, "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("pipeline {first} writes Kafka transactions with ids starting '{prefix}")),
        "{message}"
    );
    // Once the first has stopped, the prefix is free.
    assert_eq!(server.call("POST", &format!("/api/v1/pipelines/{first}/stop-now"), None).0, 204);
    let (status, body) = server.sql(&format!("SET pipeline.name = 'third'; {insert}"));
    assert_eq!(status, 200, "{body}");
}
