//! `weir sql` as people run it: scripted runs of the real binary against a real `weir serve`
//! (-c, -f, standard input, meta-commands, formats, exit statuses, the pipeline statements,
//! errors with carets, a missing server, a bad token, Ctrl-C), and an interactive session in a
//! pseudo-terminal (multi-line input, completion, history, a live result, Ctrl-C, the terminal
//! restored).

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::service::Server;

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

/// A bounded Nexmark table: 200 events as fast as possible (deterministic: seed 0).
const BOUNDED: &str = "CREATE TABLE nx WITH (connector = 'nexmark', events = '200', as_fast_as_possible = 'true');";

/// What one run of `weir sql` did.
struct Run {
    status: i32,
    stdout: String,
    stderr: String,
}

/// Runs `weir sql ARGS` against `server`, with `stdin` piped in.
fn weir_sql(server: &Server, args: &[&str], stdin: &str) -> Run {
    let home = tempfile::tempdir().unwrap();
    let mut child = Command::new(WEIR)
        .arg("sql")
        .args(["--url", &format!("http://{}", server.address)])
        .args(args)
        .env_remove("WEIR_TOKEN")
        .env_remove("WEIR_URL")
        .env("HOME", home.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    Run {
        status: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).to_string(),
        stderr: String::from_utf8_lossy(&output.stderr).to_string(),
    }
}

/// The lines of `text` from the first that starts with `from`.
fn lines_from<'a>(text: &'a str, from: &str) -> Vec<&'a str> {
    text.lines().skip_while(|l| !l.starts_with(from)).collect()
}

#[test]
fn scripts_run_from_c_f_and_stdin_in_every_format() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &[]);
    let run = weir_sql(&server, &["-c", BOUNDED], "");
    assert_eq!((run.status, run.stdout.as_str()), (0, "created table nx\n"), "{}", run.stderr);

    // A bounded updating query's final result, printed whole, as psql would.
    let query = "SELECT event_type, count(*) AS n FROM nx GROUP BY event_type;";
    let run = weir_sql(&server, &["-c", query], "");
    assert_eq!(run.status, 0, "{}", run.stderr);
    let table = lines_from(&run.stdout, " event_type");
    assert_eq!(table[..2], [" event_type |  n", "------------+-----"], "{}", run.stdout);
    let mut rows = table[2..5].to_vec();
    rows.sort();
    assert_eq!(rows, ["          0 |   4", "          1 |  12", "          2 | 184"], "{}", run.stdout);
    assert_eq!(table[5], "(3 rows)");
    assert!(run.stderr.contains("reading nx: the nexmark generator, 200 events as fast as it can"), "{}", run.stderr);
    assert!(run.stderr.contains("finished: 3 rows, "), "{}", run.stderr);

    // The same from a file, as CSV; and from standard input, as JSON.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("q.sql");
    std::fs::write(&file, format!("-- counts per kind\n{query}\n")).unwrap();
    let run = weir_sql(&server, &["--format", "csv", "-q", "-f", file.to_str().unwrap()], "");
    let mut lines: Vec<&str> = run.stdout.lines().collect();
    lines[1..].sort();
    assert_eq!(lines, ["event_type,n", "0,4", "1,12", "2,184"], "{}", run.stderr);
    assert!(run.stderr.is_empty(), "quiet: {}", run.stderr);
    let run = weir_sql(&server, &["--format", "json", "-q", "-f", "-"], query);
    let mut lines: Vec<&str> = run.stdout.lines().collect();
    lines.sort();
    assert_eq!(lines, ["{\"event_type\":0,\"n\":4}", "{\"event_type\":1,\"n\":12}", "{\"event_type\":2,\"n\":184}"]);
    // Piped with no -c or -f: standard input is the script; a last statement needs no ';'.
    let run = weir_sql(&server, &["-q", "--format", "csv"], "SELECT count(*) AS n\nFROM nx");
    assert_eq!(run.stdout, "n\n200\n", "{}", run.stderr);
}

#[test]
fn failures_go_on_or_stop_with_psql_exit_statuses() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &[]);
    let script = "SHOW TABLES;\nSELECT nothing FROM nowhere;\nCREATE VIEW v AS SELECT 1 AS one;\n";
    let run = weir_sql(&server, &[], script);
    assert_eq!(run.status, 1, "a failure, and the run went on: {}", run.stderr);
    assert!(run.stdout.contains("created view v"), "{}", run.stdout);
    let run = weir_sql(&server, &["--on-error-stop"], &script.replace(" v ", " w "));
    assert_eq!(run.status, 3, "{}", run.stderr);
    assert!(!run.stdout.contains("created view"), "stopped at the failure: {}", run.stdout);
    assert_eq!(run.stderr.matches("ERROR:").count(), 1, "{}", run.stderr);
    let run = weir_sql(&server, &["-c", "SHOW TABLES", "-c", "\\q", "-c", "SELECT broken"], "");
    assert_eq!(run.status, 0, "\\q ends the run before the broken statement: {}", run.stderr);
    let missing = weir_sql(&server, &["-f", "/no/such/file.sql", "--on-error-stop"], "");
    assert_eq!(missing.status, 3);
    assert!(missing.stderr.contains("/no/such/file.sql"), "{}", missing.stderr);
}

#[test]
fn errors_point_at_their_line_and_column() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &[]);
    let script =
        format!("{BOUNDED}\nSELECT bid.price\nFROM nx\nWHERE  nosuch > 1;\nSELECT FROM FROM;\nSTOP PIPELINE one;");
    let run = weir_sql(&server, &[], &script);
    assert_eq!(run.status, 1);
    let lines: Vec<&str> = run.stderr.lines().collect();
    let at = |prefix: &str| {
        lines.iter().position(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("{prefix}: {lines:?}"))
    };
    let planning = at("LINE 3:");
    assert_eq!(lines[planning], "LINE 3: WHERE  nosuch > 1");
    assert_eq!(lines[planning + 1], "               ^", "under 'nosuch': {}", run.stderr);
    assert!(lines[..planning].iter().any(|l| l.starts_with("ERROR:  ") && l.contains("nosuch")), "{}", run.stderr);
    let command = at("LINE 1: STOP PIPELINE one");
    assert_eq!(lines[command + 1], "                      ^", "{}", run.stderr);
    assert!(lines[command - 1].contains("Expected: a pipeline id, found: one"), "{}", run.stderr);
    assert_eq!(run.stderr.matches("ERROR:").count(), 3, "{}", run.stderr);
}

#[test]
fn a_missing_server_or_a_wrong_token_is_one_clear_line() {
    let run = Command::new(WEIR).args(["sql", "--url", "http://127.0.0.1:9", "-c", "SHOW TABLES"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2));
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("http://127.0.0.1:9") && stderr.contains("weir serve"), "{stderr}");

    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &["--token", "s3cret"]);
    let run = weir_sql(&server, &["-c", "SHOW TABLES"], "");
    assert_eq!(run.status, 2);
    assert!(run.stderr.contains("needs a token"), "{}", run.stderr);
    let run = weir_sql(&server, &["--token", "wrong", "-c", "SHOW TABLES"], "");
    assert_eq!(run.status, 2);
    assert!(run.stderr.contains("refused the token"), "{}", run.stderr);
    let run = weir_sql(&server, &["--token", "s3cret", "-c", "SHOW TABLES"], "");
    assert_eq!(run.status, 0, "{}", run.stderr);
}

#[test]
fn pipeline_statements_and_meta_commands() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &[]);
    let dir = tempfile::tempdir().unwrap();
    let included = dir.path().join("included.sql");
    std::fs::write(&included, "CREATE VIEW from_file AS SELECT 1 AS one;\n").unwrap();
    let output = dir.path().join("out.txt");
    let script = format!(
        "CREATE TABLE gen WITH (connector = 'nexmark', rate = '200');
         CREATE TABLE sink (auction BIGINT) WITH (connector = 'blackhole');
         SET checkpoint.interval = '500 ms';
         SET checkpoint.retained = '100';
         INSERT INTO sink SELECT bid.auction FROM gen WHERE event_type = 2;
         \\i {}
         \\d
         \\d gen
         \\x on
         SHOW TABLES;
         \\x off
         \\timing on
         SHOW TABLES;
         \\timing off
         \\o {}
         SHOW TABLES;
         \\o
         \\watch 0.1 c=2
         \\?
         \\q
         SELECT 'not run';",
        included.display(),
        output.display()
    );
    let run = weir_sql(&server, &[], &script);
    assert_eq!(run.status, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("pipeline 1 (") && run.stderr.contains(") started"), "{}", run.stderr);
    assert!(run.stdout.contains("created view from_file"), "\\i: {}", run.stdout);
    assert!(run.stdout.contains(" from_file | view  |"), "\\d: {}", run.stdout);
    assert!(run.stdout.contains(" date_time  | Timestamp(ms)"), "\\d gen: {}", run.stdout);
    assert!(
        run.stdout.contains("Table \"gen\", connector 'nexmark'") && run.stdout.contains("rate = '200'"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("-[ RECORD 1 ]") && run.stdout.contains("name      | from_file"),
        "\\x: {}",
        run.stdout
    );
    assert!(run.stderr.contains("Time: "), "\\timing: {}", run.stderr);
    assert_eq!(run.stderr.matches("Time: ").count(), 1, "{}", run.stderr);
    let written = std::fs::read_to_string(&output).unwrap();
    assert!(written.contains(" gen       | table | nexmark"), "\\o: {written}");
    assert_eq!(run.stdout.matches("-- every 0.1 s: \\o").count(), 2, "\\watch repeats \\o: {}", run.stdout);
    assert!(run.stdout.contains("\\watch [SECONDS] [c=N]"), "\\?: {}", run.stdout);
    assert!(!run.stdout.contains("not run"), "{}", run.stdout);

    // The pipeline statements, as any client has them.
    let wait_for = |wanted: &str| server.wait_for_status(1, wanted, Duration::from_secs(30));
    wait_for("running");
    let started = Instant::now();
    let checkpoints = loop {
        let run = weir_sql(&server, &["--format", "csv", "-q", "-c", "SHOW CHECKPOINTS FOR PIPELINE 1"], "");
        if run.stdout.contains(",completed,") {
            break run.stdout;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "no checkpoint: {} {}", run.stdout, run.stderr);
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        checkpoints.starts_with("id,kind,status,started,duration,state,written,alignment,in-flight\n"),
        "{checkpoints}"
    );
    let first: u64 = checkpoints.lines().nth(1).unwrap().split(',').next().unwrap().parse().unwrap();
    let run = weir_sql(&server, &["-c", "SHOW PIPELINES", "-c", "\\dp", "-c", "\\dp 1"], "");
    assert_eq!(run.status, 0, "{}", run.stderr);
    let listed = lines_from(&run.stdout, " id |");
    assert!(listed[0].contains("rows/s in") && listed[0].contains("last error"), "{}", run.stdout);
    assert!(listed[2].starts_with("  1 | w") && listed[2].contains("| running |"), "{}", run.stdout);
    assert_eq!(run.stdout.matches("| running |").count(), 2, "SHOW PIPELINES and \\dp: {}", run.stdout);
    assert!(run.stdout.contains("Pipeline 1 (") && run.stdout.contains("INSERT INTO sink SELECT"), "{}", run.stdout);
    assert!(run.stdout.contains(" gen      |       0 |"), "operators: {}", run.stdout);
    assert!(run.stdout.contains("back-pressure") && run.stdout.contains("Checkpoints (the last"), "{}", run.stdout);

    let run = weir_sql(&server, &["-c", "STOP PIPELINE 1"], "");
    assert_eq!(run.stdout, "pipeline 1 is stopping with a savepoint\n", "{}", run.stderr);
    wait_for("stopped");
    let run = weir_sql(&server, &["-c", "STOP PIPELINE 1"], "");
    assert!(run.stderr.contains("ERROR:  pipeline 1 is not running"), "{}", run.stderr);
    // (The script keeps 100 checkpoints: with the default 3, checkpoint `first` was retired
    // before this line on a loaded machine.)
    let run = weir_sql(&server, &["-c", &format!("RESUME PIPELINE 1 FROM CHECKPOINT {first}")], "");
    assert_eq!(run.stdout, format!("pipeline 1 is running again from checkpoint {first}\n"), "{}", run.stderr);
    wait_for("running");
    let run = weir_sql(&server, &["-c", "RESUME PIPELINE 1"], "");
    assert!(run.stderr.contains("is running already"), "{}", run.stderr);
    let run = weir_sql(&server, &["-c", "STOP PIPELINE 1 NOW; DROP PIPELINE 1; SHOW PIPELINES"], "");
    assert_eq!(
        run.stdout.lines().take(2).collect::<Vec<_>>(),
        ["pipeline 1 stopped at once, without a savepoint", "dropped pipeline 1 and its checkpoints"],
        "{}",
        run.stderr
    );
    assert!(run.stdout.contains("(0 rows)"), "{}", run.stdout);
    let run = weir_sql(&server, &["-c", "DROP PIPELINE 1"], "");
    assert!(run.stderr.contains("ERROR:  no pipeline 1"), "{}", run.stderr);
}

/// Ctrl-C in a script during a live result detaches and stops its pipeline, unless
/// --keep-running; the script then goes on.
#[test]
fn ctrl_c_in_a_script_detaches_from_a_live_result() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &[]);
    weir_sql(&server, &["-c", "CREATE TABLE gen WITH (connector = 'nexmark', rate = '100')"], "");
    for (id, keep_running) in [(1, false), (2, true)] {
        let mut command = Command::new(WEIR);
        command.args(["sql", "--url", &format!("http://{}", server.address), "--format", "csv"]);
        if keep_running {
            command.arg("--keep-running");
        }
        let script = "SELECT bid.auction AS auction FROM gen WHERE event_type = 2;\nSHOW TABLES;\n";
        let child = command
            .args(["-c", script])
            .env_remove("WEIR_TOKEN")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        server.wait_for_status(id, "running", Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(1500));
        let killed = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
        assert!(killed.success());
        let output = child.wait_with_output().unwrap();
        let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert_eq!(output.status.code(), Some(0), "{stderr}");
        assert!(stdout.starts_with("auction\n") && stdout.lines().count() > 2, "rows before the detach: {stdout}");
        assert!(stdout.contains("gen,table,nexmark"), "the script went on: {stdout}");
        assert!(stderr.contains(&format!("detached from pipeline {id}: ")), "{stderr}");
        if keep_running {
            assert!(stderr.contains(&format!("pipeline {id} keeps running")), "{stderr}");
            assert_eq!(server.status_of(id), "running");
        } else {
            assert!(stderr.contains(&format!("pipeline {id} is stopping with a savepoint")), "{stderr}");
            server.wait_for_status(id, "stopped", Duration::from_secs(30));
        }
    }
}

/// The interactive side, in a pseudo-terminal as a person types. `\q` is the scripted tests'.
#[test]
fn an_interactive_session_in_a_terminal() {
    use expectrl::{Eof, Expect, Regex};
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &[]);
    let home = tempfile::tempdir().unwrap();
    let shell = format!(
        "stty -a; echo '=== weir'; HOME={} WEIR_URL=http://{} {WEIR} sql; echo \"exit=$?\"; stty -a",
        home.path().display(),
        server.address
    );
    // bash, not sh: dash ends itself after a Ctrl-C its child caught.
    let mut command = std::process::Command::new("bash");
    command.args(["-c", &shell]);
    let mut session = expectrl::Session::spawn(command).unwrap();
    session.set_expect_timeout(Some(Duration::from_secs(60)));
    let found = session.expect("=== weir").unwrap();
    let terminal_before = String::from_utf8_lossy(found.before()).trim().replace('\r', "");
    session.expect("weir=> ").unwrap();
    session.send("CREATE TABLE bids WITH (connector = 'nexmark', rate = '50');\r").unwrap();
    session.expect("created table bids").unwrap();
    session.expect("weir=> ").unwrap();
    // A statement over two lines, a ';' inside a string, a table name completed with Tab.
    session.send("SELECT 'x;y' AS s,\r").unwrap();
    session.expect("weir-> ").unwrap();
    session.send("bid.price AS price FROM bi\t").unwrap();
    session.expect("FROM bids").unwrap();
    session.send(" WHERE event_type = 2;\r").unwrap();
    session.expect("reading bids: the nexmark generator").unwrap();
    session.expect(Regex(r"\n\s+s\s+\|\s+price")).unwrap();
    for _ in 0..3 {
        session.expect(Regex(r"\n x;y \|\s+\d+")).unwrap();
    }
    // Ctrl-C detaches; Enter stops the pipeline.
    session.send("\x03").unwrap();
    session.expect("detached from pipeline 1").unwrap();
    session.expect("stop pipeline 1? [Y/n]").unwrap();
    session.send("\r").unwrap();
    session.expect("pipeline 1 is stopping with a savepoint").unwrap();
    session.expect("weir=> ").unwrap();
    // History: the arrow up brings the whole statement back; Ctrl-C drops it.
    session.send("\x1b[A").unwrap();
    session.expect("WHERE event_type = 2;").unwrap();
    session.send("\x03").unwrap();
    session.expect("weir=> ").unwrap();
    // A second Ctrl-C while the client asks ends it at once, the pipeline left running.
    session.send("SELECT bid.price FROM bids;\r").unwrap();
    session.expect(Regex(r"\n\s+\d+\r?\n")).unwrap();
    session.send("\x03").unwrap();
    session.expect("stop pipeline 2? [Y/n]").unwrap();
    session.send("\x03").unwrap();
    session.expect("exit=130").unwrap();
    // The terminal is back in its normal mode.
    let found = session.expect(Eof).unwrap();
    let terminal_after = String::from_utf8_lossy(found.as_bytes()).trim().replace('\r', "");
    assert!(terminal_after.contains(" icanon"), "{terminal_after}");
    assert_eq!(terminal_after, terminal_before, "the terminal's settings are as before");
    let history = std::fs::read_to_string(home.path().join(".weir_history")).unwrap();
    assert!(history.contains("SELECT 'x;y' AS s,"), "{history}");
    server.wait_for_status(1, "stopped", Duration::from_secs(30));
    assert_eq!(server.status_of(2), "running");
}
