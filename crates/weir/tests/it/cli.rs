//! The `weir` binary as a user runs it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

#[test]
fn help_lists_the_subcommands() {
    let output = Command::new(WEIR).arg("--help").output().unwrap();
    assert!(output.status.success());
    let help = String::from_utf8(output.stdout).unwrap();
    assert!(help.contains("serve"), "{help}");
}

#[test]
fn serve_answers_health_checks() {
    let mut server =
        Command::new(WEIR).args(["serve", "--listen", "127.0.0.1:0"]).stdout(Stdio::piped()).spawn().unwrap();
    let mut first_line = String::new();
    BufReader::new(server.stdout.take().unwrap()).read_line(&mut first_line).unwrap();
    let address = first_line.trim().strip_prefix("weir listening on http://").unwrap().to_string();

    let mut stream = TcpStream::connect(&address).unwrap();
    write!(stream, "GET /healthz HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    server.kill().unwrap();
    server.wait().unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.ends_with("ok"), "{response}");
}

#[test]
fn serve_refuses_a_bad_listen_address() {
    let output = Command::new(WEIR).args(["serve", "--listen", "not-an-address"]).output().unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("invalid"));
}

/// Every file in sql-examples/ runs to the end with `weir run` and prints its rows, run from the
/// repository root as the README's commands are (a side input's path is relative to it); the
/// `flink_*` files, Flink jobs as written, in Flink's dialect.
#[test]
fn every_sql_example_runs() {
    // The kafka_* examples use the broker, which a crash test restarts.
    let _serial = crate::kafka_serial();
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sql-examples");
    let mut files: Vec<_> = std::fs::read_dir(&examples)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "{files:?}");
    let data = tempfile::tempdir().unwrap();
    for file in files {
        let name = file.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        let dialect = if name.starts_with("flink_") { "flink" } else { "weir" };
        let output = Command::new(WEIR)
            .current_dir(examples.join(".."))
            .args(["run", "--dialect", dialect, "--max-rows", "5", "--data-dir"])
            .arg(data.path())
            .arg(&file)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{}: {stdout}\n{stderr}", file.display());
        assert!(stdout.contains("pipeline 1 finished"), "{}: {stdout}", file.display());
        // A SELECT prints its latest rows (an INSERT into files prints none).
        if stdout.contains(" rows") {
            assert!(stdout.contains("(5 rows, the latest)"), "{}: {stdout}", file.display());
        }
    }
}

#[test]
fn run_reports_a_sql_error_with_its_position() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.sql");
    std::fs::write(&file, "CREATE TABLE t (a BIGINT) WITH (connector = 'blackhole');\nSELEC a FROM t;\n").unwrap();
    let output = Command::new(WEIR).arg("run").arg(&file).arg("--data-dir").arg(dir.path()).output().unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("SQL syntax error at line 2, column 1"), "{stderr}");
    assert!(stderr.contains("bad.sql"), "{stderr}");
}

/// The process dies at an exact step (a failpoint aborts it right after checkpoint 2's manifest
/// is written); started again with --resume, it continues from that checkpoint.
#[test]
fn a_process_killed_after_a_manifest_resumes_from_that_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("paced.sql");
    std::fs::write(
        &file,
        "CREATE TABLE nexmark WITH (connector = 'nexmark', events = '20000', rate = '20000');
         SET checkpoint.interval = '100 ms';
         SELECT bid.auction FROM nexmark WHERE event_type = 2;",
    )
    .unwrap();
    let run = |resume: bool, failpoints: &str| {
        let mut command = Command::new(WEIR);
        command.arg("run").arg(&file).arg("--data-dir").arg(dir.path()).env("FAILPOINTS", failpoints);
        if resume {
            command.arg("--resume");
        }
        command.output().unwrap()
    };
    let crashed = run(false, "weir::after_manifest_before_notify=1*off->return");
    assert!(!crashed.status.success());
    let stderr = String::from_utf8_lossy(&crashed.stderr);
    assert!(stderr.contains("aborting the process at checkpoint 2"), "{stderr}");

    let resumed = run(true, "");
    let stdout = String::from_utf8_lossy(&resumed.stdout);
    assert!(resumed.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&resumed.stderr));
    assert!(stdout.contains("resumed from checkpoint 2"), "{stdout}");
}

/// An incremental checkpoint exported whole (`weir export-checkpoint`) resumes in another data
/// directory that holds nothing else, and the run goes on to the same result as one resumed
/// where the checkpoint was taken.
#[test]
fn an_exported_checkpoint_resumes_elsewhere() {
    let (dir, elsewhere) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let sql = "CREATE TABLE nexmark WITH (connector = 'nexmark', events = '20000', rate = '20000');
         SET checkpoint.interval = '100 ms';
         SELECT bid.auction, count(*) AS bids FROM nexmark WHERE event_type = 2 GROUP BY bid.auction;";
    let file = dir.path().join("agg.sql");
    std::fs::write(&file, sql).unwrap();
    let run = |data: &std::path::Path, resume: bool, failpoints: &str| {
        let mut command = Command::new(WEIR);
        command.arg("run").arg(&file).arg("--data-dir").arg(data).env("FAILPOINTS", failpoints);
        if resume {
            command.arg("--resume");
        }
        command.output().unwrap()
    };
    let crashed = run(dir.path(), false, "weir::after_manifest_before_notify=4*off->return");
    assert!(String::from_utf8_lossy(&crashed.stderr).contains("aborting the process at checkpoint 5"));
    let checkpoints = dir.path().join("run/agg/1");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(checkpoints.join("manifests/00000000000000000005.json")).unwrap())
            .unwrap();
    let files = manifest["files"].as_array().unwrap();
    assert!(files.iter().any(|f| f["role"] == "upserts"), "checkpoint 5 is not incremental: {manifest}");

    let export = Command::new(WEIR)
        .arg("export-checkpoint")
        .arg(&checkpoints)
        .arg(elsewhere.path().join("run/agg/1"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&export.stdout);
    assert!(
        export.status.success() && said.contains("checkpoint 5 copied"),
        "{said}{}",
        String::from_utf8_lossy(&export.stderr)
    );
    let mut copied = Vec::new();
    for entry in std::fs::read_dir(elsewhere.path().join("run/agg/1/checkpoints")).unwrap() {
        copied.push(entry.unwrap().file_name().to_string_lossy().into_owned());
    }
    assert_eq!(copied, ["00000000000000000005"], "the copy holds only its own checkpoint");

    let result = |output: std::process::Output| {
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
        assert!(stdout.contains("resumed from checkpoint 5"), "{stdout}");
        stdout.lines().filter(|line| !line.starts_with("pipeline ")).map(str::to_string).collect::<Vec<_>>()
    };
    let moved = result(run(elsewhere.path(), true, ""));
    let stayed = result(run(dir.path(), true, ""));
    assert_eq!(moved, stayed);
}

/// `weir serve` on a free port of `listen` with `extra` flags, stderr piped: the first log line
/// it writes.
fn first_log_line(listen: &str, extra: &[&str]) -> String {
    let mut command = Command::new(WEIR);
    let data = tempfile::tempdir().unwrap();
    command.args(["serve", "--listen", listen, "--data-dir"]).arg(data.path()).args(extra);
    command.env("RUST_LOG", "info").env_remove("NO_COLOR").env_remove("WEIR_TOKEN");
    let mut server = command.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(server.stderr.take().unwrap()).read_line(&mut line).unwrap();
    server.kill().unwrap();
    server.wait().unwrap();
    line
}

#[test]
fn logs_are_plain_when_piped_and_json_when_asked() {
    let text = first_log_line("127.0.0.1:0", &[]);
    assert!(text.contains("weir is listening") && !text.contains('\x1b'), "{text:?}");
    let json: serde_json::Value =
        serde_json::from_str(&first_log_line("127.0.0.1:0", &["--log-format", "json"])).unwrap();
    assert_eq!(json["level"], "INFO", "{json}");
    assert_eq!(json["fields"]["message"], "weir is listening", "{json}");
}

#[test]
fn serve_refuses_the_network_without_a_token_unless_told() {
    let data = tempfile::tempdir().unwrap();
    let output = Command::new(WEIR)
        .args(["serve", "--listen", "0.0.0.0:0", "--data-dir"])
        .arg(data.path())
        .env_remove("WEIR_TOKEN")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("without a token") && stderr.contains("--token"), "{stderr}");
    // Told: it serves (on every interface, port chosen by the system; nothing connects), and warns.
    let warned = first_log_line("0.0.0.0:0", &["--allow-unauthenticated"]);
    assert!(warned.contains("WARN") && warned.contains("without a token"), "{warned}");
}
