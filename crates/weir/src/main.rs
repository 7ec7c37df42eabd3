//! The `weir` binary: one executable for every way of running weir.

use std::net::SocketAddr;

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
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")))
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Serve { listen } => weir_server::serve(listen, |bound| println!("weir listening on http://{bound}"))
            .await
            .with_context(|| format!("serving on {listen}")),
    }
}
