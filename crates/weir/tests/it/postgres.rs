//! `weir serve --pg-listen` as Postgres clients use it, with the real `psql` (Debian's
//! postgresql-client; `tests/run.sh` installs it when missing): each kind of statement, results
//! typed and whole, an updating query's final rows, errors with SQLSTATE and caret, psql's \d
//! family, a streaming COPY stopped by Ctrl-C (a CancelRequest), cursors, the token as
//! password through SCRAM, TLS with SCRAM bound to the certificate, and garbage on the port; and a driver (tokio-postgres) over the extended query
//! protocol with parameters.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::service::Server;

/// 200 events in batches of 20, so that an updating query over them updates its rows (`+U`).
const BOUNDED: &str =
    "CREATE TABLE nx WITH (connector = 'nexmark', events = '200', as_fast_as_possible = 'true', batch_size = '20')";

/// psql at `server`'s Postgres port with `args`, no psqlrc, unaligned output; `password`
/// given as PGPASSWORD.
fn psql_command(server: &Server, password: Option<&str>, args: &[&str]) -> Command {
    let address = server.pg_address.as_deref().expect("started with --pg-listen");
    let (host, port) = address.rsplit_once(':').unwrap();
    let mut command = Command::new("psql");
    command.args(["-X", "-h", host, "-p", port, "-U", "weir", "-d", "weir"]).args(args);
    command.env_remove("PGPASSWORD").env("PGCONNECT_TIMEOUT", "10");
    if let Some(password) = password {
        command.env("PGPASSWORD", password);
    }
    command
}

fn psql(server: &Server, args: &[&str]) -> Output {
    psql_command(server, None, args).stdin(Stdio::null()).output().expect("psql runs (tests/run.sh installs it)")
}

fn text(output: &Output) -> (String, String) {
    (String::from_utf8_lossy(&output.stdout).to_string(), String::from_utf8_lossy(&output.stderr).to_string())
}

#[test]
fn psql_runs_every_kind_of_statement_and_prints_errors_with_a_caret() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &["--pg-listen", "127.0.0.1:0"]);
    let output = psql(&server, &["-c", BOUNDED]);
    assert_eq!(text(&output), ("created table nx\n".into(), String::new()));

    // Several statements in one message; a bounded SELECT's rows, typed (psql right-aligns
    // numbers); DESCRIBE, SHOW TABLES and SET.
    let output = psql(
        &server,
        &[
            "-c",
            "SET parallelism = '2'; SELECT person.id, person.name, date_time FROM nx WHERE event_type = 0 AND person.id < 1002",
            "-c",
            "DESCRIBE nx",
            "-c",
            "SHOW TABLES",
        ],
    );
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    let expected = [
        "  id  |     name      |         date_time          ",
        "------+---------------+----------------------------",
        " 1000 | Walter Abrams | 2023-11-14 22:13:20.000000",
        " 1001 | Deiter White  | 2023-11-14 22:13:20.005000",
        "(2 rows)",
    ];
    let lines: Vec<&str> = stdout.lines().collect();
    let at = lines.iter().position(|l| l.trim_start().starts_with("id")).unwrap_or_else(|| panic!("{stdout}"));
    assert_eq!(lines[at..at + 5], expected, "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with(" event_type | Int32 ")), "{stdout}");
    assert!(stdout.contains(" nx   | table | nexmark"), "{stdout}");

    // An updating query over input that ends: its final rows, as psql would show a table's.
    let output = psql(&server, &["-A", "-t", "-c", "SELECT event_type, count(*) FROM nx GROUP BY event_type"]);
    let (stdout, stderr) = text(&output);
    let mut rows: Vec<&str> = stdout.lines().collect();
    rows.sort();
    assert_eq!(rows, ["0|4", "1|12", "2|184"], "{stderr}");

    // An INSERT starts a pipeline, and says which.
    let output = psql(
        &server,
        &[
            "-c",
            "CREATE TABLE sink (price BIGINT) WITH (connector = 'blackhole')",
            "-c",
            "INSERT INTO sink SELECT bid.price FROM nx WHERE event_type = 2",
        ],
    );
    let (stdout, stderr) = text(&output);
    assert!(stdout.contains("INSERT started pipeline "), "{stdout}{stderr}");

    // Errors: the SQLSTATE (with VERBOSITY verbose), the message, and the caret where weir
    // points.
    let output = psql(&server, &["-v", "VERBOSITY=verbose", "-c", "SELECT nope\nFROM nx"]);
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr.contains("ERROR:  42703: Schema error: No field named nope."), "{stderr}");
    assert!(stderr.contains("LINE 1: SELECT nope\n               ^"), "{stderr}");
    let output = psql(&server, &["-c", "SELECT * FROM nowhere"]);
    assert!(text(&output).1.contains("nowhere"), "{}", text(&output).1);
    let output = psql(&server, &["-v", "VERBOSITY=verbose", "-c", "CREATE TABEL t (a BIGINT)"]);
    let (_, stderr) = text(&output);
    assert!(stderr.contains("ERROR:  42601: Expected: an object type after CREATE, found: TABEL"), "{stderr}");
    assert!(stderr.contains("LINE 1: CREATE TABEL t (a BIGINT)\n               ^"), "{stderr}");

    // A SELECT over a stream has no end to wait for: refused, naming COPY.
    let output = psql(
        &server,
        &["-c", "CREATE TABLE live WITH (connector = 'nexmark', rate = '100')", "-c", "SELECT bid.price FROM live"],
    );
    let (_, stderr) = text(&output);
    assert!(stderr.contains("has no last row to wait for"), "{stderr}");
    assert!(stderr.contains("HINT:  read its rows as they come with COPY (SELECT ...) TO STDOUT"), "{stderr}");

    // psql's \d family reads the catalog: tables and views with their columns.
    let output = psql(
        &server,
        &[
            "-c",
            "CREATE VIEW bids AS SELECT bid.auction, bid.price FROM nx WHERE event_type = 2",
            "-c",
            "\\dt",
            "-c",
            "\\d bids",
            "-c",
            "\\d nx",
            "-c",
            "\\dn",
            "-c",
            "\\l",
            "-c",
            "\\d nothing",
        ],
    );
    let (stdout, stderr) = text(&output);
    for expected in [
        " public | live | table |",
        " public | nx   | table |",
        "View \"public.bids\"",
        " auction | bigint |",
        "Table \"public.nx\"",
        " event_type | integer                     |           | not null |",
        " date_time  | timestamp without time zone |           | not null |",
        " public | ",
        " weir     | ",
    ] {
        assert!(stdout.contains(expected), "{expected:?} in {stdout}");
    }
    assert!(!stdout.contains(" public | bids | view"), "\\dt lists tables only: {stdout}");
    assert!(stderr.contains("Did not find any relation named \"nothing\"."), "{stderr}");

    // BEGIN / COMMIT are accepted (drivers send them).
    let output = psql(&server, &["-c", "BEGIN", "-c", "SHOW TABLES", "-c", "COMMIT"]);
    assert!(output.status.success(), "{}", text(&output).1);
}

#[test]
fn a_streaming_copy_delivers_rows_until_ctrl_c_cancels_it() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &["--pg-listen", "127.0.0.1:0"]);
    let create = "CREATE TABLE live WITH (connector = 'nexmark', rate = '200')";
    assert!(psql(&server, &["-c", create]).status.success());

    // A bounded COPY ends by itself, every row there; an updating one's changes come with
    // their kind first.
    let output =
        psql(&server, &["-c", BOUNDED, "-c", "COPY (SELECT bid.price FROM nx WHERE event_type = 2) TO STDOUT"]);
    let (stdout, stderr) = text(&output);
    assert_eq!(stdout.lines().skip(1).count(), 184, "{stdout}{stderr}");
    let changes = "COPY (SELECT event_type, count(*) FROM nx GROUP BY event_type) TO STDOUT";
    let output = psql(&server, &["-c", changes]);
    let (stdout, _) = text(&output);
    assert!(stdout.lines().next().is_some_and(|l| l.starts_with("+I\t")), "{stdout}");
    assert!(stdout.lines().any(|l| l == "+U\t2\t184"), "{stdout}");

    // A stream's COPY: rows arrive while it runs; Ctrl-C sends a CancelRequest, which stops
    // the pipeline.
    let out = data.path().join("copy.out");
    let mut child = psql_command(
        &server,
        None,
        &[
            "-o",
            out.to_str().unwrap(),
            "-c",
            "COPY (SELECT bid.auction, bid.price FROM live WHERE event_type = 2) TO STDOUT",
        ],
    )
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let running = pipelines_until(&server, "the COPY's pipeline runs", |pipelines| {
        pipelines
            .iter()
            .find(|p| p["sql"].as_str().is_some_and(|sql| sql.contains("FROM live")) && p["status"] == "running")
            .cloned()
    });
    std::thread::sleep(Duration::from_secs(2));
    assert!(Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("ERROR:  canceling statement due to user request"), "{stderr}");
    let rows = std::fs::read_to_string(&out).unwrap();
    assert!(rows.lines().count() >= 10, "a stream's rows arrive as it runs: {rows}");
    assert!(rows.lines().all(|l| l.split('\t').count() == 2), "{rows}");
    let id = running["id"].clone();
    pipelines_until(&server, "the canceled COPY's pipeline stops", |pipelines| {
        pipelines.iter().any(|p| p["id"] == id && p["status"] == "stopped").then_some(())
    });
}

#[test]
fn cursors_fetch_a_streams_rows_as_they_come_and_stop_it_when_closed() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &["--pg-listen", "127.0.0.1:0"]);
    let script = format!(
        "{BOUNDED};
CREATE TABLE live WITH (connector = 'nexmark', rate = '200');
DECLARE c CURSOR FOR SELECT bid.auction, bid.price FROM live WHERE event_type = 2;
FETCH 3 FROM c;
FETCH 2 FROM c;
DECLARE u CURSOR FOR SELECT event_type, count(*) FROM nx GROUP BY event_type;
FETCH ALL FROM u;
CLOSE c;
FETCH 1 FROM c;
"
    );
    let output = psql_command(&server, None, &["-A", "-t", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            child.stdin.take().unwrap().write_all(script.as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    let (stdout, stderr) = text(&output);
    let lines: Vec<&str> = stdout.lines().filter(|l| !l.is_empty()).collect();
    // created table x2, DECLARE CURSOR, 3 rows, 2 rows, DECLARE CURSOR, the changes, CLOSE.
    assert_eq!(lines[..3], ["created table nx", "created table live", "DECLARE CURSOR"], "{stdout}");
    assert!(lines[3..8].iter().all(|l| l.split('|').count() == 2), "{stdout}");
    assert_eq!(lines[8], "DECLARE CURSOR", "{stdout}");
    let changes: Vec<&str> =
        lines[9..].iter().take_while(|l| l.starts_with('+') || l.starts_with('-')).copied().collect();
    assert!(changes.contains(&"+U|2|184") && changes[0].starts_with("+I|"), "{stdout}");
    assert_eq!(lines.last(), Some(&"CLOSE CURSOR"), "{stdout}");
    assert!(stderr.contains("ERROR:  cursor \"c\" does not exist"), "{stderr}");

    // Every query a cursor started has stopped or finished.
    pipelines_until(&server, "every cursor's query ends", |pipelines| {
        pipelines.iter().all(|p| p["status"] != "running").then_some(())
    });
}

/// Polls `server`'s pipelines (GET /api/v1/pipelines) until `found` finds something in them;
/// fails after 60 s, saying `what` did not happen.
fn pipelines_until<T>(server: &Server, what: &str, found: impl Fn(&[serde_json::Value]) -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, body) = server.call("GET", "/api/v1/pipelines", None);
        let pipelines: serde_json::Value = serde_json::from_str(&body).unwrap();
        if let Some(found) = found(pipelines.as_array().unwrap()) {
            return found;
        }
        assert!(Instant::now() < deadline, "not so after 60 s: {what}: {body}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_token_is_the_password_and_garbage_on_the_port_harms_nothing() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &["--pg-listen", "127.0.0.1:0", "--token", "s3cret"]);
    let output = psql_command(&server, Some("s3cret"), &["-c", "SHOW TABLES"]).output().unwrap();
    assert!(output.status.success(), "{}", text(&output).1);
    let output = psql_command(&server, Some("wrong"), &["-c", "SHOW TABLES"]).output().unwrap();
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.to_lowercase().contains("password authentication failed"), "{stderr}");

    // Garbage bytes: that connection is closed, the server goes on.
    let address = server.pg_address.clone().unwrap();
    for garbage in [&b"GET / HTTP/1.1\r\n\r\n"[..], &[0xff; 64][..], &[0, 0, 0, 8, 4, 210, 22, 47][..]] {
        let mut stream = TcpStream::connect(&address).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = stream.write_all(garbage);
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
    }
    let output = psql_command(&server, Some("s3cret"), &["-c", "SHOW TABLES"]).output().unwrap();
    assert!(output.status.success(), "{}", text(&output).1);

    // The server asks for SCRAM-SHA-256 (AuthenticationSASL), never the password in clear;
    // without TLS it offers no channel binding.
    let mut stream = TcpStream::connect(&address).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let parameters = b"user\0weir\0database\0weir\0\0";
    let mut startup = ((8 + parameters.len()) as u32).to_be_bytes().to_vec();
    startup.extend(196_608u32.to_be_bytes());
    startup.extend(parameters);
    stream.write_all(&startup).unwrap();
    let mut answer = [0u8; 64];
    let read = stream.read(&mut answer).unwrap();
    let answer = &answer[..read];
    assert_eq!((answer[0], &answer[5..9]), (b'R', &10u32.to_be_bytes()[..]), "{answer:?}");
    assert_eq!(&answer[9..], b"SCRAM-SHA-256\0\0", "{}", String::from_utf8_lossy(answer));
    let output =
        psql_command(&server, Some("s3cret"), &["-c", "SELECT 1"]).env("PGSSLMODE", "require").output().unwrap();
    let (_, stderr) = text(&output);
    assert!(stderr.contains("server does not support SSL"), "{stderr}");
}

#[test]
fn tls_is_offered_with_a_certificate_and_scram_binds_to_it() {
    let data = tempfile::tempdir().unwrap();
    let (certificate, key) = (data.path().join("server.crt"), data.path().join("server.key"));
    let made = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
        .args(["-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&certificate)
        .output()
        .expect("openssl runs (tests/run.sh installs it)");
    assert!(made.status.success(), "{}", text(&made).1);
    let (certificate, key) = (certificate.to_str().unwrap(), key.to_str().unwrap());
    let server = Server::start(
        data.path(),
        &["--pg-listen", "127.0.0.1:0", "--token", "s3cret", "--pg-tls-cert", certificate, "--pg-tls-key", key],
    );
    // The client checks the certificate against its own copy, and SCRAM must be bound to it.
    let verified = |password: &str| {
        let mut command = psql_command(&server, Some(password), &["-c", "\\conninfo", "-c", "SHOW TABLES"]);
        command.env("PGSSLMODE", "verify-full").env("PGSSLROOTCERT", certificate).env("PGCHANNELBINDING", "require");
        command.output().unwrap()
    };
    let output = verified("s3cret");
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(stdout.contains("SSL connection (protocol: TLSv1."), "{stdout}");
    let output = verified("wrong");
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output).1.to_lowercase().contains("password authentication failed"), "{}", text(&output).1);
    // A client that does not ask for TLS may still come in clear (its sslmode decides).
    let output =
        psql_command(&server, Some("s3cret"), &["-c", "\\conninfo"]).env("PGSSLMODE", "disable").output().unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success() && !stdout.contains("SSL"), "{stdout}{stderr}");
}

#[test]
fn a_driver_prepares_binds_parameters_and_reads_typed_rows() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &["--pg-listen", "127.0.0.1:0"]);
    let (host, port) = server.pg_address.as_deref().unwrap().rsplit_once(':').unwrap();
    let config = format!("host={host} port={port} user=weir dbname=weir");
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let (client, connection) = tokio_postgres::connect(&config, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(connection);
        // The simple protocol, then the extended one (Parse/Bind/Describe/Execute, binary rows).
        client.batch_execute(BOUNDED).await.unwrap();
        let rows = client
            .query("SELECT person.id, person.name FROM nx WHERE event_type = 0 AND person.id < $1", &[&1002i64])
            .await
            .unwrap();
        let people: Vec<(i64, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        assert_eq!(people, [(1000, "Walter Abrams".to_string()), (1001, "Deiter White".to_string())]);

        // An updating query's final rows, typed; a prepared statement run with two values.
        let rows = client.query("SELECT event_type, count(*) AS n FROM nx GROUP BY event_type", &[]).await.unwrap();
        let mut counts: Vec<(i32, i64)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        counts.sort();
        assert_eq!(counts, [(0, 4), (1, 12), (2, 184)]);
        let statement = client.prepare("SELECT count(*) FROM nx WHERE event_type = $1").await.unwrap();
        assert_eq!(statement.params(), [tokio_postgres::types::Type::INT4]);
        for (kind, expected) in [(2i32, 184i64), (0, 4)] {
            assert_eq!(client.query_one(&statement, &[&kind]).await.unwrap().get::<_, i64>(0), expected);
        }
        let rows = client
            .query("SELECT bid.url FROM nx WHERE event_type = 2 AND bid.channel = $1", &[&"Google"])
            .await
            .unwrap();
        assert!(!rows.is_empty() && rows.iter().all(|r| r.get::<_, String>(0).starts_with("https://")));

        // Types in binary: an array, a struct's field, bytes, a timestamp; a map (which
        // Postgres has no type for) as its text.
        let row = client
            .query_one(
                "SELECT make_array(person.id, 2) AS a, map(['k'], ['v']) AS m, X'0102' AS b, person.date_time AS t \
                 FROM nx WHERE event_type = 0 AND person.id = 1000",
                &[],
            )
            .await
            .unwrap();
        assert_eq!(row.get::<_, Vec<i64>>("a"), [1000, 2]);
        assert_eq!(row.get::<_, String>("m"), "{k: v}");
        assert_eq!(row.get::<_, Vec<u8>>("b"), [1, 2]);
        let at = row.get::<_, std::time::SystemTime>("t").duration_since(std::time::UNIX_EPOCH).unwrap();
        assert_eq!(at.as_millis(), 1_700_000_000_000);

        // A JSON column is Postgres's json.
        std::fs::create_dir_all(data.path().join("files")).unwrap();
        std::fs::write(data.path().join("files/docs.json"), "{\"doc\": {\"a\": [1, 2]}, \"n\": 1}\n").unwrap();
        client
            .batch_execute("CREATE TABLE docs (doc JSON, n BIGINT) WITH (connector = 'filesystem', path = 'docs.json', format = 'json')")
            .await
            .unwrap();
        let row = client.query_one("SELECT doc, n FROM docs", &[]).await.unwrap();
        assert_eq!(row.columns()[0].type_(), &tokio_postgres::types::Type::JSON);
        assert_eq!(row.get::<_, serde_json::Value>(0), serde_json::json!({"a": [1, 2]}));

        // Statements that give rows but are not SELECTs, and a cursor's FETCH, described and
        // run through the extended protocol too.
        let tables: Vec<String> = client.query("SHOW TABLES", &[]).await.unwrap().iter().map(|r| r.get(0)).collect();
        assert_eq!(tables, ["docs", "nx"]);
        let columns = client.query("DESCRIBE nx", &[]).await.unwrap();
        assert_eq!(columns[0].get::<_, String>(0), "event_type");
        client.batch_execute("DECLARE c CURSOR FOR SELECT event_type, count(*) AS n FROM nx GROUP BY event_type").await.unwrap();
        let changes = client.query("FETCH 2 FROM c", &[]).await.unwrap();
        assert_eq!(changes.len(), 2);
        assert_eq!(changes[0].columns().iter().map(|c| c.name()).collect::<Vec<_>>(), ["op", "event_type", "n"]);
        assert_eq!(changes[0].get::<_, String>("op"), "+I");
        client.batch_execute("CLOSE c").await.unwrap();

        // Other statements, and errors with their SQLSTATE.
        client.execute("CREATE TABLE sink (a BIGINT) WITH (connector = 'blackhole')", &[]).await.unwrap();
        let error = client.query("SELECT nope FROM nx", &[]).await.unwrap_err();
        assert_eq!(error.code().map(|c| c.code()), Some("42703"), "{error}");
    });
}
