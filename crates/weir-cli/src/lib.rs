//! `weir sql`: the psql-like client. It talks to a weir server over its HTTP API only: every
//! statement, the pipeline statements included, runs on the server; this crate splits input
//! into statements, runs meta-commands, and prints results (tables, records, CSV, JSON, and
//! streaming results live).
//!
//! Exit status: 0 when everything ran, 1 when a statement failed, 2 when the server cannot be
//! reached (or refuses the token), 3 when `--on-error-stop` stopped at a failure.

mod client;
mod completion;
mod connection;
mod display;
mod error;
mod interactive;
mod interrupt;
mod live;
mod meta;
mod statements;

use std::io::{IsTerminal, Read};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

pub use client::{Client, Flow, Settings};
pub use connection::Connection;
pub use display::Format;
pub use error::{Error, Result};

use crate::completion::Completions;

/// The exit statuses.
pub const EXIT_OK: i32 = 0;
pub const EXIT_FAILED: i32 = 1;
pub const EXIT_UNREACHABLE: i32 = 2;
pub const EXIT_STOPPED_ON_ERROR: i32 = 3;

/// `weir sql`'s arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The weir server.
    #[arg(long, env = "WEIR_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// The server's bearer token, if it has one.
    #[arg(long, env = "WEIR_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Run these statements or a meta-command (repeatable), then exit.
    #[arg(short = 'c', long = "command", value_name = "SQL")]
    pub commands: Vec<String>,
    /// Run the statements of a file (repeatable; '-' reads standard input), then exit.
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Stop at the first statement that fails (exit status 3), as psql's ON_ERROR_STOP.
    #[arg(long)]
    pub on_error_stop: bool,
    /// How result rows are printed.
    #[arg(long, value_enum, default_value = "aligned")]
    pub format: Format,
    /// Print rows only: no messages, row counts or notices.
    #[arg(short, long)]
    pub quiet: bool,
    /// When a script is interrupted (Ctrl-C) during a live result, leave its pipeline
    /// running (by default it is stopped).
    #[arg(long)]
    pub keep_running: bool,
}

/// Runs the client; returns its exit status.
pub fn main(args: Args) -> i32 {
    let scripted = !args.commands.is_empty() || !args.files.is_empty();
    let interactive = !scripted && std::io::stdin().is_terminal();
    if !args.url.starts_with("http://") {
        eprintln!("weir sql: --url must be an http:// URL (weir serves plain HTTP), not '{}'", args.url);
        return EXIT_UNREACHABLE;
    }
    interrupt::install();
    let settings = Settings {
        format: args.format,
        quiet: args.quiet,
        on_error_stop: args.on_error_stop,
        keep_running: args.keep_running,
        interactive,
    };
    let mut client = Client::new(Connection::new(&args.url, args.token.clone()), settings);
    if let Err(error) = client.connect() {
        eprintln!("weir sql: {error}");
        return EXIT_UNREACHABLE;
    }
    if interactive {
        let completions = Arc::new(Mutex::new(completions(&client.connection)));
        if let Err(error) = interactive::run(&mut client, completions) {
            eprintln!("weir sql: the terminal: {error}");
            return EXIT_FAILED;
        }
    } else if scripted {
        for command in &args.commands {
            if client.run_script(command) == Flow::Quit {
                return exit_status(&client);
            }
        }
        for file in &args.files {
            let text = match read_script(file) {
                Ok(text) => text,
                Err(error) => {
                    eprintln!("weir sql: {error}");
                    client.failed = true;
                    if args.on_error_stop {
                        return EXIT_STOPPED_ON_ERROR;
                    }
                    continue;
                }
            };
            if client.run_script(&text) == Flow::Quit {
                return exit_status(&client);
            }
        }
    } else {
        match read_script(&PathBuf::from("-")) {
            Ok(text) => {
                client.run_script(&text);
            }
            Err(error) => {
                eprintln!("weir sql: {error}");
                return EXIT_FAILED;
            }
        }
    }
    exit_status(&client)
}

fn exit_status(client: &Client) -> i32 {
    if client.lost_server {
        EXIT_UNREACHABLE
    } else if client.stopped_on_error {
        EXIT_STOPPED_ON_ERROR
    } else if client.failed {
        EXIT_FAILED
    } else {
        EXIT_OK
    }
}

/// A script's text: a file, or standard input for '-'.
fn read_script(path: &PathBuf) -> Result<String> {
    let failed = |error| Error::File { path: path.display().to_string(), error };
    if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).map_err(failed)?;
        return Ok(text);
    }
    std::fs::read_to_string(path).map_err(failed)
}

/// Option names from the server, for completion (none if it has no such route).
fn completions(connection: &Connection) -> Completions {
    let listing: serde_json::Value = connection.get("/connectors").unwrap_or_default();
    let names = |value: &serde_json::Value| -> Vec<String> {
        value.as_array().map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect()).unwrap_or_default()
    };
    let mut table_options: Vec<String> = listing["connectors"]
        .as_array()
        .map(|connectors| connectors.iter().flat_map(|c| names(&c["options"])).collect())
        .unwrap_or_default();
    table_options.push("connector".into());
    table_options.sort();
    table_options.dedup();
    Completions { table_options, pipeline_options: names(&listing["pipeline_options"]), ..Completions::default() }
}
