//! The `weir` binary as a user runs it.

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

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
    let mut server = Command::new(WEIR)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
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
