//! The `weir` binary: one executable for every way of running weir.

mod run;

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// mimalloc, returning freed memory to the OS lazily (`weir_engine::allocator`).
#[global_allocator]
static ALLOCATOR: weir_engine::allocator::Allocator = weir_engine::allocator::Allocator;

/// weir: streaming SQL over Kafka, exactly once.
#[derive(Debug, Parser)]
#[command(name = "weir", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the weir service (HTTP API). Settings come from the config file, then the
    /// environment, then flags; defaults: 127.0.0.1:8080, ./weir-data, no token.
    Serve {
        /// Address to listen on [default: 127.0.0.1:8080].
        #[arg(long, env = "WEIR_LISTEN")]
        listen: Option<SocketAddr>,
        /// Where the catalog, pipelines and checkpoints are kept [default: ./weir-data].
        #[arg(long, env = "WEIR_DATA_DIR")]
        data_dir: Option<PathBuf>,
        /// Bearer token every API route then requires.
        #[arg(long, env = "WEIR_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// Largest request body in bytes [default: 1048576].
        #[arg(long, env = "WEIR_MAX_BODY_BYTES")]
        max_body_bytes: Option<usize>,
        /// Directories filesystem tables may use besides <data dir>/files, where relative paths
        /// go (repeat, or comma-separated).
        #[arg(long, env = "WEIR_FILESYSTEM_DIRS", value_delimiter = ',')]
        filesystem_dir: Vec<PathBuf>,
        /// Serve a non-loopback address without a token (refused otherwise: anyone who can
        /// reach it could run any SQL).
        #[arg(long, env = "WEIR_ALLOW_UNAUTHENTICATED")]
        allow_unauthenticated: bool,
        /// Also speak the Postgres wire protocol here, for psql, drivers and BI tools (off
        /// unless set; with a token, the token is the password).
        #[arg(long, env = "WEIR_PG_LISTEN")]
        pg_listen: Option<SocketAddr>,
        /// TLS on the Postgres port: this PEM certificate chain (with --pg-tls-key). Clients
        /// then may (or must, by their sslmode) use TLS, and SCRAM binds to the certificate.
        #[arg(long, env = "WEIR_PG_TLS_CERT", requires = "pg_tls_key")]
        pg_tls_cert: Option<PathBuf>,
        /// The PEM private key of --pg-tls-cert.
        #[arg(long, env = "WEIR_PG_TLS_KEY", requires = "pg_tls_cert")]
        pg_tls_key: Option<PathBuf>,
        /// Log lines as text (coloured on a terminal, unless NO_COLOR is set) or as JSON
        /// objects, one per line, for log collectors.
        #[arg(long, value_enum, default_value = "text", env = "WEIR_LOG_FORMAT")]
        log_format: LogFormat,
        /// Where pipelines keep their checkpoints: a directory, file:///dir, or
        /// s3://bucket/prefix on S3 or any S3-compatible store [default: <data dir>/pipelines].
        #[arg(long, env = "WEIR_CHECKPOINT_URL")]
        checkpoint_url: Option<String>,
        /// An S3 setting of --checkpoint-url, KEY=VALUE (repeat): endpoint, region,
        /// access_key_id, secret_access_key, allow_http, ...; the AWS_* environment variables
        /// are read too.
        #[arg(long = "checkpoint-option", value_parser = key_value)]
        checkpoint_options: Vec<(String, String)>,
        /// Workers (`weir worker`) may join with this secret (none can without one).
        #[arg(long, env = "WEIR_CLUSTER_SECRET", hide_env_values = true)]
        cluster_secret: Option<String>,
        /// A worker silent this long (milliseconds) is declared lost [default: 10000].
        #[arg(long, env = "WEIR_WORKER_TIMEOUT_MS")]
        worker_timeout_ms: Option<u64>,
        /// A TOML file with any of: listen, data_dir, token, max_body_bytes, filesystem_dirs,
        /// allow_unauthenticated, pg_listen, pg_tls_cert, pg_tls_key, checkpoint_url, a
        /// [checkpoint_options] table, cluster_secret, worker_timeout_ms.
        #[arg(long, env = "WEIR_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Join a weir service (the controller) as a worker offering slots: registers, heartbeats,
    /// serves Arrow Flight on its own port to the controller and other workers only (the
    /// cluster secret), and runs the pipeline tasks the controller places here.
    Worker {
        /// The controller's HTTP address.
        #[arg(long, env = "WEIR_CONTROLLER", default_value = "http://127.0.0.1:8080")]
        controller: String,
        /// Where this worker's Flight port listens.
        #[arg(long, env = "WEIR_WORKER_LISTEN", default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// Where the controller and other workers reach that port, HOST:PORT [default: the
        /// bound address].
        #[arg(long, env = "WEIR_WORKER_ADVERTISE")]
        advertise: Option<String>,
        /// How many slots it offers: a slot takes one subtask of each operator chain of a
        /// pipeline.
        #[arg(long, env = "WEIR_WORKER_SLOTS", default_value_t = 2)]
        slots: u32,
        /// The controller's --cluster-secret.
        #[arg(long, env = "WEIR_CLUSTER_SECRET", hide_env_values = true)]
        cluster_secret: Option<String>,
        /// This worker's name [default: worker-<host>-<port>].
        #[arg(long, env = "WEIR_WORKER_ID")]
        id: Option<String>,
    },
    /// The psql-like client: run SQL on a weir server, interactively at a terminal, or from
    /// -c, -f or piped input. Exit status: 1 a statement failed, 2 no server, 3 stopped by
    /// --on-error-stop.
    Sql(weir_cli::Args),
    /// Run a SQL file in this process (no service): its pipelines run until they finish or
    /// Ctrl-C, then the rows of each SELECT are printed.
    Run {
        /// The SQL file.
        file: PathBuf,
        /// Where checkpoints go (under run/<file name>/).
        #[arg(long, env = "WEIR_DATA_DIR", default_value = "weir-data")]
        data_dir: PathBuf,
        /// Keep checkpoints here instead (under <file name>/): a directory, file:///dir, or
        /// s3://bucket/prefix.
        #[arg(long, env = "WEIR_CHECKPOINT_URL")]
        checkpoint_url: Option<String>,
        /// An S3 setting of --checkpoint-url, KEY=VALUE (repeat), as for `weir serve`.
        #[arg(long = "checkpoint-option", value_parser = key_value)]
        checkpoint_options: Vec<(String, String)>,
        /// Continue from the checkpoints of the previous run of this file.
        #[arg(long)]
        resume: bool,
        /// Rows printed per SELECT at most (the latest).
        #[arg(long, default_value_t = 20)]
        max_rows: usize,
        /// The SQL the file is written in: 'weir', or 'flink' (Flink's rule for names: unquoted
        /// names kept as written and matched exactly); as `SET 'sql.dialect' = '...'` first.
        #[arg(long, default_value = "weir")]
        dialect: String,
    },
    /// Copy a pipeline's checkpoint as a self-contained one: every table written whole, so the
    /// copy needs none of the older checkpoints an incremental checkpoint's files reach back
    /// to (for moving a pipeline's state elsewhere; restore it by placing the copy where the
    /// pipeline keeps its checkpoints).
    ExportCheckpoint {
        /// The pipeline's checkpoint directory or URL (the one holding `manifests/` and
        /// `checkpoints/`, e.g. <data dir>/run/<file name>/1 for `weir run`'s first pipeline,
        /// or s3://bucket/prefix/7 for the service's pipeline 7).
        from: String,
        /// Where the copy goes, a directory or URL (it must hold no checkpoint of that id).
        to: String,
        /// An S3 setting for either URL, KEY=VALUE (repeat), as for `weir serve`.
        #[arg(long = "checkpoint-option", value_parser = key_value)]
        checkpoint_options: Vec<(String, String)>,
        /// The checkpoint to copy [default: the newest completed one].
        #[arg(long)]
        checkpoint: Option<u64>,
    },
}

fn main() -> anyhow::Result<()> {
    weir_engine::allocator::set_up();
    let cli = Cli::parse();
    // The client is a blocking program of its own: no runtime, no server logs.
    if let Command::Sql(args) = cli.command {
        std::process::exit(weir_cli::main(args));
    }
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(server_main(cli.command))
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// Logs to standard error: JSON lines, or text coloured only where a person reads a terminal
/// (and `NO_COLOR` is not set), so that piped logs carry no escape codes.
fn init_logs(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Json => logs.json().init(),
        LogFormat::Text => {
            let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
            logs.with_ansi(colour).init();
        }
    }
}

async fn server_main(command: Command) -> anyhow::Result<()> {
    let log_format = match &command {
        Command::Serve { log_format, .. } => *log_format,
        _ => LogFormat::Text,
    };
    init_logs(log_format);
    // With the `failpoints` feature, FAILPOINTS=name=action;... arms the named failpoints.
    #[cfg(feature = "failpoints")]
    let _failpoints = fail::FailScenario::setup();
    match command {
        Command::Serve {
            listen,
            data_dir,
            token,
            max_body_bytes,
            filesystem_dir,
            allow_unauthenticated,
            pg_listen,
            pg_tls_cert,
            pg_tls_key,
            checkpoint_url,
            checkpoint_options,
            cluster_secret,
            worker_timeout_ms,
            log_format: _,
            config,
        } => {
            let file = match &config {
                Some(path) => weir_server::config::FileConfig::read(path).map_err(anyhow::Error::msg)?,
                None => weir_server::config::FileConfig::default(),
            };
            let overrides = weir_server::config::FileConfig {
                listen,
                data_dir,
                token,
                max_body_bytes,
                filesystem_dirs: (!filesystem_dir.is_empty()).then_some(filesystem_dir),
                allow_unauthenticated: allow_unauthenticated.then_some(true),
                pg_listen,
                pg_tls_cert,
                pg_tls_key,
                checkpoint_url,
                checkpoint_options: (!checkpoint_options.is_empty()).then(|| checkpoint_options.into_iter().collect()),
                cluster_secret,
                worker_timeout_ms,
            };
            let config = weir_server::ServerConfig::resolve(file, overrides);
            let listen = config.listen;
            weir_server::serve(config, |bound, pg| {
                println!("weir listening on http://{bound}");
                if let Some(pg) = pg {
                    println!("weir speaks Postgres on {pg} (psql -h {} -p {})", pg.ip(), pg.port());
                }
            })
            .await
            .with_context(|| format!("serving on {listen}"))
        }
        Command::Worker { controller, listen, advertise, slots, cluster_secret, id } => {
            let id = id.unwrap_or_else(|| worker_name(listen));
            let config = weir_server::worker::WorkerConfig {
                controller,
                listen,
                advertise,
                slots,
                secret: cluster_secret.unwrap_or_default(),
                id,
            };
            weir_server::worker::run(config, |bound| println!("weir worker listening on {bound}"))
                .await
                .map_err(anyhow::Error::msg)
        }
        Command::Run { file, data_dir, checkpoint_url, checkpoint_options, resume, max_rows, dialect } => {
            let checkpoints = weir_state::CheckpointStorage::open_or_local(
                checkpoint_url.as_deref(),
                &checkpoint_options,
                &data_dir.join("run"),
            )?;
            run::run_file(&file, &run::RunOptions { data_dir, checkpoints, resume, max_rows, dialect }).await
        }
        Command::ExportCheckpoint { from, to, checkpoint, checkpoint_options } => {
            export_checkpoint(&from, &to, checkpoint, &checkpoint_options).await
        }
        Command::Sql(_) => Ok(()),
    }
}

/// A worker's default name: the host's, and the port when one was asked for (a process id
/// when the port is the system's choice), so that workers on one machine differ.
fn worker_name(listen: SocketAddr) -> String {
    let host = std::fs::read_to_string("/etc/hostname").map(|h| h.trim().to_string()).unwrap_or_default();
    let host = if host.is_empty() { "localhost".to_string() } else { host };
    match listen.port() {
        0 => format!("worker-{host}-{}", std::process::id()),
        port => format!("worker-{host}-{port}"),
    }
}

/// `KEY=VALUE`, for `--checkpoint-option`.
fn key_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => Ok((key.trim().to_string(), value.to_string())),
        _ => Err(format!("'{text}' is not KEY=VALUE")),
    }
}

/// A checkpoint directory or URL, for `weir export-checkpoint`: S3's options only for S3.
fn checkpoint_location(url: &str, options: &[(String, String)]) -> anyhow::Result<weir_state::StateStore> {
    let remote = url.starts_with("s3://") || url.starts_with("s3a://");
    let options = if remote { options } else { &[] };
    Ok(weir_state::CheckpointStorage::open(url, options)?.store("")?)
}

/// `weir export-checkpoint`: copies one checkpoint of `from` into `to`, whole.
async fn export_checkpoint(
    from: &str,
    to: &str,
    checkpoint: Option<u64>,
    options: &[(String, String)],
) -> anyhow::Result<()> {
    if !from.contains("://") && !std::path::Path::new(from).join("manifests").is_dir() {
        anyhow::bail!("{from} is not a pipeline's checkpoint directory (it has no manifests/)");
    }
    let source = checkpoint_location(from, options)?;
    let id = match checkpoint {
        Some(id) => id,
        None => match source.completed_checkpoints().await?.last() {
            Some(&id) => id,
            None => anyhow::bail!(
                "{from} holds no completed checkpoint (is it a pipeline's checkpoint directory, the one holding manifests/?)"
            ),
        },
    };
    let copy = source.export(id, &checkpoint_location(to, options)?).await?;
    println!(
        "checkpoint {id} copied to {to}: {} files, {} bytes, every table whole",
        copy.files.len(),
        copy.state_bytes()
    );
    Ok(())
}
