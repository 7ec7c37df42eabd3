//! The `weir` binary: one executable for every way of running weir.

mod run;

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// weir: streaming SQL over Kafka, exactly once.
#[derive(Debug, Parser)]
#[command(name = "weir", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the weir service (HTTP API).
    Serve {
        /// Address to listen on.
        #[arg(long, env = "WEIR_LISTEN", default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
    },
    /// Run a SQL file in this process (no service): its pipelines run until they finish or
    /// Ctrl-C, then the rows of each SELECT are printed.
    Run {
        /// The SQL file.
        file: PathBuf,
        /// Where checkpoints go (under run/<file name>/).
        #[arg(long, env = "WEIR_DATA_DIR", default_value = "weir-data")]
        data_dir: PathBuf,
        /// Continue from the checkpoints of the previous run of this file.
        #[arg(long)]
        resume: bool,
        /// Rows printed per SELECT at most (the latest).
        #[arg(long, default_value_t = 20)]
        max_rows: usize,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")))
        .with_writer(std::io::stderr)
        .init();
    // With the `failpoints` feature, FAILPOINTS=name=action;... arms the named failpoints.
    #[cfg(feature = "failpoints")]
    let _failpoints = fail::FailScenario::setup();
    match Cli::parse().command {
        Command::Serve { listen } => weir_server::serve(listen, |bound| println!("weir listening on http://{bound}"))
            .await
            .with_context(|| format!("serving on {listen}")),
        Command::Run { file, data_dir, resume, max_rows } => {
            run::run_file(&file, &run::RunOptions { data_dir, resume, max_rows }).await
        }
    }
}
