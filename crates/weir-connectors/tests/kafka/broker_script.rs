//! tests/kafka/broker.sh refuses clearly when what it needs is missing or taken.

use std::net::TcpListener;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/kafka/broker.sh")
}

/// A PATH holding only the named tools (as found on the real PATH).
fn path_with_only(dir: &Path, tools: &[&str]) -> String {
    for tool in tools {
        let found = Command::new("bash").args(["-c", &format!("command -v {tool}")]).output().unwrap();
        let found = String::from_utf8(found.stdout).unwrap();
        symlink(found.trim(), dir.join(tool)).unwrap();
    }
    dir.display().to_string()
}

const SHELL_TOOLS: &[&str] = &["bash", "cat", "mkdir", "flock", "sed", "grep", "sleep", "rm", "touch", "tail", "seq"];

fn run(args: &[&str], envs: &[(&str, String)]) -> Output {
    let mut command = Command::new("/bin/bash");
    command.arg(script()).args(args);
    for (key, value) in envs {
        command.env(key, value);
    }
    command.output().unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weir-broker-script-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn start_refuses_a_port_that_is_taken() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let cache = scratch("taken");
    let output =
        run(&["start"], &[("WEIR_KAFKA_PORT", port.to_string()), ("WEIR_CACHE_DIR", cache.display().to_string())]);
    assert!(!output.status.success());
    assert!(stderr(&output).contains(&format!("port {port} on 127.0.0.1 is taken")), "{}", stderr(&output));
}

#[test]
fn start_without_java_says_so() {
    let dir = scratch("no-java");
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let output = run(
        &["start"],
        &[
            ("PATH", path_with_only(&bin, SHELL_TOOLS)),
            ("WEIR_KAFKA_PORT", free_port().to_string()),
            ("WEIR_CACHE_DIR", dir.display().to_string()),
        ],
    );
    assert!(!output.status.success());
    assert!(stderr(&output).contains("java is not installed"), "{}", stderr(&output));
}

#[test]
fn first_start_without_maven_says_so() {
    let dir = scratch("no-maven");
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let tools = [SHELL_TOOLS, &["java"]].concat();
    let output = run(
        &["start"],
        &[
            ("PATH", path_with_only(&bin, &tools)),
            ("WEIR_KAFKA_PORT", free_port().to_string()),
            ("WEIR_CACHE_DIR", dir.join("empty-cache").display().to_string()),
        ],
    );
    assert!(!output.status.success());
    assert!(stderr(&output).contains("mvn (Maven) is not installed"), "{}", stderr(&output));
}

#[test]
fn status_of_a_broker_that_is_not_running() {
    let cache = scratch("status");
    let output = run(
        &["status"],
        &[("WEIR_KAFKA_PORT", free_port().to_string()), ("WEIR_CACHE_DIR", cache.display().to_string())],
    );
    assert!(!output.status.success());
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "not running");
}

/// The test command starts a broker and stops it when the tests end; a stop that waits on the
/// broker itself (it once inherited the script's lock) would hang CI after every test passed.
#[test]
fn a_started_broker_stops_promptly() {
    let port = free_port().to_string();
    let envs = [
        ("WEIR_KAFKA_PORT", port.clone()),
        ("WEIR_KAFKA_CONTROLLER_PORT", free_port().to_string()),
        // Not the default client port + 2..4: those may be anyone's.
        ("WEIR_KAFKA_SASL_PORT", free_port().to_string()),
        ("WEIR_KAFKA_SSL_PORT", free_port().to_string()),
        ("WEIR_KAFKA_SASL_SSL_PORT", free_port().to_string()),
        ("WEIR_KAFKA_HEAP", "256m".to_string()),
    ];
    let started = run(&["start"], &envs);
    assert!(started.status.success(), "{}", stderr(&started));
    assert!(String::from_utf8_lossy(&started.stdout).contains(&format!("bootstrap: 127.0.0.1:{port}")));

    let mut command = Command::new("timeout");
    command.args(["60", "/bin/bash"]).arg(script()).arg("clean");
    for (key, value) in &envs {
        command.env(key, value);
    }
    let stopped = command.output().unwrap();
    assert!(stopped.status.success(), "stop did not finish within 60 s: {}", stderr(&stopped));
    assert!(stderr(&stopped).contains("broker.sh: stopped"), "{}", stderr(&stopped));
    assert_eq!(run(&["status"], &envs).stdout, b"not running\n");
}
